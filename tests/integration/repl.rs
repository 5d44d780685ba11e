//! The REPL driven through a pseudo-terminal, as an operator uses it.

use crate::support::with_recaps;
use rexpect::reader::Options;
use rexpect::session::{PtySession, spawn_with_options};

use crate::support::{Test, assert_text, repo};

fn repl(test: &Test, extra: &[&str], env: &[(&str, &str)]) -> PtySession {
    repl_with_banner(test, extra, env).0
}

/// The session and everything printed before the banner's end (the rehearsal platform's lines).
fn repl_with_banner(test: &Test, extra: &[&str], env: &[(&str, &str)]) -> (PtySession, String) {
    let mut command = test.command(&[&["repl"], extra].concat());
    command
        .env("BPRUN_HISTORY", test.join("history"))
        .env("TERM", "xterm");
    for (key, value) in env {
        command.env(key, value);
    }
    let mut session = spawn_with_options(
        command,
        Options::new()
            .timeout_ms(Some(20_000))
            .strip_ansi_escape_codes(true),
    )
    .expect("spawn bprun repl");
    let banner = session.exp_string("Ctrl-D to leave.").expect("banner");
    (session, banner)
}

/// Waits for the prompt, then types a line: rustyline discards what is typed before it is ready.
fn input(session: &mut PtySession, line: &str) {
    session.exp_string("> ").expect("a prompt");
    session.send_line(line).expect("send");
}

#[test]
fn functions_multi_line_input_and_errors_keep_the_session() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    input(&mut session, "fn double(x) { x * 2 }");
    input(&mut session, "double(21)");
    session
        .exp_string("42")
        .expect("a function defined on an earlier line");
    input(&mut session, "let apps = [");
    // Each further line waits for the continuation prompt, as rustyline drops typed-ahead input.
    input(&mut session, "  \"shared-code\", \"guestbook\"");
    input(&mut session, "];");
    input(&mut session, "apps.len()");
    session.exp_string("2").expect("multi-line input");
    input(&mut session, "let broken = ;");
    session.exp_string("syntax error").expect("a syntax error");
    input(&mut session, "double(apps.len())");
    session
        .exp_string("4")
        .expect("the session survives the error");
    input(&mut session, ":help gitlab_ensure_project");
    session
        .exp_string("Ensures a project in a group")
        .expect(":help shows the docs");
    // An input with a call the natives would refuse does not run at all.
    input(
        &mut session,
        "write_text(\"first.txt\", \"x\"); gitlab_wait_pipeline(\"blueprint-apps/guestbook\")",
    );
    session
        .exp_string("gitlab_wait_pipeline takes 2 or 3 arguments, not 1 argument")
        .expect("refused before it ran");
    session
        .exp_string("refused before it ran")
        .expect("the label");
    input(
        &mut session,
        "kube_list(\"Pod\", \"gitlab\", #{label: \"app=x\"})",
    );
    session
        .exp_string("kube_list: unknown option `label`")
        .expect("an option refused before it ran");
    // A one-step example shows its body, which runs as typed (steps do not run here).
    input(&mut session, ":help gitlab_delete_project");
    session
        .exp_string("```rhai\r\ngitlab_delete_project(\"blueprint-apps/guestbook\");\r\n```")
        .expect("the example without its step");
    input(&mut session, ":quit");
    session.exp_eof().expect("quit");
    assert!(
        !test.join("first.txt").exists(),
        "the refused input did not run"
    );
}

#[test]
fn tab_completes_native_names() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    session.exp_string("> ").expect("a prompt");
    session.send("gitlab_ensure_g").expect("send");
    session.send("\t").expect("tab");
    session.send_line("").expect("enter");
    // The completed name is a function: calling it without arguments reports its missing arguments.
    session
        .exp_string("gitlab_ensure_group")
        .expect("completion");
    session.exp_string("> ").expect("a prompt");
    session.send_control('d').expect("ctrl-d");
    session.exp_eof().expect("ctrl-d leaves");
}

