//! The rehearsal's network: phase 2's CoreDNS rewrite, node trust and registry hosts pin are
//! what let phase 3's jobs fetch and push and its apps' pods pull, as on a kind cluster. Each
//! test breaks one of them in a copy of the repository, rehearses phases 2 and 3, and pins the
//! error from its headline on (the steps before it are pinned by the passing rehearsals).

use crate::support::{Output, assert_text, moved_first, without_step};

/// A copy of the repository with the real tools, `phase2.rhai` edited by `edit` (which must
/// change it), and the apps' deploy jobs waiting 20 s instead of 5 minutes for their workloads.
fn copy_with(edit: impl Fn(&str) -> String) -> crate::support::Test {
    copy_editing("scripts/phase2.rhai", edit)
}

/// [`copy_with`] for another file of the repository.
fn copy_editing(file: &str, edit: impl Fn(&str) -> String) -> crate::support::Test {
    let copy = crate::phase2::with_tools();
    let path = copy.path().join(file);
    let source = std::fs::read_to_string(&path).expect("the file to edit");
    let edited = edit(&source);
    assert_ne!(edited, source, "the edit changed nothing");
    std::fs::write(&path, edited).expect("write the edited file");
    let common = copy.path().join("apps/shared-code/templates/ci-common.yml");
    let text = std::fs::read_to_string(&common).expect("ci-common.yml");
    assert!(text.contains("--timeout 5m"), "the deploy job's timeout");
    std::fs::write(&common, text.replace("--timeout 5m", "--timeout 20s")).expect("write");
    copy
}

