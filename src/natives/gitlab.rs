//! GitLab natives: thin adapters over `bprun_clients::gitlab`. They convert arguments and
//! results, record the changes the client reports, log its warnings and add the script's
//! wording; the reading, comparing and writing happen in the client's typed operations.

use crate::state::Resource;
use rhai::plugin::*;
use rhai::{Array, Map};
use serde_json::Value;
use std::sync::Arc;

use super::convert::{Secrets, from_json, to_json};
use super::options::{
    RhaiResultOf, option_bool, option_str, option_strings, reject_undeclared, reject_unknown,
    remote_session,
};
use super::reconcile::{mode, settle};
use crate::engine::{Session, lock, native_error, session};
use crate::error::NativeError;
use crate::output::Level;
use bprun_clients::error::{ClientError, ErrorKind};
use bprun_clients::gitlab::pipelines::{
    DEFAULT_PIPELINE_TIMEOUT, DEFAULT_POLL_INTERVAL, DEFAULT_PROGRESS_EVERY,
};
use bprun_clients::gitlab::{
    GitlabClient, GitlabSettings, Group, GroupSpec, Method, Pipeline, PipelineRef, Project,
    ProjectSpec, Removal, Reuse, Started, Variable, WaitParams,
};
use bprun_clients::secret::Secret;

fn client(session: &Session) -> Result<Arc<GitlabClient>, ClientError> {
    let mut slot = lock(&session.gitlab);
    if let Some(client) = slot.as_ref() {
        return Ok(client.clone());
    }
    let client = Arc::new(GitlabClient::new(GitlabSettings::from_env(
        &session.state.root,
    )?)?);
    *slot = Some(client.clone());
    Ok(client)
}

/// The session and its GitLab client, after checking that a remote native may run now.
pub(super) fn remote(
    context: &NativeCallContext,
    native: &str,
) -> RhaiResultOf<(Arc<Session>, Arc<GitlabClient>)> {
    let session = remote_session(context, native)?;
    let client = client(&session).map_err(native_error)?;
    Ok((session, client))
}

pub(super) fn cancelled(session: &Session) -> impl Fn() -> bool + '_ {
    move || session.state.is_cancelled()
}

/// GitLab's answer for scripts: the `value` of a masked or hidden CI/CD variable is a `Secret`
/// (it prints as `***`), wherever it appears in the answer.
pub(super) fn masked_as_secrets(value: Value) -> Dynamic {
    match value {
        Value::Object(map) => {
            let masked = map.get("masked") == Some(&Value::Bool(true))
                || map.get("hidden") == Some(&Value::Bool(true));
            let converted: rhai::Map = map
                .into_iter()
                .map(|(key, item)| {
                    let item = match (masked && key == "value", item) {
                        (true, Value::String(text)) => Dynamic::from(Secret::new(text)),
                        (_, other) => masked_as_secrets(other),
                    };
                    (key.into(), item)
                })
                .collect();
            Dynamic::from_map(converted)
        }
        Value::Array(items) => {
            Dynamic::from_array(items.into_iter().map(masked_as_secrets).collect())
        }
        other => from_json(other),
    }
}

/// A token argument: a `Secret`, or a string (wrapped, so it never prints).
fn secret_of(token: Dynamic, native: &str) -> RhaiResultOf<Secret> {
    if let Some(secret) = token.read_lock::<Secret>() {
        return Ok(secret.clone());
    }
    token
        .into_immutable_string()
        .map(|text| Secret::new(text.to_string()))
        .map_err(|type_name| {
            native_error(NativeError::new(format!(
                "{native}: the token must be a Secret or a string, not {type_name}"
            )))
        })
}

fn optional<T: Into<Dynamic>>(value: Option<T>) -> Dynamic {
    value.map(Into::into).unwrap_or(Dynamic::UNIT)
}

fn group_map(group: Group, changed: bool) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("id".into(), optional(group.id));
    map.insert("full_path".into(), group.full_path.into());
    map.insert("visibility".into(), group.visibility.into());
    map.insert("web_url".into(), optional(group.web_url));
    map.insert("changed".into(), changed.into());
    map
}

fn project_map(project: Project, changed: bool) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("id".into(), optional(project.id));
    map.insert(
        "path_with_namespace".into(),
        project.path_with_namespace.into(),
    );
    map.insert(
        "http_url_to_repo".into(),
        optional(project.http_url_to_repo),
    );
    map.insert("web_url".into(), optional(project.web_url));
    map.insert("default_branch".into(), optional(project.default_branch));
    map.insert("visibility".into(), optional(project.visibility));
    map.insert("changed".into(), changed.into());
    map
}

fn pipeline_map(project: &str, pipeline: Pipeline) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("id".into(), optional(pipeline.id));
    map.insert("iid".into(), optional(pipeline.iid));
    map.insert("status".into(), pipeline.status.into());
    map.insert("ref".into(), optional(pipeline.reference));
    map.insert("sha".into(), optional(pipeline.sha));
    map.insert("web_url".into(), optional(pipeline.web_url));
    map.insert("project".into(), project.to_string().into());
    map
}

/// A variable's value as text: a string, a `Secret`, or a number or bool written as text.
/// What `gitlab_trigger_pipeline` returns in check mode for a pipeline it would start.
fn would_start_map(project: &str, reference: &str) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("project".into(), project.to_string().into());
    map.insert("ref".into(), reference.to_string().into());
    map.insert("status".into(), "would-start".into());
    map
}

