//! `bprun sim gitlab`: a GitLab REST API v4 simulator faithful to the behaviours bprun depends on
//! (see shared/reference/gitlab-api-semantics.md): auth, groups, projects, CI/CD variables with
//! GitLab's validation, repository files, pipelines and jobs, pagination, rate-limit headers and
//! errors in both of GitLab's shapes. Fault injection and a request log serve tests and benchmarks.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bprun_clients::digest::sha256_hex;
use bprun_clients::gitlab::rules::{maskable, valid_variable_key as valid_key};

use super::ci;

mod access;
mod commits;

use super::http::{Accounting, FaultState, Faults, Handler, SimRequest, SimResponse, decode};
use access::{DEVELOPER, OWNER};

/// Jobs that really run: which, with what, and their outcomes (`gitlab/jobs.rs`).
mod jobs;

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
    /// Which jobs run for real and which are played (see `ci_jobs`).
    pub jobs: super::ci_jobs::Settings,
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
            jobs: super::ci_jobs::Settings::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Group {
    id: u64,
    name: String,
    path: String,
    /// The parent group of a subgroup.
    #[serde(default)]
    parent_id: Option<u64>,
    visibility: String,
    description: String,
    created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Project {
    id: u64,
    name: String,
    path: String,
    namespace_id: u64,
    visibility: String,
    description: String,
    default_branch: Option<String>,
    created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Variable {
    key: String,
    value: String,
    variable_type: String,
    protected: bool,
    masked: bool,
    hidden: bool,
    raw: bool,
    environment_scope: String,
    description: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    id: u64,
    name: String,
    stage: String,
    script: Vec<String>,
    /// The job's `tags:`: only a runner carrying all of them may take it.
    #[serde(default)]
    tags: Vec<String>,
    /// When a runner took the job (its `POST /jobs/request`), and which one.
    #[serde(default)]
    picked_ms: Option<u64>,
    #[serde(default)]
    runner_id: Option<u64>,
    /// `on_success`, `always` or `manual` (manual jobs wait for a person: never run here).
    #[serde(default)]
    when: String,
    /// Image, scripts, YAML variables, timeout (see `ci_jobs`).
    #[serde(default)]
    run: ci::JobRun,
    /// The runner runs it for real (its image is known): it ends when its script does.
    #[serde(default)]
    executes: bool,
    #[serde(default)]
    outcome: Option<super::ci_jobs::Outcome>,
}

/// A runner as GitLab 17/18 keeps it: created with `POST /user/runners` (an authentication
/// token `glrt-...`, kept as a digest), online while it polls `POST /jobs/request`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Runner {
    id: u64,
    token_digest: String,
    description: String,
    /// `instance_type`, `group_type` or `project_type`.
    runner_type: String,
    group_id: Option<u64>,
    project_id: Option<u64>,
    tag_list: Vec<String>,
    run_untagged: bool,
    paused: bool,
    locked: bool,
    created_at: String,
    /// Last contact (a job request); not persisted across restarts of the simulator.
    #[serde(skip)]
    contacted_ms: Option<u64>,
    #[serde(skip)]
    contacted_at: Option<String>,
}

/// GitLab's `Ci::Runner::ONLINE_CONTACT_TIMEOUT`: a runner is online when it asked for a job
/// within the last two hours.
const ONLINE_CONTACT_MS: u64 = 2 * 60 * 60 * 1000;
/// GitLab's `STALE_TIMEOUT`: a runner not seen for a week is stale.
const STALE_MS: u64 = 7 * 24 * 60 * 60 * 1000;
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

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pipeline {
    id: u64,
    iid: u64,
    project_id: u64,
    reference: String,
    sha: String,
    created_ms: u64,
    created_at: String,
    jobs: Vec<Job>,
    /// `api` or `push`.
    #[serde(default)]
    source: String,
    /// A push pipeline whose configuration is invalid is created failed, with these errors.
    #[serde(default)]
    yaml_errors: Option<String>,
    /// A push whose head commit says `[skip ci]` (or `[ci skip]`) gets a pipeline that is
    /// `skipped` at once, without jobs (GitLab's `Chain::Skip`).
    #[serde(default)]
    skipped: bool,
}

/// GitLab's `Chain::Skip::SKIP_PATTERN`: `[ci skip]`, `[skip ci]`, with ` `, `_` or `-`, any case.
fn skips_ci(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    ["ci", "skip"].iter().any(|first| {
        let second = if *first == "ci" { "skip" } else { "ci" };
        [' ', '_', '-']
            .iter()
            .any(|sep| lower.contains(&format!("[{first}{sep}{second}]")))
    })
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

/// A personal access token's record (the token itself is never kept, only its digest).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TokenMeta {
    id: u64,
    name: String,
    scopes: Vec<String>,
    revoked: bool,
    user_id: u64,
    created_at: String,
    expires_at: Option<String>,
}

/// The scopes of the tokens given with `--token` and minted in the toolbox.
const ADMIN_SCOPES: &[&str] = &[
    "api",
    "read_api",
    "read_user",
    "read_repository",
    "write_repository",
    "sudo",
    "admin_mode",
];
const VALID_SCOPES: &[&str] = &[
    "api",
    "read_api",
    "read_user",
    "create_runner",
    "manage_runner",
    "k8s_proxy",
    "read_repository",
    "write_repository",
    "read_registry",
    "write_registry",
    "sudo",
    "admin_mode",
    "ai_features",
    "self_rotate",
];

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
    protected: BTreeMap<u64, Vec<String>>,
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

fn admin_scopes() -> Vec<String> {
    ADMIN_SCOPES.iter().map(|s| s.to_string()).collect()
}

fn token_json(meta: &TokenMeta, today: time::Date) -> Value {
    json!({
        "id": meta.id, "name": meta.name, "revoked": meta.revoked, "created_at": meta.created_at,
        "scopes": meta.scopes, "user_id": meta.user_id, "last_used_at": null,
        "active": !meta.revoked && !meta.expired(today), "expires_at": meta.expires_at,
    })
}

/// A `YYYY-MM-DD` date, as Grape's `Date` parameters take it.
fn parse_date(text: &str) -> Option<time::Date> {
    let mut parts = text.splitn(3, '-');
    let year = parts.next()?.parse().ok()?;
    let month = time::Month::try_from(parts.next()?.parse::<u8>().ok()?).ok()?;
    let day = parts.next()?.parse().ok()?;
    time::Date::from_calendar_date(year, month, day).ok()
}

fn format_date(date: time::Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    )
}

/// GitLab 16+ gives a token without an expiry date the longest lifetime allowed: a year.
const DEFAULT_TOKEN_LIFETIME_DAYS: i64 = 365;

impl TokenMeta {
    /// GitLab's `active` scope: a token is good through the day before its `expires_at`.
    fn expired(&self, today: time::Date) -> bool {
        self.expires_at
            .as_deref()
            .and_then(parse_date)
            .is_some_and(|expires| expires <= today)
    }
}

