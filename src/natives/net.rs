//! Health checks: TCP reachability and HTTP status.

use crate::natives::options::RhaiResultOf;
use rhai::plugin::*;

use crate::engine::{native_error, session};
use crate::error::NativeError;
use crate::output::Level;
use bprun_clients::net;

#[export_module]
pub mod net_functions {
    use super::*;

    /// True when a TCP connection to `host:port` opens within `timeout` seconds. Runs inside a
    /// step only (the top level never touches the network).
    ///
    /// ```rhai
    /// step("Pre-flight", || {
    ///     if !tcp_probe("127.0.0.1", 8200, 2) { throw "OpenBao is not listening" }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn tcp_probe(
        context: NativeCallContext,
        host: &str,
        port: i64,
        timeout: Dynamic,
    ) -> RhaiResultOf<bool> {
        let session = session(&context)?;
        session
            .state
            .require_step("tcp_probe")
            .map_err(native_error)?;
        let timeout = super::super::seconds(&timeout, "tcp_probe timeout")?;
        let port = u16::try_from(port).map_err(|_| {
            native_error(NativeError::new(format!(
                "tcp_probe: port {port} is not between 0 and 65535"
            )))
        })?;
        net::tcp_probe(host, port, timeout).map_err(native_error)
    }

    /// The HTTP status code of a GET to `url` (redirects are not followed), or `()` when no
    /// response came within `timeout` seconds. Runs inside a step only.
    ///
    /// ```rhai
    /// step("Pre-flight", || {
    ///     let status = http_status("http://127.0.0.1:8181/-/health", 5);
    ///     if status != 200 { throw `GitLab health check answered ${status}` }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn http_status(
        context: NativeCallContext,
        url: &str,
        timeout: Dynamic,
    ) -> RhaiResultOf<Dynamic> {
        let session = session(&context)?;
        session
            .state
            .require_step("http_status")
            .map_err(native_error)?;
        let timeout = super::super::seconds(&timeout, "http_status timeout")?;
        match net::http_status(url, timeout).map_err(native_error)? {
            Ok(status) => Ok(Dynamic::from(status as i64)),
            Err(reason) => {
                session
                    .state
                    .reporter
                    .log(Level::Debug, &format!("http_status {url}: {reason}"));
                Ok(Dynamic::UNIT)
            }
        }
    }
}
