//! The repository files API: read (raw or as JSON with its blob and commit) and write files of a
//! project's repository.

use super::{GitlabSim, message, not_found, param_error, sha_of, string_field};
use crate::http::{SimRequest, SimResponse, decode};
use base64::Engine as _;
use bprun_clients::digest::sha256_hex;
use serde_json::json;

impl GitlabSim {
    pub(super) fn files(
        &self,
        request: &SimRequest,
        id: &str,
        file: &str,
        rest: &[&str],
    ) -> SimResponse {
        let file_path = decode(file);
        let mut state = self.lock();
        let Some(project_id) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let full = Self::project_path(&state, &state.projects[&project_id]);
        match (request.method.as_str(), rest) {
            (method @ ("GET" | "HEAD"), rest @ ([] | ["raw"])) => {
                let reference = request
                    .query
                    .get("ref")
                    .cloned()
                    .or_else(|| state.projects[&project_id].default_branch.clone());
                drop(state);
                let Some(reference) = reference else {
                    return param_error("ref is missing");
                };
                let Some(content) = self.repos.read_file(&full, &reference, &file_path) else {
                    return not_found("File");
                };
                if rest == ["raw"] {
                    return SimResponse::text(200, &content);
                }
                let commit = self
                    .repos
                    .head(&full, &reference)
                    .unwrap_or_else(|| sha_of(&reference));
                if method == "HEAD" {
                    // GitLab answers HEAD with the file's metadata in headers and no body.
                    let name = file_path
                        .rsplit('/')
                        .next()
                        .unwrap_or(&file_path)
                        .to_string();
                    return SimResponse::empty(200)
                        .with_header("x-gitlab-file-name", name)
                        .with_header("x-gitlab-file-path", file_path.clone())
                        .with_header("x-gitlab-size", content.len().to_string())
                        .with_header("x-gitlab-encoding", "base64")
                        .with_header("x-gitlab-content-sha256", sha256_hex(&content))
                        .with_header("x-gitlab-ref", reference.clone())
                        .with_header("x-gitlab-blob-id", sha_of(&content))
                        .with_header("x-gitlab-commit-id", commit.clone())
                        .with_header("x-gitlab-last-commit-id", commit);
                }
                SimResponse::json(
                    200,
                    &json!({
                        "file_name": file_path.rsplit('/').next().unwrap_or(&file_path), "file_path": file_path, "size": content.len(),
                        "encoding": "base64", "content": base64::engine::general_purpose::STANDARD.encode(&content),
                        "content_sha256": sha256_hex(&content),
                        "ref": reference, "blob_id": sha_of(&content), "commit_id": commit, "last_commit_id": commit,
                    }),
                )
            }
            (method @ ("POST" | "PUT"), []) => {
                let body = request.params();
                let Some(branch) = string_field(&body, "branch") else {
                    return param_error("branch is missing");
                };
                let Some(mut content) = string_field(&body, "content") else {
                    return param_error("content is missing");
                };
                let Some(commit_message) = string_field(&body, "commit_message") else {
                    return param_error("commit_message is missing");
                };
                if string_field(&body, "encoding").as_deref() == Some("base64") {
                    match base64::engine::general_purpose::STANDARD
                        .decode(content.as_bytes())
                        .ok()
                        .and_then(|b| String::from_utf8(b).ok())
                    {
                        Some(decoded) => content = decoded,
                        None => return param_error("content is not valid base64"),
                    }
                }
                // `changes:` of the push pipeline compare with the branch's previous head.
                let before = self.repos.head(&full, &branch);
                // A new branch starts from `start_branch`; without it, only an empty
                // repository may get its first branch this way.
                if before.is_none() {
                    let start = string_field(&body, "start_branch");
                    let start_head = start
                        .as_deref()
                        .and_then(|start| self.repos.head(&full, start));
                    match start_head {
                        Some(head) => {
                            if let Err(error) = self.repos.create_branch(&full, &branch, &head) {
                                return message(
                                    500,
                                    &format!("500 Internal Server Error: {error}"),
                                );
                            }
                        }
                        None if start.is_none() && self.repos.branches(&full).is_empty() => {}
                        None => {
                            return message(
                                400,
                                "You can only create or edit files when you are on a branch",
                            );
                        }
                    }
                }
                let current = self.repos.read_file(&full, &branch, &file_path);
                if method == "POST" && current.is_some() {
                    return message(400, "A file with this name already exists");
                }
                if method == "PUT" && current.is_none() {
                    return message(400, "A file with this name doesn't exist");
                }
                if method == "PUT" && current.as_deref() == Some(content.as_str()) {
                    return message(
                        400,
                        "You are attempting to update a file that has changed since you started editing it.",
                    );
                }
                if let Err(error) =
                    self.repos
                        .commit_file(&full, &branch, &file_path, &content, &commit_message)
                {
                    return message(500, &format!("500 Internal Server Error: {error}"));
                }
                self.after_api_commit(&mut state, project_id, &full, &branch, before.as_deref());
                drop(state);
                self.persist();
                SimResponse::json(
                    if method == "POST" { 201 } else { 200 },
                    &json!({"file_path": file_path, "branch": branch}),
                )
            }
            _ => message(404, "404 Not Found"),
        }
    }
}
