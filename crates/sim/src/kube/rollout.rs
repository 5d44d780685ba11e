//! The Deployment controller's bookkeeping, as pure functions: which revision the current
//! ReplicaSet carries (`deployment.kubernetes.io/revision`), which old ReplicaSets stay (scaled
//! to 0, up to `revisionHistoryLimit`) for `kubectl rollout history` and `undo`, the pod
//! template hash, and the `Progressing` condition with its deadline.

use serde_json::{Value, json};
use std::time::{Duration, SystemTime};

pub const REVISION: &str = "deployment.kubernetes.io/revision";

/// A ReplicaSet's revision (0 when it has none).
pub fn revision_of(replica_set: &Value) -> u64 {
    replica_set["metadata"]["annotations"][REVISION]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

/// What the Deployment controller does with a Deployment's ReplicaSets.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// The revision of the current ReplicaSet: its own when it is the newest, else one past
    /// the newest (a new template, or an old one brought back by `rollout undo`).
    pub revision: u64,
    /// Old ReplicaSets kept at 0 replicas, oldest first.
    pub kept: Vec<String>,
    /// Old ReplicaSets beyond `revisionHistoryLimit`: they go.
    pub pruned: Vec<String>,
}

/// Plans the ReplicaSets `owned` by a Deployment whose current template's ReplicaSet is named
/// `current` (it may not exist yet).
pub fn plan(owned: &[Value], current: &str, history_limit: usize) -> Plan {
    let name = |rs: &Value| rs["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut old: Vec<&Value> = owned.iter().filter(|rs| name(rs) != current).collect();
    old.sort_by_key(|rs| (revision_of(rs), name(rs)));
    let newest_old = old.last().map(|rs| revision_of(rs)).unwrap_or(0);
    let revision = match owned.iter().find(|rs| name(rs) == current) {
        Some(rs) if revision_of(rs) > newest_old => revision_of(rs),
        _ => newest_old + 1,
    };
    let cut = old.len().saturating_sub(history_limit);
    Plan {
        revision,
        pruned: old[..cut].iter().map(|rs| name(rs)).collect(),
        kept: old[cut..].iter().map(|rs| name(rs)).collect(),
    }
}

/// A pod template without what a client's round trip through typed objects adds or drops
/// (nulls such as `creationTimestamp: null`, empty maps and lists): the template `rollout undo`
/// writes back hashes as the one it came from.
pub fn normalised(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), normalised(value)))
                .filter(|(_, value)| !is_empty(value))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalised).collect()),
        other => other.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// A short, stable hash of a pod template (`pod-template-hash`), over its normalised form.
pub fn template_hash(template: &Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(normalised(template).to_string().as_bytes());
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    digest
        .iter()
        .take(10)
        .map(|b| alphabet[*b as usize % alphabet.len()] as char)
        .collect()
}

/// One ReplicaSet of a Deployment, as the rolling update sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSetCount {
    pub name: String,
    /// `spec.replicas`.
    pub replicas: u64,
    /// Ready pods (`status.readyReplicas`; minReadySeconds is not modelled, so Ready is available).
    pub available: u64,
}

