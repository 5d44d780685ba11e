//! Pods that run a shell script to completion in a busybox or alpine image (phase 2's node
//! pods: the containerd CA, the registry pin in `/etc/hosts`, the data wipe; helm hooks and
//! test pods): the script really runs, so a broken one fails as on a real node, with `sh`'s
//! words in `kubectl logs` and the exit code in the pod's status.
//!
//! Where it runs: the pod sandbox of `crate::sandbox` (busybox's userland in private
//! namespaces, chrooted), holding the pod's volumes at their mount paths. A `hostPath` volume
//! is the node's folder: under a node mount ([`NodeMounts`], the shared data folder) the host folder behind it, elsewhere the
//! node's own folder in the simulator (`nodes/NODE/...`, seeded with kind's `/etc/hosts`).
//! ConfigMap, Secret and emptyDir volumes are files the simulator writes for the pod. The pod's
//! network is its own namespace wired to the cluster ([`crate::netns`], [`PodFabric`]): the
//! cluster's DNS and its Services' ready endpoints, nothing of the host's; a host-network pod
//! gets an empty one. A bounded time (`activeDeadlineSeconds`, at most 5 minutes), a bounded log.

use super::catalogue::{self, Image};
use super::node::NodeMounts;
use super::pod_network::PodFabric;
use super::{Host, Program};
use crate::kube::pulls::kind_hosts;
use crate::kube::runtime::{ExecCall, Exit};
use crate::netns::Network;
use crate::sandbox::{Mount, PodNetwork};
use base64::Engine as _;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest a script may run (a pod's `activeDeadlineSeconds` may ask for less).
const LONGEST_RUN: Duration = Duration::from_secs(300);
/// The most of a script's output kept as its log.
const LOG_LIMIT: usize = 64 * 1024;
/// Containers whose exits and logs are kept at most (the oldest go first).
const KEPT: usize = 512;

/// A node path made of plain names (no `..`): its parts, else `None`.
fn plain_parts(path: &str) -> Option<Vec<String>> {
    let path = Path::new(path);
    if !path.is_absolute() {
        return None;
    }
    path.components()
        .filter(|part| !matches!(part, Component::RootDir))
        .map(|part| match part {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

/// Runs the scripts of busybox and alpine pods that run to completion.
pub struct Scripts {
    /// Where the nodes' own folders are (`NODE/etc/hosts`, ...).
    nodes: PathBuf,
    /// Node folders backed by host folders.
    mounts: NodeMounts,
    /// Per-pod files (ConfigMap, Secret and emptyDir volumes, the sandbox's root).
    scratch: PathBuf,
    /// (pod uid, container) -> how it ended; shared with the threads that run the scripts.
    exits: Arc<Mutex<HashMap<(String, String), Exit>>>,
    /// The order exits arrived in, to forget the oldest.
    order: Arc<Mutex<Vec<(String, String)>>>,
}

impl Scripts {
    pub fn new(nodes: PathBuf, mounts: NodeMounts, scratch: PathBuf) -> Scripts {
        Scripts {
            nodes,
            mounts,
            scratch,
            exits: Arc::default(),
            order: Arc::default(),
        }
    }

    /// The folder behind a node path on `node` (created when missing, as `DirectoryOrCreate`).
    fn node_folder(&self, node: &str, path: &str) -> Result<PathBuf, String> {
        if let Some(host) = self.mounts.host_path(path) {
            return Ok(host);
        }
        let parts = plain_parts(path).ok_or_else(|| format!("invalid hostPath {path:?}"))?;
        let node_root = self.nodes.join(node);
        if !node_root.exists() {
            std::fs::create_dir_all(node_root.join("etc/containerd/certs.d"))
                .map_err(|error| format!("node {node}: {error}"))?;
            std::fs::write(node_root.join("etc/hosts"), kind_hosts(node))
                .map_err(|error| format!("node {node}: {error}"))?;
        }
        Ok(parts
            .iter()
            .fold(node_root, |folder, part| folder.join(part)))
    }

    /// The files of a ConfigMap or Secret volume (`items` honoured), written under `folder`.
    fn write_projection(
        folder: &Path,
        data: &Value,
        items: &Value,
        decode: bool,
    ) -> Result<(), String> {
        std::fs::create_dir_all(folder).map_err(|error| error.to_string())?;
        let entries: Vec<(String, String)> = match items.as_array() {
            Some(items) => items
                .iter()
                .filter_map(|item| {
                    Some((
                        item["key"].as_str()?.to_string(),
                        item["path"].as_str()?.to_string(),
                    ))
                })
                .collect(),
            None => data
                .as_object()
                .map(|map| map.keys().map(|key| (key.clone(), key.clone())).collect())
                .unwrap_or_default(),
        };
        for (key, path) in entries {
            let Some(text) = data[&key].as_str() else {
                continue;
            };
            let bytes = if decode {
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|error| format!("key {key}: {error}"))?
            } else {
                text.as_bytes().to_vec()
            };
            let parts = plain_parts(&format!("/{path}"))
                .ok_or_else(|| format!("invalid item path {path:?}"))?;
            let target = parts.iter().fold(folder.to_path_buf(), |f, p| f.join(p));
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|error| error.to_string())?;
            }
            std::fs::write(&target, bytes).map_err(|error| error.to_string())?;
        }
        Ok(())
    }

    /// The container's volume mounts, as the sandbox binds them.
    fn mounts_of(
        &self,
        pod: &Value,
        container: &Value,
        scratch: &Path,
        host: &Host,
    ) -> Result<Vec<Mount>, String> {
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("");
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or("sim-control-plane");
        let mut arguments = Vec::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let name = mount["name"].as_str().unwrap_or("");
            let Some(target) = mount["mountPath"]
                .as_str()
                .filter(|p| plain_parts(p).is_some())
            else {
                return Err(format!("invalid mountPath {:?}", mount["mountPath"]));
            };
            let Some(volume) = pod["spec"]["volumes"]
                .as_array()
                .and_then(|volumes| volumes.iter().find(|v| v["name"] == name))
            else {
                return Err(format!("volume {name:?} not found"));
            };
            let own = scratch.join("volumes").join(name);
            let mut source = if let Some(path) = volume["hostPath"]["path"].as_str() {
                let folder = self.node_folder(node, path)?;
                if volume["hostPath"]["type"].as_str().unwrap_or("") != "File" {
                    std::fs::create_dir_all(&folder).map_err(|error| error.to_string())?;
                }
                folder
            } else if let Some(map) = volume["configMap"]["name"].as_str() {
                let data = host
                    .object("configmaps", namespace, map)
                    .map(|object| object["data"].clone())
                    .unwrap_or(Value::Null);
                Self::write_projection(&own, &data, &volume["configMap"]["items"], false)?;
                own
            } else if let Some(secret) = volume["secret"]["secretName"].as_str() {
                let data = host
                    .object("secrets", namespace, secret)
                    .map(|object| object["data"].clone())
                    .unwrap_or(Value::Null);
                Self::write_projection(&own, &data, &volume["secret"]["items"], true)?;
                own
            } else {
                // emptyDir, and what else needs no source here: an empty folder.
                std::fs::create_dir_all(&own).map_err(|error| error.to_string())?;
                own
            };
            if let Some(sub_path) = mount["subPath"].as_str().filter(|s| !s.is_empty()) {
                let parts = plain_parts(&format!("/{sub_path}"))
                    .ok_or_else(|| format!("invalid subPath {sub_path:?}"))?;
                source = parts.iter().fold(source, |f, p| f.join(p));
                if !source.exists() {
                    std::fs::create_dir_all(&source).map_err(|error| error.to_string())?;
                }
            }
            arguments.push(Mount {
                source,
                target: target.to_string(),
                read_only: mount["readOnly"].as_bool() == Some(true),
            });
        }
        Ok(arguments)
    }

    fn record(&self, key: (String, String), exit: Exit) {
        record(&self.exits, &self.order, key, exit);
    }
}

