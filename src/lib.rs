//! bprun: a Rust runner that embeds Rhai to bootstrap and operate the blueprint platform.
//!
//! Scripts own the order; the Rust natives own the guarantees (idempotence, check mode,
//! timeouts, named errors, secrets kept out of output).

pub mod catalog;
pub mod cli;
pub mod decl;
pub mod diagnostics;
pub mod docs;
pub mod engine;
pub mod error;
pub mod journal;
pub mod kube_table;
pub mod lint;
pub mod natives;
pub mod output;
pub mod params;
pub mod rehearse;
pub mod repl;
pub mod runner;
pub mod scope;
pub mod state;
pub mod text;
pub mod values;
