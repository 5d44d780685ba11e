//! The simulated node's filesystem, as far as programs need it: the host folders kind mounts
//! into every node (phase 1's `extra_mounts`: the repository's `infra/data/shared/` at
//! `/var/local/shared`), and where a pod's volume lives on the host. A program whose data
//! volume is a hostPath (directly, or through a claim bound to a hostPath PersistentVolume such
//! as `stable-openbao`) under a mounted folder keeps its data in that host folder, so deleting
//! it there is what it is on a real node: the data is gone. A hostPath outside every mount has
//! no host folder here (the program keeps its per-pod folder).

use super::Host;
use serde_json::Value;
use std::path::{Component, Path, PathBuf};

/// Where kind's `extra_mounts` put the repository's `infra/data/shared/` on every node.
pub const SHARED_NODE_PATH: &str = "/var/local/shared";

/// Node folders backed by host folders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeMounts {
    /// (absolute node path, host folder)
    mounts: Vec<(PathBuf, PathBuf)>,
}

impl NodeMounts {
    /// Every node mounts `host` at `/var/local/shared`, as phase 1's kind cluster does.
    pub fn shared(host: PathBuf) -> NodeMounts {
        NodeMounts {
            mounts: vec![(PathBuf::from(SHARED_NODE_PATH), host)],
        }
    }

    /// The host folder of a node path, when a mount holds it. Only absolute paths of plain
    /// names: `..` never leaves a mount.
    pub fn host_path(&self, node_path: &str) -> Option<PathBuf> {
        let path = Path::new(node_path);
        let plain = path.is_absolute()
            && path
                .components()
                .all(|part| matches!(part, Component::RootDir | Component::Normal(_)));
        if !plain {
            return None;
        }
        self.mounts
            .iter()
            .filter_map(|(node, host)| path.strip_prefix(node).ok().map(|rest| host.join(rest)))
            .next()
    }
}

/// The node path of the volume container `container` of `pod` mounts at `mount_path`: the
/// volume's own `hostPath`, or the `hostPath` of the PersistentVolume its claim is bound to.
pub fn volume_node_path(
    pod: &Value,
    container: &str,
    mount_path: &str,
    host: &Host,
) -> Option<String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let volume_name =
        pod["spec"]["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == container)?["volumeMounts"]
            .as_array()?
            .iter()
            .find(|m| {
                m["mountPath"].as_str().map(|p| p.trim_end_matches('/')) == Some(mount_path)
            })?["name"]
            .as_str()?
            .to_string();
    let volume = pod["spec"]["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == volume_name.as_str())?;
    if let Some(path) = volume["hostPath"]["path"].as_str() {
        return Some(path.to_string());
    }
    let claim_name = volume["persistentVolumeClaim"]["claimName"].as_str()?;
    let claim = host.object("persistentvolumeclaims", namespace, claim_name)?;
    let volume_name = claim["spec"]["volumeName"].as_str()?;
    let bound = host.object("persistentvolumes", "", volume_name)?;
    bound["spec"]["hostPath"]["path"]
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::server::KubeSim;
    use serde_json::json;

    fn pod(volume: Value) -> Value {
        json!({
            "metadata": {"name": "openbao-0", "namespace": "openbao"},
            "spec": {
                "containers": [{"name": "openbao", "volumeMounts": [
                    {"name": "config", "mountPath": "/openbao/config"},
                    {"name": "data", "mountPath": "/openbao/data"}]}],
                "volumes": [{"name": "config", "configMap": {"name": "openbao-config"}}, volume]
            }
        })
    }

    #[test]
    fn a_data_volume_is_at_its_own_host_path_or_at_the_host_path_of_its_bound_volume() {
        let sim = KubeSim::with_programs(
            String::new(),
            crate::kube::builtin_exec(None),
            super::super::Programs::new(Vec::new()),
        );
        {
            let mut cluster = sim.cluster();
            cluster.commit(
                "persistentvolumeclaims",
                "openbao",
                "data-openbao-0",
                Some(
                    json!({"metadata": {"name": "data-openbao-0", "namespace": "openbao"},
                            "spec": {"volumeName": "stable-openbao"}}),
                ),
            );
            cluster.commit(
                "persistentvolumes",
                "",
                "stable-openbao",
                Some(json!({"metadata": {"name": "stable-openbao"},
                            "spec": {"hostPath": {"path": "/var/local/shared/stable/openbao"}}})),
            );
            cluster.commit(
                "persistentvolumeclaims",
                "openbao",
                "unbound",
                Some(json!({"metadata": {"name": "unbound", "namespace": "openbao"}, "spec": {}})),
            );
        }
        let host = Host {
            node: &sim,
            programs: &sim.programs,
        };
        let claimed =
            pod(json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-openbao-0"}}));
        assert_eq!(
            volume_node_path(&claimed, "openbao", "/openbao/data", &host).as_deref(),
            Some("/var/local/shared/stable/openbao")
        );
        let direct = pod(json!({"name": "data", "hostPath": {"path": "/var/local/shared/x"}}));
        assert_eq!(
            volume_node_path(&direct, "openbao", "/openbao/data", &host).as_deref(),
            Some("/var/local/shared/x")
        );
        let unbound =
            pod(json!({"name": "data", "persistentVolumeClaim": {"claimName": "unbound"}}));
        assert_eq!(
            volume_node_path(&unbound, "openbao", "/openbao/data", &host),
            None
        );
        let scratch = pod(json!({"name": "data", "emptyDir": {}}));
        assert_eq!(
            volume_node_path(&scratch, "openbao", "/openbao/data", &host),
            None
        );
        assert_eq!(
            volume_node_path(&claimed, "other", "/openbao/data", &host),
            None
        );
    }

    #[test]
    fn a_path_under_the_shared_mount_is_in_the_host_folder_and_nothing_else_is() {
        let mounts = NodeMounts::shared(PathBuf::from("/repo/infra/data/shared"));
        assert_eq!(
            mounts.host_path("/var/local/shared/stable/openbao"),
            Some(PathBuf::from("/repo/infra/data/shared/stable/openbao"))
        );
        assert_eq!(
            mounts.host_path("/var/local/shared"),
            Some(PathBuf::from("/repo/infra/data/shared"))
        );
        assert_eq!(mounts.host_path("/var/local/sharedother/x"), None);
        assert_eq!(mounts.host_path("/opt/local-path-provisioner/pvc-1"), None);
        assert_eq!(mounts.host_path("/var/local/shared/../../etc"), None);
        assert_eq!(mounts.host_path("var/local/shared/x"), None);
        assert_eq!(NodeMounts::default().host_path("/var/local/shared/x"), None);
    }
}