fn record(
    exits: &Mutex<HashMap<(String, String), Exit>>,
    order: &Mutex<Vec<(String, String)>>,
    key: (String, String),
    exit: Exit,
) {
    let mut exits = exits.lock().unwrap_or_else(|p| p.into_inner());
    let mut order = order.lock().unwrap_or_else(|p| p.into_inner());
    exits.insert(key.clone(), exit);
    order.push(key);
    while order.len() > KEPT {
        let oldest = order.remove(0);
        exits.remove(&oldest);
    }
}

/// How a container that could not be set up ends (containerd's `StartError`: exit code 128),
/// with why as its log.
fn start_failure(why: &dyn std::fmt::Display) -> Exit {
    Exit {
        code: 128,
        log: format!("{why}\n"),
    }
}

/// The command a container runs: `command` then `args`; busybox's and alpine's default is `sh`.
fn argv(container: &Value) -> Vec<String> {
    let words = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|word| word.as_str().map(str::to_string))
            .collect()
    };
    let mut argv = words(&container["command"]);
    argv.extend(words(&container["args"]));
    if argv.is_empty() {
        argv.push("sh".to_string());
    }
    argv
}

/// The last part of a log that fits the limit (a real kubelet keeps the newest lines too).
fn bounded(mut log: Vec<u8>) -> String {
    if log.len() > LOG_LIMIT {
        log.drain(..log.len() - LOG_LIMIT);
    }
    String::from_utf8_lossy(&log).into_owned()
}

