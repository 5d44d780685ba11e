//! Plays the controllers' and kubelet's part so that waits end as on a real cluster:
//! workloads get pods and ready replicas, pods become Running and Ready, Jobs complete,
//! Services get Endpoints, namespaces being deleted are emptied and removed, CRDs become
//! Established, and CloudNativePG Clusters run while their operator does (`cnpg`); other custom
//! resources get a Ready condition only when their behaviour annotation says `ready`.
//!
//! The pod template annotation `sim.bprun.dev/behaviour` makes failures reproducible:
//! `image-pull-backoff` (containers wait in ErrImagePull / ImagePullBackOff), `crash-loop`
//! (CrashLoopBackOff), `fail` (a Job fails), `ready` (a custom resource is marked Ready
//! without its operator).

use super::batch;
use super::cluster::{Cluster, WriteOptions, is_owned_by, new_uid, now_rfc3339, random_suffix};
use super::cnpg;
use super::kubelet;
use super::programs;
use super::rollout::{self, template_hash};
use super::selectors::LabelSelector;
use super::service_accounts;
use super::storage::{self, Decision, StorageView};
use serde_json::{Value, json};

pub const BEHAVIOUR: &str = "sim.bprun.dev/behaviour";

/// One reconcile pass over everything; returns how many objects it wrote.
pub fn reconcile(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    writes += namespaces(cluster);
    writes += crds(cluster);
    writes += claims(cluster);
    writes += deployments(cluster);
    for (store_key, kind) in [
        ("statefulsets.apps", "StatefulSet"),
        ("daemonsets.apps", "DaemonSet"),
        ("replicasets.apps", "ReplicaSet"),
    ] {
        writes += workloads(cluster, store_key, kind);
    }
    writes += cnpg_clusters(cluster);
    writes += super::gateway::reconcile(cluster);
    writes += pods(cluster);
    writes += jobs(cluster);
    writes += endpoints(cluster);
    writes += custom_resources(cluster);
    writes
}

fn behaviour(template_metadata: &Value) -> &str {
    template_metadata["annotations"][BEHAVIOUR]
        .as_str()
        .unwrap_or("")
}

fn namespace_of(object: &Value) -> String {
    object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The objects of `store_key` in `namespace` that `uid` owns.
fn owned_by(cluster: &Cluster, store_key: &str, namespace: &str, uid: &Value) -> Vec<Value> {
    cluster
        .all(store_key)
        .into_iter()
        .filter(|object| namespace_of(object) == namespace && is_owned_by(object, uid))
        .collect()
}

fn write(cluster: &mut Cluster, store_key: &str, object: Value) -> usize {
    let namespace = namespace_of(&object);
    let name = name_of(&object);
    if cluster.lookup(store_key, &namespace, &name) == Some(&object) {
        return 0;
    }
    cluster.commit(store_key, &namespace, &name, Some(object));
    1
}

/// The namespace controller's sweep of Terminating namespaces, and what every Active namespace
/// holds on a real cluster: the `default` ServiceAccount (pods without `serviceAccountName`
/// use it) and the `kube-root-ca.crt` ConfigMap (the cluster CA, mounted by every pod's API
/// access volume).
fn namespaces(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for namespace in cluster.all("namespaces") {
        let name = name_of(&namespace);
        if namespace["status"]["phase"] == "Terminating" {
            let empty = cluster.empty_namespace(&name);
            match terminating_step(&namespace, empty, &now_rfc3339()) {
                NamespaceStep::Remove => {
                    cluster.commit("namespaces", "", &name, None);
                    writes += 1;
                }
                NamespaceStep::Update(updated) => writes += write(cluster, "namespaces", updated),
                NamespaceStep::Wait => {}
            }
            continue;
        }
        if cluster
            .lookup("serviceaccounts", &name, "default")
            .is_none()
        {
            let account = json!({
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name, "uid": format!("sa-{}", suffix()),
                             "creationTimestamp": now_rfc3339()}
            });
            cluster.commit("serviceaccounts", &name, "default", Some(account));
            writes += 1;
        }
        let ca = cluster.root_ca_pem.clone();
        let current = cluster
            .lookup("configmaps", &name, "kube-root-ca.crt")
            .cloned();
        if current
            .as_ref()
            .is_none_or(|map| map["data"]["ca.crt"] != ca.as_str())
        {
            let mut map = current.unwrap_or_else(|| json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kube-root-ca.crt", "namespace": name, "uid": format!("cm-{}", suffix()),
                             "creationTimestamp": now_rfc3339(),
                             "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}}
            }));
            map["data"] = json!({"ca.crt": ca});
            cluster.commit("configmaps", &name, "kube-root-ca.crt", Some(map));
            writes += 1;
        }
    }
    writes
}

