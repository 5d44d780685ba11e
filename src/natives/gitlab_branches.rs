//! A project's branch protection, declared by the script: who may push to and merge into a
//! branch. bprun's own pushes go through it like anyone's, so phase 3 declares one that admits
//! its user before it pushes.

use rhai::Map;
use rhai::plugin::*;

use super::gitlab::{cancelled, remote};
use super::options::{RhaiResultOf, option_bool, option_str, reject_undeclared};
use super::reconcile::{mode, settle};
use crate::engine::native_error;
use crate::error::NativeError;
use bprun_clients::gitlab::{BranchAccess, BranchProtection};

/// The access an option names (default: Maintainers, GitLab's default protection).
fn access_option(options: &Map, key: &str, native: &str) -> RhaiResultOf<BranchAccess> {
    let Some(name) = option_str(options, key, native)? else {
        return Ok(BranchAccess::Maintainers);
    };
    BranchAccess::named(&name).ok_or_else(|| {
        native_error(
            NativeError::new(format!(
                "{native}: option `{key}` is `{name}`, not an access GitLab knows"
            ))
            .with_hint(format!(
                "`{key}` is one of {}",
                BranchAccess::NAMES.join(", ")
            )),
        )
    })
}

#[export_module]
pub mod gitlab_branch_functions {
    use super::*;

    /// Protects `branch` of `project` as the options say: `push` and `merge` each one of
    /// `no_one`, `developers`, `maintainers` (the default) or `admins`, and `allow_force_push`
    /// (default false). A branch protected otherwise is protected again as declared; a protected
    /// branch GitLab's API cannot describe in these terms (a user or group allowed, GitLab
    /// Premium) differs too. Returns `#{changed}`; `--diff` shows the levels before and after.
    ///
    /// ```rhai
    /// step("Protect main", || {
    ///     gitlab_protect_branch("blueprint-apps/guestbook", "main", #{push: "maintainers", merge: "developers"});
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_protect_branch(
        context: NativeCallContext,
        project: &str,
        branch: &str,
        options: Map,
    ) -> RhaiResultOf<Map> {
        const NATIVE: &str = "gitlab_protect_branch";
        let (session, client) = remote(&context, NATIVE)?;
        reject_undeclared(&options, NATIVE)?;
        let spec = BranchProtection {
            branch: branch.to_string(),
            push: access_option(&options, "push", NATIVE)?,
            merge: access_option(&options, "merge", NATIVE)?,
            allow_force_push: option_bool(&options, "allow_force_push", NATIVE)?.unwrap_or(false),
        };
        let outcome = client
            .ensure_protected_branch(project, &spec, mode(&session), &cancelled(&session))
            .map_err(native_error)?;
        let ((), changed) = settle(&session, outcome);
        let mut answer = Map::new();
        answer.insert("changed".into(), changed.into());
        Ok(answer)
    }
}
