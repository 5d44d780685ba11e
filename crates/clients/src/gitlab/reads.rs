//! What an operator reads by hand: a group's projects, a project's CI/CD variables, its
//! pipelines, a pipeline's jobs and a job's trace. Paths are given as written
//! (`blueprint-apps/guestbook`); the client encodes them. Each answer keeps the fields a person
//! reads (GitLab's full objects are one `get` away).

use serde_json::{Map, Value};

use super::{GitlabClient, encode};
use crate::error::ClientError;

/// `item` with only `fields` (absent ones as null).
pub(super) fn pick(item: &Value, fields: &[&str]) -> Value {
    let mut picked = Map::new();
    for field in fields {
        picked.insert(
            field.to_string(),
            item.get(*field).cloned().unwrap_or(Value::Null),
        );
    }
    Value::Object(picked)
}

const PROJECT_FIELDS: &[&str] = &[
    "id",
    "path",
    "path_with_namespace",
    "visibility",
    "default_branch",
    "web_url",
];
const VARIABLE_FIELDS: &[&str] = &[
    "key",
    "value",
    "masked",
    "hidden",
    "protected",
    "environment_scope",
    "variable_type",
];
pub(super) const PIPELINE_FIELDS: &[&str] = &[
    "id",
    "iid",
    "status",
    "ref",
    "sha",
    "source",
    "created_at",
    "web_url",
];
pub(super) const JOB_FIELDS: &[&str] = &["id", "name", "stage", "status", "web_url"];

/// Which pipelines [`GitlabClient::pipelines`] lists, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineQuery {
    /// At most this many (GitLab's pages hold up to 100).
    pub limit: u32,
    pub reference: Option<String>,
    pub status: Option<String>,
}

impl GitlabClient {
    /// The projects of `group` (not of its subgroups), oldest first.
    pub fn group_projects(
        &self,
        group: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let items = self.get_all(
            &format!("groups/{}/projects?order_by=id&sort=asc", encode(group)),
            cancelled,
        )?;
        Ok(items
            .iter()
            .map(|item| pick(item, PROJECT_FIELDS))
            .collect())
    }

    /// The CI/CD variables of `project`, by key (a hidden variable's value GitLab never returns).
    pub fn project_variables(
        &self,
        project: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let mut items: Vec<Value> = self
            .get_all(
                &format!("projects/{}/variables", encode(project)),
                cancelled,
            )?
            .iter()
            .map(|item| pick(item, VARIABLE_FIELDS))
            .collect();
        items.sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
        Ok(items)
    }

    /// The pipelines of `project` that `query` selects, newest first.
    pub fn pipelines(
        &self,
        project: &str,
        query: &PipelineQuery,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let mut path = format!(
            "projects/{}/pipelines?order_by=id&sort=desc&per_page={}",
            encode(project),
            query.limit.clamp(1, 100)
        );
        if let Some(reference) = &query.reference {
            path.push_str(&format!("&ref={}", encode(reference)));
        }
        if let Some(status) = &query.status {
            path.push_str(&format!("&status={}", encode(status)));
        }
        match self.get(&path, cancelled)? {
            Value::Array(items) => Ok(items
                .iter()
                .take(query.limit as usize)
                .map(|item| pick(item, PIPELINE_FIELDS))
                .collect()),
            other => Err(ClientError::new(format!(
                "gitlab: GET /{path} did not return a list: {}",
                other.to_string().chars().take(200).collect::<String>()
            ))),
        }
    }

    /// The jobs of pipeline `pipeline` of `project`, in GitLab's order.
    pub fn pipeline_jobs(
        &self,
        project: &str,
        pipeline: i64,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let items = self.get_all(
            &format!("projects/{}/pipelines/{pipeline}/jobs", encode(project)),
            cancelled,
        )?;
        Ok(items.iter().map(|item| pick(item, JOB_FIELDS)).collect())
    }

    /// The trace (log) of job `job` of `project`, as the runner sent it.
    pub fn job_trace(
        &self,
        project: &str,
        job: i64,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<String, ClientError> {
        let path = format!("projects/{}/jobs/{job}/trace", encode(project));
        let answer = self.request(super::Method::Get, &path, None, None, cancelled)?;
        Ok(match answer.body {
            Value::String(text) => text,
            // A trace that happens to parse as JSON (a bare number) is still text.
            other => other.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_keeps_the_fields_a_person_reads() {
        let item = json!({"web_url": "u", "id": 3, "extra": true, "status": "success"});
        assert_eq!(
            pick(&item, JOB_FIELDS).to_string(),
            r#"{"id":3,"name":null,"stage":null,"status":"success","web_url":"u"}"#
        );
    }
}
