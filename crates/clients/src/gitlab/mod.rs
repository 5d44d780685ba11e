//! GitLab REST API v4 over reqwest (rustls): timeouts on every request; retries with exponential
//! backoff and jitter for 429 (honouring `Retry-After` / `RateLimit-Reset`), 5xx and connection
//! errors on GET/PUT/DELETE; a POST is never blindly retried: after an ambiguous failure the
//! caller's read-back decides whether it happened. Pagination and URL-encoding live here too.
//!
//! The domain sits in one file per resource (groups, projects, variables, files, pipelines):
//! typed operations that read, compare and write only what differs, returning what changed.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{ClientError, ErrorKind, Remedy};
use crate::secret::Secret;

mod branches;
pub mod control;
mod files;
mod groups;
pub mod pipelines;
mod probes;
mod projects;
pub mod reads;
pub mod rules;
mod runners;
mod tokens;
mod variables;

pub use branches::{BranchAccess, BranchProtection};
pub use groups::{Group, GroupSpec};
pub use pipelines::{Pipeline, PipelineRef, Reuse, Started, WaitParams};
pub use probes::{AccessReport, PROBE_PREFIX, Verdict};
pub use projects::{Project, ProjectSpec};
pub use tokens::TokenInfo;
pub use variables::{Removal, Variable, VariableCounts};

/// The timeout of every request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts per request (the first one included).
pub const MAX_ATTEMPTS: u32 = 6;
/// The longest single wait between attempts (also caps `Retry-After`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Pagination stops after this many pages.
pub const MAX_PAGES: usize = 1000;
/// Reads one process keeps in flight to one GitLab at most: a no-op re-run is all reads, and
/// overlapping them is what brings it to its critical path; GitLab's Puma serves reads cheaply.
pub const MAX_CONCURRENT_READS: usize = 32;
pub use crate::net::MAX_CONCURRENT_WRITES;

/// Characters left as they are in a path segment: GitLab wants `/` encoded as `%2F`.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Encodes a project path, group path, file path or ref as one URL path segment.
pub fn encode(segment: &str) -> String {
    utf8_percent_encode(segment, SEGMENT).to_string()
}

/// What may follow a project's path in an API path (`projects/<path>/<resource>`).
const PROJECT_RESOURCES: &[&str] = &[
    "access_requests",
    "access_tokens",
    "approvals",
    "archive",
    "badges",
    "boards",
    "cluster_agents",
    "custom_attributes",
    "deploy_keys",
    "deploy_tokens",
    "deployments",
    "environments",
    "events",
    "export",
    "feature_flags",
    "fork",
    "forks",
    "freeze_periods",
    "hooks",
    "housekeeping",
    "import",
    "integrations",
    "invitations",
    "issues",
    "jobs",
    "labels",
    "languages",
    "members",
    "merge_requests",
    "milestones",
    "mirror",
    "packages",
    "pages",
    "pipeline",
    "pipeline_schedules",
    "pipelines",
    "protected_branches",
    "protected_tags",
    "registry",
    "releases",
    "remote_mirrors",
    "repository",
    "resource_groups",
    "runners",
    "search",
    "secure_files",
    "share",
    "snippets",
    "star",
    "starrers",
    "statistics",
    "templates",
    "terraform",
    "transfer",
    "triggers",
    "unarchive",
    "uploads",
    "users",
    "variables",
    "wikis",
];
/// What may follow a group's path (`groups/<path>/<resource>`).
const GROUP_RESOURCES: &[&str] = &[
    "access_tokens",
    "archive",
    "audit_events",
    "avatar",
    "badges",
    "billable_members",
    "clusters",
    "custom_attributes",
    "deploy_tokens",
    "descendant_groups",
    "epics",
    "hooks",
    "invitations",
    "issues",
    "labels",
    "ldap_group_links",
    "members",
    "merge_requests",
    "milestones",
    "packages",
    "projects",
    "registry",
    "runners",
    "saml_group_links",
    "search",
    "share",
    "subgroups",
    "transfer",
    "unarchive",
    "variables",
];

