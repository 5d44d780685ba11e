//! What a container reaches at a Service's name: the cluster DNS name (`name`, `name.ns`,
//! `name.ns.svc`, `name.ns.svc.cluster.local`) of a Service, its Endpoints' first ready pod,
//! and where that pod's program really serves the target port, so a program that connects to
//! another (GitLab's webservice to PostgreSQL and Redis, the bundled OpenBao to its database)
//! talks to the real server behind it. Only what a client can observe: DNS knows the name or
//! not, the Service has a ready endpoint or refuses the connection.

use super::{Host, coredns};
use crate::kube::endpoints;
use serde_json::Value;
use std::net::SocketAddr;

/// What a connection to a Service's name and port meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// No such Service: DNS does not know the name.
    Unknown,
    /// No CoreDNS pod answers (none ready, or none loaded its Corefile): the query to
    /// 10.96.0.10:53 is refused.
    NoDns,
    /// The Service exists (its cluster IP) but no ready pod serves the port behind it: the
    /// connection is refused.
    NotServing { ip: String },
    /// A ready pod's program serves it at `address` (on loopback).
    Serving { ip: String, address: SocketAddr },
}

/// The Service a cluster DNS name names, from `from_namespace`: (namespace, name).
pub fn service_of(name: &str, from_namespace: &str) -> Option<(String, String)> {
    let name = name.trim_end_matches('.');
    let name = name
        .strip_suffix(".svc.cluster.local")
        .or_else(|| name.strip_suffix(".svc"))
        .unwrap_or(name);
    let mut parts = name.split('.');
    let service = parts.next().filter(|part| !part.is_empty())?;
    let namespace = parts.next().unwrap_or(from_namespace);
    if parts.next().is_some() {
        return None;
    }
    Some((namespace.to_string(), service.to_string()))
}

/// The target port of the Service port `port` (a number; a named target port is looked up on
/// the pod's container ports).
fn target_port(service: &Value, port: u16, pod: &Value) -> Option<u16> {
    let spec = service["spec"]["ports"]
        .as_array()?
        .iter()
        .find(|candidate| candidate["port"].as_u64() == Some(u64::from(port)))?;
    match &spec["targetPort"] {
        Value::Number(number) => number.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(name) => pod["spec"]["containers"]
            .as_array()?
            .iter()
            .flat_map(|container| container["ports"].as_array().into_iter().flatten())
            .find(|candidate| candidate["name"] == name.as_str())?["containerPort"]
            .as_u64()
            .and_then(|n| u16::try_from(n).ok()),
        _ => Some(port),
    }
}

/// What the cluster's DNS answers for `name` asked from a pod in `from_namespace` (`None`: no
/// CoreDNS pod answers): [`coredns::lookup`] with the Corefile a ready CoreDNS pod loaded.
pub fn answer(host: &Host, name: &str, from_namespace: &str) -> Option<coredns::Answer> {
    let object =
        |store_key: &str, namespace: &str, name: &str| host.object(store_key, namespace, name);
    if object("services", "kube-system", "kube-dns").is_none() {
        // A cluster without kind's CoreDNS (`bprun sim kube` starts one): names are Services'.
        let found = service_of(name, from_namespace).and_then(|(namespace, name)| {
            object("services", &namespace, &name).map(|_| (namespace, name))
        });
        return Some(match found {
            Some((namespace, name)) => coredns::Answer::Service {
                namespace,
                name,
                ip: String::new(),
            },
            None => coredns::Answer::NoSuchHost,
        });
    }
    let corefile = coredns::cluster_corefile(host)?;
    Some(coredns::lookup(&corefile, name, from_namespace, &object))
}

pub use crate::network::DialError;

