//! OpenBao over vaultrs: connection settings, seal life cycle, KV v2 with check-and-set, mounts
//! and policies. Every request has a timeout; reads are retried on transport errors; writes are
//! never blindly retried (a check-and-set conflict re-reads before trying again).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};
use vaultrs::error::ClientError as VaultError;

use super::error_chain;
use crate::error::{ClientError, Remedy};
use crate::reconcile::{Change, Detail, Mode, Outcome};
use crate::secret::Secret;

/// The default file `bao_init` writes and `bao_unseal` reads, relative to the repository root.
pub const DEFAULT_INIT_FILE: &str = "infra/secrets/openbao-init.json";
/// The default KV v2 mount.
pub const DEFAULT_MOUNT: &str = "secret";
/// The timeout of every request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a check-and-set write is re-read and tried again after losing a race.
pub const CAS_ATTEMPTS: usize = 5;

/// Where OpenBao is and how to talk to it, from the environment.
#[derive(Debug, Clone)]
pub struct BaoSettings {
    pub address: String,
    pub token: Option<Secret>,
    pub ca_cert: Option<PathBuf>,
    pub skip_verify: bool,
    pub timeout: Duration,
    /// The init file (absolute), where the root token is found when no token is set.
    pub init_file: PathBuf,
}

impl BaoSettings {
    /// The init file a native names (relative to the root), or the default one.
    pub fn with_init_file(&self, file: PathBuf) -> BaoSettings {
        BaoSettings {
            init_file: file,
            ..self.clone()
        }
    }
}

impl BaoSettings {
    /// `BAO_ADDR` (or `VAULT_ADDR`, default `http://127.0.0.1:8200`), `BAO_TOKEN` / `VAULT_TOKEN`,
    /// `BAO_CACERT` / `VAULT_CACERT`, and `BAO_SKIP_VERIFY` / `VAULT_SKIP_VERIFY` only when set to
    /// a true value.
    pub fn from_env(root: &Path) -> BaoSettings {
        let var = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        };
        let skip_verify = var(&["BAO_SKIP_VERIFY", "VAULT_SKIP_VERIFY"])
            .map(|value| matches!(value.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
            .unwrap_or(false);
        BaoSettings {
            address: var(&["BAO_ADDR", "VAULT_ADDR"])
                .unwrap_or_else(|| "http://127.0.0.1:8200".to_string())
                .trim_end_matches('/')
                .to_string(),
            token: var(&["BAO_TOKEN", "VAULT_TOKEN"]).map(Secret::new),
            ca_cert: var(&["BAO_CACERT", "VAULT_CACERT"]).map(PathBuf::from),
            skip_verify,
            timeout: REQUEST_TIMEOUT,
            init_file: root.join(DEFAULT_INIT_FILE),
        }
    }
}

/// What `bao operator init` returns, as persisted in the init file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitResponse {
    pub keys: Vec<String>,
    pub keys_base64: Vec<String>,
    pub root_token: String,
    #[serde(default)]
    pub unseal_shares: u64,
    #[serde(default)]
    pub unseal_threshold: u64,
}

impl InitResponse {
    /// Registers every key and the root token for scrubbing.
    pub fn register_secrets(&self) {
        for value in self
            .keys
            .iter()
            .chain(&self.keys_base64)
            .chain(std::iter::once(&self.root_token))
        {
            crate::secret::register(value);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub address: String,
    pub initialized: bool,
    pub sealed: bool,
    pub version: String,
}

/// A KV v2 secret as read: its data and version (0 when the path has no secret).
#[derive(Debug, Clone, PartialEq)]
pub struct KvSecret {
    pub data: Option<Map<String, Value>>,
    pub version: u64,
}

/// Before a write to OpenBao (`what`: its method and path): held while this thread's write gate
/// is closed, refused when the step it waits for failed (see [`crate::write_gate`]).
fn before_write(what: &str) -> Result<(), ClientError> {
    crate::write_gate::before_remote_write(&format!("openbao: {what}"), &|| false)
}

/// A KV v2 address: mount and path inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvPath {
    pub mount: String,
    pub path: String,
}

impl KvPath {
    /// `gitlab/bootstrap/admin_token` is mount `secret`, path `gitlab/bootstrap/admin_token`;
    /// `kv:apps/x` is mount `kv`, path `apps/x`; an explicit `mount` wins over both.
    pub fn parse(text: &str, mount: Option<&str>) -> Result<KvPath, ClientError> {
        let (parsed_mount, path) = match text.split_once(':') {
            Some((mount, path)) => (mount, path),
            None => (DEFAULT_MOUNT, text),
        };
        let mount = mount.unwrap_or(parsed_mount).trim_matches('/');
        let path = path.trim_matches('/');
        if mount.is_empty()
            || path.is_empty()
            || path.split('/').any(|part| part.is_empty() || part == "..")
        {
            return Err(ClientError::new(format!("invalid OpenBao path `{text}`")).with_hint(
                "write a KV path such as gitlab/bootstrap/admin_token (mount secret), or kv:apps/x for another mount",
            ));
        }
        Ok(KvPath {
            mount: mount.to_string(),
            path: path.to_string(),
        })
    }
}

impl KvPath {
    /// A folder to list: as [`KvPath::parse`], and also a mount's root (`""` or `/` is the
    /// default mount's, `kv:` another's).
    pub fn parse_folder(text: &str, mount: Option<&str>) -> Result<KvPath, ClientError> {
        let (parsed_mount, path) = match text.split_once(':') {
            Some((mount, path)) => (mount, path),
            None => (DEFAULT_MOUNT, text),
        };
        if path.trim_matches('/').is_empty() {
            let mount = mount.unwrap_or(parsed_mount).trim_matches('/');
            if !mount.is_empty() {
                return Ok(KvPath {
                    mount: mount.to_string(),
                    path: String::new(),
                });
            }
        }
        KvPath::parse(text, mount)
    }
}

impl std::fmt::Display for KvPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.mount, self.path)
    }
}

