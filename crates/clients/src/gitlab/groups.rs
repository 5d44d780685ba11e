//! Groups: ensure (create, or update the visibility when asked) and delete.

use serde::Deserialize;
use serde_json::json;

use super::{GitlabClient, Method, encode};
use crate::error::{ClientError, ErrorKind};
use crate::reconcile::{Mode, Outcome};

/// A group as GitLab returns it (the fields bprun reads). In check mode a planned group has no id.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Group {
    pub id: Option<i64>,
    #[serde(default)]
    pub full_path: String,
    #[serde(default)]
    pub visibility: String,
    pub web_url: Option<String>,
}

/// The desired state of a top-level group.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    pub path: String,
    /// Default: the path.
    pub name: Option<String>,
    /// Default: `internal`.
    pub visibility: Option<String>,
    pub description: Option<String>,
    /// Change the visibility of an existing group; otherwise a difference is only a warning.
    pub update: bool,
}

fn group_of(value: serde_json::Value, what: &str) -> Result<Group, ClientError> {
    serde_json::from_value(value)
        .map_err(|error| ClientError::new(format!("gitlab: {what}: unexpected answer: {error}")))
}

impl GitlabClient {
    /// The group at `path`, or `None`.
    pub fn group(
        &self,
        path: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Group>, ClientError> {
        self.find(&format!("groups/{}", encode(path)), cancelled)?
            .map(|value| group_of(value, &format!("group {path}")))
            .transpose()
    }

    /// Creates the group when missing; a visibility difference is updated only with `update`.
    pub fn ensure_group(
        &self,
        spec: &GroupSpec,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<Group>, ClientError> {
        let path = spec.path.as_str();
        let visibility = spec.visibility.as_deref().unwrap_or("internal");
        let group_path = format!("groups/{}", encode(path));
        if let Some(group) = self.group(path, cancelled)? {
            let current = group.visibility.clone();
            if current == visibility {
                return Ok(Outcome::unchanged(group));
            }
            if !spec.update {
                return Ok(Outcome::unchanged(group).warn(format!(
                    "group {path} is {current}, wanted {visibility}; left as it is"
                )));
            }
            let change = format!("visibility of group {path} from {current} to {visibility}");
            if !mode.writes() {
                return Ok(Outcome::changed_by(group, "update", "group", path, change));
            }
            let updated = self.request(
                Method::Put,
                &group_path,
                Some(&json!({"visibility": visibility})),
                None,
                cancelled,
            )?;
            return Ok(Outcome::changed_by(
                group_of(updated.body, &format!("group {path}"))?,
                "update",
                "group",
                path,
                change,
            ));
        }
        let change = format!("group {path} ({visibility})");
        if !mode.writes() {
            let planned = Group {
                id: None,
                full_path: path.to_string(),
                visibility: visibility.to_string(),
                web_url: None,
            };
            return Ok(Outcome::changed_by(
                planned, "create", "group", path, change,
            ));
        }
        let mut body = json!({
            "name": spec.name.as_deref().unwrap_or(path),
            "path": path,
            "visibility": visibility,
        });
        if let Some(description) = &spec.description {
            body["description"] = json!(description);
        }
        let read_back = || self.find(&group_path, cancelled);
        let created = match self.request(
            Method::Post,
            "groups",
            Some(&body),
            Some(&read_back),
            cancelled,
        ) {
            Ok(created) => created,
            // Refused, but the group exists now: another run created it between our read and
            // our write ("has already been taken"). It is there, as wanted: not our change.
            Err(error) if error.kind == ErrorKind::Invalid => match self.group(path, cancelled)? {
                Some(group) => return Ok(Outcome::unchanged(group)),
                None => return Err(error),
            },
            Err(error) => return Err(error),
        };
        Ok(Outcome::changed_by(
            group_of(created.body, &format!("group {path}"))?,
            "create",
            "group",
            path,
            change,
        ))
    }

    /// Deletes the group (and its projects) when it exists.
    pub fn delete_group(
        &self,
        path: &str,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<()>, ClientError> {
        self.delete_if_present(
            &format!("groups/{}", encode(path)),
            "group",
            path,
            mode,
            cancelled,
        )
    }

    /// `DELETE api_path` when `GET api_path` finds it.
    pub(super) fn delete_if_present(
        &self,
        api_path: &str,
        kind: &'static str,
        name: &str,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<()>, ClientError> {
        if self.find(api_path, cancelled)?.is_none() {
            return Ok(Outcome::unchanged(()));
        }
        if mode.writes() {
            self.request(Method::Delete, api_path, None, None, cancelled)?;
        }
        Ok(Outcome::changed_by(
            (),
            "delete",
            kind,
            name,
            format!("{kind} {name}"),
        ))
    }
}
