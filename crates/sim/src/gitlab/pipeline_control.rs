//! What a person does to a pipeline after it started, as GitLab's API answers it
//! (`lib/api/ci/jobs.rb`, `lib/api/ci/pipelines.rb`): retry, cancel or play a job; retry or
//! cancel a pipeline.
//!
//! A canceled job that the simulator's runner really executes keeps its process until the
//! script ends; its status stays `canceled` and nothing a client reads shows the difference.

use super::pipelines::Job;
use super::{GitlabSim, State, message, not_found};
use crate::http::SimResponse;

/// The statuses GitLab may cancel (`Ci::HasStatus::CANCELABLE_STATUSES`, those modelled here).
const CANCELABLE: &[&str] = &["created", "pending", "running"];
/// The statuses a job may be retried from (`Ci::Build#retryable?`).
const RETRYABLE: &[&str] = &["success", "failed", "canceled"];

/// What a control request does to one job.
enum JobAction {
    Retry,
    Cancel,
    Play,
}

/// The new attempt of `job`: the same job, not yet taken by a runner.
fn retry_of(job: &Job, id: u64) -> Job {
    Job {
        id,
        picked_ms: None,
        runner_id: None,
        executes: false,
        outcome: None,
        canceled: false,
        retried: None,
        ..job.clone()
    }
}

impl GitlabSim {
    /// The pipeline of project `project` holding job `job` (a latest attempt), and its index.
    fn job_position(state: &State, project: &str, job: &str) -> Option<(u64, usize)> {
        let project = Self::find_project(state, project)?;
        let job = job.parse::<u64>().ok()?;
        state
            .pipelines
            .values()
            .filter(|pipeline| pipeline.project_id == project)
            .find_map(|pipeline| {
                pipeline
                    .jobs
                    .iter()
                    .position(|candidate| candidate.id == job)
                    .map(|index| (pipeline.id, index))
            })
    }

    /// Retries the job at `index`: it keeps its status and a new attempt follows it.
    fn retry_job_at(state: &mut State, pipeline: u64, index: usize, status: &str) -> Option<u64> {
        let id = state.id();
        let pipeline = state.pipelines.get_mut(&pipeline)?;
        let retry = retry_of(&pipeline.jobs[index], id);
        pipeline.jobs[index].retried = Some(status.to_string());
        pipeline.jobs.insert(index + 1, retry);
        Some(id)
    }

    fn job_answer(&self, state: &State, pipeline: u64, job: u64, status: u16) -> SimResponse {
        let Some(pipeline) = state.pipelines.get(&pipeline) else {
            return not_found("Job");
        };
        let (_, statuses) = self.pipeline_status(pipeline);
        match pipeline
            .jobs
            .iter()
            .position(|candidate| candidate.id == job)
        {
            Some(index) => SimResponse::json(
                status,
                &self.job_json(state, pipeline, &pipeline.jobs[index], &statuses[index]),
            ),
            None => not_found("Job"),
        }
    }

    fn control_job(&self, project: &str, job: &str, action: JobAction) -> SimResponse {
        let mut state = self.lock();
        let Some((pipeline_id, index)) = Self::job_position(&state, project, job) else {
            return not_found("Job");
        };
        let pipeline = &state.pipelines[&pipeline_id];
        let status = self.pipeline_status(pipeline).1[index].clone();
        let current = &pipeline.jobs[index];
        let job_id = current.id;
        let (answered, code) = match action {
            JobAction::Retry => {
                if current.retried.is_some() || !RETRYABLE.contains(&status.as_str()) {
                    return message(403, "403 Forbidden - Job is not retryable");
                }
                match Self::retry_job_at(&mut state, pipeline_id, index, &status) {
                    Some(new_id) => (new_id, 201),
                    None => return not_found("Job"),
                }
            }
            JobAction::Cancel => {
                // Not cancelable: GitLab answers with the job as it is.
                if current.retried.is_none()
                    && CANCELABLE.contains(&status.as_str())
                    && let Some(job) = state
                        .pipelines
                        .get_mut(&pipeline_id)
                        .and_then(|pipeline| pipeline.jobs.get_mut(index))
                {
                    job.canceled = true;
                }
                (job_id, 201)
            }
            JobAction::Play => {
                // `playable?`: a manual job waiting for a person, or one that ended (played
                // again, it is retried).
                let manual = current.when == "manual" && current.retried.is_none();
                if manual && status == "manual" {
                    if let Some(job) = state
                        .pipelines
                        .get_mut(&pipeline_id)
                        .and_then(|pipeline| pipeline.jobs.get_mut(index))
                    {
                        job.played = true;
                    }
                    (job_id, 200)
                } else if manual && RETRYABLE.contains(&status.as_str()) {
                    match Self::retry_job_at(&mut state, pipeline_id, index, &status) {
                        Some(new_id) => (new_id, 200),
                        None => return not_found("Job"),
                    }
                } else {
                    return message(400, "400 Bad request - Unplayable Job");
                }
            }
        };
        let answer = self.job_answer(&state, pipeline_id, answered, code);
        drop(state);
        self.persist();
        answer
    }

