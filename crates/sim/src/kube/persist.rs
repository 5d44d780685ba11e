//! The cluster kept on disk, as etcd keeps a kind cluster's across a restart: every object with
//! its uid and resourceVersion, the next Service IP, and the tokens the TokenRequest API issued
//! (kind keeps its signing key, so they stay valid). One JSON file, mode 0600 (Secrets are in
//! it), written whole and renamed into place: after writes, at most once a second, and when the
//! platform stops. Not kept: watches (clients list again, as after an API server restart) and
//! what ran in the containers: a restored pod's containers start again, as a kind node's do
//! after `docker restart` (so OpenBao comes back sealed).

use super::KubeSim;
use super::server::IssuedToken;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

/// What the file says it is: a file of another kind or version is refused, never replaced.
const FORMAT: &str = "bprun-kube-store/1";

#[derive(Debug, Serialize, Deserialize)]
struct Snapshot {
    format: String,
    /// How the platform started (`bare` or `phase2`): a restart must ask for the same.
    platform: String,
    resource_version: u64,
    next_ip: u32,
    objects: BTreeMap<String, Vec<Value>>,
    tokens: Vec<SavedToken>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedToken {
    token: String,
    namespace: String,
    name: String,
    uid: String,
    /// Seconds since the epoch.
    expires: u64,
}

/// Writes the cluster to `file`; returns the resourceVersion it holds.
pub fn save(sim: &KubeSim, platform: &str, file: &Path) -> Result<u64, String> {
    let (resource_version, next_ip, objects) = sim.cluster().export();
    let tokens = sim
        .service_account_tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(token, issued)| SavedToken {
            token: token.clone(),
            namespace: issued.namespace.clone(),
            name: issued.name.clone(),
            uid: issued.uid.clone(),
            expires: issued
                .expires
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        })
        .collect();
    let snapshot = Snapshot {
        format: FORMAT.to_string(),
        platform: platform.to_string(),
        resource_version,
        next_ip,
        objects,
        tokens,
    };
    let text = serde_json::to_vec(&snapshot).map_err(|error| error.to_string())?;
    bprun_clients::fs::write_private(file, &text)
        .map_err(|error| format!("cannot write {}: {error}", file.display()))?;
    Ok(resource_version)
}

/// Loads the cluster `file` holds into `sim`: `Ok(false)` when there is none yet (a new
/// platform). A file that is not one, of another format, or of a platform started otherwise
/// is an error that names it: the caller stops rather than start a fresh cluster over it.
pub fn restore(sim: &KubeSim, platform: &str, file: &Path) -> Result<bool, String> {
    let text = match std::fs::read(file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(format!("cannot read {}: {error}", file.display())),
    };
    let snapshot: Snapshot = serde_json::from_slice(&text).map_err(|error| {
        format!(
            "{} is not a kept cluster ({error}); move the state folder away to start a new platform",
            file.display()
        )
    })?;
    if snapshot.format != FORMAT {
        return Err(format!(
            "{} holds a cluster of format {:?}, not {FORMAT:?}; move the state folder away to start a new platform",
            file.display(),
            snapshot.format
        ));
    }
    if snapshot.platform != platform {
        return Err(format!(
            "{} holds a platform that started {}, not {platform}; start it as it was (--platform {}), or use another state folder",
            file.display(),
            snapshot.platform,
            snapshot.platform
        ));
    }
    {
        let mut cluster = sim.cluster();
        cluster.import(
            snapshot.resource_version,
            snapshot.next_ip,
            snapshot.objects,
        );
        cluster.restart_pods(&super::runtime::now_rfc3339());
    }
    let mut tokens = sim
        .service_account_tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    for saved in snapshot.tokens {
        tokens.insert(
            saved.token,
            IssuedToken {
                namespace: saved.namespace,
                name: saved.name,
                uid: saved.uid,
                expires: UNIX_EPOCH + Duration::from_secs(saved.expires),
            },
        );
    }
    Ok(true)
}

/// The resourceVersion the store is at (to tell whether it changed since the last save).
pub fn version(sim: &KubeSim) -> u64 {
    sim.cluster().resource_version()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::{KubeSim, builtin_exec};

    #[test]
    fn a_kept_cluster_comes_back_with_its_objects_and_restarts_its_pods() {
        let folder = tempfile::tempdir().expect("state");
        let file = folder.path().join("kube-store.json");
        let first = KubeSim::new("t".into(), builtin_exec(None));
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        });
        first.cluster().commit("pods", "default", "web", Some(pod));
        let version = save(&first, "bare", &file).expect("saved");
        assert_eq!(version, first.cluster().resource_version());

        let second = KubeSim::new("t".into(), builtin_exec(None));
        assert_eq!(restore(&second, "bare", &file), Ok(true));
        let cluster = second.cluster();
        let restored = cluster.lookup("pods", "default", "web").expect("the pod");
        assert_eq!(restored["metadata"]["uid"], "u-1");
        // Its node restarted: the pod starts again, unready until its containers run.
        assert_eq!(restored["status"]["phase"], "Pending");
        assert!(cluster.resource_version() > version);
        assert!(cluster.lookup("namespaces", "", "kube-system").is_some());
        drop(cluster);

        let third = KubeSim::new("t".into(), builtin_exec(None));
        let refused = restore(&third, "phase2", &file).expect_err("another start");
        assert!(refused.ends_with("holds a platform that started bare, not phase2; start it as it was (--platform bare), or use another state folder"), "{refused}");
        assert_eq!(
            restore(&third, "bare", &folder.path().join("none.json")),
            Ok(false)
        );
    }
}
