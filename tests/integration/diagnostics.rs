//! Bad input gives a clear error with a location, a hint and a named exit code, and changes nothing.

use crate::support::{expect_output, repo};

#[test]
fn a_syntax_error_shows_the_line_with_a_caret_and_exits_3() {
    let test =
        repo().script("step(\"A\", || {\n    let x = 1\n    write_text(\"out\", \"x\");\n});\n");
    test.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        "error: scripts/test.rhai does not compile\n\
         \x20 × syntax error: Expecting ';' to terminate this statement\n\
         \x20  ╭─[scripts/test.rhai:3:5]\n\
         \x202 │     let x = 1\n\
         \x203 │     write_text(\"out\", \"x\");\n\
         \x20  ·     ─────┬────\n\
         \x20  ·          ╰── here\n\
         \x204 │ });\n\
         \x20  ╰────\n\
         \x20 hint: check the syntax at this position; Rhai statements end with `;`\n",
    );
    assert!(!test.join("out").exists());
}

#[test]
fn an_undeclared_variable_is_caught_before_anything_runs() {
    let test =
        repo().script("step(\"A\", || { write_text(\"out\", \"x\"); });\nprint(undeclared);\n");
    test.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        "error: scripts/test.rhai does not compile\n\
         \x20 × unknown variable `undeclared`\n\
         \x20  ╭─[scripts/test.rhai:2:7]\n\
         \x201 │ step(\"A\", || { write_text(\"out\", \"x\"); });\n\
         \x202 │ print(undeclared);\n\
         \x20  ·       ─────┬────\n\
         \x20  ·            ╰── here\n\
         \x20  ╰────\n\
         \x20 hint: variables are strict: declare them with `let` before use (script arguments are in `args`)\n",
    );
    assert!(!test.join("out").exists());
}

#[test]
fn an_unknown_function_names_the_closest_native() {
    // Found before the first step runs (a typo in a later step must not cost earlier changes).
    let test = repo().script(
        "step(\"Before\", || { write_text(\"before\", \"x\"); });\nstep(\"Write\", || {\n    writ_text(\"out\", \"x\");\n});\n",
    );
    let output = test.run(&["-q", "scripts/test.rhai"]);
    output.code(3);
    assert_eq!(
        output.stderr,
        "error: scripts/test.rhai calls a function that does not exist\n\
         \x20 × unknown function: writ_text\n\
         \x20  ╭─[scripts/test.rhai:3:5]\n\
         \x202 │ step(\"Write\", || {\n\
         \x203 │     writ_text(\"out\", \"x\");\n\
         \x20  ·     ────┬────\n\
         \x20  ·         ╰── no such function\n\
         \x204 │ });\n\
         \x20  ╰────\n\
         \x20 hint: did you mean `write_text`? `bprun functions` lists every native with its arguments\n"
    );
    assert!(!test.join("before").exists(), "no step ran");
}

