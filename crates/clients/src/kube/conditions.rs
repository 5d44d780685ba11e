//! Readiness conditions for waits, as pure functions over Kubernetes objects.
//!
//! Every function here takes an object as the API server returns it (`serde_json::Value`, with
//! `kind`, `metadata`, `spec` and `status`) and decides whether it is ready, still on its way, or
//! stuck for good. Nothing here talks to a cluster: the caller fetches or watches the object and
//! calls these on every version it sees. A deleted object is the caller's business (absence).
//!
//! The model is kube-rs's `kube-runtime/src/wait.rs` conditions, extended with the checks
//! `kubectl rollout status` makes and with early failure on states that waiting cannot fix.

use serde_json::Value;
use std::fmt::Write as _;

/// What a condition says about an object right now.
#[derive(Debug, Clone, PartialEq)]
pub enum Readiness {
    /// The condition holds.
    Ready,
    /// Not yet; the text says why in operator words, e.g. "2/3 replicas available" or
    /// "condition Ready is False (reason: Pending)".
    Waiting(String),
    /// A terminal state: waiting longer cannot help (ImagePullBackOff, ErrImagePull,
    /// CrashLoopBackOff, InvalidImageName, a failed Job (condition
    /// Failed True), a Deployment whose Progressing condition has reason ProgressDeadlineExceeded,
    /// a Pod in phase Failed).
    Failed(String),
}

/// The built-in condition names a wait accepts, in their canonical spelling (matching is
/// case-insensitive; see [`builtin`]).
pub const BUILTIN_NAMES: &[&str] = &[
    "Ready",
    "Available",
    "Established",
    "Complete",
    "Rollout",
    "Running",
];

/// Container waiting reasons that [`terminal_failure`] treats as final. Not
/// `CreateContainerConfigError` (a Secret or ConfigMap the container reads is missing): the
/// kubelet retries it, and it clears by itself when the object appears, as when an operator
/// creates the Secret moments after the pod; a wait reports it as the reason it is waiting.
pub const TERMINAL_WAITING_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CrashLoopBackOff",
];

/// The kinds [`rollout`] understands.
const ROLLOUT_KINDS: &str = "Deployment, StatefulSet, DaemonSet and ReplicaSet";

/// Longest condition or container message quoted, in characters; longer ones are cut with "…".
const MAX_MESSAGE_CHARS: usize = 240;

/// Built-in condition names a wait accepts (case-insensitive): "Ready", "Available",
/// "Established", "Complete", "Rollout" (rollout complete), "Running". Returns None for unknown
/// names (the caller then lists these).
pub fn builtin(name: &str) -> Option<fn(&Value) -> Readiness> {
    let check: fn(&Value) -> Readiness = match name.to_ascii_lowercase().as_str() {
        "ready" => ready,
        "available" => available,
        "established" => established,
        "complete" => complete,
        "rollout" => rollout,
        "running" => running,
        _ => return None,
    };
    Some(check)
}

/// The "Ready" condition: a Pod's condition Ready is True (and it is not in a terminal state);
/// Deployments, StatefulSets, DaemonSets and ReplicaSets as [`rollout`]; Jobs as [`complete`];
/// anything else (custom resources, Nodes) as `condition_is(object, "Ready", "True")`.
pub fn ready(object: &Value) -> Readiness {
    match kind(object) {
        "Pod" => pod_ready(object),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => rollout(object),
        "Job" => complete(object),
        _ => condition_is(object, "Ready", "True"),
    }
}

/// The "Available" condition: condition Available is True. For a Deployment,
/// status.observedGeneration must also have caught up with metadata.generation, so an
/// availability left over from before the last spec change does not count.
pub fn available(object: &Value) -> Readiness {
    if kind(object) != "Deployment" {
        return condition_is(object, "Available", "True");
    }
    if let Some(why) = generation_pending(object) {
        return Readiness::Waiting(why);
    }
    match check_condition(object, "Available", "True") {
        Ok(()) => Readiness::Ready,
        Err(why) => match terminal_failure(object) {
            Some(failure) => Readiness::Failed(failure),
            None => Readiness::Waiting(format!(
                "{why}; {}/{} replicas available",
                int(object, "/status/availableReplicas"),
                spec_replicas(object)
            )),
        },
    }
}

/// The "Established" condition: a CustomResourceDefinition's condition Established is True.
/// While waiting, a NamesAccepted condition that is False (a name conflict) is mentioned, since
/// the CRD cannot be established until it is resolved.
pub fn established(object: &Value) -> Readiness {
    match condition_is(object, "Established", "True") {
        Readiness::Waiting(why) => match find_condition(object, "NamesAccepted") {
            Some(names) if status_of(names).eq_ignore_ascii_case("False") => {
                Readiness::Waiting(format!(
                    "{why}; condition NamesAccepted is False{}",
                    reason_suffix(names)
                ))
            }
            _ => Readiness::Waiting(why),
        },
        other => other,
    }
}

/// The "Complete" condition: condition Complete (or SuccessCriteriaMet) is True. A Failed (or
/// FailureTarget) condition that is True makes it [`Readiness::Failed`]. While a Job waits, the
/// text gives its active, succeeded and failed pod counts.
pub fn complete(object: &Value) -> Readiness {
    if let Some(failure) = job_failure(object) {
        return Readiness::Failed(failure);
    }
    let done = ["Complete", "SuccessCriteriaMet"]
        .iter()
        .find_map(|ty| check_condition(object, ty, "True").ok());
    if done.is_some() {
        return Readiness::Ready;
    }
    if let Some(failure) = terminal_failure(object) {
        return Readiness::Failed(failure);
    }
    if kind(object) == "Job" {
        return Readiness::Waiting(job_progress(object));
    }
    match check_condition(object, "Complete", "True") {
        Ok(()) => Readiness::Ready,
        Err(why) => Readiness::Waiting(why),
    }
}

/// The "Rollout" condition, decided as `kubectl rollout status` does:
///
/// - Deployment: status.observedGeneration >= metadata.generation; updatedReplicas reached
///   spec.replicas; no old replicas left (status.replicas == updatedReplicas); availableReplicas
///   reached updatedReplicas. Progressing with reason ProgressDeadlineExceeded is a failure.
/// - StatefulSet: observedGeneration caught up; readyReplicas reached spec.replicas; with a
///   RollingUpdate strategy and a partition > 0, updatedReplicas reached replicas - partition,
///   otherwise updateRevision == currentRevision. With OnDelete, readiness is the whole check.
/// - DaemonSet: observedGeneration caught up; updatedNumberScheduled (skipped for OnDelete) and
///   numberAvailable reached desiredNumberScheduled.
/// - ReplicaSet: observedGeneration caught up; availableReplicas reached spec.replicas and no
///   surplus replicas remain.
///
/// spec.replicas defaults to 1 when absent. Any other kind is [`Readiness::Failed`], since the
/// condition can never hold for it.
pub fn rollout(object: &Value) -> Readiness {
    match kind(object) {
        "Deployment" => deployment_rollout(object),
        "StatefulSet" => statefulset_rollout(object),
        "DaemonSet" => daemonset_rollout(object),
        "ReplicaSet" => replicaset_rollout(object),
        other => Readiness::Failed(format!(
            "condition Rollout applies to {ROLLOUT_KINDS}, not to {}",
            kind_words(other)
        )),
    }
}

