//! GitLab natives: raw REST calls for scripts and the REPL, and idempotent "ensure" natives for
//! groups, projects, CI/CD variables and pipelines.

use rhai::plugin::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::convert::{Secrets, from_json, to_json};
use crate::clients::gitlab::{GitlabClient, GitlabSettings, Method, encode};
use crate::engine::{Session, lock, native_error, session};
use crate::error::NativeError;
use crate::output::Level;
use crate::secret::Secret;

use super::options::{NativeResult, option_bool, reject_unknown, remote_session};

/// Statuses after which a pipeline no longer changes (for a smoke test).
pub const TERMINAL: &[&str] = &["success", "failed", "canceled", "skipped"];
/// The default wait for pipelines: GitLab Runner's default job timeout.
pub const DEFAULT_PIPELINE_TIMEOUT: Duration = Duration::from_secs(600);

fn client(session: &Session) -> Result<Arc<GitlabClient>, NativeError> {
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
fn remote(
    context: &NativeCallContext,
    native: &str,
) -> NativeResult<(Arc<Session>, Arc<GitlabClient>)> {
    let session = remote_session(context, native)?;
    let client = client(&session).map_err(native_error)?;
    Ok((session, client))
}

fn cancelled(session: &Session) -> impl Fn() -> bool + '_ {
    move || session.state.is_cancelled()
}

fn map_get_str(map: &rhai::Map, key: &str) -> Option<String> {
    map.get(key)
        .and_then(|v| v.clone().into_immutable_string().ok())
        .map(|s| s.to_string())
}

fn pick(value: &Value, keys: &[&str]) -> rhai::Map {
    keys.iter()
        .map(|key| {
            (
                (*key).into(),
                from_json(value.get(*key).cloned().unwrap_or(Value::Null)),
            )
        })
        .collect()
}

/// The desired state of one CI/CD variable.
#[derive(Debug, Clone, PartialEq)]
struct DesiredVariable {
    key: String,
    value: String,
    masked: bool,
    protected: bool,
    raw: bool,
    variable_type: String,
    environment_scope: String,
    description: Option<String>,
}

fn text_value(value: &Dynamic, key: &str) -> NativeResult<String> {
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

fn desired_variable(key: &str, spec: &Dynamic) -> NativeResult<DesiredVariable> {
    let mut desired = DesiredVariable {
        key: key.to_string(),
        value: String::new(),
        masked: false,
        protected: false,
        raw: false,
        variable_type: "env_var".into(),
        environment_scope: "*".into(),
        description: None,
    };
    match spec.read_lock::<rhai::Map>() {
        Some(options) => {
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
                ],
                &format!("CI variable {key}"),
            )?;
            let value = options.get("value").ok_or_else(|| {
                native_error(NativeError::new(format!(
                    "CI variable {key}: the option map needs a `value`"
                )))
            })?;
            desired.value = text_value(value, key)?;
            let native = format!("CI variable {key}");
            desired.masked = option_bool(&options, "masked", &native)?.unwrap_or(false);
            desired.protected = option_bool(&options, "protected", &native)?.unwrap_or(false);
            desired.raw = option_bool(&options, "raw", &native)?.unwrap_or(false);
            if let Some(kind) = map_get_str(&options, "variable_type") {
                if kind != "env_var" && kind != "file" {
                    return Err(native_error(NativeError::new(format!(
                        "CI variable {key}: variable_type must be env_var or file, not {kind}"
                    ))));
                }
                desired.variable_type = kind;
            }
            if let Some(scope) = map_get_str(&options, "environment_scope") {
                desired.environment_scope = scope;
            }
            desired.description = map_get_str(&options, "description");
        }
        None => desired.value = text_value(spec, key)?,
    }
    if !desired
        .key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        || desired.key.is_empty()
        || desired.key.len() > 255
    {
        return Err(native_error(
            NativeError::new(format!("CI variable key `{key}` is invalid"))
                .with_hint("keys are 1 to 255 characters of A-Z a-z 0-9 _"),
        ));
    }
    // GitLab rejects these at write time; say so before sending, naming the key, never the value.
    if desired.masked
        && (desired.value.contains('\n') || !crate::sim::gitlab::maskable(&desired.value))
    {
        return Err(native_error(
            NativeError::new(format!("CI variable {key} cannot be masked: its value breaks GitLab's masking rules"))
                .with_hint("a masked value is one line of at least 8 characters from the Base64 alphabet plus @ : . ~ (use masked: false, or encode it with base64_encode)"),
        ));
    }
    Ok(desired)
}

