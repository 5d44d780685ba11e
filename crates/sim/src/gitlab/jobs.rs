//! The GitLab simulator's side of jobs that really run (`ci::jobs` runs them): which jobs run,
//! with what (image, variables, working copy, timeout), and recording how they ended.

use super::ci::jobs::{self as ci_jobs, CiCdVariable, JobSpec, JobVariable, Outcome};
use super::{GitlabSim, Runner, State, write_state};

impl GitlabSim {
    /// What a runner needs to run job `index` of `pipeline`: `None` when the job is played (jobs
    /// played by setting, or an image the simulator does not know, or no image and no default
    /// one); `Err` when its image is known but cannot be provided here (a system failure).
    pub(super) fn job_execution(
        &self,
        state: &State,
        pipeline: u64,
        index: usize,
        runner: &Runner,
    ) -> Option<Result<JobSpec, String>> {
        let settings = &self.config.jobs;
        if settings.play {
            return None;
        }
        let pipeline = state.pipelines.get(&pipeline)?;
        let job = pipeline.jobs.get(index)?;
        let image = job
            .run
            .image
            .clone()
            .or_else(|| settings.default_image.clone())?;
        let runtime = match ci_jobs::runtime_for(&image) {
            Ok(Some(runtime)) => runtime,
            Ok(None) => return None,
            Err(reason) => return Some(Err(reason)),
        };
        let project = state.projects.get(&pipeline.project_id)?;
        let project_path = Self::project_path(state, project);
        let protected_ref = self
            .protected_list(state, project.id)
            .contains(&pipeline.reference);
        let timeout = job
            .run
            .timeout
            .as_deref()
            .and_then(ci_jobs::parse_timeout)
            .unwrap_or(ci_jobs::DEFAULT_TIMEOUT);
        let predefined = self.predefined_variables(
            state,
            pipeline,
            job,
            runner,
            &project_path,
            protected_ref,
            timeout,
        );
        let cicd: Vec<CiCdVariable> = state
            .variables
            .get(&project.id)
            .into_iter()
            .flatten()
            .map(|variable| CiCdVariable {
                key: variable.key.clone(),
                value: variable.value.clone(),
                masked: variable.masked || variable.hidden,
                file: variable.variable_type == "file",
                protected: variable.protected,
                environment_scope: variable.environment_scope.clone(),
            })
            .collect();
        let mut variables = ci_jobs::job_variables(
            predefined,
            &job.run.variables,
            &cicd,
            protected_ref,
            job.run.environment.as_deref(),
        );
        // Pipeline variables come last: they override every other kind.
        variables.extend(pipeline.variables.iter().map(|variable| {
            let mut plain = ci_jobs::JobVariable::plain(&variable.key, &variable.value);
            plain.file = variable.variable_type == "file";
            plain
        }));
        // The clone goes to GitLab's external URL through the platform's network: DNS and the
        // connection, then the TLS handshake, which git verifies against the CA the runner
        // gives its jobs (none: the image's roots, which know no platform CA).
        let side = self.runner_side(runner.id);
        let fetch_error = settings.clone_host.as_ref().and_then(|host| {
            let store = settings.image_store.as_ref()?;
            let why = match store.job_dial(host, 443) {
                Some(dial) => dial.curl_words(host, 443),
                None => {
                    let tls = store.job_handshake(host, 443, side.server_tls_ca.as_deref())?;
                    crate::network::curl_tls_words(&tls, host, 443)
                }
            };
            Some(format!(
                "fatal: unable to access 'https://{host}/{project_path}.git/': {why}"
            ))
        });
        if let Some(ca) = &side.server_tls_ca {
            let mut file = ci_jobs::JobVariable::plain("CI_SERVER_TLS_CA_FILE", ca);
            file.file = true;
            variables.push(file);
        }
        Some(Ok(JobSpec {
            id: job.id,
            name: job.name.clone(),
            image,
            runtime,
            before_script: job.run.before_script.clone(),
            script: job.script.clone(),
            after_script: job.run.after_script.clone(),
            variables,
            timeout,
            repository: self.repos.path(&project_path),
            sha: pipeline.sha.clone(),
            reference: pipeline.reference.clone(),
            project_path,
            runner_description: runner.description.clone(),
            registry_hosts: settings
                .image_store
                .as_ref()
                .map(|store| store.hosts())
                .unwrap_or_default(),
            plain_http_registries: settings
                .image_store
                .as_ref()
                .map(|store| store.cluster_hosts.clone())
                .unwrap_or_default(),
            unreachable_registries: settings
                .image_store
                .as_ref()
                .map(|store| store.unreachable_from_jobs())
                .unwrap_or_default(),
            registry_cas: settings
                .image_store
                .as_ref()
                .zip(side.server_tls_ca.as_deref())
                .map(|(store, ca)| {
                    store
                        .node_hosts
                        .iter()
                        .chain(settings.clone_host.iter())
                        .filter(|host| store.job_handshake(host, 443, Some(ca)).is_none())
                        .map(|host| format!("{host}={}", bprun_clients::digest::sha256_hex(ca)))
                        .collect()
                })
                .unwrap_or_default(),
            token_realm: settings.clone_host.clone(),
            fetch_error,
            network: settings
                .network
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .clone(),
        }))
    }

