use super::*;
use crate::kube::server::KubeSim;
use crate::kube::test_fixtures::documents;

fn words(line: &str) -> Option<Vec<String>> {
    shell_words(line)
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).collect()
}

#[test]
fn simple_command_lines_split_as_sh_splits_them_and_others_do_not() {
    assert_eq!(
        words("bao status -tls-skip-verify"),
        Some(strings(&["bao", "status", "-tls-skip-verify"]))
    );
    assert_eq!(
        words(r#"psql -c "CREATE ROLE \"x\" LOGIN PASSWORD 'p w'""#),
        Some(strings(&[
            "psql",
            "-c",
            r#"CREATE ROLE "x" LOGIN PASSWORD 'p w'"#
        ]))
    );
    assert_eq!(
        words("a 'b c'd e\\ f"),
        Some(strings(&["a", "b cd", "e f"]))
    );
    assert_eq!(words("''"), Some(strings(&[""])));
    for needs_a_shell in [
        "bao status | grep sealed",
        "a; b",
        "a && b",
        "echo $HOME",
        "echo \"$HOME\"",
        "cat > file",
        "echo 'unterminated",
        "a\nb",
    ] {
        assert_eq!(words(needs_a_shell), None, "{needs_a_shell}");
    }
}

#[test]
fn the_effective_command_unwraps_a_shell_running_a_simple_command() {
    let (argv, environment, via_shell) =
        effective_command(&strings(&["/bin/sh", "-ec", "bao status -tls-skip-verify"]));
    assert_eq!(argv, strings(&["bao", "status", "-tls-skip-verify"]));
    assert!(environment.is_empty());
    assert!(via_shell);
    let (argv, environment, _) = effective_command(&strings(&[
        "sh",
        "-c",
        "REDISCLI_AUTH=pw exec redis-cli PING",
    ]));
    assert_eq!(argv, strings(&["redis-cli", "PING"]));
    assert_eq!(environment, vec![("REDISCLI_AUTH".into(), "pw".into())]);
    let (argv, _, via_shell) = effective_command(&strings(&["/usr/local/bin/bao", "status"]));
    assert_eq!(argv, strings(&["bao", "status"]));
    assert!(!via_shell);
    // Not a simple command: left as it is, for the shell basics to refuse plainly.
    let piped = strings(&["sh", "-c", "bao status | grep x"]);
    assert_eq!(effective_command(&piped).0, piped);
}

/// The fixture's pods: an OpenBao pod with the chart's exec probe, and one without a probe.
fn book() -> ProbeBook {
    ProbeBook {
        probed_images: vec!["quay.io/openbao/openbao".into()],
        ..Default::default()
    }
}

#[test]
fn a_probed_container_is_not_ready_until_its_probe_passes() {
    let pods = documents("programs", "probed-pods.yaml");
    let (openbao, plain) = (&pods[0], &pods[1]);
    let mut book = book();
    assert!(probed(openbao, &book));
    assert!(!probed(plain, &book));
    assert_eq!(
        probe_command(&openbao["spec"]["containers"][0], &book),
        Some(strings(&["/bin/sh", "-ec", "bao status -tls-skip-verify"]))
    );
    // No verdict yet: not Ready.
    let (status, failures) = with_readiness(openbao, &openbao["status"], &book);
    assert_eq!(status["containerStatuses"][0]["ready"], false);
    let ready = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "ContainersNotReady");
    assert_eq!(
        ready["message"],
        "containers with unready status: [openbao]"
    );
    assert!(failures.is_empty());
    // A failing probe: still not Ready, and its output for the Unhealthy event.
    book.results
        .entry("uid-openbao-0".into())
        .or_default()
        .insert(
            "openbao".into(),
            ProbeResult {
                passed: false,
                output: "Sealed             true".into(),
            },
        );
    let (status, failures) = with_readiness(openbao, &openbao["status"], &book);
    assert_eq!(status["containerStatuses"][0]["ready"], false);
    assert_eq!(failures, vec!["Sealed             true".to_string()]);
    // It passes: Ready, and the condition loses its reason.
    book.results
        .entry("uid-openbao-0".into())
        .or_default()
        .insert(
            "openbao".into(),
            ProbeResult {
                passed: true,
                output: String::new(),
            },
        );
    let (status, failures) = with_readiness(openbao, &openbao["status"], &book);
    assert_eq!(status["containerStatuses"][0]["ready"], true);
    let ready = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["status"], "True");
    assert!(ready.get("reason").is_none());
    assert!(failures.is_empty());
}

