//! Health checks: TCP reachability and HTTP status.

use crate::natives::options::RhaiResultOf;
use rhai::Map;
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

    /// A GET over HTTPS as `curl --resolve --cacert` sends it: #{status, body}. Options:
    /// `connect_to` ("127.0.0.1:PORT", where to connect: a port-forward to the gateway's
    /// Service) while the URL's host stays the SNI and `Host`; `ca_file` (PEM, the only CA
    /// trusted); `timeout` (seconds, 30 by default, retries included: a GET is safe, so refused
    /// connections and 429/502/503/504 answers are retried with backoff until then). Any other
    /// status is returned as it came; a connection that never succeeded is an error naming
    /// its cause (a certificate the CA does not sign, a refused connection). Runs inside a step
    /// only.
    ///
    /// ```rhai
    /// step("Workloads reachable", || {
    ///     let gateway = kube_port_forward("gitlab", "svc/gitlab-gateway", 443);
    ///     let answer = https_get("https://guestbook.local.example.net/",
    ///                            #{connect_to: gateway, ca_file: "infra/tls/wildcard/ca.pem"});
    ///     if answer.status != 200 { throw `guestbook answered ${answer.status}` }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn https_get(
        context: NativeCallContext,
        url: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        use crate::natives::options::{option_str, reject_undeclared};
        const NATIVE: &str = "https_get";
        let session = crate::natives::options::remote_session(&context, NATIVE)?;
        reject_undeclared(&options, NATIVE)?;
        let connect_to = match option_str(&options, "connect_to", NATIVE)? {
            None => None,
            Some(text) => Some(text.parse::<std::net::SocketAddr>().map_err(|_| {
                native_error(
                    NativeError::new(format!("{NATIVE}: connect_to `{text}` is not an address"))
                        .with_hint(
                            "write IP:PORT, as kube_port_forward returns it (127.0.0.1:40123)",
                        ),
                )
            })?),
        };
        let ca_pem = match option_str(&options, "ca_file", NATIVE)? {
            None => None,
            Some(path) => Some(
                bprun_clients::fs::Confinement::new(&session.state.root)
                    .read_text(&path)
                    .map_err(native_error)?,
            ),
        };
        let timeout = match options.get("timeout") {
            None => std::time::Duration::from_secs(30),
            Some(value) => super::super::seconds(value, "https_get timeout")?,
        };
        let answer = net::https_get(&net::HttpsGet {
            url: url.to_string(),
            connect_to,
            ca_pem,
            timeout,
        })
        .map_err(native_error)?;
        let mut result = Map::new();
        result.insert("status".into(), Dynamic::from(i64::from(answer.status)));
        result.insert("body".into(), Dynamic::from(answer.body));
        Ok(result)
    }
}
