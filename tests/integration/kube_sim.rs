//! The Kubernetes simulator driven by the real kubectl and helm (from ./test.sh's .tools/bin):
//! when they cannot use it, the simulator is wrong.

use crate::support::{BPRUN, Sim, SimKind, tool};
use std::path::Path;
use std::process::{Command, Stdio};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kube")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn kubeconfig_is_private_and_tokens_are_required() {
    use std::os::unix::fs::PermissionsExt;
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let mode = std::fs::metadata(sim.kubeconfig())
        .expect("kubeconfig")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let ok = sim.kubectl(&["get", "ns", "-o", "name"]);
    assert_eq!(
        ok.ok(),
        "namespace/default\nnamespace/kube-node-lease\nnamespace/kube-public\nnamespace/kube-system\n"
    );
    let wrong = sim.kubectl(&["--token", "not-the-token", "get", "ns"]);
    wrong.code(1);
    assert!(
        wrong.stderr.contains("Unauthorized") || wrong.stderr.contains("provide credentials"),
        "{}",
        wrong.stderr
    );
}

#[test]
fn kubectl_applies_idempotently_rolls_out_and_prints_tables() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    assert_eq!(
        sim.kubectl(&["create", "ns", "demo"]).ok(),
        "namespace/demo created\n"
    );
    let web = fixture("web.yaml");
    assert_eq!(
        sim.kubectl(&["apply", "-f", &web]).ok(),
        "deployment.apps/web created\nservice/web created\n"
    );
    sim.kubectl(&["delete", "--raw", "/-/sim/requests"]).ok();
    let again = sim.kubectl(&["apply", "-f", &web]);
    let log: serde_json::Value =
        serde_json::from_str(sim.kubectl(&["get", "--raw", "/-/sim/requests"]).ok()).expect("log");
    assert_eq!(
        log["mutating"], 0,
        "an unchanged apply writes nothing: {log}"
    );
    assert_eq!(
        again.ok(),
        "deployment.apps/web unchanged\nservice/web unchanged\n"
    );
    assert_eq!(again.stderr, "", "no warnings on a second apply");
    sim.kubectl(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "demo",
        "--timeout=20s",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "--for=condition=Available",
        "deployment/web",
        "-n",
        "demo",
        "--timeout=20s",
    ])
    .ok();
    let pods = sim.kubectl(&["get", "pods", "-n", "demo", "-l", "app=web", "--no-headers"]);
    let lines: Vec<&str> = pods.ok().lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("1/1") && l.contains("Running")),
        "{lines:?}"
    );
    let header = sim.kubectl(&["get", "deployment", "web", "-n", "demo"]);
    assert!(
        header.ok().starts_with(
            "NAME   READY   UP-TO-DATE   AVAILABLE   AGE\nweb    2/2     2            2"
        ),
        "{}",
        header.stdout
    );
    let endpoints = sim.kubectl(&[
        "get",
        "endpoints",
        "web",
        "-n",
        "demo",
        "-o",
        "jsonpath={.subsets[0].addresses[*].ip}",
    ]);
    assert_eq!(endpoints.ok().split(' ').count(), 2);
    // A change bumps generation once; the rollout replaces the pods.
    let generation = |sim: &Sim| {
        sim.kubectl(&[
            "get",
            "deployment",
            "web",
            "-n",
            "demo",
            "-o",
            "jsonpath={.metadata.generation}",
        ])
        .ok()
        .to_string()
    };
    assert_eq!(generation(&sim), "1");
    sim.kubectl(&[
        "set",
        "image",
        "deployment/web",
        "web=nginx:1.28",
        "-n",
        "demo",
    ])
    .ok();
    assert_eq!(generation(&sim), "2");
    sim.kubectl(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "demo",
        "--timeout=20s",
    ])
    .ok();
    let images = sim.kubectl(&[
        "get",
        "pods",
        "-n",
        "demo",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(images.ok(), "nginx:1.28 nginx:1.28");
}

#[test]
fn server_side_apply_owns_fields_and_reports_conflicts() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let web = fixture("web.yaml");
    assert_eq!(
        sim.kubectl(&["apply", "--server-side", "-f", &web]).ok(),
        "deployment.apps/web serverside-applied\nservice/web serverside-applied\n"
    );
    let managers = sim.kubectl(&[
        "get",
        "deployment",
        "web",
        "-n",
        "demo",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert_eq!(managers.ok(), "kubectl");
    let scaled = std::fs::read_to_string(&web)
        .expect("fixture")
        .replace("replicas: 2", "replicas: 3");
    let conflict = sim.kubectl_stdin(
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        &scaled,
    );
    conflict.code(1);
    assert!(
        conflict.stderr.contains("conflict with \"kubectl\"")
            && conflict.stderr.contains(".spec.replicas"),
        "{}",
        conflict.stderr
    );
    sim.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &scaled,
    )
    .ok();
    let replicas = sim.kubectl(&[
        "get",
        "deployment",
        "web",
        "-n",
        "demo",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(replicas.ok(), "3");
    // Server-side apply types the object first: an undeclared field is structured-merge-diff's
    // error (a 500 without a reason on a real API server, whatever fieldValidation says).
    let typo =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: demo}\ndat: {a: b}\n";
    let refused = sim.kubectl_stdin(&["apply", "--server-side", "-f", "-"], typo);
    refused.code(1);
    refused.stderr_contains("Error from server: failed to create typed patch object (demo/c; v1, Kind=ConfigMap): .dat: field not declared in schema");
    assert_eq!(
        sim.kubectl(&["get", "configmap", "-n", "demo", "-o", "name"])
            .ok(),
        "configmap/kube-root-ca.crt\n",
        "nothing was created (the namespace's CA bundle is the cluster's own)"
    );
}

#[test]
fn namespaces_pass_through_terminating_and_take_their_objects() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl(&[
        "create",
        "configmap",
        "c",
        "-n",
        "demo",
        "--from-literal=k=v",
    ])
    .ok();
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "s",
        "-n",
        "demo",
        "--from-literal=password=s3cret",
    ])
    .ok();
    let secret = sim.kubectl(&[
        "get",
        "secret",
        "s",
        "-n",
        "demo",
        "-o",
        "jsonpath={.data.password}",
    ]);
    assert_eq!(secret.ok(), "czNjcmV0");
    assert_eq!(
        sim.kubectl(&["delete", "ns", "demo", "--wait=true", "--timeout=20s"])
            .ok(),
        "namespace \"demo\" deleted\n"
    );
    let gone = sim.kubectl(&["get", "ns", "demo"]);
    gone.code(1);
    assert_eq!(
        gone.stderr.trim(),
        "Error from server (NotFound): namespaces \"demo\" not found"
    );
    // Only the CA bundles of the four system namespaces are left.
    let configmaps = sim.kubectl(&["get", "configmaps", "-A", "-o", "name"]);
    assert_eq!(configmaps.ok(), "configmap/kube-root-ca.crt\n".repeat(4));
}

