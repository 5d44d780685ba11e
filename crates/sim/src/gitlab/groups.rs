//! Groups and subgroups: paths as GitLab validates them, full paths and names, create, update,
//! delete.

use super::access::OWNER;
use super::{
    GitlabSim, NAMESPACE_PATH_MESSAGE, State, message, not_found, param_error, search_term,
    string_field, timestamp, valid_path_chars, valid_visibility, visibility_rank,
};
use crate::http::{SimRequest, SimResponse, decode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Group {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) path: String,
    /// The parent group of a subgroup.
    #[serde(default)]
    pub(super) parent_id: Option<u64>,
    pub(super) visibility: String,
    pub(super) description: String,
    pub(super) created_at: String,
}

/// GitLab's `Gitlab::PathRegex.namespace_format_regex` for group paths.
pub(super) fn valid_group_path(path: &str) -> bool {
    valid_path_chars(path) && !path.ends_with('.')
}

/// GitLab's `TOP_LEVEL_ROUTES`: names a top-level group cannot take.
pub(super) const RESERVED_TOP_LEVEL: &[&str] = &[
    "-",
    ".well-known",
    "404.html",
    "422.html",
    "500.html",
    "502.html",
    "503.html",
    "admin",
    "api",
    "apple-touch-icon.png",
    "assets",
    "dashboard",
    "deploy.html",
    "explore",
    "favicon.ico",
    "favicon.png",
    "files",
    "groups",
    "health_check",
    "help",
    "import",
    "jwt",
    "login",
    "oauth",
    "profile",
    "projects",
    "public",
    "robots.txt",
    "s",
    "search",
    "sitemap",
    "sitemap.xml",
    "sitemap.xml.gz",
    "slash-command-logo.png",
    "snippets",
    "unsubscribes",
    "uploads",
    "users",
    "v2",
];
impl GitlabSim {
    /// `GET /groups`: the groups the user sees, filtered by `search`.
    pub(super) fn list_groups(&self, request: &SimRequest, user: u64) -> SimResponse {
        let state = self.lock();
        let search = search_term(request);
        let items = state
            .groups
            .values()
            .filter(|g| Self::group_visible(&state, user, g.id))
            .filter(|g| {
                g.path.to_lowercase().contains(&search) || g.name.to_lowercase().contains(&search)
            })
            .map(|g| self.group_json(&state, g))
            .collect();
        drop(state);
        self.paginate(request, items)
    }

    /// `GET /groups/:id`.
    pub(super) fn group(&self, id: &str) -> SimResponse {
        let state = self.lock();
        match Self::find_group(&state, id) {
            Some(found) => SimResponse::json(200, &self.group_json(&state, &state.groups[&found])),
            None => not_found("Group"),
        }
    }

    /// `GET /groups/:id/projects`.
    pub(super) fn group_projects(&self, request: &SimRequest, user: u64, id: &str) -> SimResponse {
        let group = Self::find_group(&self.lock(), id);
        match group {
            Some(group) => self.list_projects(request, user, Some(group)),
            None => not_found("Group"),
        }
    }

    /// A group's full path (`parent/child`) and full name (`Parent / Child`).
    pub(super) fn group_full(state: &State, id: u64) -> (String, String) {
        let mut paths = Vec::new();
        let mut names = Vec::new();
        let mut next = Some(id);
        while let Some(id) = next {
            let Some(group) = state.groups.get(&id) else {
                break;
            };
            paths.push(group.path.clone());
            names.push(group.name.clone());
            next = group.parent_id;
            if paths.len() > 20 {
                break;
            }
        }
        paths.reverse();
        names.reverse();
        (paths.join("/"), names.join(" / "))
    }

    pub(super) fn group_json(&self, state: &State, group: &Group) -> Value {
        let (full_path, full_name) = Self::group_full(state, group.id);
        json!({
            "id": group.id, "name": group.name, "path": group.path, "full_path": full_path, "full_name": full_name,
            "visibility": group.visibility, "description": group.description, "parent_id": group.parent_id,
            "web_url": format!("{}/groups/{full_path}", self.base_url()), "created_at": group.created_at,
        })
    }

    pub(super) fn find_group(state: &State, id: &str) -> Option<u64> {
        let id = decode(id);
        match id.parse::<u64>() {
            Ok(number) => state.groups.contains_key(&number).then_some(number),
            Err(_) => state
                .groups
                .keys()
                .find(|group| Self::group_full(state, **group).0 == id)
                .copied(),
        }
    }

