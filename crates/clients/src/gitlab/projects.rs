//! Projects: ensure inside an existing group, and delete.

use serde::Deserialize;
use serde_json::json;

use super::{GitlabClient, Method, encode};
use crate::error::{ClientError, ErrorKind, Remedy};
use crate::reconcile::{Mode, Outcome};

/// A project as GitLab returns it (the fields bprun reads). In check mode a planned project has
/// only its path: no id and no clone URL yet.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Project {
    pub id: Option<i64>,
    #[serde(default)]
    pub path_with_namespace: String,
    pub http_url_to_repo: Option<String>,
    pub web_url: Option<String>,
    pub default_branch: Option<String>,
    pub visibility: Option<String>,
}

/// The desired state of a project.
#[derive(Debug, Clone)]
pub struct ProjectSpec {
    pub namespace: String,
    pub name: String,
    /// Default: the name.
    pub path: Option<String>,
    /// Default: `internal`.
    pub visibility: Option<String>,
    pub description: Option<String>,
    pub default_branch: Option<String>,
}

impl ProjectSpec {
    pub fn full_path(&self) -> String {
        format!(
            "{}/{}",
            self.namespace,
            self.path.as_deref().unwrap_or(&self.name)
        )
    }
}

fn project_of(value: serde_json::Value, what: &str) -> Result<Project, ClientError> {
    serde_json::from_value(value)
        .map_err(|error| ClientError::new(format!("gitlab: {what}: unexpected answer: {error}")))
}

impl GitlabClient {
    /// The project at `full_path`, or `None`.
    pub fn project(
        &self,
        full_path: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Project>, ClientError> {
        self.find(&format!("projects/{}", encode(full_path)), cancelled)?
            .map(|value| project_of(value, &format!("project {full_path}")))
            .transpose()
    }

    /// Creates the project when missing. A visibility difference is a warning, never a change.
    pub fn ensure_project(
        &self,
        spec: &ProjectSpec,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<Project>, ClientError> {
        let full = spec.full_path();
        let visibility = spec.visibility.as_deref().unwrap_or("internal");
        let project_path = format!("projects/{}", encode(&full));
        if let Some(project) = self.project(&full, cancelled)? {
            let current = project.visibility.clone().unwrap_or_default();
            let outcome = Outcome::unchanged(project);
            if current != visibility {
                return Ok(outcome.warn(format!(
                    "project {full} is {current}, wanted {visibility}; left as it is"
                )));
            }
            return Ok(outcome);
        }
        let change = format!("project {full}");
        if !mode.writes() {
            let planned = Project {
                path_with_namespace: full.clone(),
                ..Project::default()
            };
            return Ok(Outcome::changed_by(
                planned, "create", "project", full, change,
            ));
        }
        // The group is read for the write, so after the writes it waits for (the step that
        // ensures the group, running together with this one) have landed.
        crate::write_gate::before_remote_write(
            &format!("gitlab: POST /projects ({full})"),
            cancelled,
        )?;
        let namespace = &spec.namespace;
        let group = self.group(namespace, cancelled)?.ok_or_else(|| {
            ClientError::new(format!(
                "gitlab: group {namespace} does not exist, so project {full} cannot be created"
            ))
            .with_hint("create the group first")
            .with_remedy(Remedy::CreateGroup)
        })?;
        let mut body = json!({
            "name": spec.name,
            "path": spec.path.as_deref().unwrap_or(&spec.name),
            "namespace_id": group.id,
            "visibility": visibility,
        });
        if let Some(description) = &spec.description {
            body["description"] = json!(description);
        }
        if let Some(branch) = &spec.default_branch {
            body["default_branch"] = json!(branch);
        }
        let read_back = || self.find(&project_path, cancelled);
        let created = match self.request(
            Method::Post,
            "projects",
            Some(&body),
            Some(&read_back),
            cancelled,
        ) {
            Ok(created) => created,
            // Refused, but the project exists now: a concurrent run created it first.
            Err(error) if error.kind == ErrorKind::Invalid => {
                match self.project(&full, cancelled)? {
                    Some(project) => return Ok(Outcome::unchanged(project)),
                    None => return Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        Ok(Outcome::changed_by(
            project_of(created.body, &change)?,
            "create",
            "project",
            full,
            change,
        ))
    }

    /// Deletes the project when it exists (GitLab answers 202 and may finish later).
    pub fn delete_project(
        &self,
        full_path: &str,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<()>, ClientError> {
        self.delete_if_present(
            &format!("projects/{}", encode(full_path)),
            "project",
            full_path,
            mode,
            cancelled,
        )
    }
}
