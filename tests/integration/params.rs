//! Declared script parameters (`params(#{...})`): checked before anything runs, typed, shown by
//! `bprun SCRIPT --help` and `--list`, and split between the scripts of a rehearsal.

use crate::support::{EMPTY_END_STATE, rehearsal_platform, with_recaps};
use crate::support::{expect_output, repo};

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
    test.run(&[
        "scripts/test.rhai",
        "--app",
        "guestbook",
        "--smoke-timeout=30",
        "--tag",
        "a",
        "--tag",
        "b",
    ])
    .expect(
        0,
        &with_recaps(
            r#"
        the top level ran
        [1/1] Show ...
            app=guestbook smoke_timeout=30 (i64) destroy=false tag=["a", "b"]
        [1/1] Show ... ok (#.## s)

        <recap of scripts/test.rhai: Show: ok>
        "#,
        ),
        "",
    );
    test.run(&["scripts/test.rhai", "--destroy"]).expect(
        0,
        &with_recaps(
            "
        the top level ran
        [1/1] Show ...
            app= smoke_timeout=600 (i64) destroy=true tag=
        [1/1] Show ... ok (#.## s)

        <recap of scripts/test.rhai: Show: ok>
        ",
        ),
        "",
    );
    // --help, --list and -h after the script show the same.
    for args in [
        ["scripts/test.rhai", "--help"],
        ["--list", "scripts/test.rhai"],
        ["scripts/test.rhai", "-h"],
    ] {
        test.run(&args).expect(
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
    }
}

#[test]
fn an_unknown_or_mistyped_parameter_is_refused_before_anything_runs() {
    let test = repo().script(DECLARING);
    // (name, arguments, stderr): each refused with exit 2, before the top level runs.
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "a near miss",
            &["--ap", "guestbook"],
            "
            error: scripts/test.rhai: unknown parameter --ap
              hint: did you mean --app? this script takes --app, --destroy, --smoke-timeout, --tag (`bprun scripts/test.rhai --help` describes them)
            ",
        ),
        (
            "not a number",
            &["--smoke-timeout", "soon"],
            "
            error: scripts/test.rhai: --smoke-timeout expects a whole number, not `soon`
              hint: --smoke-timeout N  Seconds the smoke pipelines may take (default: 600) (`bprun scripts/test.rhai --help` describes them)
            ",
        ),
        (
            "a word after a flag",
            &["--destroy", "now"],
            "
            error: scripts/test.rhai: unexpected argument `now`
              hint: parameters are given as --name value; this script takes --app, --destroy, --smoke-timeout, --tag (`bprun scripts/test.rhai --help` describes them)
            ",
        ),
    ];
    for (name, arguments, stderr) in cases {
        let output = test.run(&[&["scripts/test.rhai"], arguments].concat());
        expect_output(name, &output, 2, "", stderr);
    }
    // A script that declares nothing takes any argument, as before.
    let open = repo().script("step(\"Show\", || { info(`x=${args.x}`); });\n");
    open.run(&["scripts/test.rhai", "--x", "1"]).expect(
        0,
        &with_recaps(
            "
        [1/1] Show ...
            x=1
        [1/1] Show ... ok (#.## s)

        <recap of scripts/test.rhai: Show: ok>
        ",
        ),
        "",
    );
}

#[test]
fn a_declaration_must_be_a_literal_at_the_top_level() {
    // (name, script, stderr): each stops the script with exit 3.
    let cases = [
        (
            "inside a function",
            "fn declare() { params(#{x: #{type: \"int\", help: \"X\"}}) }\nstep(\"A\", || { declare(); });\n",
            r#"
            error: scripts/test.rhai declares its parameters wrongly
              × params() belongs at the top level of the script (once, before its steps)
               ╭─[scripts/test.rhai:1:16]
             1 │ fn declare() { params(#{x: #{type: "int", help: "X"}}) }
               ·                ───┬──
               ·                   ╰── thrown here
             2 │ step("A", || { declare(); });
               ╰────
            "#,
        ),
        (
            "a computed map",
            "let spec = #{};\nlet args = params(spec);\n",
            "
            error: scripts/test.rhai declares its parameters wrongly
              × params() takes one literal map (#{name: #{type, default_value, help}, ...}), so that bprun can check the command line before the script runs
               ╭─[scripts/test.rhai:2:12]
             1 │ let spec = #{};
             2 │ let args = params(spec);
               ·            ───┬──
               ·               ╰── thrown here
               ╰────
            ",
        ),
        (
            "an unknown type",
            "let args = params(#{n: #{type: \"number\", help: \"N\"}});\n",
            r#"
            error: scripts/test.rhai declares its parameters wrongly
              × parameter `n`: unknown type `number` (bool, int, string or list)
               ╭─[scripts/test.rhai:1:12]
             1 │ let args = params(#{n: #{type: "number", help: "N"}});
               ·            ───┬──
               ·               ╰── thrown here
               ╰────
            "#,
        ),
    ];
    for (name, script, stderr) in cases {
        let output = repo().script(script).run(&["scripts/test.rhai"]);
        expect_output(name, &output, 3, "", stderr);
    }
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
    run.replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>")
        // The real bao when one is on PATH, else the stand-in: not what this test is about.
        .replace_regex(r"(?m)^(  OpenBao +).*$", "${1}<either>")
        .expect(
            0,
            &(with_recaps(
                r#"
            [1/1] First ...
                first: #{"wait_timeout": 60}
            [1/1] First ... ok (#.## s)

            <recap of scripts/first.rhai: First: ok>
            [1/1] Second ...
                second: #{"destroy": true, "smoke_timeout": 30}
            [1/1] Second ... ok (#.## s)

            <recap of scripts/second.rhai: Second: ok>
            "#,
            ) + EMPTY_END_STATE),
            &(rehearsal_platform("<either>")
                + "\n== rehearsal 1/2: scripts/first.rhai ==\n\n== rehearsal 2/2: scripts/second.rhai ==\n"),
        );
}
