//! The workload controllers: ReplicaSets and StatefulSets get their pods (a StatefulSet one at a
//! time, with its claim templates), Deployments their ReplicaSets as rollouts step.

use super::pods::pod_ready;
use super::{ensure_event, name_of, namespace_of, owned_by, suffix, write};
use crate::kube::cluster::{Cluster, new_uid, random_suffix};
use crate::kube::rollout::template_hash;
use crate::kube::runtime::now_rfc3339;
use crate::kube::{rollout, service_accounts};
use serde_json::{Value, json};

pub(super) fn workloads(cluster: &mut Cluster, store_key: &str, kind: &str) -> usize {
    let mut writes = 0;
    for workload in cluster.all(store_key) {
        if workload["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let namespace = namespace_of(&workload);
        let name = name_of(&workload);
        let uid = workload["metadata"]["uid"].clone();
        let template = workload["spec"]["template"].clone();
        // A Deployment's ReplicaSet carries its pod-template-hash; keep it.
        let hash = template["metadata"]["labels"]["pod-template-hash"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| template_hash(&template));
        let desired = if kind == "DaemonSet" {
            1
        } else {
            workload["spec"]["replicas"].as_u64().unwrap_or(1)
        };
        let owned: Vec<Value> = owned_by(cluster, "pods", &namespace, &uid);
        let (revision_key, revision) = revision_label(kind, &name, &hash);
        let of_revision =
            |pod: &Value, wanted: &str| pod["metadata"]["labels"][revision_key] == wanted;
        // Rollout: pods of an older template go, new ones come.
        let (updated, stale): (Vec<Value>, Vec<Value>) = owned
            .iter()
            .cloned()
            .partition(|pod| of_revision(pod, &revision));
        let mut current = if kind == "StatefulSet" {
            // A StatefulSet's pods keep their identity: a rolling update replaces one at a time
            // (see `stateful_set_update`), and the others serve meanwhile.
            let replaced = stateful_set_update(&workload, &owned, &hash, desired);
            for pod in &replaced {
                cluster.remove_with_dependents("pods", &namespace, pod);
                writes += 1;
            }
            let mut kept: Vec<Value> = owned
                .into_iter()
                .filter(|pod| !replaced.contains(&name_of(pod)))
                .collect();
            kept.sort_by_key(|pod| ordinal(&name_of(pod)));
            kept
        } else {
            for pod in &stale {
                cluster.remove_with_dependents("pods", &namespace, &name_of(pod));
                writes += 1;
            }
            updated.clone()
        };
        while (current.len() as u64) > desired {
            if let Some(pod) = current.pop() {
                cluster.remove_with_dependents("pods", &namespace, &name_of(&pod));
                writes += 1;
            }
        }
        // The ServiceAccount admission plugin refuses pods whose account does not exist (a
        // StatefulSet names its pods; the others' pods have a generateName, `<owner>-`).
        let account = service_accounts::account_of(&template["spec"]).to_string();
        let account_object = cluster
            .lookup("serviceaccounts", &namespace, &account)
            .cloned();
        let refused = (current.len() as u64) < desired && account_object.is_none();
        let next_ordinal = (0..desired)
            .find(|index| {
                !current
                    .iter()
                    .any(|pod| name_of(pod) == format!("{name}-{index}"))
            })
            .unwrap_or(0);
        writes += replica_failure(
            cluster,
            &workload,
            store_key,
            refused.then(|| {
                let pod_name = if kind == "StatefulSet" {
                    format!("{name}-{next_ordinal}")
                } else {
                    format!("{name}-")
                };
                service_accounts::refusal(&pod_name, &namespace, &account)
            }),
        );
        // A StatefulSet (OrderedReady, the default) starts pod N+1 once pod N is Ready.
        let ordered = kind == "StatefulSet"
            && workload["spec"]["podManagementPolicy"].as_str() != Some("Parallel");
        let mut index = 0u64;
        while !refused && (current.len() as u64) < desired {
            let pod_name = match kind {
                "StatefulSet" => format!("{name}-{index}"),
                _ => format!("{name}-{}", suffix()),
            };
            index += 1;
            if let Some(existing) = cluster.lookup("pods", &namespace, &pod_name) {
                if ordered && !pod_ready(existing) {
                    break;
                }
                continue;
            }
            let mut labels = template["metadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            labels[revision_key] = json!(revision);
            if kind == "StatefulSet" {
                labels["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
            }
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": pod_name, "namespace": namespace, "labels": labels,
                    "annotations": template["metadata"]["annotations"].clone(),
                    "uid": format!("{}-pod-{}", uid.as_str().unwrap_or(""), suffix()),
                    "creationTimestamp": now_rfc3339(), "generation": 1,
                    "ownerReferences": [{"apiVersion": workload["apiVersion"], "kind": kind, "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]
                },
                "spec": template["spec"].clone(),
                "status": {"phase": "Pending", "qosClass": "BestEffort"}
            });
            let mut pod = pod;
            if pod["metadata"]["annotations"].is_null()
                && let Some(metadata) = pod["metadata"].as_object_mut()
            {
                metadata.remove("annotations");
            }
            pod["spec"]["nodeName"] = json!("sim-control-plane");
            if service_accounts::admit(
                &mut pod,
                &pod_name,
                &namespace,
                account_object.as_ref(),
                &random_suffix(),
            )
            .is_err()
            {
                break;
            }
            if kind == "StatefulSet" {
                writes += claim_templates(cluster, &workload, &pod_name, &mut pod);
            }
            cluster.commit("pods", &namespace, &pod_name, Some(pod.clone()));
            current.push(pod);
            writes += 1;
            if ordered {
                break;
            }
        }
        let ready = current.iter().filter(|pod| pod_ready(pod)).count() as u64;
        let generation = workload["metadata"]["generation"].clone();
        let status = match kind {
            "StatefulSet" => {
                // The current revision stays the old one until every pod runs the new one.
                let is_updated = |pod: &&Value| of_revision(pod, &revision);
                let updated_count = current.iter().filter(is_updated).count();
                let old_revision = current
                    .iter()
                    .find(|pod| !is_updated(pod))
                    .and_then(|pod| pod["metadata"]["labels"][revision_key].as_str())
                    .unwrap_or(&revision)
                    .to_string();
                let current_count = if old_revision == revision {
                    updated_count
                } else {
                    current.len() - updated_count
                };
                json!({
                    "observedGeneration": generation, "replicas": current.len(),
                    "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": current_count,
                    "updatedReplicas": updated_count, "currentRevision": old_revision,
                    "updateRevision": revision, "collisionCount": 0
                })
            }
            "DaemonSet" => json!({
                "observedGeneration": generation, "desiredNumberScheduled": desired,
                "currentNumberScheduled": current.len(), "updatedNumberScheduled": current.len(),
                "numberReady": ready, "numberAvailable": ready, "numberMisscheduled": 0
            }),
            _ => json!({
                "observedGeneration": generation, "replicas": current.len(),
                "fullyLabeledReplicas": current.len(), "readyReplicas": ready, "availableReplicas": ready
            }),
        };
        // Readiness needs a fresh look at the pods: re-read so unchanged status writes nothing,
        // and keep the conditions `replica_failure` manages.
        let latest = cluster
            .lookup(store_key, &namespace, &name)
            .cloned()
            .unwrap_or(workload);
        let mut status = status;
        if let Some(conditions) = latest["status"]["conditions"].as_array()
            && !conditions.is_empty()
        {
            status["conditions"] = json!(conditions);
        }
        if latest["status"] != status {
            let mut updated = latest;
            updated["status"] = status;
            writes += write(cluster, store_key, updated);
        }
    }
    writes
}

/// The label a workload's pods carry their template's revision in, and its value for `hash`:
/// a StatefulSet's `controller-revision-hash` names its ControllerRevision (`NAME-HASH`, what
/// `status.updateRevision` says), a ReplicaSet's `pod-template-hash` is the hash alone.
pub fn revision_label(kind: &str, name: &str, hash: &str) -> (&'static str, String) {
    if kind == "StatefulSet" {
        ("controller-revision-hash", format!("{name}-{hash}"))
    } else {
        ("pod-template-hash", hash.to_string())
    }
}

/// A StatefulSet pod's ordinal (`web-2` -> 2).
pub(super) fn ordinal(pod_name: &str) -> u64 {
    pod_name
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The StatefulSet controller's rolling update (the default `RollingUpdate` strategy, partition
/// honoured): once every pod exists and is Ready, the highest-ordinal pod of an older template
/// goes, one at a time; it comes back with the new template, and the next waits until it is
/// Ready. A new template whose pods never get Ready leaves the other pods as they were.
/// `OnDelete` replaces nothing. Returns the pods to delete now.
pub fn stateful_set_update(set: &Value, pods: &[Value], hash: &str, desired: u64) -> Vec<String> {
    let strategy = &set["spec"]["updateStrategy"];
    if strategy["type"] == "OnDelete" {
        return Vec::new();
    }
    let partition = strategy["rollingUpdate"]["partition"].as_u64().unwrap_or(0);
    let settled = pods.len() as u64 >= desired && pods.iter().all(pod_ready);
    if !settled {
        return Vec::new();
    }
    pods.iter()
        .filter(|pod| {
            let (key, revision) = revision_label("StatefulSet", name_of(set).as_str(), hash);
            pod["metadata"]["labels"][key] != revision.as_str()
        })
        .map(name_of)
        .filter(|name| ordinal(name) >= partition && ordinal(name) < desired)
        .max_by_key(|name| ordinal(name))
        .into_iter()
        .collect()
}

/// A StatefulSet pod's claims from `volumeClaimTemplates`: `<template>-<pod>` is created when
/// missing (and kept when the pod goes, as the default retention policy does) and mounted as
/// the template's volume.
pub(super) fn claim_templates(
    cluster: &mut Cluster,
    set: &Value,
    pod_name: &str,
    pod: &mut Value,
) -> usize {
    let mut writes = 0;
    let namespace = namespace_of(set);
    for template in set["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let volume = template["metadata"]["name"].as_str().unwrap_or("data");
        let claim_name = format!("{volume}-{pod_name}");
        if cluster
            .lookup("persistentvolumeclaims", &namespace, &claim_name)
            .is_none()
        {
            let mut labels = template["metadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            if let Some(selector) = set["spec"]["selector"]["matchLabels"].as_object() {
                for (key, value) in selector {
                    labels[key] = value.clone();
                }
            }
            let claim = json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim_name, "namespace": namespace, "labels": labels,
                             "uid": new_uid(), "creationTimestamp": now_rfc3339()},
                "spec": template["spec"].clone(),
                "status": {"phase": "Pending"}
            });
            cluster.commit(
                "persistentvolumeclaims",
                &namespace,
                &claim_name,
                Some(claim),
            );
            writes += 1;
        }
        let mounts = pod["spec"]["volumes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !mounts.iter().any(|v| v["name"] == volume) {
            let mut volumes = mounts;
            volumes
                .push(json!({"name": volume, "persistentVolumeClaim": {"claimName": claim_name}}));
            pod["spec"]["volumes"] = json!(volumes);
        }
    }
    writes
}

