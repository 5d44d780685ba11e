//! `bprun sim bao`: an in-process stand-in for `bao server -dev` (OpenBao 2.x, whose HTTP API is
//! Vault's) for machines without the `bao` binary. It answers what bprun's OpenBao client uses
//! (crates/clients/src/bao.rs over vaultrs) with the status codes, error texts and JSON shapes of a real
//! OpenBao 2.7.2 dev server: token auth, `sys/health`, `sys/seal-status`, `sys/init`, seal and
//! unseal, mounts (KV v1 and v2), ACL policies (both APIs), `auth/token/lookup-self`, and KV v2
//! with versions, check-and-set, merge patches, soft delete, undelete, destroy and listing.
//!
//! Like `-dev`: in memory, initialised and unsealed, one unseal key, the root token given, KV v2
//! at `secret/`. Not implemented: other secrets engines and auth methods, token creation (only
//! the root token exists), policy enforcement and HCL validation, KV v2 `config` and `metadata`
//! writes, `subkeys`, leases and response wrapping.
//!
//! One file per concern: `sys` (health, seal, mounts, token lookup), `policies`, `kv1`, `kv2`;
//! routing, the answers every path shares and the server are here, the tests in `tests`.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::http::{Accounting, FaultState, Faults, Handler, SimRequest, SimResponse, decode};

mod kv1;
mod kv2;
mod policies;
mod sys;
#[cfg(test)]
mod tests;
use self::kv1::kv1;
use self::kv2::kv2;
use self::policies::{Policy, builtin_policies};
use self::sys::{Engine, Mount, dev_mounts};

/// The OpenBao release whose answers the stand-in reproduces.
pub const VERSION: &str = "2.7.2";

const UNSUPPORTED_PATH: &str = "1 error occurred:\n\t* unsupported path\n\n";
const UNSUPPORTED_OPERATION: &str = "1 error occurred:\n\t* unsupported operation\n\n";

struct State {
    sealed: bool,
    /// By path with its trailing slash (`secret/`).
    mounts: BTreeMap<String, Mount>,
    policies: BTreeMap<String, Policy>,
}

/// The stand-in's state and the hooks the shared HTTP server uses.
pub struct BaoSim {
    root_token: String,
    unseal_key: Vec<u8>,
    token_accessor: String,
    cluster_name: String,
    cluster_id: String,
    started: SystemTime,
    state: Mutex<State>,
    faults: FaultState,
    accounting: Accounting,
}

fn timestamp() -> String {
    humantime::format_rfc3339_nanos(SystemTime::now()).to_string()
}

fn hex(digits: usize) -> String {
    (0..digits)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
        .collect()
}

fn uuid() -> String {
    format!("{}-{}-{}-{}-{}", hex(8), hex(4), hex(4), hex(4), hex(12))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The envelope of every logical answer (`data` is the part vaultrs reads).
fn envelope(data: Value) -> Value {
    json!({
        "request_id": uuid(),
        "lease_id": "",
        "renewable": false,
        "lease_duration": 0,
        "data": data,
        "wrap_info": null,
        "warnings": null,
        "auth": null,
    })
}

fn ok(data: Value) -> SimResponse {
    SimResponse::json(200, &envelope(data))
}

/// Older `sys/` endpoints also repeat the data's fields at the top level.
fn legacy(data: Value) -> SimResponse {
    let mut answer = envelope(data.clone());
    if let (Value::Object(top), Value::Object(fields)) = (&mut answer, data) {
        for (key, value) in fields {
            top.entry(key).or_insert(value);
        }
    }
    SimResponse::json(200, &answer)
}

fn errors(status: u16, messages: &[&str]) -> SimResponse {
    SimResponse::json(status, &json!({ "errors": messages }))
}

fn not_found() -> SimResponse {
    errors(404, &[])
}

fn no_content() -> SimResponse {
    SimResponse::bytes(204, "application/json", Vec::new())
}

fn not_implemented(what: &str) -> SimResponse {
    errors(
        405,
        &[&format!(
            "bprun's OpenBao stand-in does not implement {what} (run a real `bao server -dev` for it)"
        )],
    )
}

/// What a request does, as OpenBao sees it (`GET ?list=true` is a LIST; PUT and POST are one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Read,
    List,
    Write,
    Patch,
    Delete,
}

