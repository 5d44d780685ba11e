//! The natives' documentation as the commands read it (`bprun functions`, `bprun defs`, the
//! REPL's `:help` and completion): an engine with every native, and its parsed metadata.

use std::path::PathBuf;
use std::sync::Arc;

use crate::docs::FunctionDoc;

/// An engine with every native, for documentation commands (no script, no run).
pub fn documentation_engine() -> rhai::Engine {
    let reporter = crate::output::Reporter::new(crate::output::Format::Human, 0);
    let root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let state =
        crate::state::RunState::new(false, root.clone(), reporter, crate::runner::cancel_flag());
    crate::engine::build(Arc::new(crate::engine::Session::new(state, root)))
}

/// The documented natives, sorted by name.
pub fn function_docs() -> Vec<FunctionDoc> {
    let json = documentation_engine()
        .gen_fn_metadata_to_json(false)
        .unwrap_or_default();
    crate::docs::from_metadata(&json, &[crate::engine::RUN_STEPS_NATIVE])
}
