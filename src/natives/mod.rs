//! Thin Rhai adapters, one file per domain, each an `#[export_module]` whose `///` docs feed
//! `bprun functions` and `bprun defs`. Adapters convert arguments and results and call the plain
//! clients in `crate::clients`; the guarantees (check mode, changes, timeouts) are kept here.

use crate::natives::options::RhaiResultOf;
use rhai::Engine;
use rhai::plugin::*;

pub mod apps;
pub mod bao;
pub mod codec;
pub mod convert;
pub mod core;
pub mod declared;
pub mod fs;
pub mod git;
pub mod gitlab;
pub mod gitlab_branches;
pub mod gitlab_operate;
pub mod gitlab_reads;
pub mod helm;
pub mod host;
pub mod kube;
pub mod kube_nodes;
pub mod net;
pub mod options;
pub mod process;
pub mod reconcile;
pub mod secret;
pub mod steps;
pub mod tls;

/// Registers every bprun native into `engine`.
pub fn register_all(engine: &mut Engine) {
    engine.register_global_module(native_module().into());
}

/// All bprun natives as one module (the engine's global module and the source of `bprun functions`).
pub fn native_module() -> Module {
    let mut module = Module::new();
    module.set_id("bprun");
    combine_with_exported_module!(&mut module, "bprun_secret", secret::secret_functions);
    combine_with_exported_module!(&mut module, "bprun_core", core::core_functions);
    combine_with_exported_module!(&mut module, "bprun_steps", steps::step_functions);
    combine_with_exported_module!(&mut module, "bprun_fs", fs::fs_functions);
    combine_with_exported_module!(&mut module, "bprun_codec", codec::codec_functions);
    combine_with_exported_module!(&mut module, "bprun_net", net::net_functions);
    combine_with_exported_module!(&mut module, "bprun_process", process::process_functions);
    combine_with_exported_module!(&mut module, "bprun_bao", bao::bao_functions);
    combine_with_exported_module!(&mut module, "bprun_gitlab", gitlab::gitlab_functions);
    combine_with_exported_module!(
        &mut module,
        "bprun_gitlab_branches",
        gitlab_branches::gitlab_branch_functions
    );
    combine_with_exported_module!(
        &mut module,
        "bprun_gitlab_reads",
        gitlab_reads::gitlab_read_functions
    );
    combine_with_exported_module!(
        &mut module,
        "bprun_gitlab_operate",
        gitlab_operate::gitlab_operate_functions
    );
    combine_with_exported_module!(&mut module, "bprun_apps", apps::apps_functions);
    combine_with_exported_module!(&mut module, "bprun_git", git::git_functions);
    combine_with_exported_module!(&mut module, "bprun_tls", tls::tls_functions);
    combine_with_exported_module!(&mut module, "bprun_kube", kube::kube_functions);
    combine_with_exported_module!(
        &mut module,
        "bprun_kube_nodes",
        kube_nodes::kube_node_functions
    );
    combine_with_exported_module!(&mut module, "bprun_helm", helm::helm_functions);
    combine_with_exported_module!(&mut module, "bprun_host", host::host_functions);
    module
}

/// Reads a whole-seconds-or-fractional timeout argument.
pub(crate) fn seconds(value: &Dynamic, what: &str) -> RhaiResultOf<std::time::Duration> {
    let seconds = if let Ok(int) = value.as_int() {
        int as f64
    } else if let Ok(float) = value.as_float() {
        float
    } else {
        return Err(crate::engine::native_error(crate::error::NativeError::new(
            format!(
                "{what} must be a number of seconds, not {}",
                value.type_name()
            ),
        )));
    };
    if !(0.0..=86_400.0).contains(&seconds) || seconds.is_nan() {
        return Err(crate::engine::native_error(crate::error::NativeError::new(
            format!("{what} must be between 0 and 86400 seconds, not {seconds}"),
        )));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}
