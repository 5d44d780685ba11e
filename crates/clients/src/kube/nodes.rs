//! Commands on nodes: a short-lived privileged pod pinned to each node, with a folder of the
//! node mounted at `/host` (as `kubectl debug node/NAME` does), for what only a node's own
//! files hold (its `/etc/hosts`, containerd's `certs.d`). Works on any kind node; no `docker
//! exec` into node containers.

use super::{KubeClient, block_on, failed};
use crate::error::{ClientError, ErrorKind};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The namespace the node pods run in (privileged: the one namespace kind admits them in).
pub const NODE_POD_NAMESPACE: &str = "kube-system";

/// What to run on every node.
#[derive(Debug, Clone)]
pub struct NodeCommand<'a> {
    /// Names the pods (`bprun-<purpose>-<node>`) and labels them (`bprun.dev/purpose`).
    pub purpose: &'a str,
    pub image: &'a str,
    /// The node's folder mounted at `/host` (created when missing: hostPath `DirectoryOrCreate`).
    pub host_path: &'a str,
    /// The folder is mounted read-only: the command can only read the node's files.
    pub read_only: bool,
    /// The `sh -c` script.
    pub command: &'a str,
    /// More volumes, each `(volumeMount, volume)` (a ConfigMap the script copies from).
    pub volumes: &'a [(Value, Value)],
    /// How long all the pods together may take to end.
    pub timeout: Duration,
}

/// What a node's pod did: its exit code and its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRun {
    pub node: String,
    pub pod: String,
    pub code: i64,
    pub log: String,
}

/// The pod that runs `command` on `node`.
pub fn node_pod(command: &NodeCommand, node: &str) -> Value {
    let mut mounts =
        vec![json!({"name": "host", "mountPath": "/host", "readOnly": command.read_only})];
    let mut volumes = vec![json!({"name": "host",
        "hostPath": {"path": command.host_path, "type": "DirectoryOrCreate"}})];
    for (mount, volume) in command.volumes {
        mounts.push(mount.clone());
        volumes.push(volume.clone());
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(command.purpose, node),
            "namespace": NODE_POD_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "bprun", "bprun.dev/purpose": command.purpose},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": command.purpose,
                "image": command.image,
                "command": ["sh", "-c", command.command],
                "securityContext": {"privileged": true},
                "volumeMounts": mounts,
                // A failed script's last lines are in the pod's status too.
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
            "volumes": volumes,
        },
    })
}

fn pod_name(purpose: &str, node: &str) -> String {
    format!("bprun-{purpose}-{node}")
}

/// A pod's exit code once it ended (`Succeeded` or `Failed`), or `None` while it runs; an
/// error when it cannot start (its container's waiting reason, as `kubectl get pod` shows).
pub fn ended(pod: &Value) -> Result<Option<i64>, String> {
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    let state = &pod["status"]["containerStatuses"][0]["state"];
    if phase == "Succeeded" || phase == "Failed" {
        return Ok(Some(
            state["terminated"]["exitCode"]
                .as_i64()
                .unwrap_or(if phase == "Succeeded" { 0 } else { 1 }),
        ));
    }
    let waiting = state["waiting"]["reason"].as_str().unwrap_or("");
    if matches!(
        waiting,
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "CreateContainerConfigError"
    ) {
        let message = state["waiting"]["message"].as_str().unwrap_or("");
        return Err(format!("{waiting}: {message}")
            .trim_end_matches(": ")
            .to_string());
    }
    Ok(None)
}

