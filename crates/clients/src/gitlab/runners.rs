//! Runner authentication tokens: whether GitLab still knows one (a GitLab restored from an
//! older backup, or a runner deleted in the UI, no longer does, and the runner holding it
//! crash-loops with `is not valid`).

use serde_json::json;
use std::time::Instant;

use super::{Attempt, GitlabClient, MAX_ATTEMPTS, Method};
use crate::error::{ClientError, ErrorKind};
use crate::secret::Secret;

impl GitlabClient {
    /// Whether GitLab knows the runner authentication token `token`: `POST /runners/verify`
    /// answers 200 for a runner's token and 403 otherwise. No `system_id` is sent, so GitLab
    /// records nothing (with one it would register a runner manager): the request only reads,
    /// and is retried like a GET after a 5xx, a 429 or a lost connection.
    pub fn runner_token_known(
        &self,
        token: &Secret,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<bool, ClientError> {
        let url = self.api_url("runners/verify");
        let body = json!({"token": token.reveal()});
        let mut last = String::new();
        let mut last_status = None;
        for attempt in 0..MAX_ATTEMPTS {
            if cancelled() {
                return Err(
                    ClientError::new("gitlab: POST /runners/verify: interrupted")
                        .with_kind(ErrorKind::Interrupted),
                );
            }
            let wait = match self.attempt(Method::Post, &url, Some(&body)) {
                Attempt::Done(_) => return Ok(true),
                Attempt::Status { status: 403, .. } => return Ok(false),
                Attempt::Status {
                    status: 429,
                    retry_after,
                    ..
                } => {
                    last = "Retry later".to_string();
                    last_status = Some(429);
                    retry_after.unwrap_or_else(|| self.backoff(attempt))
                }
                Attempt::Status {
                    status: status @ 500..=599,
                    body,
                    text,
                    ..
                } => {
                    last = super::error_message(&body, &text);
                    last_status = Some(status);
                    self.backoff(attempt)
                }
                Attempt::Status {
                    status, body, text, ..
                } => {
                    return Err(self.failure(
                        Method::Post,
                        "runners/verify",
                        Some(status),
                        &super::error_message(&body, &text),
                    ));
                }
                Attempt::Transport { message, .. } => {
                    last = message;
                    last_status = None;
                    self.backoff(attempt)
                }
            };
            if attempt + 1 < MAX_ATTEMPTS {
                let deadline = Instant::now() + wait.min(super::MAX_BACKOFF);
                while Instant::now() < deadline && !cancelled() {
                    std::thread::sleep(
                        (deadline - Instant::now()).min(std::time::Duration::from_millis(50)),
                    );
                }
            }
        }
        Err(self.failure(Method::Post, "runners/verify", last_status, &last))
    }
}
