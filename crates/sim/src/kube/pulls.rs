//! A node's pull of an image from the platform's registry, as containerd on a kind node does
//! it: the registry's name resolves through the node's own `/etc/hosts` (cluster DNS does not
//! apply on a node; phase 2's registry pin writes the line), the address leads through
//! kube-proxy to the Envoy gateway's Service (a Service with no ready endpoint refuses, an
//! address no Service has times out), the gateway presents the certificate of its listener for
//! that name, which must verify against the CA of the node's
//! `/etc/containerd/certs.d/<host>/hosts.toml` (phase 2's node trust step), and the manifest
//! must exist (a pipeline pushed it). Each failure is containerd's message after
//! `failed to pull and unpack image "...": `.
//!
//! Pure functions of the node's files ([`NodeFiles`]) and the store ([`ClusterView`]). A leaf
//! module: the kubelet's verdicts call it, it calls nothing of the simulator.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The resolver a kind node asks after its `/etc/hosts` (Docker's network gateway), which
/// knows none of the platform's names.
pub const NODE_RESOLVER: &str = "172.18.0.1:53";

/// Read access to the store: what a pod depends on (the kubelet's verdicts) and what a pull
/// meets (Services, Gateways, Secrets). `super::kubelet` re-exports it.
pub trait ClusterView {
    /// The object `name` of `store_key` (`secrets`, `configmaps`, ...) in `namespace`.
    fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value>;

    /// Every object of `store_key`, in every namespace.
    fn objects(&self, _store_key: &str) -> Vec<Value> {
        Vec::new()
    }
}

/// Gateway API Gateways' store key (as `super::gateway` names it).
const GATEWAY_STORE_KEY: &str = "gateways.gateway.networking.k8s.io";

/// kind's `/etc/hosts` on a node, which the registry pin edits.
pub fn kind_hosts(node: &str) -> String {
    format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n172.18.0.2\t{node}\n"
    )
}

/// What a node's filesystem holds for pulls.
pub trait NodeFiles {
    /// The node's `/etc/hosts`.
    fn hosts(&self) -> String;
    /// A file of the node (absolute node path), when it exists.
    fn read(&self, node_path: &str) -> Option<String>;
}

/// A node's files under the simulator's node folder (`nodes/NODE/...`, see `programs::script`),
/// with kind's `/etc/hosts` when the node's folder has none yet.
pub struct NodeFolder {
    pub root: PathBuf,
    pub node: String,
}

impl NodeFiles for NodeFolder {
    fn hosts(&self) -> String {
        self.read("/etc/hosts")
            .unwrap_or_else(|| kind_hosts(&self.node))
    }

    fn read(&self, node_path: &str) -> Option<String> {
        let relative = Path::new(node_path.trim_start_matches('/'));
        if relative
            .components()
            .any(|part| !matches!(part, std::path::Component::Normal(_)))
        {
            return None;
        }
        std::fs::read_to_string(self.root.join(&self.node).join(relative)).ok()
    }
}

/// The address `/etc/hosts` gives `name`: the first line naming it, as glibc reads the file.
pub fn hosts_address(hosts: &str, name: &str) -> Option<String> {
    hosts.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let address = words.next()?;
        words
            .any(|alias| alias == name)
            .then(|| address.to_string())
    })
}

/// The CA file containerd uses for `host`: the `ca` of `certs.d/<host>/hosts.toml` (at the
/// top or under a `[host."..."]` table).
fn registry_ca(node: &dyn NodeFiles, host: &str) -> Option<String> {
    let toml = node.read(&format!("/etc/containerd/certs.d/{host}/hosts.toml"))?;
    let path = toml.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "ca").then(|| value.trim().trim_matches('"').to_string())
    })?;
    node.read(&path)
}

/// The certificate chain (PEM) the Envoy proxy behind `service` presents for `host` on `port`:
/// its Gateway's HTTPS listener for that name, and the listener's Secret.
pub fn served_certificate(
    service: &Value,
    host: &str,
    port: u16,
    view: &dyn ClusterView,
) -> Option<String> {
    let labels = &service["metadata"]["labels"];
    let gateway_name = labels["gateway.envoyproxy.io/owning-gateway-name"].as_str()?;
    let gateway_namespace = labels["gateway.envoyproxy.io/owning-gateway-namespace"].as_str()?;
    let gateway = view.object(GATEWAY_STORE_KEY, gateway_namespace, gateway_name)?;
    // The most specific listener for the name, as Envoy picks it (a wildcard is a suffix match).
    let listener = crate::kube::listeners::listener_for(&gateway, port, host)
        .filter(|listener| listener["protocol"] == "HTTPS")?;
    let secret_name = listener["tls"]["certificateRefs"][0]["name"].as_str()?;
    let secret = view.object("secrets", gateway_namespace, secret_name)?;
    let bytes = crate::kube::object_data::secret_bytes(&secret, "tls.crt")?;
    String::from_utf8(bytes).ok()
}