/// How one key of a KV secret changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChange {
    Added(String),
    Changed(String),
    Removed(String),
}

/// Writes the init response to `file` (created empty, mode 0600, before initialising).
fn write_init_file(file: &Path, shown: &str, init: &InitResponse) -> Result<(), ClientError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let text = serde_json::to_string_pretty(init)
        .map_err(|error| ClientError::new(format!("cannot encode the init response: {error}")))?;
    let cannot_write = |error: std::io::Error| {
        ClientError::new(format!(
            "cannot write the OpenBao init file {shown}: {error}"
        ))
    };
    let mut handle = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(file)
        .map_err(cannot_write)?;
    handle
        .write_all(format!("{text}\n").as_bytes())
        .and_then(|()| handle.sync_all())
        .map_err(cannot_write)
}

/// A KV write's `--diff`: the keys by name, never a value.
fn keys_detail(keys: &[KeyChange]) -> Detail {
    let lines: Vec<String> = keys
        .iter()
        .map(|change| match change {
            KeyChange::Added(key) => format!("+ {key} (added, value hidden)"),
            KeyChange::Changed(key) => format!("~ {key} (changed, value hidden)"),
            KeyChange::Removed(key) => format!("- {key} (removed)"),
        })
        .collect();
    Detail::Line(lines.join("\n"))
}

/// A change to the KV secret at `path`, shown as `shown`.
fn secret_change(
    action: &'static str,
    path: &KvPath,
    shown: String,
    detail: Option<Detail>,
) -> Change {
    Change {
        action,
        kind: "secret".into(),
        name: path.to_string(),
        resource: shown,
        detail,
    }
}

/// The keys that differ between a secret's current data and the data a write gives it.
pub fn key_changes(
    current: Option<&Map<String, Value>>,
    desired: &Map<String, Value>,
) -> Vec<KeyChange> {
    let empty = Map::new();
    let current = current.unwrap_or(&empty);
    let mut changes: Vec<KeyChange> = desired
        .iter()
        .filter_map(|(key, value)| match current.get(key) {
            None => Some(KeyChange::Added(key.clone())),
            Some(old) if old != value => Some(KeyChange::Changed(key.clone())),
            Some(_) => None,
        })
        .collect();
    changes.extend(
        current
            .keys()
            .filter(|key| !desired.contains_key(*key))
            .map(|key| KeyChange::Removed(key.clone())),
    );
    changes
}

/// A `GET` of an OpenBao API path that vaultrs has no (or no OpenBao-compatible) request for:
/// `sys/health` (200 only when unsealed and active), `sys/seal-status` (200 in every state),
/// `{mount}/config` (answers once a KV v2 mount has finished upgrading).
struct GetJson<R> {
    path: String,
    response: std::marker::PhantomData<fn() -> R>,
}

fn get_json<R>(path: impl Into<String>) -> GetJson<R> {
    GetJson {
        path: path.into(),
        response: std::marker::PhantomData,
    }
}

#[derive(Debug, Deserialize)]
struct SealStatusResponse {
    initialized: bool,
    sealed: bool,
    #[serde(default)]
    version: String,
}

impl<R: serde::de::DeserializeOwned + Send + Sync> rustify::Endpoint for GetJson<R> {
    type Response = R;
    const REQUEST_BODY_TYPE: rustify::enums::RequestType = rustify::enums::RequestType::JSON;
    const RESPONSE_BODY_TYPE: rustify::enums::ResponseType = rustify::enums::ResponseType::JSON;

    fn path(&self) -> String {
        self.path.clone()
    }

    fn method(&self) -> rustify::enums::RequestMethod {
        rustify::enums::RequestMethod::GET
    }
}

/// One OpenBao connection, created lazily and shared for the run.
pub struct BaoClient {
    pub settings: BaoSettings,
    /// The client and the token it was built with (the token can appear later: `bao_init`).
    cached: Mutex<Option<(String, std::sync::Arc<VaultClient>)>>,
    /// One lock per KV path: writers in this process take turns, so check-and-set conflicts
    /// between them cannot happen (OpenBao 2.7 lets two concurrent `cas=0` creates both succeed).
    write_locks: Mutex<std::collections::HashMap<String, std::sync::Arc<Mutex<()>>>>,
    /// The root token read from the init file, once found (read once, not per request).
    file_token: Mutex<Option<String>>,
    requests: std::sync::atomic::AtomicU64,
}

fn run<F: std::future::Future>(future: F) -> F::Output {
    super::runtime::runtime().block_on(future)
}

/// What a connect error actually says: the part after hyper's `(Connect): `.
fn connect_cause(detail: &str) -> String {
    detail
        .rsplit_once("(Connect): ")
        .map(|(_, cause)| cause.to_string())
        .unwrap_or_else(|| detail.to_string())
}

/// The deepest cause: the part of a long chain that says what actually went wrong.
fn innermost(error: &dyn std::error::Error) -> String {
    let mut deepest = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        deepest = cause.to_string();
        source = cause.source();
    }
    deepest
}

