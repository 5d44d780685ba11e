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
//!
//! A pod whose own configuration (a `.hcl` file of its ConfigMap volumes) declares
//! `storage "postgresql"` (GitLab's bundled OpenBao) runs on that database instead: its
//! connection URL's host is resolved through the Service ([`super::service`]) to the real
//! PostgreSQL behind it, the password comes from the container's `PGPASSWORD`, and a server
//! that cannot connect exits with its own words (`failed SASL auth: FATAL: password
//! authentication failed for user "openbao"`, `connect: connection refused`), said with the
//! Service's name and address, so the container crash-loops as the real one would.

use super::PodEndpoints;
use super::catalogue::{self, Image};
use super::node::{self, NodeMounts};
use super::process;
use super::service::Backend;
use super::{ExecCall, ExecOutcome, Host, Program, volumes};
use crate::network::CLUSTER_DNS;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where the chart's configuration keeps OpenBao's data (`storage ... { path = "/openbao/data" }`),
/// the mount path of its `data` volume.
const DATA_MOUNT_PATH: &str = "/openbao/data";

pub struct OpenBao {
    binary: Option<PathBuf>,
    state_dir: PathBuf,
    /// The node folders backed by host folders (a pod's hostPath data lives there).
    node: NodeMounts,
    /// pod uid -> its server. Locked across a start so an exec and the kubelet's pass never
    /// start two servers for one pod.
    servers: process::PodServers,
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

/// The connection URL of a `storage "postgresql"` stanza of a configuration (GitLab's bundled
/// OpenBao), when it declares one.
pub fn postgresql_url(config: &str) -> Option<String> {
    let start = config.find("storage \"postgresql\"")?;
    let stanza = &config[start..];
    let stanza = &stanza[..stanza.find('}').unwrap_or(stanza.len())];
    let line = stanza
        .lines()
        .find(|line| line.trim_start().starts_with("connection_url"))?;
    let value = line.split_once('=')?.1.trim();
    Some(value.trim_matches('"').to_string())
}

/// The parts of a `postgres://user[:password]@host[:port]/database?...` URL a connection
/// error names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    pub user: String,
    pub host: String,
    pub port: u16,
    pub database: String,
}

pub fn parse_url(url: &str) -> Option<PostgresUrl> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let authority = authority.split('?').next()?;
    let (credentials, host_port) = authority.rsplit_once('@').unwrap_or(("", authority));
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().ok()?),
        None => (host_port, 5432),
    };
    Some(PostgresUrl {
        user: credentials.split(':').next().unwrap_or("").to_string(),
        host: host.to_string(),
        port,
        database: path.split('?').next().unwrap_or("").to_string(),
    })
}

/// The configuration of a server on PostgreSQL storage: the pod's connection URL with its
/// host and port replaced by where the simulator serves them.
pub fn postgresql_config(url: &str, api: SocketAddr, cluster: SocketAddr) -> String {
    format!(
        "ui = false\n\
         storage \"postgresql\" {{\n  connection_url = \"{url}\"\n  ha_enabled = \"true\"\n}}\n\
         listener \"tcp\" {{\n  address = \"{api}\"\n  cluster_address = \"{cluster}\"\n  tls_disable = 1\n}}\n\
         api_addr = \"http://{api}\"\n\
         cluster_addr = \"http://{cluster}\"\n"
    )
}

/// Where a pod's PostgreSQL storage really is, and how the server's words name it in the pod.
struct PostgresqlStorage {
    /// The URL the server connects to (loopback).
    url: String,
    /// (what the server says, what the pod would say).
    said_in_pod: Vec<(String, String)>,
}

