//! bprun's in-process OpenBao stand-in (src/sim/bao.rs) as scripts meet it: `bprun rehearse`
//! with `BPRUN_SIM_BAO=stand-in`, so the real binary's bao natives talk to it over HTTP exactly
//! as they talk to `bao server -dev` (the same script as tests/integration/bao.rs runs there).
//! Response shapes are unit-tested in src/sim/bao.rs.

use crate::bao::{KV_BASICS, VERSIONS, VERSIONS_PRINTED};
use crate::support::with_recaps;
use crate::support::{BPRUN, Output, SimKind, repo};
use bprun_testkit::unindent;

/// What `bprun rehearse` says on stderr before the script's own words: the platform it
/// started (each simulator on a port of its own, shown as `<port>`).
const REHEARSAL_PLATFORM: &str = "\
rehearsal platform (as phase 2 leaves it):
  GitLab simulator     http://127.0.0.1:<port>
  GitLab Runner        an online instance runner stand-in (as phase 2 registers it)
  Kubernetes simulator https://127.0.0.1:<port>
  OpenBao              bprun's in-process OpenBao stand-in (BPRUN_SIM_BAO=stand-in)
";

/// What `bprun rehearse` says on stdout after the script's recap.
const REHEARSAL_END_STATE: &str = "
End state of the rehearsal platform:
GitLab: no groups
";

/// `bprun rehearse [extra] scripts/test.rhai` on the stand-in, the ports it chose shown as
/// `<port>`.
fn rehearse(script: &str, extra: &[&str]) -> Output {
    let test = repo().script(script).env("BPRUN_SIM_BAO", "stand-in");
    let mut args = vec!["rehearse"];
    args.extend_from_slice(extra);
    args.push("scripts/test.rhai");
    test.run(&args)
        .replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>")
}

