//! Commands in pods over the WebSocket exec protocol.

use super::{KubeClient, block_on, failed, name_of};
use crate::error::{ClientError, ErrorKind};
use kube::api::{Api, AttachParams};
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct ExecResult {
    pub code: i64,
    pub stdout: String,
    pub stderr: String,
}

impl KubeClient {
    /// A running pod by name, `pod/NAME`, or label selector (`app=toolbox`).
    pub fn pick_pod(&self, namespace: &str, target: &str) -> Result<Value, ClientError> {
        let target = target.strip_prefix("pod/").unwrap_or(target);
        if target.contains('=') {
            let pods = self.list("pods", namespace, target, "")?;
            return pods
                .into_iter()
                .find(|pod| {
                    pod["status"]["phase"] == "Running"
                        && pod["metadata"]["deletionTimestamp"].is_null()
                })
                .ok_or_else(|| {
                    ClientError::new(format!("no running pod matches {target} in {namespace}"))
                        .with_hint("list the pods with that label selector to check it")
                });
        }
        self.get("pods", namespace, target)?
            .ok_or_else(|| ClientError::new(format!("pod {target} not found in {namespace}")))
    }

    /// Runs `command` in a pod (WebSocket exec); a non-zero exit is a result, not an error.
    pub fn exec(
        &self,
        namespace: &str,
        target: &str,
        command: &[String],
        container: Option<&str>,
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<ExecResult, ClientError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let pod = self.pick_pod(namespace, target)?;
        let pod_name = name_of(&pod);
        let shown = format!("pod/{pod_name} in {namespace}");
        // A command in a pod may change anything (phase 3 mints a PAT so): a write.
        crate::write_gate::before_remote_write(&format!("kube: exec in {shown}"), &|| false)?;
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        let mut params = AttachParams::default()
            .stdin(stdin.is_some())
            .stdout(true)
            .stderr(true);
        if let Some(container) = container {
            params = params.container(container);
        }
        let session = async {
            let mut process = pods
                .exec(&pod_name, command.to_vec(), &params)
                .await
                .map_err(|error| failed("exec", &shown, &error))?;
            if let (Some(bytes), Some(mut writer)) = (stdin, process.stdin()) {
                writer.write_all(bytes).await.map_err(|error| {
                    ClientError::new(format!("{shown}: writing stdin: {error}"))
                        .in_operation("exec", " ")
                })?;
                let _ = writer.shutdown().await;
                drop(writer);
            }
            let mut stdout = Vec::new();
            let mut stderr = Vec::new();
            let out_reader = process.stdout();
            let err_reader = process.stderr();
            let status = process.take_status();
            let read_out = async {
                if let Some(mut reader) = out_reader {
                    let _ = reader.read_to_end(&mut stdout).await;
                }
            };
            let read_err = async {
                if let Some(mut reader) = err_reader {
                    let _ = reader.read_to_end(&mut stderr).await;
                }
            };
            tokio::join!(read_out, read_err);
            let status = match status {
                Some(future) => future.await,
                None => None,
            };
            let _ = process.join().await;
            let code = match status {
                Some(status) if status.status.as_deref() == Some("Success") => 0,
                Some(status) => status
                    .details
                    .and_then(|details| details.causes)
                    .and_then(|causes| {
                        causes
                            .into_iter()
                            .find(|cause| cause.reason.as_deref() == Some("ExitCode"))
                            .and_then(|cause| cause.message)
                    })
                    .and_then(|code| code.parse().ok())
                    .unwrap_or(1),
                None => {
                    return Err(ClientError::new(format!(
                        "{shown}: the connection closed before the command's exit status arrived"
                    ))
                    .in_operation("exec", " ")
                    .with_hint("the pod or the API server may have restarted: run it again"));
                }
            };
            Ok(ExecResult {
                code,
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            })
        };
        block_on(async {
            tokio::time::timeout(timeout, session).await.map_err(|_| {
                ClientError::new(format!("{shown}: no answer within {}s", timeout.as_secs()))
                    .with_kind(ErrorKind::Timeout)
                    .in_operation("exec", " ")
                    .with_hint("raise the timeout for long commands")
            })?
        })
    }
}

impl KubeClient {
    /// The log of a running pod's container (by name, `pod/NAME` or label selector), its last
    /// `tail` lines when given: what `kubectl logs` prints. Reads only.
    pub fn pod_log(
        &self,
        namespace: &str,
        target: &str,
        container: Option<&str>,
        tail: Option<i64>,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        let pod = self.pick_pod(namespace, target)?;
        let pod_name = name_of(&pod);
        let shown = format!("pod/{pod_name} in {namespace}");
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        let params = kube::api::LogParams {
            container: container.map(str::to_string),
            tail_lines: tail,
            ..Default::default()
        };
        block_on(async {
            tokio::time::timeout(timeout, super::retry(|| pods.logs(&pod_name, &params)))
                .await
                .map_err(|_| {
                    ClientError::new(format!("{shown}: no log within {}s", timeout.as_secs()))
                        .with_kind(ErrorKind::Timeout)
                        .in_operation("logs", " ")
                })?
                .map_err(|error| failed("logs", &shown, &error))
        })
    }
}
