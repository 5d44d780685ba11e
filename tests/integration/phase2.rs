//! Issue #14: phase 2 as a script (scripts/phase2.rhai) on the vendored charts, its natives and
//! its safety rails, through the real binary on a copy of this repository.

use crate::support::with_recaps;
use crate::support::{BPRUN, tool};
use crate::support::{move_step_before, one_step_run_of};

/// `bprun --list scripts/phase2.rhai`: its steps ...
const PLAN: &str = "\
scripts/phase2.rhai: 17 steps
[1/17] Pre-flight
[2/17] Gateway API CRDs
[3/17] local-path StorageClass
[4/17] Stable storage
[5/17] CloudNativePG  (runs together with steps 5-10, 4 at a time)
[6/17] Redis  (runs together with steps 5-10, 4 at a time)
[7/17] MinIO  (runs together with steps 5-10, 4 at a time)
[8/17] OpenBao  (runs together with steps 5-10, 4 at a time)
[9/17] Wildcard TLS  (runs together with steps 5-10, 4 at a time)
[10/17] CoreDNS rewrite  (runs together with steps 5-10, 4 at a time)
[11/17] Restore GitLab secrets
[12/17] Node trust  (runs together with steps 12-13, 4 at a time)
[13/17] GitLab  (runs together with steps 12-13, 4 at a time)
[14/17] Snapshot GitLab secrets  (runs together with steps 14-16, 4 at a time)
[15/17] Registry hosts pin  (runs together with steps 14-16, 4 at a time)
[16/17] Runner  (runs together with steps 14-16, 4 at a time)
[17/17] Destroy
";

/// ... and its parameters.
const PARAMETERS: &str = "\
parameters:
  --destroy         Run only the Destroy step: uninstall what phase 2 installed
  --preserve-data   With --destroy: keep the volumes' data and the secrets (must agree with tofu's preserve_stateful_data)
  --wait-timeout N  Seconds each install may take to become Ready (default: 900)
";

#[test]
fn the_plan_is_the_seeds_steps_with_twelve_and_thirteen_split_then_destroy() {
    let copy = BPRUN.test_in_repository_copy();
    copy.run(&["--list", "scripts/phase2.rhai"])
        .expect(0, &format!("{PLAN}{PARAMETERS}"), "");
}

/// `script`'s refusal (stderr) of `--destroy {flags}` against `preserve_stateful_data = {value}`,
/// with the source lines under it (the check in scripts/lib/common.rhai, where `script` calls it).
pub(crate) fn destroy_refusal(script: &str, flags: &str, value: bool, fix: &str) -> String {
    let source = crate::support::script_frame(
        "scripts/lib/common.rhai",
        "throw `--destroy ${if preserve_data",
        "throw",
        "thrown here",
    );
    let called_at =
        crate::support::script_location(script, "refuse_preserve_data_disagreement(args);");
    format!(
        "error: the top level of {script} failed
  × --destroy {flags} disagrees with preserve_stateful_data = {value} in infra/tofu/tofu.tfvars: the cluster and the data folders would end up half wiped. Make them agree: {fix}, then re-run.
{source}  in fn refuse_preserve_data_disagreement() called at {called_at}
"
    )
}

#[test]
fn destroy_refuses_when_preserve_data_disagrees_with_tofu_and_touches_nothing() {
    let copy = BPRUN.test_in_repository_copy();
    copy.write("infra/tofu/tofu.tfvars", "preserve_stateful_data = true\n");
    // No cluster is configured: the refusal comes before any step could reach one.
    let refusal = |flags: &str, value: bool, fix: &str| {
        destroy_refusal("scripts/phase2.rhai", flags, value, fix)
    };
    copy.run(&["scripts/phase2.rhai", "--destroy"]).expect(
        3,
        "",
        &refusal("without --preserve-data", true, "add --preserve-data"),
    );
    copy.write("infra/tofu/tofu.tfvars", "preserve_stateful_data = false\n");
    copy.run(&["scripts/phase2.rhai", "--destroy", "--preserve-data"])
        .expect(
            3,
            "",
            &refusal(
                "--preserve-data",
                false,
                "drop --preserve-data, or set preserve_stateful_data = true",
            ),
        );
    assert!(
        !copy.path().join("infra/secrets").exists() && !copy.path().join(".bprun").exists(),
        "a refused destroy wrote state"
    );
}

#[test]
fn pinned_manifests_are_checked_before_anything_is_applied() {
    let copy = BPRUN.test_in_repository_copy();
    copy.write(
        "scripts/manifest.rhai",
        "let text = pinned_manifest(\"gateway-api\");\nprint(`${yaml_parse_all(text).len()} objects`);\n",
    );
    copy.run(&["scripts/manifest.rhai"])
        .expect(0, "10 objects\n", "");
    let file = "infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_gateways.yaml";
    let text = std::fs::read_to_string(copy.path().join(file)).expect("vendored CRD");
    copy.write(file, &text.replace("Gateway", "Gatewai"));
    copy.run(&["scripts/manifest.rhai"]).expect(
        3,
        "",
        &format!(
            "error: the top level of scripts/manifest.rhai failed
  × pinned_manifest: {file} has SHA-256 7b5b087877beb4fc65d2650ef7281e6bb96f3a1d8ab69476204a1830bc49a3e7, but infra/VERSIONS.json pins 2377a440b259c47d0fe5c052b5cc0fb7d2a497718392b1043a985b4bdb5a3d9f
{}",
            r#"   ╭─[scripts/manifest.rhai:1:12]
 1 │ let text = pinned_manifest("gateway-api");
   ·            ───────┬───────
   ·                   ╰── failed here
 2 │ print(`${yaml_parse_all(text).len()} objects`);
   ╰────
  hint: restore the upstream file unmodified, or update the pin after reviewing the new upstream version
"#
        ),
    );
    copy.write("scripts/unknown.rhai", "pinned_manifest(\"gateway\");\n");
    copy.run(&["scripts/unknown.rhai"]).expect(
        3,
        "",
        r#"
        error: the top level of scripts/unknown.rhai failed
          × pinned_manifest: infra/VERSIONS.json has no manifests.gateway
           ╭─[scripts/unknown.rhai:1:1]
         1 │ pinned_manifest("gateway");
           · ───────┬───────
           ·        ╰── failed here
           ╰────
          hint: known keys: gateway-api, local-path-provisioner
        "#,
    );
}

