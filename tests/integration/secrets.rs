//! A canary secret never reaches stdout, stderr, the journal or JSON events.

use crate::support::one_step_run;
use crate::support::with_recaps;
use crate::support::{Test, repo};

const CANARY: &str = "glpat-CANARY-9f8e7d6c5b4a";

fn assert_no_canary(test: &Test, output: &crate::support::Output) {
    output.stdout_lacks(CANARY).stderr_lacks(CANARY);
    if let Ok(journal) = std::fs::read_to_string(test.join(".bprun/journal/test.json")) {
        assert!(
            !journal.contains(CANARY),
            "the journal leaked the canary:\n{journal}"
        );
    }
}

const LEAKY: &str = r#"
let token = env_secret("CANARY_TOKEN");
print(token);
print(`interpolated: ${token}`);
debug(token);
step("Use the token", || {
    info(token.reveal());
    warn("revealed: " + token.reveal());
    print(json_string(#{token: token}));
    print(yaml_string(#{token: token}));
    let header = "Bearer " + token;
    print(header);
    print(base64_decode(base64_encode(token)));
    let echoed = run_command(["echo", token], #{read_only: true});
    print(echoed.stdout);
    report_change("use", token.reveal());
});
step("Fail with it", || {
    throw `failed with ${token.reveal()}`;
});
"#;

/// How LEAKY's last step fails, with the secret as `***`.
const FAILED_WITH_IT: &str = r#"
        error: step "Fail with it" failed
          × failed with ***
            ╭─[scripts/test.rhai:19:5]
         18 │ step("Fail with it", || {
         19 │     throw `failed with ${token.reveal()}`;
            ·     ──┬──
            ·       ╰── thrown here
         20 │ });
            ╰────
        re-run with --resume to continue from here
        "#;

#[test]
fn a_canary_secret_never_appears_in_any_output() {
    let test = repo().script(LEAKY).env("CANARY_TOKEN", CANARY);
    let verbose = test.run(&["-v", "scripts/test.rhai"]);
    verbose.expect(
        1,
        &with_recaps(
            r#"
        ***
        interpolated: ***
        debug: ***
        [1/2] Use the token ...
            ***
            warning: revealed: ***
            {"token":"***"}
            token: '***'
            Bearer ***
            ***
            debug: run: echo ***
            ***
            ~ use ***
        [1/2] Use the token ... changed (#.## s)
        [2/2] Fail with it ... failed (#.## s)

        <recap of scripts/test.rhai: Use the token: changed 1; Fail with it: failed>
        "#,
        ),
        FAILED_WITH_IT,
    );
    assert_no_canary(&test, &verbose);
    let json = test.run(&["-v", "--json", "scripts/test.rhai"]);
    assert_no_canary(&test, &json);
    json.replace_regex(r#""ts":"[^"]+""#, r#""ts":"<time>""#)
        .replace_regex(r#""duration_s":[0-9.]+"#, r#""duration_s":<s>"#)
        .expect(
            1,
            r#"
            {"event":"log","level":"info","message":"***","step":null,"ts":"<time>"}
            {"event":"log","level":"info","message":"interpolated: ***","step":null,"ts":"<time>"}
            {"event":"log","level":"debug","message":"***","step":null,"ts":"<time>"}
            {"check":false,"event":"run_start","script":"scripts/test.rhai","steps":2,"ts":"<time>"}
            {"event":"step_start","index":1,"name":"Use the token","total":2,"ts":"<time>"}
            {"event":"log","level":"info","message":"***","step":"Use the token","ts":"<time>"}
            {"event":"log","level":"warn","message":"revealed: ***","step":"Use the token","ts":"<time>"}
            {"event":"log","level":"info","message":"{\"token\":\"***\"}","step":"Use the token","ts":"<time>"}
            {"event":"log","level":"info","message":"token: '***'\n","step":"Use the token","ts":"<time>"}
            {"event":"log","level":"info","message":"Bearer ***","step":"Use the token","ts":"<time>"}
            {"event":"log","level":"info","message":"***","step":"Use the token","ts":"<time>"}
            {"event":"log","level":"debug","message":"run: echo ***","step":"Use the token","ts":"<time>"}
            {"event":"log","level":"info","message":"***\n","step":"Use the token","ts":"<time>"}
            {"action":"use","check":false,"event":"change","kind":"***","name":"","resource":"***","step":"Use the token","ts":"<time>"}
            {"changes":1,"duration_s":<s>,"error":null,"event":"step_end","index":1,"name":"Use the token","note":null,"status":"changed","total":2,"ts":"<time>"}
            {"event":"step_start","index":2,"name":"Fail with it","total":2,"ts":"<time>"}
            {"changes":0,"duration_s":<s>,"error":"failed with ***","event":"step_end","index":2,"name":"Fail with it","note":null,"status":"failed","total":2,"ts":"<time>"}
            {"event":"error","hint":null,"location":"scripts/test.rhai:19:5","message":"failed with ***","step":"Fail with it","ts":"<time>"}
            {"duration_s":<s>,"event":"run_end","exit_code":1,"outcome":"step-failed","ts":"<time>"}
            "#,
            FAILED_WITH_IT,
        );
    let check = test.run(&["--check", "scripts/test.rhai"]);
    check.expect(
        1,
        &with_recaps(
            r#"
        ***
        interpolated: ***
        check mode: nothing will be changed
        [1/2] Use the token ...
            ***
            warning: revealed: ***
            {"token":"***"}
            token: '***'
            Bearer ***
            ***
            ***
            ~ would use ***
        [1/2] Use the token ... changed (#.## s)
        [2/2] Fail with it ... failed (#.## s)

        <recap of scripts/test.rhai (check mode): Use the token: changed 1; Fail with it: failed>
        "#,
        ),
        FAILED_WITH_IT,
    );
    assert_no_canary(&test, &check);
}

#[test]
fn secrets_print_as_stars_and_compare_by_value() {
    let test = repo()
        .script(
            r#"let token = env_secret("CANARY_TOKEN");
print(token);
print(type_of(token));
assert(token == secret(env("CANARY_TOKEN")), "secrets compare by value");
assert(token != secret("other-value"), "different secrets differ");
assert(token == env("CANARY_TOKEN"), "a secret compares with text");
assert_eq(token.len, 25);
print(json_string([token]));
print(type_of("Bearer " + token));
"#,
        )
        .env("CANARY_TOKEN", CANARY);
    let output = test.run(&["scripts/test.rhai"]);
    output.expect(0, "***\nSecret\n[\"***\"]\nSecret\n", "");
    assert_no_canary(&test, &output);
}

#[test]
fn a_secret_written_to_a_file_gets_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let test = repo()
        .script("step(\"Persist\", || { write_text(\"infra/secrets/token.txt\", env_secret(\"CANARY_TOKEN\")); });\n")
        .env("CANARY_TOKEN", CANARY);
    let output = test.run(&["-q", "scripts/test.rhai"]);
    output.expect(0, &one_step_run("Persist", "changed 1"), "");
    assert_no_canary(&test, &output);
    assert_eq!(test.read("infra/secrets/token.txt"), CANARY);
    let mode = std::fs::metadata(test.join("infra/secrets/token.txt"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}
