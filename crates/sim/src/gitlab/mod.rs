//! `bprun sim gitlab`: a GitLab REST API v4 simulator faithful to the behaviours bprun depends on
//! (see shared/reference/gitlab-api-semantics.md): auth, groups, projects, CI/CD variables with
//! GitLab's validation, repository files, pipelines and jobs, pagination, rate-limit headers and
//! errors in both of GitLab's shapes. Fault injection and a request log serve tests and benchmarks.
//!
//! One file per resource family: this one holds the state and the server; `routes.rs` is the
//! table that sends each request to its family's handler.

mod access;
/// GitLab CI: which jobs a pipeline gets, and the jobs that really run.
pub mod ci;
mod commits;
mod control;
mod files;
mod git_http;
mod groups;
/// Jobs that really run: which, with what, and their outcomes (`gitlab/jobs.rs`).
mod jobs;
mod pagination;
mod pipeline_control;
mod pipelines;
mod projects;
mod protected;
mod routes;
mod runners;
mod tokens;
mod variables;

pub use runners::{
    RegistrationType, RunnerSide, STANDIN_RUNNER, runner_standin, standin_interval, standin_poll,
};

use crate::http::{Accounting, FaultState, Faults, Handler, SimRequest, SimResponse};
use bprun_clients::digest::sha256_hex;
use groups::Group;
use pipelines::{Job, Pipeline};
use projects::Project;
use runners::Runner;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokens::{TokenMeta, admin_scopes, token_digest};
use variables::Variable;

/// Simulator settings (`bprun sim gitlab` flags).
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: String,
    pub state_dir: Option<PathBuf>,
    pub tokens: Vec<String>,
    /// How long a pipeline takes from creation to its end.
    pub pipeline_seconds: f64,
    pub faults: Faults,
    /// Start the runner stand-in (an online instance runner) with these tags; `None`: no
    /// runner, so jobs stay pending until one is registered and polls.
    pub runner: Option<Vec<String>>,
    /// Which jobs run for real and which are played (see `ci::jobs`).
    pub jobs: crate::gitlab::ci::jobs::Settings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:0".into(),
            state_dir: None,
            tokens: Vec::new(),
            pipeline_seconds: 2.0,
            faults: Faults::default(),
            runner: None,
            jobs: crate::gitlab::ci::jobs::Settings::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct User {
    id: u64,
    username: String,
    name: String,
    /// Users made before users had roles were the administrator.
    #[serde(default = "yes")]
    is_admin: bool,
    /// GitLab's `can_create_group` (the instance default is true).
    #[serde(default = "yes")]
    can_create_group: bool,
    #[serde(default)]
    email: String,
    #[serde(default)]
    created_at: String,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    next_id: u64,
    /// Tokens and runners have their own id sequences (their own tables in GitLab), so they
    /// do not shift the ids of groups and projects.
    #[serde(default)]
    next_token_id: u64,
    #[serde(default)]
    next_runner_id: u64,
    /// Token digests (sha256, hex) to user ids: like GitLab, the state never holds a token.
    tokens: BTreeMap<String, u64>,
    users: Vec<User>,
    /// Token digests to their records.
    #[serde(default)]
    token_meta: BTreeMap<String, TokenMeta>,
    groups: BTreeMap<u64, Group>,
    projects: BTreeMap<u64, Project>,
    variables: BTreeMap<u64, Vec<Variable>>,
    pipelines: BTreeMap<u64, Pipeline>,
    #[serde(default)]
    runners: BTreeMap<u64, Runner>,
    /// Branches protected through the API, by project (the default branch is protected too,
    /// unless listed in `unprotected`).
    #[serde(default)]
    protected: BTreeMap<u64, Vec<protected::Protection>>,
    #[serde(default)]
    unprotected: BTreeMap<u64, Vec<String>>,
    /// Direct members of groups and projects: user id -> access level (10 guest ... 50 owner).
    #[serde(default)]
    group_members: BTreeMap<u64, BTreeMap<u64, u8>>,
    #[serde(default)]
    project_members: BTreeMap<u64, BTreeMap<u64, u8>>,
}

