//! Deletion: graceful with finalizers, propagation to dependents (background, foreground,
//! orphan), and emptying a terminating namespace.

use super::errors::ApiError;
use super::{Cluster, now_rfc3339};
use crate::kube::resources::ResourceType;
use serde_json::{Value, json};

impl Cluster {
    /// A DELETE's `preconditions`: with a `uid` that is not the live object's, the API
    /// server refuses the delete (409) and deletes nothing.
    pub fn delete_preconditions_hold(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        preconditions: &Value,
    ) -> Result<(), ApiError> {
        let Some(wanted) = preconditions["uid"].as_str() else {
            return Ok(());
        };
        let namespace = if rt.namespaced { namespace } else { "" };
        let live = self
            .lookup(&rt.store_key(), namespace, name)
            .and_then(|live| live["metadata"]["uid"].as_str());
        match live {
            Some(live) if live != wanted => Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Precondition failed: UID in precondition: {wanted}, UID in object meta: {live}"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// DELETE with background propagation (see [`Cluster::delete_with`]).
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        self.delete_with(rt, namespace, name, dry_run, Propagation::Background)
    }

    /// DELETE: namespaces turn Terminating (the namespace controller empties and removes them);
    /// an object with finalizers gets its deletionTimestamp and stays until the last finalizer
    /// is removed; other objects go at once. Their dependents (ownerReferences) go with them,
    /// or with `Orphan` lose the reference and stay.
    pub fn delete_with(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        dry_run: bool,
        propagation: Propagation,
    ) -> Result<Value, ApiError> {
        let namespace = if rt.namespaced { namespace } else { "" };
        let Some(live) = self.lookup(&rt.store_key(), namespace, name).cloned() else {
            return Err(ApiError::not_found(rt, name));
        };
        if dry_run {
            return Ok(Cluster::present(rt, &live));
        }
        if rt.kind == "Namespace" {
            if live["status"]["phase"] == "Terminating" {
                return Ok(Cluster::present(rt, &live));
            }
            let mut terminating = live.clone();
            terminating["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            terminating["status"]["phase"] = json!("Terminating");
            let stored = self
                .commit("namespaces", "", name, Some(terminating))
                .unwrap_or(Value::Null);
            return Ok(Cluster::present(rt, &stored));
        }
        if has_finalizers(&live) {
            if live["metadata"]["deletionTimestamp"].is_null() {
                let mut marked = live.clone();
                marked["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                if propagation == Propagation::Orphan {
                    self.orphan_dependents(&live);
                }
                let stored = self
                    .commit(&rt.store_key(), namespace, name, Some(marked))
                    .unwrap_or(Value::Null);
                return Ok(Cluster::present(rt, &stored));
            }
            return Ok(Cluster::present(rt, &live));
        }
        if propagation == Propagation::Orphan {
            self.orphan_dependents(&live);
        }
        self.remove_with_dependents(&rt.store_key(), namespace, name);
        if rt.kind == "CustomResourceDefinition" {
            self.unregister_crd(&live);
        }
        Ok(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": live["metadata"]["uid"]}
        }))
    }

    /// Drops the ownerReferences that name `owner` from every object (orphan propagation).
    pub(super) fn orphan_dependents(&mut self, owner: &Value) {
        let uid = owner["metadata"]["uid"].clone();
        let mut orphans = Vec::new();
        for (key, objects) in &self.objects {
            for ((ns, name), object) in objects {
                if let Some(owners) = object["metadata"]["ownerReferences"].as_array()
                    && owners.iter().any(|o| o["uid"] == uid)
                {
                    let mut orphan = object.clone();
                    let kept: Vec<Value> =
                        owners.iter().filter(|o| o["uid"] != uid).cloned().collect();
                    match orphan["metadata"].as_object_mut() {
                        Some(metadata) if kept.is_empty() => {
                            metadata.remove("ownerReferences");
                        }
                        _ => orphan["metadata"]["ownerReferences"] = json!(kept),
                    }
                    orphans.push((key.clone(), ns.clone(), name.clone(), orphan));
                }
            }
        }
        for (key, ns, name, orphan) in orphans {
            self.commit(&key, &ns, &name, Some(orphan));
        }
    }

    /// Removes an object and, recursively, every object whose ownerReferences name it (the
    /// garbage collector's background propagation). An object with finalizers is only marked
    /// with a deletionTimestamp: it goes when they are removed.
    pub fn remove_with_dependents(&mut self, store_key: &str, namespace: &str, name: &str) {
        if let Some(live) = self.lookup(store_key, namespace, name)
            && has_finalizers(live)
        {
            if live["metadata"]["deletionTimestamp"].is_null() {
                let mut marked = live.clone();
                marked["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.commit(store_key, namespace, name, Some(marked));
            }
            return;
        }
        self.remove_now(store_key, namespace, name);
    }

    /// Removes an object whatever its finalizers say, then its dependents.
    pub(super) fn remove_now(&mut self, store_key: &str, namespace: &str, name: &str) {
        let Some(removed) = self.commit(store_key, namespace, name, None) else {
            return;
        };
        let uid = removed["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if uid.is_empty() {
            return;
        }
        let mut dependents = Vec::new();
        for (key, objects) in &self.objects {
            for ((ns, dependent), object) in objects {
                if is_owned_by(object, &json!(uid)) {
                    dependents.push((key.clone(), ns.clone(), dependent.clone()));
                }
            }
        }
        for (key, ns, dependent) in dependents {
            self.remove_with_dependents(&key, &ns, &dependent);
        }
    }

    /// Removes every object of a namespace (the namespace controller's sweep).
    /// Deletes every object of a namespace; true when none is left (objects with finalizers
    /// stay, marked, until their finalizers are removed: the namespace stays Terminating).
    pub fn empty_namespace(&mut self, namespace: &str) -> bool {
        let mut doomed = Vec::new();
        for (key, objects) in &self.objects {
            for (ns, name) in objects.keys() {
                if ns == namespace {
                    doomed.push((key.clone(), ns.clone(), name.clone()));
                }
            }
        }
        for (key, ns, name) in &doomed {
            self.remove_with_dependents(key, ns, name);
        }
        !self
            .objects
            .values()
            .any(|objects| objects.keys().any(|(ns, _)| ns == namespace))
    }
}

/// How a DELETE treats the deleted object's dependents (`propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes now, its dependents after it (the default for most kinds).
    Background,
    /// Dependents first (the simulator's end state is the same as Background).
    Foreground,
    /// Dependents stay, without the ownerReference.
    Orphan,
}

impl Propagation {
    pub fn from_name(name: &str) -> Option<Propagation> {
        match name {
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }
}

/// Whether `object` names `uid` among its owners (garbage collection, controllers).
pub fn is_owned_by(object: &Value, uid: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|owners| owners.iter().any(|owner| owner["uid"] == *uid))
}

pub(super) fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|list| !list.is_empty())
}