    pub(super) fn create_group(&self, request: &SimRequest, user: u64) -> SimResponse {
        let body = request.params();
        let Some(name) = string_field(&body, "name") else {
            return param_error("name is missing");
        };
        let Some(path) = string_field(&body, "path") else {
            return param_error("path is missing");
        };
        let visibility = string_field(&body, "visibility").unwrap_or_else(|| "private".into());
        if !valid_visibility(&visibility) {
            return param_error("visibility does not have a valid value");
        }
        let mut state = self.lock();
        let parent_id = match string_field(&body, "parent_id") {
            Some(parent) => match Self::find_group(&state, &parent) {
                Some(parent) => Some(parent),
                None => return not_found("Group"),
            },
            None => None,
        };
        // GitLab's validations, worded as `Failed to save group {:attribute=>[messages]}`.
        let mut errors: Vec<(&str, String)> = Vec::new();
        if !valid_group_path(&path) {
            errors.push(("path", NAMESPACE_PATH_MESSAGE.to_string()));
        } else if parent_id.is_none() && RESERVED_TOP_LEVEL.contains(&path.to_lowercase().as_str())
        {
            errors.push(("path", format!("{path} is a reserved name")));
        }
        if state
            .groups
            .values()
            .any(|g| g.parent_id == parent_id && g.path.eq_ignore_ascii_case(&path))
        {
            errors.push(("path", "has already been taken".to_string()));
        }
        if let Some(parent) = parent_id.and_then(|id| state.groups.get(&id))
            && visibility_rank(&visibility) > visibility_rank(&parent.visibility)
        {
            errors.push((
                "visibility_level",
                format!(
                    "{visibility} is not allowed since the parent group has a {} visibility.",
                    parent.visibility
                ),
            ));
        }
        if !errors.is_empty() {
            let mut by_key: Vec<(&str, Vec<String>)> = Vec::new();
            for (key, text) in errors {
                match by_key.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, list)) => list.push(text),
                    None => by_key.push((key, vec![text])),
                }
            }
            let hash = by_key
                .iter()
                .map(|(key, list)| {
                    let items: Vec<String> = list.iter().map(|t| format!("{t:?}")).collect();
                    format!(":{key}=>[{}]", items.join(", "))
                })
                .collect::<Vec<_>>()
                .join(", ");
            return message(400, &format!("Failed to save group {{{hash}}}"));
        }
        let id = state.id();
        let group = Group {
            id,
            name,
            path,
            parent_id,
            visibility,
            description: string_field(&body, "description").unwrap_or_default(),
            created_at: timestamp(),
        };
        state.groups.insert(id, group.clone());
        // The creator owns the group, as on GitLab.
        state
            .group_members
            .entry(id)
            .or_default()
            .insert(user, OWNER);
        let answer = self.group_json(&state, &group);
        drop(state);
        self.persist();
        SimResponse::json(201, &answer)
    }

    pub(super) fn update_group(&self, request: &SimRequest, id: &str) -> SimResponse {
        let body = request.params();
        let mut state = self.lock();
        let Some(found) = Self::find_group(&state, id) else {
            return not_found("Group");
        };
        if let Some(visibility) = string_field(&body, "visibility") {
            if !valid_visibility(&visibility) {
                return param_error("visibility does not have a valid value");
            }
            if let Some(group) = state.groups.get_mut(&found) {
                group.visibility = visibility;
            }
        }
        if let Some(description) = string_field(&body, "description")
            && let Some(group) = state.groups.get_mut(&found)
        {
            group.description = description;
        }
        let answer = self.group_json(&state, &state.groups[&found]);
        drop(state);
        self.persist();
        SimResponse::json(200, &answer)
    }

    pub(super) fn delete_group(&self, id: &str) -> SimResponse {
        let mut state = self.lock();
        let Some(found) = Self::find_group(&state, id) else {
            return not_found("Group");
        };
        // The group, its subgroups, and their projects.
        let mut doomed = vec![found];
        let mut index = 0;
        while index < doomed.len() {
            let parent = doomed[index];
            doomed.extend(
                state
                    .groups
                    .values()
                    .filter(|g| g.parent_id == Some(parent))
                    .map(|g| g.id),
            );
            index += 1;
        }
        let projects: Vec<u64> = state
            .projects
            .values()
            .filter(|p| doomed.contains(&p.namespace_id))
            .map(|p| p.id)
            .collect();
        for project in projects {
            let full = Self::project_path(&state, &state.projects[&project]);
            state.projects.remove(&project);
            state.variables.remove(&project);
            self.repos.remove(&full);
        }
        for group in doomed {
            state.groups.remove(&group);
        }
        drop(state);
        self.persist();
        message(202, "202 Accepted")
    }
}
