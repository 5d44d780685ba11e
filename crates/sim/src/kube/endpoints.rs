//! What an Endpoints object says about its Service, as kube-proxy and cluster DNS read it: the
//! ready addresses of its subsets (`notReadyAddresses` are not there). A leaf module: pure
//! functions of the object, for the webhook check, Service connections, CoreDNS and pulls.

use serde_json::Value;

/// The ready addresses of every subset.
fn ready_addresses(endpoints: &Value) -> impl Iterator<Item = &Value> {
    endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|subset| subset["addresses"].as_array().into_iter().flatten())
}

/// Whether some subset has a ready address (kube-proxy forwards to it; without one it rejects).
pub fn has_ready_address(endpoints: &Value) -> bool {
    ready_addresses(endpoints).next().is_some()
}

/// The pods behind the ready addresses (their `targetRef` names), in order.
pub fn ready_pods(endpoints: &Value) -> Vec<String> {
    ready_addresses(endpoints)
        .filter_map(|address| address["targetRef"]["name"].as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_ready_addresses_count() {
        let endpoints = json!({"subsets": [
            {"notReadyAddresses": [{"ip": "10.244.0.3", "targetRef": {"name": "b"}}]},
            {"addresses": [{"ip": "10.244.0.2", "targetRef": {"name": "a"}}]}]});
        assert!(has_ready_address(&endpoints));
        assert_eq!(ready_pods(&endpoints), ["a"]);
        let none = json!({"subsets": [{"notReadyAddresses": [{"ip": "10.244.0.3"}]}]});
        assert!(!has_ready_address(&none));
        assert!(!has_ready_address(&json!({})));
        assert!(ready_pods(&none).is_empty());
    }
}
