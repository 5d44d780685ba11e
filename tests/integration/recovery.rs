//! Safety rails around a run: one run per repository, a journal that can be written before
//! anything changes, syncs that cannot delete the checkout, temporary files that cannot be
//! redirected, and secrets that read as `***` however a script prints them.

use crate::support::one_step_run;
use crate::support::{EMPTY_END_STATE, rehearsal_platform, with_recaps};
use crate::support::{Output, expect_output, repo};
use std::process::Stdio;

#[test]
fn a_second_run_waits_for_the_first_and_names_it() {
    let test = repo().script(
        r#"step("Hold", || { sleep(30); });
step("Other", || { info("other"); });"#,
    );
    let mut first = test
        .command(&["scripts/test.rhai"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("first run");
    // The first run holds the lock once it names itself in it (bounded: at most 20 s).
    let lock = test.join(".bprun/run.lock");
    let holder = format!("pid {} running scripts/test.rhai", first.id());
    for _ in 0..200 {
        if std::fs::read_to_string(&lock).is_ok_and(|text| text.starts_with(&holder)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let second = Output::normalized(
        test.command(&["scripts/test.rhai"])
            .env("BPRUN_RUN_LOCK_WAIT_MS", "300")
            .output()
            .expect("second run"),
    );
    let pid = first.id();
    second.expect(
        2,
        &format!(
            "waiting for the other bprun run in this repository: pid {pid} running scripts/test.rhai since <time>\n"
        ),
        &format!(
            "
            error: another bprun run is working in this repository: pid {pid} running scripts/test.rhai since <time>
              hint: wait for it to finish (bprun runs one script per repository at a time; --check runs do not lock)
            "
        ),
    );
    // --check does not lock: it runs while the first run holds the repository.
    test.run(&["--check", "--skip", "Hold", "scripts/test.rhai"])
        .code(0);
    first.kill().expect("kill the first run");
    first.wait().expect("reap");
    // The lock died with its process: the next run goes ahead.
    test.run(&["--skip", "Hold", "scripts/test.rhai"]).code(0);
}

#[test]
fn an_unwritable_journal_stops_the_run_before_the_first_step() {
    let test = repo()
        .script(r#"step("Write", || { write_text("out.txt", "changed"); });"#)
        .file(".bprun", "a file where the state folder should be");
    let root = test.path().display().to_string();
    let test = test.replace(root, "<repo>");
    test.run(&["scripts/test.rhai"]).expect(
        4,
        "",
        "error: cannot create the journal folder <repo>/.bprun/journal: Not a directory (os error 20)\n",
    );
    assert!(
        !test.join("out.txt").exists(),
        "no step ran, so nothing changed"
    );
}

#[test]
fn sync_tree_refuses_to_sync_over_the_repository() {
    const REFUSED: &str = "sync_tree: refusing to sync into";
    const SYNC_HINT: &str = "a sync deletes what the source lacks; sync into a working tree such as apps-local/blueprint-apps/<app>";
    // (destination, why it is refused, the hint); `<repo>` is the repository root.
    let cases = [
        (
            ".",
            format!("{REFUSED} .: it holds the repository itself"),
            SYNC_HINT,
        ),
        (
            "scripts",
            format!("{REFUSED} scripts: it holds scripts"),
            SYNC_HINT,
        ),
        (
            "infra",
            format!("{REFUSED} infra: it holds infra/secrets"),
            SYNC_HINT,
        ),
        (
            "..",
            "path .. is outside the repository root <repo>".to_string(),
            "file natives only reach files under the repository root; use a relative path such as infra/secrets/x.json",
        ),
        (
            "infra/secrets",
            format!("{REFUSED} infra/secrets: it holds infra/secrets"),
            SYNC_HINT,
        ),
    ];
    for (destination, refusal, hint) in cases {
        let test = repo()
            .file("apps/demo/a.txt", "a\n")
            .file("infra/secrets/keep.json", "{}\n")
            .script(&format!(
                r#"step("Sync", || {{ sync_tree("apps/demo", "{destination}"); }});"#
            ));
        let root = test
            .path()
            .canonicalize()
            .expect("root")
            .display()
            .to_string();
        let out = test.replace(root, "<repo>").run(&["scripts/test.rhai"]);
        let underline = format!("{}┬{}", "─".repeat(4), "─".repeat(4));
        let stderr = format!(
            r#"
            error: step "Sync" failed
              × {refusal}
               ╭─[scripts/test.rhai:1:19]
             1 │ step("Sync", || {{ sync_tree("apps/demo", "{destination}"); }});
               ·                   {underline}
               ·                       ╰── failed here
               ╰────
              hint: {hint}
            re-run with --resume to continue from here
            "#
        );
        expect_output(
            destination,
            &out,
            1,
            &one_step_run("Sync", "failed"),
            &stderr,
        );
    }
}

#[test]
fn write_text_never_follows_a_planted_link() {
    let outside = tempfile::tempdir().expect("outside");
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "untouched\n").expect("victim");
    let test = repo().script(r#"step("Write", || { write_text("conf/app.txt", "new\n"); });"#);
    std::fs::create_dir_all(test.join("conf")).expect("conf");
    // What the temporary name used to be: a link there must not redirect the write.
    std::os::unix::fs::symlink(&victim, test.join("conf/.app.txt.bprun-tmp")).expect("link");
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/1] Write ...
            ~ create file conf/app.txt
        [1/1] Write ... changed (#.## s)

        <recap of scripts/test.rhai: Write: changed 1>
        ",
        ),
        "",
    );
    assert_eq!(test.read("conf/app.txt"), "new\n");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "untouched\n"
    );
}

#[test]
fn secrets_read_as_stars_however_a_script_prints_them() {
    let test = repo()
        .env("GITLAB_TOKEN", "glpat-recovery-canary-token")
        .script(
            r#"step("Print", || {
    let s = secret("hunter2-recovery-canary");
    info(s);
    info("t=" + s);
    info(`interpolated ${s}`);
    info(env("GITLAB_TOKEN"));
    info(base64_decode(base64_encode(s)));
    try { throw #{msg: s, n: 1}; } catch (e) { info(e); }
    throw "boom " + s;
});"#,
        );
    let out = test.run(&["scripts/test.rhai"]);
    out.expect(
        1,
        &with_recaps(
            r#"
        [1/1] Print ...
            ***
            t=***
            interpolated ***
            ***
            ***
            #{"msg": ***, "n": 1}
        [1/1] Print ... failed (#.## s)

        <recap of scripts/test.rhai: Print: failed>
        "#,
        ),
        r#"
        error: step "Print" failed
          × boom ***
            ╭─[scripts/test.rhai:9:5]
          8 │     try { throw #{msg: s, n: 1}; } catch (e) { info(e); }
          9 │     throw "boom " + s;
            ·     ──┬──
            ·       ╰── thrown here
         10 │ });
            ╰────
        re-run with --resume to continue from here
        "#,
    );
    for canary in ["hunter2-recovery-canary", "glpat-recovery-canary-token"] {
        out.stdout_lacks(canary);
        out.stderr_lacks(canary);
    }
    out.stdout_lacks("bprun_clients::secret::Secret");
    out.stderr_lacks("bprun_clients::secret::Secret");
}

#[test]
fn always_steps_run_whatever_the_selection_unless_skipped_by_name() {
    let test = repo().script(
        r#"step("Login", #{always: true}, || { info("logged in"); });
step("Work", || { info("worked"); });
step("Smoke", || { info("smoked"); });"#,
    );
    // (selection, how it leaves Work out): Login runs either way.
    for (selection, work) in [
        (["--only", "Smoke"], "not selected by --only"),
        (["--from", "Smoke"], "before --from"),
    ] {
        let output = test.run(&[selection[0], selection[1], "scripts/test.rhai"]);
        let stdout = format!(
            "
            [1/3] Login ...
                logged in
            [1/3] Login ... ok (#.## s)
            [2/3] Work ... skipped ({work})
            [3/3] Smoke ...
                smoked
            [3/3] Smoke ... ok (#.## s)

            Recap of scripts/test.rhai
              #  step   status            changes       time
              1  Login  ok                      0     #.## s
              2  Work   skipped                 0          -
              3  Smoke  ok                      0     #.## s
            3 steps: 2 ok, 0 changed, 1 skipped, 0 failed in #.## s
            "
        );
        expect_output(selection[0], &output, 0, &stdout, "");
    }
    test.run(&["--skip", "Login", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/3] Login ... skipped (--skip)
        [2/3] Work ...
            worked
        [2/3] Work ... ok (#.## s)
        [3/3] Smoke ...
            smoked
        [3/3] Smoke ... ok (#.## s)

        <recap of scripts/test.rhai: Login: skipped; Work: ok; Smoke: ok>
        ",
        ),
        "",
    );
    repo()
        .script(r#"step("X", #{allways: true}, || {});"#)
        .run(&["scripts/test.rhai"])
        .expect(
            3,
            "",
            r#"
            error: scripts/test.rhai gives a native an option it would refuse
              × step: unknown option `allways`
               ╭─[scripts/test.rhai:1:11]
             1 │ step("X", #{allways: true}, || {});
               ·           ┬
               ·           ╰── refused before the run
               ╰────
              hint: step accepts always, on_failure, needs, keep_going, tags
            "#,
        );
}

#[test]
fn which_finds_programs_on_path_without_a_shell() {
    let test = repo().script(
        r#"step("Find", || {
    info(which("git") != ());
    info(which("surely-no-such-program-here") == ());
    info(which("") == ());
});"#,
    );
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/1] Find ...
            true
            true
            true
        [1/1] Find ... ok (#.## s)

        <recap of scripts/test.rhai: Find: ok>
        ",
        ),
        "",
    );
}

#[test]
fn a_rehearsal_starts_like_a_fresh_platform_without_a_gitlab_token() {
    let test = crate::support::BPRUN.test_in_repository_copy().file(
        "scripts/probe.rhai",
        r#"step("Probe", || {
    info(`token set: ${env("GITLAB_TOKEN") != ()}`);
    let health = gitlab_health();
    info(`healthy: ${health.ok}, version unknown: ${health.version == ()}`);
});"#,
    );
    test.run(&["rehearse", "scripts/probe.rhai"])
        .replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>")
        // The real bao when one is on PATH, else the stand-in: not what this test is about.
        .replace_regex(r"(?m)^(  OpenBao +).*$", "${1}<either>")
        .expect(
            0,
            &(with_recaps(
                "
            [1/1] Probe ...
                token set: false
                healthy: true, version unknown: true
            [1/1] Probe ... ok (#.## s)

            <recap of scripts/probe.rhai: Probe: ok>
            ",
            ) + EMPTY_END_STATE),
            &rehearsal_platform("<either>"),
        );
}