fn variable_body(desired: &DesiredVariable) -> Value {
    json!({
        "key": desired.key, "value": desired.value, "masked": desired.masked, "protected": desired.protected,
        "raw": desired.raw, "variable_type": desired.variable_type, "environment_scope": desired.environment_scope,
        "description": desired.description,
    })
}

fn matches_existing(desired: &DesiredVariable, existing: &Value) -> bool {
    existing["value"].as_str() == Some(desired.value.as_str())
        && existing["masked"].as_bool().unwrap_or(false) == desired.masked
        && existing["protected"].as_bool().unwrap_or(false) == desired.protected
        && existing["raw"].as_bool().unwrap_or(false) == desired.raw
        && existing["variable_type"].as_str().unwrap_or("env_var") == desired.variable_type
        && existing["description"].as_str().map(str::to_string) == desired.description
}

fn project_summary(project: &Value, changed: bool) -> rhai::Map {
    let mut map = pick(
        project,
        &[
            "id",
            "path_with_namespace",
            "http_url_to_repo",
            "web_url",
            "default_branch",
            "visibility",
        ],
    );
    map.insert("changed".into(), changed.into());
    map
}

fn pipeline_summary(project: &str, pipeline: &Value) -> rhai::Map {
    let mut map = pick(pipeline, &["id", "iid", "status", "ref", "sha", "web_url"]);
    map.insert("project".into(), project.to_string().into());
    map
}

/// Polls pipelines until each is terminal or `timeout` passes. Returns the final pipelines.
fn wait_for(
    session: &Session,
    client: &GitlabClient,
    pipelines: &[(String, i64)],
    timeout: Duration,
    interval: Duration,
) -> Result<Vec<Value>, NativeError> {
    let started = Instant::now();
    let mut last: Vec<Option<Value>> = vec![None; pipelines.len()];
    loop {
        for (index, (project, id)) in pipelines.iter().enumerate() {
            if last[index]
                .as_ref()
                .and_then(|p| p["status"].as_str())
                .is_some_and(|s| TERMINAL.contains(&s))
            {
                continue;
            }
            let pipeline = client.get(
                &format!("projects/{}/pipelines/{id}", encode(project)),
                &cancelled(session),
            )?;
            let status = pipeline["status"].as_str().unwrap_or("unknown").to_string();
            let previous = last[index]
                .as_ref()
                .and_then(|p| p["status"].as_str())
                .map(str::to_string);
            if previous.as_deref() != Some(status.as_str()) {
                session.state.reporter.log(
                    Level::Info,
                    &format!(
                        "pipeline #{id} of {project}: {status} ({:.0} s)",
                        started.elapsed().as_secs_f64()
                    ),
                );
            }
            last[index] = Some(pipeline);
        }
        let done = last.iter().all(|p| {
            p.as_ref()
                .and_then(|p| p["status"].as_str())
                .is_some_and(|s| TERMINAL.contains(&s))
        });
        if done {
            return Ok(last.into_iter().flatten().collect());
        }
        if started.elapsed() >= timeout {
            let waiting: Vec<String> = pipelines
                .iter()
                .zip(&last)
                .filter(|(_, p)| {
                    !p.as_ref()
                        .and_then(|p| p["status"].as_str())
                        .is_some_and(|s| TERMINAL.contains(&s))
                })
                .map(|((project, id), p)| {
                    format!(
                        "#{id} of {project} is {}",
                        p.as_ref()
                            .and_then(|p| p["status"].as_str())
                            .unwrap_or("unknown")
                    )
                })
                .collect();
            return Err(NativeError::new(format!(
                "gitlab: pipelines did not finish within {} s: {}",
                timeout.as_secs(),
                waiting.join(", ")
            ))
            .with_hint("raise #{timeout: seconds}, or look at the runner: are its pods running?"));
        }
        session.state.sleep("gitlab_wait_pipeline", interval)?;
    }
}

