//! The commits API (`/projects/:id/repository/commits`): list, one commit, and a commit of
//! several file actions, with GitLab's checks and wording (`Commits::CreateService` and
//! Gitaly's `UserCommitFiles`). An API commit starts a push pipeline, as any commit does.

use base64::Engine as _;
use serde_json::{Value, json};

use super::{GitlabSim, State, bool_field, message, not_found, param_error, string_field};
use crate::git::{CommitInfo, TreeChange};
use crate::http::{SimRequest, SimResponse};

const ACTIONS: &[&str] = &["create", "update", "move", "delete", "chmod"];

/// One entry of `actions`, checked for its parameters (Grape's part of the validation).
#[derive(Debug, Clone, PartialEq)]
struct Action {
    kind: String,
    file_path: String,
    previous_path: Option<String>,
    content: Option<Vec<u8>>,
    executable: Option<bool>,
    last_commit_id: Option<String>,
}

/// A path GitLab's `file_path` validator accepts: relative, no `.`/`..` segment, no NUL.
fn valid_file_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

/// Grape's parameter errors for `actions`, joined as Grape joins them.
fn parse_actions(body: &Value) -> Result<Vec<Action>, String> {
    let Some(entries) = body.get("actions").and_then(Value::as_array) else {
        return Err("actions is missing".to_string());
    };
    if entries.is_empty() {
        return Err("actions is empty".to_string());
    }
    let mut errors = Vec::new();
    let mut actions = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let field = |name: &str| format!("actions[{index}][{name}]");
        let kind = string_field(entry, "action");
        match kind.as_deref() {
            None => errors.push(format!("{} is missing", field("action"))),
            Some(kind) if !ACTIONS.contains(&kind) => {
                errors.push(format!("{} does not have a valid value", field("action")))
            }
            Some(_) => {}
        }
        let file_path = string_field(entry, "file_path");
        match file_path.as_deref() {
            None => errors.push(format!("{} is missing", field("file_path"))),
            Some(path) if !valid_file_path(path) => errors.push(format!(
                "{} should be a valid file path",
                field("file_path")
            )),
            Some(_) => {}
        }
        let previous_path = string_field(entry, "previous_path");
        if previous_path
            .as_deref()
            .is_some_and(|p| !valid_file_path(p))
        {
            errors.push(format!(
                "{} should be a valid file path",
                field("previous_path")
            ));
        }
        let encoding = string_field(entry, "encoding");
        let content = match (string_field(entry, "content"), encoding.as_deref()) {
            (None, _) => None,
            (Some(text), None | Some("text")) => Some(text.into_bytes()),
            (Some(text), Some("base64")) => {
                match base64::engine::general_purpose::STANDARD.decode(text.trim()) {
                    Ok(bytes) => Some(bytes),
                    Err(_) => {
                        errors.push(format!("{} is invalid base64", field("content")));
                        None
                    }
                }
            }
            (Some(_), Some(_)) => {
                errors.push(format!("{} does not have a valid value", field("encoding")));
                None
            }
        };
        if let (Some(kind), Some(file_path)) = (kind, file_path) {
            actions.push(Action {
                kind,
                file_path,
                previous_path,
                content,
                executable: bool_field(entry, "execute_filemode"),
                last_commit_id: string_field(entry, "last_commit_id"),
            });
        }
    }
    if errors.is_empty() {
        Ok(actions)
    } else {
        Err(errors.join(", "))
    }
}

/// The tree as the actions see it, one after another: path -> (executable, content).
type Files = std::collections::BTreeMap<String, (bool, Vec<u8>)>;

/// Puts `path` into `files` and says so as a tree change.
fn write(files: &mut Files, path: &str, executable: bool, content: Vec<u8>) -> TreeChange {
    files.insert(path.to_string(), (executable, content.clone()));
    TreeChange::Write {
        path: path.to_string(),
        content,
        executable,
    }
}