impl State {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Records a live token of `user` with `scopes`; returns its id.
    fn add_token(&mut self, digest: String, user: u64, name: &str, scopes: Vec<String>) -> u64 {
        if let Some(meta) = self.token_meta.get(&digest) {
            return meta.id;
        }
        self.next_token_id += 1;
        let id = self.next_token_id;
        self.tokens.insert(digest.clone(), user);
        self.token_meta.insert(
            digest,
            TokenMeta {
                id,
                name: name.to_string(),
                scopes,
                revoked: false,
                user_id: user,
                created_at: timestamp(),
                expires_at: None,
            },
        );
        id
    }
}

pub struct GitlabSim {
    config: Config,
    /// Every project's bare repository.
    repos: crate::git::Repos,
    /// The repositories' folder when it is temporary (no `--state`): removed at shutdown.
    pub temporary_repos: Option<PathBuf>,
    /// Where the simulator is reachable, for URLs in answers.
    pub url: Mutex<String>,
    /// Shared with the threads that run jobs (they record each job's outcome).
    state: Arc<Mutex<State>>,
    faults: FaultState,
    accounting: Accounting,
    /// Days the simulator's calendar is ahead of the machine's (`PUT /-/sim/clock`), so a test
    /// can let tokens expire.
    clock_days: std::sync::atomic::AtomicI64,
    /// Runner id -> how that runner process is configured (`RunnerSide`): not GitLab's state,
    /// so not persisted; a runner says it when it starts.
    runner_sides: Mutex<BTreeMap<u64, RunnerSide>>,
}

/// Writes the state into `dir`: `gitlab-state.json` without the values of masked and hidden
/// variables, which go to `gitlab-secrets.json` (both mode 0600, written whole and renamed).
fn write_state(dir: &std::path::Path, state: &State) {
    let mut public = state.clone();
    let mut secrets: BTreeMap<String, String> = BTreeMap::new();
    for (project, list) in public.variables.iter_mut() {
        for variable in list.iter_mut().filter(|v| v.masked || v.hidden) {
            secrets.insert(
                secret_key(*project, &variable.key, &variable.environment_scope),
                std::mem::take(&mut variable.value),
            );
        }
    }
    let (Ok(text), Ok(secret_text)) = (
        serde_json::to_string_pretty(&public),
        serde_json::to_string_pretty(&secrets),
    ) else {
        return;
    };
    let _ = std::fs::create_dir_all(dir);
    // The secrets first: a state naming a masked variable always finds its value.
    let _ =
        bprun_clients::fs::write_private(&dir.join("gitlab-secrets.json"), secret_text.as_bytes());
    let _ = bprun_clients::fs::write_private(&dir.join("gitlab-state.json"), text.as_bytes());
}

/// Where a masked variable's value is in `gitlab-secrets.json`.
fn secret_key(project: u64, key: &str, scope: &str) -> String {
    format!("{project}/{key}/{scope}")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn timestamp() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn message(status: u16, text: &str) -> SimResponse {
    SimResponse::json(status, &json!({"message": text}))
}

fn not_found(what: &str) -> SimResponse {
    message(404, &format!("404 {what} Not Found"))
}

/// Grape's parameter errors: `{"error": "name is missing"}`.
fn param_error(text: &str) -> SimResponse {
    SimResponse::json(400, &json!({"error": text}))
}

fn field_errors(errors: Value) -> SimResponse {
    SimResponse::json(400, &json!({"message": errors}))
}

fn sha_of(text: &str) -> String {
    sha256_hex(text)[..40].to_string()
}

fn string_field(body: &Value, key: &str) -> Option<String> {
    match body.get(key) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Number(number)) => Some(number.to_string()),
        Some(Value::Bool(flag)) => Some(flag.to_string()),
        _ => None,
    }
}

/// A Boolean parameter as Grape coerces it (dry-types' `Params::Bool`): `true`, `True`, `1`,
/// `yes`, `on`, ... are true; `false`, `False`, `0`, `no`, `off`, ... false.
fn grape_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "on" | "On" | "ON" | "t" | "true" | "True" | "TRUE" | "T" | "y" | "yes" | "Yes"
        | "YES" | "Y" => Some(true),
        "0" | "off" | "Off" | "OFF" | "f" | "false" | "False" | "FALSE" | "F" | "n" | "no"
        | "No" | "NO" | "N" => Some(false),
        _ => None,
    }
}