/// A raw API path with its project or group path written as GitLab shows it
/// (`projects/blueprint-apps/guestbook/pipelines`) encoded as the API wants it
/// (`projects/blueprint-apps%2Fguestbook/pipelines`). A numeric id, an already encoded path and
/// other paths are left as they are; a project path has at least two segments, and it ends
/// before the first segment naming one of its resources (a project named like a resource is
/// written encoded).
pub fn api_path(path: &str) -> String {
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    let trimmed = path.trim_start_matches('/');
    let segments: Vec<&str> = trimmed.split('/').collect();
    let (resources, least): (&[&str], usize) = match segments.first() {
        Some(&"projects") => (PROJECT_RESOURCES, 2),
        Some(&"groups") => (GROUP_RESOURCES, 1),
        _ => return with_query(path.to_string(), query),
    };
    let first = segments.get(1).copied().unwrap_or("");
    if first.is_empty() || first.chars().all(|c| c.is_ascii_digit()) || first.contains('%') {
        return with_query(path.to_string(), query);
    }
    let end = (1 + least..segments.len())
        .find(|&index| resources.contains(&segments[index]))
        .unwrap_or(segments.len());
    if end - 1 < least {
        return with_query(path.to_string(), query);
    }
    let mut encoded = vec![segments[0].to_string(), encode(&segments[1..end].join("/"))];
    encoded.extend(segments[end..].iter().map(|segment| segment.to_string()));
    with_query(encoded.join("/"), query)
}

fn with_query(path: String, query: Option<&str>) -> String {
    match query {
        Some(query) => format!("{path}?{query}"),
        None => path,
    }
}

#[derive(Debug, Clone)]
pub struct GitlabSettings {
    /// The instance URL, without `/api/v4`.
    pub url: String,
    pub token: Option<Secret>,
    pub ca_file: Option<PathBuf>,
    pub timeout: Duration,
    /// The first backoff; doubled each attempt (tests shorten it).
    pub base_backoff: Duration,
}

impl GitlabSettings {
    /// `GITLAB_URL` (or `CI_SERVER_URL`), `GITLAB_TOKEN`, `GITLAB_CACERT` (else the platform CA
    /// `infra/tls/wildcard/ca.pem` when it exists).
    pub fn from_env(root: &std::path::Path) -> Result<GitlabSettings, ClientError> {
        let var = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        };
        let url = var(&["GITLAB_URL", "CI_SERVER_URL"]).ok_or_else(|| {
            ClientError::new("GitLab's address is not set").with_hint("set GITLAB_URL, e.g. https://gitlab.local.example.net (or run against `bprun sim gitlab`)")
        })?;
        let mut settings = GitlabSettings::at(&url, root);
        settings.token = var(&["GITLAB_TOKEN"]).map(Secret::new);
        if let Some(ca) = var(&["GITLAB_CACERT"]) {
            settings.ca_file = Some(PathBuf::from(ca));
        }
        Ok(settings)
    }

    /// The GitLab at `url`, without a token, trusting the platform CA
    /// `infra/tls/wildcard/ca.pem` when it exists (for an address bprun found itself, such as a
    /// port-forward to the webservice).
    pub fn at(url: &str, root: &std::path::Path) -> GitlabSettings {
        let platform_ca = root.join("infra/tls/wildcard/ca.pem");
        GitlabSettings {
            url: url
                .trim_end_matches('/')
                .trim_end_matches("/api/v4")
                .to_string(),
            token: None,
            ca_file: platform_ca.exists().then_some(platform_ca),
            timeout: REQUEST_TIMEOUT,
            // BPRUN_GITLAB_BACKOFF_MS shortens the first backoff (tests with injected faults).
            base_backoff: std::env::var("BPRUN_GITLAB_BACKOFF_MS")
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map(Duration::from_millis)
                .unwrap_or(Duration::from_millis(200)),
        }
    }
}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub next_page: Option<String>,
}

/// A request, as the client sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

    fn reqwest(self) -> reqwest::Method {
        match self {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Delete => reqwest::Method::DELETE,
        }
    }
}

/// What one attempt produced.
enum Attempt {
    Done(Answer),
    /// GitLab answered with an error status.
    Status {
        status: u16,
        body: Value,
        text: String,
        retry_after: Option<Duration>,
    },
    /// No answer: `sent` is false when the connection never opened (safe to retry anything).
    Transport {
        message: String,
        sent: bool,
    },
}

