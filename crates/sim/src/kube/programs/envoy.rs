//! Envoy as Envoy Gateway runs it for one Gateway (the proxy Deployment `kube::gateway` creates,
//! labelled with the Gateway it serves). Each listener port of the Gateway is a loopback listener
//! of the pod, at container port 10000 + port (the proxy Service's targetPort). An HTTPS port
//! terminates TLS with the certificate of the listener whose hostname matches the client's SNI
//! (the listener's Secret as it is at the handshake); a request goes to the backend of the
//! HTTPRoute attached to the listener that matches its Host, and its path (longest prefix). What
//! a client observes is Envoy's: `404` with an empty body for a host no route serves, `503 no
//! healthy upstream` when the backend Service has no ready endpoint, `500` for a backend that
//! does not exist, `server: envoy` on every answer.
//!
//! Limits (docs/architecture.md): the ports are those of the Gateway when the pod starts; only
//! `PathPrefix` and `Exact` path matches, the first backendRef of a rule, no filters, no
//! cross-namespace backends (ReferenceGrant).

use super::PodEndpoints;
use super::catalogue::{self, Image};
use super::service::{self, Backend};
use super::web::Served;
use super::{ExecCall, Host, Program, World};
use crate::http::{SimRequest, SimResponse};
use crate::kube::gateway::{admits, attaches, hostname_matches, listener_for, route_hostnames};
use serde_json::Value;
use std::sync::{Arc, Weak};

pub const ROUTE_STORE_KEY: &str = "httproutes.gateway.networking.k8s.io";
const GATEWAY_STORE_KEY: &str = "gateways.gateway.networking.k8s.io";
/// Where Envoy Gateway binds a listener's port inside the proxy pod.
pub const PORT_OFFSET: u16 = 10000;

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or("")
}

/// How long a match of rule path `path_match` is for `path` (`None`: no match).
fn path_match_length(path_match: &Value, path: &str) -> Option<usize> {
    let value = path_match["value"].as_str().unwrap_or("/");
    match path_match["type"].as_str().unwrap_or("PathPrefix") {
        "Exact" => (path == value).then_some(value.len()),
        _ => {
            let prefix = value.trim_end_matches('/');
            let matches =
                path == prefix || path.starts_with(&format!("{prefix}/")) || prefix.is_empty();
            matches.then_some(prefix.len())
        }
    }
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No route serves the host and path: Envoy's 404.
    NoRoute,
    /// The Service `name` in `namespace`, port `port`.
    Backend {
        namespace: String,
        name: String,
        port: u16,
    },
    /// The matching rule has no usable backend (none, another kind, another namespace).
    InvalidBackend,
}

/// The decision for a request to `host` and `path` arriving on `port` of `gateway`, among
/// `routes` (HTTPRoutes of every namespace; `namespace_labels` gives a namespace's labels).
pub fn decide(
    gateway: &Value,
    port: u16,
    host: &str,
    path: &str,
    routes: &[Value],
    namespace_labels: &dyn Fn(&str) -> Value,
) -> Decision {
    let Some(listener) = listener_for(gateway, port, host) else {
        return Decision::NoRoute;
    };
    let gateway_namespace = text(&gateway["metadata"], "namespace");
    let mut best: Option<(usize, &Value, &Value)> = None;
    for route in routes {
        let route_namespace = text(&route["metadata"], "namespace");
        if !attaches(route, gateway, listener)
            || !admits(
                listener,
                gateway_namespace,
                route_namespace,
                &namespace_labels(route_namespace),
            )
        {
            continue;
        }
        let hostnames = route_hostnames(route);
        if !hostnames.is_empty() && !hostnames.iter().any(|name| hostname_matches(name, host)) {
            continue;
        }
        for rule in route["spec"]["rules"].as_array().into_iter().flatten() {
            let default_match = [serde_json::json!({"path": {"type": "PathPrefix", "value": "/"}})];
            let matches = rule["matches"]
                .as_array()
                .filter(|matches| !matches.is_empty())
                .map(Vec::as_slice)
                .unwrap_or(&default_match);
            let length = matches
                .iter()
                .filter_map(|candidate| path_match_length(&candidate["path"], path))
                .max();
            if let Some(length) = length
                && best.is_none_or(|(longest, _, _)| length > longest)
            {
                best = Some((length, route, rule));
            }
        }
    }
    let Some((_, route, rule)) = best else {
        return Decision::NoRoute;
    };
    let route_namespace = text(&route["metadata"], "namespace");
    let Some(backend) = rule["backendRefs"].as_array().and_then(|refs| refs.first()) else {
        return Decision::InvalidBackend;
    };
    let same_namespace = backend["namespace"]
        .as_str()
        .is_none_or(|namespace| namespace == route_namespace);
    let is_service = backend["kind"].as_str().unwrap_or("Service") == "Service"
        && backend["group"].as_str().unwrap_or("").is_empty();
    let port = backend["port"].as_u64().and_then(|p| u16::try_from(p).ok());
    match port {
        Some(port) if same_namespace && is_service => Decision::Backend {
            namespace: route_namespace.to_string(),
            name: text(backend, "name").to_string(),
            port,
        },
        _ => Decision::InvalidBackend,
    }
}

