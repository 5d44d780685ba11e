//! Tokens of ServiceAccounts from the TokenRequest API, and the kubeconfig a pod uses with one.

use super::{KubeClient, block_on, failed, retry};
use crate::error::ClientError;
use crate::secret::Secret;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

/// A token the API server issued, with when it stops being accepted.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: Secret,
    /// RFC 3339, as the API server says it (`status.expirationTimestamp`).
    pub expires_at: String,
}

impl KubeClient {
    /// A token of ServiceAccount `namespace/name`, valid `expiration_seconds`, for the API
    /// server's own audience (none asked). A TokenRequest creates nothing in the cluster: the
    /// token is known only to whoever keeps it, until it expires or the account is deleted.
    pub fn create_token(
        &self,
        namespace: &str,
        name: &str,
        expiration_seconds: i64,
    ) -> Result<IssuedToken, ClientError> {
        let subject = format!("token of ServiceAccount {namespace}/{name}");
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(expiration_seconds),
                ..Default::default()
            },
            ..Default::default()
        };
        // Not retried: each call mints another credential.
        let answer = block_on(async {
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
            api.create_token_request(name, &PostParams::default(), &request)
                .await
        })
        .map_err(|error| failed("create", &subject, &error))?;
        let status = answer.status.ok_or_else(|| {
            ClientError::new(format!(
                "{subject}: the API server answered without a token"
            ))
        })?;
        Ok(IssuedToken {
            token: Secret::new(status.token),
            expires_at: status.expiration_timestamp.0.to_string(),
        })
    }
}

impl KubeClient {
    /// Now on the API server's clock, from its `Date` header: the clock that decides when the
    /// tokens it issued expire (a workstation's clock may be off; kind's nodes share the host's).
    /// An answer without the header (a proxy that strips it) falls back to this machine's clock.
    /// The offset between the two clocks is read once per client.
    pub fn server_time(&self) -> Result<std::time::SystemTime, ClientError> {
        use std::time::{Duration, SystemTime, UNIX_EPOCH};
        let millis = |time: SystemTime| match time.duration_since(UNIX_EPOCH) {
            Ok(after) => after.as_millis() as i128,
            Err(before) => -(before.duration().as_millis() as i128),
        };
        let cached = *self
            .clock_offset_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let offset = match cached {
            Some(offset) => offset,
            None => {
                let server = self.read_server_time()?;
                let offset = millis(server) - millis(SystemTime::now());
                *self
                    .clock_offset_ms
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(offset);
                offset
            }
        };
        let now = SystemTime::now();
        let shift = Duration::from_millis(offset.unsigned_abs() as u64);
        Ok(if offset >= 0 {
            now + shift
        } else {
            now.checked_sub(shift).unwrap_or(now)
        })
    }

    /// The API server's `Date` header, read now (see `server_time`).
    fn read_server_time(&self) -> Result<std::time::SystemTime, ClientError> {
        let response = block_on(retry(|| async {
            let request = http::Request::get("/version")
                .body(kube::client::Body::empty())
                .map_err(kube::Error::HttpError)?;
            self.client.send(request).await
        }))
        .map_err(|error| failed("read", "the API server's clock (GET /version)", &error))?;
        if !response.status().is_success() {
            return Err(ClientError::new(format!(
                "cannot read the API server's clock (GET /version): {}",
                response.status()
            )));
        }
        Ok(response
            .headers()
            .get(http::header::DATE)
            .and_then(|date| date.to_str().ok())
            .and_then(|date| httpdate::parse_http_date(date).ok())
            .unwrap_or_else(std::time::SystemTime::now))
    }
}

/// A kubeconfig for a pod of the cluster: its API server at `server`, verified against the
/// cluster CA `ca_pem` (what `kube-root-ca.crt` holds), authenticated by `token` alone (no
/// client certificate), its context in `namespace`.
pub fn token_kubeconfig(server: &str, ca_pem: &str, token: &str, namespace: &str) -> String {
    super::kubeconfig::bearer_kubeconfig(
        server,
        ca_pem,
        token,
        ("cluster", "deployer", "deployer"),
        Some(namespace),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_kubeconfig_holds_the_server_ca_token_and_namespace_only() {
        let text = token_kubeconfig(
            "https://kubernetes.default.svc/",
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "eyJ.a.b",
            "guestbook",
        );
        assert_eq!(
            text,
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=\n    server: https://kubernetes.default.svc\n  name: cluster\ncontexts:\n- context:\n    cluster: cluster\n    namespace: guestbook\n    user: deployer\n  name: deployer\ncurrent-context: deployer\nkind: Config\nusers:\n- name: deployer\n  user:\n    token: eyJ.a.b\n"
        );
    }
}
