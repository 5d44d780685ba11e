//! The access probe of the design record's GitLab qualification: may a Developer delete a
//! project, may an outsider or an anonymous client clone a private one? Asked of GitLab as those
//! users, since an administrator's token may do all of it. The probe brings its own private
//! project and two short-lived users (with a one-day token each) and removes them again, also
//! when it fails; what an interrupted probe left is removed by the next one before it starts.

use serde_json::{Value, json};

use super::{GitlabClient, Method, encode};
use crate::error::ClientError;
use crate::git::{self, GitAuth};
use crate::secret::Secret;

/// Every probe project and user starts with this, followed by a random suffix: GitLab removes
/// users and projects in the background, so a name is never reused while it may still exist.
pub const PROBE_PREFIX: &str = "bprun-probe-";

/// What GitLab let one identity do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// `403 Forbidden`, `404 Not Found`, `401 Unauthorized`, or what was allowed (`1 ref`).
    pub detail: String,
}

/// The probe's findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessReport {
    /// The Developer lists the project's refs: the control that makes the refusals mean
    /// something (a wrong URL would be refused to everyone).
    pub developer_clone: Verdict,
    pub developer_delete: Verdict,
    pub outsider_clone: Verdict,
    pub anonymous_clone: Verdict,
}

/// The status GitLab answered, in words (as its API's own `403 Forbidden` messages say them).
fn status_words(status: u16) -> String {
    let reason = match status {
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "",
    };
    format!("{status} {reason}").trim_end().to_string()
}

/// What a clone attempt says about access: refused with the status GitLab answered, or allowed.
/// Anything else (no answer, a TLS failure) says nothing about access and is an error.
fn clone_verdict(listed: Result<Vec<String>, ClientError>) -> Result<Verdict, ClientError> {
    match listed {
        Ok(refs) => Ok(Verdict {
            allowed: true,
            detail: format!(
                "{} ref{}",
                refs.len(),
                if refs.len() == 1 { "" } else { "s" }
            ),
        }),
        Err(error) => match error.status {
            Some(status @ (401 | 403 | 404)) => Ok(Verdict {
                allowed: false,
                detail: status_words(status),
            }),
            _ => Err(error),
        },
    }
}

