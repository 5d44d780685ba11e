//! Personal access tokens: whether a token still works, and revoking the stale ones a name
//! identifies (a mint interrupted before its token was stored leaves one behind).

use serde_json::Value;

use super::{GitlabClient, Method};
use crate::error::{ClientError, ErrorKind};
use crate::reconcile::{Change, Mode, Outcome};
use crate::secret::Secret;

/// A token as `GET /personal_access_tokens` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: i64,
    pub name: String,
    pub active: bool,
}

fn token_of(value: &Value) -> Option<TokenInfo> {
    Some(TokenInfo {
        id: value["id"].as_i64()?,
        name: value["name"].as_str().unwrap_or_default().to_string(),
        active: value["active"].as_bool().unwrap_or(false) && value["revoked"] != true,
    })
}

impl GitlabClient {
    fn remember_token(&self, token: &Secret, id: i64) {
        let mut known = self
            .known_tokens
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !known.iter().any(|(known, _)| known == token) {
            known.push((token.clone(), id));
        }
    }

    fn known_token_id(&self, token: &Secret) -> Option<i64> {
        self.known_tokens
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .find(|(known, _)| known == token)
            .map(|(_, id)| *id)
    }

    /// `token`'s own record (`GET /personal_access_tokens/self` with it), or `None` when GitLab
    /// no longer accepts it (revoked, expired, or a rebuilt GitLab that never issued it).
    pub fn token_self(
        &self,
        token: &Secret,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<TokenInfo>, ClientError> {
        match self.with_token(token).request(
            Method::Get,
            "personal_access_tokens/self",
            None,
            None,
            cancelled,
        ) {
            Ok(answer) => {
                let info = token_of(&answer.body).filter(|info| info.active);
                if let Some(info) = &info {
                    self.remember_token(token, info.id);
                }
                Ok(info)
            }
            Err(error) if matches!(error.kind, ErrorKind::Unauthorized | ErrorKind::NotFound) => {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// Revokes every active token named `name` except `keep` (the one in use): after a mint
    /// that an interruption left unrecorded, exactly one such token stays live.
    pub fn revoke_tokens_named(
        &self,
        name: &str,
        keep: &Secret,
        mode: Mode,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Outcome<Vec<TokenInfo>>, ClientError> {
        // The kept token's id: known when the script just checked the token, else asked for
        // while the list is read (two independent reads, one round trip).
        let (kept, all) = match self.known_token_id(keep) {
            Some(id) => (Some(id), self.get_all("personal_access_tokens", cancelled)?),
            None => std::thread::scope(|scope| {
                let kept = scope.spawn(|| self.token_self(keep, cancelled));
                let all = self.get_all("personal_access_tokens", cancelled);
                let kept = kept.join().unwrap_or_else(|_| {
                    Err(ClientError::new(
                        "gitlab: GET /personal_access_tokens/self: the lookup thread panicked",
                    ))
                });
                Ok::<_, ClientError>((kept?.map(|info| info.id), all?))
            })?,
        };
        self.revoke_stale(name, kept, &all, mode, cancelled)
    }

    /// Whether GitLab accepts `token`, and if it does, makes it the token in use and revokes
    /// every other active token named `name` (as `revoke_tokens_named`). Its own record and
    /// the token list are read at once with it: one round trip when nothing is stale. `None`
    /// (and nothing changed) when GitLab refuses the token.
    pub fn adopt_token(
        &self,
        name: &str,
        token: &Secret,
        mode: Mode,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Option<Outcome<Vec<TokenInfo>>>, ClientError> {
        let with_token = self.with_token(token);
        let (own, all) = std::thread::scope(|scope| {
            let own = scope.spawn(|| self.token_self(token, cancelled));
            let all = with_token.get_all("personal_access_tokens", cancelled);
            let own = own.join().unwrap_or_else(|_| {
                Err(ClientError::new(
                    "gitlab: GET /personal_access_tokens/self: the lookup thread panicked",
                ))
            });
            (own, all)
        });
        // A refused token cannot list tokens either: that answer is of no use then.
        let Some(own) = own? else {
            return Ok(None);
        };
        let all = all?;
        self.set_token(token.clone());
        self.revoke_stale(name, Some(own.id), &all, mode, cancelled)
            .map(Some)
    }

    /// Revokes the active tokens named `name` of `all` but `kept`.
    fn revoke_stale(
        &self,
        name: &str,
        kept: Option<i64>,
        all: &[Value],
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<Vec<TokenInfo>>, ClientError> {
        let stale: Vec<TokenInfo> = all
            .iter()
            .filter_map(token_of)
            .filter(|info| info.active && info.name == name && Some(info.id) != kept)
            .collect();
        let mut changes = Vec::new();
        for token in &stale {
            if mode.writes() {
                self.request(
                    Method::Delete,
                    &format!("personal_access_tokens/{}", token.id),
                    None,
                    None,
                    cancelled,
                )?;
            }
            changes.push(Change {
                action: "revoke",
                kind: "personal access token".into(),
                name: token.name.clone(),
                resource: format!("personal access token {} (#{})", token.name, token.id),
                detail: None,
            });
        }
        Ok(Outcome {
            value: stale,
            changes,
            warnings: Vec::new(),
        })
    }
}