#[test]
fn a_second_tab_lists_the_candidates_with_their_signatures() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    session.exp_string("> ").expect("a prompt");
    session.send("gitlab_wait_pi").expect("send");
    session.flush().expect("flush");
    // The first Tab completes what both candidates share, the second lists them.
    session.send("\t").expect("tab");
    session.flush().expect("flush");
    session
        .exp_string("> gitlab_wait_pipeline")
        .expect("the shared part completed");
    session.send("\t").expect("tab");
    session.flush().expect("flush");
    session
        .exp_string("gitlab_wait_pipeline(project: string, id: int, options: map) -> map")
        .expect("the first candidate with its signature");
    session
        .exp_string("gitlab_wait_pipelines(pipelines: array, options: map) -> array")
        .expect("the second candidate with its signature");
    // The line comes back as it was; Ctrl-C drops it, :quit leaves.
    session
        .exp_string("bprun> gitlab_wait_pipeline")
        .expect("the line redrawn under the list");
    session.send_control('c').expect("ctrl-c");
    session.exp_string("bprun> ").expect("a fresh prompt");
    session.send_line(":quit").expect("quit");
    session.exp_eof().expect(":quit leaves");
}

#[test]
fn ctrl_c_interrupts_a_running_call() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    input(&mut session, "sleep(30)");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let started = std::time::Instant::now();
    session.send_control('c').expect("ctrl-c");
    session.exp_string("interrupted").expect("the call stops");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    input(&mut session, "1 + 1");
    session.exp_string("2").expect("back at the prompt");
    session.exp_string("> ").expect("a prompt");
    session.send_control('d').expect("ctrl-d");
    session.exp_eof().expect("eof");
}

