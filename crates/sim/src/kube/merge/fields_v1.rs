//! Field sets (the structured-merge-diff model) and their FieldsV1 encoding.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::schema::{SCALAR_SET, is_atomic_map, list_merge_key, str_refs};
use super::{MergeError, invalid};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PathStep {
    /// A map/struct field.
    Field(String),
    /// An associative list item, by its key fields as compact JSON (`{"name":"web"}`).
    Key(String),
    /// A set-of-scalars item, as compact JSON.
    Value(String),
}

pub(super) type FieldPath = Vec<PathStep>;
pub(super) type FieldSet = BTreeSet<FieldPath>;

/// Metadata fields the server owns; they never appear in field sets.
pub(super) const IGNORED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// Which part of an object a write covers: the main resource or the status subresource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scope {
    Main,
    Status,
}

/// Every owned path of `obj`: leaves, associative list items (as members) and their fields.
/// `strict` rejects associative lists with missing or duplicate keys (apply input); otherwise
/// such lists are treated as atomic (stored objects must never make bookkeeping fail).
pub(super) fn object_fields(
    obj: &Value,
    kind: &str,
    scope: Scope,
    strict: bool,
) -> Result<FieldSet, MergeError> {
    let mut out = FieldSet::new();
    let Value::Object(root) = obj else {
        return Ok(out);
    };
    let mut names = Vec::new();
    let mut path = Vec::new();
    for (key, value) in root {
        let wanted = match scope {
            Scope::Status => key == "status",
            Scope::Main => !matches!(key.as_str(), "apiVersion" | "kind" | "status"),
        };
        if !wanted {
            continue;
        }
        names.push(key.clone());
        path.push(PathStep::Field(key.clone()));
        match (key.as_str(), value) {
            ("metadata", Value::Object(meta)) => {
                for (mk, mv) in meta {
                    if IGNORED_METADATA.contains(&mk.as_str()) {
                        continue;
                    }
                    names.push(mk.clone());
                    path.push(PathStep::Field(mk.clone()));
                    collect_fields(mv, kind, &mut names, &mut path, &mut out, strict)?;
                    names.pop();
                    path.pop();
                }
            }
            ("metadata", _) => {}
            _ => collect_fields(value, kind, &mut names, &mut path, &mut out, strict)?,
        }
        names.pop();
        path.pop();
    }
    Ok(out)
}

