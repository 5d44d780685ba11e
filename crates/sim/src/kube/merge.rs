//! Write semantics of kube-apiserver for the simulator, as pure functions over JSON values:
//! JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch, server-side
//! apply and the `metadata.managedFields` bookkeeping of ordinary updates.
//!
//! Field ownership is modelled as sets of paths (the structured-merge-diff model) and encoded
//! as FieldsV1 (`{"f:spec":{"f:replicas":{}}}`). List semantics (associative by a key, set of
//! scalars, or atomic) come from a small table of the built-in kinds in [`list_merge_key`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use serde_json::{Map, Value};

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

// ---------------------------------------------------------------------------------------------
// RFC 7386 JSON merge patch
// ---------------------------------------------------------------------------------------------

/// RFC 7386 JSON merge patch (null deletes; non-objects replace).
pub fn json_merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch_map) = patch else {
        return patch.clone();
    };
    let mut out = match target {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    for (key, patch_value) in patch_map {
        if patch_value.is_null() {
            out.remove(key);
            continue;
        }
        // Merging into Null also strips nulls from values that are new.
        let merged = json_merge_patch(out.get(key).unwrap_or(&Value::Null), patch_value);
        out.insert(key.clone(), merged);
    }
    Value::Object(out)
}

// ---------------------------------------------------------------------------------------------
// RFC 6902 JSON patch
// ---------------------------------------------------------------------------------------------

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test; JSON pointer escaping ~0 ~1, "-" append). Errors name the failing operation index and path.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, MergeError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| invalid("json patch must be a JSON array of operations"))?;
    let mut doc = target.clone();
    for (index, op) in ops.iter().enumerate() {
        apply_json_op(&mut doc, index, op)?;
    }
    Ok(doc)
}

fn apply_json_op(doc: &mut Value, index: usize, op: &Value) -> Result<(), MergeError> {
    let obj = op
        .as_object()
        .ok_or_else(|| invalid(format!("json patch operation {index}: not a JSON object")))?;
    let name = obj.get("op").and_then(Value::as_str).unwrap_or("");
    let raw_path = obj.get("path").and_then(Value::as_str);
    let err = |msg: String| {
        invalid(format!(
            "json patch operation {index} ({name}) on path {:?}: {msg}",
            raw_path.unwrap_or("")
        ))
    };
    let path = raw_path.ok_or_else(|| err("missing \"path\"".into()))?;
    let tokens = parse_pointer(path).map_err(&err)?;
    let value = || {
        obj.get("value")
            .cloned()
            .ok_or_else(|| err("missing \"value\"".into()))
    };
    let from = || -> Result<Vec<String>, MergeError> {
        let raw = obj
            .get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| err("missing \"from\"".into()))?;
        parse_pointer(raw).map_err(|e| err(format!("from {raw:?}: {e}")))
    };
    match name {
        "add" => ptr_add(doc, &tokens, value()?).map_err(&err),
        "remove" => ptr_remove(doc, &tokens).map(drop).map_err(&err),
        "replace" => {
            let new_value = value()?;
            let slot =
                ptr_get_mut(doc, &tokens).ok_or_else(|| err("path does not exist".into()))?;
            *slot = new_value;
            Ok(())
        }
        "move" => {
            let from = from()?;
            if tokens.len() > from.len() && tokens[..from.len()] == from[..] {
                return Err(err(
                    "cannot move a value into one of its own children".into()
                ));
            }
            let moved = ptr_remove(doc, &from).map_err(|e| err(format!("from: {e}")))?;
            ptr_add(doc, &tokens, moved).map_err(&err)
        }
        "copy" => {
            let from = from()?;
            let copied = ptr_get(doc, &from)
                .cloned()
                .ok_or_else(|| err("from path does not exist".into()))?;
            ptr_add(doc, &tokens, copied).map_err(&err)
        }
        "test" => {
            let expected = value()?;
            match ptr_get(doc, &tokens) {
                Some(actual) if json_eq(actual, &expected) => Ok(()),
                Some(actual) => Err(err(format!(
                    "test failed: value is {actual}, expected {expected}"
                ))),
                None => Err(err("test failed: path does not exist".into())),
            }
        }
        "" => Err(err("missing \"op\"".into())),
        other => Err(err(format!("unknown op {other:?}"))),
    }
}

/// Splits a JSON pointer into unescaped reference tokens ("" is the whole document).
fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err("a JSON pointer must be empty or start with '/'".into());
    };
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => return Err(format!("invalid escape in pointer token {token:?}")),
                }
            }
            Ok(out)
        })
        .collect()
}