/// Verifies `chain` (PEM, leaf first) for `host` against `ca` (PEM), in Go's `crypto/x509`
/// words on failure.
pub fn verify_certificate(ca: Option<&str>, chain: &str, host: &str) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let unknown = || {
        "tls: failed to verify certificate: x509: certificate signed by unknown authority"
            .to_string()
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca.unwrap_or("").as_bytes()).flatten() {
        let _ = roots.add(certificate);
    }
    if roots.is_empty() {
        return Err(unknown());
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider,
    )
    .build()
    .map_err(|_| unknown())?;
    let certificates: Vec<CertificateDer> = CertificateDer::pem_slice_iter(chain.as_bytes())
        .flatten()
        .collect();
    let (leaf, intermediates) = certificates.split_first().ok_or_else(unknown)?;
    let name = ServerName::try_from(host.to_string()).map_err(|_| unknown())?;
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|error| match error {
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            ) => format!("tls: failed to verify certificate: x509: certificate is not valid for {host}"),
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. },
            ) => "tls: failed to verify certificate: x509: certificate has expired or is not yet valid".to_string(),
            _ => unknown(),
        })
}

/// Whether a Service has a ready endpoint (kube-proxy forwards to it; without one it rejects).
fn has_ready_endpoint(view: &dyn ClusterView, namespace: &str, name: &str) -> bool {
    view.object("endpoints", namespace, name)
        .is_some_and(|endpoints| super::endpoints::has_ready_address(&endpoints))
}