/// What an OpenBao error answer says. OpenBao tells these failures apart only in the words of
/// its `errors` list (the status codes are shared), so this is the one place that reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    /// No mount serves the path (404 "no handler for route").
    NoRoute,
    /// A check-and-set write lost (400 "check-and-set parameter did not match").
    CasMismatch,
    /// Sealed (503 "Vault is sealed", or an empty 503).
    Sealed,
    /// Goes away by itself: a raft node becoming active, a KV v2 mount upgrading.
    Transient,
    Other,
}

fn said(code: u16, message: &str) -> Said {
    if message.contains("no handler for route") {
        Said::NoRoute
    } else if code == 400 && message.contains("check-and-set") {
        Said::CasMismatch
    } else if code == 503 && (message.contains("sealed") || message.trim().is_empty()) {
        Said::Sealed
    } else if message.contains(NOT_ACTIVE)
        || message.contains("Upgrading from non-versioned to versioned data")
        || message.contains("active cluster node not found")
    {
        Said::Transient
    } else {
        Said::Other
    }
}

/// The status code and what the answer said, from either of vaultrs's error shapes.
fn answer(error: &VaultError) -> Option<(u16, Said)> {
    server_response(error).map(|(code, message)| (code, said(code, &message)))
}

/// The status code and body of a server response, from either of vaultrs's error shapes.
fn server_response(error: &VaultError) -> Option<(u16, String)> {
    match error {
        VaultError::APIError { code, errors } => Some((*code, errors.join("; "))),
        VaultError::RestClientError {
            source: rustify::errors::ClientError::ServerResponseError { code, content },
        } => Some((*code, content.clone().unwrap_or_default())),
        _ => None,
    }
}

/// How long reads keep retrying transient failures.
pub const TRANSIENT_WAIT: Duration = Duration::from_secs(20);
const NOT_ACTIVE: &str = "local node not active";

/// Failures that go away by themselves within seconds: a dropped packet on a port-forward, a
/// raft node becoming active after unseal, a fresh KV v2 mount upgrading its storage.
fn is_transient(error: &VaultError) -> bool {
    match answer(error) {
        Some((_, said)) => said == Said::Transient,
        None => {
            matches!(
                error,
                VaultError::RestClientError {
                    source: rustify::errors::ClientError::RequestError { .. }
                }
            ) && !error_chain(error).contains("refused")
        }
    }
}

