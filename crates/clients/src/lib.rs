//! bprun's clients: plain Rust that does the work as typed operations (GitLab, Kubernetes, Helm,
//! OpenBao, git, TLS, files). No Rhai here: the adapters in the `bprun` crate's `natives/`
//! convert arguments and results, add the script-facing wording and register functions.

pub mod apps;
pub mod bao;
pub mod deployers;
pub mod digest;
pub mod error;
pub mod fs;
pub mod git;
pub mod gitlab;
pub mod helm;
pub mod host;
pub mod image_pins;
pub mod kube;
pub mod net;
pub mod process;
pub mod reconcile;
pub mod runtime;
pub mod secret;
pub mod tls;
pub mod tree;
pub mod values_schema;
pub mod write_gate;

/// An error and its causes on one line (`a: b: c`), skipping causes the text already holds.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
