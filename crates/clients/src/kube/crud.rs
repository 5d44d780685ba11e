//! Reading and writing single objects: get, list, delete, patch, rollout restart, Secrets.

use super::apply::normalized;
use super::{
    FIELD_MANAGER, KubeClient, block_on, display, failed, object_change, object_detail,
    object_json, retry, status_code,
};
use crate::error::{ClientError, ErrorKind};
use crate::reconcile::{Mode, Outcome};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// How a patch merges into the live object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// Kubernetes strategic merge patch (lists merged by their keys).
    Strategic,
    /// RFC 6902 JSON patch (a list of operations).
    Json,
}

impl PatchKind {
    pub const NAMES: [&'static str; 3] = ["merge", "strategic", "json"];

    pub fn from_name(name: &str) -> Option<PatchKind> {
        match name {
            "merge" => Some(PatchKind::Merge),
            "strategic" => Some(PatchKind::Strategic),
            "json" => Some(PatchKind::Json),
            _ => None,
        }
    }
}

impl KubeClient {
    pub fn get(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ClientError> {
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.api(&resource, &caps, namespace);
            retry(|| api.get_opt(name))
                .await
                .map(|found| found.as_ref().map(object_json))
                .map_err(|error| failed("get", &display(kind, namespace, name), &error))
        })
    }

