//! Runners as GitLab 17/18 keeps them: created with an authentication token, online while they poll
//! for jobs, matched to jobs by scope and tags; the runner API and the runner stand-in.

use super::pipelines::Job;
use super::projects::Project;
use super::tokens::token_digest;
use super::{
    GitlabSim, State, bool_field, grape_bool, message, not_found, now_ms, param_error,
    string_field, timestamp,
};
use crate::http::{Handler, SimRequest, SimResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// How a runner came to be, GitLab's `Ci::Runner` `registration_type`: it decides the prefix of
/// every token GitLab gives the runner (`prefix_for_new_and_legacy_runner`, app/models/ci/runner.rb).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationType {
    /// Created by a user (the UI, `POST /user/runners`, or `Ci::Runner.create!` with
    /// `registration_type: :authenticated_user`): tokens start with `CREATED_RUNNER_TOKEN_PREFIX`,
    /// `glrt-`.
    AuthenticatedUser,
    /// Registered with a registration token: the enum's default, so a bare `Ci::Runner.create!`
    /// gets it too. Since GitLab 17.11 its tokens start with `REGISTRATION_RUNNER_TOKEN_PREFIX`,
    /// `glrtr-`, never `glrt-` (the model's spec: a runner registered otherwise has no `glrt-`).
    RegistrationToken,
}

impl RegistrationType {
    /// The type `Ci::Runner.create!` gives: `AuthenticatedUser` when its arguments say so, else
    /// the enum's default.
    pub fn created(authenticated_user: bool) -> Self {
        if authenticated_user {
            Self::AuthenticatedUser
        } else {
            Self::RegistrationToken
        }
    }

    /// The type named `name` (GitLab's enum names); `None` for another name.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "authenticated_user" => Some(Self::AuthenticatedUser),
            "registration_token" => Some(Self::RegistrationToken),
            _ => None,
        }
    }

    fn token_prefix(self) -> &'static str {
        match self {
            Self::AuthenticatedUser => "glrt-",
            Self::RegistrationToken => "glrtr-",
        }
    }
}

/// What a runner kept before it had a registration type: every runner was created with
/// `POST /user/runners` or as a created runner, so `glrt-`.
fn created_by_a_user() -> RegistrationType {
    RegistrationType::AuthenticatedUser
}

/// A runner as GitLab 17/18 keeps it: created with `POST /user/runners` (an authentication
/// token `glrt-...`, kept as a digest), online while it polls `POST /jobs/request`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Runner {
    pub(super) id: u64,
    pub(super) token_digest: String,
    #[serde(default = "created_by_a_user")]
    pub(super) registration_type: RegistrationType,
    pub(super) description: String,
    /// `instance_type`, `group_type` or `project_type`.
    pub(super) runner_type: String,
    pub(super) group_id: Option<u64>,
    pub(super) project_id: Option<u64>,
    pub(super) tag_list: Vec<String>,
    pub(super) run_untagged: bool,
    pub(super) paused: bool,
    pub(super) locked: bool,
    pub(super) created_at: String,
    /// Last contact (a job request); not persisted across restarts of the simulator.
    #[serde(skip)]
    pub(super) contacted_ms: Option<u64>,
    #[serde(skip)]
    pub(super) contacted_at: Option<String>,
}

/// GitLab's `Ci::Runner::ONLINE_CONTACT_TIMEOUT`: a runner is online when it asked for a job
/// within the last two hours.
pub(super) const ONLINE_CONTACT_MS: u64 = 2 * 60 * 60 * 1000;
/// GitLab's `STALE_TIMEOUT`: a runner not seen for a week is stale.
pub(super) const STALE_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// The description of the runner stand-in `--runner` and the embedded platform register.
pub const STANDIN_RUNNER: &str = "bprun-sim runner stand-in";

impl Runner {
    fn online(&self, now: u64) -> bool {
        self.contacted_ms
            .is_some_and(|at| now.saturating_sub(at) < ONLINE_CONTACT_MS)
    }

