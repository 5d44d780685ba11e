//! GitLab's images, as the GitLab chart and the GitLab Runner chart run them:
//!
//! - **webservice** (`gitlab-webservice-ee|ce`, with `gitlab-workhorse-ee|ce` beside it): when
//!   the pod starts, Rails connects to its database with what the chart gave it (host, port,
//!   database and user of `database.yml.erb`, the password of the projected psql Secret at
//!   `postgres/psql-password-main`) against the simulated PostgreSQL of the CloudNativePG
//!   Cluster the host names ([`super::postgres`]). A refused connection is the process exiting
//!   with PostgreSQL's words (`FATAL:  password authentication failed for user "gitlab"`), so
//!   the pod crash-loops and is never Ready. Once it runs, its ports 8080 and 8181 forward to
//!   the GitLab simulator, and GitLab is served through the Gateway only while some webservice
//!   pod is Ready ([`Gateway`]: Envoy's `503 no healthy upstream` otherwise).
//! - **webservice and Redis**: once the database answers, Rails connects to Redis as its
//!   redis-rb client does (`rails_redis`): the host and port of `resque.yml.erb`'s URL resolved
//!   as a Service name ([`Host::resolve`]), `AUTH` with the password the URL reads
//!   (`/etc/gitlab/redis/redis-password`, projected from `global.redis.auth`), then `PING`,
//!   against the real `redis-server` of the Redis pod ([`super::redis`]). A refusal is the
//!   process exiting with redis-rb's words (`Redis::CannotConnectError: WRONGPASS invalid
//!   username-password pair or user is disabled.`, `Redis::CommandError: NOAUTH Authentication
//!   required.`, `Redis::CannotConnectError: getaddrinfo: Name or service not known
//!   (redis://HOST:PORT)`), so the pod crash-loops.
//! - **registry** (`gitlab-container-registry`): port 5000 answers the registry API's `GET /v2/`
//!   (200, `Docker-Distribution-API-Version: registry/2.0`) from a loopback listener per pod.
//! - **runner** (`gitlab-runner`): when the pod starts it verifies the token of its projected
//!   Secret (`runner-token`) against `CI_SERVER_URL` as `gitlab-runner register` does, exits
//!   with GitLab Runner's words when GitLab does not know it (`Verifying runner... is not
//!   valid`, `PANIC: Failed to verify the runner.`), and otherwise polls GitLab for jobs at a
//!   fixed interval until the pod goes, so the runner is online and pipelines run.
//!
//! The GitLab these programs serve and poll is attached by the embedded bare platform
//! ([`Link::attach`]). Without one (a plain `bprun sim kube`, the platform as phase 2 leaves
//! it) there is no GitLab to play: the pods run nothing and are Ready once running, as before.

use super::PodEndpoints;
use super::catalogue::{self, Image};
use super::service::Backend;
use super::{ExecCall, Host, Node, Program, volumes};
use crate::gitlab::GitlabSim;
use crate::http::{Accounting, FaultState, Handler, SimRequest, SimResponse};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Whether GitLab has a healthy backend: some webservice pod is Ready.
pub type Upstream = Arc<dyn Fn() -> bool + Send + Sync>;

/// The GitLab the programs reach.
#[derive(Clone)]
pub struct Attached {
    pub gitlab: Arc<GitlabSim>,
    /// Where GitLab is served without the Gateway (the webservice pods' ports forward here).
    pub backend: SocketAddr,
    /// Whether some webservice pod is Ready (what the Services and the Gateway route to).
    pub healthy: Upstream,
    /// How often a runner asks for jobs (GitLab Runner's `check_interval`, shortened as the
    /// simulator's runner stand-in does: `gitlab::standin_interval`).
    pub poll_interval: Duration,
    /// How a pod in a namespace reaches an `https://` URL now, trusting a CA ([`reach_url`]
    /// through the cluster, which the platform attaches): a runner dials on each attempt.
    pub redial: Redial,
}

/// `(url, namespace, ca)` -> whether a pod in `namespace` reaches `url` and trusts what it
/// presents with `ca` (Go's words when not).
pub type Redial = Arc<dyn Fn(&str, &str, Option<&str>) -> Result<(), String> + Send + Sync>;

/// Where the programs find their GitLab ([`super::Shared::gitlab`]).
#[derive(Default)]
pub struct Link(OnceLock<Attached>);

impl Link {
    /// Attaches the GitLab (once).
    pub fn attach(&self, attached: Attached) -> Result<(), String> {
        self.0
            .set(attached)
            .map_err(|_| "a GitLab is attached already".to_string())
    }

    pub fn get(&self) -> Option<&Attached> {
        self.0.get()
    }
}

fn is_web_image(image: &str, images: &[&str]) -> bool {
    images.contains(&crate::images::canonical_repository(image).as_str())
}

