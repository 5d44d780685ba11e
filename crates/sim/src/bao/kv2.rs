//! KV v2: versions, check-and-set, merge patches, soft delete, undelete, destroy, metadata and
//! listing.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

use super::{
    Operation, SimRequest, SimResponse, TRAILING_SLASH, UNSUPPORTED_OPERATION, body_of, data_field,
    envelope, errors, json_error, list_answer, list_keys, no_content, not_found, not_implemented,
    number, ok, timestamp,
};

/// KV v2 keeps this many versions when `max_versions` is 0 (the default).
const DEFAULT_MAX_VERSIONS: usize = 10;

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
pub(super) struct Secret {
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

/// The KV v2 routes of one mount (`sub` is the path after the mount).
pub(super) fn kv2(
    store: &mut BTreeMap<String, Secret>,
    op: Operation,
    sub: &str,
    request: &SimRequest,
) -> SimResponse {
    let (head, path) = sub.split_once('/').unwrap_or((sub, ""));
    match (head, op) {
        ("config", Operation::Read) if path.is_empty() => ok(json!({
            "cas_required": false,
            "delete_version_after": "0s",
            "max_versions": 0,
            "metadata_cas_required": false,
        })),
        ("config", Operation::Write) if path.is_empty() => {
            not_implemented("writing a KV v2 mount's config")
        }
        ("data", Operation::Read) => kv2_read(store, path, request),
        ("data", Operation::Write) => kv2_write(store, path, request),
        ("data", Operation::Patch) => kv2_patch(store, path, request),
        ("data", Operation::Delete) => {
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
        ("metadata", Operation::Read) => match store.get(path) {
            Some(secret) => ok(secret.metadata()),
            None => not_found(),
        },
        ("metadata", Operation::List) => list_answer(list_keys(store.keys(), path)),
        ("metadata", Operation::Delete) => {
            store.remove(path);
            no_content()
        }
        ("metadata", Operation::Write | Operation::Patch) => {
            not_implemented("KV v2 metadata writes (max_versions, custom_metadata)")
        }
        ("delete" | "undelete" | "destroy", Operation::Write) => {
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
                Operation::Read => "get",
                Operation::List => "list",
                Operation::Write => "put",
                Operation::Patch => "patch",
                Operation::Delete => "delete",
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
        return SimResponse::bytes(404, "application/json", Vec::new());
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
    json_patch::merge(&mut merged, &changes);
    let Value::Object(merged) = merged else {
        return errors(400, &["no data provided"]);
    };
    let number = secret.push(merged);
    match secret.versions.get(&number) {
        Some(version) => ok(version.metadata(number)),
        None => not_found(),
    }
}