pub struct GitlabSim {
    config: Config,
    /// Every project's bare repository.
    repos: super::git::Repos,
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

/// How the simulator keeps tokens: their sha256 digest.
fn token_digest(token: &str) -> String {
    sha256_hex(token)
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
/// `order_by` and `sort` of a list request, as GitLab's API takes them: an unknown value is a
/// 400 in Grape's words; without them the list keeps the endpoint's own order.
fn order(request: &SimRequest, items: &mut [Value]) -> Result<(), SimResponse> {
    const ORDER_BY: &[&str] = &[
        "id",
        "iid",
        "name",
        "path",
        "key",
        "status",
        "ref",
        "created_at",
        "updated_at",
        "last_activity_at",
    ];
    let order_by = request.query.get("order_by").map(String::as_str);
    let sort = request.query.get("sort").map(String::as_str);
    if order_by.is_none() && sort.is_none() {
        return Ok(());
    }
    if let Some(field) = order_by
        && !ORDER_BY.contains(&field)
    {
        return Err(SimResponse::json(
            400,
            &json!({"error": "order_by does not have a valid value"}),
        ));
    }
    let descending = match sort {
        None => order_by != Some("name") && order_by != Some("path"),
        Some("asc") => false,
        Some("desc") => true,
        Some(_) => {
            return Err(SimResponse::json(
                400,
                &json!({"error": "sort does not have a valid value"}),
            ));
        }
    };
    let field = order_by.unwrap_or("id");
    items.sort_by(|a, b| {
        let ordering = match (&a[field], &b[field]) {
            (Value::Number(x), Value::Number(y)) => x
                .as_f64()
                .partial_cmp(&y.as_f64())
                .unwrap_or(std::cmp::Ordering::Equal),
            (x, y) => x.as_str().unwrap_or("").cmp(y.as_str().unwrap_or("")),
        };
        // Ties in id order, as a database's stable secondary key.
        let ordering = ordering.then_with(|| {
            a["id"]
                .as_i64()
                .unwrap_or(0)
                .cmp(&b["id"].as_i64().unwrap_or(0))
        });
        if descending {
            ordering.reverse()
        } else {
            ordering
        }
    });
    Ok(())
}

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

/// A runner authentication token, as GitLab 17 mints them.
fn runner_token() -> String {
    format!(
        "glrt-{}",
        (0..20)
            .map(|_| fastrand::alphanumeric())
            .collect::<String>()
    )
}

/// `tag_list` as an array or a comma-separated string.
fn tag_list(body: &Value) -> Vec<String> {
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

/// What a query value escapes in the links GitLab answers with.
const QUERY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// GitLab's `Gitlab::PathRegex.namespace_format_regex` for group paths.
fn valid_group_path(path: &str) -> bool {
    valid_path_chars(path) && !path.ends_with('.')
}

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

const GROUP_PATH_MESSAGE: &str = "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-' or end in '.', '.git' or '.atom'.";
const PROJECT_PATH_MESSAGE: &str = "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-', end in '.git' or end in '.atom'";

/// GitLab's `TOP_LEVEL_ROUTES`: names a top-level group cannot take.
const RESERVED_TOP_LEVEL: &[&str] = &[
    "-",
    ".well-known",
    "404.html",
    "422.html",
    "500.html",
    "502.html",
    "503.html",
    "admin",
    "api",
    "apple-touch-icon.png",
    "assets",
    "dashboard",
    "deploy.html",
    "explore",
    "favicon.ico",
    "favicon.png",
    "files",
    "groups",
    "health_check",
    "help",
    "import",
    "jwt",
    "login",
    "oauth",
    "profile",
    "projects",
    "public",
    "robots.txt",
    "s",
    "search",
    "sitemap",
    "sitemap.xml",
    "sitemap.xml.gz",
    "slash-command-logo.png",
    "snippets",
    "unsubscribes",
    "uploads",
    "users",
    "v2",
];
/// GitLab's `PROJECT_WILDCARD_ROUTES`: names a project cannot take.
const RESERVED_PROJECT: &[&str] = &[
    "-",
    "badges",
    "blame",
    "blob",
    "builds",
    "commits",
    "create",
    "create_dir",
    "edit",
    "files",
    "find_file",
    "new",
    "preview",
    "raw",
    "refs",
    "tree",
    "update",
    "wikis",
];

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
            job.outcome = Some(super::ci_jobs::Outcome {
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
        let repos = super::git::Repos::new(repos_root)?;
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

    /// Mints a personal access token named `name` for `root` (the toolbox's `gitlab-rails
    /// runner` does this), expiring `expires_in_days` from today when given
    /// (`expires_at: 365.days.from_now`).
    pub fn mint_token(&self, name: &str, expires_in_days: Option<i64>) -> String {
        let token = format!(
            "glpat-{}",
            (0..20)
                .map(|_| fastrand::alphanumeric())
                .collect::<String>()
        );
        let mut state = self.lock();
        let root = state.users[0].id;
        let digest = token_digest(&token);
        state.add_token(digest.clone(), root, name, admin_scopes());
        let expires_at = expires_in_days
            .and_then(|days| self.today().checked_add(time::Duration::days(days)))
            .map(format_date);
        if let Some(meta) = state.token_meta.get_mut(&digest) {
            meta.expires_at = expires_at;
        }
        drop(state);
        self.persist();
        token
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self) {
        if let Some(dir) = &self.config.state_dir {
            write_state(dir, &self.lock());
        }
    }

    /// A group's full path (`parent/child`) and full name (`Parent / Child`).
    fn group_full(state: &State, id: u64) -> (String, String) {
        let mut paths = Vec::new();
        let mut names = Vec::new();
        let mut next = Some(id);
        while let Some(id) = next {
            let Some(group) = state.groups.get(&id) else {
                break;
            };
            paths.push(group.path.clone());
            names.push(group.name.clone());
            next = group.parent_id;
            if paths.len() > 20 {
                break;
            }
        }
        paths.reverse();
        names.reverse();
        (paths.join("/"), names.join(" / "))
    }

    fn group_json(&self, state: &State, group: &Group) -> Value {
        let (full_path, full_name) = Self::group_full(state, group.id);
        json!({
            "id": group.id, "name": group.name, "path": group.path, "full_path": full_path, "full_name": full_name,
            "visibility": group.visibility, "description": group.description, "parent_id": group.parent_id,
            "web_url": format!("{}/groups/{full_path}", self.base_url()), "created_at": group.created_at,
        })
    }

    fn project_json(&self, state: &State, project: &Project, simple: bool) -> Value {
        let namespace = state.groups.get(&project.namespace_id);
        let (namespace_path, namespace_name) = match namespace {
            Some(group) => Self::group_full(state, group.id),
            None => Self::personal_namespace(state, project),
        };
        let full = format!("{namespace_path}/{}", project.path);
        let base = self.base_url();
        let mut value = json!({
            "id": project.id, "name": project.name, "path": project.path, "description": project.description,
            "path_with_namespace": full, "name_with_namespace": format!("{namespace_name} / {}", project.name),
            "namespace": {"id": project.namespace_id, "name": namespace.map(|g| g.name.clone()).unwrap_or_else(|| namespace_name.clone()), "path": namespace.map(|g| g.path.clone()).unwrap_or_else(|| namespace_path.clone()), "kind": if namespace.is_some() { "group" } else { "user" }, "full_path": namespace_path, "parent_id": namespace.and_then(|g| g.parent_id)},
            "default_branch": project.default_branch,
            "web_url": format!("{base}/{full}"), "http_url_to_repo": format!("{base}/{full}.git"),
            "ssh_url_to_repo": format!("git@127.0.0.1:{full}.git"), "created_at": project.created_at,
        });
        if !simple && let Value::Object(map) = &mut value {
            map.insert("visibility".into(), json!(project.visibility));
            map.insert("empty_repo".into(), json!(project.default_branch.is_none()));
        }
        value
    }

    fn find_group(state: &State, id: &str) -> Option<u64> {
        let id = decode(id);
        match id.parse::<u64>() {
            Ok(number) => state.groups.contains_key(&number).then_some(number),
            Err(_) => state
                .groups
                .keys()
                .find(|group| Self::group_full(state, **group).0 == id)
                .copied(),
        }
    }

    fn find_project(state: &State, id: &str) -> Option<u64> {
        let id = decode(id);
        if let Ok(number) = id.parse::<u64>() {
            return state.projects.contains_key(&number).then_some(number);
        }
        state
            .projects
            .values()
            .find(|project| Self::project_path(state, project) == id)
            .map(|project| project.id)
    }

    fn project_path(state: &State, project: &Project) -> String {
        let namespace = if state.groups.contains_key(&project.namespace_id) {
            Self::group_full(state, project.namespace_id).0
        } else {
            Self::personal_namespace(state, project).0
        };
        format!("{namespace}/{}", project.path)
    }

    /// A personal project's namespace: its owner's username and name (the ids of users and
    /// groups come from one sequence here, so a personal project's `namespace_id` is its
    /// owner's id; older states used 0 for root's).
    fn personal_namespace(state: &State, project: &Project) -> (String, String) {
        state
            .users
            .iter()
            .find(|user| user.id == project.namespace_id)
            .map(|user| (user.username.clone(), user.name.clone()))
            .unwrap_or_else(|| ("root".to_string(), "Administrator".to_string()))
    }

    fn paginate(&self, request: &SimRequest, mut items: Vec<Value>) -> SimResponse {
        if request.query.get("pagination").map(String::as_str) == Some("keyset") {
            return self.paginate_keyset(request, items);
        }
        if let Err(response) = order(request, &mut items) {
            return response;
        }
        let per_page = request
            .query
            .get("per_page")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(20)
            .clamp(1, 100);
        let page = request
            .query
            .get("page")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1);
        let total = items.len();
        let pages = total.div_ceil(per_page).max(1);
        let slice: Vec<Value> = items
            .into_iter()
            .skip((page - 1) * per_page)
            .take(per_page)
            .collect();
        let base = format!("{}{}", self.base_url(), request.path);
        // GitLab's links keep the request's other query parameters.
        let kept: String = request
            .query_pairs
            .iter()
            .filter(|(key, _)| key != "page" && key != "per_page")
            .map(|(key, value)| {
                format!(
                    "&{}={}",
                    percent_encoding::utf8_percent_encode(key, QUERY),
                    percent_encoding::utf8_percent_encode(value, QUERY)
                )
            })
            .collect();
        let link = |number: usize, rel: &str| {
            format!("<{base}?page={number}&per_page={per_page}{kept}>; rel=\"{rel}\"")
        };
        let mut links = Vec::new();
        if page > 1 {
            links.push(link(page - 1, "prev"));
        }
        if page < pages {
            links.push(link(page + 1, "next"));
        }
        links.push(link(1, "first"));
        links.push(link(pages, "last"));
        SimResponse::json(200, &Value::Array(slice))
            .with_header("link", links.join(", "))
            .with_header("x-page", page.to_string())
            .with_header("x-per-page", per_page.to_string())
            .with_header("x-total", total.to_string())
            .with_header("x-total-pages", pages.to_string())
            .with_header(
                "x-next-page",
                if page < pages {
                    (page + 1).to_string()
                } else {
                    String::new()
                },
            )
            .with_header(
                "x-prev-page",
                if page > 1 {
                    (page - 1).to_string()
                } else {
                    String::new()
                },
            )
    }

    /// Keyset pagination (`pagination=keyset&order_by=id&sort=asc|desc&id_after=N`): only a
    /// `link` header with rel="next", and no totals, as GitLab answers.
    fn paginate_keyset(&self, request: &SimRequest, mut items: Vec<Value>) -> SimResponse {
        let per_page = request
            .query
            .get("per_page")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(20)
            .clamp(1, 100);
        let descending = request.query.get("sort").map(String::as_str) == Some("desc");
        items.sort_by_key(|item| item["id"].as_u64().unwrap_or(0));
        if descending {
            items.reverse();
        }
        let after = request
            .query
            .get("id_after")
            .and_then(|v| v.parse::<u64>().ok());
        let before = request
            .query
            .get("id_before")
            .and_then(|v| v.parse::<u64>().ok());
        let remaining: Vec<Value> = items
            .into_iter()
            .filter(|item| {
                let id = item["id"].as_u64().unwrap_or(0);
                after.is_none_or(|after| id > after) && before.is_none_or(|before| id < before)
            })
            .collect();
        let page: Vec<Value> = remaining.iter().take(per_page).cloned().collect();
        let mut response = SimResponse::json(200, &Value::Array(page.clone()));
        if remaining.len() > per_page
            && let Some(last) = page.last().and_then(|item| item["id"].as_u64())
        {
            let cursor = if descending {
                format!("id_before={last}")
            } else {
                format!("id_after={last}")
            };
            let sort = if descending { "desc" } else { "asc" };
            response = response.with_header(
                "link",
                format!("<{}{}?pagination=keyset&per_page={per_page}&order_by=id&sort={sort}&{cursor}>; rel=\"next\"", self.base_url(), request.path),
            );
        }
        response
    }

    /// The token of a request: `PRIVATE-TOKEN`, `Authorization: Bearer` or `?private_token=`.
    fn request_token(request: &SimRequest) -> Option<&str> {
        request
            .token("private-token")
            .or_else(|| request.query.get("private_token").map(String::as_str))
    }

    fn authenticate(&self, request: &SimRequest) -> Option<u64> {
        self.token_user(Self::request_token(request)?)
    }

    /// The user of a live token: known, not revoked, not expired.
    fn token_user(&self, token: &str) -> Option<u64> {
        let digest = token_digest(token);
        let today = self.today();
        let state = self.lock();
        if state
            .token_meta
            .get(&digest)
            .is_some_and(|meta| meta.expired(today))
        {
            return None;
        }
        state.tokens.get(&digest).copied()
    }

    /// GitLab's answers to a token that is not good for this request: revoked (401
    /// `invalid_token`), or without the scope (403 `insufficient_scope`: writes need `api`,
    /// reads `api` or `read_api`).
    fn refuse_token(&self, request: &SimRequest) -> Option<SimResponse> {
        let digest = token_digest(Self::request_token(request)?);
        let today = self.today();
        let state = self.lock();
        let meta = state.token_meta.get(&digest)?;
        if meta.revoked {
            return Some(SimResponse::json(
                401,
                &json!({"error": "invalid_token", "error_description": "Token was revoked. You have to re-authorize from the user."}),
            ));
        }
        if meta.expired(today) {
            return Some(SimResponse::json(
                401,
                &json!({"error": "invalid_token", "error_description": "Token has expired."}),
            ));
        }
        let has = |scope: &str| meta.scopes.iter().any(|s| s == scope);
        let reading = matches!(request.method.as_str(), "GET" | "HEAD");
        let allowed = has("api") || (reading && has("read_api"));
        (!allowed).then(|| {
            SimResponse::json(
                403,
                &json!({"error": "insufficient_scope",
                        "error_description": "The request requires higher privileges than provided by the access token.",
                        "scope": if reading { "api read_api" } else { "api" }}),
            )
        })
    }

    /// `/personal_access_tokens/...` and `POST /users/:id/personal_access_tokens`.
    fn personal_access_tokens(
        &self,
        request: &SimRequest,
        user: u64,
        rest: &[&str],
    ) -> SimResponse {
        let digest = Self::request_token(request).map(token_digest);
        let mut state = self.lock();
        // Others than administrators see and revoke only their own tokens.
        let admin = Self::is_admin(&state, user);
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let today = self.today();
                let items = state
                    .token_meta
                    .values()
                    .filter(|meta| admin || meta.user_id == user)
                    .map(|meta| token_json(meta, today))
                    .collect();
                drop(state);
                self.paginate(request, items)
            }
            (method, [which]) => {
                let target = if *which == "self" {
                    digest.filter(|d| state.token_meta.contains_key(d))
                } else {
                    let id = which.parse::<u64>().ok();
                    state
                        .token_meta
                        .iter()
                        .filter(|(_, meta)| admin || meta.user_id == user)
                        .find(|(_, meta)| Some(meta.id) == id)
                        .map(|(digest, _)| digest.clone())
                };
                let Some(target) = target else {
                    return message(404, "404 Not Found");
                };
                match method {
                    "GET" => SimResponse::json(
                        200,
                        &token_json(&state.token_meta[&target], self.today()),
                    ),
                    "DELETE" => {
                        if let Some(meta) = state.token_meta.get_mut(&target) {
                            meta.revoked = true;
                        }
                        state.tokens.remove(&target);
                        drop(state);
                        self.persist();
                        SimResponse::empty(204)
                    }
                    _ => message(405, "405 Method Not Allowed"),
                }
            }
            _ => message(404, "404 Not Found"),
        }
    }

    /// `POST /users/:id/personal_access_tokens` (an administrator creates a user's token).
    fn create_token(&self, request: &SimRequest, user: &str) -> SimResponse {
        let body = request.json();
        let Some(name) = string_field(&body, "name") else {
            return param_error("name is missing");
        };
        let scopes: Vec<String> = match body.get("scopes") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect(),
            Some(Value::String(list)) => list.split(',').map(str::to_string).collect(),
            _ => return param_error("scopes is missing"),
        };
        if scopes.is_empty() || scopes.iter().any(|s| !VALID_SCOPES.contains(&s.as_str())) {
            return param_error("scopes does not have a valid value");
        }
        let expires_at = match string_field(&body, "expires_at") {
            Some(text) => match parse_date(&text) {
                Some(date) => date,
                None => return param_error("expires_at is invalid"),
            },
            None => self
                .today()
                .checked_add(time::Duration::days(DEFAULT_TOKEN_LIFETIME_DAYS))
                .unwrap_or_else(|| self.today()),
        };
        let mut state = self.lock();
        let Some(user) = user
            .parse::<u64>()
            .ok()
            .filter(|id| state.users.iter().any(|u| u.id == *id))
        else {
            return not_found("User");
        };
        let token = format!(
            "glpat-{}",
            (0..20)
                .map(|_| fastrand::alphanumeric())
                .collect::<String>()
        );
        let digest = token_digest(&token);
        state.add_token(digest.clone(), user, &name, scopes);
        if let Some(meta) = state.token_meta.get_mut(&digest) {
            meta.expires_at = Some(format_date(expires_at));
        }
        let mut answer = token_json(&state.token_meta[&digest], self.today());
        answer["token"] = json!(token);
        drop(state);
        self.persist();
        SimResponse::json(201, &answer)
    }