/// The error for a pipeline that ended without success: failed jobs and the end of their traces.
fn pipeline_failure(
    session: &Session,
    client: &GitlabClient,
    project: &str,
    pipeline: &Value,
) -> NativeError {
    let id = pipeline["id"].as_i64().unwrap_or(0);
    let status = pipeline["status"].as_str().unwrap_or("unknown");
    let web_url = pipeline["web_url"].as_str().unwrap_or("").to_string();
    let mut error = NativeError::new(format!("gitlab: pipeline #{id} of {project} {status}"));
    if let Some(yaml_errors) = pipeline["yaml_errors"].as_str() {
        error = error.caused_by(format!("the CI configuration is invalid: {yaml_errors}"));
    };
    if let Ok(jobs) = client.get_all(
        &format!("projects/{}/pipelines/{id}/jobs", encode(project)),
        &cancelled(session),
    ) {
        for job in jobs.iter().filter(|job| job["status"] == "failed") {
            let name = job["name"].as_str().unwrap_or("?");
            let trace = client
                .request(
                    Method::Get,
                    &format!("projects/{}/jobs/{}/trace", encode(project), job["id"]),
                    None,
                    None,
                    &cancelled(session),
                )
                .map(|answer| {
                    answer
                        .body
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| answer.body.to_string())
                })
                .unwrap_or_default();
            let tail: Vec<&str> = trace
                .lines()
                .rev()
                .take(10)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            error = error.caused_by(format!(
                "job {name} failed; end of its trace:\n{}",
                tail.join("\n")
            ));
        }
    }
    error.with_hint(format!("open {web_url}"))
}

#[export_module]
pub mod gitlab_functions {
    use super::*;