#[test]
fn the_bao_natives_work_on_the_stand_in_as_on_bao_dev() {
    let output = rehearse(
        &[
        r#"
step("Health", || {
    let status = bao_health();
    assert_eq(status.initialized, true);
    assert_eq(status.sealed, false);
    assert_eq(bao_init().changed, false);
});
"#,
        KV_BASICS,
        r#"
step("Mounts", || {
    assert_eq(bao_enable_kv(), #{changed: false});
    assert_eq(bao_enable_kv("apps", 2), #{changed: true});
    assert_eq(bao_enable_kv("apps", 2), #{changed: false});
    assert_eq(bao_write("apps:team/x", #{a: "1"}).changed, true);
    assert(bao_read("team/x", #{mount: "apps"}).a == "1", "explicit mount");
    try { bao_enable_kv("apps", 1); throw "no error"; } catch (e) {
        assert(e.message.ends_with("apps/ is already mounted as kv (version 2), not kv version 1"), e.message);
    }
    assert_eq(bao_enable_kv("legacy", 1), #{changed: true});
    assert_eq(bao_enable_kv("legacy", 1), #{changed: false});
    try { bao_read("nomount:x/y"); throw "no error"; } catch (e) { print(e.message); }
});
step("Delete", || {
    assert_eq(bao_delete("gitlab/bootstrap/admin_token"), #{changed: true});
    assert_eq(bao_delete("gitlab/bootstrap/admin_token"), #{changed: false});
    assert_eq(bao_read("gitlab/bootstrap/admin_token"), ());
    // A write after a delete continues the version history.
    assert_eq(bao_write("gitlab/bootstrap/admin_token", #{token: "again"}), #{changed: true, version: 3});
});
step("Destroy", || {
    assert_eq(bao_destroy("gitlab/bootstrap/admin_token"), #{changed: true});
    assert_eq(bao_destroy("gitlab/bootstrap/admin_token"), #{changed: false});
    assert_eq(bao_list("gitlab/bootstrap"), []);
});
"#,
        ]
        .concat(),
        &[],
    );
    output.code(0).stderr(REHEARSAL_PLATFORM);
    // Steps 9 and 10 print the path gitlab/bootstrap/admin_token as `***_token`: every value
    // bao_read returns is redacted from then on, and "admin" (the user name step 5 patched in
    // and read back) is one. A defect (the path is no secret), so the lines are not pinned.
    let why = "the lines between print admin_token as ***_token (redaction defect)";
    output.partial_stdout(
        &unindent(
            "
            [1/10] Health ... ok (#.## s)
            [2/10] Read missing ... ok (#.## s)
            [3/10] Write ...
                ~ write secret secret/gitlab/bootstrap/admin_token (version 1)
            [3/10] Write ... changed (#.## s)
            [4/10] Write again ... ok (#.## s)
            [5/10] Patch ...
                ~ patch secret secret/gitlab/bootstrap/admin_token (version 2)
            [5/10] Patch ... changed (#.## s)
            [6/10] List ... ok (#.## s)
            [7/10] Policy ...
                ~ write policy gitlab-read
            [7/10] Policy ... changed (#.## s)
            [8/10] Mounts ...
                ~ mount kv version 2 at apps/
                ~ write secret apps/team/x (version 1)
                ~ mount kv version 1 at legacy/
                openbao http://127.0.0.1:<port>: no KV mount `nomount` (reading nomount/x/y)
            [8/10] Mounts ... changed (#.## s)
            [9/10] Delete ...
            ",
        ),
        why,
    );
    output.partial_stdout(
        &unindent(
            "
            [9/10] Delete ... changed (#.## s)
            [10/10] Destroy ...
            ",
        ),
        why,
    );
    output.partial_stdout(
        &(unindent(
            &with_recaps("
            [10/10] Destroy ... changed (#.## s)

            <recap of scripts/test.rhai: Health: ok; Read missing: ok; Write: changed 1; Write again: ok; Patch: changed 1; List: ok; Policy: changed 1; Mounts: changed 3; Delete: changed 2; Destroy: changed 1>
            "),
        ) + REHEARSAL_END_STATE),
        why,
    );
    output.stdout_lacks("glpat-kv-test-000000000");
}

#[test]
fn versions_read_on_the_stand_in_as_on_bao_dev() {
    rehearse(VERSIONS, &[]).expect(
        0,
        &format!(
            "{}{REHEARSAL_END_STATE}",
            with_recaps(&format!(
                "{VERSIONS_PRINTED}\n<recap of scripts/test.rhai: Versions: changed 3>\n"
            ))
        ),
        REHEARSAL_PLATFORM,
    );
}

#[test]
fn a_sealed_stand_in_says_to_unseal() {
    let output = rehearse(
        r#"
step("Seal", || {
    bao_write("a/b", #{k: "v"});
    assert_eq(bao_seal(), #{changed: true});
    assert_eq(bao_seal(), #{changed: false});
    assert_eq(bao_status().sealed, true);
});
step("Read", || {
    bao_read("a/b");
});
"#,
        &["-q"],
    );
    output.expect(
        1,
        &format!(
            "{}{REHEARSAL_END_STATE}",
            unindent(
                &with_recaps("
            [1/2] Seal ... changed (#.## s)
            [2/2] Read ... failed (#.## s)

            <recap of scripts/test.rhai: Seal: changed 2; Read: failed>
            ")
            )
        ),
        &format!(
            "{REHEARSAL_PLATFORM}{}",
            unindent(
                r#"
                error: step "Read" failed
                  × openbao http://127.0.0.1:<port>: GET secret/data/a/b -> 503: Vault is sealed
                    ╭─[scripts/test.rhai:9:5]
                  8 │ step("Read", || {
                  9 │     bao_read("a/b");
                    ·     ────┬───
                    ·         ╰── failed here
                 10 │ });
                    ╰────
                  hint: OpenBao is sealed: run bao_unseal() (it reads the unseal keys from infra/secrets/openbao-init.json)
                re-run with --resume to continue from here
                "#
            )
        ),
    );
}

#[test]
fn check_mode_writes_nothing_on_the_stand_in() {
    let output = rehearse(
        r#"
step("Write", || {
    assert_eq(bao_write("apps/x", #{a: "1"}), #{changed: true, version: 1});
    assert_eq(bao_enable_kv("apps", 2), #{changed: true});
});
"#,
        &["--check"],
    );
    output.expect(
        0,
        &format!(
            "{}{REHEARSAL_END_STATE}",
            unindent(&with_recaps(
                "
            check mode: nothing will be changed
            [1/1] Write ...
                ~ would write secret secret/apps/x (version 1)
                ~ would mount kv version 2 at apps/
            [1/1] Write ... changed (#.## s)

            <recap of scripts/test.rhai (check mode): Write: changed 2>
            "
            ))
        ),
        REHEARSAL_PLATFORM,
    );
}

/// `bprun sim bao --listen ADDR --token TOKEN` serves the stand-in and prints its environment.
#[test]
fn sim_bao_prints_its_address_and_token() {
    let sim = BPRUN.sim(SimKind::Bao, &["--token", "root-of-test"]);
    assert_eq!(sim.keys(), ["BAO_ADDR", "BAO_TOKEN"]);
    assert_eq!(sim.var("BAO_TOKEN"), "root-of-test");
    repo()
        .script("step(\"W\", || { assert_eq(bao_write(\"a/b\", #{k: \"v\"}).version, 1); });\n")
        .envs(sim.vars())
        .run(&["scripts/test.rhai"])
        .expect(
            0,
            &with_recaps(
                "
            [1/1] W ...
                ~ write secret secret/a/b (version 1)
            [1/1] W ... changed (#.## s)

            <recap of scripts/test.rhai: W: changed 1>
            ",
            ),
            "",
        );
}