    fn status(&self, now: u64) -> &'static str {
        match self.contacted_ms {
            None => "never_contacted",
            Some(_) if self.online(now) => "online",
            Some(at) if now.saturating_sub(at) >= STALE_MS => "stale",
            Some(_) => "offline",
        }
    }

    /// GitLab's matching: the runner serves the project (its scope), is not paused, carries
    /// every tag of the job, and takes untagged jobs only with `run_untagged`.
    fn can_take(&self, project: &Project, job: &Job) -> bool {
        let scope = match self.runner_type.as_str() {
            "instance_type" => true,
            "group_type" => self.group_id == Some(project.namespace_id),
            _ => self.project_id == Some(project.id),
        };
        let tags = if job.tags.is_empty() {
            self.run_untagged
        } else {
            job.tags.iter().all(|tag| self.tag_list.contains(tag))
        };
        !self.paused && scope && tags
    }
}

/// A runner authentication token, as GitLab 17.11+ mints them for a runner of that type.
pub(super) fn runner_token(registration_type: RegistrationType) -> String {
    format!(
        "{}{}",
        registration_type.token_prefix(),
        (0..20)
            .map(|_| fastrand::alphanumeric())
            .collect::<String>()
    )
}

/// `tag_list` as an array or a comma-separated string.
pub(super) fn tag_list(body: &Value) -> Vec<String> {
    let tags: Vec<String> = match body.get("tag_list") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| item.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(list)) => list.split(',').map(str::to_string).collect(),
        _ => Vec::new(),
    };
    tags.into_iter()
        .map(|tag| tag.trim().to_string())
        .filter(|tag| !tag.is_empty())
        .collect()
}

/// How often the runner stand-in asks for jobs: GitLab Runner's `check_interval` is 3 s; the
/// stand-in asks more often so short simulated pipelines are not dominated by the wait.
pub fn standin_interval(pipeline_seconds: f64) -> Duration {
    Duration::from_secs_f64((pipeline_seconds / 6.0).clamp(0.05, 3.0))
}

/// What a runner process is configured with that GitLab never learns, but that its jobs meet:
/// the CA it trusts for GitLab's URL (GitLab Runner's `tls-ca-file`, by default
/// `certs/<host>.crt`: the runner chart's `certsSecretName`). A job gets it as
/// `CI_SERVER_TLS_CA_FILE`, and git verifies the clone's server with it (`http.sslCAInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerSide {
    pub server_tls_ca: Option<String>,
}

impl GitlabSim {
    /// Records how the runner whose token is `token` is configured (a runner pod at its start).
    pub fn set_runner_side(&self, token: &str, side: RunnerSide) {
        let digest = token_digest(token);
        let id = self
            .lock()
            .runners
            .values()
            .find(|runner| runner.token_digest == digest)
            .map(|runner| runner.id);
        if let Some(id) = id {
            self.runner_sides
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, side);
        }
    }

    /// How runner `id` is configured (nothing known: no CA of its own).
    pub(super) fn runner_side(&self, id: u64) -> RunnerSide {
        self.runner_sides
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }
}

/// The runner stand-in: with the token of a registered runner (`register_standin_runner`),
/// polls `POST /api/v4/jobs/request` as GitLab Runner does, so it is online because it polls. Its requests go to
/// the simulator's handler directly (not through the HTTP stack: the request log and fault
/// injection concern the clients under test, not the runner).
pub async fn runner_standin(sim: Arc<GitlabSim>, token: String, interval: Duration) {
    loop {
        let polling = sim.clone();
        let token_now = token.clone();
        let _ = tokio::task::spawn_blocking(move || standin_poll(&polling, &token_now)).await;
        tokio::time::sleep(interval).await;
    }
}

/// One job request of the runner stand-in (also made once before the simulator serves, so
/// the runner is online from the first answer on).
pub fn standin_poll(sim: &GitlabSim, token: &str) {
    let body = json!({
        "token": token,
        "info": {"name": "gitlab-runner", "version": "17.9.0", "executor": "kubernetes", "features": {}},
    });
    let request = SimRequest::local(
        "POST",
        "/api/v4/jobs/request",
        Some("application/json"),
        serde_json::to_vec(&body).unwrap_or_default(),
    );
    let _ = sim.handle(request);
}

