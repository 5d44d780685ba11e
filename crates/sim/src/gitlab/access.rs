//! Users, memberships and what a user may do, as GitLab decides it: administrators may do
//! anything; others see public and internal groups and projects and those they are members of
//! (directly, or through a parent group), and write by role (Developer pushes and runs
//! pipelines, Maintainer manages variables, protected branches and members, Owner deletes).
//! Top-level groups need `can_create_group`, subgroups Maintainer of the parent.

use serde_json::{Value, json};

use super::{
    GitlabSim, Project, State, User, bool_field, field_errors, message, not_found, param_error,
    string_field, timestamp,
};
use crate::http::{SimRequest, SimResponse, decode};

pub const GUEST: u8 = 10;
pub const DEVELOPER: u8 = 30;
pub const MAINTAINER: u8 = 40;
pub const OWNER: u8 = 50;
/// GitLab's access levels: guest, planner, reporter, developer, maintainer, owner.
const LEVELS: &[u8] = &[10, 15, 20, 30, 40, 50];

fn forbidden() -> SimResponse {
    message(403, "403 Forbidden")
}

/// Whether a write method (GitLab's policies differ for reads).
fn writes(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD")
}

/// The refs a `git-receive-pack` request updates, from its pkt-line commands (git sends a
/// push's commands uncompressed, before the pack).
pub fn pushed_refs(body: &[u8]) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = body;
    while rest.len() >= 4 {
        let Some(length) = std::str::from_utf8(&rest[..4])
            .ok()
            .and_then(|hex| usize::from_str_radix(hex, 16).ok())
        else {
            break;
        };
        if length == 0 || length < 4 || length > rest.len() {
            break;
        }
        let line = &rest[4..length];
        let line = line.split(|b| *b == 0).next().unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        let mut words = text.trim_end().split(' ');
        if let (Some(_old), Some(_new), Some(name)) = (words.next(), words.next(), words.next()) {
            refs.push(name.to_string());
        }
        rest = &rest[length..];
    }
    refs
}

/// A pkt-line of `payload`.
fn pkt_line(payload: &[u8]) -> Vec<u8> {
    let mut line = format!("{:04x}", payload.len() + 4).into_bytes();
    line.extend_from_slice(payload);
    line
}

/// What git's `receive-pack` answers when GitLab's pre-receive check declines a push: the
/// reason on the progress channel (git prints it as `remote: GitLab: ...`) and each ref
/// rejected with `pre-receive hook declined`.
pub fn declined_push(refs: &[String], reason: &str) -> SimResponse {
    let mut status = pkt_line(b"unpack ok\n");
    for name in refs {
        status.extend(pkt_line(
            format!("ng {name} pre-receive hook declined\n").as_bytes(),
        ));
    }
    status.extend_from_slice(b"0000");
    let mut body = Vec::new();
    let mut progress = vec![2u8];
    progress.extend_from_slice(format!("GitLab: {reason}\n").as_bytes());
    body.extend(pkt_line(&progress));
    let mut report = vec![1u8];
    report.extend(status);
    body.extend(pkt_line(&report));
    body.extend_from_slice(b"0000");
    SimResponse::bytes(200, "application/x-git-receive-pack-result", body)
}

impl GitlabSim {
    pub(super) fn is_admin(state: &State, user: u64) -> bool {
        state.users.iter().any(|u| u.id == user && u.is_admin)
    }

    /// A user's level in a group: the highest of its own and its ancestors' memberships.
    pub(super) fn group_level(state: &State, user: u64, group: u64) -> u8 {
        let mut level = 0;
        let mut next = Some(group);
        let mut depth = 0;
        while let Some(id) = next {
            if let Some(members) = state.group_members.get(&id) {
                level = level.max(members.get(&user).copied().unwrap_or(0));
            }
            next = state.groups.get(&id).and_then(|g| g.parent_id);
            depth += 1;
            if depth > 20 {
                break;
            }
        }
        level
    }