/// Applies one action to `files` in Gitaly's words; returns the tree changes it makes.
fn apply(files: &mut Files, action: &Action) -> Result<Vec<TreeChange>, String> {
    const EXISTS: &str = "A file with this name already exists";
    const MISSING: &str = "A file with this name doesn't exist";
    let path = &action.file_path;
    let is_directory = |files: &Files, path: &str| {
        let prefix = format!("{path}/");
        files.keys().any(|file| file.starts_with(&prefix))
    };
    match action.kind.as_str() {
        "create" => {
            if files.contains_key(path) {
                return Err(EXISTS.to_string());
            }
            if is_directory(files, path) {
                return Err("A directory with this name already exists".to_string());
            }
            let content = action.content.clone().unwrap_or_default();
            let executable = action.executable.unwrap_or(false);
            Ok(vec![write(files, path, executable, content)])
        }
        "update" => {
            let Some((executable, _)) = files.get(path).cloned() else {
                return Err(MISSING.to_string());
            };
            let content = action.content.clone().unwrap_or_default();
            Ok(vec![write(files, path, executable, content)])
        }
        "delete" => {
            if files.remove(path).is_none() {
                return Err(MISSING.to_string());
            }
            Ok(vec![TreeChange::Remove { path: path.clone() }])
        }
        "chmod" => {
            let Some((_, content)) = files.get(path).cloned() else {
                return Err(MISSING.to_string());
            };
            let executable = action.executable.unwrap_or(false);
            Ok(vec![write(files, path, executable, content)])
        }
        "move" => {
            let previous = action.previous_path.clone().unwrap_or_else(|| path.clone());
            let Some((executable, old_content)) = files.get(&previous).cloned() else {
                return Err(MISSING.to_string());
            };
            if previous != *path && files.contains_key(path) {
                return Err(EXISTS.to_string());
            }
            // Without `content`, the file moves as it is.
            let content = action.content.clone().unwrap_or(old_content);
            files.remove(&previous);
            let mut changes = Vec::new();
            if previous != *path {
                changes.push(TreeChange::Remove { path: previous });
            }
            changes.push(write(files, path, executable, content));
            Ok(changes)
        }
        other => Err(format!("Unknown action '{other}'")),
    }
}

impl GitlabSim {
    /// `Entities::Commit` (and `CommitDetail` with `stats`).
    fn commit_json(&self, full: &str, project_id: u64, info: &CommitInfo) -> Value {
        json!({
            "id": info.id, "short_id": &info.id[..info.id.len().min(8)],
            "created_at": info.committed_date, "parent_ids": info.parent_ids,
            "title": info.title(), "message": info.message,
            "author_name": info.author_name, "author_email": info.author_email,
            "authored_date": info.authored_date,
            "committer_name": info.committer_name, "committer_email": info.committer_email,
            "committed_date": info.committed_date, "trailers": {}, "extended_trailers": {},
            "web_url": format!("{}/{full}/-/commit/{}", self.base_url(), info.id),
            "project_id": project_id,
        })
    }

    fn commit_detail(&self, full: &str, project_id: u64, commit: &str) -> Option<Value> {
        let (info, (additions, deletions)) = self.repos.commit_info(full, commit)?;
        let mut answer = self.commit_json(full, project_id, &info);
        answer["stats"] =
            json!({"additions": additions, "deletions": deletions, "total": additions + deletions});
        answer["status"] = Value::Null;
        answer["last_pipeline"] = Value::Null;
        Some(answer)
    }