/// Envoy's direct answers.
fn envoy_answer(status: u16, body: &str) -> SimResponse {
    let response = if body.is_empty() {
        SimResponse::empty(status)
    } else {
        SimResponse::bytes(status, "text/plain", body.as_bytes().to_vec())
    };
    response.with_header("server", "envoy")
}

/// The host a request names (its `Host` header without the port).
fn request_host(request: &SimRequest) -> String {
    let host = request.header("host").unwrap_or("");
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_string(),
        _ => host.to_string(),
    }
}

/// Which Gateway a proxy pod serves: (namespace, name) from its labels.
fn owning_gateway(call: &ExecCall) -> Option<(String, String)> {
    let name = call
        .labels
        .get("gateway.envoyproxy.io/owning-gateway-name")?;
    let namespace = call
        .labels
        .get("gateway.envoyproxy.io/owning-gateway-namespace")?;
    Some((namespace.clone(), name.clone()))
}

fn gateway_of(host: &Host, gateway: &(String, String)) -> Option<Value> {
    host.object(GATEWAY_STORE_KEY, &gateway.0, &gateway.1)
}

/// Where a request arriving on `port` of the Gateway goes, read from the cluster now.
fn route(host: &Host, gateway: &(String, String), port: u16, request: &SimRequest) -> Routed {
    let Some(gateway) = gateway_of(host, gateway) else {
        return Routed::Answer(envoy_answer(404, ""));
    };
    let routes = host.all(ROUTE_STORE_KEY);
    let labels = |namespace: &str| {
        host.object("namespaces", "", namespace)
            .map(|found| found["metadata"]["labels"].clone())
            .unwrap_or(Value::Null)
    };
    let name = request_host(request);
    match decide(&gateway, port, &name, &request.path, &routes, &labels) {
        Decision::NoRoute => Routed::Answer(envoy_answer(404, "")),
        Decision::InvalidBackend => Routed::Answer(envoy_answer(500, "")),
        Decision::Backend {
            namespace,
            name,
            port,
        } => match service::resolve(host, &format!("{name}.{namespace}"), port, &namespace) {
            Backend::Serving { address, .. } => Routed::Upstream(address),
            Backend::Unknown => Routed::Answer(envoy_answer(500, "")),
            Backend::NotServing { .. } | Backend::NoDns => {
                Routed::Answer(envoy_answer(503, "no healthy upstream"))
            }
        },
    }
}

enum Routed {
    Answer(SimResponse),
    Upstream(std::net::SocketAddr),
}

/// The one HTTP client every proxy pod relays with (its connection pool shared), built once.
fn upstream_client() -> Option<&'static reqwest::Client> {
    static CLIENT: std::sync::OnceLock<Option<reqwest::Client>> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            bprun_clients::runtime::http_client_builder()
                .no_proxy()
                .http1_only()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(std::time::Duration::from_secs(5))
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .ok()
        })
        .as_ref()
}

