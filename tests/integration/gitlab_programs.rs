//! GitLab's images run their programs on a bare platform (`bprun sim all --platform bare`, as
//! phase 2 finds it): the GitLab stand-in chart installed with the real helm into it serves
//! GitLab at GITLAB_URL only once a webservice pod is Ready (Envoy's `503 no healthy upstream`
//! before and after), the webservice checks its database password against the simulated
//! PostgreSQL of the CloudNativePG Cluster and crash-loops with PostgreSQL's words while it is
//! wrong (then its Redis password against the bitnami chart's real redis-server, with redis-rb's
//! words), its and the registry's ports forward to what serves them, and a runner pod with a token
//! GitLab created comes online while one with a token GitLab does not know crash-loops with
//! GitLab Runner's words.

use crate::support::helm_install;
use crate::support::wait_pods_ready;
use crate::support::{BPRUN, SimKind, repo};
use bprun_testkit::Sim;
use std::time::Duration;

fn root(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

const GITLAB_VALUES: &str = "tests/fixtures/charts/gitlab-values.yaml";
const RUNNER_VALUES: &str = "tests/fixtures/charts/gitlab-runner-values.yaml";

/// `f` until it returns `Some` (bounded: 240 looks, 250 ms apart); the last `None` panics with
/// `what`.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..240 {
        if let Some(found) = f() {
            return found;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("never: {what}")
}

fn secret(sim: &Sim, namespace: &str, name: &str, pairs: &[(&str, &str)]) {
    let mut args = vec![
        "create".to_string(),
        "secret".into(),
        "generic".into(),
        name.into(),
        "-n".into(),
        namespace.into(),
    ];
    args.extend(pairs.iter().map(|(k, v)| format!("--from-literal={k}={v}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sim.kubectl(&args).ok();
}

/// The platform's storage and CloudNativePG with a Ready Cluster `postgresql-cnpg`, whose
/// server has role `gitlab` (password `right-password`) owning `gitlabhq_production`.
fn postgres(sim: &Sim) {
    crate::programs::with_default_storage(sim);
    helm_install(
        sim,
        "cnpg",
        "cloudnative-pg-0.26.1",
        "cnpg-system",
        &["--wait", "--timeout", "60s"],
    )
    .code(0);
    sim.kubectl(&["create", "ns", "postgresql"]).ok();
    let cluster = "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata: {name: postgresql-cnpg, namespace: postgresql}\n\
                   spec: {instances: 1, storage: {size: 1Gi}}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], cluster).code(0);
    sim.kubectl(&[
        "wait",
        "clusters.postgresql.cnpg.io/postgresql-cnpg",
        "-n",
        "postgresql",
        "--for=condition=Ready",
        "--timeout=60s",
    ])
    .ok();
    for statement in [
        "CREATE ROLE gitlab LOGIN PASSWORD 'right-password'",
        "CREATE DATABASE gitlabhq_production OWNER gitlab",
    ] {
        sim.kubectl(&[
            "exec",
            "postgresql-cnpg-1",
            "-n",
            "postgresql",
            "-c",
            "postgres",
            "--",
            "psql",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            statement,
        ])
        .ok();
    }
}

/// GITLAB_URL's answer to `/-/health`: (status, body).
fn health(sim: &Sim) -> (u16, String) {
    let reply = sim.raw("GET", "/-/health", None, None);
    (reply.status, reply.body)
}

fn webservice_pod_field(sim: &Sim, path: &str) -> String {
    sim.jsonpath(
        "pods",
        "gitlab",
        &format!("{{.items[?(@.metadata.labels.app==\"webservice\")]{path}}}"),
    )
}

#[test]
fn gitlab_serves_once_its_webservice_is_ready_and_runners_verify_their_token() {
    let sim = BPRUN.sim(SimKind::Bare, &[]);
    // Nothing of GitLab yet: the gateway has no healthy upstream.
    let (status, body) = health(&sim);
    assert_eq!((status, body.as_str()), (503, "no healthy upstream"));
    postgres(&sim);
    // Redis: the bitnami chart's real redis-server, whose password GitLab is not given yet.
    helm_install(
        &sim,
        "redis",
        "redis-19.6.4",
        "redis",
        &[
            "--wait",
            "--timeout",
            "60s",
            "--set",
            "architecture=standalone,image.repository=bitnamilegacy/redis,auth.password=redis-right",
        ],
    )
    .code(0);
    for crd in ["gatewayclasses", "gateways", "httproutes"] {
        let file = root(&format!(
            "infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_{crd}.yaml"
        ));
        sim.kubectl(&["apply", "--server-side", "-f", &file]).ok();
    }
    sim.kubectl(&["create", "ns", "gitlab"]).ok();
    // The database password GitLab is given differs from the role's.
    secret(
        &sim,
        "gitlab",
        "gitlab-postgresql-password",
        &[("password", "wrong-password")],
    );
    secret(
        &sim,
        "gitlab",
        "gitlab-redis-password",
        &[("redis-password", "r")],
    );
    secret(
        &sim,
        "gitlab",
        "gitlab-rails-storage",
        &[("connection", "provider: AWS"), ("config", "s3")],
    );
    sim.helm(&[
        "install",
        "gitlab",
        &root("infra/helm-charts/stand-ins/gitlab"),
        "-n",
        "gitlab",
        "-f",
        &root(GITLAB_VALUES),
    ])
    .code(0);
    let fatal = "FATAL:  password authentication failed for user \"gitlab\"";
    let waiting = eventually("the webservice crash-loops", || {
        let reason = webservice_pod_field(
            &sim,
            ".status.containerStatuses[?(@.name==\"webservice\")].state.waiting.reason",
        );
        (reason == "CrashLoopBackOff").then_some(reason)
    });
    assert_eq!(waiting, "CrashLoopBackOff");
    assert_eq!(
        webservice_pod_field(&sim, ".status.conditions[?(@.type==\"Ready\")].status"),
        "False"
    );
    let last = webservice_pod_field(
        &sim,
        ".status.containerStatuses[?(@.name==\"webservice\")].lastState.terminated.message",
    );
    assert!(
        last.contains("connection to server at \"postgresql-cnpg-rw.postgresql.svc\" (")
            && last.ends_with(&format!("port 5432 failed: {fatal}")),
        "{last}"
    );
    let logs = sim.kubectl(&[
        "logs",
        "deployment/gitlab-webservice-default",
        "-n",
        "gitlab",
        "-c",
        "webservice",
    ]);
    // The service's cluster IP is allocated at its creation.
    logs.replace_regex(r"\(10\.96\.\d+\.\d+\)", "(<cluster ip>)").expect(
        0,
        &format!(
            "Starting Puma\n\
             ActiveRecord::ConnectionNotEstablished: connection to server at \"postgresql-cnpg-rw.postgresql.svc\" (<cluster ip>), port 5432 failed: {fatal}\n"
        ),
        "",
    );
    let events = sim.jsonpath(
        "events",
        "gitlab",
        "{.items[?(@.reason==\"BackOff\")].message}",
    );
    assert!(
        events.contains(
            "Back-off restarting failed container webservice in pod gitlab-webservice-default-"
        ),
        "{events}"
    );
    assert_eq!(health(&sim), (503, "no healthy upstream".to_string()));

    // The right password: the restarted webservice connects, is Ready, and GitLab is served.
    sim.kubectl(&[
        "delete",
        "secret",
        "gitlab-postgresql-password",
        "-n",
        "gitlab",
    ])
    .ok();
    secret(
        &sim,
        "gitlab",
        "gitlab-postgresql-password",
        &[("password", "right-password")],
    );
    // The database answers; Redis refuses the password GitLab reads: the webservice
    // crash-loops with redis-rb's words.
    let wrongpass =
        "Redis::CannotConnectError: WRONGPASS invalid username-password pair or user is disabled.";
    eventually("the webservice exits on Redis's refusal", || {
        let last = webservice_pod_field(
            &sim,
            ".status.containerStatuses[?(@.name==\"webservice\")].lastState.terminated.message",
        );
        (last == wrongpass).then_some(())
    });
    assert_eq!(
        webservice_pod_field(&sim, ".status.conditions[?(@.type==\"Ready\")].status"),
        "False"
    );
    sim.kubectl(&[
        "logs",
        "deployment/gitlab-webservice-default",
        "-n",
        "gitlab",
        "-c",
        "webservice",
    ])
    .expect(0, &format!("Starting Puma\n{wrongpass}\n"), "");
    assert_eq!(health(&sim), (503, "no healthy upstream".to_string()));
    sim.kubectl(&["delete", "secret", "gitlab-redis-password", "-n", "gitlab"])
        .ok();
    secret(
        &sim,
        "gitlab",
        "gitlab-redis-password",
        &[("redis-password", "redis-right")],
    );
    wait_pods_ready(&sim, "gitlab", "app=webservice", "60s");
    let served = eventually("GitLab is served", || {
        let answer = health(&sim);
        (answer.0 == 200).then_some(answer)
    });
    assert_eq!(served.0, 200);
    // The webservice's and the registry's ports forward to what serves them (as phase 3's
    // pre-flight reaches them).
    wait_pods_ready(&sim, "gitlab", "app=registry", "60s");
    let script = r#"
step("Forward", || {
    let gitlab = kube_port_forward("gitlab", "svc/gitlab-webservice-default", 8181);
    assert_eq(http_status(`http://${gitlab}/-/health`, 10), 200);
    let registry = kube_port_forward("gitlab", "svc/gitlab-registry", 5000);
    assert_eq(http_status(`http://${registry}/v2/`, 10), 200);
});
"#;
    repo()
        .script(script)
        .env("KUBECONFIG", sim.kubeconfig().display().to_string())
        .run(&["scripts/test.rhai"])
        .code(0);

    // A runner GitLab created: its pod verifies the token and polls, so it is online.
    let created = sim.api(
        "POST",
        "user/runners",
        Some(r#"{"runner_type": "instance_type"}"#),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    let token = created["token"].as_str().expect("a token").to_string();
    sim.kubectl(&["create", "ns", "gitlab-runner"]).ok();
    secret(
        &sim,
        "gitlab-runner",
        "gitlab-runner-token",
        &[("runner-token", &token), ("runner-registration-token", "")],
    );
    let values = root(RUNNER_VALUES);
    let chart = root("infra/helm-charts/stand-ins/gitlab-runner");
    // A runner release of the stand-in chart, with one `--set`.
    let install_runner = |release: &str, set: &str| {
        sim.helm(&[
            "install",
            release,
            &chart,
            "-n",
            "gitlab-runner",
            "-f",
            &values,
            "--set",
            set,
        ])
        .code(0);
    };
    install_runner("gitlab-runner", "runners.secret=gitlab-runner-token");
    let online = eventually("the runner is online", || {
        let runners = sim.api_json("runners/all?status=online");
        runners
            .as_array()
            .into_iter()
            .flatten()
            .find(|runner| runner["id"] == created["id"])
            .cloned()
    });
    assert_eq!(online["status"], "online", "{online}");
    // One with a token GitLab does not know crash-loops with GitLab Runner's words.
    install_runner("bogus", "runnerToken=glrt-bogus0123456789abc");
    let bogus_state = "{.items[?(@.metadata.labels.release==\"bogus\")].status.containerStatuses[0].state.waiting.reason}";
    eventually("the bogus runner crash-loops", || {
        (sim.jsonpath("pods", "gitlab-runner", bogus_state) == "CrashLoopBackOff").then_some(())
    });
    let pod = sim.jsonpath(
        "pods",
        "gitlab-runner",
        "{.items[?(@.metadata.labels.release==\"bogus\")].metadata.name}",
    );
    let logs = sim.kubectl(&["logs", &pod, "-n", "gitlab-runner"]);
    // The runner's process id is the sandbox's.
    logs.replace_regex(r"pid=\d+", "pid=<pid>").expect(
        0,
        "Registration attempt 1 of 30\n\
         Runtime platform                                    arch=amd64 os=linux pid=<pid> revision=374d34fd version=17.6.0\n\
         Running in system-mode.\n\
         \n\
         Verifying runner... is not valid                    runner=bogus0123\n\
         PANIC: Failed to verify the runner.\n",
        "",
    );

    // Every webservice pod gone: no healthy upstream again.
    sim.kubectl(&[
        "scale",
        "deployment/gitlab-webservice-default",
        "-n",
        "gitlab",
        "--replicas=0",
    ])
    .ok();
    let gone = eventually("GitLab is no longer served", || {
        let answer = health(&sim);
        (answer.0 == 503).then_some(answer)
    });
    assert_eq!(gone, (503, "no healthy upstream".to_string()));
}
