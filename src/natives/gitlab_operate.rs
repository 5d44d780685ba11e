//! What operators do to GitLab by hand besides reading it: the qualification's access probe
//! (may a Developer delete a project, an outsider clone a private one?).

use rhai::Map;
use rhai::plugin::*;

use super::convert::from_json;
use super::gitlab::{cancelled, remote};
use super::options::RhaiResultOf;
use crate::engine::native_error;

#[export_module]
pub mod gitlab_operate_functions {
    use super::*;

    /// Asks GitLab's access rules as the users they are about, in `group`: a Developer of a
    /// private project, an outsider (a user who is no member) and an anonymous client. Brings a
    /// private project `bprun-probe-<suffix>` and two users with one-day tokens, and deletes
    /// them again (what an interrupted probe left goes first). Returns `#{developer_clone,
    /// developer_delete, outsider_clone, anonymous_clone}`, each `#{allowed, detail}` (the
    /// status GitLab answered, such as `403 Forbidden`). Needs an administrator's token;
    /// refused in check mode (it creates users).
    ///
    /// ```rhai
    /// let probe = gitlab_access_probe("blueprint-apps");
    /// if probe.developer_delete.allowed { warn("a Developer may delete projects"); }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_access_probe(context: NativeCallContext, group: &str) -> RhaiResultOf<Map> {
        let (session, client) = remote(&context, "gitlab_access_probe")?;
        session
            .state
            .refuse_in_check(
                "gitlab_access_probe",
                "the probe creates two users and a project (and deletes them again)",
            )
            .map_err(native_error)?;
        let report = client
            .access_probe(group, &cancelled(&session))
            .map_err(native_error)?;
        // An object always converts to a map.
        Ok(from_json(report.to_json())
            .try_cast::<Map>()
            .unwrap_or_default())
    }
}
