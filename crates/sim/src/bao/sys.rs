//! `sys/`: health, seal status, seal and unseal, the mount table (KV v1 and v2 only), and the
//! root token's `auth/token/lookup-self`.

use serde_json::{Map, Value, json};

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;

use super::kv2::Secret;
use super::policies::policy;
use super::{
    BaoSim, Operation, SimRequest, SimResponse, State, UNSUPPORTED_OPERATION, UNSUPPORTED_PATH,
    VERSION, body_of, errors, hex, legacy, no_content, number, ok, uuid,
};

const COMMIT_DATE: &str = "2026-10-26T20:32:27Z";
const PLUGIN_VERSION: &str = "v2.7.2+builtin.bao";

/// The mounts of a fresh dev server: the built-in ones and KV v2 at `secret/`.
pub(super) fn dev_mounts() -> BTreeMap<String, Mount> {
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
    mounts
}

pub(super) enum Engine {
    System,
    Identity,
    Cubbyhole,
    KvV1(BTreeMap<String, Map<String, Value>>),
    KvV2(BTreeMap<String, Secret>),
}

pub(super) struct Mount {
    pub(super) engine: Engine,
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

impl BaoSim {
    pub(super) fn health(&self, state: &State, request: &SimRequest) -> SimResponse {
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

    pub(super) fn seal_status(&self, state: &State) -> SimResponse {
        SimResponse::json(200, &self.seal_status_json(state))
    }

    pub(super) fn unseal(&self, state: &mut State, request: &SimRequest) -> SimResponse {
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

    pub(super) fn token_info(&self) -> Value {
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

    pub(super) fn sys(
        &self,
        state: &mut State,
        op: Operation,
        path: &str,
        request: &SimRequest,
    ) -> SimResponse {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        match (op, segments.as_slice()) {
            (Operation::Write, ["sys", "seal"]) => {
                state.sealed = true;
                no_content()
            }
            (Operation::Read, ["sys", "mounts"]) => {
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
                    Operation::Read => match state.mounts.get(&mount) {
                        Some(found) => legacy(found.to_json()),
                        None => errors(400, &[&format!("No secret engine mount at {mount}")]),
                    },
                    Operation::Write => enable(state, &mount, request),
                    Operation::Delete => {
                        if matches!(mount.as_str(), "sys/" | "cubbyhole/" | "identity/") {
                            return errors(400, &[&format!("cannot unmount \"{mount}\"")]);
                        }
                        state.mounts.remove(&mount);
                        no_content()
                    }
                    _ => errors(405, &[UNSUPPORTED_OPERATION]),
                }
            }
            (Operation::Read | Operation::List, ["sys", "policy"]) => {
                let names: Vec<&String> = state.policies.keys().collect();
                legacy(json!({"keys": names, "policies": names}))
            }
            (Operation::List, ["sys", "policies", "acl"]) => {
                let names: Vec<&String> = state.policies.keys().collect();
                ok(json!({ "keys": names }))
            }
            (_, ["sys", "policy", name]) => policy(state, op, name, request, true),
            (_, ["sys", "policies", "acl", name]) => policy(state, op, name, request, false),
            _ => errors(404, &[UNSUPPORTED_PATH]),
        }
    }
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