/// The "Running" condition: a Pod in phase Running with no container in a terminal waiting state
/// (a crash-looping pod keeps phase Running but is [`Readiness::Failed`]). Phase Failed is a
/// failure, and so is phase Succeeded: the pod has exited and will not run again. Any other kind
/// is [`Readiness::Failed`].
pub fn running(object: &Value) -> Readiness {
    if kind(object) != "Pod" {
        return Readiness::Failed(format!(
            "condition Running applies to Pods, not to {}",
            kind_words(kind(object))
        ));
    }
    if let Some(failure) = terminal_failure(object) {
        return Readiness::Failed(failure);
    }
    match str_at(object, "/status/phase") {
        Some("Running") => Readiness::Ready,
        Some("Succeeded") => Readiness::Failed(
            "pod has already completed (phase Succeeded) and will not run again".to_string(),
        ),
        _ => Readiness::Waiting(pod_waiting(object, None)),
    }
}

/// A custom condition: status.conditions[type == condition_type].status == status (e.g.
/// ("Ready","True")); observedGeneration on the condition or status, when present, must be >=
/// metadata.generation.
///
/// Type and status compare case-insensitively, as `kubectl wait --for=condition=` does. While the
/// condition does not hold, a [`terminal_failure`] of the object makes it [`Readiness::Failed`].
pub fn condition_is(object: &Value, condition_type: &str, status: &str) -> Readiness {
    match check_condition(object, condition_type, status) {
        Ok(()) => Readiness::Ready,
        Err(why) => match terminal_failure(object) {
            Some(failure) => Readiness::Failed(failure),
            None => Readiness::Waiting(why),
        },
    }
}

/// Terminal failures found in a Pod's container statuses / phase, or in a workload's status (Job
/// Failed, ProgressDeadlineExceeded).
///
/// For a Pod: every init or app container waiting with one of [`TERMINAL_WAITING_REASONS`], as
/// `container web: ImagePullBackOff (Back-off pulling image "nginx:nope")` (with the last exit
/// code and restart count for crash loops), and phase Failed with its reason or the exit codes of
/// the failed containers; several are joined with "; ". For a Job: condition Failed (or
/// FailureTarget) True. For a Deployment whose spec change has been observed: condition
/// Progressing with reason ProgressDeadlineExceeded. None otherwise.
pub fn terminal_failure(object: &Value) -> Option<String> {
    match kind(object) {
        "Pod" => {
            let mut failures = pod_container_failures(object);
            failures.extend(pod_phase_failure(object));
            (!failures.is_empty()).then(|| failures.join("; "))
        }
        "Job" => job_failure(object),
        "Deployment" => deployment_deadline(object),
        _ => None,
    }
}

/// Only the container part of [`terminal_failure`] for a Pod: containers waiting with one of
/// [`TERMINAL_WAITING_REASONS`], without phase Failed. Meant for the pods of a workload, where a
/// failed pod is not final by itself (a Job retries up to its backoffLimit; a Deployment replaces
/// its pods). None for other kinds.
pub fn container_failure(pod: &Value) -> Option<String> {
    if kind(pod) != "Pod" {
        return None;
    }
    let failures = pod_container_failures(pod);
    (!failures.is_empty()).then(|| failures.join("; "))
}

/// One line describing an object's state for timeout errors: kind/name, replica counts
/// (desired/ready/updated/available where they apply), and each condition as
/// `Type=Status (reason: message)`.
///
/// Also given where they apply: a status.observedGeneration behind metadata.generation, a Pod's
/// phase and unready containers, a Job's pod counts, a StatefulSet's differing revisions, and
/// status.phase for other kinds. Parts are separated by "; ".
pub fn describe(object: &Value) -> String {
    let mut parts = Vec::new();
    let generation = opt_int(object, "/metadata/generation");
    let observed = opt_int(object, "/status/observedGeneration");
    if let (Some(generation), Some(observed)) = (generation, observed)
        && observed < generation
    {
        parts.push(format!(
            "observedGeneration {observed} < generation {generation}"
        ));
    }
    match kind(object) {
        "Deployment" => {
            let desired = spec_replicas(object);
            let mut counts = format!(
                "replicas desired={desired} ready={} updated={} available={}",
                int(object, "/status/readyReplicas"),
                int(object, "/status/updatedReplicas"),
                int(object, "/status/availableReplicas"),
            );
            let total = int(object, "/status/replicas");
            if total != desired {
                let _ = write!(counts, " total={total}");
            }
            parts.push(counts);
        }
        "StatefulSet" => {
            parts.push(format!(
                "replicas desired={} ready={} updated={} available={}",
                spec_replicas(object),
                int(object, "/status/readyReplicas"),
                int(object, "/status/updatedReplicas"),
                int(object, "/status/availableReplicas"),
            ));
            let current = str_at(object, "/status/currentRevision");
            let update = str_at(object, "/status/updateRevision");
            if current != update {
                parts.push(format!(
                    "revision {} -> {}",
                    current.unwrap_or("none"),
                    update.unwrap_or("none")
                ));
            }
        }
        "DaemonSet" => {
            let mut counts = format!(
                "pods desired={} ready={} updated={} available={}",
                int(object, "/status/desiredNumberScheduled"),
                int(object, "/status/numberReady"),
                int(object, "/status/updatedNumberScheduled"),
                int(object, "/status/numberAvailable"),
            );
            let misscheduled = int(object, "/status/numberMisscheduled");
            if misscheduled > 0 {
                let _ = write!(counts, " misscheduled={misscheduled}");
            }
            parts.push(counts);
        }
        "ReplicaSet" => parts.push(format!(
            "replicas desired={} ready={} available={}",
            spec_replicas(object),
            int(object, "/status/readyReplicas"),
            int(object, "/status/availableReplicas"),
        )),
        "Job" => parts.push(job_counts(object)),
        "Pod" => {
            parts.push(format!(
                "phase {}",
                str_at(object, "/status/phase").unwrap_or("unknown")
            ));
            let containers = unready_containers(object);
            if !containers.is_empty() {
                parts.push(containers.join(", "));
            }
        }
        _ => {
            if let Some(phase) = str_at(object, "/status/phase") {
                parts.push(format!("phase {}", one_line(phase)));
            }
        }
    }
    let conditions = conditions(object);
    if conditions.is_empty() {
        parts.push("no conditions".to_string());
    } else {
        let listed: Vec<String> = conditions
            .iter()
            .map(|condition| describe_condition(condition, generation))
            .collect();
        parts.push(format!("conditions: {}", listed.join(", ")));
    }
    // Gateway API objects report per listener (a Gateway's TLS Secret that does not exist is
    // named only there): the listeners with a condition that is not True.
    for listener in object
        .pointer("/status/listeners")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let failing: Vec<String> = listener["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|condition| status_of(condition) != "True")
            .map(|condition| describe_condition(condition, None))
            .collect();
        if !failing.is_empty() {
            parts.push(format!(
                "listener {}: {}",
                listener["name"].as_str().unwrap_or("?"),
                failing.join(", ")
            ));
        }
    }
    format!(
        "{}/{}: {}",
        non_empty_or(kind(object), "object"),
        name(object),
        parts.join("; ")
    )
}

