//! Server-side apply.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::fields_v1::{
    FieldPath, FieldSet, IGNORED_METADATA, PathStep, Scope, object_fields, owns_at_or_below,
    parse_key, path_string, remove_at, value_at,
};
use super::managed_fields::{Entry, managed_fields_of, read_entries, write_entries};
use super::schema::{SCALAR_SET, is_atomic_map, list_merge_key, str_refs};
use super::{MergeError, invalid, object_member, opt_json_eq};

/// One server-side apply request: the manager's full intent for an object of `kind` and
/// `api_version`, with `?force=true` or not, at `time` (its managedFields entry's).
#[derive(Debug, Clone, Copy)]
pub struct Apply<'a> {
    pub applied: &'a Value,
    pub manager: &'a str,
    pub force: bool,
    pub kind: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
}

/// Server-side apply (Content-Type application/apply-patch+yaml), as in <https://kubernetes.io/docs/reference/using-api/server-side-apply/>:
/// `live` is the stored object (None when it does not exist: create), `applied` the manager's full intent (already parsed from YAML to JSON).
/// Returns the new object with `metadata.managedFields` updated (an entry {manager, operation:"Apply", apiVersion, time, fieldsType:"FieldsV1", fieldsV1}).
/// Rules: the manager's new field set = every leaf field it applied (maps: per key; associative lists: per element key `k:{"name":"x"}` plus its fields; atomic lists and scalars: the field itself).
/// Merge the applied values into live (associative lists by merge key, atomic lists replaced).
/// A field this manager owned in its previous Apply entry but no longer applies is removed from the object unless another manager also owns it.
/// A field the manager applies with a value different from live that another manager owns -> conflict, unless `force` (then ownership moves to this manager, removed from the other entry; entries left empty are dropped).
/// Same value -> shared ownership, no conflict. Ignored in field sets: apiVersion, kind, metadata.name, metadata.namespace, metadata.uid, metadata.resourceVersion, metadata.generation, metadata.creationTimestamp, metadata.managedFields, and `status` (apply to the main resource never touches status).
/// Applying the same intent twice yields an object equal to the first result except for the entry's `time` — callers compare objects ignoring managedFields time to decide "unchanged", so make the result deterministic (sorted keys are fine since serde_json Map is BTreeMap by default; keep list order stable).
pub fn server_side_apply(live: Option<&Value>, apply: &Apply) -> Result<Value, MergeError> {
    let Apply {
        applied,
        manager,
        force,
        kind,
        api_version,
        time,
    } = *apply;
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
        .filter(|p| matches!(p.last(), Some(PathStep::Field(_))))
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
    let kept = |p: &[PathStep]| owns_at_or_below(&others, p) || owns_at_or_below(&new_set, p);
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
fn is_key_field(path: &[PathStep]) -> bool {
    match path {
        [.., PathStep::Key(json), PathStep::Field(name)] => {
            parse_key(json).is_some_and(|k| k.contains_key(name))
        }
        _ => false,
    }
}

/// After removing `path`, drops maps and lists above it that became empty and nobody owns.
fn prune_empty_parents(obj: &mut Value, path: &[PathStep], kept: &dyn Fn(&[PathStep]) -> bool) {
    for len in (1..path.len()).rev() {
        let parent = &path[..len];
        // List items are identified by their key fields, so they never become empty themselves.
        if !matches!(parent.last(), Some(PathStep::Field(_))) {
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
                let meta = object_member(root, "metadata");
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

#[cfg(test)]
mod tests {
    use super::super::record_update;
    use super::super::test_support::*;
    use super::*;
    use serde_json::json;

    /// `manager` applies `applied` to a Deployment at `T1`, without force.
    fn by<'a>(manager: &'a str, applied: &'a Value) -> Apply<'a> {
        Apply {
            applied,
            manager,
            force: false,
            kind: "Deployment",
            api_version: "apps/v1",
            time: T1,
        }
    }

    // ---- server-side apply ----

    #[test]
    fn ssa_create_from_none() {
        let applied = deployment(2, "nginx:1");
        let out = server_side_apply(None, &by("bprun", &applied)).unwrap();
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
        let first = server_side_apply(None, &by("bprun", &applied)).unwrap();
        let second = server_side_apply(
            Some(&first),
            &Apply {
                time: T2,
                ..by("bprun", &applied)
            },
        )
        .unwrap();
        assert_ne!(first, second);
        assert_eq!(without_times(&first), without_times(&second));
        assert_eq!(entries_of(&second)[0]["time"], T2);
    }

    #[test]
    fn ssa_dropped_label_is_removed_unless_shared() {
        let first = server_side_apply(None, &by("bprun", &deployment(2, "nginx:1"))).unwrap();
        let mut intent = deployment(2, "nginx:1");
        intent["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("tier");
        let out = server_side_apply(
            Some(&first),
            &Apply {
                time: T2,
                ..by("bprun", &intent)
            },
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
        let shared = server_side_apply(Some(&first), &by("ops", &other)).unwrap();
        let out = server_side_apply(
            Some(&shared),
            &Apply {
                time: T2,
                ..by("bprun", &intent)
            },
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
            &Apply {
                kind: "ConfigMap",
                api_version: "v1",
                ..by("m", &cm(json!({"a": "1"})))
            },
        )
        .unwrap();
        let intent = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let out = server_side_apply(
            Some(&first),
            &Apply {
                kind: "ConfigMap",
                api_version: "v1",
                time: T2,
                ..by("m", &intent)
            },
        )
        .unwrap();
        assert!(out.get("data").is_none(), "{out}");
        // The applier's entry stays even with nothing left to own.
        assert_eq!(entries_of(&out).len(), 1);
    }

    /// A Deployment applied by "bprun" whose spec.replicas was then changed by an Update manager.
    fn scaled_by_other() -> Value {
        let first = server_side_apply(None, &by("bprun", &deployment(2, "nginx:1"))).unwrap();
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
            &Apply {
                time: T2,
                ..by("bprun", &deployment(3, "nginx:1"))
            },
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
            &Apply {
                force: true,
                time: T2,
                ..by("bprun", &deployment(3, "nginx:1"))
            },
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
            &Apply {
                time: T2,
                ..by("bprun", &deployment(5, "nginx:1"))
            },
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
            &Apply {
                time: T2,
                ..by("bprun", &intent)
            },
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 5);
    }

    #[test]
    fn ssa_two_appliers_share_a_container_list() {
        let base = server_side_apply(None, &by("bprun", &deployment(2, "nginx:1"))).unwrap();
        let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy:1"}]}}}});
        let both = server_side_apply(Some(&base), &by("mesh", &sidecar)).unwrap();
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
            &Apply {
                time: T2,
                ..by("mesh", &gone)
            },
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
            &Apply {
                time: T2,
                ..by("mesh", &hijack)
            },
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
            &Apply {
                kind: "Pod",
                api_version: "v1",
                ..by("a", &web(json!({"image": "i:1"})))
            },
        )
        .unwrap();
        let b = server_side_apply(
            Some(&a),
            &Apply {
                kind: "Pod",
                api_version: "v1",
                ..by("b", &web(json!({"tty": true})))
            },
        )
        .unwrap();
        let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let out = server_side_apply(
            Some(&b),
            &Apply {
                kind: "Pod",
                api_version: "v1",
                time: T2,
                ..by("b", &bare)
            },
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "web", "image": "i:1"}])
        );
    }

    #[test]
    fn ssa_never_touches_status_and_rejects_bad_input() {
        let mut live = server_side_apply(None, &by("bprun", &deployment(2, "nginx:1"))).unwrap();
        live["status"] = json!({"readyReplicas": 2});
        let mut intent = deployment(2, "nginx:1");
        intent["status"] = json!({"readyReplicas": 99});
        let out = server_side_apply(
            Some(&live),
            &Apply {
                time: T2,
                ..by("bprun", &intent)
            },
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
                    server_side_apply(None, &Apply {
        kind: "Pod",
        api_version: "v1",
        ..by("m", &dup)
        }),
                    Err(MergeError::Invalid(m)) if m.contains("duplicate")
                ));
        let wrong_kind = json!({"kind": "Service"});
        assert!(matches!(
            server_side_apply(
                None,
                &Apply {
                    kind: "Pod",
                    api_version: "v1",
                    ..by("m", &wrong_kind)
                }
            ),
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
        let out = server_side_apply(
            None,
            &Apply {
                kind: "Pod",
                api_version: "v1",
                ..by("kubectl", &applied)
            },
        )
        .unwrap();
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
        let out = server_side_apply(
            Some(&out),
            &Apply {
                kind: "Pod",
                api_version: "v1",
                time: T2,
                ..by("kubectl", &without)
            },
        )
        .unwrap();
        assert!(out["metadata"].get("finalizers").is_none(), "{out}");
    }
}