#[test]
fn crds_register_in_discovery_and_custom_resources_become_ready_only_when_told() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let missing = sim.kubectl(&["apply", "-f", &fixture("pg.yaml")]);
    missing.code(1);
    missing.stderr_contains("no matches for kind \"Cluster\"");
    sim.kubectl(&["apply", "-f", &fixture("crd.yaml")]).ok();
    sim.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/clusters.postgresql.cnpg.io",
        "--timeout=20s",
    ])
    .ok();
    assert_eq!(
        sim.kubectl(&["apply", "-f", &fixture("pg.yaml")]).ok(),
        "cluster.postgresql.cnpg.io/pg created\n"
    );
    // Without its operator, a custom resource never turns Ready ...
    sim.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "clusters.postgresql.cnpg.io/pg",
        "-n",
        "demo",
        "--timeout=1s",
    ])
    .code(1);
    // ... unless the behaviour annotation says so.
    sim.kubectl(&[
        "annotate",
        "clusters.postgresql.cnpg.io/pg",
        "-n",
        "demo",
        "sim.bprun.dev/behaviour=ready",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "clusters.postgresql.cnpg.io/pg",
        "-n",
        "demo",
        "--timeout=20s",
    ])
    .ok();
    assert_eq!(
        sim.kubectl(&["get", "pgc", "-n", "demo", "-o", "name"])
            .ok(),
        "cluster.postgresql.cnpg.io/pg\n"
    );
    sim.kubectl(&["delete", "crd", "clusters.postgresql.cnpg.io"])
        .ok();
    let after = sim.kubectl(&["get", "clusters.postgresql.cnpg.io", "-A"]);
    after.code(1);
}