/// Sets or clears a workload's `ReplicaFailure` condition (`FailedCreate`, with the API
/// server's refusal as the message) and records the event once.
pub(super) fn replica_failure(
    cluster: &mut Cluster,
    workload: &Value,
    store_key: &str,
    refusal: Option<String>,
) -> usize {
    let current = workload["status"]["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == "ReplicaFailure"))
        .cloned();
    let mut writes = 0;
    let updated = match (&refusal, &current) {
        (Some(message), Some(condition)) if condition["message"] == message.as_str() => None,
        (Some(message), _) => {
            writes += ensure_event(
                cluster,
                workload,
                "Warning",
                "FailedCreate",
                &format!("Error creating: {message}"),
                "replicaset-controller",
            );
            let mut updated = workload.clone();
            let mut conditions: Vec<Value> = updated["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            conditions.retain(|c| c["type"] != "ReplicaFailure");
            conditions.push(
                json!({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                   "message": message, "lastTransitionTime": now_rfc3339()}),
            );
            updated["status"]["conditions"] = json!(conditions);
            Some(updated)
        }
        (None, Some(_)) => {
            let mut updated = workload.clone();
            if let Some(list) = updated["status"]["conditions"].as_array_mut() {
                list.retain(|c| c["type"] != "ReplicaFailure");
            }
            Some(updated)
        }
        (None, None) => None,
    };
    if let Some(updated) = updated {
        writes += write(cluster, store_key, updated);
    }
    writes
}

/// Deployments run through ReplicaSets, as on a real cluster (helm 3's readiness check and
/// `kubectl rollout` look for the newest one): one ReplicaSet per pod template, named
/// `<deployment>-<pod-template-hash>`, carrying its revision; older ones stay scaled to 0 (up to
/// `revisionHistoryLimit`) so `rollout history` lists them and `rollout undo` brings one back.
/// A rollout whose pods do not become Ready within `progressDeadlineSeconds` stops Progressing.
pub(super) fn deployments(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for deployment in cluster.all("deployments.apps") {
        if deployment["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let namespace = namespace_of(&deployment);
        let name = name_of(&deployment);
        let uid = deployment["metadata"]["uid"].clone();
        let template = deployment["spec"]["template"].clone();
        let hash = template_hash(&template);
        let desired = deployment["spec"]["replicas"].as_u64().unwrap_or(1);
        let owned: Vec<Value> = owned_by(cluster, "replicasets.apps", &namespace, &uid);
        let current_name = format!("{name}-{hash}");
        let history_limit = deployment["spec"]["revisionHistoryLimit"]
            .as_u64()
            .unwrap_or(10) as usize;
        let plan = rollout::plan(&owned, &current_name, history_limit);
        let counted = |rs: &Value| rollout::ReplicaSetCount {
            name: name_of(rs),
            replicas: rs["spec"]["replicas"].as_u64().unwrap_or(0),
            available: rs["status"]["readyReplicas"].as_u64().unwrap_or(0),
        };
        // Old ReplicaSets, oldest first: those past the history limit go once scaled to 0.
        let old: Vec<rollout::ReplicaSetCount> = plan
            .pruned
            .iter()
            .chain(&plan.kept)
            .filter_map(|old| owned.iter().find(|rs| name_of(rs) == *old))
            .map(counted)
            .collect();
        let new_count = owned
            .iter()
            .find(|rs| name_of(rs) == current_name)
            .map(counted)
            .unwrap_or(rollout::ReplicaSetCount {
                name: current_name.clone(),
                replicas: 0,
                available: 0,
            });
        let strategy = &deployment["spec"]["strategy"];
        let (new_replicas, old_replicas) =
            rollout::rolling_step(strategy, desired, &new_count, &old);
        for (old_name, replicas) in &old_replicas {
            let Some(mut rs) = cluster
                .lookup("replicasets.apps", &namespace, old_name)
                .cloned()
            else {
                continue;
            };
            let idle = *replicas == 0 && rs["status"]["replicas"].as_u64().unwrap_or(0) == 0;
            if idle && plan.pruned.contains(old_name) {
                cluster.remove_with_dependents("replicasets.apps", &namespace, old_name);
                writes += 1;
            } else if rs["spec"]["replicas"] != *replicas {
                rs["spec"]["replicas"] = json!(replicas);
                rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] =
                    json!(desired.to_string());
                writes += write(cluster, "replicasets.apps", rs);
            }
        }
        let mut rs_template = template.clone();
        if !rs_template["metadata"]["labels"].is_object() {
            rs_template["metadata"]["labels"] = json!({});
        }
        rs_template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        let mut selector = deployment["spec"]["selector"].clone();
        if !selector["matchLabels"].is_object() {
            selector["matchLabels"] = json!({});
        }
        selector["matchLabels"]["pod-template-hash"] = json!(hash);
        let revision = plan.revision.to_string();
        let current = owned.iter().find(|rs| name_of(rs) == current_name).cloned();
        let wanted_spec =
            json!({"replicas": new_replicas, "selector": selector, "template": rs_template});
        match current {
            Some(rs)
                if rs["spec"] == wanted_spec
                    && rs["metadata"]["annotations"][rollout::REVISION] == revision.as_str() => {}
            Some(mut rs) => {
                rs["spec"] = wanted_spec;
                rs["metadata"]["annotations"][rollout::REVISION] = json!(revision);
                rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] =
                    json!(desired.to_string());
                writes += write(cluster, "replicasets.apps", rs);
            }
            None => {
                let mut labels = template["metadata"]["labels"].clone();
                if !labels.is_object() {
                    labels = json!({});
                }
                labels["pod-template-hash"] = json!(hash);
                let mut annotations = json!({rollout::REVISION: revision,
                                             "deployment.kubernetes.io/desired-replicas": desired.to_string()});
                if let Some(cause) =
                    deployment["metadata"]["annotations"]["kubernetes.io/change-cause"].as_str()
                {
                    annotations["kubernetes.io/change-cause"] = json!(cause);
                }
                let rs = json!({
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {
                        "name": current_name, "namespace": namespace, "labels": labels,
                        "annotations": annotations,
                        "uid": format!("{}-rs-{}", uid.as_str().unwrap_or(""), suffix()),
                        "creationTimestamp": now_rfc3339(), "generation": 1,
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]
                    },
                    "spec": wanted_spec,
                    "status": {"replicas": 0}
                });
                cluster.commit("replicasets.apps", &namespace, &current_name, Some(rs));
                writes += 1;
            }
        }
        let rs_status = cluster
            .lookup("replicasets.apps", &namespace, &current_name)
            .map(|rs| rs["status"].clone())
            .unwrap_or(Value::Null);
        let updated_replicas = rs_status["replicas"].as_u64().unwrap_or(0);
        // Old ReplicaSets' pods (serving during a rolling update, or terminating) count too.
        let all_sets: Vec<Value> = std::iter::once(current_name.clone())
            .chain(old_replicas.iter().map(|(name, _)| name.clone()))
            .filter_map(|name| {
                cluster
                    .lookup("replicasets.apps", &namespace, &name)
                    .cloned()
            })
            .collect();
        let sum = |field: &str| -> u64 {
            all_sets
                .iter()
                .map(|rs| rs["status"][field].as_u64().unwrap_or(0))
                .sum()
        };
        let (replicas, ready) = (sum("replicas"), sum("readyReplicas"));
        let wanted_pods: u64 = all_sets
            .iter()
            .map(|rs| rs["spec"]["replicas"].as_u64().unwrap_or(0))
            .sum();
        let (_, max_unavailable) = rollout::rolling_bounds(strategy, desired);
        let available = if strategy["type"] == "Recreate" {
            ready >= desired
        } else {
            ready >= desired.saturating_sub(max_unavailable)
        };
        let now = now_rfc3339();
        let previous_conditions = deployment["status"]["conditions"].clone();
        let condition = |kind: &str, status: bool, reason: &str, message: &str| {
            let status_text = if status { "True" } else { "False" };
            let since = previous_conditions
                .as_array()
                .and_then(|list| {
                    list.iter()
                        .find(|c| c["type"] == kind && c["status"] == status_text)
                })
                .map(|c| c["lastTransitionTime"].clone())
                .unwrap_or_else(|| json!(now));
            json!({"type": kind, "status": status_text, "reason": reason, "message": message,
                   "lastTransitionTime": since, "lastUpdateTime": since})
        };
        let mut conditions = vec![
            condition(
                "Available",
                available,
                if available {
                    "MinimumReplicasAvailable"
                } else {
                    "MinimumReplicasUnavailable"
                },
                if available {
                    "Deployment has minimum availability."
                } else {
                    "Deployment does not have minimum availability."
                },
            ),
            rollout::progressing(&rollout::Progress {
                previous: &deployment["status"],
                replica_set: &current_name,
                updated: updated_replicas,
                replicas,
                ready,
                desired,
                deadline: deployment["spec"]["progressDeadlineSeconds"].as_u64(),
                now: std::time::SystemTime::now(),
            }),
        ];
        // The ReplicaSet's refusal (a missing ServiceAccount) shows on the Deployment too.
        if let Some(failure) = rs_status["conditions"]
            .as_array()
            .and_then(|list| list.iter().find(|c| c["type"] == "ReplicaFailure"))
        {
            conditions.push(failure.clone());
        }
        let status = json!({
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas, "updatedReplicas": updated_replicas,
            "readyReplicas": ready, "availableReplicas": ready,
            "unavailableReplicas": wanted_pods.max(desired).saturating_sub(ready),
            "conditions": conditions
        });
        if deployment["status"] != status
            || deployment["metadata"]["annotations"][rollout::REVISION] != revision.as_str()
        {
            let mut updated = deployment.clone();
            updated["status"] = status;
            updated["metadata"]["annotations"][rollout::REVISION] = json!(revision);
            writes += write(cluster, "deployments.apps", updated);
        }
    }
    writes
}
