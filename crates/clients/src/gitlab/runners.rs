//! Runner authentication tokens: whether GitLab still knows one (a GitLab restored from an
//! older backup, or a runner deleted in the UI, no longer does, and the runner holding it
//! crash-loops with `is not valid`).

use serde_json::json;

use super::{GitlabClient, Method};
use crate::error::ClientError;
use crate::secret::Secret;

impl GitlabClient {
    /// Whether GitLab knows the runner authentication token `token`: `POST /runners/verify`
    /// answers 200 for a runner's token and 403 otherwise. No `system_id` is sent, so GitLab
    /// records nothing (with one it would register a runner manager): the request only reads,
    /// and its read-back is "nothing happened", so it is retried like a GET.
    pub fn runner_token_known(
        &self,
        token: &Secret,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<bool, ClientError> {
        let body = json!({"token": token.reveal()});
        let nothing_happened = || -> Result<Option<serde_json::Value>, ClientError> { Ok(None) };
        match self.request(
            Method::Post,
            "runners/verify",
            Some(&body),
            Some(&nothing_happened),
            cancelled,
        ) {
            Ok(_) => Ok(true),
            Err(error) if error.status == Some(403) => Ok(false),
            Err(error) => Err(error),
        }
    }
}
