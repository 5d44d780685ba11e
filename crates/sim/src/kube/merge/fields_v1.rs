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
    let mut collector = FieldCollector {
        kind,
        strict,
        names: Vec::new(),
        path: Vec::new(),
        out: FieldSet::new(),
    };
    let Value::Object(root) = obj else {
        return Ok(collector.out);
    };
    for (key, value) in root {
        let wanted = match scope {
            Scope::Status => key == "status",
            Scope::Main => !matches!(key.as_str(), "apiVersion" | "kind" | "status"),
        };
        match (key.as_str(), value) {
            _ if !wanted => {}
            ("metadata", Value::Object(meta)) => collector.within(key, |collector| {
                let owned = meta
                    .iter()
                    .filter(|(name, _)| !IGNORED_METADATA.contains(&name.as_str()));
                for (name, field) in owned {
                    collector.field(name, field)?;
                }
                Ok(())
            })?,
            ("metadata", _) => {}
            _ => collector.field(key, value)?,
        }
    }
    Ok(collector.out)
}

/// Walks a value depth first, adding the paths it owns to `out`.
struct FieldCollector<'a> {
    kind: &'a str,
    strict: bool,
    /// Field names from the root (list items skipped): the schema lookups' path.
    names: Vec<String>,
    path: FieldPath,
    out: FieldSet,
}

impl FieldCollector<'_> {
    /// Runs `inside` with `key` pushed onto the current path.
    fn within(
        &mut self,
        key: &str,
        inside: impl FnOnce(&mut Self) -> Result<(), MergeError>,
    ) -> Result<(), MergeError> {
        self.names.push(key.to_string());
        self.path.push(PathStep::Field(key.to_string()));
        let result = inside(self);
        self.names.pop();
        self.path.pop();
        result
    }

    fn field(&mut self, key: &str, value: &Value) -> Result<(), MergeError> {
        self.within(key, |collector| collector.value(value))
    }

    fn children(&mut self, map: &Map<String, Value>) -> Result<(), MergeError> {
        for (key, child) in map {
            self.field(key, child)?;
        }
        Ok(())
    }

    fn value(&mut self, value: &Value) -> Result<(), MergeError> {
        let names = str_refs(&self.names);
        match value {
            // A null is "not set": nobody owns it.
            Value::Null => {}
            Value::Object(m) if !m.is_empty() && !is_atomic_map(self.kind, &names) => {
                self.children(m)?;
            }
            Value::Array(items) if !items.is_empty() => match list_merge_key(self.kind, &names) {
                None => {
                    self.out.insert(self.path.clone());
                }
                Some(SCALAR_SET) => {
                    for item in items {
                        self.path.push(PathStep::Value(item.to_string()));
                        self.out.insert(self.path.clone());
                        self.path.pop();
                    }
                }
                Some(key) => match item_keys(items, key) {
                    Ok(keys) => {
                        for (item, item_key) in items.iter().zip(keys) {
                            self.path.push(PathStep::Key(item_key));
                            self.out.insert(self.path.clone());
                            let result = match item {
                                Value::Object(m) => self.children(m),
                                _ => Ok(()),
                            };
                            self.path.pop();
                            result?;
                        }
                    }
                    Err(msg) if self.strict => {
                        return Err(invalid(format!("{}: {msg}", path_string(&self.path))));
                    }
                    Err(_) => {
                        self.out.insert(self.path.clone());
                    }
                },
            },
            _ => {
                self.out.insert(self.path.clone());
            }
        }
        Ok(())
    }
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

/// Which items of a list a `k:` or `v:` step names.
enum ItemMatch {
    Key(Map<String, Value>),
    Value(Value),
}

impl ItemMatch {
    /// None for a field step, or a key that does not parse.
    fn of(step: &PathStep) -> Option<ItemMatch> {
        match step {
            PathStep::Field(_) => None,
            PathStep::Key(json) => parse_key(json).map(ItemMatch::Key),
            PathStep::Value(json) => serde_json::from_str(json).ok().map(ItemMatch::Value),
        }
    }

    fn matches(&self, item: &Value) -> bool {
        match self {
            ItemMatch::Key(key) => key_matches(item, key),
            ItemMatch::Value(wanted) => item == wanted,
        }
    }
}

pub(super) fn value_at<'a>(value: &'a Value, path: &[PathStep]) -> Option<&'a Value> {
    path.iter().try_fold(value, |cur, step| match step {
        PathStep::Field(name) => cur.get(name),
        _ => cur.get(item_index(cur, step)?),
    })
}

fn value_at_mut<'a>(value: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |cur, step| match step {
        PathStep::Field(name) => cur.get_mut(name),
        _ => {
            let index = item_index(cur, step)?;
            cur.get_mut(index)
        }
    })
}

/// The index of the first item of the list `list` that the `k:` or `v:` step names.
fn item_index(list: &Value, step: &PathStep) -> Option<usize> {
    let wanted = ItemMatch::of(step)?;
    list.as_array()?
        .iter()
        .position(|item| wanted.matches(item))
}

/// Removes the field or list item at `path`; false when it was not there.
pub(super) fn remove_at(value: &mut Value, path: &[PathStep]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let Some(parent) = value_at_mut(value, parent_path) else {
        return false;
    };
    if let PathStep::Field(name) = last {
        return parent
            .as_object_mut()
            .is_some_and(|m| m.remove(name).is_some());
    }
    let (Some(wanted), Some(items)) = (ItemMatch::of(last), parent.as_array_mut()) else {
        return false;
    };
    let before = items.len();
    items.retain(|e| !wanted.matches(e));
    items.len() != before
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
