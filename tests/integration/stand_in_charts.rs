//! The stand-in GitLab 10.1.1 and GitLab Runner 0.71.0 charts (infra/helm-charts/stand-ins/)
//! pass the real helm 4 and helm 3 `lint` and `template`, create the real charts' workloads, and
//! installed into `bprun sim kube` leave the webservice waiting for the object storage Secret
//! in the kubelet's words until it exists; a second upgrade with the same values changes nothing.

use crate::support::wait_pods_ready;
use crate::support::{BPRUN, Output, SimKind, tool};
use std::process::Command;

fn root(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

const GITLAB: &str = "infra/helm-charts/stand-ins/gitlab";
const RUNNER: &str = "infra/helm-charts/stand-ins/gitlab-runner";
const GITLAB_VALUES: &str = "tests/fixtures/charts/gitlab-values.yaml";
const RUNNER_VALUES: &str = "tests/fixtures/charts/gitlab-runner-values.yaml";

/// Runs helm (`helm` is v4, `helm3` v3) without a cluster.
pub(crate) fn helm(program: &str, args: &[&str]) -> Output {
    let home = tempfile::tempdir().expect("helm home");
    let output = Command::new(tool(program))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("run helm");
    Output::raw(output)
}

/// The Secrets a workload's projected volumes read, as `name:key,key`.
fn projected_secrets(workload: &serde_json::Value) -> Vec<String> {
    workload["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| {
            v["projected"]["sources"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|s| {
            let items: Vec<&str> = s["secret"]["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["key"].as_str().unwrap())
                .collect();
            format!(
                "{}:{}",
                s["secret"]["name"].as_str().unwrap(),
                items.join(",")
            )
        })
        .collect()
}

fn documents(rendered: &str) -> Vec<serde_json::Value> {
    rendered
        .split("\n---")
        .filter_map(|doc| serde_norway::from_str::<serde_json::Value>(doc).ok())
        .filter(|doc| doc.is_object())
        .collect()
}

fn kinds_and_names(documents: &[serde_json::Value]) -> Vec<String> {
    let mut names: Vec<String> = documents
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    names.sort();
    names
}

#[test]
fn the_stand_ins_pass_lint_and_render_the_real_charts_workloads_with_helm_4_and_3() {
    for program in ["helm", "helm3"] {
        for (chart, values) in [(GITLAB, GITLAB_VALUES), (RUNNER, RUNNER_VALUES)] {
            helm(program, &["lint", "--strict", chart, "-f", values]).expect(
                0,
                &format!(
                    "==> Linting {chart}\n[INFO] Chart.yaml: icon is recommended\n\n1 chart(s) linted, 0 chart(s) failed\n"
                ),
                "",
            );
        }
        let rendered = helm(
            program,
            &[
                "template",
                "gitlab",
                GITLAB,
                "-n",
                "gitlab",
                "-f",
                GITLAB_VALUES,
            ],
        );
        let gitlab = documents(rendered.code(0).stderr("").stdout.as_str());
        let names = kinds_and_names(&gitlab);
        for expected in [
            "Deployment/gitlab-webservice-default",
            "Deployment/gitlab-registry",
            "Deployment/gitlab-kas",
            "Deployment/gitlab-sidekiq-all-in-1-v2",
            "Deployment/gitlab-toolbox",
            "Deployment/envoy-gateway",
            "StatefulSet/gitlab-gitaly",
            "GatewayClass/gitlab-gw",
            "Gateway/gitlab-gw",
            "EnvoyProxy/gitlab-envoy-proxy",
            "HTTPRoute/gitlab-webservice-default",
            "Service/gitlab-webservice-default",
            "Service/gitlab-registry",
            "Service/gitlab-kas",
            "Service/gitlab-gitaly",
            "Secret/gitlab-rails-secret",
            "Secret/gitlab-gitaly-secret",
            "Secret/gitlab-gitlab-shell-secret",
            "Secret/gitlab-gitlab-kas-secret",
            "Secret/gitlab-registry-secret",
            "Secret/gitlab-initial-root-password",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{program}: {expected} in {names:?}"
            );
        }
        let find = |kind: &str, name: &str| {
            gitlab
                .iter()
                .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{kind}/{name}"))
                .clone()
        };
        let sources = projected_secrets(&find("Deployment", "gitlab-webservice-default"));
        for expected in [
            "gitlab-rails-storage:connection",
            "gitlab-postgresql-password:password",
            "gitlab-redis-password:redis-password",
            "gitlab-rails-secret:secrets.yml",
        ] {
            assert!(
                sources.iter().any(|s| s == expected),
                "{program}: {expected} in {sources:?}"
            );
        }
        let registry = projected_secrets(&find("Deployment", "gitlab-registry"));
        assert!(
            registry.iter().any(|s| s == "gitlab-rails-storage:config"),
            "{program}: {registry:?}"
        );
        let gateway = find("Gateway", "gitlab-gw");
        let refs: Vec<String> = gateway["spec"]["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["protocol"] == "HTTPS")
            .map(|l| {
                format!(
                    "{}={}@{}",
                    l["name"].as_str().unwrap(),
                    l["tls"]["certificateRefs"][0]["name"].as_str().unwrap(),
                    l["hostname"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            refs,
            [
                "gitlab-web=gitlab-wildcard-tls@gitlab.local.example.net",
                "registry-web=registry-tls@registry.local.example.net",
                "kas-web=kas-tls@kas.local.example.net"
            ],
            "{program}"
        );
        // The real chart's certmanager-issuer subchart (no condition) requires its email at
        // every render, in helm's words with the subchart's template position.
        helm(program, &["template", "gitlab", GITLAB, "-n", "gitlab"]).expect(
            1,
            "",
            "Error: execution error at (gitlab/charts/certmanager-issuer/templates/cert-manager.yml:14:3): You must provide an email to associate with your TLS certificates. Please set certmanager-issuer.email\n\
             \n\
             Use --debug flag to render out invalid YAML\n",
        );
        let rendered = helm(
            program,
            &[
                "template",
                "gitlab-runner",
                RUNNER,
                "-n",
                "gitlab-runner",
                "-f",
                RUNNER_VALUES,
            ],
        );
        let runner = documents(rendered.code(0).stderr("").stdout.as_str());
        assert_eq!(
            kinds_and_names(&runner),
            [
                "ConfigMap/gitlab-runner",
                "Deployment/gitlab-runner",
                "Role/gitlab-runner",
                "RoleBinding/gitlab-runner",
                "Secret/gitlab-runner",
                "ServiceAccount/gitlab-runner"
            ]
        );
        let deployment = runner.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["env"][0]["name"], "CI_SERVER_URL");
        assert_eq!(
            container["env"][0]["value"],
            "http://gitlab-webservice-default.gitlab.svc:8181"
        );
        assert_eq!(
            container["image"],
            "registry.gitlab.com/gitlab-org/gitlab-runner:alpine-v17.6.0"
        );
        // An existing Secret instead of a token: no Secret rendered, the pod reads that one.
        let rendered = helm(
            program,
            &[
                "template",
                "gitlab-runner",
                RUNNER,
                "-n",
                "gitlab-runner",
                "--set",
                "gitlabUrl=http://gitlab,runners.secret=runner-existing",
            ],
        );
        let existing = documents(rendered.code(0).stderr("").stdout.as_str());
        assert!(!existing.iter().any(|d| d["kind"] == "Secret"));
        let deployment = existing
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("the runner's Deployment");
        assert_eq!(
            projected_secrets(deployment),
            ["runner-existing:runner-registration-token,runner-token"],
            "{program}"
        );
        // certsSecretName: that Secret, read-only where the runner looks for its CA files.
        let rendered = helm(
            program,
            &[
                "template",
                "gitlab-runner",
                RUNNER,
                "-n",
                "gitlab-runner",
                "--set",
                "gitlabUrl=https://gitlab.example,certsSecretName=runner-certs",
            ],
        );
        let with_certs = documents(rendered.code(0).stderr("").stdout.as_str());
        let pod = &with_certs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("the runner's Deployment")["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_array()
            .and_then(|volumes| volumes.iter().find(|v| v["name"] == "custom-certs"))
            .expect("the custom-certs volume");
        assert_eq!(volume["secret"]["secretName"], "runner-certs", "{program}");
        let mount = pod["containers"][0]["volumeMounts"]
            .as_array()
            .and_then(|mounts| mounts.iter().find(|m| m["name"] == "custom-certs"))
            .expect("the custom-certs mount");
        assert_eq!(
            (&mount["mountPath"], &mount["readOnly"]),
            (
                &serde_json::json!("/home/gitlab-runner/.gitlab-runner/certs/"),
                &serde_json::json!(true)
            ),
            "{program}"
        );
    }
}

/// Each Secret of the namespace but helm's release records, as `name=data`.
fn chart_secrets(sim: &crate::support::Sim) -> Vec<String> {
    let all = sim.jsonpath(
        "secrets",
        "gitlab",
        "{range .items[*]}{.metadata.name}={.data}{\"\\n\"}{end}",
    );
    let kept: Vec<String> = all
        .lines()
        .filter(|line| !line.starts_with("sh.helm.release."))
        .map(str::to_string)
        .collect();
    assert!(kept.len() >= 12, "{} Secrets", kept.len());
    kept
}

/// The messages of the namespace's FailedMount events, one a line, once one is `wanted`
/// (bounded: 20 s).
fn mount_events(sim: &crate::support::Sim, wanted: &str) -> Vec<String> {
    let mut last = Vec::new();
    for _ in 0..200 {
        let events = sim.kubectl(&[
            "get",
            "events",
            "-n",
            "gitlab",
            "--field-selector=reason=FailedMount",
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ]);
        last = events.ok().lines().map(str::to_string).collect();
        if last.iter().any(|message| message == wanted) {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    last
}

#[test]
fn the_gitlab_stand_in_waits_for_the_object_storage_secret_and_a_second_upgrade_changes_nothing() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    for crd in ["gatewayclasses", "gateways", "httproutes"] {
        let file = root(&format!(
            "infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_{crd}.yaml"
        ));
        sim.kubectl(&["apply", "--server-side", "-f", &file]).ok();
    }
    sim.kubectl(&["create", "ns", "gitlab"]).ok();
    for (name, key) in [
        ("gitlab-postgresql-password", "password"),
        ("gitlab-redis-password", "redis-password"),
    ] {
        sim.kubectl(&[
            "create",
            "secret",
            "generic",
            name,
            "-n",
            "gitlab",
            &format!("--from-literal={key}=s3cret"),
        ])
        .ok();
    }
    // A restored snapshot of a chart-managed Secret: the chart keeps it as it is.
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "gitlab-gitaly-secret",
        "-n",
        "gitlab",
        "--from-literal=token=restored-token",
    ])
    .ok();
    let values = root(GITLAB_VALUES);
    let chart = root(GITLAB);
    let upgrade = [
        "upgrade",
        "--install",
        "gitlab",
        chart.as_str(),
        "-n",
        "gitlab",
        "-f",
        values.as_str(),
        "--timeout",
        "60s",
    ];
    sim.helm(&upgrade).code(0);
    let missing = "MountVolume.SetUp failed for volume \"init-webservice-secrets\" : secret \"gitlab-rails-storage\" not found";
    let events = mount_events(&sim, missing);
    assert!(
        events.iter().any(|message| message == missing),
        "{events:?}"
    );
    let waiting = sim.jsonpath(
        "pods",
        "gitlab",
        "{.items[?(@.metadata.labels.app==\"webservice\")].status.conditions[?(@.type==\"Ready\")].status}",
    );
    assert_eq!(waiting, "False");
    assert_eq!(
        sim.jsonpath("secret/gitlab-gitaly-secret", "gitlab", "{.data.token}"),
        "cmVzdG9yZWQtdG9rZW4=",
        "the restored token is kept"
    );
    // With the Secret but without the key the webservice reads, the kubelet names the key.
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "gitlab-rails-storage",
        "-n",
        "gitlab",
        "--from-literal=config=s3",
    ])
    .ok();
    let no_key = "MountVolume.SetUp failed for volume \"init-webservice-secrets\" : references non-existent secret key: connection";
    let events = mount_events(&sim, no_key);
    assert!(events.iter().any(|message| message == no_key), "{events:?}");
    sim.kubectl(&["delete", "secret", "gitlab-rails-storage", "-n", "gitlab"])
        .ok();
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "gitlab-rails-storage",
        "-n",
        "gitlab",
        "--from-literal=connection=provider: AWS",
        "--from-literal=config=s3",
    ])
    .ok();
    wait_pods_ready(&sim, "gitlab", "app=webservice", "20s");
    sim.kubectl(&[
        "rollout",
        "status",
        "deployment/gitlab-webservice-default",
        "-n",
        "gitlab",
        "--timeout=20s",
    ])
    .ok();
    // The simulator's Envoy Gateway (running while envoy-gateway is Available) reports the
    // listener whose certificate Secret is missing, and programs the Gateway once all exist.
    let listener = |name: &str| {
        format!(
            "{{.status.listeners[?(@.name==\"{name}\")].conditions[?(@.type==\"ResolvedRefs\")].message}}"
        )
    };
    let mut message = String::new();
    for _ in 0..200 {
        message = sim.jsonpath("gateway/gitlab-gw", "gitlab", &listener("gitlab-web"));
        if !message.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(message, "Secret gitlab/gitlab-wildcard-tls does not exist.");
    assert_eq!(
        sim.jsonpath(
            "gateway/gitlab-gw",
            "gitlab",
            "{.status.conditions[?(@.type==\"Programmed\")].status}"
        ),
        "False"
    );
    assert_eq!(
        sim.jsonpath(
            "gatewayclass/gitlab-gw",
            "",
            "{.status.conditions[?(@.type==\"Accepted\")].status}"
        ),
        "True"
    );
    for name in ["gitlab-wildcard-tls", "registry-tls", "kas-tls"] {
        sim.kubectl(&[
            "create",
            "secret",
            "generic",
            name,
            "-n",
            "gitlab",
            "--type=kubernetes.io/tls",
            "--from-literal=tls.crt=cert",
            "--from-literal=tls.key=key",
        ])
        .ok();
    }
    sim.kubectl(&[
        "wait",
        "gateway/gitlab-gw",
        "-n",
        "gitlab",
        "--for=condition=Programmed",
        "--timeout=20s",
    ])
    .ok();
    assert_eq!(
        sim.jsonpath(
            "pods",
            "gitlab",
            "{range .items[?(@.metadata.labels.app\\.kubernetes\\.io/name==\"envoy\")]}{.status.phase}{\"\\n\"}{end}"
        ),
        "Running\n",
        "one Envoy proxy pod (the EnvoyProxy asks for no more replicas)"
    );
    // A second upgrade with the same values renders the same manifest.
    let first = sim
        .helm(&["get", "manifest", "gitlab", "-n", "gitlab"])
        .ok()
        .to_string();
    let secrets_before = chart_secrets(&sim);
    sim.helm(&upgrade).code(0);
    let second = sim
        .helm(&["get", "manifest", "gitlab", "-n", "gitlab"])
        .ok()
        .to_string();
    assert!(
        kinds_and_names(&documents(&first))
            .iter()
            .any(|name| name == "Deployment/gitlab-webservice-default"),
        "{first}"
    );
    assert_eq!(first, second);
    assert!(
        secrets_before == chart_secrets(&sim),
        "the chart-managed Secrets keep their values"
    );
    assert_eq!(
        sim.jsonpath("secret/gitlab-gitaly-secret", "gitlab", "{.data.token}"),
        "cmVzdG9yZWQtdG9rZW4="
    );
}