// ---------------------------------------------------------------------------------------------
// Conditions and generations

/// Ok when the condition holds and is current; otherwise why not, in operator words.
fn check_condition(object: &Value, condition_type: &str, status: &str) -> Result<(), String> {
    let generation = opt_int(object, "/metadata/generation");
    if let (Some(generation), Some(observed)) =
        (generation, opt_int(object, "/status/observedGeneration"))
        && observed < generation
    {
        return Err(format!(
            "controller has not observed generation {generation} yet (status.observedGeneration {observed})"
        ));
    }
    let Some(condition) = find_condition(object, condition_type) else {
        let reported: Vec<String> = conditions(object)
            .iter()
            .map(|c| format!("{}={}", type_of(c), status_of(c)))
            .collect();
        return Err(if reported.is_empty() {
            format!("condition {condition_type} not reported yet (no conditions in status)")
        } else {
            format!(
                "condition {condition_type} not reported yet (reported: {})",
                reported.join(", ")
            )
        });
    };
    let ty = type_of(condition);
    let actual = status_of(condition);
    if !actual.eq_ignore_ascii_case(status) {
        return Err(format!(
            "condition {ty} is {actual}{}",
            reason_suffix(condition)
        ));
    }
    if let (Some(generation), Some(observed)) =
        (generation, opt_int(condition, "/observedGeneration"))
        && observed < generation
    {
        return Err(format!(
            "condition {ty} is {actual} but reflects generation {observed}; the object is at generation {generation}"
        ));
    }
    Ok(())
}

/// For built-in workloads, where status.observedGeneration is always maintained: why the spec
/// change is not observed yet, if it is not (an absent observedGeneration counts as 0).
fn generation_pending(object: &Value) -> Option<String> {
    let generation = int(object, "/metadata/generation");
    let observed = opt_int(object, "/status/observedGeneration");
    match observed {
        Some(observed) if observed >= generation => None,
        Some(observed) => Some(format!(
            "controller has not observed generation {generation} yet (status.observedGeneration {observed})"
        )),
        None if generation > 0 => Some(format!(
            "controller has not observed generation {generation} yet (no status.observedGeneration)"
        )),
        None => None,
    }
}

fn conditions(object: &Value) -> &[Value] {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn find_condition<'a>(object: &'a Value, condition_type: &str) -> Option<&'a Value> {
    conditions(object)
        .iter()
        .find(|c| type_of(c).eq_ignore_ascii_case(condition_type))
}

fn condition_true<'a>(object: &'a Value, condition_type: &str) -> Option<&'a Value> {
    find_condition(object, condition_type).filter(|c| status_of(c).eq_ignore_ascii_case("True"))
}

fn type_of(condition: &Value) -> &str {
    condition["type"].as_str().unwrap_or("")
}

fn status_of(condition: &Value) -> &str {
    condition["status"].as_str().unwrap_or("Unknown")
}

/// " (reason: R; message: M)", or the parts present, or "".
fn reason_suffix(condition: &Value) -> String {
    match (text(condition, "reason"), text(condition, "message")) {
        (Some(reason), Some(message)) => {
            format!(" (reason: {reason}; message: {})", one_line(message))
        }
        (Some(reason), None) => format!(" (reason: {reason})"),
        (None, Some(message)) => format!(" (message: {})", one_line(message)),
        (None, None) => String::new(),
    }
}

/// `Type=Status (Reason: message)`, leaving out what is absent, plus
/// ` [stale: observedGeneration N < generation M]` when the condition lags the object.
fn describe_condition(condition: &Value, generation: Option<i64>) -> String {
    let mut line = format!("{}={}", type_of(condition), status_of(condition));
    let detail = reason_message(text(condition, "reason"), text(condition, "message"));
    if !detail.is_empty() {
        let _ = write!(line, " ({detail})");
    }
    if let (Some(generation), Some(observed)) =
        (generation, opt_int(condition, "/observedGeneration"))
        && observed < generation
    {
        let _ = write!(
            line,
            " [stale: observedGeneration {observed} < generation {generation}]"
        );
    }
    line
}

/// "Reason: message", or whichever is present, or "".
fn reason_message(reason: Option<&str>, message: Option<&str>) -> String {
    match (reason, message) {
        (Some(reason), Some(message)) => format!("{reason}: {}", one_line(message)),
        (Some(reason), None) => reason.to_string(),
        (None, Some(message)) => one_line(message),
        (None, None) => String::new(),
    }
}