#[test]
fn a_native_called_with_the_wrong_number_of_arguments_names_its_signatures() {
    // Before the run, not as "did you mean gitlab_wait_pipelines" when the step runs.
    let test = repo().script(
        "step(\"Before\", || { write_text(\"before\", \"x\"); });\nstep(\"Wait\", || { gitlab_wait_pipeline(\"blueprint-apps/guestbook\"); });\n",
    );
    test.run(&["-q", "scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: scripts/test.rhai calls a native with the wrong number of arguments
          × gitlab_wait_pipeline takes 2 or 3 arguments, not 1 argument
           ╭─[scripts/test.rhai:2:19]
         1 │ step("Before", || { write_text("before", "x"); });
         2 │ step("Wait", || { gitlab_wait_pipeline("blueprint-apps/guestbook"); });
           ·                   ──────────┬─────────
           ·                             ╰── refused before the run
           ╰────
          hint: it is called as gitlab_wait_pipeline(project: string, id: int) -> map or gitlab_wait_pipeline(project: string, id: int, options: map) -> map
        "#,
    );
    assert!(!test.join("before").exists(), "no step ran");
    // Arguments of the wrong type are found when the call runs: the hint shows the same.
    let typed = repo().script(
        "step(\"Wait\", || { gitlab_wait_pipeline(\"blueprint-apps/guestbook\", \"12\"); });\n",
    );
    let output = typed.run(&["-q", "scripts/test.rhai"]);
    output.code(1);
    let hint = output
        .stderr
        .lines()
        .find(|line| line.trim_start().starts_with("hint:"))
        .unwrap_or("")
        .trim()
        .to_string();
    assert_eq!(
        hint,
        "hint: the arguments do not fit gitlab_wait_pipeline, which is called as gitlab_wait_pipeline(project: string, id: int) -> map or gitlab_wait_pipeline(project: string, id: int, options: map) -> map"
    );
}

#[test]
fn a_literal_option_a_native_would_refuse_is_caught_before_anything_runs() {
    // Phase 3's last step, with its options mistyped: found before the first step writes.
    let test = repo().script(
        "step(\"Before\", || { write_text(\"before\", \"x\"); });\nstep(\"Smoke\", || {\n    gitlab_wait_pipelines([], #{timeout: \"ten\"});\n    kube_list(\"Pod\", \"gitlab\", #{label: \"app=x\", fields: \"\"});\n    parallel([1], |n| n, #{limit: 2});\n});\n",
    );
    let output = test.run(&["-q", "scripts/test.rhai"]);
    output.code(3);
    assert_eq!(
        output.stderr,
        "error: scripts/test.rhai gives a native an option it would refuse\n\
         \x20 × gitlab_wait_pipelines: option `timeout` must be a number of seconds, not a string\n\
         \x20  ╭─[scripts/test.rhai:3:31]\n\
         \x202 │ step(\"Smoke\", || {\n\
         \x203 │     gitlab_wait_pipelines([], #{timeout: \"ten\"});\n\
         \x20  ·                               ┬\n\
         \x20  ·                               ╰── refused before the run\n\
         \x204 │     kube_list(\"Pod\", \"gitlab\", #{label: \"app=x\", fields: \"\"});\n\
         \x20  ╰────\n\
         \x20 hint: see `bprun functions gitlab_wait_pipelines`\n\
         error: scripts/test.rhai gives a native an option it would refuse\n\
         \x20 × kube_list: unknown option `label`\n\
         \x20  ╭─[scripts/test.rhai:4:32]\n\
         \x203 │     gitlab_wait_pipelines([], #{timeout: \"ten\"});\n\
         \x204 │     kube_list(\"Pod\", \"gitlab\", #{label: \"app=x\", fields: \"\"});\n\
         \x20  ·                                ┬\n\
         \x20  ·                                ╰── refused before the run\n\
         \x205 │     parallel([1], |n| n, #{limit: 2});\n\
         \x20  ╰────\n\
         \x20 hint: kube_list accepts labels, fields\n"
    );
    assert!(!test.join("before").exists(), "no step ran");
}

#[test]
fn an_error_inside_a_module_function_shows_the_call_chain() {
    let test = repo()
        .file("scripts/lib/helpers.rhai", "fn write_outside() {\n    write_text(\"/etc/bprun-test\", \"x\")\n}\nfn outer() { write_outside() }\n")
        .script("import \"lib/helpers\" as helpers;\nstep(\"Escape\", || {\n    helpers::outer();\n});\n");
    let output = test.run(&["-q", "scripts/test.rhai"]);
    output.code(1);
    let root = test.path().canonicalize().expect("root");
    assert_eq!(
        output.stderr,
        format!(
            "error: step \"Escape\" failed\n\
             \x20 × path /etc/bprun-test is outside the repository root {}\n\
             \x20  ╭─[scripts/lib/helpers.rhai:2:5]\n\
             \x201 │ fn write_outside() {{\n\
             \x202 │     write_text(\"/etc/bprun-test\", \"x\")\n\
             \x20  ·     ─────┬────\n\
             \x20  ·          ╰── failed here\n\
             \x203 │ }}\n\
             \x20  ╰────\n\
             \x20 in fn outer() called at scripts/test.rhai:3:14\n\
             \x20 in fn write_outside() called at scripts/lib/helpers.rhai:4:14\n\
             \x20 hint: file natives only reach files under the repository root; use a relative path such as infra/secrets/x.json\n\
             re-run with --resume to continue from here\n",
            root.display()
        )
    );
}

#[test]
fn exceeding_the_operation_limit_stops_the_script() {
    let test = repo()
        .script("let n = 0;\nloop { n += 1; }\n")
        .env("BPRUN_MAX_OPERATIONS", "10000");
    test.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        "error: the top level of scripts/test.rhai failed\n\
         \x20 × the script exceeded its operation limit\n\
         \x20  ╭─[scripts/test.rhai:2:13]\n\
         \x201 │ let n = 0;\n\
         \x202 │ loop { n += 1; }\n\
         \x20  ·             ┬\n\
         \x20  ·             ╰── limit reached here\n\
         \x20  ╰────\n\
         \x20 hint: is there an endless loop? BPRUN_MAX_OPERATIONS raises the limit for genuinely large work\n",
    );
}

#[test]
fn the_default_operation_limit_stops_an_endless_loop() {
    let test = repo().script("loop { }\n");
    test.run(&["scripts/test.rhai"]).code(3);
}

#[test]
fn imports_outside_the_script_folder_are_refused() {
    let test = repo()
        .file("secrets.rhai", "fn leak() { 1 }\n")
        .script("import \"../secrets\" as s;\n");
    test.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        "error: the top level of scripts/test.rhai failed\n\
         \x20 × import \"../secrets\" is outside the script folder scripts\n\
         \x20  ╭─[scripts/test.rhai:1:8]\n\
         \x201 │ import \"../secrets\" as s;\n\
         \x20  ·        ┬\n\
         \x20  ·        ╰── failed here\n\
         \x20  ╰────\n\
         \x20 hint: imports resolve under the script's folder only; put shared modules in scripts/lib/\n",
    );
}

