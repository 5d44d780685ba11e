//! Plays the controllers' and kubelet's part so that waits end as on a real cluster:
//! workloads get pods and ready replicas, pods become Running and Ready, Jobs complete,
//! Services get Endpoints, namespaces being deleted are emptied and removed, CRDs become
//! Established, and custom resources with a status subresource get a Ready condition.
//!
//! The pod template annotation `sim.bprun.dev/behaviour` makes failures reproducible:
//! `image-pull-backoff` (containers wait in ErrImagePull / ImagePullBackOff), `crash-loop`
//! (CrashLoopBackOff), `fail` (a Job fails), `not-ready` (a custom resource stays unready).

use super::cluster::{Cluster, now_rfc3339};
use super::selectors::LabelSelector;
use serde_json::{Value, json};

pub const BEHAVIOUR: &str = "sim.bprun.dev/behaviour";

/// One reconcile pass over everything; returns how many objects it wrote.
pub fn reconcile(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    writes += namespaces(cluster);
    writes += crds(cluster);
    writes += deployments(cluster);
    for (store_key, kind) in [
        ("statefulsets.apps", "StatefulSet"),
        ("daemonsets.apps", "DaemonSet"),
        ("replicasets.apps", "ReplicaSet"),
    ] {
        writes += workloads(cluster, store_key, kind);
    }
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

fn write(cluster: &mut Cluster, store_key: &str, object: Value) -> usize {
    let namespace = namespace_of(&object);
    let name = name_of(&object);
    if cluster.lookup(store_key, &namespace, &name) == Some(&object) {
        return 0;
    }
    cluster.commit(store_key, &namespace, &name, Some(object));
    1
}

fn namespaces(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for namespace in cluster.all("namespaces") {
        if namespace["status"]["phase"] == "Terminating" {
            let name = name_of(&namespace);
            cluster.empty_namespace(&name);
            cluster.commit("namespaces", "", &name, None);
            writes += 1;
        }
    }
    writes
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

/// A short, stable hash of a pod template (pod-template-hash).
fn template_hash(template: &Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(template.to_string().as_bytes());
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    digest
        .iter()
        .take(10)
        .map(|b| alphabet[*b as usize % alphabet.len()] as char)
        .collect()
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
        let owned: Vec<Value> = cluster
            .all("pods")
            .into_iter()
            .filter(|pod| {
                namespace_of(pod) == namespace
                    && pod["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|owners| owners.iter().any(|o| o["uid"] == uid))
            })
            .collect();
        // Rollout: pods of an older template go, new ones come.
        let (current, stale): (Vec<Value>, Vec<Value>) = owned
            .into_iter()
            .partition(|pod| pod["metadata"]["labels"]["pod-template-hash"] == hash.as_str());
        for pod in &stale {
            cluster.remove_with_dependents("pods", &namespace, &name_of(pod));
            writes += 1;
        }
        let mut current = current;
        while (current.len() as u64) > desired {
            if let Some(pod) = current.pop() {
                cluster.remove_with_dependents("pods", &namespace, &name_of(&pod));
                writes += 1;
            }
        }
        let mut index = 0u64;
        while (current.len() as u64) < desired {
            let pod_name = match kind {
                "StatefulSet" => format!("{name}-{index}"),
                _ => format!("{name}-{}", suffix()),
            };
            index += 1;
            if cluster.lookup("pods", &namespace, &pod_name).is_some() {
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
            cluster.commit("pods", &namespace, &pod_name, Some(pod.clone()));
            current.push(pod);
            writes += 1;
        }
        let ready = current.iter().filter(|pod| pod_ready(pod)).count() as u64;
        let generation = workload["metadata"]["generation"].clone();
        let status = match kind {
            "StatefulSet" => json!({
                "observedGeneration": generation, "replicas": current.len(),
                "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": current.len(),
                "updatedReplicas": current.len(), "currentRevision": format!("{name}-{hash}"),
                "updateRevision": format!("{name}-{hash}"), "collisionCount": 0
            }),
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
        // Readiness needs a fresh look at the pods: re-read so unchanged status writes nothing.
        if workload["status"] != status {
            let mut updated = workload.clone();
            updated["status"] = status;
            writes += write(cluster, store_key, updated);
        }
    }
    writes
}

/// Deployments run through ReplicaSets, as on a real cluster (helm 3's readiness check and
/// `kubectl rollout` look for the newest one): one ReplicaSet per pod template, named
/// `<deployment>-<pod-template-hash>`; older ones go, with their pods, once the new one exists.
fn deployments(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for deployment in cluster.all("deployments.apps") {
        let namespace = namespace_of(&deployment);
        let name = name_of(&deployment);
        let uid = deployment["metadata"]["uid"].clone();
        let template = deployment["spec"]["template"].clone();
        let hash = template_hash(&template);
        let desired = deployment["spec"]["replicas"].as_u64().unwrap_or(1);
        let owned: Vec<Value> = cluster
            .all("replicasets.apps")
            .into_iter()
            .filter(|rs| {
                namespace_of(rs) == namespace
                    && rs["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|owners| owners.iter().any(|o| o["uid"] == uid))
            })
            .collect();
        let current_name = format!("{name}-{hash}");
        for stale in owned.iter().filter(|rs| name_of(rs) != current_name) {
            cluster.remove_with_dependents("replicasets.apps", &namespace, &name_of(stale));
            writes += 1;
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
        let revision = deployment["metadata"]["generation"].clone();
        let current = owned.iter().find(|rs| name_of(rs) == current_name).cloned();
        let wanted_spec =
            json!({"replicas": desired, "selector": selector, "template": rs_template});
        match current {
            Some(rs) if rs["spec"] == wanted_spec => {}
            Some(mut rs) => {
                rs["spec"] = wanted_spec;
                writes += write(cluster, "replicasets.apps", rs);
            }
            None => {
                let mut labels = template["metadata"]["labels"].clone();
                if !labels.is_object() {
                    labels = json!({});
                }
                labels["pod-template-hash"] = json!(hash);
                let rs = json!({
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {
                        "name": current_name, "namespace": namespace, "labels": labels,
                        "annotations": {"deployment.kubernetes.io/revision": revision.to_string(),
                                        "deployment.kubernetes.io/desired-replicas": desired.to_string()},
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
        let replicas = rs_status["replicas"].as_u64().unwrap_or(0);
        let ready = rs_status["readyReplicas"].as_u64().unwrap_or(0);
        let available = ready >= desired;
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
        let status = json!({
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas, "updatedReplicas": replicas,
            "readyReplicas": ready, "availableReplicas": ready,
            "unavailableReplicas": desired.saturating_sub(ready),
            "conditions": [
                condition("Available", available, if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                          if available { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." }),
                condition("Progressing", true, if available { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
                          &format!("ReplicaSet \"{current_name}\" {}", if available { "has successfully progressed." } else { "is progressing." }))
            ]
        });
        if deployment["status"] != status {
            let mut updated = deployment.clone();
            updated["status"] = status;
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

fn pods(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for (index, pod) in cluster.all("pods").into_iter().enumerate() {
        if pod["status"]["phase"] != "Pending" {
            continue;
        }
        let now = now_rfc3339();
        let mode = behaviour(&pod["metadata"]).to_string();
        let containers = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
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
        let image = containers
            .first()
            .and_then(|c| c["image"].as_str())
            .unwrap_or("")
            .to_string();
        let (ready, statuses, phase) = match mode.as_str() {
            "image-pull-backoff" => {
                if pod["status"]["containerStatuses"].is_array() {
                    continue;
                }
                (
                    false,
                    waiting(
                        "ImagePullBackOff",
                        format!("Back-off pulling image \"{image}\": ErrImagePull: failed to pull and unpack image \"{image}\": not found"),
                    ),
                    "Pending",
                )
            }
            "crash-loop" => {
                if pod["status"]["containerStatuses"].is_array() {
                    continue;
                }
                (
                    false,
                    waiting(
                        "CrashLoopBackOff",
                        "back-off 40s restarting failed container".to_string(),
                    ),
                    "Running",
                )
            }
            _ => (
                true,
                containers
                    .iter()
                    .map(|c| {
                        json!({"name": c["name"], "image": c["image"], "imageID": format!("sim://{}", c["image"].as_str().unwrap_or("")),
                               "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": now}}})
                    })
                    .collect(),
                "Running",
            ),
        };
        let flag = if ready { "True" } else { "False" };
        let mut updated = pod.clone();
        updated["status"] = json!({
            "phase": phase, "qosClass": "BestEffort", "hostIP": "172.18.0.2",
            "podIP": format!("10.244.0.{}", index % 250 + 2), "startTime": now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                {"type": "Ready", "status": flag, "lastTransitionTime": now}
            ],
            "containerStatuses": statuses
        });
        if !ready {
            let namespace = namespace_of(&pod);
            let name = name_of(&pod);
            let reason = if mode == "crash-loop" {
                "BackOff"
            } else {
                "Failed"
            };
            let message = if mode == "crash-loop" {
                "Back-off restarting failed container".to_string()
            } else {
                format!("Failed to pull image \"{image}\": not found")
            };
            let event_name = format!("{name}.{}", suffix());
            cluster.commit(
                "events",
                &namespace,
                &event_name,
                Some(json!({
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": event_name, "namespace": namespace, "uid": suffix(), "creationTimestamp": now},
                    "involvedObject": {"kind": "Pod", "namespace": namespace, "name": name, "uid": pod["metadata"]["uid"]},
                    "reason": reason, "message": message, "type": "Warning", "count": 1,
                    "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "kubelet"}
                })),
            );
        }
        writes += write(cluster, "pods", updated);
    }
    writes
}

fn jobs(cluster: &mut Cluster) -> usize {
    let mut writes = 0;
    for job in cluster.all("jobs.batch") {
        if job["status"]["conditions"].is_array() {
            continue;
        }
        let now = now_rfc3339();
        let failed = behaviour(&job["spec"]["template"]["metadata"]) == "fail";
        let mut updated = job.clone();
        updated["status"] = if failed {
            json!({"startTime": now, "failed": 1, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now}]})
        } else {
            json!({"startTime": now, "completionTime": now, "succeeded": 1, "ready": 0, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]})
        };
        writes += write(cluster, "jobs.batch", updated);
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
            if behaviour(&object["metadata"]) == "not-ready" {
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
                "message": "the simulator's controller rule marks custom resources ready",
                "observedGeneration": generation, "lastTransitionTime": now_rfc3339()
            }]);
            writes += write(cluster, &store_key, updated);
        }
    }
    writes
}