/// What the namespace controller does with a Terminating namespace in one pass.
#[derive(Debug, PartialEq)]
enum NamespaceStep {
    /// Record the deletion's conditions, or drop the `kubernetes` finalizer once empty.
    Update(Value),
    /// Content remains (objects held by their finalizers).
    Wait,
    /// Empty and without finalizers: it goes.
    Remove,
}

/// A Terminating namespace takes a few passes, as on a real cluster: its conditions say what
/// remains, then its `kubernetes` finalizer goes once it is empty, then the namespace.
fn terminating_step(namespace: &Value, empty: bool, now: &str) -> NamespaceStep {
    let remaining = if empty { "False" } else { "True" };
    let condition = |kind: &str, status: &str, reason: &str, message: &str| json!({"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now});
    let conditions = json!([
        condition(
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered"
        ),
        condition(
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed"
        ),
        condition(
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization"
        ),
        condition(
            "NamespaceContentRemaining",
            remaining,
            if empty {
                "ContentRemoved"
            } else {
                "SomeResourcesRemain"
            },
            if empty {
                "All content successfully removed"
            } else {
                "Some resources are remaining"
            }
        ),
        condition(
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished"
        ),
    ]);
    let recorded = namespace["status"]["conditions"]
        .as_array()
        .and_then(|list| {
            list.iter()
                .find(|c| c["type"] == "NamespaceContentRemaining")
        })
        .map(|c| c["status"].clone());
    if recorded != Some(json!(remaining)) {
        let mut updated = namespace.clone();
        updated["status"]["conditions"] = conditions;
        return NamespaceStep::Update(updated);
    }
    if !empty {
        return NamespaceStep::Wait;
    }
    let finalizers = namespace["spec"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if finalizers.iter().any(|f| f == "kubernetes") {
        let mut updated = namespace.clone();
        updated["spec"]["finalizers"] = json!(
            finalizers
                .into_iter()
                .filter(|f| f != "kubernetes")
                .collect::<Vec<_>>()
        );
        return NamespaceStep::Update(updated);
    }
    if finalizers.is_empty() {
        NamespaceStep::Remove
    } else {
        NamespaceStep::Wait
    }
}

fn crds(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for crd in cluster.all("customresourcedefinitions.apiextensions.k8s.io") {
        let established = crd["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Established"));
        if established && crd["status"]["acceptedNames"] == crd["spec"]["names"] {
            continue;
        }
        let mut updated = crd.clone();
        let now = now_rfc3339();
        updated["status"] = json!({
            "acceptedNames": crd["spec"]["names"],
            "storedVersions": crd["spec"]["versions"].as_array().map(|versions| versions.iter().filter(|v| v["storage"] == true).map(|v| v["name"].clone()).collect::<Vec<_>>()).unwrap_or_default(),
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
            ]
        });
        writes += write(
            cluster,
            "customresourcedefinitions.apiextensions.k8s.io",
            updated,
        );
    }
    writes
}

/// Whether every container of the pod has started (its status says running).
fn containers_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|statuses| {
                !statuses.is_empty()
                    && statuses
                        .iter()
                        .all(|status| status["state"]["running"].is_object())
            })
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn workloads(cluster: &mut Cluster, store_key: &str, kind: &str) -> usize {
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
        // Rollout: pods of an older template go, new ones come.
        let (updated, stale): (Vec<Value>, Vec<Value>) = owned
            .iter()
            .cloned()
            .partition(|pod| pod["metadata"]["labels"]["pod-template-hash"] == hash.as_str());
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
            labels["pod-template-hash"] = json!(hash);
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
                let is_updated =
                    |pod: &&Value| pod["metadata"]["labels"]["pod-template-hash"] == hash.as_str();
                let updated_count = current.iter().filter(is_updated).count();
                let old_hash = current
                    .iter()
                    .find(|pod| !is_updated(pod))
                    .and_then(|pod| pod["metadata"]["labels"]["pod-template-hash"].as_str())
                    .unwrap_or(&hash)
                    .to_string();
                let current_count = if old_hash == hash {
                    updated_count
                } else {
                    current.len() - updated_count
                };
                json!({
                    "observedGeneration": generation, "replicas": current.len(),
                    "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": current_count,
                    "updatedReplicas": updated_count, "currentRevision": format!("{name}-{old_hash}"),
                    "updateRevision": format!("{name}-{hash}"), "collisionCount": 0
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

/// A StatefulSet pod's ordinal (`web-2` -> 2).
fn ordinal(pod_name: &str) -> u64 {
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
        .filter(|pod| pod["metadata"]["labels"]["pod-template-hash"] != hash)
        .map(name_of)
        .filter(|name| ordinal(name) >= partition && ordinal(name) < desired)
        .max_by_key(|name| ordinal(name))
        .into_iter()
        .collect()
}

/// A StatefulSet pod's claims from `volumeClaimTemplates`: `<template>-<pod>` is created when
/// missing (and kept when the pod goes, as the default retention policy does) and mounted as
/// the template's volume.
fn claim_templates(cluster: &mut Cluster, set: &Value, pod_name: &str, pod: &mut Value) -> usize {
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
fn replica_failure(
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
fn deployments(cluster: &mut Cluster) -> usize {
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

fn suffix() -> String {
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| alphabet[fastrand::usize(..alphabet.len())] as char)
        .collect()
}

/// Records a Warning or Normal event about `object` once: an event with the same reason and
/// message for the same object is not repeated (a real cluster counts repeats instead).
fn ensure_event(
    cluster: &mut Cluster,
    object: &Value,
    event_type: &str,
    reason: &str,
    message: &str,
    component: &str,
) -> usize {
    let namespace = namespace_of(object);
    let uid = object["metadata"]["uid"].clone();
    let seen = cluster.all("events").iter().any(|event| {
        event["involvedObject"]["uid"] == uid
            && event["reason"] == reason
            && event["message"] == message
    });
    if seen {
        return 0;
    }
    let now = now_rfc3339();
    let event_name = format!("{}.{}", name_of(object), suffix());
    let event_namespace = if namespace.is_empty() {
        "default".to_string()
    } else {
        namespace.clone()
    };
    cluster.commit(
        "events",
        &event_namespace,
        &event_name,
        Some(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name, "namespace": event_namespace, "uid": suffix(), "creationTimestamp": now},
            "involvedObject": {"kind": object["kind"], "namespace": namespace, "name": object["metadata"]["name"],
                               "uid": uid, "apiVersion": object["apiVersion"]},
            "reason": reason, "message": message, "type": event_type, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": {"component": component}
        })),
    );
    1
}

/// What decides whether a pod's status changed: phase, conditions and container states,
/// without timestamps (so an unchanged verdict writes nothing).
fn status_signature(status: &Value) -> Value {
    let conditions: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!([c["type"], c["status"], c["reason"], c["message"]]))
        .collect();
    let containers: Vec<Value> = status["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!([
                c["name"],
                c["ready"],
                c["state"]["waiting"],
                c["state"]["running"].is_object(),
                c["restartCount"],
                c["lastState"]["terminated"]["message"]
            ])
        })
        .collect();
    json!([status["phase"], conditions, containers])
}