    /// GitLab's predefined variables for a job (the ones bprun's pipelines and tests read).
    #[allow(clippy::too_many_arguments)]
    fn predefined_variables(
        &self,
        state: &State,
        pipeline: &super::Pipeline,
        job: &super::Job,
        runner: &Runner,
        project_path: &str,
        protected_ref: bool,
        timeout: std::time::Duration,
    ) -> Vec<JobVariable> {
        let server = self.base_url();
        let (namespace, name) = project_path.rsplit_once('/').unwrap_or(("", project_path));
        let slug = |text: &str| -> String {
            let lowered: String = text
                .to_lowercase()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            lowered.trim_matches('-').chars().take(63).collect()
        };
        let host_port = server
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(&server)
            .to_string();
        let (host, port) = host_port
            .rsplit_once(':')
            .map(|(host, port)| (host.to_string(), port.to_string()))
            .unwrap_or((host_port.clone(), "80".to_string()));
        let project = state.projects.get(&pipeline.project_id);
        let default_branch = project
            .and_then(|project| project.default_branch.clone())
            .unwrap_or_else(|| "main".to_string());
        let job_token = format!(
            "glcbt-{}",
            (0..20)
                .map(|_| fastrand::alphanumeric())
                .collect::<String>()
        );
        let plain = JobVariable::plain;
        let mut variables = vec![
            plain("CI", "true"),
            plain("GITLAB_CI", "true"),
            plain("CI_SERVER", "yes"),
            plain("CI_SERVER_URL", &server),
            plain("CI_SERVER_HOST", &host),
            plain("CI_SERVER_PORT", &port),
            plain(
                "CI_SERVER_PROTOCOL",
                server.split("://").next().unwrap_or("http"),
            ),
            plain("CI_SERVER_NAME", "GitLab"),
            plain("CI_API_V4_URL", &format!("{server}/api/v4")),
            plain("CI_PROJECT_ID", &pipeline.project_id.to_string()),
            plain("CI_PROJECT_PATH", project_path),
            plain("CI_PROJECT_PATH_SLUG", &slug(project_path)),
            plain("CI_PROJECT_NAME", name),
            plain("CI_PROJECT_NAMESPACE", namespace),
            plain("CI_PROJECT_URL", &format!("{server}/{project_path}")),
            plain("CI_DEFAULT_BRANCH", &default_branch),
            plain("CI_COMMIT_SHA", &pipeline.sha),
            plain(
                "CI_COMMIT_SHORT_SHA",
                pipeline.sha.get(..8).unwrap_or(&pipeline.sha),
            ),
            plain("CI_COMMIT_BEFORE_SHA", &"0".repeat(40)),
            plain("CI_COMMIT_REF_NAME", &pipeline.reference),
            plain("CI_COMMIT_REF_SLUG", &slug(&pipeline.reference)),
            plain("CI_COMMIT_BRANCH", &pipeline.reference),
            plain("CI_COMMIT_REF_PROTECTED", &protected_ref.to_string()),
            plain("CI_PIPELINE_ID", &pipeline.id.to_string()),
            plain("CI_PIPELINE_IID", &pipeline.iid.to_string()),
            plain("CI_PIPELINE_SOURCE", &pipeline.source),
            plain(
                "CI_PIPELINE_URL",
                &format!("{server}/{project_path}/-/pipelines/{}", pipeline.id),
            ),
            plain("CI_JOB_ID", &job.id.to_string()),
            plain("CI_JOB_NAME", &job.name),
            plain("CI_JOB_STAGE", &job.stage),
            plain(
                "CI_JOB_URL",
                &format!("{server}/{project_path}/-/jobs/{}", job.id),
            ),
            plain("CI_JOB_TIMEOUT", &timeout.as_secs().to_string()),
            plain("CI_RUNNER_ID", &runner.id.to_string()),
            plain("CI_RUNNER_DESCRIPTION", &runner.description),
            plain(
                "CI_RUNNER_TAGS",
                &serde_json::json!(runner.tag_list).to_string(),
            ),
            JobVariable {
                key: "CI_JOB_TOKEN".to_string(),
                value: job_token.clone(),
                masked: true,
                file: false,
            },
        ];
        if let Some(registry) = &self.config.jobs.registry {
            variables.push(plain("CI_REGISTRY", registry));
            variables.push(plain(
                "CI_REGISTRY_IMAGE",
                &format!("{registry}/{}", project_path.to_lowercase()),
            ));
            variables.push(plain("CI_REGISTRY_USER", "gitlab-ci-token"));
            variables.push(JobVariable {
                key: "CI_REGISTRY_PASSWORD".to_string(),
                value: job_token,
                masked: true,
                file: false,
            });
        }
        variables
    }