    /// A user's level in a project: direct, through its group, or as owner of its personal
    /// namespace.
    pub(super) fn project_level(state: &State, user: u64, project: &Project) -> u8 {
        let direct = state
            .project_members
            .get(&project.id)
            .and_then(|members| members.get(&user))
            .copied()
            .unwrap_or(0);
        let through_namespace = if state.groups.contains_key(&project.namespace_id) {
            Self::group_level(state, user, project.namespace_id)
        } else if project.namespace_id == user {
            OWNER
        } else {
            0
        };
        direct.max(through_namespace)
    }

    fn can_see_group(state: &State, user: u64, group: u64) -> bool {
        Self::is_admin(state, user)
            || state
                .groups
                .get(&group)
                .is_some_and(|g| g.visibility != "private")
            || Self::group_level(state, user, group) > 0
            // A member of a subgroup sees its ancestors.
            || state.groups.values().any(|g| {
                let mut next = g.parent_id;
                let mut depth = 0;
                while let Some(id) = next {
                    if id == group {
                        return Self::group_level(state, user, g.id) > 0;
                    }
                    next = state.groups.get(&id).and_then(|p| p.parent_id);
                    depth += 1;
                    if depth > 20 {
                        break;
                    }
                }
                false
            })
    }

    fn can_see_project(state: &State, user: u64, project: &Project) -> bool {
        Self::is_admin(state, user)
            || project.visibility != "private"
            || Self::project_level(state, user, project) > 0
    }

    /// Whether `user` may see the group `group` (lists filter by it).
    pub(super) fn group_visible(state: &State, user: u64, group: u64) -> bool {
        Self::can_see_group(state, user, group)
    }

    /// Whether `user` may see `project` (lists filter by it).
    pub(super) fn project_visible(state: &State, user: u64, project: &Project) -> bool {
        Self::can_see_project(state, user, project)
    }

