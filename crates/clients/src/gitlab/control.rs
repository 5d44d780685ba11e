//! What a person does to a pipeline after it started: retry, cancel or play a job; retry or
//! cancel a pipeline. Each reads first and asks GitLab only when the request would change
//! something, so a second call changes nothing (a job already retried answers with its newest
//! attempt; a pipeline with nothing left to cancel is left alone).

use serde_json::Value;

use super::reads::JOB_FIELDS;
use super::{GitlabClient, Method, encode};
use crate::error::{ClientError, ErrorKind, Remedy};
use crate::reconcile::{Mode, Outcome};

/// What to do to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobAction {
    /// Run a job that ended (success, failed, canceled) again, as a new job.
    Retry,
    /// Stop a job that has not ended.
    Cancel,
    /// Start a manual job.
    Play,
}

/// What to do to a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineAction {
    /// Retry its failed and canceled jobs.
    Retry,
    /// Cancel the jobs that have not ended.
    Cancel,
}

/// The job statuses GitLab may cancel.
const CANCELABLE: &[&str] = &[
    "created",
    "waiting_for_resource",
    "preparing",
    "pending",
    "running",
    "scheduled",
];
/// The statuses a job ends in that a retry may start again.
const RETRYABLE: &[&str] = &["success", "failed", "canceled"];

fn status_of(item: &Value) -> &str {
    item["status"].as_str().unwrap_or("")
}

fn job_shown(job: &Value, project: &str) -> String {
    format!(
        "job #{} ({}) of {project}",
        job["id"],
        job["name"].as_str().unwrap_or("?")
    )
}

/// What a job request does, decided from what GitLab says of the job and of the newest
/// attempts of its pipeline's jobs.
#[derive(Debug, Clone, PartialEq)]
enum Plan {
    /// Ask GitLab.
    Send,
    /// Nothing to do: answer with this job.
    Answer(Value),
    /// Nothing to do, which may surprise: a job to play that does not wait for a person.
    NotWaiting(Value),
}

fn job_plan(action: JobAction, job: &Value, latest: &[Value]) -> Result<Plan, String> {
    let status = status_of(job);
    // A newer attempt of the same job: this one was retried already.
    let newer = latest
        .iter()
        .filter(|other| other["name"] == job["name"] && other["id"].as_i64() > job["id"].as_i64())
        .max_by_key(|other| other["id"].as_i64());
    match action {
        JobAction::Retry => match newer {
            Some(attempt) => Ok(Plan::Answer(attempt.clone())),
            None if RETRYABLE.contains(&status) => Ok(Plan::Send),
            None => Err(format!(
                "it is {status}: only a job that ended (success, failed, canceled) can be retried"
            )),
        },
        JobAction::Cancel if CANCELABLE.contains(&status) => Ok(Plan::Send),
        JobAction::Cancel => Ok(Plan::Answer(job.clone())),
        JobAction::Play => match (status, newer) {
            ("manual", None) => Ok(Plan::Send),
            (_, Some(attempt)) => Ok(Plan::Answer(attempt.clone())),
            ("skipped", None) => {
                Err("it is skipped: a job the pipeline skipped cannot be played".to_string())
            }
            // GitLab's job answer does not say whether a job was manual: one that no longer
            // waits was played already, or never waited for a person.
            (_, None) => Ok(Plan::NotWaiting(job.clone())),
        },
    }
}

impl GitlabClient {
    fn latest_jobs(
        &self,
        project: &str,
        pipeline: &Value,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let Some(pipeline) = pipeline.as_i64() else {
            return Ok(Vec::new());
        };
        self.get_all(
            &format!("projects/{}/pipelines/{pipeline}/jobs", encode(project)),
            cancelled,
        )
    }

