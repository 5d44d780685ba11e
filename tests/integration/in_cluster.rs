//! Issue #18: bprun in a pod. kube-rs reads a pod's service account from fixed paths
//! (`/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}`) and the API
//! server from `KUBERNETES_SERVICE_HOST`/`PORT`; the test runs the real binary in a private
//! mount namespace (`unshare -rm`) with a tmpfs over /run holding those files, no KUBECONFIG and
//! an empty HOME, against the Kubernetes simulator. So the code path is kube-rs's in-cluster one.

use crate::support::with_recaps;
use crate::support::{BPRUN, Output, Sim, SimKind, Test};
use base64::Engine;

const SCRIPT: &str = r#"step("In cluster", || {
    kube_apply(#{apiVersion: "v1", kind: "ConfigMap",
                 metadata: #{name: "written-from-a-pod", namespace: "default"}, data: #{a: "b"}});
    print(`namespaces: ${kube_list("Namespace", "").len() > 0}`);
    // The kubeconfig a pod hands to CI: its service account's server, CA and token.
    let config = base64_decode(kube_config_b64()).reveal();
    print(`server: ${config.contains("server: " + env("EXPECTED_SERVER"))}`);
    print(`token: ${config.contains("token: " + env("EXPECTED_TOKEN"))}`);
});
"#;

/// What a pod gets: the service-account folder (token, CA, namespace) and the API server.
struct ServiceAccount {
    dir: tempfile::TempDir,
    host: String,
    port: String,
    server: String,
}

fn service_account(sim: &Sim, token: &str) -> ServiceAccount {
    let jsonpath = |path: &str| {
        let output = sim.kubectl(&["config", "view", "--raw", "-o", &format!("jsonpath={path}")]);
        output.ok().to_string()
    };
    let server = jsonpath("{.clusters[0].cluster.server}");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(jsonpath(
            "{.clusters[0].cluster.certificate-authority-data}",
        ))
        .expect("CA data");
    let address = server.trim_start_matches("https://").to_string();
    let (host, port) = address.rsplit_once(':').expect("host:port");
    let dir = tempfile::tempdir().expect("service account");
    std::fs::write(dir.path().join("token"), token).expect("token");
    std::fs::write(dir.path().join("ca.crt"), ca).expect("ca");
    std::fs::write(dir.path().join("namespace"), "default").expect("namespace");
    ServiceAccount {
        host: host.to_string(),
        port: port.to_string(),
        server,
        dir,
    }
}

/// Runs bprun as in a pod: in its own mount namespace, /run a tmpfs holding the service
/// account's files (when `mounted`), no KUBECONFIG, HOME empty. Its output shows the API
/// server's address as `<server>` and HOME as `<home>`.
fn run_in_pod(test: &Test, account: &ServiceAccount, token: &str, mounted: bool) -> Output {
    run_in_pod_with(test, account, token, mounted, &["scripts/test.rhai"], &[])
}

fn run_in_pod_with(
    test: &Test,
    account: &ServiceAccount,
    token: &str,
    mounted: bool,
    args: &[&str],
    env: &[(String, String)],
) -> Output {
    let home = tempfile::tempdir().expect("home");
    let setup = if mounted {
        "mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && cp \"$1\"/* /run/secrets/kubernetes.io/serviceaccount/ && "
    } else {
        "mount -t tmpfs tmpfs /run && "
    };
    let output = std::process::Command::new("unshare")
        .args([
            "-rm",
            "sh",
            "-c",
            &format!("{setup}shift; exec \"$@\""),
            "sh",
        ])
        .arg(account.dir.path())
        .arg(BPRUN.path())
        .args(args)
        .current_dir(test.path())
        .env_clear()
        .envs(
            env.iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        )
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env("KUBERNETES_SERVICE_HOST", &account.host)
        .env("KUBERNETES_SERVICE_PORT", &account.port)
        .env("EXPECTED_SERVER", &account.server)
        .env("EXPECTED_TOKEN", token)
        .output()
        .expect("unshare");
    Output::normalized(output)
        .replace(&account.server, "<server>")
        .replace(&home.path().display().to_string(), "<home>")
}