/// "Reason (message)", or whichever is present, or "".
fn reason_paren_message(reason: Option<&str>, message: Option<&str>) -> String {
    match (reason, message) {
        (Some(reason), Some(message)) => format!("{reason} ({})", one_line(message)),
        (Some(reason), None) => reason.to_string(),
        (None, Some(message)) => one_line(message),
        (None, None) => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Pods

fn pod_ready(object: &Value) -> Readiness {
    if let Some(failure) = terminal_failure(object) {
        return Readiness::Failed(failure);
    }
    if str_at(object, "/status/phase") == Some("Succeeded") {
        return Readiness::Failed(
            "pod has completed (phase Succeeded) and will never become Ready".to_string(),
        );
    }
    match check_condition(object, "Ready", "True") {
        Ok(()) => Readiness::Ready,
        Err(why) => Readiness::Waiting(pod_waiting(object, Some(&why))),
    }
}

/// Why a pod is not ready or running yet: terminating, unscheduled, or which containers are not
/// ready; else the phase with `fallback`.
fn pod_waiting(object: &Value, fallback: Option<&str>) -> String {
    let Some(phase) = str_at(object, "/status/phase") else {
        return "pod has no status yet".to_string();
    };
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        return format!("pod is terminating (phase {phase})");
    }
    if let Some(scheduled) = find_condition(object, "PodScheduled")
        && status_of(scheduled).eq_ignore_ascii_case("False")
    {
        return format!(
            "pod is not scheduled: {}",
            reason_paren_message(text(scheduled, "reason"), text(scheduled, "message"))
        );
    }
    let containers = unready_containers(object);
    if !containers.is_empty() {
        return format!("phase {phase}: {}", containers.join(", "));
    }
    match fallback {
        Some(why) => format!("phase {phase}; {why}"),
        None => format!("phase {phase}"),
    }
}

fn container_statuses(object: &Value) -> impl Iterator<Item = (&'static str, &Value)> {
    [
        ("init container", "/status/initContainerStatuses"),
        ("container", "/status/containerStatuses"),
    ]
    .into_iter()
    .flat_map(move |(label, pointer)| {
        object
            .pointer(pointer)
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(move |status| (label, status))
    })
}

/// "container web waiting (ContainerCreating)" for each container that is not ready, skipping
/// init containers that completed.
fn unready_containers(object: &Value) -> Vec<String> {
    container_statuses(object)
        .filter_map(|(label, status)| {
            if status["ready"].as_bool() == Some(true) {
                return None;
            }
            let name = status["name"].as_str().unwrap_or("?");
            let state = &status["state"];
            if let Some(waiting) = state.get("waiting") {
                let detail = reason_message(text(waiting, "reason"), text(waiting, "message"));
                return Some(if detail.is_empty() {
                    format!("{label} {name} waiting")
                } else {
                    format!("{label} {name} waiting ({detail})")
                });
            }
            if state.get("running").is_some() {
                return Some(if label == "init container" {
                    format!("{label} {name} running")
                } else {
                    format!("{label} {name} running but not ready")
                });
            }
            if let Some(terminated) = state.get("terminated") {
                let code = terminated["exitCode"].as_i64().unwrap_or(0);
                if label == "init container" && code == 0 {
                    return None;
                }
                let reason = text(terminated, "reason").unwrap_or("Terminated");
                return Some(format!(
                    "{label} {name} terminated ({reason}, exit code {code})"
                ));
            }
            Some(format!("{label} {name} not ready"))
        })
        .collect()
}

fn pod_container_failures(object: &Value) -> Vec<String> {
    container_statuses(object)
        .filter_map(|(label, status)| {
            let waiting = status.pointer("/state/waiting")?;
            let reason = text(waiting, "reason")?;
            if !TERMINAL_WAITING_REASONS.contains(&reason) {
                return None;
            }
            let name = status["name"].as_str().unwrap_or("?");
            let mut failure = format!(
                "{label} {name}: {}",
                reason_paren_message(Some(reason), text(waiting, "message"))
            );
            if let Some(last) = status.pointer("/lastState/terminated") {
                let code = last["exitCode"].as_i64().unwrap_or(0);
                let _ = write!(failure, "; last exit code {code}");
                let detail = reason_message(text(last, "reason"), text(last, "message"));
                if !detail.is_empty() {
                    let _ = write!(failure, " ({detail})");
                }
                let restarts = status["restartCount"].as_i64().unwrap_or(0);
                let _ = write!(failure, ", {restarts} restarts");
            }
            Some(failure)
        })
        .collect()
}

fn pod_phase_failure(object: &Value) -> Option<String> {
    if str_at(object, "/status/phase") != Some("Failed") {
        return None;
    }
    let status = &object["status"];
    let detail = reason_paren_message(text(status, "reason"), text(status, "message"));
    if !detail.is_empty() {
        return Some(format!("pod phase Failed: {detail}"));
    }
    let exits: Vec<String> = container_statuses(object)
        .filter_map(|(label, status)| {
            let terminated = status.pointer("/state/terminated")?;
            let code = terminated["exitCode"].as_i64().unwrap_or(0);
            if code == 0 {
                return None;
            }
            let name = status["name"].as_str().unwrap_or("?");
            let detail = reason_message(text(terminated, "reason"), text(terminated, "message"));
            Some(if detail.is_empty() {
                format!("{label} {name} exited with code {code}")
            } else {
                format!("{label} {name} exited with code {code} ({detail})")
            })
        })
        .collect();
    Some(if exits.is_empty() {
        "pod phase Failed".to_string()
    } else {
        format!("pod phase Failed: {}", exits.join("; "))
    })
}

// ---------------------------------------------------------------------------------------------
// Workloads

fn deployment_rollout(object: &Value) -> Readiness {
    if let Some(why) = generation_pending(object) {
        return Readiness::Waiting(why);
    }
    if let Some(failure) = deployment_deadline(object) {
        return Readiness::Failed(failure);
    }
    let desired = spec_replicas(object);
    let total = int(object, "/status/replicas");
    let updated = int(object, "/status/updatedReplicas");
    let available = int(object, "/status/availableReplicas");
    let paused = if object.pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
        " (the deployment is paused)"
    } else {
        ""
    };
    if updated < desired {
        Readiness::Waiting(format!("{updated}/{desired} replicas updated{paused}"))
    } else if total > updated {
        Readiness::Waiting(format!(
            "{} old replicas pending termination{paused}",
            total - updated
        ))
    } else if available < updated {
        Readiness::Waiting(format!("{available}/{updated} replicas available{paused}"))
    } else {
        Readiness::Ready
    }
}

/// A Deployment's ProgressDeadlineExceeded, once the current spec has been observed (a stale one
/// from before the last change does not count).
fn deployment_deadline(object: &Value) -> Option<String> {
    if generation_pending(object).is_some() {
        return None;
    }
    let progressing = find_condition(object, "Progressing")?;
    if text(progressing, "reason") != Some("ProgressDeadlineExceeded") {
        return None;
    }
    let deadline = opt_int(object, "/spec/progressDeadlineSeconds")
        .map(|s| format!(" ({s}s)"))
        .unwrap_or_default();
    let detail = text(progressing, "message")
        .map(|m| format!(": {}", one_line(m)))
        .unwrap_or_default();
    Some(format!(
        "rollout exceeded its progress deadline{deadline}{detail}"
    ))
}

fn statefulset_rollout(object: &Value) -> Readiness {
    if let Some(why) = generation_pending(object) {
        return Readiness::Waiting(why);
    }
    let desired = spec_replicas(object);
    let ready = int(object, "/status/readyReplicas");
    if ready < desired {
        return Readiness::Waiting(format!("{ready}/{desired} replicas ready"));
    }
    let strategy = str_at(object, "/spec/updateStrategy/type").unwrap_or("RollingUpdate");
    if strategy == "OnDelete" {
        return Readiness::Ready;
    }
    let updated = int(object, "/status/updatedReplicas");
    let partition = int(object, "/spec/updateStrategy/rollingUpdate/partition");
    if partition > 0 {
        let target = (desired - partition).max(0);
        return if updated < target {
            Readiness::Waiting(format!(
                "partitioned rollout: {updated}/{target} replicas updated (partition {partition})"
            ))
        } else {
            Readiness::Ready
        };
    }
    let current = str_at(object, "/status/currentRevision");
    let update = str_at(object, "/status/updateRevision");
    if current != update {
        return Readiness::Waiting(format!(
            "{updated}/{desired} replicas updated to revision {} (current revision {})",
            update.unwrap_or("none"),
            current.unwrap_or("none")
        ));
    }
    Readiness::Ready
}