    /// `GET /api/v4/<path>` and the JSON answer as maps and arrays (a 404 is an error).
    ///
    /// ```rhai
    /// step("Look", || { let me = gitlab_get("user"); info(me.username); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_get(context: NativeCallContext, path: &str) -> NativeResult<Dynamic> {
        let (session, client) = remote(&context, "gitlab_get")?;
        client
            .get(path, &cancelled(&session))
            .map(from_json)
            .map_err(native_error)
    }

    /// Every item of a paginated list (follows `x-next-page` / `link`, `per_page=100`).
    ///
    /// ```rhai
    /// step("List", || { for p in gitlab_get_all("groups/blueprint-apps/projects") { info(p.path) } });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_get_all(context: NativeCallContext, path: &str) -> NativeResult<rhai::Array> {
        let (session, client) = remote(&context, "gitlab_get_all")?;
        client
            .get_all(path, &cancelled(&session))
            .map(|items| items.into_iter().map(from_json).collect())
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
    ) -> NativeResult<Dynamic> {
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
    ) -> NativeResult<Dynamic> {
        raw_write(context, "gitlab_put", Method::Put, path, Some(body))
    }

    /// `DELETE /api/v4/<path>` (refused in check mode).
    ///
    /// ```rhai
    /// step("Raw", || { gitlab_delete("projects/blueprint-apps%2Fold"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_delete(context: NativeCallContext, path: &str) -> NativeResult<Dynamic> {
        raw_write(context, "gitlab_delete", Method::Delete, path, None)
    }

    /// `#{ok, url, version}`: `/-/health` answers `GitLab OK` and the API answers with the token.
    /// Fails with a hint when GitLab is not healthy or the token is refused.
    ///
    /// ```rhai
    /// step("Pre-flight", || { info(`GitLab ${gitlab_health().version}`); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_health(context: NativeCallContext) -> NativeResult<rhai::Map> {
        let (session, client) = remote(&context, "gitlab_health")?;
        // Through the GitLab client, so the CA file and timeouts are GitLab's.
        let status = client.health_status();
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
        let version = client
            .get("version", &cancelled(&session))
            .map_err(native_error)?;
        let mut map = rhai::Map::new();
        map.insert("ok".into(), true.into());
        map.insert("url".into(), client.settings.url.clone().into());
        map.insert("version".into(), from_json(version["version"].clone()));
        Ok(map)
    }

    /// Sets the token for the rest of the run (a `Secret` or a string).
    ///
    /// ```rhai
    /// step("Login", || { gitlab_login(env_secret("GITLAB_TOKEN")); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_login(context: NativeCallContext, token: Dynamic) -> NativeResult<()> {
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
    ) -> NativeResult<rhai::Map> {
        let (session, client) = remote(&context, "gitlab_ensure_group")?;
        reject_unknown(
            &options,
            &["name", "visibility", "description", "update"],
            "gitlab_ensure_group",
        )?;
        let name = map_get_str(&options, "name").unwrap_or_else(|| path.to_string());
        let visibility = map_get_str(&options, "visibility").unwrap_or_else(|| "internal".into());
        let update = option_bool(&options, "update", "gitlab_ensure_group")?.unwrap_or(false);
        let stop = cancelled(&session);
        let group_path = format!("groups/{}", encode(path));
        let summary = |group: &Value, changed: bool| {
            let mut map = pick(group, &["id", "full_path", "visibility", "web_url"]);
            map.insert("changed".into(), changed.into());
            map
        };
        if let Some(group) = client.find(&group_path, &stop).map_err(native_error)? {
            let current = group["visibility"].as_str().unwrap_or("").to_string();
            if current == visibility {
                return Ok(summary(&group, false));
            }
            if !update {
                session.state.reporter.log(
                    Level::Warn,
                    &format!("group {path} is {current}, wanted {visibility}; left as it is (pass #{{update: true}} to change it)"),
                );
                return Ok(summary(&group, false));
            }
            if session.state.check() {
                session.state.record_change(
                    "update",
                    &format!("visibility of group {path} from {current} to {visibility}"),
                );
                return Ok(summary(&group, true));
            }
            let updated = client
                .request(
                    Method::Put,
                    &group_path,
                    Some(&json!({"visibility": visibility})),
                    None,
                    &stop,
                )
                .map_err(native_error)?;
            session.state.record_change(
                "update",
                &format!("visibility of group {path} from {current} to {visibility}"),
            );
            return Ok(summary(&updated.body, true));
        }
        if session.state.check() {
            session
                .state
                .record_change("create", &format!("group {path} ({visibility})"));
            let mut map = rhai::Map::new();
            map.insert("full_path".into(), path.to_string().into());
            map.insert("visibility".into(), visibility.into());
            map.insert("changed".into(), true.into());
            return Ok(map);
        }
        let mut body = json!({"name": name, "path": path, "visibility": visibility});
        if let Some(description) = map_get_str(&options, "description") {
            body["description"] = json!(description);
        }
        let read_back = || client.find(&group_path, &stop);
        let created = client
            .request(Method::Post, "groups", Some(&body), Some(&read_back), &stop)
            .map_err(native_error)?;
        session
            .state
            .record_change("create", &format!("group {path} ({visibility})"));
        Ok(summary(&created.body, true))
    }

    /// `gitlab_ensure_group(path, #{})`.
    ///
    /// ```rhai
    /// step("Ensure group", || { gitlab_ensure_group("blueprint-apps"); });
    /// ```
    #[rhai_fn(name = "gitlab_ensure_group", return_raw)]
    pub fn gitlab_ensure_group(context: NativeCallContext, path: &str) -> NativeResult<rhai::Map> {
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
    ) -> NativeResult<rhai::Map> {
        let (session, client) = remote(&context, "gitlab_ensure_project")?;
        reject_unknown(
            &options,
            &["path", "visibility", "description", "default_branch"],
            "gitlab_ensure_project",
        )?;
        let path = map_get_str(&options, "path").unwrap_or_else(|| name.to_string());
        let visibility = map_get_str(&options, "visibility").unwrap_or_else(|| "internal".into());
        let full = format!("{namespace}/{path}");
        let project_path = format!("projects/{}", encode(&full));
        let stop = cancelled(&session);
        if let Some(project) = client.find(&project_path, &stop).map_err(native_error)? {
            let current = project["visibility"].as_str().unwrap_or("");
            if current != visibility {
                session.state.reporter.log(
                    Level::Warn,
                    &format!("project {full} is {current}, wanted {visibility}; left as it is"),
                );
            }
            return Ok(project_summary(&project, false));
        }
        if session.state.check() {
            session
                .state
                .record_change("create", &format!("project {full}"));
            let mut map = rhai::Map::new();
            map.insert("path_with_namespace".into(), full.into());
            map.insert("changed".into(), true.into());
            return Ok(map);
        }
        let group = client.find(&format!("groups/{}", encode(namespace)), &stop).map_err(native_error)?.ok_or_else(|| {
            native_error(NativeError::new(format!("gitlab: group {namespace} does not exist, so project {full} cannot be created")).with_hint("ensure the group first: gitlab_ensure_group"))
        })?;
        let mut body = json!({"name": name, "path": path, "namespace_id": group["id"], "visibility": visibility});
        if let Some(description) = map_get_str(&options, "description") {
            body["description"] = json!(description);
        }
        if let Some(branch) = map_get_str(&options, "default_branch") {
            body["default_branch"] = json!(branch);
        }
        let read_back = || client.find(&project_path, &stop);
        let created = client
            .request(
                Method::Post,
                "projects",
                Some(&body),
                Some(&read_back),
                &stop,
            )
            .map_err(native_error)?;
        session
            .state
            .record_change("create", &format!("project {full}"));
        Ok(project_summary(&created.body, true))
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
    ) -> NativeResult<rhai::Map> {
        gitlab_ensure_project_with(context, namespace, name, rhai::Map::new())
    }

    /// Sets a project's CI/CD variables: `vars` maps keys to values (strings or `Secret`s) or to
    /// option maps (`value`, `masked`, `protected`, `raw`, `variable_type`, `environment_scope`,
    /// `description`). Creates missing, updates differing, leaves equal ones untouched (no request).
    /// Option `remove_unlisted: true` deletes variables not in `vars`. Returns
    /// `#{created, updated, unchanged, removed, changed}`. Masking rules are checked before sending.
    ///
    /// ```rhai
    /// step("Variables", || {
    ///     gitlab_set_variables("blueprint-apps/guestbook", #{
    ///         CI_INSECURE_REGISTRY: "1",
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
    ) -> NativeResult<rhai::Map> {
        let (session, client) = remote(&context, "gitlab_set_variables")?;
        reject_unknown(&options, &["remove_unlisted"], "gitlab_set_variables")?;
        let remove_unlisted =
            option_bool(&options, "remove_unlisted", "gitlab_set_variables")?.unwrap_or(false);
        let mut desired = Vec::with_capacity(vars.len());
        for (key, spec) in &vars {
            desired.push(desired_variable(key, spec)?);
        }
        let stop = cancelled(&session);
        let base = format!("projects/{}/variables", encode(project));
        let existing = match client.get_all(&base, &stop) {
            Ok(existing) => existing,
            // In check mode the project may be one an earlier step would have created.
            Err(error) if session.state.check() && error.message.contains(" -> 404: ") => {
                Vec::new()
            }
            Err(error) => return Err(native_error(error)),
        };
        let (mut created, mut updated, mut unchanged, mut removed) = (0i64, 0i64, 0i64, 0i64);
        for variable in &desired {
            let current = existing.iter().find(|e| {
                e["key"] == variable.key.as_str()
                    && e["environment_scope"].as_str().unwrap_or("*") == variable.environment_scope
            });
            let scoped = format!(
                "{base}/{}?filter%5Benvironment_scope%5D={}",
                encode(&variable.key),
                encode(&variable.environment_scope)
            );
            match current {
                Some(current)
                    if current["value"].is_null()
                        && current["hidden"].as_bool().unwrap_or(false) =>
                {
                    // GitLab never returns a hidden value, so it cannot be compared: leave it.
                    session.state.reporter.log(Level::Warn, &format!("CI variable {} of {project} is hidden: its value cannot be compared, left as it is", variable.key));
                    unchanged += 1;
                }
                Some(current) if matches_existing(variable, current) => unchanged += 1,
                Some(_) => {
                    if !session.state.check() {
                        client
                            .request(
                                Method::Put,
                                &scoped,
                                Some(&variable_body(variable)),
                                None,
                                &stop,
                            )
                            .map_err(native_error)?;
                    }
                    session.state.record_change(
                        "update",
                        &format!("CI variable {} of {project}", variable.key),
                    );
                    updated += 1;
                }
                None => {
                    if !session.state.check() {
                        let read_back = || client.find(&scoped, &stop);
                        client
                            .request(
                                Method::Post,
                                &base,
                                Some(&variable_body(variable)),
                                Some(&read_back),
                                &stop,
                            )
                            .map_err(native_error)?;
                    }
                    session.state.record_change(
                        "create",
                        &format!("CI variable {} of {project}", variable.key),
                    );
                    created += 1;
                }
            }
        }
        if remove_unlisted {
            for current in &existing {
                let key = current["key"].as_str().unwrap_or("");
                let scope = current["environment_scope"].as_str().unwrap_or("*");
                if desired
                    .iter()
                    .any(|d| d.key == key && d.environment_scope == scope)
                {
                    continue;
                }
                if !session.state.check() {
                    let scoped = format!(
                        "{base}/{}?filter%5Benvironment_scope%5D={}",
                        encode(key),
                        encode(scope)
                    );
                    client
                        .request(Method::Delete, &scoped, None, None, &stop)
                        .map_err(native_error)?;
                }
                session
                    .state
                    .record_change("delete", &format!("CI variable {key} of {project}"));
                removed += 1;
            }
        }
        let mut result = rhai::Map::new();
        result.insert("created".into(), created.into());
        result.insert("updated".into(), updated.into());
        result.insert("unchanged".into(), unchanged.into());
        result.insert("removed".into(), removed.into());
        result.insert("changed".into(), (created + updated + removed > 0).into());
        Ok(result)
    }

    /// `gitlab_set_variables(project, vars, #{})`.
    ///
    /// ```rhai
    /// step("Variables", || { gitlab_set_variables("blueprint-apps/redis", #{CI_INSECURE_REGISTRY: "1"}); });
    /// ```
    #[rhai_fn(name = "gitlab_set_variables", return_raw)]
    pub fn gitlab_set_variables(
        context: NativeCallContext,
        project: &str,
        vars: rhai::Map,
    ) -> NativeResult<rhai::Map> {
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
    ) -> NativeResult<rhai::Map> {
        gitlab_trigger_pipeline_with(context, project, reference, rhai::Map::new())
    }

    /// Like `gitlab_trigger_pipeline(project, ref)` with options: `reuse` (true: when the
    /// newest pipeline of the branch's head commit succeeded or is still running, return it,
    /// with `reused: true`, instead of starting another; a re-run then starts nothing).
    ///
    /// ```rhai
    /// step("Smoke", || { let pipeline = gitlab_trigger_pipeline("blueprint-apps/guestbook", "main", #{reuse: true}); });
    /// ```
    #[rhai_fn(name = "gitlab_trigger_pipeline", return_raw)]
    pub fn gitlab_trigger_pipeline_with(
        context: NativeCallContext,
        project: &str,
        reference: &str,
        options: rhai::Map,
    ) -> NativeResult<rhai::Map> {
        let (session, client) = remote(&context, "gitlab_trigger_pipeline")?;
        reject_unknown(&options, &["reuse"], "gitlab_trigger_pipeline")?;
        if option_bool(&options, "reuse", "gitlab_trigger_pipeline")?.unwrap_or(false) {
            let stop = cancelled(&session);
            let base = format!("projects/{}", encode(project));
            let branch = client.get(
                &format!("{base}/repository/branches/{}", encode(reference)),
                &stop,
            );
            // In check mode the project may only be planned: nothing to reuse yet.
            let branch = match branch {
                Err(error) if session.state.check() && error.message.contains("404") => Value::Null,
                other => other.map_err(native_error)?,
            };
            let head = branch["commit"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let pipelines = if head.is_empty() {
                Value::Null
            } else {
                client
                    .get(
                        &format!("{base}/pipelines?ref={}&per_page=20", encode(reference)),
                        &stop,
                    )
                    .map_err(native_error)?
            };
            let newest = pipelines.as_array().and_then(|items| {
                items
                    .iter()
                    .filter(|p| p["sha"].as_str() == Some(head.as_str()))
                    .max_by_key(|p| p["id"].as_i64().unwrap_or(0))
                    .cloned()
            });
            if let Some(pipeline) = newest
                && matches!(
                    pipeline["status"].as_str(),
                    Some(
                        "success"
                            | "running"
                            | "pending"
                            | "created"
                            | "preparing"
                            | "waiting_for_resource"
                    )
                )
            {
                let mut summary = pipeline_summary(project, &pipeline);
                summary.insert("reused".into(), true.into());
                return Ok(summary);
            }
        }
        if session.state.check() {
            session
                .state
                .record_change("start", &format!("pipeline of {project} on {reference}"));
            let mut map = rhai::Map::new();
            map.insert("project".into(), project.to_string().into());
            map.insert("ref".into(), reference.to_string().into());
            map.insert("status".into(), "would-start".into());
            return Ok(map);
        }
        let stop = cancelled(&session);
        let base = format!("projects/{}", encode(project));
        let known: Vec<i64> = client
            .get(
                &format!("{base}/pipelines?ref={}&per_page=20", encode(reference)),
                &stop,
            )
            .map_err(native_error)?
            .as_array()
            .map(|items| items.iter().filter_map(|p| p["id"].as_i64()).collect())
            .unwrap_or_default();
        // After an ambiguous failure, a pipeline on this ref that was not there before is ours.
        let read_back = || -> Result<Option<Value>, NativeError> {
            let list = client.get(
                &format!("{base}/pipelines?ref={}&per_page=20", encode(reference)),
                &stop,
            )?;
            Ok(list.as_array().and_then(|items| {
                items
                    .iter()
                    .find(|p| p["id"].as_i64().is_some_and(|id| !known.contains(&id)))
                    .cloned()
            }))
        };
        let answer = client
            .request(
                Method::Post,
                &format!("{base}/pipeline"),
                Some(&json!({"ref": reference})),
                Some(&read_back),
                &stop,
            )
            .map_err(native_error)?;
        session
            .state
            .record_change("start", &format!("pipeline of {project} on {reference}"));
        Ok(pipeline_summary(project, &answer.body))
    }

    /// Waits until a pipeline ends (`success`, `failed`, `canceled`, `skipped`), logging each
    /// status change, and returns it. Anything but success is an error naming the failed jobs,
    /// the end of their traces and the pipeline's URL. Options: `timeout` (seconds, default 600),
    /// `interval` (seconds between polls, default 2).
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
    ) -> NativeResult<rhai::Map> {
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

    /// Waits for many pipelines at once (maps with `project` and `id`, as
    /// `gitlab_trigger_pipeline` returns them); every failure is reported, not just the first.
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
    ) -> NativeResult<rhai::Array> {
        let (session, client) = remote(&context, "gitlab_wait_pipelines")?;
        reject_unknown(&options, &["timeout", "interval"], "gitlab_wait_pipelines")?;
        let timeout = match options.get("timeout") {
            Some(value) => super::super::seconds(value, "timeout")?,
            None => DEFAULT_PIPELINE_TIMEOUT,
        };
        let interval = match options.get("interval") {
            Some(value) => super::super::seconds(value, "interval")?,
            None => Duration::from_secs(2),
        };
        let mut wanted = Vec::new();
        for item in &pipelines {
            let map = item.read_lock::<rhai::Map>().ok_or_else(|| {
                native_error(NativeError::new(
                    "gitlab_wait_pipelines: each item must be a map with `project` and `id`",
                ))
            })?;
            if map
                .get("status")
                .is_some_and(|s| s.to_string() == "would-start")
            {
                continue;
            }
            let project = map_get_str(&map, "project").ok_or_else(|| {
                native_error(NativeError::new(
                    "gitlab_wait_pipelines: an item has no `project`",
                ))
            })?;
            let id = map.get("id").and_then(|v| v.as_int().ok()).ok_or_else(|| {
                native_error(NativeError::new(format!(
                    "gitlab_wait_pipelines: the item of {project} has no pipeline `id`"
                )))
            })?;
            wanted.push((project, id));
        }
        let finals =
            wait_for(&session, &client, &wanted, timeout, interval).map_err(native_error)?;
        let mut failures: Vec<NativeError> = Vec::new();
        let mut results = rhai::Array::new();
        for ((project, _), pipeline) in wanted.iter().zip(&finals) {
            if pipeline["status"] != "success" {
                failures.push(pipeline_failure(&session, &client, project, pipeline));
            }
            results.push(Dynamic::from_map(pipeline_summary(project, pipeline)));
        }
        match failures.len() {
            0 => Ok(results),
            1 => Err(native_error(failures.remove(0))),
            count => {
                let mut error = NativeError::new(format!(
                    "gitlab: {count} of {} pipelines did not succeed",
                    wanted.len()
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
                Err(native_error(error.with_hint(
                    "each failed pipeline is listed above with its URL",
                )))
            }
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
    ) -> NativeResult<Dynamic> {
        use base64::Engine as _;
        let (session, client) = remote(&context, "gitlab_file")?;
        let url = format!(
            "projects/{}/repository/files/{}?ref={}",
            encode(project),
            encode(path),
            encode(reference)
        );
        let Some(file) = client
            .find(&url, &cancelled(&session))
            .map_err(native_error)?
        else {
            return Ok(Dynamic::UNIT);
        };
        let content = file["content"].as_str().unwrap_or("");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(content)
            .map_err(|error| {
                native_error(NativeError::new(format!(
                    "gitlab_file: {project}:{path} is not valid base64: {error}"
                )))
            })?;
        Ok(String::from_utf8_lossy(&bytes).into_owned().into())
    }

    /// Deletes a project if it exists: `#{changed}` (GitLab answers 202 and may finish later).
    ///
    /// ```rhai
    /// step("Destroy", || { gitlab_delete_project("blueprint-apps/guestbook"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_delete_project(
        context: NativeCallContext,
        path: &str,
    ) -> NativeResult<rhai::Map> {
        delete_if_present(
            context,
            "gitlab_delete_project",
            "project",
            &format!("projects/{}", encode(path)),
            path,
        )
    }

    /// Deletes a group (and its projects) if it exists: `#{changed}`.
    ///
    /// ```rhai
    /// step("Destroy", || { gitlab_delete_group("blueprint-apps"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_delete_group(context: NativeCallContext, path: &str) -> NativeResult<rhai::Map> {
        delete_if_present(
            context,
            "gitlab_delete_group",
            "group",
            &format!("groups/{}", encode(path)),
            path,
        )
    }
}

