//! Pipelines and their jobs: created by the API or by a push, their statuses over time, traces.

use super::ci;
use super::{
    GitlabSim, State, field_errors, message, not_found, now_ms, param_error, sha_of, string_field,
    timestamp,
};
use crate::http::{SimRequest, SimResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Job {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) stage: String,
    pub(super) script: Vec<String>,
    /// The job's `tags:`: only a runner carrying all of them may take it.
    #[serde(default)]
    pub(super) tags: Vec<String>,
    /// When a runner took the job (its `POST /jobs/request`), and which one.
    #[serde(default)]
    pub(super) picked_ms: Option<u64>,
    #[serde(default)]
    pub(super) runner_id: Option<u64>,
    /// `on_success`, `always` or `manual` (manual jobs wait for a person: never run here).
    #[serde(default)]
    pub(super) when: String,
    /// Image, scripts, YAML variables, timeout (see `ci::jobs`).
    #[serde(default)]
    pub(super) run: ci::JobRun,
    /// The runner runs it for real (its image is known): it ends when its script does.
    #[serde(default)]
    pub(super) executes: bool,
    #[serde(default)]
    pub(super) outcome: Option<crate::gitlab::ci::jobs::Outcome>,
    /// Canceled through the API (the job or its pipeline): `canceled` whatever it did after.
    #[serde(default)]
    pub(super) canceled: bool,
    /// A manual job a person started (`POST .../jobs/:id/play`): it runs as any other now.
    #[serde(default)]
    pub(super) played: bool,
    /// Retried: its status as it was then, and no longer part of the pipeline's progress (the
    /// retry, a new job right after it, is); GitLab's job lists leave it out.
    #[serde(default)]
    pub(super) retried: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Pipeline {
    pub(super) id: u64,
    pub(super) iid: u64,
    pub(super) project_id: u64,
    pub(super) reference: String,
    pub(super) sha: String,
    pub(super) created_ms: u64,
    pub(super) created_at: String,
    pub(super) jobs: Vec<Job>,
    /// `api` or `push`.
    #[serde(default)]
    pub(super) source: String,
    /// A push pipeline whose configuration is invalid is created failed, with these errors.
    #[serde(default)]
    pub(super) yaml_errors: Option<String>,
    /// A push whose head commit says `[skip ci]` (or `[ci skip]`) gets a pipeline that is
    /// `skipped` at once, without jobs (GitLab's `Chain::Skip`).
    #[serde(default)]
    pub(super) skipped: bool,
    /// Pipeline variables given when it was created (`POST /projects/:id/pipeline` with
    /// `variables`): above every other variable in its jobs, as in GitLab.
    #[serde(default)]
    pub(super) variables: Vec<PipelineVariable>,
}

/// A variable a pipeline was created with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PipelineVariable {
    pub(super) key: String,
    pub(super) value: String,
    /// `env_var` or `file`.
    pub(super) variable_type: String,
}

/// The `variables` of a pipeline creation, as Grape validates them: an array of hashes, each
/// with a `key` and a `value`.
fn pipeline_variables(body: &Value) -> Result<Vec<PipelineVariable>, String> {
    let Some(list) = body.get("variables") else {
        return Ok(Vec::new());
    };
    let Some(items) = list.as_array() else {
        return Err("variables is invalid".into());
    };
    let mut variables = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let field = |name: &str| string_field(item, name);
        let Some(key) = field("key") else {
            return Err(format!("variables[{index}][key] is missing"));
        };
        let Some(value) = field("value") else {
            return Err(format!("variables[{index}][value] is missing"));
        };
        let variable_type = field("variable_type").unwrap_or_else(|| "env_var".into());
        if !matches!(variable_type.as_str(), "env_var" | "file") {
            return Err(format!(
                "variables[{index}][variable_type] does not have a valid value"
            ));
        }
        variables.push(PipelineVariable {
            key,
            value,
            variable_type,
        });
    }
    Ok(variables)
}

/// The project-scoped id of the project's next pipeline.
fn next_iid(state: &State, project_id: u64) -> u64 {
    state
        .pipelines
        .values()
        .filter(|p| p.project_id == project_id)
        .count() as u64
        + 1
}

