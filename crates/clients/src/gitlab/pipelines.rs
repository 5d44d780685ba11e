//! Pipelines: start one (or reuse the head commit's), wait for many, and explain a failure with
//! the failed jobs and the end of their traces.

use serde::Deserialize;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

use super::{GitlabClient, Method, encode};
use crate::error::{ClientError, ErrorKind};
use crate::reconcile::{Mode, Outcome};

/// Statuses after which a pipeline no longer changes.
pub const TERMINAL: &[&str] = &["success", "failed", "canceled", "skipped"];
/// Statuses of a pipeline that `reuse` takes instead of starting another.
const REUSABLE: &[&str] = &[
    "success",
    "running",
    "pending",
    "created",
    "preparing",
    "waiting_for_resource",
];
/// The default wait: GitLab Runner's default job timeout.
pub const DEFAULT_PIPELINE_TIMEOUT: Duration = Duration::from_secs(600);
/// The default pause between polls.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// A pipeline as GitLab returns it (the fields bprun reads).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Pipeline {
    pub id: Option<i64>,
    pub iid: Option<i64>,
    #[serde(default)]
    pub status: String,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub sha: Option<String>,
    pub web_url: Option<String>,
    pub yaml_errors: Option<String>,
}

impl Pipeline {
    pub fn is_terminal(&self) -> bool {
        TERMINAL.contains(&self.status.as_str())
    }
}

/// What `trigger_pipeline` did.
#[derive(Debug, Clone)]
pub enum Started {
    /// A new pipeline; `instead_of` says why the head commit's pipeline was not reused.
    New {
        pipeline: Pipeline,
        instead_of: Option<String>,
    },
    /// The head commit's pipeline, green or still running.
    Reused(Pipeline),
    /// Check mode: one would be started (`instead_of` as for `New`).
    WouldStart { instead_of: Option<String> },
}

/// The pipeline variable that records what a pipeline ran with (see [`Reuse::fingerprint`]).
pub const FINGERPRINT_VARIABLE: &str = "BPRUN_FINGERPRINT";

/// When `trigger_pipeline` takes the head commit's pipeline (green or still running) instead
/// of starting another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reuse {
    /// Set: only a pipeline that ran with the project's CI/CD variables as they are now and
    /// with these strings is taken (its [`FINGERPRINT_VARIABLE`], see
    /// [`GitlabClient::variables_fingerprint`]); a new pipeline is created with it. A commit
    /// does not say everything a pipeline ran with (the CI/CD variables, templates included
    /// from another project): the fingerprint does.
    pub fingerprint_with: Option<Vec<String>>,
    /// Set: no pipeline is taken, for this reason (what it deployed is gone, or a person asked).
    pub declined: Option<String>,
}

/// A pipeline to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineRef {
    pub project: String,
    pub id: i64,
}

/// How long and how often to poll.
#[derive(Debug, Clone, Copy)]
pub struct WaitParams {
    pub timeout: Duration,
    pub interval: Duration,
    /// How often a wait that sees no change still says where each pipeline stands.
    pub progress_every: Duration,
}

/// The default of [`WaitParams::progress_every`], as `kube_wait`'s.
pub const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl Default for WaitParams {
    fn default() -> Self {
        WaitParams {
            timeout: DEFAULT_PIPELINE_TIMEOUT,
            interval: DEFAULT_POLL_INTERVAL,
            progress_every: DEFAULT_PROGRESS_EVERY,
        }
    }
}

fn pipeline_of(value: Value, what: &str) -> Result<Pipeline, ClientError> {
    serde_json::from_value(value)
        .map_err(|error| ClientError::new(format!("gitlab: {what}: unexpected answer: {error}")))
}

/// Sleeps `wait`, waking every 50 ms to honour `cancelled`.
fn pause(wait: Duration, cancelled: &dyn Fn() -> bool) -> Result<(), ClientError> {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if cancelled() {
            return Err(ClientError::new("interrupted")
                .with_kind(ErrorKind::Interrupted)
                .in_operation("wait pipeline", ": "));
        }
        std::thread::sleep((deadline - Instant::now()).min(Duration::from_millis(50)));
    }
    Ok(())
}