/// Why the node cannot reach the registry `host` (no port: 443) for `image`, or `Ok` once the
/// TLS handshake verified; `manifest` is the URL containerd asks first.
pub fn reach_registry(
    host: &str,
    manifest: &str,
    node: &dyn NodeFiles,
    view: &dyn ClusterView,
) -> Result<(), String> {
    let request = |why: String| format!("failed to do request: Head \"{manifest}\": {why}");
    let port = 443;
    let Some(address) = hosts_address(&node.hosts(), host) else {
        return Err(request(format!(
            "dial tcp: lookup {host} on {NODE_RESOLVER}: no such host"
        )));
    };
    let service = view.objects("services").into_iter().find(|service| {
        service["spec"]["clusterIP"] == address.as_str()
            && service["spec"]["ports"].as_array().is_some_and(|ports| {
                ports
                    .iter()
                    .any(|candidate| candidate["port"].as_u64() == Some(port))
            })
    });
    let Some(service) = service else {
        // No kube-proxy rule for that address and port: the packets go nowhere.
        return Err(request(format!("dial tcp {address}:{port}: i/o timeout")));
    };
    let namespace = service["metadata"]["namespace"].as_str().unwrap_or("");
    let name = service["metadata"]["name"].as_str().unwrap_or("");
    if !has_ready_endpoint(view, namespace, name) {
        return Err(request(format!(
            "dial tcp {address}:{port}: connect: connection refused"
        )));
    }
    let Some(chain) = served_certificate(&service, host, 443, view) else {
        // Envoy has no filter chain for that name: it closes the connection.
        return Err(request("EOF".to_string()));
    };
    verify_certificate(registry_ca(node, host).as_deref(), &chain, host).map_err(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Files(HashMap<String, String>);

    impl NodeFiles for Files {
        fn hosts(&self) -> String {
            self.read("/etc/hosts").unwrap_or_default()
        }
        fn read(&self, node_path: &str) -> Option<String> {
            self.0.get(node_path).cloned()
        }
    }

    struct View(Vec<(String, String, String, Value)>);

    impl ClusterView for View {
        fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value> {
            self.0
                .iter()
                .find(|(k, ns, n, _)| k == store_key && ns == namespace && n == name)
                .map(|(.., object)| object.clone())
        }
        fn objects(&self, store_key: &str) -> Vec<Value> {
            self.0
                .iter()
                .filter(|(k, ..)| k == store_key)
                .map(|(.., object)| object.clone())
                .collect()
        }
    }

    const HOST: &str = "registry.local.example.net";
    const MANIFEST: &str =
        "https://registry.local.example.net/v2/blueprint-apps/guestbook/manifests/latest";

    /// A CA and a wildcard certificate it signed, and another CA.
    fn pki() -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("ca");
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf_params =
            rcgen::CertificateParams::new(vec!["*.local.example.net".to_string()]).expect("params");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).expect("leaf");
        let other_key = rcgen::KeyPair::generate().expect("key");
        let mut other_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        other_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let other = other_params.self_signed(&other_key).expect("other ca");
        (ca.pem(), leaf.pem(), other.pem())
    }

    fn platform(leaf: &str, ready: bool) -> View {
        let labels = json!({"gateway.envoyproxy.io/owning-gateway-name": "gitlab-gw",
                            "gateway.envoyproxy.io/owning-gateway-namespace": "gitlab"});
        let addresses = if ready {
            json!([{"ip": "10.244.0.9"}])
        } else {
            json!([])
        };
        View(vec![
            (
                "services".into(),
                "gitlab".into(),
                "gitlab-gateway".into(),
                json!({"metadata": {"name": "gitlab-gateway", "namespace": "gitlab", "labels": labels},
                       "spec": {"clusterIP": "10.96.4.2", "ports": [{"port": 443}]}}),
            ),
            (
                "endpoints".into(),
                "gitlab".into(),
                "gitlab-gateway".into(),
                json!({"subsets": [{"addresses": addresses}]}),
            ),
            (
                GATEWAY_STORE_KEY.into(),
                "gitlab".into(),
                "gitlab-gw".into(),
                json!({"spec": {"listeners": [
                    {"name": "registry-web", "port": 443, "protocol": "HTTPS", "hostname": HOST,
                     "tls": {"certificateRefs": [{"name": "registry-tls"}]}}]}}),
            ),
            (
                "secrets".into(),
                "gitlab".into(),
                "registry-tls".into(),
                json!({"data": {"tls.crt": base64::engine::general_purpose::STANDARD.encode(leaf)}}),
            ),
        ])
    }

    fn node(hosts: &str, ca: Option<&str>) -> Files {
        let mut files = Files::default();
        files.0.insert("/etc/hosts".into(), hosts.into());
        if let Some(ca) = ca {
            files.0.insert(
                format!("/etc/containerd/certs.d/{HOST}/hosts.toml"),
                format!("server = \"https://{HOST}\"\n\n[host.\"https://{HOST}\"]\n  ca = \"/etc/containerd/certs.d/{HOST}/ca.pem\"\n"),
            );
            files
                .0
                .insert(format!("/etc/containerd/certs.d/{HOST}/ca.pem"), ca.into());
        }
        files
    }

    const PINNED: &str = "127.0.0.1\tlocalhost\n10.96.4.2 registry.local.example.net\n";

    #[test]
    fn a_pinned_and_trusted_registry_is_reached() {
        let (ca, leaf, _) = pki();
        assert_eq!(
            reach_registry(
                HOST,
                MANIFEST,
                &node(PINNED, Some(&ca)),
                &platform(&leaf, true)
            ),
            Ok(())
        );
    }

    #[test]
    fn each_missing_piece_fails_in_containerds_words() {
        let (ca, leaf, other) = pki();
        let view = platform(&leaf, true);
        let head = format!("failed to do request: Head \"{MANIFEST}\": ");
        let cases = [
            (
                node("127.0.0.1\tlocalhost\n", Some(&ca)),
                &view,
                "dial tcp: lookup registry.local.example.net on 172.18.0.1:53: no such host",
            ),
            (
                node("10.96.9.9 registry.local.example.net\n", Some(&ca)),
                &view,
                "dial tcp 10.96.9.9:443: i/o timeout",
            ),
            (
                node(PINNED, None),
                &view,
                "tls: failed to verify certificate: x509: certificate signed by unknown authority",
            ),
            (
                node(PINNED, Some(&other)),
                &view,
                "tls: failed to verify certificate: x509: certificate signed by unknown authority",
            ),
        ];
        for (files, view, why) in cases {
            assert_eq!(
                reach_registry(HOST, MANIFEST, &files, view),
                Err(format!("{head}{why}"))
            );
        }
        assert_eq!(
            reach_registry(
                HOST,
                MANIFEST,
                &node(PINNED, Some(&ca)),
                &platform(&leaf, false)
            ),
            Err(format!(
                "{head}dial tcp 10.96.4.2:443: connect: connection refused"
            ))
        );
        assert_eq!(
            verify_certificate(Some(&ca), &leaf, "registry.example.org"),
            Err("tls: failed to verify certificate: x509: certificate is not valid for registry.example.org".into())
        );
    }

    #[test]
    fn hosts_files_and_listener_names_match_as_glibc_and_the_gateway_api_do() {
        assert_eq!(
            hosts_address("# x\n10.0.0.1 a b\n10.0.0.2 c\n", "b"),
            Some("10.0.0.1".into())
        );
        assert_eq!(hosts_address("10.0.0.1 ab\n", "a"), None);
        use crate::kube::listeners::hostname_matches;
        assert!(hostname_matches("*.local.example.net", HOST));
        // The Gateway API's wildcard is a suffix match: more than one label.
        assert!(hostname_matches("*.example.net", HOST));
        assert!(hostname_matches(HOST, HOST));
    }
}