/// A program for tests: `greet NAME` in `example.com/greeter` images, probes it runs.
struct Greeter;

const GREETER: super::catalogue::Image =
    super::catalogue::Image::new("greeter", &["example.com/greeter"]).probed();

impl Program for Greeter {
    fn image(&self) -> &'static super::catalogue::Image {
        &GREETER
    }

    fn exec(&self, call: &ExecCall, argv: &[String], _host: &Host) -> Option<ExecOutcome> {
        match argv {
            [program, name] if program == "greet" => Some(ExecOutcome {
                code: 0,
                stdout: format!(
                    "hello {name} from {} ({})\n",
                    call.pod,
                    env::lookup(&call.env, "GREETING").unwrap_or("no greeting")
                )
                .into_bytes(),
                stderr: Vec::new(),
            }),
            _ => None,
        }
    }
}

fn greeter_sim() -> KubeSim {
    KubeSim::with_programs(
        String::new(),
        crate::kube::builtin_exec(None),
        Programs::new(vec![Arc::new(Greeter)]),
    )
}

fn call(image: &str, command: &[&str]) -> ExecCall {
    ExecCall {
        namespace: "demo".into(),
        pod: "app-0".into(),
        pod_uid: "uid-app-0".into(),
        container: "app".into(),
        image: image.into(),
        env: vec![("GREETING".into(), "from env".into())],
        command: strings(command),
        ..Default::default()
    }
}

fn run(sim: &KubeSim, image: &str, command: &[&str]) -> (i32, String, String) {
    let outcome = sim.run_exec(&call(image, command));
    (
        outcome.code,
        String::from_utf8_lossy(&outcome.stdout).into_owned(),
        String::from_utf8_lossy(&outcome.stderr).into_owned(),
    )
}

#[test]
fn an_exec_runs_the_images_program_then_the_shell_basics_then_is_not_found() {
    let sim = greeter_sim();
    assert_eq!(
        sim.cluster().probes.probed_images,
        vec!["example.com/greeter".to_string()]
    );
    let greeter = "example.com/greeter:1.0";
    assert_eq!(
        run(&sim, greeter, &["greet", "bob"]),
        (0, "hello bob from app-0 (from env)\n".into(), String::new())
    );
    // Through a shell, with an assignment in front.
    assert_eq!(
        run(
            &sim,
            greeter,
            &["sh", "-c", "GREETING=inline greet 'bob b'"]
        ),
        (0, "hello bob b from app-0 (inline)\n".into(), String::new())
    );
    // The shell basics still answer in every image.
    assert_eq!(run(&sim, greeter, &["echo", "hi"]).1, "hi\n");
    assert_eq!(run(&sim, greeter, &["sh", "-c", "exit 4"]).0, 4);
    // Another image has no greet: containerd's words, or the shell's.
    let (code, _, stderr) = run(&sim, "docker.io/library/nginx:1", &["greet", "bob"]);
    assert_eq!(code, 127);
    assert_eq!(
        stderr,
        "OCI runtime exec failed: exec failed: unable to start container process: exec: \"greet\": executable file not found in $PATH: unknown\n"
    );
    let (code, _, stderr) = run(
        &sim,
        "docker.io/library/nginx:1",
        &["/bin/sh", "-c", "greet bob"],
    );
    assert_eq!((code, stderr.as_str()), (127, "sh: greet: not found\n"));
    // gitlab-rails is the toolbox's only.
    let code = "puts User.first.personal_access_tokens.create!(name: 'x').token";
    let (status, _, stderr) = run(&sim, greeter, &["gitlab-rails", "runner", code]);
    assert_eq!(status, 127);
    assert!(
        stderr.contains("\"gitlab-rails\": executable file not found"),
        "{stderr}"
    );
    let toolbox = "registry.gitlab.com/gitlab-org/build/cng/gitlab-toolbox-ee:v17.9.0";
    let (status, _, stderr) = run(&sim, toolbox, &["gitlab-rails", "runner", code]);
    assert_eq!(status, 1);
    assert!(stderr.contains("no GitLab is attached"), "{stderr}");
}

