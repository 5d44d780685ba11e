//! Server-side apply of manifests, and what an object looks like for comparing and `--diff`.

use super::{
    FIELD_MANAGER, KubeClient, block_on, display, failed, name_of, object_change, object_detail,
    object_json, retry, status_code,
};
use crate::error::{ClientError, ErrorKind};
use crate::reconcile::{Change, Mode, Outcome};
use kube::api::{Patch, PatchParams};
use kube::discovery::Scope;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// One object's outcome in `apply`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Applied {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// created, configured or unchanged; in a dry run also "created (its kind is not served
    /// yet)" for an object whose CRD a planned step would install.
    pub action: &'static str,
    /// The object before and after (the server's answer; a dry run's in check mode), without
    /// the fields the server keeps for itself, for `--diff`; None where there is none.
    before: Option<Value>,
    after: Option<Value>,
}

impl Applied {
    /// The change it is, unless it is unchanged.
    fn change(&self) -> Option<Change> {
        if self.action == "unchanged" {
            return None;
        }
        let namespace = if self.namespace.is_empty() {
            String::new()
        } else {
            format!("{}/", self.namespace)
        };
        // Only a plain creation is one; an object whose kind is not served yet is configured.
        let action = if self.action == "created" {
            "create"
        } else {
            "configure"
        };
        let detail = object_detail(
            format!("{}/{namespace}{}", self.kind, self.name),
            self.before.as_ref(),
            self.after.as_ref(),
            None,
        );
        Some(object_change(
            action,
            &self.kind,
            &self.namespace,
            &self.name,
            Some(detail),
        ))
    }
}

impl KubeClient {
    /// Server-side applies each object (field manager `bprun`, forced); in check mode the
    /// server dry-runs it: what would change, without changing it. Objects whose kind a CRD
    /// earlier in the same batch defines wait (up to 30 s) for it to be served.
    pub fn apply(
        &self,
        objects: &[Value],
        mode: Mode,
    ) -> Result<Outcome<Vec<Applied>>, ClientError> {
        let dry_run = !mode.writes();
        let applied = block_on(async {
            let mut outcomes = Vec::new();
            'objects: for object in objects {
                let kind = object["kind"].as_str().unwrap_or_default();
                let api_version = object["apiVersion"].as_str().unwrap_or_default();
                let name = name_of(object);
                if kind.is_empty() || api_version.is_empty() || name.is_empty() {
                    return Err(ClientError::new(format!(
                        "every object needs apiVersion, kind and metadata.name (got {})",
                        display(
                            if kind.is_empty() { "?" } else { kind },
                            "",
                            if name.is_empty() { "?" } else { &name }
                        )
                    ))
                    .in_operation("apply", ": "));
                }
                let deadline = Instant::now() + Duration::from_secs(30);
                let crd_in_batch = |action: &str| {
                    outcomes.iter().any(|o: &Applied| {
                        o.kind == "CustomResourceDefinition"
                            && (action.is_empty() || o.action == action)
                    })
                };
                // An object a dry run can only say would be created.
                let planned = |action: &'static str| Applied {
                    kind: kind.to_string(),
                    namespace: object["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    name: name.clone(),
                    action,
                    after: Some(for_diff(object)),
                    ..Default::default()
                };
                let (resource, caps) = loop {
                    match self.resolve_async(kind, Some(api_version)).await {
                        Ok(found) => break found,
                        // A dry run does not register the CRD it would create: its objects
                        // would be created too.
                        Err(_) if dry_run && crd_in_batch("created") => {
                            outcomes.push(planned("created"));
                            continue 'objects;
                        }
                        Err(_) if Instant::now() < deadline && crd_in_batch("") => {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        // A dry run after planned steps: the CRD an earlier step would install
                        // (a chart's) is not served yet, so the object would be created.
                        Err(error) if dry_run && error.kind == ErrorKind::NotFound => {
                            outcomes.push(planned("created (its kind is not served yet)"));
                            continue 'objects;
                        }
                        Err(error) => return Err(error),
                    }
                };
                let namespace = if caps.scope == Scope::Namespaced {
                    object["metadata"]["namespace"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| self.default_namespace.clone())
                } else {
                    String::new()
                };
                let api = self.api(&resource, &caps, &namespace);
                let shown = display(kind, &namespace, &name);
                let live = retry(|| api.get_opt(&name))
                    .await
                    .map_err(|error| failed("apply", &shown, &error))?;
                let mut params = PatchParams::apply(FIELD_MANAGER).force();
                params.dry_run = dry_run;
                let mut body = object.clone();
                if caps.scope == Scope::Namespaced {
                    body["metadata"]["namespace"] = json!(namespace);
                }
                // Already applied exactly so: no write at all (a re-run sends only reads).
                if let Some(live) = &live
                    && already_applied(&body, &object_json(live))
                {
                    outcomes.push(Applied {
                        kind: kind.to_string(),
                        namespace,
                        name,
                        action: "unchanged",
                        ..Default::default()
                    });
                    continue;
                }
                let apply_patch = Patch::Apply(&body);
                let result = match retry(|| api.patch(&name, &params, &apply_patch)).await {
                    Ok(result) => result,
                    // A dry run cannot place an object in a namespace the same batch would
                    // create: it would be created.
                    Err(error)
                        if dry_run
                            && status_code(&error) == Some(404)
                            && outcomes.iter().any(|o: &Applied| {
                                o.kind == "Namespace"
                                    && o.name == namespace
                                    && o.action == "created"
                            }) =>
                    {
                        outcomes.push(Applied {
                            kind: kind.to_string(),
                            namespace,
                            name,
                            action: "created",
                            after: Some(for_diff(&body)),
                            ..Default::default()
                        });
                        continue;
                    }
                    Err(error) => return Err(failed("apply", &shown, &error)),
                };
                let action = match &live {
                    None => "created",
                    // A write that changed nothing leaves the resourceVersion alone; a controller
                    // that wrote the status meanwhile moves it, so compare what we apply too.
                    Some(live) => {
                        let same_version = !dry_run
                            && live.metadata.resource_version == result.metadata.resource_version;
                        if same_version
                            || normalized(&object_json(live)) == normalized(&object_json(&result))
                        {
                            "unchanged"
                        } else {
                            "configured"
                        }
                    }
                };
                outcomes.push(Applied {
                    kind: kind.to_string(),
                    namespace,
                    name,
                    action,
                    before: live.as_ref().map(|live| for_diff(&object_json(live))),
                    after: Some(for_diff(&object_json(&result))),
                });
            }
            Ok(outcomes)
        })?;
        Ok(Outcome {
            changes: applied.iter().filter_map(Applied::change).collect(),
            value: applied,
            warnings: Vec::new(),
        })
    }
}