/// GitLab's `Chain::Skip::SKIP_PATTERN`: `[ci skip]`, `[skip ci]`, with ` `, `_` or `-`, any case.
pub(super) fn skips_ci(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    ["ci", "skip"].iter().any(|first| {
        let second = if *first == "ci" { "skip" } else { "ci" };
        [' ', '_', '-']
            .iter()
            .any(|sep| lower.contains(&format!("[{first}{sep}{second}]")))
    })
}

impl GitlabSim {
    /// `GET /projects/:id/pipelines/latest`: the newest pipeline of `ref`'s head.
    pub(super) fn latest_pipeline(&self, request: &SimRequest, id: &str) -> SimResponse {
        let state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let full = Self::project_path(&state, &state.projects[&project]);
        let reference = request
            .query
            .get("ref")
            .cloned()
            .or_else(|| state.projects[&project].default_branch.clone())
            .unwrap_or_default();
        let head = self.repos.head(&full, &reference);
        // GitLab authorizes reading the (missing) pipeline: 403 when there is none.
        match state.pipelines.values().rev().find(|p| {
            p.project_id == project && p.reference == reference && Some(&p.sha) == head.as_ref()
        }) {
            Some(found) => SimResponse::json(200, &self.pipeline_json(&state, found)),
            None => message(403, "403 Forbidden"),
        }
    }

    /// `GET /projects/:id/pipelines`, newest first.
    pub(super) fn list_pipelines(&self, request: &SimRequest, id: &str) -> SimResponse {
        let state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        // GitLab filters the list by `ref`, `status` and `source` when asked.
        let wanted = |key: &str, value: &str| request.query.get(key).is_none_or(|v| v == value);
        let items = state
            .pipelines
            .values()
            .rev()
            .filter(|p| {
                p.project_id == project
                    && wanted("ref", &p.reference)
                    && wanted("source", &p.source)
            })
            .map(|p| self.pipeline_json(&state, p))
            .filter(|json| wanted("status", json["status"].as_str().unwrap_or("")))
            .collect();
        drop(state);
        self.paginate(request, items)
    }

    /// `GET /projects/:id/pipelines/:pipeline`.
    pub(super) fn pipeline(&self, id: &str, pipeline: &str) -> SimResponse {
        let state = self.lock();
        if Self::find_project(&state, id).is_none() {
            return not_found("Project");
        }
        match self.pipeline_of(&state, id, pipeline) {
            Some(found) => SimResponse::json(200, &self.pipeline_json(&state, found)),
            None => not_found("Pipeline"),
        }
    }

    /// `GET /projects/:id/pipelines/:pipeline/variables`: what it was created with.
    pub(super) fn pipeline_variables_of(&self, id: &str, pipeline: &str) -> SimResponse {
        let state = self.lock();
        match self.pipeline_of(&state, id, pipeline) {
            Some(found) => SimResponse::json(
                200,
                &Value::Array(
                    found
                        .variables
                        .iter()
                        .map(|v| json!({"variable_type": v.variable_type, "key": v.key, "value": v.value}))
                        .collect(),
                ),
            ),
            None => not_found("Pipeline"),
        }
    }

    /// `GET /projects/:id/pipelines/:pipeline/jobs`.
    pub(super) fn pipeline_jobs(
        &self,
        request: &SimRequest,
        id: &str,
        pipeline: &str,
    ) -> SimResponse {
        let state = self.lock();
        let Some(found) = self.pipeline_of(&state, id, pipeline) else {
            return not_found("Pipeline");
        };
        let (_, statuses) = self.pipeline_status(found);
        // GitLab leaves retried jobs out unless asked (`include_retried=true`).
        let include_retried = request
            .query
            .get("include_retried")
            .is_some_and(|v| v == "true");
        let items = found
            .jobs
            .iter()
            .zip(statuses)
            .filter(|(job, _)| include_retried || job.retried.is_none())
            .map(|(job, status)| self.job_json(&state, found, job, &status))
            .collect();
        drop(state);
        self.paginate(request, items)
    }

    /// A job as GitLab's jobs API shows it (the fields bprun and its tests read).
    pub(super) fn job_json(
        &self,
        state: &State,
        pipeline: &Pipeline,
        job: &Job,
        status: &str,
    ) -> Value {
        let runner = job
            .runner_id
            .and_then(|id| state.runners.get(&id))
            .map(|runner| self.runner_json(runner, false));
        json!({"id": job.id, "name": job.name, "stage": job.stage, "status": status,
               "tag_list": job.tags, "runner": runner,
               "pipeline": {"id": pipeline.id, "status": self.pipeline_status(pipeline).0},
               "web_url": format!("{}/-/jobs/{}", self.base_url(), job.id)})
    }