/// The longest time the simulated kubelet waits before a readiness probe's first success: a
/// probe's `initialDelaySeconds`, at most this (a rehearsal keeps the order a real cluster
/// imposes without waiting minutes for it).
const MAX_READINESS_DELAY_SECONDS: u64 = 5;

/// Seconds the kubelet waits before the pod can be Ready: the longest `initialDelaySeconds` of
/// its containers' readiness probes (capped, see above).
pub fn readiness_delay(pod: &Value) -> u64 {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|container| container["readinessProbe"]["initialDelaySeconds"].as_u64())
        .max()
        .unwrap_or(0)
        .min(MAX_READINESS_DELAY_SECONDS)
}

/// A started pod's status. It stays unready until its readiness probes' initial delay has
/// passed since it started, as on a real node: a webhook or Service backed by it has no ready
/// endpoint until then.
fn running_status(pod: &Value, index: usize, now: &str) -> Value {
    let previous = &pod["status"];
    let started = previous["startTime"]
        .as_str()
        .filter(|_| previous["phase"] == "Running")
        .unwrap_or(now)
        .to_string();
    let elapsed = match (
        humantime::parse_rfc3339(&started),
        humantime::parse_rfc3339(now),
    ) {
        (Ok(start), Ok(current)) => current
            .duration_since(start)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        _ => u64::MAX,
    };
    let ready = elapsed >= readiness_delay(pod);
    let status = if ready { "True" } else { "False" };
    let statuses =
        kubelet::started_containers(pod, ready, &json!({"running": {"startedAt": started}}));
    let ready_since = if ready { now } else { started.as_str() };
    json!({
        "phase": "Running", "qosClass": "BestEffort", "hostIP": "172.18.0.2",
        "podIP": format!("10.244.0.{}", index % 250 + 2), "startTime": started,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
            {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {"type": "ContainersReady", "status": status, "lastTransitionTime": ready_since},
            {"type": "Ready", "status": status, "lastTransitionTime": ready_since}
        ],
        "containerStatuses": statuses
    })
}