impl BaoClient {
    pub fn new(settings: BaoSettings) -> BaoClient {
        BaoClient {
            settings,
            cached: Mutex::new(None),
            file_token: Mutex::new(None),
            write_locks: Mutex::new(Default::default()),
            requests: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many HTTP requests this client has sent (for benchmarks).
    pub fn request_count(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn count(&self) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// The token: `BAO_TOKEN` / `VAULT_TOKEN`, else the root token of the init file.
    fn token(&self) -> Option<String> {
        if let Some(token) = &self.settings.token {
            return Some(token.reveal().to_string());
        }
        let mut file_token = self
            .file_token
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if file_token.is_none() && self.settings.init_file.exists() {
            *file_token = self.read_init_file().ok().map(|init| init.root_token);
        }
        file_token.clone()
    }

    fn client(&self) -> Result<std::sync::Arc<VaultClient>, ClientError> {
        let token = self.token().unwrap_or_default();
        let mut cached = self
            .cached
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((cached_token, client)) = cached.as_ref()
            && *cached_token == token
        {
            return Ok(client.clone());
        }
        super::runtime::install_tls_provider();
        let mut builder = VaultClientSettingsBuilder::default();
        builder
            .address(self.settings.address.as_str())
            .token(token.clone())
            .timeout(Some(self.settings.timeout))
            .verify(!self.settings.skip_verify);
        if let Some(ca) = &self.settings.ca_cert {
            if !ca.exists() {
                return Err(ClientError::new(format!(
                    "the OpenBao CA file {} does not exist",
                    ca.display()
                ))
                .with_hint("BAO_CACERT must name a PEM file, e.g. infra/tls/wildcard/ca.pem"));
            }
            builder.ca_certs(vec![ca.display().to_string()]);
        }
        let settings = builder.build().map_err(|error| {
            ClientError::new(format!(
                "invalid OpenBao settings for {}: {error}",
                self.settings.address
            ))
            .with_hint("BAO_ADDR must be a URL such as http://127.0.0.1:8200")
        })?;
        let client = VaultClient::new(settings).map_err(|error| self.describe(error, "connect"))?;
        let client = std::sync::Arc::new(client);
        *cached = Some((token, client.clone()));
        Ok(client)
    }

    /// Turns a vaultrs error into one that names the address, what was being done and a hint.
    pub fn describe(&self, error: VaultError, what: &str) -> ClientError {
        let address = &self.settings.address;
        if let Some((code, message)) = server_response(&error) {
            let message = message.trim().to_string();
            let headline = format!("openbao {address}: {what} -> {code}: {message}");
            let (hint, remedy) = match (code, said(code, &message)) {
                (_, Said::Sealed) => (
                    "OpenBao is sealed: unseal it with the keys in infra/secrets/openbao-init.json"
                        .to_string(),
                    Some(Remedy::Unseal),
                ),
                (403, _) => (self.permission_hint(), None),
                (_, Said::NoRoute) => (
                    "the mount does not exist: enable a KV version 2 engine at `secret`"
                        .to_string(),
                    Some(Remedy::EnableKv {
                        mount: "secret".to_string(),
                    }),
                ),
                (_, Said::CasMismatch) => (
                    "another writer changed the secret; re-read and try again".to_string(),
                    None,
                ),
                (501, _) => (
                    "OpenBao is not initialised: initialise it".to_string(),
                    Some(Remedy::Init),
                ),
                _ => ("see the OpenBao server log for details".to_string(), None),
            };
            let error = ClientError::new(headline).with_status(code).with_hint(hint);
            return match remedy {
                Some(remedy) => error.with_remedy(remedy),
                None => error,
            };
        }
        let detail = error_chain(&error);
        let lower = detail.to_ascii_lowercase();
        let (headline, hint) = if lower.contains("connection refused")
            || lower.contains("tcp connect error")
        {
            (
                format!("openbao {address}: {what} failed: connection refused"),
                format!(
                    "is OpenBao running and port-forwarded (kubectl -n openbao port-forward svc/openbao 8200)? BAO_ADDR is {address}"
                ),
            )
        } else if address.starts_with("https:")
            && (lower.contains("certificate")
                || lower.contains("tls")
                || lower.contains("handshake"))
        {
            let ca = match &self.settings.ca_cert {
                Some(ca) => format!("the CA file used was {}", ca.display()),
                None => "no CA file was set: BAO_CACERT names the platform CA (infra/tls/wildcard/ca.pem)".to_string(),
            };
            (
                format!(
                    "openbao {address}: {what} failed: TLS failure: {}",
                    connect_cause(&detail)
                ),
                ca,
            )
        } else if lower.contains("timed out") || lower.contains("timeout") {
            (
                format!(
                    "openbao {address}: {what} timed out after {} s",
                    self.settings.timeout.as_secs()
                ),
                "is the port-forward alive? BAO_ADDR must point at a reachable OpenBao".to_string(),
            )
        } else {
            (
                format!("openbao {address}: {what} failed: {}", innermost(&error)),
                "check BAO_ADDR and that OpenBao is reachable".to_string(),
            )
        };
        ClientError::new(headline).with_hint(hint)
    }

    fn permission_hint(&self) -> String {
        let Ok(client) = self.client() else {
            return "the token may not read or write this path".to_string();
        };
        self.count();
        match run(vaultrs::token::lookup_self(client.as_ref())) {
            Ok(token) => format!("the token's policies ({}) do not allow this path", token.policies.join(", ")),
            Err(_) => "the token is invalid or expired: set BAO_TOKEN, or keep the root token in the init file".to_string(),
        }
    }

    /// Runs a read, retrying what is safe to retry (reads are): transport errors other than a
    /// refused connection, and the short transient states of a fresh server (a node becoming
    /// active after unseal, a KV v2 mount upgrading). Bounded by [`TRANSIENT_WAIT`]. The outer
    /// error is a set-up failure; the inner result is the server's answer, for callers that
    /// treat some statuses (404) as data.
    fn read_with_retry<T, F, Fut>(&self, call: F) -> Result<Result<T, VaultError>, ClientError>
    where
        F: Fn(std::sync::Arc<VaultClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, VaultError>>,
    {
        let client = self.client()?;
        let deadline = std::time::Instant::now() + TRANSIENT_WAIT;
        let mut delay = Duration::from_millis(100);
        loop {
            self.count();
            match run(call(client.clone())) {
                Err(error)
                    if is_transient(&error) && std::time::Instant::now() + delay < deadline =>
                {
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                result => return Ok(result),
            }
        }
    }

    /// Waits (bounded) until the server answers `sys/health` with 200: unsealed and active.
    pub fn wait_active(&self) -> Result<(), ClientError> {
        let answer = self.read_with_retry(|client| async move {
            match vaultrs::api::exec_with_no_result(
                client.as_ref(),
                get_json::<Value>("sys/health"),
            )
            .await
            {
                // Standby (429) and "not yet active" are transient after an unseal.
                Err(error) if matches!(server_response(&error), Some((429, _))) => {
                    Err(VaultError::RestClientError {
                        source: rustify::errors::ClientError::ServerResponseError {
                            code: 503,
                            content: Some(NOT_ACTIVE.to_string()),
                        },
                    })
                }
                other => other,
            }
        })?;
        answer
            .map(|_| ())
            .map_err(|error| self.describe(error, "GET sys/health"))
    }

    /// `GET sys/seal-status`: answers 200 on sealed and uninitialised servers too (vaultrs's
    /// health response expects fields that only Vault sends, so bprun reads this instead).
    pub fn status(&self) -> Result<Status, ClientError> {
        let status = self
            .read_with_retry(|client| async move {
                vaultrs::api::exec_with_no_result(
                    client.as_ref(),
                    get_json::<SealStatusResponse>("sys/seal-status"),
                )
                .await
            })?
            .map_err(|error| self.describe(error, "GET sys/seal-status"))?;
        Ok(Status {
            address: self.settings.address.clone(),
            initialized: status.initialized,
            sealed: status.sealed,
            version: status.version,
        })
    }

    pub fn read_init_file(&self) -> Result<InitResponse, ClientError> {
        let file = &self.settings.init_file;
        let text = std::fs::read_to_string(file).map_err(|error| {
            ClientError::new(format!("cannot read the OpenBao init file {}: {error}", file.display()))
                .with_hint("initialising OpenBao writes it; restore it from your backup if OpenBao was initialised elsewhere")
                .with_remedy(Remedy::RestoreInitFile)
        })?;
        let init: InitResponse = serde_json::from_str(&text).map_err(|error| {
            ClientError::new(format!(
                "the OpenBao init file {} is not valid: {error}",
                file.display()
            ))
            .with_hint("it must hold the JSON that `bao operator init -format=json` prints")
        })?;
        init.register_secrets();
        Ok(init)
    }

    /// Initialises an uninitialised OpenBao (unchanged, None, when it is initialised) and
    /// writes the whole response to the init file (mode 0600), which must not exist yet: the
    /// file is created before anything else can fail, so the keys are never lost to a folder
    /// that cannot be written. `root` is what paths in messages are shown relative to.
    pub fn ensure_initialized(
        &self,
        shares: u64,
        threshold: u64,
        root: &Path,
        mode: Mode,
    ) -> Result<Outcome<Option<InitResponse>>, ClientError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = &self.settings.init_file;
        let shown = crate::fs::relative_display(root, file);
        let status = self.status()?;
        if status.initialized {
            return Ok(Outcome::unchanged(None));
        }
        if file.exists() {
            return Err(ClientError::new(format!("refusing to overwrite {shown}: OpenBao at {} is uninitialised but the file exists", status.address))
                .in_operation("init", ": ")
                .with_hint("the file may hold the keys of an earlier OpenBao; move it away (keep a backup) before initialising again"));
        }
        let change = Change {
            action: "initialise",
            kind: "openbao".into(),
            name: status.address.clone(),
            resource: format!(
                "openbao {} ({shares} shares, threshold {threshold}) and write {shown}",
                status.address
            ),
            detail: None,
        };
        if !mode.writes() {
            return Ok(Outcome::single(None, change));
        }
        if let Some(folder) = file.parent() {
            std::fs::create_dir_all(folder).map_err(|error| {
                ClientError::new(format!(
                    "cannot create {}: {error}",
                    crate::fs::relative_display(root, folder)
                ))
            })?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(file)
            .map_err(|error| {
                ClientError::new(format!(
                    "cannot create the OpenBao init file {shown}: {error}"
                ))
            })?;
        let init = match self.initialize(shares, threshold) {
            Ok(init) => init,
            Err(error) => {
                let _ = std::fs::remove_file(file);
                return Err(error);
            }
        };
        write_init_file(file, &shown, &init)?;
        Ok(Outcome::single(Some(init), change))
    }

    /// Unseals a sealed OpenBao with the init file's keys (an `unseal` change); unchanged when
    /// it is unsealed. None when it is not initialised, so there is nothing to unseal.
    pub fn ensure_unsealed(&self, mode: Mode) -> Result<Option<Outcome<()>>, ClientError> {
        let status = self.status()?;
        if !status.initialized {
            return Ok(None);
        }
        if !status.sealed {
            return Ok(Some(Outcome::unchanged(())));
        }
        let init = self.read_init_file()?;
        if mode.writes() {
            self.unseal(&init)?;
        }
        Ok(Some(Outcome::changed_by(
            (),
            "unseal",
            "openbao",
            &status.address,
            format!("openbao {}", status.address),
        )))
    }

    /// Seals an unsealed OpenBao (a `seal` change); unchanged when it is sealed.
    pub fn ensure_sealed(&self, mode: Mode) -> Result<Outcome<()>, ClientError> {
        let status = self.status()?;
        if status.sealed {
            return Ok(Outcome::unchanged(()));
        }
        if mode.writes() {
            self.seal()?;
        }
        Ok(Outcome::changed_by(
            (),
            "seal",
            "openbao",
            &status.address,
            format!("openbao {}", status.address),
        ))
    }

    /// Mounts a KV secrets engine of `version` at `path` unless it is there (a `mount` change);
    /// a mount of another type or version there is an error naming both.
    pub fn ensure_kv(
        &self,
        path: &str,
        version: u8,
        mode: Mode,
    ) -> Result<Outcome<()>, ClientError> {
        let mount = path.trim_matches('/');
        match self.mount(mount)? {
            Some((kind, existing)) if kind == "kv" && existing == version.to_string() => {
                Ok(Outcome::unchanged(()))
            }
            Some((kind, existing)) => Err(ClientError::new(format!(
                "openbao {}: {mount}/ is already mounted as {kind} (version {existing}), not kv version {version}",
                self.settings.address
            ))
            .with_hint("choose another path, or move the existing mount (bao secrets move) if it is unused")),
            None => {
                if mode.writes() {
                    self.enable_kv(mount, version)?;
                }
                Ok(Outcome::changed_by(
                    (),
                    "mount",
                    "secrets engine",
                    format!("{mount}/"),
                    format!("kv version {version} at {mount}/"),
                ))
            }
        }
    }

    /// Initialises OpenBao. The caller has checked that the server is uninitialised and the file
    /// does not exist; the file is created (mode 0600) before anything else can fail.
    pub fn initialize(&self, shares: u64, threshold: u64) -> Result<InitResponse, ClientError> {
        let client = self.client()?;
        self.count();
        let response = run(vaultrs::sys::start_initialization(
            client.as_ref(),
            shares,
            threshold,
            None,
        ))
        .map_err(|error| self.describe(error, "PUT sys/init"))?;
        let init = InitResponse {
            keys: response.keys,
            keys_base64: response.keys_base64,
            root_token: response.root_token,
            unseal_shares: shares,
            unseal_threshold: threshold,
        };
        init.register_secrets();
        Ok(init)
    }

    /// Submits unseal keys until the server is unsealed. Returns how many keys were used.
    pub fn unseal(&self, init: &InitResponse) -> Result<usize, ClientError> {
        let client = self.client()?;
        for (used, key) in init.keys.iter().enumerate() {
            self.count();
            let response = run(vaultrs::sys::unseal(
                client.as_ref(),
                Some(key.clone()),
                None,
                None,
            ))
            .map_err(|error| {
                let described = self.describe(error, "PUT sys/unseal");
                // A key OpenBao refuses (400) is the key of another OpenBao, not a fault to retry.
                if described.status == Some(400) {
                    let file = self.settings.init_file.display();
                    described.with_hint(format!(
                        "OpenBao refuses the unseal key of {file}: the file does not belong to this OpenBao; restore this OpenBao's init file from your backup (bprun never replaces it)"
                    ))
                } else {
                    described
                }
            })?;
            if !response.sealed {
                // A raft node answers "not active" for a moment after its last key.
                self.wait_active()?;
                return Ok(used + 1);
            }
        }
        Err(ClientError::new(format!(
            "openbao {}: still sealed after all {} keys of the init file",
            self.settings.address,
            init.keys.len()
        ))
        .with_hint("the init file does not belong to this OpenBao (was it re-initialised?)"))
    }

    pub fn seal(&self) -> Result<(), ClientError> {
        let client = self.client()?;
        self.count();
        run(vaultrs::sys::seal(client.as_ref()))
            .map_err(|error| self.describe(error, "PUT sys/seal"))
    }

    /// The mount at `path` as `(type, kv version)`, or `None`.
    pub fn mount(&self, path: &str) -> Result<Option<(String, String)>, ClientError> {
        let mounts = self
            .read_with_retry(
                |client| async move { vaultrs::sys::mount::list(client.as_ref()).await },
            )?
            .map_err(|error| self.describe(error, "GET sys/mounts"))?;
        let key = format!("{}/", path.trim_matches('/'));
        Ok(mounts.get(&key).map(|mount| {
            let version = mount
                .options
                .as_ref()
                .and_then(|options| options.get("version").cloned())
                .unwrap_or_else(|| "1".to_string());
            (mount.mount_type.clone(), version)
        }))
    }

    pub fn enable_kv(&self, path: &str, version: u8) -> Result<(), ClientError> {
        before_write(&format!("POST sys/mounts/{}", path.trim_matches('/')))?;
        let client = self.client()?;
        self.count();
        let mut options = vaultrs::api::sys::requests::EnableEngineRequest::builder();
        options.options(std::collections::HashMap::from([(
            "version".to_string(),
            version.to_string(),
        )]));
        run(vaultrs::sys::mount::enable(
            client.as_ref(),
            path.trim_matches('/'),
            "kv",
            Some(&mut options),
        ))
        .map_err(|error| self.describe(error, &format!("POST sys/mounts/{path}")))?;
        if version == 2 {
            // A new KV v2 mount upgrades its storage first; wait until it serves requests.
            let mount = path.trim_matches('/').to_string();
            self.read_with_retry(|client| {
                let mount = mount.clone();
                async move {
                    vaultrs::api::exec_with_result(
                        client.as_ref(),
                        get_json::<Value>(format!("{mount}/config")),
                    )
                    .await
                }
            })?
            .map_err(|error| self.describe(error, &format!("GET {mount}/config")))?;
        }
        Ok(())
    }

    /// Reads a KV v2 secret with its version. A path without a secret (never written, deleted
    /// or destroyed) has no data; its version is the metadata's current version (0 when none).
    pub fn kv_read(&self, path: &KvPath) -> Result<KvSecret, ClientError> {
        let what = format!("GET {}/data/{}", path.mount, path.path);
        let result = self.read_with_retry(|client| {
            let path = path.clone();
            async move {
                // Both required fields are set, so building cannot fail (vaultrs does the same).
                let endpoint = vaultrs::api::kv2::requests::ReadSecretRequest::builder()
                    .mount(path.mount.as_str())
                    .path(path.path.as_str())
                    .build()
                    .expect("mount and path are set");
                vaultrs::api::exec_with_result(client.as_ref(), endpoint).await
            }
        })?;
        match result {
            Ok(response) => Ok(KvSecret {
                data: match response.data {
                    Value::Object(map) => Some(map),
                    _ => None,
                },
                version: response.metadata.version,
            }),
            Err(error) => match answer(&error) {
                Some((_, Said::NoRoute)) => Err(self.missing_mount(path)),
                Some((404, _)) => Ok(KvSecret {
                    data: None,
                    version: self.kv_current_version(path)?,
                }),
                _ => Err(self.describe(error, &what)),
            },
        }
    }

    fn missing_mount(&self, path: &KvPath) -> ClientError {
        ClientError::new(format!(
            "openbao {}: no KV mount `{}` (reading {path})",
            self.settings.address, path.mount
        ))
        .with_hint(format!(
            "enable a KV version 2 engine at `{}`, or address another mount as `mount:path`",
            path.mount
        ))
        .with_remedy(Remedy::EnableKv {
            mount: path.mount.clone(),
        })
    }

    /// A KV v2 secret's metadata, as `bao kv metadata get` shows it: its current and oldest
    /// version, when it was created and updated, and each version (oldest first) with its
    /// creation time and whether it was deleted or destroyed. `None` when the path holds none.
    pub fn kv_metadata(&self, path: &KvPath) -> Result<Option<serde_json::Value>, ClientError> {
        let Some(metadata) = self.read_metadata(path)? else {
            return Ok(None);
        };
        let mut versions: Vec<(u64, serde_json::Value)> = metadata
            .versions
            .iter()
            .filter_map(|(number, version)| {
                let number: u64 = number.parse().ok()?;
                Some((
                    number,
                    serde_json::json!({
                        "version": number,
                        "created_time": version.created_time,
                        "deleted": !version.deletion_time.is_empty(),
                        "destroyed": version.destroyed,
                    }),
                ))
            })
            .collect();
        versions.sort_by_key(|(number, _)| *number);
        Ok(Some(serde_json::json!({
            "current_version": metadata.current_version,
            "oldest_version": metadata.oldest_version,
            "max_versions": metadata.max_versions,
            "created_time": metadata.created_time,
            "updated_time": metadata.updated_time,
            "versions": versions.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        })))
    }

    /// The metadata of a KV v2 path; `None` when it holds none (404).
    fn read_metadata(
        &self,
        path: &KvPath,
    ) -> Result<Option<vaultrs::api::kv2::responses::ReadSecretMetadataResponse>, ClientError> {
        let result =
            self.read_with_retry(|client| {
                let path = path.clone();
                async move {
                    vaultrs::kv2::read_metadata(client.as_ref(), &path.mount, &path.path).await
                }
            })?;
        match result {
            Ok(metadata) => Ok(Some(metadata)),
            Err(error) if matches!(server_response(&error), Some((404, _))) => Ok(None),
            Err(error) => {
                Err(self.describe(error, &format!("GET {}/metadata/{}", path.mount, path.path)))
            }
        }
    }

    fn kv_current_version(&self, path: &KvPath) -> Result<u64, ClientError> {
        Ok(self
            .read_metadata(path)?
            .map_or(0, |metadata| metadata.current_version))
    }

    /// Writes `data` unless it is already the current content; check-and-set on the version
    /// read, re-reading after a lost race. The value: the version now current (in check mode,
    /// the one that would be written); a `write` change whose `--diff` names the keys.
    pub fn kv_write(
        &self,
        path: &KvPath,
        data: &Map<String, Value>,
        mode: Mode,
    ) -> Result<Outcome<u64>, ClientError> {
        let written = self.kv_update(path, "write", mode, |_| Some(data.clone()))?;
        // Never None: what it writes does not depend on a secret being there.
        Ok(written.unwrap_or_else(|| Outcome::unchanged(0)))
    }

    /// Merges `changes` into the current content, with the same guarantees (a `patch` change).
    /// None when there is no secret at `path` to patch.
    pub fn kv_patch(
        &self,
        path: &KvPath,
        changes: &Map<String, Value>,
        mode: Mode,
    ) -> Result<Option<Outcome<u64>>, ClientError> {
        self.kv_update(path, "patch", mode, |current| {
            let mut merged = current?.clone();
            for (key, value) in changes {
                merged.insert(key.clone(), value.clone());
            }
            Some(merged)
        })
    }

    /// Writes what `wanted` makes of the current content (None: nothing to write to).
    fn kv_update(
        &self,
        path: &KvPath,
        action: &'static str,
        mode: Mode,
        wanted: impl Fn(Option<&Map<String, Value>>) -> Option<Map<String, Value>>,
    ) -> Result<Option<Outcome<u64>>, ClientError> {
        let changed = |version: u64, keys: &[KeyChange]| {
            let shown = format!("secret {path} (version {version})");
            Outcome::single(
                version,
                secret_change(action, path, shown, Some(keys_detail(keys))),
            )
        };
        let lock = self
            .write_locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(path.to_string())
            .or_default()
            .clone();
        let _turn = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for _ in 0..CAS_ATTEMPTS {
            let current = self.kv_read(path)?;
            let Some(desired) = wanted(current.data.as_ref()) else {
                return Ok(None);
            };
            if current.data.as_ref() == Some(&desired) {
                return Ok(Some(Outcome::unchanged(current.version)));
            }
            let keys = key_changes(current.data.as_ref(), &desired);
            if !mode.writes() {
                return Ok(Some(changed(current.version + 1, &keys)));
            }
            let what = format!("POST {}/data/{}", path.mount, path.path);
            before_write(&what)?;
            let client = self.client()?;
            self.count();
            let options = vaultrs::api::kv2::requests::SetSecretRequestOptions {
                cas: current.version as u32,
            };
            match run(vaultrs::kv2::set_with_options(
                client.as_ref(),
                &path.mount,
                &path.path,
                &desired,
                options,
            )) {
                Ok(metadata) => return Ok(Some(changed(metadata.version, &keys))),
                // Lost a race: another writer created a version since our read. Read again.
                Err(error) if matches!(answer(&error), Some((_, Said::CasMismatch))) => {
                    continue;
                }
                // No answer (a connection closed under the request): the write may have landed
                // or not. Read back: the version after ours holding what we wrote is ours; else
                // the check-and-set makes writing again safe.
                Err(error) if answer(&error).is_none() && is_transient(&error) => {
                    std::thread::sleep(Duration::from_millis(200));
                    let after = self.kv_read(path)?;
                    if after.version == current.version + 1 && after.data.as_ref() == Some(&desired)
                    {
                        return Ok(Some(changed(after.version, &keys)));
                    }
                    continue;
                }
                Err(error) => return Err(self.describe(error, &what)),
            }
        }
        Err(ClientError::new(format!(
            "openbao {}: {path} kept changing under us ({CAS_ATTEMPTS} check-and-set attempts)",
            self.settings.address
        ))
        .with_hint(
            "another writer is updating this secret continuously; find it before re-running",
        ))
    }

    pub fn kv_list(&self, path: &KvPath) -> Result<Vec<String>, ClientError> {
        let result = self.read_with_retry(|client| {
            let path = path.clone();
            async move { vaultrs::kv2::list(client.as_ref(), &path.mount, &path.path).await }
        })?;
        match result {
            Ok(keys) => Ok(keys),
            Err(error) => match answer(&error) {
                Some((_, Said::NoRoute)) => Err(self.missing_mount(path)),
                Some((404, _)) => Ok(Vec::new()),
                _ => Err(self.describe(
                    error,
                    &format!("LIST {}/metadata/{}", path.mount, path.path),
                )),
            },
        }
    }

    /// Soft-deletes the latest version (a `delete` change). Unchanged when there is no live
    /// version.
    pub fn kv_delete(&self, path: &KvPath, mode: Mode) -> Result<Outcome<()>, ClientError> {
        if self.kv_read(path)?.data.is_none() {
            return Ok(Outcome::unchanged(()));
        }
        if mode.writes() {
            before_write(&format!("DELETE {}/data/{}", path.mount, path.path))?;
            let client = self.client()?;
            self.count();
            run(vaultrs::kv2::delete_latest(
                client.as_ref(),
                &path.mount,
                &path.path,
            ))
            .map_err(|error| {
                self.describe(error, &format!("DELETE {}/data/{}", path.mount, path.path))
            })?;
        }
        Ok(Outcome::single(
            (),
            secret_change(
                "delete",
                path,
                format!("latest version of secret {path}"),
                None,
            ),
        ))
    }

    /// Destroys every version and the metadata (a `destroy` change). Unchanged when there is
    /// no metadata.
    pub fn kv_destroy(&self, path: &KvPath, mode: Mode) -> Result<Outcome<()>, ClientError> {
        if self.kv_read(path)?.version == 0 {
            return Ok(Outcome::unchanged(()));
        }
        if mode.writes() {
            before_write(&format!("DELETE {}/metadata/{}", path.mount, path.path))?;
            let client = self.client()?;
            self.count();
            run(vaultrs::kv2::delete_metadata(
                client.as_ref(),
                &path.mount,
                &path.path,
            ))
            .map_err(|error| {
                self.describe(
                    error,
                    &format!("DELETE {}/metadata/{}", path.mount, path.path),
                )
            })?;
        }
        Ok(Outcome::single(
            (),
            secret_change(
                "destroy",
                path,
                format!("all versions of secret {path}"),
                None,
            ),
        ))
    }

    /// Writes a policy unless it already has exactly this text (a `write` change).
    pub fn policy_write(
        &self,
        name: &str,
        rules: &str,
        mode: Mode,
    ) -> Result<Outcome<()>, ClientError> {
        let current = self.read_with_retry(|client| {
            let name = name.to_string();
            async move { vaultrs::sys::policy::read(client.as_ref(), &name).await }
        })?;
        match current {
            Ok(policy) if policy.rules == rules => return Ok(Outcome::unchanged(())),
            Ok(_) => {}
            Err(error) if matches!(server_response(&error), Some((404, _))) => {}
            Err(error) => return Err(self.describe(error, &format!("GET sys/policies/acl/{name}"))),
        }
        if mode.writes() {
            before_write(&format!("PUT sys/policies/acl/{name}"))?;
            let client = self.client()?;
            self.count();
            run(vaultrs::sys::policy::set(client.as_ref(), name, rules))
                .map_err(|error| self.describe(error, &format!("PUT sys/policies/acl/{name}")))?;
        }
        Ok(Outcome::changed_by(
            (),
            "write",
            "policy",
            name,
            format!("policy {name}"),
        ))
    }
}

#[cfg(test)]
mod key_change_tests {
    use super::*;

    #[test]
    fn a_write_names_the_keys_it_adds_changes_and_removes() {
        let map = |value: Value| value.as_object().cloned().unwrap_or_default();
        let current = map(serde_json::json!({"a": "1", "b": "2", "gone": "x"}));
        let desired = map(serde_json::json!({"a": "1", "b": "3", "new": "y"}));
        assert_eq!(
            key_changes(Some(&current), &desired),
            [
                KeyChange::Changed("b".into()),
                KeyChange::Added("new".into()),
                KeyChange::Removed("gone".into()),
            ]
        );
        assert_eq!(key_changes(None, &desired).len(), 3);
        assert!(key_changes(Some(&desired), &desired).is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_default_to_the_secret_mount() {
        assert_eq!(
            KvPath::parse("gitlab/bootstrap/admin_token", None).expect("valid"),
            KvPath {
                mount: "secret".into(),
                path: "gitlab/bootstrap/admin_token".into()
            }
        );
        assert_eq!(
            KvPath::parse("kv:apps/x", None).expect("valid"),
            KvPath {
                mount: "kv".into(),
                path: "apps/x".into()
            }
        );
        assert_eq!(
            KvPath::parse("apps/x", Some("other")).expect("valid").mount,
            "other"
        );
        assert!(KvPath::parse("", None).is_err());
        assert!(KvPath::parse("a//b", None).is_err());
        assert!(KvPath::parse("a/../b", None).is_err());
    }
}