impl GitlabSim {
    /// `GET /runners/:id`.
    pub(super) fn runner(&self, id: &str) -> SimResponse {
        let state = self.lock();
        match id.parse::<u64>().ok().and_then(|id| state.runners.get(&id)) {
            Some(runner) => SimResponse::json(200, &self.runner_detail(&state, runner)),
            None => not_found("Runner"),
        }
    }

    /// `DELETE /runners/:id`.
    pub(super) fn delete_runner(&self, id: &str) -> SimResponse {
        let mut state = self.lock();
        let removed = id
            .parse::<u64>()
            .ok()
            .and_then(|id| state.runners.remove(&id));
        drop(state);
        match removed {
            Some(_) => {
                self.persist();
                SimResponse::empty(204)
            }
            None => not_found("Runner"),
        }
    }

    /// `POST /runners/:id/reset_authentication_token`.
    pub(super) fn reset_runner_token(&self, id: &str) -> SimResponse {
        let mut state = self.lock();
        let Some(runner) = id
            .parse::<u64>()
            .ok()
            .and_then(|id| state.runners.get_mut(&id))
        else {
            return not_found("Runner");
        };
        let token = runner_token(runner.registration_type);
        runner.token_digest = token_digest(&token);
        drop(state);
        self.persist();
        SimResponse::json(201, &json!({"token": token, "token_expires_at": null}))
    }

    /// `GET /projects/:id/runners`: the runners that may take the project's jobs.
    pub(super) fn project_runners(&self, request: &SimRequest, id: &str) -> SimResponse {
        let state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let project = state.projects[&project].clone();
        drop(state);
        self.list_runners(request, |runner| match runner.runner_type.as_str() {
            "instance_type" => true,
            "group_type" => runner.group_id == Some(project.namespace_id),
            _ => runner.project_id == Some(project.id),
        })
    }

    pub(super) fn runner_json(&self, runner: &Runner, _detail: bool) -> Value {
        let now = now_ms();
        json!({
            "id": runner.id, "description": runner.description, "ip_address": runner.contacted_ms.map(|_| "127.0.0.1"),
            "active": !runner.paused, "paused": runner.paused, "is_shared": runner.runner_type == "instance_type",
            "runner_type": runner.runner_type, "name": runner.contacted_ms.map(|_| "gitlab-runner"),
            "online": runner.online(now), "status": runner.status(now),
        })
    }

    pub(super) fn runner_detail(&self, state: &State, runner: &Runner) -> Value {
        let mut value = self.runner_json(runner, true);
        let projects: Vec<Value> = runner
            .project_id
            .and_then(|id| state.projects.get(&id))
            .map(|project| {
                json!({"id": project.id, "name": project.name, "path": project.path,
                       "path_with_namespace": Self::project_path(state, project)})
            })
            .into_iter()
            .collect();
        let groups: Vec<Value> = runner
            .group_id
            .and_then(|id| state.groups.get(&id))
            .map(|group| json!({"id": group.id, "name": group.name, "web_url": format!("{}/groups/{}", self.base_url(), group.path)}))
            .into_iter()
            .collect();
        if let Value::Object(map) = &mut value {
            for (key, field) in [
                ("tag_list", json!(runner.tag_list)),
                ("run_untagged", json!(runner.run_untagged)),
                ("locked", json!(runner.locked)),
                ("access_level", json!("not_protected")),
                ("maximum_timeout", Value::Null),
                ("contacted_at", json!(runner.contacted_at)),
                ("created_at", json!(runner.created_at)),
                ("version", json!(runner.contacted_ms.map(|_| "17.9.0"))),
                ("projects", json!(projects)),
                ("groups", json!(groups)),
            ] {
                map.insert(key.to_string(), field);
            }
        }
        value
    }