#[test]
fn a_container_whose_start_fails_crash_loops_and_is_ready_only_once_started() {
    let pods = documents("programs", "probed-pods.yaml");
    let plain = &pods[1];
    let mut book = ProbeBook {
        start_gated_images: vec!["docker.io/library/nginx".into()],
        ..Default::default()
    };
    assert!(probed(plain, &book));
    let running = serde_json::json!({"phase": "Running",
        "containerStatuses": [{"name": "web", "ready": true, "state": {"running": {}}}],
        "conditions": [{"type": "Ready", "status": "True"}]});
    // Not started yet: not Ready.
    let (status, _) = with_readiness(plain, &running, &book);
    assert_eq!(status["containerStatuses"][0]["ready"], false);
    // Its start failed: it waits in CrashLoopBackOff with its last exit.
    book.crashes.entry("uid-web-0".into()).or_default().insert(
        "web".into(),
        Crash {
            message: "FATAL:  password authentication failed for user \"gitlab\"".into(),
            restarts: 2,
            finished_at: "2026-01-01T00:00:00Z".into(),
        },
    );
    let (status, _) = with_readiness(plain, &running, &book);
    let web = &status["containerStatuses"][0];
    assert_eq!(web["ready"], false);
    assert_eq!(web["state"]["waiting"]["reason"], "CrashLoopBackOff");
    assert_eq!(
        web["state"]["waiting"]["message"],
        "back-off 10s restarting failed container=web pod=web-0_demo"
    );
    assert_eq!(
        web["lastState"]["terminated"]["message"],
        "FATAL:  password authentication failed for user \"gitlab\""
    );
    assert_eq!(web["restartCount"], 2);
    // Started once the cause is gone: Ready.
    book.crashes.clear();
    book.started
        .entry("uid-web-0".into())
        .or_default()
        .insert("web".into());
    let (status, _) = with_readiness(plain, &running, &book);
    assert_eq!(status["containerStatuses"][0]["ready"], true);
}

#[test]
fn probes_run_at_their_period_shortened_to_at_most_two_seconds() {
    let pods = documents("programs", "probed-pods.yaml");
    // The openbao chart's 5 s.
    assert_eq!(
        probe_period(&pods[0]["spec"]["containers"][0]),
        std::time::Duration::from_secs(2)
    );
    // No periodSeconds: the kubelet's 10 s, shortened too.
    assert_eq!(
        probe_period(&pods[1]["spec"]["containers"][0]),
        std::time::Duration::from_secs(2)
    );
    let fast = serde_json::json!({"readinessProbe": {"periodSeconds": 0}});
    assert_eq!(probe_period(&fast), std::time::Duration::from_millis(500));
}

#[test]
fn the_state_folders_of_ended_simulators_are_removed_and_live_ones_kept() {
    let temp = std::env::temp_dir();
    // No process has this id (above Linux's pid_max).
    let ended = temp.join("bprun-sim-programs-4294967294-testtest");
    let live = temp.join(format!(
        "bprun-sim-programs-{}-testlive",
        std::process::id()
    ));
    for folder in [&ended, &live] {
        std::fs::create_dir_all(folder.join("openbao")).expect("a state folder");
    }
    let fresh = Programs::fresh_state_dir();
    assert!(!ended.exists());
    assert!(live.exists());
    assert!(
        fresh
            .to_string_lossy()
            .contains(&format!("bprun-sim-programs-{}-", std::process::id()))
    );
    let _ = std::fs::remove_dir_all(&live);
}

#[test]
fn tail_lines_keeps_the_last_lines_of_a_log() {
    let log = "one\ntwo\nthree\n";
    assert_eq!(tail_of(log, Some("2")), "two\nthree\n");
    assert_eq!(tail_of(log, Some("0")), "");
    assert_eq!(tail_of(log, Some("9")), log);
    assert_eq!(tail_of(log, None), log);
    assert_eq!(tail_of(log, Some("many")), log);
    assert_eq!(
        tail_of("no newline at the end", Some("1")),
        "no newline at the end"
    );
}
