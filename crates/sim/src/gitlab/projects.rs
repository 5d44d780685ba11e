//! Projects: paths, namespaces (a group's or a user's), lists, create and delete, branches and
//! their protection.

use super::access::DEVELOPER;
use super::{
    GitlabSim, State, bool_field, field_errors, message, not_found, param_error, query_flag,
    search_term, string_field, timestamp, valid_path_chars, valid_visibility, visibility_rank,
};
use crate::http::{SimRequest, SimResponse, decode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Project {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) path: String,
    pub(super) namespace_id: u64,
    pub(super) visibility: String,
    pub(super) description: String,
    pub(super) default_branch: Option<String>,
    pub(super) created_at: String,
}

pub(super) const PROJECT_PATH_MESSAGE: &str = "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-', end in '.git' or end in '.atom'";

/// GitLab's `PROJECT_WILDCARD_ROUTES`: names a project cannot take.
pub(super) const RESERVED_PROJECT: &[&str] = &[
    "-",
    "badges",
    "blame",
    "blob",
    "builds",
    "commits",
    "create",
    "create_dir",
    "edit",
    "files",
    "find_file",
    "new",
    "preview",
    "raw",
    "refs",
    "tree",
    "update",
    "wikis",
];

impl GitlabSim {
    /// `GET /projects/:id`.
    pub(super) fn project(&self, id: &str) -> SimResponse {
        let state = self.lock();
        match Self::find_project(&state, id) {
            Some(found) => SimResponse::json(
                200,
                &self.project_json(&state, &state.projects[&found], false),
            ),
            None => not_found("Project"),
        }
    }

    /// `DELETE /projects/:id`: the project, its variables and its repository.
    pub(super) fn delete_project(&self, id: &str) -> SimResponse {
        let mut state = self.lock();
        let Some(found) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let full = Self::project_path(&state, &state.projects[&found]);
        state.projects.remove(&found);
        state.variables.remove(&found);
        drop(state);
        self.repos.remove(&full);
        self.persist();
        message(202, "202 Accepted")
    }

    /// `GET /projects/:id/repository/branches/:branch`.
    pub(super) fn branch(&self, id: &str, branch: &str) -> SimResponse {
        let state = self.lock();
        let Some(project_id) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let full = Self::project_path(&state, &state.projects[&project_id]);
        let default = state.projects[&project_id].default_branch.clone();
        drop(state);
        let name = decode(branch);
        let Some(head) = self.repos.head(&full, &name) else {
            return not_found("Branch");
        };
        let protected = self
            .protected_list(&self.lock(), project_id)
            .contains(&name);
        SimResponse::json(
            200,
            &json!({"name": name, "merged": false, "protected": protected,
                    "default": default.as_deref() == Some(name.as_str()),
                    "developers_can_push": false, "developers_can_merge": false, "can_push": true,
                    "web_url": format!("{}/{full}/-/tree/{name}", self.base_url()),
                    "commit": {"id": head, "short_id": head.get(..8).unwrap_or(&head)}}),
        )
    }

    pub(super) fn project_json(&self, state: &State, project: &Project, simple: bool) -> Value {
        let namespace = state.groups.get(&project.namespace_id);
        let (namespace_path, namespace_name) = match namespace {
            Some(group) => Self::group_full(state, group.id),
            None => Self::personal_namespace(state, project),
        };
        let full = format!("{namespace_path}/{}", project.path);
        let base = self.base_url();
        let mut value = json!({
            "id": project.id, "name": project.name, "path": project.path, "description": project.description,
            "path_with_namespace": full, "name_with_namespace": format!("{namespace_name} / {}", project.name),
            "namespace": {"id": project.namespace_id, "name": namespace.map(|g| g.name.clone()).unwrap_or_else(|| namespace_name.clone()), "path": namespace.map(|g| g.path.clone()).unwrap_or_else(|| namespace_path.clone()), "kind": if namespace.is_some() { "group" } else { "user" }, "full_path": namespace_path, "parent_id": namespace.and_then(|g| g.parent_id)},
            "default_branch": project.default_branch,
            "web_url": format!("{base}/{full}"), "http_url_to_repo": format!("{base}/{full}.git"),
            "ssh_url_to_repo": format!("git@127.0.0.1:{full}.git"), "created_at": project.created_at,
        });
        if !simple && let Value::Object(map) = &mut value {
            map.insert("visibility".into(), json!(project.visibility));
            map.insert("empty_repo".into(), json!(project.default_branch.is_none()));
        }
        value
    }

    pub(super) fn find_project(state: &State, id: &str) -> Option<u64> {
        let id = decode(id);
        if let Ok(number) = id.parse::<u64>() {
            return state.projects.contains_key(&number).then_some(number);
        }
        state
            .projects
            .values()
            .find(|project| Self::project_path(state, project) == id)
            .map(|project| project.id)
    }

    pub(super) fn project_path(state: &State, project: &Project) -> String {
        let namespace = if state.groups.contains_key(&project.namespace_id) {
            Self::group_full(state, project.namespace_id).0
        } else {
            Self::personal_namespace(state, project).0
        };
        format!("{namespace}/{}", project.path)
    }