/// Whether some pod running a webservice container is Ready and not being deleted (an
/// endpoint the webservice Service, and so the Gateway's route, sends requests to).
pub fn webservice_ready(pods: &[Value]) -> bool {
    pods.iter().any(|pod| {
        let runs_webservice = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                is_web_image(
                    c["image"].as_str().unwrap_or(""),
                    catalogue::WEBSERVICE_IMAGES,
                )
            });
        let ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        runs_webservice && ready && !pod["metadata"]["deletionTimestamp"].is_string()
    })
}

/// [`webservice_ready`] on the simulator's pods, for as long as the simulator lives.
pub fn upstream<N: Node + 'static>(sim: &Arc<N>) -> Upstream {
    let weak = Arc::downgrade(sim);
    Arc::new(move || {
        weak.upgrade()
            .is_some_and(|sim| webservice_ready(&sim.store().all("pods")))
    })
}

/// What Envoy answers for a route whose backends are all unhealthy (no Ready endpoint).
pub fn no_healthy_upstream() -> SimResponse {
    SimResponse::bytes(503, "text/plain", b"no healthy upstream".to_vec())
        .with_header("server", "envoy")
}

/// GitLab behind the Gateway: served while [`Upstream`] says a webservice pod is Ready,
/// Envoy's 503 otherwise. The simulator's own endpoints (`/-/sim/...`) are always served.
pub struct Gateway {
    gitlab: Arc<GitlabSim>,
    healthy: Upstream,
}

impl Gateway {
    pub fn new(gitlab: Arc<GitlabSim>, healthy: Upstream) -> Gateway {
        Gateway { gitlab, healthy }
    }
}

impl Handler for Gateway {
    fn handle(&self, request: SimRequest) -> SimResponse {
        if request.path.starts_with("/-/sim/") || (self.healthy)() {
            self.gitlab.handle(request)
        } else {
            no_healthy_upstream()
        }
    }

    fn faults(&self) -> &FaultState {
        self.gitlab.faults()
    }

    fn accounting(&self) -> &Accounting {
        self.gitlab.accounting()
    }

    fn exempt(&self, path: &str) -> bool {
        self.gitlab.exempt(path)
    }
}

/// The `production.main` connection of a `database.yml(.erb)` as the chart renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub username: String,
}

/// Reads `host`, `port`, `database` and `username` of the first connection in a
/// `database.yml.erb` (`production: main: ...`); `None` without a host or a database.
pub fn database_config(text: &str) -> Option<DatabaseConfig> {
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let key = key.trim();
        if matches!(key, "host" | "port" | "database" | "username") && !values.contains_key(key) {
            let value = value
                .trim()
                .trim_matches('"')
                .trim_matches('\'')
                .to_string();
            if !value.is_empty() {
                values.insert(key, value);
            }
        }
    }
    Some(DatabaseConfig {
        host: values.remove("host")?,
        port: values
            .remove("port")
            .and_then(|p| p.parse().ok())
            .unwrap_or(5432),
        database: values.remove("database")?,
        username: values.remove("username").unwrap_or_else(|| "gitlab".into()),
    })
}

/// Connects as Rails does through libpq (the real `psql` of `bindir` with the pod's host,
/// user, database and password, `SELECT 1`) to what the host is behind its Service, and
/// returns the error libpq reports, in its words, as a pod would see them: the Service's name
/// and cluster IP on the chart's port, not the loopback address the simulator serves it at.
pub fn connect(
    config: &DatabaseConfig,
    password: &str,
    backend: &Backend,
    bindir: Option<&Path>,
) -> Result<(), String> {
    let at = |ip: &str| {
        format!(
            "connection to server at \"{}\" ({ip}), port {} failed: ",
            config.host, config.port
        )
    };
    match backend {
        Backend::Unknown => Err(format!(
            "could not translate host name \"{}\" to address: Name or service not known",
            config.host
        )),
        // glibc's resolver when its name server refuses (EAI_AGAIN).
        Backend::NoDns => Err(format!(
            "could not translate host name \"{}\" to address: Temporary failure in name resolution",
            config.host
        )),
        Backend::NotServing { ip } => Err(format!(
            "{}Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?",
            at(ip)
        )),
        Backend::Serving { ip, address } => {
            let Some(bindir) = bindir else {
                return Err(
                    "bprun-sim found no psql to connect with (./test.sh installs PostgreSQL)"
                        .into(),
                );
            };
            let mut command = std::process::Command::new(bindir.join("psql"));
            command
                .arg(format!(
                    "host={} port={} user={} dbname={} sslmode=disable connect_timeout=10",
                    address.ip(),
                    address.port(),
                    config.username,
                    config.database
                ))
                .args(["-X", "-tAc", "SELECT 1"])
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("PGPASSWORD", password)
                .env("PGAPPNAME", "puma");
            let outcome = super::process::run(command, b"", Duration::from_secs(20));
            if outcome.code == 0 {
                return Ok(());
            }
            let stderr = String::from_utf8_lossy(&outcome.stderr);
            Err(libpq_words(&stderr, *address, &at(ip)))
        }
    }
}

