//! Kubernetes natives (kube-rs). Being written.

use rhai::plugin::*;

#[export_module]
pub mod kube_functions {}
