//! bprun's in-process OpenBao stand-in (src/sim/bao.rs) as scripts meet it: `bprun rehearse`
//! with `BPRUN_SIM_BAO=stand-in`, so the real binary's bao natives talk to it over HTTP exactly
//! as they talk to `bao server -dev` (the same script as tests/integration/bao.rs runs there).
//! Response shapes are unit-tested in src/sim/bao.rs.

use crate::bao::KV_BASICS;
use crate::support::{BPRUN, Output, SimKind, repo};

fn rehearse(script: &str, extra: &[&str]) -> Output {
    let test = repo().script(script).env("BPRUN_SIM_BAO", "stand-in");
    let mut args = vec!["rehearse"];
    args.extend_from_slice(extra);
    args.push("scripts/test.rhai");
    test.run(&args)
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
    try { bao_read("nomount:x/y"); throw "no error"; } catch (e) {
        assert(e.message.contains("no KV mount `nomount` (reading nomount/x/y)"), e.message);
    }
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
    output.code(0);
    output.stdout_contains("    ~ write secret secret/gitlab/bootstrap/admin_token (version 1)\n");
    // The platform says which OpenBao runs.
    assert!(
        format!("{}{}", output.stdout, output.stderr).contains("stand-in"),
        "{}\n{}",
        output.stdout,
        output.stderr
    );
    assert!(
        !output.raw_stdout.contains("glpat-kv-test-000000000"),
        "a secret value leaked"
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
    output.code(1);
    output.stderr_contains("GET secret/data/a/b -> 503: Vault is sealed");
    output.stderr_contains("hint: OpenBao is sealed: run bao_unseal()");
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
    output.code(0);
    output.stdout_contains("apps/x (version 1)");
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
        .success();
}
