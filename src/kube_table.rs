//! Kubernetes objects as `kubectl get` shows them by default: a pod's name, ready containers,
//! status (a waiting container's reason, as kubectl prints it), restarts and age; a workload's
//! ready replicas; anything else its name and age. The REPL prints `kube_list` answers so.

use std::time::{Duration, SystemTime};

use serde_json::Value;

/// True when every item looks like a Kubernetes object (`apiVersion`, `kind`, `metadata`).
pub fn all_objects(items: &[Value]) -> bool {
    !items.is_empty()
        && items.iter().all(|item| {
            item["apiVersion"].is_string()
                && item["kind"].is_string()
                && item["metadata"].is_object()
        })
}

/// kubectl's age (`HumanDuration`): `45s`, `5m10s`, `42m`, `3h20m`, `20h`, `3d4h`, `30d`, `2y10d`.
pub fn age(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs();
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    let with = |big: u64, unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big}{unit}")
        } else {
            format!("{big}{unit}{small}{small_unit}")
        }
    };
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        with(minutes, "m", seconds % 60, "s")
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        with(hours, "h", minutes % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        with(days, "d", hours % 24, "h")
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        with(days / 365, "y", days % 365, "d")
    } else {
        format!("{}y", days / 365)
    }
}

fn age_of(object: &Value, now: SystemTime) -> String {
    object["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|text| humantime::parse_rfc3339_weak(text).ok())
        .map(|created| age(now.duration_since(created).unwrap_or_default()))
        .unwrap_or_else(|| "<unknown>".to_string())
}

/// A pod's STATUS as kubectl prints it: Terminating, a waiting or terminated container's reason,
/// or the phase.
fn pod_status(pod: &Value) -> String {
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating".to_string();
    }
    let containers = pod["status"]["containerStatuses"].as_array();
    let reason = containers.into_iter().flatten().find_map(|status| {
        status["state"]["waiting"]["reason"]
            .as_str()
            .or_else(|| status["state"]["terminated"]["reason"].as_str())
    });
    reason
        .or_else(|| pod["status"]["reason"].as_str())
        .or_else(|| pod["status"]["phase"].as_str())
        .unwrap_or("Unknown")
        .to_string()
}