impl Program for Scripts {
    fn image(&self) -> &'static Image {
        &catalogue::SHELL
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        let Some(pod) = host
            .objects("pods", &call.namespace)
            .into_iter()
            .find(|pod| pod["metadata"]["uid"].as_str() == Some(call.pod_uid.as_str()))
        else {
            return Ok(());
        };
        if !crate::kube::batch::runs_to_completion(&pod) {
            return Ok(());
        }
        let Some(container) = pod["spec"]["containers"]
            .as_array()
            .and_then(|containers| {
                containers
                    .iter()
                    .find(|c| c["name"] == call.container.as_str())
            })
            .cloned()
        else {
            return Ok(());
        };
        let key = (call.pod_uid.clone(), call.container.clone());
        let scratch = self
            .scratch
            .join(format!("{}-{}", call.pod_uid, call.container));
        let mounts = match self.mounts_of(&pod, &container, &scratch, host) {
            Ok(mounts) => mounts,
            Err(message) => {
                self.record(key, start_failure(&message));
                return Ok(());
            }
        };
        let root = scratch.join("root");
        let _ = std::fs::create_dir_all(&root);
        let limit = pod["spec"]["activeDeadlineSeconds"]
            .as_u64()
            .map(Duration::from_secs)
            .unwrap_or(LONGEST_RUN)
            .min(LONGEST_RUN);
        let workdir = container["workingDir"].as_str().unwrap_or("/").to_string();
        // The pod's own network, wired to the cluster; a host-network pod (the node scripts)
        // gets none: the node's network is not simulated.
        let network = if pod["spec"]["hostNetwork"] == true {
            None
        } else {
            match PodFabric::for_namespace(host, &call.namespace).map(Network::new) {
                None => None,
                Some(Ok(network)) => Some(network),
                Some(Err(error)) => {
                    self.record(key, start_failure(&error));
                    return Ok(());
                }
            }
        };
        let mut command = crate::sandbox::pod_command(
            &root,
            &workdir,
            &mounts,
            &argv(&container),
            &call.pod,
            limit,
            network
                .as_ref()
                .map(|network| PodNetwork {
                    network,
                    resolv_conf: crate::netns::resolv_conf(&call.namespace),
                })
                .as_ref(),
        );
        for (name, value) in &call.env {
            command.env(name, value);
        }
        let exits = self.exits.clone();
        let order = self.order.clone();
        std::thread::spawn(move || {
            let outcome = super::process::run(command, &[], limit + Duration::from_secs(5));
            // The namespace goes with the pod's process.
            drop(network);
            let mut log = outcome.stdout;
            log.extend_from_slice(&outcome.stderr);
            let _ = std::fs::remove_dir_all(&scratch);
            record(
                &exits,
                &order,
                key,
                Exit {
                    code: outcome.code,
                    log: bounded(log),
                },
            );
        });
        Ok(())
    }

    fn finished(&self, pod_uid: &str, container: &str) -> Option<Exit> {
        self.exits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(pod_uid.to_string(), container.to_string()))
            .cloned()
    }

    fn logs(&self, call: &ExecCall) -> Option<String> {
        self.finished(&call.pod_uid, &call.container)
            .map(|exit| exit.log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_are_plain_names_only() {
        assert_eq!(
            plain_parts("/etc/containerd/certs.d"),
            Some(vec!["etc".into(), "containerd".into(), "certs.d".into()])
        );
        assert_eq!(plain_parts("/etc/../root"), None);
        assert_eq!(plain_parts("etc"), None);
    }

    #[test]
    fn the_default_command_is_the_images_shell_and_args_follow_the_command() {
        assert_eq!(argv(&serde_json::json!({})), ["sh"]);
        assert_eq!(
            argv(&serde_json::json!({"command": ["sh", "-c"], "args": ["echo hi"]})),
            ["sh", "-c", "echo hi"]
        );
    }

    #[test]
    fn a_long_log_keeps_its_end() {
        let log = bounded(vec![b'x'; LOG_LIMIT + 10]);
        assert_eq!(log.len(), LOG_LIMIT);
    }
}