    /// Runs the job on its own thread; its outcome lands in the state when it ends.
    pub(super) fn start_execution(&self, pipeline: u64, spec: JobSpec) {
        let shared = self.state.clone();
        let image_store = self.config.jobs.image_store.clone();
        let state_dir = self.config.state_dir.clone();
        let job_id = spec.id;
        let record = move |outcome: Outcome| {
            // What the job pushed is in the registry before anyone sees the job succeed.
            if let Some(store) = &image_store {
                for image in &outcome.pushed {
                    store.record_push(image);
                }
            }
            let mut state = shared.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(job) = state
                .pipelines
                .get_mut(&pipeline)
                .and_then(|pipeline| pipeline.jobs.iter_mut().find(|job| job.id == job_id))
            {
                job.outcome = Some(outcome);
            }
            if let Some(dir) = &state_dir {
                write_state(dir, &state);
            }
        };
        let record_failure = record.clone();
        let started = std::thread::Builder::new()
            .name(format!("ci-job-{job_id}"))
            .spawn(move || record(ci_jobs::execute(&spec)));
        if let Err(error) = started {
            record_failure(Outcome {
                success: false,
                trace: format!(
                    "ERROR: Job failed (system failure): cannot start the job: {error}\n"
                ),
                pushed: Vec::new(),
            });
        }
    }
}

/// Puts what earlier jobs pushed back into the registry (the simulator restarted).
pub(super) fn restore_pushed_images(state: &State, settings: &ci_jobs::Settings) {
    let Some(store) = &settings.image_store else {
        return;
    };
    for outcome in state
        .pipelines
        .values()
        .flat_map(|pipeline| &pipeline.jobs)
        .filter_map(|job| job.outcome.as_ref())
        .filter(|outcome| outcome.success)
    {
        for image in &outcome.pushed {
            store.record_push(image);
        }
    }
}
