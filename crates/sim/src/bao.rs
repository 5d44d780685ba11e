//! `bprun sim bao`: an in-process stand-in for `bao server -dev` (OpenBao 2.x, whose HTTP API is
//! Vault's) for machines without the `bao` binary. It answers what bprun's OpenBao client uses
//! (src/clients/bao.rs over vaultrs) with the status codes, error texts and JSON shapes of a real
//! OpenBao 2.7.2 dev server: token auth, `sys/health`, `sys/seal-status`, `sys/init`, seal and
//! unseal, mounts (KV v1 and v2), ACL policies (both APIs), `auth/token/lookup-self`, and KV v2
//! with versions, check-and-set, merge patches, soft delete, undelete, destroy and listing.
//!
//! Like `-dev`: in memory, initialised and unsealed, one unseal key, the root token given, KV v2
//! at `secret/`. Not implemented: other secrets engines and auth methods, token creation (only
//! the root token exists), policy enforcement and HCL validation, KV v2 `config` and `metadata`
//! writes, `subkeys`, leases and response wrapping.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::http::{Accounting, Faults, Handler, SimRequest, SimResponse, decode};

/// The OpenBao release whose answers the stand-in reproduces.
pub const VERSION: &str = "2.7.2";
const COMMIT_DATE: &str = "2026-10-26T20:32:27Z";
const PLUGIN_VERSION: &str = "v2.7.2+builtin.bao";
/// KV v2 keeps this many versions when `max_versions` is 0 (the default).
const DEFAULT_MAX_VERSIONS: usize = 10;
/// The lease a KV v1 read reports (the system default TTL, 32 days).
const KV1_LEASE_SECONDS: u64 = 2_764_800;
const UNSUPPORTED_PATH: &str = "1 error occurred:\n\t* unsupported path\n\n";
const UNSUPPORTED_OPERATION: &str = "1 error occurred:\n\t* unsupported operation\n\n";
const CAS_MISMATCH: &str = "check-and-set parameter did not match the current version";

#[derive(Debug, Clone)]
struct Version {
    data: Option<Map<String, Value>>,
    created_time: String,
    deletion_time: String,
    destroyed: bool,
}

impl Version {
    fn live(&self) -> bool {
        self.deletion_time.is_empty() && !self.destroyed && self.data.is_some()
    }

    fn metadata(&self, number: u64) -> Value {
        json!({
            "created_time": self.created_time,
            "custom_metadata": null,
            "deletion_time": self.deletion_time,
            "destroyed": self.destroyed,
            "version": number,
        })
    }
}

/// One KV v2 key: its metadata and versions.
#[derive(Debug, Clone, Default)]
struct Secret {
    created_time: String,
    updated_time: String,
    current_version: u64,
    oldest_version: u64,
    versions: BTreeMap<u64, Version>,
}

impl Secret {
    fn metadata(&self) -> Value {
        let versions: Map<String, Value> = self
            .versions
            .iter()
            .map(|(number, version)| {
                (
                    number.to_string(),
                    json!({
                        "created_time": version.created_time,
                        "deletion_time": version.deletion_time,
                        "destroyed": version.destroyed,
                    }),
                )
            })
            .collect();
        json!({
            "cas_required": false,
            "created_time": self.created_time,
            "current_metadata_version": 0,
            "current_version": self.current_version,
            "custom_metadata": null,
            "delete_version_after": "0s",
            "max_versions": 0,
            "metadata_cas_required": false,
            "oldest_version": self.oldest_version,
            "updated_time": self.updated_time,
            "versions": versions,
        })
    }

    /// Adds a version and prunes the oldest beyond the default maximum. Returns its number.
    fn push(&mut self, data: Map<String, Value>) -> u64 {
        let now = timestamp();
        if self.created_time.is_empty() {
            self.created_time = now.clone();
        }
        self.updated_time = now.clone();
        self.current_version += 1;
        self.versions.insert(
            self.current_version,
            Version {
                data: Some(data),
                created_time: now,
                deletion_time: String::new(),
                destroyed: false,
            },
        );
        while self.versions.len() > DEFAULT_MAX_VERSIONS {
            self.versions.pop_first();
            self.oldest_version = self.versions.keys().next().copied().unwrap_or(0);
        }
        self.current_version
    }
}

enum Engine {
    System,
    Identity,
    Cubbyhole,
    KvV1(BTreeMap<String, Map<String, Value>>),
    KvV2(BTreeMap<String, Secret>),
}

struct Mount {
    engine: Engine,
    accessor: String,
    uuid: String,
    description: String,
    local: bool,
    seal_wrap: bool,
    options: Value,
    passthrough_header: Option<&'static str>,
}

impl Mount {
    fn kind(&self) -> &'static str {
        match self.engine {
            Engine::System => "system",
            Engine::Identity => "identity",
            Engine::Cubbyhole => "cubbyhole",
            Engine::KvV1(_) | Engine::KvV2(_) => "kv",
        }
    }

    fn builtin(engine: Engine, prefix: &str, description: &str) -> Mount {
        let passthrough_header = match engine {
            Engine::System => Some("Accept"),
            Engine::Identity => Some("Authorization"),
            _ => None,
        };
        Mount {
            seal_wrap: matches!(engine, Engine::System),
            local: matches!(engine, Engine::Cubbyhole),
            engine,
            accessor: format!("{prefix}_{}", hex(8)),
            uuid: uuid(),
            description: description.to_string(),
            options: Value::Null,
            passthrough_header,
        }
    }

    fn kv(version: Option<u8>, description: String) -> Mount {
        let (engine, options) = match version {
            Some(2) => (Engine::KvV2(BTreeMap::new()), json!({"version": "2"})),
            Some(version) => (
                Engine::KvV1(BTreeMap::new()),
                json!({"version": version.to_string()}),
            ),
            None => (Engine::KvV1(BTreeMap::new()), json!({})),
        };
        Mount {
            engine,
            accessor: format!("kv_{}", hex(8)),
            uuid: uuid(),
            description,
            local: false,
            seal_wrap: false,
            options,
            passthrough_header: None,
        }
    }

    fn to_json(&self) -> Value {
        let mut config =
            json!({"default_lease_ttl": 0, "force_no_cache": false, "max_lease_ttl": 0});
        if let Some(header) = self.passthrough_header {
            config["passthrough_request_headers"] = json!([header]);
        }
        let mut value = json!({
            "accessor": self.accessor,
            "config": config,
            "description": self.description,
            "external_entropy_access": false,
            "local": self.local,
            "options": self.options,
            "plugin_version": "",
            "running_plugin_version": PLUGIN_VERSION,
            "running_sha256": "",
            "seal_wrap": self.seal_wrap,
            "type": self.kind(),
            "uuid": self.uuid,
        });
        if self.kind() == "kv" {
            value["deprecation_status"] = json!("supported");
        }
        value
    }
}