fn raw_write(
    context: NativeCallContext,
    native: &str,
    method: Method,
    path: &str,
    body: Option<rhai::Map>,
) -> NativeResult<Dynamic> {
    let (session, client) = remote(&context, native)?;
    session
        .state
        .refuse_in_check(native, "a raw API call cannot say what it would change")
        .map_err(native_error)?;
    let body = match body {
        Some(map) => Some(to_json(&Dynamic::from_map(map), Secrets::Reveal).map_err(native_error)?),
        None => None,
    };
    let answer = client
        .request(method, path, body.as_ref(), None, &cancelled(&session))
        .map_err(native_error)?;
    session.state.record_change(
        &method.name().to_ascii_lowercase(),
        &format!("/api/v4/{}", path.trim_start_matches('/')),
    );
    Ok(from_json(answer.body))
}

fn delete_if_present(
    context: NativeCallContext,
    native: &str,
    kind: &str,
    api_path: &str,
    path: &str,
) -> NativeResult<rhai::Map> {
    let (session, client) = remote(&context, native)?;
    let stop = cancelled(&session);
    let present = client
        .find(api_path, &stop)
        .map_err(native_error)?
        .is_some();
    if present {
        if !session.state.check() {
            client
                .request(Method::Delete, api_path, None, None, &stop)
                .map_err(native_error)?;
        }
        session
            .state
            .record_change("delete", &format!("{kind} {path}"));
    }
    let mut map = rhai::Map::new();
    map.insert("changed".into(), present.into());
    Ok(map)
}
