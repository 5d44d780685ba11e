//! KV v1: plain keys, no versions.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

use super::{
    Operation, SimRequest, SimResponse, TRAILING_SLASH, UNSUPPORTED_OPERATION, body_of, envelope,
    errors, list_answer, list_keys, no_content, not_found,
};

/// The lease a KV v1 read reports (the system default TTL, 32 days).
pub(super) const KV1_LEASE_SECONDS: u64 = 2_764_800;

/// A KV v1 mount: plain keys, no versions.
pub(super) fn kv1(
    store: &mut BTreeMap<String, Map<String, Value>>,
    op: Operation,
    path: &str,
    request: &SimRequest,
) -> SimResponse {
    match op {
        Operation::Read => match store.get(path) {
            Some(data) => {
                let mut answer = envelope(Value::Object(data.clone()));
                answer["lease_duration"] = json!(KV1_LEASE_SECONDS);
                SimResponse::json(200, &answer)
            }
            None => not_found(),
        },
        Operation::List => list_answer(list_keys(store.keys(), path)),
        Operation::Write => {
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
        Operation::Delete => {
            store.remove(path);
            no_content()
        }
        Operation::Patch => errors(405, &[UNSUPPORTED_OPERATION]),
    }
}