/// `maxSurge` / `maxUnavailable` of a `RollingUpdate` strategy against `desired` pods: an
/// integer, or a percentage rounded up (surge) or down (unavailable); both 0 means 1 unavailable.
pub fn rolling_bounds(strategy: &Value, desired: u64) -> (u64, u64) {
    let resolve = |value: &Value, round_up: bool| -> u64 {
        match value {
            Value::Number(number) => number.as_u64().unwrap_or(0),
            Value::String(text) => {
                let percent: u64 = text.trim_end_matches('%').parse().unwrap_or(25);
                let scaled = percent * desired;
                if round_up {
                    scaled.div_ceil(100)
                } else {
                    scaled / 100
                }
            }
            _ => {
                if round_up {
                    (25 * desired).div_ceil(100)
                } else {
                    25 * desired / 100
                }
            }
        }
    };
    let rolling = &strategy["rollingUpdate"];
    let surge = resolve(&rolling["maxSurge"], true);
    let unavailable = resolve(&rolling["maxUnavailable"], false);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// One pass of the Deployment controller's rolling update (`rolling.go`): the new ReplicaSet's
/// replicas and the old ones' (oldest first in `old`). It scales the new one up within
/// `desired + maxSurge` pods; only when it did not, it scales old ones down, never below
/// `desired - maxUnavailable` available pods counting the new one's unavailable ones: so an
/// old pod keeps serving until a new one is Ready. `Recreate` drops every old pod first.
pub fn rolling_step(
    strategy: &Value,
    desired: u64,
    new: &ReplicaSetCount,
    old: &[ReplicaSetCount],
) -> (u64, Vec<(String, u64)>) {
    let unchanged: Vec<(String, u64)> = old
        .iter()
        .map(|rs| (rs.name.clone(), rs.replicas))
        .collect();
    if strategy["type"] == "Recreate" {
        let old_gone = old.iter().all(|rs| rs.replicas == 0);
        let scaled_down = old.iter().map(|rs| (rs.name.clone(), 0)).collect();
        return (if old_gone { desired } else { new.replicas }, scaled_down);
    }
    let (surge, unavailable) = rolling_bounds(strategy, desired);
    let old_total: u64 = old.iter().map(|rs| rs.replicas).sum();
    // The new ReplicaSet: straight to `desired` when it is bigger, else up within the surge.
    if new.replicas > desired {
        return (desired, unchanged);
    }
    if new.replicas < desired {
        let total = new.replicas + old_total;
        let ceiling = desired + surge;
        if total < ceiling {
            let up = (ceiling - total).min(desired - new.replicas);
            return (new.replicas + up, unchanged);
        }
    }
    if old_total == 0 {
        return (new.replicas, unchanged);
    }
    let all = new.replicas + old_total;
    let min_available = desired.saturating_sub(unavailable);
    let new_unavailable = new.replicas.saturating_sub(new.available);
    let mut budget = all as i64 - min_available as i64 - new_unavailable as i64;
    let mut scaled: Vec<(String, u64)> = unchanged;
    if budget <= 0 {
        return (new.replicas, scaled);
    }
    // First the old pods that are not Ready anyway, then Ready ones down to the minimum.
    for (index, rs) in old.iter().enumerate() {
        let unhealthy = rs.replicas.saturating_sub(rs.available) as i64;
        let down = unhealthy.min(budget);
        scaled[index].1 -= down as u64;
        budget -= down;
    }
    let available: u64 = new.available
        + old
            .iter()
            .zip(&scaled)
            .map(|(rs, (_, replicas))| rs.available.min(*replicas))
            .sum::<u64>();
    let mut over = available.saturating_sub(min_available);
    for (_, replicas) in scaled.iter_mut() {
        let down = (*replicas).min(over);
        *replicas -= down;
        over -= down;
    }
    (new.replicas, scaled)
}

/// Where a rollout stands.
pub struct Progress<'a> {
    /// The Deployment's status before this pass (its Progressing condition and counts).
    pub previous: &'a Value,
    /// The current ReplicaSet.
    pub replica_set: &'a str,
    /// The status counts of this pass: pods of the current ReplicaSet (`updatedReplicas`), all
    /// pods, Ready ones (of every ReplicaSet), and how many are wanted.
    pub updated: u64,
    pub replicas: u64,
    pub ready: u64,
    pub desired: u64,
    /// `spec.progressDeadlineSeconds`.
    pub deadline: Option<u64>,
    pub now: SystemTime,
}

