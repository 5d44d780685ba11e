//! Steps, selection, resume, check mode, the journal, timings and JSON events.

use crate::support::one_step_run;
use crate::support::with_recaps;
use crate::support::{assert_text, expect_output, repo};

const THREE_STEPS: &str = r#"
step("Write config", || {
    write_text("out/config.txt", "v1\n");
});
step("Say hello", || {
    info("hello");
});
step("Maybe fail", || {
    if args.fail == true { throw "asked to fail"; }
});
"#;

/// `-q --resume` of THREE_STEPS after a run that finished every step.
const ALL_DONE_BEFORE: &str = "
nothing to resume: every step finished in the run of <time>
[1/3] Write config ... skipped (done in the last run)
[2/3] Say hello ... skipped (done in the last run)
[3/3] Maybe fail ... skipped (done in the last run)

Recap of scripts/test.rhai
  #  step          status            changes       time
  1  Write config  skipped                 0          -
  2  Say hello     skipped                 0          -
  3  Maybe fail    skipped                 0          -
3 steps: 0 ok, 0 changed, 3 skipped, 0 failed in #.## s
";

/// `-q --resume` of THREE_STEPS with no finished run in the journal.
const NO_RUN_TO_RESUME: &str = "
no previous run to resume; starting from the first step
[1/3] Write config ... changed (#.## s)
[2/3] Say hello ... ok (#.## s)
[3/3] Maybe fail ... ok (#.## s)

Recap of scripts/test.rhai
  #  step          status            changes       time
  1  Write config  changed                 1     #.## s
  2  Say hello     ok                      0     #.## s
  3  Maybe fail    ok                      0     #.## s
3 steps: 2 ok, 1 changed, 0 skipped, 0 failed in #.## s
";

#[test]
fn list_prints_the_plan_without_running_any_step() {
    let test = repo().script(THREE_STEPS);
    test.run(&["--list", "scripts/test.rhai"]).expect(
        0,
        "scripts/test.rhai: 3 steps\n[1/3] Write config\n[2/3] Say hello\n[3/3] Maybe fail\n",
        "",
    );
    assert!(!test.join("out").exists(), "--list ran a step body");
    assert!(!test.join(".bprun").exists(), "--list wrote a journal");
}

#[test]
fn list_in_json_is_one_plan_event() {
    let test = repo().script(THREE_STEPS);
    let output = test.run(&[
        "--list",
        "--json",
        "--skip",
        "Say hello",
        "scripts/test.rhai",
    ]);
    output.code(0);
    let mut plan: serde_json::Value =
        serde_json::from_str(output.raw_stdout.trim()).expect("one JSON line");
    assert!(plan["ts"].is_string(), "{plan}");
    plan.as_object_mut().map(|map| map.remove("ts"));
    assert_eq!(
        plan,
        serde_json::json!({"event": "plan", "script": "scripts/test.rhai", "params": null, "steps": [
            {"index": 1, "name": "Write config", "skipped": null, "needs": [], "together": null},
            {"index": 2, "name": "Say hello", "skipped": "--skip", "needs": [], "together": null},
            {"index": 3, "name": "Maybe fail", "skipped": null, "needs": [], "together": null},
        ]})
    );
    // Each step's needs, and the group it runs together with (a group of one is no group).
    let grouped = repo().script(
        "step(\"A\", || {});\nconcurrently([\n    step(\"B\", #{needs: [\"A\"]}, || {}),\n    step(\"C\", || {}),\n], #{limit: 2});\nconcurrently([step(\"D\", #{needs: [\"B\", \"C\"]}, || {})]);\n",
    );
    let mut plan: serde_json::Value = serde_json::from_str(
        grouped
            .run(&["--list", "--json", "scripts/test.rhai"])
            .raw_stdout
            .trim(),
    )
    .expect("JSON");
    plan.as_object_mut().map(|map| map.remove("ts"));
    assert_eq!(
        plan,
        serde_json::json!({"event": "plan", "script": "scripts/test.rhai", "params": null, "steps": [
            {"index": 1, "name": "A", "skipped": null, "needs": [], "together": null},
            {"index": 2, "name": "B", "skipped": null, "needs": ["A"], "together": {"first": 2, "last": 3, "limit": 2, "writes_wait_for": null}},
            {"index": 3, "name": "C", "skipped": null, "needs": [], "together": {"first": 2, "last": 3, "limit": 2, "writes_wait_for": null}},
            {"index": 4, "name": "D", "skipped": null, "needs": ["B", "C"], "together": null},
        ]})
    );
    // A script's declared parameters are part of its plan.
    let declared = repo().script(
        "let args = params(#{n: #{type: \"int\", default_value: 3, help: \"How many\"}});\nstep(\"A\", || {});\n",
    );
    let plan: serde_json::Value = serde_json::from_str(
        declared
            .run(&["--list", "--json", "scripts/test.rhai"])
            .raw_stdout
            .trim(),
    )
    .expect("JSON");
    assert_eq!(
        plan["params"],
        serde_json::json!([{"name": "n", "flag": "--n", "type": "int", "default": 3, "help": "How many"}])
    );
}

#[test]
fn list_marks_the_steps_a_selection_leaves_out() {
    let test = repo().script(THREE_STEPS);
    test.run(&[
        "--list",
        "--skip",
        "Say hello",
        "--from",
        "Say hello",
        "scripts/test.rhai",
    ])
    .expect(
        0,
        "scripts/test.rhai: 3 steps\n\
             [1/3] Write config (skipped: before --from)\n\
             [2/3] Say hello (skipped: --skip)\n\
             [3/3] Maybe fail\n",
        "",
    );
}

#[test]
fn a_run_reports_each_step_and_a_recap() {
    let test = repo().script(THREE_STEPS);
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps("[1/3] Write config ...\n\
                      \x20   ~ create file out/config.txt\n\
                      [1/3] Write config ... changed (#.## s)\n\
                      [2/3] Say hello ...\n\
                      \x20   hello\n\
                      [2/3] Say hello ... ok (#.## s)\n\
                      [3/3] Maybe fail ... ok (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Write config: changed 1; Say hello: ok; Maybe fail: ok>\n"),
        "",
    );
    assert_eq!(test.read("out/config.txt"), "v1\n");
    // The second run changes nothing and says so.
    test.run(&["-q", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/3] Write config ... ok (#.## s)
        [2/3] Say hello ... ok (#.## s)
        [3/3] Maybe fail ... ok (#.## s)

        <recap of scripts/test.rhai: Write config: ok; Say hello: ok; Maybe fail: ok>
        ",
        ),
        "",
    );
}

#[test]
fn unknown_step_names_are_usage_errors_that_list_the_valid_names() {
    let test = repo().script(THREE_STEPS);
    for flag in ["--only", "--skip", "--from"] {
        test.run(&[flag, "Ensure grup", "scripts/test.rhai"]).expect(
            2,
            "",
            &format!(
                "error: unknown step \"Ensure grup\" in {flag}\n  hint: valid steps: 1 \"Write config\", 2 \"Say hello\", 3 \"Maybe fail\"\n"
            ),
        );
    }
    assert!(!test.join("out").exists(), "a usage error ran a step");
    // A near miss is named.
    test.run(&["--only", "say-helo", "scripts/test.rhai"]).expect(
        2,
        "",
        "error: unknown step \"say-helo\" in --only\n  hint: did you mean \"Say hello\"? valid steps: 1 \"Write config\", 2 \"Say hello\", 3 \"Maybe fail\"\n",
    );
}

/// `THREE_STEPS` with `--only` naming its last two steps.
const ONLY_THE_LAST_TWO: &str = "
    [1/3] Write config ... skipped (not selected by --only)
    [2/3] Say hello ... ok (#.## s)
    [3/3] Maybe fail ... ok (#.## s)

    <recap of scripts/test.rhai: Write config: skipped; Say hello: ok; Maybe fail: ok>
";

#[test]
fn steps_are_named_by_number_or_slug_and_a_selection_must_run_something() {
    let test = repo().script(THREE_STEPS);
    test.run(&["-q", "--only", "2", "scripts/test.rhai"])
        .expect(
            0,
            &with_recaps(
                "
        [1/3] Write config ... skipped (not selected by --only)
        [2/3] Say hello ... ok (#.## s)
        [3/3] Maybe fail ... skipped (not selected by --only)

        <recap of scripts/test.rhai: Write config: skipped; Say hello: ok; Maybe fail: skipped>
        ",
            ),
            "",
        );
    test.run(&[
        "-q",
        "--only",
        "say-hello",
        "--only",
        "MAYBE-FAIL",
        "scripts/test.rhai",
    ])
    .expect(0, &with_recaps(ONLY_THE_LAST_TWO), "");
    test.run(&["--from", "3", "--only", "2", "scripts/test.rhai"]).expect(
        2,
        "",
        "error: the selection runs no step\n  hint: --only, --skip, --from, --tags and --skip-tags combine: --from X --only Y runs Y only when it comes at or after X (bprun --list shows the plan)\n",
    );
    // Steps left out with --skip are not unfinished work for --resume.
    test.run(&["-q", "--skip", "1", "scripts/test.rhai"])
        .expect(
            0,
            &with_recaps(
                "
        [1/3] Write config ... skipped (--skip)
        [2/3] Say hello ... ok (#.## s)
        [3/3] Maybe fail ... ok (#.## s)

        <recap of scripts/test.rhai: Write config: skipped; Say hello: ok; Maybe fail: ok>
        ",
            ),
            "",
        );
    test.run(&["-q", "--resume", "scripts/test.rhai"])
        .expect(0, ALL_DONE_BEFORE, "");
}

#[test]
fn only_and_skip_select_steps() {
    let test = repo().script(THREE_STEPS);
    test.run(&[
        "-q",
        "--only",
        "Say hello",
        "--only",
        "Maybe fail",
        "scripts/test.rhai",
    ])
    .expect(0, &with_recaps(ONLY_THE_LAST_TWO), "");
    assert!(!test.join("out").exists());
    test.run(&["-q", "--skip", "Say hello", "scripts/test.rhai"])
        .expect(
            0,
            &with_recaps("
            [1/3] Write config ... changed (#.## s)
            [2/3] Say hello ... skipped (--skip)
            [3/3] Maybe fail ... ok (#.## s)

            <recap of scripts/test.rhai: Write config: changed 1; Say hello: skipped; Maybe fail: ok>
            "),
            "",
        );
    assert!(test.join("out/config.txt").exists());
}

#[test]
fn a_failed_step_stops_the_run_and_resume_continues_from_it() {
    let test = repo().script(THREE_STEPS);
    test.run(&["-q", "scripts/test.rhai", "--fail"]).expect(
        1,
        &with_recaps("[1/3] Write config ... changed (#.## s)\n\
                      [2/3] Say hello ... ok (#.## s)\n\
                      [3/3] Maybe fail ... failed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Write config: changed 1; Say hello: ok; Maybe fail: failed>\n"),
        "error: step \"Maybe fail\" failed\n\
         \x20 × asked to fail\n\
         \x20   ╭─[scripts/test.rhai:9:28]\n\
         \x20 8 │ step(\"Maybe fail\", || {\n\
         \x20 9 │     if args.fail == true { throw \"asked to fail\"; }\n\
         \x20   ·                            ──┬──\n\
         \x20   ·                              ╰── thrown here\n\
         \x2010 │ });\n\
         \x20   ╰────\n\
         re-run with --resume to continue from here\n",
    );
    let journal = test.read(".bprun/journal/test.json");
    assert!(journal.contains("\"status\": \"failed\""), "{journal}");
    assert!(
        journal.contains("\"error\": \"asked to fail\""),
        "{journal}"
    );

    test.run(&["-q", "--resume", "scripts/test.rhai"]).expect(
        0,
        &with_recaps("resuming at step 3 \"Maybe fail\" (run of <time>)\n\
                      [1/3] Write config ... skipped (done in the last run)\n\
                      [2/3] Say hello ... skipped (done in the last run)\n\
                      [3/3] Maybe fail ... ok (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Write config: skipped; Say hello: skipped; Maybe fail: ok>\n"),
        "",
    );
    // Nothing is left to resume.
    test.run(&["-q", "--resume", "scripts/test.rhai"])
        .expect(0, ALL_DONE_BEFORE, "");
}

#[test]
fn resume_without_a_journal_starts_at_the_first_step() {
    let test = repo().script(THREE_STEPS);
    test.run(&["-q", "--resume", "scripts/test.rhai"])
        .expect(0, NO_RUN_TO_RESUME, "");
}

#[test]
fn from_and_resume_together_are_refused() {
    let test = repo().script(THREE_STEPS);
    test.run(&["--from", "Say hello", "--resume", "scripts/test.rhai"])
        .expect(
            2,
            "",
            "error: --from and --resume both choose where to start\n  hint: use one of them\n",
        );
}

#[test]
fn check_mode_reports_would_change_and_mutates_nothing() {
    let test = repo().script(THREE_STEPS);
    test.run(&["--check", "scripts/test.rhai"]).expect(
        0,
        &with_recaps("
        check mode: nothing will be changed
        [1/3] Write config ...
            ~ would create file out/config.txt
        [1/3] Write config ... changed (#.## s)
        [2/3] Say hello ...
            hello
        [2/3] Say hello ... ok (#.## s)
        [3/3] Maybe fail ... ok (#.## s)

        <recap of scripts/test.rhai (check mode): Write config: changed 1; Say hello: ok; Maybe fail: ok>
        "),
        "",
    );
    assert!(!test.join("out").exists(), "check mode wrote a file");
    // A check run does not count for --resume.
    test.run(&["-q", "--resume", "scripts/test.rhai"])
        .expect(0, NO_RUN_TO_RESUME, "");
}

#[test]
fn a_native_that_cannot_honour_check_mode_refuses() {
    let test = repo().script(
        r#"step("Touch", || {
    run_command(["touch", "out.txt"]);
});
"#,
    );
    test.run(&["-q", "--check", "scripts/test.rhai"]).expect(
        1,
        &with_recaps("check mode: nothing will be changed\n\
                      [1/1] Touch ... failed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai (check mode): Touch: failed>\n"),
        "error: step \"Touch\" failed\n\
         \x20 × run_command cannot run in check mode: `touch out.txt` may change things and bprun cannot tell what\n\
         \x20  ╭─[scripts/test.rhai:2:5]\n\
         \x201 │ step(\"Touch\", || {\n\
         \x202 │     run_command([\"touch\", \"out.txt\"]);\n\
         \x20  ·     ─────┬─────\n\
         \x20  ·          ╰── failed here\n\
         \x203 │ });\n\
         \x20  ╰────\n\
         \x20 hint: run without --check, or guard the call with `if !check_mode() { ... }`\n\
         re-run with --resume to continue from here\n",
    );
    assert!(!test.join("out.txt").exists());
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Touch", "changed 1"), "");
    assert!(test.join("out.txt").exists());
}

#[test]
fn skip_ends_a_step_as_skipped_and_counts_as_done() {
    let test = repo().script(
        r#"step("Nothing to do", || { skip("already there"); throw "not reached"; });
step("Next", || {});
"#,
    );
    test.run(&["-q", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/2] Nothing to do ... skipped: already there (#.## s)
        [2/2] Next ... ok (#.## s)

        <recap of scripts/test.rhai: Nothing to do: skipped, timed; Next: ok>
        ",
        ),
        "",
    );
}

#[test]
fn json_events_describe_the_run_one_object_per_line() {
    let test = repo().script(THREE_STEPS);
    let output = test.run(&["--json", "scripts/test.rhai", "--fail"]);
    output.code(1);
    let events: Vec<serde_json::Value> = output
        .raw_stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        kinds,
        [
            "run_start",
            "step_start",
            "change",
            "step_end",
            "step_start",
            "log",
            "step_end",
            "step_start",
            "step_end",
            "error",
            "run_end"
        ]
    );
    assert_eq!(events[2]["resource"], "file out/config.txt");
    assert_eq!(events[3]["status"], "changed");
    assert_eq!(events[8]["status"], "failed");
    assert_eq!(events[8]["error"], "asked to fail");
    assert_eq!(events[10]["outcome"], "step-failed");
    assert_eq!(events[10]["exit_code"], 1);
    // Structured fields: every event has its time; a change its kind and name; the error its
    // step, the script line and (here none) a hint.
    for event in &events {
        let ts = event["ts"]
            .as_str()
            .unwrap_or_else(|| panic!("no ts: {event}"));
        assert!(
            ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "{ts}"
        );
    }
    assert_eq!(events[2]["action"], "create");
    assert_eq!(events[2]["kind"], "file");
    assert_eq!(events[2]["name"], "out/config.txt");
    assert_eq!(events[2]["step"], "Write config");
    assert_eq!(events[9]["step"], "Maybe fail");
    assert_eq!(events[9]["message"], "asked to fail");
    assert_eq!(events[9]["location"], "scripts/test.rhai:9:28");
    assert!(events[9]["hint"].is_null(), "{}", events[9]);
    // --timings and --summary honour --json: one event each, nothing else on stdout.
    for (flag, event) in [("--timings", "timings"), ("--summary", "summary")] {
        let report = test.run(&["--json", flag, "scripts/test.rhai"]);
        report.code(0);
        let lines: Vec<&str> = report.raw_stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{}", report.raw_stdout);
        let value: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
        assert_eq!(value["event"], event);
        assert_eq!(value["script"], "scripts/test.rhai");
    }
    let summary: serde_json::Value = serde_json::from_str(
        test.run(&["--json", "--summary", "scripts/test.rhai"])
            .raw_stdout
            .trim(),
    )
    .expect("JSON");
    assert_eq!(summary["stopped_at"]["name"], "Maybe fail");
    assert_eq!(summary["stopped_at"]["index"], 3);
}

#[test]
fn a_rehearsal_under_json_prints_json_lines_only() {
    let test = repo().script("step(\"Show\", || { info(\"hello\"); });\n");
    let output = test.run(&["rehearse", "--json", "scripts/test.rhai"]);
    output.code(0);
    let events: Vec<serde_json::Value> = output
        .raw_stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}")))
        .collect();
    let end_state = events
        .iter()
        .find(|event| event["event"] == "end_state")
        .expect("the end state as an event");
    assert_eq!(end_state["part"], "platform");
    assert!(
        end_state["lines"]
            .as_array()
            .is_some_and(|lines| !lines.is_empty()),
        "{end_state}"
    );
}

#[test]
fn timings_print_the_last_run_compared_with_the_one_before() {
    let test = repo().script(THREE_STEPS);
    test.run(&["--timings", "scripts/test.rhai"]).expect(
        0,
        "no recorded run of scripts/test.rhai yet\n",
        "",
    );
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    test.run(&["--timings", "scripts/test.rhai"]).expect(
        0,
        "Last run of scripts/test.rhai: <time> (success, #.## s)\n\
         previous: <time> (success, #.## s)\n\
         \x20 #  step          status            changes       time  previous\n\
         \x20 1  Write config  ok                      0     #.## s    #.## s\n\
         \x20 2  Say hello     ok                      0     #.## s    #.## s\n\
         \x20 3  Maybe fail    ok                      0     #.## s    #.## s\n",
        "",
    );
}

#[test]
fn the_journal_keeps_the_recent_runs_and_is_gitignored() {
    let test = repo().script(THREE_STEPS);
    for _ in 0..22 {
        test.run(&["-q", "--only", "Say hello", "scripts/test.rhai"])
            .expect(
                0,
                &with_recaps("
                [1/3] Write config ... skipped (not selected by --only)
                [2/3] Say hello ... ok (#.## s)
                [3/3] Maybe fail ... skipped (not selected by --only)

                <recap of scripts/test.rhai: Write config: skipped; Say hello: ok; Maybe fail: skipped>
                "),
                "",
            );
    }
    let journal: serde_json::Value =
        serde_json::from_str(&test.read(".bprun/journal/test.json")).expect("journal JSON");
    assert_eq!(journal["runs"].as_array().map(Vec::len), Some(20));
    assert_eq!(test.read(".bprun/.gitignore"), "*\n");
}

#[test]
fn step_names_must_be_unique() {
    let test = repo().script("step(\"A\", || {});\nstep(\"A\", || {});\n");
    test.run(&["--list", "scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: the top level of scripts/test.rhai failed
          × step "A" is declared twice
           ╭─[scripts/test.rhai:2:1]
         1 │ step("A", || {});
         2 │ step("A", || {});
           · ──┬─
           ·   ╰── failed here
           ╰────
          hint: step names select steps on the command line, so each must be unique
        "#,
    );
}

#[test]
fn script_arguments_reach_the_script_as_args() {
    let test = repo().script(
        r#"assert_eq(args.app, "guestbook");
assert_eq(args.destroy, true);
assert_eq(args.tag, ["a", "b"]);
assert_eq(args.no_overwrite_ci, true);
assert_eq(args.positional, ["extra"]);
print("args ok");
"#,
    );
    test.run(&[
        "scripts/test.rhai",
        "extra",
        "--app",
        "guestbook",
        "--destroy",
        "--tag",
        "a",
        "--tag=b",
        "--no-overwrite-ci",
    ])
    .expect(0, "args ok\n", "");
    // A value after a bare flag would be taken as its value; `--` ends the flags.
    test.run(&[
        "run",
        "scripts/test.rhai",
        "--app",
        "guestbook",
        "--destroy",
        "--tag",
        "a",
        "--tag",
        "b",
        "--no-overwrite-ci",
        "--",
        "extra",
    ])
    .expect(0, "args ok\n", "");
}

/// Each item waits for a file the other writes: they can only both finish when they run at the
/// same time, so this proves concurrency (and, with a bound of 1, the bound) without timing.
const RENDEZVOUS_FN: &str = r#"
fn meet(mine, theirs) {
    write_text(mine, "here");
    let waited = timestamp();
    while !path_exists(theirs) {
        if waited.elapsed > 5.0 { throw `${theirs} never appeared` }
        sleep(0.02);
    }
    mine
}
"#;

const PARALLEL_MEET: &str = r#"step("Meet", || {
    let limit = if args.limit == () { 2 } else { parse_int(args.limit) };
    let results = parallel([["out/a", "out/b"], ["out/b", "out/a"]], |pair| meet(pair[0], pair[1]), limit);
    assert_eq(results, ["out/a", "out/b"]);
});
"#;

#[test]
fn parallel_runs_items_at_the_same_time_and_keeps_their_order() {
    let test = repo().script(&format!("{RENDEZVOUS_FN}{PARALLEL_MEET}"));
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Meet", "changed 2"), "");
}

#[test]
fn parallel_honours_its_bound() {
    let test = repo().script(&format!("{RENDEZVOUS_FN}{PARALLEL_MEET}"));
    test.run(&["-q", "scripts/test.rhai", "--limit", "1"]).expect(
        1,
        &one_step_run("Meet", "failed 2"),
        r#"
        error: step "Meet" failed
          × parallel: 1 of 2 items failed
            ╭─[scripts/test.rhai:13:19]
         12 │     let limit = if args.limit == () { 2 } else { parse_int(args.limit) };
         13 │     let results = parallel([["out/a", "out/b"], ["out/b", "out/a"]], |pair| meet(pair[0], pair[1]), limit);
            ·                   ────┬───
            ·                       ╰── failed here
         14 │     assert_eq(results, ["out/a", "out/b"]);
            ╰────
          caused by: item 1 (["out/a", "out/b"]): out/b never appeared
          hint: each failed item is listed above; the others finished
        re-run with --resume to continue from here
        "#,
    );
}

#[test]
fn parallel_reports_every_failure() {
    let test = repo().script(
        r#"step("Fan out", || {
    parallel([#{name: "shared-code"}, #{name: "guestbook"}, #{name: "redis"}], |app| {
        if app.name != "shared-code" { throw `${app.name} broke` }
    }, 2);
});
"#,
    );
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &one_step_run("Fan out", "failed"),
        r#"
        error: step "Fan out" failed
          × parallel: 2 of 3 items failed
           ╭─[scripts/test.rhai:2:5]
         1 │ step("Fan out", || {
         2 │     parallel([#{name: "shared-code"}, #{name: "guestbook"}, #{name: "redis"}], |app| {
           ·     ────┬───
           ·         ╰── failed here
         3 │         if app.name != "shared-code" { throw `${app.name} broke` }
           ╰────
          caused by: item 2 (guestbook): guestbook broke
          caused by: item 3 (redis): redis broke
          hint: each failed item is listed above; the others finished
        re-run with --resume to continue from here
        "#,
    );
}

/// Two closures that each wait for a file the other writes: both finish only when they run at
/// the same time (no timing involved).
#[test]
fn concurrently_runs_its_closures_at_the_same_time_and_keeps_their_order() {
    let test = repo().script(&format!(
        "{RENDEZVOUS_FN}\nstep(\"Both\", || {{\n    let results = concurrently([|| meet(\"out/a\", \"out/b\"), || meet(\"out/b\", \"out/a\"), || 3]);\n    assert_eq(results, [\"out/a\", \"out/b\", 3]);\n}});\n"
    ));
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Both", "changed 2"), "");
}

/// A script that fails in one way, and all it prints.
struct Case {
    name: &'static str,
    script: &'static str,
    code: i32,
    stdout: &'static str,
    stderr: &'static str,
}

#[test]
fn concurrently_raises_a_single_failure_as_it_is_and_names_several() {
    let cases = [
        Case {
            name: "one task fails: its error as it is, no `concurrently:` wrapper",
            script: r#"step("One fails", || {
    concurrently([|| 1, || { throw "the registry does not answer" }]);
});
"#,
            code: 1,
            stdout: "
            [1/1] One fails ... failed (#.## s)

            Recap of scripts/test.rhai
              #  step       status            changes       time
              1  One fails  failed                  0     #.## s
            1 step: 0 ok, 0 changed, 0 skipped, 1 failed in #.## s
            ",
            stderr: r#"
            error: step "One fails" failed
              × the registry does not answer
               ╭─[scripts/test.rhai:2:30]
             1 │ step("One fails", || {
             2 │     concurrently([|| 1, || { throw "the registry does not answer" }]);
               ·                              ──┬──
               ·                                ╰── thrown here
             3 │ });
               ╰────
              in a closure called at scripts/test.rhai:2:5
            re-run with --resume to continue from here
            "#,
        },
        Case {
            name: "two tasks fail: both named",
            script: r#"step("Two fail", || {
    concurrently([|| { throw "first broke" }, || 2, || { throw "third broke" }]);
});
"#,
            code: 1,
            stdout: "
            [1/1] Two fail ... failed (#.## s)

            Recap of scripts/test.rhai
              #  step      status            changes       time
              1  Two fail  failed                  0     #.## s
            1 step: 0 ok, 0 changed, 0 skipped, 1 failed in #.## s
            ",
            stderr: r#"
            error: step "Two fail" failed
              × concurrently: 2 of 3 tasks failed
               ╭─[scripts/test.rhai:2:5]
             1 │ step("Two fail", || {
             2 │     concurrently([|| { throw "first broke" }, || 2, || { throw "third broke" }]);
               ·     ──────┬─────
               ·           ╰── failed here
             3 │ });
               ╰────
              caused by: task 1: first broke
              caused by: task 3: third broke
            re-run with --resume to continue from here
            "#,
        },
        Case {
            name: "a task that is not a closure",
            script: "step(\"Not a closure\", || { concurrently([|| 1, 2]); });\n",
            code: 1,
            stdout: "
            [1/1] Not a closure ... failed (#.## s)

            Recap of scripts/test.rhai
              #  step           status            changes       time
              1  Not a closure  failed                  0     #.## s
            1 step: 0 ok, 0 changed, 0 skipped, 1 failed in #.## s
            ",
            stderr: r#"
            error: step "Not a closure" failed
              × concurrently: task 2 is a i64, not a closure
               ╭─[scripts/test.rhai:1:28]
             1 │ step("Not a closure", || { concurrently([|| 1, 2]); });
               ·                            ──────┬─────
               ·                                  ╰── failed here
               ╰────
            re-run with --resume to continue from here
            "#,
        },
    ];
    for case in cases {
        let output = repo().script(case.script).run(&["-q", "scripts/test.rhai"]);
        expect_output(case.name, &output, case.code, case.stdout, case.stderr);
    }
}

#[test]
fn summary_says_where_the_last_run_stopped_and_what_comes_next() {
    let six = r#"
step("One", || { info("1"); });
step("Two", || { if args.fail == true { throw "two broke"; } });
step("Three", || { info("3"); });
step("Four", || { info("4"); });
step("Five", || { info("5"); });
step("Six", || { info("6"); });
"#;
    let test = repo().script(six);
    test.run(&["--summary", "scripts/test.rhai"]).expect(
        0,
        "no recorded run of scripts/test.rhai yet: the next run starts at step 1 (`bprun --list scripts/test.rhai` shows the plan)\n",
        "",
    );
    test.run(&["-q", "scripts/test.rhai", "--fail"]).code(1);
    test.run(&["--summary", "scripts/test.rhai"]).expect(
        0,
        "Last run of scripts/test.rhai: <time> (step-failed, #.## s)\n\
         stopped at step 2/6 \"Two\" (failed): two broke\n\
         next: 2 Two, 3 Three, 4 Four, 5 Five (then 1 more)\n\
         continue with: bprun --resume scripts/test.rhai\n",
        "",
    );
    test.run(&["-q", "--resume", "scripts/test.rhai"]).code(0);
    test.run(&["--summary", "scripts/test.rhai"]).expect(
        0,
        "Last run of scripts/test.rhai: <time> (success, #.## s)\n\
         all 6 steps finished; a re-run checks each and changes only what drifted\n",
        "",
    );
}

/// Runs `bprun scripts/test.rhai` on a pseudo-terminal and returns all it printed, escape codes
/// included.
fn on_a_terminal(test: &crate::support::Test, env: &[(&str, &str)]) -> String {
    let mut command = test.command(&["scripts/test.rhai"]);
    command.env("TERM", "xterm").env_remove("NO_COLOR");
    for (key, value) in env {
        command.env(key, value);
    }
    let mut session = rexpect::session::spawn_with_options(
        command,
        rexpect::reader::Options::new().timeout_ms(Some(20_000)),
    )
    .expect("spawn bprun");
    session.exp_eof().expect("the run ends")
}

#[test]
fn status_words_are_coloured_on_a_terminal_unless_no_color_is_set() {
    let test = repo().script(
        "step(\"Fine\", || {});\nstep(\"Write\", || { write_text(\"out.txt\", \"x\"); });\nstep(\"Skip\", || { skip(\"not today\"); });\n",
    );
    let on_a_terminal = |env: &[(&str, &str)]| {
        bprun_testkit::normalize(&on_a_terminal(&test, env).replace("\r\n", "\n"))
    };
    // In the recap the word is coloured and the column keeps its width.
    assert_text(
        &on_a_terminal(&[]),
        &bprun_testkit::unindent(
            "
            [1/3] Fine ... \u{1b}[32mok\u{1b}[0m (#.## s)
            [2/3] Write ...
                ~ create file out.txt
            [2/3] Write ... \u{1b}[33mchanged\u{1b}[0m (#.## s)
            [3/3] Skip ... \u{1b}[36mskipped\u{1b}[0m: not today (#.## s)

            Recap of scripts/test.rhai
              #  step   status            changes       time
              1  Fine   \u{1b}[32mok\u{1b}[0m                      0     #.## s
              2  Write  \u{1b}[33mchanged\u{1b}[0m                 1     #.## s
              3  Skip   \u{1b}[36mskipped\u{1b}[0m                 0     #.## s
            3 steps: 1 ok, 1 changed, 1 skipped, 0 failed in #.## s
            ",
        ),
    );
    // The file is there now: the later runs leave it alone.
    let plain = "
        [1/3] Fine ... ok (#.## s)
        [2/3] Write ... ok (#.## s)
        [3/3] Skip ... skipped: not today (#.## s)

        Recap of scripts/test.rhai
          #  step   status            changes       time
          1  Fine   ok                      0     #.## s
          2  Write  ok                      0     #.## s
          3  Skip   skipped                 0     #.## s
        3 steps: 2 ok, 0 changed, 1 skipped, 0 failed in #.## s
        ";
    assert_text(
        &on_a_terminal(&[("NO_COLOR", "1")]),
        &bprun_testkit::unindent(plain),
    );
    // Not a terminal (a pipe): no colour either.
    test.run(&["scripts/test.rhai"]).expect(0, plain, "");
}

#[test]
fn tags_select_steps_and_skip_tags_leave_them_out() {
    let test = repo().script(
        r#"
step("Login", #{always: true}, || { info("login"); });
step("Database", #{tags: ["data"]}, || { info("db"); });
step("Cache", #{tags: ["data", "cache"]}, || { info("cache"); });
step("Web", #{tags: ["web"]}, || { info("web"); });
"#,
    );
    let list = |args: &[&str]| {
        let mut all = vec!["--list"];
        all.extend_from_slice(args);
        all.push("scripts/test.rhai");
        test.run(&all)
    };
    list(&["--tags", "data"]).expect(
        0,
        "
        scripts/test.rhai: 4 steps
        [1/4] Login
        [2/4] Database
        [3/4] Cache
        [4/4] Web (skipped: not tagged data)
        ",
        "",
    );
    list(&["--tags", "web,cache"]).expect(
        0,
        "
        scripts/test.rhai: 4 steps
        [1/4] Login
        [2/4] Database (skipped: not tagged web or cache)
        [3/4] Cache
        [4/4] Web
        ",
        "",
    );
    list(&["--skip-tags", "cache"]).expect(
        0,
        "
        scripts/test.rhai: 4 steps
        [1/4] Login
        [2/4] Database
        [3/4] Cache (skipped: --skip-tags cache)
        [4/4] Web
        ",
        "",
    );
    // Runner options work after the script path too.
    test.run(&["scripts/test.rhai", "--skip-tags", "data"])
        .expect(
            0,
            &with_recaps(
                "
        [1/4] Login ...
            login
        [1/4] Login ... ok (#.## s)
        [2/4] Database ... skipped (--skip-tags data)
        [3/4] Cache ... skipped (--skip-tags data)
        [4/4] Web ...
            web
        [4/4] Web ... ok (#.## s)

        <recap of scripts/test.rhai: Login: ok; Database: skipped; Cache: skipped; Web: ok>
        ",
            ),
            "",
        );
    test.run(&["--list", "--tags", "dat", "scripts/test.rhai"])
        .expect(
            2,
            "",
            "
        error: unknown tag \"dat\" in --tags
          hint: did you mean \"data\"? the steps' tags: cache, data, web
        ",
        );
}

#[test]
fn a_detailed_check_exits_5_when_a_run_would_change_something_and_0_when_nothing() {
    let test = repo().script(THREE_STEPS);
    let check = |test: &crate::support::Test| {
        test.run(&["-q", "--check", "--detailed-exitcode", "scripts/test.rhai"])
    };
    // The check's whole output when the first step would `write` (changed 1) or not (ok).
    let checked = |write: &str| {
        let (line, recap) = if write == "ok" {
            ("ok", "ok")
        } else {
            ("changed", "changed 1")
        };
        with_recaps(&format!(
            "
        check mode: nothing will be changed
        [1/3] Write config ... {line} (#.## s)
        [2/3] Say hello ... ok (#.## s)
        [3/3] Maybe fail ... ok (#.## s)

        <recap of scripts/test.rhai (check mode): Write config: {recap}; Say hello: ok; Maybe fail: ok>
        "
        ))
    };
    check(&test).expect(5, &checked("changed"), "");
    assert!(
        !test.join("out/config.txt").exists(),
        "a check writes nothing"
    );
    test.run(&["-q", "scripts/test.rhai"]).success();
    check(&test).expect(0, &checked("ok"), "");
    // A failed step is a failure, whatever else would change.
    test.write("out/config.txt", "v0\n");
    test.run(&[
        "-q",
        "--check",
        "--detailed-exitcode",
        "scripts/test.rhai",
        "--fail",
    ])
    .code(1);
    // Only a check has such an exit code.
    test.run(&["--detailed-exitcode", "scripts/test.rhai"])
        .expect(
            2,
            "",
            "
            error: the following required arguments were not provided:
              --check

            Usage: bprun --check --detailed-exitcode <SCRIPT> [SCRIPT_ARGS]...

            For more information, try '--help'.
            ",
        );
}

/// Steps declared to run together (`concurrently([step(...), ...])` at the top level): two
/// that each wait for a file the other writes finish only when they run at the same time;
/// their lines print in declaration order, each step's together; a third fails and the others
/// still finish; the step after the group does not run; `--resume` runs only the failed one.
const GROUPED_STEPS: &str = r#"
step("First", || { info("first"); });
concurrently([
    step("A", || { meet("out/a", "out/b"); info("A met B"); }),
    step("B", || { meet("out/b", "out/a"); info("B met A"); }),
    step("Broken", || { if args.fail == true { throw "asked to fail"; } info("fixed"); }),
], #{limit: 3});
step("Last", || { info("last"); });
"#;

#[test]
fn grouped_steps_run_together_print_in_order_and_resume_runs_the_unfinished() {
    let test = repo().script(&format!("{RENDEZVOUS_FN}{GROUPED_STEPS}"));
    test.run(&["--list", "scripts/test.rhai"]).expect(
        0,
        "
        scripts/test.rhai: 5 steps
        [1/5] First
        [2/5] A  (runs together with steps 2-4, 3 at a time)
        [3/5] B  (runs together with steps 2-4, 3 at a time)
        [4/5] Broken  (runs together with steps 2-4, 3 at a time)
        [5/5] Last
        ",
        "",
    );
    test.run(&["scripts/test.rhai", "--fail"]).expect(
        1,
        &with_recaps(
            "
            [1/5] First ...
                first
            [1/5] First ... ok (#.## s)
            [2/5] A ...
                ~ create file out/a
                A met B
            [2/5] A ... changed (#.## s)
            [3/5] B ...
                ~ create file out/b
                B met A
            [3/5] B ... changed (#.## s)
            [4/5] Broken ... failed (#.## s)

            <recap of scripts/test.rhai: First: ok; A: changed 1; B: changed 1; Broken: failed; Last: not run>
            ",
        ),
        r#"
        error: step "Broken" failed
          × asked to fail
            ╭─[scripts/test.rhai:16:48]
         15 │     step("B", || { meet("out/b", "out/a"); info("B met A"); }),
         16 │     step("Broken", || { if args.fail == true { throw "asked to fail"; } info("fixed"); }),
            ·                                                ──┬──
            ·                                                  ╰── thrown here
         17 │ ], #{limit: 3});
            ╰────
        re-run with --resume to continue from here
        "#,
    );
    test.run(&["-q", "--resume", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
            resuming at step 4 \"Broken\" (run of <time>)
            [1/5] First ... skipped (done in the last run)
            [2/5] A ... skipped (done in the last run)
            [3/5] B ... skipped (done in the last run)
            [4/5] Broken ... ok (#.## s)
            [5/5] Last ... ok (#.## s)

            <recap of scripts/test.rhai: First: skipped; A: skipped; B: skipped; Broken: ok; Last: ok>
            ",
        ),
        "",
    );
}

/// On a terminal a running group shows a live line on stderr (which steps run and for how long,
/// which finished, which wait for the limit), erased before the held lines print: with it taken
/// out, the terminal shows exactly what a pipe gets.
#[test]
fn a_group_shows_a_live_progress_line_on_a_terminal_and_erases_it() {
    let test = repo().script(
        r#"concurrently([
    step("Slow", || { while !path_exists("out/quick") { sleep(0.02); } sleep(2.0); info("slow done"); }),
    step("Quick", || { write_text("out/quick", "here"); }),
    step("Queued", || { info("queued ran"); }),
], #{limit: 2});
"#,
    );
    let transcript = on_a_terminal(&test, &[("NO_COLOR", "1")]).replace("\r\n", "\n");
    // A drawing is `\r`, the line, then the rest of the old one erased; an erasure `\r\x1b[K`.
    let drawing = regex::Regex::new("\r([^\r\n\u{1b}]+)\u{1b}\\[K").expect("regex");
    let drawn: Vec<String> = drawing
        .captures_iter(&transcript)
        .map(|found| bprun_testkit::normalize(&found[1]))
        .collect();
    // The last drawing before the held lines print: Slow still runs; Quick finished, and its
    // worker ran Queued, which the limit held back until then.
    assert_eq!(
        drawn.last().map(String::as_str),
        Some("  running: Slow (#.## s); done: Quick, Queued"),
        "{transcript:?}"
    );
    let without_progress = drawing
        .replace_all(&transcript, "")
        .replace("\r\u{1b}[K", "");
    let lines = "
            [1/3] Slow ...
                slow done
            [1/3] Slow ... ok (#.## s)
            [2/3] Quick ...
                ~ create file out/quick
            [2/3] Quick ... changed (#.## s)
            [3/3] Queued ...
                queued ran
            [3/3] Queued ... ok (#.## s)

            Recap of scripts/test.rhai
              #  step    status            changes       time
              1  Slow    ok                      0     #.## s
              2  Quick   changed                 1     #.## s
              3  Queued  ok                      0     #.## s
            3 steps: 2 ok, 1 changed, 0 skipped, 0 failed in #.## s
            ";
    assert_text(
        &bprun_testkit::normalize(&without_progress),
        &bprun_testkit::unindent(lines),
    );
    // Not a terminal: no progress line, the same lines.
    std::fs::remove_file(test.path().join("out/quick")).expect("remove out/quick");
    test.run(&["scripts/test.rhai"]).expect(0, lines, "");
}

#[test]
fn a_group_holds_only_the_steps_just_declared_and_warns_of_a_need_inside_it() {
    let cases = [
        Case {
            name: "a step declared before the group",
            script: r#"let a = step("A", || {});
step("B", || {});
concurrently([a, step("C", || {})]);
"#,
            code: 3,
            stdout: "",
            stderr: r#"
            error: the top level of scripts/test.rhai failed
              × concurrently: the steps A, C are not the ones just declared, in this order
               ╭─[scripts/test.rhai:3:1]
             2 │ step("B", || {});
             3 │ concurrently([a, step("C", || {})]);
               · ──────┬─────
               ·       ╰── failed here
               ╰────
              hint: declare a group's steps inside it: concurrently([step("A", || ...), step("B", || ...)]), so the script shows where they run
            "#,
        },
        Case {
            name: "a need inside the group",
            script: r#"concurrently([step("A", || {}), step("B", #{needs: ["A"]}, || {})]);
"#,
            code: 0,
            stdout: "
            warning: step 2 \"B\" needs \"A\", which runs together with it (step 1): expect it to fail
            scripts/test.rhai: 2 steps
            [1/2] A  (runs together with steps 1-2, 4 at a time)
            [2/2] B  (runs together with steps 1-2, 4 at a time)
            ",
            stderr: "",
        },
    ];
    for case in cases {
        let test = repo().script(case.script);
        let args: &[&str] = if case.code == 0 {
            &["--list", "scripts/test.rhai"]
        } else {
            &["scripts/test.rhai"]
        };
        expect_output(
            case.name,
            &test.run(args),
            case.code,
            case.stdout,
            case.stderr,
        );
    }
}