/// The `search` parameter of a list, lower-cased (GitLab's search ignores case); empty: all.
fn search_term(request: &SimRequest) -> String {
    request
        .query
        .get("search")
        .map(|text| text.to_lowercase())
        .unwrap_or_default()
}

/// A Boolean query parameter (false when absent or not a Boolean).
fn query_flag(request: &SimRequest, key: &str) -> bool {
    request
        .query
        .get(key)
        .and_then(|value| grape_bool(value))
        .unwrap_or(false)
}

fn bool_field(body: &Value, key: &str) -> Option<bool> {
    match body.get(key) {
        Some(Value::Bool(flag)) => Some(*flag),
        Some(Value::String(text)) => grape_bool(text),
        _ => None,
    }
}

/// What GitLab says of a namespace path (a group's, a username) that is not one.
const NAMESPACE_PATH_MESSAGE: &str = "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-' or end in '.', '.git' or '.atom'.";

/// GitLab's `project_path_format_regex`: letters, digits, `_`, `-`, `.`; not starting with
/// `-`; not ending in `.git` or `.atom`.
fn valid_path_chars(path: &str) -> bool {
    !path.is_empty()
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !path.starts_with('-')
        && !path.ends_with(".git")
        && !path.ends_with(".atom")
}

/// `private` < `internal` < `public`.
fn visibility_rank(visibility: &str) -> u8 {
    match visibility {
        "public" => 2,
        "internal" => 1,
        _ => 0,
    }
}

fn valid_visibility(visibility: &str) -> bool {
    matches!(visibility, "private" | "internal" | "public")
}

impl Handler for GitlabSim {
    fn handle(&self, request: SimRequest) -> SimResponse {
        let api = request.path.starts_with("/api/v4");
        let mut response = self.route(&request);
        if api {
            let reset = now_ms() / 1000 + 60;
            let observed = self.accounting.log.lock().map(|log| log.len()).unwrap_or(0) % 2000;
            response = response
                .with_header("ratelimit-name", "throttle_authenticated_api")
                .with_header("ratelimit-limit", "2000")
                .with_header("ratelimit-observed", observed.to_string())
                .with_header("ratelimit-remaining", (2000 - observed).to_string())
                .with_header("ratelimit-reset", reset.to_string());
        }
        response
    }

    fn faults(&self) -> &FaultState {
        &self.faults
    }

    fn accounting(&self) -> &Accounting {
        &self.accounting
    }

    fn exempt(&self, path: &str) -> bool {
        path.starts_with("/-/")
    }
}

/// Runs the simulator until Ctrl-C or SIGTERM; prints `GITLAB_URL=...` and `GITLAB_TOKEN=...`.
pub fn run(config: Config) -> Result<(), String> {
    let address = crate::http::loopback(&config.listen)?;
    let mut config = config;
    if config.tokens.is_empty() {
        config.tokens.push(format!(
            "glpat-sim-{}",
            (0..20)
                .map(|_| fastrand::alphanumeric())
                .collect::<String>()
        ));
    }
    let token = config.tokens[0].clone();
    let sim = Arc::new(GitlabSim::new(config)?);
    let temporary_repos = sim.temporary_repos.clone();
    // Registered before the URL is printed, so whoever reads it finds the runner.
    let runner_token = sim.config.runner.as_ref().map(|tags| {
        let token = sim.register_standin_runner(tags);
        standin_poll(&sim, &token);
        token
    });
    let runtime = bprun_clients::runtime::runtime();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|error| format!("cannot listen on {address}: {error}"))?;
        let bound = listener.local_addr().map_err(|error| error.to_string())?;
        let url = format!("http://{bound}");
        *sim.url.lock().unwrap_or_else(|p| p.into_inner()) = url.clone();
        // Whoever started us may stop reading stdout; a closed pipe must not stop the server.
        use std::io::Write;
        let mut out = std::io::stdout();
        let _ = writeln!(out, "GITLAB_URL={url}");
        let _ = writeln!(out, "GITLAB_TOKEN={token}");
        let _ = out.flush();
        let runner = runner_token.map(|token| {
            let interval = standin_interval(sim.config.pipeline_seconds);
            tokio::spawn(runner_standin(sim.clone(), token, interval))
        });
        let server = tokio::spawn(crate::http::serve(listener, sim));
        crate::http::shutdown_signal().await?;
        server.abort();
        if let Some(runner) = runner {
            runner.abort();
        }
        crate::sandbox::stop_running_jobs();
        tokio::time::sleep(Duration::from_millis(10)).await;
        if let Some(folder) = &temporary_repos {
            let _ = std::fs::remove_dir_all(folder);
        };
        Ok(())
    })
}

