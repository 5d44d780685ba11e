//! Protected branches: who may push to and merge into a branch (GitLab's `ProtectedBranch`,
//! one role access level each), the API that manages them, and the push check that enforces
//! them (`ProtectedRefAccess#check_access`).
//!
//! As GitLab does with its default "fully protected" setting, a project's default branch is
//! protected (Maintainers push and merge) once it exists, unless someone unprotected it.
//! Not modelled: force pushes (`allow_force_push` is kept and reported only), protection by
//! user, group or deploy key (Premium), wildcard names, and the instance setting itself.

use super::access::{DEVELOPER, MAINTAINER};
use super::{GitlabSim, State, bool_field, message, not_found, param_error, string_field};
use crate::http::{SimRequest, SimResponse, decode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// GitLab's `Gitlab::Access::NO_ACCESS` and `ADMIN` as protected-ref levels.
pub const NO_ONE: u8 = 0;
pub const INSTANCE_ADMINS: u8 = 60;

/// One protected branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredProtection")]
pub(super) struct Protection {
    pub(super) name: String,
    pub(super) push_access_level: u8,
    pub(super) merge_access_level: u8,
    pub(super) allow_force_push: bool,
}

/// State written before protections had levels held only the name (Maintainers for both).
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredProtection {
    Name(String),
    Levels {
        name: String,
        push_access_level: u8,
        merge_access_level: u8,
        #[serde(default)]
        allow_force_push: bool,
    },
}

impl From<StoredProtection> for Protection {
    fn from(stored: StoredProtection) -> Self {
        match stored {
            StoredProtection::Name(name) => Protection::fully(name),
            StoredProtection::Levels {
                name,
                push_access_level,
                merge_access_level,
                allow_force_push,
            } => Protection {
                name,
                push_access_level,
                merge_access_level,
                allow_force_push,
            },
        }
    }
}

impl Protection {
    /// GitLab's default protection (`PROTECTION_FULL`): Maintainers push and merge.
    fn fully(name: String) -> Self {
        Protection {
            name,
            push_access_level: MAINTAINER,
            merge_access_level: MAINTAINER,
            allow_force_push: false,
        }
    }

    /// `ProtectedRefAccess#check_access` for one role level: "No one" admits nobody, not even
    /// an administrator; "Instance admins" only them; a role level, a member at that level or
    /// above (an administrator who is not a member is not one).
    pub(super) fn admits(level: u8, member_level: u8, admin: bool) -> bool {
        match level {
            NO_ONE => false,
            INSTANCE_ADMINS => admin,
            role => member_level >= role,
        }
    }
}

/// GitLab's words for an access level (`ProtectedRefAccess.human_access_levels`).
fn describe(level: u8) -> &'static str {
    match level {
        NO_ONE => "No one",
        DEVELOPER => "Developers + Maintainers",
        MAINTAINER => "Maintainers",
        INSTANCE_ADMINS => "Instance admins",
        _ => "Unknown",
    }
}

/// A level the API accepts for `push_access_level` and `merge_access_level`.
fn level_param(params: &Value, key: &str) -> Result<u8, SimResponse> {
    let Some(text) = string_field(params, key) else {
        return Ok(MAINTAINER);
    };
    match text.parse::<u8>() {
        Ok(level @ (NO_ONE | DEVELOPER | MAINTAINER | INSTANCE_ADMINS)) => Ok(level),
        _ => Err(param_error(&format!("{key} does not have a valid value"))),
    }
}

impl GitlabSim {
    /// The protected branches of a project: the default branch once it exists (unless
    /// unprotected, or protected otherwise through the API) and those protected through the API.
    pub(super) fn protections(&self, state: &State, project: u64) -> Vec<Protection> {
        let explicit = state.protected.get(&project).cloned().unwrap_or_default();
        let mut list = Vec::new();
        if let Some(default) = state
            .projects
            .get(&project)
            .and_then(|p| p.default_branch.clone())
            && !state
                .unprotected
                .get(&project)
                .is_some_and(|names| names.contains(&default))
            && !explicit.iter().any(|p| p.name == default)
        {
            list.push(Protection::fully(default));
        }
        list.extend(explicit);
        list
    }

    /// The names of a project's protected branches.
    pub(super) fn protected_list(&self, state: &State, project: u64) -> Vec<String> {
        self.protections(state, project)
            .into_iter()
            .map(|p| p.name)
            .collect()
    }

