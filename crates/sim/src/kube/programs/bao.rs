//! OpenBao's server image (`quay.io/openbao/openbao`, the openbao chart's): when the pod starts,
//! a real `bao server` (not `-dev`: uninitialised and sealed, as the chart's pod starts) on a
//! free loopback port. Its storage is where a real pod's would be: the volume mounted at
//! `/openbao/data` (the chart's storage path) when that is a hostPath, or a claim bound to a
//! hostPath PersistentVolume, under a node folder backed by a host folder ([`node::NodeMounts`]:
//! phase 2's `stable-openbao` at `/var/local/shared/stable/openbao` is the repository's
//! `infra/data/shared/stable/openbao`), so wiping that folder wipes OpenBao as on a kind node;
//! otherwise the simulator's state folder, per pod name. Either way a restarted pod finds its
//! data and comes back sealed, and two pods never serve one storage folder at once (the old
//! server stops first, as a real pod is gone before its StatefulSet replaces it).
//!
//! `bao ...` in the pod runs the real `bao` against it (`BAO_ADDR` set, stdin passed), so
//! `operator init`, `operator unseal` and `status` answer in the real tool's words and exit
//! codes; the chart's readiness probe (`bao status -tls-skip-verify`, exit 2 while sealed) runs
//! the same way, so the pod is Ready once unsealed. Port 8200 forwards to the server.
//!
//! The chart's standalone configuration uses `storage "file"`, which the `bao` found here (2.4
//! and later) no longer has; the server runs single-node `raft` instead, which keeps data the
//! same way for what phase 2 does (init, unseal, KV). A pod that declares where its port is
//! already served (`sim.bprun.dev/forward-8200`, the embedded platform's dev server) gets no
//! server of its own: `bao` talks to that one. Without a `bao` binary nothing serves OpenBao:
//! the pod's event, and every `bao` command, say so.

use super::node::{self, NodeMounts};
use super::process;
use super::{ExecCall, ExecOutcome, Host, Program};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

pub const IMAGES: &[&str] = &["quay.io/openbao/openbao"];

/// Where the chart's configuration keeps OpenBao's data (`storage ... { path = "/openbao/data" }`),
/// the mount path of its `data` volume.
const DATA_MOUNT_PATH: &str = "/openbao/data";

struct Served {
    server: process::Server,
    /// The raft folder it serves.
    storage: PathBuf,
}

pub struct OpenBao {
    binary: Option<PathBuf>,
    state_dir: PathBuf,
    /// The node folders backed by host folders (a pod's hostPath data lives there).
    node: NodeMounts,
    /// pod uid -> its server. Locked across a start so an exec and the kubelet's pass never
    /// start two servers for one pod.
    servers: Mutex<HashMap<String, Served>>,
}

/// The server's configuration: the chart's listener without TLS, on loopback ports.
pub fn config(storage: &Path, node_id: &str, api: SocketAddr, cluster: SocketAddr) -> String {
    format!(
        "ui = false\n\
         storage \"raft\" {{\n  path = \"{}\"\n  node_id = \"{node_id}\"\n  performance_multiplier = 1\n}}\n\
         listener \"tcp\" {{\n  address = \"{api}\"\n  cluster_address = \"{cluster}\"\n  tls_disable = 1\n}}\n\
         api_addr = \"http://{api}\"\n\
         cluster_addr = \"http://{cluster}\"\n",
        storage.display()
    )
}

/// The address a pod's annotation says its port 8200 is served at (loopback only).
fn forwarded(call: &ExecCall) -> Option<SocketAddr> {
    let address: SocketAddr = call
        .annotations
        .get("sim.bprun.dev/forward-8200")?
        .parse()
        .ok()?;
    address.ip().is_loopback().then_some(address)
}

impl OpenBao {
    pub fn new(binary: Option<PathBuf>, state_dir: PathBuf, node: NodeMounts) -> OpenBao {
        OpenBao {
            binary,
            state_dir,
            node,
            servers: Mutex::new(HashMap::new()),
        }
    }

    fn no_binary() -> String {
        "bprun-sim found no bao binary (BPRUN_BAO_BIN, PATH, .tools/bin/bao), so nothing serves OpenBao in this pod: its bao commands and its readiness probe fail".to_string()
    }

    /// The pod's folder: storage, configuration, log and HOME, by namespace and pod name.
    fn pod_dir(&self, call: &ExecCall) -> PathBuf {
        self.state_dir.join(&call.namespace).join(&call.pod)
    }

    /// The raft folder of the pod: the host folder of its data volume's node path when a node
    /// mount holds it, else its own folder in the simulator's state.
    fn storage(&self, call: &ExecCall, host: Option<&Host>) -> PathBuf {
        host.and_then(|host| {
            let pod = host.object("pods", &call.namespace, &call.pod)?;
            let node_path = node::volume_node_path(&pod, &call.container, DATA_MOUNT_PATH, host)?;
            self.node.host_path(&node_path)
        })
        .unwrap_or_else(|| self.pod_dir(call).join("data"))
    }

