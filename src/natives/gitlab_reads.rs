//! The GitLab reads operators do by hand, in the REPL or a script: a group's projects, a
//! project's CI/CD variables, its pipelines, a pipeline's jobs and a job's trace. Paths are
//! written as GitLab shows them (`blueprint-apps/guestbook`); masked and hidden variable values
//! are `Secret`s.

use rhai::plugin::*;
use rhai::{Array, Map};

use super::gitlab::{cancelled, masked_as_secrets, remote};
use super::options::{RhaiResultOf, option_int, option_str, reject_undeclared};
use crate::engine::native_error;
use bprun_clients::gitlab::reads::PipelineQuery;

/// The newest pipelines `gitlab_pipelines` lists unless told otherwise.
const DEFAULT_PIPELINES: i64 = 20;

fn listed(items: Vec<serde_json::Value>) -> Array {
    items.into_iter().map(masked_as_secrets).collect()
}

#[export_module]
pub mod gitlab_read_functions {
    use super::*;

    /// The projects of a group (not of its subgroups), oldest first: `#{id, path,
    /// path_with_namespace, visibility, default_branch, web_url}` each.
    ///
    /// ```rhai
    /// for project in gitlab_projects("blueprint-apps") { print(`${project.id} ${project.path}`) }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_projects(context: NativeCallContext, group: &str) -> RhaiResultOf<Array> {
        let (session, client) = remote(&context, "gitlab_projects")?;
        client
            .group_projects(group, &cancelled(&session))
            .map(listed)
            .map_err(native_error)
    }

    /// A project's CI/CD variables by key: `#{key, value, masked, hidden, protected,
    /// environment_scope, variable_type}` each (GitLab's names: `protected` is a Rhai keyword,
    /// read it as `v["protected"]`); a masked value is a `Secret` (`***` until revealed), a
    /// hidden one `()` (GitLab never returns it).
    ///
    /// ```rhai
    /// for variable in gitlab_variables("blueprint-apps/guestbook") { print(`${variable.key}=${variable.value}`) }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_variables(context: NativeCallContext, project: &str) -> RhaiResultOf<Array> {
        let (session, client) = remote(&context, "gitlab_variables")?;
        client
            .project_variables(project, &cancelled(&session))
            .map(listed)
            .map_err(native_error)
    }

    /// A project's newest pipelines (20), newest first: `#{id, iid, status, ref, sha, source,
    /// created_at, web_url}` each.
    ///
    /// ```rhai
    /// let last = gitlab_pipelines("blueprint-apps/guestbook")[0];
    /// print(`#${last.id} ${last.status}`);
    /// ```
    #[rhai_fn(name = "gitlab_pipelines", return_raw)]
    pub fn gitlab_pipelines(context: NativeCallContext, project: &str) -> RhaiResultOf<Array> {
        gitlab_pipelines_with(context, project, Map::new())
    }

    /// `gitlab_pipelines(project)` with options: `limit` (1 to 100, default 20), `ref` (a branch
    /// or tag), `status` (`success`, `failed`, `running`, ...).
    ///
    /// ```rhai
    /// let failed = gitlab_pipelines("blueprint-apps/guestbook", #{status: "failed", limit: 5});
    /// ```
    #[rhai_fn(name = "gitlab_pipelines", return_raw)]
    pub fn gitlab_pipelines_with(
        context: NativeCallContext,
        project: &str,
        options: Map,
    ) -> RhaiResultOf<Array> {
        const NATIVE: &str = "gitlab_pipelines";
        reject_undeclared(&options, NATIVE)?;
        let limit = option_int(&options, "limit", NATIVE, DEFAULT_PIPELINES)?;
        if !(1..=100).contains(&limit) {
            return Err(native_error(
                crate::error::NativeError::new(format!(
                    "{NATIVE}: limit must be 1 to 100, not {limit}"
                ))
                .with_hint("GitLab returns at most 100 pipelines a page"),
            ));
        }
        let query = PipelineQuery {
            limit: limit as u32,
            reference: option_str(&options, "ref", NATIVE)?,
            status: option_str(&options, "status", NATIVE)?,
        };
        let (session, client) = remote(&context, NATIVE)?;
        client
            .pipelines(project, &query, &cancelled(&session))
            .map(listed)
            .map_err(native_error)
    }

    /// The jobs of a pipeline: `#{id, name, stage, status, web_url}` each.
    ///
    /// ```rhai
    /// let pipeline = gitlab_pipelines("blueprint-apps/guestbook")[0];
    /// for job in gitlab_jobs("blueprint-apps/guestbook", pipeline.id) { print(`${job.name}: ${job.status}`) }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_jobs(
        context: NativeCallContext,
        project: &str,
        pipeline: i64,
    ) -> RhaiResultOf<Array> {
        let (session, client) = remote(&context, "gitlab_jobs")?;
        client
            .pipeline_jobs(project, pipeline, &cancelled(&session))
            .map(listed)
            .map_err(native_error)
    }

    /// A job's trace (its log) as text.
    ///
    /// ```rhai
    /// let job = gitlab_jobs("blueprint-apps/guestbook", 12)[0];
    /// print(gitlab_job_trace("blueprint-apps/guestbook", job.id));
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_job_trace(
        context: NativeCallContext,
        project: &str,
        job: i64,
    ) -> RhaiResultOf<String> {
        let (session, client) = remote(&context, "gitlab_job_trace")?;
        client
            .job_trace(project, job, &cancelled(&session))
            .map_err(native_error)
    }
}
