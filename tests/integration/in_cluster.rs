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

/// The ServiceAccount `bprun/bprun` with deploy/kubernetes's RBAC, as an operator sets it up:
/// its token from the TokenRequest API (`kubectl create token`), its namespace in the pod.
fn deployed_account(sim: &Sim) -> (ServiceAccount, String) {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    for file in [
        "00-namespace.yaml",
        "10-serviceaccount.yaml",
        "20-rbac.yaml",
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
fn phase3_runs_in_a_pod_as_the_deployed_service_account_and_its_pipelines_need_more_rbac() {
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
    refused.code(1);
    refused.stderr_contains("Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:bprun:bprun\" cannot list resource \"secrets\" in API group \"\" in the namespace \"gitlab\"");

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
    let phase3_in_pod = || {
        run_in_pod_with(
            &copy,
            &account,
            &token,
            true,
            &["scripts/phase3.rhai"],
            &env,
        )
    };
    let run = phase3_in_pod();
    // Phase 3 itself stays within the Role: every step up to the smoke test succeeds. The apps'
    // pipelines then deploy with the kubeconfig bprun hands them, which carries this same
    // account's token (deploy/README.md): the Role does not let them deploy, and their jobs fail
    // with helm's and the API server's words, as they would on a real cluster.
    run.code(1);
    run.stdout_contains("[5/6] Provision projects ... changed");
    run.stderr_contains("error: step \"Smoke test\" failed");
    run.stderr_contains("secrets is forbidden: User \"system:serviceaccount:bprun:bprun\" cannot list resource \"secrets\" in API group \"\" in the namespace \"guestbook\"");
    // Given the rights the pipelines need (here, everything, cluster-wide), the run is green.
    let deployer = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: app-deployer}\n\
                    rules: [{apiGroups: ['*'], resources: ['*'], verbs: ['*']}]\n---\n\
                    apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: bprun-app-deployer}\n\
                    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: app-deployer}\n\
                    subjects: [{kind: ServiceAccount, name: bprun, namespace: bprun}]\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], deployer).success();
    let granted = phase3_in_pod();
    granted.code(0);
    sim.kubectl(&["delete", "clusterrolebinding", "bprun-app-deployer"])
        .success();

    // Without the RoleBinding the same run stops at its first cluster call, saying why.
    sim.kubectl(&["delete", "rolebinding", "bprun-phase3", "-n", "gitlab"])
        .success();
    let denied = phase3_in_pod();
    denied.code(1);
    denied.stderr_contains("is forbidden: User \"system:serviceaccount:bprun:bprun\" cannot");
    // A deleted account's token no longer authenticates.
    sim.kubectl(&["delete", "serviceaccount", "bprun", "-n", "bprun"])
        .success();
    let gone = sim.kubectl(&["get", "pods", "-n", "gitlab", "--token", &token]);
    gone.code(1);
    gone.stderr_contains("Unauthorized");
}