/// psql's error for a connection to `address` as the pod's libpq says it: without psql's
/// `psql: error: ` and with the Service's name, cluster IP and port where psql names the
/// loopback address.
pub fn libpq_words(stderr: &str, address: SocketAddr, pod_view: &str) -> String {
    let loopback = format!(
        "connection to server at \"{}\", port {} failed: ",
        address.ip(),
        address.port()
    );
    let text = stderr.trim_end();
    text.strip_prefix("psql: error: ")
        .unwrap_or(text)
        .replace(&loopback, pod_view)
}

/// Where Rails' Redis connection goes, as the `url` of `resque.yml.erb` says
/// (`redis://:<%= ERB::Util::url_encode(File.read("/etc/gitlab/redis/redis-password").strip) %>@HOST:PORT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    pub host: String,
    pub port: u16,
    pub password: Option<RedisPassword>,
}

/// The password of a Redis URL: read from a file by the ERB, or written in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisPassword {
    File(String),
    Literal(String),
}

/// Reads the first `url:` of a `resque.yml(.erb)`; `None` without a `redis://` URL.
pub fn redis_config(text: &str) -> Option<RedisConfig> {
    let url = text.lines().find_map(|line| {
        let (key, value) = line.trim().split_once(':')?;
        (key.trim() == "url").then(|| {
            value
                .trim()
                .trim_matches('"')
                .trim_matches('\'')
                .to_string()
        })
    })?;
    let rest = url.strip_prefix("redis://")?;
    let (userinfo, address) = match rest.rsplit_once('@') {
        Some((userinfo, address)) => (Some(userinfo), address),
        None => (None, rest),
    };
    let address = address.split('/').next().unwrap_or(address);
    let (host, port) = match address.rsplit_once(':') {
        Some((host, port)) => (host.to_string(), port.parse().ok()?),
        None => (address.to_string(), 6379),
    };
    let password = userinfo.and_then(|userinfo| {
        if let Some((_, after)) = userinfo.split_once("File.read(") {
            let path = after
                .split(')')
                .next()?
                .trim()
                .trim_matches('"')
                .trim_matches('\'');
            return Some(RedisPassword::File(path.to_string()));
        }
        let password = userinfo
            .split_once(':')
            .map_or(userinfo, |(_, password)| password);
        (!password.is_empty()).then(|| RedisPassword::Literal(password.to_string()))
    });
    Some(RedisConfig {
        host: host.to_string(),
        port,
        password,
    })
}

/// One reply of a Redis server to a command (a RESP2 simple string or error line; the
/// commands sent here answer nothing else): `Ok(status)` or `Err(error)`.
fn redis_reply(reader: &mut impl std::io::BufRead) -> std::io::Result<Result<String, String>> {
    use std::io::{BufRead, Read};
    let mut line = String::new();
    reader.by_ref().take(64 * 1024).read_line(&mut line)?;
    let line = line.trim_end_matches(['\r', '\n']);
    match line.split_at_checked(1) {
        Some(("+", status)) => Ok(Ok(status.to_string())),
        Some(("-", error)) => Ok(Err(error.to_string())),
        _ if line.is_empty() => Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "Connection lost (ECONNRESET)",
        )),
        _ => Ok(Err(format!("unexpected reply {line:?}"))),
    }
}

