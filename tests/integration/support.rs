//! The harness (crates/testkit) bound to this build's `bprun` binary.

pub use bprun_testkit::{
    BaoServer, GITLAB_TOKEN, Output, Sim, SimKind, Test, bao_binary, free_port, tool,
};

/// The binary under test.
pub const BPRUN: bprun_testkit::Bprun = bprun_testkit::Bprun::at(env!("CARGO_BIN_EXE_bprun"));

/// A new temporary repository (a folder with `.git`) in which to run `bprun`.
pub fn repo() -> Test {
    BPRUN.test()
}

/// A table case's whole output: exit code, stdout and stderr exactly (see `Output::expect`),
/// with the case's name in the failure. (It belongs in the testkit, next to `expect`.)
#[track_caller]
pub fn expect_output(case: &str, output: &Output, code: i32, stdout: &str, stderr: &str) {
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        output.expect(code, stdout, stderr);
    }));
    if let Err(failure) = checked {
        let message = failure
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| failure.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        panic!("case {case:?}: {message}");
    }
}

/// `actual` is exactly `expected`, as written (no unindenting): for output whose every line is
/// indented, which `Output::stdout`/`stderr` cannot express. (It belongs in the testkit.)
#[track_caller]
pub fn assert_text(actual: &str, expected: &str) {
    assert!(
        actual == expected,
        "text differs\n--- expected ---\n{expected}\n--- actual ---\n{actual}"
    );
}