/// An object without the fields every write touches (resourceVersion, managedFields times),
/// to tell a real change from a no-op. What a patch of the object (not of its `/status`) can change: controllers keep writing the
/// status and their own annotations while we patch, so those are left out of the comparison
/// (an identical second patch must say `changed: false` even while a rollout runs).
/// Whether applying `desired` as bprun's field manager would change nothing on `live`: every
/// field of `desired` has that value in `live` (maps key by key, lists item by item and of the
/// same length, so a list another manager extended is applied again), and bprun's last apply
/// owns no field `desired` has dropped (an apply would remove it). Anything uncertain (a value
/// the server normalised, a list another manager changed) answers false: the apply is sent.
pub fn already_applied(desired: &Value, live: &Value) -> bool {
    fn contains(live: &Value, desired: &Value) -> bool {
        match (live, desired) {
            (Value::Object(live), Value::Object(desired)) => desired
                .iter()
                .all(|(key, value)| live.get(key).is_some_and(|have| contains(have, value))),
            (Value::Array(live), Value::Array(desired)) => {
                live.len() == desired.len()
                    && live
                        .iter()
                        .zip(desired)
                        .all(|(have, want)| contains(have, want))
            }
            (live, desired) => live == desired,
        }
    }
    /// The map-key paths of an object, not descending into lists.
    fn desired_paths(value: &Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
        if let Value::Object(map) = value {
            for (key, child) in map {
                let path = format!("{prefix}/{key}");
                out.insert(path.clone());
                desired_paths(child, &path, out);
            }
        }
    }
    /// The fields a FieldsV1 set owns, as map-key paths; list items (`k:`, `v:`, `i:`) count as
    /// their list.
    fn owned_paths(fields: &Value, prefix: &str, out: &mut Vec<String>) {
        if let Value::Object(map) = fields {
            for (key, child) in map {
                if let Some(field) = key.strip_prefix("f:") {
                    let path = format!("{prefix}/{field}");
                    let is_leaf = child
                        .as_object()
                        .is_none_or(|c| c.is_empty() || c.keys().all(|k| !k.starts_with("f:")));
                    if is_leaf {
                        out.push(path);
                    } else {
                        owned_paths(child, &path, out);
                    }
                }
            }
        }
    }
    let mut wanted = desired.clone();
    if let Some(map) = wanted.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        // An apply to the main resource never writes the status (CRD manifests carry one).
        map.remove("status");
    }
    if !contains(live, &wanted) {
        return false;
    }
    // No entry of bprun's: it owns nothing an apply would remove (the API server drops an
    // apply's empty field set, and another manager may have applied the same values).
    let mut owned = Vec::new();
    if let Some(entry) = live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["manager"] == FIELD_MANAGER && entry["operation"] == "Apply")
    {
        owned_paths(&entry["fieldsV1"], "", &mut owned);
    }
    let mut have = std::collections::BTreeSet::new();
    desired_paths(&wanted, "", &mut have);
    owned.iter().all(|path| have.contains(path))
}

/// An object as `--diff` shows it: without status and the server's bookkeeping (versions, uid,
/// managed fields, creation time). A Secret's values are still here: see [`hide_secret_values`].
pub fn for_diff(object: &Value) -> Value {
    let mut copy = normalized(object);
    if let Some(metadata) = copy["metadata"].as_object_mut() {
        metadata.remove("uid");
        metadata.remove("creationTimestamp");
    }
    copy
}

