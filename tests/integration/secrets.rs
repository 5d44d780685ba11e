//! A canary secret never reaches stdout, stderr, the journal or JSON events.

use crate::support::{Test, repo};

const CANARY: &str = "glpat-CANARY-9f8e7d6c5b4a";

fn assert_no_canary(test: &Test, output: &crate::support::Output) {
    assert!(
        !output.raw_stdout.contains(CANARY),
        "stdout leaked the canary:\n{}",
        output.raw_stdout
    );
    assert!(
        !output.raw_stderr.contains(CANARY),
        "stderr leaked the canary:\n{}",
        output.raw_stderr
    );
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

#[test]
fn a_canary_secret_never_appears_in_any_output() {
    let test = repo().script(LEAKY).env("CANARY_TOKEN", CANARY);
    for args in [
        &["-v", "scripts/test.rhai"][..],
        &["-v", "--json", "scripts/test.rhai"][..],
        &["--check", "scripts/test.rhai"][..],
    ] {
        let output = test.run(args);
        output.code(1);
        assert!(output.raw_stdout.contains("***"), "{}", output.raw_stdout);
        assert_no_canary(&test, &output);
    }
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
    output.code(0);
    assert_no_canary(&test, &output);
    assert_eq!(test.read("infra/secrets/token.txt"), CANARY);
    let mode = std::fs::metadata(test.join("infra/secrets/token.txt"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}