/// An array index token: decimal, no leading zeros (RFC 6901).
fn parse_index(token: &str) -> Option<usize> {
    let digits_only = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

fn ptr_get<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(m) => m.get(token)?,
            Value::Array(a) => a.get(parse_index(token)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn ptr_get_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(token)?,
            Value::Array(a) => a.get_mut(parse_index(token)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn ptr_add(doc: &mut Value, tokens: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent_tokens)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    let parent = ptr_get_mut(doc, parent_tokens).ok_or("parent path does not exist")?;
    match parent {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) if last == "-" => {
            a.push(value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = parse_index(last).ok_or_else(|| format!("invalid array index {last:?}"))?;
            if idx > a.len() {
                return Err(format!(
                    "array index {idx} out of bounds (length {})",
                    a.len()
                ));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err("parent is neither an object nor an array".into()),
    }
}

fn ptr_remove(doc: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let Some((last, parent_tokens)) = tokens.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    let parent = ptr_get_mut(doc, parent_tokens).ok_or("path does not exist")?;
    match parent {
        Value::Object(m) => m.remove(last).ok_or_else(|| "path does not exist".into()),
        Value::Array(a) => match parse_index(last) {
            Some(idx) if idx < a.len() => Ok(a.remove(idx)),
            _ => Err(format!(
                "array index {last:?} out of bounds (length {})",
                a.len()
            )),
        },
        _ => Err("path does not exist".into()),
    }
}

/// JSON equality where numbers compare by value (1 == 1.0), as RFC 6902 `test` requires.
fn json_eq(a: &Value, b: &Value) -> bool {
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

fn opt_json_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => json_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Schema knowledge: list semantics of the built-in kinds
// ---------------------------------------------------------------------------------------------

/// What [`list_merge_key`] returns for lists that are sets of scalars (e.g. `metadata.finalizers`):
/// they merge as a union without duplicates and their items are owned one by one (`v:<json>`).
pub const SCALAR_SET: &str = "";

/// Kinds whose pod template lives at `spec.template.spec`.
const TEMPLATE_KINDS: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "ReplicationController",
];

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// The part of `path` below the kind's PodSpec, if `path` is inside one.
fn pod_spec_rest<'a, 'b>(kind: &str, path: &'a [&'b str]) -> Option<&'a [&'b str]> {
    let prefix: &[&str] = match kind {
        "Pod" => &["spec"],
        "PodTemplate" => &["template", "spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        k if TEMPLATE_KINDS.contains(&k) => &["spec", "template", "spec"],
        _ => return None,
    };
    path.strip_prefix(prefix)
}

fn pod_spec_list_key(rest: &[&str]) -> Option<&'static str> {
    match rest {
        [list] if CONTAINER_LISTS.contains(list) => Some("name"),
        [list, field] if CONTAINER_LISTS.contains(list) => match *field {
            "env" => Some("name"),
            "ports" => Some("containerPort"),
            "volumeMounts" => Some("mountPath"),
            "volumeDevices" => Some("devicePath"),
            _ => None,
        },
        ["volumes"] | ["imagePullSecrets"] | ["resourceClaims"] | ["schedulingGates"] => {
            Some("name")
        }
        ["hostAliases"] => Some("ip"),
        ["topologySpreadConstraints"] => Some("topologyKey"),
        _ => None,
    }
}

/// The merge key of a list at a field path (path = field names from the object root, list indices skipped), for built-in kinds, e.g.
/// containers / initContainers / ephemeralContainers -> "name"; a container's env -> "name"; a container's ports -> "containerPort";
/// Service spec.ports -> "port"; volumes -> "name"; volumeMounts -> "mountPath"; imagePullSecrets -> "name"; status.conditions -> "type";
/// hostAliases -> "ip"; metadata.ownerReferences -> "uid"; metadata.finalizers is a set of scalars (merge, no dups). Unknown -> None (atomic).
/// Works for Pod specs at spec.* and for templates at spec.template.spec.* (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job) and spec.jobTemplate.spec.template.spec.* (CronJob).
///
/// Sets of scalars (finalizers) return `Some(SCALAR_SET)` (see [`SCALAR_SET`]).
pub fn list_merge_key(kind: &str, path: &[&str]) -> Option<&'static str> {
    // Object metadata is the same everywhere, including a template's metadata.
    match path {
        [.., "metadata", "finalizers"] => return Some(SCALAR_SET),
        [.., "metadata", "ownerReferences"] => return Some("uid"),
        ["status", "conditions"] => return Some("type"),
        _ => {}
    }
    match (kind, path) {
        ("Service", ["spec", "ports"]) => return Some("port"),
        ("Pod", ["status", "podIPs"]) => return Some("ip"),
        ("Node", ["status", "addresses"]) => return Some("type"),
        ("ServiceAccount", ["secrets"] | ["imagePullSecrets"]) => return Some("name"),
        _ => {}
    }
    pod_spec_list_key(pod_spec_rest(kind, path)?)
}

/// Maps that server-side apply owns as a whole (`+structType=atomic` / `+mapType=atomic`).
fn is_atomic_map(kind: &str, path: &[&str]) -> bool {
    match path {
        ["spec", "selector"] => {
            kind == "Service" || (TEMPLATE_KINDS.contains(&kind) && kind != "ReplicationController")
        }
        _ => pod_spec_rest(kind, path) == Some(&["nodeSelector"][..]),
    }
}

fn str_refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Strategic merge patch as kube-apiserver applies it for built-in kinds (`kind` like "Deployment", "Service", "Pod", "ConfigMap").
/// - maps merge recursively, null deletes a key;
/// - lists with a merge key merge element-wise by that key (patch elements update/insert; `{"$patch":"delete", <key>:..}` deletes an element; `$patch: replace` on a list or map replaces it);
/// - lists without a merge key are replaced;
/// - directives `$setElementOrder/<field>`, `$retainKeys`, `$deleteFromPrimitiveList/<field>` are honoured (order: reorder merged elements per $setElementOrder; retainKeys: drop map keys not listed) and never left in the result.
pub fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    kind: &str,
) -> Result<Value, MergeError> {
    let Value::Object(target_map) = target else {
        return Err(invalid(
            "strategic merge patch target must be a JSON object",
        ));
    };
    let Value::Object(patch_map) = patch else {
        return Err(invalid("strategic merge patch must be a JSON object"));
    };
    let mut names = Vec::new();
    smp_map(target_map.clone(), patch_map, kind, &mut names).map(Value::Object)
}

/// Where in the object we are, for error messages.
fn location(names: &[String]) -> String {
    if names.is_empty() {
        "<root>".into()
    } else {
        format!(".{}", names.join("."))
    }
}

fn smp_map(
    mut orig: Map<String, Value>,
    patch: &Map<String, Value>,
    kind: &str,
    names: &mut Vec<String>,
) -> Result<Map<String, Value>, MergeError> {
    if let Some(directive) = patch.get(PATCH_DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                // Merging into an empty map takes the patch and strips any nested directives.
                let mut rest = patch.clone();
                rest.remove(PATCH_DIRECTIVE);
                smp_map(Map::new(), &rest, kind, names)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(invalid(format!(
                "{}: invalid $patch directive {directive} in a map (want \"replace\" or \"delete\")",
                location(names)
            ))),
        };
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let keys: Vec<&str> = retain
            .as_array()
            .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                invalid(format!(
                    "{}: $retainKeys must be a list of strings",
                    location(names)
                ))
            })?;
        if let Some(key) = patch
            .keys()
            .find(|k| !k.starts_with('$') && !keys.contains(&k.as_str()))
        {
            return Err(invalid(format!(
                "{}: field {key:?} is not present in the $retainKeys list",
                location(names)
            )));
        }
        orig.retain(|k, _| keys.contains(&k.as_str()));
    }
    // Snapshot server-side order before merging: $setElementOrder interleaves server-only items by it.
    let mut server_lists: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let unwanted = value
                .as_array()
                .ok_or_else(|| invalid(format!("{}: {key} must be a list", location(names))))?;
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                list.retain(|item| !unwanted.contains(item));
            }
        } else if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            if !value.is_array() {
                return Err(invalid(format!(
                    "{}: {key} must be a list",
                    location(names)
                )));
            }
            if let Some(Value::Array(list)) = orig.get(field) {
                server_lists.insert(field, list.clone());
            }
        }
    }
    for (key, patch_value) in patch {
        if key.starts_with('$') {
            let known = key == PATCH_DIRECTIVE
                || key == RETAIN_KEYS
                || key.starts_with(SET_ELEMENT_ORDER)
                || key.starts_with(DELETE_FROM_PRIMITIVE_LIST);
            if known {
                continue;
            }
            return Err(invalid(format!(
                "{}: unknown strategic merge patch directive {key:?}",
                location(names)
            )));
        }
        names.push(key.clone());
        let merged = match patch_value {
            Value::Null => None,
            Value::Object(pm) => {
                let base = match orig.remove(key) {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                Some(Value::Object(smp_map(base, pm, kind, names)?))
            }
            Value::Array(pa) => {
                let base = match orig.remove(key) {
                    Some(Value::Array(a)) => a,
                    _ => Vec::new(),
                };
                Some(Value::Array(smp_list(base, pa, kind, names)?))
            }
            scalar => Some(scalar.clone()),
        };
        names.pop();
        match merged {
            Some(value) => {
                orig.insert(key.clone(), value);
            }
            None => {
                orig.remove(key);
            }
        }
    }
    for (key, order) in patch {
        let (Some(field), Some(order)) = (key.strip_prefix(SET_ELEMENT_ORDER), order.as_array())
        else {
            continue;
        };
        names.push(field.to_string());
        let merge_key = list_merge_key(kind, &str_refs(names));
        names.pop();
        if let Some(Value::Array(list)) = orig.get_mut(field) {
            let server = server_lists.get(field).map(Vec::as_slice).unwrap_or(&[]);
            let merged = std::mem::take(list);
            *list = apply_element_order(merged, order, server, merge_key);
        }
    }
    Ok(orig)
}