#[test]
fn a_symlink_cannot_smuggle_an_import_out() {
    let test = repo()
        .file("outside/evil.rhai", "fn x() { 1 }\n")
        .script("import \"lib/evil\" as e;\n");
    std::fs::create_dir_all(test.join("scripts/lib")).expect("mkdir");
    std::os::unix::fs::symlink(
        test.join("outside/evil.rhai"),
        test.join("scripts/lib/evil.rhai"),
    )
    .expect("symlink");
    test.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: the top level of scripts/test.rhai failed
          × import "lib/evil" leads outside the script folder scripts
           ╭─[scripts/test.rhai:1:8]
         1 │ import "lib/evil" as e;
           ·        ┬
           ·        ╰── failed here
           ╰────
          hint: imports resolve under the script's folder only; put shared modules in scripts/lib/
        "#,
    );
}

#[test]
fn eval_is_disabled() {
    let test = repo().script("eval(\"1 + 1\");\n");
    let output = test.run(&["scripts/test.rhai"]);
    output.expect(
        3,
        "",
        "
        error: scripts/test.rhai does not compile
          × syntax error: reserved keyword 'eval' is disabled
           ╭─[scripts/test.rhai:1:1]
         1 │ eval(\"1 + 1\");
           · ──┬─
           ·   ╰── here
           ╰────
          hint: bprun scripts cannot `eval` text: call a function, or `import` a module from the script's folder
        ",
    );
}

#[test]
fn remote_and_mutating_natives_are_refused_at_the_top_level() {
    // (native, the call, the underline under its name, where its label hangs).
    let cases = [
        (
            "write_text",
            "write_text(\"out\", \"x\")",
            "─────┬────",
            "     ╰",
        ),
        (
            "tcp_probe",
            "tcp_probe(\"127.0.0.1\", 9, 1)",
            "────┬────",
            "    ╰",
        ),
        (
            "http_status",
            "http_status(\"http://127.0.0.1:9/\", 1)",
            "─────┬─────",
            "     ╰",
        ),
        (
            "run_command",
            "run_command([\"true\"])",
            "─────┬─────",
            "     ╰",
        ),
    ];
    for (native, call, underline, hook) in cases {
        let test = repo().script(&format!("{call};\n"));
        let output = test.run(&["--list", "scripts/test.rhai"]);
        let stderr = format!(
            "
            error: the top level of scripts/test.rhai failed
              × {native} was called at the top level of the script
               ╭─[scripts/test.rhai:1:1]
             1 │ {call};
               · {underline}
               · {hook}── failed here
               ╰────
              hint: the top level only declares steps (so --list never touches anything); move this call into a step(\"...\", || {{ ... }}) body
            "
        );
        expect_output(native, &output, 3, "", &stderr);
        assert!(!test.join("out").exists());
    }
}

#[test]
fn a_missing_script_is_a_usage_error() {
    let test = repo();
    test.run(&["scripts/nope.rhai"]).expect(
        2,
        "",
        "error: script scripts/nope.rhai not found\n  hint: give the path of a .rhai file, e.g. scripts/phase3.rhai\n",
    );
}

#[test]
fn a_bad_script_argument_is_a_usage_error() {
    let test = repo().script("print(1);\n");
    test.run(&["scripts/test.rhai", "--=x"]).expect(
        2,
        "",
        "error: invalid script argument `--=x`\n  hint: script arguments look like --name value, --name=value or a bare --flag\n",
    );
}

#[test]
fn a_corrupt_journal_is_reported_with_a_hint() {
    let test = repo()
        .script("step(\"A\", || {});\n")
        .file(".bprun/journal/test.json", "{not json");
    let root = test.path().display().to_string();
    test.replace(root, "<repo>")
        .run(&["--resume", "scripts/test.rhai"])
        .expect(
            2,
            "",
            "
            error: the journal <repo>/.bprun/journal/test.json is not valid: key must be a string at line 1 column 2
              hint: delete <repo>/.bprun/journal/test.json to start a fresh history
            ",
        );
}

#[test]
fn an_extra_brace_is_named_where_it_is() {
    let test = repo().script(
        "let apps = [1];\nstep(\"A\", || {\n    {\n    info(\"a\");\n});\nstep(\"B\", || { info(apps) });\n",
    );
    test.run(&["--list", "scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: scripts/test.rhai does not compile
          × syntax error: Unexpected ')'
           ╭─[scripts/test.rhai:5:2]
         4 │     info("a");
         5 │ });
           ·  ┬
           ·  ╰── here
         6 │ step("B", || { info(apps) });
           ╰────
          hint: check the syntax at this position; Rhai statements end with `;`
          note: the `{` at line 3:5 is closed by the `}` at line 5:1, which is indented differently: is a brace missing or extra there?
        "#,
    );
}