    /// Whether `user` may push to `branch` of `project` (`Gitlab::UserAccess#can_push_to_branch?`
    /// once the user may push to the project at all).
    pub(super) fn may_push_branch(
        &self,
        state: &State,
        user: u64,
        project: u64,
        branch: &str,
    ) -> bool {
        let Some(record) = state.projects.get(&project) else {
            return false;
        };
        let Some(protection) = self
            .protections(state, project)
            .into_iter()
            .find(|p| p.name == branch)
        else {
            return true;
        };
        let admin = Self::is_admin(state, user);
        let member_level = Self::project_level(state, user, record);
        // `ProtectedBranch.protected_ref_accessible_to?`: into an empty repository,
        // administrators and Maintainers may create the protected default branch.
        if record.default_branch.is_none() && (admin || member_level > DEVELOPER) {
            return true;
        }
        Protection::admits(protection.push_access_level, member_level, admin)
    }

    fn protected_json(project: u64, protection: &Protection, index: usize) -> Value {
        let id = project * 1000 + index as u64;
        let level = |level: u8| {
            json!([{"id": id, "access_level": level, "access_level_description": describe(level),
                    "user_id": null, "group_id": null}])
        };
        json!({"id": id, "name": protection.name,
               "push_access_levels": level(protection.push_access_level),
               "merge_access_levels": level(protection.merge_access_level),
               "unprotect_access_levels": [], "allow_force_push": protection.allow_force_push,
               "code_owner_approval_required": false})
    }

    /// `GET|POST /projects/:id/protected_branches`, `GET|DELETE .../:name`.
    pub(super) fn protected_branches(
        &self,
        request: &SimRequest,
        id: &str,
        rest: &[&str],
    ) -> SimResponse {
        let mut state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let list = self.protections(&state, project);
        let json_of = |protection: &Protection| {
            let index = list
                .iter()
                .position(|p| p == protection)
                .unwrap_or(list.len());
            Self::protected_json(project, protection, index)
        };
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let items = list.iter().map(json_of).collect();
                drop(state);
                self.paginate(request, items)
            }
            ("POST", []) => {
                let params = request.params();
                let Some(name) = string_field(&params, "name") else {
                    return param_error("name is missing");
                };
                if list.iter().any(|p| p.name == name) {
                    return message(409, &format!("Protected branch '{name}' already exists"));
                }
                let protection = match (
                    level_param(&params, "push_access_level"),
                    level_param(&params, "merge_access_level"),
                ) {
                    (Ok(push), Ok(merge)) => Protection {
                        name: name.clone(),
                        push_access_level: push,
                        merge_access_level: merge,
                        allow_force_push: bool_field(&params, "allow_force_push").unwrap_or(false),
                    },
                    (Err(refusal), _) | (_, Err(refusal)) => return refusal,
                };
                if let Some(names) = state.unprotected.get_mut(&project) {
                    names.retain(|n| *n != name);
                }
                let answer = Self::protected_json(project, &protection, list.len());
                state.protected.entry(project).or_default().push(protection);
                drop(state);
                self.persist();
                SimResponse::json(201, &answer)
            }
            (method, [name]) => {
                let name = decode(name);
                let Some(protection) = list.iter().find(|p| p.name == name) else {
                    return not_found("Protected Branch");
                };
                match method {
                    "GET" => SimResponse::json(200, &json_of(protection)),
                    "DELETE" => {
                        if let Some(entries) = state.protected.get_mut(&project) {
                            entries.retain(|p| p.name != name);
                        }
                        state.unprotected.entry(project).or_default().push(name);
                        drop(state);
                        self.persist();
                        SimResponse::empty(204)
                    }
                    _ => message(405, "405 Method Not Allowed"),
                }
            }
            _ => message(404, "404 Not Found"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_one_admits_nobody_and_a_role_level_only_members_at_it() {
        let owner = 50;
        assert!(!Protection::admits(NO_ONE, owner, true));
        assert!(Protection::admits(MAINTAINER, owner, false));
        assert!(Protection::admits(MAINTAINER, MAINTAINER, false));
        assert!(!Protection::admits(MAINTAINER, DEVELOPER, false));
        // An administrator who is not a member has no role in the project.
        assert!(!Protection::admits(MAINTAINER, 0, true));
        assert!(Protection::admits(INSTANCE_ADMINS, 0, true));
        assert!(!Protection::admits(INSTANCE_ADMINS, owner, false));
    }

    #[test]
    fn state_written_with_names_only_reads_as_fully_protected() {
        let read: Vec<Protection> = serde_json::from_str(
            r#"["main", {"name": "release", "push_access_level": 0, "merge_access_level": 40}]"#,
        )
        .expect("stored protections");
        assert_eq!(
            read,
            vec![
                Protection::fully("main".into()),
                Protection {
                    name: "release".into(),
                    push_access_level: NO_ONE,
                    merge_access_level: MAINTAINER,
                    allow_force_push: false,
                },
            ]
        );
        let written = serde_json::to_string(&read).expect("serialise");
        let again: Vec<Protection> = serde_json::from_str(&written).expect("read back");
        assert_eq!(again, read);
    }
}