    /// A job fails when its script has `exit N` with N other than 0 (the tests' convention).
    fn fails(job: &Job) -> bool {
        job.script
            .iter()
            .any(|line| line.trim().starts_with("exit ") && line.trim() != "exit 0")
    }

    /// Each job's status at `now`. Stages run in order; a job runs once a runner took it (its
    /// `POST /jobs/request`) and ends after its share of `pipeline_seconds`. A job no runner
    /// took is `pending` when its stage is reached, `created` before; after a failed stage the
    /// remaining jobs are `skipped`.
    fn job_statuses(&self, pipeline: &Pipeline, now: u64) -> Vec<String> {
        let jobs = &pipeline.jobs;
        let mut stages: Vec<&str> = jobs.iter().map(|job| job.stage.as_str()).collect();
        stages.dedup();
        let run_ms = (self.config.pipeline_seconds.max(0.0) * 1000.0 * 2.0
            / 3.0
            / stages.len().max(1) as f64) as u64;
        let mut statuses = vec![String::new(); jobs.len()];
        let (mut blocked, mut failed) = (false, false);
        let mut index = 0;
        while index < jobs.len() {
            let stage = &jobs[index].stage;
            let end = index
                + jobs[index..]
                    .iter()
                    .take_while(|job| job.stage == *stage)
                    .count();
            let (mut all_success, mut stage_failed) = (true, false);
            for (offset, job) in jobs[index..end].iter().enumerate() {
                let status = match job.picked_ms {
                    Some(_) if job.executes => match &job.outcome {
                        None => "running",
                        Some(outcome) if outcome.success => "success",
                        Some(_) => "failed",
                    },
                    Some(at) if now.saturating_sub(at) < run_ms => "running",
                    Some(_) if Self::fails(job) => "failed",
                    Some(_) => "success",
                    None if job.when == "manual" => "manual",
                    None if failed && job.when != "always" => "skipped",
                    None if blocked => "created",
                    None => "pending",
                };
                stage_failed |= status == "failed";
                all_success &= matches!(status, "success" | "manual");
                statuses[index + offset] = status.to_string();
            }
            failed |= stage_failed;
            blocked |= !all_success;
            index = end;
        }
        statuses
    }

    /// The pipeline's status (GitLab's composite of its jobs' statuses) and its jobs' statuses.
    fn pipeline_status(&self, pipeline: &Pipeline) -> (String, Vec<String>) {
        if pipeline.skipped {
            return ("skipped".to_string(), Vec::new());
        }
        if pipeline.yaml_errors.is_some() {
            return ("failed".to_string(), Vec::new());
        }
        let jobs = self.job_statuses(pipeline, now_ms());
        let any = |wanted: &str| jobs.iter().any(|status| status == wanted);
        let status = if any("running") || (any("pending") && (any("success") || any("failed"))) {
            "running"
        } else if any("pending") {
            "pending"
        } else if any("failed") {
            "failed"
        } else if any("created") {
            "created"
        } else if jobs.iter().all(|status| status == "manual") {
            "manual"
        } else {
            "success"
        };
        (status.to_string(), jobs)
    }

    fn pipeline_json(&self, state: &State, pipeline: &Pipeline) -> Value {
        let (status, _) = self.pipeline_status(pipeline);
        let project = state.projects.get(&pipeline.project_id);
        let path = project
            .map(|p| Self::project_path(state, p))
            .unwrap_or_default();
        json!({
            "id": pipeline.id, "iid": pipeline.iid, "project_id": pipeline.project_id, "sha": pipeline.sha,
            "ref": pipeline.reference, "status": status, "source": pipeline.source, "yaml_errors": pipeline.yaml_errors, "created_at": pipeline.created_at,
            "updated_at": pipeline.created_at, "web_url": format!("{}/{path}/-/pipelines/{}", self.base_url(), pipeline.id),
        })
    }