    /// GitLab's answer when `user` may not make this API request; `None` when it may. What a
    /// resource that does not exist gets is left to its handler.
    pub(super) fn authorize(
        &self,
        state: &State,
        user: u64,
        request: &SimRequest,
        segments: &[&str],
    ) -> Option<SimResponse> {
        if Self::is_admin(state, user) {
            return None;
        }
        let method = request.method.as_str();
        match segments {
            // Users and instance runners are the administrator's.
            ["users"] if method == "POST" => Some(forbidden()),
            ["users", _, ..] if writes(method) => Some(forbidden()),
            ["runners", "all"] => Some(forbidden()),
            ["runners", _, ..] if writes(method) => Some(forbidden()),
            ["user", "runners"] => {
                let body = request.params();
                let allowed = match string_field(&body, "runner_type").as_deref() {
                    Some("group_type") => string_field(&body, "group_id")
                        .and_then(|id| Self::find_group(state, &id))
                        .is_some_and(|g| Self::group_level(state, user, g) >= OWNER),
                    Some("project_type") => string_field(&body, "project_id")
                        .and_then(|id| Self::find_project(state, &id))
                        .is_some_and(|p| {
                            Self::project_level(state, user, &state.projects[&p]) >= MAINTAINER
                        }),
                    _ => false,
                };
                (!allowed).then(forbidden)
            }
            ["groups"] if method == "POST" => {
                let allowed = match string_field(&request.params(), "parent_id") {
                    // `create_subgroup`: Maintainer of the parent (GitLab's default setting).
                    Some(parent) => Self::find_group(state, &parent)
                        .is_none_or(|g| Self::group_level(state, user, g) >= MAINTAINER),
                    None => state
                        .users
                        .iter()
                        .any(|u| u.id == user && u.can_create_group),
                };
                (!allowed).then(forbidden)
            }
            ["groups", id, rest @ ..] => {
                let group = Self::find_group(state, id)?;
                if !Self::can_see_group(state, user, group) {
                    return Some(not_found("Group"));
                }
                let level = Self::group_level(state, user, group);
                let needed = match (method, rest) {
                    (_, ["members", ..]) if writes(method) => MAINTAINER,
                    (_, ["variables", ..]) => MAINTAINER,
                    ("PUT" | "DELETE", []) => OWNER,
                    _ => 0,
                };
                (level < needed).then(forbidden)
            }
            ["projects", id, rest @ ..] => {
                let project = &state.projects[&Self::find_project(state, id)?];
                if !Self::can_see_project(state, user, project) {
                    return Some(not_found("Project"));
                }
                let level = Self::project_level(state, user, project);
                let needed = match (method, rest) {
                    ("DELETE", []) => OWNER,
                    ("PUT", []) => MAINTAINER,
                    (_, ["variables", ..]) => MAINTAINER,
                    (_, ["members", ..] | ["protected_branches", ..]) if writes(method) => {
                        MAINTAINER
                    }
                    ("GET", ["runners"]) => MAINTAINER,
                    (_, ["repository", ..] | ["pipeline"]) if writes(method) => DEVELOPER,
                    // Retry, cancel, play: `update_build` and `update_pipeline`.
                    (_, ["jobs", _, _] | ["pipelines", _, _]) if writes(method) => DEVELOPER,
                    _ => 0,
                };
                if level < needed {
                    return Some(forbidden());
                }
                // A commit through the API is a push to its branch: the branch's protection
                // decides (`Gitlab::UserAccess#can_push_to_branch?`).
                let branch = string_field(&request.params(), "branch");
                match (rest, branch) {
                    (["repository", "files", ..], Some(branch))
                        if writes(method)
                            && !self.may_push_branch(state, user, project.id, &branch) =>
                    {
                        Some(message(
                            403,
                            "403 Forbidden - You are not allowed to push into this branch",
                        ))
                    }
                    (["repository", "commits"], Some(branch))
                        if method == "POST"
                            && !self.may_push_branch(state, user, project.id, &branch) =>
                    {
                        Some(SimResponse::json(
                            400,
                            &json!({"message": "You are not allowed to push into this branch"}),
                        ))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// GitLab's pre-receive verdict on a push by `user` to `project` (`None`: accepted): the
    /// project's access first (an administrator may push to any project), then each pushed
    /// branch's protection, which holds for administrators too.
    pub(super) fn push_refusal(
        &self,
        state: &State,
        user: u64,
        project: u64,
        body: &[u8],
    ) -> Option<SimResponse> {
        let record = state.projects.get(&project)?;
        let refs = pushed_refs(body);
        if !Self::is_admin(state, user) && Self::project_level(state, user, record) < DEVELOPER {
            return Some(declined_push(
                &refs,
                "You are not allowed to push code to this project.",
            ));
        }
        let refused = refs.iter().any(|name| {
            name.strip_prefix("refs/heads/")
                .is_some_and(|branch| !self.may_push_branch(state, user, project, branch))
        });
        refused.then(|| {
            declined_push(
                &refs,
                "You are not allowed to push code to protected branches on this project.",
            )
        })
    }

    fn user_json(user: &User, with_admin: bool) -> Value {
        let mut value = json!({
            "id": user.id, "username": user.username, "name": user.name, "state": "active",
            "locked": false, "web_url": format!("/{}", user.username), "created_at": user.created_at,
        });
        if with_admin {
            value["is_admin"] = json!(user.is_admin);
            value["can_create_group"] = json!(user.can_create_group);
            value["email"] = json!(user.email);
        }
        value
    }

    /// `GET /user`: the token's user.
    pub(super) fn current_user(&self, user: u64) -> SimResponse {
        let state = self.lock();
        match state.users.iter().find(|u| u.id == user) {
            Some(found) => SimResponse::json(200, &Self::user_json(found, true)),
            None => message(401, "401 Unauthorized"),
        }
    }

    /// `/users[/:id]`: create (administrators), list (`username`, `search`), read, update
    /// (`admin`, `can_create_group`, `name`), delete (the user's tokens and memberships go).
    pub(super) fn users(&self, request: &SimRequest, user: u64, rest: &[&str]) -> SimResponse {
        let mut state = self.lock();
        let admin_view = Self::is_admin(&state, user);
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let username = request.query.get("username").map(|u| u.to_lowercase());
                let search = super::search_term(request);
                let items = state
                    .users
                    .iter()
                    .filter(|u| {
                        username
                            .as_ref()
                            .is_none_or(|name| u.username.to_lowercase() == *name)
                    })
                    .filter(|u| {
                        u.username.to_lowercase().contains(&search)
                            || u.name.to_lowercase().contains(&search)
                    })
                    .map(|u| Self::user_json(u, admin_view))
                    .collect();
                drop(state);
                self.paginate(request, items)
            }
            ("POST", []) => {
                let body = request.params();
                let mut missing = Vec::new();
                for field in ["email", "name", "username"] {
                    if string_field(&body, field).is_none() {
                        missing.push(format!("{field} is missing"));
                    }
                }
                if ["password", "reset_password", "force_random_password"]
                    .iter()
                    .all(|field| body.get(*field).is_none())
                {
                    missing.push("password, reset_password, force_random_password are missing, at least one parameter must be provided".to_string());
                }
                if !missing.is_empty() {
                    return param_error(&missing.join(", "));
                }
                let email = string_field(&body, "email").unwrap_or_default();
                let username = string_field(&body, "username").unwrap_or_default();
                if state
                    .users
                    .iter()
                    .any(|u| u.email.eq_ignore_ascii_case(&email))
                {
                    return message(409, "Email has already been taken");
                }
                if state
                    .users
                    .iter()
                    .any(|u| u.username.eq_ignore_ascii_case(&username))
                {
                    return message(409, "Username has already been taken");
                }
                if !super::valid_path_chars(&username) {
                    return field_errors(json!({"username": [super::NAMESPACE_PATH_MESSAGE]}));
                }
                let id = state.id();
                let created = User {
                    id,
                    username,
                    name: string_field(&body, "name").unwrap_or_default(),
                    is_admin: bool_field(&body, "admin").unwrap_or(false),
                    can_create_group: bool_field(&body, "can_create_group").unwrap_or(true),
                    email,
                    created_at: timestamp(),
                };
                let answer = Self::user_json(&created, true);
                state.users.push(created);
                drop(state);
                self.persist();
                SimResponse::json(201, &answer)
            }
            (method, [id]) => {
                let Some(index) = id
                    .parse::<u64>()
                    .ok()
                    .and_then(|id| state.users.iter().position(|u| u.id == id))
                else {
                    return not_found("User");
                };
                match method {
                    "GET" => {
                        SimResponse::json(200, &Self::user_json(&state.users[index], admin_view))
                    }
                    "PUT" => {
                        let body = request.params();
                        let found = &mut state.users[index];
                        if let Some(admin) = bool_field(&body, "admin") {
                            found.is_admin = admin;
                        }
                        if let Some(allowed) = bool_field(&body, "can_create_group") {
                            found.can_create_group = allowed;
                        }
                        if let Some(name) = string_field(&body, "name") {
                            found.name = name;
                        }
                        let answer = Self::user_json(found, true);
                        drop(state);
                        self.persist();
                        SimResponse::json(200, &answer)
                    }
                    "DELETE" => {
                        let removed = state.users.remove(index);
                        state.tokens.retain(|_, owner| *owner != removed.id);
                        for meta in state.token_meta.values_mut() {
                            if meta.user_id == removed.id {
                                meta.revoked = true;
                            }
                        }
                        let tables = &mut *state;
                        for members in tables
                            .group_members
                            .values_mut()
                            .chain(tables.project_members.values_mut())
                        {
                            members.remove(&removed.id);
                        }
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

    /// `/groups/:id/members[/:user_id]` and `/projects/:id/members[/:user_id]`: direct members.
    pub(super) fn members(
        &self,
        request: &SimRequest,
        of_group: bool,
        id: &str,
        rest: &[&str],
    ) -> SimResponse {
        let mut state = self.lock();
        let target = if of_group {
            Self::find_group(&state, id)
        } else {
            Self::find_project(&state, id)
        };
        let Some(target) = target else {
            return not_found(if of_group { "Group" } else { "Project" });
        };
        let member_json = |state: &State, user: u64, level: u8| {
            state.users.iter().find(|u| u.id == user).map(|u| {
                let mut value = Self::user_json(u, false);
                value["access_level"] = json!(level);
                value["expires_at"] = Value::Null;
                value
            })
        };
        let members = |state: &State| {
            let table = if of_group {
                &state.group_members
            } else {
                &state.project_members
            };
            table.get(&target).cloned().unwrap_or_default()
        };
        let level_of = |body: &Value| -> Result<u8, SimResponse> {
            let Some(level) = string_field(body, "access_level") else {
                return Err(param_error("access_level is missing"));
            };
            level
                .parse::<u8>()
                .ok()
                .filter(|level| LEVELS.contains(level))
                .ok_or_else(|| param_error("access_level does not have a valid value"))
        };
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let items = members(&state)
                    .into_iter()
                    .filter_map(|(user, level)| member_json(&state, user, level))
                    .collect();
                drop(state);
                self.paginate(request, items)
            }
            ("POST", []) => {
                let body = request.params();
                let Some(user) =
                    string_field(&body, "user_id").and_then(|id| id.parse::<u64>().ok())
                else {
                    return param_error("user_id is missing");
                };
                let level = match level_of(&body) {
                    Ok(level) => level,
                    Err(response) => return response,
                };
                if !state.users.iter().any(|u| u.id == user) {
                    return not_found("User");
                }
                if members(&state).contains_key(&user) {
                    return message(409, "Member already exists");
                }
                let table = if of_group {
                    &mut state.group_members
                } else {
                    &mut state.project_members
                };
                table.entry(target).or_default().insert(user, level);
                let answer = member_json(&state, user, level);
                drop(state);
                self.persist();
                SimResponse::json(201, &answer.unwrap_or(Value::Null))
            }
            (method, [user]) => {
                let user = decode(user).parse::<u64>().unwrap_or(0);
                if !members(&state).contains_key(&user) {
                    return not_found("Member");
                }
                let table = if of_group {
                    &mut state.group_members
                } else {
                    &mut state.project_members
                };
                let entry = table.entry(target).or_default();
                match method {
                    "GET" => {
                        let level = entry.get(&user).copied().unwrap_or(GUEST);
                        SimResponse::json(
                            200,
                            &member_json(&state, user, level).unwrap_or(Value::Null),
                        )
                    }
                    "PUT" => {
                        let level = match level_of(&request.params()) {
                            Ok(level) => level,
                            Err(response) => return response,
                        };
                        entry.insert(user, level);
                        let answer = member_json(&state, user, level);
                        drop(state);
                        self.persist();
                        SimResponse::json(200, &answer.unwrap_or(Value::Null))
                    }
                    "DELETE" => {
                        entry.remove(&user);
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
    fn a_pushs_commands_name_its_refs() {
        let zero = "0".repeat(40);
        let one = "1".repeat(40);
        let mut body = pkt_line(
            format!("{zero} {one} refs/heads/main\0report-status side-band-64k\n").as_bytes(),
        );
        body.extend(pkt_line(
            format!("{one} {zero} refs/heads/old\n").as_bytes(),
        ));
        body.extend_from_slice(b"0000PACK....");
        assert_eq!(pushed_refs(&body), ["refs/heads/main", "refs/heads/old"]);
        assert_eq!(pushed_refs(b"garbage"), Vec::<String>::new());
    }
}
