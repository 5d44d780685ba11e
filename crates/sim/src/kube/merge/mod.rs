//! Write semantics of kube-apiserver for the simulator, as pure functions over JSON values:
//! JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch, server-side
//! apply and the `metadata.managedFields` bookkeeping of ordinary updates.
//!
//! Field ownership is modelled as sets of paths (the structured-merge-diff model) and encoded
//! as FieldsV1 (`{"f:spec":{"f:replicas":{}}}`). List semantics (associative by a key, set of
//! scalars, or atomic) come from a small table of the built-in kinds in [`list_merge_key`].
//!
//! One file per concern: `json_patch` (RFC 6902, on the `json-patch` crate), `schema` (list
//! semantics), `strategic` (strategic merge patch), `fields_v1` (field sets and their encoding),
//! `managed_fields` (entries and the bookkeeping of updates) and `apply` (server-side apply).
//! JSON merge patch is the `json-patch` crate's, here.

use std::fmt;

use serde_json::{Map, Value};

mod apply;
mod fields_v1;
mod json_patch;
mod managed_fields;
mod schema;
mod strategic;

pub use apply::{Apply, server_side_apply};
pub use fields_v1::fields_v1_of;
pub use json_patch::json_patch;
pub use managed_fields::record_update;
pub use schema::{SCALAR_SET, list_merge_key};
pub use strategic::strategic_merge_patch;

/// Why a write could not be carried out.
#[derive(Debug, Clone, PartialEq)]
pub enum MergeError {
    /// The patch itself is malformed (maps to HTTP 400/422 BadRequest/Invalid); message says what and where.
    Invalid(String),
    /// Server-side apply conflicts: (other manager, field path like ".spec.replicas").
    Conflict(Vec<(String, String)>),
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MergeError::Invalid(msg) => f.write_str(msg),
            MergeError::Conflict(conflicts) => {
                // Same wording as kube-apiserver so clients that grep the message keep working.
                let plural = if conflicts.len() == 1 { "" } else { "s" };
                write!(
                    f,
                    "Apply failed with {} conflict{plural}: ",
                    conflicts.len()
                )?;
                for (i, (manager, path)) in conflicts.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "conflict with \"{manager}\": {path}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for MergeError {}

fn invalid(msg: impl Into<String>) -> MergeError {
    MergeError::Invalid(msg.into())
}

/// RFC 7386 JSON merge patch (null deletes; non-objects replace; nulls in new values are
/// dropped too), as the `json-patch` crate implements it.
pub fn json_merge_patch(target: &Value, patch: &Value) -> Value {
    let mut out = target.clone();
    ::json_patch::merge(&mut out, patch);
    out
}

/// JSON equality where numbers compare by value (1 == 1.0), as RFC 6902 `test` requires.
/// The object at `map[key]`, made an empty object first when it is missing or not an object.
fn object_member<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let member = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !member.is_object() {
        *member = Value::Object(Map::new());
    }
    match member {
        Value::Object(object) => object,
        _ => unreachable!("made an object above"),
    }
}

pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(l, r)| json_eq(l, r))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, l)| y.get(k).is_some_and(|r| json_eq(l, r)))
        }
        _ => a == b,
    }
}

pub(super) fn opt_json_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => json_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // ---- JSON merge patch ----

    #[test]
    fn merge_patch_null_deletes_and_merges_nested() {
        let target = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]});
        let patch = json!({"a": null, "b": {"c": null, "x": {"y": null, "z": 1}}, "e": [3]});
        assert_eq!(
            json_merge_patch(&target, &patch),
            json!({"b": {"d": 3, "x": {"z": 1}}, "e": [3]})
        );
    }

    #[test]
    fn merge_patch_non_object_replaces() {
        assert_eq!(json_merge_patch(&json!({"a": 1}), &json!([1])), json!([1]));
        assert_eq!(
            json_merge_patch(&json!({"a": "s"}), &json!({"a": {"b": 1}})),
            json!({"a": {"b": 1}})
        );
    }
}

/// Objects and readers the tests of several write kinds share.
#[cfg(test)]
mod test_support {
    use serde_json::{Value, json};

    pub(super) const T1: &str = "2024-01-01T00:00:00Z";
    pub(super) const T2: &str = "2024-01-02T00:00:00Z";

    pub(super) fn entries_of(obj: &Value) -> Vec<Value> {
        obj["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub(super) fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
        obj["metadata"]["managedFields"]
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
    }

    pub(super) fn without_times(obj: &Value) -> Value {
        let mut obj = obj.clone();
        if let Some(list) = obj["metadata"]["managedFields"].as_array_mut() {
            for e in list {
                e.as_object_mut().unwrap().remove("time");
            }
        }
        obj
    }

    pub(super) fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}
                }
            }
        })
    }
}