fn text_value(value: &Dynamic, key: &str) -> RhaiResultOf<String> {
    if let Some(secret) = value.read_lock::<Secret>() {
        return Ok(secret.reveal().to_string());
    }
    if value.is_string() || value.is_int() || value.is_float() || value.is_bool() {
        return Ok(value.to_string());
    }
    Err(native_error(NativeError::new(format!(
        "CI variable {key}: the value must be a string or a Secret, not {}",
        value.type_name()
    ))))
}

/// One entry of `vars`: a value, or an option map with a `value`.
fn variable_of(key: &str, spec: &Dynamic) -> RhaiResultOf<Variable> {
    let Some(options) = spec.read_lock::<rhai::Map>() else {
        let mut variable = Variable::new(key, text_value(spec, key)?);
        variable.secret = spec.is::<Secret>();
        return Ok(variable);
    };
    let native = format!("CI variable {key}");
    reject_unknown(
        &options,
        &[
            "value",
            "masked",
            "protected",
            "raw",
            "variable_type",
            "environment_scope",
            "description",
            "hidden",
        ],
        &native,
    )?;
    let value = options.get("value").ok_or_else(|| {
        native_error(NativeError::new(format!(
            "CI variable {key}: the option map needs a `value`"
        )))
    })?;
    let mut variable = Variable::new(key, text_value(value, key)?);
    variable.secret = value.is::<Secret>();
    variable.masked = option_bool(&options, "masked", &native)?.unwrap_or(false);
    variable.protected = option_bool(&options, "protected", &native)?.unwrap_or(false);
    variable.raw = option_bool(&options, "raw", &native)?.unwrap_or(false);
    if let Some(kind) = option_str(&options, "variable_type", &native)? {
        variable.variable_type = kind;
    }
    if let Some(scope) = option_str(&options, "environment_scope", &native)? {
        variable.environment_scope = scope;
    }
    variable.description = option_str(&options, "description", &native)?;
    variable.hidden = option_bool(&options, "hidden", &native)?.unwrap_or(false);
    Ok(variable)
}

/// One item of `gitlab_wait_pipelines`: `None` for a pipeline check mode only planned.
fn pipeline_ref(item: &Dynamic) -> RhaiResultOf<Option<PipelineRef>> {
    let map = item.read_lock::<rhai::Map>().ok_or_else(|| {
        native_error(NativeError::new(
            "gitlab_wait_pipelines: each item must be a map with `project` and `id`",
        ))
    })?;
    if map
        .get("status")
        .is_some_and(|s| s.to_string() == "would-start")
    {
        return Ok(None);
    }
    let project = map
        .get("project")
        .and_then(|v| v.clone().into_immutable_string().ok())
        .ok_or_else(|| {
            native_error(NativeError::new(
                "gitlab_wait_pipelines: an item has no `project`",
            ))
        })?
        .to_string();
    let id = map.get("id").and_then(|v| v.as_int().ok()).ok_or_else(|| {
        native_error(NativeError::new(format!(
            "gitlab_wait_pipelines: the item of {project} has no pipeline `id`"
        )))
    })?;
    Ok(Some(PipelineRef { project, id }))
}

/// Several failed pipelines as one error, each listed with its causes and hint.
fn failures_error(failures: Vec<ClientError>, total: usize) -> NativeError {
    let mut error = NativeError::new(format!(
        "gitlab: {} of {total} pipelines did not succeed",
        failures.len()
    ));
    for failure in failures {
        let mut text = failure.message.clone();
        for cause in &failure.causes {
            text.push('\n');
            text.push_str(cause);
        }
        if let Some(hint) = &failure.hint {
            text.push_str(&format!("\n({hint})"));
        }
        error = error.caused_by(text);
    }
    error.with_hint("each failed pipeline is listed above with its URL")
}

#[export_module]
pub mod gitlab_functions {
    use super::*;