impl GitlabClient {
    fn recent_pipelines(
        &self,
        project: &str,
        reference: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let list = self.get(
            &format!(
                "projects/{}/pipelines?ref={}&per_page=20",
                encode(project),
                encode(reference)
            ),
            cancelled,
        )?;
        Ok(list.as_array().cloned().unwrap_or_default())
    }

    /// The newest pipeline of the branch's head commit when it succeeded or is still going.
    /// In check mode a project that is only planned has nothing to reuse.
    fn reusable_pipeline(
        &self,
        project: &str,
        reference: &str,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Pipeline>, ClientError> {
        let branch = self.get(
            &format!(
                "projects/{}/repository/branches/{}",
                encode(project),
                encode(reference)
            ),
            cancelled,
        );
        let branch = match branch {
            Err(error) if !mode.writes() && error.is_not_found() => Value::Null,
            other => other?,
        };
        let head = branch["commit"]["id"].as_str().unwrap_or_default();
        if head.is_empty() {
            return Ok(None);
        }
        let newest = self
            .recent_pipelines(project, reference, cancelled)?
            .into_iter()
            .filter(|p| p["sha"].as_str() == Some(head))
            .max_by_key(|p| p["id"].as_i64().unwrap_or(0));
        match newest {
            Some(pipeline) if REUSABLE.contains(&pipeline["status"].as_str().unwrap_or("")) => Ok(
                Some(pipeline_of(pipeline, &format!("pipeline of {project}"))?),
            ),
            _ => Ok(None),
        }
    }

    /// The pipeline variables `pipeline` was created with, by key.
    fn pipeline_variable(
        &self,
        project: &str,
        pipeline: i64,
        key: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<String>, ClientError> {
        let list = self.get(
            &format!(
                "projects/{}/pipelines/{pipeline}/variables",
                encode(project)
            ),
            cancelled,
        )?;
        Ok(list.as_array().and_then(|items| {
            items
                .iter()
                .find(|item| item["key"] == key)
                .and_then(|item| item["value"].as_str().map(str::to_string))
        }))
    }

    /// Why `candidate` (the head commit's green or running pipeline) is not taken under
    /// `reuse`, or `None` to take it.
    fn not_reusable(
        &self,
        project: &str,
        candidate: &Pipeline,
        reuse: &Reuse,
        fingerprint: &dyn Fn() -> Result<String, ClientError>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<String>, ClientError> {
        let shown = format!(
            "pipeline #{} of {project}",
            candidate.id.unwrap_or_default()
        );
        if let Some(reason) = &reuse.declined {
            return Ok(Some(format!("{shown} is not reused: {reason}")));
        }
        let (Some(_), Some(id)) = (&reuse.fingerprint_with, candidate.id) else {
            return Ok(None);
        };
        let wanted = &fingerprint()?;
        Ok(
            match self.pipeline_variable(project, id, FINGERPRINT_VARIABLE, cancelled)? {
                Some(found) if &found == wanted => None,
                Some(found) => Some(format!(
                    "{shown} ran with fingerprint {found}, not {wanted} (its CI/CD variables or included templates changed since)"
                )),
                None => Some(format!(
                    "{shown} has no {FINGERPRINT_VARIABLE}: it may have run with other CI/CD variables"
                )),
            },
        )
    }

    /// Starts a pipeline on `reference`. With `reuse`, the head commit's pipeline (green or
    /// still running) is returned instead, so a re-run starts nothing, unless `reuse` says
    /// it no longer proves anything ([`Reuse`]). A POST that fails ambiguously is read back:
    /// a pipeline on the ref that was not there before is ours.
    pub fn trigger_pipeline(
        &self,
        project: &str,
        reference: &str,
        reuse: Option<&Reuse>,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<Started>, ClientError> {
        // Read once, whether it is compared with a pipeline's, sent with a new one, or both.
        let computed = std::cell::OnceCell::new();
        let fingerprint = || -> Result<String, ClientError> {
            if let Some(known) = computed.get() {
                return Ok(String::clone(known));
            }
            let also = reuse
                .and_then(|reuse| reuse.fingerprint_with.as_deref())
                .unwrap_or_default();
            let value = self.variables_fingerprint(project, also, cancelled)?;
            Ok(computed.get_or_init(|| value).clone())
        };
        let mut instead_of = None;
        if let Some(reuse) = reuse
            && let Some(pipeline) = self.reusable_pipeline(project, reference, mode, cancelled)?
        {
            match self.not_reusable(project, &pipeline, reuse, &fingerprint, cancelled)? {
                None => return Ok(Outcome::unchanged(Started::Reused(pipeline))),
                Some(reason) => instead_of = Some(reason),
            }
        }
        let change = format!("pipeline of {project} on {reference}");
        if !mode.writes() {
            return Ok(Outcome::changed_by(
                Started::WouldStart { instead_of },
                "start",
                "pipeline",
                project,
                change,
            ));
        }
        let known: Vec<i64> = self
            .recent_pipelines(project, reference, cancelled)?
            .iter()
            .filter_map(|p| p["id"].as_i64())
            .collect();
        let read_back = || -> Result<Option<Value>, ClientError> {
            Ok(self
                .recent_pipelines(project, reference, cancelled)?
                .into_iter()
                .find(|p| p["id"].as_i64().is_some_and(|id| !known.contains(&id))))
        };
        let mut body = json!({"ref": reference});
        if reuse.is_some_and(|reuse| reuse.fingerprint_with.is_some()) {
            body["variables"] = json!([{"key": FINGERPRINT_VARIABLE, "value": fingerprint()?}]);
        }
        let answer = self.request(
            Method::Post,
            &format!("projects/{}/pipeline", encode(project)),
            Some(&body),
            Some(&read_back),
            cancelled,
        )?;
        Ok(Outcome::changed_by(
            Started::New {
                pipeline: pipeline_of(answer.body, &change)?,
                instead_of,
            },
            "start",
            "pipeline",
            project,
            change,
        ))
    }

    /// A fingerprint of the project's CI/CD variables, and of `also` (what else its pipelines
    /// run with, such as the head commit of a project whose templates they include): the first
    /// 16 hex digits of a SHA-256. A hidden variable's value is never returned, so its
    /// description stands for it (bprun's deployer kubeconfig records its token's digest
    /// there). Values enter only through the digest.
    pub fn variables_fingerprint(
        &self,
        project: &str,
        also: &[String],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<String, ClientError> {
        let variables = self.get_all(
            &format!("projects/{}/variables", encode(project)),
            cancelled,
        )?;
        let mut entries: Vec<Value> = variables
            .iter()
            .map(|variable| {
                json!([
                    variable["key"],
                    variable["environment_scope"],
                    variable["variable_type"],
                    variable["value"],
                    variable["description"],
                    variable["protected"],
                    variable["masked"],
                    variable["raw"],
                ])
            })
            .collect();
        entries.sort_by_key(|entry| entry.to_string());
        let canonical = json!({"variables": entries, "also": also}).to_string();
        Ok(crate::digest::sha256_hex(&canonical)[..16].to_string())
    }

    /// Polls `pipelines` until each is terminal or the timeout passes; `progress` hears every
    /// status change. Returns the final pipelines in the order given.
    pub fn wait_pipelines(
        &self,
        pipelines: &[PipelineRef],
        params: WaitParams,
        progress: &dyn Fn(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Pipeline>, ClientError> {
        let started = Instant::now();
        let mut last_report = Instant::now();
        let mut last: Vec<Option<Pipeline>> = vec![None; pipelines.len()];
        loop {
            for (index, wanted) in pipelines.iter().enumerate() {
                if last[index].as_ref().is_some_and(Pipeline::is_terminal) {
                    continue;
                }
                let PipelineRef { project, id } = wanted;
                let pipeline = pipeline_of(
                    self.get(
                        &format!("projects/{}/pipelines/{id}", encode(project)),
                        cancelled,
                    )?,
                    &format!("pipeline #{id} of {project}"),
                )?;
                let previous = last[index].as_ref().map(|p| p.status.as_str());
                if previous != Some(pipeline.status.as_str()) {
                    progress(&format!(
                        "pipeline #{id} of {project}: {} ({:.0} s)",
                        pipeline.status,
                        started.elapsed().as_secs_f64()
                    ));
                }
                last[index] = Some(pipeline);
            }
            if last
                .iter()
                .all(|p| p.as_ref().is_some_and(Pipeline::is_terminal))
            {
                return Ok(last.into_iter().flatten().collect());
            }
            if last_report.elapsed() >= params.progress_every {
                for (wanted, pipeline) in pipelines.iter().zip(&last) {
                    let Some(pipeline) = pipeline.as_ref().filter(|p| !p.is_terminal()) else {
                        continue;
                    };
                    progress(&self.progress_line(wanted, pipeline, started, cancelled));
                }
                last_report = Instant::now();
            }
            if started.elapsed() >= params.timeout {
                let mut stuck_anywhere = false;
                let waiting: Vec<String> = pipelines
                    .iter()
                    .zip(&last)
                    .filter(|(_, p)| !p.as_ref().is_some_and(Pipeline::is_terminal))
                    .map(|(wanted, p)| {
                        let stuck = self.stuck_jobs(wanted, cancelled);
                        stuck_anywhere |= !stuck.is_empty();
                        format!(
                            "#{} of {} is {}{}",
                            wanted.id,
                            wanted.project,
                            p.as_ref().map_or("unknown", |p| p.status.as_str()),
                            stuck
                                .iter()
                                .map(|job| format!("; no online runner can take job {job}"))
                                .collect::<String>()
                        )
                    })
                    .collect();
                let error = ClientError::new(format!(
                    "gitlab: pipelines did not finish within {} s: {}",
                    params.timeout.as_secs(),
                    waiting.join(", ")
                ))
                .with_kind(ErrorKind::Timeout);
                // Not stuck: only slow, and how to wait longer is the caller's word.
                return Err(if stuck_anywhere {
                    error.with_hint("register a runner that serves the project (phase 2 ends by registering GitLab Runner), check that its pods run, and that its tags cover the jobs' `tags:`")
                } else {
                    error
                });
            }
            pause(params.interval, cancelled)?;
        }
    }

    /// Where a pipeline stands: `waiting for pipeline #12 of g/p (10 s): running; jobs: build
    /// success, test running; URL`. The job list is left out when it cannot be read.
    fn progress_line(
        &self,
        wanted: &PipelineRef,
        pipeline: &Pipeline,
        started: Instant,
        cancelled: &dyn Fn() -> bool,
    ) -> String {
        let jobs = self
            .get_all(
                &format!(
                    "projects/{}/pipelines/{}/jobs",
                    encode(&wanted.project),
                    wanted.id
                ),
                cancelled,
            )
            .map(|jobs| {
                // GitLab lists the newest job first; the pipeline's order reads better.
                let mut jobs: Vec<(i64, String)> = jobs
                    .iter()
                    .map(|job| {
                        (
                            job["id"].as_i64().unwrap_or(0),
                            format!(
                                "{} {}",
                                job["name"].as_str().unwrap_or("?"),
                                job["status"].as_str().unwrap_or("?")
                            ),
                        )
                    })
                    .collect();
                jobs.sort();
                let jobs: Vec<String> = jobs.into_iter().map(|(_, job)| job).collect();
                format!("; jobs: {}", jobs.join(", "))
            })
            .unwrap_or_default();
        format!(
            "waiting for pipeline #{} of {} ({} s): {}{jobs}{}",
            wanted.id,
            wanted.project,
            started.elapsed().as_secs(),
            pipeline.status,
            pipeline
                .web_url
                .as_deref()
                .map(|url| format!("; {url}"))
                .unwrap_or_default()
        )
    }

    /// The pending jobs of a pipeline that no online, unpaused runner available to the project
    /// can take (GitLab's "stuck" jobs: no runner, or none whose tags cover the job's), each as
    /// `name` or `name (tags: a, b)`. Empty when that cannot be read (e.g. no permission to
    /// list the project's runners).
    pub fn stuck_jobs(&self, pipeline: &PipelineRef, cancelled: &dyn Fn() -> bool) -> Vec<String> {
        let project = encode(&pipeline.project);
        let Ok(jobs) = self.get_all(
            &format!("projects/{project}/pipelines/{}/jobs", pipeline.id),
            cancelled,
        ) else {
            return Vec::new();
        };
        let pending: Vec<&Value> = jobs
            .iter()
            .filter(|job| job["status"] == "pending")
            .collect();
        if pending.is_empty() {
            return Vec::new();
        }
        let Ok(runners) = self.get_all(
            &format!("projects/{project}/runners?status=online&paused=false"),
            cancelled,
        ) else {
            return Vec::new();
        };
        let mut capabilities: Vec<(Vec<String>, bool)> = Vec::new();
        for runner in &runners {
            let Ok(detail) = self.get(&format!("runners/{}", runner["id"]), cancelled) else {
                return Vec::new();
            };
            capabilities.push((
                strings(&detail["tag_list"]),
                detail["run_untagged"] != false,
            ));
        }
        pending
            .into_iter()
            .filter_map(|job| {
                let tags = strings(&job["tag_list"]);
                let takeable = capabilities.iter().any(|(runner_tags, untagged)| {
                    if tags.is_empty() {
                        *untagged
                    } else {
                        tags.iter().all(|tag| runner_tags.contains(tag))
                    }
                });
                let name = job["name"].as_str().unwrap_or("?");
                (!takeable).then(|| {
                    if tags.is_empty() {
                        name.to_string()
                    } else {
                        format!("{name} (tags: {})", tags.join(", "))
                    }
                })
            })
            .collect()
    }

    /// The error for a pipeline that ended without success: its YAML errors, its failed jobs
    /// and the end of their traces, and its URL.
    pub fn pipeline_failure(
        &self,
        project: &str,
        pipeline: &Pipeline,
        cancelled: &dyn Fn() -> bool,
    ) -> ClientError {
        let id = pipeline.id.unwrap_or(0);
        let mut error = ClientError::new(format!(
            "gitlab: pipeline #{id} of {project} {}",
            if pipeline.status.is_empty() {
                "unknown"
            } else {
                &pipeline.status
            }
        ));
        if let Some(yaml_errors) = &pipeline.yaml_errors {
            error = error.caused_by(format!("the CI configuration is invalid: {yaml_errors}"));
        }
        if let Ok(jobs) = self.get_all(
            &format!("projects/{}/pipelines/{id}/jobs", encode(project)),
            cancelled,
        ) {
            for job in jobs.iter().filter(|job| job["status"] == "failed") {
                let name = job["name"].as_str().unwrap_or("?");
                let trace = self
                    .request(
                        Method::Get,
                        &format!("projects/{}/jobs/{}/trace", encode(project), job["id"]),
                        None,
                        None,
                        cancelled,
                    )
                    .map(|answer| {
                        answer
                            .body
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| answer.body.to_string())
                    })
                    .unwrap_or_default();
                let lines: Vec<&str> = trace.lines().collect();
                let tail = &lines[lines.len().saturating_sub(10)..];
                error = error.caused_by(format!(
                    "job {name} failed; end of its trace:\n{}",
                    tail.join("\n")
                ));
            }
        }
        error.with_hint(format!(
            "open {}",
            pipeline.web_url.as_deref().unwrap_or_default()
        ))
    }
}

/// A JSON array of strings (anything else: empty).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
