//! deploy/: bprun unattended. The GitLab CI template against GitLab's CI schema, the Kubernetes
//! manifests against the Kubernetes simulator with the real kubectl (server-side dry run, then for
//! real), and the Job's command line and environment against what bprun understands.
//!
//! Not checked here: the container image (no container engine on this machine). The RBAC's
//! sufficiency is checked by running phase 3 as the ServiceAccount under the simulator's RBAC
//! (tests/integration/in_cluster.rs); here the Role is checked for being accepted by the API server
//! and for naming what the code uses.

use crate::support::{BPRUN, SimKind, expect_output};
use serde::Deserialize;
use serde_norway::Value;
use std::path::{Path, PathBuf};

/// `bprun --list --json scripts/phase3.rhai`: the plan event, its time as `<time>`.
const PHASE3_PLAN: &str = "{\"event\":\"plan\",\"params\":[{\"default\":null,\"flag\":\"--app\",\"help\":\"Provision only this app (shared-code, whose CI templates every app includes, comes along)\",\"name\":\"app\",\"type\":\"string\"},{\"default\":false,\"flag\":\"--destroy\",\"help\":\"Delete the projects and the group and wipe apps-local/ (the PAT stays in OpenBao)\",\"name\":\"destroy\",\"type\":\"bool\"},{\"default\":false,\"flag\":\"--force-smoke\",\"help\":\"Start a new smoke pipeline in every project, even where the last one still proves the deploy\",\"name\":\"force_smoke\",\"type\":\"bool\"},{\"default\":false,\"flag\":\"--no-overwrite-ci\",\"help\":\"Keep a project's .gitlab-ci.yml when it differs from the rendered one\",\"name\":\"no_overwrite_ci\",\"type\":\"bool\"},{\"default\":false,\"flag\":\"--reset-clones\",\"help\":\"Wipe the working trees in apps-local/ and clone them again\",\"name\":\"reset_clones\",\"type\":\"bool\"},{\"default\":600,\"flag\":\"--smoke-timeout\",\"help\":\"Seconds the smoke pipelines may take (GitLab Runner's default job timeout)\",\"name\":\"smoke_timeout\",\"type\":\"int\"}],\"script\":\"scripts/phase3.rhai\",\"steps\":[{\"index\":1,\"name\":\"Pre-flight\",\"needs\":[],\"skipped\":null,\"together\":{\"first\":1,\"last\":2,\"limit\":4,\"writes_wait_for\":null}},{\"index\":2,\"name\":\"Mint PAT\",\"needs\":[],\"skipped\":null,\"together\":{\"first\":1,\"last\":2,\"limit\":4,\"writes_wait_for\":1}},{\"index\":3,\"name\":\"Seed glab auth\",\"needs\":[],\"skipped\":null,\"together\":null},{\"index\":4,\"name\":\"Ensure group\",\"needs\":[],\"skipped\":null,\"together\":{\"first\":4,\"last\":5,\"limit\":4,\"writes_wait_for\":null}},{\"index\":5,\"name\":\"Provision projects\",\"needs\":[],\"skipped\":null,\"together\":{\"first\":4,\"last\":5,\"limit\":4,\"writes_wait_for\":4}},{\"index\":6,\"name\":\"Smoke test\",\"needs\":[],\"skipped\":null,\"together\":null},{\"index\":7,\"name\":\"Workloads reachable\",\"needs\":[\"Smoke test\"],\"skipped\":null,\"together\":null}],\"ts\":\"<time>\"}\n";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The manifests of deploy/kubernetes, in the order `kubectl apply -f` takes them (by name).
fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy().join("kubernetes"))
        .expect("deploy/kubernetes")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "manifests: {files:?}");
    files
}

