//! Declared script parameters (`params(#{...})`): checked before anything runs, typed, shown by
//! `bprun SCRIPT --help` and `--list`, and split between the scripts of a rehearsal.

use crate::support::repo;

const DECLARING: &str = r#"// Printed before the declaration: a refused command line must not print it.
print("the top level ran");
let args = params(#{
    app: #{type: "string", help: "Provision only this app"},
    smoke_timeout: #{type: "int", default_value: 600, help: "Seconds the smoke pipelines may take"},
    destroy: #{type: "bool", default_value: false, help: "Tear everything down"},
    tag: #{type: "list", help: "Extra tags"},
});
step("Show", || {
    info(`app=${args.app} smoke_timeout=${args.smoke_timeout} (${type_of(args.smoke_timeout)}) destroy=${args.destroy} tag=${args.tag}`);
});
"#;

#[test]
fn declared_parameters_are_typed_defaulted_and_described() {
    let test = repo().script(DECLARING);
    let run = test.run(&[
        "scripts/test.rhai",
        "--app",
        "guestbook",
        "--smoke-timeout=30",
        "--tag",
        "a",
        "--tag",
        "b",
    ]);
    run.code(0);
    run.stdout_contains("app=guestbook smoke_timeout=30 (i64) destroy=false tag=[\"a\", \"b\"]");
    let defaults = test.run(&["scripts/test.rhai", "--destroy"]);
    defaults.stdout_contains("app= smoke_timeout=600 (i64) destroy=true tag=");
    test.run(&["scripts/test.rhai", "--help"]).expect(
        0,
        "
        the top level ran
        scripts/test.rhai: 1 step
        [1/1] Show
        parameters:
          --app TEXT         Provision only this app
          --destroy          Tear everything down
          --smoke-timeout N  Seconds the smoke pipelines may take (default: 600)
          --tag TEXT...      Extra tags
        ",
        "",
    );
    // --list shows the same, and -h after the script too.
    let list = test.run(&["--list", "scripts/test.rhai"]);
    list.stdout_contains(
        "  --smoke-timeout N  Seconds the smoke pipelines may take (default: 600)\n",
    );
    test.run(&["scripts/test.rhai", "-h"])
        .stdout_contains("parameters:\n");
}

#[test]
fn an_unknown_or_mistyped_parameter_is_refused_before_anything_runs() {
    let test = repo().script(DECLARING);
    test.run(&["scripts/test.rhai", "--ap", "guestbook"]).expect(
        2,
        "",
        "
        error: scripts/test.rhai: unknown parameter --ap
          hint: did you mean --app? this script takes --app, --destroy, --smoke-timeout, --tag (`bprun scripts/test.rhai --help` describes them)
        ",
    );
    test.run(&["scripts/test.rhai", "--smoke-timeout", "soon"]).expect(
        2,
        "",
        "
        error: scripts/test.rhai: --smoke-timeout expects a whole number, not `soon`
          hint: --smoke-timeout N  Seconds the smoke pipelines may take (default: 600) (`bprun scripts/test.rhai --help` describes them)
        ",
    );
    let flag_with_a_word = test.run(&["scripts/test.rhai", "--destroy", "now"]);
    flag_with_a_word.code(2);
    flag_with_a_word.stderr_contains("error: scripts/test.rhai: unexpected argument `now`");
    flag_with_a_word.stdout_lacks("the top level ran");
    // A script that declares nothing takes any argument, as before.
    let open = repo().script("step(\"Show\", || { info(`x=${args.x}`); });\n");
    open.run(&["scripts/test.rhai", "--x", "1"])
        .stdout_contains("x=1");
}

#[test]
fn a_declaration_must_be_a_literal_at_the_top_level() {
    let nested = repo().script(
        "fn declare() { params(#{x: #{type: \"int\", help: \"X\"}}) }\nstep(\"A\", || { declare(); });\n",
    );
    let run = nested.run(&["scripts/test.rhai"]);
    run.code(3);
    run.stderr_contains("error: scripts/test.rhai declares its parameters wrongly");
    run.stderr_contains("params() belongs at the top level of the script (once, before its steps)");
    run.stderr_contains("[scripts/test.rhai:1:16]");
    let computed = repo().script("let spec = #{};\nlet args = params(spec);\n");
    let run = computed.run(&["scripts/test.rhai"]);
    run.code(3);
    run.stderr_contains("params() takes one literal map");
    run.stderr_contains("[scripts/test.rhai:2:12]");
    let wrong_type = repo().script("let args = params(#{n: #{type: \"number\", help: \"N\"}});\n");
    let run = wrong_type.run(&["scripts/test.rhai"]);
    run.code(3);
    run.stderr_contains("parameter `n`: unknown type `number` (bool, int, string or list)");
}

#[test]
fn a_rehearsal_hands_each_script_its_own_parameters() {
    let test = repo()
        .file(
            "scripts/first.rhai",
            "let args = params(#{wait_timeout: #{type: \"int\", default_value: 900, help: \"W\"}});\nstep(\"First\", || { info(`first: ${args}`); });\n",
        )
        .file(
            "scripts/second.rhai",
            "let args = params(#{smoke_timeout: #{type: \"int\", default_value: 600, help: \"S\"}, destroy: #{type: \"bool\", default_value: false, help: \"D\"}});\nstep(\"Second\", || { info(`second: ${args}`); });\n",
        );
    // Refused before the platform starts: no script takes it.
    test.run(&["rehearse", "scripts/first.rhai", "scripts/second.rhai", "--wait-timeot", "5"])
        .expect(
            2,
            "",
            "
            error: no rehearsed script takes `--wait-timeot`
              hint: did you mean --wait-timeout? the scripts take --destroy, --smoke-timeout, --wait-timeout (`bprun SCRIPT --help` describes them)
            ",
        );
    let run = test.run(&[
        "rehearse",
        "scripts/first.rhai",
        "scripts/second.rhai",
        "--smoke-timeout",
        "30",
        "--wait-timeout",
        "60",
        "--destroy",
    ]);
    run.code(0);
    run.stdout_contains("first: #{\"wait_timeout\": 60}");
    run.stdout_contains("second: #{\"destroy\": true, \"smoke_timeout\": 30}");
}