/// A command in RESP2 (an array of bulk strings).
fn redis_command(words: &[&[u8]]) -> Vec<u8> {
    let mut bytes = format!("*{}\r\n", words.len()).into_bytes();
    for word in words {
        bytes.extend_from_slice(format!("${}\r\n", word.len()).as_bytes());
        bytes.extend_from_slice(word);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes
}

/// Connects to `backend` as Rails' redis-rb 5 client does on its first command (`AUTH` with
/// the password when the URL has one, then `PING`; a real client of the real server) and
/// returns redis-rb's error in its words: a refused `AUTH` is `Redis::CannotConnectError`
/// (redis-client's AuthenticationError), another error reply `Redis::CommandError`, a failed
/// connection `Redis::CannotConnectError` with the server's URL.
pub fn check_redis(
    config: &RedisConfig,
    password: Option<&str>,
    backend: &super::service::Backend,
) -> Result<(), String> {
    use super::service::Backend;
    use std::io::Write;
    let url = format!("redis://{}:{}", config.host, config.port);
    let cannot_connect = |why: &str| format!("Redis::CannotConnectError: {why} ({url})");
    let address = match backend {
        Backend::Unknown => return Err(cannot_connect("getaddrinfo: Name or service not known")),
        Backend::NoDns => {
            return Err(cannot_connect(
                "getaddrinfo: Temporary failure in name resolution",
            ));
        }
        Backend::NotServing { ip } => {
            return Err(cannot_connect(&format!(
                "Connection refused - connect(2) for {ip}:{}",
                config.port
            )));
        }
        Backend::Serving { address, .. } => *address,
    };
    let timeout = Duration::from_secs(5);
    let stream = std::net::TcpStream::connect_timeout(&address, timeout)
        .map_err(|error| cannot_connect(&error.to_string()))?;
    let lost = |error: std::io::Error| format!("Redis::ConnectionError: {error} ({url})");
    stream.set_read_timeout(Some(timeout)).map_err(lost)?;
    stream.set_write_timeout(Some(timeout)).map_err(lost)?;
    let mut writer = stream.try_clone().map_err(lost)?;
    let mut reader = std::io::BufReader::new(stream);
    if let Some(password) = password {
        writer
            .write_all(&redis_command(&[b"AUTH", password.as_bytes()]))
            .map_err(lost)?;
        match redis_reply(&mut reader).map_err(lost)? {
            Ok(_) => {}
            Err(error) if error.starts_with("WRONGPASS") => {
                return Err(format!("Redis::CannotConnectError: {error}"));
            }
            Err(error) => return Err(format!("Redis::CommandError: {error}")),
        }
    }
    writer.write_all(&redis_command(&[b"PING"])).map_err(lost)?;
    match redis_reply(&mut reader).map_err(lost)? {
        Ok(_) => Ok(()),
        Err(error) => Err(format!("Redis::CommandError: {error}")),
    }
}

/// Rails' Redis connection from the webservice pod: the `resque.yml.erb` of its volumes, the
/// password file its URL reads (`/etc/gitlab/...` is what the configure container copied from
/// the projected Secrets), checked against what the host resolves to. No `resque.yml.erb`: no
/// check.
fn rails_redis(
    host: &Host,
    pod: &Value,
    files: &dyn Fn(&str, &str) -> Option<Value>,
    namespace: &str,
) -> Result<(), String> {
    let Some(config) =
        volumes::find(pod, "resque.yml.erb", files).and_then(|(_, text)| redis_config(&text))
    else {
        return Ok(());
    };
    let password = match &config.password {
        None => None,
        Some(RedisPassword::Literal(password)) => Some(password.clone()),
        Some(RedisPassword::File(path)) => {
            let inside = path.strip_prefix("/etc/gitlab/").unwrap_or(path);
            let Some((_, text)) = volumes::find(pod, inside, files) else {
                return Err(format!(
                    "Errno::ENOENT: No such file or directory @ rb_sysopen - {path}"
                ));
            };
            Some(text.trim().to_string())
        }
    };
    let backend = host.resolve(&config.host, config.port, namespace);
    check_redis(&config, password.as_deref(), &backend)
}

/// The Secret and ConfigMap files of the pod a call runs in.
fn pod_of(call: &ExecCall, host: &Host) -> Option<Value> {
    host.object("pods", &call.namespace, &call.pod)
}

fn lookup<'a>(host: &'a Host, namespace: &'a str) -> impl Fn(&str, &str) -> Option<Value> + 'a {
    move |store_key: &str, name: &str| host.object(store_key, namespace, name)
}

/// GitLab's webservice pod: Rails (`webservice`, 8080) and Workhorse (`gitlab-workhorse`, 8181).
#[derive(Default)]
pub struct Webservice {
    /// PostgreSQL's programs (its `psql` connects as Rails would).
    bindir: Option<PathBuf>,
    /// Pods whose Rails started, and where GitLab serves them (their ports forward there).
    running: Mutex<BTreeMap<String, SocketAddr>>,
    /// (pod uid, container) -> its log.
    logs: Mutex<BTreeMap<(String, String), String>>,
}

impl Webservice {
    pub fn new(bindir: Option<PathBuf>) -> Webservice {
        Webservice {
            bindir,
            ..Webservice::default()
        }
    }

    fn log(&self, call: &ExecCall, text: String) {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((call.pod_uid.clone(), call.container.clone()), text);
    }
}

impl Program for Webservice {
    fn image(&self) -> &'static Image {
        &catalogue::GITLAB_WEBSERVICE
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        if !is_web_image(&call.image, catalogue::WEBSERVICE_IMAGES) {
            self.log(
                call,
                "Starting gitlab-workhorse, listening on :8181 (upstream http://localhost:8080)\n"
                    .into(),
            );
            return Ok(());
        }
        // Without a GitLab to play (a plain `bprun sim kube`), the pod runs nothing, as before.
        let Some(attached) = host.shared().gitlab.get() else {
            return Ok(());
        };
        let pod = pod_of(call, host).unwrap_or_default();
        let files = lookup(host, &call.namespace);
        let config = volumes::find(&pod, "database.yml.erb", &files)
            .and_then(|(_, text)| database_config(&text));
        let password = volumes::find(&pod, "postgres/psql-password-main", &files)
            .map(|(_, password)| password.trim().to_string());
        if let (Some(config), Some(password)) = (config, password) {
            let backend = host.resolve(&config.host, config.port, &call.namespace);
            if let Err(error) = connect(&config, &password, &backend, self.bindir.as_deref()) {
                let message = format!("ActiveRecord::ConnectionNotEstablished: {error}");
                self.log(call, format!("Starting Puma\n{message}\n"));
                return Err(message);
            }
        }
        if let Err(message) = rails_redis(host, &pod, &files, &call.namespace) {
            self.log(call, format!("Starting Puma\n{message}\n"));
            return Err(message);
        }
        self.log(
            call,
            "Starting Puma\n* Listening on http://0.0.0.0:8080\nUse Ctrl-C to stop\n".into(),
        );
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call.pod_uid.clone(), attached.backend);
        Ok(())
    }

    fn stop(&self, pod_uid: &str) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pod_uid);
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(uid, _), _| uid != pod_uid);
    }

    fn forward(&self, pod_uid: &str, port: u16) -> Option<SocketAddr> {
        if !matches!(port, 8080 | 8181) {
            return None;
        }
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(pod_uid)
            .copied()
    }

    fn logs(&self, call: &ExecCall) -> Option<String> {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(call.pod_uid.clone(), call.container.clone()))
            .cloned()
    }
}