/// GitLab's error message in either shape: a string, or a map of field -> list of messages.
pub fn error_message(body: &Value, text: &str) -> String {
    let message = body.get("message").or_else(|| body.get("error"));
    match message {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Object(fields)) => fields
            .iter()
            .map(|(field, messages)| {
                let messages: Vec<String> = match messages {
                    Value::Array(items) => items
                        .iter()
                        .map(|m| {
                            m.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| m.to_string())
                        })
                        .collect(),
                    other => vec![
                        other
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| other.to_string()),
                    ],
                };
                if field == "base" {
                    messages.join("; ")
                } else {
                    messages
                        .iter()
                        .map(|m| format!("{field} {m}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
        Some(other) => other.to_string(),
        None => text.trim().chars().take(300).collect(),
    }
}

pub struct GitlabClient {
    pub settings: GitlabSettings,
    http: reqwest::Client,
    token: RwLock<Option<Secret>>,
    requests: std::sync::Arc<AtomicU64>,
    mutating: std::sync::Arc<AtomicU64>,
    /// Shared by every `with_token` copy: the bounds are per GitLab, not per token.
    reads: std::sync::Arc<tokio::sync::Semaphore>,
    writes: std::sync::Arc<tokio::sync::Semaphore>,
    /// Tokens GitLab accepted in this run and their ids (a token's id never changes), so the
    /// token a script just checked is not looked up again.
    known_tokens: std::sync::Arc<std::sync::Mutex<Vec<(Secret, i64)>>>,
}

impl GitlabClient {
    pub fn new(settings: GitlabSettings) -> Result<GitlabClient, ClientError> {
        let mut builder = super::runtime::http_client_builder()
            .timeout(settings.timeout)
            .connect_timeout(Duration::from_secs(10));
        if let Some(ca) = &settings.ca_file {
            let pem = std::fs::read(ca).map_err(|error| {
                ClientError::new(format!(
                    "cannot read the GitLab CA file {}: {error}",
                    ca.display()
                ))
                .with_hint("GITLAB_CACERT must name a PEM file")
            })?;
            let certificate = reqwest::Certificate::from_pem(&pem).map_err(|error| {
                ClientError::new(format!(
                    "the GitLab CA file {} is not a PEM certificate: {error}",
                    ca.display()
                ))
            })?;
            builder = builder.add_root_certificate(certificate);
        }
        let http = builder.build().map_err(|error| {
            ClientError::new(format!("cannot build the GitLab HTTP client: {error}"))
        })?;
        let token = settings.token.clone();
        Ok(GitlabClient {
            settings,
            http,
            token: RwLock::new(token),
            requests: Default::default(),
            mutating: Default::default(),
            reads: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_READS)),
            writes: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_WRITES)),
            known_tokens: Default::default(),
        })
    }

    /// The HTTP status of `GET /-/health` (GitLab answers 200 `GitLab OK`), or why there was none.
    pub fn health_status(&self) -> Result<u16, String> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let request = self.http.get(format!("{}/-/health", self.settings.url));
        super::runtime::runtime()
            .block_on(async move {
                request
                    .send()
                    .await
                    .map(|response| response.status().as_u16())
            })
            .map_err(|error| super::error_chain(&error))
    }

    /// The same client (connections, CA, timeouts, request counts) sending `token` instead:
    /// for asking GitLab about a token other than the one in use.
    pub fn with_token(&self, token: &Secret) -> GitlabClient {
        let mut settings = self.settings.clone();
        settings.token = Some(token.clone());
        GitlabClient {
            settings,
            http: self.http.clone(),
            token: RwLock::new(Some(token.clone())),
            requests: self.requests.clone(),
            mutating: self.mutating.clone(),
            reads: self.reads.clone(),
            writes: self.writes.clone(),
            known_tokens: self.known_tokens.clone(),
        }
    }

    /// The token in use (for git over HTTP, which authenticates with the same PAT).
    pub fn token(&self) -> Option<Secret> {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_token(&self, token: Secret) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = Some(token);
    }

    /// Requests sent, and how many of them were POST/PUT/DELETE (for benchmarks and tests).
    pub fn request_counts(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::SeqCst),
            self.mutating.load(Ordering::SeqCst),
        )
    }

    fn api_url(&self, path: &str) -> String {
        format!(
            "{}/api/v4/{}",
            self.settings.url,
            path.trim_start_matches('/')
        )
    }

    fn attempt(&self, method: Method, url: &str, body: Option<&Value>) -> Attempt {
        self.requests.fetch_add(1, Ordering::SeqCst);
        if method != Method::Get {
            self.mutating.fetch_add(1, Ordering::SeqCst);
        }
        let mut request = self.http.request(method.reqwest(), url);
        if let Some(token) = self
            .token
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            request = request.header("PRIVATE-TOKEN", token.reveal());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let bound = if method == Method::Get {
            self.reads.clone()
        } else {
            self.writes.clone()
        };
        let result = super::runtime::runtime().block_on(async move {
            // Held until the answer is read; the semaphore is never closed, so no error.
            let _permit = bound.acquire_owned().await.ok();
            let response = request.send().await?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let text = response.text().await?;
            Ok::<_, reqwest::Error>((status, headers, text))
        });
        match result {
            Ok((status, headers, text)) => {
                let body: Value =
                    serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
                if (200..300).contains(&status) {
                    let next_page = next_page(&headers, url);
                    return Attempt::Done(Answer {
                        status,
                        body,
                        next_page,
                    });
                }
                Attempt::Status {
                    status,
                    body,
                    text,
                    retry_after: retry_after(&headers),
                }
            }
            Err(error) => {
                let sent = !error.is_connect();
                let mut message = error.to_string();
                let mut source = std::error::Error::source(&error);
                while let Some(cause) = source {
                    message = cause.to_string();
                    source = cause.source();
                }
                Attempt::Transport { message, sent }
            }
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let base = self
            .settings
            .base_backoff
            .saturating_mul(1 << attempt.min(10))
            .min(MAX_BACKOFF);
        // Jitter: between half and the whole delay, so clients do not retry in lockstep.
        base.mul_f64(0.5 + fastrand::f64() / 2.0)
    }

    fn failure(
        &self,
        method: Method,
        path: &str,
        status: Option<u16>,
        message: &str,
    ) -> ClientError {
        let shown = format!("/{}", path.trim_start_matches('/'));
        let headline = match status {
            Some(status) => format!("gitlab: {} {shown} -> {status}: {message}", method.name()),
            None => format!("gitlab: {} {shown} failed: {message}", method.name()),
        };
        let hint = match status {
            Some(401) => "the token is missing or invalid: set GITLAB_TOKEN to a valid one".to_string(),
            Some(403) => "the token lacks the permission or scope for this (phase 3 mints an admin PAT with api and sudo)".to_string(),
            Some(404) if message.contains("the GitLab simulator does not serve") => "this GitLab is bprun's simulator, which does not model this route: the call is right for a real GitLab, but cannot be rehearsed".to_string(),
            Some(404) if shown.contains("%2F") => "the path is encoded as GitLab wants it: check that the project or group exists and that the token may see it (a project the token may not see answers 404 too)".to_string(),
            Some(404) => "check the path; project and group paths are URL-encoded (blueprint-apps%2Fguestbook)".to_string(),
            Some(429) => "GitLab kept rate-limiting this client; wait and re-run".to_string(),
            Some(500..=599) => "GitLab is unhealthy: check the gitlab-webservice pods".to_string(),
            Some(_) => "see GitLab's message above".to_string(),
            None if message.contains("refused") || message.contains("dns") || message.contains("resolve") => {
                format!("is GitLab running and reachable at {}? (GITLAB_URL)", self.settings.url)
            }
            None if message.to_ascii_lowercase().contains("certificate") => match &self.settings.ca_file {
                Some(ca) => format!("TLS failed with the CA file {}", ca.display()),
                None => "TLS failed and no CA file was set: GITLAB_CACERT names the platform CA (infra/tls/wildcard/ca.pem)".to_string(),
            },
            None => format!("check that GitLab answers at {}", self.settings.url),
        };
        let error = match status {
            Some(status) => ClientError::new(headline).with_status(status),
            None => ClientError::new(headline).with_kind(ErrorKind::Transport),
        };
        let error = match status {
            Some(401) => error.with_remedy(Remedy::Login),
            _ => error,
        };
        error
            .with_hint(hint)
            .caused_by(format!("at {}", self.api_url(path)))
    }

    /// Sends a request with the retry rules above. `read_back` (for POST) answers "did the
    /// request take effect?" after an ambiguous failure: `Some(value)` is taken as the answer.
    pub fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        read_back: Option<&dyn Fn() -> Result<Option<Value>, ClientError>>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Answer, ClientError> {
        if method != Method::Get {
            crate::write_gate::before_remote_write(
                &format!(
                    "gitlab: {} /{}",
                    method.name(),
                    path.trim_start_matches('/')
                ),
                cancelled,
            )?;
        }
        let url = self.api_url(path);
        let idempotent = method != Method::Post;
        let mut last = String::new();
        let mut last_status = None;
        for attempt in 0..MAX_ATTEMPTS {
            if cancelled() {
                return Err(ClientError::new(format!(
                    "gitlab: {} /{path}: interrupted",
                    method.name()
                ))
                .with_kind(ErrorKind::Interrupted));
            }
            let wait = match self.attempt(method, &url, body) {
                Attempt::Done(answer) => return Ok(answer),
                Attempt::Status {
                    status: 429,
                    retry_after,
                    ..
                } => {
                    // Rate-limited requests were not processed: any method may be retried.
                    last = "Retry later".to_string();
                    last_status = Some(429);
                    retry_after
                        .unwrap_or_else(|| self.backoff(attempt))
                        .min(MAX_BACKOFF)
                }
                Attempt::Status {
                    status: status @ 500..=599,
                    body: error_body,
                    text,
                    ..
                } => {
                    last = error_message(&error_body, &text);
                    last_status = Some(status);
                    if !idempotent {
                        if let Some(found) = self.read_back(read_back)? {
                            return Ok(found);
                        }
                        if read_back.is_none() {
                            break;
                        }
                    }
                    self.backoff(attempt)
                }
                Attempt::Status {
                    status,
                    body: error_body,
                    text,
                    ..
                } => {
                    return Err(self.failure(
                        method,
                        path,
                        Some(status),
                        &error_message(&error_body, &text),
                    ));
                }
                Attempt::Transport { message, sent } => {
                    last = message;
                    last_status = None;
                    if sent && !idempotent {
                        if let Some(found) = self.read_back(read_back)? {
                            return Ok(found);
                        }
                        if read_back.is_none() {
                            break;
                        }
                    }
                    if !sent && last.contains("refused") && attempt >= 1 {
                        break;
                    }
                    self.backoff(attempt)
                }
            };
            if attempt + 1 < MAX_ATTEMPTS {
                let deadline = Instant::now() + wait;
                while Instant::now() < deadline {
                    if cancelled() {
                        break;
                    }
                    std::thread::sleep((deadline - Instant::now()).min(Duration::from_millis(50)));
                }
            }
        }
        Err(self.failure(method, path, last_status, &last))
    }

    fn read_back(
        &self,
        read_back: Option<&dyn Fn() -> Result<Option<Value>, ClientError>>,
    ) -> Result<Option<Answer>, ClientError> {
        match read_back {
            Some(check) => Ok(check()?.map(|body| Answer {
                status: 201,
                body,
                next_page: None,
            })),
            None => Ok(None),
        }
    }

    pub fn get(&self, path: &str, cancelled: &dyn Fn() -> bool) -> Result<Value, ClientError> {
        self.request(Method::Get, path, None, None, cancelled)
            .map(|answer| answer.body)
    }

    /// `GET`, with 404 as `None`.
    pub fn find(
        &self,
        path: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Value>, ClientError> {
        match self.request(Method::Get, path, None, None, cancelled) {
            Ok(answer) => Ok(Some(answer.body)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Every item of a paginated list (`per_page=100`), following `x-next-page` or `link`.
    pub fn get_all(
        &self,
        path: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut next = Some(format!("{path}{separator}per_page=100"));
        let mut items = Vec::new();
        for _ in 0..MAX_PAGES {
            let Some(current) = next.take() else {
                return Ok(items);
            };
            let answer = self.request(Method::Get, &current, None, None, cancelled)?;
            match answer.body {
                Value::Array(page) => items.extend(page),
                other => {
                    return Err(ClientError::new(format!(
                        "gitlab: GET /{current} did not return a list: {}",
                        other.to_string().chars().take(200).collect::<String>()
                    )));
                }
            }
            next = answer.next_page;
        }
        Err(
            ClientError::new(format!("gitlab: GET /{path}: more than {MAX_PAGES} pages"))
                .with_hint("narrow the query"),
        )
    }
}

/// The next page's path (relative to /api/v4): `x-next-page` for offset pagination, else the
/// `link` header's rel="next" (keyset pagination).
fn next_page(headers: &reqwest::header::HeaderMap, url: &str) -> Option<String> {
    let relative = |full: &str| {
        full.split_once("/api/v4/")
            .map(|(_, rest)| rest.to_string())
    };
    if let Some(page) = headers
        .get("x-next-page")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
    {
        let mut parsed = reqwest::Url::parse(url).ok()?;
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .filter(|(k, _)| k != "page")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        parsed
            .query_pairs_mut()
            .clear()
            .extend_pairs(pairs)
            .append_pair("page", page);
        return relative(parsed.as_str());
    }
    let link = headers.get("link").and_then(|v| v.to_str().ok())?;
    link.split(',')
        .find(|part| part.contains("rel=\"next\""))
        .and_then(|part| {
            let start = part.find('<')? + 1;
            let end = part.find('>')?;
            relative(&part[start..end])
        })
}

/// `Retry-After` (seconds) or `RateLimit-Reset` (Unix time) as a wait.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(seconds) = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return Some(Duration::from_secs(seconds));
    }
    let reset = headers
        .get("ratelimit-reset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(reset.saturating_sub(now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_path_gets_its_project_or_group_path_encoded_and_nothing_else() {
        for (raw, sent) in [
            (
                "projects/blueprint-apps/guestbook/pipelines?ref=main",
                "projects/blueprint-apps%2Fguestbook/pipelines?ref=main",
            ),
            (
                "projects/blueprint-apps/guestbook",
                "projects/blueprint-apps%2Fguestbook",
            ),
            (
                "projects/a/b/c/jobs/7/retry",
                "projects/a%2Fb%2Fc/jobs/7/retry",
            ),
            (
                "projects/blueprint-apps/pipelines/pipelines",
                "projects/blueprint-apps%2Fpipelines/pipelines",
            ),
            (
                "groups/blueprint-apps/projects",
                "groups/blueprint-apps/projects",
            ),
            (
                "groups/parent/child/variables",
                "groups/parent%2Fchild/variables",
            ),
            (
                "projects/blueprint-apps%2Fguestbook/jobs",
                "projects/blueprint-apps%2Fguestbook/jobs",
            ),
            ("projects/12/pipelines", "projects/12/pipelines"),
            ("/user", "/user"),
            ("projects?search=x", "projects?search=x"),
        ] {
            assert_eq!(api_path(raw), sent, "{raw}");
        }
    }
    use serde_json::json;

    #[test]
    fn paths_are_encoded_as_one_segment() {
        assert_eq!(
            encode("blueprint-apps/guestbook"),
            "blueprint-apps%2Fguestbook"
        );
        assert_eq!(
            encode("templates/app.gitlab-ci.yml"),
            "templates%2Fapp.gitlab-ci.yml"
        );
        assert_eq!(encode("feature/a b"), "feature%2Fa%20b");
    }

    #[test]
    fn both_error_shapes_read_well() {
        assert_eq!(
            error_message(&json!({"message": "404 Project Not Found"}), ""),
            "404 Project Not Found"
        );
        assert_eq!(
            error_message(
                &json!({"message": {"name": ["has already been taken"], "path": ["has already been taken"]}}),
                ""
            ),
            "name has already been taken, path has already been taken"
        );
        assert_eq!(
            error_message(&json!({"error": "ref is missing"}), ""),
            "ref is missing"
        );
        assert_eq!(
            error_message(
                &json!({"message": {"base": ["Missing CI config file"]}}),
                ""
            ),
            "Missing CI config file"
        );
        assert_eq!(
            error_message(&Value::String("Retry later\n".into()), "Retry later\n"),
            "Retry later"
        );
    }
}
