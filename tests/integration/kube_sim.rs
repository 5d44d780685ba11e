//! The Kubernetes simulator driven by the real kubectl and helm (from ./test.sh's .tools/bin):
//! when they cannot use it, the simulator is wrong.

use crate::support::exec_not_found;
use crate::support::{BPRUN, Output, Sim, SimKind, tool};
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
    wrong.expect(
        1,
        "",
        "error: You must be logged in to the server (Unauthorized)\n",
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
    // Pod names end in the template's hash and a random suffix; ages grow.
    pods.replace_regex(r"web-[a-z0-9]+-[a-z0-9]{5} ", "web-<hash>-<id> ")
        .replace_regex(r"(?m) \d+s$", " <age>")
        .expect(
            0,
            "web-<hash>-<id>   1/1   Running   0     <age>\n\
             web-<hash>-<id>   1/1   Running   0     <age>\n",
            "",
        );
    let header = sim.kubectl(&["get", "deployment", "web", "-n", "demo"]);
    header.replace_regex(r"(?m) \d+s$", " <age>").expect(
        0,
        "NAME   READY   UP-TO-DATE   AVAILABLE   AGE\n\
         web    2/2     2            2           <age>\n",
        "",
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
    conflict.expect(
        1,
        "service/web serverside-applied\n",
        "error: Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas\n\
         Please review the fields above--they currently have other managers. Here\n\
         are the ways you can resolve this warning:\n\
         * If you intend to manage all of these fields, please re-run the apply\n\
         \x20 command with the `--force-conflicts` flag.\n\
         * If you do not intend to manage all of the fields, please edit your\n\
         \x20 manifest to remove references to the fields that should keep their\n\
         \x20 current managers.\n\
         * You may co-own fields by updating your manifest to match the existing\n\
         \x20 value; in this case, you'll become the manager if the other manager(s)\n\
         \x20 stop managing the field (remove it from their configuration).\n\
         See https://kubernetes.io/docs/reference/using-api/server-side-apply/#conflicts\n",
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
    refused.expect(
        1,
        "",
        "Error from server: failed to create typed patch object (demo/c; v1, Kind=ConfigMap): .dat: field not declared in schema\n",
    );
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
    missing.replace(&fixture("pg.yaml"), "<pg.yaml>").expect(
        1,
        "",
        "error: resource mapping not found for name: \"pg\" namespace: \"demo\" from \"<pg.yaml>\": no matches for kind \"Cluster\" in version \"postgresql.cnpg.io/v1\"\n\
         ensure CRDs are installed first\n",
    );
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
    after.expect(
        1,
        "",
        "error: the server doesn't have a resource type \"clusters\"\n",
    );
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
    unknown.expect(127, "", &exec_not_found("nosuch"));
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
    no_gitlab.expect(
        1,
        "",
        "gitlab-rails runner: no GitLab is attached to this simulated cluster (start it with --gitlab-url, or use `bprun sim all`)\n\
         command terminated with exit code 1\n",
    );
}

#[test]
fn helm_installs_upgrades_and_uninstalls_releases() {
    helm_life_cycle("helm");
}

#[test]
fn helm_v3_installs_upgrades_and_uninstalls_releases() {
    helm_life_cycle("helm3");
}

/// helm's answer about release `redis` at `revision` (after `first_line`, before `tail`).
fn helm_status(first_line: &str, revision: u32, tail: &str) -> String {
    format!(
        "{first_line}NAME: redis\n\
         LAST DEPLOYED: <time>\n\
         NAMESPACE: redis\n\
         STATUS: deployed\n\
         REVISION: {revision}\n\
         {tail}"
    )
}

/// helm's output with the release's deployment time, which is the clock's.
fn deployed_at(output: Output) -> Output {
    output.replace_regex(r"(?m)^LAST DEPLOYED: .*$", "LAST DEPLOYED: <time>")
}

fn helm_life_cycle(helm: &str) {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let version = sim.run(helm, &["version", "--short"], None);
    let helm3 = helm == "helm3";
    version.expect(
        0,
        if helm3 {
            "v3.17.3+ge4da497\n"
        } else {
            "v4.1.4+g05fa379\n"
        },
        "",
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
    // helm 4 adds the release's description.
    let tail = if helm3 {
        "TEST SUITE: None\n"
    } else {
        "DESCRIPTION: Install complete\nTEST SUITE: None\n"
    };
    deployed_at(install).expect(0, &helm_status("", 1, tail), "");
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
    deployed_at(upgrade).expect(
        0,
        &helm_status(
            "Release \"redis\" has been upgraded. Happy Helming!\n",
            2,
            if helm3 {
                "TEST SUITE: None\n"
            } else {
                "DESCRIPTION: Upgrade complete\nTEST SUITE: None\n"
            },
        ),
        "",
    );
    let list = sim.run(helm, &["list", "-A", "-o", "json"], None);
    let releases: serde_json::Value = serde_json::from_str(list.ok()).expect("helm list json");
    assert_eq!(releases[0]["name"], "redis");
    assert_eq!(releases[0]["status"], "deployed");
    assert_eq!(releases[0]["revision"], "2");
    let status = sim.run(helm, &["status", "redis", "-n", "redis"], None);
    // helm 4 lists the release's resources (read back as Tables); helm 3 does not.
    let tail = if helm3 {
        "TEST SUITE: None\n"
    } else {
        "DESCRIPTION: Upgrade complete\n\
         RESOURCES:\n\
         ==> v1/Deployment\n\
         NAME    READY   UP-TO-DATE   AVAILABLE   AGE\n\
         redis   1/1     1            1           <age>\n\
         \n\
         ==> v1/Pod(related)\n\
         NAME                     READY   STATUS    RESTARTS   AGE\n\
         redis-<hash>-<id>   1/1     Running   0          <age>\n\
         \n\
         ==> v1/Service\n\
         NAME           TYPE        CLUSTER-IP   EXTERNAL-IP   PORT(S)    AGE\n\
         redis-master   ClusterIP   10.96.0.12   <none>        6379/TCP   <age>\n\
         \n\
         \n\
         TEST SUITE: None\n"
    };
    // Ages grow; the pod's name ends in the template's hash and a random suffix; helm prints
    // the resource groups in its map's order, which varies: they are compared sorted.
    resource_groups_sorted(
        deployed_at(status)
            .replace_regex(r"(?m) \d+s$", " <age>")
            .replace_regex(r"redis-[a-z0-9]{10}-[a-z0-9]{5}", "redis-<hash>-<id>"),
    )
    .expect(0, &helm_status("", 2, tail), "");
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
    stale.expect(
        1,
        "",
        "Error from server (Conflict): error when replacing \"STDIN\": Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again\n",
    );
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

/// `helm status`'s `RESOURCES:` groups (`==> v1/Service ...`, one blank line after each) in
/// sorted order: helm 4 prints them in the order of a Go map, which changes from run to run.
fn resource_groups_sorted(mut output: Output) -> Output {
    let text = &output.stdout;
    let (Some(start), Some(end)) = (text.find("RESOURCES:\n"), text.find("\n\nTEST SUITE:")) else {
        return output;
    };
    let start = start + "RESOURCES:\n".len();
    let mut groups: Vec<&str> = text[start..end + 1].split_inclusive("\n\n").collect();
    groups.sort();
    output.stdout = format!("{}{}{}", &text[..start], groups.concat(), &text[end + 1..]);
    output
}

/// As on a real cluster, an image no registry serves is never pulled, so its Deployment never
/// becomes Available: a registry host that does not resolve, a Docker Hub library name that is
/// not an official image. The pods say containerd's reason.
#[test]
fn an_unpullable_image_never_becomes_available() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    for (name, image, reason) in [
        (
            "invalid",
            "registry.invalid/no-such/image:0",
            "failed to pull and unpack image \"registry.invalid/no-such/image:0\": failed to resolve reference \"registry.invalid/no-such/image:0\": failed to do request: Head \"https://registry.invalid/v2/no-such/image/manifests/0\": dial tcp: lookup registry.invalid on 172.18.0.1:53: no such host",
        ),
        (
            "no-such",
            "docker.io/library/no-such-image:1",
            "failed to pull and unpack image \"docker.io/library/no-such-image:1\": failed to resolve reference \"docker.io/library/no-such-image:1\": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed",
        ),
    ] {
        let manifest = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: demo}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: app, image: \"{image}\"}}]}}\n"
        );
        assert_eq!(
            sim.kubectl_stdin(&["apply", "-f", "-"], &manifest).ok(),
            format!("deployment.apps/{name} created\n")
        );
        let waited = sim.kubectl(&[
            "wait",
            "--for=condition=Available",
            &format!("deployment/{name}"),
            "-n",
            "demo",
            "--timeout=3s",
        ]);
        assert_eq!(
            (waited.code, waited.stderr.as_str()),
            (
                1,
                format!("error: timed out waiting for the condition on deployments/{name}\n")
                    .as_str()
            )
        );
        let waiting = sim.kubectl(&[
            "get",
            "pods",
            "-n",
            "demo",
            "-l",
            &format!("app={name}"),
            "-o",
            "jsonpath={.items[0].status.containerStatuses[0].state.waiting.message}",
        ]);
        assert_eq!(waiting.ok(), reason);
    }
}

/// helm's dates (`Wed Dec  2 18:01:52 2026`) as `<date>`.
fn without_helm_dates(text: &str) -> String {
    let dates = regex::Regex::new(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}").expect("regex");
    dates.replace_all(text, "<date>").into_owned()
}

/// As on a real cluster, `helm test` of the chart `helm create` makes passes: its busybox test
/// pod resolves the release's Service through the cluster DNS (its own `/etc/resolv.conf`,
/// the resolver on 10.96.0.10 in its own network namespace) and fetches nginx's page behind
/// it. With no ready endpoint left, the same test fails as there: the connection is refused.
#[test]
fn helm_test_of_a_helm_create_chart_reaches_its_service() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("demo");
    let chart = chart.to_str().expect("path");
    sim.helm(&["create", chart]).ok();
    sim.helm(&[
        "install",
        "demo",
        chart,
        "-n",
        "demo",
        "--create-namespace",
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
    let tested = sim.helm(&["test", "demo", "-n", "demo"]);
    assert_eq!(
        without_helm_dates(tested.ok()),
        "NAME: demo\nLAST DEPLOYED: <date>\nNAMESPACE: demo\nSTATUS: deployed\nREVISION: 1\nDESCRIPTION: Install complete\nTEST SUITE:     demo-test-connection\nLast Started:   <date>\nLast Completed: <date>\nPhase:          Succeeded\n"
    );
    assert_eq!(
        sim.kubectl(&["logs", "-n", "demo", "demo-test-connection"])
            .ok(),
        "Connecting to demo:80 (127.96.0.12:80)\nsaving to 'index.html'\nindex.html           100% |********************************|   245  0:00:00 ETA\n'index.html' saved\n"
    );
    sim.kubectl(&["scale", "deployment/demo", "-n", "demo", "--replicas=0"])
        .ok();
    sim.kubectl(&[
        "wait",
        "--for=delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=demo,pod-template-hash",
        "-n",
        "demo",
        "--timeout=20s",
    ])
    .ok();
    let failed = sim.helm(&["test", "demo", "-n", "demo"]);
    assert_eq!(
        (failed.code, without_helm_dates(&failed.stderr)),
        (
            1,
            "Error: resource Pod/demo/demo-test-connection not ready. status: Failed, message: pod demo-test-connection failed\n".to_string()
        )
    );
    assert_eq!(
        sim.kubectl(&["logs", "-n", "demo", "demo-test-connection"])
            .ok(),
        "Connecting to demo:80 (127.96.0.12:80)\nwget: can't connect to remote host (127.96.0.12): Connection refused\n"
    );
}

/// kubectl's generators send typed objects as protobuf bodies (`application/vnd.kubernetes.protobuf`),
/// as to a real API server. Each kind it can create is accepted, and the object it makes is the
/// object the same generator makes as JSON (`--dry-run=client -o json`, then `kubectl apply`):
/// the protobuf decoder writes what Go's JSON of the decoded struct would hold, no zero values
/// a real cluster would not show, and the API server's defaults apply alike.
#[test]
fn kubectl_generators_create_every_kind_through_protobuf_as_through_json() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    for namespace in ["pb", "json"] {
        sim.kubectl(&["create", "ns", namespace]).ok();
    }
    // (generator arguments, what to compare of the object made).
    let generators: [(&[&str], &str, &str); 13] = [
        (
            &[
                "deployment",
                "web",
                "--image=nginx:1.27",
                "--replicas=2",
                "--port=80",
            ],
            "deployment/web",
            "{.spec}",
        ),
        (
            &["service", "clusterip", "web", "--tcp=80:8080"],
            "service/web",
            "{.spec.ports}",
        ),
        (
            &["job", "once", "--image=busybox", "--", "echo", "hi"],
            "job/once",
            "{.spec.template.spec}",
        ),
        (
            &[
                "cronjob",
                "nightly",
                "--image=busybox",
                "--schedule=0 3 * * *",
                "--",
                "echo",
                "hi",
            ],
            "cronjob/nightly",
            "{.spec}",
        ),
        (
            &["role", "reader", "--verb=get,list", "--resource=pods"],
            "role/reader",
            "{.rules}",
        ),
        (
            &[
                "rolebinding",
                "reader",
                "--role=reader",
                "--serviceaccount=pb:default",
            ],
            "rolebinding/reader",
            "{.roleRef} {.subjects}",
        ),
        (
            &["configmap", "settings", "--from-literal=a=b"],
            "configmap/settings",
            "{.data}",
        ),
        (
            &["secret", "generic", "creds", "--from-literal=a=b"],
            "secret/creds",
            "{.data} {.type}",
        ),
        (
            &["serviceaccount", "robot"],
            "serviceaccount/robot",
            "{.metadata.name}",
        ),
        (
            &[
                "poddisruptionbudget",
                "web",
                "--selector=app=web",
                "--max-unavailable=50%",
            ],
            "pdb/web",
            "{.spec}",
        ),
        (
            &["ingress", "web", "--rule=web.example.com/=web:80"],
            "ingress/web",
            "{.spec}",
        ),
        (
            &["quota", "pods", "--hard=pods=10,requests.cpu=500m"],
            "quota/pods",
            "{.spec}",
        ),
        (
            &["priorityclass", "high", "--value=1000"],
            "priorityclass/high",
            "{.value} {.globalDefault}",
        ),
    ];
    let mut created = String::new();
    for (args, object, fields) in generators {
        let cluster_scoped = object.starts_with("priorityclass/");
        // Flags first: what follows `--` is the container's command.
        let mut protobuf = vec!["create"];
        if !cluster_scoped {
            protobuf.extend_from_slice(&["-n", "pb"]);
        }
        protobuf.extend_from_slice(args);
        created.push_str(sim.kubectl(&protobuf).ok());
        let from_protobuf = sim
            .kubectl(&[
                "get",
                object,
                "-n",
                "pb",
                "-o",
                &format!("jsonpath={fields}"),
            ])
            .ok()
            .to_string();
        if cluster_scoped {
            // One name per cluster: the JSON twin is checked against the printed object instead.
            assert_eq!(from_protobuf, "1000 ", "{object}");
            continue;
        }
        let mut dry_run = vec!["create", "-n", "json", "--dry-run=client", "-o", "json"];
        dry_run.extend_from_slice(args);
        let json = sim
            .kubectl(&dry_run)
            .ok()
            .replace("pb:default", "json:default");
        let file = sim.home().join("object.json");
        std::fs::write(
            &file,
            json.replace("\"namespace\": \"pb\"", "\"namespace\": \"json\""),
        )
        .expect("write the JSON twin");
        sim.kubectl(&["apply", "-n", "json", "-f", &file.display().to_string()])
            .ok();
        let from_json = sim
            .kubectl(&[
                "get",
                object,
                "-n",
                "json",
                "-o",
                &format!("jsonpath={fields}"),
            ])
            .ok()
            .replace("json:default", "pb:default")
            .replace("\"namespace\":\"json\"", "\"namespace\":\"pb\"");
        assert_eq!(
            from_protobuf, from_json,
            "{object} through protobuf and through JSON"
        );
    }
    assert_eq!(
        created,
        "deployment.apps/web created\nservice/web created\njob.batch/once created\n\
         cronjob.batch/nightly created\nrole.rbac.authorization.k8s.io/reader created\n\
         rolebinding.rbac.authorization.k8s.io/reader created\nconfigmap/settings created\n\
         secret/creds created\nserviceaccount/robot created\npoddisruptionbudget.policy/web created\n\
         ingress.networking.k8s.io/web created\nresourcequota/pods created\n\
         priorityclass.scheduling.k8s.io/high created\n"
    );
    // What the deployment holds, whole: pointers set by kubectl kept, the defaults of
    // SetDefaults_Deployment applied to the empty strategy, no `omitempty` zero.
    assert_eq!(
        sim.kubectl(&[
            "get",
            "deployment/web",
            "-n",
            "pb",
            "-o",
            "jsonpath={.spec}"
        ])
        .ok(),
        r#"{"progressDeadlineSeconds":600,"replicas":2,"revisionHistoryLimit":10,"selector":{"matchLabels":{"app":"web"}},"strategy":{"rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"},"type":"RollingUpdate"},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx:1.27","name":"nginx","ports":[{"containerPort":80}],"resources":{}}]}}}"#
    );
    // A Pod (`kubectl run`), a TokenRequest (`create token`) and a scale through protobuf too.
    sim.kubectl(&[
        "run",
        "solo",
        "-n",
        "pb",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sleep",
        "1",
    ])
    .stdout("pod/solo created\n");
    sim.kubectl(&["create", "token", "robot", "-n", "pb"])
        .replace_regex(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$", "<jwt>")
        .expect(0, "<jwt>", "");
    sim.kubectl(&["scale", "deployment/web", "-n", "pb", "--replicas=0"])
        .stdout("deployment.apps/web scaled\n");
    assert_eq!(
        sim.kubectl(&[
            "get",
            "deployment/web",
            "-n",
            "pb",
            "-o",
            "jsonpath={.spec.replicas}"
        ])
        .ok(),
        "0"
    );
}

#[test]
fn rbac_refuses_granting_what_the_writer_does_not_hold_unless_it_may_bind() {
    // RBAC's escalation prevention, with the real kubectl: an account that may write Roles and
    // RoleBindings in its namespace grants only what it holds, or binds a role it has `bind` on.
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let setup = r#"
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ci, namespace: apps}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: rbac-writer, namespace: apps}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: rbac-writer, namespace: apps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: rbac-writer}
subjects: [{kind: ServiceAccount, name: ci, namespace: apps}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: deployer}
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list]
"#;
    sim.kubectl_stdin(&["apply", "-f", "-"], setup).success();
    // A token lives at least 10 minutes, as the API server validates it.
    sim.kubectl(&["create", "token", "ci", "-n", "apps", "--duration=5m"])
        .expect(1, "", "error: failed to create token: TokenRequest.authentication.k8s.io \"ci\" is invalid: spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes\n");
    let token = sim
        .kubectl(&["create", "token", "ci", "-n", "apps"])
        .ok()
        .trim()
        .to_string();
    let as_ci = |args: &[&str]| {
        let mut all = vec!["--token", token.as_str(), "-n", "apps"];
        all.extend_from_slice(args);
        sim.kubectl(&all)
    };
    as_ci(&[
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=configmaps",
    ])
    .expect(0, "role.rbac.authorization.k8s.io/reader created\n", "");
    let groups = r#"(groups=["system:serviceaccounts" "system:serviceaccounts:apps" "system:authenticated"])"#;
    as_ci(&["create", "role", "peek", "--verb=get,watch", "--resource=secrets,configmaps"]).expect(
        1,
        "",
        &format!(
            "Error from server (Forbidden): roles.rbac.authorization.k8s.io \"peek\" is forbidden: user \"system:serviceaccount:apps:ci\" {groups} is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"watch\"]}}\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"watch\"]}}\n"
        ),
    );
    let bind = [
        "create",
        "rolebinding",
        "deployer",
        "--clusterrole=deployer",
        "--serviceaccount=apps:ci",
    ];
    as_ci(&bind).expect(
        1,
        "",
        &format!(
            "error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io \"deployer\" is forbidden: user \"system:serviceaccount:apps:ci\" {groups} is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}}\n"
        ),
    );
    // `bind` on that ClusterRole, by name, in the namespace: the binding goes through.
    sim.kubectl(&[
        "create",
        "role",
        "bind-deployer",
        "-n",
        "apps",
        "--verb=bind",
        "--resource=clusterroles.rbac.authorization.k8s.io",
        "--resource-name=deployer",
    ])
    .success();
    sim.kubectl(&[
        "create",
        "rolebinding",
        "bind-deployer",
        "-n",
        "apps",
        "--role=bind-deployer",
        "--serviceaccount=apps:ci",
    ])
    .success();
    as_ci(&bind).expect(
        0,
        "rolebinding.rbac.authorization.k8s.io/deployer created\n",
        "",
    );
    // Now it holds what the ClusterRole grants, in its namespace only.
    as_ci(&["auth", "can-i", "list", "secrets"]).expect(0, "yes\n", "");
}
