//! Strategic merge patch.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::schema::{SCALAR_SET, list_merge_key, str_refs};
use super::{MergeError, invalid};

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

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use serde_json::json;

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
}