impl KubeClient {
    /// Runs `command` on each of `nodes` at once, each in its own pod, and waits until every
    /// pod ended; then deletes those whose script succeeded (a failed one stays for its log). A pod a killed run left under the same name is deleted
    /// first. Unless `read_only`, this is a write (the write gate is asked once).
    pub fn run_on_nodes(
        &self,
        nodes: &[String],
        command: &NodeCommand,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<NodeRun>, ClientError> {
        if !command.read_only {
            crate::write_gate::before_remote_write(
                &format!("kube: {} on {} nodes", command.purpose, nodes.len()),
                &|| false,
            )?;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NODE_POD_NAMESPACE);
        let deadline = Instant::now() + command.timeout;
        block_on(async {
            for node in nodes {
                let name = pod_name(command.purpose, node);
                let shown = format!("Pod/{name} in {NODE_POD_NAMESPACE}");
                remove_pod(&pods, &name, &shown, deadline, cancelled).await?;
                let pod: Pod = serde_json::from_value(node_pod(command, node)).map_err(|e| {
                    ClientError::new(format!("{shown}: {e}")).in_operation("node run", " ")
                })?;
                let params = PostParams::default();
                match super::retry(|| pods.create(&params, &pod)).await {
                    Ok(_) => {}
                    // A retried create whose first answer was lost: the pod is this run's (the
                    // name was free a moment ago).
                    Err(error) if super::status_code(&error) == Some(409) => {}
                    Err(error) => return Err(failed("node run", &shown, &error)),
                }
            }
            let mut runs = Vec::with_capacity(nodes.len());
            for node in nodes {
                let name = pod_name(command.purpose, node);
                let shown = format!("Pod/{name} in {NODE_POD_NAMESPACE}");
                let code = loop {
                    if cancelled() {
                        return Err(ClientError::new(format!("{shown}: interrupted"))
                            .in_operation("node run", " "));
                    }
                    let pod = super::retry(|| pods.get(&name))
                        .await
                        .map_err(|error| failed("node run", &shown, &error))?;
                    let pod = serde_json::to_value(&pod).unwrap_or_default();
                    match ended(&pod) {
                        Ok(Some(code)) => break code,
                        Ok(None) => {}
                        Err(why) => {
                            return Err(ClientError::new(format!(
                                "node {node}: {shown} cannot start: {why}"
                            ))
                            .in_operation("node run", " ")
                            .with_hint(format!(
                                "kubectl -n {NODE_POD_NAMESPACE} describe pod {name}"
                            )));
                        }
                    }
                    if Instant::now() >= deadline {
                        return Err(ClientError::new(format!(
                            "node {node}: {shown} did not end within {}s",
                            command.timeout.as_secs()
                        ))
                        .with_kind(ErrorKind::Timeout)
                        .in_operation("node run", " ")
                        .with_hint(format!(
                            "kubectl -n {NODE_POD_NAMESPACE} describe pod {name}"
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                };
                let params = LogParams::default();
                let log = super::retry(|| pods.logs(&name, &params))
                    .await
                    .map_err(|error| failed("node run", &shown, &error))?;
                runs.push(NodeRun {
                    node: node.clone(),
                    pod: name,
                    code,
                    log,
                });
            }
            // A pod whose script failed stays for `kubectl logs`; the others go (in the
            // background: the next run deletes a straggler before it creates).
            for run in runs.iter().filter(|run| run.code == 0) {
                let _ = pods.delete(&run.pod, &DeleteParams::background()).await;
            }
            Ok(runs)
        })
    }
}

/// Deletes pod `name` if present and waits until it is gone (by `deadline`).
async fn remove_pod(
    pods: &Api<Pod>,
    name: &str,
    shown: &str,
    deadline: Instant,
    cancelled: &dyn Fn() -> bool,
) -> Result<(), ClientError> {
    let present = super::retry(|| pods.get_opt(name))
        .await
        .map_err(|error| failed("node run", shown, &error))?;
    if present.is_none() {
        return Ok(());
    }
    let _ = pods.delete(name, &DeleteParams::background()).await;
    loop {
        let still = super::retry(|| pods.get_opt(name))
            .await
            .map_err(|error| failed("node run", shown, &error))?;
        if still.is_none() {
            return Ok(());
        }
        if cancelled() || Instant::now() >= deadline {
            return Err(
                ClientError::new(format!("{shown}: an earlier run's pod is still there"))
                    .in_operation("node run", " ")
                    .with_hint(format!("kubectl -n {NODE_POD_NAMESPACE} delete pod {name}")),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Value {
        serde_norway::from_str(yaml).expect("yaml")
    }

    #[test]
    fn a_pod_has_ended_once_it_succeeded_or_failed_with_its_exit_code() {
        let running = pod("status: {phase: Running, containerStatuses: [{state: {running: {}}}]}");
        assert_eq!(ended(&running), Ok(None));
        let pending = pod("status: {phase: Pending}");
        assert_eq!(ended(&pending), Ok(None));
        let done = pod(
            "status: {phase: Succeeded, containerStatuses: [{state: {terminated: {exitCode: 0}}}]}",
        );
        assert_eq!(ended(&done), Ok(Some(0)));
        let failed = pod(
            "status: {phase: Failed, containerStatuses: [{state: {terminated: {exitCode: 3}}}]}",
        );
        assert_eq!(ended(&failed), Ok(Some(3)));
        let unpullable = pod(
            "status: {phase: Pending, containerStatuses: [{state: {waiting: {reason: ImagePullBackOff, message: 'Back-off pulling image \"busybox:1.37\"'}}}]}",
        );
        assert_eq!(
            ended(&unpullable),
            Err("ImagePullBackOff: Back-off pulling image \"busybox:1.37\"".to_string())
        );
    }

    #[test]
    fn a_node_pod_mounts_the_nodes_folder_as_asked_and_stays_on_its_node() {
        let extra = [(
            json!({"name": "ca", "mountPath": "/ca"}),
            json!({"name": "ca", "configMap": {"name": "bprun-wildcard-ca"}}),
        )];
        let command = NodeCommand {
            purpose: "registry-hosts",
            image: "docker.io/library/busybox:1.37",
            host_path: "/etc",
            read_only: true,
            command: "cat /host/hosts",
            volumes: &extra,
            timeout: Duration::from_secs(5),
        };
        let pod = node_pod(&command, "sim-worker");
        assert_eq!(pod["metadata"]["name"], "bprun-registry-hosts-sim-worker");
        assert_eq!(pod["spec"]["nodeName"], "sim-worker");
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": "host", "mountPath": "/host", "readOnly": true},
                   {"name": "ca", "mountPath": "/ca"}])
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["hostPath"],
            json!({"path": "/etc", "type": "DirectoryOrCreate"})
        );
        assert_eq!(
            pod["spec"]["containers"][0]["command"],
            json!(["sh", "-c", "cat /host/hosts"])
        );
    }
}
