//! Which Gateway listener serves a name, by the Gateway API's rules: a pure reading of a Gateway
//! object, shared by the Envoy Gateway controller, the Envoy proxy program and image pulls (which
//! must not depend on the controller).

use serde_json::Value;

/// Whether a Gateway API hostname (`gitlab.example.net`, or a wildcard `*.example.net` that
/// matches any name ending in `.example.net`) matches `host`; case-insensitive.
pub fn hostname_matches(pattern: &str, host: &str) -> bool {
    let (pattern, host) = (pattern.to_ascii_lowercase(), host.to_ascii_lowercase());
    match pattern.strip_prefix('*') {
        Some(suffix) => host.ends_with(&suffix) && host.len() > suffix.len(),
        None => pattern == host,
    }
}

/// How specifically a listener's hostname names `host` (higher wins): exact, then the longest
/// wildcard, then a listener without hostname. `None` when it does not match.
fn specificity(listener: &Value, host: &str) -> Option<usize> {
    match listener["hostname"].as_str() {
        None | Some("") => Some(0),
        Some(pattern) if hostname_matches(pattern, host) => Some(if pattern.starts_with('*') {
            pattern.len()
        } else {
            usize::MAX
        }),
        Some(_) => None,
    }
}

/// The listener of `gateway` on `port` that serves `host` (the most specific hostname).
pub fn listener_for<'a>(gateway: &'a Value, port: u16, host: &str) -> Option<&'a Value> {
    gateway["spec"]["listeners"]
        .as_array()?
        .iter()
        .filter(|listener| listener["port"].as_u64() == Some(u64::from(port)))
        .filter_map(|listener| specificity(listener, host).map(|rank| (rank, listener)))
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, listener)| listener)
}