#[test]
fn in_a_pod_bprun_uses_the_service_account_without_a_kubeconfig() {
    let sim = Sim::start(BPRUN, SimKind::Kube, &[]);
    let token = sim
        .kubectl(&[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.users[0].user.token}",
        ])
        .ok()
        .to_string();
    assert!(token.starts_with("sim-"), "{token}");
    let account = service_account(&sim, &token);
    let test = BPRUN.test().script(SCRIPT);

    let run = run_in_pod(&test, &account, &token, true);
    run.expect(
        0,
        &with_recaps(
            "
        [1/1] In cluster ...
            ~ create ConfigMap/written-from-a-pod in default
            namespaces: true
            server: true
            token: true
        [1/1] In cluster ... changed (#.## s)

        <recap of scripts/test.rhai: In cluster: changed 1>
        ",
        ),
        "",
    );
    let written = sim.kubectl(&["-n", "default", "get", "configmap", "written-from-a-pod"]);
    written.success();

    // The files made it work: without them there is no configuration at all ...
    let without = run_in_pod(&test, &account, &token, false);
    let failed = "
        [1/1] In cluster ... failed (#.## s)

        Recap of scripts/test.rhai
          #  step        status            changes       time
          1  In cluster  failed                  0     #.## s
        1 step: 0 ok, 0 changed, 0 skipped, 1 failed in #.## s
    ";
    let apply_failed = |error: &str, hint: &str| {
        format!(
            "error: step \"In cluster\" failed\n  × {error}\n{}  hint: {hint}\nre-run with --resume to continue from here\n",
            concat!(
                "   ╭─[scripts/test.rhai:2:5]\n",
                " 1 │ step(\"In cluster\", || {\n",
                " 2 │     kube_apply(#{apiVersion: \"v1\", kind: \"ConfigMap\",\n",
                "   ·     ─────┬────\n",
                "   ·          ╰── failed here\n",
                " 3 │                  metadata: #{name: \"written-from-a-pod\", namespace: \"default\"}, data: #{a: \"b\"}});\n",
                "   ╰────\n",
            )
        )
    };
    without.expect(
        1,
        failed,
        &apply_failed(
            "no Kubernetes configuration: failed to infer config: in-cluster: (failed to read the default namespace: No such file or directory (os error 2)), kubeconfig: (failed to read kubeconfig from '\"<home>/.kube/config\"': No such file or directory (os error 2))",
            "set KUBECONFIG (for the simulator: `bprun sim kube` prints it)",
        ),
    );
    // ... and with a token the API server does not know, it answers 401.
    let stranger = service_account(&sim, "sim-not-the-token");
    let refused = run_in_pod(&test, &stranger, "sim-not-the-token", true);
    refused.expect(
        1,
        failed,
        &apply_failed(
            "discovery on <server>/: 401 Unauthorized: Unauthorized",
            "the cluster refused the credentials: check KUBECONFIG and its user",
        ),
    );
}

/// The ServiceAccount `bprun/bprun` with deploy/kubernetes's RBAC, as an operator sets it up:
/// its token from the TokenRequest API (`kubectl create token`), its namespace in the pod.
fn deployed_account(sim: &Sim) -> (ServiceAccount, String) {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    for file in [
        "00-namespace.yaml",
        "10-serviceaccount.yaml",
        "20-rbac.yaml",
        "22-ci-deployer-role.yaml",
        "24-ci-deployers.yaml",
    ] {
        let path = deploy.join(file);
        sim.kubectl(&["apply", "-f", path.to_str().expect("utf-8")])
            .success();
    }
    let token = sim
        .kubectl(&["create", "token", "bprun", "-n", "bprun"])
        .ok()
        .trim()
        .to_string();
    let account = service_account(sim, &token);
    std::fs::write(account.dir.path().join("namespace"), "bprun").expect("namespace");
    (account, token)
}

#[test]
fn phase3_runs_in_a_pod_as_the_deployed_service_account_and_its_pipelines_deploy_as_their_own() {
    let sim = Sim::start(BPRUN, SimKind::All, &[]);
    let (account, token) = deployed_account(&sim);
    // The token is the account's: RBAC decides, in the API server's words.
    let whoami = sim.kubectl(&[
        "auth",
        "whoami",
        "--token",
        &token,
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(whoami.ok(), "system:serviceaccount:bprun:bprun");
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i", "--token", &token];
        all.extend_from_slice(args);
        sim.kubectl(&all).stdout.trim().to_string()
    };
    assert_eq!(
        can(&["create", "pods", "--subresource=exec", "-n", "gitlab"]),
        "yes"
    );
    // `pods/exec` would be the pod named exec, which the Role lets no one create.
    assert_eq!(can(&["create", "pods/exec", "-n", "gitlab"]), "no");
    assert_eq!(can(&["list", "secrets", "-n", "gitlab"]), "no");
    let refused = sim.kubectl(&["get", "secrets", "-n", "gitlab", "--token", &token]);
    refused.expect(1, "", "Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:bprun:bprun\" cannot list resource \"secrets\" in API group \"\" in the namespace \"gitlab\"\n");

    // Phase 3, in the pod: the platform's addresses and tokens from the environment, the
    // cluster from the service account (no kubeconfig). What phase 3 does in the cluster (the
    // registry's port-forward, the toolbox's exec) is within the Role.
    let env: Vec<(String, String)> = sim
        .vars()
        .iter()
        .filter(|(key, _)| key != "KUBECONFIG")
        .cloned()
        .collect();
    let copy = BPRUN.test_in_repository_copy();
    sim.platform_files(copy.path());
    sim.platform_files(copy.path());
    // What differs from run to run: pipeline numbers and commits (projects are created in
    // parallel, commits carry their time), how long pipelines take (the recap's columns are
    // aligned to the durations' width; the smoke test says "waiting for" a pipeline as often as
    // it happens to wait), and the order of the lines of work done in parallel (projects and
    // pipelines), compared sorted.
    let phase3_in_pod = || {
        run_in_pod_with(
            &copy,
            &account,
            &token,
            true,
            &["scripts/phase3.rhai"],
            &env,
        )
        .replace(sim.var("GITLAB_URL"), "<gitlab>")
        .replace_regex(r"#\d+ of", "#<n> of")
        .replace_regex(r"/pipelines/\d+", "/pipelines/<n>")
        .replace_regex(r"\([0-9a-f]{8}\)", "(<sha>)")
        .replace_regex(r"Checking out [0-9a-f]{8} ", "Checking out <sha> ")
        .replace_regex(r" +#\.## s\n", " #.## s\n")
        .replace_regex(
            r"(?m)^(    pipeline #<n> of \S+: \w+) \(\d+ s\)$",
            "$1 (# s)",
        )
        .replace_regex(r"(?m)^    waiting for pipeline .*\n", "")
        // Which states a wait sees before the last one (pending, running) depends on when it
        // polls: only the final state of each pipeline is compared.
        .replace_regex(
            r"(?m)^    pipeline #<n> of \S+: (created|waiting_for_resource|preparing|pending|running|scheduled) \(# s\)\n",
            "",
        )
        .sorted_between(
            "[5/7] Provision projects ...",
            "[5/7] Provision projects ... ",
        )
        .sorted_between("[6/7] Smoke test ...", "[6/7] Smoke test ... ")
    };
    let run = phase3_in_pod();
    // Phase 3 stays within deploy/'s RBAC: the Role in gitlab, and what creating the apps'
    // identities takes (it holds none of the deployers' rules, it may only bind their
    // ClusterRole). The apps' pipelines deploy with their own accounts' tokens and pass.
    run.expect(
        0,
        "
        [1/7] Pre-flight ... ok (#.## s)
        [2/7] Mint PAT ...
            ~ exec gitlab-rails in gitlab/app=toolbox
            ~ write secret secret/gitlab/bootstrap/admin_token (version 1)
        [2/7] Mint PAT ... changed (#.## s)
        [3/7] Seed glab auth ... skipped: glab is not installed; nothing to seed (#.## s)
        [4/7] Ensure group ...
            ~ create group blueprint-apps (internal)
        [4/7] Ensure group ... changed (#.## s)
        [5/7] Provision projects ...
            ~ clone <gitlab>/blueprint-apps/guestbook.git into apps-local/blueprint-apps/guestbook
            ~ clone <gitlab>/blueprint-apps/redis-slave.git into apps-local/blueprint-apps/redis-slave
            ~ clone <gitlab>/blueprint-apps/redis.git into apps-local/blueprint-apps/redis
            ~ clone <gitlab>/blueprint-apps/shared-code.git into apps-local/blueprint-apps/shared-code
            ~ commit and push apps-local/blueprint-apps/guestbook (<sha>)
            ~ commit and push apps-local/blueprint-apps/redis (<sha>)
            ~ commit and push apps-local/blueprint-apps/redis-slave (<sha>)
            ~ commit and push apps-local/blueprint-apps/shared-code (<sha>)
            ~ create CI variable CI_HELM_CHART_DIR of blueprint-apps/guestbook
            ~ create CI variable CI_HELM_CHART_DIR of blueprint-apps/redis
            ~ create CI variable CI_HELM_CHART_DIR of blueprint-apps/redis-slave
            ~ create CI variable CI_HELM_CHART_DIR of blueprint-apps/shared-code
            ~ create CI variable CI_KUBECONFIG_B64 of blueprint-apps/guestbook
            ~ create CI variable CI_KUBECONFIG_B64 of blueprint-apps/redis
            ~ create CI variable CI_KUBECONFIG_B64 of blueprint-apps/redis-slave
            ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/guestbook
            ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/redis
            ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/redis-slave
            ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/shared-code
            ~ create Namespace/guestbook
            ~ create Namespace/redis-demo
            ~ create Namespace/redis-slave-demo
            ~ create RoleBinding/ci-deployer in guestbook
            ~ create RoleBinding/ci-deployer in redis-demo
            ~ create RoleBinding/ci-deployer in redis-slave-demo
            ~ create ServiceAccount/ci-deployer in guestbook
            ~ create ServiceAccount/ci-deployer in redis-demo
            ~ create ServiceAccount/ci-deployer in redis-slave-demo
            ~ create file apps-local/blueprint-apps/guestbook/.gitlab-ci.yml
            ~ create file apps-local/blueprint-apps/redis-slave/.gitlab-ci.yml
            ~ create file apps-local/blueprint-apps/redis/.gitlab-ci.yml
            ~ create file apps-local/blueprint-apps/shared-code/.gitlab-ci.yml
            ~ create file apps-local/blueprint-apps/shared-code/templates/ci-common.yml
            ~ create project blueprint-apps/guestbook
            ~ create project blueprint-apps/redis
            ~ create project blueprint-apps/redis-slave
            ~ create project blueprint-apps/shared-code
            ~ create protected branch blueprint-apps/guestbook main
            ~ create protected branch blueprint-apps/redis main
            ~ create protected branch blueprint-apps/redis-slave main
            ~ create protected branch blueprint-apps/shared-code main
            ~ sync apps-local/blueprint-apps/guestbook from apps/guestbook (9 created, 0 updated, 0 deleted)
            ~ sync apps-local/blueprint-apps/redis from apps/redis (4 created, 0 updated, 0 deleted)
            ~ sync apps-local/blueprint-apps/redis-slave from apps/redis-slave (4 created, 0 updated, 0 deleted)
            ~ sync apps-local/blueprint-apps/shared-code from apps/shared-code (1 created, 0 updated, 0 deleted)
        [5/7] Provision projects ... changed (#.## s)
        [6/7] Smoke test ...
            pipeline #<n> of blueprint-apps/guestbook: success (# s)
            pipeline #<n> of blueprint-apps/redis-slave: success (# s)
            pipeline #<n> of blueprint-apps/redis: success (# s)
            pipeline #<n> of blueprint-apps/shared-code: success (# s)
            ~ start pipeline of blueprint-apps/guestbook on main
            ~ start pipeline of blueprint-apps/redis on main
            ~ start pipeline of blueprint-apps/redis-slave on main
            ~ start pipeline of blueprint-apps/shared-code on main
        [6/7] Smoke test ... changed (#.## s)
        [7/7] Workloads reachable ...
            https://guestbook.local.example.net/ answers 200 through the gateway
        [7/7] Workloads reachable ... ok (#.## s)

        Recap of scripts/phase3.rhai
          #  step                 status            changes       time
          1  Pre-flight           ok                      0 #.## s
          2  Mint PAT             changed                 2 #.## s
          3  Seed glab auth       skipped                 0 #.## s
          4  Ensure group         changed                 1 #.## s
          5  Provision projects   changed                45 #.## s
          6  Smoke test           changed                 4 #.## s
          7  Workloads reachable  ok                      0 #.## s
        7 steps: 2 ok, 4 changed, 1 skipped, 0 failed in #.## s
        ",
        "",
    );
    // bprun's own account never got a deploying role: it may not read the apps' Secrets.
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i", "--token", &token];
        all.extend_from_slice(args);
        sim.kubectl(&all).stdout.trim().to_string()
    };
    assert_eq!(can(&["list", "secrets", "-n", "guestbook"]), "no");
    assert_eq!(can(&["create", "deployments", "-n", "guestbook"]), "no");
    // A second run in the pod keeps the tokens and changes nothing.
    let again = phase3_in_pod();
    again.expect(
        0,
        &(crate::phase3::PROVISIONED.to_string()
            + bprun_testkit::unindent(
                "
            pipeline #<n> of blueprint-apps/guestbook: success (# s)
            pipeline #<n> of blueprint-apps/redis-slave: success (# s)
            pipeline #<n> of blueprint-apps/redis: success (# s)
            pipeline #<n> of blueprint-apps/shared-code: success (# s)
        [6/7] Smoke test ... ok (#.## s)
        [7/7] Workloads reachable ...
            https://guestbook.local.example.net/ answers 200 through the gateway
        [7/7] Workloads reachable ... ok (#.## s)

        Recap of scripts/phase3.rhai
          #  step                 status            changes       time
          1  Pre-flight           ok                      0 #.## s
          2  Mint PAT             ok                      0 #.## s
          3  Seed glab auth       skipped                 0 #.## s
          4  Ensure group         ok                      0 #.## s
          5  Provision projects   ok                      0 #.## s
          6  Smoke test           ok                      0 #.## s
          7  Workloads reachable  ok                      0 #.## s
        7 steps: 6 ok, 0 changed, 1 skipped, 0 failed in #.## s
        ",
            )
            .as_str()),
        "",
    );

    // Without the RoleBinding the same run stops at its first cluster call, saying why (Mint
    // PAT, which runs beside the pre-flight, only reads the stored PAT back).
    sim.kubectl(&["delete", "rolebinding", "bprun-phase3", "-n", "gitlab"])
        .success();
    let denied = phase3_in_pod();
    denied.expect(
        1,
        "
        [1/7] Pre-flight ... failed (#.## s)
        [2/7] Mint PAT ...
            admin PAT already in OpenBao; reusing
        [2/7] Mint PAT ... ok (#.## s)

        Recap of scripts/phase3.rhai
          #  step                 status            changes       time
          1  Pre-flight           failed                  0 #.## s
          2  Mint PAT             ok                      0 #.## s
          3  Seed glab auth       not run                 0          -
          4  Ensure group         not run                 0          -
          5  Provision projects   not run                 0          -
          6  Smoke test           not run                 0          -
          7  Workloads reachable  not run                 0          -
        7 steps: 1 ok, 0 changed, 0 skipped, 1 failed, 5 not run in #.## s
        ",
        &format!(
            r#"
        error: step "Pre-flight" failed
          × kube_get services/gitlab-registry in gitlab: 403 Forbidden: services "gitlab-registry" is forbidden: User "system:serviceaccount:bprun:bprun" cannot get resource "services" in API group "" in the namespace "gitlab"
        {}  in a closure called at {}
          hint: the kubeconfig's user may not do this: check its RBAC
          when this step fails: GitLab not answering: GITLAB_URL, and phase 2's GitLab step (kubectl -n gitlab get pods); OpenBao sealed or unreachable: BAO_ADDR, and phase 2's OpenBao step (it unseals with infra/secrets/openbao-init.json); the in-cluster registry not answering: kubectl -n gitlab get pods -l app=registry; an app folder or CI template missing: apps/apps_manifest.yaml names what it needs; a 403 from the cluster in a pod: deploy/kubernetes/20-rbac.yaml
        re-run with --resume to continue from here
        "#,
            // The frame, indented as the rest of this text.
            crate::support::script_frame(
                "scripts/phase3.rhai",
                "let registry = kube_port_forward(\"gitlab\", \"svc/gitlab-registry\", 5000)",
                "kube_port_forward",
                "failed here"
            )
            .replace('\n', "\n        "),
            crate::support::script_location_after(
                "scripts/phase3.rhai",
                "step(\"Pre-flight\"",
                "concurrently(["
            ),
        ),
    );
    // A deleted account's token no longer authenticates.
    sim.kubectl(&["delete", "serviceaccount", "bprun", "-n", "bprun"])
        .success();
    let gone = sim.kubectl(&["get", "pods", "-n", "gitlab", "--token", &token]);
    gone.expect(
        1,
        "",
        "error: You must be logged in to the server (Unauthorized)\n",
    );
}

/// The lines of the stdout between a line `from` and the next line starting with `to`,
/// sorted: for work done in parallel, whose lines come in any order.
pub(crate) trait SortedBetween {
    fn sorted_between(self, from: &str, to: &str) -> Self;
}

impl SortedBetween for Output {
    fn sorted_between(mut self, from: &str, to: &str) -> Output {
        let lines: Vec<&str> = self.stdout.split('\n').collect();
        let Some(start) = lines.iter().position(|line| *line == from) else {
            return self;
        };
        let Some(length) = lines[start + 1..]
            .iter()
            .position(|line| line.starts_with(to))
        else {
            return self;
        };
        let mut block = lines[start + 1..start + 1 + length].to_vec();
        block.sort_unstable();
        let sorted: Vec<&str> = lines[..=start]
            .iter()
            .chain(&block)
            .chain(&lines[start + 1 + length..])
            .copied()
            .collect();
        self.stdout = sorted.join("\n");
        self
    }
}