use super::web::Task;

/// What a container registry's API root answers (any request): an empty 200 JSON object with
/// `Docker-Distribution-API-Version: registry/2.0`.
pub fn registry_root() -> SimResponse {
    SimResponse::bytes(200, "application/json", b"{}".to_vec())
        .with_header("docker-distribution-api-version", "registry/2.0")
}

/// GitLab's container registry: port 5000 of each pod is a loopback listener of its own.
#[derive(Default)]
pub struct Registry {
    served: super::web::Served,
}

impl Program for Registry {
    fn image(&self) -> &'static Image {
        &catalogue::GITLAB_REGISTRY
    }

    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        Some(&self.served)
    }

    fn start(&self, call: &ExecCall, _host: &Host) -> Result<(), String> {
        // A pod that names where its port 5000 is really served (the platform as phase 2
        // leaves it, and tests, with `sim.bprun.dev/forward-5000`) keeps that.
        if call.annotations.contains_key("sim.bprun.dev/forward-5000") {
            return Ok(());
        }
        self.served
            .listen(&call.pod_uid, 5000, None, |_| async {
                Some(registry_root())
            })
            .map_err(|error| format!("registry: {error}"))
    }
}

/// GitLab Runner's short form of a token in its log (`runner=` field): known prefixes
/// (`glrt-`, `t1_`, ...) stripped, the first nine characters.
pub fn short_token(token: &str) -> String {
    let mut rest = token;
    for prefix in ["glrt-", "glrtr-", "glcbt-"] {
        if let Some(stripped) = rest.strip_prefix(prefix) {
            rest = stripped;
            break;
        }
    }
    for partition in ["t1_", "t2_", "t3_"] {
        if let Some(stripped) = rest.strip_prefix(partition) {
            rest = stripped;
            break;
        }
    }
    rest.chars().take(9).collect()
}

/// One line of GitLab Runner's log: the message padded as its text formatter pads it, then
/// the fields.
fn runner_line(message: &str, fields: &str) -> String {
    if fields.is_empty() {
        format!("{message}\n")
    } else {
        format!("{message:<51} {fields}\n")
    }
}

/// What `gitlab-runner register` got when it verified the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// GitLab answered 200: the runner's id.
    Valid,
    /// GitLab answered 403: it does not know the token.
    Forbidden,
    /// GitLab could not be reached (nothing serves the URL): the error after `Post "URL":`.
    Unreachable(String),
}

/// The log of the chart's entrypoint registering the runner (`gitlab-runner register` with an
/// authentication token verifies it), in GitLab Runner 17's words; `Err` with the whole log when
/// it panics (the container exits).
pub fn register_log(url: &str, token: &str, verification: &Verification) -> Result<String, String> {
    register_attempt_log(1, url, token, verification)
}

/// The chart's entrypoint tries `gitlab-runner register` this many times, 5 s apart
/// (`register-the-runner`), before the container exits.
const REGISTER_ATTEMPTS: u32 = 30;
/// The pause between two attempts: the chart's 5 s, shortened as probe periods are.
const REGISTER_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Attempt `attempt` of the chart's registration loop, as [`register_log`] logs the first.
fn register_attempt_log(
    attempt: u32,
    url: &str,
    token: &str,
    verification: &Verification,
) -> Result<String, String> {
    let short = short_token(token);
    let mut log = format!("Registration attempt {attempt} of {REGISTER_ATTEMPTS}\n");
    log.push_str(&runner_line(
        "Runtime platform",
        "arch=amd64 os=linux pid=16 revision=374d34fd version=17.6.0",
    ));
    log.push_str("Running in system-mode.\n\n");
    let endpoint = format!("{}/api/v4/runners/verify", url.trim_end_matches('/'));
    match verification {
        Verification::Valid => {
            log.push_str(&runner_line(
                "Verifying runner... is valid",
                &format!("runner={short}"),
            ));
            log.push_str("Runner registered successfully. Feel free to start it, but if it's running already the config should be automatically reloaded!\n\n");
            log.push_str("Configuration (with the authentication token) was saved in \"/home/gitlab-runner/.gitlab-runner/config.toml\"\n");
            log.push_str(&runner_line(
                "Starting multi-runner from /home/gitlab-runner/.gitlab-runner/config.toml...",
                "builds=0 max_builds=4",
            ));
            Ok(log)
        }
        Verification::Forbidden => {
            log.push_str(&runner_line(
                "Verifying runner... is not valid",
                &format!("runner={short}"),
            ));
            log.push_str("PANIC: Failed to verify the runner.\n");
            Err(log)
        }
        Verification::Unreachable(error) => {
            log.push_str(&runner_line(
                "ERROR: Verifying runner... failed",
                &format!(
                    "runner={short} status=couldn't execute POST against {endpoint}: Post \"{endpoint}\": {error}"
                ),
            ));
            log.push_str("PANIC: Failed to verify the runner.\n");
            Err(log)
        }
    }
}

