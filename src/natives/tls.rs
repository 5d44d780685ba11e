//! TLS natives: the platform's self-signed CA and wildcard certificate, minted only when needed.

use crate::state::Resource;
use rhai::Map;
use rhai::plugin::*;

use super::options::{RhaiResultOf, option_int, option_str, reject_undeclared, remote_session};
use crate::engine::native_error;
use crate::error::NativeError;
use bprun_clients::fs::Confinement;
use bprun_clients::tls;

fn days(options: &rhai::Map, native: &str) -> RhaiResultOf<u32> {
    let days = option_int(options, "days", native, 3650)?;
    u32::try_from(days)
        .ok()
        .filter(|days| (1..=36_500).contains(days))
        .ok_or_else(|| {
            native_error(NativeError::new(format!(
                "{native}: days must be between 1 and 36500, not {days}"
            )))
        })
}

fn result(outcome: tls::Outcome) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("changed".into(), outcome.changed.into());
    map.insert(
        "reason".into(),
        outcome.reason.map(Dynamic::from).unwrap_or(Dynamic::UNIT),
    );
    map
}

#[export_module]
pub mod tls_functions {
    use super::*;

    /// Ensures a self-signed CA in `dir` (`ca.pem`, and `ca-key.pem` with mode 0600), minting it
    /// only when missing, unreadable or expiring within 30 days. Options: `cn` (default
    /// `blueprint local CA`), `days` (default 3650). Returns `#{changed, reason}`. Honours check mode.
    ///
    /// ```rhai
    /// step("Wildcard TLS", || { tls_ensure_ca("infra/tls/wildcard", #{cn: "blueprint local CA"}); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn tls_ensure_ca(
        context: NativeCallContext,
        dir: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "tls_ensure_ca")?;
        reject_undeclared(&options, "tls_ensure_ca")?;
        let cn = option_str(&options, "cn", "tls_ensure_ca")?
            .unwrap_or_else(|| "blueprint local CA".to_string());
        let days = days(&options, "tls_ensure_ca")?;
        let files = Confinement::new(&session.state.root);
        let outcome =
            tls::ensure_ca(&files, dir, &cn, days, session.state.check()).map_err(native_error)?;
        if let Some(reason) = &outcome.reason {
            session.state.record_change(
                "mint",
                Resource::new(
                    "CA",
                    format!("{dir}/ca.pem"),
                    format!("CA {dir}/ca.pem ({reason})"),
                ),
            );
        }
        Ok(result(outcome))
    }

    /// Ensures `dir/cert.pem` and `dir/key.pem` (0600) for `dns_names`, signed by the CA in
    /// `ca_dir`; re-minted only when missing, naming other hosts, not signed by that CA, or
    /// expiring within 30 days. Options: `dns_names` (required), `days` (default 825).
    ///
    /// ```rhai
    /// step("Wildcard TLS", || {
    ///     tls_ensure_cert("infra/tls/wildcard", "infra/tls/wildcard", #{dns_names: ["*.local.example.net"]});
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn tls_ensure_cert(
        context: NativeCallContext,
        dir: &str,
        ca_dir: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "tls_ensure_cert")?;
        reject_undeclared(&options, "tls_ensure_cert")?;
        let names: Vec<String> = match options.get("dns_names") {
            Some(value) => value
                .clone()
                .into_array()
                .map_err(|t| {
                    native_error(NativeError::new(format!(
                        "tls_ensure_cert: dns_names must be an array of names, not {t}"
                    )))
                })?
                .into_iter()
                .map(|name| name.to_string())
                .collect(),
            None => Vec::new(),
        };
        if names.is_empty() {
            return Err(native_error(
                NativeError::new("tls_ensure_cert: dns_names is required")
                    .with_hint("e.g. #{dns_names: [\"*.local.example.net\"]}"),
            ));
        }
        let days = if options.contains_key("days") {
            days(&options, "tls_ensure_cert")?
        } else {
            825
        };
        let files = Confinement::new(&session.state.root);
        let ca_file = format!("{}/ca.pem", ca_dir.trim_end_matches('/'));
        if session.state.check() && !files.exists(&ca_file).map_err(native_error)? {
            // Check mode before the CA exists (tls_ensure_ca only planned it): so is this.
            session.state.record_change(
                "mint",
                Resource::new(
                    "certificate",
                    format!("{dir}/cert.pem"),
                    format!(
                        "certificate {dir}/cert.pem for {} (its CA {ca_file} is not minted yet)",
                        names.join(", ")
                    ),
                ),
            );
            let mut result = rhai::Map::new();
            result.insert("changed".into(), true.into());
            result.insert("reason".into(), "its CA is not minted yet".into());
            return Ok(result);
        }
        let outcome = tls::ensure_cert(&files, dir, ca_dir, &names, days, session.state.check())
            .map_err(native_error)?;
        if let Some(reason) = &outcome.reason {
            session.state.record_change(
                "mint",
                Resource::new(
                    "certificate",
                    format!("{dir}/cert.pem"),
                    format!(
                        "certificate {dir}/cert.pem for {} ({reason})",
                        names.join(", ")
                    ),
                ),
            );
        }
        Ok(result(outcome))
    }
}
