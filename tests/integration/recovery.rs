//! Safety rails around a run: one run per repository, a journal that can be written before
//! anything changes, syncs that cannot delete the checkout, temporary files that cannot be
//! redirected, and secrets that read as `***` however a script prints them.

use crate::support::{Output, repo};
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
    second.code(2);
    second.stdout_contains("waiting for the other bprun run in this repository: pid ");
    second.stderr_contains(&format!(
        "another bprun run is working in this repository: pid {} running scripts/test.rhai since ",
        first.id()
    ));
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
    let out = test.run(&["scripts/test.rhai"]);
    out.code(4);
    out.stderr_contains("cannot create the journal folder");
    assert!(
        !test.join("out.txt").exists(),
        "no step ran, so nothing changed"
    );
}

#[test]
fn sync_tree_refuses_to_sync_over_the_repository() {
    for destination in [".", "scripts", "infra", "..", "infra/secrets"] {
        let test = repo()
            .file("apps/demo/a.txt", "a\n")
            .file("infra/secrets/keep.json", "{}\n")
            .script(&format!(
                r#"step("Sync", || {{ sync_tree("apps/demo", "{destination}"); }});"#
            ));
        let out = test.run(&["scripts/test.rhai"]);
        out.code(1);
        assert!(
            out.stderr.contains("sync_tree: refusing to sync into")
                || out.stderr.contains("outside the repository root"),
            "{destination}: {}",
            out.stderr
        );
        assert!(
            test.join("infra/secrets/keep.json").exists()
                && test.join("scripts/test.rhai").exists(),
            "{destination}: nothing was deleted"
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
    test.run(&["scripts/test.rhai"]).code(0);
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
    out.code(1);
    out.stdout_contains(
        "    ***\n    t=***\n    interpolated ***\n    ***\n    ***\n    #{\"msg\": ***, \"n\": 1}\n",
    );
    out.stderr_contains("boom ***");
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
    let only = test.run(&["--only", "Smoke", "scripts/test.rhai"]);
    only.code(0);
    only.stdout_contains("[1/3] Login ...\n    logged in\n");
    only.stdout_contains("[2/3] Work ... skipped (not selected by --only)");
    only.stdout_contains("    smoked\n");
    let from = test.run(&["--from", "Smoke", "scripts/test.rhai"]);
    from.stdout_contains("    logged in\n");
    from.stdout_lacks("    worked\n");
    let skipped = test.run(&["--skip", "Login", "scripts/test.rhai"]);
    skipped.stdout_lacks("logged in");
    skipped.stdout_contains("    worked\n");
    let bad = repo()
        .script(r#"step("X", #{allways: true}, || {});"#)
        .run(&["scripts/test.rhai"]);
    bad.code(3);
    bad.stderr_contains("allways");
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
    let out = test.run(&["scripts/test.rhai"]);
    out.code(0);
    out.stdout_contains("    true\n    true\n    true\n");
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
    let out = test.run(&["rehearse", "scripts/probe.rhai"]);
    out.code(0);
    out.stdout_contains("    token set: false\n    healthy: true, version unknown: true\n");
}