struct Policy {
    rules: String,
    version: u64,
    modified: Option<String>,
}

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
    faults: Mutex<Faults>,
    rate_limit_left: Mutex<u32>,
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
    SimResponse {
        status: 204,
        headers: vec![("content-type".into(), "application/json".into())],
        body: Vec::new(),
    }
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
enum Op {
    Read,
    List,
    Write,
    Patch,
    Delete,
}

fn operation(request: &SimRequest) -> Option<Op> {
    match request.method.as_str() {
        "LIST" => Some(Op::List),
        "GET" | "HEAD" if request.query.get("list").is_some_and(|v| v == "true") => Some(Op::List),
        "GET" | "HEAD" => Some(Op::Read),
        "POST" | "PUT" => Some(Op::Write),
        "PATCH" => Some(Op::Patch),
        "DELETE" => Some(Op::Delete),
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

/// `options.cas` of a KV v2 write: `Ok(None)` when absent (a negative one never matches).
fn cas_option(body: &Value) -> Result<Option<i64>, SimResponse> {
    let parsed = match body.get("options").and_then(|options| options.get("cas")) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(number)) => number.as_i64(),
        Some(Value::String(text)) => text.trim().parse().ok(),
        Some(_) => None,
    };
    parsed
        .map(Some)
        .ok_or_else(|| errors(400, &["error parsing check-and-set parameter"]))
}