    /// Retries, cancels or plays job `job` of `project`; the value is the job as it stands
    /// after (for a retry, the new attempt), with the fields a person reads.
    pub fn control_job(
        &self,
        project: &str,
        job: i64,
        action: JobAction,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<Value>, ClientError> {
        let job_path = format!("projects/{}/jobs/{job}", encode(project));
        let current = self.get(&job_path, cancelled)?;
        // A cancel needs only the job; a retry or play looks for a newer attempt of it.
        let latest = match action {
            JobAction::Cancel => Vec::new(),
            JobAction::Retry | JobAction::Play => {
                self.latest_jobs(project, &current["pipeline"]["id"], cancelled)?
            }
        };
        let shown = job_shown(&current, project);
        let (verb, path) = match action {
            JobAction::Retry => ("retry", format!("{job_path}/retry")),
            JobAction::Cancel => ("cancel", format!("{job_path}/cancel")),
            JobAction::Play => ("play", format!("{job_path}/play")),
        };
        match job_plan(action, &current, &latest) {
            Ok(Plan::Send) => {}
            Ok(Plan::Answer(answer)) => {
                return Ok(Outcome::unchanged(super::reads::pick(&answer, JOB_FIELDS)));
            }
            Ok(Plan::NotWaiting(answer)) => {
                return Ok(
                    Outcome::unchanged(super::reads::pick(&answer, JOB_FIELDS)).warn(format!(
                        "{shown} is {}, not waiting to be played: left as it is",
                        status_of(&current)
                    )),
                );
            }
            Err(why) => {
                let error = ClientError::new(format!("gitlab: cannot {verb} {shown}: {why}"))
                    .with_kind(ErrorKind::Invalid);
                return Err(match action {
                    JobAction::Retry => error
                        .with_hint("wait for it to end, or cancel it first")
                        .with_remedy(Remedy::AwaitJob),
                    JobAction::Cancel => error.with_hint("a job that ended needs no cancel"),
                    JobAction::Play => error
                        .with_hint("the pipeline's jobs list shows each job's status; a manual job shows `manual`")
                        .with_remedy(Remedy::ListJobs),
                });
            }
        }
        if !mode.writes() {
            return Ok(Outcome::changed_by(
                super::reads::pick(&current, JOB_FIELDS),
                verb,
                "job",
                shown.clone(),
                shown,
            ));
        }
        // A retry's POST is not sent twice: after an ambiguous failure, a newer attempt of the
        // job in its pipeline says it was taken.
        let read_back = || -> Result<Option<Value>, ClientError> {
            let latest = self.latest_jobs(project, &current["pipeline"]["id"], cancelled)?;
            Ok(match job_plan(JobAction::Retry, &current, &latest) {
                Ok(Plan::Answer(attempt)) => Some(attempt),
                _ => None,
            })
        };
        let back: Option<&dyn Fn() -> Result<Option<Value>, ClientError>> = match action {
            JobAction::Retry => Some(&read_back),
            // Cancel and play read back as the job's own status.
            JobAction::Cancel | JobAction::Play => None,
        };
        let answer = self.request(Method::Post, &path, None, back, cancelled)?;
        Ok(Outcome::changed_by(
            super::reads::pick(&answer.body, JOB_FIELDS),
            verb,
            "job",
            shown.clone(),
            shown,
        ))
    }

    /// Retries the failed and canceled jobs of pipeline `pipeline` of `project`, or cancels
    /// the jobs that have not ended; the value is the pipeline as GitLab answers after.
    pub fn control_pipeline(
        &self,
        project: &str,
        pipeline: i64,
        action: PipelineAction,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<Value>, ClientError> {
        let pipeline_path = format!("projects/{}/pipelines/{pipeline}", encode(project));
        let current = self.get(&pipeline_path, cancelled)?;
        let jobs = self.latest_jobs(project, &current["id"], cancelled)?;
        let (verb, path, wanted): (&'static str, String, &[&str]) = match action {
            PipelineAction::Retry => (
                "retry",
                format!("{pipeline_path}/retry"),
                &["failed", "canceled"],
            ),
            PipelineAction::Cancel => ("cancel", format!("{pipeline_path}/cancel"), CANCELABLE),
        };
        let touched: Vec<String> = jobs
            .iter()
            .filter(|job| wanted.contains(&status_of(job)))
            .map(|job| job["name"].as_str().unwrap_or("?").to_string())
            .collect();
        let pick = |value: &Value| super::reads::pick(value, super::reads::PIPELINE_FIELDS);
        if touched.is_empty() {
            return Ok(Outcome::unchanged(pick(&current)));
        }
        let shown = format!("pipeline #{pipeline} of {project} ({})", touched.join(", "));
        if !mode.writes() {
            return Ok(Outcome::changed_by(
                pick(&current),
                verb,
                "pipeline",
                shown.clone(),
                shown,
            ));
        }
        // Both are idempotent on GitLab's side (a second retry finds nothing failed, a second
        // cancel nothing running), so an ambiguous failure may be sent again.
        let answer = self.request(
            Method::Post,
            &path,
            None,
            Some(&|| {
                let jobs = self.latest_jobs(project, &current["id"], cancelled)?;
                let done = !jobs.iter().any(|job| wanted.contains(&status_of(job)));
                Ok(done.then(|| current.clone()))
            }),
            cancelled,
        )?;
        Ok(Outcome::changed_by(
            pick(&answer.body),
            verb,
            "pipeline",
            shown.clone(),
            shown,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_request_is_sent_only_when_it_would_change_the_job() {
        let failed = json!({"id": 5, "name": "build", "status": "failed"});
        let retry = json!({"id": 9, "name": "build", "status": "pending"});
        // Retried already: the newest attempt is the answer.
        assert_eq!(
            job_plan(JobAction::Retry, &failed, std::slice::from_ref(&retry)),
            Ok(Plan::Answer(retry.clone()))
        );
        assert_eq!(
            job_plan(JobAction::Retry, &failed, std::slice::from_ref(&failed)),
            Ok(Plan::Send)
        );
        assert_eq!(
            job_plan(JobAction::Retry, &retry, std::slice::from_ref(&retry)),
            Err(
                "it is pending: only a job that ended (success, failed, canceled) can be retried"
                    .to_string()
            )
        );
        assert_eq!(job_plan(JobAction::Cancel, &retry, &[]), Ok(Plan::Send));
        assert_eq!(
            job_plan(JobAction::Cancel, &failed, &[]),
            Ok(Plan::Answer(failed.clone()))
        );
        let manual = json!({"id": 6, "name": "deploy", "status": "manual"});
        assert_eq!(job_plan(JobAction::Play, &manual, &[]), Ok(Plan::Send));
        let played = json!({"id": 6, "name": "deploy", "status": "pending"});
        assert_eq!(
            job_plan(JobAction::Play, &played, &[]),
            Ok(Plan::NotWaiting(played.clone()))
        );
        let skipped = json!({"id": 7, "name": "test", "status": "skipped"});
        assert_eq!(
            job_plan(JobAction::Play, &skipped, &[]),
            Err("it is skipped: a job the pipeline skipped cannot be played".to_string())
        );
    }
}
