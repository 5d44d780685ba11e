//! Health-check probes: a TCP connect and an HTTP status, each with a timeout.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::error_chain;
use crate::error::ClientError;

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
