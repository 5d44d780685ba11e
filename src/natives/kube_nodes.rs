//! Commands on nodes: what only a node's own files hold (its `/etc/hosts`, containerd's
//! `certs.d`) is read and written by a short-lived privileged pod per node, as
//! `kubectl debug node/NAME` does, so a step can verify the files themselves rather than a
//! marker that says they were written once.

use rhai::Map;
use rhai::plugin::*;

use super::convert::{Secrets, to_json};
use super::kube::{kube_error, remote, timeout};
use super::options::{RhaiResultOf, option_bool, option_str, reject_undeclared};
use crate::decl::Resource;
use crate::engine::native_error;
use crate::error::NativeError;
use bprun_clients::kube::nodes::NodeCommand;
use serde_json::Value;

/// The `volumes` option: each `#{mount, volume}` as a `(volumeMount, volume)` pair.
fn extra_volumes(options: &Map, native: &str) -> RhaiResultOf<Vec<(Value, Value)>> {
    let Some(list) = options.get("volumes") else {
        return Ok(Vec::new());
    };
    let Some(list) = list.read_lock::<rhai::Array>().map(|a| a.clone()) else {
        return Err(native_error(
            NativeError::new(format!("{native}: option `volumes` must be an array"))
                .with_hint("give `volumes: [#{mount: #{...}, volume: #{...}}]`"),
        ));
    };
    let mut pairs = Vec::with_capacity(list.len());
    for entry in list {
        let map = entry
            .read_lock::<Map>()
            .map(|m| m.clone())
            .unwrap_or_default();
        let (Some(mount), Some(volume)) = (map.get("mount"), map.get("volume")) else {
            return Err(native_error(
                NativeError::new(format!(
                    "{native}: each of `volumes` is a map with `mount` and `volume`"
                ))
                .with_hint(
                    "as in a pod: `mount` is a volumeMount, `volume` a volume of the same name",
                ),
            ));
        };
        let json = |value| to_json(value, Secrets::Reveal).map_err(native_error);
        pairs.push((json(mount)?, json(volume)?));
    }
    Ok(pairs)
}

#[export_module]
pub mod kube_node_functions {
    use super::*;

    /// Runs the `sh -c` script `command` on each node of `nodes` (names) at once, each in a
    /// short-lived privileged pod `bprun-<purpose>-<node>` in kube-system that mounts the node's
    /// `host_path` at `/host`, and returns, per node, `#{ok, code, log}` once every pod ended
    /// (the pods are then deleted). Options: `image` (required), `read_only` (true: the folder
    /// is mounted read-only and the call is a read, so it runs in check mode too and changes
    /// nothing; otherwise each node counts as a change, and check mode refuses the call),
    /// `volumes` (`[#{mount, volume}]`, e.g. a ConfigMap to copy from), `timeout` (seconds for
    /// all the pods, default 120), `check` (true throws on a non-zero exit, with the log's last line).
    /// A pod whose script failed is kept for `kubectl logs`; the next call replaces it.
    ///
    /// ```rhai
    /// step("Hosts", || {
    ///     let nodes = kube_list("Node", "").map(|n| n.metadata.name);
    ///     let seen = kube_on_nodes(nodes, "hosts-look", "/etc", "cat /host/hosts",
    ///                              #{image: "docker.io/library/busybox:1.37", read_only: true});
    ///     for node in nodes { info(`${node}: ${seen[node].log.len()} bytes`); }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_on_nodes(
        context: NativeCallContext,
        nodes: rhai::Array,
        purpose: &str,
        host_path: &str,
        command: &str,
        options: Map,
    ) -> RhaiResultOf<Map> {
        const NATIVE: &str = "kube_on_nodes";
        let (session, kube) = remote(&context, NATIVE)?;
        reject_undeclared(&options, NATIVE)?;
        let read_only = option_bool(&options, "read_only", NATIVE)?.unwrap_or(false);
        if !read_only {
            session
                .state
                .refuse_in_check(NATIVE, "a command on a node may change its files")
                .map_err(native_error)?;
        }
        let image = option_str(&options, "image", NATIVE)?.ok_or_else(|| {
            native_error(
                NativeError::new(format!("{NATIVE}: option `image` is missing")).with_hint(
                    "name the node pods' image, pinned (`docker.io/library/busybox:1.37`)",
                ),
            )
        })?;
        let names: Vec<String> = nodes.iter().map(|node| node.to_string()).collect();
        let volumes = extra_volumes(&options, NATIVE)?;
        let spec = NodeCommand {
            purpose,
            image: &image,
            host_path,
            read_only,
            command,
            volumes: &volumes,
            timeout: timeout(&options, NATIVE, 120)?,
        };
        let cancelled = || session.state.is_cancelled();
        let runs = kube
            .run_on_nodes(&names, &spec, &cancelled)
            .map_err(kube_error)?;
        let check = option_bool(&options, "check", NATIVE)?.unwrap_or(false);
        if !read_only {
            // Every node's script ran, a failed one too: each may have changed its files.
            for run in &runs {
                session.state.record_change(
                    "exec",
                    Resource::new(
                        "node",
                        run.node.clone(),
                        format!("{purpose} on node {}", run.node),
                    ),
                );
            }
        }
        let mut results = Map::new();
        for run in runs {
            if check && run.code != 0 {
                let last = run
                    .log
                    .trim_end()
                    .lines()
                    .last()
                    .unwrap_or("no output")
                    .to_string();
                return Err(native_error(
                    NativeError::new(format!(
                        "{NATIVE}: node {}: the {purpose} pod's script failed (exit {}): {last}",
                        run.node, run.code
                    ))
                    .with_hint(format!(
                        "its pod stays for its log: kubectl -n {} logs {}",
                        bprun_clients::kube::nodes::NODE_POD_NAMESPACE,
                        run.pod
                    )),
                ));
            }
            let mut result = Map::new();
            result.insert("ok".into(), (run.code == 0).into());
            result.insert("code".into(), run.code.into());
            result.insert("log".into(), run.log.into());
            results.insert(run.node.into(), result.into());
        }
        Ok(results)
    }
}
