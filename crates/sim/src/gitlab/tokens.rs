//! Who a request is: personal access tokens (kept as digests), their scopes, expiry and revocation,
//! and the token endpoints.

use super::{GitlabSim, message, not_found, param_error, string_field};
use crate::http::{SimRequest, SimResponse};
use bprun_clients::digest::sha256_hex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A personal access token's record (the token itself is never kept, only its digest).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TokenMeta {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) scopes: Vec<String>,
    pub(super) revoked: bool,
    pub(super) user_id: u64,
    pub(super) created_at: String,
    pub(super) expires_at: Option<String>,
}

/// The scopes of the tokens given with `--token` and minted in the toolbox.
pub(super) const ADMIN_SCOPES: &[&str] = &[
    "api",
    "read_api",
    "read_user",
    "read_repository",
    "write_repository",
    "sudo",
    "admin_mode",
];
pub(super) const VALID_SCOPES: &[&str] = &[
    "api",
    "read_api",
    "read_user",
    "create_runner",
    "manage_runner",
    "k8s_proxy",
    "read_repository",
    "write_repository",
    "read_registry",
    "write_registry",
    "sudo",
    "admin_mode",
    "ai_features",
    "self_rotate",
];

pub(super) fn admin_scopes() -> Vec<String> {
    ADMIN_SCOPES.iter().map(|s| s.to_string()).collect()
}

pub(super) fn token_json(meta: &TokenMeta, today: time::Date) -> Value {
    json!({
        "id": meta.id, "name": meta.name, "revoked": meta.revoked, "created_at": meta.created_at,
        "scopes": meta.scopes, "user_id": meta.user_id, "last_used_at": null,
        "active": !meta.revoked && !meta.expired(today), "expires_at": meta.expires_at,
    })
}

/// A `YYYY-MM-DD` date, as Grape's `Date` parameters take it.
pub(super) fn parse_date(text: &str) -> Option<time::Date> {
    let mut parts = text.splitn(3, '-');
    let year = parts.next()?.parse().ok()?;
    let month = time::Month::try_from(parts.next()?.parse::<u8>().ok()?).ok()?;
    let day = parts.next()?.parse().ok()?;
    time::Date::from_calendar_date(year, month, day).ok()
}

pub(super) fn format_date(date: time::Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    )
}

/// GitLab 16+ gives a token without an expiry date the longest lifetime allowed: a year.
pub(super) const DEFAULT_TOKEN_LIFETIME_DAYS: i64 = 365;

impl TokenMeta {
    /// GitLab's `active` scope: a token is good through the day before its `expires_at`.
    fn expired(&self, today: time::Date) -> bool {
        self.expires_at
            .as_deref()
            .and_then(parse_date)
            .is_some_and(|expires| expires <= today)
    }
}

/// How the simulator keeps tokens: their sha256 digest.
pub(super) fn token_digest(token: &str) -> String {
    sha256_hex(token)
}

impl GitlabSim {
    /// Mints a personal access token named `name` for `root` (the toolbox's `gitlab-rails
    /// runner` does this), expiring `expires_in_days` from today when given
    /// (`expires_at: 365.days.from_now`).
    pub fn mint_token(&self, name: &str, expires_in_days: Option<i64>) -> String {
        let token = format!(
            "glpat-{}",
            (0..20)
                .map(|_| fastrand::alphanumeric())
                .collect::<String>()
        );
        let mut state = self.lock();
        let root = state.users[0].id;
        let digest = token_digest(&token);
        state.add_token(digest.clone(), root, name, admin_scopes());
        let expires_at = expires_in_days
            .and_then(|days| self.today().checked_add(time::Duration::days(days)))
            .map(format_date);
        if let Some(meta) = state.token_meta.get_mut(&digest) {
            meta.expires_at = expires_at;
        }
        drop(state);
        self.persist();
        token
    }

    /// The token of a request: `PRIVATE-TOKEN`, `Authorization: Bearer` or `?private_token=`.
    pub(super) fn request_token(request: &SimRequest) -> Option<&str> {
        request
            .token("private-token")
            .or_else(|| request.query.get("private_token").map(String::as_str))
    }

    pub(super) fn authenticate(&self, request: &SimRequest) -> Option<u64> {
        self.token_user(Self::request_token(request)?)
    }

    /// The user of a live token: known, not revoked, not expired.
    pub(super) fn token_user(&self, token: &str) -> Option<u64> {
        let digest = token_digest(token);
        let today = self.today();
        let state = self.lock();
        if state
            .token_meta
            .get(&digest)
            .is_some_and(|meta| meta.expired(today))
        {
            return None;
        }
        state.tokens.get(&digest).copied()
    }