    /// `GET /api/v4/<path>` and the JSON answer as maps and arrays (a 404 is an error). In this
    /// and the other raw calls, a project or group path may be written as GitLab shows it
    /// (`projects/blueprint-apps/guestbook/pipelines`): it is sent encoded
    /// (`blueprint-apps%2Fguestbook`); a file path inside one is still encoded by the caller.
    ///
    /// ```rhai
    /// step("Look", || { let me = gitlab_get("user"); info(me.username); });
    /// step("Pipelines", || { gitlab_get("projects/blueprint-apps/guestbook/pipelines"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_get(context: NativeCallContext, path: &str) -> RhaiResultOf<Dynamic> {
        let (session, client) = remote(&context, "gitlab_get")?;
        client
            .get(&bprun_clients::gitlab::api_path(path), &cancelled(&session))
            .map(masked_as_secrets)
            .map_err(native_error)
    }

    /// Every item of a paginated list (follows `x-next-page` / `link`, `per_page=100`).
    ///
    /// ```rhai
    /// step("List", || { for p in gitlab_get_all("groups/blueprint-apps/projects") { info(p.path) } });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_get_all(context: NativeCallContext, path: &str) -> RhaiResultOf<Array> {
        let (session, client) = remote(&context, "gitlab_get_all")?;
        client
            .get_all(&bprun_clients::gitlab::api_path(path), &cancelled(&session))
            .map(|items| items.into_iter().map(masked_as_secrets).collect())
            .map_err(native_error)
    }

    /// `POST /api/v4/<path>` with a JSON body. Raw writes cannot say what they would change, so
    /// they refuse to run in check mode; they count as a change.
    ///
    /// ```rhai
    /// step("Raw", || { gitlab_post("projects/1/pipeline", #{ref: "main"}); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_post(
        context: NativeCallContext,
        path: &str,
        body: rhai::Map,
    ) -> RhaiResultOf<Dynamic> {
        raw_write(context, "gitlab_post", Method::Post, path, Some(body))
    }

    /// `PUT /api/v4/<path>` with a JSON body (refused in check mode).
    ///
    /// ```rhai
    /// step("Raw", || { gitlab_put("groups/blueprint-apps", #{description: "apps"}); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_put(
        context: NativeCallContext,
        path: &str,
        body: rhai::Map,
    ) -> RhaiResultOf<Dynamic> {
        raw_write(context, "gitlab_put", Method::Put, path, Some(body))
    }

    /// `DELETE /api/v4/<path>` (refused in check mode).
    ///
    /// ```rhai
    /// step("Raw", || { gitlab_delete("projects/blueprint-apps%2Fold"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_delete(context: NativeCallContext, path: &str) -> RhaiResultOf<Dynamic> {
        raw_write(context, "gitlab_delete", Method::Delete, path, None)
    }

    /// `#{ok, url, version}`: `/-/health` answers `GitLab OK` and, when a token is set, the API
    /// answers with it (`version`; `()` without a token, as right after phase 2). Fails with a
    /// hint when GitLab is not healthy or the token is refused.
    ///
    /// ```rhai
    /// step("Pre-flight", || { info(`GitLab ${gitlab_health().version}`); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_health(context: NativeCallContext) -> RhaiResultOf<Map> {
        let (session, client) = remote(&context, "gitlab_health")?;
        // `/version` needs a token, which a fresh platform does not have yet (phase 3 mints
        // it): without one, health is `/-/health` alone and the version is `()`. The two reads
        // are independent: both at once.
        let stop = cancelled(&session);
        let (status, version) = std::thread::scope(|scope| {
            let version = client
                .token()
                .map(|_| scope.spawn(|| client.get("version", &stop)));
            // Through the GitLab client, so the CA file and timeouts are GitLab's.
            let status = client.health_status();
            let version = version.map(|thread| {
                thread.join().unwrap_or_else(|_| {
                    Err(ClientError::new(
                        "gitlab: GET /version: the request thread panicked",
                    ))
                })
            });
            (status, version)
        });
        match status {
            Ok(200) => {}
            Ok(other) => {
                return Err(native_error(
                    NativeError::new(format!("gitlab: GET /-/health -> {other}"))
                        .with_hint("GitLab is not healthy yet: check the gitlab-webservice pods"),
                ));
            }
            Err(reason) => {
                return Err(native_error(
                    NativeError::new(format!("gitlab: GET /-/health failed: {reason}")).with_hint(
                        format!(
                            "is GitLab reachable at {}? (GITLAB_URL)",
                            client.settings.url
                        ),
                    ),
                ));
            }
        }
        let version = match version {
            Some(answer) => from_json(answer.map_err(native_error)?["version"].clone()),
            None => Dynamic::UNIT,
        };
        let mut map = rhai::Map::new();
        map.insert("ok".into(), true.into());
        map.insert("url".into(), client.settings.url.clone().into());
        map.insert("version".into(), version);
        Ok(map)
    }

    /// Sets the token for the rest of the run (a `Secret` or a string).
    ///
    /// ```rhai
    /// step("Login", || { gitlab_login(env_secret("GITLAB_TOKEN")); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_login(context: NativeCallContext, token: Dynamic) -> RhaiResultOf<()> {
        let session = session(&context)?;
        let secret = token.read_lock::<Secret>().map(|secret| secret.clone());
        let token = match secret {
            Some(secret) => secret,
            None => Secret::new(
                token
                    .into_immutable_string()
                    .map_err(|t| {
                        native_error(NativeError::new(format!(
                            "gitlab_login: the token must be a Secret or a string, not {t}"
                        )))
                    })?
                    .to_string(),
            ),
        };
        client(&session).map_err(native_error)?.set_token(token);
        Ok(())
    }

    /// Whether GitLab still accepts `token` (a `Secret` or a string): `GET
    /// /personal_access_tokens/self` with it. False for a revoked or expired token, or one a
    /// rebuilt GitLab never issued.
    ///
    /// ```rhai
    /// step("Check PAT", || { if !gitlab_token_valid(env_secret("GITLAB_TOKEN")) { warn("stale PAT") } });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_token_valid(context: NativeCallContext, token: Dynamic) -> RhaiResultOf<bool> {
        let (session, client) = remote(&context, "gitlab_token_valid")?;
        let token = secret_of(token, "gitlab_token_valid")?;
        client
            .token_self(&token, &cancelled(&session))
            .map(|info| info.is_some())
            .map_err(native_error)
    }

    /// Whether the GitLab at `url` knows the runner authentication token `token` (a `Secret`
    /// or a string): `POST /runners/verify`, which only reads. False when GitLab answers 403,
    /// as it does for a token of a runner deleted in the UI or one a GitLab restored from an
    /// older backup never issued. `url` is GitLab's address (a port-forward to the webservice
    /// will do: this call needs no personal access token, so it works before phase 3).
    ///
    /// ```rhai
    /// step("Runner token", || {
    ///     let address = kube_port_forward("gitlab", "svc/gitlab-webservice-default", 8181);
    ///     if !gitlab_runner_token_known(`http://${address}`, bao_read("gitlab/runner/registration_token").token) {
    ///         warn("GitLab no longer knows the runner's token");
    ///     }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_runner_token_known(
        context: NativeCallContext,
        url: &str,
        token: Dynamic,
    ) -> RhaiResultOf<bool> {
        let session = remote_session(&context, "gitlab_runner_token_known")?;
        let token = secret_of(token, "gitlab_runner_token_known")?;
        let client = GitlabClient::new(GitlabSettings::at(url, &session.state.root))
            .map_err(native_error)?;
        client
            .runner_token_known(&token, &cancelled(&session))
            .map_err(native_error)
    }

    /// Revokes every active personal access token named `name` except `keep` (the one in use),
    /// so that an interrupted mint leaves no stray credential: `#{revoked, changed}`. Honours
    /// check mode.
    ///
    /// ```rhai
    /// step("Tidy PATs", || { gitlab_revoke_tokens("blueprint-phase3", env_secret("GITLAB_TOKEN")); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_revoke_tokens(
        context: NativeCallContext,
        name: &str,
        keep: Dynamic,
    ) -> RhaiResultOf<Map> {
        let (session, client) = remote(&context, "gitlab_revoke_tokens")?;
        let keep = secret_of(keep, "gitlab_revoke_tokens")?;
        let outcome = client
            .revoke_tokens_named(name, &keep, mode(&session), &cancelled(&session))
            .map_err(native_error)?;
        let (revoked, changed) = settle(&session, outcome);
        let mut map = rhai::Map::new();
        map.insert("revoked".into(), (revoked.len() as i64).into());
        map.insert("changed".into(), changed.into());
        Ok(map)
    }

    /// Whether GitLab still accepts `token` (a `Secret` or a string), and if it does, logs in
    /// with it and revokes every other active personal access token named `name`, as
    /// `gitlab_token_valid`, `gitlab_login` and `gitlab_revoke_tokens` in a row would, but with
    /// the two reads at once: `#{valid, revoked, changed}`. A refused token changes nothing
    /// (`valid: false`). Honours check mode.
    ///
    /// ```rhai
    /// step("PAT", || {
    ///     let adopted = gitlab_adopt_token("blueprint-phase3", env_secret("GITLAB_TOKEN"));
    ///     if !adopted.valid { warn("stale PAT") }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_adopt_token(
        context: NativeCallContext,
        name: &str,
        token: Dynamic,
    ) -> RhaiResultOf<Map> {
        let (session, client) = remote(&context, "gitlab_adopt_token")?;
        let token = secret_of(token, "gitlab_adopt_token")?;
        let outcome = client
            .adopt_token(name, &token, mode(&session), &cancelled(&session))
            .map_err(native_error)?;
        let mut map = rhai::Map::new();
        match outcome {
            Some(outcome) => {
                let (revoked, changed) = settle(&session, outcome);
                map.insert("valid".into(), true.into());
                map.insert("revoked".into(), (revoked.len() as i64).into());
                map.insert("changed".into(), changed.into());
            }
            None => {
                map.insert("valid".into(), false.into());
                map.insert("revoked".into(), 0_i64.into());
                map.insert("changed".into(), false.into());
            }
        }
        Ok(map)
    }

    /// Ensures a top-level group: `#{id, full_path, visibility, changed}`. Options: `name`
    /// (default: the path), `visibility` (default `internal`), `description`, `update` (true
    /// changes the visibility of an existing group; otherwise a difference is only reported).
    ///
    /// ```rhai
    /// step("Ensure group", || {
    ///     gitlab_ensure_group("blueprint-apps", #{name: "blueprint-apps", visibility: "internal"});
    /// });
    /// ```
    #[rhai_fn(name = "gitlab_ensure_group", return_raw)]
    pub fn gitlab_ensure_group_with(
        context: NativeCallContext,
        path: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        const NATIVE: &str = "gitlab_ensure_group";
        let (session, client) = remote(&context, NATIVE)?;
        reject_undeclared(&options, NATIVE)?;
        let spec = GroupSpec {
            path: path.to_string(),
            name: option_str(&options, "name", NATIVE)?,
            visibility: option_str(&options, "visibility", NATIVE)?,
            description: option_str(&options, "description", NATIVE)?,
            update: option_bool(&options, "update", NATIVE)?.unwrap_or(false),
        };
        let mut outcome = client
            .ensure_group(&spec, mode(&session), &cancelled(&session))
            .map_err(native_error)?;
        // Its only warnings are of a visibility left as it is, which the option changes.
        for warning in &mut outcome.warnings {
            warning.push_str(" (pass #{update: true} to change it)");
        }
        let (group, changed) = settle(&session, outcome);
        Ok(group_map(group, changed))
    }

    /// `gitlab_ensure_group(path, #{})`.
    ///
    /// ```rhai
    /// step("Ensure group", || { gitlab_ensure_group("blueprint-apps"); });
    /// ```
    #[rhai_fn(name = "gitlab_ensure_group", return_raw)]
    pub fn gitlab_ensure_group(context: NativeCallContext, path: &str) -> RhaiResultOf<Map> {
        gitlab_ensure_group_with(context, path, rhai::Map::new())
    }

    /// Ensures a project in a group: `#{id, path_with_namespace, http_url_to_repo, web_url,
    /// default_branch, visibility, changed}`. Options: `path` (default: the name), `visibility`
    /// (default `internal`), `description`, `default_branch`.
    ///
    /// ```rhai
    /// step("Ensure project", || {
    ///     let project = gitlab_ensure_project("blueprint-apps", "guestbook", #{visibility: "internal"});
    ///     info(project.http_url_to_repo);
    /// });
    /// ```
    #[rhai_fn(name = "gitlab_ensure_project", return_raw)]
    pub fn gitlab_ensure_project_with(
        context: NativeCallContext,
        namespace: &str,
        name: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        const NATIVE: &str = "gitlab_ensure_project";
        let (session, client) = remote(&context, NATIVE)?;
        reject_undeclared(&options, NATIVE)?;
        let spec = ProjectSpec {
            namespace: namespace.to_string(),
            name: name.to_string(),
            path: option_str(&options, "path", NATIVE)?,
            visibility: option_str(&options, "visibility", NATIVE)?,
            description: option_str(&options, "description", NATIVE)?,
            default_branch: option_str(&options, "default_branch", NATIVE)?,
        };
        let outcome = client
            .ensure_project(&spec, mode(&session), &cancelled(&session))
            .map_err(native_error)?;
        let (project, changed) = settle(&session, outcome);
        Ok(project_map(project, changed))
    }

    /// `gitlab_ensure_project(namespace, name, #{})`.
    ///
    /// ```rhai
    /// step("Ensure project", || { gitlab_ensure_project("blueprint-apps", "redis"); });
    /// ```
    #[rhai_fn(name = "gitlab_ensure_project", return_raw)]
    pub fn gitlab_ensure_project(
        context: NativeCallContext,
        namespace: &str,
        name: &str,
    ) -> RhaiResultOf<Map> {
        gitlab_ensure_project_with(context, namespace, name, rhai::Map::new())
    }

    /// Sets a project's CI/CD variables: `vars` maps keys to values (strings or `Secret`s) or to
    /// option maps (`value`, `masked`, `protected`, `raw`, `variable_type`, `environment_scope`,
    /// `description`, `hidden`). Creates missing, updates differing, leaves equal ones untouched
    /// (no request). A `hidden` variable (masked and hidden: GitLab never returns its value) is
    /// known by its description: the same description leaves it, another one writes the value;
    /// a visible one is deleted and created hidden.
    /// Option `remove_unlisted: true` deletes variables not in `vars`; `remove: [KEY, ...]`
    /// deletes those keys when present (a variable an earlier version set and no longer should).
    /// Returns
    /// `#{created, updated, unchanged, removed, changed}`. Masking rules are checked before sending.
    ///
    /// ```rhai
    /// step("Variables", || {
    ///     gitlab_set_variables("blueprint-apps/guestbook", #{
    ///         CI_HELM_CHART_DIR: "helm-chart",
    ///         CI_KUBECONFIG_B64: #{value: secret("a3ViZWNvbmZpZw=="), masked: true},
    ///     });
    /// });
    /// ```
    #[rhai_fn(name = "gitlab_set_variables", return_raw)]
    pub fn gitlab_set_variables_with(
        context: NativeCallContext,
        project: &str,
        vars: rhai::Map,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        const NATIVE: &str = "gitlab_set_variables";
        let (session, client) = remote(&context, NATIVE)?;
        reject_undeclared(&options, NATIVE)?;
        let remove_unlisted = option_bool(&options, "remove_unlisted", NATIVE)?.unwrap_or(false);
        let named = option_strings(&options, "remove", NATIVE)?;
        if let Some(both) = named.iter().find(|key| vars.contains_key(key.as_str())) {
            return Err(native_error(
                NativeError::new(format!("{NATIVE}: {both} is both set and removed"))
                    .with_hint("list a key in `vars` or in `remove`, not in both"),
            ));
        }
        let removal = match (remove_unlisted, named.is_empty()) {
            (true, true) => Removal::Unlisted,
            (true, false) => {
                return Err(native_error(
                    NativeError::new(format!(
                        "{NATIVE}: remove_unlisted already deletes every variable not in `vars`"
                    ))
                    .with_hint("give `remove_unlisted: true` or `remove: [...]`, not both"),
                ));
            }
            (false, true) => Removal::Nothing,
            (false, false) => Removal::Named(named),
        };
        let mut desired = Vec::with_capacity(vars.len());
        for (key, spec) in &vars {
            desired.push(variable_of(key, spec)?);
        }
        let outcome = client
            .set_variables(
                project,
                &desired,
                &removal,
                mode(&session),
                &cancelled(&session),
            )
            .map_err(native_error)?;
        let (counts, changed) = settle(&session, outcome);
        if changed && session.state.check() {
            lock(&session.pending_variables).insert(project.to_string());
        }
        let mut result = rhai::Map::new();
        result.insert("created".into(), counts.created.into());
        result.insert("updated".into(), counts.updated.into());
        result.insert("unchanged".into(), counts.unchanged.into());
        result.insert("removed".into(), counts.removed.into());
        result.insert("changed".into(), changed.into());
        Ok(result)
    }

    /// Keeps `project`'s deploying kubeconfig valid: a token of ServiceAccount `service_account`
    /// (default `ci-deployer`) of namespace `namespace` from the TokenRequest API, valid
    /// `lifetime_days` (default 30), in a kubeconfig for `server` (default
    /// `https://kubernetes.default.svc`, the address pods use) with the cluster CA of the
    /// namespace's `kube-root-ca.crt` and no other credential, in the hidden CI variable
    /// `variable` (default `CI_KUBECONFIG_B64`). The variable's description records the
    /// account's uid, the expiry and the token's digest: a stored token is kept while it is valid
    /// for more than `renew_within_days` (default 7) and its account is the same one, and
    /// replaced otherwise. Check mode says why it would replace it. Returns
    /// `#{expires_at, rotated, changed}` (`rotated`: why a token was issued, or `()`).
    ///
    /// ```rhai
    /// step("Deployers", || {
    ///     gitlab_ensure_deployer_kubeconfig("blueprint-apps/guestbook", #{namespace: "guestbook"});
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_ensure_deployer_kubeconfig(
        context: NativeCallContext,
        project: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        const NATIVE: &str = "gitlab_ensure_deployer_kubeconfig";
        reject_undeclared(&options, NATIVE)?;
        let (session, gitlab) = remote(&context, NATIVE)?;
        let kube = crate::natives::kube::client(&session).map_err(native_error)?;
        let namespace = option_str(&options, "namespace", NATIVE)?.ok_or_else(|| {
            native_error(
                NativeError::new(format!("{NATIVE}: option `namespace` is required"))
                    .with_hint("the app's namespace, whose ServiceAccount deploys it"),
            )
        })?;
        let days = |key: &str, default: i64| -> RhaiResultOf<std::time::Duration> {
            let days = crate::natives::options::option_int(&options, key, NATIVE, default)?;
            if days < 1 {
                return Err(native_error(NativeError::new(format!(
                    "{NATIVE}: `{key}` must be at least 1 day, not {days}"
                ))));
            }
            Ok(std::time::Duration::from_secs(days.unsigned_abs() * 86_400))
        };
        let spec = bprun_clients::deployers::DeployerSpec {
            project: project.to_string(),
            variable: option_str(&options, "variable", NATIVE)?
                .unwrap_or_else(|| "CI_KUBECONFIG_B64".into()),
            namespace,
            service_account: option_str(&options, "service_account", NATIVE)?
                .unwrap_or_else(|| "ci-deployer".into()),
            server: option_str(&options, "server", NATIVE)?
                .unwrap_or_else(|| "https://kubernetes.default.svc".into()),
            lifetime: days("lifetime_days", 30)?,
            renew_within: days("renew_within_days", 7)?,
        };
        if spec.renew_within >= spec.lifetime {
            return Err(native_error(
                NativeError::new(format!(
                    "{NATIVE}: renew_within_days must be less than lifetime_days"
                ))
                .with_hint("otherwise every run replaces the token it just issued"),
            ));
        }
        let outcome = bprun_clients::deployers::ensure_deployer_kubeconfig(
            &kube,
            &gitlab,
            &spec,
            mode(&session),
            &cancelled(&session),
        )
        .map_err(|error| native_error(error.named_by(|_| NATIVE)))?;
        let (deployer, changed) = settle(&session, outcome);
        if changed && session.state.check() {
            lock(&session.pending_variables).insert(project.to_string());
        }
        let mut result = rhai::Map::new();
        result.insert("expires_at".into(), deployer.expires_at.into());
        result.insert(
            "rotated".into(),
            deployer.rotated.map(Dynamic::from).unwrap_or(Dynamic::UNIT),
        );
        result.insert("changed".into(), changed.into());
        Ok(result)
    }

    /// `gitlab_set_variables(project, vars, #{})`.
    ///
    /// ```rhai
    /// step("Variables", || { gitlab_set_variables("blueprint-apps/redis", #{CI_HELM_CHART_DIR: "helm-chart"}); });
    /// ```
    #[rhai_fn(name = "gitlab_set_variables", return_raw)]
    pub fn gitlab_set_variables(
        context: NativeCallContext,
        project: &str,
        vars: rhai::Map,
    ) -> RhaiResultOf<Map> {
        gitlab_set_variables_with(context, project, vars, rhai::Map::new())
    }

    /// Starts a pipeline on `ref`: `#{id, iid, status, ref, sha, web_url, project}`. In check
    /// mode it reports what it would start and returns `#{project, ref, status: "would-start"}`.
    ///
    /// ```rhai
    /// step("Smoke", || { let pipeline = gitlab_trigger_pipeline("blueprint-apps/guestbook", "main"); });
    /// ```
    #[rhai_fn(name = "gitlab_trigger_pipeline", return_raw)]
    pub fn gitlab_trigger_pipeline(
        context: NativeCallContext,
        project: &str,
        reference: &str,
    ) -> RhaiResultOf<Map> {
        gitlab_trigger_pipeline_with(context, project, reference, rhai::Map::new())
    }

    /// Like `gitlab_trigger_pipeline(project, ref)` with options:
    /// - `reuse` (true: when the newest pipeline of the branch's head commit succeeded or is
    ///   still running, return it, with `reused: true`, instead of starting another; a re-run
    ///   then starts nothing);
    /// - `fingerprint` (an array of strings, with `reuse`): reuse only a pipeline that ran
    ///   with the project's CI/CD variables as they are now and with these strings (what
    ///   else the pipeline runs with, such as the head commit of a project whose templates it
    ///   includes), recorded in its `BPRUN_FINGERPRINT` pipeline variable; a new pipeline is
    ///   created with it;
    /// - `stale` (a reason, with `reuse`): reuse nothing, and say why (what the last pipeline
    ///   deployed is gone, or the operator asked for a new one).
    ///
    /// A pipeline not reused is named, with the reason, before the new one starts.
    ///
    /// ```rhai
    /// step("Smoke", || {
    ///     let templates = gitlab_get("projects/blueprint-apps%2Fshared-code/repository/branches/main").commit.id;
    ///     let pipeline = gitlab_trigger_pipeline("blueprint-apps/guestbook", "main", #{reuse: true, fingerprint: [templates]});
    /// });
    /// ```
    #[rhai_fn(name = "gitlab_trigger_pipeline", return_raw)]
    pub fn gitlab_trigger_pipeline_with(
        context: NativeCallContext,
        project: &str,
        reference: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        const NATIVE: &str = "gitlab_trigger_pipeline";
        let (session, client) = remote(&context, NATIVE)?;
        reject_undeclared(&options, NATIVE)?;
        let reuse = option_bool(&options, "reuse", NATIVE)?.unwrap_or(false);
        let fingerprinted = options.contains_key("fingerprint");
        let also = option_strings(&options, "fingerprint", NATIVE)?;
        let stale = option_str(&options, "stale", NATIVE)?;
        if !reuse && (fingerprinted || stale.is_some()) {
            return Err(native_error(
                NativeError::new(format!(
                    "{NATIVE}: `fingerprint` and `stale` decide which pipeline is reused: they need `reuse: true`"
                ))
                .with_hint("add `reuse: true`, or drop them to always start a new pipeline"),
            ));
        }
        let would_start = |why: String| {
            session.state.record_change(
                "start",
                Resource::new(
                    "pipeline",
                    project,
                    format!("pipeline of {project} at {reference} ({why})"),
                ),
            );
            would_start_map(project, reference)
        };
        // Check mode after a planned push: the head would move, so no pipeline of today's head
        // can be reused; a new one would start. After a planned variable write, a pipeline
        // fingerprinted with the variables is not reused either.
        if session.state.check() && lock(&session.pending_heads).contains(project) {
            return Ok(would_start(
                "its head commit would change: a push is planned".into(),
            ));
        }
        let variables_planned = session.state.check()
            && fingerprinted
            && lock(&session.pending_variables).contains(project);
        let policy = Reuse {
            fingerprint_with: fingerprinted.then_some(also),
            declined: stale.or_else(|| {
                variables_planned
                    .then(|| "its CI/CD variables would change: a write is planned".to_string())
            }),
        };
        let outcome = client
            .trigger_pipeline(
                project,
                reference,
                reuse.then_some(&policy),
                mode(&session),
                &cancelled(&session),
            )
            .map_err(native_error)?;
        let instead_of = match &outcome.value {
            Started::New { instead_of, .. } | Started::WouldStart { instead_of } => {
                instead_of.clone()
            }
            Started::Reused(_) => None,
        };
        if let Some(reason) = instead_of {
            session.state.reporter.log(Level::Info, &reason);
        }
        let (started, _) = settle(&session, outcome);
        Ok(match started {
            Started::New { pipeline, .. } => pipeline_map(project, pipeline),
            Started::Reused(pipeline) => {
                let mut map = pipeline_map(project, pipeline);
                map.insert("reused".into(), true.into());
                map
            }
            Started::WouldStart { .. } => would_start_map(project, reference),
        })
    }

    /// Waits until a pipeline ends (`success`, `failed`, `canceled`, `skipped`), logging each
    /// status change, and every 5 s (`progress`) where it stands: its status, its jobs' states
    /// and its URL. Anything but success is an error naming the failed jobs, the end of their
    /// traces and the pipeline's URL. Options: `timeout` (seconds, default 600), `interval`
    /// (seconds between polls, default 2), `progress` (seconds between progress lines, default 5),
    /// `check` (default true; `false` returns a pipeline that ended otherwise, with that error
    /// as its `failure`, instead of throwing: a timeout still throws).
    ///
    /// ```rhai
    /// step("Smoke", || {
    ///     let started = gitlab_trigger_pipeline("blueprint-apps/guestbook", "main");
    ///     gitlab_wait_pipeline("blueprint-apps/guestbook", started.id, #{timeout: 600});
    /// });
    /// ```
    #[rhai_fn(name = "gitlab_wait_pipeline", return_raw)]
    pub fn gitlab_wait_pipeline(
        context: NativeCallContext,
        project: &str,
        id: i64,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let mut item = rhai::Map::new();
        item.insert("project".into(), project.to_string().into());
        item.insert("id".into(), id.into());
        let results = gitlab_wait_pipelines(context, vec![Dynamic::from_map(item)], options)?;
        Ok(results
            .into_iter()
            .next()
            .and_then(|p| p.try_cast::<rhai::Map>())
            .unwrap_or_default())
    }

    /// `gitlab_wait_pipeline(project, id, #{})`: the default timeout (600 s) and intervals.
    ///
    /// ```rhai
    /// step("Smoke", || { gitlab_wait_pipeline("blueprint-apps/guestbook", 12); });
    /// ```
    #[rhai_fn(name = "gitlab_wait_pipeline", return_raw)]
    pub fn gitlab_wait_pipeline_defaults(
        context: NativeCallContext,
        project: &str,
        id: i64,
    ) -> RhaiResultOf<Map> {
        gitlab_wait_pipeline(context, project, id, rhai::Map::new())
    }

    /// `gitlab_wait_pipelines(pipelines, #{})`: the default timeout (600 s) and intervals.
    ///
    /// ```rhai
    /// step("Smoke", || { gitlab_wait_pipelines([#{project: "blueprint-apps/guestbook", id: 12}]); });
    /// ```
    #[rhai_fn(name = "gitlab_wait_pipelines", return_raw)]
    pub fn gitlab_wait_pipelines_defaults(
        context: NativeCallContext,
        pipelines: rhai::Array,
    ) -> RhaiResultOf<Array> {
        gitlab_wait_pipelines(context, pipelines, rhai::Map::new())
    }

    /// Waits for many pipelines at once (maps with `project` and `id`, as
    /// `gitlab_trigger_pipeline` returns them); every failure is reported, not just the first.
    /// Options as for `gitlab_wait_pipeline` (with `check: false`, each result carries its
    /// `failure`, `()` when it succeeded).
    ///
    /// ```rhai
    /// step("Smoke", || {
    ///     let started = ["blueprint-apps/guestbook", "blueprint-apps/redis"].map(|p| gitlab_trigger_pipeline(p, "main"));
    ///     gitlab_wait_pipelines(started, #{timeout: 600});
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_wait_pipelines(
        context: NativeCallContext,
        pipelines: rhai::Array,
        options: rhai::Map,
    ) -> RhaiResultOf<Array> {
        let (session, client) = remote(&context, "gitlab_wait_pipelines")?;
        reject_undeclared(&options, "gitlab_wait_pipelines")?;
        let params = WaitParams {
            timeout: match options.get("timeout") {
                Some(value) => super::super::seconds(value, "timeout")?,
                None => DEFAULT_PIPELINE_TIMEOUT,
            },
            interval: match options.get("interval") {
                Some(value) => super::super::seconds(value, "interval")?,
                None => DEFAULT_POLL_INTERVAL,
            },
            progress_every: match options.get("progress") {
                Some(value) => super::super::seconds(value, "progress")?,
                None => DEFAULT_PROGRESS_EVERY,
            },
        };
        let mut wanted = Vec::new();
        for item in &pipelines {
            wanted.extend(pipeline_ref(item)?);
        }
        let stop = cancelled(&session);
        let progress = |line: &str| session.state.reporter.log(Level::Info, line);
        let finals = client
            .wait_pipelines(&wanted, params, &progress, &stop)
            .map_err(|mut error| {
                // Timed out while no job was stuck: only slow.
                if error.kind == ErrorKind::Timeout && error.hint.is_none() {
                    error.hint = Some(
                        "raise #{timeout: seconds}, or look at the runner: are its pods running?"
                            .into(),
                    );
                }
                native_error(error.named_by(|_| "gitlab_wait_pipeline"))
            })?;
        let check = option_bool(&options, "check", "gitlab_wait_pipelines")?.unwrap_or(true);
        let mut failures = Vec::new();
        let mut results = rhai::Array::new();
        for (wanted, pipeline) in wanted.iter().zip(finals) {
            let failure = (pipeline.status != "success")
                .then(|| client.pipeline_failure(&wanted.project, &pipeline, &stop));
            let mut map = pipeline_map(&wanted.project, pipeline);
            if !check {
                // Asked to return it: the same words the error would have said.
                let text = failure.as_ref().map(|error| {
                    std::iter::once(error.message.clone())
                        .chain(error.causes.iter().cloned())
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                map.insert("failure".into(), optional(text));
            }
            failures.extend(failure);
            results.push(Dynamic::from_map(map));
        }
        if !check {
            return Ok(results);
        }
        match failures.len() {
            0 => Ok(results),
            1 => Err(native_error(failures.remove(0))),
            _ => Err(native_error(failures_error(failures, wanted.len()))),
        }
    }

    /// A repository file's decoded content at `ref`, or `()` when it does not exist.
    ///
    /// ```rhai
    /// step("Check CI", || {
    ///     if gitlab_file("blueprint-apps/guestbook", ".gitlab-ci.yml", "main") == () { throw "no CI file" }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_file(
        context: NativeCallContext,
        project: &str,
        path: &str,
        reference: &str,
    ) -> RhaiResultOf<Dynamic> {
        let (session, client) = remote(&context, "gitlab_file")?;
        let content = client
            .file(project, path, reference, &cancelled(&session))
            .map_err(|error| native_error(error.named_by(|_| "gitlab_file")))?;
        Ok(optional(content))
    }

    /// Deletes a project if it exists: `#{changed}` (GitLab answers 202 and may finish later).
    ///
    /// ```rhai
    /// step("Destroy", || { gitlab_delete_project("blueprint-apps/guestbook"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_delete_project(context: NativeCallContext, path: &str) -> RhaiResultOf<Map> {
        let (session, client) = remote(&context, "gitlab_delete_project")?;
        let outcome = client
            .delete_project(path, mode(&session), &cancelled(&session))
            .map_err(native_error)?;
        Ok(changed_map(settle(&session, outcome).1))
    }

    /// Deletes a group (and its projects) if it exists: `#{changed}`.
    ///
    /// ```rhai
    /// step("Destroy", || { gitlab_delete_group("blueprint-apps"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_delete_group(context: NativeCallContext, path: &str) -> RhaiResultOf<Map> {
        let (session, client) = remote(&context, "gitlab_delete_group")?;
        let outcome = client
            .delete_group(path, mode(&session), &cancelled(&session))
            .map_err(native_error)?;
        Ok(changed_map(settle(&session, outcome).1))
    }
}

fn changed_map(changed: bool) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("changed".into(), changed.into());
    map
}

fn raw_write(
    context: NativeCallContext,
    native: &str,
    method: Method,
    path: &str,
    body: Option<rhai::Map>,
) -> RhaiResultOf<Dynamic> {
    let (session, client) = remote(&context, native)?;
    session
        .state
        .refuse_in_check(native, "a raw API call cannot say what it would change")
        .map_err(native_error)?;
    let body = match body {
        Some(map) => Some(to_json(&Dynamic::from_map(map), Secrets::Reveal).map_err(native_error)?),
        None => None,
    };
    let path = &bprun_clients::gitlab::api_path(path);
    let answer = client
        .request(method, path, body.as_ref(), None, &cancelled(&session))
        .map_err(native_error)?;
    session
        .state
        .record_change(&method.name().to_ascii_lowercase(), {
            let shown = format!("/api/v4/{}", path.trim_start_matches('/'));
            Resource::new("path", &shown, &shown)
        });
    Ok(from_json(answer.body))
}