    /// The server of the pod, started when it has none.
    fn server(&self, call: &ExecCall, host: Option<&Host>) -> Result<SocketAddr, String> {
        if let Some(address) = forwarded(call) {
            return Ok(address);
        }
        let binary = self.binary.clone().ok_or_else(Self::no_binary)?;
        // Read from the store before the servers' lock is taken (never the other way round).
        let storage = self.storage(call, host);
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(served) = servers.get_mut(&call.pod_uid) {
            if served.server.runs() {
                return Ok(served.server.address);
            }
            servers.remove(&call.pod_uid);
        }
        let folder = self.pod_dir(call);
        // The server of a pod that is gone may still run on this folder (the kubelet part stops
        // it on its next pass): stop it now, so one folder never has two servers.
        servers.retain(|uid, served| *uid == call.pod_uid || served.storage != storage);
        std::fs::create_dir_all(&folder)
            .map_err(|error| format!("cannot create {}: {error}", folder.display()))?;
        // A hostPath of type DirectoryOrCreate (the stable PVs'): the kubelet creates it.
        std::fs::create_dir_all(&storage)
            .map_err(|error| format!("cannot create {}: {error}", storage.display()))?;
        let api = process::free_port()?;
        let cluster = process::free_port()?;
        let config_file = folder.join("config.hcl");
        std::fs::write(&config_file, config(&storage, &call.pod, api, cluster))
            .map_err(|error| format!("cannot write {}: {error}", config_file.display()))?;
        let server = process::Server::start(process::ServerSpec {
            program: &binary,
            args: vec![
                "server".into(),
                format!("-config={}", config_file.display()).into(),
            ],
            env: vec![("HOME".into(), folder.clone().into())],
            log: &folder.join("server.log"),
            listens_on: api,
            stop_signal: "TERM",
            start_within: Duration::from_secs(15),
        })
        .map_err(|error| error.replacen("bao did not listen", "bao server did not listen", 1))?;
        servers.insert(call.pod_uid.clone(), Served { server, storage });
        Ok(api)
    }

    /// `bao ARGS` against the pod's server, as the real tool.
    fn bao(&self, call: &ExecCall, args: &[String], host: Option<&Host>) -> ExecOutcome {
        let fail = |message: String| ExecOutcome {
            code: 1,
            stdout: Vec::new(),
            stderr: format!("{message}\n").into_bytes(),
        };
        let address = match self.server(call, host) {
            Ok(address) => address,
            Err(message) => return fail(message),
        };
        let Some(binary) = self.binary.clone() else {
            return fail(Self::no_binary());
        };
        let home = self.pod_dir(call).join("home");
        if let Err(error) = std::fs::create_dir_all(&home) {
            return fail(format!("cannot create {}: {error}", home.display()));
        }
        let mut command = Command::new(binary);
        command.args(args).env_clear();
        for (name, value) in &call.env {
            if !matches!(name.as_str(), "BAO_ADDR" | "VAULT_ADDR" | "HOME") {
                command.env(name, value);
            }
        }
        command
            .env("BAO_ADDR", format!("http://{address}"))
            .env("HOME", home);
        process::run(command, &call.stdin, Duration::from_secs(60))
    }
}

impl Program for OpenBao {
    fn name(&self) -> &'static str {
        "openbao"
    }

    fn images(&self) -> &[&'static str] {
        IMAGES
    }

    fn exec(&self, call: &ExecCall, argv: &[String], host: &Host) -> Option<ExecOutcome> {
        match argv {
            [program, args @ ..] if program == "bao" || program == "vault" => {
                Some(self.bao(call, args, Some(host)))
            }
            _ => None,
        }
    }

    fn probes_readiness(&self) -> bool {
        true
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        self.server(call, Some(host)).map(|_| ())
    }

    fn stop(&self, pod_uid: &str) {
        let server = self
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pod_uid);
        drop(server);
    }

    fn forward(&self, pod_uid: &str, port: u16) -> Option<SocketAddr> {
        if port != 8200 {
            return None;
        }
        self.servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(pod_uid)
            .map(|served| served.server.address)
    }

    fn logs(&self, call: &ExecCall) -> Option<String> {
        if forwarded(call).is_some() {
            return None;
        }
        if self.binary.is_none() {
            return Some(format!("{}\n", Self::no_binary()));
        }
        std::fs::read_to_string(self.pod_dir(call).join("server.log")).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_listens_on_loopback_without_tls_and_keeps_raft_storage() {
        let api: SocketAddr = "127.0.0.1:18200"
            .parse()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
        let cluster: SocketAddr = "127.0.0.1:18201".parse().unwrap_or(api);
        let text = config(
            Path::new("/state/openbao/openbao-0/data"),
            "openbao-0",
            api,
            cluster,
        );
        assert!(text.contains("storage \"raft\" {\n  path = \"/state/openbao/openbao-0/data\"\n  node_id = \"openbao-0\""), "{text}");
        assert!(text.contains("address = \"127.0.0.1:18200\""), "{text}");
        assert!(text.contains("tls_disable = 1"), "{text}");
        assert!(
            text.contains("api_addr = \"http://127.0.0.1:18200\""),
            "{text}"
        );
    }

    #[test]
    fn without_a_binary_every_bao_command_says_why() {
        let openbao = OpenBao::new(
            None,
            std::env::temp_dir().join("bprun-no-bao"),
            NodeMounts::default(),
        );
        let call = ExecCall {
            namespace: "openbao".into(),
            pod: "openbao-0".into(),
            pod_uid: "u".into(),
            ..Default::default()
        };
        let outcome = openbao.bao(&call, &["status".to_string()], None);
        assert_eq!(outcome.code, 1);
        assert!(String::from_utf8_lossy(&outcome.stderr).contains("found no bao binary"));
        assert!(openbao.server(&call, None).is_err());
        // A pod whose port is served elsewhere needs no binary to know its address.
        let mut served = call.clone();
        served
            .annotations
            .insert("sim.bprun.dev/forward-8200".into(), "127.0.0.1:8300".into());
        assert_eq!(openbao.server(&served, None).map(|a| a.port()), Ok(8300));
    }
}
