//! Pods that run to completion and the Job controller, as pure functions: a pod whose
//! `restartPolicy` is `Never` or `OnFailure` ends `Succeeded` once it can run (or `Failed` with
//! the behaviour annotation `fail`), so `helm test` and hook Jobs finish; a Job runs pods until
//! `completions` succeed, or fails once more than `backoffLimit` have failed.

use serde_json::{Value, json};

/// Whether a pod runs to completion rather than forever.
pub fn runs_to_completion(pod: &Value) -> bool {
    matches!(
        pod["spec"]["restartPolicy"].as_str(),
        Some("Never" | "OnFailure")
    )
}

/// The status of a pod whose containers ran and exited (code 1 when `failed`).
pub fn finished_status(pod: &Value, failed: bool, index: usize, now: &str) -> Value {
    let (code, reason) = if failed {
        (1, "Error")
    } else {
        (0, "Completed")
    };
    let statuses = super::kubelet::started_containers(
        pod,
        false,
        &json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now}}),
    );
    json!({
        "phase": if failed { "Failed" } else { "Succeeded" },
        "qosClass": "BestEffort", "hostIP": "172.18.0.2",
        "podIP": format!("10.244.0.{}", index % 250 + 2), "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "reason": "PodCompleted", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
            {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
        ],
        "containerStatuses": statuses
    })
}

/// The status of a pod whose script containers ended with `exits` (the others exited 0): the
/// real exit codes, `Completed` or `Error`, and as the message the log's end when the container
/// asks for it (`terminationMessagePolicy: FallbackToLogsOnError`) and failed.
pub fn exited_status(
    pod: &Value,
    exits: &std::collections::BTreeMap<String, super::runtime::Exit>,
    index: usize,
    now: &str,
) -> Value {
    let failed = exits.values().any(|exit| exit.code != 0);
    let mut status = finished_status(pod, failed, index, now);
    let policies: std::collections::BTreeMap<&str, &str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some((
                c["name"].as_str()?,
                c["terminationMessagePolicy"].as_str().unwrap_or("File"),
            ))
        })
        .collect();
    if let Some(statuses) = status["containerStatuses"].as_array_mut() {
        for container in statuses {
            let name = container["name"].as_str().unwrap_or("").to_string();
            let exit = exits.get(&name);
            let code = exit.map_or(0, |exit| exit.code);
            let terminated = &mut container["state"]["terminated"];
            terminated["exitCode"] = json!(code);
            terminated["reason"] = json!(if code == 0 { "Completed" } else { "Error" });
            if let Some(exit) = exit.filter(|exit| exit.code != 0)
                && policies.get(name.as_str()) == Some(&"FallbackToLogsOnError")
            {
                let tail: Vec<&str> = exit.log.lines().rev().take(80).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                terminated["message"] = json!(tail.join("\n"));
            }
        }
    }
    status
}

/// What the Job controller does next.
#[derive(Debug, PartialEq)]
pub enum JobStep {
    /// Start another pod.
    StartPod,
    /// Pods are running: wait.
    Wait,
    /// Done: these conditions end the Job.
    Finished,
}

/// The Job's status and next step, from its pods (those it owns).
pub fn job(job: &Value, pods: &[Value], now: &str) -> (Value, JobStep) {
    let completions = job["spec"]["completions"].as_u64().unwrap_or(1);
    let backoff_limit = job["spec"]["backoffLimit"].as_u64().unwrap_or(6);
    let phase = |pod: &Value| {
        pod["status"]["phase"]
            .as_str()
            .unwrap_or("Pending")
            .to_string()
    };
    let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as u64;
    let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as u64;
    let active = pods.len() as u64 - succeeded - failed;
    let ready = pods
        .iter()
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .count();
    let start = job["status"]["startTime"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| now.to_string());
    let mut status = json!({"startTime": start, "active": active, "ready": ready, "terminating": 0,
                            "uncountedTerminatedPods": {}});
    if succeeded > 0 {
        status["succeeded"] = json!(succeeded);
    }
    if failed > 0 {
        status["failed"] = json!(failed);
    }
    let keep = |kind: &str| {
        job["status"]["conditions"]
            .as_array()
            .and_then(|list| list.iter().find(|c| c["type"] == kind))
            .map(|c| c["lastTransitionTime"].clone())
            .unwrap_or_else(|| json!(now))
    };
    if succeeded >= completions {
        let since = keep("Complete");
        status["completionTime"] = job["status"]["completionTime"]
            .as_str()
            .map(|t| json!(t))
            .unwrap_or_else(|| json!(now));
        status["conditions"] = json!([
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastProbeTime": since, "lastTransitionTime": since},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastProbeTime": since, "lastTransitionTime": since}
        ]);
        return (status, JobStep::Finished);
    }
    if failed > backoff_limit {
        let since = keep("Failed");
        status["conditions"] = json!([
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastProbeTime": since, "lastTransitionTime": since},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastProbeTime": since, "lastTransitionTime": since}
        ]);
        return (status, JobStep::Finished);
    }
    let step = if active == 0 {
        JobStep::StartPod
    } else {
        JobStep::Wait
    };
    (status, step)
}

#[cfg(test)]
mod tests {
    use super::super::test_fixtures::documents;
    use super::*;

    #[test]
    fn pods_that_run_to_completion_end_succeeded_or_failed() {
        let documents = documents("batch", "job.yaml");
        let pod = &documents[1];
        assert!(runs_to_completion(pod));
        let done = finished_status(pod, false, 0, "t");
        assert_eq!(done["phase"], "Succeeded");
        assert_eq!(
            done["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        let failed = finished_status(pod, true, 0, "t");
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(
            failed["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            1
        );
        assert!(!runs_to_completion(&json!({"spec": {}})));
    }

    #[test]
    fn a_job_completes_with_its_pods_or_fails_past_its_backoff_limit() {
        let documents = documents("batch", "job.yaml");
        let (job_object, pods) = (&documents[0], &documents[1..]);
        let (status, step) = job(job_object, &[], "t");
        assert_eq!((step, &status["active"]), (JobStep::StartPod, &json!(0)));
        let (status, step) = job(job_object, &pods[..1], "t");
        assert_eq!((step, &status["active"]), (JobStep::Wait, &json!(1)));
        // One failure (backoffLimit 1): try again; a success completes the Job.
        let (_, step) = job(job_object, &pods[2..3], "t");
        assert_eq!(step, JobStep::StartPod);
        let (status, step) = job(job_object, &pods[1..3], "t");
        assert_eq!(step, JobStep::Finished);
        assert_eq!(status["conditions"][1]["type"], "Complete");
        assert_eq!(
            (&status["succeeded"], &status["failed"]),
            (&json!(1), &json!(1))
        );
        let (status, step) = job(job_object, &[pods[2].clone(), pods[2].clone()], "t");
        assert_eq!(step, JobStep::Finished);
        assert_eq!(status["conditions"][1]["reason"], "BackoffLimitExceeded");
    }
}
