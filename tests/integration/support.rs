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