    /// `GET|POST /projects/:id/repository/commits[/:sha]`.
    pub(super) fn commits(&self, request: &SimRequest, id: &str, rest: &[&str]) -> SimResponse {
        let (project_id, full, default_branch) = {
            let state = self.lock();
            let Some(project_id) = Self::find_project(&state, id) else {
                return not_found("Project");
            };
            let project = &state.projects[&project_id];
            (
                project_id,
                Self::project_path(&state, project),
                project.default_branch.clone(),
            )
        };
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let all = super::query_flag(request, "all");
                let reference = request
                    .query
                    .get("ref_name")
                    .cloned()
                    .or(default_branch)
                    .unwrap_or_else(|| "main".to_string());
                // An unknown ref lists nothing, as GitLab answers it.
                let commits = if all {
                    self.repos.log(
                        &full,
                        &["--all"],
                        request.query.get("path").map(String::as_str),
                        request.query.get("since").map(String::as_str),
                        request.query.get("until").map(String::as_str),
                    )
                } else {
                    match self.repos.resolve(&full, &reference) {
                        Some(commit) => self.repos.log(
                            &full,
                            &[&commit],
                            request.query.get("path").map(String::as_str),
                            request.query.get("since").map(String::as_str),
                            request.query.get("until").map(String::as_str),
                        ),
                        None => Vec::new(),
                    }
                };
                let items = commits
                    .iter()
                    .map(|info| self.commit_json(&full, project_id, info))
                    .collect();
                self.paginate(request, items)
            }
            ("GET", [sha]) => {
                let revision = crate::http::decode(sha);
                match self
                    .repos
                    .resolve(&full, &revision)
                    .and_then(|commit| self.commit_detail(&full, project_id, &commit))
                {
                    Some(answer) => SimResponse::json(200, &answer),
                    None => not_found("Commit"),
                }
            }
            ("POST", []) => self.create_commit(request, project_id, &full),
            _ => message(404, "404 Not Found"),
        }
    }

    fn create_commit(&self, request: &SimRequest, project_id: u64, full: &str) -> SimResponse {
        let body = request.params();
        let branch = string_field(&body, "branch");
        let commit_message = string_field(&body, "commit_message");
        let mut missing: Vec<&str> = Vec::new();
        if branch.is_none() {
            missing.push("branch is missing");
        }
        if commit_message.is_none() {
            missing.push("commit_message is missing");
        }
        let actions = parse_actions(&body);
        let mut errors: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
        if let Err(error) = &actions {
            errors.push(error.clone());
        }
        let start_branch = string_field(&body, "start_branch");
        let start_sha = string_field(&body, "start_sha");
        if start_branch.is_some() && start_sha.is_some() {
            errors.push("start_branch, start_sha are mutually exclusive".to_string());
        }
        let (Some(branch), Some(commit_message), Ok(actions)) = (branch, commit_message, actions)
        else {
            return param_error(&errors.join(", "));
        };
        if !errors.is_empty() {
            return param_error(&errors.join(", "));
        }
        let force = bool_field(&body, "force").unwrap_or(false);
        let refuse = |text: &str| SimResponse::json(400, &json!({"message": text}));
        // One writer at a time per simulator: the checks and the commit see the same heads.
        let mut state = self.lock();
        let empty = self.repos.branches(full).is_empty();
        let branch_head = self.repos.head(full, &branch);
        // The API starts from the branch itself when no start is given.
        let start = start_branch.clone().unwrap_or_else(|| branch.clone());
        let parent = if let Some(sha) = &start_sha {
            if !(7..=40).contains(&sha.len()) || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                return refuse(&format!("Invalid start_sha '{sha}'"));
            }
            match self.repos.resolve(full, sha) {
                Some(commit) => Some(commit),
                None => return refuse(&format!("Cannot find start_sha '{sha}'")),
            }
        } else if empty {
            None
        } else {
            match self.repos.head(full, &start) {
                Some(head) => Some(head),
                None => {
                    return refuse("You can only create or edit files when you are on a branch");
                }
            }
        };
        let different_branch = start != branch || start_sha.is_some();
        if !empty && different_branch && branch_head.is_some() && !force {
            return refuse(&format!(
                "A branch called '{branch}' already exists. Switch to that branch in order to make changes"
            ));
        }
        // The parent's tree in two git processes, whatever its size.
        let mut files: Files = match &parent {
            Some(parent) => self.repos.tree_files(full, parent),
            None => Files::new(),
        };
        let mut changes = Vec::new();
        for action in &actions {
            if let (Some(last), Some(parent)) = (&action.last_commit_id, &parent) {
                let touched = self
                    .repos
                    .log(full, &[parent], Some(&action.file_path), None, None);
                if touched.first().is_some_and(|info| info.id != *last) {
                    return refuse(
                        "You are attempting to update a file that has changed since you started editing it.",
                    );
                }
            }
            match apply(&mut files, action) {
                Ok(more) => changes.extend(more),
                Err(error) => return refuse(&error),
            }
        }
        let author = string_field(&body, "author_name").zip(string_field(&body, "author_email"));
        let commit = match self.repos.commit_changes(
            full,
            &branch,
            // With `force`, the branch is moved whatever it held: onto the start plus the changes.
            branch_head.as_deref(),
            parent.as_deref(),
            &changes,
            &commit_message,
            author.as_ref().map(|(n, e)| (n.as_str(), e.as_str())),
        ) {
            Ok(commit) => commit,
            Err(error) => return message(500, &format!("500 Internal Server Error: {error}")),
        };
        self.after_api_commit(
            &mut state,
            project_id,
            full,
            &branch,
            branch_head.as_deref(),
        );
        drop(state);
        self.persist();
        match self.commit_detail(full, project_id, &commit) {
            Some(answer) => SimResponse::json(201, &answer),
            None => message(
                500,
                "500 Internal Server Error: the new commit cannot be read",
            ),
        }
    }

    /// `initialize_with_readme`: the new project's first commit, a README on its default branch.
    pub(super) fn initial_readme(
        &self,
        state: &mut State,
        project_id: u64,
        full: &str,
        branch: &str,
        name: &str,
    ) -> Result<(), String> {
        let readme = TreeChange::Write {
            path: "README.md".to_string(),
            content: format!("# {name}\n").into_bytes(),
            executable: false,
        };
        self.repos
            .commit_changes(full, branch, None, None, &[readme], "Initial commit", None)?;
        self.after_api_commit(state, project_id, full, branch, None);
        Ok(())
    }

    /// What follows any commit made through the API: the first branch of an empty project
    /// becomes its default branch, and the branch gets a push pipeline (when it has a CI
    /// configuration), as a `git push` would.
    pub(super) fn after_api_commit(
        &self,
        state: &mut State,
        project_id: u64,
        full: &str,
        branch: &str,
        before: Option<&str>,
    ) {
        if let Some(project) = state.projects.get_mut(&project_id)
            && project.default_branch.is_none()
        {
            project.default_branch = Some(branch.to_string());
            self.repos.set_head(full, branch);
        }
        let _ = self.start_pipeline(state, project_id, branch, "push", before, Vec::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(kind: &str, path: &str) -> Action {
        Action {
            kind: kind.to_string(),
            file_path: path.to_string(),
            previous_path: None,
            content: Some(b"x".to_vec()),
            executable: None,
            last_commit_id: None,
        }
    }

    #[test]
    fn grape_names_every_bad_action_field() {
        let body = json!({"actions": [{"action": "rename", "file_path": "a"}, {"action": "create"},
                                      {"action": "create", "file_path": "../etc/passwd"}]});
        assert_eq!(
            parse_actions(&body).unwrap_err(),
            "actions[0][action] does not have a valid value, actions[1][file_path] is missing, \
             actions[2][file_path] should be a valid file path"
        );
        assert_eq!(parse_actions(&json!({})).unwrap_err(), "actions is missing");
    }

    #[test]
    fn actions_see_the_tree_as_the_earlier_actions_left_it() {
        let mut files = Files::new();
        files.insert("README.md".into(), (false, b"hi".to_vec()));
        assert!(apply(&mut files, &action("create", "a.txt")).is_ok());
        assert_eq!(
            apply(&mut files, &action("create", "a.txt")).unwrap_err(),
            "A file with this name already exists"
        );
        assert_eq!(
            apply(&mut files, &action("update", "b.txt")).unwrap_err(),
            "A file with this name doesn't exist"
        );
        let mut moved = action("move", "docs/README.md");
        moved.previous_path = Some("README.md".into());
        moved.content = None;
        let changes = apply(&mut files, &moved).expect("moves");
        assert_eq!(changes.len(), 2);
        assert_eq!(files["docs/README.md"].1, b"hi".to_vec());
        assert_eq!(
            apply(&mut files, &action("create", "docs")).unwrap_err(),
            "A directory with this name already exists"
        );
        assert!(apply(&mut files, &action("delete", "a.txt")).is_ok());
        assert_eq!(
            apply(&mut files, &action("delete", "a.txt")).unwrap_err(),
            "A file with this name doesn't exist"
        );
    }
}