/// The `host:port` of a URL (`http://gitlab-webservice-default.gitlab.svc:8181` ->
/// `gitlab-webservice-default.gitlab.svc:8181`), with the scheme's default port.
fn host_port(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains(':') {
        authority.to_string()
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        format!("{authority}:{port}")
    }
}

/// The host of an `https://` URL (what the runner verifies a certificate for).
fn https_host(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let name = authority.split(':').next()?;
    (!name.is_empty()).then_some(name)
}

/// Whether a pod in `namespace` reaches an `https://` `url` and trusts what it presents with
/// `ca` (Go's words when not); a plain-HTTP URL is left to [`verify_token`].
pub fn reach_url(host: &Host, url: &str, namespace: &str, ca: Option<&str>) -> Result<(), String> {
    let Some(name) = https_host(url) else {
        return Ok(());
    };
    super::service::dial(host, name, 443, namespace)
        .map_err(|why| why.go_words(name, 443))
        .and_then(|()| super::service::handshake(host, name, 443, namespace, ca))
}

/// One attempt of `gitlab-runner register` from a pod in `namespace`: it dials `url` and
/// verifies what answers with `ca` ([`Attached::redial`]), then asks GitLab about `token`.
fn register_attempt(
    attached: &Attached,
    url: &str,
    namespace: &str,
    ca: Option<&str>,
    token: &str,
) -> Verification {
    match (attached.redial)(url, namespace, ca) {
        Ok(()) => verify_token(&attached.gitlab, &attached.healthy, url, token),
        Err(why) => Verification::Unreachable(why),
    }
}

/// What `gitlab-runner register` gets when it verifies `token` at `url`: GitLab's answer while
/// a webservice pod serves it, else the dial's error.
fn verify_token(gitlab: &GitlabSim, healthy: &Upstream, url: &str, token: &str) -> Verification {
    if url.is_empty() {
        return Verification::Unreachable("unsupported protocol scheme \"\"".to_string());
    }
    if !healthy() {
        return Verification::Unreachable(format!(
            "dial tcp {}: connect: connection refused",
            host_port(url)
        ));
    }
    match gitlab
        .handle(runner_request("/api/v4/runners/verify", token))
        .status
    {
        200 | 201 => Verification::Valid,
        _ => Verification::Forbidden,
    }
}

fn runner_request(path: &str, token: &str) -> SimRequest {
    let body = serde_json::to_vec(&json!({"token": token})).unwrap_or_default();
    SimRequest::local("POST", path, Some("application/json"), body)
}