fn count(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// The columns of one kind, and a row of them for an object.
fn columns(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["READY", "STATUS", "RESTARTS", "AGE"],
        "Deployment" => &["READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "StatefulSet" | "ReplicaSet" => &["READY", "AGE"],
        "DaemonSet" => &["DESIRED", "READY", "AGE"],
        _ => &["AGE"],
    }
}

fn row(object: &Value, now: SystemTime) -> Vec<String> {
    let status = &object["status"];
    let spec = &object["spec"];
    let desired = spec["replicas"].as_u64().unwrap_or(1);
    match object["kind"].as_str().unwrap_or("") {
        "Pod" => {
            let statuses = status["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = spec["containers"]
                .as_array()
                .map_or(statuses.len(), Vec::len);
            let ready = statuses.iter().filter(|s| s["ready"] == true).count();
            let restarts: u64 = statuses.iter().map(|s| count(&s["restartCount"])).sum();
            vec![
                format!("{ready}/{total}"),
                pod_status(object),
                restarts.to_string(),
                age_of(object, now),
            ]
        }
        "Deployment" => vec![
            format!("{}/{desired}", count(&status["readyReplicas"])),
            count(&status["updatedReplicas"]).to_string(),
            count(&status["availableReplicas"]).to_string(),
            age_of(object, now),
        ],
        "StatefulSet" | "ReplicaSet" => vec![
            format!("{}/{desired}", count(&status["readyReplicas"])),
            age_of(object, now),
        ],
        "DaemonSet" => vec![
            count(&status["desiredNumberScheduled"]).to_string(),
            count(&status["numberReady"]).to_string(),
            age_of(object, now),
        ],
        _ => vec![age_of(object, now)],
    }
}

/// The objects as `kubectl get` lists them: NAMESPACE when they span several, NAME (with
/// `kind/` in front when the kinds differ), then the kind's columns.
pub fn render(objects: &[Value], now: SystemTime) -> String {
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    let one_kind = kinds.windows(2).all(|pair| pair[0] == pair[1]);
    let namespaces: Vec<&str> = objects
        .iter()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap_or(""))
        .collect();
    let many_namespaces = namespaces.windows(2).any(|pair| pair[0] != pair[1]);
    let kind_columns = if one_kind {
        columns(kinds.first().copied().unwrap_or(""))
    } else {
        &["AGE"]
    };
    let mut header: Vec<String> = Vec::new();
    if many_namespaces {
        header.push("NAMESPACE".to_string());
    }
    header.push("NAME".to_string());
    header.extend(kind_columns.iter().map(|c| c.to_string()));
    let mut rows = vec![header];
    for (object, namespace) in objects.iter().zip(&namespaces) {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let mut cells = Vec::new();
        if many_namespaces {
            cells.push(namespace.to_string());
        }
        cells.push(if one_kind {
            name.to_string()
        } else {
            format!(
                "{}/{name}",
                object["kind"].as_str().unwrap_or("").to_ascii_lowercase()
            )
        });
        if one_kind {
            cells.extend(row(object, now));
        } else {
            cells.push(age_of(object, now));
        }
        rows.push(cells);
    }
    crate::text::aligned(&rows, "   ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        humantime::parse_rfc3339("2026-12-04T12:00:00Z").expect("a time")
    }

    fn objects(yaml: &str) -> Vec<Value> {
        serde_norway::from_str(yaml).expect("YAML fixtures")
    }

    #[test]
    fn ages_read_as_kubectls() {
        let ages: Vec<String> = [45, 310, 2520, 12000, 72000, 273600, 2592000, 63936000]
            .iter()
            .map(|s| age(Duration::from_secs(*s)))
            .collect();
        assert_eq!(
            ages,
            [
                "45s", "5m10s", "42m", "3h20m", "20h", "3d4h", "30d", "2y10d"
            ]
        );
    }

    #[test]
    fn pods_show_ready_status_restarts_and_age() {
        let pods = objects(
            r#"
- apiVersion: v1
  kind: Pod
  metadata: {name: gitlab-webservice-7d9, namespace: gitlab, creationTimestamp: "2026-12-04T11:58:00Z"}
  spec: {containers: [{name: webservice}, {name: workhorse}]}
  status:
    phase: Running
    containerStatuses:
    - {name: webservice, ready: true, restartCount: 1, state: {running: {}}}
    - {name: workhorse, ready: true, restartCount: 0, state: {running: {}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: app-5f6, namespace: guestbook, creationTimestamp: "2026-12-04T11:00:00Z"}
  spec: {containers: [{name: app}]}
  status:
    phase: Pending
    containerStatuses:
    - {name: app, ready: false, restartCount: 0, state: {waiting: {reason: ImagePullBackOff}}}
"#,
        );
        assert!(all_objects(&pods));
        assert_eq!(
            render(&pods, now()),
            "NAMESPACE   NAME                    READY   STATUS             RESTARTS   AGE\n\
             gitlab      gitlab-webservice-7d9   2/2     Running            1          2m\n\
             guestbook   app-5f6                 0/1     ImagePullBackOff   0          60m"
        );
    }

    #[test]
    fn workloads_show_their_replicas_and_mixed_kinds_their_kind() {
        let deployments = objects(
            r#"
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: gitlab-runner, namespace: gitlab-runner, creationTimestamp: "2026-12-01T12:00:00Z"}
  spec: {replicas: 1}
  status: {readyReplicas: 1, updatedReplicas: 1, availableReplicas: 1}
"#,
        );
        assert_eq!(
            render(&deployments, now()),
            "NAME            READY   UP-TO-DATE   AVAILABLE   AGE\n\
             gitlab-runner   1/1     1            1           3d"
        );
        let mixed = objects(
            r#"
- {apiVersion: v1, kind: Service, metadata: {name: redis, namespace: redis, creationTimestamp: "2026-12-04T11:59:30Z"}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: redis-conf, namespace: redis}}
"#,
        );
        assert_eq!(
            render(&mixed, now()),
            "NAME                   AGE\n\
             service/redis          30s\n\
             configmap/redis-conf   <unknown>"
        );
        assert!(!all_objects(&[serde_json::json!({"id": 1})]));
    }
}
