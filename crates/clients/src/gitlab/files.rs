//! Repository files through the files API.

use base64::Engine as _;

use super::{GitlabClient, encode};
use crate::error::ClientError;

impl GitlabClient {
    /// A repository file's decoded content at `reference`, or `None` when it does not exist.
    pub fn file(
        &self,
        project: &str,
        path: &str,
        reference: &str,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<String>, ClientError> {
        let url = format!(
            "projects/{}/repository/files/{}?ref={}",
            encode(project),
            encode(path),
            encode(reference)
        );
        let Some(file) = self.find(&url, cancelled)? else {
            return Ok(None);
        };
        let content = file["content"].as_str().unwrap_or("");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(content)
            .map_err(|error| {
                ClientError::new(format!("{project}:{path} is not valid base64: {error}"))
                    .in_operation("file", ": ")
            })?;
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }
}
