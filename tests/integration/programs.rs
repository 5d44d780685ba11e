//! Containers run their image's program (crates/sim/src/kube/programs): the real upstream charts
//! installed with the real helm into `bprun sim kube`, then driven with the real kubectl exec and
//! port-forward as an operator would, answered in the real tools' words.

use crate::support::{BPRUN, SimKind, repo};
use bprun_testkit::Sim;

fn root(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The platform's storage: local-path, made the default class (the charts' claims bind).
fn with_default_storage(sim: &Sim) {
    sim.kubectl(&[
        "apply",
        "-f",
        &root("infra/manifests/local-path-provisioner-v0.0.30/local-path-storage.yaml"),
    ])
    .ok();
    sim.kubectl(&[
        "patch",
        "storageclass",
        "local-path",
        "-p",
        r#"{"metadata":{"annotations":{"storageclass.kubernetes.io/is-default-class":"true"}}}"#,
    ])
    .ok();
}

fn ready_condition(sim: &Sim, pod: &str, namespace: &str) -> String {
    sim.jsonpath(
        &format!("pod/{pod}"),
        namespace,
        "{.status.conditions[?(@.type==\"Ready\")].status}",
    )
}

/// The messages of the namespace's `Unhealthy` events, once there is one (bounded: 120 looks,
/// 250 ms apart).
fn unhealthy_events(sim: &Sim, namespace: &str) -> String {
    for _ in 0..120 {
        let events = sim.kubectl(&[
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector=reason=Unhealthy",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        if !events.ok().is_empty() {
            return events.stdout.clone();
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    String::new()
}

#[test]
fn openbao_runs_a_real_server_ready_only_once_unsealed() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    with_default_storage(&sim);
    sim.helm(&[
        "install",
        "openbao",
        &root("infra/helm-charts/openbao-0.11.0.tgz"),
        "-n",
        "openbao",
        "--create-namespace",
    ])
    .code(0);
    for condition in ["--for=create", "--for=jsonpath={.status.phase}=Running"] {
        sim.kubectl(&[
            "wait",
            "pod/openbao-0",
            "-n",
            "openbao",
            condition,
            "--timeout=30s",
        ])
        .ok();
    }
    // Sealed and uninitialised: the chart's readiness probe (`bao status`, exit 2) fails, so
    // the pod stays unready, with the probe's output in its event.
    let status = sim.kubectl(&[
        "exec",
        "-n",
        "openbao",
        "openbao-0",
        "--",
        "bao",
        "status",
        "-format=json",
    ]);
    status.code(2);
    let sealed: serde_json::Value = serde_json::from_str(&status.stdout).expect("bao status JSON");
    assert_eq!(sealed["initialized"], false);
    assert_eq!(sealed["sealed"], true);
    let events = unhealthy_events(&sim, "openbao");
    assert!(
        events.contains("Readiness probe failed: ") && events.contains("Sealed"),
        "{events}"
    );
    assert_eq!(ready_condition(&sim, "openbao-0", "openbao"), "False");
    // What an operator runs: init, then unseal with the key it printed.
    let init = sim.kubectl(&[
        "exec",
        "-n",
        "openbao",
        "openbao-0",
        "--",
        "bao",
        "operator",
        "init",
        "-format=json",
        "-key-shares=1",
        "-key-threshold=1",
    ]);
    let init: serde_json::Value = serde_json::from_str(init.ok()).expect("init JSON");
    let key = init["unseal_keys_b64"][0]
        .as_str()
        .expect("an unseal key")
        .to_string();
    assert!(
        init["root_token"].as_str().is_some_and(|t| !t.is_empty()),
        "{init}"
    );
    assert_eq!(ready_condition(&sim, "openbao-0", "openbao"), "False");
    let again = sim.kubectl(&[
        "exec",
        "-n",
        "openbao",
        "openbao-0",
        "--",
        "bao",
        "operator",
        "init",
        "-format=json",
        "-key-shares=1",
        "-key-threshold=1",
    ]);
    again.code(2);
    again.stderr_contains("Vault is already initialized");
    sim.kubectl(&[
        "exec",
        "-n",
        "openbao",
        "openbao-0",
        "--",
        "bao",
        "operator",
        "unseal",
        &key,
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "pod/openbao-0",
        "-n",
        "openbao",
        "--for=condition=Ready",
        "--timeout=30s",
    ])
    .ok();
    // Its port 8200 is the real server, through the Service (kube-rs's port-forward, as bprun's
    // natives use it).
    let script = r#"
step("Forward", || {
    let address = kube_port_forward("openbao", "svc/openbao", 8200);
    assert_eq(http_status(`http://${address}/v1/sys/seal-status`, 10), 200);
    // The real server: no token, permission denied.
    assert_eq(http_status(`http://${address}/v1/secret/data/x`, 10), 403);
});
"#;
    repo()
        .script(script)
        .env("KUBECONFIG", sim.kubeconfig().display().to_string())
        .run(&["scripts/test.rhai"])
        .code(0);
    // A restarted pod keeps its storage and comes back sealed, as a real one does.
    sim.kubectl(&["delete", "pod", "openbao-0", "-n", "openbao"])
        .ok();
    for condition in ["--for=create", "--for=jsonpath={.status.phase}=Running"] {
        sim.kubectl(&[
            "wait",
            "pod/openbao-0",
            "-n",
            "openbao",
            condition,
            "--timeout=30s",
        ])
        .ok();
    }
    let restarted = sim.kubectl(&[
        "exec",
        "-n",
        "openbao",
        "openbao-0",
        "--",
        "sh",
        "-c",
        "bao status -format=json",
    ]);
    restarted.code(2);
    let restarted: serde_json::Value =
        serde_json::from_str(&restarted.stdout).expect("bao status JSON");
    assert_eq!(restarted["initialized"], true);
    assert_eq!(restarted["sealed"], true);
    assert_eq!(ready_condition(&sim, "openbao-0", "openbao"), "False");
    // Programs the image does not have are not found, in containerd's words.
    let missing = sim.kubectl(&[
        "exec",
        "-n",
        "openbao",
        "openbao-0",
        "--",
        "psql",
        "-c",
        "SELECT 1",
    ]);
    missing.code(127);
    missing.stderr_contains("exec: \"psql\": executable file not found in $PATH");
}