    /// `GET /projects/:id/jobs/:job/trace`.
    pub(super) fn job_trace_of(&self, id: &str, job: &str) -> SimResponse {
        let state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let job_id = job.parse::<u64>().unwrap_or(0);
        for pipeline in state.pipelines.values().filter(|p| p.project_id == project) {
            if let Some(index) = pipeline.jobs.iter().position(|j| j.id == job_id) {
                let (_, statuses) = self.pipeline_status(pipeline);
                return SimResponse::text(
                    200,
                    &Self::job_trace(&pipeline.jobs[index], &statuses[index]),
                );
            }
        }
        not_found("Job")
    }

    /// A job fails when its script has `exit N` with N other than 0 (the tests' convention).
    pub(super) fn fails(job: &Job) -> bool {
        job.script
            .iter()
            .any(|line| line.trim().starts_with("exit ") && line.trim() != "exit 0")
    }

    /// Each job's status at `now`. Stages run in order; a job runs once a runner took it (its
    /// `POST /jobs/request`) and ends after its share of `pipeline_seconds`. A job no runner
    /// took is `pending` when its stage is reached, `created` before; after a failed stage the
    /// remaining jobs are `skipped`.
    pub(super) fn job_statuses(&self, pipeline: &Pipeline, now: u64) -> Vec<String> {
        let jobs = &pipeline.jobs;
        let mut stages: Vec<&str> = jobs.iter().map(|job| job.stage.as_str()).collect();
        stages.dedup();
        let run_ms = (self.config.pipeline_seconds.max(0.0) * 1000.0 * 2.0
            / 3.0
            / stages.len().max(1) as f64) as u64;
        let mut statuses = vec![String::new(); jobs.len()];
        let (mut blocked, mut failed) = (false, false);
        let mut index = 0;
        while index < jobs.len() {
            let stage = &jobs[index].stage;
            let end = index
                + jobs[index..]
                    .iter()
                    .take_while(|job| job.stage == *stage)
                    .count();
            let (mut all_success, mut stage_failed) = (true, false);
            for (offset, job) in jobs[index..end].iter().enumerate() {
                if let Some(status) = &job.retried {
                    statuses[index + offset] = status.clone();
                    continue;
                }
                let status = match job.picked_ms {
                    _ if job.canceled => "canceled",
                    Some(_) if job.executes => match &job.outcome {
                        None => "running",
                        Some(outcome) if outcome.success => "success",
                        Some(_) => "failed",
                    },
                    Some(at) if now.saturating_sub(at) < run_ms => "running",
                    Some(_) if Self::fails(job) => "failed",
                    Some(_) => "success",
                    None if job.when == "manual" && !job.played => "manual",
                    None if failed && job.when != "always" => "skipped",
                    None if blocked => "created",
                    None => "pending",
                };
                // A canceled job stops the later stages as a failed one does.
                stage_failed |= matches!(status, "failed" | "canceled");
                all_success &= matches!(status, "success" | "manual");
                statuses[index + offset] = status.to_string();
            }
            failed |= stage_failed;
            blocked |= !all_success;
            index = end;
        }
        statuses
    }

    /// The pipeline's status (GitLab's composite of its jobs' statuses) and its jobs' statuses.
    pub(super) fn pipeline_status(&self, pipeline: &Pipeline) -> (String, Vec<String>) {
        if pipeline.skipped {
            return ("skipped".to_string(), Vec::new());
        }
        if pipeline.yaml_errors.is_some() {
            return ("failed".to_string(), Vec::new());
        }
        let jobs = self.job_statuses(pipeline, now_ms());
        let any = |wanted: &str| {
            jobs.iter()
                .zip(&pipeline.jobs)
                .any(|(status, job)| status == wanted && job.retried.is_none())
        };
        let status = if any("running") || (any("pending") && (any("success") || any("failed"))) {
            "running"
        } else if any("pending") {
            "pending"
        } else if any("failed") {
            "failed"
        } else if any("canceled") {
            "canceled"
        } else if any("created") {
            "created"
        } else if jobs
            .iter()
            .zip(&pipeline.jobs)
            .filter(|(_, job)| job.retried.is_none())
            .all(|(status, _)| status == "manual")
        {
            "manual"
        } else {
            "success"
        };
        (status.to_string(), jobs)
    }

