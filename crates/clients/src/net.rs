//! What the HTTP clients share: health-check probes (a TCP connect and an HTTP status, each with
//! a timeout), `Retry-After`, and the bound on writes to one GitLab.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::error_chain;
use crate::error::ClientError;

/// Writes (POST, PUT, DELETE, git pushes) one process keeps in flight to one GitLab at most,
/// whatever the script's `parallel` allows: creating projects and pipelines is what loads
/// GitLab. Here, below both the GitLab client and git, which share the bound.
pub const MAX_CONCURRENT_WRITES: usize = 4;

/// True when a TCP connection to `host:port` opens within `timeout`.
pub fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Result<bool, ClientError> {
    let addresses = (host, port).to_socket_addrs().map_err(|error| {
        ClientError::new(format!("cannot resolve {host}:{port}: {error}")).with_hint(
            "check the host name; cluster-internal names only resolve inside the cluster",
        )
    })?;
    for address in addresses {
        if TcpStream::connect_timeout(&address, timeout).is_ok() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The HTTP status of a GET to `url`, or `None` when no response came within `timeout`
/// (refused, unreachable, TLS failure); the reason is returned for debug logging.
pub fn http_status(url: &str, timeout: Duration) -> Result<Result<u16, String>, ClientError> {
    let parsed = reqwest::Url::parse(url).map_err(|error| {
        ClientError::new(format!("invalid URL {url}: {error}"))
            .with_hint("write a full URL such as http://127.0.0.1:8200/v1/sys/health")
    })?;
    let client = super::runtime::http_client_builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| ClientError::new(format!("cannot build an HTTP client: {error}")))?;
    let result = super::runtime::runtime().block_on(async move { client.get(parsed).send().await });
    Ok(match result {
        Ok(response) => Ok(response.status().as_u16()),
        Err(error) => Err(error_chain(&error)),
    })
}

/// A GET over HTTPS as `curl --resolve HOST:PORT:ADDRESS --cacert CA URL` sends it: the URL's
/// host as SNI and `Host`, the TCP connection to `connect_to` when given (a port-forward to the
/// gateway's Service), the server's certificate verified against `ca_pem` only when given.
pub struct HttpsGet {
    pub url: String,
    pub connect_to: Option<std::net::SocketAddr>,
    pub ca_pem: Option<String>,
    /// How long the answer may take, retries included.
    pub timeout: Duration,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    pub body: String,
}

/// Whether `error` is the server's certificate failing verification. rustls's error reaches
/// here only as text (hyper and io::Error wrap it, and io::Error hides it from `source`):
/// `invalid peer certificate: ...` is how rustls says it.
fn is_certificate_error(error: &reqwest::Error) -> bool {
    error_chain(error).contains("invalid peer certificate")
}

fn certificate_error(
    request: &HttpsGet,
    via: &str,
    host: &str,
    error: &reqwest::Error,
) -> ClientError {
    ClientError::new(format!("GET {}{via} failed", request.url))
        .caused_by(error_chain(error))
        .with_hint(format!(
            "the CA given does not sign what the server presents for {host}; curl --resolve {host}:443:ADDRESS --cacert CA {} shows the same",
            request.url
        ))
}

/// How long a server asks to wait before the next attempt (`Retry-After` in seconds).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// The longest wait between two attempts of [`https_get`], `Retry-After` included.
const GET_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Sends [`HttpsGet`]; a GET is safe, so connection failures and 429/502/503/504 answers are
/// retried with backoff (honouring `Retry-After`) until the timeout. The last answer is returned
/// whatever its status; a connection that never succeeded is an error with its cause.
pub fn https_get(request: &HttpsGet) -> Result<HttpAnswer, ClientError> {
    let url = reqwest::Url::parse(&request.url).map_err(|error| {
        ClientError::new(format!("invalid URL {}: {error}", request.url))
            .with_hint("write a full URL such as https://guestbook.local.example.net/")
    })?;
    let host = url.host_str().unwrap_or("").to_string();
    let mut builder = super::runtime::http_client_builder()
        .no_proxy()
        .connect_timeout(request.timeout.min(Duration::from_secs(10)))
        .timeout(request.timeout.min(Duration::from_secs(30)))
        .redirect(reqwest::redirect::Policy::none());
    if let Some(address) = request.connect_to {
        builder = builder.resolve(&host, address);
    }
    if let Some(ca) = &request.ca_pem {
        let certificates =
            reqwest::Certificate::from_pem_bundle(ca.as_bytes()).map_err(|error| {
                ClientError::new(format!("the CA for {} is not PEM: {error}", request.url))
            })?;
        builder = builder.tls_certs_only(certificates);
    }
    let client = builder
        .build()
        .map_err(|error| ClientError::new(format!("cannot build an HTTPS client: {error}")))?;
    let deadline = std::time::Instant::now() + request.timeout;
    let via = request
        .connect_to
        .map(|address| format!(" (connecting to {address})"))
        .unwrap_or_default();
    let mut attempt: u32 = 0;
    loop {
        let (client, url) = (client.clone(), url.clone());
        let result = super::runtime::runtime().block_on(async move {
            let response = client.get(url).send().await?;
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            let body = response.text().await?;
            Ok::<_, reqwest::Error>((HttpAnswer { status, body }, retry_after))
        });
        let (retry_after, outcome) = match result {
            Ok((answer, retry_after)) if matches!(answer.status, 429 | 502 | 503 | 504) => {
                (retry_after, Ok(answer))
            }
            Ok((answer, _)) => return Ok(answer),
            // A certificate that does not verify will not verify on the next attempt.
            Err(error) if is_certificate_error(&error) => {
                return Err(certificate_error(request, &via, &host, &error));
            }
            Err(error) => (None, Err(error_chain(&error))),
        };
        let wait = retry_after
            .unwrap_or_else(|| Duration::from_millis(250).saturating_mul(1 << attempt.min(5)))
            .min(GET_MAX_BACKOFF);
        if std::time::Instant::now() + wait >= deadline {
            return outcome.map_err(|cause| {
                ClientError::new(format!("GET {}{via} failed", request.url))
                    .caused_by(cause)
                    .with_hint(format!(
                        "curl --resolve {host}:443:ADDRESS {} shows the same: is the server listening there?",
                        request.url
                    ))
            });
        }
        std::thread::sleep(wait);
        attempt += 1;
    }
}