/// GitLab Runner (the runner chart's Deployment).
#[derive(Default)]
pub struct Runner {
    /// pod uid -> its job polling.
    polls: Mutex<BTreeMap<String, Task>>,
    /// pod uid -> its log (the registration loop appends to it).
    logs: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Program for Runner {
    fn image(&self) -> &'static Image {
        &catalogue::GITLAB_RUNNER
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        // Without a GitLab to play (a plain `bprun sim kube`), the pod runs nothing, as before.
        let Some(attached) = host.shared().gitlab.get() else {
            return Ok(());
        };
        let url = super::env::lookup(&call.env, "CI_SERVER_URL")
            .unwrap_or("")
            .to_string();
        let pod = pod_of(call, host).unwrap_or_default();
        let token = volumes::find(&pod, "runner-token", &lookup(host, &call.namespace))
            .map(|(_, token)| token.trim().to_string())
            .unwrap_or_default();
        // The CA the runner trusts for its URL (`certs/<host>.crt`, the chart's
        // `certsSecretName`), which its jobs get too; and whether the URL's host answers and
        // presents a certificate that CA verifies.
        let server_tls_ca = https_host(&url).and_then(|name| {
            volumes::find(&pod, &format!("{name}.crt"), &lookup(host, &call.namespace))
                .map(|(_, ca)| ca)
        });
        attached.gitlab.set_runner_side(
            &token,
            crate::gitlab::RunnerSide {
                server_tls_ca: server_tls_ca.clone(),
            },
        );
        let verification = register_attempt(
            attached,
            &url,
            &call.namespace,
            server_tls_ca.as_deref(),
            &token,
        );
        let result = register_log(&url, &token, &verification);
        let log = match &result {
            Ok(log) | Err(log) => log.clone(),
        };
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call.pod_uid.clone(), log);
        // A GitLab that does not answer yet (its pods still starting, as after a node restart)
        // is tried again by the chart's loop; a token it refuses ends the container at once.
        let unreachable = matches!(verification, Verification::Unreachable(_));
        if !unreachable {
            result?;
        }
        let gitlab = attached.gitlab.clone();
        let healthy = attached.healthy.clone();
        let interval = attached.poll_interval;
        let attached = attached.clone();
        let namespace = call.namespace.clone();
        let (logs, uid) = (self.logs.clone(), call.pod_uid.clone());
        let poll = bprun_clients::runtime::runtime().spawn(async move {
            let mut attempt = 1;
            let mut registered = !unreachable;
            while !registered {
                if attempt == REGISTER_ATTEMPTS {
                    // The chart's loop exits here (not modelled: the container's restart).
                    return;
                }
                tokio::time::sleep(REGISTER_RETRY).await;
                attempt += 1;
                // Each attempt dials again, as `gitlab-runner register` does.
                let asked = (
                    attached.clone(),
                    url.clone(),
                    namespace.clone(),
                    server_tls_ca.clone(),
                    token.clone(),
                );
                let Ok(verification) = tokio::task::spawn_blocking(move || {
                    let (attached, url, namespace, ca, token) = asked;
                    register_attempt(&attached, &url, &namespace, ca.as_deref(), &token)
                })
                .await
                else {
                    return;
                };
                let (Ok(log) | Err(log)) =
                    register_attempt_log(attempt, &url, &token, &verification);
                if let Some(kept) = logs.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&uid) {
                    kept.push_str(&log);
                }
                match verification {
                    Verification::Valid => registered = true,
                    Verification::Forbidden => return,
                    Verification::Unreachable(_) => {}
                }
            }
            loop {
                if healthy() {
                    let gitlab = gitlab.clone();
                    let token = token.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        crate::gitlab::standin_poll(&gitlab, &token)
                    })
                    .await;
                }
                tokio::time::sleep(interval).await;
            }
        });
        self.polls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call.pod_uid.clone(), Task(poll));
        Ok(())
    }

    fn stop(&self, pod_uid: &str) {
        self.polls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pod_uid);
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pod_uid);
    }

    fn logs(&self, call: &ExecCall) -> Option<String> {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&call.pod_uid)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATABASE_YML: &str = r#"production:
  main:
    host: "postgresql-cnpg-rw.postgresql.svc"
    port: 5432
    database: gitlabhq_production
    username: gitlab
    password: <%= File.read("/etc/gitlab/postgres/psql-password-main").strip.to_json %>