/// Sends `request` to the upstream at `address` over HTTP/1.1 and relays its answer (Envoy's
/// 503 when the connection fails).
async fn relay(address: std::net::SocketAddr, request: SimRequest, tls: bool) -> SimResponse {
    let failed = || {
        envoy_answer(
            503,
            "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused",
        )
    };
    let Some(client) = upstream_client() else {
        return failed();
    };
    let query: String = if request.query_pairs.is_empty() {
        String::new()
    } else {
        let pairs: Vec<String> = request
            .query_pairs
            .iter()
            .map(|(key, value)| {
                let encode = |text: &str| {
                    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC)
                        .to_string()
                };
                format!("{}={}", encode(key), encode(value))
            })
            .collect();
        format!("?{}", pairs.join("&"))
    };
    let url = format!("http://{address}{}{query}", request.path);
    let method = reqwest::Method::from_bytes(request.method.as_bytes()).unwrap_or_default();
    let mut outgoing = client.request(method, url);
    for (name, value) in &request.headers {
        if name != "connection" && name != "content-length" {
            outgoing = outgoing.header(name, value);
        }
    }
    let proto = if tls { "https" } else { "http" };
    outgoing = outgoing
        .header("x-forwarded-proto", proto)
        .body(request.body.to_vec());
    let Ok(answer) = outgoing.send().await else {
        return failed();
    };
    let status = answer.status().as_u16();
    let headers: Vec<(String, String)> = answer
        .headers()
        .iter()
        .filter(|(name, _)| {
            !matches!(
                name.as_str(),
                "server" | "connection" | "content-length" | "transfer-encoding"
            )
        })
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let body = answer.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    let mut response = SimResponse::empty(status);
    response.headers = headers;
    response.body = body;
    response.with_header("server", "envoy")
}

/// The certificate of the listener the client's SNI names, read from its Secret at each
/// handshake (as Envoy Gateway pushes a changed Secret to Envoy).
#[derive(Debug)]
struct ListenerCertificates {
    world: Weak<dyn World>,
    gateway: (String, String),
    port: u16,
}

impl rustls::server::ResolvesServerCert for ListenerCertificates {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let world = self.world.upgrade()?;
        let host = Host::new(world.node(), world.programs());
        let gateway = gateway_of(&host, &self.gateway)?;
        // Without SNI only a listener without hostname matches (no filter chain otherwise).
        let listener = match hello.server_name() {
            Some(name) => listener_for(&gateway, self.port, name)?,
            None => listener_for(&gateway, self.port, "")
                .filter(|listener| listener["hostname"].as_str().is_none())?,
        };
        let reference = listener["tls"]["certificateRefs"].as_array()?.first()?;
        let namespace = reference["namespace"]
            .as_str()
            .unwrap_or(&self.gateway.0)
            .to_string();
        let secret = host.object("secrets", &namespace, text(reference, "name"))?;
        certified_key(&secret).ok()
    }
}

/// A TLS Secret's certificate chain and key.
fn certified_key(secret: &Value) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let field = |key: &str| -> Result<Vec<u8>, String> {
        crate::kube::object_data::secret_bytes(secret, key).ok_or_else(|| format!("no {key}"))
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&field("tls.crt")?)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(&field("tls.key")?).map_err(|e| e.to_string())?;
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| e.to_string())?;
    Ok(Arc::new(rustls::sign::CertifiedKey::new(chain, signing)))
}

/// The Envoy proxy of a Gateway.
#[derive(Default)]
pub struct Envoy {
    served: Served,
}