    pub fn list(
        &self,
        kind: &str,
        namespace: &str,
        labels: &str,
        fields: &str,
    ) -> Result<Vec<Value>, ClientError> {
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.list_api(&resource, &caps, namespace);
            let mut params = ListParams::default();
            if !labels.is_empty() {
                params = params.labels(labels);
            }
            if !fields.is_empty() {
                params = params.fields(fields);
            }
            retry(|| api.list(&params))
                .await
                .map(|list| list.items.iter().map(object_json).collect())
                .map_err(|error| {
                    failed(
                        "list",
                        &format!(
                            "{kind} in {}",
                            if namespace.is_empty() {
                                "all namespaces"
                            } else {
                                namespace
                            }
                        ),
                        &error,
                    )
                })
        })
    }

    /// Deletes an object (in check mode: only looks); unchanged when it did not exist. With
    /// `wait`, polls until it is gone.
    pub fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        mode: Mode,
        wait: Option<Duration>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<()>, ClientError> {
        let shown = display(kind, namespace, name);
        let deleted = block_on(async {
            let (resource, caps) = match self.resolve_async(kind, None).await {
                Ok(found) => found,
                // A kind the server does not serve (its CRD is gone) has no objects to delete.
                Err(error) if error.kind == ErrorKind::NotFound => return Ok(false),
                Err(error) => return Err(error),
            };
            let api = self.api(&resource, &caps, namespace);
            let present = retry(|| api.get_opt(name))
                .await
                .map_err(|error| failed("delete", &shown, &error))?;
            let Some(present) = present else {
                return Ok(false);
            };
            if !mode.writes() {
                return Ok(true);
            }
            // A controller may recreate the object under the same name (a StatefulSet's pod):
            // the object looked at is deleted, and the wait ends when that one is gone.
            let uid = present.metadata.uid.clone();
            let params = DeleteParams {
                preconditions: uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            match api.delete(name, &params).await {
                Ok(_) => {}
                Err(error) if status_code(&error) == Some(404) => return Ok(false),
                // The uid precondition failed: what was looked at is gone, another took its name.
                Err(error) if status_code(&error) == Some(409) && uid.is_some() => {
                    return Ok(false);
                }
                Err(error) => return Err(failed("delete", &shown, &error)),
            }
            if let Some(timeout) = wait {
                let deadline = Instant::now() + timeout;
                loop {
                    if cancelled() {
                        return Err(ClientError::new(format!("{shown}: interrupted"))
                            .in_operation("delete", " "));
                    }
                    let still = retry(|| api.get_opt(name))
                        .await
                        .map_err(|error| failed("delete", &shown, &error))?;
                    let gone = match &still {
                        None => true,
                        Some(object) => uid.is_some() && object.metadata.uid != uid,
                    };
                    if gone {
                        break;
                    }
                    if Instant::now() >= deadline {
                        return Err(ClientError::new(format!(
                            "{shown}: still present after {}s",
                            timeout.as_secs()
                        ))
                        .in_operation("delete", " ")
                        .with_hint("finalizers may hold it: `kubectl get -o yaml` shows metadata.finalizers"));
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
            Ok(true)
        })?;
        Ok(if deleted {
            Outcome::single((), object_change("delete", kind, namespace, name, None))
        } else {
            Outcome::unchanged(())
        })
    }

    /// Patches an existing object (in check mode the server dry-runs it); the result, and a
    /// `patch` change when it changed. None when there is no such object.
    pub fn patch(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: &Value,
        patch_kind: PatchKind,
        mode: Mode,
    ) -> Result<Option<Outcome<Value>>, ClientError> {
        let Some((object, changed)) =
            self.patch_object(kind, namespace, name, patch, patch_kind, mode)?
        else {
            return Ok(None);
        };
        let mut outcome = Outcome::unchanged(object);
        if changed {
            outcome
                .changes
                .push(object_change("patch", kind, namespace, name, None));
        }
        Ok(Some(outcome))
    }

    /// Restarts a workload's pods as `kubectl rollout restart` does (a
    /// `kubectl.kubernetes.io/restartedAt` annotation on the pod template): always a `restart`
    /// change; the value says whether the pod template changed. None when there is no such
    /// object.
    pub fn rollout_restart(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        mode: Mode,
    ) -> Result<Option<Outcome<bool>>, ClientError> {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": now}}}}});
        let patched =
            self.patch_object(kind, namespace, name, &patch, PatchKind::Strategic, mode)?;
        Ok(patched.map(|(_, changed)| {
            Outcome::single(
                changed,
                object_change("restart", kind, namespace, name, None),
            )
        }))
    }

    /// Patches an object; the result and whether it changed, or None when it does not exist.
    fn patch_object(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: &Value,
        patch_kind: PatchKind,
        mode: Mode,
    ) -> Result<Option<(Value, bool)>, ClientError> {
        let shown = display(kind, namespace, name);
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.api(&resource, &caps, namespace);
            let Some(before) = retry(|| api.get_opt(name))
                .await
                .map_err(|error| failed("patch", &shown, &error))?
            else {
                return Ok(None);
            };
            // A patch that would leave the object as it is sends no write. Checked locally: a
            // merge (RFC 7386; for a strategic patch the same, lists then compared whole) or the
            // JSON patch's operations applied to a copy.
            let current = object_json(&before);
            let mut patched = current.clone();
            let no_op = match patch_kind {
                PatchKind::Merge | PatchKind::Strategic => {
                    json_patch::merge(&mut patched, patch);
                    true
                }
                PatchKind::Json => serde_json::from_value::<json_patch::Patch>(patch.clone())
                    .ok()
                    .is_some_and(|operations| json_patch::patch(&mut patched, &operations).is_ok()),
            } && patched == current;
            if no_op {
                return Ok(Some((current, false)));
            }
            let mut params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            params.dry_run = !mode.writes();
            let result = match patch_kind {
                PatchKind::Merge => api.patch(name, &params, &Patch::Merge(patch)).await,
                PatchKind::Strategic => api.patch(name, &params, &Patch::Strategic(patch)).await,
                PatchKind::Json => {
                    let operations: json_patch::Patch = serde_json::from_value(patch.clone())
                        .map_err(|error| {
                            ClientError::new(format!("{shown}: not a JSON patch: {error}"))
                                .with_kind(ErrorKind::Invalid)
                                .in_operation("patch", " ")
                                .with_hint("a JSON patch is an array of operations like {\"op\": \"replace\", \"path\": \"/spec/replicas\", \"value\": 2}")
                        })?;
                    api.patch(name, &params, &Patch::<Value>::Json(operations)).await
                }
            }
            .map_err(|error| failed("patch", &shown, &error))?;
            let changed = normalized(&object_json(&before)) != normalized(&object_json(&result));
            Ok(Some((object_json(&result), changed)))
        })
    }

    /// Creates or updates a Secret of type `kind` from string values (in check mode: only
    /// compares); unchanged when it already holds them, else a `write` change whose `--diff`
    /// names the keys and hides the values.
    pub fn secret_write(
        &self,
        namespace: &str,
        name: &str,
        data: &std::collections::BTreeMap<String, String>,
        kind: &str,
        mode: Mode,
    ) -> Result<Outcome<()>, ClientError> {
        use base64::Engine;
        let shown = display("Secret", namespace, name);
        let encoded: serde_json::Map<String, Value> = data
            .iter()
            .map(|(key, value)| {
                (
                    key.clone(),
                    json!(base64::engine::general_purpose::STANDARD.encode(value)),
                )
            })
            .collect();
        let live = self.get("secrets", namespace, name)?;
        let written = || {
            let before = live
                .as_ref()
                .map(|live| json!({"kind": "Secret", "data": live["data"].clone()}));
            let after = json!({"kind": "Secret", "data": encoded.clone()});
            let detail = object_detail(
                format!("Secret/{namespace}/{name}"),
                before.as_ref(),
                Some(&after),
                Some("data"),
            );
            Outcome::single(
                (),
                object_change("write", "Secret", namespace, name, Some(detail)),
            )
        };
        if let Some(live) = &live {
            let live_kind = live["type"].as_str().unwrap_or("Opaque");
            if live_kind != kind {
                // The API server refuses to change a Secret's type (the field is immutable).
                return Err(ClientError::new(format!(
                    "{shown} has type {live_kind}, not {kind}, and a Secret's type cannot change"
                ))
                .with_hint(format!(
                    "delete it first (kubectl -n {namespace} delete secret {name}) or keep type {live_kind}"
                )));
            }
            if live["data"].as_object() == Some(&encoded) {
                return Ok(Outcome::unchanged(()));
            }
        }
        if !mode.writes() {
            return Ok(written());
        }
        let object = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                            "type": kind, "data": encoded});
        block_on(async {
            let (resource, caps) = self.resolve_async("Secret", Some("v1")).await?;
            let api = self.api(&resource, &caps, namespace);
            let object: DynamicObject = serde_json::from_value(object.clone())
                .map_err(|error| ClientError::new(format!("{shown}: {error}")))?;
            // Always server-side apply as `bprun`: bprun then owns every key, so a key the
            // script stops writing is removed (a POST would leave it to another manager).
            let result = api
                .patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&object),
                )
                .await;
            result
                .map(|_| written())
                .map_err(|error| failed("secret write", &shown, &error))
        })
    }
}