fn collect_fields(
    value: &Value,
    kind: &str,
    names: &mut Vec<String>,
    path: &mut FieldPath,
    out: &mut FieldSet,
    strict: bool,
) -> Result<(), MergeError> {
    match value {
        // A null is "not set": nobody owns it.
        Value::Null => {}
        Value::Object(m) if !m.is_empty() && !is_atomic_map(kind, &str_refs(names)) => {
            collect_children(m, kind, names, path, out, strict)?;
        }
        Value::Array(items) if !items.is_empty() => match list_merge_key(kind, &str_refs(names)) {
            None => {
                out.insert(path.clone());
            }
            Some(SCALAR_SET) => {
                for item in items {
                    path.push(PathStep::Value(item.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            Some(key) => match item_keys(items, key) {
                Ok(keys) => {
                    for (item, item_key) in items.iter().zip(keys) {
                        path.push(PathStep::Key(item_key));
                        out.insert(path.clone());
                        if let Value::Object(m) = item {
                            collect_children(m, kind, names, path, out, strict)?;
                        }
                        path.pop();
                    }
                }
                Err(msg) if strict => {
                    return Err(invalid(format!("{}: {msg}", path_string(path))));
                }
                Err(_) => {
                    out.insert(path.clone());
                }
            },
        },
        _ => {
            out.insert(path.clone());
        }
    }
    Ok(())
}

fn collect_children(
    map: &Map<String, Value>,
    kind: &str,
    names: &mut Vec<String>,
    path: &mut FieldPath,
    out: &mut FieldSet,
    strict: bool,
) -> Result<(), MergeError> {
    for (key, child) in map {
        names.push(key.clone());
        path.push(PathStep::Field(key.clone()));
        collect_fields(child, kind, names, path, out, strict)?;
        names.pop();
        path.pop();
    }
    Ok(())
}

/// The `k:` identity of each item of an associative list, or why the list is not one.
fn item_keys(items: &[Value], key: &str) -> Result<Vec<String>, String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Some(id) = item.get(key).filter(|v| !v.is_null()) else {
            return Err(format!("list item {i} lacks its key field {key:?}"));
        };
        let mut key_map = Map::new();
        key_map.insert(key.to_string(), id.clone());
        let encoded = Value::Object(key_map).to_string();
        if !seen.insert(encoded.clone()) {
            return Err(format!("duplicate entries for key [{key}={id}]"));
        }
        out.push(encoded);
    }
    Ok(out)
}

/// A path as kube-apiserver prints it in conflicts: `.spec.containers[name="web"].image`.
pub(super) fn path_string(path: &[PathStep]) -> String {
    let mut s = String::new();
    for step in path {
        // Writing to a String cannot fail.
        let _ = match step {
            PathStep::Field(name) => write!(s, ".{name}"),
            PathStep::Key(json) => match parse_key(json) {
                Some(key) => {
                    let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(s, "[{}]", parts.join(","))
                }
                None => write!(s, "[{json}]"),
            },
            PathStep::Value(json) => write!(s, "[={json}]"),
        };
    }
    s
}

pub(super) fn parse_key(json: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(json).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

fn key_matches(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| item.get(k) == Some(v))
}

pub(super) fn value_at<'a>(value: &'a Value, path: &[PathStep]) -> Option<&'a Value> {
    let mut cur = value;
    for step in path {
        cur = match step {
            PathStep::Field(name) => cur.as_object()?.get(name)?,
            PathStep::Key(json) => {
                let key = parse_key(json)?;
                cur.as_array()?.iter().find(|e| key_matches(e, &key))?
            }
            PathStep::Value(json) => {
                let wanted: Value = serde_json::from_str(json).ok()?;
                cur.as_array()?.iter().find(|e| **e == wanted)?
            }
        };
    }
    Some(cur)
}

fn value_at_mut<'a>(value: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = value;
    for step in path {
        cur = match step {
            PathStep::Field(name) => cur.as_object_mut()?.get_mut(name)?,
            PathStep::Key(json) => {
                let key = parse_key(json)?;
                cur.as_array_mut()?
                    .iter_mut()
                    .find(|e| key_matches(e, &key))?
            }
            PathStep::Value(json) => {
                let wanted: Value = serde_json::from_str(json).ok()?;
                cur.as_array_mut()?.iter_mut().find(|e| **e == wanted)?
            }
        };
    }
    Some(cur)
}

/// Removes the field or list item at `path`; false when it was not there.
pub(super) fn remove_at(value: &mut Value, path: &[PathStep]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let Some(parent) = value_at_mut(value, parent_path) else {
        return false;
    };
    match last {
        PathStep::Field(name) => parent
            .as_object_mut()
            .is_some_and(|m| m.remove(name).is_some()),
        PathStep::Key(json) => {
            let (Some(key), Some(items)) = (parse_key(json), parent.as_array_mut()) else {
                return false;
            };
            let before = items.len();
            items.retain(|e| !key_matches(e, &key));
            items.len() != before
        }
        PathStep::Value(json) => {
            let (Ok(wanted), Some(items)) =
                (serde_json::from_str::<Value>(json), parent.as_array_mut())
            else {
                return false;
            };
            let before = items.len();
            items.retain(|e| *e != wanted);
            items.len() != before
        }
    }
}

/// Whether `set` holds `path` or anything below it.
pub(super) fn owns_at_or_below(set: &FieldSet, path: &[PathStep]) -> bool {
    // Paths sharing a prefix are contiguous in the ordered set, starting at the prefix itself.
    set.range(path.to_vec()..)
        .next()
        .is_some_and(|p| p.starts_with(path))
}