#[test]
fn secrets_print_as_stars_and_stay_out_of_the_history() {
    let server = crate::support::BaoServer::dev();
    server.cli(
        "root",
        &[
            "kv",
            "put",
            "secret/gitlab/bootstrap/admin_token",
            "token=glpat-repl-canary-000000",
        ],
    );
    let test = repo();
    let mut session = repl(
        &test,
        &[],
        &[("BAO_ADDR", &server.address), ("BAO_TOKEN", "root")],
    );
    input(
        &mut session,
        "let pat = bao_read(\"gitlab/bootstrap/admin_token\");",
    );
    input(&mut session, "pat");
    session
        .exp_string("\"token\": \"***\"")
        .expect("a Secret prints as ***");
    input(&mut session, "print(pat.token.reveal())");
    session
        .exp_string("***")
        .expect("revealed text is still scrubbed");
    input(&mut session, "let leaked = \"glpat-repl-canary-000000\";");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
    let history = test.read("history");
    assert!(history.contains("let pat = bao_read"), "{history}");
    assert!(
        !history.contains("glpat-repl-canary"),
        "a secret reached the history:\n{history}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(test.join("history"))
            .expect("history")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

#[test]
fn save_writes_the_session_as_a_step_that_runs_as_a_script() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    input(&mut session, "fn forty() { 40 }");
    input(&mut session, "let base = forty();");
    input(&mut session, "print(`saved ${base + 2}`)");
    session.exp_string("saved 42").expect("run");
    input(&mut session, "let broken = ;");
    session.exp_string("syntax error").expect("not saved");
    input(&mut session, ":save scripts/saved.rhai");
    session
        .exp_string("wrote 3 input(s) as a step to scripts/saved.rhai; run it with `bprun scripts/saved.rhai`")
        .expect(":save");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
    assert_eq!(
        test.read("scripts/saved.rhai"),
        "fn forty() { 40 }\nstep(\"REPL session\", || {\n    let base = forty();\n    print(`saved ${base + 2}`);\n});\n"
    );
    test.run(&["scripts/saved.rhai"]).expect(
        0,
        &with_recaps(
            "[1/1] REPL session ...\n\
                      \x20   saved 42\n\
                      [1/1] REPL session ... ok (#.## s)\n\
                      \n\
                      <recap of scripts/saved.rhai: REPL session: ok>\n",
        ),
        "",
    );
}

#[test]
fn load_makes_a_scripts_functions_available_without_running_its_steps() {
    let test = repo().script("fn greeting() { \"hello from the script\" }\nstep(\"Never\", || { write_text(\"ran\", \"x\"); });\n");
    let mut session = repl(&test, &["--load", "scripts/test.rhai"], &[]);
    input(&mut session, "greeting()");
    session
        .exp_string("hello from the script")
        .expect("the script's function");
    input(&mut session, ":check on");
    input(&mut session, "write_text(\"out.txt\", \"x\")");
    session
        .exp_string("~ would create file out.txt")
        .expect("check mode");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
    assert!(!test.join("ran").exists() && !test.join("out.txt").exists());
}

#[test]
fn rehearse_points_the_session_at_the_embedded_platform() {
    let test = repo();
    let mut session = repl(&test, &["--rehearse"], &[]);
    input(
        &mut session,
        "kube_list(\"pods\", \"gitlab\", #{labels: \"app=toolbox\"}).len()",
    );
    session
        .exp_string("1")
        .expect("the simulated cluster's toolbox pod");
    input(&mut session, "gitlab_get(\"version\").version");
    session.exp_string("17.9.0").expect("the GitLab simulator");
    input(
        &mut session,
        "bao_write(\"demo/greeting\", #{text: \"hello\"}).changed",
    );
    session.exp_string("true").expect("OpenBao");
    input(
        &mut session,
        "kube_exec(\"gitlab\", \"app=toolbox\", [\"echo\", \"from the pod\"], #{}).stdout",
    );
    session.exp_string("from the pod").expect("exec");
    input(&mut session, ":quit");
    session.exp_eof().expect("quit stops the platform");
}

#[test]
fn run_brings_the_rehearsal_to_where_phase3_leaves_it_and_the_readmes_example_works() {
    // The README's REPL example, as written, after `:run scripts/phase3.rhai`.
    let test = crate::support::BPRUN.test_in_repository_copy();
    let mut session = repl(&test, &["--rehearse"], &[]);
    input(&mut session, ":run scripts/phase3.rhai");
    for (index, step) in [
        "Pre-flight",
        "Mint PAT",
        "Seed glab auth",
        "Ensure group",
        "Provision projects",
        "Smoke test",
        "Workloads reachable",
    ]
    .iter()
    .enumerate()
    {
        session
            .exp_regex(&format!(
                r"\[{}/7\] {step} \.\.\. (ok|changed|skipped)",
                index + 1
            ))
            .expect("phase 3's steps, one after the other");
    }
    session.exp_string("7 steps: ").expect("phase 3's recap");
    input(
        &mut session,
        "gitlab_login(bao_read(\"gitlab/bootstrap/admin_token\").token);",
    );
    input(
        &mut session,
        "gitlab_get_all(\"groups/blueprint-apps/projects\").map(|p| #{id: p.id, path: p.path})",
    );
    session
        .exp_regex(r"id +path\r?\n\d+ +[a-z-]+")
        .expect("a raw read by the group's path, as a table");
    input(
        &mut session,
        "gitlab_projects(\"blueprint-apps\").map(|p| p.path)",
    );
    session
        .exp_regex(r#"\[\s*"shared-code",\s*"guestbook",\s*"redis",\s*"redis-slave"\s*\]"#)
        .expect("the four projects");
    input(
        &mut session,
        "gitlab_jobs(\"blueprint-apps/guestbook\", gitlab_pipelines(\"blueprint-apps/guestbook\")[0].id).map(|j| j.status)",
    );
    session
        .exp_regex(r#"\[\s*"success"(,\s*"success")*\s*\]"#)
        .expect("the smoke pipeline's jobs, all green");
    // The README's ten tasks, without a raw API path.
    // :save, then run the saved script (in the rehearsal's copy, where :run takes it).
    input(&mut session, ":save saved.rhai");
    session.exp_string("saved.rhai").expect("saved");
    input(&mut session, ":run saved.rhai");
    session
        .exp_string("1 step: 1 ok, 0 changed, 0 skipped, 0 failed")
        .expect("the saved session runs as a script");
    // Variables: read them, create one and update it.
    input(
        &mut session,
        "gitlab_variables(\"blueprint-apps/guestbook\").map(|v| v.key).contains(\"CI_HELM_CHART_DIR\")",
    );
    session.exp_string("true").expect("the project's variables");
    input(&mut session, ":check on");
    input(
        &mut session,
        "gitlab_set_variables(\"blueprint-apps/guestbook\", #{HELM_TIMEOUT: \"5m\"}).changed",
    );
    session
        .exp_string("~ would create CI variable HELM_TIMEOUT of blueprint-apps/guestbook")
        .expect("a mutation under check mode says what it would do");
    input(&mut session, ":check off");
    for (value, verb) in [("5m", "create"), ("10m", "update")] {
        input(
            &mut session,
            &format!(
                "gitlab_set_variables(\"blueprint-apps/guestbook\", #{{HELM_TIMEOUT: \"{value}\"}}).changed"
            ),
        );
        session
            .exp_string(&format!(
                "~ {verb} CI variable HELM_TIMEOUT of blueprint-apps/guestbook"
            ))
            .expect("created, then updated");
    }
    // Trigger and wait (the failure, if any, returned rather than thrown); retry a job, cancel.
    input(
        &mut session,
        "let started = gitlab_trigger_pipeline(\"blueprint-apps/guestbook\", \"main\", #{reuse: false});",
    );
    input(
        &mut session,
        "gitlab_wait_pipeline(\"blueprint-apps/guestbook\", started.id, #{check: false, timeout: 60}).status",
    );
    session
        .exp_regex(r"\r\nsuccess\r\n")
        .expect("the pipeline ran");
    input(
        &mut session,
        "gitlab_retry_job(\"blueprint-apps/guestbook\", gitlab_jobs(\"blueprint-apps/guestbook\", started.id)[0].id).changed",
    );
    session.exp_string("~ retry job #").expect("a job retried");
    input(
        &mut session,
        "gitlab_cancel_pipeline(\"blueprint-apps/guestbook\", started.id).changed",
    );
    session
        .exp_string("~ cancel pipeline #")
        .expect("the pipeline canceled");
    // Secrets and KV.
    input(
        &mut session,
        "bao_read(\"gitlab/bootstrap/admin_token\").token",
    );
    session
        .exp_string("***")
        .expect("a secret read stays hidden");
    input(
        &mut session,
        "bao_write(\"demo/greeting\", #{text: \"hello\"}).changed",
    );
    session.exp_string("true").expect("written");
    input(&mut session, "bao_list(\"demo\")");
    session.exp_string("greeting").expect("listed");
    input(
        &mut session,
        "bao_versions(\"demo/greeting\").current_version",
    );
    session.exp_string("1").expect("its versions");
    // Pods and a wait.
    input(&mut session, "kube_list(\"Pod\", \"guestbook\")");
    session
        .exp_regex(r"NAME +READY +STATUS +RESTARTS +AGE\r?\nguestbook-")
        .expect("the app's pods, as kubectl get lists them");
    input(
        &mut session,
        "kube_wait(\"Deployment\", \"guestbook\", \"guestbook\", \"Rollout\", #{timeout: 60})",
    );
    session
        .exp_regex(r"NAME +READY +UP-TO-DATE +AVAILABLE +AGE\r?\nguestbook +1/1")
        .expect("what the wait found ready");
    input(&mut session, ":quit");
    session.exp_eof().expect("quit stops the platform");
    // The checkout was not written: phase 3 ran in the rehearsal's copy.
    assert!(!test.join("apps-local").exists());
    assert!(!test.join(".bprun").exists());
}

#[test]
fn multi_line_functions_blocks_and_strings_continue_until_complete() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    input(&mut session, "fn add2(v) {");
    session.exp_string("...> ").expect("a continuation prompt");
    session.send_line("  v + 2").expect("send");
    session.exp_string("...> ").expect("a continuation prompt");
    session.send_line("}").expect("send");
    input(&mut session, "add2(40)");
    session
        .exp_string("42")
        .expect("a function defined over three lines");
    input(&mut session, "if true {");
    input(&mut session, "  1");
    input(&mut session, "}");
    session.exp_string("1").expect("a block over three lines");
    input(&mut session, "let s = `unterminated");
    session.exp_string("...> ").expect("a string continues");
    session.send_line("").expect("an empty line");
    session
        .exp_string("unfinished input abandoned")
        .expect("an empty line abandons the input");
    input(&mut session, "[1, 2,");
    session.exp_string("...> ").expect("continues");
    session.send_control('c').expect("ctrl-c");
    session
        .exp_string("unfinished input abandoned")
        .expect("Ctrl-C abandons the input");
    input(&mut session, "add2(1)");
    session.exp_string("3").expect("back at the prompt");
    input(&mut session, ":quit");
    session.exp_eof().expect("quit");
}

#[test]
fn unit_results_print_and_a_property_of_nothing_explains_itself() {
    let server = crate::support::BaoServer::dev();
    let test = repo();
    let mut session = repl(
        &test,
        &[],
        &[("BAO_ADDR", &server.address), ("BAO_TOKEN", "root")],
    );
    input(&mut session, "let missing = bao_read(\"nothing/here\");");
    input(&mut session, "missing");
    session.exp_string("()").expect("a () result prints ()");
    input(&mut session, "missing.token");
    session
        .exp_string("the value before `.token` was `()`")
        .expect("the hint names the property and the ()");
    session
        .exp_string("the read found nothing")
        .expect("the likely cause");
    input(&mut session, ":quit");
    session.exp_eof().expect("quit");
}

#[test]
fn rehearse_banner_knows_the_token_and_a_typed_step_explains_itself() {
    let test = repo();
    let (mut session, banner) = repl_with_banner(&test, &["--rehearse"], &[]);
    // The simulators' ports are the system's choice; OpenBao is the real bao when one is on
    // PATH, else the stand-in: not what this test is about.
    let banner = regex::Regex::new(r"127\.0\.0\.1:\d+")
        .expect("regex")
        .replace_all(&banner.replace("\r\n", "\n"), "127.0.0.1:<port>")
        .into_owned();
    let banner = regex::Regex::new(r"(?m)^(  OpenBao +).*$")
        .expect("regex")
        .replace_all(&banner, "${1}<either>")
        .into_owned();
    // Up to where the session waited for the banner's end.
    assert_text(
        &banner,
        &bprun_testkit::unindent(
            "
            rehearsal platform (as phase 2 leaves it):
              GitLab simulator     http://127.0.0.1:<port>
              GitLab Runner        an online instance runner stand-in (as phase 2 registers it)
              Kubernetes simulator https://127.0.0.1:<port>
              OpenBao              <either>
              :run scripts/phase3.rhai brings it to where phase 3 leaves it (in a copy of the repository)
              GITLAB_TOKEN is set (the simulator's admin token): gitlab_* natives work at once; gitlab_login(TOKEN) switches to another token
            bprun repl: Rhai with every bprun native. :help for commands,\x20",
        ),
    );
    input(&mut session, "step(\"Ensure group\", || { 40 + 2 })");
    session
        .exp_string("does not run in the REPL: steps run with `bprun SCRIPT`")
        .expect("a step explains where steps run");
    session
        .exp_string("type the step's body here to run it at once")
        .expect("and what to do instead");
    input(&mut session, ":quit");
    session.exp_eof().expect("quit");
}

#[test]
fn load_gives_the_scripts_imports_and_globals() {
    let test = repo()
        .file(
            "scripts/common.rhai",
            "fn host_of(url) { url.split(\"//\")[1] }\n",
        )
        .script(
            "import \"common\" as common;\nconst GROUP = \"blueprint\";\n\
             fn group_path(app) { `${global::GROUP}/${app}` }\n\
             step(\"Never\", || { write_text(\"ran\", common::host_of(\"https://x\")); });\n",
        );
    let mut session = repl(&test, &["--load", "scripts/test.rhai"], &[]);
    input(&mut session, "common::host_of(\"https://gitlab.example\")");
    session
        .exp_string("gitlab.example")
        .expect("the script's import");
    input(&mut session, "`group ${global::GROUP}`");
    session
        .exp_string("group blueprint")
        .expect("the script's constant as global::");
    input(&mut session, "group_path(\"guestbook\")");
    session
        .exp_string("blueprint/guestbook")
        .expect("a function of the script that reads global::");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
    assert!(!test.join("ran").exists());
}

#[test]
fn reveal_shows_a_secret_on_purpose_and_literal_secrets_stay_out_of_the_history() {
    let server = crate::support::BaoServer::dev();
    server.cli(
        "root",
        &[
            "kv",
            "put",
            "secret/gitlab/bootstrap/admin_token",
            "token=glpat-repl-reveal-000000",
        ],
    );
    let test = repo();
    let mut session = repl(
        &test,
        &[],
        &[("BAO_ADDR", &server.address), ("BAO_TOKEN", "root")],
    );
    input(
        &mut session,
        "let pat = bao_read(\"gitlab/bootstrap/admin_token\");",
    );
    input(&mut session, "pat.token");
    session.exp_string("***").expect("a Secret prints as ***");
    input(&mut session, ":reveal pat.token");
    session
        .exp_string("glpat-repl-reveal-000000")
        .expect(":reveal shows the plain value");
    input(
        &mut session,
        "bao_write(\"demo/db\", #{password: \"hunter2-long-pw\"}).changed",
    );
    session.exp_string("true").expect("written");
    input(&mut session, "let typed = secret(\"typed-literal-pw\");");
    input(&mut session, "let kept = 1;");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
    let history = test.read("history");
    assert!(history.contains("let kept = 1;"), "{history}");
    for leaked in [":reveal", "hunter2-long-pw", "typed-literal-pw", "glpat-"] {
        assert!(
            !history.contains(leaked),
            "{leaked} reached the history:\n{history}"
        );
    }
}

#[test]
fn kubernetes_lists_print_as_kubectl_lists_them() {
    let sim = crate::support::BPRUN.sim(crate::support::SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl(&[
        "-n",
        "demo",
        "create",
        "deployment",
        "web",
        "--image=registry.invalid/web:1",
    ])
    .ok();
    sim.kubectl(&["-n", "demo", "create", "configmap", "settings"])
        .ok();
    let test = repo();
    let kubeconfig = sim.var("KUBECONFIG").to_string();
    let mut session = repl(&test, &[], &[("KUBECONFIG", kubeconfig.as_str())]);
    input(&mut session, "kube_list(\"Deployment\", \"demo\")");
    session
        .exp_regex(r"NAME +READY +UP-TO-DATE +AVAILABLE +AGE\r?\nweb +0/1 +\d+ +0 +\d+s")
        .expect("a Deployment's replicas, as kubectl get shows them");
    input(
        &mut session,
        "kube_list(\"ConfigMap\", \"demo\").filter(|c| c.metadata.name == \"settings\")",
    );
    session
        .exp_regex(r"NAME +AGE\r?\nsettings +\d+s")
        .expect("any other kind: its name and age");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
}

#[test]
fn canaries_stay_hidden_in_the_repl_whatever_reads_them() {
    // Issue #15's canary test: every secret the platform holds, read every way a REPL user
    // would (environment, raw GitLab reads, OpenBao, the kubeconfig, printing, joining,
    // throwing, `:vars`), never appears in the session's output or its history.
    let sim = crate::support::BPRUN.sim(crate::support::SimKind::All, &[]);
    let masked = "canary-masked-value-9f3c1a";
    let bao_value = "canary-bao-value-51e7d2";
    for (path, body) in [
        (
            "groups",
            r#"{"name": "blueprint-apps", "path": "blueprint-apps"}"#.to_string(),
        ),
        (
            "projects",
            r#"{"name": "demo", "path": "demo", "namespace_id": 2}"#.to_string(),
        ),
        (
            "projects/blueprint-apps%2Fdemo/variables",
            format!(r#"{{"key": "CANARY_MASKED", "value": "{masked}", "masked": true}}"#),
        ),
    ] {
        let reply = sim.api("POST", path, Some(&body));
        assert_eq!(reply.status, 201, "POST {path}: {}", reply.body);
    }
    let written = bprun_testkit::http::request(
        "POST",
        &format!("{}/v1/secret/data/canary", sim.var("BAO_ADDR")),
        &[("X-Vault-Token", sim.var("BAO_TOKEN"))],
        Some(&format!(r#"{{"data": {{"password": "{bao_value}"}}}}"#)),
    );
    assert_eq!(written.status, 200, "{}", written.body);
    let kubeconfig = std::fs::read_to_string(sim.var("KUBECONFIG")).expect("kubeconfig");
    let kube_token = kubeconfig
        .lines()
        .find_map(|line| line.trim().strip_prefix("token: "))
        .expect("a bearer token in the kubeconfig")
        .trim_matches('"')
        .to_string();
    let canaries = [
        masked,
        bao_value,
        sim.var("GITLAB_TOKEN"),
        sim.var("BAO_TOKEN"),
        kube_token.as_str(),
    ];

    let test = repo();
    let env: Vec<(&str, &str)> = sim
        .vars()
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    let mut session = repl(&test, &[], &env);
    let lines = [
        "env(\"GITLAB_TOKEN\")",
        "info(env(\"BAO_TOKEN\"))",
        "let token = env(\"GITLAB_TOKEN\");",
        // Short lines: rustyline redraws a line wider than the terminal, and a redrawn prompt
        // would be mistaken for the next one.
        "let path = \"projects/blueprint-apps%2Fdemo/variables\";",
        "gitlab_get(path + \"/CANARY_MASKED\")",
        "gitlab_get_all(path)",
        "let variable = gitlab_get(path + \"/CANARY_MASKED\");",
        "info(variable.value)",
        "print(\"value=\" + variable.value)",
        "throw #{msg: variable.value}",
        "let read = bao_read(\"canary\");",
        "read",
        "print(`password is ${read.password}`)",
        "base64_decode(kube_config_b64())",
        ":vars",
        "print(\"<end of the canary session>\")",
    ];
    let mut transcript = String::new();
    for line in lines {
        transcript += &session.exp_string("> ").expect("a prompt");
        session.send_line(line).expect("send");
    }
    transcript += &session
        .exp_string("<end of the canary session>")
        .expect("the end marker");
    transcript += &session.exp_string("> ").expect("a prompt");
    session.send_line(":quit").expect("send");
    transcript += &session.exp_eof().expect("eof");
    // The reads worked (the test could not pass by printing nothing)...
    for expected in [
        "\"key\": \"CANARY_MASKED\"",
        "value=***",
        "password is ***",
        "let token: string = \"***\"",
        "let variable: map",
    ] {
        assert!(
            transcript.contains(expected),
            "missing {expected:?}:\n{transcript}"
        );
    }
    // ...and no secret reached the screen or the history.
    let history = test.read("history");
    for canary in canaries {
        assert!(
            !transcript.contains(canary),
            "{canary} was printed:\n{transcript}"
        );
        assert!(
            !history.contains(canary),
            "{canary} reached the history:\n{history}"
        );
    }
}

#[test]
fn save_keeps_closures_in_the_step_comments_out_planned_and_secret_inputs_and_the_script_runs() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    input(&mut session, "fn twice(x) { x * 2 }");
    input(&mut session, "let doubled = [1, 2, 3].map(|n| twice(n))");
    input(&mut session, "print(`doubled ${doubled}`)");
    session.exp_string("doubled [2, 4, 6]").expect("run");
    input(&mut session, "let token = secret(\"s3cret-value-9\")");
    input(&mut session, ":check on");
    input(&mut session, "write_text(\"planned.txt\", \"x\")");
    session.exp_string("would").expect("planned");
    input(&mut session, ":check off");
    input(&mut session, ":save scripts/saved.rhai");
    session
        .exp_string("wrote 5 input(s) as a step to scripts/saved.rhai; run it with `bprun scripts/saved.rhai`")
        .expect(":save");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
    assert_eq!(
        test.read("scripts/saved.rhai"),
        "fn twice(x) { x * 2 }\n\
         step(\"REPL session\", || {\n\
         \x20   let doubled = [1, 2, 3].map(|n| twice(n));\n\
         \x20   print(`doubled ${doubled}`);\n\
         \x20   // an input here held a secret value and is left out: read it with bao_read or env_secret instead\n\
         \x20   // typed under :check on, so it only planned: remove the `// ` to run it\n\
         \x20   // write_text(\"planned.txt\", \"x\");\n\
         });\n"
    );
    test.run(&["scripts/saved.rhai"]).expect(
        0,
        &with_recaps(
            "[1/1] REPL session ...\n\
                      \x20   doubled [2, 4, 6]\n\
                      [1/1] REPL session ... ok (#.## s)\n\
                      \n\
                      <recap of scripts/saved.rhai: REPL session: ok>\n",
        ),
        "",
    );
    assert!(!test.path().join("planned.txt").exists());
}

#[test]
fn history_numbers_the_inputs_and_save_takes_a_range_of_them() {
    let test = repo();
    let mut session = repl(&test, &[], &[]);
    input(&mut session, "let a = 1");
    input(&mut session, "let t = secret(\"s3cret-value-9\")");
    input(&mut session, "print(`a is ${a}`)");
    session.exp_string("a is 1").expect("run");
    input(&mut session, ":history");
    session
        .exp_string(
            "  1  let a = 1\r\n  2  (an input holding a secret)\r\n  3  print(`a is ${a}`)\r\n",
        )
        .expect(":history");
    input(&mut session, ":save scripts/range.rhai 3..9");
    session
        .exp_string(
            ":save scripts/range.rhai 3..9: a range N..M of the inputs :history numbers (1..3)",
        )
        .expect("refused range");
    input(&mut session, ":save scripts/range.rhai 1..1");
    session
        .exp_string("wrote 1 input(s) as a step to scripts/range.rhai")
        .expect(":save range");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
    assert_eq!(
        test.read("scripts/range.rhai"),
        "step(\"REPL session\", || {\n    let a = 1;\n});\n"
    );
}

#[test]
fn a_refusal_under_check_mode_names_the_repls_command_to_leave_it() {
    let test = repo();
    let mut session = repl(&test, &["--check"], &[]);
    input(&mut session, "run_command([\"true\"], #{})");
    session
        .exp_string("hint: leave check mode with `:check off`, or guard the call with `if !check_mode() { ... }`")
        .expect("the REPL's hint");
    input(&mut session, ":quit");
    session.exp_eof().expect("eof");
}