    fn job_trace(job: &Job, status: &str) -> String {
        if job.executes {
            return match &job.outcome {
                Some(outcome) => outcome.trace.clone(),
                None => "Running with gitlab-runner 17.9.0 (bprun-sim)\n".to_string(),
            };
        }
        let mut trace = format!(
            "Running with bprun-sim\nJob {} (stage {})\n",
            job.name, job.stage
        );
        for line in &job.script {
            trace.push_str(&format!("$ {line}\n"));
            if status == "failed" && line.trim().starts_with("exit ") {
                trace.push_str(&format!(
                    "ERROR: Job failed: exit code {}\n",
                    line.trim().trim_start_matches("exit ").trim()
                ));
                return trace;
            }
        }
        if status == "success" {
            trace.push_str("Job succeeded\n");
        }
        trace
    }

    fn route(&self, request: &SimRequest) -> SimResponse {
        let path = request.path.as_str();
        match (request.method.as_str(), path) {
            ("GET", "/-/health") => return SimResponse::text(200, "GitLab OK"),
            ("GET", "/-/readiness") | ("GET", "/-/liveness") => {
                return SimResponse::json(200, &json!({"status": "ok"}));
            }
            ("GET", "/-/sim/requests") => {
                return SimResponse::json(200, &self.accounting.snapshot());
            }
            ("DELETE", "/-/sim/requests") => {
                self.accounting.clear();
                return SimResponse::json(200, &json!({"cleared": true}));
            }
            ("GET", "/-/sim/faults") => {
                return SimResponse::json(200, &json!(self.faults.get()));
            }
            ("PUT", "/-/sim/faults") => {
                return match serde_json::from_slice::<Faults>(&request.body) {
                    Ok(faults) => {
                        self.faults.set(faults.clone());
                        SimResponse::json(200, &json!(faults))
                    }
                    Err(error) => param_error(&format!("invalid faults: {error}")),
                };
            }
            // Minting a PAT needs a valid token already (as `gitlab-rails` needs the host).
            ("POST", "/-/sim/tokens") => {
                if self.authenticate(request).is_none() {
                    return message(401, "401 Unauthorized");
                }
                let body = request.json();
                let name = string_field(&body, "name")
                    .unwrap_or_else(|| "minted by gitlab-rails runner".to_string());
                let expires_in_days = body.get("expires_in_days").and_then(Value::as_i64);
                return SimResponse::json(
                    201,
                    &json!({"token": self.mint_token(&name, expires_in_days), "username": "root"}),
                );
            }
            // The simulator's calendar: tests move it forward to let tokens expire.
            ("GET", "/-/sim/clock") => {
                return SimResponse::json(200, &json!({"today": format_date(self.today())}));
            }
            ("PUT", "/-/sim/clock") => {
                let Some(days) = request.json().get("advance_days").and_then(Value::as_i64) else {
                    return param_error("advance_days is missing");
                };
                self.clock_days
                    .fetch_add(days, std::sync::atomic::Ordering::Relaxed);
                return SimResponse::json(200, &json!({"today": format_date(self.today())}));
            }
            // `Ci::Runner.create!` through the toolbox, for `bprun sim kube --gitlab-url`.
            ("POST", "/-/sim/runners") => {
                if self.authenticate(request).is_none() {
                    return message(401, "401 Unauthorized");
                }
                let description = string_field(&request.json(), "description")
                    .unwrap_or_else(|| "created by gitlab-rails runner".to_string());
                return SimResponse::json(
                    201,
                    &json!({"token": self.create_instance_runner(&description)}),
                );
            }
            _ => {}
        }
        if let Some((full, rest)) = path.split_once(".git/") {
            return self.git_http(request, full.trim_start_matches('/'), rest);
        }
        let Some(api) = path.strip_prefix("/api/v4") else {
            return message(404, "404 Not Found");
        };
        // The runner API authenticates with the runner's own token, not a user's.
        match (request.method.as_str(), api) {
            ("POST", "/jobs/request") => return self.request_job(request),
            ("POST", "/runners/verify") => return self.verify_runner(request),
            ("DELETE", "/runners") => return self.unregister_runner(request),
            _ => {}
        }
        if let Some(refused) = self.refuse_token(request) {
            return refused;
        }
        let Some(user) = self.authenticate(request) else {
            return message(401, "401 Unauthorized");
        };
        let segments: Vec<&str> = api.trim_start_matches('/').split('/').collect();
        if let Some(refused) = self.authorize(&self.lock(), user, request, &segments) {
            return refused;
        }
        match (request.method.as_str(), segments.as_slice()) {
            ("GET", ["version"]) => {
                SimResponse::json(200, &json!({"version": "17.9.0", "revision": "bprun-sim"}))
            }
            ("GET", ["user"]) => self.current_user(user),
            (_, ["users"]) => self.users(request, user, &[]),
            (_, ["users", id]) => self.users(request, user, &[id]),
            (_, ["groups", id, "members", rest @ ..]) => self.members(request, true, id, rest),
            (_, ["projects", id, "members", rest @ ..]) => self.members(request, false, id, rest),
            ("POST", ["user", "runners"]) => self.create_runner(request),
            (_, ["personal_access_tokens", rest @ ..]) => {
                self.personal_access_tokens(request, user, rest)
            }
            ("POST", ["users", id, "personal_access_tokens"]) => self.create_token(request, id),
            ("GET", ["runners", "all"]) => self.list_runners(request, |_| true),
            ("GET", ["runners"]) => {
                self.list_runners(request, |runner| runner.runner_type != "instance_type")
            }
            ("GET", ["runners", id]) => {
                let state = self.lock();
                match id.parse::<u64>().ok().and_then(|id| state.runners.get(&id)) {
                    Some(runner) => SimResponse::json(200, &self.runner_detail(&state, runner)),
                    None => not_found("Runner"),
                }
            }
            ("PUT", ["runners", id]) => self.update_runner(request, id),
            ("DELETE", ["runners", id]) => {
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
            ("POST", ["runners", id, "reset_authentication_token"]) => {
                let token = runner_token();
                let mut state = self.lock();
                let Some(runner) = id
                    .parse::<u64>()
                    .ok()
                    .and_then(|id| state.runners.get_mut(&id))
                else {
                    return not_found("Runner");
                };
                runner.token_digest = token_digest(&token);
                drop(state);
                self.persist();
                SimResponse::json(201, &json!({"token": token, "token_expires_at": null}))
            }
            ("GET", ["projects", id, "runners"]) => {
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
            ("POST", ["groups"]) => self.create_group(request, user),
            ("GET", ["groups"]) => {
                let state = self.lock();
                let search = search_term(request);
                let items = state
                    .groups
                    .values()
                    .filter(|g| Self::group_visible(&state, user, g.id))
                    .filter(|g| {
                        g.path.to_lowercase().contains(&search)
                            || g.name.to_lowercase().contains(&search)
                    })
                    .map(|g| self.group_json(&state, g))
                    .collect();
                drop(state);
                self.paginate(request, items)
            }
            ("GET", ["groups", id]) => {
                let state = self.lock();
                match Self::find_group(&state, id) {
                    Some(found) => {
                        SimResponse::json(200, &self.group_json(&state, &state.groups[&found]))
                    }
                    None => not_found("Group"),
                }
            }
            ("PUT", ["groups", id]) => self.update_group(request, id),
            ("DELETE", ["groups", id]) => self.delete_group(id),
            ("GET", ["groups", id, "projects"]) => {
                let group = Self::find_group(&self.lock(), id);
                match group {
                    Some(group) => self.list_projects(request, user, Some(group)),
                    None => not_found("Group"),
                }
            }
            ("POST", ["projects"]) => self.create_project(request, user),
            ("GET", ["projects"]) => self.list_projects(request, user, None),
            ("GET", ["projects", id]) => {
                let state = self.lock();
                match Self::find_project(&state, id) {
                    Some(found) => SimResponse::json(
                        200,
                        &self.project_json(&state, &state.projects[&found], false),
                    ),
                    None => not_found("Project"),
                }
            }
            ("DELETE", ["projects", id]) => {
                let mut state = self.lock();
                let Some(found) = Self::find_project(&state, id) else {
                    return not_found("Project");
                };
                let full = Self::project_path(&state, &state.projects[&found]);
                state.projects.remove(&found);
                state.variables.remove(&found);
                drop(state);
                self.repos.remove(&full);
                self.persist();
                message(202, "202 Accepted")
            }
            (_, ["projects", id, "variables", rest @ ..]) => self.variables(request, id, rest),
            (_, ["projects", id, "repository", "commits", rest @ ..]) => {
                self.commits(request, id, rest)
            }
            (_, ["projects", id, "repository", "files", file, rest @ ..]) => {
                self.files(request, id, file, rest)
            }
            ("GET", ["projects", id, "repository", "branches", branch]) => {
                let state = self.lock();
                let Some(project_id) = Self::find_project(&state, id) else {
                    return not_found("Project");
                };
                let full = Self::project_path(&state, &state.projects[&project_id]);
                let default = state.projects[&project_id].default_branch.clone();
                drop(state);
                let name = decode(branch);
                let Some(head) = self.repos.head(&full, &name) else {
                    return not_found("Branch");
                };
                let protected = self
                    .protected_list(&self.lock(), project_id)
                    .contains(&name);
                SimResponse::json(
                    200,
                    &json!({"name": name, "merged": false, "protected": protected,
                            "default": default.as_deref() == Some(name.as_str()),
                            "developers_can_push": false, "developers_can_merge": false, "can_push": true,
                            "web_url": format!("{}/{full}/-/tree/{name}", self.base_url()),
                            "commit": {"id": head, "short_id": head.get(..8).unwrap_or(&head)}}),
                )
            }
            (_, ["projects", id, "protected_branches", rest @ ..]) => {
                self.protected_branches(request, id, rest)
            }
            ("GET", ["projects", id, "pipelines", "latest"]) => {
                let state = self.lock();
                let Some(project) = Self::find_project(&state, id) else {
                    return not_found("Project");
                };
                let full = Self::project_path(&state, &state.projects[&project]);
                let reference = request
                    .query
                    .get("ref")
                    .cloned()
                    .or_else(|| state.projects[&project].default_branch.clone())
                    .unwrap_or_default();
                let head = self.repos.head(&full, &reference);
                // GitLab authorizes reading the (missing) pipeline: 403 when there is none.
                match state.pipelines.values().rev().find(|p| {
                    p.project_id == project
                        && p.reference == reference
                        && Some(&p.sha) == head.as_ref()
                }) {
                    Some(found) => SimResponse::json(200, &self.pipeline_json(&state, found)),
                    None => message(403, "403 Forbidden"),
                }
            }
            ("POST", ["projects", id, "pipeline"]) => self.create_pipeline(request, id),
            ("GET", ["projects", id, "pipelines"]) => {
                let state = self.lock();
                let Some(project) = Self::find_project(&state, id) else {
                    return not_found("Project");
                };
                // GitLab filters the list by `ref`, `status` and `source` when asked.
                let wanted =
                    |key: &str, value: &str| request.query.get(key).is_none_or(|v| v == value);
                let items = state
                    .pipelines
                    .values()
                    .rev()
                    .filter(|p| {
                        p.project_id == project
                            && wanted("ref", &p.reference)
                            && wanted("source", &p.source)
                    })
                    .map(|p| self.pipeline_json(&state, p))
                    .filter(|json| wanted("status", json["status"].as_str().unwrap_or("")))
                    .collect();
                drop(state);
                self.paginate(request, items)
            }
            ("GET", ["projects", id, "pipelines", pipeline]) => {
                let state = self.lock();
                match self.pipeline_of(&state, id, pipeline) {
                    Some(found) => SimResponse::json(200, &self.pipeline_json(&state, found)),
                    None => not_found("Pipeline"),
                }
            }
            ("GET", ["projects", id, "pipelines", pipeline, "jobs"]) => {
                let state = self.lock();
                let Some(found) = self.pipeline_of(&state, id, pipeline) else {
                    return not_found("Pipeline");
                };
                let (_, statuses) = self.pipeline_status(found);
                let items = found
                    .jobs
                    .iter()
                    .zip(statuses)
                    .map(|(job, status)| {
                        let runner = job
                            .runner_id
                            .and_then(|id| state.runners.get(&id))
                            .map(|runner| self.runner_json(runner, false));
                        json!({"id": job.id, "name": job.name, "stage": job.stage, "status": status,
                               "tag_list": job.tags, "runner": runner,
                               "pipeline": {"id": found.id}, "web_url": format!("{}/-/jobs/{}", self.base_url(), job.id)})
                    })
                    .collect();
                drop(state);
                self.paginate(request, items)
            }
            ("GET", ["projects", id, "jobs", job, "trace"]) => {
                let state = self.lock();
                let Some(project) = Self::find_project(&state, id) else {
                    return not_found("Project");
                };
                let job_id = job.parse::<u64>().unwrap_or(0);
                for pipeline in state.pipelines.values().filter(|p| p.project_id == project) {
                    if let Some(index) = pipeline.jobs.iter().position(|j| j.id == job_id) {
                        let (_, statuses) = self.pipeline_status(pipeline);
                        return SimResponse::text(
                            200,
                            &Self::job_trace(&pipeline.jobs[index], &statuses[index]),
                        );
                    }
                }
                not_found("Job")
            }
            _ => message(404, "404 Not Found"),
        }
    }

    fn runner_json(&self, runner: &Runner, _detail: bool) -> Value {
        let now = now_ms();
        json!({
            "id": runner.id, "description": runner.description, "ip_address": runner.contacted_ms.map(|_| "127.0.0.1"),
            "active": !runner.paused, "paused": runner.paused, "is_shared": runner.runner_type == "instance_type",
            "runner_type": runner.runner_type, "name": runner.contacted_ms.map(|_| "gitlab-runner"),
            "online": runner.online(now), "status": runner.status(now),
        })
    }

    fn runner_detail(&self, state: &State, runner: &Runner) -> Value {
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
    fn list_runners(&self, request: &SimRequest, keep: impl Fn(&Runner) -> bool) -> SimResponse {
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
    fn create_runner(&self, request: &SimRequest) -> SimResponse {
        let body = request.json();
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
        let token = runner_token();
        state.next_runner_id += 1;
        let id = state.next_runner_id;
        state.runners.insert(
            id,
            Runner {
                id,
                token_digest: token_digest(&token),
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

    fn update_runner(&self, request: &SimRequest, id: &str) -> SimResponse {
        let body = request.json();
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
    fn runner_of(&self, request: &SimRequest) -> Result<u64, SimResponse> {
        let Some(token) = string_field(&request.json(), "token") else {
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
    fn verify_runner(&self, request: &SimRequest) -> SimResponse {
        match self.runner_of(request) {
            Ok(id) => SimResponse::json(
                200,
                &json!({"id": id, "token": string_field(&request.json(), "token"), "token_expires_at": null}),
            ),
            Err(response) => response,
        }
    }

    /// `DELETE /runners` with the runner's token (`gitlab-runner unregister`).
    fn unregister_runner(&self, request: &SimRequest) -> SimResponse {
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
    fn request_job(&self, request: &SimRequest) -> SimResponse {
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
                        job.outcome = Some(super::ci_jobs::Outcome {
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

    /// Registers the runner stand-in (an instance runner, untagged jobs and `tags`), or gives
    /// the one a previous start registered a fresh token; returns its authentication token.
    /// The instance runner with this description, created when there is none (untagged jobs
    /// allowed), with a fresh authentication token: what `Ci::Runner.find_by(...) ||
    /// Ci::Runner.create!(...)` followed by `reset_token!` does in `gitlab-rails runner`. The old
    /// token stops working, so an interrupted run that never stored its token leaves no second
    /// runner and no live stray token behind.
    pub fn create_instance_runner(&self, description: &str) -> String {
        let token = runner_token();
        let mut state = self.lock();
        let existing = state
            .runners
            .values()
            .find(|runner| {
                runner.description == description && runner.runner_type == "instance_type"
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
                description: description.to_string(),
                runner_type: "instance_type".to_string(),
                group_id: None,
                project_id: None,
                tag_list: Vec::new(),
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

    pub fn register_standin_runner(&self, tags: &[String]) -> String {
        let token = runner_token();
        let mut state = self.lock();
        let existing = state
            .runners
            .values()
            .find(|runner| {
                runner.description == STANDIN_RUNNER && runner.runner_type == "instance_type"
            })
            .map(|runner| runner.id);
        let id = match existing {
            Some(id) => id,
            None => {
                state.next_runner_id += 1;
                state.next_runner_id
            }
        };
        state.runners.insert(
            id,
            Runner {
                id,
                token_digest: token_digest(&token),
                description: STANDIN_RUNNER.to_string(),
                runner_type: "instance_type".to_string(),
                group_id: None,
                project_id: None,
                tag_list: tags.to_vec(),
                run_untagged: true,
                paused: false,
                locked: false,
                created_at: timestamp(),
                contacted_ms: None,
                contacted_at: None,
            },
        );
        drop(state);
        self.persist();
        token
    }

    /// The protected branches of a project: the default branch (unless unprotected) and
    /// those protected through the API.
    fn protected_list(&self, state: &State, project: u64) -> Vec<String> {
        let mut list = Vec::new();
        if let Some(default) = state
            .projects
            .get(&project)
            .and_then(|p| p.default_branch.clone())
            && !state
                .unprotected
                .get(&project)
                .is_some_and(|names| names.contains(&default))
        {
            list.push(default);
        }
        for name in state.protected.get(&project).into_iter().flatten() {
            if !list.contains(name) {
                list.push(name.clone());
            }
        }
        list
    }

    fn protected_json(project: u64, name: &str, index: usize) -> Value {
        let level = json!([{"id": project * 1000 + index as u64, "access_level": 40, "access_level_description": "Maintainers", "user_id": null, "group_id": null}]);
        json!({"id": project * 1000 + index as u64, "name": name, "push_access_levels": level,
               "merge_access_levels": level, "unprotect_access_levels": [], "allow_force_push": false,
               "code_owner_approval_required": false})
    }

    /// `GET|POST /projects/:id/protected_branches`, `GET|DELETE .../:name`.
    fn protected_branches(&self, request: &SimRequest, id: &str, rest: &[&str]) -> SimResponse {
        let mut state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let list = self.protected_list(&state, project);
        let json_of = |name: &str| {
            let index = list.iter().position(|n| n == name).unwrap_or(list.len());
            Self::protected_json(project, name, index)
        };
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let items = list.iter().map(|name| json_of(name)).collect();
                drop(state);
                self.paginate(request, items)
            }
            ("POST", []) => {
                let Some(name) = string_field(&request.json(), "name") else {
                    return param_error("name is missing");
                };
                if list.contains(&name) {
                    return message(409, &format!("Protected branch '{name}' already exists"));
                }
                if let Some(names) = state.unprotected.get_mut(&project) {
                    names.retain(|n| *n != name);
                }
                state
                    .protected
                    .entry(project)
                    .or_default()
                    .push(name.clone());
                let answer = Self::protected_json(project, &name, list.len());
                drop(state);
                self.persist();
                SimResponse::json(201, &answer)
            }
            (method, [name]) => {
                let name = decode(name);
                if !list.contains(&name) {
                    return not_found("Protected Branch");
                }
                match method {
                    "GET" => SimResponse::json(200, &json_of(&name)),
                    "DELETE" => {
                        if let Some(names) = state.protected.get_mut(&project) {
                            names.retain(|n| *n != name);
                        }
                        state.unprotected.entry(project).or_default().push(name);
                        drop(state);
                        self.persist();
                        SimResponse::empty(204)
                    }
                    _ => message(405, "405 Method Not Allowed"),
                }
            }
            _ => message(404, "404 Not Found"),
        }
    }

    /// All projects, or those of one group, paginated.
    fn list_projects(&self, request: &SimRequest, user: u64, group: Option<u64>) -> SimResponse {
        let state = self.lock();
        let search = search_term(request);
        let simple = query_flag(request, "simple");
        let items = state
            .projects
            .values()
            .filter(|p| group.is_none_or(|group| p.namespace_id == group))
            .filter(|p| Self::project_visible(&state, user, p))
            .filter(|p| {
                p.name.to_lowercase().contains(&search) || p.path.to_lowercase().contains(&search)
            })
            .map(|p| self.project_json(&state, p, simple))
            .collect();
        drop(state);
        self.paginate(request, items)
    }

    fn pipeline_of<'a>(
        &self,
        state: &'a State,
        project: &str,
        pipeline: &str,
    ) -> Option<&'a Pipeline> {
        let project = Self::find_project(state, project)?;
        let id = pipeline.parse::<u64>().ok()?;
        state.pipelines.get(&id).filter(|p| p.project_id == project)
    }

    fn create_group(&self, request: &SimRequest, user: u64) -> SimResponse {
        let body = request.json();
        let Some(name) = string_field(&body, "name") else {
            return param_error("name is missing");
        };
        let Some(path) = string_field(&body, "path") else {
            return param_error("path is missing");
        };
        let visibility = string_field(&body, "visibility").unwrap_or_else(|| "private".into());
        if !valid_visibility(&visibility) {
            return param_error("visibility does not have a valid value");
        }
        let mut state = self.lock();
        let parent_id = match string_field(&body, "parent_id") {
            Some(parent) => match Self::find_group(&state, &parent) {
                Some(parent) => Some(parent),
                None => return not_found("Group"),
            },
            None => None,
        };
        // GitLab's validations, worded as `Failed to save group {:attribute=>[messages]}`.
        let mut errors: Vec<(&str, String)> = Vec::new();
        if !valid_group_path(&path) {
            errors.push(("path", GROUP_PATH_MESSAGE.to_string()));
        } else if parent_id.is_none() && RESERVED_TOP_LEVEL.contains(&path.to_lowercase().as_str())
        {
            errors.push(("path", format!("{path} is a reserved name")));
        }
        if state
            .groups
            .values()
            .any(|g| g.parent_id == parent_id && g.path.eq_ignore_ascii_case(&path))
        {
            errors.push(("path", "has already been taken".to_string()));
        }
        if let Some(parent) = parent_id.and_then(|id| state.groups.get(&id))
            && visibility_rank(&visibility) > visibility_rank(&parent.visibility)
        {
            errors.push((
                "visibility_level",
                format!(
                    "{visibility} is not allowed since the parent group has a {} visibility.",
                    parent.visibility
                ),
            ));
        }
        if !errors.is_empty() {
            let mut by_key: Vec<(&str, Vec<String>)> = Vec::new();
            for (key, text) in errors {
                match by_key.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, list)) => list.push(text),
                    None => by_key.push((key, vec![text])),
                }
            }
            let hash = by_key
                .iter()
                .map(|(key, list)| {
                    let items: Vec<String> = list.iter().map(|t| format!("{t:?}")).collect();
                    format!(":{key}=>[{}]", items.join(", "))
                })
                .collect::<Vec<_>>()
                .join(", ");
            return message(400, &format!("Failed to save group {{{hash}}}"));
        }
        let id = state.id();
        let group = Group {
            id,
            name,
            path,
            parent_id,
            visibility,
            description: string_field(&body, "description").unwrap_or_default(),
            created_at: timestamp(),
        };
        state.groups.insert(id, group.clone());
        // The creator owns the group, as on GitLab.
        state
            .group_members
            .entry(id)
            .or_default()
            .insert(user, OWNER);
        let answer = self.group_json(&state, &group);
        drop(state);
        self.persist();
        SimResponse::json(201, &answer)
    }

    fn update_group(&self, request: &SimRequest, id: &str) -> SimResponse {
        let body = request.json();
        let mut state = self.lock();
        let Some(found) = Self::find_group(&state, id) else {
            return not_found("Group");
        };
        if let Some(visibility) = string_field(&body, "visibility") {
            if !valid_visibility(&visibility) {
                return param_error("visibility does not have a valid value");
            }
            if let Some(group) = state.groups.get_mut(&found) {
                group.visibility = visibility;
            }
        }
        if let Some(description) = string_field(&body, "description")
            && let Some(group) = state.groups.get_mut(&found)
        {
            group.description = description;
        }
        let answer = self.group_json(&state, &state.groups[&found]);
        drop(state);
        self.persist();
        SimResponse::json(200, &answer)
    }

    fn delete_group(&self, id: &str) -> SimResponse {
        let mut state = self.lock();
        let Some(found) = Self::find_group(&state, id) else {
            return not_found("Group");
        };
        // The group, its subgroups, and their projects.
        let mut doomed = vec![found];
        let mut index = 0;
        while index < doomed.len() {
            let parent = doomed[index];
            doomed.extend(
                state
                    .groups
                    .values()
                    .filter(|g| g.parent_id == Some(parent))
                    .map(|g| g.id),
            );
            index += 1;
        }
        let projects: Vec<u64> = state
            .projects
            .values()
            .filter(|p| doomed.contains(&p.namespace_id))
            .map(|p| p.id)
            .collect();
        for project in projects {
            let full = Self::project_path(&state, &state.projects[&project]);
            state.projects.remove(&project);
            state.variables.remove(&project);
            self.repos.remove(&full);
        }
        for group in doomed {
            state.groups.remove(&group);
        }
        drop(state);
        self.persist();
        message(202, "202 Accepted")
    }

    fn create_project(&self, request: &SimRequest, user: u64) -> SimResponse {
        let body = request.json();
        let name = string_field(&body, "name");
        let path = string_field(&body, "path");
        let (name, path) = match (name, path) {
            (None, None) => {
                return param_error(
                    "name, path are missing, at least one parameter must be provided",
                );
            }
            (Some(name), None) => (name.clone(), name.to_lowercase().replace(' ', "-")),
            (None, Some(path)) => (path.clone(), path),
            (Some(name), Some(path)) => (name, path),
        };
        let visibility = string_field(&body, "visibility").unwrap_or_else(|| "private".into());
        if !valid_visibility(&visibility) {
            return param_error("visibility does not have a valid value");
        }
        let mut state = self.lock();
        let namespace_id = match string_field(&body, "namespace_id") {
            Some(namespace) => match Self::find_group(&state, &namespace) {
                Some(id) => id,
                None => return not_found("Namespace"),
            },
            // The creator's personal namespace.
            None => user,
        };
        // `Projects::CreateService`: a namespace the user may not create projects in.
        if state.groups.contains_key(&namespace_id)
            && !Self::is_admin(&state, user)
            && Self::group_level(&state, user, namespace_id) < DEVELOPER
        {
            return field_errors(json!({"namespace": ["is not valid"]}));
        }
        let siblings: Vec<&Project> = state
            .projects
            .values()
            .filter(|p| p.namespace_id == namespace_id)
            .collect();
        let mut errors = serde_json::Map::new();
        if siblings.iter().any(|p| p.name == name) {
            errors.insert("name".into(), json!(["has already been taken"]));
        }
        let mut path_errors = Vec::new();
        if !valid_path_chars(&path) {
            path_errors.push(PROJECT_PATH_MESSAGE.to_string());
        } else if RESERVED_PROJECT.contains(&path.as_str()) {
            path_errors.push(format!("{path} is a reserved name"));
        }
        if siblings.iter().any(|p| p.path.eq_ignore_ascii_case(&path)) {
            path_errors.push("has already been taken".to_string());
        }
        if !path_errors.is_empty() {
            errors.insert("path".into(), json!(path_errors));
        }
        if let Some(group) = state.groups.get(&namespace_id)
            && visibility_rank(&visibility) > visibility_rank(&group.visibility)
        {
            errors.insert(
                "visibility_level".into(),
                json!([format!(
                    "{visibility} is not allowed in a {} group.",
                    group.visibility
                )]),
            );
        }
        if !errors.is_empty() {
            return field_errors(Value::Object(errors));
        }
        let id = state.id();
        let project = Project {
            id,
            name,
            path,
            namespace_id,
            visibility,
            description: string_field(&body, "description").unwrap_or_default(),
            default_branch: None,
            created_at: timestamp(),
        };
        if let Err(error) = self.repos.create(&Self::project_path(&state, &project)) {
            return message(500, &format!("500 Internal Server Error: {error}"));
        }
        let answer = self.project_json(&state, &project, false);
        state.projects.insert(id, project);
        drop(state);
        self.persist();
        SimResponse::json(201, &answer)
    }

    fn variable_json(variable: &Variable) -> Value {
        json!({
            "key": variable.key, "value": if variable.hidden { Value::Null } else { Value::String(variable.value.clone()) },
            "variable_type": variable.variable_type, "protected": variable.protected, "masked": variable.masked,
            "hidden": variable.hidden, "raw": variable.raw, "environment_scope": variable.environment_scope,
            "description": variable.description,
        })
    }

    fn variables(&self, request: &SimRequest, id: &str, rest: &[&str]) -> SimResponse {
        let mut state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let scope_filter = request.query.get("filter[environment_scope]").cloned();
        let list = state.variables.entry(project).or_default();
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let items = list.iter().map(Self::variable_json).collect();
                drop(state);
                self.paginate(request, items)
            }
            ("POST", []) => {
                let body = request.json();
                let variable = match Self::variable_from(&body, None) {
                    Ok(variable) => variable,
                    Err(response) => return response,
                };
                if list.iter().any(|v| {
                    v.key == variable.key && v.environment_scope == variable.environment_scope
                }) {
                    return field_errors(
                        json!({"key": [format!("({}) has already been taken", variable.key)]}),
                    );
                }
                let answer = Self::variable_json(&variable);
                list.push(variable);
                drop(state);
                self.persist();
                SimResponse::json(201, &answer)
            }
            (method, [key]) => {
                let matches: Vec<usize> = list
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| {
                        v.key == *key
                            && scope_filter
                                .as_ref()
                                .is_none_or(|scope| &v.environment_scope == scope)
                    })
                    .map(|(index, _)| index)
                    .collect();
                if matches.is_empty() {
                    return not_found("Variable");
                }
                if matches.len() > 1 {
                    return message(
                        409,
                        "There are multiple variables with provided parameters. Please use 'filter[environment_scope]'",
                    );
                }
                let index = matches[0];
                match method {
                    "GET" => SimResponse::json(200, &Self::variable_json(&list[index])),
                    "PUT" => {
                        let body = request.json();
                        let updated = match Self::variable_from(&body, Some(&list[index])) {
                            Ok(variable) => variable,
                            Err(response) => return response,
                        };
                        list[index] = updated;
                        let answer = Self::variable_json(&list[index]);
                        drop(state);
                        self.persist();
                        SimResponse::json(200, &answer)
                    }
                    "DELETE" => {
                        list.remove(index);
                        drop(state);
                        self.persist();
                        SimResponse::empty(204)
                    }
                    _ => message(405, "405 Method Not Allowed"),
                }
            }
            _ => message(404, "404 Not Found"),
        }
    }

    /// A variable from a request body (on top of `existing` for updates), validated as GitLab does.
    fn variable_from(body: &Value, existing: Option<&Variable>) -> Result<Variable, SimResponse> {
        let key = match (string_field(body, "key"), existing) {
            (Some(key), _) => key,
            (None, Some(existing)) => existing.key.clone(),
            (None, None) => return Err(param_error("key is missing")),
        };
        let value = match (string_field(body, "value"), existing) {
            (Some(value), _) => value,
            (None, Some(existing)) => existing.value.clone(),
            (None, None) => return Err(param_error("value is missing")),
        };
        let variable_type = string_field(body, "variable_type")
            .or(existing.map(|e| e.variable_type.clone()))
            .unwrap_or_else(|| "env_var".into());
        if !matches!(variable_type.as_str(), "env_var" | "file") {
            return Err(param_error("variable_type does not have a valid value"));
        }
        let masked_and_hidden = bool_field(body, "masked_and_hidden").unwrap_or(false);
        let masked = bool_field(body, "masked")
            .or(existing.map(|e| e.masked))
            .unwrap_or(false)
            || masked_and_hidden;
        let mut errors = serde_json::Map::new();
        if !valid_key(&key) {
            let mut messages = Vec::new();
            if key.len() > 255 {
                messages.push("is too long (maximum is 255 characters)");
            }
            if !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || key.is_empty() {
                messages.push("can contain only letters, digits and '_'.");
            }
            errors.insert("key".into(), json!(messages));
        }
        if masked && (value.contains('\n') || !maskable(&value)) {
            errors.insert("value".into(), json!(["is invalid"]));
        }
        if !errors.is_empty() {
            return Err(field_errors(Value::Object(errors)));
        }
        Ok(Variable {
            key,
            value,
            variable_type,
            protected: bool_field(body, "protected")
                .or(existing.map(|e| e.protected))
                .unwrap_or(false),
            masked,
            hidden: masked_and_hidden || existing.is_some_and(|e| e.hidden),
            raw: bool_field(body, "raw")
                .or(existing.map(|e| e.raw))
                .unwrap_or(false),
            environment_scope: string_field(body, "environment_scope")
                .or(existing.map(|e| e.environment_scope.clone()))
                .unwrap_or_else(|| "*".into()),
            description: match body.get("description") {
                Some(Value::String(text)) => Some(text.clone()),
                Some(Value::Null) => None,
                _ => existing.and_then(|e| e.description.clone()),
            },
        })
    }

    fn files(&self, request: &SimRequest, id: &str, file: &str, rest: &[&str]) -> SimResponse {
        let file_path = decode(file);
        let mut state = self.lock();
        let Some(project_id) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let full = Self::project_path(&state, &state.projects[&project_id]);
        match (request.method.as_str(), rest) {
            (method @ ("GET" | "HEAD"), rest @ ([] | ["raw"])) => {
                let reference = request
                    .query
                    .get("ref")
                    .cloned()
                    .or_else(|| state.projects[&project_id].default_branch.clone());
                drop(state);
                let Some(reference) = reference else {
                    return param_error("ref is missing");
                };
                let Some(content) = self.repos.read_file(&full, &reference, &file_path) else {
                    return not_found("File");
                };
                if rest == ["raw"] {
                    return SimResponse::text(200, &content);
                }
                let commit = self
                    .repos
                    .head(&full, &reference)
                    .unwrap_or_else(|| sha_of(&reference));
                if method == "HEAD" {
                    // GitLab answers HEAD with the file's metadata in headers and no body.
                    let name = file_path
                        .rsplit('/')
                        .next()
                        .unwrap_or(&file_path)
                        .to_string();
                    return SimResponse::empty(200)
                        .with_header("x-gitlab-file-name", name)
                        .with_header("x-gitlab-file-path", file_path.clone())
                        .with_header("x-gitlab-size", content.len().to_string())
                        .with_header("x-gitlab-encoding", "base64")
                        .with_header("x-gitlab-content-sha256", sha256_hex(&content))
                        .with_header("x-gitlab-ref", reference.clone())
                        .with_header("x-gitlab-blob-id", sha_of(&content))
                        .with_header("x-gitlab-commit-id", commit.clone())
                        .with_header("x-gitlab-last-commit-id", commit);
                }
                SimResponse::json(
                    200,
                    &json!({
                        "file_name": file_path.rsplit('/').next().unwrap_or(&file_path), "file_path": file_path, "size": content.len(),
                        "encoding": "base64", "content": base64::engine::general_purpose::STANDARD.encode(&content),
                        "content_sha256": sha256_hex(&content),
                        "ref": reference, "blob_id": sha_of(&content), "commit_id": commit, "last_commit_id": commit,
                    }),
                )
            }
            (method @ ("POST" | "PUT"), []) => {
                let body = request.json();
                let Some(branch) = string_field(&body, "branch") else {
                    return param_error("branch is missing");
                };
                let Some(mut content) = string_field(&body, "content") else {
                    return param_error("content is missing");
                };
                let Some(commit_message) = string_field(&body, "commit_message") else {
                    return param_error("commit_message is missing");
                };
                if string_field(&body, "encoding").as_deref() == Some("base64") {
                    match base64::engine::general_purpose::STANDARD
                        .decode(content.as_bytes())
                        .ok()
                        .and_then(|b| String::from_utf8(b).ok())
                    {
                        Some(decoded) => content = decoded,
                        None => return param_error("content is not valid base64"),
                    }
                }
                // `changes:` of the push pipeline compare with the branch's previous head.
                let before = self.repos.head(&full, &branch);
                // A new branch starts from `start_branch`; without it, only an empty
                // repository may get its first branch this way.
                if before.is_none() {
                    let start = string_field(&body, "start_branch");
                    let start_head = start
                        .as_deref()
                        .and_then(|start| self.repos.head(&full, start));
                    match start_head {
                        Some(head) => {
                            if let Err(error) = self.repos.create_branch(&full, &branch, &head) {
                                return message(
                                    500,
                                    &format!("500 Internal Server Error: {error}"),
                                );
                            }
                        }
                        None if start.is_none() && self.repos.branches(&full).is_empty() => {}
                        None => {
                            return message(
                                400,
                                "You can only create or edit files when you are on a branch",
                            );
                        }
                    }
                }
                let current = self.repos.read_file(&full, &branch, &file_path);
                if method == "POST" && current.is_some() {
                    return message(400, "A file with this name already exists");
                }
                if method == "PUT" && current.is_none() {
                    return message(400, "A file with this name doesn't exist");
                }
                if method == "PUT" && current.as_deref() == Some(content.as_str()) {
                    return message(
                        400,
                        "You are attempting to update a file that has changed since you started editing it.",
                    );
                }
                if let Err(error) =
                    self.repos
                        .commit_file(&full, &branch, &file_path, &content, &commit_message)
                {
                    return message(500, &format!("500 Internal Server Error: {error}"));
                }
                self.after_api_commit(&mut state, project_id, &full, &branch, before.as_deref());
                drop(state);
                self.persist();
                SimResponse::json(
                    if method == "POST" { 201 } else { 200 },
                    &json!({"file_path": file_path, "branch": branch}),
                )
            }
            _ => message(404, "404 Not Found"),
        }
    }

    /// Git smart HTTP for `/<group>/<project>.git/...`, with basic auth (any user, a PAT as
    /// password) as GitLab accepts it.
    fn git_http(&self, request: &SimRequest, full: &str, rest: &str) -> SimResponse {
        let password = request
            .header("authorization")
            .and_then(|value| value.strip_prefix("Basic "))
            .and_then(|encoded| {
                base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .ok()
            })
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|pair| {
                pair.split_once(':')
                    .map(|(_, password)| password.to_string())
            });
        let Some(user) = password.as_ref().and_then(|token| self.token_user(token)) else {
            return SimResponse::text(401, "HTTP Basic: Access denied\n")
                .with_header("www-authenticate", "Basic realm=\"GitLab\"");
        };
        let project_id = {
            let state = self.lock();
            Self::find_project(
                &state,
                &percent_encoding::utf8_percent_encode(full, percent_encoding::NON_ALPHANUMERIC)
                    .to_string(),
            )
            // A project the user may not see answers as one that does not exist.
            .filter(|id| Self::project_visible(&state, user, &state.projects[id]))
        };
        let Some(project_id) = project_id else {
            return SimResponse::text(
                404,
                "The project you were looking for could not be found or you don't have permission to view it.\n",
            );
        };
        let pushing = request.method == "POST" && rest == "git-receive-pack";
        if pushing
            && let Some(declined) = self.push_refusal(&self.lock(), user, project_id, &request.body)
        {
            return declined;
        }
        let before: Vec<(String, Option<String>)> = if pushing {
            self.repos
                .branches(full)
                .into_iter()
                .map(|b| {
                    let head = self.repos.head(full, &b);
                    (b, head)
                })
                .collect()
        } else {
            Vec::new()
        };
        let response = self
            .repos
            .http_backend(request, &format!("/{full}.git/{rest}"), "root");
        if pushing {
            // GitLab starts a pipeline for every pushed branch that has a CI configuration.
            for branch in self.repos.branches(full) {
                let head = self.repos.head(full, &branch);
                if before.iter().any(|(b, h)| *b == branch && *h == head) {
                    continue;
                }
                // `changes:` compares with the branch's previous head; a new branch has none.
                let previous = before
                    .iter()
                    .find(|(b, _)| *b == branch)
                    .and_then(|(_, h)| h.clone());
                let mut state = self.lock();
                let _ = self.start_pipeline(
                    &mut state,
                    project_id,
                    &branch,
                    "push",
                    previous.as_deref(),
                );
            }
        };
        if request.method == "POST" && rest == "git-receive-pack" {
            let mut state = self.lock();
            if let Some(project) = state.projects.get_mut(&project_id)
                && project.default_branch.is_none()
            {
                let branches = self.repos.branches(full);
                let branch = if branches.iter().any(|b| b == "main") {
                    Some("main".to_string())
                } else {
                    branches.first().cloned()
                };
                if let Some(branch) = branch {
                    self.repos.set_head(full, &branch);
                    project.default_branch = Some(branch);
                }
            }
            drop(state);
            self.persist();
        }
        response
    }

    fn create_pipeline(&self, request: &SimRequest, id: &str) -> SimResponse {
        let body = request.json();
        let Some(reference) = string_field(&body, "ref") else {
            return param_error("ref is missing");
        };
        let mut state = self.lock();
        let Some(project_id) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        match self.start_pipeline(&mut state, project_id, &reference, "api", None) {
            Ok(pipeline_id) => {
                let mut answer = self.pipeline_json(&state, &state.pipelines[&pipeline_id]);
                answer["status"] = json!("created");
                drop(state);
                self.persist();
                SimResponse::json(201, &answer)
            }
            Err(error) => field_errors(json!({"base": error.messages()})),
        }
    }

    /// Creates a pipeline for `reference`. An API request with an invalid configuration is
    /// refused with GitLab's messages; a push with one gets a failed pipeline carrying
    /// `yaml_errors` (as GitLab does). A push without `.gitlab-ci.yml` starts nothing.
    fn start_pipeline(
        &self,
        state: &mut State,
        project_id: u64,
        reference: &str,
        source: &str,
        before: Option<&str>,
    ) -> Result<u64, ci::CiError> {
        let project = &state.projects[&project_id];
        let this_path = Self::project_path(state, project);
        if !self.repos.branch_exists(&this_path, reference) {
            return Err(ci::CiError::Invalid(vec![
                "Reference not found".to_string(),
            ]));
        }
        let Some(config) = self
            .repos
            .read_file(&this_path, reference, ".gitlab-ci.yml")
        else {
            return Err(ci::CiError::Invalid(vec![
                "Missing CI config file".to_string(),
            ]));
        };
        let after = self.repos.head(&this_path, reference);
        // A push skipped by its commit message: a skipped pipeline, nothing evaluated.
        if source == "push"
            && let Some(head) = &after
            && self
                .repos
                .commit_info(&this_path, head)
                .is_some_and(|(info, _)| skips_ci(&info.message))
        {
            let id = state.id();
            let iid = state
                .pipelines
                .values()
                .filter(|p| p.project_id == project_id)
                .count() as u64
                + 1;
            state.pipelines.insert(
                id,
                Pipeline {
                    id,
                    iid,
                    project_id,
                    reference: reference.to_string(),
                    sha: head.clone(),
                    created_ms: now_ms(),
                    created_at: timestamp(),
                    jobs: Vec::new(),
                    source: source.to_string(),
                    yaml_errors: None,
                    skipped: true,
                },
            );
            return Ok(id);
        }
        let context = ci::Context {
            source,
            reference,
            default_branch: project.default_branch.as_deref(),
            project_path: &this_path,
            variables: state
                .variables
                .get(&project_id)
                .map(|list| {
                    list.iter()
                        .filter(|v| v.environment_scope == "*")
                        .map(|v| (v.key.clone(), v.value.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            files: self.repos.list_files(&this_path, reference),
            changed: match (before, &after) {
                (Some(before), Some(after)) => {
                    Some(self.repos.changed_files(&this_path, before, after))
                }
                _ => None,
            },
        };
        let resolved = {
            let state: &State = state;
            let fetch = |from: Option<&str>,
                         at: &str,
                         file: &str|
             -> Result<Option<String>, String> {
                let project = match from {
                    None => Some(project_id),
                    Some(path) if path == this_path => Some(project_id),
                    Some(path) => Self::find_project(
                        state,
                        &percent_encoding::utf8_percent_encode(
                            path,
                            percent_encoding::NON_ALPHANUMERIC,
                        )
                        .to_string(),
                    ),
                };
                let Some(project) = project.and_then(|id| state.projects.get(&id)) else {
                    return Err(format!(
                        "Project `{}` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined.",
                        from.unwrap_or_default()
                    ));
                };
                let full = Self::project_path(state, project);
                let at = if at == "HEAD" {
                    project
                        .default_branch
                        .clone()
                        .unwrap_or_else(|| "main".into())
                } else {
                    at.to_string()
                };
                if !self.repos.branch_exists(&full, &at) {
                    return Err(format!("Project `{full}` reference `{at}` does not exist!"));
                }
                Ok(self.repos.read_file(&full, &at, file))
            };
            ci::resolve(&config, &context, &fetch)
        };
        let (jobs, yaml_errors) = match resolved {
            Ok(jobs) => (jobs, None),
            Err(ci::CiError::Invalid(errors)) if source == "push" => {
                (Vec::new(), Some(errors.join("; ")))
            }
            Err(error) => return Err(error),
        };
        let sha = after.unwrap_or_else(|| sha_of(&config));
        let id = state.id();
        let iid = state
            .pipelines
            .values()
            .filter(|p| p.project_id == project_id)
            .count() as u64
            + 1;
        let mut pipeline_jobs = Vec::new();
        for job in jobs {
            let job_id = state.id();
            pipeline_jobs.push(Job {
                id: job_id,
                name: job.name,
                stage: job.stage,
                script: job.script,
                tags: job.tags,
                picked_ms: None,
                runner_id: None,
                when: job.when,
                run: job.run,
                executes: false,
                outcome: None,
            });
        }
        let pipeline = Pipeline {
            id,
            iid,
            project_id,
            reference: reference.to_string(),
            sha,
            created_ms: now_ms(),
            created_at: timestamp(),
            jobs: pipeline_jobs,
            source: source.to_string(),
            yaml_errors,
            skipped: false,
        };
        state.pipelines.insert(id, pipeline);
        Ok(id)
    }
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

/// How often the runner stand-in asks for jobs: GitLab Runner's `check_interval` is 3 s; the
/// stand-in asks more often so short simulated pipelines are not dominated by the wait.
pub fn standin_interval(pipeline_seconds: f64) -> Duration {
    Duration::from_secs_f64((pipeline_seconds / 6.0).clamp(0.05, 3.0))
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
    let mut headers = hyper::HeaderMap::new();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    let body = json!({
        "token": token,
        "info": {"name": "gitlab-runner", "version": "17.9.0", "executor": "kubernetes", "features": {}},
    });
    let request = SimRequest {
        method: "POST".to_string(),
        path: "/api/v4/jobs/request".to_string(),
        query: BTreeMap::new(),
        query_pairs: Vec::new(),
        headers,
        body: serde_json::to_vec(&body).unwrap_or_default().into(),
        upgrade: None,
    };
    let _ = sim.handle(request);
}

/// Runs the simulator until Ctrl-C or SIGTERM; prints `GITLAB_URL=...` and `GITLAB_TOKEN=...`.
pub fn run(config: Config) -> Result<(), String> {
    let address = super::http::loopback(&config.listen)?;
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
        let server = tokio::spawn(super::http::serve(listener, sim));
        super::http::shutdown_signal().await?;
        server.abort();
        if let Some(runner) = runner {
            runner.abort();
        }
        super::ci_jobs::stop_running_jobs();
        tokio::time::sleep(Duration::from_millis(10)).await;
        if let Some(folder) = &temporary_repos {
            let _ = std::fs::remove_dir_all(folder);
        };
        Ok(())
    })
}

#[cfg(test)]
mod skip_tests {
    #[test]
    fn the_skip_pattern_is_gitlabs() {
        for message in [
            "docs [skip ci]",
            "[CI SKIP] x",
            "a\n\n[skip-ci]",
            "[ci_skip]",
        ] {
            assert!(super::skips_ci(message), "{message}");
        }
        for message in ["skip ci", "[skipci]", "[ci  skip]", "(skip ci)"] {
            assert!(!super::skips_ci(message), "{message}");
        }
    }
}

#[cfg(test)]
mod runner_creation_tests {
    use super::*;

    #[test]
    fn creating_a_runner_again_reuses_it_and_retires_the_old_token() {
        let sim = GitlabSim::new(Config::default()).expect("sim");
        let first = sim.create_instance_runner("blueprint gitlab-runner");
        let second = sim.create_instance_runner("blueprint gitlab-runner");
        let other = sim.create_instance_runner("another runner");
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
}