impl Program for Envoy {
    fn image(&self) -> &'static Image {
        &catalogue::ENVOY
    }

    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        Some(&self.served)
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        // A proxy pod of no Gateway, or a simulator that does not serve (unit tests): nothing
        // to listen for.
        let (Some(gateway), Some(world)) = (owning_gateway(call), host.shared().world.get()) else {
            return Ok(());
        };
        let Some(spec) = gateway_of(host, &gateway) else {
            return Ok(());
        };
        let mut ports: Vec<(u16, bool)> = Vec::new();
        for listener in spec["spec"]["listeners"].as_array().into_iter().flatten() {
            let Some(port) = listener["port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            let tls = matches!(text(listener, "protocol"), "HTTPS" | "TLS");
            match ports.iter_mut().find(|(known, _)| *known == port) {
                Some((_, any_tls)) => *any_tls |= tls,
                None => ports.push((port, tls)),
            }
        }
        for (port, tls) in ports {
            let acceptor = tls.then(|| {
                bprun_clients::runtime::install_tls_provider();
                let mut config = rustls::ServerConfig::builder()
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::new(ListenerCertificates {
                        world: world.clone(),
                        gateway: gateway.clone(),
                        port,
                    }));
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                tokio_rustls::TlsAcceptor::from(Arc::new(config))
            });
            let (world, gateway) = (world.clone(), gateway.clone());
            self.served.listen(
                &call.pod_uid,
                port.saturating_add(PORT_OFFSET),
                acceptor,
                move |request: SimRequest| {
                    let (world, gateway) = (world.clone(), gateway.clone());
                    async move {
                        let routed = world.upgrade().map(|world| {
                            let host = Host::new(world.node(), world.programs());
                            route(&host, &gateway, port, &request)
                        });
                        Some(match routed {
                            Some(Routed::Upstream(address)) => relay(address, request, tls).await,
                            Some(Routed::Answer(answer)) => answer,
                            None => envoy_answer(503, "no healthy upstream"),
                        })
                    }
                },
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_fixtures::documents;
    use super::*;

    #[test]
    fn a_wildcard_hostname_matches_names_below_it_and_the_exact_listener_wins() {
        assert!(hostname_matches(
            "*.local.example.net",
            "guestbook.local.example.net"
        ));
        assert!(hostname_matches(
            "*.local.example.net",
            "a.b.local.example.net"
        ));
        assert!(!hostname_matches(
            "*.local.example.net",
            "local.example.net"
        ));
        assert!(hostname_matches(
            "GitLab.local.example.net",
            "gitlab.LOCAL.example.net"
        ));
        assert!(!hostname_matches(
            "gitlab.local.example.net",
            "registry.local.example.net"
        ));
        let gateway = &documents("envoy", "routes.yaml")[0];
        let name =
            |host: &str| listener_for(gateway, 443, host).map(|l| text(l, "name").to_string());
        assert_eq!(
            name("gitlab.local.example.net").as_deref(),
            Some("gitlab-web")
        );
        assert_eq!(name("guestbook.local.example.net").as_deref(), Some("apps"));
        assert_eq!(name("example.org"), None);
        assert_eq!(listener_for(gateway, 80, "gitlab.local.example.net"), None);
    }

    #[test]
    fn requests_go_to_the_attached_route_of_their_host_and_longest_path() {
        let fixtures = documents("envoy", "routes.yaml");
        let (gateway, routes) = (&fixtures[0], &fixtures[1..]);
        let labels =
            |namespace: &str| serde_json::json!({"kubernetes.io/metadata.name": namespace});
        let decide = |host: &str, path: &str| decide(gateway, 443, host, path, routes, &labels);
        let backend = |namespace: &str, name: &str, port: u16| Decision::Backend {
            namespace: namespace.into(),
            name: name.into(),
            port,
        };
        assert_eq!(
            decide("gitlab.local.example.net", "/users/sign_in"),
            backend("gitlab", "gitlab-webservice-default", 8181)
        );
        assert_eq!(
            decide("guestbook.local.example.net", "/"),
            backend("guestbook", "guestbook", 80)
        );
        assert_eq!(
            decide("guestbook.local.example.net", "/api/entries"),
            backend("guestbook", "guestbook-api", 8080),
            "the longest prefix wins"
        );
        assert_eq!(
            decide("guestbook.local.example.net", "/apiary"),
            backend("guestbook", "guestbook", 80),
            "a prefix matches whole path segments"
        );
        // A route in another namespace on a listener that admits only its own: not attached.
        assert_eq!(decide("sneaky.local.example.net", "/"), Decision::NoRoute);
        assert_eq!(decide("nobody.local.example.net", "/"), Decision::NoRoute);
        assert_eq!(
            decide("cross.local.example.net", "/"),
            Decision::InvalidBackend,
            "a backend in another namespace needs a ReferenceGrant"
        );
    }

    #[test]
    fn a_listener_admits_routes_of_its_namespace_all_or_the_selected_ones() {
        let same = serde_json::json!({});
        let all = serde_json::json!({"allowedRoutes": {"namespaces": {"from": "All"}}});
        let selector = serde_json::json!({"allowedRoutes": {"namespaces": {"from": "Selector",
            "selector": {"matchLabels": {"apps": "yes"}}}}});
        let labelled = serde_json::json!({"apps": "yes"});
        assert!(admits(&same, "gitlab", "gitlab", &Value::Null));
        assert!(!admits(&same, "gitlab", "guestbook", &Value::Null));
        assert!(admits(&all, "gitlab", "guestbook", &Value::Null));
        assert!(admits(&selector, "gitlab", "guestbook", &labelled));
        assert!(!admits(&selector, "gitlab", "guestbook", &Value::Null));
    }
}
