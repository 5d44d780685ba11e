//! The cluster as a pod's own network namespace ([`crate::netns`]) reaches it: Services'
//! ClusterIPs and ports with a ready endpoint that serves them, ready pods' IPs and the ports
//! their programs serve, and the names the cluster's DNS answers ([`service::answer`]: the
//! Corefile a CoreDNS pod loaded, its rewrites included). Read from the store at each question,
//! so the namespace follows the cluster as kube-proxy and CoreDNS do.

use super::{Host, World, coredns, service};
use crate::kube::endpoints;
use crate::netns::{Fabric, Lookup};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Weak};

/// The cluster seen from a pod of one namespace.
pub struct PodFabric {
    world: Weak<dyn World>,
    namespace: String,
}

impl PodFabric {
    /// The fabric of a pod in `namespace`; `None` before the simulator serves (nothing to reach).
    pub fn for_namespace(host: &Host, namespace: &str) -> Option<Arc<dyn Fabric>> {
        let world = host.shared().world.get()?.clone();
        Some(Self::in_world(world, namespace))
    }

    /// The fabric of a pod in `namespace` of the simulator `world` (a CI job's pod, whose
    /// simulator is not serving yet when the platform wires it).
    pub fn in_world(world: Weak<dyn World>, namespace: &str) -> Arc<dyn Fabric> {
        Arc::new(PodFabric {
            world,
            namespace: namespace.to_string(),
        })
    }

    fn with_host<T>(&self, read: impl FnOnce(&Host) -> T) -> Option<T> {
        let world = self.world.upgrade()?;
        let host = Host::new(world.node(), world.programs());
        Some(read(&host))
    }
}

fn ipv4(value: &Value) -> Option<Ipv4Addr> {
    value.as_str()?.parse().ok()
}

/// The ports a Service declares.
fn service_ports(service: &Value) -> impl Iterator<Item = u16> + '_ {
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|port| port["port"].as_u64().and_then(|n| u16::try_from(n).ok()))
}

/// The ports a pod's containers declare.
fn container_ports(pod: &Value) -> impl Iterator<Item = u16> + '_ {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|container| container["ports"].as_array().into_iter().flatten())
        .filter_map(|port| {
            port["containerPort"]
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
        })
}

/// The IPs of the ready pods behind a (headless) Service.
fn ready_pod_ips(host: &Host, service: &Value) -> Vec<Ipv4Addr> {
    let namespace = service["metadata"]["namespace"].as_str().unwrap_or("");
    let name = service["metadata"]["name"].as_str().unwrap_or("");
    host.object("endpoints", namespace, name)
        .map(|endpoints| endpoints::ready_pods(&endpoints))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pod| host.object("pods", namespace, &pod))
        .filter_map(|pod| ipv4(&pod["status"]["podIP"]))
        .collect()
}

impl Fabric for PodFabric {
    fn serving(&self) -> BTreeSet<SocketAddrV4> {
        self.with_host(|host| {
            let mut open = BTreeSet::new();
            for service in host.all("services") {
                let Some(ip) = ipv4(&service["spec"]["clusterIP"]) else {
                    continue;
                };
                for port in service_ports(&service) {
                    if service::serving_behind(host, &service, port).is_some() {
                        open.insert(SocketAddrV4::new(ip, port));
                    }
                }
            }
            for pod in host.all("pods") {
                let Some(ip) = ipv4(&pod["status"]["podIP"]) else {
                    continue;
                };
                for port in container_ports(&pod) {
                    if host.serving(&pod, port).is_some() {
                        open.insert(SocketAddrV4::new(ip, port));
                    }
                }
            }
            open
        })
        .unwrap_or_default()
    }

    fn backend(&self, to: SocketAddrV4) -> Option<SocketAddr> {
        self.with_host(|host| {
            let ip = to.ip().to_string();
            if let Some(service) = host
                .all("services")
                .into_iter()
                .find(|service| service["spec"]["clusterIP"] == ip.as_str())
            {
                return service::serving_behind(host, &service, to.port());
            }
            host.all("pods")
                .into_iter()
                .filter(|pod| pod["status"]["podIP"] == ip.as_str())
                .find_map(|pod| host.serving(&pod, to.port()))
        })
        .flatten()
    }

    fn dns_answers(&self) -> bool {
        self.with_host(|host| {
            service::answer(
                host,
                "kubernetes.default.svc.cluster.local.",
                &self.namespace,
            )
            .is_some()
        })
        .unwrap_or(false)
    }

    fn lookup(&self, name: &str) -> Option<Lookup> {
        self.with_host(|host| {
            Some(match service::answer(host, name, &self.namespace)? {
                coredns::Answer::NoSuchHost => Lookup::NoSuchName,
                coredns::Answer::Service {
                    namespace, name, ..
                } => {
                    let Some(found) = host.object("services", &namespace, &name) else {
                        return Some(Lookup::NoSuchName);
                    };
                    match ipv4(&found["spec"]["clusterIP"]) {
                        Some(ip) => Lookup::Addresses(vec![ip]),
                        None => Lookup::Addresses(ready_pod_ips(host, &found)),
                    }
                }
                coredns::Answer::Pod { namespace, pod } => Lookup::Addresses(
                    host.object("pods", &namespace, &pod)
                        .and_then(|found| ipv4(&found["status"]["podIP"]))
                        .into_iter()
                        .collect(),
                ),
            })
        })
        .flatten()
    }
}