impl GitlabSim {
    pub fn new(config: Config) -> Result<GitlabSim, String> {
        let mut state = match &config.state_dir {
            Some(dir) => match std::fs::read_to_string(dir.join("gitlab-state.json")) {
                Ok(text) => serde_json::from_str(&text).map_err(|error| {
                    format!("invalid simulator state in {}: {error}", dir.display())
                })?,
                Err(_) => State::default(),
            },
            None => State::default(),
        };
        if let Some(dir) = &config.state_dir
            && let Ok(text) = std::fs::read_to_string(dir.join("gitlab-secrets.json"))
        {
            let secrets: BTreeMap<String, String> =
                serde_json::from_str(&text).map_err(|error| {
                    format!("invalid simulator secrets in {}: {error}", dir.display())
                })?;
            for (project, list) in state.variables.iter_mut() {
                for variable in list.iter_mut().filter(|v| v.masked || v.hidden) {
                    let key = secret_key(*project, &variable.key, &variable.environment_scope);
                    if let Some(value) = secrets.get(&key) {
                        variable.value = value.clone();
                    }
                }
            }
        }
        // A job that ran when the simulator stopped has lost its runner: it fails, as GitLab
        // fails a job whose runner went away (sooner here, so a re-run does not wait an hour).
        for job in state
            .pipelines
            .values_mut()
            .flat_map(|pipeline| pipeline.jobs.iter_mut())
            .filter(|job| job.executes && job.outcome.is_none())
        {
            job.outcome = Some(crate::gitlab::ci::jobs::Outcome {
                success: false,
                trace: "ERROR: Job failed (system failure): the runner stopped while the job ran\n"
                    .to_string(),
                pushed: Vec::new(),
            });
        }
        jobs::restore_pushed_images(&state, &config.jobs);
        if state.users.is_empty() {
            let id = state.id();
            state.users.push(User {
                id,
                username: "root".into(),
                name: "Administrator".into(),
                is_admin: true,
                can_create_group: true,
                email: "admin@example.com".into(),
                created_at: timestamp(),
            });
        }
        let root = state.users[0].id;
        for token in &config.tokens {
            state.add_token(token_digest(token), root, "sim admin token", admin_scopes());
        }
        let faults = FaultState::new(config.faults.clone());
        let (repos_root, temporary_repos) = match &config.state_dir {
            Some(dir) => (dir.join("repos"), None),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "bprun-sim-gitlab-{}-{}",
                    std::process::id(),
                    fastrand::u64(..)
                ));
                (dir.clone(), Some(dir))
            }
        };
        let repos = crate::git::Repos::new(repos_root)?;
        for project in state.projects.values() {
            repos.create(&Self::project_path(&state, project))?;
        }
        Ok(GitlabSim {
            config,
            repos,
            temporary_repos,
            url: Mutex::new(String::new()),
            state: Arc::new(Mutex::new(state)),
            faults,
            accounting: Accounting::default(),
            clock_days: std::sync::atomic::AtomicI64::new(0),
            runner_sides: Mutex::new(BTreeMap::new()),
        })
    }

    fn base_url(&self) -> String {
        self.url.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Today on the simulator's calendar (UTC, moved by `PUT /-/sim/clock`).
    fn today(&self) -> time::Date {
        let days = self.clock_days.load(std::sync::atomic::Ordering::Relaxed);
        let today = time::OffsetDateTime::now_utc().date();
        today
            .checked_add(time::Duration::days(days))
            .unwrap_or(today)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self) {
        if let Some(dir) = &self.config.state_dir {
            write_state(dir, &self.lock());
        }
    }
}