fn suffix() -> String {
    (0..6)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

impl GitlabClient {
    /// Probes GitLab's access rules in `group` (which must exist) and removes what it created.
    pub fn access_probe(
        &self,
        group: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<AccessReport, ClientError> {
        self.remove_probes(group, cancelled)?;
        let probed = self.probe(group, cancelled);
        let removed = self.remove_probes(group, cancelled);
        match (probed, removed) {
            (Ok(report), Ok(())) => Ok(report),
            (Ok(_), Err(error)) => Err(error.with_hint(format!(
                "the probe's users and project start with {PROBE_PREFIX}: the next probe removes them, or delete them by hand"
            ))),
            (Err(error), Ok(())) => Err(error),
            (Err(error), Err(cleanup)) => Err(error.caused_by(format!(
                "and removing the probe failed too: {}",
                cleanup.message
            ))),
        }
    }

    fn probe(
        &self,
        group: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<AccessReport, ClientError> {
        let namespace = self.group(group, cancelled)?.ok_or_else(|| {
            ClientError::new(format!(
                "gitlab: group {group} does not exist, so it cannot be probed"
            ))
            .with_hint("phase 3 creates it: bprun scripts/phase3.rhai")
        })?;
        let name = format!("{PROBE_PREFIX}{}", suffix());
        let project = self
            .request(
                Method::Post,
                "projects",
                Some(
                    &json!({"name": name, "path": name, "namespace_id": namespace.id,
                             "visibility": "private", "initialize_with_readme": true}),
                ),
                Some(&|| {
                    self.find(
                        &format!("projects/{}", encode(&format!("{group}/{name}"))),
                        cancelled,
                    )
                }),
                cancelled,
            )?
            .body;
        let developer = self.probe_user("developer", cancelled)?;
        let outsider = self.probe_user("outsider", cancelled)?;
        self.request(
            Method::Post,
            &format!("projects/{}/members", project["id"]),
            Some(&json!({"user_id": developer.0, "access_level": 30})),
            None,
            cancelled,
        )?;
        let url = project["http_url_to_repo"]
            .as_str()
            .ok_or_else(|| {
                ClientError::new(format!(
                    "gitlab: project {group}/{name} has no http_url_to_repo"
                ))
            })?
            .to_string();
        let shown = format!("{group}/{name}");
        let as_user = |token: Option<&Secret>| GitAuth {
            token: token.cloned(),
            ca_file: self.settings.ca_file.clone(),
        };
        let clone_as =
            |token: Option<&Secret>| clone_verdict(git::ls_remote(&url, &shown, &as_user(token)));
        let developer_clone = clone_as(Some(&developer.1))?;
        let outsider_clone = clone_as(Some(&outsider.1))?;
        let anonymous_clone = clone_as(None)?;
        // Last: when GitLab wrongly lets the Developer delete it, only the probe project goes.
        let developer_delete = match self.with_token(&developer.1).request(
            Method::Delete,
            &format!("projects/{}", project["id"]),
            None,
            None,
            cancelled,
        ) {
            Ok(answer) => Verdict {
                allowed: true,
                detail: format!(
                    "{} (the probe project was deleted)",
                    status_words(answer.status)
                ),
            },
            Err(error) => match error.status {
                Some(status @ 400..=499) => Verdict {
                    allowed: false,
                    detail: status_words(status),
                },
                _ => return Err(error),
            },
        };
        Ok(AccessReport {
            developer_clone,
            developer_delete,
            outsider_clone,
            anonymous_clone,
        })
    }

    /// A user named `bprun-probe-<role>-<suffix>` and a one-day token of theirs.
    fn probe_user(
        &self,
        role: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(i64, Secret), ClientError> {
        let username = format!("{PROBE_PREFIX}{role}-{}", suffix());
        let found = || {
            self.get(&format!("users?username={username}"), cancelled)
                .map(|users| users.as_array().and_then(|list| list.first().cloned()))
        };
        let user = self
            .request(
                Method::Post,
                "users",
                Some(&json!({"username": username, "name": username,
                             "email": format!("{username}@probe.invalid"),
                             "force_random_password": true, "skip_confirmation": true})),
                Some(&found),
                cancelled,
            )?
            .body;
        let id = user["id"].as_i64().ok_or_else(|| {
            ClientError::new(format!("gitlab: user {username}: the answer has no id"))
        })?;
        let tomorrow = (time::OffsetDateTime::now_utc() + time::Duration::days(1)).date();
        // Not retried after an ambiguous failure: a token cannot be read back, and a lost one
        // goes with its user.
        let token = self
            .request(
                Method::Post,
                &format!("users/{id}/personal_access_tokens"),
                Some(
                    &json!({"name": "bprun-probe", "scopes": ["api", "read_repository"],
                             "expires_at": tomorrow.to_string()}),
                ),
                None,
                cancelled,
            )?
            .body;
        let token = token["token"].as_str().ok_or_else(|| {
            ClientError::new(format!(
                "gitlab: the token of user {username}: the answer has no token"
            ))
        })?;
        Ok((id, Secret::new(token.to_string())))
    }

    /// Deletes every probe user and every probe project of `group`.
    fn remove_probes(&self, group: &str, cancelled: &dyn Fn() -> bool) -> Result<(), ClientError> {
        for user in self.get_all(&format!("users?search={PROBE_PREFIX}"), cancelled)? {
            let probe = user["username"]
                .as_str()
                .is_some_and(|name| name.starts_with(PROBE_PREFIX));
            if let (true, Some(id)) = (probe, user["id"].as_i64()) {
                // hard_delete: the probe's memberships and token go with it, nothing is kept
                // as a ghost user's contribution.
                self.delete_if_exists(&format!("users/{id}?hard_delete=true"), cancelled)?;
            }
        }
        let projects = match self.find(&format!("groups/{}", encode(group)), cancelled)? {
            Some(_) => self.get_all(
                &format!("groups/{}/projects?search={PROBE_PREFIX}", encode(group)),
                cancelled,
            )?,
            None => Vec::new(),
        };
        for project in projects {
            let probe = project["path"]
                .as_str()
                .is_some_and(|path| path.starts_with(PROBE_PREFIX));
            if let (true, Some(id)) = (probe, project["id"].as_i64()) {
                self.delete_if_exists(&format!("projects/{id}"), cancelled)?;
            }
        }
        Ok(())
    }

    /// DELETE, where 404 (already gone) is success.
    fn delete_if_exists(
        &self,
        path: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(), ClientError> {
        match self.request(Method::Delete, path, None, None, cancelled) {
            Ok(_) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// The report as the qualification's rows read it.
impl AccessReport {
    pub fn to_json(&self) -> Value {
        let verdict = |v: &Verdict| json!({"allowed": v.allowed, "detail": v.detail});
        json!({
            "developer_clone": verdict(&self.developer_clone),
            "developer_delete": verdict(&self.developer_delete),
            "outsider_clone": verdict(&self.outsider_clone),
            "anonymous_clone": verdict(&self.anonymous_clone),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_clone_names_the_status_git_got() {
        let refused = clone_verdict(Err(ClientError::new(
            "git: list the remote refs in g/p: GET https://gitlab/g/p.git/info/refs -> 404: The project you were looking for could not be found",
        )
        .with_status(404)));
        assert_eq!(
            refused.map_err(|e| e.message),
            Ok(Verdict {
                allowed: false,
                detail: "404 Not Found".to_string()
            })
        );
        let listed = clone_verdict(Ok(vec!["HEAD".to_string(), "refs/heads/main".to_string()]));
        assert_eq!(
            listed.map_err(|e| e.message),
            Ok(Verdict {
                allowed: true,
                detail: "2 refs".to_string()
            })
        );
        // No answer says nothing about access: an error, never a refusal.
        let broken = clone_verdict(Err(ClientError::new(
            "git: list the remote refs in g/p: GET https://gitlab/g/p.git/info/refs failed: connection refused",
        )));
        assert_eq!(
            broken.map_err(|e| e.message),
            Err("git: list the remote refs in g/p: GET https://gitlab/g/p.git/info/refs failed: connection refused".to_string())
        );
    }
}