/// Every document of every manifest.
fn documents() -> Vec<Value> {
    manifest_files()
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("read manifest");
            serde_norway::Deserializer::from_str(&text)
                .map(|doc| Value::deserialize(doc).expect("manifest YAML"))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn of_kind(kind: &str) -> Vec<Value> {
    documents()
        .into_iter()
        .filter(|doc| doc["kind"].as_str() == Some(kind))
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .map(|items| {
            items
                .iter()
                .map(|item| item.as_str().expect("a string").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn check_jsonschema(files: &[PathBuf]) -> std::process::Output {
    bprun_testkit::check_gitlab_ci(files)
}

#[test]
fn ci_template_validates_against_gitlabs_ci_schema() {
    let template = deploy().join("gitlab-ci.yml");
    let out = check_jsonschema(std::slice::from_ref(&template));
    assert!(
        out.status.success(),
        "check-jsonschema: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The schema is not vacuous for this file (it would be for a hidden `.job`): a misspelt
    // value fails it.
    let broken = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(&template).expect("template");
    let path = broken.path().join("gitlab-ci.yml");
    std::fs::write(&path, text.replace("when: always", "when: allways")).expect("write");
    assert!(!check_jsonschema(&[path]).status.success());
}

#[test]
fn ci_template_runs_a_phase_per_context_and_keeps_events_and_journal() {
    let text = std::fs::read_to_string(deploy().join("gitlab-ci.yml")).expect("template");
    let ci: Value = serde_norway::from_str(&text).expect("YAML");
    let job = &ci["bprun:phase3"];
    let contexts = strings(&job["parallel"]["matrix"][0]["KUBE_CONTEXT"]);
    assert!(contexts.len() >= 2, "matrix: {contexts:?}");
    let script = strings(&job["script"]);
    let run = script
        .iter()
        .find(|line| line.contains("$BPRUN_PHASE"))
        .expect("a line running the phase");
    assert!(
        run.starts_with("bprun --json --kube-context \"$KUBE_CONTEXT\" "),
        "{run}"
    );
    assert!(run.ends_with("> bprun-events.jsonl"), "{run}");
    assert_eq!(job["artifacts"]["when"].as_str(), Some("always"));
    let kept = strings(&job["artifacts"]["paths"]);
    assert_eq!(kept, ["bprun-events.jsonl", ".bprun/journal/"]);
    assert_eq!(strings(&job["image"]["entrypoint"]), [""]);
    let rules = job["rules"].as_sequence().expect("rules");
    assert!(rules.iter().any(|rule| rule["if"].as_str()
        == Some("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH")
        && rule["when"].is_null()));
    assert!(
        rules
            .iter()
            .any(|rule| rule["when"].as_str() == Some("manual"))
    );

    // The same command line, with the matrix's first context, is one bprun accepts: `--list`
    // parses everything and prints the phase's plan without contacting anything. BPRUN_ROOT is
    // the checkout, as the template sets it.
    let test = BPRUN.test_in_repository_copy();
    let root = test.path().to_path_buf();
    let test = test.env("BPRUN_ROOT", &root);
    let phase = ci["variables"]["BPRUN_PHASE"]
        .as_str()
        .expect("BPRUN_PHASE");
    test.run(&["--list", "--json", "--kube-context", &contexts[0], phase])
        .replace_regex(r#""ts":"[^"]+""#, r#""ts":"<time>""#)
        .expect(0, PHASE3_PLAN, "");
}

#[test]
fn ci_template_checks_for_drift_on_a_schedule_only_and_warns_on_exit_5() {
    let text = std::fs::read_to_string(deploy().join("gitlab-ci.yml")).expect("template");
    let ci: Value = serde_norway::from_str(&text).expect("YAML");
    let drift = &ci["bprun:drift"];
    let run = strings(&drift["script"])
        .into_iter()
        .find(|line| line.contains("$BPRUN_PHASE"))
        .expect("a line checking the phase");
    assert_eq!(
        run,
        "bprun --check --detailed-exitcode --json --kube-context \"$KUBE_CONTEXT\" \"$BPRUN_PHASE\" > bprun-drift.jsonl"
    );
    assert_eq!(
        serde_json::to_value(&drift["rules"]).expect("rules"),
        serde_json::json!([{"if": "$CI_PIPELINE_SOURCE == \"schedule\""}])
    );
    assert_eq!(
        serde_json::to_value(&drift["allow_failure"]).expect("allow_failure"),
        serde_json::json!({"exit_codes": [bprun::error::ExitCode::ChangesPending.code()]})
    );
    // The deploying job stays out of scheduled pipelines: a schedule checks, never applies.
    let rules = ci["bprun:phase3"]["rules"].as_sequence().expect("rules");
    assert!(rules.iter().any(|rule| rule["if"].as_str()
        == Some("$CI_PIPELINE_SOURCE == \"schedule\"")
        && rule["when"].as_str() == Some("never")));
    // bprun accepts the command line (`--list` reads it all and contacts nothing).
    let test = BPRUN.test_in_repository_copy();
    let root = test.path().to_path_buf();
    let test = test.env("BPRUN_ROOT", &root);
    test.run(&[
        "--list",
        "--check",
        "--detailed-exitcode",
        "--json",
        "--kube-context",
        "staging",
        "scripts/phase3.rhai",
    ])
    .replace_regex(r#""ts":"[^"]+""#, r#""ts":"<time>""#)
    .expect(0, PHASE3_PLAN, "");
}

#[test]
fn manifests_apply_to_the_kubernetes_simulator_dry_run_then_for_real() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    // The platform's namespace the Role lives in exists before bprun is deployed.
    sim.kubectl(&["create", "namespace", "gitlab"]).ok();
    let files = manifest_files();
    let path = |file: &PathBuf| file.to_str().expect("utf-8 path").to_string();
    // The Namespace first: a server-side dry run of the others needs it to exist.
    let (namespace, rest) = files.split_first().expect("files");
    assert!(namespace.ends_with("00-namespace.yaml"));
    sim.kubectl(&["apply", "--dry-run=server", "-f", &path(namespace)])
        .expect(0, "namespace/bprun created (server dry run)\n", "");
    sim.kubectl(&["get", "namespace", "bprun"]).code(1);
    sim.kubectl(&["apply", "-f", &path(namespace)]).ok();
    // kubectl's words for each of the other files' objects.
    let objects = [
        "serviceaccount/bprun",
        "role.rbac.authorization.k8s.io/bprun-phase3\nrolebinding.rbac.authorization.k8s.io/bprun-phase3",
        "clusterrole.rbac.authorization.k8s.io/bprun-ci-deployer",
        "clusterrole.rbac.authorization.k8s.io/bprun-phase3-identities\nclusterrolebinding.rbac.authorization.k8s.io/bprun-phase3-identities",
        "configmap/bprun-platform",
        "job.batch/bprun-phase3",
    ];
    assert_eq!(rest.len(), objects.len(), "{rest:?}");
    for (file, objects) in rest.iter().zip(objects) {
        let expected: String = objects
            .lines()
            .map(|object| format!("{object} created (server dry run)\n"))
            .collect();
        let out = sim.kubectl(&["apply", "--dry-run=server", "-f", &path(file)]);
        expect_output(&file.display().to_string(), &out, 0, &expected, "");
    }
    sim.kubectl(&["get", "job", "bprun-phase3", "-n", "bprun"])
        .code(1);
    // Then for real, the whole folder as the README says.
    let folder = deploy().join("kubernetes");
    sim.kubectl(&["apply", "-f", folder.to_str().expect("utf-8")])
        .expect(
            0,
            "
            namespace/bprun unchanged
            serviceaccount/bprun created
            role.rbac.authorization.k8s.io/bprun-phase3 created
            rolebinding.rbac.authorization.k8s.io/bprun-phase3 created
            clusterrole.rbac.authorization.k8s.io/bprun-ci-deployer created
            clusterrole.rbac.authorization.k8s.io/bprun-phase3-identities created
            clusterrolebinding.rbac.authorization.k8s.io/bprun-phase3-identities created
            configmap/bprun-platform created
            job.batch/bprun-phase3 created
            ",
            "",
        );
    let job = sim.kubectl(&[
        "get",
        "job",
        "bprun-phase3",
        "-n",
        "bprun",
        "-o",
        "jsonpath={.spec.backoffLimit} {.spec.template.spec.serviceAccountName} {.spec.template.spec.restartPolicy}",
    ]);
    assert_eq!(job.ok(), "0 bprun Never");
    let role = sim.kubectl(&[
        "get",
        "rolebinding",
        "bprun-phase3",
        "-n",
        "gitlab",
        "-o",
        "jsonpath={.subjects[0].namespace}/{.subjects[0].name} {.roleRef.name}",
    ]);
    assert_eq!(role.ok(), "bprun/bprun bprun-phase3");
    // The Job's pod exists and waits, in the kubelet's words, for the Secret the operator
    // creates: the token is referenced, not shipped. (The simulator never runs the image.)
    sim.kubectl(&[
        "wait",
        "pods",
        "-n",
        "bprun",
        "-l",
        "job-name=bprun-phase3",
        "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=CreateContainerConfigError",
        "--timeout=20s",
    ])
    .ok();
    let waiting = sim.kubectl(&[
        "get",
        "pods",
        "-n",
        "bprun",
        "-l",
        "job-name=bprun-phase3",
        "-o",
        "jsonpath={.items[0].spec.serviceAccountName} {.items[0].status.containerStatuses[0].state.waiting.message}",
    ]);
    assert_eq!(waiting.ok(), "bprun secret \"bprun-tokens\" not found");
    // Applying again changes nothing.
    sim.kubectl(&["apply", "-f", folder.to_str().expect("utf-8")])
        .expect(
            0,
            "
            namespace/bprun unchanged
            serviceaccount/bprun unchanged
            role.rbac.authorization.k8s.io/bprun-phase3 unchanged
            rolebinding.rbac.authorization.k8s.io/bprun-phase3 unchanged
            clusterrole.rbac.authorization.k8s.io/bprun-ci-deployer unchanged
            clusterrole.rbac.authorization.k8s.io/bprun-phase3-identities unchanged
            clusterrolebinding.rbac.authorization.k8s.io/bprun-phase3-identities unchanged
            configmap/bprun-platform unchanged
            job.batch/bprun-phase3 unchanged
            ",
            "",
        );
}

/// The one container of the Job.
fn job_container() -> (Value, Value) {
    let jobs = of_kind("Job");
    assert_eq!(jobs.len(), 1);
    let job = jobs.into_iter().next().expect("job");
    let containers = job["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers")
        .clone();
    assert_eq!(containers.len(), 1);
    (job, containers[0].clone())
}

/// True when bprun's sources or the phase scripts read environment variable `name`.
fn bprun_reads(name: &str) -> bool {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let quoted = format!("\"{name}\"");
    let mut pending = vec![
        root.join("src"),
        root.join("crates/clients/src"),
        root.join("scripts"),
    ];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if std::fs::read_to_string(&path).is_ok_and(|text| text.contains(&quoted)) {
                return true;
            }
        }
    }
    false
}

#[test]
fn job_runs_phase3_with_json_and_only_variables_bprun_reads_and_no_inline_token() {
    let (job, container) = job_container();
    let spec = &job["spec"];
    assert_eq!(spec["backoffLimit"].as_u64(), Some(0));
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"].as_str(), Some("Never"));
    assert_eq!(pod["serviceAccountName"].as_str(), Some("bprun"));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    assert!(container["resources"]["limits"]["memory"].is_string());

    // The command line: bprun, JSON events, phase 3; and bprun accepts exactly these arguments
    // (run with --list in a copy of the repository laid out as in the image: BPRUN_ROOT set).
    let command = strings(&container["command"]);
    let args = strings(&container["args"]);
    assert_eq!(command, ["bprun"]);
    assert_eq!(args, ["--json", "scripts/phase3.rhai"]);
    let test = BPRUN.test_in_repository_copy();
    let root = test.path().to_path_buf();
    let test = test.env("BPRUN_ROOT", &root);
    let mut listed = vec!["--list"];
    listed.extend(args.iter().map(String::as_str));
    test.run(&listed)
        .replace_regex(r#""ts":"[^"]+""#, r#""ts":"<time>""#)
        .expect(0, PHASE3_PLAN, "");

    // The environment: the ConfigMap's keys and the env entries, each a name bprun reads; the
    // ConfigMap holds no token; every token-like entry is a Secret reference, never a value.
    let configmaps = of_kind("ConfigMap");
    assert_eq!(configmaps.len(), 1);
    let config = configmaps[0]["data"].as_mapping().expect("data");
    let referenced = container["envFrom"][0]["configMapRef"]["name"].as_str();
    assert_eq!(referenced, configmaps[0]["metadata"]["name"].as_str());
    let mut names: Vec<String> = config
        .keys()
        .map(|key| key.as_str().expect("key").to_string())
        .collect();
    let secretish = |name: &str| {
        ["TOKEN", "PASSWORD", "SECRET", "KEY"]
            .iter()
            .any(|w| name.contains(w))
    };
    for name in &names {
        assert!(!secretish(name), "{name} in a ConfigMap");
    }
    for entry in container["env"].as_sequence().expect("env") {
        let name = entry["name"].as_str().expect("name").to_string();
        if secretish(&name) {
            assert!(entry["value"].is_null(), "{name} has an inline value");
            assert!(
                entry["valueFrom"]["secretKeyRef"]["name"].is_string(),
                "{name} is not a Secret reference"
            );
        }
        names.push(name);
    }
    assert!(names.iter().any(|n| n == "BAO_TOKEN"));
    for name in &names {
        assert!(bprun_reads(name), "bprun reads no variable {name}");
    }
    // No Secret with a value ships in deploy/kubernetes.
    assert!(of_kind("Secret").is_empty());

    // Everything the run writes under the read-only root is a mounted volume.
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .map(|mount| mount["mountPath"].as_str().expect("mountPath"))
        .collect();
    for path in ["/opt/bprun/.bprun", "/opt/bprun/apps-local", "/tmp"] {
        assert!(mounts.contains(&path), "{path} is not mounted: {mounts:?}");
    }
}

#[test]
fn rbac_names_what_phase3_calls_and_nothing_more() {
    // Checked by reading, not enforced (see the module comment): the Role grants the resources
    // phase 3's natives touch in the gitlab namespace, and no Secrets or wildcards.
    let roles = of_kind("Role");
    assert_eq!(roles.len(), 1);
    let role = &roles[0];
    assert_eq!(role["metadata"]["namespace"].as_str(), Some("gitlab"));
    let mut granted = Vec::new();
    for rule in role["rules"].as_sequence().expect("rules") {
        for resource in strings(&rule["resources"]) {
            for verb in strings(&rule["verbs"]) {
                granted.push(format!("{verb} {resource}"));
            }
        }
    }
    granted.sort();
    assert_eq!(
        granted,
        [
            "create pods/exec",
            "create pods/portforward",
            "get pods",
            "get pods/exec",
            "get pods/portforward",
            "get services",
            "list pods",
        ]
    );
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/phase3.rhai"))
            .expect("phase3");
    assert!(script.contains(r#"kube_port_forward("gitlab", "svc/gitlab-registry", 5000)"#));
    assert!(script.contains(r#"kube_exec("gitlab", "app=toolbox""#));
    let bindings = of_kind("RoleBinding");
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0]["subjects"][0]["name"].as_str(), Some("bprun"));
    assert_eq!(
        bindings[0]["subjects"][0]["namespace"].as_str(),
        Some("bprun")
    );
    // Cluster-wide: the deployers' role, which bprun may only bind, and what creating the apps'
    // namespaces, accounts, bindings and tokens takes (each narrowed by name where RBAC can).
    let cluster_roles: Vec<String> = of_kind("ClusterRole")
        .iter()
        .map(|role| role["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        cluster_roles,
        ["bprun-ci-deployer", "bprun-phase3-identities"]
    );
    let identities = &of_kind("ClusterRole")[1];
    let mut granted = Vec::new();
    for rule in identities["rules"].as_sequence().expect("rules") {
        let names = strings(&rule["resourceNames"]).join(",");
        for resource in strings(&rule["resources"]) {
            for verb in strings(&rule["verbs"]) {
                granted.push(if names.is_empty() {
                    format!("{verb} {resource}")
                } else {
                    format!("{verb} {resource} {names}")
                });
            }
        }
    }
    granted.sort();
    assert_eq!(
        granted,
        [
            "bind clusterroles bprun-ci-deployer",
            "create namespaces",
            "create rolebindings",
            "create serviceaccounts",
            "create serviceaccounts/token ci-deployer",
            "delete clusterroles bprun-ci-deployer",
            "delete rolebindings ci-deployer",
            "delete serviceaccounts ci-deployer",
            "get clusterroles bprun-ci-deployer",
            "get configmaps kube-root-ca.crt",
            "get namespaces",
            "get rolebindings",
            "get serviceaccounts",
            "list deployments",
            "list namespaces",
            "list statefulsets",
            "patch namespaces",
            "patch rolebindings",
            "patch serviceaccounts",
        ]
    );
    let cluster_bindings = of_kind("ClusterRoleBinding");
    assert_eq!(cluster_bindings.len(), 1);
    assert_eq!(
        cluster_bindings[0]["roleRef"]["name"].as_str(),
        Some("bprun-phase3-identities")
    );
}
