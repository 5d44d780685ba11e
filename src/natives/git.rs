//! Working trees: clone or fast-forward, commit and push, over HTTP(S) with the GitLab PAT.

use crate::state::Resource;
use rhai::Map;
use rhai::plugin::*;

use super::options::{RhaiResultOf, remote_session};
use crate::engine::{Session, lock, native_error};
use bprun_clients::fs::Confinement;
use bprun_clients::git::{self, GitAuth, SyncOutcome};

/// The PAT and CA file of the session's GitLab settings (the token never enters a URL).
fn auth(session: &Session) -> GitAuth {
    let from_client = lock(&session.gitlab)
        .as_ref()
        .map(|client| (client.token(), client.settings.ca_file.clone()));
    match from_client {
        Some((token, ca_file)) => GitAuth { token, ca_file },
        None => match bprun_clients::gitlab::GitlabSettings::from_env(&session.state.root) {
            Ok(settings) => GitAuth {
                token: settings.token,
                ca_file: settings.ca_file,
            },
            Err(_) => GitAuth::default(),
        },
    }
}

/// `group/name` of a GitLab clone URL (`https://host/group/name.git`).
fn project_of_url(url: &str) -> Option<String> {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme.split_once('/')?.1;
    let path = path.trim_end_matches('/').trim_end_matches(".git");
    (!path.is_empty()).then(|| path.to_string())
}

#[export_module]
pub mod git_functions {
    use super::*;

    /// Clones `url` into `dir` (under the repository root), or fast-forwards its `main` to the
    /// remote's. A diverged tree is an error that says how to recover (`--reset-clones`). Uses
    /// the GitLab PAT (`gitlab_login` / `GITLAB_TOKEN`) and CA file. Returns `#{changed, action}`
    /// with action `cloned`, `pulled` or `up-to-date`.
    ///
    /// ```rhai
    /// step("Clone", || {
    ///     git_clone_or_pull("https://gitlab.local.example.net/blueprint-apps/guestbook.git", "apps-local/blueprint-apps/guestbook");
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn git_clone_or_pull(
        context: NativeCallContext,
        url: &str,
        dir: &str,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "git_clone_or_pull")?;
        let files = Confinement::new(&session.state.root);
        let full = files.resolve(dir).map_err(native_error)?;
        let shown = files.display(&full);
        crate::engine::lock(&session.tree_remotes).insert(shown.clone(), url.to_string());
        let mut result = rhai::Map::new();
        if session.state.check() {
            let action = if full.join(".git").exists() {
                "pull"
            } else {
                "clone"
            };
            if action == "clone" {
                session.state.record_change(
                    "clone",
                    Resource::new("working tree", &shown, format!("{url} into {shown}")),
                );
            }
            result.insert("changed".into(), (action == "clone").into());
            result.insert("action".into(), format!("would-{action}").into());
            return Ok(result);
        }
        let outcome =
            git::clone_or_pull(url, &full, &shown, &auth(&session)).map_err(native_error)?;
        let action = match outcome {
            SyncOutcome::Cloned => "cloned",
            SyncOutcome::Pulled => "pulled",
            SyncOutcome::UpToDate => "up-to-date",
        };
        if outcome != SyncOutcome::UpToDate {
            session.state.record_change(
                if outcome == SyncOutcome::Cloned {
                    "clone"
                } else {
                    "pull"
                },
                Resource::new("working tree", &shown, format!("{url} into {shown}")),
            );
        }
        result.insert("changed".into(), (outcome != SyncOutcome::UpToDate).into());
        result.insert("action".into(), action.into());
        Ok(result)
    }

    /// Commits everything in the working tree `dir` on `main` and pushes it, only when something
    /// changed. Returns `#{changed, commit}` (`commit` is `()` when nothing changed).
    ///
    /// ```rhai
    /// step("Push", || {
    ///     git_commit_push("apps-local/blueprint-apps/guestbook", "bprun: sync guestbook");
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn git_commit_push(
        context: NativeCallContext,
        dir: &str,
        message: &str,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "git_commit_push")?;
        let files = Confinement::new(&session.state.root);
        let full = files.resolve(dir).map_err(native_error)?;
        let shown = files.display(&full);
        let mut result = rhai::Map::new();
        if session.state.check() {
            // A tree that does not exist yet would be cloned and filled by earlier calls.
            let changed = !full.join(".git").exists()
                || session.state.writes_planned_in(&full)
                || git::has_changes(&full, &shown).map_err(native_error)?
                || git::unpushed(&full);
            if changed {
                session.state.record_change(
                    "commit and push",
                    Resource::new("working tree", &shown, &shown),
                );
                // The push would move the project's head: a pipeline of today's head is stale.
                let remote = crate::engine::lock(&session.tree_remotes)
                    .get(&shown)
                    .cloned()
                    .or_else(|| git::origin_url(&full));
                if let Some(project) = remote.as_deref().and_then(project_of_url) {
                    crate::engine::lock(&session.pending_heads).insert(project);
                }
            }
            result.insert("changed".into(), changed.into());
            result.insert("commit".into(), Dynamic::UNIT);
            return Ok(result);
        }
        let commit =
            git::commit_push(&full, &shown, message, &auth(&session)).map_err(native_error)?;
        if let Some(commit) = &commit {
            session.state.record_change(
                "commit and push",
                Resource::new(
                    "working tree",
                    &shown,
                    format!("{shown} ({})", &commit[..8.min(commit.len())]),
                ),
            );
        }
        result.insert("changed".into(), commit.is_some().into());
        result.insert(
            "commit".into(),
            commit.map(Dynamic::from).unwrap_or(Dynamic::UNIT),
        );
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clone_url_names_its_project() {
        assert_eq!(
            super::project_of_url("http://127.0.0.1:8080/blueprint-apps/guestbook.git").as_deref(),
            Some("blueprint-apps/guestbook")
        );
        assert_eq!(
            super::project_of_url("https://gitlab.local.example.net/a/b/c.git").as_deref(),
            Some("a/b/c")
        );
        assert_eq!(super::project_of_url("https://host"), None);
    }
}