fn smp_list(
    orig: Vec<Value>,
    patch: &[Value],
    kind: &str,
    names: &mut Vec<String>,
) -> Result<Vec<Value>, MergeError> {
    let has_directive =
        |v: &Value, d: &str| v.get(PATCH_DIRECTIVE).and_then(Value::as_str) == Some(d);
    if patch.iter().any(|e| has_directive(e, "replace")) {
        // `{"$patch":"replace"}` as an element: the rest of the patch list is the new list.
        return patch
            .iter()
            .filter(|e| !has_directive(e, "replace"))
            .map(|e| match e {
                Value::Object(m) => smp_map(Map::new(), m, kind, names).map(Value::Object),
                other => Ok(other.clone()),
            })
            .collect();
    }
    let merge_key = list_merge_key(kind, &str_refs(names));
    let Some(merge_key) = merge_key else {
        return Ok(patch.to_vec());
    };
    let mut out = orig;
    if merge_key == SCALAR_SET {
        for item in patch {
            if !out.contains(item) {
                out.push(item.clone());
            }
        }
        return Ok(out);
    }
    for (i, element) in patch.iter().enumerate() {
        let Value::Object(pm) = element else {
            return Err(invalid(format!(
                "{}: element {i} is not an object, but the list merges by key {merge_key:?}",
                location(names)
            )));
        };
        let id = pm.get(merge_key).filter(|v| !v.is_null());
        let missing_key = || {
            invalid(format!(
                "{}: element {i} does not contain declared merge key {merge_key:?}",
                location(names)
            ))
        };
        match pm.get(PATCH_DIRECTIVE).map(Value::as_str) {
            None => {}
            Some(Some("delete")) => {
                let id = id.ok_or_else(missing_key)?;
                out.retain(|e| e.get(merge_key) != Some(id));
                continue;
            }
            Some(_) => {
                return Err(invalid(format!(
                    "{}: element {i} has an invalid $patch directive (want \"delete\" or \"replace\")",
                    location(names)
                )));
            }
        }
        let id = id.ok_or_else(missing_key)?;
        match out.iter().position(|e| e.get(merge_key) == Some(id)) {
            Some(pos) => {
                let base = match std::mem::take(&mut out[pos]) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                out[pos] = Value::Object(smp_map(base, pm, kind, names)?);
            }
            None => out.push(Value::Object(smp_map(Map::new(), pm, kind, names)?)),
        }
    }
    Ok(out)
}

/// The identity of a list item for ordering: its merge key value, or the item itself.
fn element_id(item: &Value, merge_key: Option<&str>) -> Option<Value> {
    match merge_key {
        Some(key) if key != SCALAR_SET => item.get(key).cloned(),
        _ => Some(item.clone()),
    }
}