fn daemonset_rollout(object: &Value) -> Readiness {
    if let Some(why) = generation_pending(object) {
        return Readiness::Waiting(why);
    }
    let desired = int(object, "/status/desiredNumberScheduled");
    let updated = int(object, "/status/updatedNumberScheduled");
    let available = int(object, "/status/numberAvailable");
    let on_delete = str_at(object, "/spec/updateStrategy/type") == Some("OnDelete");
    if !on_delete && updated < desired {
        Readiness::Waiting(format!("{updated}/{desired} pods updated"))
    } else if available < desired {
        Readiness::Waiting(format!("{available}/{desired} pods available"))
    } else {
        Readiness::Ready
    }
}

fn replicaset_rollout(object: &Value) -> Readiness {
    if let Some(why) = generation_pending(object) {
        return Readiness::Waiting(why);
    }
    let desired = spec_replicas(object);
    let total = int(object, "/status/replicas");
    let available = int(object, "/status/availableReplicas");
    if available < desired {
        Readiness::Waiting(format!("{available}/{desired} replicas available"))
    } else if total > desired {
        Readiness::Waiting(format!(
            "{} surplus replicas pending termination",
            total - desired
        ))
    } else {
        Readiness::Ready
    }
}

/// Condition Failed (or FailureTarget) True, as "job failed: Reason (message)".
fn job_failure(object: &Value) -> Option<String> {
    let failed =
        condition_true(object, "Failed").or_else(|| condition_true(object, "FailureTarget"))?;
    let detail = reason_paren_message(text(failed, "reason"), text(failed, "message"));
    Some(if detail.is_empty() {
        "job failed".to_string()
    } else {
        format!("job failed: {detail}")
    })
}

fn job_progress(object: &Value) -> String {
    let counts = job_counts(object);
    if object.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
        return format!("job is suspended (spec.suspend is true); {counts}");
    }
    let limit = opt_int(object, "/spec/backoffLimit").unwrap_or(6);
    format!("job not complete: {counts} (backoffLimit {limit})")
}

fn job_counts(object: &Value) -> String {
    let succeeded = int(object, "/status/succeeded");
    let succeeded = match opt_int(object, "/spec/completions") {
        Some(completions) => format!("{succeeded}/{completions} succeeded"),
        None => format!("{succeeded} succeeded"),
    };
    format!(
        "{} active, {succeeded}, {} failed",
        int(object, "/status/active"),
        int(object, "/status/failed")
    )
}

// ---------------------------------------------------------------------------------------------
// JSON access

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or("")
}

fn kind_words(kind: &str) -> String {
    if kind.is_empty() {
        "an object without a kind".to_string()
    } else {
        kind.to_string()
    }
}

fn name(object: &Value) -> &str {
    str_at(object, "/metadata/name").unwrap_or("<unnamed>")
}

fn non_empty_or<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() { default } else { value }
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// A non-empty string field of `value`.
fn text<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value[field].as_str().filter(|s| !s.trim().is_empty())
}