    pub(super) fn pipeline_json(&self, state: &State, pipeline: &Pipeline) -> Value {
        let (status, _) = self.pipeline_status(pipeline);
        let project = state.projects.get(&pipeline.project_id);
        let path = project
            .map(|p| Self::project_path(state, p))
            .unwrap_or_default();
        json!({
            "id": pipeline.id, "iid": pipeline.iid, "project_id": pipeline.project_id, "sha": pipeline.sha,
            "ref": pipeline.reference, "status": status, "source": pipeline.source, "yaml_errors": pipeline.yaml_errors, "created_at": pipeline.created_at,
            "updated_at": pipeline.created_at, "web_url": format!("{}/{path}/-/pipelines/{}", self.base_url(), pipeline.id),
        })
    }

    pub(super) fn job_trace(job: &Job, status: &str) -> String {
        if job.executes {
            return match &job.outcome {
                Some(outcome) => outcome.trace.clone(),
                None => "Running with gitlab-runner 17.9.0 (bprun-sim)\n".to_string(),
            };
        }
        let mut trace = format!(
            "Running with bprun-sim\nJob {} (stage {})\n",
            job.name, job.stage
        );
        for line in &job.script {
            trace.push_str(&format!("$ {line}\n"));
            if status == "failed" && line.trim().starts_with("exit ") {
                trace.push_str(&format!(
                    "ERROR: Job failed: exit code {}\n",
                    line.trim().trim_start_matches("exit ").trim()
                ));
                return trace;
            }
        }
        if status == "success" {
            trace.push_str("Job succeeded\n");
        }
        trace
    }