    /// `GET /runners/all`, `/runners`, `/projects/:id/runners`: filtered by `type`, `status`,
    /// `paused` and `tag_list` as GitLab does.
    pub(super) fn list_runners(
        &self,
        request: &SimRequest,
        keep: impl Fn(&Runner) -> bool,
    ) -> SimResponse {
        let now = now_ms();
        let state = self.lock();
        let query = &request.query;
        let tags: Vec<String> = query
            .get("tag_list")
            .map(|list| {
                list.split(',')
                    .map(|tag| tag.trim().to_string())
                    .filter(|tag| !tag.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let items = state
            .runners
            .values()
            .filter(|runner| keep(runner))
            .filter(|runner| query.get("type").is_none_or(|t| *t == runner.runner_type))
            .filter(|runner| {
                query
                    .get("status")
                    .is_none_or(|status| match status.as_str() {
                        "active" => !runner.paused,
                        "paused" => runner.paused,
                        other => runner.status(now) == other,
                    })
            })
            .filter(|runner| {
                query
                    .get("paused")
                    .is_none_or(|paused| grape_bool(paused) == Some(runner.paused))
            })
            .filter(|runner| tags.iter().all(|tag| runner.tag_list.contains(tag)))
            .map(|runner| self.runner_json(runner, false))
            .collect();
        drop(state);
        self.paginate(request, items)
    }

    /// `POST /user/runners` (GitLab 16+): a runner and its authentication token.
    pub(super) fn create_runner(&self, request: &SimRequest) -> SimResponse {
        let body = request.params();
        let Some(runner_type) = string_field(&body, "runner_type") else {
            return param_error("runner_type is missing");
        };
        if !matches!(
            runner_type.as_str(),
            "instance_type" | "group_type" | "project_type"
        ) {
            return param_error("runner_type does not have a valid value");
        }
        let mut state = self.lock();
        let (group_id, project_id) = match runner_type.as_str() {
            "group_type" => match string_field(&body, "group_id") {
                None => return param_error("group_id is missing"),
                Some(id) => match Self::find_group(&state, &id) {
                    Some(group) => (Some(group), None),
                    None => return not_found("Group"),
                },
            },
            "project_type" => match string_field(&body, "project_id") {
                None => return param_error("project_id is missing"),
                Some(id) => match Self::find_project(&state, &id) {
                    Some(project) => (None, Some(project)),
                    None => return not_found("Project"),
                },
            },
            _ => (None, None),
        };
        let token = runner_token(RegistrationType::AuthenticatedUser);
        state.next_runner_id += 1;
        let id = state.next_runner_id;
        state.runners.insert(
            id,
            Runner {
                id,
                token_digest: token_digest(&token),
                registration_type: RegistrationType::AuthenticatedUser,
                description: string_field(&body, "description").unwrap_or_default(),
                runner_type,
                group_id,
                project_id,
                tag_list: tag_list(&body),
                run_untagged: bool_field(&body, "run_untagged").unwrap_or(true),
                paused: bool_field(&body, "paused").unwrap_or(false),
                locked: bool_field(&body, "locked").unwrap_or(false),
                created_at: timestamp(),
                contacted_ms: None,
                contacted_at: None,
            },
        );
        drop(state);
        self.persist();
        SimResponse::json(
            201,
            &json!({"id": id, "token": token, "token_expires_at": null}),
        )
    }

    pub(super) fn update_runner(&self, request: &SimRequest, id: &str) -> SimResponse {
        let body = request.params();
        let mut state = self.lock();
        let Some(runner) = id
            .parse::<u64>()
            .ok()
            .and_then(|id| state.runners.get_mut(&id))
        else {
            return not_found("Runner");
        };
        if let Some(description) = string_field(&body, "description") {
            runner.description = description;
        }
        if let Some(paused) = bool_field(&body, "paused") {
            runner.paused = paused;
        }
        if let Some(active) = bool_field(&body, "active") {
            runner.paused = !active;
        }
        if let Some(run_untagged) = bool_field(&body, "run_untagged") {
            runner.run_untagged = run_untagged;
        }
        if let Some(locked) = bool_field(&body, "locked") {
            runner.locked = locked;
        }
        if body.get("tag_list").is_some() {
            runner.tag_list = tag_list(&body);
        }
        let runner = runner.clone();
        let answer = self.runner_detail(&state, &runner);
        drop(state);
        self.persist();
        SimResponse::json(200, &answer)
    }

    /// The runner a runner-API request authenticates as (its `token` field).
    pub(super) fn runner_of(&self, request: &SimRequest) -> Result<u64, SimResponse> {
        let Some(token) = string_field(&request.params(), "token") else {
            return Err(param_error("token is missing"));
        };
        let digest = token_digest(&token);
        self.lock()
            .runners
            .values()
            .find(|runner| runner.token_digest == digest)
            .map(|runner| runner.id)
            .ok_or_else(|| message(403, "403 Forbidden"))
    }

    /// `POST /runners/verify`: the token is a runner's (as `gitlab-runner register` checks).
    pub(super) fn verify_runner(&self, request: &SimRequest) -> SimResponse {
        match self.runner_of(request) {
            Ok(id) => SimResponse::json(
                200,
                &json!({"id": id, "token": string_field(&request.params(), "token"), "token_expires_at": null}),
            ),
            Err(response) => response,
        }
    }

    /// `DELETE /runners` with the runner's token (`gitlab-runner unregister`).
    pub(super) fn unregister_runner(&self, request: &SimRequest) -> SimResponse {
        match self.runner_of(request) {
            Ok(id) => {
                self.lock().runners.remove(&id);
                self.persist();
                SimResponse::empty(204)
            }
            Err(response) => response,
        }
    }

    /// `POST /jobs/request`, the runner's poll: the runner is online from now on, and takes
    /// every job it can run whose stage is reached (GitLab hands out one job per request and
    /// the runner runs it; here the simulator plays the job's run, so the answer is always
    /// 204 "no job for you", and the jobs it took run and end on their own).
    pub(super) fn request_job(&self, request: &SimRequest) -> SimResponse {
        let runner_id = match self.runner_of(request) {
            Ok(id) => id,
            Err(response) => return response,
        };
        let now = now_ms();
        let mut state = self.lock();
        let Some(runner) = state.runners.get_mut(&runner_id) else {
            return message(403, "403 Forbidden");
        };
        runner.contacted_ms = Some(now);
        runner.contacted_at = Some(timestamp());
        let runner = runner.clone();
        let mut taken: Vec<(u64, usize)> = Vec::new();
        for pipeline in state.pipelines.values() {
            if pipeline.yaml_errors.is_some() {
                continue;
            }
            let Some(project) = state.projects.get(&pipeline.project_id) else {
                continue;
            };
            let statuses = self.job_statuses(pipeline, now);
            for (index, job) in pipeline.jobs.iter().enumerate() {
                if statuses[index] == "pending" && runner.can_take(project, job) {
                    taken.push((pipeline.id, index));
                }
            }
        }
        let mut executions = Vec::new();
        for (pipeline, index) in &taken {
            let execution = self.job_execution(&state, *pipeline, *index, &runner);
            if let Some(job) = state
                .pipelines
                .get_mut(pipeline)
                .and_then(|pipeline| pipeline.jobs.get_mut(*index))
            {
                job.picked_ms = Some(now);
                job.runner_id = Some(runner_id);
                match execution {
                    Some(Ok(spec)) => {
                        job.executes = true;
                        executions.push((*pipeline, spec));
                    }
                    Some(Err(reason)) => {
                        job.executes = true;
                        job.outcome = Some(crate::gitlab::ci::jobs::Outcome {
                            success: false,
                            trace: format!("ERROR: Job failed (system failure): {reason}\n"),
                            pushed: Vec::new(),
                        });
                    }
                    None => {}
                }
            }
        }
        drop(state);
        for (pipeline, spec) in executions {
            self.start_execution(pipeline, spec);
        }
        if !taken.is_empty() {
            self.persist();
        }
        SimResponse::empty(204).with_header("x-gitlab-last-update", now.to_string())
    }

    /// The instance runner with this description, created when there is none (untagged jobs
    /// allowed), with a fresh authentication token: what `Ci::Runner.find_by(...) ||
    /// Ci::Runner.create!(...)` followed by `reset_token!` does in `gitlab-rails runner`. The old
    /// token stops working, so an interrupted run that never stored its token leaves no second
    /// runner and no live stray token behind.
    /// The runner's `registration_type` decides its token's prefix: found among the runners of
    /// that type, created with it (`glrt-` only for `AuthenticatedUser`).
    pub fn create_instance_runner(
        &self,
        description: &str,
        registration_type: RegistrationType,
    ) -> String {
        self.instance_runner(description, registration_type, Vec::new())
    }

    /// Registers the runner stand-in (an instance runner, untagged jobs and `tags`), or gives
    /// the one a previous start registered a fresh token; returns its authentication token.
    pub fn register_standin_runner(&self, tags: &[String]) -> String {
        self.instance_runner(
            STANDIN_RUNNER,
            RegistrationType::AuthenticatedUser,
            tags.to_vec(),
        )
    }

    /// The instance runner `description` with `tags`, made or found, and a fresh token.
    fn instance_runner(
        &self,
        description: &str,
        registration_type: RegistrationType,
        tag_list: Vec<String>,
    ) -> String {
        let token = runner_token(registration_type);
        let mut state = self.lock();
        let existing = state
            .runners
            .values()
            .find(|runner| {
                runner.description == description
                    && runner.runner_type == "instance_type"
                    && runner.registration_type == registration_type
            })
            .map(|runner| runner.id);
        let id = match existing {
            Some(id) => id,
            None => {
                state.next_runner_id += 1;
                state.next_runner_id
            }
        };
        let created_at = state
            .runners
            .get(&id)
            .map(|runner| runner.created_at.clone())
            .unwrap_or_else(timestamp);
        state.runners.insert(
            id,
            Runner {
                id,
                token_digest: token_digest(&token),
                registration_type,
                description: description.to_string(),
                runner_type: "instance_type".to_string(),
                group_id: None,
                project_id: None,
                tag_list,
                run_untagged: true,
                paused: false,
                locked: false,
                created_at,
                contacted_ms: None,
                contacted_at: None,
            },
        );
        drop(state);
        self.persist();
        token
    }
}

#[cfg(test)]
mod runner_creation_tests {
    use super::*;
    use crate::gitlab::Config;

    #[test]
    fn creating_a_runner_again_reuses_it_and_retires_the_old_token() {
        let sim = GitlabSim::new(Config::default()).expect("sim");
        let created = RegistrationType::AuthenticatedUser;
        let first = sim.create_instance_runner("blueprint gitlab-runner", created);
        let second = sim.create_instance_runner("blueprint gitlab-runner", created);
        let other = sim.create_instance_runner("another runner", created);
        assert!(first.starts_with("glrt-") && second.starts_with("glrt-"));
        assert_ne!(first, second);
        let state = sim.lock();
        let named: Vec<&Runner> = state
            .runners
            .values()
            .filter(|r| r.description == "blueprint gitlab-runner")
            .collect();
        assert_eq!(named.len(), 1, "one runner per description");
        assert_eq!(named[0].token_digest, token_digest(&second));
        assert!(
            state
                .runners
                .values()
                .all(|r| r.token_digest != token_digest(&first)),
            "the first token no longer authenticates any runner"
        );
        assert_eq!(state.runners.len(), 2);
        drop(state);
        assert!(other.starts_with("glrt-"));
    }

    /// GitLab's rule (app/models/ci/runner.rb, `prefix_for_new_and_legacy_runner`): `glrt-` only
    /// for a runner a user created; one of the enum's default type gets `glrtr-`, on creation
    /// and on every token reset.
    #[test]
    fn only_a_runner_created_by_a_user_gets_a_glrt_token() {
        let sim = GitlabSim::new(Config::default()).expect("sim");
        let registered = sim.create_instance_runner("legacy", RegistrationType::RegistrationToken);
        assert!(registered.starts_with("glrtr-"), "{registered}");
        let id = sim
            .lock()
            .runners
            .values()
            .find(|r| r.description == "legacy")
            .map(|r| r.id)
            .expect("the runner");
        let reset = sim.reset_runner_token(&id.to_string());
        assert_eq!(reset.status, 201);
        let body: Value = serde_json::from_slice(&reset.body).expect("json");
        let token = body["token"].as_str().expect("token");
        assert!(token.starts_with("glrtr-"), "{token}");
        let created = sim.create_instance_runner("legacy", RegistrationType::AuthenticatedUser);
        assert!(created.starts_with("glrt-"), "{created}");
        assert_eq!(
            sim.lock().runners.len(),
            2,
            "a runner of another type is another runner"
        );
    }
}