fn opt_int(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

/// An integer field, 0 when absent (as the API server omits zero counts).
fn int(object: &Value, pointer: &str) -> i64 {
    opt_int(object, pointer).unwrap_or(0)
}

/// spec.replicas, 1 when absent (the API default).
fn spec_replicas(object: &Value) -> i64 {
    opt_int(object, "/spec/replicas").unwrap_or(1)
}

/// Whitespace (including newlines) collapsed to single spaces, cut to [`MAX_MESSAGE_CHARS`] in
/// the middle: a program's error names what failed first and why last (Go's wrapped errors,
/// `error initializing storage ...: failed SASL auth: FATAL: password authentication failed`),
/// so both ends are kept.
fn one_line(message: &str) -> String {
    let joined = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let count = joined.chars().count();
    if count <= MAX_MESSAGE_CHARS {
        return joined;
    }
    let head = MAX_MESSAGE_CHARS / 3;
    let tail = MAX_MESSAGE_CHARS - head - 1;
    let mut cut: String = joined.chars().take(head).collect();
    cut.push('…');
    cut.extend(joined.chars().skip(count - tail));
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture(yaml: &str) -> Value {
        serde_norway::from_str(yaml).expect("fixture parses")
    }

    macro_rules! fixture {
        ($name:literal) => {
            fixture(include_str!(concat!(
                "../../fixtures/conditions/",
                $name,
                ".yaml"
            )))
        };
    }

    fn waiting(readiness: Readiness) -> String {
        match readiness {
            Readiness::Waiting(why) => why,
            other => panic!("expected Waiting, got {other:?}"),
        }
    }

    fn failed(readiness: Readiness) -> String {
        match readiness {
            Readiness::Failed(why) => why,
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    fn check(name: &str, object: &Value) -> Readiness {
        builtin(name).expect("a built-in condition")(object)
    }

    // --- builtin lookup

    #[test]
    fn unknown_builtin_is_none() {
        assert!(builtin("nope").is_none());
        assert!(builtin("").is_none());
    }

    #[test]
    fn builtin_names_are_case_insensitive() {
        let pod = fixture!("pod-running-ready");
        for name in ["ready", "READY", "Ready", "rEaDy"] {
            assert_eq!(check(name, &pod), Readiness::Ready, "{name}");
        }
        assert_eq!(check("RUNNING", &pod), Readiness::Ready);
        let deployment = fixture!("deployment-complete");
        assert_eq!(check("rollout", &deployment), Readiness::Ready);
        assert_eq!(check("available", &deployment), Readiness::Ready);
    }

    #[test]
    fn every_listed_name_resolves() {
        for name in BUILTIN_NAMES {
            assert!(builtin(name).is_some(), "{name}");
            assert!(builtin(&name.to_lowercase()).is_some(), "{name}");
        }
    }

    // --- pods

    #[test]
    fn pod_running_ready() {
        let pod = fixture!("pod-running-ready");
        assert_eq!(check("Ready", &pod), Readiness::Ready);
        assert_eq!(check("Running", &pod), Readiness::Ready);
        assert_eq!(terminal_failure(&pod), None);
        assert_eq!(
            condition_is(&pod, "ContainersReady", "True"),
            Readiness::Ready
        );
    }

    #[test]
    fn pod_pending_waits_on_container_creation() {
        let pod = fixture!("pod-pending");
        assert_eq!(
            waiting(check("Ready", &pod)),
            "phase Pending: container web waiting (ContainerCreating)"
        );
        assert_eq!(
            waiting(check("Running", &pod)),
            "phase Pending: container web waiting (ContainerCreating)"
        );
        assert_eq!(terminal_failure(&pod), None);
        assert_eq!(
            waiting(condition_is(&pod, "Ready", "True")),
            "condition Ready is False (reason: ContainersNotReady; message: containers with unready status: [web])"
        );
    }

    #[test]
    fn pod_unschedulable_says_why() {
        let pod = fixture!("pod-unschedulable");
        assert_eq!(
            waiting(check("Ready", &pod)),
            "pod is not scheduled: Unschedulable (0/1 nodes are available: 1 Insufficient cpu. \
             preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.)"
        );
        assert_eq!(
            waiting(condition_is(&pod, "Ready", "True")),
            "condition Ready not reported yet (reported: PodScheduled=False)"
        );
    }

    #[test]
    fn pod_image_pull_backoff_fails() {
        let pod = fixture!("pod-image-pull-backoff");
        let expected = r#"container web: ImagePullBackOff (Back-off pulling image "nginx:nope")"#;
        assert_eq!(failed(check("Ready", &pod)), expected);
        assert_eq!(failed(check("Running", &pod)), expected);
        assert_eq!(terminal_failure(&pod).as_deref(), Some(expected));
        // A custom condition on a stuck pod fails early too.
        assert_eq!(
            failed(condition_is(&pod, "ContainersReady", "True")),
            expected
        );
    }

    #[test]
    fn a_missing_secret_keeps_a_pod_waiting_with_the_kubelets_reason() {
        let pod = fixture!("pod-config-error");
        assert_eq!(terminal_failure(&pod), None);
        assert_eq!(
            waiting(check("Ready", &pod)),
            r#"phase Pending: container webservice waiting (CreateContainerConfigError: secret "gitlab-rails-storage" not found)"#
        );
    }

    #[test]
    fn pod_crashloop_fails_with_last_exit() {
        let pod = fixture!("pod-crashloop");
        let expected = "container webservice: CrashLoopBackOff (back-off 2m40s restarting failed \
             container=webservice pod=webservice-6f9c8b7d5-r4t9w_gitlab(8b2d4f6a-0c1e-4a59-93d7-5f7b9d1c3e40)); \
             last exit code 1 (Error), 5 restarts";
        assert_eq!(failed(check("Ready", &pod)), expected);
        // Phase is Running, but a crash-looping pod is not usefully running.
        assert_eq!(failed(check("Running", &pod)), expected);
    }

    #[test]
    fn pod_failed_phase_fails() {
        let pod = fixture!("pod-failed");
        let expected = "pod phase Failed: container migrations exited with code 1 (Error: \
             PG::ConnectionBad: connection to server at \"pg-rw\" (10.96.41.7), port 5432 failed: \
             FATAL: password authentication failed for user \"gitlab\")";
        assert_eq!(terminal_failure(&pod).as_deref(), Some(expected));
        assert_eq!(failed(check("Ready", &pod)), expected);
        assert_eq!(failed(check("Running", &pod)), expected);
    }

    #[test]
    fn container_failure_leaves_out_the_phase() {
        assert_eq!(container_failure(&fixture!("pod-failed")), None);
        assert_eq!(
            container_failure(&fixture!("pod-image-pull-backoff")).as_deref(),
            Some(r#"container web: ImagePullBackOff (Back-off pulling image "nginx:nope")"#)
        );
        assert_eq!(container_failure(&fixture!("pod-running-ready")), None);
        assert_eq!(container_failure(&fixture!("job-failed")), None);
    }

    #[test]
    fn pod_evicted_names_reason() {
        let pod = json!({
            "kind": "Pod",
            "metadata": {"name": "web-1"},
            "status": {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory."
            }
        });
        assert_eq!(
            terminal_failure(&pod).as_deref(),
            Some("pod phase Failed: Evicted (The node was low on resource: memory.)")
        );
    }

    #[test]
    fn pod_succeeded_cannot_become_ready_or_running() {
        let pod =
            json!({"kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Succeeded"}});
        assert!(matches!(check("Ready", &pod), Readiness::Failed(_)));
        assert!(matches!(check("Running", &pod), Readiness::Failed(_)));
        assert_eq!(terminal_failure(&pod), None);
    }

    #[test]
    fn pod_without_status_waits() {
        let pod = json!({"kind": "Pod", "metadata": {"name": "p"}});
        assert_eq!(waiting(check("Ready", &pod)), "pod has no status yet");
        assert_eq!(waiting(check("Running", &pod)), "pod has no status yet");
    }

    #[test]
    fn running_rejects_other_kinds() {
        let deployment = fixture!("deployment-complete");
        assert_eq!(
            failed(check("Running", &deployment)),
            "condition Running applies to Pods, not to Deployment"
        );
    }

    // --- deployments

    #[test]
    fn deployment_progressing_waits_on_availability() {
        let deployment = fixture!("deployment-progressing");
        assert_eq!(
            waiting(check("Rollout", &deployment)),
            "2/3 replicas available"
        );
        assert_eq!(
            waiting(check("Ready", &deployment)),
            "2/3 replicas available"
        );
        assert_eq!(
            waiting(check("Available", &deployment)),
            "condition Available is False (reason: MinimumReplicasUnavailable; message: \
             Deployment does not have minimum availability.); 2/3 replicas available"
        );
        assert_eq!(terminal_failure(&deployment), None);
    }

    #[test]
    fn deployment_complete_is_ready() {
        let deployment = fixture!("deployment-complete");
        assert_eq!(check("Rollout", &deployment), Readiness::Ready);
        assert_eq!(check("Ready", &deployment), Readiness::Ready);
        assert_eq!(check("Available", &deployment), Readiness::Ready);
        assert_eq!(terminal_failure(&deployment), None);
    }

    #[test]
    fn deployment_stale_generation_waits() {
        let deployment = fixture!("deployment-stale-generation");
        let expected = "controller has not observed generation 3 yet (status.observedGeneration 2)";
        assert_eq!(waiting(check("Rollout", &deployment)), expected);
        // Available is True, but from before the spec change.
        assert_eq!(waiting(check("Available", &deployment)), expected);
        assert_eq!(
            waiting(condition_is(&deployment, "Available", "True")),
            expected
        );
    }

    #[test]
    fn deployment_deadline_exceeded_fails_rollout() {
        let deployment = fixture!("deployment-deadline-exceeded");
        let expected = "rollout exceeded its progress deadline (600s): \
             ReplicaSet \"web-5d8f6c9b7\" has timed out progressing.";
        assert_eq!(failed(check("Rollout", &deployment)), expected);
        assert_eq!(terminal_failure(&deployment).as_deref(), Some(expected));
        // The old replicas still serve, so the deployment is Available.
        assert_eq!(check("Available", &deployment), Readiness::Ready);
    }

    #[test]
    fn deployment_deadline_from_older_generation_is_not_terminal() {
        let mut deployment = fixture!("deployment-deadline-exceeded");
        deployment["metadata"]["generation"] = json!(4);
        assert_eq!(terminal_failure(&deployment), None);
        assert_eq!(
            waiting(check("Rollout", &deployment)),
            "controller has not observed generation 4 yet (status.observedGeneration 3)"
        );
    }

    #[test]
    fn deployment_rollout_steps() {
        let mut deployment = fixture!("deployment-deadline-exceeded");
        let status = deployment["status"].as_object_mut().unwrap();
        status.remove("conditions");
        assert_eq!(waiting(rollout(&deployment)), "1/3 replicas updated");
        deployment["status"]["updatedReplicas"] = json!(3);
        assert_eq!(
            waiting(rollout(&deployment)),
            "1 old replicas pending termination"
        );
        deployment["status"]["replicas"] = json!(3);
        deployment["status"]["availableReplicas"] = json!(2);
        assert_eq!(waiting(rollout(&deployment)), "2/3 replicas available");
        deployment["status"]["availableReplicas"] = json!(3);
        assert_eq!(rollout(&deployment), Readiness::Ready);
    }

    #[test]
    fn deployment_replicas_default_to_one() {
        let deployment = json!({
            "kind": "Deployment",
            "metadata": {"name": "d", "generation": 1},
            "spec": {},
            "status": {"observedGeneration": 1}
        });
        assert_eq!(waiting(rollout(&deployment)), "0/1 replicas updated");
        let fresh = json!({"kind": "Deployment", "metadata": {"name": "d", "generation": 1}});
        assert_eq!(
            waiting(rollout(&fresh)),
            "controller has not observed generation 1 yet (no status.observedGeneration)"
        );
    }

    // --- statefulsets, daemonsets, replicasets

    #[test]
    fn statefulset_rolling_waits_on_revision() {
        let sts = fixture!("statefulset-rolling");
        let expected =
            "1/3 replicas updated to revision redis-6d8f9c7b4 (current revision redis-5f7c8d9b6)";
        assert_eq!(waiting(check("Rollout", &sts)), expected);
        assert_eq!(waiting(check("Ready", &sts)), expected);
    }

    #[test]
    fn statefulset_ready() {
        let sts = fixture!("statefulset-ready");
        assert_eq!(check("Rollout", &sts), Readiness::Ready);
        assert_eq!(check("Ready", &sts), Readiness::Ready);
    }

    #[test]
    fn statefulset_partition_counts_updated_replicas() {
        let mut sts = fixture!("statefulset-rolling");
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(2);
        assert_eq!(check("Rollout", &sts), Readiness::Ready);
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(1);
        assert_eq!(
            waiting(check("Rollout", &sts)),
            "partitioned rollout: 1/2 replicas updated (partition 1)"
        );
    }

    #[test]
    fn statefulset_waits_on_ready_replicas() {
        let mut sts = fixture!("statefulset-ready");
        sts["status"]["readyReplicas"] = json!(1);
        assert_eq!(waiting(check("Rollout", &sts)), "1/3 replicas ready");
        sts["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        sts["status"]["readyReplicas"] = json!(3);
        sts["status"]["currentRevision"] = json!("redis-old");
        assert_eq!(check("Rollout", &sts), Readiness::Ready);
    }

    #[test]
    fn daemonset_ready() {
        let ds = fixture!("daemonset-ready");
        assert_eq!(check("Rollout", &ds), Readiness::Ready);
        assert_eq!(check("Ready", &ds), Readiness::Ready);
    }

    #[test]
    fn daemonset_waits_on_updated_then_available() {
        let mut ds = fixture!("daemonset-ready");
        ds["status"]["updatedNumberScheduled"] = json!(2);
        assert_eq!(waiting(check("Rollout", &ds)), "2/3 pods updated");
        ds["status"]["updatedNumberScheduled"] = json!(3);
        ds["status"]["numberAvailable"] = json!(1);
        assert_eq!(waiting(check("Rollout", &ds)), "1/3 pods available");
        ds["metadata"]["generation"] = json!(2);
        assert_eq!(
            waiting(check("Rollout", &ds)),
            "controller has not observed generation 2 yet (status.observedGeneration 1)"
        );
    }

    #[test]
    fn replicaset_rollout() {
        let mut rs = json!({
            "kind": "ReplicaSet",
            "metadata": {"name": "web-7c5b9f8d6", "generation": 1},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 1, "replicas": 2, "availableReplicas": 1}
        });
        assert_eq!(waiting(check("Ready", &rs)), "1/2 replicas available");
        rs["status"]["availableReplicas"] = json!(2);
        assert_eq!(check("Ready", &rs), Readiness::Ready);
    }

    #[test]
    fn rollout_rejects_other_kinds() {
        assert_eq!(
            failed(check("Rollout", &fixture!("job-complete"))),
            "condition Rollout applies to Deployment, StatefulSet, DaemonSet and ReplicaSet, not to Job"
        );
        assert_eq!(
            failed(rollout(&json!({}))),
            "condition Rollout applies to Deployment, StatefulSet, DaemonSet and ReplicaSet, \
             not to an object without a kind"
        );
    }

    // --- jobs

    #[test]
    fn job_complete() {
        let job = fixture!("job-complete");
        assert_eq!(check("Complete", &job), Readiness::Ready);
        assert_eq!(check("Ready", &job), Readiness::Ready);
        assert_eq!(terminal_failure(&job), None);
    }

    #[test]
    fn job_success_criteria_met_counts() {
        let mut job = fixture!("job-complete");
        job["status"]["conditions"].as_array_mut().unwrap().pop();
        assert_eq!(check("Complete", &job), Readiness::Ready);
    }

    #[test]
    fn job_failed() {
        let job = fixture!("job-failed");
        let expected =
            "job failed: BackoffLimitExceeded (Job has reached the specified backoff limit)";
        assert_eq!(failed(check("Complete", &job)), expected);
        assert_eq!(failed(check("Ready", &job)), expected);
        assert_eq!(terminal_failure(&job).as_deref(), Some(expected));
        // Asking for the failure itself succeeds.
        assert_eq!(condition_is(&job, "Failed", "True"), Readiness::Ready);
    }

    #[test]
    fn job_running_waits_with_counts() {
        let job = fixture!("job-running");
        assert_eq!(
            waiting(check("Complete", &job)),
            "job not complete: 1 active, 0/1 succeeded, 1 failed (backoffLimit 6)"
        );
        let mut suspended = job.clone();
        suspended["spec"]["suspend"] = json!(true);
        assert_eq!(
            waiting(check("Complete", &suspended)),
            "job is suspended (spec.suspend is true); 1 active, 0/1 succeeded, 1 failed"
        );
    }

    // --- CRDs

    #[test]
    fn crd_established() {
        let crd = fixture!("crd-established");
        assert_eq!(check("Established", &crd), Readiness::Ready);
        assert_eq!(check("established", &crd), Readiness::Ready);
        assert_eq!(
            condition_is(&crd, "NamesAccepted", "True"),
            Readiness::Ready
        );
    }

    #[test]
    fn crd_not_established() {
        let crd = fixture!("crd-not-established");
        assert_eq!(
            waiting(check("Established", &crd)),
            "condition Established is False (reason: Installing; message: the initial names have been accepted)"
        );
    }

    #[test]
    fn crd_name_conflict_is_mentioned() {
        let crd = json!({
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "clusters.postgresql.cnpg.io", "generation": 1},
            "status": {"conditions": [{
                "type": "NamesAccepted", "status": "False", "reason": "MultipleNames",
                "message": "\"clusters\" is already in use"
            }]}
        });
        assert_eq!(
            waiting(check("Established", &crd)),
            "condition Established not reported yet (reported: NamesAccepted=False); \
             condition NamesAccepted is False (reason: MultipleNames; message: \"clusters\" is already in use)"
        );
    }

    // --- custom resources

    #[test]
    fn custom_ready() {
        let cluster = fixture!("custom-ready");
        assert_eq!(check("Ready", &cluster), Readiness::Ready);
        assert_eq!(condition_is(&cluster, "Ready", "True"), Readiness::Ready);
        assert_eq!(condition_is(&cluster, "ready", "true"), Readiness::Ready);
        assert_eq!(
            condition_is(&cluster, "ContinuousArchiving", "True"),
            Readiness::Ready
        );
        assert_eq!(
            waiting(condition_is(&cluster, "Ready", "False")),
            "condition Ready is True (reason: ClusterIsReady; message: Cluster is Ready)"
        );
        assert_eq!(
            waiting(condition_is(&cluster, "Hibernated", "True")),
            "condition Hibernated not reported yet (reported: ContinuousArchiving=True, Ready=True)"
        );
        assert_eq!(terminal_failure(&cluster), None);
    }

    #[test]
    fn custom_ready_stale_generation_waits() {
        let cluster = fixture!("custom-ready-stale-generation");
        let expected =
            "condition Ready is True but reflects generation 2; the object is at generation 3";
        assert_eq!(waiting(check("Ready", &cluster)), expected);
        assert_eq!(waiting(condition_is(&cluster, "Ready", "True")), expected);
        // A condition without observedGeneration cannot be checked, so it counts.
        assert_eq!(
            condition_is(&cluster, "ContinuousArchiving", "True"),
            Readiness::Ready
        );
    }

    #[test]
    fn custom_status_observed_generation_is_checked() {
        let mut cluster = fixture!("custom-ready");
        cluster["status"]["observedGeneration"] = json!(1);
        assert_eq!(
            waiting(check("Ready", &cluster)),
            "controller has not observed generation 2 yet (status.observedGeneration 1)"
        );
    }

    #[test]
    fn custom_without_conditions_waits() {
        let object =
            json!({"kind": "Cluster", "metadata": {"name": "pg", "generation": 1}, "status": {}});
        assert_eq!(
            waiting(check("Ready", &object)),
            "condition Ready not reported yet (no conditions in status)"
        );
        assert_eq!(
            waiting(check("Available", &object)),
            "condition Available not reported yet (no conditions in status)"
        );
    }

    // --- describe

    #[test]
    fn describe_deployment() {
        assert_eq!(
            describe(&fixture!("deployment-progressing")),
            "Deployment/web: replicas desired=3 ready=2 updated=3 available=2; conditions: \
             Available=False (MinimumReplicasUnavailable: Deployment does not have minimum availability.), \
             Progressing=True (ReplicaSetUpdated: ReplicaSet \"web-7c5b9f8d6\" is progressing.)"
        );
        assert_eq!(
            describe(&fixture!("deployment-deadline-exceeded")),
            "Deployment/web: replicas desired=3 ready=3 updated=1 available=3 total=4; conditions: \
             Available=True (MinimumReplicasAvailable: Deployment has minimum availability.), \
             Progressing=False (ProgressDeadlineExceeded: ReplicaSet \"web-5d8f6c9b7\" has timed out progressing.)"
        );
        assert!(
            describe(&fixture!("deployment-stale-generation")).starts_with(
                "Deployment/web: observedGeneration 2 < generation 3; replicas desired=3"
            )
        );
    }

    #[test]
    fn describe_custom_resource() {
        assert_eq!(
            describe(&fixture!("custom-ready-stale-generation")),
            "Cluster/pg: phase Cluster in healthy state; conditions: \
             ContinuousArchiving=True (ContinuousArchivingSuccess: Continuous archiving is working), \
             Ready=True (ClusterIsReady: Cluster is Ready) [stale: observedGeneration 2 < generation 3]"
        );
        assert_eq!(
            describe(&fixture!("custom-ready")),
            "Cluster/pg: phase Cluster in healthy state; conditions: \
             ContinuousArchiving=True (ContinuousArchivingSuccess: Continuous archiving is working), \
             Ready=True (ClusterIsReady: Cluster is Ready)"
        );
    }

    #[test]
    fn describe_other_kinds() {
        assert_eq!(
            describe(&fixture!("pod-image-pull-backoff")),
            "Pod/web-5d8f6c9b7-h7k2p: phase Pending; container web waiting (ImagePullBackOff: \
             Back-off pulling image \"nginx:nope\"); conditions: PodReadyToStartContainers=True, \
             Initialized=True, Ready=False (ContainersNotReady: containers with unready status: [web]), \
             ContainersReady=False (ContainersNotReady: containers with unready status: [web]), \
             PodScheduled=True"
        );
        assert_eq!(
            describe(&fixture!("statefulset-rolling")),
            "StatefulSet/redis: replicas desired=3 ready=3 updated=1 available=3; \
             revision redis-5f7c8d9b6 -> redis-6d8f9c7b4; no conditions"
        );
        assert_eq!(
            describe(&fixture!("daemonset-ready")),
            "DaemonSet/node-exporter: pods desired=3 ready=3 updated=3 available=3; no conditions"
        );
        assert_eq!(
            describe(&fixture!("job-failed")),
            "Job/migrations: 0 active, 0/1 succeeded, 3 failed; conditions: \
             FailureTarget=True (BackoffLimitExceeded: Job has reached the specified backoff limit), \
             Failed=True (BackoffLimitExceeded: Job has reached the specified backoff limit)"
        );
        assert_eq!(describe(&json!({})), "object/<unnamed>: no conditions");
    }

    #[test]
    fn long_messages_are_one_line_and_cut() {
        let long = "word ".repeat(200);
        let cut = one_line(&format!("first\nsecond  {long} the cause"));
        assert!(cut.starts_with("first second word"));
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS);
        assert!(cut.ends_with("word the cause"), "{cut}");
        assert_eq!(cut.matches('…').count(), 1);
    }

    #[test]
    fn a_gateway_names_its_failing_listeners() {
        let gateway: Value = serde_json::json!({
            "kind": "Gateway", "metadata": {"name": "gitlab-gw"},
            "status": {
                "conditions": [{"type": "Programmed", "status": "False", "reason": "Invalid",
                                "message": "Gateway has invalid listeners: gitlab-web"}],
                "listeners": [
                    {"name": "gitlab-web", "conditions": [
                        {"type": "Accepted", "status": "True", "reason": "Accepted"},
                        {"type": "ResolvedRefs", "status": "False", "reason": "InvalidCertificateRef",
                         "message": "Secret gitlab/gitlab-wildcard-tls does not exist."}]},
                    {"name": "registry-web", "conditions": [
                        {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs"}]}
                ]
            }
        });
        let text = describe(&gateway);
        assert!(
            text.contains("listener gitlab-web: ResolvedRefs=False (InvalidCertificateRef: Secret gitlab/gitlab-wildcard-tls does not exist.)"),
            "{text}"
        );
        assert!(!text.contains("registry-web"), "{text}");
    }
}
