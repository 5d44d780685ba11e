//! Git's smart HTTP for the projects' bare repositories: clone, fetch and push, with pushes
//! authorized and refused as GitLab does.

use super::GitlabSim;
use crate::http::{SimRequest, SimResponse};
use base64::Engine as _;

impl GitlabSim {
    /// Git smart HTTP for `/<group>/<project>.git/...`, with basic auth (any user, a PAT as
    /// password) as GitLab accepts it.
    pub(super) fn git_http(&self, request: &SimRequest, full: &str, rest: &str) -> SimResponse {
        let password = request
            .header("authorization")
            .and_then(|value| value.strip_prefix("Basic "))
            .and_then(|encoded| {
                base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .ok()
            })
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|pair| {
                pair.split_once(':')
                    .map(|(_, password)| password.to_string())
            });
        let Some(user) = password.as_ref().and_then(|token| self.token_user(token)) else {
            return SimResponse::text(401, "HTTP Basic: Access denied\n")
                .with_header("www-authenticate", "Basic realm=\"GitLab\"");
        };
        let project_id = {
            let state = self.lock();
            Self::find_project(
                &state,
                &percent_encoding::utf8_percent_encode(full, percent_encoding::NON_ALPHANUMERIC)
                    .to_string(),
            )
            // A project the user may not see answers as one that does not exist.
            .filter(|id| Self::project_visible(&state, user, &state.projects[id]))
        };
        let Some(project_id) = project_id else {
            return SimResponse::text(
                404,
                "The project you were looking for could not be found or you don't have permission to view it.\n",
            );
        };
        let pushing = request.method == "POST" && rest == "git-receive-pack";
        if pushing
            && let Some(declined) = self.push_refusal(&self.lock(), user, project_id, &request.body)
        {
            return declined;
        }
        let before: Vec<(String, Option<String>)> = if pushing {
            self.repos
                .branches(full)
                .into_iter()
                .map(|b| {
                    let head = self.repos.head(full, &b);
                    (b, head)
                })
                .collect()
        } else {
            Vec::new()
        };
        let response = self
            .repos
            .http_backend(request, &format!("/{full}.git/{rest}"), "root");
        if pushing {
            // GitLab starts a pipeline for every pushed branch that has a CI configuration.
            for branch in self.repos.branches(full) {
                let head = self.repos.head(full, &branch);
                if before.iter().any(|(b, h)| *b == branch && *h == head) {
                    continue;
                }
                // `changes:` compares with the branch's previous head; a new branch has none.
                let previous = before
                    .iter()
                    .find(|(b, _)| *b == branch)
                    .and_then(|(_, h)| h.clone());
                let mut state = self.lock();
                let _ = self.start_pipeline(
                    &mut state,
                    project_id,
                    &branch,
                    "push",
                    previous.as_deref(),
                    Vec::new(),
                );
            }
        };
        if request.method == "POST" && rest == "git-receive-pack" {
            let mut state = self.lock();
            if let Some(project) = state.projects.get_mut(&project_id)
                && project.default_branch.is_none()
            {
                let branches = self.repos.branches(full);
                let branch = if branches.iter().any(|b| b == "main") {
                    Some("main".to_string())
                } else {
                    branches.first().cloned()
                };
                if let Some(branch) = branch {
                    self.repos.set_head(full, &branch);
                    project.default_branch = Some(branch);
                }
            }
            drop(state);
            self.persist();
        }
        response
    }
}