    pub(super) fn pipeline_of<'a>(
        &self,
        state: &'a State,
        project: &str,
        pipeline: &str,
    ) -> Option<&'a Pipeline> {
        let project = Self::find_project(state, project)?;
        let id = pipeline.parse::<u64>().ok()?;
        state.pipelines.get(&id).filter(|p| p.project_id == project)
    }

    pub(super) fn create_pipeline(&self, request: &SimRequest, id: &str) -> SimResponse {
        let body = request.params();
        let Some(reference) = string_field(&body, "ref") else {
            return param_error("ref is missing");
        };
        let variables = match pipeline_variables(&body) {
            Ok(variables) => variables,
            Err(message) => return param_error(&message),
        };
        let mut state = self.lock();
        let Some(project_id) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        match self.start_pipeline(&mut state, project_id, &reference, "api", None, variables) {
            Ok(pipeline_id) => {
                let mut answer = self.pipeline_json(&state, &state.pipelines[&pipeline_id]);
                answer["status"] = json!("created");
                drop(state);
                self.persist();
                SimResponse::json(201, &answer)
            }
            Err(error) => field_errors(json!({"base": error.messages()})),
        }
    }

    /// Creates a pipeline for `reference`. An API request with an invalid configuration is
    /// refused with GitLab's messages; a push with one gets a failed pipeline carrying
    /// `yaml_errors` (as GitLab does). A push without `.gitlab-ci.yml` starts nothing.
    pub(super) fn start_pipeline(
        &self,
        state: &mut State,
        project_id: u64,
        reference: &str,
        source: &str,
        before: Option<&str>,
        variables: Vec<PipelineVariable>,
    ) -> Result<u64, ci::CiError> {
        let project = &state.projects[&project_id];
        let this_path = Self::project_path(state, project);
        if !self.repos.branch_exists(&this_path, reference) {
            return Err(ci::CiError::Invalid(vec![
                "Reference not found".to_string(),
            ]));
        }
        let Some(config) = self
            .repos
            .read_file(&this_path, reference, ".gitlab-ci.yml")
        else {
            return Err(ci::CiError::Invalid(vec![
                "Missing CI config file".to_string(),
            ]));
        };
        let after = self.repos.head(&this_path, reference);
        // A push skipped by its commit message: a skipped pipeline, nothing evaluated.
        if source == "push"
            && let Some(head) = &after
            && self
                .repos
                .commit_info(&this_path, head)
                .is_some_and(|(info, _)| skips_ci(&info.message))
        {
            let id = state.id();
            let iid = next_iid(state, project_id);
            state.pipelines.insert(
                id,
                Pipeline {
                    id,
                    iid,
                    project_id,
                    reference: reference.to_string(),
                    sha: head.clone(),
                    created_ms: now_ms(),
                    created_at: timestamp(),
                    jobs: Vec::new(),
                    source: source.to_string(),
                    yaml_errors: None,
                    skipped: true,
                    variables,
                },
            );
            return Ok(id);
        }
        let context = ci::Context {
            source,
            reference,
            default_branch: project.default_branch.as_deref(),
            project_path: &this_path,
            variables: state
                .variables
                .get(&project_id)
                .map(|list| {
                    list.iter()
                        .filter(|v| v.environment_scope == "*")
                        .map(|v| (v.key.clone(), v.value.clone()))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .into_iter()
                .chain(variables.iter().map(|v| (v.key.clone(), v.value.clone())))
                .collect(),
            files: self.repos.list_files(&this_path, reference),
            changed: match (before, &after) {
                (Some(before), Some(after)) => {
                    Some(self.repos.changed_files(&this_path, before, after))
                }
                _ => None,
            },
        };
        let resolved = {
            let state: &State = state;
            let fetch = |from: Option<&str>,
                         at: &str,
                         file: &str|
             -> Result<Option<String>, String> {
                let project = match from {
                    None => Some(project_id),
                    Some(path) if path == this_path => Some(project_id),
                    Some(path) => Self::find_project(
                        state,
                        &percent_encoding::utf8_percent_encode(
                            path,
                            percent_encoding::NON_ALPHANUMERIC,
                        )
                        .to_string(),
                    ),
                };
                let Some(project) = project.and_then(|id| state.projects.get(&id)) else {
                    return Err(format!(
                        "Project `{}` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined.",
                        from.unwrap_or_default()
                    ));
                };
                let full = Self::project_path(state, project);
                let at = if at == "HEAD" {
                    project
                        .default_branch
                        .clone()
                        .unwrap_or_else(|| "main".into())
                } else {
                    at.to_string()
                };
                if !self.repos.branch_exists(&full, &at) {
                    return Err(format!("Project `{full}` reference `{at}` does not exist!"));
                }
                Ok(self.repos.read_file(&full, &at, file))
            };
            ci::resolve(&config, &context, &fetch)
        };
        let (jobs, yaml_errors) = match resolved {
            Ok(jobs) => (jobs, None),
            Err(ci::CiError::Invalid(errors)) if source == "push" => {
                (Vec::new(), Some(errors.join("; ")))
            }
            Err(error) => return Err(error),
        };
        let sha = after.unwrap_or_else(|| sha_of(&config));
        let id = state.id();
        let iid = next_iid(state, project_id);
        let mut pipeline_jobs = Vec::new();
        for job in jobs {
            let job_id = state.id();
            pipeline_jobs.push(Job {
                id: job_id,
                name: job.name,
                stage: job.stage,
                script: job.script,
                tags: job.tags,
                picked_ms: None,
                runner_id: None,
                when: job.when,
                run: job.run,
                executes: false,
                outcome: None,
                canceled: false,
                played: false,
                retried: None,
            });
        }
        let pipeline = Pipeline {
            id,
            iid,
            project_id,
            reference: reference.to_string(),
            sha,
            created_ms: now_ms(),
            created_at: timestamp(),
            jobs: pipeline_jobs,
            source: source.to_string(),
            yaml_errors,
            skipped: false,
            variables,
        };
        state.pipelines.insert(id, pipeline);
        Ok(id)
    }
}

#[cfg(test)]
mod skip_tests {
    #[test]
    fn the_skip_pattern_is_gitlabs() {
        for message in [
            "docs [skip ci]",
            "[CI SKIP] x",
            "a\n\n[skip-ci]",
            "[ci_skip]",
        ] {
            assert!(super::skips_ci(message), "{message}");
        }
        for message in ["skip ci", "[skipci]", "[ci  skip]", "(skip ci)"] {
            assert!(!super::skips_ci(message), "{message}");
        }
    }
}
