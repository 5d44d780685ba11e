//! Issue #18: bprun in a pod. kube-rs reads a pod's service account from fixed paths
//! (`/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}`) and the API
//! server from `KUBERNETES_SERVICE_HOST`/`PORT`; the test runs the real binary in a private
//! mount namespace (`unshare -rm`) with a tmpfs over /run holding those files, no KUBECONFIG and
//! an empty HOME, against the Kubernetes simulator. So the code path is kube-rs's in-cluster one.

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
/// account's files (when `mounted`), no KUBECONFIG, HOME empty.
fn run_in_pod(test: &Test, account: &ServiceAccount, token: &str, mounted: bool) -> Output {
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
        .arg("scripts/test.rhai")
        .current_dir(test.path())
        .env_clear()
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
    run.code(0);
    run.stdout_contains("namespaces: true\n");
    run.stdout_contains("server: true\n");
    run.stdout_contains("token: true\n");
    let written = sim.kubectl(&["-n", "default", "get", "configmap", "written-from-a-pod"]);
    written.success();

    // The files made it work: without them there is no configuration at all ...
    let without = run_in_pod(&test, &account, &token, false);
    without.code(1);
    without.stderr_contains("no Kubernetes configuration");
    // ... and with a token the API server does not know, it answers 401.
    let stranger = service_account(&sim, "sim-not-the-token");
    let refused = run_in_pod(&test, &stranger, "sim-not-the-token", true);
    refused.code(1);
    refused.stderr_contains("401");
}