#[test]
fn kubectl_exec_runs_commands_in_simulated_containers() {
    let sim = BPRUN.sim(SimKind::Kube, &["--platform"]);
    sim.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        "app=toolbox",
        "-n",
        "gitlab",
        "--timeout=20s",
    ])
    .ok();
    assert_eq!(
        sim.kubectl(&[
            "exec",
            "-n",
            "gitlab",
            "deploy/gitlab-toolbox",
            "--",
            "echo",
            "hello"
        ])
        .ok(),
        "hello\n"
    );
    let piped = sim.kubectl_stdin(
        &[
            "exec",
            "-i",
            "-n",
            "gitlab",
            "deploy/gitlab-toolbox",
            "--",
            "cat",
        ],
        "from stdin\n",
    );
    assert_eq!(piped.ok(), "from stdin\n");
    let failed = sim.kubectl(&[
        "exec",
        "-n",
        "gitlab",
        "deploy/gitlab-toolbox",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    failed.code(3);
    assert_eq!(failed.stderr, "command terminated with exit code 3\n");
    let unknown = sim.kubectl(&[
        "exec",
        "-n",
        "gitlab",
        "deploy/gitlab-toolbox",
        "--",
        "nosuch",
    ]);
    unknown.code(127);
    unknown.stderr_contains("\"nosuch\": executable file not found in $PATH");
    let no_gitlab = sim.kubectl(&[
        "exec",
        "-n",
        "gitlab",
        "deploy/gitlab-toolbox",
        "--",
        "gitlab-rails",
        "runner",
        "puts User.first.personal_access_tokens.create!(name: 'x').token",
    ]);
    no_gitlab.code(1);
    no_gitlab.stderr_contains("no GitLab is attached");
}

#[test]
fn helm_installs_upgrades_and_uninstalls_releases() {
    helm_life_cycle("helm");
}

#[test]
fn helm_v3_installs_upgrades_and_uninstalls_releases() {
    helm_life_cycle("helm3");
}

fn helm_life_cycle(helm: &str) {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let version = sim.run(helm, &["version", "--short"], None);
    assert!(
        version
            .ok()
            .starts_with(if helm == "helm3" { "v3." } else { "v4." }),
        "{}",
        version.stdout
    );
    let chart = "apps/redis/helm-chart";
    let install = sim.run(
        helm,
        &[
            "install",
            "redis",
            chart,
            "-n",
            "redis",
            "--create-namespace",
            "--wait",
            "--timeout",
            "30s",
        ],
        None,
    );
    assert!(
        install.ok().contains("STATUS: deployed\nREVISION: 1\n"),
        "{}",
        install.stdout
    );
    let secrets = sim.kubectl(&[
        "get",
        "secrets",
        "-n",
        "redis",
        "-l",
        "owner=helm",
        "-o",
        "name",
    ]);
    assert_eq!(secrets.ok(), "secret/sh.helm.release.v1.redis.v1\n");
    let upgrade = sim.run(
        helm,
        &[
            "upgrade",
            "--install",
            "redis",
            chart,
            "-n",
            "redis",
            "--wait",
            "--timeout",
            "30s",
        ],
        None,
    );
    assert!(upgrade.ok().contains("REVISION: 2\n"), "{}", upgrade.stdout);
    let list = sim.run(helm, &["list", "-A", "-o", "json"], None);
    let releases: serde_json::Value = serde_json::from_str(list.ok()).expect("helm list json");
    assert_eq!(releases[0]["name"], "redis");
    assert_eq!(releases[0]["status"], "deployed");
    assert_eq!(releases[0]["revision"], "2");
    let status = sim.run(helm, &["status", "redis", "-n", "redis"], None);
    // helm 4 lists the release's resources (read back as Tables); helm 3 does not.
    if helm == "helm" {
        assert!(status.ok().contains("redis-master"), "{}", status.stdout);
    } else {
        assert!(
            status.ok().contains("STATUS: deployed"),
            "{}",
            status.stdout
        );
    }
    assert_eq!(
        sim.run(helm, &["uninstall", "redis", "-n", "redis", "--wait"], None)
            .ok(),
        "release \"redis\" uninstalled\n"
    );
    assert_eq!(
        sim.kubectl(&["get", "all", "-n", "redis", "-o", "name"])
            .ok(),
        ""
    );
    assert_eq!(sim.run(helm, &["list", "-A", "-q"], None).ok(), "");
}

#[test]
fn patches_status_conflicts_and_existing_names_answer_like_the_api_server() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl(&[
        "create",
        "configmap",
        "c",
        "-n",
        "demo",
        "--from-literal=k=v",
    ])
    .ok();
    let again = sim.kubectl(&[
        "create",
        "configmap",
        "c",
        "-n",
        "demo",
        "--from-literal=k=v",
    ]);
    again.code(1);
    assert_eq!(
        again.stderr.trim(),
        "error: failed to create configmap: configmaps \"c\" already exists"
    );
    // JSON merge patch and JSON patch.
    sim.kubectl(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"data":{"k":null,"m":"2"}}"#,
    ])
    .ok();
    sim.kubectl(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "demo",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/n","value":"3"}]"#,
    ])
    .ok();
    let data = sim.kubectl(&[
        "get",
        "configmap",
        "c",
        "-n",
        "demo",
        "-o",
        "jsonpath={.data}",
    ]);
    assert_eq!(data.ok(), r#"{"m":"2","n":"3"}"#);
    let failed_test = sim.kubectl(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "demo",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/data/m","value":"9"}]"#,
    ]);
    failed_test.code(1);
    // A PUT with a stale resourceVersion is a conflict.
    let current = sim.kubectl(&["get", "configmap", "c", "-n", "demo", "-o", "json"]);
    let mut object: serde_json::Value = serde_json::from_str(current.ok()).expect("json");
    sim.kubectl(&["label", "configmap", "c", "-n", "demo", "changed=yes"])
        .ok();
    object["data"]["m"] = serde_json::json!("stale");
    let stale = sim.kubectl_stdin(&["replace", "-f", "-"], &object.to_string());
    stale.code(1);
    stale.stderr_contains("the object has been modified; please apply your changes to the latest version and try again");
    // Status goes through /status only.
    sim.kubectl(&["apply", "-f", &fixture("crd.yaml")]).ok();
    sim.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/clusters.postgresql.cnpg.io",
        "--timeout=20s",
    ])
    .ok();
    let held = std::fs::read_to_string(fixture("pg.yaml"))
        .expect("fixture")
        .replace("metadata: {name: pg, namespace: demo}", "metadata: {name: pg, namespace: demo, annotations: {sim.bprun.dev/behaviour: not-ready}}");
    sim.kubectl_stdin(&["apply", "-f", "-"], &held).ok();
    sim.kubectl(&[
        "patch",
        "clusters.postgresql.cnpg.io",
        "pg",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"ignored"}}"#,
    ])
    .ok();
    sim.kubectl(&[
        "patch",
        "clusters.postgresql.cnpg.io",
        "pg",
        "-n",
        "demo",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Cluster in healthy state"}}"#,
    ])
    .ok();
    let phase = sim.kubectl(&[
        "get",
        "clusters.postgresql.cnpg.io",
        "pg",
        "-n",
        "demo",
        "-o",
        "jsonpath={.status.phase}",
    ]);
    assert_eq!(phase.ok(), "Cluster in healthy state");
}