/// A Secret's two sides for `--diff` with every value replaced: `(hidden)`, or `(hidden,
/// changed)` on the new side of a key whose value changes, so the diff names the keys and never
/// shows a value (nor a digest of one).
pub fn hide_secret_values(
    before: Option<&Value>,
    after: Option<&Value>,
) -> (Option<Value>, Option<Value>) {
    let is_secret = |side: Option<&Value>| side.is_some_and(|object| object["kind"] == "Secret");
    if !is_secret(before) && !is_secret(after) {
        return (before.cloned(), after.cloned());
    }
    let value_of = |side: Option<&Value>, field: &str, key: &str| {
        side.and_then(|object| object[field].get(key)).cloned()
    };
    let hide = |side: Option<&Value>, other: Option<&Value>, new_side: bool| {
        side.map(|object| {
            let mut copy = object.clone();
            for field in ["data", "stringData"] {
                // `get_mut`, not indexing: indexing a missing key would add it as null.
                if let Some(values) = copy.get_mut(field).and_then(Value::as_object_mut) {
                    for (key, value) in values.iter_mut() {
                        let changed = value_of(other, field, key).as_ref() != Some(value);
                        *value = json!(if new_side && changed {
                            "(hidden, changed)"
                        } else {
                            "(hidden)"
                        });
                    }
                }
            }
            copy
        })
    };
    (hide(before, after, false), hide(after, before, true))
}

pub(super) fn normalized(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("status");
    }
    if let Some(metadata) = copy["metadata"].as_object_mut() {
        metadata.remove("resourceVersion");
        metadata.remove("managedFields");
        metadata.remove("generation");
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| !key.starts_with("deployment.kubernetes.io/"));
        }
    }
    copy
}

#[cfg(test)]
mod already_applied_tests {
    use super::*;

    #[test]
    fn a_secrets_diff_names_the_keys_that_change_and_shows_no_value() {
        let before = json!({"kind": "Secret", "data": {"a": "b2xk", "b": "c2FtZQ=="}});
        let after = json!({"kind": "Secret", "data": {"a": "bmV3", "b": "c2FtZQ==", "c": "eA=="}});
        let (old, new) = hide_secret_values(Some(&before), Some(&after));
        assert_eq!(
            old,
            Some(json!({"kind": "Secret", "data": {"a": "(hidden)", "b": "(hidden)"}}))
        );
        assert_eq!(
            new,
            Some(
                json!({"kind": "Secret", "data": {"a": "(hidden, changed)", "b": "(hidden)", "c": "(hidden, changed)"}})
            )
        );
        let config = json!({"kind": "ConfigMap", "data": {"a": "visible"}});
        assert_eq!(
            hide_secret_values(None, Some(&config)),
            (None, Some(config.clone()))
        );
    }

    fn live(extra_owned: bool) -> Value {
        let mut owned = json!({"f:metadata": {"f:labels": {"f:app": {}}},
                               "f:data": {"f:config": {}}});
        if extra_owned {
            owned["f:data"]["f:old"] = json!({});
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "n", "resourceVersion": "7", "uid": "u",
                            "labels": {"app": "x", "other": "y"},
                            "managedFields": [{"manager": "bprun", "operation": "Apply", "fieldsV1": owned}]},
               "data": {"config": "a", "old": "b", "theirs": "c"}})
    }

    #[test]
    fn an_object_applied_before_with_the_same_fields_needs_no_write() {
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "c", "namespace": "n", "labels": {"app": "x"}},
                             "data": {"config": "a"}});
        assert!(already_applied(&desired, &live(false)));
        // A changed value, a new field, or a field bprun owned and dropped: apply.
        let mut changed = desired.clone();
        changed["data"]["config"] = json!("z");
        assert!(!already_applied(&changed, &live(false)));
        let mut added = desired.clone();
        added["data"]["new"] = json!("n");
        assert!(!already_applied(&added, &live(false)));
        assert!(!already_applied(&desired, &live(true)));
        // Applied with the same values by another manager: nothing to write either.
        let mut foreign = live(false);
        foreign["metadata"]["managedFields"][0]["manager"] = json!("helm");
        assert!(already_applied(&desired, &foreign));
        let mut differs = foreign.clone();
        differs["data"]["config"] = json!("helm's");
        assert!(!already_applied(&desired, &differs));
    }

    #[test]
    fn lists_must_match_item_by_item() {
        let mut live = live(false);
        live["spec"] = json!({"ports": [{"port": 80, "protocol": "TCP"}]});
        live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"] =
            json!({"f:ports": {"k:{\"port\":80}": {".": {}, "f:port": {}}}});
        let desired = json!({"metadata": {"name": "c", "namespace": "n", "labels": {"app": "x"}},
                             "data": {"config": "a"}, "spec": {"ports": [{"port": 80}]}});
        assert!(already_applied(&desired, &live));
        let two = json!({"metadata": {"name": "c", "namespace": "n", "labels": {"app": "x"}},
                         "data": {"config": "a"}, "spec": {"ports": [{"port": 80}, {"port": 81}]}});
        assert!(!already_applied(&two, &live));
    }
}
