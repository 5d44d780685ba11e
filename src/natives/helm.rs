//! Helm natives (the real `helm` binary). Being written.

use rhai::plugin::*;

#[export_module]
pub mod helm_functions {}
