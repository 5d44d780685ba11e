//! Local loopback ports forwarded to pods, for the rest of the process.

use super::{KubeClient, name_of};
use crate::error::ClientError;
use kube::api::{Api, ListParams};
use std::time::Duration;

impl KubeClient {
    /// Forwards a local loopback port to `target` (`svc/NAME`, `pod/NAME`, or a pod selector)
    /// port `port`, for the rest of the process; returns the local address.
    pub fn port_forward(
        &self,
        namespace: &str,
        target: &str,
        port: u16,
    ) -> Result<std::net::SocketAddr, ClientError> {
        let pod = if let Some(service) = target
            .strip_prefix("svc/")
            .or_else(|| target.strip_prefix("service/"))
        {
            let svc = self.get("services", namespace, service)?.ok_or_else(|| {
                ClientError::new(format!("service {service} not found in {namespace}"))
            })?;
            let selector: Vec<String> = svc["spec"]["selector"]
                .as_object()
                .map(|labels| {
                    labels
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect()
                })
                .unwrap_or_default();
            if selector.is_empty() {
                return Err(ClientError::new(format!(
                    "service {service} in {namespace} has no selector to find a pod by"
                )));
            }
            let target_port = svc["spec"]["ports"]
                .as_array()
                .and_then(|ports| ports.iter().find(|p| p["port"] == port))
                .map(|p| p["targetPort"].as_u64().unwrap_or(u64::from(port)))
                .ok_or_else(|| {
                    ClientError::new(format!(
                        "service {service} in {namespace} has no port {port}"
                    ))
                })?;
            (
                self.pick_pod(namespace, &selector.join(","))?,
                target_port as u16,
                Some(selector.join(",")),
            )
        } else {
            let target = target.strip_prefix("pod/").unwrap_or(target);
            let selector = target.contains('=').then(|| target.to_string());
            (self.pick_pod(namespace, target)?, port, selector)
        };
        let (pod, pod_port, selector) = (pod.0, pod.1, pod.2);
        let pod_name = name_of(&pod);
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        let runtime = crate::runtime::runtime();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .map_err(|error| {
                ClientError::new(format!("port-forward: cannot listen on 127.0.0.1: {error}"))
            })?;
        let local = listener
            .local_addr()
            .map_err(|error| ClientError::new(format!("port-forward: {error}")))?;
        runtime.spawn(async move {
            loop {
                let Ok((mut connection, _)) = listener.accept().await else {
                    // Out of file descriptors or similar: back off rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let pods = pods.clone();
                let mut pod_name = pod_name.clone();
                let selector = selector.clone();
                tokio::spawn(async move {
                    // Behind a Service or selector, each connection goes to a running pod
                    // (the one found at first may have been replaced since).
                    if let Some(selector) = &selector {
                        let listed = tokio::time::timeout(
                            Duration::from_secs(10),
                            pods.list(&ListParams::default().labels(selector)),
                        )
                        .await;
                        if let Ok(Ok(list)) = listed
                            && let Some(running) = list.items.iter().find(|pod| {
                                pod.status.as_ref().and_then(|s| s.phase.as_deref())
                                    == Some("Running")
                                    && pod.metadata.deletion_timestamp.is_none()
                            })
                            && let Some(name) = running.metadata.name.clone()
                        {
                            pod_name = name;
                        }
                    }
                    let ports = [pod_port];
                    let setup = tokio::time::timeout(
                        Duration::from_secs(10),
                        pods.portforward(&pod_name, &ports),
                    );
                    let Ok(Ok(mut forwarder)) = setup.await else {
                        return;
                    };
                    if let Some(mut upstream) = forwarder.take_stream(pod_port) {
                        let _ = tokio::io::copy_bidirectional(&mut connection, &mut upstream).await;
                    }
                    drop(forwarder);
                });
            }
        });
        Ok(local)
    }
}