#[test]
fn kubectl_watches_list_then_follow_from_the_resource_version() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl(&[
        "create",
        "configmap",
        "before",
        "-n",
        "demo",
        "--from-literal=k=v",
    ])
    .ok();
    // The watch lists first, then follows from the list's resourceVersion until its timeout.
    let watch = Command::new(tool("kubectl"))
        .args([
            "--request-timeout=4s",
            "get",
            "configmaps",
            "-n",
            "demo",
            "--watch",
            "--output-watch-events",
            "--no-headers",
        ])
        .env("KUBECONFIG", sim.kubeconfig())
        .env("HOME", sim.home())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    sim.kubectl(&[
        "create",
        "configmap",
        "after",
        "-n",
        "demo",
        "--from-literal=k=v",
    ])
    .ok();
    sim.kubectl(&["delete", "configmap", "before", "-n", "demo"])
        .ok();
    let output = watch.wait_with_output().expect("watch ends at its timeout");
    let events: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            line.split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        events,
        // kube-root-ca.crt: every namespace holds the cluster CA.
        [
            "ADDED before",
            "ADDED kube-root-ca.crt",
            "ADDED after",
            "DELETED before"
        ],
        "{events:?}"
    );
}

#[test]
fn the_toolbox_mints_personal_access_tokens_in_the_gitlab_simulator() {
    let gitlab = BPRUN.sim(SimKind::Gitlab, &[]);
    let refused = gitlab.raw("POST", "/-/sim/tokens", None, None);
    assert_eq!(refused.status, 401, "minting needs the admin token");
    let sim = BPRUN.sim(
        SimKind::Kube,
        &[
            "--platform",
            "--gitlab-url",
            gitlab.gitlab_url(),
            "--gitlab-token",
            crate::support::GITLAB_TOKEN,
        ],
    );
    sim.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        "app=toolbox",
        "-n",
        "gitlab",
        "--timeout=20s",
    ])
    .ok();
    let ruby = "token = User.find_by_username('root').personal_access_tokens.create!(scopes: ['api'], name: 'x'); puts token.token";
    let minted = sim.kubectl_stdin(
        &[
            "exec",
            "-i",
            "-n",
            "gitlab",
            "deploy/gitlab-toolbox",
            "--",
            "gitlab-rails",
            "runner",
            "-",
        ],
        ruby,
    );
    let token = minted.ok().trim().to_string();
    assert!(token.starts_with("glpat-"), "{token}");
    let user = gitlab.raw("GET", "/api/v4/user", Some(&token), None);
    assert_eq!(user.status, 200, "the minted token works: {}", user.body);
    assert_eq!(user.json()["username"], "root");
}