fn step_key(step: &PathStep) -> String {
    match step {
        PathStep::Field(name) => format!("f:{name}"),
        PathStep::Key(json) => format!("k:{json}"),
        PathStep::Value(json) => format!("v:{json}"),
    }
}

#[derive(Default)]
struct Node {
    member: bool,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        // "." marks a node that is itself owned and also has owned children.
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (key, child) in &self.children {
            m.insert(key.clone(), child.to_json());
        }
        Value::Object(m)
    }
}

pub(super) fn encode_fields(set: &FieldSet) -> Value {
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for step in path {
            node = node.children.entry(step_key(step)).or_default();
        }
        node.member = true;
    }
    root.to_json()
}

pub(super) fn decode_fields(value: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    decode_node(value, &mut Vec::new(), &mut out);
    out
}

fn decode_node(value: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    let Value::Object(m) = value else {
        return;
    };
    if m.is_empty() && !path.is_empty() {
        out.insert(path.clone());
    }
    for (key, child) in m {
        if key == "." {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            continue;
        }
        let step = if let Some(name) = key.strip_prefix("f:") {
            PathStep::Field(name.to_string())
        } else if let Some(json) = key.strip_prefix("k:") {
            PathStep::Key(normalize_json(json))
        } else if let Some(json) = key.strip_prefix("v:") {
            PathStep::Value(normalize_json(json))
        } else {
            // "i:" (list index) steps do not occur for the kinds modelled here.
            continue;
        };
        path.push(step);
        decode_node(child, path, out);
        path.pop();
    }
}

/// Re-serialises JSON compactly with sorted keys so keys written by others compare equal to ours.
fn normalize_json(json: &str) -> String {
    serde_json::from_str::<Value>(json)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| json.to_string())
}

/// FieldsV1 encoding helpers: a field set as the nested `{"f:spec":{"f:replicas":{}}, ...}` JSON, with `"k:{\"name\":\"web\"}"` keys for associative list elements (with a `".":{}` member for the element itself) and `"v:<json>"` for set-like scalar lists (finalizers).
///
/// The set is that of the main resource as an applier would own it: every leaf, atomic lists and
/// maps as a whole, list items by key; `status`, `apiVersion`, `kind` and server-owned metadata
/// (name, namespace, uid, resourceVersion, ...) are left out.
pub fn fields_v1_of(object: &Value, kind: &str) -> Value {
    // Non-strict never fails: malformed associative lists are owned as a whole.
    encode_fields(&object_fields(object, kind, Scope::Main, false).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_of_deployment_with_two_containers() {
        let mut d = deployment(1, "nginx:1");
        d["metadata"]["uid"] = json!("123");
        d["metadata"]["resourceVersion"] = json!("7");
        d["status"] = json!({"replicas": 1});
        d["spec"]["template"]["spec"]["containers"] = json!([
            {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
            {"name": "log", "image": "busybox", "args": ["tail", "-f"]}
        ]);
        assert_eq!(
            fields_v1_of(&d, "Deployment"),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}, "f:tier": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:containers": {
                            "k:{\"name\":\"log\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {}},
                            "k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {},
                                "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}, "f:protocol": {}}}}
                        }}
                    }
                }
            })
        );
    }

    #[test]
    fn fields_v1_roundtrips_through_decode() {
        let fields = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:finalizers": {"v:\"x\"": {}}},
            "f:spec": {"f:containers": {"k:{\"name\": \"a\"}": {".": {}, "f:image": {}}}}
        });
        let set = decode_fields(&fields);
        assert!(set.contains(&vec![
            PathStep::Field("spec".into()),
            PathStep::Field("containers".into()),
            PathStep::Key("{\"name\":\"a\"}".into())
        ]));
        let again = encode_fields(&set);
        assert_eq!(decode_fields(&again), set);
        assert_eq!(
            again["f:spec"]["f:containers"]["k:{\"name\":\"a\"}"],
            json!({".": {}, "f:image": {}})
        );
    }
}