/// The status a failure behaviour annotation asks for (`image-pull-backoff`, `crash-loop`),
/// and its event.
fn behaviour_status(pod: &Value, mode: &str, now: &str) -> Option<(Value, &'static str, String)> {
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let image = containers
        .first()
        .and_then(|c| c["image"].as_str())
        .unwrap_or("")
        .to_string();
    let waiting = |reason: &str, message: String| {
        containers
            .iter()
            .map(|c| {
                json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": false, "started": false,
                       "restartCount": if reason == "CrashLoopBackOff" { 3 } else { 0 },
                       "state": {"waiting": {"reason": reason, "message": message}}})
            })
            .collect::<Vec<_>>()
    };
    let (statuses, phase, reason, message) = match mode {
        "image-pull-backoff" => (
            waiting(
                "ImagePullBackOff",
                format!(
                    "Back-off pulling image \"{image}\": ErrImagePull: failed to pull and unpack image \"{image}\": not found"
                ),
            ),
            "Pending",
            "Failed",
            format!("Failed to pull image \"{image}\": not found"),
        ),
        "crash-loop" => (
            waiting(
                "CrashLoopBackOff",
                "back-off 40s restarting failed container".to_string(),
            ),
            "Running",
            "BackOff",
            "Back-off restarting failed container".to_string(),
        ),
        _ => return None,
    };
    let status = json!({
        "phase": phase, "qosClass": "BestEffort", "hostIP": "172.18.0.2", "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": now},
            {"type": "Ready", "status": "False", "lastTransitionTime": now}
        ],
        "containerStatuses": statuses
    });
    Some((status, reason, message))
}

/// The scheduler's and kubelet's part: a pod runs once everything it needs exists (see
/// `kubelet`), and until then shows the real reason in its status and events. A running,
/// Ready pod stays so (a kubelet does not stop a container whose Secret went away).
fn pods(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for (index, pod) in cluster.all("pods").into_iter().enumerate() {
        let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
        // A container whose program runs its readiness probe can turn unready again (OpenBao
        // sealed), so its pod is looked at even when Ready.
        let probed = programs::probed(&pod, &cluster.probes);
        // A pod whose script really runs stays Running until the script ends.
        let scripted =
            programs::runs_scripts(&pod, &cluster.probes) && behaviour(&pod["metadata"]) != "fail";
        if pod["metadata"]["deletionTimestamp"].is_string()
            || matches!(phase, "Succeeded" | "Failed")
            || (pod_ready(&pod) && !probed && !scripted)
        {
            continue;
        }
        let now = now_rfc3339();
        if scripted && let Some(exits) = programs::script_exits(&pod, &cluster.probes) {
            let mut updated = pod.clone();
            updated["status"] = batch::exited_status(&pod, &exits, index, &now);
            writes += write(cluster, "pods", updated);
            continue;
        }
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        if let Some(message) = cluster.probes.start_errors.get(&uid).cloned() {
            writes += ensure_event(cluster, &pod, "Warning", "Failed", &message, "kubelet");
        }
        let crashed: Vec<String> = cluster
            .probes
            .crashes
            .get(&uid)
            .map(|crashes| crashes.keys().cloned().collect())
            .unwrap_or_default();
        for container in crashed {
            let message = format!(
                "Back-off restarting failed container {container} in pod {}_{}({uid})",
                name_of(&pod),
                namespace_of(&pod)
            );
            writes += ensure_event(cluster, &pod, "Warning", "BackOff", &message, "kubelet");
        }
        if probed && containers_running(&pod) {
            // Started: only the probes' verdicts change its status now.
            // The kubelet's part (its initial delay) first, then the probes' verdicts.
            let (status, failures) =
                programs::with_readiness(&pod, &running_status(&pod, index, &now), &cluster.probes);
            for output in failures {
                let message = format!("Readiness probe failed: {output}");
                writes += ensure_event(cluster, &pod, "Warning", "Unhealthy", &message, "kubelet");
            }
            if status_signature(&status) != status_signature(&pod["status"]) {
                let mut updated = pod.clone();
                updated["status"] = status;
                writes += write(cluster, "pods", updated);
            }
            continue;
        }
        let mode = behaviour(&pod["metadata"]).to_string();
        if let Some((status, reason, message)) = behaviour_status(&pod, &mode, &now) {
            if pod["status"]["containerStatuses"].is_array() {
                continue;
            }
            writes += ensure_event(cluster, &pod, "Warning", reason, &message, "kubelet");
            let mut updated = pod.clone();
            updated["status"] = status;
            writes += write(cluster, "pods", updated);
            continue;
        }
        let verdict = kubelet::verdict(&pod, &*cluster, &cluster.images);
        let status = kubelet::waiting_status(&pod, &verdict, &now).unwrap_or_else(|| {
            if scripted {
                running_status(&pod, index, &now)
            } else if batch::runs_to_completion(&pod) {
                batch::finished_status(&pod, mode == "fail", index, &now)
            } else if probed {
                programs::with_readiness(&pod, &running_status(&pod, index, &now), &cluster.probes)
                    .0
            } else {
                running_status(&pod, index, &now)
            }
        });
        // The event first: a new reason under the same waiting state (a Secret that now exists
        // but lacks a key) is a new event, as the kubelet reports each mount attempt's error.
        if let Some((reason, message, component)) = kubelet::event(&verdict) {
            writes += ensure_event(cluster, &pod, "Warning", reason, &message, component);
        }
        if status_signature(&status) == status_signature(&pod["status"]) {
            continue;
        }
        let mut updated = pod.clone();
        updated["status"] = status;
        writes += write(cluster, "pods", updated);
    }
    writes
}