fn cas_matches(cas: Option<i64>, current: u64) -> bool {
    cas.is_none_or(|cas| u64::try_from(cas).is_ok_and(|cas| cas == current))
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(changes) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(fields) = target {
        for (key, value) in changes {
            if value.is_null() {
                fields.remove(key);
            } else {
                merge_patch(fields.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
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

/// `?version=N` of a KV v2 read (0 or absent: the current version).
fn requested_version(request: &SimRequest) -> Result<u64, SimResponse> {
    match request.query.get("version") {
        None => Ok(0),
        Some(text) => text.trim().parse::<i64>().map(|n| n.max(0) as u64).map_err(|_| {
            errors(
                400,
                &[&format!(
                    "Field validation failed: error converting input for field \"version\": '{text}' cannot parse value as 'int': strconv.ParseInt: invalid syntax"
                )],
            )
        }),
    }
}

/// The `versions` list of `delete/`, `undelete/` and `destroy/`.
fn versions_field(body: &Value) -> Result<Vec<u64>, SimResponse> {
    let versions: Vec<u64> = match body.get("versions") {
        Some(Value::Array(items)) => items.iter().filter_map(number).collect(),
        Some(Value::String(text)) => text
            .split(',')
            .filter_map(|part| part.trim().parse().ok())
            .collect(),
        Some(other) => number(other).into_iter().collect(),
        None => Vec::new(),
    };
    if versions.is_empty() {
        return Err(errors(400, &["No version number provided"]));
    }
    Ok(versions)
}

/// An unseal key as hex or base64.
fn decode_key(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.len().is_multiple_of(2)
        && !text.is_empty()
        && text.chars().all(|c| c.is_ascii_hexdigit())
    {
        return (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).ok())
            .collect();
    }
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// The `default` policy of OpenBao 2.7.2, verbatim.
const DEFAULT_POLICY: &str = r#"
# Allow tokens to look up their own properties
path "auth/token/lookup-self" {
    capabilities = ["read"]
}

# Allow tokens to renew themselves
path "auth/token/renew-self" {
    capabilities = ["update"]
}

# Allow tokens to revoke themselves
path "auth/token/revoke-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own capabilities on a path
path "sys/capabilities-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own entity by id or name
path "identity/entity/id/{{identity.entity.id}}" {
  capabilities = ["read"]
}
path "identity/entity/name/{{identity.entity.name}}" {
  capabilities = ["read"]
}


# Allow a token to look up its resultant ACL from all policies. This is useful
# for UIs. It is an internal path because the format may change at any time
# based on how the internal ACL features and capabilities change.
path "sys/internal/ui/resultant-acl" {
    capabilities = ["read"]
}

# Allow a token to renew a lease via lease_id in the request body; old path for
# old clients, new path for newer
path "sys/leases/renew" {
    capabilities = ["update"]
}

# Allow looking up lease properties. This requires knowing the lease ID ahead
# of time and does not divulge any sensitive information.
path "sys/leases/lookup" {
    capabilities = ["update"]
}

# Allow a token to manage its own cubbyhole
path "cubbyhole/*" {
    capabilities = ["create", "read", "update", "delete", "list"]
}

# Allow a token to wrap arbitrary values in a response-wrapping token
path "sys/wrapping/wrap" {
    capabilities = ["update"]
}

# Allow a token to look up the creation time and TTL of a given
# response-wrapping token
path "sys/wrapping/lookup" {
    capabilities = ["update"]
}

# Allow a token to unwrap a response-wrapping token. This is a convenience to
# avoid client token swapping since this is also part of the response wrapping
# policy.
path "sys/wrapping/unwrap" {
    capabilities = ["update"]
}

# Allow general purpose tools
path "sys/tools/hash" {
    capabilities = ["update"]
}
path "sys/tools/hash/*" {
    capabilities = ["update"]
}

# Allow a token to make requests to the Authorization Endpoint for OIDC providers.
path "identity/oidc/provider/+/authorize" {
    capabilities = ["read", "update"]
}
"#;

impl BaoSim {
    /// A fresh dev server: initialised, unsealed, KV v2 at `secret/`, `root_token` the only token.
    pub fn new(root_token: &str) -> BaoSim {
        let mut mounts = BTreeMap::new();
        mounts.insert(
            "cubbyhole/".to_string(),
            Mount::builtin(
                Engine::Cubbyhole,
                "cubbyhole",
                "per-token private secret storage",
            ),
        );
        mounts.insert(
            "identity/".to_string(),
            Mount::builtin(Engine::Identity, "identity", "identity store"),
        );
        mounts.insert(
            "sys/".to_string(),
            Mount::builtin(
                Engine::System,
                "system",
                "system endpoints used for control, policy and debugging",
            ),
        );
        mounts.insert(
            "secret/".to_string(),
            Mount::kv(Some(2), "key/value secret storage".to_string()),
        );
        let mut policies = BTreeMap::new();
        policies.insert(
            "default".to_string(),
            Policy {
                rules: DEFAULT_POLICY.to_string(),
                version: 1,
                modified: Some(timestamp()),
            },
        );
        policies.insert(
            "root".to_string(),
            Policy {
                rules: String::new(),
                version: 0,
                modified: None,
            },
        );
        BaoSim {
            root_token: root_token.to_string(),
            unseal_key: (0..32).map(|_| fastrand::u8(..)).collect(),
            token_accessor: (0..24).map(|_| fastrand::alphanumeric()).collect(),
            cluster_name: format!("vault-cluster-{}", hex(8)),
            cluster_id: uuid(),
            started: SystemTime::now(),
            state: Mutex::new(State {
                sealed: false,
                mounts,
                policies,
            }),
            faults: Mutex::new(Faults::default()),
            rate_limit_left: Mutex::new(0),
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
        *lock(&self.rate_limit_left) = faults.rate_limit_burst;
        *lock(&self.faults) = faults;
    }

    fn authorised(&self, request: &SimRequest) -> bool {
        let token = request
            .header("x-vault-token")
            .map(str::to_string)
            .or_else(|| {
                request
                    .header("authorization")
                    .and_then(|value| value.strip_prefix("Bearer "))
                    .map(str::to_string)
            });
        token.is_some_and(|token| !token.is_empty() && token == self.root_token)
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
            (Op::Read, "sys/health") => return self.health(&state, request),
            (Op::Read, "sys/seal-status") => return self.seal_status(&state),
            (Op::Read, "sys/init") => return SimResponse::json(200, &json!({"initialized": true})),
            (Op::Write, "sys/init") => return errors(400, &["Vault is already initialized"]),
            (Op::Write, "sys/unseal") => return self.unseal(&mut state, request),
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
        if path == "auth/token/lookup-self" && op == Op::Read {
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
            let route = if op == Op::List { candidate } else { path };
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
            ("GET", "/-/sim/faults") => SimResponse::json(200, &json!(*lock(&self.faults))),
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

    fn health(&self, state: &State, request: &SimRequest) -> SimResponse {
        let code = |name: &str, default: u16| {
            request
                .query
                .get(name)
                .and_then(|text| text.parse::<u16>().ok())
                .unwrap_or(default)
        };
        let server_time_utc = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or(0);
        if state.sealed {
            return SimResponse::json(
                code("sealedcode", 503),
                &json!({
                    "initialized": true,
                    "sealed": true,
                    "standby": true,
                    "replication_performance_mode": "unknown",
                    "replication_dr_mode": "unknown",
                    "server_time_utc": server_time_utc,
                    "version": VERSION,
                }),
            );
        }
        SimResponse::json(
            code("activecode", 200),
            &json!({
                "initialized": true,
                "sealed": false,
                "standby": false,
                "replication_performance_mode": "disabled",
                "replication_dr_mode": "disabled",
                "server_time_utc": server_time_utc,
                "version": VERSION,
                "cluster_name": self.cluster_name,
                "cluster_id": self.cluster_id,
            }),
        )
    }

    fn seal_status_json(&self, state: &State) -> Value {
        let mut status = json!({
            "type": "shamir",
            "initialized": true,
            "sealed": state.sealed,
            "t": 1,
            "n": 1,
            "progress": 0,
            "nonce": "",
            "recovery_seal": false,
            "version": VERSION,
            "commit_date": COMMIT_DATE,
            "migration": false,
        });
        if !state.sealed {
            status["cluster_name"] = json!(self.cluster_name);
            status["cluster_id"] = json!(self.cluster_id);
        }
        status["storage_type"] = json!("inmem");
        status
    }

    fn seal_status(&self, state: &State) -> SimResponse {
        SimResponse::json(200, &self.seal_status_json(state))
    }

    fn unseal(&self, state: &mut State, request: &SimRequest) -> SimResponse {
        let body = match body_of(request) {
            Ok(body) => body,
            Err(answer) => return answer,
        };
        if body.get("reset").is_some_and(|reset| reset == &json!(true)) {
            return self.seal_status(state);
        }
        let Some(key) = body.get("key").and_then(Value::as_str) else {
            return errors(
                400,
                &["'key' must be specified in request body as JSON, or 'reset' set to true"],
            );
        };
        if !state.sealed {
            return self.seal_status(state);
        }
        let Some(bytes) = decode_key(key) else {
            return errors(400, &["'key' must be a valid hex or base64 string"]);
        };
        if bytes.len() < 16 {
            return errors(400, &["invalid key: key is shorter than minimum 16 bytes"]);
        }
        if bytes != self.unseal_key {
            return errors(
                400,
                &[
                    "unable to retrieve stored keys: invalid key: failed to decrypt keys from storage: cipher: message authentication failed",
                ],
            );
        }
        state.sealed = false;
        self.seal_status(state)
    }

    fn token_info(&self) -> Value {
        let creation_time = self
            .started
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or(0);
        json!({
            "accessor": self.token_accessor,
            "creation_time": creation_time,
            "creation_ttl": 0,
            "display_name": "token",
            "entity_id": "",
            "expire_time": null,
            "explicit_max_ttl": 0,
            "id": self.root_token,
            "issue_time": humantime::format_rfc3339_nanos(self.started).to_string(),
            "meta": null,
            "num_uses": 0,
            "orphan": true,
            "path": "auth/token/create",
            "policies": ["root"],
            "renewable": false,
            "ttl": 0,
            "type": "service",
        })
    }

    fn sys(&self, state: &mut State, op: Op, path: &str, request: &SimRequest) -> SimResponse {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        match (op, segments.as_slice()) {
            (Op::Write, ["sys", "seal"]) => {
                state.sealed = true;
                no_content()
            }
            (Op::Read, ["sys", "mounts"]) => {
                let mounts: Map<String, Value> = state
                    .mounts
                    .iter()
                    .map(|(path, mount)| (path.clone(), mount.to_json()))
                    .collect();
                legacy(Value::Object(mounts))
            }
            (_, ["sys", "mounts", rest @ ..]) if !rest.is_empty() => {
                let mount = format!("{}/", rest.join("/"));
                match op {
                    Op::Read => match state.mounts.get(&mount) {
                        Some(found) => legacy(found.to_json()),
                        None => errors(400, &[&format!("No secret engine mount at {mount}")]),
                    },
                    Op::Write => enable(state, &mount, request),
                    Op::Delete => {
                        if matches!(mount.as_str(), "sys/" | "cubbyhole/" | "identity/") {
                            return errors(400, &[&format!("cannot unmount \"{mount}\"")]);
                        }
                        state.mounts.remove(&mount);
                        no_content()
                    }
                    _ => errors(405, &[UNSUPPORTED_OPERATION]),
                }
            }
            (Op::Read | Op::List, ["sys", "policy"]) => {
                let names: Vec<&String> = state.policies.keys().collect();
                legacy(json!({"keys": names, "policies": names}))
            }
            (Op::List, ["sys", "policies", "acl"]) => {
                let names: Vec<&String> = state.policies.keys().collect();
                ok(json!({ "keys": names }))
            }
            (_, ["sys", "policy", name]) => policy(state, op, name, request, true),
            (_, ["sys", "policies", "acl", name]) => policy(state, op, name, request, false),
            _ => errors(404, &[UNSUPPORTED_PATH]),
        }
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
        SimResponse {
            status: 307,
            headers: Vec::new(),
            body: Vec::new(),
        }
    };
    answer.headers.push(("location".into(), location));
    answer
}

/// `POST sys/mounts/{path}`: KV v1 or v2 only.
fn enable(state: &mut State, mount: &str, request: &SimRequest) -> SimResponse {
    let body = match body_of(request) {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    let kind = body.get("type").and_then(Value::as_str).unwrap_or("");
    let option_version = body
        .get("options")
        .and_then(|options| options.get("version"))
        .and_then(number);
    let version = match kind {
        "" => return errors(400, &["backend type must be specified as a string"]),
        "kv" => option_version,
        "kv-v2" => Some(2),
        "kv-v1" | "generic" => Some(option_version.unwrap_or(1)),
        other => {
            return errors(
                400,
                &[&format!(
                    "bprun's OpenBao stand-in implements only kv secrets engines, not {other}"
                )],
            );
        }
    };
    let version = match version {
        None => None,
        Some(version @ (1 | 2)) => Some(version as u8),
        Some(other) => {
            return errors(400, &[&format!("invalid version: {other}")]);
        }
    };
    if mount == "/"
        || matches!(mount, "sys/" | "cubbyhole/" | "identity/")
        || mount.starts_with("auth/")
    {
        return errors(400, &[&format!("cannot mount \"{mount}\"")]);
    }
    if let Some(existing) = state
        .mounts
        .keys()
        .find(|existing| mount.starts_with(existing.as_str()) || existing.starts_with(mount))
    {
        return errors(400, &[&format!("path is already in use at {existing}")]);
    }
    let description = body
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    state
        .mounts
        .insert(mount.to_string(), Mount::kv(version, description));
    no_content()
}

/// `sys/policy/{name}` (`legacy`) and `sys/policies/acl/{name}`.
fn policy(
    state: &mut State,
    op: Op,
    name: &str,
    request: &SimRequest,
    legacy_api: bool,
) -> SimResponse {
    let name = name.to_lowercase();
    match op {
        Op::Read => {
            let Some(found) = state.policies.get(&name) else {
                return not_found();
            };
            let mut data = json!({
                "allow_slashes_in_identity_templates": false,
                "allow_wildcards_in_identity_templates": false,
                "cas_required": false,
                "name": name,
                "version": found.version,
            });
            if let Some(modified) = &found.modified {
                data["modified"] = json!(modified);
            }
            if legacy_api {
                data["rules"] = json!(found.rules);
                legacy(data)
            } else {
                data["policy"] = json!(found.rules);
                ok(data)
            }
        }
        Op::Write => {
            let body = match body_of(request) {
                Ok(body) => body,
                Err(answer) => return answer,
            };
            let text = body
                .get("policy")
                .or_else(|| if legacy_api { body.get("rules") } else { None })
                .and_then(Value::as_str)
                .unwrap_or("");
            if text.is_empty() {
                return errors(400, &["'policy' parameter not supplied or empty"]);
            }
            if name == "root" {
                return errors(400, &["cannot update \"root\" policy"]);
            }
            let version = state
                .policies
                .get(&name)
                .map(|p| p.version)
                .unwrap_or(1)
                .max(1);
            state.policies.insert(
                name,
                Policy {
                    rules: text.to_string(),
                    version,
                    modified: Some(timestamp()),
                },
            );
            no_content()
        }
        Op::Delete => match name.as_str() {
            "root" => errors(400, &["cannot delete \"root\" policy"]),
            "default" => errors(400, &["cannot delete default policy"]),
            _ => {
                state.policies.remove(&name);
                no_content()
            }
        },
        _ => errors(405, &[UNSUPPORTED_OPERATION]),
    }
}

/// The KV v2 routes of one mount (`sub` is the path after the mount).
fn kv2(
    store: &mut BTreeMap<String, Secret>,
    op: Op,
    sub: &str,
    request: &SimRequest,
) -> SimResponse {
    let (head, path) = sub.split_once('/').unwrap_or((sub, ""));
    match (head, op) {
        ("config", Op::Read) if path.is_empty() => ok(json!({
            "cas_required": false,
            "delete_version_after": "0s",
            "max_versions": 0,
            "metadata_cas_required": false,
        })),
        ("config", Op::Write) if path.is_empty() => {
            not_implemented("writing a KV v2 mount's config")
        }
        ("data", Op::Read) => kv2_read(store, path, request),
        ("data", Op::Write) => kv2_write(store, path, request),
        ("data", Op::Patch) => kv2_patch(store, path, request),
        ("data", Op::Delete) => {
            if let Some(secret) = store.get_mut(path) {
                let current = secret.current_version;
                if let Some(version) = secret.versions.get_mut(&current)
                    && version.deletion_time.is_empty()
                    && !version.destroyed
                {
                    version.deletion_time = timestamp();
                }
            }
            no_content()
        }
        ("metadata", Op::Read) => match store.get(path) {
            Some(secret) => ok(secret.metadata()),
            None => not_found(),
        },
        ("metadata", Op::List) => list_answer(list_keys(store.keys(), path)),
        ("metadata", Op::Delete) => {
            store.remove(path);
            no_content()
        }
        ("metadata", Op::Write | Op::Patch) => {
            not_implemented("KV v2 metadata writes (max_versions, custom_metadata)")
        }
        ("delete" | "undelete" | "destroy", Op::Write) => {
            let versions = match body_of(request).and_then(|body| versions_field(&body)) {
                Ok(versions) => versions,
                Err(answer) => return answer,
            };
            if let Some(secret) = store.get_mut(path) {
                for number in versions {
                    let Some(version) = secret.versions.get_mut(&number) else {
                        continue;
                    };
                    match head {
                        "delete" if version.deletion_time.is_empty() && !version.destroyed => {
                            version.deletion_time = timestamp();
                        }
                        "undelete" if !version.destroyed => version.deletion_time.clear(),
                        "destroy" => {
                            version.destroyed = true;
                            version.data = None;
                        }
                        _ => {}
                    }
                }
            }
            no_content()
        }
        ("subkeys", _) => not_implemented("KV v2 subkeys"),
        ("config" | "data" | "delete" | "undelete" | "destroy", _) => {
            errors(405, &[UNSUPPORTED_OPERATION])
        }
        // Anything else under a KV v2 mount: a 404 with a warning (and no `errors`).
        _ => {
            let verb = match op {
                Op::Read => "get",
                Op::List => "list",
                Op::Write => "put",
                Op::Patch => "patch",
                Op::Delete => "delete",
            };
            let mut answer = envelope(Value::Null);
            answer["warnings"] = json!([format!(
                "Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the OpenBao CLI, use 'bao kv {verb}' for this operation."
            )]);
            SimResponse::json(404, &answer)
        }
    }
}

fn kv2_read(store: &BTreeMap<String, Secret>, path: &str, request: &SimRequest) -> SimResponse {
    let requested = match requested_version(request) {
        Ok(requested) => requested,
        Err(answer) => return answer,
    };
    let Some(secret) = store.get(path) else {
        return not_found();
    };
    let number = if requested == 0 {
        secret.current_version
    } else {
        requested
    };
    let Some(version) = secret.versions.get(&number) else {
        return not_found();
    };
    let metadata = version.metadata(number);
    match (&version.data, version.live()) {
        (Some(data), true) => ok(json!({"data": data, "metadata": metadata})),
        // Deleted or destroyed: 404, but with the version's metadata (and no `errors`).
        _ => SimResponse::json(404, &envelope(json!({"data": null, "metadata": metadata}))),
    }
}

fn kv2_write(
    store: &mut BTreeMap<String, Secret>,
    path: &str,
    request: &SimRequest,
) -> SimResponse {
    let body = match body_of(request) {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    if path.is_empty() || path.ends_with('/') {
        return errors(400, &[TRAILING_SLASH]);
    }
    let data = match data_field(&body) {
        Ok(data) => data,
        Err(answer) => return answer,
    };
    let cas = match cas_option(&body) {
        Ok(cas) => cas,
        Err(answer) => return answer,
    };
    let current = store
        .get(path)
        .map(|secret| secret.current_version)
        .unwrap_or(0);
    if !cas_matches(cas, current) {
        return errors(400, &[CAS_MISMATCH]);
    }
    let secret = store.entry(path.to_string()).or_default();
    let number = secret.push(data);
    match secret.versions.get(&number) {
        Some(version) => ok(version.metadata(number)),
        None => not_found(),
    }
}

fn kv2_patch(
    store: &mut BTreeMap<String, Secret>,
    path: &str,
    request: &SimRequest,
) -> SimResponse {
    let kind = request
        .header("content-type")
        .and_then(|kind| kind.split(';').next())
        .map(|kind| kind.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if kind.is_empty() {
        return errors(400, &["mime: no media type"]);
    }
    if kind != "application/merge-patch+json" {
        return errors(
            415,
            &[&format!(
                "PATCH requires Content-Type of application/merge-patch+json, provided {kind}"
            )],
        );
    }
    if path.is_empty() || path.ends_with('/') {
        return errors(400, &[TRAILING_SLASH]);
    }
    let body: Value = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(error) => return json_error(&error),
    };
    let Some(changes) = body.get("data").filter(|data| data.is_object()).cloned() else {
        return errors(400, &["no data provided"]);
    };
    let cas = match cas_option(&body) {
        Ok(cas) => cas,
        Err(answer) => return answer,
    };
    let Some(secret) = store.get_mut(path) else {
        // The real server answers an empty 404 here.
        return SimResponse {
            status: 404,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Vec::new(),
        };
    };
    if !cas_matches(cas, secret.current_version) {
        return errors(400, &[CAS_MISMATCH]);
    }
    let current_number = secret.current_version;
    let current = match secret.versions.get(&current_number) {
        Some(version) if version.live() => version.data.clone().unwrap_or_default(),
        Some(version) => {
            return SimResponse::json(404, &envelope(version.metadata(current_number)));
        }
        None => return not_found(),
    };
    let mut merged = Value::Object(current);
    merge_patch(&mut merged, &changes);
    let Value::Object(merged) = merged else {
        return errors(400, &["no data provided"]);
    };
    let number = secret.push(merged);
    match secret.versions.get(&number) {
        Some(version) => ok(version.metadata(number)),
        None => not_found(),
    }
}

/// A KV v1 mount: plain keys, no versions.
fn kv1(
    store: &mut BTreeMap<String, Map<String, Value>>,
    op: Op,
    path: &str,
    request: &SimRequest,
) -> SimResponse {
    match op {
        Op::Read => match store.get(path) {
            Some(data) => {
                let mut answer = envelope(Value::Object(data.clone()));
                answer["lease_duration"] = json!(KV1_LEASE_SECONDS);
                SimResponse::json(200, &answer)
            }
            None => not_found(),
        },
        Op::List => list_answer(list_keys(store.keys(), path)),
        Op::Write => {
            let data = match body_of(request) {
                Ok(Value::Object(data)) => data,
                Ok(_) => return errors(400, &["no data provided"]),
                Err(answer) => return answer,
            };
            if path.is_empty() || path.ends_with('/') {
                return errors(400, &[TRAILING_SLASH]);
            }
            store.insert(path.to_string(), data);
            no_content()
        }
        Op::Delete => {
            store.remove(path);
            no_content()
        }
        Op::Patch => errors(405, &[UNSUPPORTED_OPERATION]),
    }
}

impl Handler for BaoSim {
    fn handle(&self, request: SimRequest) -> SimResponse {
        self.route(&request)
    }

    fn faults(&self) -> Faults {
        lock(&self.faults).clone()
    }

    fn take_rate_limit(&self) -> bool {
        let mut left = lock(&self.rate_limit_left);
        if *left > 0 {
            *left -= 1;
            true
        } else {
            false
        }
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
    let host = if bound.is_ipv6() {
        format!("[{}]", bound.ip())
    } else {
        bound.ip().to_string()
    };
    Ok(Running {
        url: format!("http://{host}:{}", bound.port()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use bprun_clients::bao::{BaoClient, BaoSettings, InitResponse, KvPath};

    const TOKEN: &str = "root-test-token";

    fn client(running: &Running, token: &str) -> BaoClient {
        BaoClient::new(BaoSettings {
            address: running.url.clone(),
            token: Some(bprun_clients::secret::Secret::new(token)),
            ca_cert: None,
            skip_verify: false,
            timeout: Duration::from_secs(10),
            init_file: std::path::PathBuf::from("/nonexistent/openbao-init.json"),
        })
    }

    fn path(text: &str) -> KvPath {
        KvPath::parse(text, None).expect("valid KV path")
    }

    fn data(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), json!(value)))
            .collect()
    }

    /// One raw request: status and body (JSON, or `null` when empty).
    fn call(
        running: &Running,
        method: &str,
        route: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, Value) {
        let url = format!("{}{route}", running.url);
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        let body = body.map(str::to_string);
        bprun_clients::runtime::runtime().block_on(async move {
            let client = bprun_clients::runtime::http_client_builder()
                .build()
                .expect("client");
            let mut request = client.request(method, url);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            if let Some(body) = body {
                request = request.body(body);
            }
            let response = request.send().await.expect("answer");
            let status = response.status().as_u16();
            let text = response.text().await.expect("body");
            let value = if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            };
            (status, value)
        })
    }

    fn root(running: &Running, method: &str, route: &str, body: Option<&str>) -> (u16, Value) {
        call(running, method, route, &[("X-Vault-Token", TOKEN)], body)
    }

    fn mutating(running: &Running) -> usize {
        lock(&running.sim.accounting().log)
            .iter()
            .filter(|entry| matches!(entry.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
            .count()
    }

    #[test]
    fn kv_life_cycle_through_bprun_client() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        let bao = client(&running, TOKEN);
        let secret = path("gitlab/bootstrap/admin_token");

        let missing = bao.kv_read(&secret).expect("read missing");
        assert_eq!((missing.data, missing.version), (None, 0));
        assert!(bao.kv_list(&path("gitlab")).expect("list").is_empty());

        let first = data(&[("token", "glpat-one"), ("user", "root")]);
        let written = bao.kv_write(&secret, &first, false).expect("write");
        assert_eq!((written.changed, written.version), (true, 1));
        let before = mutating(&running);
        let again = bao.kv_write(&secret, &first, false).expect("write again");
        assert_eq!((again.changed, again.version), (false, 1));
        assert_eq!(
            mutating(&running),
            before,
            "the same content is not written again"
        );

        let second = data(&[("token", "glpat-two"), ("user", "root")]);
        let written = bao
            .kv_write(&secret, &second, false)
            .expect("write different");
        assert_eq!((written.changed, written.version), (true, 2));
        let read = bao.kv_read(&secret).expect("read");
        assert_eq!(read.version, 2);
        assert_eq!(read.data, Some(second));

        let patched = bao
            .kv_patch(&secret, &data(&[("user", "admin")]), false)
            .expect("patch");
        assert_eq!((patched.changed, patched.version), (true, 3));
        let read = bao.kv_read(&secret).expect("read patched");
        assert_eq!(
            read.data,
            Some(data(&[("token", "glpat-two"), ("user", "admin")]))
        );
        let error = bao
            .kv_patch(&path("gitlab/none"), &data(&[("a", "b")]), false)
            .expect_err("nothing to patch");
        assert!(
            error
                .message
                .ends_with("nothing to patch at secret/gitlab/none"),
            "{}",
            error.message
        );

        bao.kv_write(&path("gitlab/runner"), &data(&[("t", "1")]), false)
            .expect("write a sibling");
        assert_eq!(
            bao.kv_list(&path("gitlab")).expect("list"),
            vec!["bootstrap/".to_string(), "runner".to_string()]
        );
        assert_eq!(
            bao.kv_list(&path("gitlab/bootstrap")).expect("list"),
            vec!["admin_token".to_string()]
        );

        assert!(bao.kv_delete(&secret, false).expect("delete"));
        assert!(!bao.kv_delete(&secret, false).expect("delete again"));
        let deleted = bao.kv_read(&secret).expect("read deleted");
        assert_eq!((deleted.data, deleted.version), (None, 3));
        // A write after a delete continues the version history (check-and-set on 3).
        let written = bao
            .kv_write(&secret, &data(&[("token", "again")]), false)
            .expect("write after delete");
        assert_eq!((written.changed, written.version), (true, 4));

        assert!(bao.kv_destroy(&secret, false).expect("destroy"));
        assert!(!bao.kv_destroy(&secret, false).expect("destroy again"));
        let destroyed = bao.kv_read(&secret).expect("read destroyed");
        assert_eq!((destroyed.data, destroyed.version), (None, 0));
        assert!(
            bao.kv_list(&path("gitlab/bootstrap"))
                .expect("list")
                .is_empty()
        );
    }

    #[test]
    fn check_and_set_conflicts_use_openbao_s_words() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        let write = |body: &str| root(&running, "POST", "/v1/secret/data/app/x", Some(body));
        let (status, answer) = write(r#"{"data":{"a":"1"},"options":{"cas":0}}"#);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["data"]["version"], 1);
        assert_eq!(answer["data"]["deletion_time"], "");
        for stale in [
            r#"{"data":{"a":"2"},"options":{"cas":0}}"#,
            r#"{"data":{"a":"2"},"options":{"cas":5}}"#,
        ] {
            let (status, answer) = write(stale);
            assert_eq!(status, 400);
            assert_eq!(
                answer,
                json!({"errors": ["check-and-set parameter did not match the current version"]})
            );
        }
        let (status, _) = write(r#"{"data":{"a":"2"},"options":{"cas":1}}"#);
        assert_eq!(status, 200);
        let (status, answer) = write(r#"{"data":{"a":"3"},"options":{"cas":"x"}}"#);
        assert_eq!(
            (status, answer),
            (
                400,
                json!({"errors": ["error parsing check-and-set parameter"]})
            )
        );
        let (status, answer) = write(r#"{"nodata":1}"#);
        assert_eq!(
            (status, answer),
            (400, json!({"errors": ["no data provided"]}))
        );

        // Through vaultrs, as bprun's client sends it: the error bprun matches on.
        let bao = client(&running, TOKEN);
        let vault = vaultrs::client::VaultClient::new(
            vaultrs::client::VaultClientSettingsBuilder::default()
                .address(running.url.as_str())
                .token(TOKEN)
                .build()
                .expect("settings"),
        )
        .expect("vault client");
        let result = bprun_clients::runtime::runtime().block_on(vaultrs::kv2::set_with_options(
            &vault,
            "secret",
            "app/x",
            &data(&[("a", "4")]),
            vaultrs::api::kv2::requests::SetSecretRequestOptions { cas: 1 },
        ));
        let error = result.expect_err("stale check-and-set");
        let message = bao.describe(error, "POST secret/data/app/x").message;
        assert!(
            message.ends_with("-> 400: check-and-set parameter did not match the current version"),
            "{message}"
        );
    }

    #[test]
    fn reads_versions_patches_and_deletes_answer_like_openbao() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        root(
            &running,
            "POST",
            "/v1/secret/data/p",
            Some(r#"{"data":{"a":"1","b":"2"}}"#),
        );
        root(
            &running,
            "PUT",
            "/v1/secret/data/p",
            Some(r#"{"data":{"a":"9"}}"#),
        );

        let (status, answer) = root(&running, "GET", "/v1/secret/data/p?version=1", None);
        assert_eq!(status, 200);
        assert_eq!(answer["data"]["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(answer["data"]["metadata"]["version"], 1);
        for field in [
            "request_id",
            "lease_id",
            "renewable",
            "lease_duration",
            "wrap_info",
            "warnings",
            "auth",
        ] {
            assert!(answer.get(field).is_some(), "{field} missing: {answer}");
        }
        assert_eq!(
            root(&running, "GET", "/v1/secret/data/p?version=7", None),
            (404, json!({"errors": []}))
        );
        assert_eq!(
            root(&running, "GET", "/v1/secret/data/none", None),
            (404, json!({"errors": []}))
        );
        let (status, answer) = root(&running, "GET", "/v1/secret/data/p?version=abc", None);
        assert_eq!(status, 400, "{answer}");

        // Merge patch: null removes a key; the content type is required.
        let merge = [
            ("X-Vault-Token", TOKEN),
            ("Content-Type", "application/merge-patch+json"),
        ];
        let (status, answer) = call(
            &running,
            "PATCH",
            "/v1/secret/data/p",
            &merge,
            Some(r#"{"data":{"c":"3","a":null}}"#),
        );
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["data"]["version"], 3);
        let (_, answer) = root(&running, "GET", "/v1/secret/data/p", None);
        assert_eq!(answer["data"]["data"], json!({"c": "3"}));
        let json_type = [
            ("X-Vault-Token", TOKEN),
            ("Content-Type", "application/json"),
        ];
        let (status, answer) = call(
            &running,
            "PATCH",
            "/v1/secret/data/p",
            &json_type,
            Some(r#"{"data":{}}"#),
        );
        assert_eq!(status, 415);
        assert_eq!(
            answer,
            json!({"errors": ["PATCH requires Content-Type of application/merge-patch+json, provided application/json"]})
        );
        let (status, answer) = call(
            &running,
            "PATCH",
            "/v1/secret/data/none",
            &merge,
            Some(r#"{"data":{"c":"3"}}"#),
        );
        assert_eq!((status, answer), (404, Value::Null));

        // Soft delete: 204, then a 404 that still carries the version's metadata.
        assert_eq!(
            root(&running, "DELETE", "/v1/secret/data/p", None),
            (204, Value::Null)
        );
        let (status, answer) = root(&running, "GET", "/v1/secret/data/p", None);
        assert_eq!(status, 404);
        assert_eq!(answer["data"]["data"], Value::Null);
        assert_eq!(answer["data"]["metadata"]["version"], 3);
        assert_ne!(answer["data"]["metadata"]["deletion_time"], "");
        assert!(answer.get("errors").is_none());
        let (status, metadata) = root(&running, "GET", "/v1/secret/metadata/p", None);
        assert_eq!(status, 200);
        assert_eq!(metadata["data"]["current_version"], 3);
        assert_eq!(metadata["data"]["oldest_version"], 0);
        assert_eq!(
            metadata["data"]["versions"].as_object().map(Map::len),
            Some(3)
        );
        assert_ne!(metadata["data"]["versions"]["3"]["deletion_time"], "");
        assert_eq!(metadata["data"]["versions"]["2"]["deletion_time"], "");

        // Undelete and destroy single versions.
        assert_eq!(
            root(
                &running,
                "POST",
                "/v1/secret/undelete/p",
                Some(r#"{"versions":[3]}"#)
            )
            .0,
            204
        );
        assert_eq!(root(&running, "GET", "/v1/secret/data/p", None).0, 200);
        assert_eq!(
            root(
                &running,
                "POST",
                "/v1/secret/destroy/p",
                Some(r#"{"versions":[1]}"#)
            )
            .0,
            204
        );
        let (status, answer) = root(&running, "GET", "/v1/secret/data/p?version=1", None);
        assert_eq!(status, 404);
        assert_eq!(answer["data"]["metadata"]["destroyed"], true);

        // Listing: LIST and GET ?list=true; folders end with a slash; nothing is a 404.
        root(
            &running,
            "POST",
            "/v1/secret/data/p/q",
            Some(r#"{"data":{"x":"1"}}"#),
        );
        let (status, answer) = root(&running, "LIST", "/v1/secret/metadata/", None);
        assert_eq!(status, 200);
        assert_eq!(answer["data"]["keys"], json!(["p", "p/"]));
        let (_, answer) = root(&running, "GET", "/v1/secret/metadata/p?list=true", None);
        assert_eq!(answer["data"]["keys"], json!(["q"]));
        assert_eq!(
            root(&running, "LIST", "/v1/secret/metadata/nothing", None),
            (404, json!({"errors": []}))
        );
        assert_eq!(
            root(&running, "LIST", "/v1/nomount/metadata/x", None),
            (
                404,
                json!({"errors": ["no handler for route \"nomount/metadata/x/\". route entry not found."]})
            )
        );

        // Destroying the metadata forgets the key.
        assert_eq!(
            root(&running, "DELETE", "/v1/secret/metadata/p", None),
            (204, Value::Null)
        );
        assert_eq!(
            root(&running, "GET", "/v1/secret/metadata/p", None),
            (404, json!({"errors": []}))
        );
        assert_eq!(
            root(&running, "DELETE", "/v1/secret/metadata/p", None).0,
            204
        );
    }

    #[test]
    fn only_ten_versions_are_kept() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        for n in 1..=12 {
            let body = format!(r#"{{"data":{{"n":"{n}"}}}}"#);
            assert_eq!(
                root(&running, "POST", "/v1/secret/data/many", Some(&body)).0,
                200
            );
        }
        let (_, metadata) = root(&running, "GET", "/v1/secret/metadata/many", None);
        assert_eq!(metadata["data"]["current_version"], 12);
        assert_eq!(metadata["data"]["oldest_version"], 3);
        assert_eq!(
            metadata["data"]["versions"].as_object().map(Map::len),
            Some(10)
        );
        assert_eq!(
            root(&running, "GET", "/v1/secret/data/many?version=2", None).0,
            404
        );
    }

    #[test]
    fn mounts_enable_kv_and_answer_their_config() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        let bao = client(&running, TOKEN);
        assert_eq!(
            bao.mount("secret").expect("mounts"),
            Some(("kv".to_string(), "2".to_string()))
        );
        assert_eq!(bao.mount("apps").expect("mounts"), None);
        bao.enable_kv("apps", 2).expect("enable kv v2");
        assert_eq!(
            bao.mount("apps").expect("mounts"),
            Some(("kv".to_string(), "2".to_string()))
        );
        let (status, config) = root(&running, "GET", "/v1/apps/config", None);
        assert_eq!(status, 200);
        assert_eq!(
            config["data"],
            json!({"cas_required": false, "delete_version_after": "0s", "max_versions": 0, "metadata_cas_required": false})
        );
        let error = bao.enable_kv("apps", 2).expect_err("already mounted");
        assert!(
            error
                .message
                .ends_with("-> 400: path is already in use at apps/"),
            "{}",
            error.message
        );

        bao.enable_kv("legacy", 1).expect("enable kv v1");
        assert_eq!(
            bao.mount("legacy").expect("mounts"),
            Some(("kv".to_string(), "1".to_string()))
        );
        assert_eq!(root(&running, "GET", "/v1/legacy/config", None).0, 404);
        assert_eq!(
            root(&running, "PUT", "/v1/legacy/k", Some(r#"{"a":"1"}"#)).0,
            204
        );
        let (status, answer) = root(&running, "GET", "/v1/legacy/k", None);
        assert_eq!(status, 200);
        assert_eq!(answer["data"], json!({"a": "1"}));
        assert_eq!(answer["lease_duration"], KV1_LEASE_SECONDS);

        // A KV v2 secret on the new mount, through bprun's `mount:path` addressing.
        let other = KvPath::parse("apps:team/x", None).expect("path");
        assert!(
            bao.kv_write(&other, &data(&[("a", "1")]), false)
                .expect("write")
                .changed
        );
        let missing = KvPath::parse("nomount:x/y", None).expect("path");
        let error = bao.kv_read(&missing).expect_err("no such mount");
        assert!(
            error.message.contains("no KV mount `nomount`"),
            "{}",
            error.message
        );

        let (status, mounts) = root(&running, "GET", "/v1/sys/mounts", None);
        assert_eq!(status, 200);
        for mount in [
            "cubbyhole/",
            "identity/",
            "sys/",
            "secret/",
            "apps/",
            "legacy/",
        ] {
            assert!(mounts["data"].get(mount).is_some(), "{mount} missing");
            assert!(
                mounts.get(mount).is_some(),
                "{mount} missing at the top level"
            );
        }
        assert_eq!(
            root(
                &running,
                "POST",
                "/v1/sys/mounts/sys",
                Some(r#"{"type":"kv"}"#)
            ),
            (400, json!({"errors": ["cannot mount \"sys/\""]}))
        );
        assert_eq!(
            root(
                &running,
                "POST",
                "/v1/sys/mounts/transit",
                Some(r#"{"type":"transit"}"#)
            )
            .0,
            400
        );
        assert_eq!(
            root(&running, "DELETE", "/v1/sys/mounts/legacy", None).0,
            204
        );
        assert_eq!(bao.mount("legacy").expect("mounts"), None);
    }

    #[test]
    fn a_wrong_token_is_permission_denied() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        let bao = client(&running, "not-the-token");
        let error = bao.kv_read(&path("a/b")).expect_err("denied");
        assert!(
            error
                .message
                .ends_with("GET secret/data/a/b -> 403: permission denied"),
            "{}",
            error.message
        );
        assert_eq!(
            error.hint.as_deref(),
            Some(
                "the token is invalid or expired: set BAO_TOKEN, or keep the root token in the init file"
            )
        );
        assert_eq!(
            call(&running, "GET", "/v1/sys/mounts", &[], None),
            (403, json!({"errors": ["permission denied"]}))
        );
        // Health and seal status need no token.
        assert_eq!(call(&running, "GET", "/v1/sys/health", &[], None).0, 200);
        assert_eq!(
            call(&running, "GET", "/v1/sys/seal-status", &[], None).0,
            200
        );
        // The root token looks itself up.
        let (status, answer) = root(&running, "GET", "/v1/auth/token/lookup-self", None);
        assert_eq!(status, 200);
        assert_eq!(answer["data"]["policies"], json!(["root"]));
        assert_eq!(answer["data"]["id"], TOKEN);
    }

    #[test]
    fn seal_status_seal_and_unseal() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        let bao = client(&running, TOKEN);
        let status = bao.status().expect("status");
        assert!(status.initialized && !status.sealed, "{status:?}");
        assert_eq!(status.version, VERSION);
        bao.wait_active().expect("active");

        bao.seal().expect("seal");
        assert!(bao.status().expect("status").sealed);
        let (status, health) = call(&running, "GET", "/v1/sys/health", &[], None);
        assert_eq!(status, 503);
        assert_eq!(health["sealed"], true);
        let error = bao.kv_read(&path("a/b")).expect_err("sealed");
        assert!(
            error.message.ends_with("-> 503: Vault is sealed"),
            "{}",
            error.message
        );
        assert!(
            error
                .hint
                .as_deref()
                .is_some_and(|hint| hint.starts_with("OpenBao is sealed"))
        );

        let wrong = InitResponse {
            keys: vec![base64::engine::general_purpose::STANDARD.encode([7u8; 32])],
            keys_base64: Vec::new(),
            root_token: TOKEN.to_string(),
            unseal_shares: 1,
            unseal_threshold: 1,
        };
        assert!(bao.unseal(&wrong).is_err());
        let right = InitResponse {
            keys: vec![running.unseal_key()],
            ..wrong
        };
        assert_eq!(bao.unseal(&right).expect("unseal"), 1);
        let status = bao.status().expect("status");
        assert!(!status.sealed);
        assert_eq!(
            call(&running, "GET", "/v1/sys/init", &[], None),
            (200, json!({"initialized": true}))
        );
    }

    #[test]
    fn policies_are_written_once_and_read_back() {
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        let bao = client(&running, TOKEN);
        let hcl = r#"path "secret/data/gitlab/*" { capabilities = ["read"] }"#;
        assert!(bao.policy_write("gitlab-read", hcl, false).expect("write"));
        assert!(
            !bao.policy_write("gitlab-read", hcl, false)
                .expect("write again")
        );
        let (status, answer) = root(&running, "GET", "/v1/sys/policies/acl/gitlab-read", None);
        assert_eq!(status, 200);
        assert_eq!(answer["data"]["policy"], hcl);
        assert_eq!(answer["data"]["name"], "gitlab-read");
        let (_, legacy) = root(&running, "GET", "/v1/sys/policy/gitlab-read", None);
        assert_eq!(legacy["rules"], hcl);
        assert_eq!(legacy["data"]["rules"], hcl);
        let (_, list) = root(&running, "LIST", "/v1/sys/policies/acl", None);
        assert_eq!(
            list["data"]["keys"],
            json!(["default", "gitlab-read", "root"])
        );
        assert_eq!(
            root(
                &running,
                "PUT",
                "/v1/sys/policies/acl/x",
                Some(r#"{"policy":""}"#)
            ),
            (
                400,
                json!({"errors": ["'policy' parameter not supplied or empty"]})
            )
        );
        assert_eq!(
            root(&running, "GET", "/v1/sys/policies/acl/nope", None),
            (404, json!({"errors": []}))
        );
    }

    #[test]
    fn unclean_paths_redirect_like_go() {
        assert_eq!(clean_path("/v1//sys/policy/p"), "/v1/sys/policy/p");
        assert_eq!(clean_path("/v1/secret/metadata/"), "/v1/secret/metadata/");
        assert_eq!(clean_path("/v1/a/./b/../c"), "/v1/a/c");
        let running = start("127.0.0.1:0", TOKEN).expect("start");
        // reqwest follows the 307 with the method, body and token, as with the real server.
        let (status, _) = root(
            &running,
            "PUT",
            "/v1//sys/policy/p1",
            Some(r#"{"policy":"path \"a\" {}"}"#),
        );
        assert_eq!(status, 204);
        let log = running.sim.accounting().snapshot();
        let statuses: Vec<u64> = log["requests"]
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter_map(|e| e["status"].as_u64())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(statuses, vec![307, 204]);
    }

    #[test]
    fn dropping_the_handle_stops_the_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let running = start_on(listener, "").expect("start on a bound listener");
        assert!(running.token.starts_with("s."), "{}", running.token);
        assert_eq!(running.url, format!("http://{address}"));
        assert_eq!(call(&running, "GET", "/v1/sys/health", &[], None).0, 200);
        drop(running);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(address).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "still listening on {address}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(start("0.0.0.0:0", TOKEN).is_err(), "loopback only");
    }
}
