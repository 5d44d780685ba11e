//! What operators do to GitLab by hand besides reading it: retry, cancel and play jobs, retry
//! and cancel pipelines, and the qualification's access probe (may a Developer delete a
//! project, an outsider clone a private one?).

use rhai::Map;
use rhai::plugin::*;

use super::convert::from_json;
use super::gitlab::{cancelled, remote};
use super::options::RhaiResultOf;
use super::reconcile::{mode, settle};
use crate::engine::native_error;
use bprun_clients::gitlab::control::{JobAction, PipelineAction};

fn as_map(value: serde_json::Value) -> Map {
    // The client answers with objects, which always convert to maps.
    from_json(value).try_cast::<Map>().unwrap_or_default()
}

/// The job or pipeline as the client answered, with `changed`.
fn answered(value: serde_json::Value, changed: bool) -> Map {
    let mut map = as_map(value);
    map.insert("changed".into(), changed.into());
    map
}

fn job_control(
    context: NativeCallContext,
    native: &str,
    project: &str,
    job: i64,
    action: JobAction,
) -> RhaiResultOf<Map> {
    let (session, client) = remote(&context, native)?;
    let outcome = client
        .control_job(project, job, action, mode(&session), &cancelled(&session))
        .map_err(native_error)?;
    let (value, changed) = settle(&session, outcome);
    Ok(answered(value, changed))
}

fn pipeline_control(
    context: NativeCallContext,
    native: &str,
    project: &str,
    pipeline: i64,
    action: PipelineAction,
) -> RhaiResultOf<Map> {
    let (session, client) = remote(&context, native)?;
    let outcome = client
        .control_pipeline(
            project,
            pipeline,
            action,
            mode(&session),
            &cancelled(&session),
        )
        .map_err(native_error)?;
    let (value, changed) = settle(&session, outcome);
    Ok(answered(value, changed))
}

#[export_module]
pub mod gitlab_operate_functions {
    use super::*;

    /// Runs a job that ended (success, failed or canceled) again, as a new job of its
    /// pipeline: `#{id, name, stage, status, web_url, changed}` of the new attempt. A job
    /// retried already answers with its newest attempt (`changed: false`); one still running is
    /// an error.
    ///
    /// ```rhai
    /// let last = gitlab_pipelines("blueprint-apps/guestbook", #{limit: 1})[0];
    /// let failed = gitlab_jobs("blueprint-apps/guestbook", last.id).filter(|job| job.status == "failed");
    /// for job in failed { gitlab_retry_job("blueprint-apps/guestbook", job.id); }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_retry_job(
        context: NativeCallContext,
        project: &str,
        job: i64,
    ) -> RhaiResultOf<Map> {
        job_control(context, "gitlab_retry_job", project, job, JobAction::Retry)
    }

    /// Cancels a job that has not ended: `#{id, name, stage, status, web_url, changed}`; a
    /// job that ended is left as it is (`changed: false`).
    ///
    /// ```rhai
    /// gitlab_cancel_job("blueprint-apps/guestbook", 42);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_cancel_job(
        context: NativeCallContext,
        project: &str,
        job: i64,
    ) -> RhaiResultOf<Map> {
        job_control(
            context,
            "gitlab_cancel_job",
            project,
            job,
            JobAction::Cancel,
        )
    }

    /// Starts a manual job (status `manual`): `#{id, name, stage, status, web_url, changed}`.
    /// A job that no longer waits for a person is left as it is, with a warning.
    ///
    /// ```rhai
    /// let last = gitlab_pipelines("blueprint-apps/guestbook", #{limit: 1})[0];
    /// let deploy = gitlab_jobs("blueprint-apps/guestbook", last.id).filter(|job| job.status == "manual");
    /// if !deploy.is_empty() { gitlab_play_job("blueprint-apps/guestbook", deploy[0].id); }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_play_job(
        context: NativeCallContext,
        project: &str,
        job: i64,
    ) -> RhaiResultOf<Map> {
        job_control(context, "gitlab_play_job", project, job, JobAction::Play)
    }

    /// Retries the failed and canceled jobs of a pipeline (the jobs skipped after them run
    /// again): `#{id, iid, status, ref, sha, source, created_at, web_url, changed}`; a pipeline
    /// with none is left as it is.
    ///
    /// ```rhai
    /// let last = gitlab_pipelines("blueprint-apps/guestbook", #{limit: 1})[0];
    /// if last.status == "failed" { gitlab_retry_pipeline("blueprint-apps/guestbook", last.id); }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_retry_pipeline(
        context: NativeCallContext,
        project: &str,
        pipeline: i64,
    ) -> RhaiResultOf<Map> {
        pipeline_control(
            context,
            "gitlab_retry_pipeline",
            project,
            pipeline,
            PipelineAction::Retry,
        )
    }

    /// Cancels the jobs of a pipeline that have not ended (manual ones keep waiting): the
    /// pipeline as `gitlab_retry_pipeline` returns it; one with nothing running is left as it is.
    ///
    /// ```rhai
    /// gitlab_cancel_pipeline("blueprint-apps/guestbook", 17);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_cancel_pipeline(
        context: NativeCallContext,
        project: &str,
        pipeline: i64,
    ) -> RhaiResultOf<Map> {
        pipeline_control(
            context,
            "gitlab_cancel_pipeline",
            project,
            pipeline,
            PipelineAction::Cancel,
        )
    }

    /// Asks GitLab's access rules as the users they are about, in `group`: a Developer of a
    /// private project, an outsider (a user who is no member) and an anonymous client. Brings a
    /// private project `bprun-probe-<suffix>` and two users with one-day tokens, and deletes
    /// them again (what an interrupted probe left goes first). Returns `#{developer_clone,
    /// developer_delete, outsider_clone, anonymous_clone}`, each `#{allowed, detail}` (the
    /// status GitLab answered, such as `403 Forbidden`). Needs an administrator's token;
    /// refused in check mode (it creates users).
    ///
    /// ```rhai
    /// let probe = gitlab_access_probe("blueprint-apps");
    /// if probe.developer_delete.allowed { warn("a Developer may delete projects"); }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn gitlab_access_probe(context: NativeCallContext, group: &str) -> RhaiResultOf<Map> {
        let (session, client) = remote(&context, "gitlab_access_probe")?;
        session
            .state
            .refuse_in_check(
                "gitlab_access_probe",
                "the probe creates two users and a project (and deletes them again)",
            )
            .map_err(native_error)?;
        let report = client
            .access_probe(group, &cancelled(&session))
            .map_err(native_error)?;
        Ok(as_map(report.to_json()))
    }
}
