//! Containers run their image's program (crates/sim/src/kube/programs): the real upstream charts
//! installed with the real helm into `bprun sim kube`, then driven with the real kubectl exec and
//! port-forward as an operator would, answered in the real tools' words.

use crate::support::exec_not_found;
use crate::support::helm_install;
use crate::support::one_step_run;
use crate::support::wait_openbao_pod;
use crate::support::{BPRUN, SimKind, repo};
use bprun_testkit::Sim;

fn root(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// local-path becomes the default storage class.
pub(crate) fn make_local_path_the_default(sim: &Sim) {
    sim.kubectl(&[
        "patch",
        "storageclass",
        "local-path",
        "-p",
        r#"{"metadata":{"annotations":{"storageclass.kubernetes.io/is-default-class":"true"}}}"#,
    ])
    .ok();
}

/// The platform's storage: local-path, made the default class (the charts' claims bind).
pub(crate) fn with_default_storage(sim: &Sim) {
    sim.kubectl(&[
        "apply",
        "-f",
        &root("infra/manifests/local-path-provisioner-v0.0.30/local-path-storage.yaml"),
    ])
    .ok();
    make_local_path_the_default(sim);
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
    helm_install(&sim, "openbao", "openbao-0.11.0", "openbao", &[]).code(0);
    for condition in ["--for=create", "--for=jsonpath={.status.phase}=Running"] {
        wait_openbao_pod(&sim, condition, "30s");
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
    // The probe's output is the real bao's `status` table; its version lines are whichever
    // bao ./test.sh installed.
    let events = unhealthy_events(&sim, "openbao");
    let probe: Vec<&str> = events
        .lines()
        .filter(|line| !line.starts_with("Version ") && !line.starts_with("Commit Date "))
        .collect();
    assert_eq!(
        probe,
        [
            "Readiness probe failed: Key                Value",
            "---                -----",
            "Seal Type          shamir",
            "Initialized        false",
            "Sealed             true",
            "Total Shares       0",
            "Threshold          0",
            "Unseal Progress    0/0",
            "Unseal Nonce       n/a",
            "Storage Type       raft",
            "HA Enabled         true",
        ],
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
    // The server listens on a port of the simulator's choosing (a real pod's is 8200).
    again
        .replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>")
        .expect(
            2,
            "",
            "
            Error initializing: Error making API request.

            URL: PUT http://127.0.0.1:<port>/v1/sys/init
            Code: 400. Errors:

            * Vault is already initialized
            command terminated with exit code 2
            ",
        );
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
    wait_openbao_pod(&sim, "--for=condition=Ready", "30s");
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
        .expect(0, &one_step_run("Forward", "ok"), "");
    // A restarted pod keeps its storage and comes back sealed, as a real one does.
    sim.kubectl(&["delete", "pod", "openbao-0", "-n", "openbao"])
        .ok();
    for condition in ["--for=create", "--for=jsonpath={.status.phase}=Running"] {
        wait_openbao_pod(&sim, condition, "30s");
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
    missing.expect(127, "", &exec_not_found("psql"));
}

/// `kubectl exec -n NAMESPACE TARGET -- ARGS`, with `stdin` when given.
fn exec(
    sim: &Sim,
    namespace: &str,
    target: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> bprun_testkit::Output {
    let mut words = vec!["exec"];
    if stdin.is_some() {
        words.push("-i");
    }
    words.extend(["-n", namespace, target, "--"]);
    words.extend(args);
    match stdin {
        Some(text) => sim.kubectl_stdin(&words, text),
        None => sim.kubectl(&words),
    }
}

#[test]
fn psql_redis_cli_and_mc_answer_in_the_charts_pods_as_the_real_tools() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    with_default_storage(&sim);
    for (release, archive, namespace, values) in [
        ("cnpg", "cloudnative-pg-0.26.1", "cnpg-system", ""),
        (
            "redis",
            "redis-19.6.4",
            "redis",
            "architecture=standalone,image.repository=bitnamilegacy/redis,auth.password=redis-pass-1",
        ),
        (
            "minio",
            "minio-5.4.0",
            "minio",
            "mode=standalone,replicas=1,resources.requests.memory=256Mi,rootUser=admin,rootPassword=admin-password-123",
        ),
    ] {
        let mut extra = vec!["--wait", "--timeout", "60s"];
        if !values.is_empty() {
            extra.extend(["--set", values]);
        }
        helm_install(&sim, release, archive, namespace, &extra).code(0);
    }
    // PostgreSQL: the platform's Cluster, then what phase 2 runs in its instance.
    sim.kubectl(&["create", "namespace", "postgresql"]).ok();
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &std::fs::read_to_string(root("infra/references/cluster-postgresql.yaml"))
            .expect("the platform's Cluster"),
    )
    .ok();
    for condition in ["--for=create", "--for=condition=Ready"] {
        sim.kubectl(&[
            "wait",
            "pod/postgresql-cnpg-1",
            "-n",
            "postgresql",
            condition,
            "--timeout=60s",
        ])
        .ok();
    }
    let pg = "pod/postgresql-cnpg-1";
    let probe = [
        "psql",
        "-v",
        "ON_ERROR_STOP=1",
        "-tAc",
        "SELECT 1 FROM pg_roles WHERE rolname='gitlab'",
    ];
    assert_eq!(exec(&sim, "postgresql", pg, &probe, None).ok(), "");
    let create = "CREATE ROLE gitlab LOGIN PASSWORD 'gitlab-pass-1';\n";
    assert_eq!(
        exec(
            &sim,
            "postgresql",
            pg,
            &["psql", "-v", "ON_ERROR_STOP=1"],
            Some(create)
        )
        .ok(),
        "CREATE ROLE\n"
    );
    assert_eq!(exec(&sim, "postgresql", pg, &probe, None).ok(), "1\n");
    let again = exec(
        &sim,
        "postgresql",
        pg,
        &["psql", "-v", "ON_ERROR_STOP=1"],
        Some(create),
    );
    again.expect(
        3,
        "",
        "ERROR:  role \"gitlab\" already exists\n\
         command terminated with exit code 3\n",
    );
    let database = [
        "psql",
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        "CREATE DATABASE gitlabhq_production OWNER gitlab",
    ];
    assert_eq!(
        exec(&sim, "postgresql", pg, &database, None).ok(),
        "CREATE DATABASE\n"
    );
    let twice = exec(&sim, "postgresql", pg, &database, None);
    twice.expect(
        1,
        "",
        "ERROR:  database \"gitlabhq_production\" already exists\n\
         command terminated with exit code 1\n",
    );
    let listed = exec(
        &sim,
        "postgresql",
        pg,
        &[
            "psql",
            "-tAc",
            "SELECT datname, pg_get_userbyid(datdba) FROM pg_database ORDER BY 1",
        ],
        None,
    );
    listed.expect(
        0,
        "app|app\ngitlabhq_production|gitlab\npostgres|postgres\ntemplate0|postgres\ntemplate1|postgres\n",
        "",
    );
    // Local connections are the image's postgres user's only (peer, mapped to postgres), as
    // CloudNativePG's pg_hba.conf has it; over TCP a role needs its password.
    exec(&sim, "postgresql", pg, &["psql", "-U", "gitlab", "-c", "SELECT 1"], None).expect(
        2,
        "",
        "psql: error: connection to server on socket \"/controller/run/.s.PGSQL.5432\" failed: FATAL:  Peer authentication failed for user \"gitlab\"\n\
         command terminated with exit code 2\n",
    );
    let over_tcp = |password: &str| {
        exec(
            &sim,
            "postgresql",
            pg,
            &[
                "sh",
                "-c",
                &format!(
                    "PGPASSWORD={password} psql -h 127.0.0.1 -U gitlab -d gitlabhq_production -tAc 'SELECT current_user'"
                ),
            ],
            None,
        )
    };
    over_tcp("gitlab-pass-1").expect(0, "gitlab\n", "");
    over_tcp("wrong").expect(
        2,
        "",
        "psql: error: connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  password authentication failed for user \"gitlab\"\n\
         command terminated with exit code 2\n",
    );
    // The bootstrap's own database and owner are there from the start.
    assert_eq!(
        exec(
            &sim,
            "postgresql",
            pg,
            &[
                "psql",
                "-tAc",
                "SELECT datname FROM pg_database WHERE datname='app'"
            ],
            None,
        )
        .ok(),
        "app\n"
    );
    // The data is the volume's: the operator's new instance pod finds the role and database.
    let uid_before = sim
        .kubectl(&[
            "get",
            pg,
            "-n",
            "postgresql",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .ok()
        .to_string();
    sim.kubectl(&["delete", pg, "-n", "postgresql", "--wait=true"])
        .ok();
    for condition in ["--for=create", "--for=condition=Ready"] {
        sim.kubectl(&[
            "wait",
            "pod/postgresql-cnpg-1",
            "-n",
            "postgresql",
            condition,
            "--timeout=60s",
        ])
        .ok();
    }
    let uid_after = sim
        .kubectl(&[
            "get",
            pg,
            "-n",
            "postgresql",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .ok()
        .to_string();
    assert_ne!(uid_before, uid_after, "the operator created a new pod");
    assert_eq!(exec(&sim, "postgresql", pg, &probe, None).ok(), "1\n");
    over_tcp("gitlab-pass-1").expect(0, "gitlab\n", "");
    // Redis: a real redis-server, whose password is the chart's Secret (the container's
    // REDIS_PASSWORD), and the real redis-cli. redis-cli 7.0 (Debian's, which ./test.sh
    // installs) prints an error reply on stdout with a blank line and exits 0 when stdout is
    // no terminal, as through `kubectl exec` without `-t`.
    let redis = "pod/redis-master-0";
    let denied = exec(&sim, "redis", redis, &["redis-cli", "PING"], None);
    denied.expect(0, "NOAUTH Authentication required.\n\n", "");
    let cli = |args: &[&str]| {
        let mut words = vec!["redis-cli", "--no-auth-warning", "-a", "redis-pass-1"];
        words.extend(args);
        exec(&sim, "redis", redis, &words, None)
    };
    assert_eq!(cli(&["PING"]).ok(), "PONG\n");
    assert_eq!(
        exec(
            &sim,
            "redis",
            redis,
            &[
                "sh",
                "-c",
                "REDISCLI_AUTH=redis-pass-1 redis-cli -h localhost -p 6379 PING"
            ],
            None
        )
        .ok(),
        "PONG\n"
    );
    let wrong = exec(
        &sim,
        "redis",
        redis,
        &["redis-cli", "--no-auth-warning", "-a", "nope", "PING"],
        None,
    );
    // redis-cli goes on without the refused AUTH, and PING is refused in turn.
    wrong.expect(
        0,
        "NOAUTH Authentication required.\n\n",
        "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\n",
    );
    let warned = exec(
        &sim,
        "redis",
        redis,
        &["redis-cli", "-a", "redis-pass-1", "PING"],
        None,
    );
    warned.expect(
        0,
        "PONG\n",
        "Warning: Using a password with '-a' or '-u' option on the command line interface may not be safe.\n",
    );
    // The chart's master.conf renames FLUSHALL away.
    cli(&["FLUSHALL"]).expect(
        0,
        "ERR unknown command 'FLUSHALL', with args beginning with: \n\n",
        "",
    );
    // Nothing listens on another port of the pod.
    exec(
        &sim,
        "redis",
        redis,
        &["redis-cli", "-p", "6380", "PING"],
        None,
    )
    .expect(
        1,
        "",
        "Could not connect to Redis at 127.0.0.1:6380: Connection refused\n\
         command terminated with exit code 1\n",
    );
    // Data is on the pod's volume: the StatefulSet's next pod finds it (the chart's AOF).
    assert_eq!(cli(&["SET", "greeting", "hello"]).ok(), "OK\n");
    assert_eq!(
        sim.kubectl(&["delete", "pod", "redis-master-0", "-n", "redis"])
            .ok(),
        "pod \"redis-master-0\" deleted from redis namespace\n"
    );
    for condition in ["--for=create", "--for=condition=Ready"] {
        sim.kubectl(&[
            "wait",
            "pod/redis-master-0",
            "-n",
            "redis",
            condition,
            "--timeout=60s",
        ])
        .ok();
    }
    assert_eq!(cli(&["GET", "greeting"]).ok(), "hello\n");
    // MinIO: mc in the server's pod, checked against its root credentials.
    let minio = "deploy/minio";
    let refused = exec(
        &sim,
        "minio",
        minio,
        &[
            "mc",
            "alias",
            "set",
            "local",
            "http://localhost:9000",
            "root",
            "admin-password-123",
        ],
        None,
    );
    refused.expect(
        1,
        "",
        "mc: <ERROR> Unable to initialize new alias from the provided credentials. The Access Key Id you provided does not exist in our records.\n\
         command terminated with exit code 1\n",
    );
    assert_eq!(
        exec(
            &sim,
            "minio",
            minio,
            &[
                "mc",
                "alias",
                "set",
                "local",
                "http://localhost:9000",
                "admin",
                "admin-password-123"
            ],
            None,
        )
        .ok(),
        "Added `local` successfully.\n"
    );
    assert_eq!(
        exec(
            &sim,
            "minio",
            minio,
            &["mc", "mb", "local/gitlab-artifacts"],
            None
        )
        .ok(),
        "Bucket created successfully `local/gitlab-artifacts`.\n"
    );
    let exists = exec(
        &sim,
        "minio",
        minio,
        &["mc", "mb", "local/gitlab-artifacts"],
        None,
    );
    exists.expect(
        1,
        "",
        "mc: <ERROR> Unable to make bucket `local/gitlab-artifacts`. Your previous request to create the named bucket succeeded and you already own it.\n\
         command terminated with exit code 1\n",
    );
    exec(
        &sim,
        "minio",
        minio,
        &["mc", "mb", "--ignore-existing", "local/gitlab-artifacts"],
        None,
    )
    .ok();
    exec(&sim, "minio", minio, &["mc", "ls", "local"], None)
        .replace_regex(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\]", "[<time>]")
        .expect(0, "[<time>]     0B gitlab-artifacts/\n", "");
    // Programs the image does not have.
    let missing = exec(&sim, "minio", minio, &["redis-cli", "PING"], None);
    missing.expect(127, "", &exec_not_found("redis-cli"));
}

/// The last exit message of the first container of `pod`, once it has one (bounded wait).
fn last_exit_message(sim: &Sim, namespace: &str, pod: &str) -> String {
    for _ in 0..60 {
        let message = sim
            .kubectl(&[
                "get",
                "pod",
                pod,
                "-n",
                namespace,
                "-o",
                "jsonpath={.status.containerStatuses[0].lastState.terminated.message}",
            ])
            .raw_stdout
            .clone();
        if !message.is_empty() {
            return message;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("pod {namespace}/{pod} never exited");
}

#[test]
fn an_openbao_on_postgresql_without_its_database_exits_with_its_own_words() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    // An OpenBao whose configuration keeps its data in PostgreSQL (as GitLab's bundled one),
    // once with a host no Service has, once with a Service no pod is ready behind.
    let manifest = |name: &str, host: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}-config, namespace: default}}\n\
             data:\n  config.hcl: |\n    storage \"postgresql\" {{\n      connection_url = \"postgres://openbao@{host}:5432/openbao?sslmode=disable\"\n    }}\n\
             ---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
             spec:\n  containers:\n  - name: openbao\n    image: quay.io/openbao/openbao:2.2.0\n\
             \x20   env: [{{name: PGPASSWORD, value: pw}}]\n\
             \x20   volumeMounts: [{{name: config, mountPath: /openbao/config}}]\n\
             \x20 volumes: [{{name: config, configMap: {{name: {name}-config}}}}]\n"
        )
    };
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &manifest("no-dns", "nowhere-rw.postgresql.svc"),
    )
    .ok();
    assert_eq!(
        last_exit_message(&sim, "default", "no-dns"),
        "error initializing storage of type postgresql: failed to connect to postgres: unable to verify connection: failed to connect to `user=openbao database=openbao`: hostname resolving error: lookup nowhere-rw.postgresql.svc on 10.96.0.10:53: no such host"
    );
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: db-rw, namespace: default}\n\
                   spec: {selector: {app: db}, ports: [{port: 5432, targetPort: 5432}]}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], service).ok();
    sim.kubectl_stdin(&["apply", "-f", "-"], &manifest("refused", "db-rw"))
        .ok();
    let refused = last_exit_message(&sim, "default", "refused");
    let ip = sim
        .kubectl(&[
            "get",
            "service",
            "db-rw",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .ok()
        .to_string();
    assert_eq!(
        refused.replace(&ip, "<cluster ip>"),
        "error initializing storage of type postgresql: failed to connect to postgres: unable to verify connection: failed to connect to `user=openbao database=openbao`: db-rw:5432 (<cluster ip>): dial error: dial tcp <cluster ip>:5432: connect: connection refused"
    );
}