/// Whether the pod of an external provisioner runs (`rancher.io/local-path`: the
/// local-path-provisioner pod is Ready). In-tree provisioners always run; an unknown external
/// one is not running (nothing in the cluster would provision).
fn provisioner_running(pods: &[Value], provisioner: &str) -> bool {
    match provisioner {
        "rancher.io/local-path" => pods.iter().any(|pod| {
            pod["metadata"]["labels"]["app"] == "local-path-provisioner" && pod_ready(pod)
        }),
        other => other.starts_with("kubernetes.io/"),
    }
}

/// The PersistentVolume controller: binds or provisions claims (see `storage`), records why a
/// claim stays Pending, marks bound volumes and claims, and releases retained volumes whose
/// claim is gone.
fn claims(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for volume in cluster.all("persistentvolumes") {
        let reference = &volume["spec"]["claimRef"];
        let claim_uid = cluster
            .lookup(
                "persistentvolumeclaims",
                reference["namespace"].as_str().unwrap_or(""),
                reference["name"].as_str().unwrap_or(""),
            )
            .and_then(|claim| claim["metadata"]["uid"].as_str().map(str::to_string));
        if let Some(phase) = storage::volume_phase(&volume, claim_uid.as_deref()) {
            let mut updated = volume.clone();
            updated["status"]["phase"] = json!(phase);
            writes += write(cluster, "persistentvolumes", updated);
        }
    }
    let pods = cluster.all("pods");
    for claim in cluster.all("persistentvolumeclaims") {
        if claim["status"]["phase"] == "Bound" || claim["metadata"]["deletionTimestamp"].is_string()
        {
            continue;
        }
        let namespace = namespace_of(&claim);
        let name = name_of(&claim);
        let volumes = cluster.all("persistentvolumes");
        let classes = cluster.all("storageclasses.storage.k8s.io");
        let has_consumer = pods.iter().any(|pod| {
            namespace_of(pod) == namespace
                && pod["spec"]["volumes"].as_array().is_some_and(|volumes| {
                    volumes
                        .iter()
                        .any(|v| v["persistentVolumeClaim"]["claimName"] == name.as_str())
                })
        });
        let running = |provisioner: &str| provisioner_running(&pods, provisioner);
        let decision = storage::decide(
            &claim,
            &StorageView {
                volumes: &volumes,
                classes: &classes,
                has_consumer,
                provisioner_running: &running,
            },
        );
        let volume_name = match decision {
            Decision::Pending {
                event: (event_type, reason, message),
            } => {
                writes += ensure_event(
                    cluster,
                    &claim,
                    event_type,
                    reason,
                    &message,
                    "persistentvolume-controller",
                );
                if claim["status"]["phase"] != "Pending" {
                    let mut updated = claim.clone();
                    updated["status"]["phase"] = json!("Pending");
                    writes += write(cluster, "persistentvolumeclaims", updated);
                }
                continue;
            }
            Decision::AssignDefaultClass { class } => {
                let mut updated = claim.clone();
                updated["spec"]["storageClassName"] = json!(class);
                writes += write(cluster, "persistentvolumeclaims", updated);
                continue;
            }
            Decision::Bind { volume } => volume,
            Decision::Provision { mut volume } => {
                let volume_name = name_of(&volume);
                volume["metadata"]["uid"] = json!(format!("{volume_name}-{}", suffix()));
                volume["metadata"]["creationTimestamp"] = json!(now_rfc3339());
                let provisioner =
                    volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                cluster.commit("persistentvolumes", "", &volume_name, Some(volume));
                writes += 1 + ensure_event(
                    cluster,
                    &claim,
                    "Normal",
                    "ProvisioningSucceeded",
                    &format!("Successfully provisioned volume {volume_name}"),
                    &provisioner,
                );
                volume_name
            }
        };
        let Some(mut volume) = cluster
            .lookup("persistentvolumes", "", &volume_name)
            .cloned()
        else {
            continue;
        };
        volume["spec"]["claimRef"] = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "namespace": namespace, "name": name, "uid": claim["metadata"]["uid"]});
        volume["status"]["phase"] = json!("Bound");
        writes += write(cluster, "persistentvolumes", volume.clone());
        let mut bound = claim.clone();
        bound["spec"]["volumeName"] = json!(volume_name);
        bound["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = json!("yes");
        bound["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        bound["status"] = json!({"phase": "Bound", "accessModes": volume["spec"]["accessModes"],
                                 "capacity": volume["spec"]["capacity"]});
        writes += write(cluster, "persistentvolumeclaims", bound);
    }
    writes
}

