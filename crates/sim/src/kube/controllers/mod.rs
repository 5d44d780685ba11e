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

mod pods;
mod workloads;

use super::cluster::{Cluster, WriteOptions, is_owned_by};
use super::cnpg;
use super::runtime::now_rfc3339;
use super::selectors::LabelSelector;
use super::storage::{self, Decision, StorageView};
pub use pods::readiness_delay;
use pods::{jobs, pod_ready, pods};
use serde_json::{Value, json};
pub use workloads::stateful_set_update;
use workloads::{deployments, workloads};

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
    use super::pods::{MAX_READINESS_DELAY_SECONDS, running_status};
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