/// Rehearses phases 2 and 3 in `copy`; its stderr from the failing step's headline on, then the
/// guestbook's line of the end state, with what differs between runs as placeholders.
fn rehearse_failing(copy: &crate::support::Test) -> String {
    let run: Output = copy
        .run(&[
            "rehearse",
            "scripts/phase2.rhai",
            "scripts/phase3.rhai",
            "--wait-timeout",
            "20",
        ])
        .replace_regex(r"127\.0\.0\.1:\d{4,5}", "127.0.0.1:<port>")
        .replace_regex(
            r"guestbook-([a-z0-9]{10})-[a-z0-9]{5}\b",
            "guestbook-$1-<pod>",
        )
        .replace_regex(r"pipelines/\d+", "pipelines/<id>")
        .replace_regex(r"pipeline #\d+", "pipeline #<id>")
        .replace_regex(r"Checking out [0-9a-f]{8}", "Checking out <sha>")
        .replace_regex(r"coredns-[a-z0-9]{10}-[a-z0-9]{5}", "coredns-<hash>-<pod>")
        .replace_regex(r#""coredns-[a-z0-9]{10}""#, "\"coredns-<hash>\"")
        .replace_regex(r"_kube-system\([0-9a-z-]+\)", "_kube-system(<uid>)")
        .replace_regex(r"\), \d+ restarts", "), <n> restarts")
        .replace_regex(r"runner=[0-9A-Za-z_-]+ status=", "runner=<token> status=");
    run.code(1);
    let at = run.stderr.find("error: step").expect("a failed step");
    // The apps' workloads in the end state, with why an unready one waits.
    let workloads: String = run
        .stdout
        .lines()
        .filter(|line| line.starts_with("  Deployment/guestbook "))
        .map(|line| format!("{line}\n"))
        .collect();
    format!("{}{workloads}", &run.stderr[at..])
}

/// What phase 2 says when its runner cannot resolve GitLab's external host (no CoreDNS rewrite,
/// or a rewrite to a Service that does not exist), and that the rehearsal stopped there.
fn runner_cannot_resolve_gitlab(copy: &crate::support::Test) -> String {
    format!(
        "{}rehearsal stopped: scripts/phase2.rhai failed, so scripts/phase3.rhai did not run\n",
        crate::phase2::runner_unregistered(
            &crate::support::script_in(copy, "scripts/phase2.rhai"),
            "dial tcp: lookup gitlab.local.example.net on 10.96.0.10:53: no such host",
        )
    )
}

/// What phase 3 says when its jobs cannot fetch from GitLab's external host, in curl's words
/// `why`: every project's first job fails.
fn no_fetch(why: &str) -> String {
    format!(
        r##"error: step "Smoke test" failed
  × gitlab: 4 of 4 pipelines did not succeed
{}  caused by: gitlab: pipeline #<id> of blueprint-apps/shared-code failed
    job lint-templates failed; end of its trace:
    Running with gitlab-runner 17.9.0 (bprun-sim)
      on blueprint gitlab-runner 
    Preparing the "kubernetes" executor
    Using Kubernetes executor with image alpine:3.20 ...
    Getting source from Git repository
    Initialized empty Git repository in /builds/blueprint-apps/shared-code/.git/
    Created fresh repository.
    fatal: unable to access 'https://gitlab.local.example.net/blueprint-apps/shared-code.git/': {why}
    ERROR: Job failed: exit code 1
    (open http://127.0.0.1:<port>/blueprint-apps/shared-code/-/pipelines/<id>)
  caused by: gitlab: pipeline #<id> of blueprint-apps/guestbook failed
    job lint failed; end of its trace:
    Running with gitlab-runner 17.9.0 (bprun-sim)
      on blueprint gitlab-runner 
    Preparing the "kubernetes" executor
    Using Kubernetes executor with image alpine/helm:3.16.4 ...
    Getting source from Git repository
    Initialized empty Git repository in /builds/blueprint-apps/guestbook/.git/
    Created fresh repository.
    fatal: unable to access 'https://gitlab.local.example.net/blueprint-apps/guestbook.git/': {why}
    ERROR: Job failed: exit code 1
    (open http://127.0.0.1:<port>/blueprint-apps/guestbook/-/pipelines/<id>)
  caused by: gitlab: pipeline #<id> of blueprint-apps/redis failed
    job lint failed; end of its trace:
    Running with gitlab-runner 17.9.0 (bprun-sim)
      on blueprint gitlab-runner 
    Preparing the "kubernetes" executor
    Using Kubernetes executor with image alpine/helm:3.16.4 ...
    Getting source from Git repository
    Initialized empty Git repository in /builds/blueprint-apps/redis/.git/
    Created fresh repository.
    fatal: unable to access 'https://gitlab.local.example.net/blueprint-apps/redis.git/': {why}
    ERROR: Job failed: exit code 1
    (open http://127.0.0.1:<port>/blueprint-apps/redis/-/pipelines/<id>)
  caused by: gitlab: pipeline #<id> of blueprint-apps/redis-slave failed
    job lint failed; end of its trace:
    Running with gitlab-runner 17.9.0 (bprun-sim)
      on blueprint gitlab-runner 
    Preparing the "kubernetes" executor
    Using Kubernetes executor with image alpine/helm:3.16.4 ...
    Getting source from Git repository
    Initialized empty Git repository in /builds/blueprint-apps/redis-slave/.git/
    Created fresh repository.
    fatal: unable to access 'https://gitlab.local.example.net/blueprint-apps/redis-slave.git/': {why}
    ERROR: Job failed: exit code 1
    (open http://127.0.0.1:<port>/blueprint-apps/redis-slave/-/pipelines/<id>)
  hint: each failed pipeline is listed above with its URL
  when this step fails: a job that cannot fetch (`Could not resolve host: gitlab.local.example.net`) or push (`lookup registry.local.example.net ... no such host`) means phase 2's CoreDNS rewrite is missing or names the wrong Service; one that fails TLS (git's `SSL certificate problem: unable to get local issuer certificate`, kaniko's `x509: certificate signed by unknown authority` at .../jwt/auth) runs on a runner that does not give its jobs the wildcard CA: phase 2's Runner step (gitlabUrl https://gitlab.local.example.net, certsSecretName); an app's pod in ImagePullBackOff (kubectl describe pod; the rehearsal's end state shows it) names containerd's reason: `no such host` on the node's resolver is phase 2's registry hosts pin, `x509: certificate signed by unknown authority` its node trust step, `i/o timeout` or `connection refused` a pin to the wrong address
re-run with --resume to continue from here
"##,
        crate::phase3::smoke_wait_source(),
        why = why,
    )
}

/// What phase 3 says when the guestbook's deploy job timed out waiting for a pod that cannot pull
/// its image (helm's words only), before the end state's guestbook line.
fn deploy_timed_out() -> String {
    format!(
        r##"error: step "Smoke test" failed
  × gitlab: pipeline #<id> of blueprint-apps/guestbook failed
{}  caused by: job deploy failed; end of its trace:
    Checking out <sha> as detached HEAD (ref is main)...
    Skipping Git submodules setup
    Executing "step_script" stage of the job script
    $ echo "$CI_KUBECONFIG_B64" | base64 -d > /tmp/kubeconfig
    $ export KUBECONFIG=/tmp/kubeconfig
    $ helm upgrade --install "$HELM_RELEASE" "$CI_HELM_CHART_DIR" --namespace "$HELM_NAMESPACE" --wait --timeout 20s
    Release "guestbook" does not exist. Installing it now.
    Error: context deadline exceeded
    Cleaning up project directory and file based variables
    ERROR: Job failed: exit code 1
  hint: open http://127.0.0.1:<port>/blueprint-apps/guestbook/-/pipelines/<id>
  when this step fails: a job that cannot fetch (`Could not resolve host: gitlab.local.example.net`) or push (`lookup registry.local.example.net ... no such host`) means phase 2's CoreDNS rewrite is missing or names the wrong Service; one that fails TLS (git's `SSL certificate problem: unable to get local issuer certificate`, kaniko's `x509: certificate signed by unknown authority` at .../jwt/auth) runs on a runner that does not give its jobs the wildcard CA: phase 2's Runner step (gitlabUrl https://gitlab.local.example.net, certsSecretName); an app's pod in ImagePullBackOff (kubectl describe pod; the rehearsal's end state shows it) names containerd's reason: `no such host` on the node's resolver is phase 2's registry hosts pin, `x509: certificate signed by unknown authority` its node trust step, `i/o timeout` or `connection refused` a pin to the wrong address
re-run with --resume to continue from here
"##,
        crate::phase3::smoke_wait_source()
    )
}

/// The deploy job's timeout, then the end state's guestbook line with containerd's reason `why`
/// (what follows the manifest request).
fn unpullable(why: &str) -> String {
    format!(
        "{}  Deployment/guestbook 0/1 ready (pod guestbook-8knk55t76p-<pod> container guestbook ErrImagePull: failed to pull and unpack image \"registry.local.example.net/blueprint-apps/guestbook:latest\": failed to resolve reference \"registry.local.example.net/blueprint-apps/guestbook:latest\": failed to do request: Head \"https://registry.local.example.net/v2/blueprint-apps/guestbook/manifests/latest\": {why}), runs registry.local.example.net/blueprint-apps/guestbook:latest\n",
        deploy_timed_out()
    )
}

#[test]
fn without_the_coredns_rewrite_the_runner_cannot_reach_gitlab() {
    // The runner registers at GitLab's external URL, which only the rewrite sends to the
    // gateway: phase 2 stops at its Runner step, before any job would fail to fetch.
    let copy = copy_with(|source| without_step(source, "CoreDNS rewrite"));
    assert_text(
        &rehearse_failing(&copy),
        &runner_cannot_resolve_gitlab(&copy),
    );
}

#[test]
fn jobs_of_a_runner_without_the_wildcard_ca_cannot_clone_through_the_gateway() {
    // A runner that reaches GitLab at its in-cluster Service over plain HTTP registers without
    // any CA, but its jobs clone from GitLab's external URL through the gateway, and git
    // verifies that certificate with the CA the runner gives them (CI_SERVER_TLS_CA_FILE):
    // none, so every clone fails with git's own words.
    let copy = copy_editing("infra/VERSIONS.json", |text| {
        text.replace(
            r#""gitlabUrl": "https://gitlab.local.example.net""#,
            r#""gitlabUrl": "http://gitlab-webservice-default.gitlab.svc:8181""#,
        )
    });
    assert_text(
        &rehearse_failing(&copy),
        &no_fetch("SSL certificate problem: unable to get local issuer certificate"),
    );
}

#[test]
fn a_rewrite_to_a_service_that_does_not_exist_fails_the_same_way() {
    let copy = copy_with(|source| {
        source.replace(
            "const GATEWAY_SERVICE = \"gitlab-gateway.gitlab.svc.cluster.local\";",
            "const GATEWAY_SERVICE = \"gitlab-gw.gitlab.svc.cluster.local\";",
        )
    });
    assert_text(
        &rehearse_failing(&copy),
        &runner_cannot_resolve_gitlab(&copy),
    );
}

#[test]
fn without_node_trust_the_apps_image_fails_containerds_tls_check() {
    let copy = copy_with(|source| without_step(source, "Node trust"));
    assert_text(
        &rehearse_failing(&copy),
        &unpullable(
            "tls: failed to verify certificate: x509: certificate signed by unknown authority",
        ),
    );
}

#[test]
fn without_the_registry_pin_the_node_cannot_resolve_the_registry() {
    let copy = copy_with(|source| without_step(source, "Registry hosts pin"));
    assert_text(
        &rehearse_failing(&copy),
        &unpullable("dial tcp: lookup registry.local.example.net on 172.18.0.1:53: no such host"),
    );
}

#[test]
fn a_pin_to_an_address_no_service_has_times_out() {
    let copy = copy_with(|source| {
        source.replace(
            "let address = gateway[0].spec.clusterIP;",
            "let address = \"10.96.250.250\";",
        )
    });
    assert_text(
        &rehearse_failing(&copy),
        &unpullable("dial tcp 10.96.250.250:443: i/o timeout"),
    );
}

#[test]
fn a_broken_corefile_leaves_coredns_crash_looping_in_its_own_words() {
    let copy = copy_with(|source| {
        source.replace(
            "let rule = `rewrite name regex",
            "let rule = `rewrit name regex",
        )
    });
    assert_text(
        &rehearse_failing(&copy),
        &crate::support::with_frame(
            r##"error: step "CoreDNS rewrite" failed
  × kube_wait Deployment/coredns in kube-system: pod coredns-<hash>-<pod>: container coredns: CrashLoopBackOff (back-off 10s restarting failed container=coredns pod=coredns-<hash>-<pod>_kube-system); last exit code 1 (Error: /etc/coredns/Corefile:2 - Error during parsing: Unknown directive 'rewrit'), <n> restarts
<frame>
  caused by: Deployment/coredns: replicas desired=2 ready=2 updated=1 available=2 total=3; conditions: Available=True (MinimumReplicasAvailable: Deployment has minimum availability.), Progressing=True (ReplicaSetUpdated: ReplicaSet "coredns-<hash>" is progressing.)
  caused by: pod coredns-<hash>-<pod>: Pod/coredns-<hash>-<pod>: phase Running; container coredns waiting (CrashLoopBackOff: back-off 10s restarting failed container=coredns pod=coredns-<hash>-<pod>_kube-system); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady: containers with unready status: [coredns]), Ready=False (ContainersNotReady: containers with unready status: [coredns])
  caused by: pod coredns-<hash>-<pod>: event BackOff: Back-off restarting failed container coredns in pod coredns-<hash>-<pod>_kube-system(<uid>)
  hint: this state does not resolve by waiting: fix the image, command or configuration
  when this step fails: a CoreDNS pod crash-looping names the Corefile line it cannot parse: fix the rule this step adds (kubectl -n kube-system get configmap coredns -o yaml); the old pods answer until the rollout ends
re-run with --resume to continue from here
rehearsal stopped: scripts/phase2.rhai failed, so scripts/phase3.rhai did not run
warning: cannot read the end state: gitlab: GET /groups?per_page=100 -> 503: no healthy upstream
"##,
            &crate::support::source_frame(
                &crate::support::script_in(&copy, "scripts/phase2.rhai"),
                "scripts/phase2.rhai",
                "kube_wait(\"Deployment\", \"kube-system\", \"coredns\", \"Rollout\", #{timeout: 300});",
                "kube_wait",
                "failed here",
            ),
        ),
    );
}

#[test]
fn without_the_guestbooks_route_the_gateway_answers_envoys_404() {
    let copy = copy_editing("apps/guestbook/helm-chart/values.yaml", |values| {
        values.replace("route:\n  enabled: true", "route:\n  enabled: false")
    });
    assert_text(
        &rehearse_failing(&copy),
        &format!(
            r##"error: step "Workloads reachable" failed
  × https://guestbook.local.example.net/ answered 404 with an empty body through the gateway (svc/gitlab-gateway in gitlab)
{}  when this step fails: Envoy's 404 means no HTTPRoute serves the host (kubectl -n guestbook get httproute -o yaml: a route's status.parents say why the Gateway refused it); `503: no healthy upstream` that the guestbook Service has no ready pod (kubectl -n guestbook get pods); a certificate error that the wildcard CA in infra/tls/wildcard/ does not sign what the gateway serves (phase 2's wildcard TLS step)
re-run with --resume to continue from here
  Deployment/guestbook 1/1 ready, runs registry.local.example.net/blueprint-apps/guestbook:latest
"##,
            crate::support::script_frame(
                "scripts/phase3.rhai",
                "answered ${answer.status} with ${shown} through the gateway",
                "throw",
                "thrown here"
            )
        ),
    );
}

#[test]
fn node_trust_of_a_ca_that_is_not_the_registrys_fails_containerds_tls_check() {
    let copy = copy_with(|source| {
        source.replace(
            "    let ca = read_text(`${TLS_DIR}/ca.pem`);\n    kube_apply(#{apiVersion: \"v1\", kind: \"ConfigMap\",",
            "    tls_ensure_ca(\"infra/tls/other\", #{cn: \"another CA\"});\n    let ca = read_text(\"infra/tls/other/ca.pem\");\n    kube_apply(#{apiVersion: \"v1\", kind: \"ConfigMap\",",
        )
    });
    assert_text(
        &rehearse_failing(&copy),
        &unpullable(
            "tls: failed to verify certificate: x509: certificate signed by unknown authority",
        ),
    );
}

/// The CoreDNS rewrite names a Service that does not exist yet, and the wildcard TLS step needs
/// nothing before it: both may run first, and the platform comes up the same.
#[test]
fn the_coredns_rewrite_and_wildcard_tls_may_run_first() {
    let copy =
        copy_with(|source| moved_first(&moved_first(source, "CoreDNS rewrite"), "Wildcard TLS"));
    let run = copy.run(&["rehearse", "scripts/phase2.rhai", "scripts/phase3.rhai"]);
    run.code(0);
    run.partial_stdout(
        "[2/17] Wildcard TLS ...",
        "the order is what this test is about; the steps' lines are pinned by the other rehearsals",
    );
    run.partial_stdout(
        "[3/17] CoreDNS rewrite ...",
        "the order is what this test is about; the steps' lines are pinned by the other rehearsals",
    );
    run.partial_stdout(
        "[7/7] Workloads reachable ...\n    https://guestbook.local.example.net/ answers 200 through the gateway\n[7/7] Workloads reachable ... ok (#.## s)\n",
        "phase 3's end is what matters: the guestbook answers through the gateway",
    );
}

/// The smoke check trusts the wildcard CA only, as `curl --cacert` does: another CA does not
/// verify what the gateway serves, in rustls's words.
#[test]
fn the_guestbook_check_with_another_ca_fails_the_certificate_check() {
    let copy = copy_editing("scripts/phase3.rhai", |source| {
        source.replace(
            "const WILDCARD_CA = \"infra/tls/wildcard/ca.pem\";",
            "const WILDCARD_CA = \"infra/tls/other/ca.pem\";",
        )
        .replace(
            "    let gateway = kube_port_forward(GATEWAY_NAMESPACE,",
            "    tls_ensure_ca(\"infra/tls/other\", #{cn: \"another CA\"});\n    let gateway = kube_port_forward(GATEWAY_NAMESPACE,",
        )
    });
    let source =
        std::fs::read_to_string(copy.path().join("scripts/phase3.rhai")).expect("the copy");
    assert_text(&rehearse_failing(&copy), &another_ca(&source));
}

/// What the check with another CA says, its frame in `source` (the edited phase3.rhai).
fn another_ca(source: &str) -> String {
    format!(
        r##"error: step "Workloads reachable" failed
  × GET https://guestbook.local.example.net/ (connecting to 127.0.0.1:<port>) failed
{}  caused by: error sending request for url (https://guestbook.local.example.net/): client error (Connect): invalid peer certificate: UnknownIssuer
  hint: the CA given does not sign what the server presents for guestbook.local.example.net; curl --resolve guestbook.local.example.net:443:ADDRESS --cacert CA https://guestbook.local.example.net/ shows the same
  when this step fails: Envoy's 404 means no HTTPRoute serves the host (kubectl -n guestbook get httproute -o yaml: a route's status.parents say why the Gateway refused it); `503: no healthy upstream` that the guestbook Service has no ready pod (kubectl -n guestbook get pods); a certificate error that the wildcard CA in infra/tls/wildcard/ does not sign what the gateway serves (phase 2's wildcard TLS step)
re-run with --resume to continue from here
  Deployment/guestbook 1/1 ready, runs registry.local.example.net/blueprint-apps/guestbook:latest
"##,
        crate::support::source_frame(
            source,
            "scripts/phase3.rhai",
            "let answer = https_get(",
            "https_get",
            "failed here"
        )
    )
}
