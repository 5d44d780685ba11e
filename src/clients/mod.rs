//! Plain Rust clients that do the work. They never import rhai: the adapters in `natives/` convert
//! arguments and results and register functions.

pub mod bao;
pub mod fs;
pub mod gitlab;
pub mod net;
pub mod process;
pub mod runtime;
