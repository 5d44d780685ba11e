//! The kubelet's part for pods: containers start and become Ready (after their readiness
//! probe's delay), fail as their behaviour annotation says; Jobs' pods run to completion.

use super::{
    behaviour, ensure_event, name_of, namespace_of, owned_by, status_signature, suffix, write,
};
use crate::kube::cluster::{Cluster, new_uid, random_suffix};
use crate::kube::runtime::now_rfc3339;
use crate::kube::{batch, kubelet, programs, service_accounts};
use serde_json::{Value, json};

/// Whether every container of the pod has started (its status says running).
pub(super) fn containers_running(pod: &Value) -> bool {
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

pub(super) fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The longest time the simulated kubelet waits before a readiness probe's first success: a
/// probe's `initialDelaySeconds`, at most this (a rehearsal keeps the order a real cluster
/// imposes without waiting minutes for it).
pub(super) const MAX_READINESS_DELAY_SECONDS: u64 = 5;

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
pub(super) fn running_status(pod: &Value, index: usize, now: &str) -> Value {
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
pub(super) fn behaviour_status(
    pod: &Value,
    mode: &str,
    now: &str,
) -> Option<(Value, &'static str, String)> {
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
pub(super) fn pods(cluster: &mut Cluster) -> usize {
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

/// The Job controller (see `batch`): a pod at a time until `completions` succeed or more than
/// `backoffLimit` fail; the pods go through the kubelet like any other.
pub(super) fn jobs(cluster: &mut Cluster) -> usize {
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