/// What the server's last error says, as a pod would read it.
fn as_in_pod(log: &str, said_in_pod: &[(String, String)]) -> Option<String> {
    let line = log.lines().rev().find(|line| line.starts_with("error "))?;
    Some(
        said_in_pod
            .iter()
            .fold(line.to_string(), |text, (said, meant)| {
                text.replace(said, meant)
            }),
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
            servers: process::PodServers::default(),
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

    /// The PostgreSQL storage the pod's own configuration declares (a `.hcl` file of its
    /// ConfigMap volumes with `storage "postgresql"`), resolved through its Service. A name
    /// no Service has fails as the cluster's DNS answers it.
    fn postgresql_storage(
        &self,
        call: &ExecCall,
        host: &Host,
    ) -> Result<Option<PostgresqlStorage>, String> {
        let Some(pod) = host.object("pods", &call.namespace, &call.pod) else {
            return Ok(None);
        };
        let lookup = |store_key: &str, name: &str| host.object(store_key, &call.namespace, name);
        let url = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|volume| volume["name"].as_str())
            .flat_map(|volume| volumes::files(&pod, volume, &lookup).into_values())
            .find_map(|text| postgresql_url(&text));
        let Some(url) = url else {
            return Ok(None);
        };
        let Some(PostgresUrl {
            user,
            host: name,
            port,
            database,
        }) = parse_url(&url)
        else {
            return Err(format!(
                "error parsing the postgresql connection_url {url:?}"
            ));
        };
        let (ip, address) = match host.resolve(&name, port, &call.namespace) {
            Backend::Unknown => {
                return Err(format!(
                    "error initializing storage of type postgresql: failed to connect to postgres: unable to verify connection: failed to connect to `user={user} database={database}`: hostname resolving error: lookup {name} on {CLUSTER_DNS}: no such host"
                ));
            }
            Backend::NoDns => {
                return Err(format!(
                    "error initializing storage of type postgresql: failed to connect to postgres: unable to verify connection: failed to connect to `user={user} database={database}`: hostname resolving error: lookup {name} on {CLUSTER_DNS}: read: connection refused"
                ));
            }
            // Nothing listens there: the server's own connection refusal.
            Backend::NotServing { ip } => (ip, process::free_port()?),
            Backend::Serving { ip, address } => (ip, address),
        };
        let served_at = format!("{}:{}", address.ip(), address.port());
        Ok(Some(PostgresqlStorage {
            url: url.replacen(&format!("{name}:{port}"), &served_at, 1),
            said_in_pod: vec![
                (
                    format!("{served_at} ({})", address.ip()),
                    format!("{name}:{port} ({ip})"),
                ),
                (
                    format!("dial tcp {served_at}"),
                    format!("dial tcp {ip}:{port}"),
                ),
            ],
        }))
    }

    /// The server of the pod, started when it has none.
    fn server(&self, call: &ExecCall, host: Option<&Host>) -> Result<SocketAddr, String> {
        if let Some(address) = forwarded(call) {
            return Ok(address);
        }
        let binary = self.binary.clone().ok_or_else(Self::no_binary)?;
        if let Some(address) = self.servers.running(&call.pod_uid) {
            return Ok(address);
        }
        // Read from the store before the servers' lock is taken (never the other way round).
        let storage = self.storage(call, host);
        let postgresql = match host {
            Some(host) => self.postgresql_storage(call, host)?,
            None => None,
        };
        let mut servers = self.servers.lock();
        if let Some(address) = servers.running(&call.pod_uid) {
            return Ok(address);
        }
        let folder = self.pod_dir(call);
        servers.free(&call.pod_uid, &storage);
        std::fs::create_dir_all(&folder)
            .map_err(|error| format!("cannot create {}: {error}", folder.display()))?;
        // A hostPath of type DirectoryOrCreate (the stable PVs'): the kubelet creates it.
        std::fs::create_dir_all(&storage)
            .map_err(|error| format!("cannot create {}: {error}", storage.display()))?;
        let api = process::free_port()?;
        let cluster = process::free_port()?;
        let config_file = folder.join("config.hcl");
        let text = match &postgresql {
            Some(postgresql) => postgresql_config(&postgresql.url, api, cluster),
            None => config(&storage, &call.pod, api, cluster),
        };
        std::fs::write(&config_file, text)
            .map_err(|error| format!("cannot write {}: {error}", config_file.display()))?;
        // The PostgreSQL client's environment (the password, from the pod's Secret).
        let mut env: Vec<(String, std::ffi::OsString)> =
            vec![("HOME".into(), folder.clone().into())];
        env.extend(
            call.env
                .iter()
                .filter(|(name, _)| name.starts_with("PG") || name.starts_with("BAO_PG_"))
                .map(|(name, value)| (name.clone(), value.into())),
        );
        let log_file = folder.join("server.log");
        let server = process::Server::start(process::ServerSpec {
            program: &binary,
            args: vec![
                "server".into(),
                format!("-config={}", config_file.display()).into(),
            ],
            env,
            log: &log_file,
            listens_on: api,
            stop_signal: "TERM",
            start_within: Duration::from_secs(15),
        })
        .map_err(|error| {
            let log = std::fs::read_to_string(&log_file).unwrap_or_default();
            postgresql
                .as_ref()
                .and_then(|postgresql| as_in_pod(&log, &postgresql.said_in_pod))
                .unwrap_or_else(|| {
                    error.replacen("bao did not listen", "bao server did not listen", 1)
                })
        })?;
        servers.insert(
            &call.pod_uid,
            process::PodServer {
                server,
                data: storage,
                port: 8200,
            },
        );
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
    fn image(&self) -> &'static Image {
        &catalogue::OPENBAO
    }

    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        Some(&self.servers)
    }

    fn exec(&self, call: &ExecCall, argv: &[String], host: &Host) -> Option<ExecOutcome> {
        match argv {
            [program, args @ ..] if program == "bao" || program == "vault" => {
                Some(self.bao(call, args, Some(host)))
            }
            _ => None,
        }
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        self.server(call, Some(host)).map(|_| ())
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
    fn a_postgresql_stanza_names_its_database_and_is_served_where_the_simulator_serves_it() {
        let pod_config = "ui = false\nstorage \"postgresql\" {\n  connection_url = \"postgres://openbao@postgresql-cnpg-rw.postgresql.svc:5432/openbao?sslmode=disable\"\n  ha_enabled = \"true\"\n}\n";
        let url = postgresql_url(pod_config);
        assert_eq!(
            url.as_deref(),
            Some(
                "postgres://openbao@postgresql-cnpg-rw.postgresql.svc:5432/openbao?sslmode=disable"
            )
        );
        assert_eq!(
            postgresql_url("storage \"raft\" {\n  path = \"/x\"\n}\n"),
            None
        );
        assert_eq!(
            parse_url(url.as_deref().unwrap_or("")),
            Some(PostgresUrl {
                user: "openbao".into(),
                host: "postgresql-cnpg-rw.postgresql.svc".into(),
                port: 5432,
                database: "openbao".into(),
            })
        );
        assert_eq!(
            parse_url("postgresql://u:p@db/x").map(|url| (
                url.user,
                url.host,
                url.port,
                url.database
            )),
            Some(("u".to_string(), "db".to_string(), 5432, "x".to_string()))
        );
        assert_eq!(parse_url("mysql://db"), None);
        let api: SocketAddr = "127.0.0.1:18200"
            .parse()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
        let text = postgresql_config(
            "postgres://openbao@127.0.0.1:40001/openbao?sslmode=disable",
            api,
            api,
        );
        assert!(text.starts_with("ui = false\nstorage \"postgresql\" {\n  connection_url = \"postgres://openbao@127.0.0.1:40001/openbao?sslmode=disable\"\n  ha_enabled = \"true\"\n}\nlistener \"tcp\" {\n  address = \"127.0.0.1:18200\""), "{text}");
    }

    #[test]
    fn the_servers_last_error_is_said_with_the_services_name_and_address() {
        let log = "2026-12-02T01:30:49.842Z [INFO]  proxy environment: http_proxy=\"\"\n\
                   error initializing storage of type postgresql: failed to connect to postgres: unable to verify connection: failed to connect to `user=openbao database=openbao`: 127.0.0.1:45432 (127.0.0.1): failed SASL auth: FATAL: password authentication failed for user \"openbao\" (SQLSTATE 28P01)\n";
        let said = vec![(
            "127.0.0.1:45432 (127.0.0.1)".to_string(),
            "postgresql-cnpg-rw.postgresql.svc:5432 (10.96.0.21)".to_string(),
        )];
        assert_eq!(
            as_in_pod(log, &said).as_deref(),
            Some(
                "error initializing storage of type postgresql: failed to connect to postgres: unable to verify connection: failed to connect to `user=openbao database=openbao`: postgresql-cnpg-rw.postgresql.svc:5432 (10.96.0.21): failed SASL auth: FATAL: password authentication failed for user \"openbao\" (SQLSTATE 28P01)"
            )
        );
        assert_eq!(as_in_pod("[INFO] fine\n", &said), None);
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