fn operation(request: &SimRequest) -> Option<Operation> {
    match request.method.as_str() {
        "LIST" => Some(Operation::List),
        "GET" | "HEAD" if request.query.get("list").is_some_and(|v| v == "true") => {
            Some(Operation::List)
        }
        "GET" | "HEAD" => Some(Operation::Read),
        "POST" | "PUT" => Some(Operation::Write),
        "PATCH" => Some(Operation::Patch),
        "DELETE" => Some(Operation::Delete),
        _ => None,
    }
}

/// Go's `path.Clean`, keeping a trailing slash (what Go's ServeMux redirects to).
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    let mut cleaned = format!("/{}", parts.join("/"));
    if path.ends_with('/') && cleaned != "/" {
        cleaned.push('/');
    }
    cleaned
}

fn query_string(query: &BTreeMap<String, String>) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    query
        .iter()
        .map(|(key, value)| {
            format!(
                "{}={}",
                utf8_percent_encode(key, NON_ALPHANUMERIC),
                utf8_percent_encode(value, NON_ALPHANUMERIC)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The body as JSON (or form fields); a body that claims to be JSON and is not is an error.
fn body_of(request: &SimRequest) -> Result<Value, SimResponse> {
    let claims_json = request
        .header("content-type")
        .is_some_and(|kind| kind.contains("json"));
    if claims_json && !request.body.is_empty() {
        return serde_json::from_slice(&request.body).map_err(|error| json_error(&error));
    }
    Ok(request.json())
}

/// OpenBao's (Go's) words for a body that is not JSON.
fn json_error(error: &serde_json::Error) -> SimResponse {
    let detail = if error.is_eof() {
        "unexpected EOF".to_string()
    } else {
        error.to_string()
    };
    errors(400, &[&format!("failed to decode JSON input: {detail}")])
}

/// Go's name for a JSON value's type, as OpenBao's field conversion errors show it.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "json.Number",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The `data` of a KV v2 write: an object (`null` is an empty one); absent is an error.
fn data_field(body: &Value) -> Result<Map<String, Value>, SimResponse> {
    let unconvertible = |at: &str, value: &Value| {
        errors(
            400,
            &[&format!(
                "error converting input for field \"data\": '{at}' expected type 'map[string]interface {{}}', got unconvertible type '{}'",
                go_type(value)
            )],
        )
    };
    match body.get("data") {
        None => Err(errors(400, &["no data provided"])),
        Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(Value::Array(items)) => match items.first() {
            None => Ok(Map::new()),
            Some(first) => Err(unconvertible("[0]", first)),
        },
        Some(other) => Err(unconvertible("", other)),
    }
}

const TRAILING_SLASH: &str = "cannot write to a path ending in '/'";

fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Number(number) => number.as_u64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// The keys directly under `folder` among `paths` (sub-folders end with `/`).
fn list_keys<'a>(paths: impl Iterator<Item = &'a String>, folder: &str) -> Vec<String> {
    let prefix = if folder.is_empty() || folder.ends_with('/') {
        folder.to_string()
    } else {
        format!("{folder}/")
    };
    let mut keys: Vec<String> = paths
        .filter_map(|path| path.strip_prefix(&prefix))
        .filter(|rest| !rest.is_empty())
        .map(|rest| match rest.split_once('/') {
            Some((first, _)) => format!("{first}/"),
            None => rest.to_string(),
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

fn list_answer(keys: Vec<String>) -> SimResponse {
    if keys.is_empty() {
        return not_found();
    }
    ok(json!({ "keys": keys }))
}

impl BaoSim {
    /// A fresh dev server: initialised, unsealed, KV v2 at `secret/`, `root_token` the only token.
    pub fn new(root_token: &str) -> BaoSim {
        BaoSim {
            root_token: root_token.to_string(),
            unseal_key: (0..32).map(|_| fastrand::u8(..)).collect(),
            token_accessor: (0..24).map(|_| fastrand::alphanumeric()).collect(),
            cluster_name: format!("vault-cluster-{}", hex(8)),
            cluster_id: uuid(),
            started: SystemTime::now(),
            state: Mutex::new(State {
                sealed: false,
                mounts: dev_mounts(),
                policies: builtin_policies(),
            }),
            faults: FaultState::default(),
            accounting: Accounting::default(),
        }
    }

    pub fn root_token(&self) -> &str {
        &self.root_token
    }

    /// The one unseal key (base64), as `bao server -dev` prints it.
    pub fn unseal_key(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.unseal_key)
    }

    pub fn set_faults(&self, faults: Faults) {
        self.faults.set(faults);
    }

    fn authorised(&self, request: &SimRequest) -> bool {
        request
            .token("x-vault-token")
            .is_some_and(|token| !token.is_empty() && token == self.root_token)
    }

    fn route(&self, request: &SimRequest) -> SimResponse {
        if let Some(answer) = self.admin(request) {
            return answer;
        }
        let cleaned = clean_path(&request.path);
        if cleaned != request.path {
            return redirect(request, &cleaned);
        }
        let Some(raw) = request.path.strip_prefix("/v1/") else {
            return not_found();
        };
        let path = decode(raw);
        let Some(op) = operation(request) else {
            return errors(405, &[UNSUPPORTED_OPERATION]);
        };
        let mut state = lock(&self.state);
        // The endpoints that answer without a token, and on a sealed server.
        match (op, path.as_str()) {
            (Operation::Read, "sys/health") => return self.health(&state, request),
            (Operation::Read, "sys/seal-status") => return self.seal_status(&state),
            (Operation::Read, "sys/init") => {
                return SimResponse::json(200, &json!({"initialized": true}));
            }
            (Operation::Write, "sys/init") => {
                return errors(400, &["Vault is already initialized"]);
            }
            (Operation::Write, "sys/unseal") => return self.unseal(&mut state, request),
            _ => {}
        }
        if state.sealed {
            return errors(503, &["Vault is sealed"]);
        }
        if !self.authorised(request) {
            return errors(403, &["permission denied"]);
        }
        if path == "sys" || path.starts_with("sys/") {
            return self.sys(&mut state, op, &path, request);
        }
        if path == "auth/token/lookup-self" && op == Operation::Read {
            return ok(self.token_info());
        }
        if path.starts_with("auth/token/") {
            return errors(404, &[UNSUPPORTED_PATH]);
        }
        let candidate = if path.ends_with('/') {
            path.clone()
        } else {
            format!("{path}/")
        };
        let mount_path = state
            .mounts
            .keys()
            .filter(|mount| candidate.starts_with(mount.as_str()))
            .max_by_key(|mount| mount.len())
            .cloned();
        let Some(mount_path) = mount_path else {
            let route = if op == Operation::List {
                candidate
            } else {
                path
            };
            return errors(
                404,
                &[&format!(
                    "no handler for route \"{route}\". route entry not found."
                )],
            );
        };
        let sub = path.get(mount_path.len()..).unwrap_or("").to_string();
        let Some(mount) = state.mounts.get_mut(&mount_path) else {
            return not_found();
        };
        match &mut mount.engine {
            Engine::KvV2(store) => kv2(store, op, &sub, request),
            Engine::KvV1(store) => kv1(store, op, &sub, request),
            _ => errors(404, &[UNSUPPORTED_PATH]),
        }
    }

    /// The simulator's own routes: request log and faults (as the GitLab simulator has).
    fn admin(&self, request: &SimRequest) -> Option<SimResponse> {
        Some(match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/-/sim/requests") => SimResponse::json(200, &self.accounting.snapshot()),
            ("DELETE", "/-/sim/requests") => {
                self.accounting.clear();
                SimResponse::json(200, &json!({"cleared": true}))
            }
            ("GET", "/-/sim/faults") => SimResponse::json(200, &json!(self.faults.get())),
            ("PUT", "/-/sim/faults") => match serde_json::from_slice::<Faults>(&request.body) {
                Ok(faults) => {
                    self.set_faults(faults.clone());
                    SimResponse::json(200, &json!(faults))
                }
                Err(error) => errors(400, &[&format!("invalid faults: {error}")]),
            },
            ("GET", "/-/sim/unseal-key") => {
                SimResponse::json(200, &json!({"key": self.unseal_key()}))
            }
            _ => return None,
        })
    }
}

fn redirect(request: &SimRequest, cleaned: &str) -> SimResponse {
    let mut location = cleaned.to_string();
    if !request.query.is_empty() {
        location = format!("{location}?{}", query_string(&request.query));
    }
    // Go's ServeMux answers GET with a small HTML body and everything else with none.
    let mut answer = if request.method == "GET" {
        let mut answer = SimResponse::text(
            307,
            &format!("<a href=\"{location}\">Temporary Redirect</a>.\n\n"),
        );
        answer.headers = vec![("content-type".into(), "text/html; charset=utf-8".into())];
        answer
    } else {
        SimResponse::empty(307)
    };
    answer.headers.push(("location".into(), location));
    answer
}

impl Handler for BaoSim {
    fn handle(&self, request: SimRequest) -> SimResponse {
        self.route(&request)
    }

    fn faults(&self) -> &FaultState {
        &self.faults
    }

    fn accounting(&self) -> &Accounting {
        &self.accounting
    }

    fn exempt(&self, path: &str) -> bool {
        path.starts_with("/-/") || path == "/v1/sys/health"
    }
}

/// A running stand-in; dropping it stops the server (the listener closes at once; a keep-alive
/// connection opened before may still be answered until its client closes it).
pub struct Running {
    /// `http://127.0.0.1:PORT`, for `BAO_ADDR`.
    pub url: String,
    /// The root token (generated when none was given), for `BAO_TOKEN`.
    pub token: String,
    pub sim: Arc<BaoSim>,
    server: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The one unseal key (base64).
    pub fn unseal_key(&self) -> String {
        self.sim.unseal_key()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Starts the stand-in on a loopback address such as `127.0.0.1:0`, on the shared runtime.
/// An empty `root_token` gets a generated one, as `bao server -dev` does.
pub fn start(listen: &str, root_token: &str) -> Result<Running, String> {
    let address = super::http::loopback(listen)?;
    let listener = std::net::TcpListener::bind(address)
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    start_on(listener, root_token)
}

/// Starts the stand-in on a listener the caller bound (a port chosen beforehand).
pub fn start_on(listener: std::net::TcpListener, root_token: &str) -> Result<Running, String> {
    let bound = listener.local_addr().map_err(|error| error.to_string())?;
    super::http::loopback(&bound.to_string())?;
    listener
        .set_nonblocking(true)
        .map_err(|error| format!("cannot use the listener on {bound}: {error}"))?;
    let token = if root_token.is_empty() {
        format!(
            "s.{}",
            (0..24)
                .map(|_| fastrand::alphanumeric())
                .collect::<String>()
        )
    } else {
        root_token.to_string()
    };
    let sim = Arc::new(BaoSim::new(&token));
    let runtime = bprun_clients::runtime::runtime();
    let listener = {
        let _context = runtime.enter();
        tokio::net::TcpListener::from_std(listener)
            .map_err(|error| format!("cannot use the listener on {bound}: {error}"))?
    };
    let server = runtime.spawn(super::http::serve(listener, sim.clone()));
    Ok(Running {
        url: format!("http://{bound}"),
        token,
        sim,
        server,
    })
}

/// `bprun sim bao`: serves until Ctrl-C or SIGTERM; prints `BAO_ADDR=...`, `BAO_TOKEN=...` and
/// `BAO_UNSEAL_KEY=...` on stdout, and on stderr that this is the stand-in, not OpenBao.
pub fn run(listen: &str, root_token: &str) -> Result<(), String> {
    let running = start(listen, root_token)?;
    {
        // Whoever started us may stop reading; a closed pipe must not stop the server.
        use std::io::Write;
        let mut out = std::io::stdout();
        let _ = writeln!(out, "BAO_ADDR={}", running.url);
        let _ = writeln!(out, "BAO_TOKEN={}", running.token);
        let _ = writeln!(out, "BAO_UNSEAL_KEY={}", running.unseal_key());
        let _ = out.flush();
        let _ = writeln!(
            std::io::stderr(),
            "bprun's in-process OpenBao stand-in (API of OpenBao {VERSION} -dev: KV v1/v2, sys, policies), not a real OpenBao server"
        );
    }
    let runtime = bprun_clients::runtime::runtime();
    runtime.block_on(super::http::shutdown_signal())?;
    drop(running);
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}