/// The `Progressing` condition: True while the rollout moves (its lastUpdateTime is the last
/// move: a new ReplicaSet, another pod Ready), True `NewReplicaSetAvailable` once complete,
/// False `ProgressDeadlineExceeded` when nothing moved for `progressDeadlineSeconds`.
pub fn progressing(progress: &Progress<'_>) -> Value {
    let previous = progress.previous["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == "Progressing"))
        .cloned()
        .unwrap_or(Value::Null);
    let now = humantime::format_rfc3339_seconds(progress.now).to_string();
    let message_of = |verb: &str| format!("ReplicaSet \"{}\" {verb}", progress.replica_set);
    let same_rollout = previous["message"]
        .as_str()
        .is_some_and(|m| m.starts_with(&format!("ReplicaSet \"{}\" ", progress.replica_set)));
    // As the Deployment controller sees progress: more updated, Ready pods, or fewer old ones.
    let before = |field: &str| progress.previous[field].as_u64().unwrap_or(0);
    let old_pods = |replicas: u64, updated: u64| replicas.saturating_sub(updated);
    let moved = !same_rollout
        || progress.updated > before("updatedReplicas")
        || progress.ready > before("readyReplicas")
        || old_pods(before("replicas"), before("updatedReplicas"))
            > old_pods(progress.replicas, progress.updated);
    let condition = |status: &str, reason: &str, message: String, updated: &Value| {
        let since = if previous["status"] == status {
            previous["lastTransitionTime"].clone()
        } else {
            json!(now)
        };
        json!({"type": "Progressing", "status": status, "reason": reason, "message": message,
               "lastUpdateTime": updated, "lastTransitionTime": since})
    };
    let complete = progress.updated == progress.desired
        && progress.replicas == progress.desired
        && progress.ready >= progress.desired;
    if complete {
        let updated = if previous["reason"] == "NewReplicaSetAvailable" && same_rollout {
            previous["lastUpdateTime"].clone()
        } else {
            json!(now)
        };
        return condition(
            "True",
            "NewReplicaSetAvailable",
            message_of("has successfully progressed."),
            &updated,
        );
    }
    // A complete rollout whose pods went unready (a node restarted) makes no progress, and
    // never times out: the Deployment controller's DeploymentTimedOut is false while the reason
    // is still NewReplicaSetAvailable.
    if matches!(
        previous["reason"].as_str(),
        Some("ProgressDeadlineExceeded" | "NewReplicaSetAvailable")
    ) && !moved
    {
        return previous;
    }
    let last_move = if moved || previous["lastUpdateTime"].is_null() {
        json!(now)
    } else {
        previous["lastUpdateTime"].clone()
    };
    let overdue = progress.deadline.is_some_and(|seconds| {
        last_move
            .as_str()
            .and_then(|text| humantime::parse_rfc3339(text).ok())
            .is_some_and(|since| since + Duration::from_secs(seconds) <= progress.now)
    });
    if overdue {
        return condition(
            "False",
            "ProgressDeadlineExceeded",
            message_of("has timed out progressing."),
            &json!(now),
        );
    }
    condition(
        "True",
        "ReplicaSetUpdated",
        message_of("is progressing."),
        &last_move,
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_fixtures::documents;
    use super::*;

    #[test]
    fn a_new_template_gets_the_next_revision_and_old_ones_beyond_the_limit_go() {
        let owned = documents("rollout", "replica-sets.yaml");
        assert_eq!(
            plan(&owned, "web-new", 2),
            Plan {
                revision: 4,
                kept: vec!["web-b".into(), "web-c".into()],
                pruned: vec!["web-a".into()]
            }
        );
        // The newest one stays current with its own revision.
        assert_eq!(plan(&owned, "web-c", 10).revision, 3);
        // An old template brought back (rollout undo) becomes the newest revision.
        let undone = plan(&owned, "web-a", 10);
        assert_eq!(undone.revision, 4);
        assert_eq!(undone.kept, vec!["web-b".to_string(), "web-c".to_string()]);
    }

    fn count(name: &str, replicas: u64, available: u64) -> ReplicaSetCount {
        ReplicaSetCount {
            name: name.into(),
            replicas,
            available,
        }
    }

    #[test]
    fn a_rolling_update_keeps_old_pods_until_new_ones_are_ready() {
        let default = json!({"type": "RollingUpdate"});
        // One replica: 25% surges to 1 and leaves 0 unavailable.
        assert_eq!(rolling_bounds(&default, 1), (1, 0));
        assert_eq!(rolling_bounds(&default, 10), (3, 2));
        assert_eq!(
            rolling_bounds(
                &json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}),
                4
            ),
            (0, 1)
        );
        // The new ReplicaSet comes up beside the old one.
        let old = [count("web-old", 1, 1)];
        assert_eq!(
            rolling_step(&default, 1, &count("web-new", 0, 0), &old),
            (1, vec![("web-old".into(), 1)])
        );
        // Its pod never gets Ready: the old one stays.
        assert_eq!(
            rolling_step(&default, 1, &count("web-new", 1, 0), &old),
            (1, vec![("web-old".into(), 1)])
        );
        // Once it is Ready, the old one goes.
        assert_eq!(
            rolling_step(&default, 1, &count("web-new", 1, 1), &old),
            (1, vec![("web-old".into(), 0)])
        );
        // Ten replicas: 3 new at once, then 2 old ones may go while none is Ready.
        let old = [count("web-old", 10, 10)];
        assert_eq!(
            rolling_step(&default, 10, &count("web-new", 0, 0), &old).0,
            3
        );
        assert_eq!(
            rolling_step(&default, 10, &count("web-new", 3, 0), &old),
            (3, vec![("web-old".into(), 8)])
        );
        // Recreate: old pods first, then the new ones.
        let recreate = json!({"type": "Recreate"});
        assert_eq!(
            rolling_step(
                &recreate,
                2,
                &count("web-new", 0, 0),
                &[count("web-old", 2, 2)]
            ),
            (0, vec![("web-old".into(), 0)])
        );
        assert_eq!(
            rolling_step(
                &recreate,
                2,
                &count("web-new", 0, 0),
                &[count("web-old", 0, 0)]
            )
            .0,
            2
        );
    }

    #[test]
    fn a_typed_round_trip_of_a_template_keeps_its_hash() {
        let sent = json!({"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}});
        let round_trip = json!({"metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
                                "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "resources": {}}]}});
        assert_eq!(template_hash(&sent), template_hash(&round_trip));
        let changed = json!({"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}});
        assert_ne!(template_hash(&sent), template_hash(&changed));
    }

    #[test]
    fn a_rollout_that_stops_moving_exceeds_its_deadline() {
        let start = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let first = progressing(&Progress {
            previous: &Value::Null,
            replica_set: "web-x",
            updated: 1,
            replicas: 1,
            ready: 0,
            desired: 1,
            deadline: Some(60),
            now: start,
        });
        assert_eq!(first["reason"], "ReplicaSetUpdated");
        let previous =
            json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 0, "conditions": [first]});
        let later = |seconds: u64| {
            progressing(&Progress {
                previous: &previous,
                replica_set: "web-x",
                updated: 1,
                replicas: 1,
                ready: 0,
                desired: 1,
                deadline: Some(60),
                now: start + Duration::from_secs(seconds),
            })
        };
        assert_eq!(later(30)["status"], "True");
        let overdue = later(61);
        assert_eq!(
            (&overdue["status"], &overdue["reason"], &overdue["message"]),
            (
                &json!("False"),
                &json!("ProgressDeadlineExceeded"),
                &json!("ReplicaSet \"web-x\" has timed out progressing.")
            )
        );
        // Once its pods are Ready, it has progressed.
        let done = progressing(&Progress {
            previous: &json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 0, "conditions": [overdue]}),
            replica_set: "web-x",
            updated: 1,
            replicas: 1,
            ready: 1,
            desired: 1,
            deadline: Some(60),
            now: start + Duration::from_secs(90),
        });
        assert_eq!(
            (&done["status"], &done["reason"]),
            (&json!("True"), &json!("NewReplicaSetAvailable"))
        );
    }

    #[test]
    fn a_complete_rollout_whose_pods_went_unready_never_times_out() {
        let start = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let complete = json!({"type": "Progressing", "status": "True",
                              "reason": "NewReplicaSetAvailable",
                              "message": "ReplicaSet \"web-x\" has successfully progressed.",
                              "lastUpdateTime": "2026-01-01T00:00:00Z",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"});
        let previous = json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                              "conditions": [complete]});
        // An hour on, its pod restarted and is not Ready yet: still the complete rollout.
        let restarted = progressing(&Progress {
            previous: &previous,
            replica_set: "web-x",
            updated: 1,
            replicas: 1,
            ready: 0,
            desired: 1,
            deadline: Some(600),
            now: start + Duration::from_secs(3600),
        });
        assert_eq!(restarted, complete);
    }
}