/// The Job controller (see `batch`): a pod at a time until `completions` succeed or more than
/// `backoffLimit` fail; the pods go through the kubelet like any other.
fn jobs(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for job in cluster.all("jobs.batch") {
        if job["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let namespace = namespace_of(&job);
        let name = name_of(&job);
        let uid = job["metadata"]["uid"].clone();
        let pods: Vec<Value> = owned_by(cluster, "pods", &namespace, &uid);
        let finished = job["status"]["conditions"].as_array().is_some_and(|list| {
            list.iter().any(|c| {
                (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
            })
        });
        if finished {
            continue;
        }
        let now = now_rfc3339();
        let (mut status, step) = batch::job(&job, &pods, &now);
        if step == batch::JobStep::StartPod {
            let template = &job["spec"]["template"];
            let pod_name = format!("{name}-{}", suffix());
            let mut labels = template["metadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            for key in ["batch.kubernetes.io/job-name", "job-name"] {
                labels[key] = json!(name);
            }
            for key in ["batch.kubernetes.io/controller-uid", "controller-uid"] {
                labels[key] = uid.clone();
            }
            let mut pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": pod_name, "namespace": namespace, "labels": labels,
                    "uid": new_uid(), "creationTimestamp": now,
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]
                },
                "spec": template["spec"].clone(),
                "status": {"phase": "Pending", "qosClass": "BestEffort"}
            });
            if template["metadata"]["annotations"].is_object() {
                pod["metadata"]["annotations"] = template["metadata"]["annotations"].clone();
            }
            pod["spec"]["nodeName"] = json!("sim-control-plane");
            let account = service_accounts::account_of(&pod["spec"]).to_string();
            let account_object = cluster
                .lookup("serviceaccounts", &namespace, &account)
                .cloned();
            if let Err(refusal) = service_accounts::admit(
                &mut pod,
                &format!("{name}-"),
                &namespace,
                account_object.as_ref(),
                &random_suffix(),
            ) {
                writes += ensure_event(
                    cluster,
                    &job,
                    "Warning",
                    "FailedCreate",
                    &format!("Error creating: {refusal}"),
                    "job-controller",
                );
            } else {
                cluster.commit("pods", &namespace, &pod_name, Some(pod));
                writes += 1;
                status["active"] = json!(status["active"].as_u64().unwrap_or(0) + 1);
            }
        }
        if job["status"] != status {
            let mut updated = job.clone();
            updated["status"] = status;
            writes += write(cluster, "jobs.batch", updated);
        }
    }
    writes
}