    /// GitLab's answers to a token that is not good for this request: revoked (401
    /// `invalid_token`), or without the scope (403 `insufficient_scope`: writes need `api`,
    /// reads `api` or `read_api`).
    pub(super) fn refuse_token(&self, request: &SimRequest) -> Option<SimResponse> {
        let digest = token_digest(Self::request_token(request)?);
        let today = self.today();
        let state = self.lock();
        let meta = state.token_meta.get(&digest)?;
        if meta.revoked {
            return Some(SimResponse::json(
                401,
                &json!({"error": "invalid_token", "error_description": "Token was revoked. You have to re-authorize from the user."}),
            ));
        }
        if meta.expired(today) {
            return Some(SimResponse::json(
                401,
                &json!({"error": "invalid_token", "error_description": "Token has expired."}),
            ));
        }
        let has = |scope: &str| meta.scopes.iter().any(|s| s == scope);
        let reading = matches!(request.method.as_str(), "GET" | "HEAD");
        let allowed = has("api") || (reading && has("read_api"));
        (!allowed).then(|| {
            SimResponse::json(
                403,
                &json!({"error": "insufficient_scope",
                        "error_description": "The request requires higher privileges than provided by the access token.",
                        "scope": if reading { "api read_api" } else { "api" }}),
            )
        })
    }

    /// `/personal_access_tokens/...` and `POST /users/:id/personal_access_tokens`.
    pub(super) fn personal_access_tokens(
        &self,
        request: &SimRequest,
        user: u64,
        rest: &[&str],
    ) -> SimResponse {
        let digest = Self::request_token(request).map(token_digest);
        let mut state = self.lock();
        // Others than administrators see and revoke only their own tokens.
        let admin = Self::is_admin(&state, user);
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let today = self.today();
                let items = state
                    .token_meta
                    .values()
                    .filter(|meta| admin || meta.user_id == user)
                    .map(|meta| token_json(meta, today))
                    .collect();
                drop(state);
                self.paginate(request, items)
            }
            (method, [which]) => {
                let target = if *which == "self" {
                    digest.filter(|d| state.token_meta.contains_key(d))
                } else {
                    let id = which.parse::<u64>().ok();
                    state
                        .token_meta
                        .iter()
                        .filter(|(_, meta)| admin || meta.user_id == user)
                        .find(|(_, meta)| Some(meta.id) == id)
                        .map(|(digest, _)| digest.clone())
                };
                let Some(target) = target else {
                    return message(404, "404 Not Found");
                };
                match method {
                    "GET" => SimResponse::json(
                        200,
                        &token_json(&state.token_meta[&target], self.today()),
                    ),
                    "DELETE" => {
                        if let Some(meta) = state.token_meta.get_mut(&target) {
                            meta.revoked = true;
                        }
                        state.tokens.remove(&target);
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

    /// `POST /users/:id/personal_access_tokens` (an administrator creates a user's token).
    pub(super) fn create_token(&self, request: &SimRequest, user: &str) -> SimResponse {
        let body = request.params();
        let Some(name) = string_field(&body, "name") else {
            return param_error("name is missing");
        };
        let scopes: Vec<String> = match body.get("scopes") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect(),
            Some(Value::String(list)) => list.split(',').map(str::to_string).collect(),
            _ => return param_error("scopes is missing"),
        };
        if scopes.is_empty() || scopes.iter().any(|s| !VALID_SCOPES.contains(&s.as_str())) {
            return param_error("scopes does not have a valid value");
        }
        let expires_at = match string_field(&body, "expires_at") {
            Some(text) => match parse_date(&text) {
                Some(date) => date,
                None => return param_error("expires_at is invalid"),
            },
            None => self
                .today()
                .checked_add(time::Duration::days(DEFAULT_TOKEN_LIFETIME_DAYS))
                .unwrap_or_else(|| self.today()),
        };
        let mut state = self.lock();
        let Some(user) = user
            .parse::<u64>()
            .ok()
            .filter(|id| state.users.iter().any(|u| u.id == *id))
        else {
            return not_found("User");
        };
        let token = format!(
            "glpat-{}",
            (0..20)
                .map(|_| fastrand::alphanumeric())
                .collect::<String>()
        );
        let digest = token_digest(&token);
        state.add_token(digest.clone(), user, &name, scopes);
        if let Some(meta) = state.token_meta.get_mut(&digest) {
            meta.expires_at = Some(format_date(expires_at));
        }
        let mut answer = token_json(&state.token_meta[&digest], self.today());
        answer["token"] = json!(token);
        drop(state);
        self.persist();
        SimResponse::json(201, &answer)
    }
}