#[test]
fn template_files_fill_placeholders_keep_secrets_hidden_and_refuse_typos() {
    let copy = BPRUN.test_in_repository_copy();
    copy.write(
        "scripts/render.rhai",
        r#"step("Render", || {
    let text = template_file("infra/references/gitlab-rails-storage-connection.yaml",
        #{ACCESS_KEY: "admin", SECRET_KEY: secret("canary-minio-password-123"), ENDPOINT: "http://minio.minio.svc:9000"});
    print(`rendered: ${text}`);
    print(`length ${text.len}`);
    write_text("rendered.yaml", text);
});
"#,
    );
    let run = copy.run(&["scripts/render.rhai"]);
    run.expect(
        0,
        &with_recaps(
            "
        [1/1] Render ...
            rendered: ***
            length 403
            ~ create file rendered.yaml
        [1/1] Render ... changed (#.## s)

        <recap of scripts/render.rhai: Render: changed 1>
        ",
        ),
        "",
    );
    run.stdout_lacks("canary-minio-password-123");
    let rendered = std::fs::read_to_string(copy.path().join("rendered.yaml")).expect("rendered");
    assert!(
        rendered.contains("aws_secret_access_key: canary-minio-password-123\n"),
        "{rendered}"
    );
    assert!(
        rendered.contains("endpoint: http://minio.minio.svc:9000\n"),
        "{rendered}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(copy.path().join("rendered.yaml"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "a rendered secret is written 0600");

    copy.write(
        "scripts/typo.rhai",
        r#"step("Render", || {
    template_file("infra/references/gitlab-rails-storage-connection.yaml",
        #{ACCES_KEY: "admin", SECRET_KEY: "x", ENDPOINT: "y"});
});
"#,
    );
    copy.run(&["scripts/typo.rhai"]).expect(
        1,
        &one_step_run_of("scripts/typo.rhai", "Render", "failed"),
        r#"
        error: step "Render" failed
          × template_file: infra/references/gitlab-rails-storage-connection.yaml:6: no value for {{ ACCESS_KEY }}
           ╭─[scripts/typo.rhai:2:5]
         1 │ step("Render", || {
         2 │     template_file("infra/references/gitlab-rails-storage-connection.yaml",
           ·     ──────┬──────
           ·           ╰── failed here
         3 │         #{ACCES_KEY: "admin", SECRET_KEY: "x", ENDPOINT: "y"});
           ╰────
          hint: values given: ACCES_KEY, ENDPOINT, SECRET_KEY
        re-run with --resume to continue from here
        "#,
    );
}

#[test]
fn random_secrets_are_long_distinct_and_never_printed() {
    let copy = BPRUN.test_in_repository_copy();
    copy.write(
        "scripts/random.rhai",
        r#"let a = random_secret(32);
let b = random_secret(32);
print(`${a} ${a.len} ${a != b}`);
"#,
    );
    copy.run(&["scripts/random.rhai"])
        .code(0)
        .stdout("*** 32 true\n");
    copy.write("scripts/short.rhai", "random_secret(8);\n");
    copy.run(&["scripts/short.rhai"]).expect(
        3,
        "",
        "
        error: the top level of scripts/short.rhai failed
          × random_secret: a length of 8 is outside 12..=256 (hint: passwords phase 2 mints are 32 characters)
           ╭─[scripts/short.rhai:1:1]
         1 │ random_secret(8);
           · ──────┬──────
           ·       ╰── thrown here
           ╰────
        ",
    );
}

/// A copy of the repository with the real helm and bao that phase 2 (and the OpenBao pods of
/// the simulator) run, and the real redis-server and redis-cli of its Redis pods.
pub(crate) fn with_tools() -> crate::support::Test {
    BPRUN
        .test_in_repository_copy()
        .env("HELM_BIN", tool("helm"))
        .env("BPRUN_BAO_BIN", tool("bao"))
        .env("BPRUN_REDIS_SERVER", tool("redis-server"))
        .env("BPRUN_REDIS_CLI", tool("redis-cli"))
}

/// A copy of the repository whose phase 2 script is edited by `edit` (which must change it).
fn edited_phase2(edit: impl Fn(&str) -> String) -> crate::support::Test {
    let copy = with_tools();
    let path = copy.path().join("scripts/phase2.rhai");
    let source = std::fs::read_to_string(&path).expect("phase2.rhai");
    let edited = edit(&source);
    assert_ne!(edited, source, "the edit changed nothing");
    std::fs::write(&path, edited).expect("write phase2.rhai");
    copy
}

#[test]
fn a_cluster_created_before_the_operator_is_ready_is_refused_by_its_webhook() {
    // The operator's webhook is served by its pod, Ready only after its readiness probe's
    // initial delay: without the wait, the API server cannot call the webhook. The group of
    // installs runs one at a time here (the same lines, in the same order): four helm installs
    // at once on two cores can stretch CloudNativePG's past that 3 s delay, and what this test
    // is about is the order inside the step.
    let copy = edited_phase2(|source| {
        source
            .replace(
                "    kube_wait(\"Deployment\", \"cnpg-system\", \"cnpg-controller-manager\", \"Available\", #{timeout: wait_timeout});\n",
                "",
            )
            .replacen("], #{limit: 4});", "], #{limit: 1});", 1)
    });
    // Whether the operator is Ready by the time the end state is read depends on how long the
    // refusal took: its readiness is shown as `<0 or 1>`.
    settled(copy.run(&["rehearse", "scripts/phase2.rhai"]))
        .replace_regex(
            r"Deployment/cnpg-controller-manager [01]/1 ready",
            "Deployment/cnpg-controller-manager <0 or 1>/1 ready",
        )
        .expect(
            1,
            WEBHOOK_REFUSED_STDOUT,
            &format!(
                "{BARE_PLATFORM}{}",
                webhook_refused_stderr(&crate::support::script_in(&copy, "scripts/phase2.rhai"))
            ),
        );
}

/// The rehearsal of phase 2 without the operator's wait: the steps up to CloudNativePG and the
/// cluster as they leave it ...
const WEBHOOK_REFUSED_STDOUT: &str = r##"
[1/17] Pre-flight ...
    5 nodes; helm reaches the cluster
[1/17] Pre-flight ... ok (#.## s)
[2/17] Gateway API CRDs ...
    ~ create CustomResourceDefinition/backendtlspolicies.gateway.networking.k8s.io
    ~ create CustomResourceDefinition/gatewayclasses.gateway.networking.k8s.io
    ~ create CustomResourceDefinition/gateways.gateway.networking.k8s.io
    ~ create CustomResourceDefinition/grpcroutes.gateway.networking.k8s.io
    ~ create CustomResourceDefinition/httproutes.gateway.networking.k8s.io
    ~ create CustomResourceDefinition/listenersets.gateway.networking.k8s.io
    ~ create CustomResourceDefinition/referencegrants.gateway.networking.k8s.io
    ~ create CustomResourceDefinition/tlsroutes.gateway.networking.k8s.io
    ~ create ValidatingAdmissionPolicy/safe-upgrades.gateway.networking.k8s.io
    ~ create ValidatingAdmissionPolicyBinding/safe-upgrades.gateway.networking.k8s.io
[2/17] Gateway API CRDs ... changed (#.## s)
[3/17] local-path StorageClass ...
    ~ create Namespace/local-path-storage
    ~ create ServiceAccount/local-path-provisioner-service-account in local-path-storage
    ~ create Role/local-path-provisioner-role in local-path-storage
    ~ create ClusterRole/local-path-provisioner-role
    ~ create RoleBinding/local-path-provisioner-bind in local-path-storage
    ~ create ClusterRoleBinding/local-path-provisioner-bind
    ~ create Deployment/local-path-provisioner in local-path-storage
    ~ create StorageClass/local-path
    ~ create ConfigMap/local-path-config in local-path-storage
[3/17] local-path StorageClass ... changed (#.## s)
[4/17] Stable storage ...
    ~ create Namespace/postgresql
    ~ create Namespace/redis
    ~ create Namespace/minio
    ~ create Namespace/openbao
    ~ create Namespace/gitlab
    ~ create PersistentVolume/stable-postgresql-cnpg-1
    ~ create PersistentVolumeClaim/postgresql-cnpg-1 in postgresql
    ~ create PersistentVolume/stable-redis
    ~ create PersistentVolumeClaim/redis-data-redis-master-0 in redis
    ~ create PersistentVolume/stable-minio
    ~ create PersistentVolumeClaim/minio in minio
    ~ create PersistentVolume/stable-openbao
    ~ create PersistentVolumeClaim/data-openbao-0 in openbao
    ~ create PersistentVolume/stable-gitaly
    ~ create PersistentVolumeClaim/repo-data-gitlab-gitaly-0 in gitlab
[4/17] Stable storage ... changed (#.## s)
[5/17] CloudNativePG ...
    ~ install helm release cnpg-system/cnpg from infra/helm-charts/cloudnative-pg-0.26.1.tgz (not installed)
[5/17] CloudNativePG ... failed (#.## s)
[6/17] Redis ...
    ~ create file infra/secrets/redis-password.txt
    ~ write Secret/redis-auth in redis
    ~ install helm release redis/redis from infra/helm-charts/redis-19.6.4.tgz (not installed)
[6/17] Redis ... changed (#.## s)
[7/17] MinIO ...
    ~ create file infra/secrets/minio-root-user.txt
    ~ create file infra/secrets/minio-root-password.txt
    ~ write Secret/minio-root in minio
    ~ install helm release minio/minio from infra/helm-charts/minio-5.4.0.tgz (not installed)
    ~ write Secret/gitlab-rails-storage in gitlab
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket lfs
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket artifacts
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket uploads
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket packages
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket backups
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket terraform-state
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket ci-secure-files
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket pages
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket dependency-proxy
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket snippets
    ~ exec mc in minio/app=minio
    ~ create MinIO bucket registry
[7/17] MinIO ... changed (#.## s)
[8/17] OpenBao ...
    ~ install helm release openbao/openbao from infra/helm-charts/openbao-0.11.0.tgz (not installed)
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
    ~ initialise openbao http://127.0.0.1:<port> (1 shares, threshold 1) and write infra/secrets/openbao-init.json
    OpenBao initialised; unseal keys and root token in infra/secrets/openbao-init.json (0600)
    ~ unseal openbao http://127.0.0.1:<port>
    ~ mount kv version 2 at secret/
[8/17] OpenBao ... changed (#.## s)
[9/17] Wildcard TLS ...
    ~ mint CA infra/tls/wildcard/ca.pem (no CA yet)
    ~ mint certificate infra/tls/wildcard/cert.pem for *.local.example.net, local.example.net (no certificate yet)
    ~ write Secret/gitlab-wildcard-tls in gitlab
    ~ write Secret/registry-tls in gitlab
    ~ write Secret/kas-tls in gitlab
    ~ write Secret/minio-tls in gitlab
[9/17] Wildcard TLS ... changed (#.## s)
[10/17] CoreDNS rewrite ...
    ~ patch ConfigMap/coredns in kube-system
    ~ restart Deployment/coredns in kube-system
[10/17] CoreDNS rewrite ... changed (#.## s)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         changed                10 #.## s
  3  local-path StorageClass  changed                 9 #.## s
  4  Stable storage           changed                15 #.## s
  5  CloudNativePG            failed                  1 #.## s
  6  Redis                    changed                 3 #.## s
  7  MinIO                    changed                27 #.## s
  8  OpenBao                  changed                 4 #.## s
  9  Wildcard TLS             changed                 6 #.## s
 10  CoreDNS rewrite          changed                 2 #.## s
 11  Restore GitLab secrets   not run                 0          -
 12  Node trust               not run                 0          -
 13  GitLab                   not run                 0          -
 14  Snapshot GitLab secrets  not run                 0          -
 15  Registry hosts pin       not run                 0          -
 16  Runner                   not run                 0          -
 17  Destroy                  not run                 0          -
17 steps: 1 ok, 8 changed, 0 skipped, 1 failed, 7 not run in #.## s

End state of the rehearsal cluster:
helm releases:
  cnpg-system/cnpg cloudnative-pg-0.26.1 revision 1 deployed (digest f60ec68c3ada0cde)
  minio/minio minio-5.4.0 revision 1 deployed (digest c2daf49008371693)
  openbao/openbao openbao-0.11.0 revision 1 deployed (digest 35505f5910827374)
  redis/redis redis-19.6.4 revision 1 deployed (digest 105786c74cf1760f)
namespace cnpg-system
  Deployment/cnpg-controller-manager <0 or 1>/1 ready, runs ghcr.io/cloudnative-pg/cloudnative-pg:1.27.1
namespace gitlab
  PersistentVolumeClaim/repo-data-gitlab-gitaly-0 Bound
  Secret/gitlab-rails-storage (config, connection)
  Secret/gitlab-wildcard-tls (ca.crt, tls.crt, tls.key)
  Secret/kas-tls (ca.crt, tls.crt, tls.key)
  Secret/minio-tls (ca.crt, tls.crt, tls.key)
  Secret/registry-tls (ca.crt, tls.crt, tls.key)
namespace kube-system
  Deployment/coredns 2/2 ready, runs registry.k8s.io/coredns/coredns:v1.12.1
namespace local-path-storage
  Deployment/local-path-provisioner 1/1 ready, runs rancher/local-path-provisioner:v0.0.30
namespace minio
  Deployment/minio 1/1 ready, runs quay.io/minio/minio:RELEASE.2024-12-18T13-15-44Z
  PersistentVolumeClaim/minio Bound
  Secret/minio-root (rootPassword, rootUser)
namespace openbao
  PersistentVolumeClaim/data-openbao-0 Bound
  StatefulSet/openbao 1/1 ready, runs quay.io/openbao/openbao:2.2.0
namespace postgresql
  PersistentVolumeClaim/postgresql-cnpg-1 Bound
namespace redis
  PersistentVolumeClaim/redis-data-redis-master-0 Bound
  Secret/redis-auth (redis-password)
  StatefulSet/redis-master 1/1 ready, runs docker.io/bitnamilegacy/redis:7.2.5-debian-12-r4
OpenBao secret/: no paths
"##;

/// ... and the webhook's refusal, in the API server's words, under the line of `source` (the
/// edited script) that applied the Cluster.
fn webhook_refused_stderr(source: &str) -> String {
    crate::support::with_frame(
        r##"error: step "CloudNativePG" failed
  × kube_apply Cluster/postgresql-cnpg in postgresql: 500 InternalError: Internal error occurred: failed calling webhook "mcluster.cnpg.io": failed to call webhook: Post "https://cnpg-webhook-service.cnpg-system.svc:443/mutate-postgresql-cnpg-io-v1-cluster?timeout=10s": no endpoints available for service "cnpg-webhook-service"
<frame>
  hint: the API server refused the request
  when this step fails: CloudNativePG not Ready: check this step and the stable storage step (claim postgresql-cnpg-1, its cnpg.io annotations and the Cluster as its controller owner); a Cluster refused by the webhook means the operator was not Available yet
re-run with --resume to continue from here
warning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream
"##,
        &crate::support::source_frame(
            source,
            "scripts/phase2.rhai",
            "kube_apply(read_text(\"infra/references/cluster-postgresql.yaml\"));",
            "kube_apply",
            "failed here",
        ),
    )
}

/// The GitLab step's advice when it fails (`when this step fails:`).
const GITLAB_STEP_ADVICE: &str = r#"a pod waiting for a Secret names it: gitlab-rails-storage comes from the MinIO step, gitlab-postgresql-password, gitlab-redis-password, gitlab-openbao-postgresql-password and gitlab-initial-root-password from the restore step, the listener Secrets from the wildcard TLS step; GitLab logging `FATAL: password authentication failed for user "gitlab"` means the restore step did not run before the install (infra/secrets/gitlab-runtime-secrets.yaml) or the role's password differs from infra/secrets/cnpg-role-passwords.json; Redis's `WRONGPASS` means gitlab-redis-password differs from infra/secrets/redis-password.txt; the bundled OpenBao's `failed SASL auth` means gitlab-openbao-postgresql-password differs from OpenBao's secret/openbao/postgresql, and its `hostname resolving error` for postgresql-cnpg-rw that the CloudNativePG step has not run"#;

/// How a crash-looping bundled OpenBao stops the GitLab step, after the wait's headline and
/// source: its StatefulSet, its pod and the pod's event, the hint and the step's advice.
const OPENBAO_CRASH_LOOP: &str = r##"  caused by: StatefulSet/gitlab-openbao: replicas desired=1 ready=0 updated=1 available=0; no conditions
  caused by: pod gitlab-openbao-0: Pod/gitlab-openbao-0: phase Running; container openbao waiting (CrashLoopBackOff: back-off 10s restarting failed container=openbao pod=gitlab-openbao-0_gitlab); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady: containers with unready status: [openbao]), Ready=False (ContainersNotReady: containers with unready status: [openbao])
  caused by: pod gitlab-openbao-0: event BackOff: Back-off restarting failed container openbao in pod gitlab-openbao-0_gitlab(<uid>)
  hint: this state does not resolve by waiting: fix the image, command or configuration
  when this step fails: a pod waiting for a Secret names it: gitlab-rails-storage comes from the MinIO step, gitlab-postgresql-password, gitlab-redis-password, gitlab-openbao-postgresql-password and gitlab-initial-root-password from the restore step, the listener Secrets from the wildcard TLS step; GitLab logging `FATAL: password authentication failed for user "gitlab"` means the restore step did not run before the install (infra/secrets/gitlab-runtime-secrets.yaml) or the role's password differs from infra/secrets/cnpg-role-passwords.json; Redis's `WRONGPASS` means gitlab-redis-password differs from infra/secrets/redis-password.txt; the bundled OpenBao's `failed SASL auth` means gitlab-openbao-postgresql-password differs from OpenBao's secret/openbao/postgresql, and its `hostname resolving error` for postgresql-cnpg-rw that the CloudNativePG step has not run
"##;

/// What `bprun rehearse` says on stderr first about a bare platform.
const BARE_PLATFORM: &str = "\
rehearsal platform (bare: a fresh kind cluster, phase 2 builds the rest):
  GitLab simulator     http://127.0.0.1:<port>
  GitLab Runner        none until phase 2 installs the GitLab Runner chart
  Kubernetes simulator https://127.0.0.1:<port>
  OpenBao              none yet: phase 2 installs it into the cluster (reached through a port-forward to svc/openbao)
";

/// Why a rehearsal's stdout is checked from its failing step on: the steps before it are
/// pinned by the rehearsal that stops earliest and by the passing runs.
const STEPS_BEFORE: &str = "the steps before the failing one are long and pinned elsewhere";

/// A rehearsal's output with what differs between runs as placeholders: the simulators'
/// ports, a pod's random suffix, the recap's padding (durations of any width); the
/// "waiting for" progress lines, printed as often as a wait happens to poll, are dropped.
fn settled(output: crate::support::Output) -> crate::support::Output {
    output
        .replace_regex(r"127\.0\.0\.1:\d{5}", "127.0.0.1:<port>")
        .replace_regex(
            r"(gitlab-webservice-default-[a-z0-9]+)-[a-z0-9]{5}\b",
            "$1-<pod>",
        )
        .replace_regex(r" +#\.## s\n", " #.## s\n")
        .replace_regex(r"(?m)^    waiting for .*\n", "")
}

/// An expected output's recap as `settled` leaves the actual one (one space before each time).
fn settled_recap(expected: &str) -> String {
    regex::Regex::new(r" +#\.## s\n")
        .expect("regex")
        .replace_all(expected, " #.## s\n")
        .into_owned()
}

/// Rehearses phase 2 with each `(moved, before)` move applied in turn (waits bounded at 20 s),
/// and the script it ran.
fn rehearse_reordered(moves: &[(&str, &str)]) -> (crate::support::Output, String) {
    let copy = edited_phase2(|source| {
        moves
            .iter()
            .fold(source.to_string(), |text, (moved, before)| {
                move_step_before(&text, moved, before)
            })
    });
    let run = copy.run(&["rehearse", "scripts/phase2.rhai", "--wait-timeout", "20"]);
    (run, crate::support::script_in(&copy, "scripts/phase2.rhai"))
}

#[test]
fn a_broken_node_script_fails_its_step_with_the_shells_words() {
    // The registry pin's script with a typo: its pods fail on the nodes, as on a real one.
    let copy = edited_phase2(|source| {
        source.replace(
            "cat /tmp/hosts > /host/hosts`;",
            "catt /tmp/hosts > /host/hosts`;",
        )
    });
    let run = copy.run(&["rehearse", "scripts/phase2.rhai", "--wait-timeout", "60"]);
    let run = settled(run);
    run.code(1);
    run.partial_stdout(
        r##"
[15/17] Registry hosts pin ...
    node sim-control-plane: /etc/hosts does not pin registry.local.example.net to 10.96.0.25
    node sim-worker: /etc/hosts does not pin registry.local.example.net to 10.96.0.25
    node sim-worker2: /etc/hosts does not pin registry.local.example.net to 10.96.0.25
    node sim-worker3: /etc/hosts does not pin registry.local.example.net to 10.96.0.25
    node sim-worker4: /etc/hosts does not pin registry.local.example.net to 10.96.0.25
    ~ exec registry-hosts on node sim-control-plane
    ~ exec registry-hosts on node sim-worker
    ~ exec registry-hosts on node sim-worker2
    ~ exec registry-hosts on node sim-worker3
    ~ exec registry-hosts on node sim-worker4
[15/17] Registry hosts pin ... failed (#.## s)
[16/17] Runner ...
    ~ create Namespace/gitlab-runner
    ~ write Secret/gitlab-runner-token in gitlab-runner
    ~ write Secret/gitlab-runner-certs in gitlab-runner
    warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
    ~ install helm release gitlab-runner/gitlab-runner from infra/helm-charts/stand-ins/gitlab-runner (not installed)
[16/17] Runner ... changed (#.## s)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         changed                10 #.## s
  3  local-path StorageClass  changed                 9 #.## s
  4  Stable storage           changed                15 #.## s
  5  CloudNativePG            changed                12 #.## s
  6  Redis                    changed                 3 #.## s
  7  MinIO                    changed                27 #.## s
  8  OpenBao                  changed                 4 #.## s
  9  Wildcard TLS             changed                 6 #.## s
 10  CoreDNS rewrite          changed                 2 #.## s
 11  Restore GitLab secrets   changed                 6 #.## s
 12  Node trust               changed                 6 #.## s
 13  GitLab                   changed                 4 #.## s
 14  Snapshot GitLab secrets  changed                16 #.## s
 15  Registry hosts pin       failed                  5 #.## s
 16  Runner                   changed                 4 #.## s
 17  Destroy                  not run                 0          -
17 steps: 1 ok, 14 changed, 0 skipped, 1 failed, 1 not run in #.## s

"##,
        STEPS_BEFORE,
    );
    let source = crate::support::script_in(&copy, "scripts/phase2.rhai");
    let called_at = crate::support::source_location(
        &source,
        "scripts/phase2.rhai",
        "on_every_node(\"registry-hosts\"",
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}{}",
        crate::support::with_frame(r##"error: step "Registry hosts pin" failed
  × kube_on_nodes: node sim-control-plane: the registry-hosts pod's script failed (exit 127): sh: catt: not found
<frame>
  in fn on_every_node() called at <called at>
  hint: its pod stays for its log: kubectl -n kube-system logs bprun-registry-hosts-sim-control-plane
  when this step fails: registry pulls on the nodes not resolving or answering 404: check this pin and the CA trust (node trust step); https://gitlab.local.example.net not resolving or answering 404 on your machine: its /etc/hosts entry and CA trust (the handover at the end of a whole phase 2 run)
re-run with --resume to continue from here
"##, &crate::support::source_frame(&source, "scripts/phase2.rhai", "kube_on_nodes(differing, purpose, host_path, \"BPRUN_WRITE=1\\n\" + command,", "kube_on_nodes", "failed here"))
        .replace("<called at>", &called_at)
    ));
}

#[test]
fn gitlab_before_minio_waits_for_the_object_storage_secret_and_says_so() {
    // MinIO moved after GitLab: everything else GitLab reads exists.
    let (run, source) = rehearse_reordered(&[("MinIO", "Snapshot GitLab secrets")]);
    let run = settled(run);
    run.code(1);
    run.partial_stdout(
        "warning: step 12 \"GitLab\" needs \"MinIO\", which runs after it (step 13): expect it to fail\n",
        STEPS_BEFORE,
    );
    run.partial_stdout(
        r##"
[12/17] GitLab ...
    ~ create Gateway/gitlab-gw in gitlab
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    ~ install helm release gitlab/gitlab from infra/helm-charts/stand-ins/gitlab (not installed)
[12/17] GitLab ... failed (#.## s)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         changed                10 #.## s
  3  local-path StorageClass  changed                 9 #.## s
  4  Stable storage           changed                15 #.## s
  5  CloudNativePG            changed                12 #.## s
  6  Redis                    changed                 3 #.## s
  7  OpenBao                  changed                 4 #.## s
  8  Wildcard TLS             changed                 6 #.## s
  9  CoreDNS rewrite          changed                 2 #.## s
 10  Restore GitLab secrets   changed                 6 #.## s
 11  Node trust               changed                 6 #.## s
 12  GitLab                   failed                  2 #.## s
 13  MinIO                    not run                 0          -
 14  Snapshot GitLab secrets  not run                 0          -
 15  Registry hosts pin       not run                 0          -
 16  Runner                   not run                 0          -
 17  Destroy                  not run                 0          -
17 steps: 1 ok, 10 changed, 0 skipped, 1 failed, 5 not run in #.## s

"##,
        STEPS_BEFORE,
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}{}",
        &crate::support::with_frame(r##"error: step "GitLab" failed
  × kube_wait Deployment/gitlab-webservice-default in gitlab: not ready after 20s
<frame>
  caused by: Deployment/gitlab-webservice-default: replicas desired=1 ready=0 updated=1 available=0; conditions: Available=False (MinimumReplicasUnavailable: Deployment does not have minimum availability.), Progressing=True (ReplicaSetUpdated: ReplicaSet "gitlab-webservice-default-9fbc8mr2n9" is progressing.)
  caused by: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: Pod/gitlab-webservice-default-9fbc8mr2n9-<pod>: phase Pending; container webservice waiting (ContainerCreating), container gitlab-workhorse waiting (ContainerCreating); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady), Ready=False (ContainersNotReady)
  caused by: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: event FailedMount: MountVolume.SetUp failed for volume "init-webservice-secrets" : secret "gitlab-rails-storage" not found
  hint: raise the timeout if it is only slow; the causes show each unready object (the `timeout` option, in seconds: #{timeout: 600})
  when this step fails: a pod waiting for a Secret names it: gitlab-rails-storage comes from the MinIO step, gitlab-postgresql-password, gitlab-redis-password, gitlab-openbao-postgresql-password and gitlab-initial-root-password from the restore step, the listener Secrets from the wildcard TLS step; GitLab logging `FATAL: password authentication failed for user "gitlab"` means the restore step did not run before the install (infra/secrets/gitlab-runtime-secrets.yaml) or the role's password differs from infra/secrets/cnpg-role-passwords.json; Redis's `WRONGPASS` means gitlab-redis-password differs from infra/secrets/redis-password.txt; the bundled OpenBao's `failed SASL auth` means gitlab-openbao-postgresql-password differs from OpenBao's secret/openbao/postgresql, and its `hostname resolving error` for postgresql-cnpg-rw that the CloudNativePG step has not run
re-run with --resume to continue from here
warning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream
"##, &crate::support::source_frame(&source, "scripts/phase2.rhai", "kube_wait(\"Deployment\", \"gitlab\", name, \"Available\", #{timeout: wait_timeout});", "kube_wait", "failed here"))
    ));
}

#[test]
fn gitlab_before_the_restore_step_stops_at_the_bundled_openbao_naming_its_credential() {
    let (run, source) = rehearse_reordered(&[("GitLab", "Restore GitLab secrets")]);
    let run = settled(run);
    run.code(1);
    run.partial_stdout(
        r##"
[11/17] GitLab ...
    ~ create Gateway/gitlab-gw in gitlab
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    ~ install helm release gitlab/gitlab from infra/helm-charts/stand-ins/gitlab (not installed)
[11/17] GitLab ... failed (#.## s)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         changed                10 #.## s
  3  local-path StorageClass  changed                 9 #.## s
  4  Stable storage           changed                15 #.## s
  5  CloudNativePG            changed                12 #.## s
  6  Redis                    changed                 3 #.## s
  7  MinIO                    changed                27 #.## s
  8  OpenBao                  changed                 4 #.## s
  9  Wildcard TLS             changed                 6 #.## s
 10  CoreDNS rewrite          changed                 2 #.## s
 11  GitLab                   failed                  2 #.## s
 12  Restore GitLab secrets   not run                 0          -
 13  Node trust               not run                 0          -
 14  Snapshot GitLab secrets  not run                 0          -
 15  Registry hosts pin       not run                 0          -
 16  Runner                   not run                 0          -
 17  Destroy                  not run                 0          -
17 steps: 1 ok, 9 changed, 0 skipped, 1 failed, 6 not run in #.## s

"##,
        STEPS_BEFORE,
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}{}",
        &crate::support::with_frame(r##"error: step "GitLab" failed
  × kube_wait StatefulSet/gitlab-openbao in gitlab: not ready after 20s
<frame>
  caused by: StatefulSet/gitlab-openbao: replicas desired=1 ready=0 updated=1 available=0; no conditions
  caused by: pod gitlab-openbao-0: Pod/gitlab-openbao-0: phase Pending; container openbao waiting (CreateContainerConfigError: secret "gitlab-openbao-postgresql-password" not found); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady), Ready=False (ContainersNotReady)
  caused by: pod gitlab-openbao-0: event Failed: Error: secret "gitlab-openbao-postgresql-password" not found
  hint: raise the timeout if it is only slow; the causes show each unready object (the `timeout` option, in seconds: #{timeout: 600})
  when this step fails: a pod waiting for a Secret names it: gitlab-rails-storage comes from the MinIO step, gitlab-postgresql-password, gitlab-redis-password, gitlab-openbao-postgresql-password and gitlab-initial-root-password from the restore step, the listener Secrets from the wildcard TLS step; GitLab logging `FATAL: password authentication failed for user "gitlab"` means the restore step did not run before the install (infra/secrets/gitlab-runtime-secrets.yaml) or the role's password differs from infra/secrets/cnpg-role-passwords.json; Redis's `WRONGPASS` means gitlab-redis-password differs from infra/secrets/redis-password.txt; the bundled OpenBao's `failed SASL auth` means gitlab-openbao-postgresql-password differs from OpenBao's secret/openbao/postgresql, and its `hostname resolving error` for postgresql-cnpg-rw that the CloudNativePG step has not run
re-run with --resume to continue from here
warning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream
"##, &crate::support::source_frame(&source, "scripts/phase2.rhai", "kube_wait(\"StatefulSet\", \"gitlab\", \"gitlab-openbao\", \"Rollout\", #{timeout: wait_timeout});", "kube_wait", "failed here"))
    ));
}

#[test]
fn gitlab_before_cloudnativepg_stops_at_the_bundled_openbao_that_cannot_resolve_its_database() {
    // CloudNativePG moved after GitLab: no postgresql-cnpg-rw Service for the bundled OpenBao.
    let (run, source) = rehearse_reordered(&[("CloudNativePG", "Snapshot GitLab secrets")]);
    let run = settled(run)
        .replace_regex(
            r"gitlab-openbao-0_gitlab\([0-9a-z-]+\)",
            "gitlab-openbao-0_gitlab(<uid>)",
        )
        .replace_regex(r"\), \d+ restarts", "), <n> restarts");
    run.code(1);
    run.partial_stdout(
        "warning: step 10 \"Restore GitLab secrets\" needs \"CloudNativePG\", which runs after it (step 13): expect it to fail\n",
        STEPS_BEFORE,
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}{}{}{}",
        &crate::support::with_frame(r##"error: step "GitLab" failed
  × kube_wait StatefulSet/gitlab-openbao in gitlab: pod gitlab-openbao-0: container openbao: CrashLoopBackOff (back-off 10s restarting failed container=openbao pod=gitlab-openbao-0_gitlab); last exit code 1 (Error: error initializing storage of type postgresql: failed to connect to postgres: un…ection: failed to connect to `user=openbao database=openbao`: hostname resolving error: lookup
  │ postgresql-cnpg-rw.postgresql.svc on 10.96.0.10:53: no such host), <n> restarts
<frame>
"##, &crate::support::source_frame(&source, "scripts/phase2.rhai", "kube_wait(\"StatefulSet\", \"gitlab\", \"gitlab-openbao\", \"Rollout\", #{timeout: wait_timeout});", "kube_wait", "failed here")),
        OPENBAO_CRASH_LOOP,
        r##"re-run with --resume to continue from here
warning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream
"##
    ));
}

#[test]
fn gitlab_before_wildcard_tls_leaves_the_gateway_unprogrammed_naming_the_secret() {
    // The wildcard TLS step moved after GitLab's group: GitLab's Gateway finds no listener
    // Secret, and node trust, which runs together with GitLab, finds no CA. Both fail, each
    // reported with its own error and its own `on_failure` line; the steps after the group
    // do not run.
    let (run, source) = rehearse_reordered(&[("Wildcard TLS", "Snapshot GitLab secrets")]);
    let run = settled(run);
    run.code(1);
    run.partial_stdout(
        r##"warning: step 11 "Node trust" needs "Wildcard TLS", which runs after it (step 13): expect it to fail
warning: step 12 "GitLab" needs "Wildcard TLS", which runs after it (step 13): expect it to fail
"##,
        STEPS_BEFORE,
    );
    run.partial_stdout(
        r##"
[11/17] Node trust ... failed (#.## s)
[12/17] GitLab ...
    ~ create Gateway/gitlab-gw in gitlab
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    ~ install helm release gitlab/gitlab from infra/helm-charts/stand-ins/gitlab (not installed)
[12/17] GitLab ... failed (#.## s)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         changed                10 #.## s
  3  local-path StorageClass  changed                 9 #.## s
  4  Stable storage           changed                15 #.## s
  5  CloudNativePG            changed                12 #.## s
  6  Redis                    changed                 3 #.## s
  7  MinIO                    changed                27 #.## s
  8  OpenBao                  changed                 4 #.## s
  9  CoreDNS rewrite          changed                 2 #.## s
 10  Restore GitLab secrets   changed                 6 #.## s
 11  Node trust               failed                  0 #.## s
 12  GitLab                   failed                  2 #.## s
 13  Wildcard TLS             not run                 0          -
 14  Snapshot GitLab secrets  not run                 0          -
 15  Registry hosts pin       not run                 0          -
 16  Runner                   not run                 0          -
 17  Destroy                  not run                 0          -
17 steps: 1 ok, 9 changed, 0 skipped, 2 failed, 5 not run in #.## s

"##,
        STEPS_BEFORE,
    );
    let node_trust = crate::support::step_frame(
        &source,
        "scripts/phase2.rhai",
        "Node trust",
        "let ca = read_text(`${TLS_DIR}/ca.pem`);",
        "read_text",
        "failed here",
    );
    let gateway = crate::support::source_frame(
        &source,
        "scripts/phase2.rhai",
        "kube_wait(\"Gateway\", \"gitlab\", GATEWAY",
        "kube_wait",
        "failed here",
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}{}",
        r##"error: step "Node trust" failed
  × cannot read infra/tls/wildcard/ca.pem: No such file or directory (os error 2)
<node trust frame>
  hint: check the path; relative paths start at the repository root
  when this step fails: Gateway not Programmed or image pulls failing TLS: check this step and the wildcard TLS step
re-run with --resume to continue from here
error: step "GitLab" failed
  × kube_wait Gateway/gitlab-gw in gitlab: not ready after 20s
<gateway frame>
  caused by: Gateway/gitlab-gw: conditions: Accepted=True (Accepted: The Gateway has been scheduled by Envoy Gateway), Programmed=False (Invalid: Gateway has invalid listeners: gitlab-web, registry-web, kas-web, apps); listener gitlab-web: Programmed=False (Invalid: Listener is invalid, see other Conditions for details.), ResolvedRefs=False (InvalidCertificateRef: Secret gitlab/gitlab-wildcard-tls does not exist.); listener registry-web: Programmed=False (Invalid: Listener is invalid, see other Conditions for details.), ResolvedRefs=False (InvalidCertificateRef: Secret gitlab/registry-tls does not exist.); listener kas-web: Programmed=False (Invalid: Listener is invalid, see other Conditions for details.), ResolvedRefs=False (InvalidCertificateRef: Secret gitlab/kas-tls does not exist.); listener apps: Programmed=False (Invalid: Listener is invalid, see other Conditions for details.), ResolvedRefs=False (InvalidCertificateRef: Secret gitlab/gitlab-wildcard-tls does not exist.)
  hint: raise the timeout if it is only slow; the causes show each unready object (the `timeout` option, in seconds: #{timeout: 600})
  when this step fails: a pod waiting for a Secret names it: gitlab-rails-storage comes from the MinIO step, gitlab-postgresql-password, gitlab-redis-password, gitlab-openbao-postgresql-password and gitlab-initial-root-password from the restore step, the listener Secrets from the wildcard TLS step; GitLab logging `FATAL: password authentication failed for user "gitlab"` means the restore step did not run before the install (infra/secrets/gitlab-runtime-secrets.yaml) or the role's password differs from infra/secrets/cnpg-role-passwords.json; Redis's `WRONGPASS` means gitlab-redis-password differs from infra/secrets/redis-password.txt; the bundled OpenBao's `failed SASL auth` means gitlab-openbao-postgresql-password differs from OpenBao's secret/openbao/postgresql, and its `hostname resolving error` for postgresql-cnpg-rw that the CloudNativePG step has not run
re-run with --resume to continue from here
"##
        .replace("<node trust frame>\n", &node_trust)
        .replace("<gateway frame>\n", &gateway)
    ));
}

#[test]
fn a_wrong_redis_password_for_gitlab_leaves_its_webservice_crash_looping_with_redis_words() {
    // The restore step hands GitLab a Redis password other than the one Redis was installed
    // with: the webservice's Rails is refused by the real redis-server and exits.
    let copy = edited_phase2(|source| {
        source.replace(
            "                      #{\"redis-password\": kept_password(`${SECRETS}/redis-password.txt`)});\n",
            "                      #{\"redis-password\": \"not-the-redis-password\"});\n",
        )
    });
    let run = copy.run(&["rehearse", "scripts/phase2.rhai", "--wait-timeout", "20"]);
    // The pod's name in the kubelet's back-off message and its uid in the event vary; how
    // often it restarted before the wait saw the crash loop depends on timing.
    let run = settled(run)
        .replace_regex(
            r"gitlab-webservice-default-([a-z0-9]+)-[a-z0-9]{5}_gitlab",
            "gitlab-webservice-default-$1-<pod>_gitlab",
        )
        .replace_regex(r"_gitlab\([0-9a-z-]+\)", "_gitlab(<uid>)")
        .replace_regex(r"\), \d+ restarts\n", "), <n> restarts\n");
    run.code(1);
    run.partial_stdout(
        r##"
[13/17] GitLab ...
    ~ create Gateway/gitlab-gw in gitlab
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    ~ install helm release gitlab/gitlab from infra/helm-charts/stand-ins/gitlab (not installed)
[13/17] GitLab ... failed (#.## s)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         changed                10 #.## s
  3  local-path StorageClass  changed                 9 #.## s
  4  Stable storage           changed                15 #.## s
  5  CloudNativePG            changed                12 #.## s
  6  Redis                    changed                 3 #.## s
  7  MinIO                    changed                27 #.## s
  8  OpenBao                  changed                 4 #.## s
  9  Wildcard TLS             changed                 6 #.## s
 10  CoreDNS rewrite          changed                 2 #.## s
 11  Restore GitLab secrets   changed                 6 #.## s
 12  Node trust               changed                 6 #.## s
 13  GitLab                   failed                  2 #.## s
 14  Snapshot GitLab secrets  not run                 0          -
 15  Registry hosts pin       not run                 0          -
 16  Runner                   not run                 0          -
 17  Destroy                  not run                 0          -
17 steps: 1 ok, 11 changed, 0 skipped, 1 failed, 4 not run in #.## s

"##,
        STEPS_BEFORE,
    );
    run.partial_stdout(
        "namespace gitlab\n  Deployment/envoy-gateway 1/1 ready, runs docker.io/envoyproxy/gateway:v1.7.0\n  Deployment/envoy-gitlab-gitlab-gw-80260869 1/1 ready, runs docker.io/envoyproxy/envoy:distroless-v1.37.0\n  Deployment/gitlab-kas 1/1 ready, runs registry.gitlab.com/gitlab-org/build/cng/gitlab-kas:v19.1.1\n  Deployment/gitlab-registry 1/1 ready, runs registry.gitlab.com/gitlab-org/build/cng/gitlab-container-registry:v4.24.0-gitlab\n  Deployment/gitlab-sidekiq-all-in-1-v2 1/1 ready, runs registry.gitlab.com/gitlab-org/build/cng/gitlab-sidekiq-ee:v19.1.1\n  Deployment/gitlab-toolbox 1/1 ready, runs registry.gitlab.com/gitlab-org/build/cng/gitlab-toolbox-ee:v19.1.1\n  Deployment/gitlab-webservice-default 0/1 ready (pod gitlab-webservice-default-9fbc8mr2n9-<pod> container webservice CrashLoopBackOff: last exit code 1: Redis::CannotConnectError: WRONGPASS invalid username-password pair or user is disabled.), runs registry.gitlab.com/gitlab-org/build/cng/gitlab-webservice-ee:v19.1.1, registry.gitlab.com/gitlab-org/build/cng/gitlab-workhorse-ee:v19.1.1\n",
        "the end state's other namespaces are pinned by the passing rehearsals",
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}{}",
        &crate::support::with_frame(r##"error: step "GitLab" failed
  × kube_wait Deployment/gitlab-webservice-default in gitlab: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: container webservice: CrashLoopBackOff (back-off 10s restarting failed container=webservice pod=gitlab-webservice-default-9fbc8mr2n9-<pod>_gitlab); last exit code 1 (Error: Redis::CannotConnectError: WRONGPASS invalid username-password pair or user is disabled.), <n> restarts
<frame>
  caused by: Deployment/gitlab-webservice-default: replicas desired=1 ready=0 updated=1 available=0; conditions: Available=False (MinimumReplicasUnavailable: Deployment does not have minimum availability.), Progressing=True (ReplicaSetUpdated: ReplicaSet "gitlab-webservice-default-9fbc8mr2n9" is progressing.)
  caused by: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: Pod/gitlab-webservice-default-9fbc8mr2n9-<pod>: phase Running; container webservice waiting (CrashLoopBackOff: back-off 10s restarting failed container=webservice pod=gitlab-webservice-default-9fbc8mr2n9-<pod>_gitlab); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady: containers with unready status: [webservice]), Ready=False (ContainersNotReady: containers with unready status: [webservice])
  caused by: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: event BackOff: Back-off restarting failed container webservice in pod gitlab-webservice-default-9fbc8mr2n9-<pod>_gitlab(<uid>)
  hint: this state does not resolve by waiting: fix the image, command or configuration
  when this step fails: a pod waiting for a Secret names it: gitlab-rails-storage comes from the MinIO step, gitlab-postgresql-password, gitlab-redis-password, gitlab-openbao-postgresql-password and gitlab-initial-root-password from the restore step, the listener Secrets from the wildcard TLS step; GitLab logging `FATAL: password authentication failed for user "gitlab"` means the restore step did not run before the install (infra/secrets/gitlab-runtime-secrets.yaml) or the role's password differs from infra/secrets/cnpg-role-passwords.json; Redis's `WRONGPASS` means gitlab-redis-password differs from infra/secrets/redis-password.txt; the bundled OpenBao's `failed SASL auth` means gitlab-openbao-postgresql-password differs from OpenBao's secret/openbao/postgresql, and its `hostname resolving error` for postgresql-cnpg-rw that the CloudNativePG step has not run
re-run with --resume to continue from here
warning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream
"##, &crate::support::source_frame(&crate::support::script_in(&copy, "scripts/phase2.rhai"), "scripts/phase2.rhai", "kube_wait(\"Deployment\", \"gitlab\", name, \"Available\", #{timeout: wait_timeout});", "kube_wait", "failed here"))
    ));
}

/// The variables of a bare platform without GitLab's admin token: phase 2 and 3 start as on a
/// fresh platform.
fn fresh_platform_vars(sim: &crate::support::Sim) -> Vec<(String, String)> {
    sim.vars()
        .iter()
        .filter(|(key, _)| key != "GITLAB_TOKEN")
        .cloned()
        .collect()
}

/// helm's releases as `namespace/name revision`.
fn helm_revisions(sim: &crate::support::Sim) -> Vec<String> {
    let output = std::process::Command::new(tool("helm"))
        .args(["list", "-A", "-o", "json"])
        .env("KUBECONFIG", sim.var("KUBECONFIG"))
        .env("HOME", sim.home())
        .output()
        .expect("helm list");
    let releases: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("helm list json");
    let mut listed: Vec<String> = releases
        .as_array()
        .expect("releases")
        .iter()
        .map(|r| {
            format!(
                "{}/{} {}",
                r["namespace"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or(""),
                r["revision"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| r["revision"].to_string())
            )
        })
        .collect();
    listed.sort();
    listed
}

fn kubectl(sim: &crate::support::Sim, args: &[&str]) -> String {
    let output = crate::qualify::kubectl(sim, args);
    format!("{}{}", output.raw_stdout, output.raw_stderr)
}

/// The requests that changed the cluster. The read-only pods that look at the nodes' files
/// (`bprun-<purpose>-look-<node>`, each created and deleted once) are reads, not changes.
fn kube_mutating(sim: &crate::support::Sim) -> u64 {
    let log: serde_json::Value =
        serde_json::from_str(&kubectl(sim, &["get", "--raw", "/-/sim/requests"])).expect("log");
    let looks: u64 = log["counters"]
        .as_object()
        .expect("counters")
        .iter()
        .filter(|(request, _)| {
            request.starts_with("DELETE /api/v1/namespaces/kube-system/pods/bprun-")
                && request.contains("-look-")
        })
        .filter_map(|(_, count)| count.as_u64())
        .sum();
    let creates = log["counters"]["POST /api/v1/namespaces/kube-system/pods"]
        .as_u64()
        .unwrap_or(0);
    assert!(creates >= looks, "each look pod was created: {log}");
    log["mutating"].as_u64().expect("mutating") - 2 * looks
}

/// What a whole, successful run of phase 2 on the rehearsal platform ends with: the operator's
/// handover (the gateway's Service has no load-balancer address there, as on kind).
pub const HANDOVER: &str = "
Phase 2 is done. To use the platform from this machine:
 1. Name its hosts in /etc/hosts (sudo):
   The gateway's Service gitlab/gitlab-gateway is a LoadBalancer without an address (kind
   gives it one only while cloud-provider-kind runs). Until then, forward it and use 127.0.0.1:
     sudo -E kubectl -n gitlab port-forward svc/gitlab-gateway 443:443
     127.0.0.1 gitlab.local.example.net registry.local.example.net kas.local.example.net minio.local.example.net guestbook.local.example.net
 2. Trust its CA, infra/tls/wildcard/ca.pem (browsers, git and glab check it):
     sudo cp infra/tls/wildcard/ca.pem /usr/local/share/ca-certificates/blueprint-wildcard.crt && sudo update-ca-certificates
   bprun needs no trust store: it reads infra/tls/wildcard/ca.pem itself.
 3. Secrets: OpenBao holds them under secret/ (`bao kv list secret/gitlab`; reach it with
   `kubectl -n openbao port-forward svc/openbao 8200:8200` and BAO_ADDR=http://127.0.0.1:8200).
   infra/secrets/ (mode 0600, not in git) holds what rebuilds the platform, and
   infra/secrets/openbao-init.json OpenBao's unseal key and root token: keep a copy of it off this
   machine. Without it a sealed OpenBao cannot be opened again.
 4. After a restart, OpenBao starts sealed: `bprun scripts/phase2.rhai --only OpenBao` unseals it.
 5. Next: GITLAB_URL=https://gitlab.local.example.net bprun scripts/phase3.rhai
";

#[test]
fn phase2_builds_the_platform_phase3_runs_on_it_and_a_second_run_changes_nothing() {
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    let first = copy.run(&["scripts/phase2.rhai"]);
    first.code(0);
    let phase3 = copy.run(&["scripts/phase3.rhai"]);
    phase3.code(0);

    // What the node pods did to a node, read as on a real cluster: by a pod on that node.
    let probe = "apiVersion: v1\nkind: Pod\nmetadata: {name: node-look, namespace: default}\nspec:\n  restartPolicy: Never\n  nodeName: sim-worker3\n\
                 \x20 containers:\n  - {name: look, image: docker.io/library/busybox:1.37, command: [sh, -c, 'cat /host/hosts /host/containerd/certs.d/registry.local.example.net/hosts.toml'],\n\
                 \x20    volumeMounts: [{name: host, mountPath: /host}]}\n  volumes: [{name: host, hostPath: {path: /etc}}]\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], probe).code(0);
    sim.kubectl(&[
        "wait",
        "pod/node-look",
        "--timeout=30s",
        "--for=jsonpath={.status.phase}=Succeeded",
    ])
    .code(0);
    let node_files = kubectl(&sim, &["logs", "node-look"]);
    let gateway = kubectl(
        &sim,
        &[
            "-n",
            "gitlab",
            "get",
            "service",
            "gitlab-gateway",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    assert!(
        node_files.contains(&format!("{gateway} registry.local.example.net\n"))
            && node_files.contains("127.0.0.1\tlocalhost")
            && node_files.contains(
                "[host.\"https://registry.local.example.net\"]\n  ca = \"/etc/containerd/certs.d/registry.local.example.net/ca.pem\""
            ),
        "{node_files}"
    );

    // The seed's smoke table, every row that can be checked here.
    assert_eq!(
        kubectl(
            &sim,
            &[
                "get",
                "sc",
                "local-path",
                "-o",
                "jsonpath={.metadata.annotations.storageclass\\.kubernetes\\.io/is-default-class}"
            ]
        ),
        "true"
    );
    assert_eq!(
        kubectl(
            &sim,
            &[
                "-n",
                "postgresql",
                "get",
                "cluster",
                "postgresql-cnpg",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"
            ]
        ),
        "True"
    );
    assert_eq!(
        kubectl(
            &sim,
            &[
                "-n",
                "gitlab",
                "get",
                "gateway",
                "gitlab-gw",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Programmed\")].status}"
            ]
        ),
        "True"
    );
    let corefile = kubectl(
        &sim,
        &[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "coredns",
            "-o",
            "jsonpath={.data.Corefile}",
        ],
    );
    assert!(
        corefile.contains(".:53 {\n    rewrite name regex (.+)\\.local\\.example\\.net gitlab-gateway.gitlab.svc.cluster.local answer auto\n"),
        "{corefile}"
    );
    assert_eq!(
        kubectl(
            &sim,
            &[
                "-n",
                "gitlab",
                "get",
                "service",
                "gitlab-gateway",
                "-o",
                "name"
            ]
        ),
        "service/gitlab-gateway\n"
    );
    let secrets = kubectl(&sim, &["-n", "gitlab", "get", "secrets", "-o", "name"]);
    for name in [
        "gitlab-wildcard-tls",
        "registry-tls",
        "kas-tls",
        "minio-tls",
        "gitlab-rails-storage",
    ] {
        assert!(
            secrets.lines().any(|line| line == format!("secret/{name}")),
            "{name} missing: {secrets}"
        );
    }
    for file in ["ca.pem", "cert.pem", "key.pem"] {
        assert!(
            copy.path().join("infra/tls/wildcard").join(file).is_file(),
            "{file}"
        );
    }
    let status = kubectl(
        &sim,
        &[
            "-n",
            "openbao",
            "exec",
            "openbao-0",
            "--",
            "bao",
            "status",
            "-format=json",
        ],
    );
    assert_eq!(sealed(&status), false, "{status}");
    let buckets = kubectl(
        &sim,
        &[
            "-n",
            "minio",
            "exec",
            "deploy/minio",
            "--",
            "mc",
            "ls",
            "local",
        ],
    );
    for bucket in ["lfs", "artifacts", "registry", "snippets"] {
        assert!(
            buckets.contains(&format!(" {bucket}/")),
            "{bucket} missing: {buckets}"
        );
    }
    let runners = sim.api_json("runners/all?status=online");
    assert_eq!(runners.as_array().map(Vec::len), Some(1), "{runners}");
    use std::os::unix::fs::PermissionsExt;
    for file in [
        "openbao-init.json",
        "cnpg-role-passwords.json",
        "redis-password.txt",
        "gitlab-runtime-secrets.yaml",
    ] {
        let mode = std::fs::metadata(copy.path().join("infra/secrets").join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }

    // A second run of both changes nothing: no Kubernetes or GitLab write, no new helm revision.
    let revisions = helm_revisions(&sim);
    // Phase 2's six releases and the three apps phase 3's smoke pipelines deployed for real
    // (their deploy jobs ran helm against the cluster).
    assert_eq!(revisions.len(), 9, "{revisions:?}");
    for app in [
        "guestbook/guestbook 1",
        "redis-demo/redis-master-demo 1",
        "redis-slave-demo/redis-slave-demo 1",
    ] {
        assert!(revisions.iter().any(|r| r == app), "{app}: {revisions:?}");
    }
    kubectl(&sim, &["delete", "--raw", "/-/sim/requests"]);
    sim.clear_requests();
    // Every step ok, and the output says what was left alone and why.
    settled(copy.run(&["scripts/phase2.rhai"])).expect(0, &(r##"
[1/17] Pre-flight ...
    5 nodes; helm reaches the cluster
[1/17] Pre-flight ... ok (#.## s)
[2/17] Gateway API CRDs ... ok (#.## s)
[3/17] local-path StorageClass ... ok (#.## s)
[4/17] Stable storage ... ok (#.## s)
[5/17] CloudNativePG ...
    helm release cnpg-system/cnpg left alone: revision 1 of cloudnative-pg-0.26.1 is deployed with the same chart digest and values
[5/17] CloudNativePG ... ok (#.## s)
[6/17] Redis ...
    helm release redis/redis left alone: revision 1 of redis-19.6.4 is deployed with the same chart digest and values
[6/17] Redis ... ok (#.## s)
[7/17] MinIO ...
    helm release minio/minio left alone: revision 1 of minio-5.4.0 is deployed with the same chart digest and values
[7/17] MinIO ... ok (#.## s)
[8/17] OpenBao ...
    helm release openbao/openbao left alone: revision 1 of openbao-0.11.0 is deployed with the same chart digest and values
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
[8/17] OpenBao ... ok (#.## s)
[9/17] Wildcard TLS ... ok (#.## s)
[10/17] CoreDNS rewrite ...
    CoreDNS already rewrites *.local.example.net
[10/17] CoreDNS rewrite ... ok (#.## s)
[11/17] Restore GitLab secrets ... ok (#.## s)
[12/17] Node trust ... ok (#.## s)
[13/17] GitLab ...
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    helm release gitlab/gitlab left alone: revision 1 of gitlab-10.1.1 is deployed with the same chart digest and values
[13/17] GitLab ... ok (#.## s)
[14/17] Snapshot GitLab secrets ... ok (#.## s)
[15/17] Registry hosts pin ... ok (#.## s)
[16/17] Runner ...
    warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
    helm release gitlab-runner/gitlab-runner left alone: revision 1 of gitlab-runner-0.71.0 is deployed with the same chart digest and values
[16/17] Runner ... ok (#.## s)
[17/17] Destroy ... skipped: only with --destroy (#.## s)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         ok                      0 #.## s
  3  local-path StorageClass  ok                      0 #.## s
  4  Stable storage           ok                      0 #.## s
  5  CloudNativePG            ok                      0 #.## s
  6  Redis                    ok                      0 #.## s
  7  MinIO                    ok                      0 #.## s
  8  OpenBao                  ok                      0 #.## s
  9  Wildcard TLS             ok                      0 #.## s
 10  CoreDNS rewrite          ok                      0 #.## s
 11  Restore GitLab secrets   ok                      0 #.## s
 12  Node trust               ok                      0 #.## s
 13  GitLab                   ok                      0 #.## s
 14  Snapshot GitLab secrets  ok                      0 #.## s
 15  Registry hosts pin       ok                      0 #.## s
 16  Runner                   ok                      0 #.## s
 17  Destroy                  skipped                 0 #.## s
17 steps: 16 ok, 0 changed, 1 skipped, 0 failed in #.## s
"##.to_string() + HANDOVER), "");
    let again3 = copy.run(&["scripts/phase3.rhai"]);
    again3.code(0);
    // A check of the converged platform says what the run above did: nothing would change.
    settled(copy.run(&["--check", "scripts/phase2.rhai"])).expect(
        0,
        r##"
check mode: nothing will be changed
[1/17] Pre-flight ...
    5 nodes; helm reaches the cluster
[1/17] Pre-flight ... ok (#.## s)
[2/17] Gateway API CRDs ... ok (#.## s)
[3/17] local-path StorageClass ... ok (#.## s)
[4/17] Stable storage ... ok (#.## s)
[5/17] CloudNativePG ...
    helm release cnpg-system/cnpg left alone: revision 1 of cloudnative-pg-0.26.1 is deployed with the same chart digest and values
[5/17] CloudNativePG ... ok (#.## s)
[6/17] Redis ...
    helm release redis/redis left alone: revision 1 of redis-19.6.4 is deployed with the same chart digest and values
[6/17] Redis ... ok (#.## s)
[7/17] MinIO ...
    helm release minio/minio left alone: revision 1 of minio-5.4.0 is deployed with the same chart digest and values
[7/17] MinIO ... ok (#.## s)
[8/17] OpenBao ...
    helm release openbao/openbao left alone: revision 1 of openbao-0.11.0 is deployed with the same chart digest and values
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
[8/17] OpenBao ... ok (#.## s)
[9/17] Wildcard TLS ... ok (#.## s)
[10/17] CoreDNS rewrite ...
    CoreDNS already rewrites *.local.example.net
[10/17] CoreDNS rewrite ... ok (#.## s)
[11/17] Restore GitLab secrets ... ok (#.## s)
[12/17] Node trust ... ok (#.## s)
[13/17] GitLab ...
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    helm release gitlab/gitlab left alone: revision 1 of gitlab-10.1.1 is deployed with the same chart digest and values
[13/17] GitLab ... ok (#.## s)
[14/17] Snapshot GitLab secrets ... ok (#.## s)
[15/17] Registry hosts pin ... ok (#.## s)
[16/17] Runner ...
    warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
    helm release gitlab-runner/gitlab-runner left alone: revision 1 of gitlab-runner-0.71.0 is deployed with the same chart digest and values
[16/17] Runner ... ok (#.## s)
[17/17] Destroy ... skipped: only with --destroy (#.## s)

Recap of scripts/phase2.rhai (check mode)
  #  step                     status       would change       time
  1  Pre-flight               ok                      0 #.## s
  2  Gateway API CRDs         ok                      0 #.## s
  3  local-path StorageClass  ok                      0 #.## s
  4  Stable storage           ok                      0 #.## s
  5  CloudNativePG            ok                      0 #.## s
  6  Redis                    ok                      0 #.## s
  7  MinIO                    ok                      0 #.## s
  8  OpenBao                  ok                      0 #.## s
  9  Wildcard TLS             ok                      0 #.## s
 10  CoreDNS rewrite          ok                      0 #.## s
 11  Restore GitLab secrets   ok                      0 #.## s
 12  Node trust               ok                      0 #.## s
 13  GitLab                   ok                      0 #.## s
 14  Snapshot GitLab secrets  ok                      0 #.## s
 15  Registry hosts pin       ok                      0 #.## s
 16  Runner                   ok                      0 #.## s
 17  Destroy                  skipped                 0 #.## s
17 steps: 16 ok, 0 changed, 1 skipped, 0 failed in #.## s
"##,
        "",
    );
    assert_eq!(
        kube_mutating(&sim),
        0,
        "{}",
        kubectl(&sim, &["get", "--raw", "/-/sim/requests"])
    );
    assert_eq!(sim.mutating_requests(), 0);
    assert_eq!(helm_revisions(&sim), revisions);
}

#[test]
fn the_plan_warns_when_a_moved_step_now_runs_before_what_it_needs() {
    // GitLab moved before MinIO, which runs in a group: GitLab goes before the whole group.
    let copy = edited_phase2(|source| move_step_before(source, "GitLab", "MinIO"));
    copy.run(&["--list", "scripts/phase2.rhai"]).expect(
        0,
        &format!(
            r#"warning: step 5 "GitLab" needs "MinIO", which runs after it (step 8): expect it to fail
warning: step 5 "GitLab" needs "Wildcard TLS", which runs after it (step 10): expect it to fail
warning: step 5 "GitLab" needs "Restore GitLab secrets", which runs after it (step 12): expect it to fail
scripts/phase2.rhai: 17 steps
[1/17] Pre-flight
[2/17] Gateway API CRDs
[3/17] local-path StorageClass
[4/17] Stable storage
[5/17] GitLab
[6/17] CloudNativePG  (runs together with steps 6-11, 4 at a time)
[7/17] Redis  (runs together with steps 6-11, 4 at a time)
[8/17] MinIO  (runs together with steps 6-11, 4 at a time)
[9/17] OpenBao  (runs together with steps 6-11, 4 at a time)
[10/17] Wildcard TLS  (runs together with steps 6-11, 4 at a time)
[11/17] CoreDNS rewrite  (runs together with steps 6-11, 4 at a time)
[12/17] Restore GitLab secrets
[13/17] Node trust
[14/17] Snapshot GitLab secrets  (runs together with steps 14-16, 4 at a time)
[15/17] Registry hosts pin  (runs together with steps 14-16, 4 at a time)
[16/17] Runner  (runs together with steps 14-16, 4 at a time)
[17/17] Destroy
{PARAMETERS}"#
        ),
        "",
    );
    // The script as shipped has every need before the step that needs it: no warning.
    with_tools().run(&["--list", "scripts/phase2.rhai"]).expect(
        0,
        &format!("{PLAN}{PARAMETERS}"),
        "",
    );

    let typo = edited_phase2(|source| {
        source.replacen("needs: [\"Wildcard TLS\"]", "needs: [\"Wildcard TSL\"]", 1)
    });
    typo.run(&["--list", "scripts/phase2.rhai"]).expect(
        2,
        "",
        r#"
        error: step "Node trust" needs "Wildcard TSL", which is not a step
          hint: did you mean "Wildcard TLS"?
        "#,
    );
}

#[test]
fn phase2_killed_at_random_points_converges_and_then_changes_nothing() {
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    let mut random = seed;
    let mut delays = Vec::new();
    for _ in 0..10 {
        // xorshift: a reproducible sequence from the printed seed. Later runs skip what is
        // done, so the kills land further and further into the script.
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let delay = std::time::Duration::from_millis(random % 12_000);
        delays.push(delay.as_millis());
        let mut child = copy
            .command(&["scripts/phase2.rhai"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
    }
    let last = copy.run(&["scripts/phase2.rhai"]);
    assert_eq!(
        last.code, 0,
        "seed {seed}, kills after {delays:?} ms:\n{}\n{}",
        last.stdout, last.stderr
    );
    // Converged: one more run changes nothing, and every secret was minted once.
    let revisions = helm_revisions(&sim);
    kubectl(&sim, &["delete", "--raw", "/-/sim/requests"]);
    let again = copy.run(&["scripts/phase2.rhai"]);
    again.code(0);
    assert_eq!(
        kube_mutating(&sim),
        0,
        "seed {seed}, kills after {delays:?} ms"
    );
    assert_eq!(helm_revisions(&sim), revisions, "seed {seed}");
    let status = kubectl(
        &sim,
        &[
            "-n",
            "openbao",
            "exec",
            "openbao-0",
            "--",
            "bao",
            "status",
            "-format=json",
        ],
    );
    assert!(
        status.contains("\"sealed\": false"),
        "seed {seed}: {status}"
    );
    // One runner, online, with the token OpenBao holds.
    let runners = sim.api_json("runners/all");
    assert_eq!(
        runners.as_array().map(Vec::len),
        Some(1),
        "seed {seed}: {runners}"
    );
}

/// Runs phase 2 until a line starting with `marker` is printed, waits `delay` (the group it
/// opens is then under way), SIGKILLs it and returns the lines it printed. Bounded: panics
/// when the marker has not come within two minutes.
fn killed_after(
    copy: &crate::support::Test,
    marker: &str,
    delay: std::time::Duration,
) -> Vec<String> {
    use std::io::BufRead;
    let mut child = copy
        .command(&["scripts/phase2.rhai"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut seen = Vec::new();
    while !seen.iter().any(|line: &String| line.starts_with(marker)) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("no line starting with {marker:?} in:\n{}", seen.join("\n"));
            }
        }
    }
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    seen.extend(received.try_iter());
    seen
}

/// The temporary files a write left (`.name.pid-random.bprun-tmp`) under `folder`.
fn temporaries_under(folder: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(temporaries_under(&path));
        } else if path.to_string_lossy().ends_with(".bprun-tmp") {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn phase2_killed_inside_each_group_of_steps_converges_and_then_changes_nothing() {
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    // Each kill lands while a group runs: after the line that ends the step before it, and
    // before the group's last step has ended (its line would then be printed).
    let groups = [
        (
            "[4/17] Stable storage ... ",
            1000,
            "[10/17] CoreDNS rewrite ... ",
        ),
        (
            "[11/17] Restore GitLab secrets ... ",
            500,
            "[13/17] GitLab ... ",
        ),
        ("[13/17] GitLab ... ", 300, "[16/17] Runner ... "),
    ];
    for (opens, delay, last_ends) in groups {
        let printed = killed_after(&copy, opens, std::time::Duration::from_millis(delay));
        assert!(
            !printed
                .iter()
                .any(|line| line.starts_with(last_ends) && line.contains(" (")),
            "the group opened by {opens:?} had ended before the kill:\n{}",
            printed.join("\n")
        );
    }
    let converged = copy.run(&["scripts/phase2.rhai"]);
    assert_eq!(
        converged.code, 0,
        "{}\n{}",
        converged.stdout, converged.stderr
    );
    // No killed writer's temporary is left (one could hold a secret).
    assert_eq!(
        temporaries_under(&copy.path().join("infra")),
        Vec::<String>::new()
    );
    // Converged: one more run changes nothing.
    let revisions = helm_revisions(&sim);
    kubectl(&sim, &["delete", "--raw", "/-/sim/requests"]);
    copy.run(&["scripts/phase2.rhai"]).code(0);
    assert_eq!(kube_mutating(&sim), 0);
    assert_eq!(helm_revisions(&sim), revisions);
    let runners = sim.api_json("runners/all");
    assert_eq!(runners.as_array().map(Vec::len), Some(1), "{runners}");
}

#[test]
fn check_mode_on_a_bare_platform_plans_every_step_and_changes_nothing() {
    let copy = with_tools();
    let run = copy.run(&["rehearse", "--check", "scripts/phase2.rhai"]);
    run.code(0);
    let recap = crate::phase3::recap_of(&run.stdout, "scripts/phase2.rhai (check mode)");
    for step in [
        "Gateway API CRDs",
        "local-path StorageClass",
        "Stable storage",
        "CloudNativePG",
        "Redis",
        "MinIO",
        "OpenBao",
        "Wildcard TLS",
        "CoreDNS rewrite",
        "Node trust",
        "Restore GitLab secrets",
        "GitLab",
        "Snapshot GitLab secrets",
        "Registry hosts pin",
        "Runner",
    ] {
        assert_eq!(
            recap.get(step).map(String::as_str),
            Some("changed"),
            "{step}: {recap:?}"
        );
    }
    // Nothing was installed, written or minted: the cluster is as bare as it started.
    let end = run
        .stdout
        .split("End state of the rehearsal cluster:")
        .nth(1)
        .unwrap_or("");
    assert!(
        end.starts_with("\nhelm releases: none\nnamespace kube-system\n  Deployment/coredns"),
        "{end}"
    );
    assert!(end.contains("OpenBao: not initialised"), "{end}");
    assert!(!copy.path().join("infra/secrets").exists());
    assert!(!copy.path().join("infra/tls/wildcard/ca.pem").exists());
}

#[test]
fn destroy_with_preserve_data_then_phase2_again_reuses_every_secret_and_volume() {
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    copy.run(&["scripts/phase2.rhai"]).code(0);
    let secrets = copy.path().join("infra/secrets");
    let read =
        |file: &str| std::fs::read(secrets.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let kept = [
        "openbao-init.json",
        "cnpg-role-passwords.json",
        "redis-password.txt",
        "minio-root-password.txt",
        "gitlab-runtime-secrets.yaml",
    ];
    let before: Vec<Vec<u8>> = kept.iter().map(|file| read(file)).collect();

    let destroyed = copy.run(&["scripts/phase2.rhai", "--destroy", "--preserve-data"]);
    destroyed.code(0);
    assert_eq!(helm_revisions(&sim), Vec::<String>::new());
    let volumes = kubectl(&sim, &["get", "pv", "-o", "name"]);
    for name in [
        "stable-postgresql-cnpg-1",
        "stable-redis",
        "stable-minio",
        "stable-openbao",
        "stable-gitaly",
    ] {
        assert!(
            volumes
                .lines()
                .any(|line| line == format!("persistentvolume/{name}")),
            "{name}: {volumes}"
        );
    }

    // Rebuilt on the kept data: OpenBao unseals with the kept keys, nothing is minted again.
    let again = copy.run(&["scripts/phase2.rhai"]);
    again.code(0);
    let after: Vec<Vec<u8>> = kept.iter().map(|file| read(file)).collect();
    for ((file, before), after) in kept.iter().zip(&before).zip(&after) {
        assert_eq!(
            before, after,
            "{file} changed across destroy --preserve-data and a re-install"
        );
    }
    let claims = kubectl(
        &sim,
        &[
            "get",
            "pvc",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}",
        ],
    );
    for claim in [
        "postgresql-cnpg-1=Bound",
        "redis-data-redis-master-0=Bound",
        "data-openbao-0=Bound",
    ] {
        assert!(
            claims.split_whitespace().any(|c| c == claim),
            "{claim}: {claims}"
        );
    }
}

#[test]
fn values_missing_an_override_the_chart_needs_stop_the_install_before_helm_runs() {
    let copy = with_tools();
    let values =
        std::fs::read_to_string(copy.path().join("infra/helm-values/gitlab.yaml")).expect("values");
    let broken = values.replace(
        "certmanager-issuer:\n  email: admin@local.example.net\n",
        "",
    );
    assert_ne!(broken, values);
    copy.write(
        "infra/helm-values/gitlab.yaml",
        &broken.replace("        key: connection\n", "        key: conection\n"),
    );
    copy.write(
        "scripts/install.rhai",
        r#"step("GitLab", || {
    helm_install("gitlab", "infra/helm-charts/stand-ins/gitlab", "gitlab", #{
        values_files: ["infra/helm-values/gitlab.yaml"],
        values_schema: "infra/helm-values/schemas/gitlab.schema.json"});
});
"#,
    );
    // No cluster is configured: the check comes before helm or Kubernetes is asked anything.
    let refused = copy.run(&["scripts/install.rhai"]);
    refused.expect(
        1,
        &one_step_run_of("scripts/install.rhai", "GitLab", "failed"),
        r#"
        error: step "GitLab" failed
          × helm_install gitlab/gitlab: the values (infra/helm-values/gitlab.yaml) do not match infra/helm-values/schemas/gitlab.schema.json
           ╭─[scripts/install.rhai:2:5]
         1 │ step("GitLab", || {
         2 │     helm_install("gitlab", "infra/helm-charts/stand-ins/gitlab", "gitlab", #{
           ·     ──────┬─────
           ·           ╰── failed here
         3 │         values_files: ["infra/helm-values/gitlab.yaml"],
           ╰────
          caused by: certmanager-issuer: required, missing
          caused by: global.appConfig.object_store.connection.key: must be "connection"
          hint: fix the values file or the override; the schema lists what the chart needs from us. Nothing was installed
        re-run with --resume to continue from here
        "#,
    );
    // The shipped values match every schema (with VERSIONS.json's overrides, as phase 2 merges them).
    let shipped = with_tools();
    shipped.write(
        "scripts/check.rhai",
        r#"step("Schemas", || {
    for name in ["gitlab", "runner", "redis", "minio"] {
        let key = if name == "runner" { "gitlab-runner" } else { name };
        let chart = helm_chart(key);
        helm_template(chart.release, chart.path, chart.namespace, #{
            values_files: [`infra/helm-values/${name}.yaml`], values: chart.values_overrides,
            values_schema: `infra/helm-values/schemas/${name}.schema.json`});
    }
});
"#,
    );
    shipped.run(&["scripts/check.rhai"]).expect(
        0,
        &with_recaps("
        [1/1] Schemas ...
            warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
            warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
        [1/1] Schemas ... ok (#.## s)

        <recap of scripts/check.rhai: Schemas: ok>
        "),
        "",
    );
}

/// A bare platform whose nodes mount `copy`'s `infra/data/shared/` at `/var/local/shared`, as
/// phase 1's kind cluster mounts the repository's: the volume folders the copy's scripts see are
/// the ones the simulated pods keep their data in.
fn bare_platform_on(copy: &crate::support::Test) -> crate::support::Sim {
    let shared = copy.path().join("infra/data/shared");
    let shared = shared.to_str().expect("a UTF-8 temporary path");
    crate::support::Sim::start(
        BPRUN,
        crate::support::SimKind::Bare,
        &["--node-shared", shared],
    )
}

/// Phase 2 up to and with its OpenBao step (what OpenBao needs, nothing after it).
const UP_TO_OPENBAO: &[&str] = &[
    "scripts/phase2.rhai",
    "--only",
    "local-path StorageClass",
    "--only",
    "Stable storage",
    "--only",
    "OpenBao",
];

/// Waits (at most 60 s) until a pod openbao-0 exists again and runs (sealed is fine).
fn openbao_pod_running(sim: &crate::support::Sim) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let phase = || {
        kubectl(
            sim,
            &[
                "-n",
                "openbao",
                "get",
                "pod",
                "openbao-0",
                "-o",
                "jsonpath={.status.phase}",
            ],
        )
    };
    while phase() != "Running" {
        assert!(
            std::time::Instant::now() < deadline,
            "openbao-0: {}",
            phase()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// `sealed` of a `bao status -format=json` answer.
fn sealed(status: &str) -> serde_json::Value {
    let status: serde_json::Value =
        serde_json::from_str(status).unwrap_or_else(|e| panic!("{e}: {status}"));
    status["sealed"].clone()
}

fn openbao_status(sim: &crate::support::Sim) -> String {
    kubectl(
        sim,
        &[
            "-n",
            "openbao",
            "exec",
            "openbao-0",
            "--",
            "bao",
            "status",
            "-format=json",
        ],
    )
}

#[test]
fn an_openbao_whose_keys_were_lost_while_bprun_initialised_it_is_wiped_and_initialised_again_and_nothing_else_is()
 {
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    let init_file = copy.path().join("infra/secrets/openbao-init.json");
    let data = copy.path().join("infra/data/shared/stable/openbao");

    // OpenBao installed, then its step stopped before bao_init could reach it (no Service of
    // that name): installed, Running, uninitialised, no init file.
    let unreachable = copy
        .command(UP_TO_OPENBAO)
        .env("BAO_K8S_SERVICE", "openbao/no-such-service:8200")
        .output()
        .expect("run phase 2");
    let unreachable = crate::support::Output::raw(unreachable);
    assert_ne!(unreachable.code, 0, "{unreachable:?}");
    assert!(!init_file.exists());

    // A kill after bao_init created its empty 0600 file, before it asked OpenBao: the file
    // holds nothing, OpenBao is uninitialised; the run initialises it in the file's place.
    std::fs::create_dir_all(init_file.parent().expect("folder")).expect("infra/secrets");
    std::fs::write(&init_file, "").expect("empty init file");
    let initialised = copy.run(UP_TO_OPENBAO);
    initialised.code(0);
    initialised.stderr_lacks("never reached");
    let first: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&init_file).expect("init file")).expect("init JSON");
    let first_token = first["root_token"]
        .as_str()
        .expect("root token")
        .to_string();
    // The server keeps its raft storage on the volume: the node folder of PV stable-openbao.
    assert!(
        data.join("vault.db").is_file(),
        "no raft storage in {data:?}"
    );

    // A kill after OpenBao answered, before the answer reached the file: OpenBao initialised
    // (sealed, once restarted) with keys that exist nowhere, and the empty file.
    std::fs::write(&init_file, "").expect("empty init file");
    kubectl(
        &sim,
        &["-n", "openbao", "delete", "pod", "openbao-0", "--wait=true"],
    );
    openbao_pod_running(&sim);
    let uid = || {
        kubectl(
            &sim,
            &[
                "-n",
                "openbao",
                "get",
                "pod",
                "openbao-0",
                "-o",
                "jsonpath={.metadata.uid}",
            ],
        )
    };
    let uid_before = uid();

    // Check mode says what it would do, and does nothing.
    let check = settled(copy.run(&[UP_TO_OPENBAO, &["--check"]].concat()));
    // In check mode the warning before the plan says the storage "is wiped and OpenBao
    // initialised again", which check mode does not do (a wording defect): that line is left
    // out of the pinned text.
    let wording = "check mode's warning says the storage is wiped (a wording defect)";
    check.code(0).stderr("");
    check.partial_stdout(
        r##"check mode: nothing will be changed
[1/17] Pre-flight ... skipped (not selected by --only)
[2/17] Gateway API CRDs ... skipped (not selected by --only)
[3/17] local-path StorageClass ... ok (#.## s)
[4/17] Stable storage ... ok (#.## s)
[5/17] CloudNativePG ... skipped (not selected by --only)
[6/17] Redis ... skipped (not selected by --only)
[7/17] MinIO ... skipped (not selected by --only)
[8/17] OpenBao ...
    helm release openbao/openbao left alone: revision 1 of openbao-0.11.0 is deployed with the same chart digest and values
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
"##,
        wording,
    );
    check.partial_stdout(
        r##"
    ~ would wipe OpenBao's storage infra/data/shared/stable/openbao, then initialise it again (keys to infra/secrets/openbao-init.json), unseal, KV v2 at secret/
[8/17] OpenBao ... changed (#.## s)
[9/17] Wildcard TLS ... skipped (not selected by --only)
[10/17] CoreDNS rewrite ... skipped (not selected by --only)
[11/17] Restore GitLab secrets ... skipped (not selected by --only)
[12/17] Node trust ... skipped (not selected by --only)
[13/17] GitLab ... skipped (not selected by --only)
[14/17] Snapshot GitLab secrets ... skipped (not selected by --only)
[15/17] Registry hosts pin ... skipped (not selected by --only)
[16/17] Runner ... skipped (not selected by --only)
[17/17] Destroy ... skipped (not selected by --only)

Recap of scripts/phase2.rhai (check mode)
  #  step                     status       would change       time
  1  Pre-flight               skipped                 0          -
  2  Gateway API CRDs         skipped                 0          -
  3  local-path StorageClass  ok                      0 #.## s
  4  Stable storage           ok                      0 #.## s
  5  CloudNativePG            skipped                 0          -
  6  Redis                    skipped                 0          -
  7  MinIO                    skipped                 0          -
  8  OpenBao                  changed                 1 #.## s
  9  Wildcard TLS             skipped                 0          -
 10  CoreDNS rewrite          skipped                 0          -
 11  Restore GitLab secrets   skipped                 0          -
 12  Node trust               skipped                 0          -
 13  GitLab                   skipped                 0          -
 14  Snapshot GitLab secrets  skipped                 0          -
 15  Registry hosts pin       skipped                 0          -
 16  Runner                   skipped                 0          -
 17  Destroy                  skipped                 0          -
17 steps: 2 ok, 1 changed, 14 skipped, 0 failed in #.## s
"##,
        wording,
    );
    assert_eq!(std::fs::read(&init_file).expect("init file"), b"");
    assert!(data.join("vault.db").is_file(), "check mode wiped {data:?}");
    assert_eq!(uid(), uid_before, "check mode replaced the pod");

    // The run wipes the storage, initialises again, and keeps the new keys.
    let recovered = copy.run(UP_TO_OPENBAO);
    recovered.code(0);
    let said = format!("{}{}", recovered.stdout, recovered.stderr);
    for words in [
        "OpenBao is initialised, but its unseal keys and root token never reached infra/secrets/openbao-init.json",
        "nothing recoverable is lost",
        "its storage (infra/data/shared/stable/openbao) is wiped and OpenBao initialised again",
    ] {
        assert!(said.contains(words), "{words}:\n{said}");
    }
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&init_file).expect("init file")).expect("init JSON");
    let token = kept["root_token"].as_str().expect("root token");
    assert!(!token.is_empty() && token != first_token, "{token}");
    assert_ne!(uid(), uid_before, "the pod was not replaced");
    assert_eq!(sealed(&openbao_status(&sim)), false);
    assert!(!said.contains(token), "the root token was printed");

    // Converged: the next run changes nothing.
    kubectl(&sim, &["delete", "--raw", "/-/sim/requests"]);
    let again = copy.run(UP_TO_OPENBAO);
    again.code(0);
    assert_eq!(kube_mutating(&sim), 0, "{again:?}");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(&init_file).expect("init"))
            .expect("init JSON"),
        kept
    );

    // Any other state of the init file is refused, and nothing is wiped: an init file of
    // another OpenBao, and no init file at all (each with OpenBao restarted, so sealed).
    let good = std::fs::read(&init_file).expect("init file");
    // The shape of `bao operator init -format=json`'s answer, with a key of another OpenBao.
    let key = [0xa5u8; 32];
    let foreign = serde_json::json!({
        "keys": [key.iter().map(|b| format!("{b:02x}")).collect::<String>()],
        "keys_base64": [base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key)],
        "root_token": "s.foreign-root-token",
    })
    .to_string();
    let refusals = [
        (
            "foreign init file",
            Some(foreign.as_str()),
            "the file does not belong to this OpenBao",
        ),
        ("no init file", None, "cannot read the OpenBao init file"),
    ];
    for (case, file, reason) in refusals {
        match file {
            Some(text) => std::fs::write(&init_file, text).expect("write"),
            None => std::fs::remove_file(&init_file).expect("remove"),
        }
        kubectl(
            &sim,
            &["-n", "openbao", "delete", "pod", "openbao-0", "--wait=true"],
        );
        let refused = copy.run(UP_TO_OPENBAO);
        assert_ne!(refused.code, 0, "{case}: {refused:?}");
        let said = format!("{}{}", refused.stdout, refused.stderr);
        refused.partial_stderr(
            reason,
            "the two refusals differ beyond their reason (one names the copy's temporary path)",
        );
        assert!(!said.contains("never reached"), "{case}: {said}");
        assert!(data.join("vault.db").is_file(), "{case}: {data:?} wiped");
        match file {
            Some(text) => assert_eq!(std::fs::read_to_string(&init_file).expect("kept"), text),
            None => assert!(!init_file.exists(), "{case}: a file was written"),
        }
        // The same OpenBao, with its data: it unseals with the keys kept before.
        std::fs::write(&init_file, &good).expect("restore");
        copy.run(UP_TO_OPENBAO).code(0);
        assert_eq!(sealed(&openbao_status(&sim)), false, "{case}");
    }
}

#[test]
fn a_stale_role_password_in_the_restore_step_leaves_gitlab_unready_with_postgresqls_words() {
    // The restore step hands GitLab a password the role was not created with (a snapshot
    // older than the role's last password change): the real PostgreSQL refuses it.
    let copy = edited_phase2(|source| {
        source.replace(
            r#"#{password: role_passwords().gitlab}"#,
            r#"#{password: role_passwords().gitlab + "-stale"}"#,
        )
    });
    let run = settled(copy.run(&["rehearse", "scripts/phase2.rhai", "--wait-timeout", "20"]))
        .replace_regex(r"\(10\.96\.\d+\.\d+\)", "(<cluster ip>)")
        .replace_regex(r"(9fbc8mr2n9)-[a-z0-9]{5}_gitlab", "$1-<pod>_gitlab")
        .replace_regex(r"_gitlab\([0-9a-z-]+\)", "_gitlab(<uid>)")
        .replace_regex(r"\), \d+ restarts", "), <n> restarts");
    run.code(1);
    run.stderr(&format!(
        "{BARE_PLATFORM}{}",
        &crate::support::with_frame(r##"error: step "GitLab" failed
  × kube_wait Deployment/gitlab-webservice-default in gitlab: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: container webservice: CrashLoopBackOff (back-off 10s restarting failed container=webservice pod=gitlab-webservice-default-9fbc8mr2n9-<pod>_gitlab); last exit code 1 (Error: ActiveRecord::ConnectionNotEstablished: connection to server at "postgresql-cnpg-rw.postgresql.svc" (<cluster ip>),
  │ port 5432 failed: FATAL: password authentication failed for user "gitlab"), <n> restarts
<frame>
  caused by: Deployment/gitlab-webservice-default: replicas desired=1 ready=0 updated=1 available=0; conditions: Available=False (MinimumReplicasUnavailable: Deployment does not have minimum availability.), Progressing=True (ReplicaSetUpdated: ReplicaSet "gitlab-webservice-default-9fbc8mr2n9" is progressing.)
  caused by: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: Pod/gitlab-webservice-default-9fbc8mr2n9-<pod>: phase Running; container webservice waiting (CrashLoopBackOff: back-off 10s restarting failed container=webservice pod=gitlab-webservice-default-9fbc8mr2n9-<pod>_gitlab); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady: containers with unready status: [webservice]), Ready=False (ContainersNotReady: containers with unready status: [webservice])
  caused by: pod gitlab-webservice-default-9fbc8mr2n9-<pod>: event BackOff: Back-off restarting failed container webservice in pod gitlab-webservice-default-9fbc8mr2n9-<pod>_gitlab(<uid>)
  hint: this state does not resolve by waiting: fix the image, command or configuration
  when this step fails: a pod waiting for a Secret names it: gitlab-rails-storage comes from the MinIO step, gitlab-postgresql-password, gitlab-redis-password, gitlab-openbao-postgresql-password and gitlab-initial-root-password from the restore step, the listener Secrets from the wildcard TLS step; GitLab logging `FATAL: password authentication failed for user "gitlab"` means the restore step did not run before the install (infra/secrets/gitlab-runtime-secrets.yaml) or the role's password differs from infra/secrets/cnpg-role-passwords.json; Redis's `WRONGPASS` means gitlab-redis-password differs from infra/secrets/redis-password.txt; the bundled OpenBao's `failed SASL auth` means gitlab-openbao-postgresql-password differs from OpenBao's secret/openbao/postgresql, and its `hostname resolving error` for postgresql-cnpg-rw that the CloudNativePG step has not run
re-run with --resume to continue from here
warning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream
"##, &crate::support::source_frame(&crate::support::script_in(&copy, "scripts/phase2.rhai"), "scripts/phase2.rhai", "kube_wait(\"Deployment\", \"gitlab\", name, \"Available\", #{timeout: wait_timeout});", "kube_wait", "failed here"))
    ));
}

#[test]
fn the_bundled_openbao_with_a_stale_database_password_crash_loops_with_its_own_words() {
    // The restore step hands the bundled OpenBao a password the openbao role does not have.
    let copy = edited_phase2(|source| {
        source.replace(
            r#""gitlab-openbao-postgresql-password", #{password: openbao_role}"#,
            r#""gitlab-openbao-postgresql-password", #{password: openbao_role + "-stale"}"#,
        )
    });
    let run = settled(copy.run(&["rehearse", "scripts/phase2.rhai", "--wait-timeout", "20"]))
        .replace_regex(r"\(10\.96\.\d+\.\d+\)", "(<cluster ip>)")
        .replace_regex(
            r"gitlab-openbao-0_gitlab\([0-9a-z-]+\)",
            "gitlab-openbao-0_gitlab(<uid>)",
        )
        .replace_regex(r"\), \d+ restarts", "), <n> restarts");
    run.code(1);
    run.stderr(&format!(
        "{BARE_PLATFORM}{}{}{}",
        &crate::support::with_frame(r##"error: step "GitLab" failed
  × kube_wait StatefulSet/gitlab-openbao in gitlab: pod gitlab-openbao-0: container openbao: CrashLoopBackOff (back-off 10s restarting failed container=openbao pod=gitlab-openbao-0_gitlab); last exit code 1 (Error: error initializing storage of type postgresql: failed to connect to postgres: un…base=openbao`: postgresql-cnpg-rw.postgresql.svc:5432 (<cluster ip>): failed SASL auth: FATAL: password
  │ authentication failed for user "openbao" (SQLSTATE 28P01)), <n> restarts
<frame>
"##, &crate::support::source_frame(&crate::support::script_in(&copy, "scripts/phase2.rhai"), "scripts/phase2.rhai", "kube_wait(\"StatefulSet\", \"gitlab\", \"gitlab-openbao\", \"Rollout\", #{timeout: wait_timeout});", "kube_wait", "failed here")),
        OPENBAO_CRASH_LOOP,
        r##"re-run with --resume to continue from here
"##
    ));
}

/// The runner token OpenBao holds is verified against GitLab on every run: once GitLab no
/// longer knows it (the runner deleted in the UI, or GitLab restored from an older backup), a
/// check says so, the run replaces it and restarts the runner, which comes online again; a
/// converged run asks GitLab and changes nothing.
#[test]
fn a_runner_token_gitlab_no_longer_knows_is_replaced_and_the_runner_comes_online() {
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    copy.run(&["scripts/phase2.rhai"]).code(0);
    let runners = sim.api_json("runners/all?status=online");
    let old_id = runners[0]["id"].as_i64().expect("one online runner");
    assert_eq!(runners.as_array().map(Vec::len), Some(1), "{runners}");
    let deleted = sim.api("DELETE", &format!("runners/{old_id}"), None);
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let only = [
        "--only",
        "GitLab",
        "--only",
        "Runner",
        "scripts/phase2.rhai",
    ];
    let check: Vec<&str> = ["--check"].iter().chain(&only).copied().collect();
    settled(copy.run(&check)).expect(
        0,
        r##"
check mode: nothing will be changed
[1/17] Pre-flight ... skipped (not selected by --only)
[2/17] Gateway API CRDs ... skipped (not selected by --only)
[3/17] local-path StorageClass ... skipped (not selected by --only)
[4/17] Stable storage ... skipped (not selected by --only)
[5/17] CloudNativePG ... skipped (not selected by --only)
[6/17] Redis ... skipped (not selected by --only)
[7/17] MinIO ... skipped (not selected by --only)
[8/17] OpenBao ... skipped (not selected by --only)
[9/17] Wildcard TLS ... skipped (not selected by --only)
[10/17] CoreDNS rewrite ... skipped (not selected by --only)
[11/17] Restore GitLab secrets ... skipped (not selected by --only)
[12/17] Node trust ... skipped (not selected by --only)
[13/17] GitLab ...
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    helm release gitlab/gitlab left alone: revision 1 of gitlab-10.1.1 is deployed with the same chart digest and values
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
    a new runner token: GitLab does not know the one at secret/gitlab/runner/registration_token (restored from an older backup, or the runner was deleted)
    ~ would exec gitlab-rails in gitlab/app=toolbox
    ~ would write secret secret/gitlab/runner/registration_token
[13/17] GitLab ... changed (#.## s)
[14/17] Snapshot GitLab secrets ... skipped (not selected by --only)
[15/17] Registry hosts pin ... skipped (not selected by --only)
[16/17] Runner ...
    ~ would write Secret/gitlab-runner-token in gitlab-runner
    warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
    helm release gitlab-runner/gitlab-runner left alone: revision 1 of gitlab-runner-0.71.0 is deployed with the same chart digest and values
    ~ would restart Deployment/gitlab-runner in gitlab-runner
[16/17] Runner ... changed (#.## s)
[17/17] Destroy ... skipped (not selected by --only)

Recap of scripts/phase2.rhai (check mode)
  #  step                     status       would change       time
  1  Pre-flight               skipped                 0          -
  2  Gateway API CRDs         skipped                 0          -
  3  local-path StorageClass  skipped                 0          -
  4  Stable storage           skipped                 0          -
  5  CloudNativePG            skipped                 0          -
  6  Redis                    skipped                 0          -
  7  MinIO                    skipped                 0          -
  8  OpenBao                  skipped                 0          -
  9  Wildcard TLS             skipped                 0          -
 10  CoreDNS rewrite          skipped                 0          -
 11  Restore GitLab secrets   skipped                 0          -
 12  Node trust               skipped                 0          -
 13  GitLab                   changed                 2 #.## s
 14  Snapshot GitLab secrets  skipped                 0          -
 15  Registry hosts pin       skipped                 0          -
 16  Runner                   changed                 2 #.## s
 17  Destroy                  skipped                 0          -
17 steps: 0 ok, 2 changed, 15 skipped, 0 failed in #.## s
"##,
        "",
    );
    settled(copy.run(&only)).expect(
        0,
        r##"
[1/17] Pre-flight ... skipped (not selected by --only)
[2/17] Gateway API CRDs ... skipped (not selected by --only)
[3/17] local-path StorageClass ... skipped (not selected by --only)
[4/17] Stable storage ... skipped (not selected by --only)
[5/17] CloudNativePG ... skipped (not selected by --only)
[6/17] Redis ... skipped (not selected by --only)
[7/17] MinIO ... skipped (not selected by --only)
[8/17] OpenBao ... skipped (not selected by --only)
[9/17] Wildcard TLS ... skipped (not selected by --only)
[10/17] CoreDNS rewrite ... skipped (not selected by --only)
[11/17] Restore GitLab secrets ... skipped (not selected by --only)
[12/17] Node trust ... skipped (not selected by --only)
[13/17] GitLab ...
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    helm release gitlab/gitlab left alone: revision 1 of gitlab-10.1.1 is deployed with the same chart digest and values
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
    a new runner token: GitLab does not know the one at secret/gitlab/runner/registration_token (restored from an older backup, or the runner was deleted)
    ~ exec gitlab-rails in gitlab/app=toolbox
    ~ write secret secret/gitlab/runner/registration_token (version 2)
[13/17] GitLab ... changed (#.## s)
[14/17] Snapshot GitLab secrets ... skipped (not selected by --only)
[15/17] Registry hosts pin ... skipped (not selected by --only)
[16/17] Runner ...
    ~ write Secret/gitlab-runner-token in gitlab-runner
    warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
    helm release gitlab-runner/gitlab-runner left alone: revision 1 of gitlab-runner-0.71.0 is deployed with the same chart digest and values
    ~ restart Deployment/gitlab-runner in gitlab-runner
[16/17] Runner ... changed (#.## s)
[17/17] Destroy ... skipped (not selected by --only)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               skipped                 0          -
  2  Gateway API CRDs         skipped                 0          -
  3  local-path StorageClass  skipped                 0          -
  4  Stable storage           skipped                 0          -
  5  CloudNativePG            skipped                 0          -
  6  Redis                    skipped                 0          -
  7  MinIO                    skipped                 0          -
  8  OpenBao                  skipped                 0          -
  9  Wildcard TLS             skipped                 0          -
 10  CoreDNS rewrite          skipped                 0          -
 11  Restore GitLab secrets   skipped                 0          -
 12  Node trust               skipped                 0          -
 13  GitLab                   changed                 2 #.## s
 14  Snapshot GitLab secrets  skipped                 0          -
 15  Registry hosts pin       skipped                 0          -
 16  Runner                   changed                 2 #.## s
 17  Destroy                  skipped                 0          -
17 steps: 0 ok, 2 changed, 15 skipped, 0 failed in #.## s
"##,
        "",
    );
    // The new pod polls GitLab for jobs once it runs: online within 30 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let runners = loop {
        let runners = sim.api_json("runners/all?status=online");
        if runners.as_array().is_some_and(|list| !list.is_empty())
            || std::time::Instant::now() >= deadline
        {
            break runners;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    assert_eq!(runners.as_array().map(Vec::len), Some(1), "{runners}");
    assert_ne!(runners[0]["id"].as_i64(), Some(old_id), "{runners}");
    sim.clear_requests();
    settled(copy.run(&only)).expect(
        0,
        r##"
[1/17] Pre-flight ... skipped (not selected by --only)
[2/17] Gateway API CRDs ... skipped (not selected by --only)
[3/17] local-path StorageClass ... skipped (not selected by --only)
[4/17] Stable storage ... skipped (not selected by --only)
[5/17] CloudNativePG ... skipped (not selected by --only)
[6/17] Redis ... skipped (not selected by --only)
[7/17] MinIO ... skipped (not selected by --only)
[8/17] OpenBao ... skipped (not selected by --only)
[9/17] Wildcard TLS ... skipped (not selected by --only)
[10/17] CoreDNS rewrite ... skipped (not selected by --only)
[11/17] Restore GitLab secrets ... skipped (not selected by --only)
[12/17] Node trust ... skipped (not selected by --only)
[13/17] GitLab ...
    warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
    helm release gitlab/gitlab left alone: revision 1 of gitlab-10.1.1 is deployed with the same chart digest and values
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
[13/17] GitLab ... ok (#.## s)
[14/17] Snapshot GitLab secrets ... skipped (not selected by --only)
[15/17] Registry hosts pin ... skipped (not selected by --only)
[16/17] Runner ...
    warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
    helm release gitlab-runner/gitlab-runner left alone: revision 1 of gitlab-runner-0.71.0 is deployed with the same chart digest and values
[16/17] Runner ... ok (#.## s)
[17/17] Destroy ... skipped (not selected by --only)

Recap of scripts/phase2.rhai
  #  step                     status            changes       time
  1  Pre-flight               skipped                 0          -
  2  Gateway API CRDs         skipped                 0          -
  3  local-path StorageClass  skipped                 0          -
  4  Stable storage           skipped                 0          -
  5  CloudNativePG            skipped                 0          -
  6  Redis                    skipped                 0          -
  7  MinIO                    skipped                 0          -
  8  OpenBao                  skipped                 0          -
  9  Wildcard TLS             skipped                 0          -
 10  CoreDNS rewrite          skipped                 0          -
 11  Restore GitLab secrets   skipped                 0          -
 12  Node trust               skipped                 0          -
 13  GitLab                   ok                      0 #.## s
 14  Snapshot GitLab secrets  skipped                 0          -
 15  Registry hosts pin       skipped                 0          -
 16  Runner                   ok                      0 #.## s
 17  Destroy                  skipped                 0          -
17 steps: 2 ok, 0 changed, 15 skipped, 0 failed in #.## s
"##,
        "",
    );
    assert_eq!(sim.mutating_requests(), 0);

    // Without the fix, the runner is created as `Ci::Runner.create!` creates one by default
    // (registration_type registration_token): GitLab gives it a `glrtr-` token, not the `glrt-`
    // authentication token the runner chart's `runnerToken` needs, and the step stops before
    // storing it, showing only the prefix.
    let script = copy.path().join("scripts/phase2.rhai");
    let fixed = std::fs::read_to_string(&script).expect("phase2.rhai");
    let unfixed = fixed.replace("registration_type: :authenticated_user, ", "");
    assert_eq!(
        fixed.len() - unfixed.len(),
        2 * "registration_type: :authenticated_user, ".len()
    );
    std::fs::write(&script, &unfixed).expect("write phase2.rhai");
    let runners = sim.api_json("runners/all");
    let id = runners[0]["id"].as_i64().expect("the runner");
    let deleted = sim.api("DELETE", &format!("runners/{id}"), None);
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let refused = settled(copy.run(&only));
    refused.expect(
        1,
        &settled_recap(&with_recaps(
            r##"
            [1/17] Pre-flight ... skipped (not selected by --only)
            [2/17] Gateway API CRDs ... skipped (not selected by --only)
            [3/17] local-path StorageClass ... skipped (not selected by --only)
            [4/17] Stable storage ... skipped (not selected by --only)
            [5/17] CloudNativePG ... skipped (not selected by --only)
            [6/17] Redis ... skipped (not selected by --only)
            [7/17] MinIO ... skipped (not selected by --only)
            [8/17] OpenBao ... skipped (not selected by --only)
            [9/17] Wildcard TLS ... skipped (not selected by --only)
            [10/17] CoreDNS rewrite ... skipped (not selected by --only)
            [11/17] Restore GitLab secrets ... skipped (not selected by --only)
            [12/17] Node trust ... skipped (not selected by --only)
            [13/17] GitLab ...
                warning: infra/helm-charts/gitlab-10.1.1.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab (not the real gitlab 10.1.1; see its README)
                helm release gitlab/gitlab left alone: revision 1 of gitlab-10.1.1 is deployed with the same chart digest and values
                warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
                a new runner token: GitLab does not know the one at secret/gitlab/runner/registration_token (restored from an older backup, or the runner was deleted)
                ~ exec gitlab-rails in gitlab/app=toolbox
            [13/17] GitLab ... failed (#.## s)

            <recap of scripts/phase2.rhai: Pre-flight: skipped; Gateway API CRDs: skipped; local-path StorageClass: skipped; Stable storage: skipped; CloudNativePG: skipped; Redis: skipped; MinIO: skipped; OpenBao: skipped; Wildcard TLS: skipped; CoreDNS rewrite: skipped; Restore GitLab secrets: skipped; Node trust: skipped; GitLab: failed 1; Snapshot GitLab secrets: not run; Registry hosts pin: not run; Runner: not run; Destroy: not run>
            "##,
        )),
        &crate::support::with_frame(
            r##"
            error: step "GitLab" failed
              × gitlab-rails runner printed a runner token starting glrtr-, not glrt-: GitLab gives a glrt- authentication token only to a runner created with registration_type: :authenticated_user
            <frame>
              when this step fails: <the GitLab step's advice>
            re-run with --resume to continue from here
            "##,
            &crate::support::source_frame(
                &unfixed,
                "scripts/phase2.rhai",
                "throw `gitlab-rails runner printed a runner token starting",
                "throw",
                "thrown here",
            ),
        )
        .replace("<the GitLab step's advice>", GITLAB_STEP_ADVICE),
    );
}

/// Every secret phase 2 made is kept in OpenBao too: a checkout that lost infra/secrets/ and
/// infra/tls/wildcard/ (all but OpenBao's own init file, which the operator keeps elsewhere)
/// gets them back byte for byte from OpenBao, and phase 2 then changes nothing.
#[test]
fn a_checkout_that_lost_its_secrets_gets_them_back_from_openbao_and_phase2_changes_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    copy.run(&["scripts/phase2.rhai"]).code(0);
    let files = [
        "infra/secrets/cnpg-role-passwords.json",
        "infra/secrets/redis-password.txt",
        "infra/secrets/minio-root-user.txt",
        "infra/secrets/minio-root-password.txt",
        "infra/secrets/gitlab-runtime-secrets.yaml",
        "infra/tls/wildcard/ca.pem",
        "infra/tls/wildcard/ca-key.pem",
        "infra/tls/wildcard/cert.pem",
        "infra/tls/wildcard/key.pem",
    ];
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|file| std::fs::read(copy.path().join(file)).unwrap_or_else(|e| panic!("{file}: {e}")))
        .collect();
    for file in files {
        std::fs::remove_file(copy.path().join(file)).expect("remove");
    }
    settled(copy.run(&["--check", "scripts/restore-secrets.rhai"])).expect(
        0,
        "check mode: nothing will be changed
[1/2] OpenBao ...
    warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
[1/2] OpenBao ... ok (#.## s)
[2/2] Files ...
    ~ would create file infra/secrets/cnpg-role-passwords.json
    ~ would create file infra/secrets/redis-password.txt
    ~ would create file infra/secrets/minio-root-user.txt
    ~ would create file infra/secrets/minio-root-password.txt
    ~ would create file infra/tls/wildcard/ca.pem
    ~ would create file infra/tls/wildcard/ca-key.pem
    ~ would create file infra/tls/wildcard/cert.pem
    ~ would create file infra/tls/wildcard/key.pem
    ~ would create file infra/secrets/gitlab-runtime-secrets.yaml
[2/2] Files ... changed (#.## s)

Recap of scripts/restore-secrets.rhai (check mode)
  #  step     status       would change       time
  1  OpenBao  ok                      0 #.## s
  2  Files    changed                 9 #.## s
2 steps: 1 ok, 1 changed, 0 skipped, 0 failed in #.## s
",
        "",
    );
    copy.run(&["scripts/restore-secrets.rhai"]).code(0);
    for (file, bytes) in files.iter().zip(&before) {
        let path = copy.path().join(file);
        assert_eq!(&std::fs::read(&path).expect("restored"), bytes, "{file}");
        let mode = std::fs::metadata(&path).expect("mode").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    let again = copy.run(&["scripts/phase2.rhai"]);
    again.code(0);
    let recap = crate::phase3::recap_of(&again.stdout, "scripts/phase2.rhai");
    let changed: Vec<_> = recap
        .iter()
        .filter(|(_, status)| *status == "changed")
        .collect();
    assert_eq!(
        changed,
        Vec::<(&String, &String)>::new(),
        "{}",
        again.stdout
    );
}

/// infra/VERSIONS.json is the single source of the images: a values file that names an image it
/// does not pin, or a CI template that spells an image out or names a pin it does not have,
/// stops phase 2 at its pre-flight, naming each reference by file and line, before anything is
/// installed.
#[test]
fn an_image_that_versions_json_does_not_pin_stops_the_pre_flight_naming_where_it_is() {
    let copy = with_tools();
    for (file, from, to) in [
        (
            "infra/helm-values/runner.yaml",
            "concurrent: 4\n",
            "concurrent: 4\nhelper:\n  image: busybox:1.37\n",
        ),
        (
            "apps/shared-code/templates/ci-common.yml",
            "name: \"{images.kaniko}\"",
            "name: gcr.io/kaniko-project/executor:latest",
        ),
        (
            "templates/ci/shared-code.gitlab-ci.yml",
            "image: \"{images.alpine}\"",
            "image: \"{images.alpine-edge}\"",
        ),
    ] {
        let path = copy.path().join(file);
        let text = std::fs::read_to_string(&path).expect(file);
        assert!(text.contains(from), "{file}");
        std::fs::write(&path, text.replace(from, to)).expect(file);
    }
    // Where each reference stands in the edited files (read, not pinned: the files change).
    let line_of = |file: &str, text: &str| {
        let edited = std::fs::read_to_string(copy.path().join(file)).expect(file);
        let line = edited
            .lines()
            .position(|line| line.contains(text))
            .unwrap_or_else(|| panic!("{file} holds {text}"));
        format!("{file}:{}", line + 1)
    };
    let references = format!(
        "  caused by: {}: busybox:1.37 is not pinned\n  caused by: {}: {{images.alpine-edge}} names no pin\n  caused by: {}: gcr.io/kaniko-project/executor:latest is spelled out and not pinned: pin it, then write {{images.KEY}}\n",
        line_of("infra/helm-values/runner.yaml", "image: busybox:1.37"),
        line_of(
            "templates/ci/shared-code.gitlab-ci.yml",
            "{images.alpine-edge}"
        ),
        line_of(
            "apps/shared-code/templates/ci-common.yml",
            "gcr.io/kaniko-project/executor:latest"
        ),
    );
    let run = settled(copy.run(&["rehearse", "scripts/phase2.rhai"]));
    run.code(1);
    run.partial_stdout(
        "[1/17] Pre-flight ... failed (#.## s)\n",
        "the recap and the end state of the bare cluster follow",
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}error: step \"Pre-flight\" failed\n  × 3 image references are not read from infra/VERSIONS.json\n{}{references}{}",
        crate::support::script_frame(
            "scripts/phase2.rhai",
            "require_pinned_images(); // every image",
            "require_pinned_images",
            "failed here",
        ),
        "  hint: a values file names an image infra/VERSIONS.json's images pin; a CI template writes {images.KEY}; a new image is added there first (repository, tag, and its digest where one is known, else null: never an invented one)\nre-run with --resume to continue from here\nwarning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream\n"
    ));
}

#[test]
fn a_runner_that_does_not_trust_the_wildcard_ca_never_registers_and_says_why() {
    // The runner reaches GitLab through the gateway (gitlabUrl https://gitlab.local.example.net).
    // Without the chart's certsSecretName it verifies the gateway's certificate with its
    // image's roots only: `gitlab-runner register` fails with Go's x509 words and retries while
    // the pod stays Ready, so the step reads the runner's log rather than trusting Available.
    let copy = with_tools();
    let values = copy.path().join("infra/helm-values/runner.yaml");
    let text = std::fs::read_to_string(&values).expect("runner.yaml");
    let without = text.replace("certsSecretName: gitlab-runner-certs\n", "");
    assert_ne!(without, text, "runner.yaml names certsSecretName");
    std::fs::write(&values, without).expect("write runner.yaml");
    let run = settled(copy.run(&["rehearse", "scripts/phase2.rhai", "--wait-timeout", "20"]))
        .replace_regex(r"runner=[0-9A-Za-z_-]+ status=", "runner=<token> status=");
    run.code(1);
    run.partial_stdout(
        r##"
[16/17] Runner ...
    ~ create Namespace/gitlab-runner
    ~ write Secret/gitlab-runner-token in gitlab-runner
    ~ write Secret/gitlab-runner-certs in gitlab-runner
    warning: infra/helm-charts/gitlab-runner-0.71.0.tgz is not in the chart cache: using the stand-in chart infra/helm-charts/stand-ins/gitlab-runner (not the real gitlab-runner 0.71.0; see its README)
    ~ install helm release gitlab-runner/gitlab-runner from infra/helm-charts/stand-ins/gitlab-runner (not installed)
[16/17] Runner ... failed (#.## s)
"##,
        STEPS_BEFORE,
    );
    run.stderr(&format!(
        "{BARE_PLATFORM}{}",
        runner_unregistered(
            &crate::support::script_in(&copy, "scripts/phase2.rhai"),
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        )
    ));
}

/// What the Runner step says when the runner's registration keeps failing with Go's `why`
/// (after `Post "https://gitlab.local.example.net/api/v4/runners/verify": `), its frames from
/// `script` (the copy's phase 2), its token as `<token>`.
pub(crate) fn runner_unregistered(script: &str, why: &str) -> String {
    let called = crate::support::source_location(
        script,
        "scripts/phase2.rhai",
        "runner_registered(wait_timeout);",
    );
    crate::support::with_frame(
        r##"error: step "Runner" failed
  × the GitLab Runner has not registered: ERROR: Verifying runner... failed                   runner=<token> status=couldn't execute POST against https://gitlab.local.example.net/api/v4/runners/verify: Post "https://gitlab.local.example.net/api/v4/runners/verify": <why>
<frame>
  in fn runner_registered() called at <called>
  when this step fails: Runner never registers: the token is re-read from OpenBao (secret/gitlab/runner/registration_token), which the GitLab step verifies against GitLab and replaces when GitLab does not know it; a runner pod crash-looping with `is not valid` means GitLab forgot it after that step: re-run from the GitLab step; `no such host` for gitlab.local.example.net means the CoreDNS rewrite step has not run (the runner reaches GitLab through the gateway); `x509: certificate signed by unknown authority` means the runner does not trust the wildcard CA: the Secret gitlab-runner-certs (key gitlab.local.example.net.crt, from infra/tls/wildcard/ca.pem) and certsSecretName in infra/helm-values/runner.yaml
re-run with --resume to continue from here
"##,
        &crate::support::source_frame(
            script,
            "scripts/phase2.rhai",
            "throw `the GitLab Runner has not registered: ${refusal}`;",
            "throw",
            "thrown here",
        ),
    )
    .replace("<called>", &called)
    .replace("<why>", why)
}

/// The steps of scripts/phase2.rhai, in order (read from the script, so they follow its edits).
fn phase2_steps() -> Vec<String> {
    let source = crate::support::read_script("scripts/phase2.rhai");
    regex::Regex::new(r#"(?m)^step\("([^"]+)""#)
        .expect("regex")
        .captures_iter(&source)
        .map(|found| found[1].to_string())
        .collect()
}

/// The whole stdout of `bprun [--check] --only STEP scripts/phase2.rhai` as `settled` leaves
/// it: every other step skipped, `step` printing `body` (its lines, without their indent) and
/// ending `outcome` (`ok`, or `changed N`).
fn only_step_run(check: bool, step: &str, body: &str, outcome: &str) -> String {
    let steps = phase2_steps();
    let total = steps.len();
    let mut out = String::from(if check {
        "check mode: nothing will be changed\n"
    } else {
        ""
    });
    let mut recap = Vec::new();
    for (index, name) in steps.iter().enumerate() {
        let number = format!("[{}/{total}]", index + 1);
        if name == step {
            let status = outcome.split(' ').next().unwrap_or(outcome);
            if body.is_empty() {
                out.push_str(&format!("{number} {name} ... {status} (#.## s)\n"));
            } else {
                out.push_str(&format!("{number} {name} ...\n"));
                for line in body.lines() {
                    out.push_str(&format!("    {line}\n"));
                }
                out.push_str(&format!("{number} {name} ... {status} (#.## s)\n"));
            }
            recap.push(format!("{name}: {outcome}"));
        } else {
            out.push_str(&format!(
                "{number} {name} ... skipped (not selected by --only)\n"
            ));
            recap.push(format!("{name}: skipped"));
        }
    }
    let title = if check {
        "scripts/phase2.rhai (check mode)"
    } else {
        "scripts/phase2.rhai"
    };
    out.push('\n');
    out.push_str(&settled_recap(&format!(
        "{}\n",
        crate::support::expected_recap(title, &recap.join("; "))
    )));
    out
}

/// Runs `script` on node `node` of `sim` with its `/etc` at `/host`, as a node pod would (the
/// test's own hand: an operator's, or a node restart's).
fn on_node(sim: &crate::support::Sim, node: &str, name: &str, script: &str) -> String {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"restartPolicy": "Never", "nodeName": node,
                 "containers": [{"name": "look", "image": "docker.io/library/busybox:1.37",
                                 "command": ["sh", "-c", script],
                                 "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
                 "volumes": [{"name": "host", "hostPath": {"path": "/etc"}}]}
    });
    sim.kubectl_stdin(&["apply", "-f", "-"], &pod.to_string())
        .code(0);
    sim.kubectl(&[
        "wait",
        &format!("pod/{name}"),
        "--timeout=30s",
        "--for=jsonpath={.status.phase}=Succeeded",
    ])
    .code(0);
    kubectl(sim, &["logs", name])
}

#[test]
fn a_node_that_lost_its_registry_pin_gets_it_back_on_the_next_run() {
    // A restarted kind node comes back with its image's /etc/hosts, without phase 2's pin, and
    // nothing else about the node says so: the step reads each node's file, and repairs the
    // one node that lost it.
    let copy = with_tools();
    let sim = bare_platform_on(&copy);
    let copy = copy.envs(&fresh_platform_vars(&sim));
    copy.run(&["scripts/phase2.rhai"]).code(0);
    let pinned = on_node(
        &sim,
        "sim-worker2",
        "pinned",
        "grep ' registry.local.example.net$' /host/hosts",
    );
    let address = pinned
        .split(' ')
        .next()
        .expect("the pin's address")
        .to_string();
    assert_eq!(pinned, format!("{address} registry.local.example.net\n"));
    on_node(
        &sim,
        "sim-worker2",
        "restarted",
        "grep -v ' registry.local.example.net$' /host/hosts > /tmp/hosts; cat /tmp/hosts > /host/hosts",
    );
    let only = ["--only", "Registry hosts pin", "scripts/phase2.rhai"];
    let lost = format!(
        "node sim-worker2: /etc/hosts does not pin registry.local.example.net to {address}"
    );
    let check: Vec<&str> = ["--check"].iter().chain(&only).copied().collect();
    settled(copy.run(&check)).expect(
        0,
        &only_step_run(
            true,
            "Registry hosts pin",
            &format!("{lost}\n~ would exec registry-hosts on node sim-worker2"),
            "changed 1",
        ),
        "",
    );
    settled(copy.run(&only)).expect(
        0,
        &only_step_run(
            false,
            "Registry hosts pin",
            &format!("{lost}\n~ exec registry-hosts on node sim-worker2"),
            "changed 1",
        ),
        "",
    );
    assert_eq!(
        on_node(
            &sim,
            "sim-worker2",
            "repaired",
            "grep ' registry.local.example.net$' /host/hosts"
        ),
        pinned
    );
    settled(copy.run(&only)).expect(0, &only_step_run(false, "Registry hosts pin", "", "ok"), "");
}