fn endpoints(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    let pods = cluster.all("pods");
    for service in cluster.all("services") {
        let Some(selector) = service["spec"]["selector"].as_object() else {
            continue;
        };
        if selector.is_empty() {
            continue;
        }
        let selector = LabelSelector::from_map(&service["spec"]["selector"]);
        let namespace = namespace_of(&service);
        let name = name_of(&service);
        let addresses: Vec<Value> = pods
            .iter()
            .filter(|pod| namespace_of(pod) == namespace && selector.matches(&pod["metadata"]["labels"]) && pod_ready(pod))
            .map(|pod| json!({"ip": pod["status"]["podIP"], "nodeName": "sim-control-plane",
                              "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}))
            .collect();
        let ports: Vec<Value> = service["spec"]["ports"]
            .as_array()
            .map(|ports| {
                ports
                    .iter()
                    .map(|p| {
                        let mut port = json!({"port": p["targetPort"], "protocol": p["protocol"]});
                        if let Some(name) = p["name"].as_str() {
                            port["name"] = json!(name);
                        }
                        port
                    })
                    .collect()
            })
            .unwrap_or_default();
        let subsets = if addresses.is_empty() {
            json!([])
        } else {
            json!([{"addresses": addresses, "ports": ports}])
        };
        let existing = cluster.lookup("endpoints", &namespace, &name).cloned();
        if existing.as_ref().map(|e| &e["subsets"]) == Some(&subsets) {
            continue;
        }
        let object = match existing {
            Some(mut endpoints) => {
                endpoints["subsets"] = subsets;
                endpoints
            }
            None => json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": name, "namespace": namespace, "uid": suffix(), "creationTimestamp": now_rfc3339(),
                             "labels": service["metadata"]["labels"].clone()},
                "subsets": subsets
            }),
        };
        writes += write(cluster, "endpoints", object);
    }
    writes
}

/// The CloudNativePG operator's part (see `cnpg`), while its Deployment is Available: what a
/// Cluster needs is created once (through the API server's write path, as the operator's
/// requests go), and its status follows its instance pods.
fn cnpg_clusters(cluster: &mut Cluster) -> usize {
    if cluster
        .resource_for_kind("postgresql.cnpg.io/v1", "Cluster")
        .is_none()
        || !cluster
            .all("deployments.apps")
            .iter()
            .any(cnpg::operator_available)
    {
        return 0;
    }
    let mut writes = 0;
    let options = WriteOptions {
        manager: "cloudnative-pg".into(),
        ..Default::default()
    };
    for object in cluster.all(cnpg::STORE_KEY) {
        if object["metadata"]["deletionTimestamp"].is_string()
            || behaviour(&object["metadata"]) == "ready"
        {
            continue;
        }
        let namespace = namespace_of(&object);
        let password: String = (0..32)
            .map(|_| {
                let alphabet = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
                alphabet[fastrand::usize(..alphabet.len())] as char
            })
            .collect();
        for (store_key, wanted) in cnpg::desired(&object, &password) {
            if cluster
                .lookup(store_key, &namespace, &name_of(&wanted))
                .is_some()
            {
                continue;
            }
            let (api_version, kind) = (
                wanted["apiVersion"].as_str().unwrap_or("v1").to_string(),
                wanted["kind"].as_str().unwrap_or("").to_string(),
            );
            if let Some(rt) = cluster.resource_for_kind(&api_version, &kind)
                && cluster.create(&rt, &namespace, wanted, &options).is_ok()
            {
                writes += 1;
            }
        }
        let pods: Vec<Value> = cluster
            .all("pods")
            .into_iter()
            .filter(|pod| namespace_of(pod) == namespace)
            .collect();
        let mut status = cnpg::status(&object, &pods);
        let generation = object["metadata"]["generation"].clone();
        status["observedGeneration"] = generation;
        if object["status"] != status {
            let mut updated = object.clone();
            updated["status"] = status;
            writes += write(cluster, cnpg::STORE_KEY, updated);
        }
    }
    writes
}