    /// A personal project's namespace: its owner's username and name (the ids of users and
    /// groups come from one sequence here, so a personal project's `namespace_id` is its
    /// owner's id; older states used 0 for root's).
    pub(super) fn personal_namespace(state: &State, project: &Project) -> (String, String) {
        state
            .users
            .iter()
            .find(|user| user.id == project.namespace_id)
            .map(|user| (user.username.clone(), user.name.clone()))
            .unwrap_or_else(|| ("root".to_string(), "Administrator".to_string()))
    }

    /// All projects, or those of one group, paginated.
    pub(super) fn list_projects(
        &self,
        request: &SimRequest,
        user: u64,
        group: Option<u64>,
    ) -> SimResponse {
        let state = self.lock();
        let search = search_term(request);
        let simple = query_flag(request, "simple");
        let items = state
            .projects
            .values()
            .filter(|p| group.is_none_or(|group| p.namespace_id == group))
            .filter(|p| Self::project_visible(&state, user, p))
            .filter(|p| {
                p.name.to_lowercase().contains(&search) || p.path.to_lowercase().contains(&search)
            })
            .map(|p| self.project_json(&state, p, simple))
            .collect();
        drop(state);
        self.paginate(request, items)
    }

    pub(super) fn create_project(&self, request: &SimRequest, user: u64) -> SimResponse {
        let body = request.params();
        let name = string_field(&body, "name");
        let path = string_field(&body, "path");
        let (name, path) = match (name, path) {
            (None, None) => {
                return param_error(
                    "name, path are missing, at least one parameter must be provided",
                );
            }
            (Some(name), None) => (name.clone(), name.to_lowercase().replace(' ', "-")),
            (None, Some(path)) => (path.clone(), path),
            (Some(name), Some(path)) => (name, path),
        };
        let visibility = string_field(&body, "visibility").unwrap_or_else(|| "private".into());
        if !valid_visibility(&visibility) {
            return param_error("visibility does not have a valid value");
        }
        let mut state = self.lock();
        let namespace_id = match string_field(&body, "namespace_id") {
            Some(namespace) => match Self::find_group(&state, &namespace) {
                Some(id) => id,
                None => return not_found("Namespace"),
            },
            // The creator's personal namespace.
            None => user,
        };
        // `Projects::CreateService`: a namespace the user may not create projects in.
        if state.groups.contains_key(&namespace_id)
            && !Self::is_admin(&state, user)
            && Self::group_level(&state, user, namespace_id) < DEVELOPER
        {
            return field_errors(json!({"namespace": ["is not valid"]}));
        }
        let siblings: Vec<&Project> = state
            .projects
            .values()
            .filter(|p| p.namespace_id == namespace_id)
            .collect();
        let mut errors = serde_json::Map::new();
        if siblings.iter().any(|p| p.name == name) {
            errors.insert("name".into(), json!(["has already been taken"]));
        }
        let mut path_errors = Vec::new();
        if !valid_path_chars(&path) {
            path_errors.push(PROJECT_PATH_MESSAGE.to_string());
        } else if RESERVED_PROJECT.contains(&path.as_str()) {
            path_errors.push(format!("{path} is a reserved name"));
        }
        if siblings.iter().any(|p| p.path.eq_ignore_ascii_case(&path)) {
            path_errors.push("has already been taken".to_string());
        }
        if !path_errors.is_empty() {
            errors.insert("path".into(), json!(path_errors));
        }
        if let Some(group) = state.groups.get(&namespace_id)
            && visibility_rank(&visibility) > visibility_rank(&group.visibility)
        {
            errors.insert(
                "visibility_level".into(),
                json!([format!(
                    "{visibility} is not allowed in a {} group.",
                    group.visibility
                )]),
            );
        }
        if !errors.is_empty() {
            return field_errors(Value::Object(errors));
        }
        let id = state.id();
        let project = Project {
            id,
            name,
            path,
            namespace_id,
            visibility,
            description: string_field(&body, "description").unwrap_or_default(),
            default_branch: None,
            created_at: timestamp(),
        };
        if let Err(error) = self.repos.create(&Self::project_path(&state, &project)) {
            return message(500, &format!("500 Internal Server Error: {error}"));
        }
        let full = Self::project_path(&state, &project);
        let readme_for = project.name.clone();
        state.projects.insert(id, project);
        if bool_field(&body, "initialize_with_readme").unwrap_or(false) {
            let branch = string_field(&body, "default_branch").unwrap_or_else(|| "main".into());
            if let Err(error) = self.initial_readme(&mut state, id, &full, &branch, &readme_for) {
                return message(500, &format!("500 Internal Server Error: {error}"));
            }
        }
        let Some(created) = state.projects.get(&id) else {
            return message(500, "500 Internal Server Error: the new project is gone");
        };
        let answer = self.project_json(&state, created, false);
        drop(state);
        self.persist();
        SimResponse::json(201, &answer)
    }
}