/// Whether a TCP connection from a pod in `from_namespace` to `name:port` is accepted: a ready
/// endpoint behind the Service's port (kube-proxy forwards to it), or a ready pod behind a
/// headless Service's name.
pub fn dial(host: &Host, name: &str, port: u16, from_namespace: &str) -> Result<(), DialError> {
    let (namespace, service_name) = match answer(host, name, from_namespace) {
        None => return Err(DialError::NoDns),
        Some(coredns::Answer::NoSuchHost) => return Err(DialError::NoSuchHost),
        Some(coredns::Answer::Pod { namespace, pod }) => {
            let has_ip = host
                .object("pods", &namespace, &pod)
                .is_some_and(|found| found["status"]["podIP"].is_string());
            return if has_ip {
                Ok(())
            } else {
                Err(DialError::NoSuchHost)
            };
        }
        Some(coredns::Answer::Service {
            namespace, name, ..
        }) => (namespace, name),
    };
    let Some(service) = host.object("services", &namespace, &service_name) else {
        return Err(DialError::NoSuchHost);
    };
    let ip = service["spec"]["clusterIP"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let declared = service["spec"]["ports"].as_array().is_some_and(|ports| {
        ports
            .iter()
            .any(|p| p["port"].as_u64() == Some(u64::from(port)))
    });
    if !declared {
        return Err(DialError::Timeout { ip });
    }
    let ready = host
        .object("endpoints", &namespace, &service_name)
        .is_some_and(|endpoints| endpoints::has_ready_address(&endpoints));
    if ready {
        Ok(())
    } else {
        Err(DialError::Refused { ip })
    }
}

/// What `name:port` is from a pod in `from_namespace`: the name as the cluster's DNS answers
/// it ([`answer`]), then the Service's ready endpoints.
pub fn resolve(host: &Host, name: &str, port: u16, from_namespace: &str) -> Backend {
    let (namespace, service_name) = match answer(host, name, from_namespace) {
        None => return Backend::NoDns,
        Some(coredns::Answer::Service {
            namespace, name, ..
        }) => (namespace, name),
        Some(coredns::Answer::Pod { namespace, pod }) => {
            return match host.object("pods", &namespace, &pod) {
                Some(found) => {
                    let ip = found["status"]["podIP"].as_str().unwrap_or("").to_string();
                    match host.serving(&found, port) {
                        Some(address) => Backend::Serving { ip, address },
                        None => Backend::NotServing { ip },
                    }
                }
                None => Backend::Unknown,
            };
        }
        Some(coredns::Answer::NoSuchHost) => return Backend::Unknown,
    };
    let Some(service) = host.object("services", &namespace, &service_name) else {
        return Backend::Unknown;
    };
    let ip = service["spec"]["clusterIP"]
        .as_str()
        .unwrap_or("10.96.0.1")
        .to_string();
    match serving_behind(host, &service, port) {
        Some(address) => Backend::Serving { ip, address },
        None => Backend::NotServing { ip },
    }
}

/// Where the first ready endpoint of `service` serves its port `port` (kube-proxy's choice,
/// made by address, whatever DNS says): `None` when no ready pod serves it. Behind
/// `default/kubernetes` (port 443) is the API server itself, as kube-apiserver's own endpoints.
pub fn serving_behind(host: &Host, service: &Value, port: u16) -> Option<SocketAddr> {
    let namespace = service["metadata"]["namespace"].as_str().unwrap_or("");
    let name = service["metadata"]["name"].as_str().unwrap_or("");
    if (namespace, name) == ("default", "kubernetes") {
        return (port == 443)
            .then(|| host.shared().api_server.get().copied())
            .flatten();
    }
    let ready_pods = host
        .object("endpoints", namespace, name)
        .map(|endpoints| endpoints::ready_pods(&endpoints))
        .unwrap_or_default();
    ready_pods.into_iter().find_map(|pod_name| {
        let pod = host.object("pods", namespace, &pod_name)?;
        let target = target_port(service, port, &pod)?;
        host.serving(&pod, target)
    })
}

/// The store as `kube::pulls` reads it, through a program's host.
struct HostView<'a>(&'a Host<'a>);

impl crate::kube::pulls::ClusterView for HostView<'_> {
    fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value> {
        self.0.object(store_key, namespace, name)
    }
}

/// The TLS handshake a pod in `from_namespace` makes with `name:port` once [`dial`] connected:
/// the Envoy proxy behind the Service presents its listener's certificate for `name`, verified
/// against `ca` (PEM; `None`: the image's own roots, which know no platform CA). `Err` in Go's
/// words (`tls: failed to verify certificate: x509: ...`), or `EOF` when no listener serves the
/// name over TLS.
pub fn handshake(
    host: &Host,
    name: &str,
    port: u16,
    from_namespace: &str,
    ca: Option<&str>,
) -> Result<(), String> {
    let Some(coredns::Answer::Service {
        namespace,
        name: service_name,
        ..
    }) = answer(host, name, from_namespace)
    else {
        return Err("EOF".to_string());
    };
    let Some(service) = host.object("services", &namespace, &service_name) else {
        return Err("EOF".to_string());
    };
    let view = HostView(host);
    let chain = crate::kube::pulls::served_certificate(&service, name, port, &view)
        .ok_or_else(|| "EOF".to_string())?;
    crate::kube::pulls::verify_certificate(ca, &chain, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cluster_dns_name_names_a_service_in_its_namespace_or_the_callers() {
        let expect = |ns: &str, name: &str| Some((ns.to_string(), name.to_string()));
        assert_eq!(
            service_of("postgresql-cnpg-rw.postgresql.svc", "gitlab"),
            expect("postgresql", "postgresql-cnpg-rw")
        );
        assert_eq!(
            service_of("redis-master.redis.svc.cluster.local", "gitlab"),
            expect("redis", "redis-master")
        );
        assert_eq!(
            service_of("redis-master", "gitlab"),
            expect("gitlab", "redis-master")
        );
        assert_eq!(service_of("a.b", "x"), expect("b", "a"));
        assert_eq!(service_of("gitlab.example.com", "x"), None);
        assert_eq!(service_of("", "x"), None);
    }

    #[test]
    fn a_named_target_port_is_the_pods_container_port_of_that_name() {
        let service = json!({"spec": {"ports": [
            {"port": 5432, "targetPort": 5432},
            {"port": 6379, "targetPort": "redis"},
            {"port": 80}]}});
        let pod = json!({"spec": {"containers": [{"ports": [{"name": "redis", "containerPort": 6380}]}]}});
        assert_eq!(target_port(&service, 5432, &pod), Some(5432));
        assert_eq!(target_port(&service, 6379, &pod), Some(6380));
        assert_eq!(target_port(&service, 80, &pod), Some(80));
        assert_eq!(target_port(&service, 81, &pod), None);
    }
}