/// Custom resources whose operator the simulator does not play stay without a Ready condition,
/// as on a real cluster without the operator; `sim.bprun.dev/behaviour: ready` marks one ready
/// (for tests that need a ready resource without its operator).
fn custom_resources(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    let custom: Vec<(String, String)> = cluster
        .resources
        .iter()
        .filter(|r| r.custom && r.subresources.iter().any(|s| s == "status"))
        .map(|r| (r.store_key(), r.kind.clone()))
        .collect();
    for (store_key, _kind) in custom {
        for object in cluster.all(&store_key) {
            if behaviour(&object["metadata"]) != "ready" {
                continue;
            }
            let generation = object["metadata"]["generation"].clone();
            let ready = object["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "True"
                        && c["observedGeneration"] == generation
                })
            });
            if ready {
                continue;
            }
            let mut updated = object.clone();
            updated["status"]["observedGeneration"] = generation.clone();
            updated["status"]["conditions"] = json!([{
                "type": "Ready", "status": "True", "reason": "SimulatedReady",
                "message": "marked ready by the sim.bprun.dev/behaviour annotation",
                "observedGeneration": generation, "lastTransitionTime": now_rfc3339()
            }]);
            writes += write(cluster, &store_key, updated);
        }
    }
    writes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stateful_set_replaces_one_pod_at_a_time_from_the_highest_ordinal() {
        let mut documents =
            super::super::test_fixtures::documents("rollout", "stateful-set-pods.yaml");
        let set = documents.remove(0);
        // db-2 runs the new template but is not Ready: nothing else goes.
        assert!(stateful_set_update(&set, &documents, "new", 3).is_empty());
        // Once it is Ready, db-1 goes next (then db-0).
        documents[2]["status"]["conditions"][0]["status"] = json!("True");
        assert_eq!(
            stateful_set_update(&set, &documents, "new", 3),
            vec!["db-1"]
        );
        // A partition keeps the ordinals below it.
        let mut partitioned = set.clone();
        partitioned["spec"]["updateStrategy"]["rollingUpdate"] = json!({"partition": 2});
        assert!(stateful_set_update(&partitioned, &documents, "new", 3).is_empty());
        // OnDelete leaves every pod to its user.
        let mut on_delete = set.clone();
        on_delete["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        assert!(stateful_set_update(&on_delete, &documents, "new", 3).is_empty());
        // A pod missing (being recreated): wait for it.
        assert!(stateful_set_update(&set, &documents[..2], "new", 3).is_empty());
    }

    #[test]
    fn a_pod_is_ready_only_after_its_readiness_probes_initial_delay() {
        let pod = json!({"metadata": {"name": "operator"},
                         "spec": {"containers": [
                             {"name": "manager", "image": "x", "readinessProbe": {"initialDelaySeconds": 3}},
                             {"name": "sidecar", "image": "y"}]}});
        assert_eq!(readiness_delay(&pod), 3);
        let first = running_status(&pod, 0, "2026-11-30T10:00:00Z");
        assert_eq!(first["conditions"][3]["status"], "False");
        assert_eq!(first["containerStatuses"][0]["ready"], false);
        let mut started = pod.clone();
        started["status"] = first;
        let early = running_status(&started, 0, "2026-11-30T10:00:02Z");
        assert_eq!(early["conditions"][3]["status"], "False");
        assert_eq!(early["startTime"], "2026-11-30T10:00:00Z");
        let later = running_status(&started, 0, "2026-11-30T10:00:03Z");
        assert_eq!(later["conditions"][3]["status"], "True");
        assert_eq!(later["containerStatuses"][0]["ready"], true);
        // Long delays are capped so a rehearsal does not wait minutes.
        let slow = json!({"spec": {"containers": [{"name": "redis", "readinessProbe": {"initialDelaySeconds": 20}}]}});
        assert_eq!(readiness_delay(&slow), MAX_READINESS_DELAY_SECONDS);
        let none = json!({"spec": {"containers": [{"name": "web"}]}});
        assert_eq!(
            running_status(&none, 0, "2026-11-30T10:00:00Z")["conditions"][3]["status"],
            "True"
        );
    }

    #[test]
    fn a_namespace_terminates_in_steps() {
        let namespace: Value = serde_norway::from_str(
            "metadata: {name: demo}\nspec: {finalizers: [kubernetes]}\nstatus: {phase: Terminating}\n",
        )
        .unwrap();
        let NamespaceStep::Update(first) = terminating_step(&namespace, false, "t") else {
            panic!("conditions first");
        };
        assert_eq!(
            first["status"]["conditions"][3]["reason"],
            "SomeResourcesRemain"
        );
        assert_eq!(terminating_step(&first, false, "t"), NamespaceStep::Wait);
        let NamespaceStep::Update(emptied) = terminating_step(&first, true, "t") else {
            panic!("content removed");
        };
        assert_eq!(
            emptied["status"]["conditions"][3]["reason"],
            "ContentRemoved"
        );
        let NamespaceStep::Update(finalized) = terminating_step(&emptied, true, "t") else {
            panic!("finalizer removed");
        };
        assert_eq!(finalized["spec"]["finalizers"], json!([]));
        assert_eq!(
            terminating_step(&finalized, true, "t"),
            NamespaceStep::Remove
        );
    }
}