    /// `GET /projects/:id/jobs/:job`.
    pub(super) fn job(&self, project: &str, job: &str) -> SimResponse {
        let state = self.lock();
        match Self::job_position(&state, project, job) {
            Some((pipeline, index)) => {
                let id = state.pipelines[&pipeline].jobs[index].id;
                self.job_answer(&state, pipeline, id, 200)
            }
            None => not_found("Job"),
        }
    }

    /// `POST /projects/:id/jobs/:job/retry`.
    pub(super) fn retry_job(&self, project: &str, job: &str) -> SimResponse {
        self.control_job(project, job, JobAction::Retry)
    }

    /// `POST /projects/:id/jobs/:job/cancel`.
    pub(super) fn cancel_job(&self, project: &str, job: &str) -> SimResponse {
        self.control_job(project, job, JobAction::Cancel)
    }

    /// `POST /projects/:id/jobs/:job/play`.
    pub(super) fn play_job(&self, project: &str, job: &str) -> SimResponse {
        self.control_job(project, job, JobAction::Play)
    }

    /// `POST /projects/:id/pipelines/:pipeline/retry`: every failed or canceled job gets a new
    /// attempt (the jobs skipped after them run again once it succeeds). 201 with the pipeline.
    pub(super) fn retry_pipeline(&self, project: &str, pipeline: &str) -> SimResponse {
        let mut state = self.lock();
        let Some(pipeline_id) = self.pipeline_of(&state, project, pipeline).map(|p| p.id) else {
            return not_found("Pipeline");
        };
        let statuses = self.pipeline_status(&state.pipelines[&pipeline_id]).1;
        // From the last to the first, so each index still points at its job.
        let jobs = &state.pipelines[&pipeline_id].jobs;
        let retried: Vec<(usize, String)> = (0..jobs.len())
            .rev()
            .filter(|&index| {
                jobs[index].retried.is_none()
                    && matches!(statuses[index].as_str(), "failed" | "canceled")
            })
            .map(|index| (index, statuses[index].clone()))
            .collect();
        for (index, status) in retried {
            Self::retry_job_at(&mut state, pipeline_id, index, &status);
        }
        let answer = self.pipeline_answer(&state, pipeline_id, 201);
        drop(state);
        self.persist();
        answer
    }

    /// `POST /projects/:id/pipelines/:pipeline/cancel`: every job still to run or running is
    /// canceled (manual ones wait on). 200 with the pipeline.
    pub(super) fn cancel_pipeline(&self, project: &str, pipeline: &str) -> SimResponse {
        let mut state = self.lock();
        let Some(pipeline_id) = self.pipeline_of(&state, project, pipeline).map(|p| p.id) else {
            return not_found("Pipeline");
        };
        let statuses = self.pipeline_status(&state.pipelines[&pipeline_id]).1;
        if let Some(pipeline) = state.pipelines.get_mut(&pipeline_id) {
            for (job, status) in pipeline.jobs.iter_mut().zip(&statuses) {
                if job.retried.is_none() && CANCELABLE.contains(&status.as_str()) {
                    job.canceled = true;
                }
            }
        }
        let answer = self.pipeline_answer(&state, pipeline_id, 200);
        drop(state);
        self.persist();
        answer
    }

    fn pipeline_answer(&self, state: &State, pipeline: u64, status: u16) -> SimResponse {
        match state.pipelines.get(&pipeline) {
            Some(found) => SimResponse::json(status, &self.pipeline_json(state, found)),
            None => not_found("Pipeline"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_retry_is_the_same_job_not_yet_taken() {
        let job: Job = serde_json::from_value(json!({
            "id": 7, "name": "build", "stage": "build", "script": ["make"],
            "picked_ms": 10, "runner_id": 3, "executes": true, "canceled": true
        }))
        .expect("a job");
        let retry = retry_of(&job, 9);
        assert_eq!(
            (
                retry.id,
                retry.name.as_str(),
                retry.picked_ms,
                retry.runner_id,
                retry.executes,
                retry.canceled
            ),
            (9, "build", None, None, false, false)
        );
    }
}