/// Orders `list` as apimachinery does for `$setElementOrder`: items named in `order` follow it;
/// the others keep their relative order and are interleaved by their position on the server.
fn apply_element_order(
    list: Vec<Value>,
    order: &[Value],
    server: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let wanted: Vec<Value> = order
        .iter()
        .filter_map(|o| element_id(o, merge_key))
        .collect();
    let server_ids: Vec<Option<Value>> = server.iter().map(|s| element_id(s, merge_key)).collect();
    let wanted_pos =
        |v: &Value| element_id(v, merge_key).and_then(|id| wanted.iter().position(|w| *w == id));
    let server_pos = |v: &Value| {
        let id = element_id(v, merge_key);
        id.as_ref()
            .and_then(|_| server_ids.iter().position(|s| *s == id))
    };
    let (mut ordered, rest): (Vec<Value>, Vec<Value>) =
        list.into_iter().partition(|v| wanted_pos(v).is_some());
    ordered.sort_by_key(|v| wanted_pos(v));
    let mut left = ordered.into_iter().peekable();
    let mut right = rest.into_iter().peekable();
    let mut out = Vec::new();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            // Only when both are on the server can positions be compared; else server-only first.
            (Some(l), Some(r)) => {
                matches!((server_pos(l), server_pos(r)), (Some(a), Some(b)) if a < b)
            }
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Field sets (structured-merge-diff model) and FieldsV1
// ---------------------------------------------------------------------------------------------

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Pe {
    /// A map/struct field.
    Field(String),
    /// An associative list item, by its key fields as compact JSON (`{"name":"web"}`).
    Key(String),
    /// A set-of-scalars item, as compact JSON.
    Value(String),
}

type FieldPath = Vec<Pe>;
type FieldSet = BTreeSet<FieldPath>;

/// Metadata fields the server owns; they never appear in field sets.
const IGNORED_METADATA: &[&str] = &[
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
enum Scope {
    Main,
    Status,
}

/// Every owned path of `obj`: leaves, associative list items (as members) and their fields.
/// `strict` rejects associative lists with missing or duplicate keys (apply input); otherwise
/// such lists are treated as atomic (stored objects must never make bookkeeping fail).
fn object_fields(
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
        path.push(Pe::Field(key.clone()));
        match (key.as_str(), value) {
            ("metadata", Value::Object(meta)) => {
                for (mk, mv) in meta {
                    if IGNORED_METADATA.contains(&mk.as_str()) {
                        continue;
                    }
                    names.push(mk.clone());
                    path.push(Pe::Field(mk.clone()));
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
                    path.push(Pe::Value(item.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            Some(key) => match item_keys(items, key) {
                Ok(keys) => {
                    for (item, item_key) in items.iter().zip(keys) {
                        path.push(Pe::Key(item_key));
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
        path.push(Pe::Field(key.clone()));
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
fn path_string(path: &[Pe]) -> String {
    let mut s = String::new();
    for pe in path {
        // Writing to a String cannot fail.
        let _ = match pe {
            Pe::Field(name) => write!(s, ".{name}"),
            Pe::Key(json) => match parse_key(json) {
                Some(key) => {
                    let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(s, "[{}]", parts.join(","))
                }
                None => write!(s, "[{json}]"),
            },
            Pe::Value(json) => write!(s, "[={json}]"),
        };
    }
    s
}

fn parse_key(json: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(json).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

fn key_matches(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| item.get(k) == Some(v))
}

fn value_at<'a>(value: &'a Value, path: &[Pe]) -> Option<&'a Value> {
    let mut cur = value;
    for pe in path {
        cur = match pe {
            Pe::Field(name) => cur.as_object()?.get(name)?,
            Pe::Key(json) => {
                let key = parse_key(json)?;
                cur.as_array()?.iter().find(|e| key_matches(e, &key))?
            }
            Pe::Value(json) => {
                let wanted: Value = serde_json::from_str(json).ok()?;
                cur.as_array()?.iter().find(|e| **e == wanted)?
            }
        };
    }
    Some(cur)
}

fn value_at_mut<'a>(value: &'a mut Value, path: &[Pe]) -> Option<&'a mut Value> {
    let mut cur = value;
    for pe in path {
        cur = match pe {
            Pe::Field(name) => cur.as_object_mut()?.get_mut(name)?,
            Pe::Key(json) => {
                let key = parse_key(json)?;
                cur.as_array_mut()?
                    .iter_mut()
                    .find(|e| key_matches(e, &key))?
            }
            Pe::Value(json) => {
                let wanted: Value = serde_json::from_str(json).ok()?;
                cur.as_array_mut()?.iter_mut().find(|e| **e == wanted)?
            }
        };
    }
    Some(cur)
}

/// Removes the field or list item at `path`; false when it was not there.
fn remove_at(value: &mut Value, path: &[Pe]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let Some(parent) = value_at_mut(value, parent_path) else {
        return false;
    };
    match last {
        Pe::Field(name) => parent
            .as_object_mut()
            .is_some_and(|m| m.remove(name).is_some()),
        Pe::Key(json) => {
            let (Some(key), Some(items)) = (parse_key(json), parent.as_array_mut()) else {
                return false;
            };
            let before = items.len();
            items.retain(|e| !key_matches(e, &key));
            items.len() != before
        }
        Pe::Value(json) => {
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
fn owns_at_or_below(set: &FieldSet, path: &[Pe]) -> bool {
    // Paths sharing a prefix are contiguous in the ordered set, starting at the prefix itself.
    set.range(path.to_vec()..)
        .next()
        .is_some_and(|p| p.starts_with(path))
}

fn pe_key(pe: &Pe) -> String {
    match pe {
        Pe::Field(name) => format!("f:{name}"),
        Pe::Key(json) => format!("k:{json}"),
        Pe::Value(json) => format!("v:{json}"),
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

fn encode_fields(set: &FieldSet) -> Value {
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for pe in path {
            node = node.children.entry(pe_key(pe)).or_default();
        }
        node.member = true;
    }
    root.to_json()
}

fn decode_fields(value: &Value) -> FieldSet {
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
        let pe = if let Some(name) = key.strip_prefix("f:") {
            Pe::Field(name.to_string())
        } else if let Some(json) = key.strip_prefix("k:") {
            Pe::Key(normalize_json(json))
        } else if let Some(json) = key.strip_prefix("v:") {
            Pe::Value(normalize_json(json))
        } else {
            // "i:" (list index) steps do not occur for the kinds modelled here.
            continue;
        };
        path.push(pe);
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

// ---------------------------------------------------------------------------------------------
// managedFields entries
// ---------------------------------------------------------------------------------------------

/// One `metadata.managedFields` entry: its JSON (other members kept as they were) and its set.
struct Entry {
    raw: Map<String, Value>,
    fields: FieldSet,
}

impl Entry {
    fn new(
        manager: &str,
        operation: &str,
        api_version: &str,
        time: &str,
        subresource: Option<&str>,
        fields: FieldSet,
    ) -> Entry {
        let mut raw = Map::new();
        raw.insert("manager".into(), manager.into());
        raw.insert("operation".into(), operation.into());
        raw.insert("apiVersion".into(), api_version.into());
        raw.insert("time".into(), time.into());
        if let Some(sub) = subresource {
            raw.insert("subresource".into(), sub.into());
        }
        Entry { raw, fields }
    }

    fn get(&self, key: &str) -> &str {
        self.raw.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// Manager identity as kube-apiserver keys it: appliers regardless of apiVersion, updaters per apiVersion.
    fn is(
        &self,
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.get("manager") == manager
            && self.get("operation") == operation
            && self.raw.get("subresource").and_then(Value::as_str) == subresource
            && (operation == "Apply" || self.get("apiVersion") == api_version)
    }

    fn to_json(&self) -> Value {
        let mut m = self.raw.clone();
        m.insert("fieldsType".into(), "FieldsV1".into());
        m.insert("fieldsV1".into(), encode_fields(&self.fields));
        Value::Object(m)
    }
}

fn managed_fields_of(obj: &Value) -> Option<&Value> {
    obj.get("metadata")?.get("managedFields")
}

fn read_entries(managed_fields: Option<&Value>) -> Vec<Entry> {
    let Some(items) = managed_fields.and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_object)
        .map(|m| Entry {
            raw: m.clone(),
            fields: m.get("fieldsV1").map(decode_fields).unwrap_or_default(),
        })
        .collect()
}

fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let Value::Object(root) = obj else {
        return;
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            let list = entries.iter().map(Entry::to_json).collect();
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Server-side apply
// ---------------------------------------------------------------------------------------------

/// Server-side apply (Content-Type application/apply-patch+yaml), as in <https://kubernetes.io/docs/reference/using-api/server-side-apply/>:
/// `live` is the stored object (None when it does not exist: create), `applied` the manager's full intent (already parsed from YAML to JSON).
/// Returns the new object with `metadata.managedFields` updated (an entry {manager, operation:"Apply", apiVersion, time, fieldsType:"FieldsV1", fieldsV1}).
/// Rules: the manager's new field set = every leaf field it applied (maps: per key; associative lists: per element key `k:{"name":"x"}` plus its fields; atomic lists and scalars: the field itself).
/// Merge the applied values into live (associative lists by merge key, atomic lists replaced).
/// A field this manager owned in its previous Apply entry but no longer applies is removed from the object unless another manager also owns it.
/// A field the manager applies with a value different from live that another manager owns -> conflict, unless `force` (then ownership moves to this manager, removed from the other entry; entries left empty are dropped).
/// Same value -> shared ownership, no conflict. Ignored in field sets: apiVersion, kind, metadata.name, metadata.namespace, metadata.uid, metadata.resourceVersion, metadata.generation, metadata.creationTimestamp, metadata.managedFields, and `status` (apply to the main resource never touches status).
/// Applying the same intent twice yields an object equal to the first result except for the entry's `time` — callers compare objects ignoring managedFields time to decide "unchanged", so make the result deterministic (sorted keys are fine since serde_json Map is BTreeMap by default; keep list order stable).
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    kind: &str,
    api_version: &str,
    time: &str,
) -> Result<Value, MergeError> {
    let Value::Object(applied_map) = applied else {
        return Err(invalid("apply patch must be an object"));
    };
    if let Some(applied_kind) = applied_map.get("kind").and_then(Value::as_str)
        && applied_kind != kind
    {
        return Err(invalid(format!(
            "apply patch kind {applied_kind:?} does not match the resource kind {kind:?}"
        )));
    }
    let base = match live {
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(invalid("the live object is not a JSON object")),
        None => Value::Object(Map::new()),
    };
    let new_set = object_fields(applied, kind, Scope::Main, true)?;
    let mut entries = read_entries(managed_fields_of(&base));
    let mine = entries
        .iter()
        .position(|e| e.is(manager, "Apply", api_version, None));
    let old_set = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();

    // Conflicts: fields whose value this apply changes and that someone else owns.
    let mut conflicts: BTreeSet<(String, String)> = BTreeSet::new();
    let mut taken: Vec<(usize, FieldPath)> = Vec::new();
    for path in new_set
        .iter()
        .filter(|p| matches!(p.last(), Some(Pe::Field(_))))
    {
        if opt_json_eq(value_at(applied, path), value_at(&base, path)) {
            continue;
        }
        for (i, entry) in entries.iter().enumerate() {
            if Some(i) != mine && entry.fields.contains(path) {
                conflicts.insert((path_string(path), entry.get("manager").to_string()));
                taken.push((i, path.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let list = conflicts.into_iter().map(|(path, m)| (m, path)).collect();
        return Err(MergeError::Conflict(list));
    }
    for (i, path) in taken {
        entries[i].fields.remove(&path);
    }

    // Remove what this manager gave up, unless someone (including its new intent) still owns it.
    let others: FieldSet = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != mine)
        .flat_map(|(_, e)| e.fields.iter().cloned())
        .collect();
    let kept = |p: &[Pe]| owns_at_or_below(&others, p) || owns_at_or_below(&new_set, p);
    let mut obj = base;
    let mut given_up: Vec<&FieldPath> = old_set.difference(&new_set).collect();
    // Shallowest first: a removed list item takes its fields with it; of a kept item only
    // non-key fields go, since its key fields are its identity.
    given_up.sort_by_key(|p| p.len());
    for path in given_up {
        if kept(path) || is_key_field(path) {
            continue;
        }
        if remove_at(&mut obj, path) {
            prune_empty_parents(&mut obj, path, &kept);
        }
    }

    ssa_merge_root(&mut obj, applied_map, kind);
    if let Value::Object(root) = &mut obj {
        root.entry("apiVersion")
            .or_insert_with(|| api_version.into());
        root.entry("kind").or_insert_with(|| kind.into());
    }

    let entry = Entry::new(manager, "Apply", api_version, time, None, new_set);
    match mine {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    entries.retain(|e| !e.fields.is_empty() || e.is(manager, "Apply", api_version, None));
    write_entries(&mut obj, &entries);
    Ok(obj)
}

/// Whether `path` is a key field of an associative list item (`...[name="web"].name`).
fn is_key_field(path: &[Pe]) -> bool {
    match path {
        [.., Pe::Key(json), Pe::Field(name)] => {
            parse_key(json).is_some_and(|k| k.contains_key(name))
        }
        _ => false,
    }
}

/// After removing `path`, drops maps and lists above it that became empty and nobody owns.
fn prune_empty_parents(obj: &mut Value, path: &[Pe], kept: &dyn Fn(&[Pe]) -> bool) {
    for len in (1..path.len()).rev() {
        let parent = &path[..len];
        // List items are identified by their key fields, so they never become empty themselves.
        if !matches!(parent.last(), Some(Pe::Field(_))) {
            break;
        }
        let empty = match value_at(obj, parent) {
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if !empty || kept(parent) {
            break;
        }
        remove_at(obj, parent);
    }
}

fn ssa_merge_root(obj: &mut Value, applied: &Map<String, Value>, kind: &str) {
    let Value::Object(root) = obj else {
        return;
    };
    let mut names = Vec::new();
    for (key, value) in applied {
        match key.as_str() {
            "status" => {}
            "metadata" => {
                let Value::Object(applied_meta) = value else {
                    continue;
                };
                let meta = root
                    .entry("metadata")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !meta.is_object() {
                    *meta = Value::Object(Map::new());
                }
                let Value::Object(meta) = meta else {
                    continue;
                };
                names.push("metadata".to_string());
                for (mk, mv) in applied_meta {
                    // name/namespace are needed on create; the rest is the server's.
                    let server_owned = IGNORED_METADATA.contains(&mk.as_str())
                        && mk != "name"
                        && mk != "namespace";
                    if server_owned {
                        continue;
                    }
                    names.push(mk.clone());
                    merge_child(meta, mk, mv, kind, &mut names);
                    names.pop();
                }
                names.pop();
            }
            _ => {
                names.push(key.clone());
                merge_child(root, key, value, kind, &mut names);
                names.pop();
            }
        }
    }
}

fn merge_child(
    parent: &mut Map<String, Value>,
    key: &str,
    applied: &Value,
    kind: &str,
    names: &mut Vec<String>,
) {
    if applied.is_null() {
        return;
    }
    match parent.get_mut(key) {
        Some(live) => ssa_merge(live, applied, kind, names),
        None => {
            parent.insert(key.to_string(), strip_nulls(applied));
        }
    }
}

fn ssa_merge(live: &mut Value, applied: &Value, kind: &str, names: &mut Vec<String>) {
    let (atomic_map, list_key) = {
        let refs = str_refs(names);
        (is_atomic_map(kind, &refs), list_merge_key(kind, &refs))
    };
    match (live, applied) {
        (Value::Object(live_map), Value::Object(applied_map)) if !atomic_map => {
            for (key, value) in applied_map {
                names.push(key.clone());
                merge_child(live_map, key, value, kind, names);
                names.pop();
            }
        }
        (Value::Array(live_items), Value::Array(applied_items)) if list_key.is_some() => {
            let key = list_key.unwrap_or(SCALAR_SET);
            for item in applied_items {
                if key == SCALAR_SET {
                    if !live_items.contains(item) {
                        live_items.push(item.clone());
                    }
                    continue;
                }
                let id = item.get(key);
                let existing = live_items
                    .iter_mut()
                    .find(|e| id.is_some() && e.get(key) == id);
                match existing {
                    Some(live_item) => ssa_merge(live_item, item, kind, names),
                    None => live_items.push(strip_nulls(item)),
                }
            }
        }
        (slot, _) => *slot = strip_nulls(applied),
    }
}

/// A copy without null map members: in apply, null means "not set".
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// Update bookkeeping
// ---------------------------------------------------------------------------------------------

/// After a non-apply write (POST/PUT/PATCH by `manager`, operation "Update"), record in `new.metadata.managedFields` the fields that changed between `old` and `new` (all of new's fields on create) as owned by (manager, "Update"), removing them from other managers' entries. `subresource` is Some("status") for status writes (the entry then carries "subresource":"status").
///
/// Main-resource writes look at everything but `status`; status writes only at `status`. Fields
/// that the write removed are dropped from every entry. The entries start from `new`'s own
/// `managedFields` when it has them (a client may reset them) and from `old`'s otherwise.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    time: &str,
    subresource: Option<&str>,
) {
    if !new.is_object() {
        return;
    }
    let kind = new
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let scope = if subresource == Some("status") {
        Scope::Status
    } else {
        Scope::Main
    };
    // Non-strict field sets never fail.
    let fields_of = |v: &Value| object_fields(v, &kind, scope, false).unwrap_or_default();
    let new_set = fields_of(new);
    let old_set = old.map(fields_of).unwrap_or_default();
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| {
            !old_set.contains(*p)
                || (matches!(p.last(), Some(Pe::Field(_)))
                    && !opt_json_eq(old.and_then(|o| value_at(o, p)), value_at(new, p)))
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();

    let base = managed_fields_of(new)
        .or_else(|| old.and_then(managed_fields_of))
        .cloned();
    let mut entries = read_entries(base.as_ref());
    if !changed.is_empty() || !removed.is_empty() {
        for entry in &mut entries {
            entry
                .fields
                .retain(|p| !changed.contains(p) && !removed.contains(p));
        }
        if !changed.is_empty() {
            let own = entries
                .iter()
                .position(|e| e.is(manager, "Update", api_version, subresource));
            match own {
                Some(i) => {
                    entries[i].fields.extend(changed);
                    entries[i].raw.insert("time".into(), time.into());
                }
                None => entries.push(Entry::new(
                    manager,
                    "Update",
                    api_version,
                    time,
                    subresource,
                    changed,
                )),
            }
        }
        entries.retain(|e| !e.fields.is_empty());
    }
    write_entries(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T1: &str = "2024-01-01T00:00:00Z";
    const T2: &str = "2024-01-02T00:00:00Z";

    fn entries_of(obj: &Value) -> Vec<Value> {
        obj["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
        obj["metadata"]["managedFields"]
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
    }

    fn without_times(obj: &Value) -> Value {
        let mut obj = obj.clone();
        if let Some(list) = obj["metadata"]["managedFields"].as_array_mut() {
            for e in list {
                e.as_object_mut().unwrap().remove("time");
            }
        }
        obj
    }

    fn deployment(replicas: i64, image: &str) -> Value {
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

    // ---- JSON patch ----

    #[test]
    fn json_patch_add_with_escapes_index_and_append() {
        let doc = json!({"a": [1, 3], "m": {}});
        let patch = json!([
            {"op": "add", "path": "/a/1", "value": 2},
            {"op": "add", "path": "/a/-", "value": 4},
            {"op": "add", "path": "/m/x~1y", "value": "slash"},
            {"op": "add", "path": "/m/t~0", "value": "tilde"},
            {"op": "add", "path": "/new", "value": {"k": true}}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap(),
            json!({"a": [1, 2, 3, 4], "m": {"x/y": "slash", "t~": "tilde"}, "new": {"k": true}})
        );
    }

    #[test]
    fn json_patch_remove_and_replace() {
        let doc = json!({"a": [1, 2, 3], "b": "x"});
        let patch = json!([
            {"op": "remove", "path": "/a/0"},
            {"op": "replace", "path": "/b", "value": "y"},
            {"op": "replace", "path": "/a/1", "value": 9}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap(),
            json!({"a": [2, 9], "b": "y"})
        );
        let err = json_patch(&doc, &json!([{"op": "replace", "path": "/zz", "value": 1}]));
        assert!(
            matches!(err, Err(MergeError::Invalid(m)) if m.contains("operation 0") && m.contains("/zz"))
        );
        let err = json_patch(&doc, &json!([{"op": "remove", "path": "/a/7"}]));
        assert!(matches!(err, Err(MergeError::Invalid(m)) if m.contains("out of bounds")));
    }

    #[test]
    fn json_patch_move_and_copy() {
        let doc = json!({"a": {"b": 1}, "l": [1, 2]});
        let patch = json!([
            {"op": "move", "from": "/a/b", "path": "/c"},
            {"op": "copy", "from": "/l", "path": "/l2"},
            {"op": "move", "from": "/l/0", "path": "/l/-"}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap(),
            json!({"a": {}, "c": 1, "l": [2, 1], "l2": [1, 2]})
        );
        let err = json_patch(
            &doc,
            &json!([{"op": "move", "from": "/a", "path": "/a/b/c"}]),
        );
        assert!(matches!(err, Err(MergeError::Invalid(_))));
    }

    #[test]
    fn json_patch_test_op_passes_and_fails_with_index_and_path() {
        let doc = json!({"spec": {"replicas": 3}});
        let ok = json!([
            {"op": "test", "path": "/spec/replicas", "value": 3.0},
            {"op": "replace", "path": "/spec/replicas", "value": 4}
        ]);
        assert_eq!(
            json_patch(&doc, &ok).unwrap(),
            json!({"spec": {"replicas": 4}})
        );
        let bad = json!([
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "test", "path": "/spec/replicas", "value": 3}
        ]);
        let Err(MergeError::Invalid(msg)) = json_patch(&doc, &bad) else {
            panic!("test op should fail");
        };
        assert!(msg.contains("operation 1 (test)"), "{msg}");
        assert!(msg.contains("/spec/replicas"), "{msg}");
    }

    #[test]
    fn json_patch_rejects_malformed_operations() {
        let doc = json!({});
        for bad in [
            json!({"op": "add"}),
            json!([{"op": "add", "path": "/a"}]),
            json!([{"op": "frob", "path": "/a"}]),
            json!([{"op": "add", "path": "a", "value": 1}]),
            json!([{"op": "add", "path": "/x/y", "value": 1}]),
            json!([{"op": "add", "path": "/~2", "value": 1}]),
        ] {
            assert!(
                matches!(json_patch(&doc, &bad), Err(MergeError::Invalid(_))),
                "{bad}"
            );
        }
    }

    // ---- strategic merge patch ----

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "finalizers": ["a"]},
            "spec": {"containers": [
                {"name": "app", "image": "app:1", "args": ["x", "y"],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "side", "image": "side:1"},
                {"name": "old", "image": "old:1"}
            ]}
        })
    }

    #[test]
    fn smp_containers_merge_by_name() {
        let patch = json!({"spec": {"containers": [
            {"name": "app", "image": "app:2"},
            {"name": "new", "image": "new:1"},
            {"name": "old", "$patch": "delete"}
        ]}});
        let out = strategic_merge_patch(&pod(), &patch, "Pod").unwrap();
        let containers = out["spec"]["containers"].as_array().unwrap();
        let names: Vec<&str> = containers
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["app", "side", "new"]);
        assert_eq!(containers[0]["image"], "app:2");
        // Untouched fields of the merged element survive.
        assert_eq!(containers[0]["args"], json!(["x", "y"]));
        assert_eq!(containers[2], json!({"name": "new", "image": "new:1"}));
    }

    #[test]
    fn smp_env_by_name_and_atomic_args_replaced() {
        let patch = json!({"spec": {"containers": [{"name": "app", "args": ["z"],
            "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}, {"name": "A", "$patch": "delete"}]}]}});
        let out = strategic_merge_patch(&pod(), &patch, "Pod").unwrap();
        let app = &out["spec"]["containers"][0];
        assert_eq!(
            app["env"],
            json!([{"name": "B", "value": "20"}, {"name": "C", "value": "3"}])
        );
        assert_eq!(app["args"], json!(["z"]));
    }

    #[test]
    fn smp_deployment_template_containers_and_null_delete() {
        let target = deployment(2, "nginx:1");
        let patch = json!({
            "metadata": {"labels": {"tier": null}},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2", "ports": [{"containerPort": 80}]}]}}}
        });
        let out = strategic_merge_patch(&target, &patch, "Deployment").unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:2", "ports": [{"containerPort": 80}]}])
        );
        assert_eq!(out["spec"]["replicas"], 2);
    }

    #[test]
    fn smp_set_element_order_is_honoured_and_stripped() {
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "old"}, {"name": "app"}, {"name": "side"}],
            "containers": [{"name": "app", "image": "app:3"}]
        }});
        let out = strategic_merge_patch(&pod(), &patch, "Pod").unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["old", "app", "side"]);
        assert_eq!(out["spec"]["containers"][1]["image"], "app:3");
        assert!(!out.to_string().contains('$'), "{out}");
    }

    #[test]
    fn smp_set_element_order_interleaves_server_only_items() {
        // Like kubectl: the order names only the items in the patch; others keep their place.
        let target = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
        let patch = json!({"metadata": {
            "$setElementOrder/finalizers": ["c", "a", "d"],
            "finalizers": ["d"]
        }});
        let out = strategic_merge_patch(&target, &patch, "ConfigMap").unwrap();
        // Server-only "b" sorts before "c", which the server had after it.
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["b", "c", "a", "d"]}})
        );
    }

    #[test]
    fn smp_service_ports_merge_by_port() {
        let svc = json!({"kind": "Service", "spec": {"ports": [
            {"port": 80, "targetPort": 8080, "name": "http"},
            {"port": 443, "targetPort": 8443, "name": "https"}
        ]}});
        let patch = json!({"spec": {"ports": [{"port": 443, "targetPort": 9443}, {"port": 22}]}});
        let out = strategic_merge_patch(&svc, &patch, "Service").unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([
                {"port": 80, "targetPort": 8080, "name": "http"},
                {"port": 443, "targetPort": 9443, "name": "https"},
                {"port": 22}
            ])
        );
    }

    #[test]
    fn smp_patch_replace_on_list_and_map() {
        let patch = json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o:1"}]}});
        let out = strategic_merge_patch(&pod(), &patch, "Pod").unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "only", "image": "o:1"}])
        );

        let cm = json!({"kind": "ConfigMap", "data": {"a": "1", "b": "2"}});
        let patch = json!({"data": {"$patch": "replace", "c": "3"}});
        let out = strategic_merge_patch(&cm, &patch, "ConfigMap").unwrap();
        assert_eq!(out["data"], json!({"c": "3"}));
    }

    #[test]
    fn smp_retain_keys_delete_from_primitive_list_and_finalizer_set() {
        let target = json!({"metadata": {"finalizers": ["a", "b"]},
            "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({
            "metadata": {"finalizers": ["b", "c"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}
        });
        let out = strategic_merge_patch(&target, &patch, "Deployment").unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["b", "c"]}, "spec": {"strategy": {"type": "Recreate"}}})
        );
        let bad = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}});
        assert!(matches!(
            strategic_merge_patch(&target, &bad, "Deployment"),
            Err(MergeError::Invalid(_))
        ));
    }

    #[test]
    fn smp_rejects_malformed_patches() {
        let missing_key = json!({"spec": {"containers": [{"image": "x"}]}});
        let Err(MergeError::Invalid(msg)) = strategic_merge_patch(&pod(), &missing_key, "Pod")
        else {
            panic!("missing merge key must fail");
        };
        assert!(
            msg.contains(".spec.containers") && msg.contains("name"),
            "{msg}"
        );
        for bad in [
            json!({"spec": {"containers": ["x"]}}),
            json!({"spec": {"$patch": "frob"}}),
            json!({"spec": {"$unknown": 1}}),
            json!([1]),
        ] {
            assert!(
                matches!(
                    strategic_merge_patch(&pod(), &bad, "Pod"),
                    Err(MergeError::Invalid(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn list_merge_keys_of_builtin_kinds() {
        let tpl = ["spec", "template", "spec"];
        let at = |prefix: &[&'static str], rest: &[&'static str]| -> Vec<&'static str> {
            prefix.iter().chain(rest).copied().collect()
        };
        assert_eq!(list_merge_key("Pod", &["spec", "containers"]), Some("name"));
        assert_eq!(
            list_merge_key("Pod", &["spec", "initContainers", "env"]),
            Some("name")
        );
        assert_eq!(
            list_merge_key("Deployment", &at(&tpl, &["containers", "ports"])),
            Some("containerPort")
        );
        assert_eq!(
            list_merge_key("StatefulSet", &at(&tpl, &["containers", "volumeMounts"])),
            Some("mountPath")
        );
        assert_eq!(
            list_merge_key("DaemonSet", &at(&tpl, &["volumes"])),
            Some("name")
        );
        assert_eq!(
            list_merge_key("Job", &at(&tpl, &["imagePullSecrets"])),
            Some("name")
        );
        assert_eq!(
            list_merge_key("ReplicaSet", &at(&tpl, &["hostAliases"])),
            Some("ip")
        );
        assert_eq!(
            list_merge_key(
                "CronJob",
                &[
                    "spec",
                    "jobTemplate",
                    "spec",
                    "template",
                    "spec",
                    "ephemeralContainers"
                ]
            ),
            Some("name")
        );
        assert_eq!(list_merge_key("Service", &["spec", "ports"]), Some("port"));
        assert_eq!(
            list_merge_key("Deployment", &["status", "conditions"]),
            Some("type")
        );
        assert_eq!(
            list_merge_key("ConfigMap", &["metadata", "ownerReferences"]),
            Some("uid")
        );
        assert_eq!(
            list_merge_key("Secret", &["metadata", "finalizers"]),
            Some(SCALAR_SET)
        );
        assert_eq!(list_merge_key("Pod", &["spec", "containers", "args"]), None);
        assert_eq!(list_merge_key("Pod", &["spec", "tolerations"]), None);
        assert_eq!(list_merge_key("Deployment", &["spec", "containers"]), None);
        assert_eq!(list_merge_key("Widget", &["spec", "items"]), None);
    }

    // ---- server-side apply ----

    #[test]
    fn ssa_create_from_none() {
        let applied = deployment(2, "nginx:1");
        let out =
            server_side_apply(None, &applied, "bprun", false, "Deployment", "apps/v1", T1).unwrap();
        assert_eq!(out["spec"], applied["spec"]);
        assert_eq!(out["metadata"]["labels"], applied["metadata"]["labels"]);
        assert_eq!(out["metadata"]["name"], "web");
        assert_eq!(out["kind"], "Deployment");
        let entries = entries_of(&out);
        assert_eq!(entries.len(), 1);
        let e = &entries[0];
        assert_eq!(e["manager"], "bprun");
        assert_eq!(e["operation"], "Apply");
        assert_eq!(e["apiVersion"], "apps/v1");
        assert_eq!(e["time"], T1);
        assert_eq!(e["fieldsType"], "FieldsV1");
        assert_eq!(
            e["fieldsV1"],
            json!({
                "f:metadata": {"f:labels": {"f:app": {}, "f:tier": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}
                    }
                }
            })
        );
    }

    #[test]
    fn ssa_apply_twice_is_identical_except_time() {
        let applied = deployment(2, "nginx:1");
        let first =
            server_side_apply(None, &applied, "bprun", false, "Deployment", "apps/v1", T1).unwrap();
        let second = server_side_apply(
            Some(&first),
            &applied,
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_ne!(first, second);
        assert_eq!(without_times(&first), without_times(&second));
        assert_eq!(entries_of(&second)[0]["time"], T2);
    }

    #[test]
    fn ssa_dropped_label_is_removed_unless_shared() {
        let first = server_side_apply(
            None,
            &deployment(2, "nginx:1"),
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T1,
        )
        .unwrap();
        let mut intent = deployment(2, "nginx:1");
        intent["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("tier");
        let out = server_side_apply(
            Some(&first),
            &intent,
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
        assert!(
            !entries_of(&out)[0]["fieldsV1"]
                .to_string()
                .contains("f:tier")
        );

        // Another applier that also set tier keeps it alive.
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"tier": "front"}}});
        let shared = server_side_apply(
            Some(&first),
            &other,
            "ops",
            false,
            "Deployment",
            "apps/v1",
            T1,
        )
        .unwrap();
        let out = server_side_apply(
            Some(&shared),
            &intent,
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"]["tier"], "front");
        assert_eq!(entries_of(&out).len(), 2);
    }

    #[test]
    fn ssa_dropping_all_data_keys_removes_the_map() {
        let cm = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});
        let first = server_side_apply(
            None,
            &cm(json!({"a": "1"})),
            "m",
            false,
            "ConfigMap",
            "v1",
            T1,
        )
        .unwrap();
        let intent = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let out =
            server_side_apply(Some(&first), &intent, "m", false, "ConfigMap", "v1", T2).unwrap();
        assert!(out.get("data").is_none(), "{out}");
        // The applier's entry stays even with nothing left to own.
        assert_eq!(entries_of(&out).len(), 1);
    }

    /// A Deployment applied by "bprun" whose spec.replicas was then changed by an Update manager.
    fn scaled_by_other() -> Value {
        let first = server_side_apply(
            None,
            &deployment(2, "nginx:1"),
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T1,
        )
        .unwrap();
        let mut scaled = first.clone();
        scaled["spec"]["replicas"] = json!(5);
        record_update(Some(&first), &mut scaled, "hpa", "apps/v1", T2, None);
        scaled
    }

    #[test]
    fn ssa_conflict_with_update_manager_on_replicas() {
        let scaled = scaled_by_other();
        assert_eq!(
            entry(&scaled, "hpa", "Update").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:replicas": {}}})
        );
        let err = server_side_apply(
            Some(&scaled),
            &deployment(3, "nginx:1"),
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err,
            MergeError::Conflict(vec![("hpa".into(), ".spec.replicas".into())])
        );
        assert!(
            err.to_string()
                .contains("conflict with \"hpa\": .spec.replicas")
        );
    }

    #[test]
    fn ssa_force_moves_ownership() {
        let scaled = scaled_by_other();
        let out = server_side_apply(
            Some(&scaled),
            &deployment(3, "nginx:1"),
            "bprun",
            true,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        // hpa owned nothing else, so its entry is gone.
        assert!(entry(&out, "hpa", "Update").is_none());
        let mine = entry(&out, "bprun", "Apply").unwrap();
        assert_eq!(mine["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
    }

    #[test]
    fn ssa_same_value_shares_ownership() {
        let scaled = scaled_by_other();
        let out = server_side_apply(
            Some(&scaled),
            &deployment(5, "nginx:1"),
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 5);
        assert_eq!(
            entry(&out, "hpa", "Update").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:replicas": {}}})
        );
        assert_eq!(
            entry(&out, "bprun", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:replicas"],
            json!({})
        );
        // Dropping replicas now leaves it to hpa instead of deleting it.
        let mut intent = deployment(5, "nginx:1");
        intent["spec"].as_object_mut().unwrap().remove("replicas");
        let out = server_side_apply(
            Some(&out),
            &intent,
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 5);
    }

    #[test]
    fn ssa_two_appliers_share_a_container_list() {
        let base = server_side_apply(
            None,
            &deployment(2, "nginx:1"),
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T1,
        )
        .unwrap();
        let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy:1"}]}}}});
        let both = server_side_apply(
            Some(&base),
            &sidecar,
            "mesh",
            false,
            "Deployment",
            "apps/v1",
            T1,
        )
        .unwrap();
        let names: Vec<&str> = both["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["web", "proxy"]);
        // mesh withdraws its container: only its own item goes.
        let gone =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let out = server_side_apply(
            Some(&both),
            &gone,
            "mesh",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:1"}])
        );
        // Changing the other applier's image is a conflict naming the keyed path.
        let hijack = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "evil:1"}]}}}});
        let err = server_side_apply(
            Some(&both),
            &hijack,
            "mesh",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err,
            MergeError::Conflict(vec![(
                "bprun".into(),
                ".spec.template.spec.containers[name=\"web\"].image".into()
            )])
        );
    }

    #[test]
    fn ssa_shared_list_item_keeps_its_key_when_one_applier_leaves() {
        let web = |fields: Value| {
            let mut c = json!({"name": "web"});
            c.as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [c]}})
        };
        let a = server_side_apply(
            None,
            &web(json!({"image": "i:1"})),
            "a",
            false,
            "Pod",
            "v1",
            T1,
        )
        .unwrap();
        let b = server_side_apply(
            Some(&a),
            &web(json!({"tty": true})),
            "b",
            false,
            "Pod",
            "v1",
            T1,
        )
        .unwrap();
        let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let out = server_side_apply(Some(&b), &bare, "b", false, "Pod", "v1", T2).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "web", "image": "i:1"}])
        );
    }

    #[test]
    fn ssa_never_touches_status_and_rejects_bad_input() {
        let mut live = server_side_apply(
            None,
            &deployment(2, "nginx:1"),
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T1,
        )
        .unwrap();
        live["status"] = json!({"readyReplicas": 2});
        let mut intent = deployment(2, "nginx:1");
        intent["status"] = json!({"readyReplicas": 99});
        let out = server_side_apply(
            Some(&live),
            &intent,
            "bprun",
            false,
            "Deployment",
            "apps/v1",
            T2,
        )
        .unwrap();
        assert_eq!(out["status"], json!({"readyReplicas": 2}));
        assert!(
            !entries_of(&out)[0]["fieldsV1"]
                .to_string()
                .contains("status")
        );

        let dup = json!({"kind": "Pod", "spec": {"containers": [{"name": "a"}, {"name": "a"}]}});
        assert!(matches!(
            server_side_apply(None, &dup, "m", false, "Pod", "v1", T1),
            Err(MergeError::Invalid(m)) if m.contains("duplicate")
        ));
        let wrong_kind = json!({"kind": "Service"});
        assert!(matches!(
            server_side_apply(None, &wrong_kind, "m", false, "Pod", "v1", T1),
            Err(MergeError::Invalid(_))
        ));
    }

    #[test]
    fn ssa_from_yaml_fixture_with_finalizers_and_env() {
        let yaml = r#"
apiVersion: v1
kind: Pod
metadata:
  name: p
  finalizers: [example.com/a]
spec:
  containers:
  - name: app
    image: app:1
    env:
    - {name: A, value: "1"}
"#;
        let applied: Value = serde_norway::from_str(yaml).unwrap();
        let out = server_side_apply(None, &applied, "kubectl", false, "Pod", "v1", T1).unwrap();
        assert_eq!(
            entries_of(&out)[0]["fieldsV1"],
            json!({
                "f:metadata": {"f:finalizers": {"v:\"example.com/a\"": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                    ".": {}, "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                    "f:image": {}, "f:name": {}
                }}}
            })
        );
        let mut without = applied.clone();
        without["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("finalizers");
        let out =
            server_side_apply(Some(&out), &without, "kubectl", false, "Pod", "v1", T2).unwrap();
        assert!(out["metadata"].get("finalizers").is_none(), "{out}");
    }

    // ---- record_update / FieldsV1 ----

    #[test]
    fn record_update_on_create_owns_everything() {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "u1", "labels": {"a": "b"}}, "data": {"k": "v"}});
        record_update(None, &mut obj, "kubectl-create", "v1", T1, None);
        assert_eq!(
            entries_of(&obj),
            vec![json!({
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}
            })]
        );
    }

    #[test]
    fn record_update_on_change_moves_only_changed_fields() {
        let mut created = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"a": "1", "b": "2", "gone": "x"}});
        record_update(None, &mut created, "creator", "v1", T1, None);
        let mut edited = created.clone();
        edited["data"] = json!({"a": "1", "b": "20", "c": "3"});
        record_update(Some(&created), &mut edited, "editor", "v1", T2, None);
        assert_eq!(
            entry(&edited, "creator", "Update").unwrap()["fieldsV1"],
            json!({"f:data": {"f:a": {}}})
        );
        let e = entry(&edited, "editor", "Update").unwrap();
        assert_eq!(e["fieldsV1"], json!({"f:data": {"f:b": {}, "f:c": {}}}));
        assert_eq!(e["time"], T2);

        // A no-op write leaves the bookkeeping alone, even if the new object omits it.
        let mut same = edited.clone();
        same["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        record_update(Some(&edited), &mut same, "other", "v1", "later", None);
        assert_eq!(same, edited);
    }

    #[test]
    fn record_update_status_subresource() {
        let mut live = deployment(2, "nginx:1");
        record_update(None, &mut live, "kubectl", "apps/v1", T1, None);
        let mut new = live.clone();
        new["status"] =
            json!({"replicas": 2, "conditions": [{"type": "Available", "status": "True"}]});
        record_update(
            Some(&live),
            &mut new,
            "controller",
            "apps/v1",
            T2,
            Some("status"),
        );
        let e = entry(&new, "controller", "Update").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(
            e["fieldsV1"],
            json!({"f:status": {"f:replicas": {}, "f:conditions": {
                "k:{\"type\":\"Available\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
        // The main-resource entry is untouched by a status write.
        assert_eq!(
            entry(&new, "kubectl", "Update"),
            entry(&live, "kubectl", "Update")
        );
    }

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
            Pe::Field("spec".into()),
            Pe::Field("containers".into()),
            Pe::Key("{\"name\":\"a\"}".into())
        ]));
        let again = encode_fields(&set);
        assert_eq!(decode_fields(&again), set);
        assert_eq!(
            again["f:spec"]["f:containers"]["k:{\"name\":\"a\"}"],
            json!({".": {}, "f:image": {}})
        );
    }
}