"#;

    fn config() -> DatabaseConfig {
        database_config(DATABASE_YML).expect("a connection")
    }

    #[test]
    fn the_rendered_database_yml_names_the_connection() {
        assert_eq!(
            config(),
            DatabaseConfig {
                host: "postgresql-cnpg-rw.postgresql.svc".into(),
                port: 5432,
                database: "gitlabhq_production".into(),
                username: "gitlab".into(),
            }
        );
        assert_eq!(
            database_config("production:\n  main:\n    port: 5432\n"),
            None
        );
    }

    #[test]
    fn psqls_error_is_said_as_the_pods_libpq_says_it() {
        let address: SocketAddr = "127.0.0.1:41234".parse().expect("an address");
        let pod_view = "connection to server at \"postgresql-cnpg-rw.postgresql.svc\" (10.96.0.21), port 5432 failed: ";
        assert_eq!(
            libpq_words(
                "psql: error: connection to server at \"127.0.0.1\", port 41234 failed: FATAL:  password authentication failed for user \"gitlab\"\n",
                address,
                pod_view
            ),
            "connection to server at \"postgresql-cnpg-rw.postgresql.svc\" (10.96.0.21), port 5432 failed: FATAL:  password authentication failed for user \"gitlab\""
        );
        assert_eq!(
            libpq_words("something else\n", address, pod_view),
            "something else"
        );
    }

    #[test]
    fn no_server_behind_the_host_is_libpqs_connection_error() {
        assert_eq!(
            connect(&config(), "s3cret", &Backend::Unknown, None),
            Err("could not translate host name \"postgresql-cnpg-rw.postgresql.svc\" to address: Name or service not known".into())
        );
        let refused = connect(
            &config(),
            "s3cret",
            &Backend::NotServing {
                ip: "10.96.0.21".into(),
            },
            None,
        )
        .unwrap_err();
        assert!(
            refused.starts_with("connection to server at \"postgresql-cnpg-rw.postgresql.svc\" (10.96.0.21), port 5432 failed: Connection refused"),
            "{refused}"
        );
    }

    fn pod(image: &str, ready: &str, deleting: bool) -> Value {
        let mut pod = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "webservice", "image": image}]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        });
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        pod
    }

    #[test]
    fn gitlab_has_a_healthy_upstream_only_with_a_ready_webservice_pod() {
        let webservice = "registry.gitlab.com/gitlab-org/build/cng/gitlab-webservice-ee:v19.1.1";
        assert!(!webservice_ready(&[]));
        assert!(!webservice_ready(&[pod(webservice, "False", false)]));
        assert!(!webservice_ready(&[pod(webservice, "True", true)]));
        assert!(!webservice_ready(&[pod(
            "registry.gitlab.com/gitlab-org/build/cng/gitlab-sidekiq-ee:v19.1.1",
            "True",
            false
        )]));
        assert!(webservice_ready(&[
            pod(webservice, "False", false),
            pod(
                "registry.gitlab.com/gitlab-org/build/cng/gitlab-webservice-ce:v19.1.1",
                "True",
                false
            ),
        ]));
        let answer = no_healthy_upstream();
        assert_eq!(answer.status, 503);
    }

    #[test]
    fn runner_tokens_are_shortened_as_gitlab_runner_logs_them() {
        assert_eq!(short_token("glrt-abcdefghijklmnop"), "abcdefghi");
        assert_eq!(short_token("glrt-t1_abcdefghijk"), "abcdefghi");
        assert_eq!(short_token("bogus"), "bogus");
    }

    #[test]
    fn registering_with_an_unknown_token_panics_in_gitlab_runners_words() {
        let url = "http://gitlab-webservice-default.gitlab.svc:8181";
        let log = register_log(url, "glrt-bogus0123456789", &Verification::Forbidden)
            .expect_err("a panic");
        assert!(
            log.contains(&format!(
                "{:<51} runner=bogus0123\n",
                "Verifying runner... is not valid"
            )),
            "{log}"
        );
        assert!(
            log.ends_with("PANIC: Failed to verify the runner.\n"),
            "{log}"
        );
        let refused = register_log(
            url,
            "glrt-abc",
            &Verification::Unreachable(format!(
                "dial tcp {}: connect: connection refused",
                host_port(url)
            )),
        )
        .expect_err("a panic");
        assert!(
            refused.contains("ERROR: Verifying runner... failed"),
            "{refused}"
        );
        assert!(refused.contains("runner=abc status=couldn't execute POST against http://gitlab-webservice-default.gitlab.svc:8181/api/v4/runners/verify: Post \"http://gitlab-webservice-default.gitlab.svc:8181/api/v4/runners/verify\": dial tcp gitlab-webservice-default.gitlab.svc:8181: connect: connection refused"), "{refused}");
        let valid = register_log(url, "glrt-abc", &Verification::Valid).expect("registered");
        assert!(valid.contains("Verifying runner... is valid"), "{valid}");
        assert_eq!(
            host_port("https://gitlab.example.com/"),
            "gitlab.example.com:443"
        );
    }
}

#[cfg(test)]
mod redis_tests {
    use super::*;
    use crate::kube::programs::service::Backend;

    const RESQUE_YML: &str = "production:\n  url: redis://:<%= ERB::Util::url_encode(File.read(\"/etc/gitlab/redis/redis-password\").strip) %>@redis-master.redis.svc:6379\n";

    #[test]
    fn the_rendered_resque_yml_names_the_host_port_and_password_file() {
        assert_eq!(
            redis_config(RESQUE_YML),
            Some(RedisConfig {
                host: "redis-master.redis.svc".into(),
                port: 6379,
                password: Some(RedisPassword::File(
                    "/etc/gitlab/redis/redis-password".into()
                )),
            })
        );
        assert_eq!(
            redis_config("production:\n  url: redis://:s3cret@redis:6380/0\n"),
            Some(RedisConfig {
                host: "redis".into(),
                port: 6380,
                password: Some(RedisPassword::Literal("s3cret".into())),
            })
        );
        assert_eq!(
            redis_config("production:\n  url: redis://redis-master.redis.svc\n"),
            Some(RedisConfig {
                host: "redis-master.redis.svc".into(),
                port: 6379,
                password: None,
            })
        );
        assert_eq!(redis_config("production:\n  id:\n"), None);
    }

    #[test]
    fn a_host_dns_does_not_know_or_nothing_serves_is_redis_rbs_cannot_connect() {
        let config = redis_config(RESQUE_YML).expect("a URL");
        assert_eq!(
            check_redis(&config, Some("pw"), &Backend::Unknown),
            Err("Redis::CannotConnectError: getaddrinfo: Name or service not known (redis://redis-master.redis.svc:6379)".into())
        );
        assert_eq!(
            check_redis(
                &config,
                Some("pw"),
                &Backend::NotServing {
                    ip: "10.96.0.14".into()
                }
            ),
            Err("Redis::CannotConnectError: Connection refused - connect(2) for 10.96.0.14:6379 (redis://redis-master.redis.svc:6379)".into())
        );
    }

    #[test]
    fn commands_are_resp_arrays_of_bulk_strings() {
        assert_eq!(
            redis_command(&[b"AUTH", b"p w"]),
            b"*2\r\n$4\r\nAUTH\r\n$3\r\np w\r\n".to_vec()
        );
    }
}
