//! Bitnami's Redis image (`docker.io/bitnamilegacy/redis`, the redis chart's with phase 2's
//! override; `docker.io/bitnami/redis` cannot be pulled any more, see `kubelet::GONE_IMAGES`):
//! when the pod starts, a real `redis-server` (Redis 7, found as [`crate::tools::redis_server`]
//! finds it) on a free loopback port, configured as the chart's `start-master.sh` starts it: the
//! password of the container's `REDIS_PASSWORD` (the chart resolves it from its Secret, or
//! `auth.existingSecret`; `REDIS_PASSWORD_FILE` when `auth.usePasswordFiles`) as `requirepass`
//! and `masterauth`, `protected-mode no` without one, then the chart's `redis.conf` and
//! `master.conf` (its ConfigMap: `appendonly yes`, `save ""`, FLUSHDB and FLUSHALL renamed away)
//! with the directives that name the container's own paths or listeners left out. Everything
//! goes into a configuration file of mode 0600 in the pod's folder, never on a command line.
//!
//! Its data folder (`dir`, the chart's `master.persistence.path`, `/data`) is where a real pod's
//! would be: the volume mounted there when it is a hostPath, or a claim bound to a hostPath
//! PersistentVolume, under a node folder backed by a host folder ([`node::NodeMounts`]: phase
//! 2's `stable-redis`); otherwise the simulator's state folder, per namespace and pod name. So a
//! pod deleted and re-created by its StatefulSet finds the keys its predecessor wrote, and two
//! pods never serve one folder at once (the old server stops first).
//!
//! `redis-cli ARGS` in the pod runs the real `redis-cli` against it, with the call's environment
//! (`REDISCLI_AUTH` passes through) and stdin: `-h localhost|127.0.0.1` and `-p <container port>`
//! (or none) are the pod's own server, another host is a Service name resolved as the pod's DNS
//! would ([`Host::resolve`]); the answers, their stream and exit code are the real tool's. The
//! chart's probe scripts (`/health/ping_readiness_local.sh`, `ping_liveness_local.sh`) run as the
//! chart writes them: `redis-cli -h localhost -p $REDIS_PORT ping` with `REDISCLI_AUTH` set from
//! the password, bounded by the script's timeout (`Timed out`), and the answer echoed unless it is
//! `PONG` (the liveness script also accepts `LOADING` and `MASTERDOWN`), so the pod is Ready once
//! its server answers. Port 6379 forwards to the server (port-forwards, Services).
//!
//! Replicas (`architecture: replication`) run a server each, without replication. Without a
//! `redis-server` binary the container's start fails saying so (the pod crash-loops, never
//! Ready); without `redis-cli`, its commands say so.

use super::PodEndpoints;
use super::catalogue::{self, Image};
use super::env::lookup;
use super::node::{self, NodeMounts};
use super::service::Backend;
use super::{ExecCall, ExecOutcome, Host, Program, process, volumes};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The chart's `master.persistence.path`, where its `redis-data` volume is mounted, when its
/// `master.conf` names no `dir`.
const DATA_MOUNT_PATH: &str = "/data";

/// The container's Redis port when `REDIS_PORT` does not say (the chart's
/// `master.containerPorts.redis`).
const DEFAULT_PORT: u16 = 6379;

/// How long the probe scripts wait when their command line gives no timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Directives of the chart's files that name the container's own paths and listeners, which
/// the simulator sets itself (or which have no meaning outside the image).
const OWN_DIRECTIVES: &[&str] = &[
    "bind",
    "port",
    "dir",
    "include",
    "loadmodule",
    "logfile",
    "pidfile",
    "unixsocket",
    "unixsocketperm",
    "daemonize",
    "supervised",
    "aclfile",
];

/// redis-cli 7's options that take a value (the word after them is not the command).
const VALUE_OPTIONS: &[&str] = &[
    "-h",
    "-p",
    "-s",
    "-a",
    "-u",
    "-r",
    "-i",
    "-n",
    "-d",
    "-D",
    "-t",
    "--user",
    "--pass",
    "--rdb",
    "--functions-rdb",
    "--pipe-timeout",
    "--memkeys-samples",
    "--count",
    "--pattern",
    "--quoted-pattern",
    "--eval",
    "--cacert",
    "--cacertdir",
    "--cert",
    "--key",
    "--tls-ciphers",
    "--tls-ciphersuites",
    "--sni",
    "--intrinsic-latency",
    "--lru-test",
];

pub struct Redis {
    server_binary: Option<PathBuf>,
    cli_binary: Option<PathBuf>,
    state_dir: PathBuf,
    /// The node folders backed by host folders (a pod's hostPath data lives there).
    node: NodeMounts,
    servers: process::PodServers,
}

/// A value as Redis's configuration reads it: double-quoted, with `\\`, `\"` and anything not
/// printable ASCII escaped (`\n`, `\xHH`).
pub fn quoted(value: &str) -> String {
    let mut text = String::from("\"");
    for byte in value.bytes() {
        match byte {
            b'\\' => text.push_str("\\\\"),
            b'"' => text.push_str("\\\""),
            b'\n' => text.push_str("\\n"),
            b'\r' => text.push_str("\\r"),
            b'\t' => text.push_str("\\t"),
            0x20..=0x7e => text.push(byte as char),
            other => text.push_str(&format!("\\x{other:02x}")),
        }
    }
    text.push('"');
    text
}

/// The first word of a configuration line (its directive), lowercased.
fn directive(line: &str) -> Option<String> {
    let word = line.split_whitespace().next()?;
    (!word.starts_with('#')).then(|| word.to_ascii_lowercase())
}

/// The folder a chart file's `dir` line names (`dir /data`), unquoted.
pub fn dir_of(text: &str) -> Option<String> {
    text.lines()
        .filter(|line| directive(line).as_deref() == Some("dir"))
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(|value| value.trim_matches('"').trim_matches('\'').to_string())
        .next_back()
}

/// The server's configuration: what the chart's start script passes (`requirepass` and
/// `masterauth`, or `protected-mode no`), then the chart's files (`(name, text)`, in the order
/// it includes them) without [`OWN_DIRECTIVES`] (and `tls-*`), then the loopback listener and
/// the data folder.
pub fn config(
    chart_files: &[(&str, &str)],
    password: Option<&str>,
    port: u16,
    data: &Path,
) -> String {
    let mut text = String::from(
        "# Written by bprun-sim: the options the chart's start-master.sh passes, its included files,\n\
         # then the pod's listener and data folder on this machine.\n",
    );
    match password {
        Some(password) => {
            text.push_str(&format!("requirepass {}\n", quoted(password)));
            text.push_str(&format!("masterauth {}\n", quoted(password)));
        }
        None => text.push_str("protected-mode no\n"),
    }
    for (name, content) in chart_files {
        text.push_str(&format!("# {name}\n"));
        for line in content.lines() {
            let own = directive(line).is_some_and(|word| {
                OWN_DIRECTIVES.contains(&word.as_str()) || word.starts_with("tls-")
            });
            if own {
                text.push_str(&format!("# (set below by bprun-sim) {line}\n"));
            } else {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text.push_str(&format!(
        "# The pod's listener and data folder\nbind 127.0.0.1\nport {port}\ndir {}\ndaemonize no\n",
        quoted(&data.display().to_string())
    ));
    text
}

/// Where a `redis-cli` command line connects: the host and port it names (`-h`, `-p`, or a
/// `-u` URI), resolved by `target` (host, port) to the real address, and its arguments with
/// that address in their place (`-h IP -p PORT` first, a `-u` URI rewritten, the rest as
/// given). `Err` is what redis-cli prints when it cannot connect there.
pub fn cli_args(
    args: &[String],
    target: &dyn Fn(&str, u16) -> Result<SocketAddr, String>,
) -> Result<Vec<String>, String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = DEFAULT_PORT;
    let mut uri: Option<(usize, String, String)> = None;
    let mut kept = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = args[index].as_str();
        if !arg.starts_with('-') || arg == "-" {
            kept.extend(args[index..].iter().cloned());
            break;
        }
        let value = VALUE_OPTIONS
            .contains(&arg)
            .then(|| args.get(index + 1).cloned())
            .flatten();
        match (arg, value) {
            ("-h", Some(value)) => host = value,
            ("-p", Some(value)) => {
                // redis-cli reads the port with atoi: what is not a number is port 0.
                port = value.parse().unwrap_or(0);
            }
            ("-u", Some(value)) => {
                let (scheme, rest) = value.split_once("://").unwrap_or(("redis", &value));
                let (userinfo, rest) = match rest.rsplit_once('@') {
                    Some((userinfo, rest)) => (format!("{userinfo}@"), rest),
                    None => (String::new(), rest),
                };
                let (address, path) = match rest.split_once('/') {
                    Some((address, path)) => (address, format!("/{path}")),
                    None => (rest, String::new()),
                };
                match address.rsplit_once(':') {
                    Some((name, number)) => {
                        host = name.to_string();
                        port = number.parse().unwrap_or(0);
                    }
                    None => {
                        host = address.to_string();
                        port = DEFAULT_PORT;
                    }
                }
                uri = Some((kept.len(), format!("{scheme}://{userinfo}"), path));
                kept.push(String::new());
            }
            (_, Some(value)) => {
                kept.push(arg.to_string());
                kept.push(value);
            }
            (_, None) => kept.push(arg.to_string()),
        }
        index += if VALUE_OPTIONS.contains(&arg) { 2 } else { 1 };
    }
    let address = target(&host, port)?;
    if let Some((at, prefix, path)) = uri {
        kept[at] = format!("{prefix}{address}{path}");
        kept.insert(at, "-u".into());
    }
    let mut words = vec![
        "-h".to_string(),
        address.ip().to_string(),
        "-p".into(),
        address.port().to_string(),
    ];
    words.extend(kept);
    Ok(words)
}

/// Whether `host` names the pod itself (its loopback, or its own name).
fn is_own_host(host: &str, pod: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1" | "0.0.0.0") || host == pod
}

/// What the chart's probe script (`ping_readiness_local.sh` or, `liveness`, its liveness twin)
/// makes of redis-cli's outcome: exit 124 is `Timed out`; an answer other than `PONG` (bash's
/// `$(...)`: trailing newlines dropped) is echoed and fails.
pub fn probe_verdict(outcome: ExecOutcome, liveness: bool) -> ExecOutcome {
    if outcome.code == 124 {
        return ExecOutcome {
            code: 1,
            stdout: b"Timed out\n".to_vec(),
            stderr: Vec::new(),
        };
    }
    let response = String::from_utf8_lossy(&outcome.stdout)
        .trim_end_matches('\n')
        .to_string();
    let first_word = response.split_whitespace().next().unwrap_or("");
    let passes = response == "PONG" || (liveness && matches!(first_word, "LOADING" | "MASTERDOWN"));
    if passes {
        ExecOutcome {
            code: 0,
            stdout: Vec::new(),
            stderr: outcome.stderr,
        }
    } else {
        ExecOutcome {
            code: 1,
            stdout: format!("{response}\n").into_bytes(),
            stderr: outcome.stderr,
        }
    }
}

fn failure(message: String) -> ExecOutcome {
    ExecOutcome {
        code: 1,
        stdout: Vec::new(),
        stderr: format!("{message}\n").into_bytes(),
    }
}

impl Redis {
    pub fn new(
        server_binary: Option<PathBuf>,
        cli_binary: Option<PathBuf>,
        state_dir: PathBuf,
        node: NodeMounts,
    ) -> Redis {
        Redis {
            server_binary,
            cli_binary,
            state_dir,
            node,
            servers: process::PodServers::default(),
        }
    }

    fn no_server() -> String {
        "bprun-sim found no redis-server binary (BPRUN_REDIS_SERVER, PATH, .tools/bin/redis-server; ./test.sh installs Debian's redis-tools there), so nothing serves Redis in this pod".to_string()
    }

    fn no_cli() -> String {
        "bprun-sim found no redis-cli binary (BPRUN_REDIS_CLI, PATH, .tools/bin/redis-cli; ./test.sh installs Debian's redis-tools there)".to_string()
    }

    /// The pod's folder: configuration, log and HOME, by namespace and pod name.
    fn pod_dir(&self, call: &ExecCall) -> PathBuf {
        self.state_dir.join(&call.namespace).join(&call.pod)
    }

    /// The container's password: `REDIS_PASSWORD_FILE`'s file among the pod's Secret volumes,
    /// else `REDIS_PASSWORD`; `None` when empty (no authentication).
    fn password(
        call: &ExecCall,
        pod: Option<&serde_json::Value>,
        host: Option<&Host>,
    ) -> Option<String> {
        let from_file = lookup(&call.env, "REDIS_PASSWORD_FILE").and_then(|path| {
            let (pod, host) = (pod?, host?);
            let name = path.rsplit('/').next()?;
            let files =
                |store_key: &str, object: &str| host.object(store_key, &call.namespace, object);
            volumes::find(pod, name, &files).map(|(_, text)| text)
        });
        from_file
            .or_else(|| lookup(&call.env, "REDIS_PASSWORD").map(str::to_string))
            .filter(|password| !password.is_empty())
    }

    /// The container's Redis port (`REDIS_PORT`).
    fn container_port(call: &ExecCall) -> u16 {
        lookup(&call.env, "REDIS_PORT")
            .and_then(|port| port.parse().ok())
            .unwrap_or(DEFAULT_PORT)
    }

    /// The pod's server, started when it has none.
    fn server(&self, call: &ExecCall, host: Option<&Host>) -> Result<SocketAddr, String> {
        let binary = self.server_binary.clone().ok_or_else(Self::no_server)?;
        if let Some(address) = self.servers.running(&call.pod_uid) {
            return Ok(address);
        }
        // Read from the store before the servers' lock is taken (never the other way round).
        let pod = host.and_then(|host| host.object("pods", &call.namespace, &call.pod));
        let replica = pod.as_ref().is_some_and(|pod| {
            pod["metadata"]["labels"]["app.kubernetes.io/component"] == "replica"
        });
        let files = |store_key: &str, object: &str| {
            host.and_then(|host| host.object(store_key, &call.namespace, object))
        };
        let chart_file = |name: &str| {
            pod.as_ref()
                .and_then(|pod| volumes::find(pod, name, &files))
                .map(|(_, text)| text)
        };
        let role_file = if replica {
            "replica.conf"
        } else {
            "master.conf"
        };
        let chart_files: Vec<(&str, String)> = ["redis.conf", role_file]
            .into_iter()
            .filter_map(|name| chart_file(name).map(|text| (name, text)))
            .collect();
        let data_mount = chart_files
            .iter()
            .find_map(|(_, text)| dir_of(text))
            .unwrap_or_else(|| DATA_MOUNT_PATH.to_string());
        let data = pod
            .as_ref()
            .zip(host)
            .and_then(|(pod, host)| {
                let node_path = node::volume_node_path(pod, &call.container, &data_mount, host)?;
                self.node.host_path(&node_path)
            })
            .unwrap_or_else(|| self.pod_dir(call).join("data"));
        let password = Self::password(call, pod.as_ref(), host);
        let container_port = Self::container_port(call);
        let mut servers = self.servers.lock();
        if let Some(address) = servers.running(&call.pod_uid) {
            return Ok(address);
        }
        servers.free(&call.pod_uid, &data);
        let folder = self.pod_dir(call);
        for dir in [&folder, &data] {
            std::fs::create_dir_all(dir)
                .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        }
        let address = process::free_port()?;
        let files: Vec<(&str, &str)> = chart_files
            .iter()
            .map(|(name, text)| (*name, text.as_str()))
            .collect();
        let config_file = folder.join("redis.conf");
        write_private(
            &config_file,
            &config(&files, password.as_deref(), address.port(), &data),
        )?;
        let server = process::Server::start(process::ServerSpec {
            program: &binary,
            args: vec![config_file.clone().into()],
            env: vec![("HOME".into(), folder.clone().into())],
            log: &folder.join("server.log"),
            listens_on: address,
            stop_signal: "TERM",
            start_within: Duration::from_secs(15),
        })?;
        servers.insert(
            &call.pod_uid,
            process::PodServer {
                server,
                data,
                port: container_port,
            },
        );
        Ok(address)
    }

    /// `redis-cli ARGS` in the pod, as the real tool, with `extra` added to the call's
    /// environment, ended after `limit`.
    fn cli(
        &self,
        call: &ExecCall,
        args: &[String],
        host: &Host,
        extra: &[(String, String)],
        limit: Duration,
    ) -> ExecOutcome {
        let own = match self.server(call, Some(host)) {
            Ok(address) => address,
            Err(message) => return failure(message),
        };
        let Some(binary) = self.cli_binary.clone() else {
            return failure(Self::no_cli());
        };
        let container_port = Self::container_port(call);
        let target = |name: &str, port: u16| -> Result<SocketAddr, String> {
            let refused =
                || format!("Could not connect to Redis at {name}:{port}: Connection refused");
            if is_own_host(name, &call.pod) {
                return if port == container_port {
                    Ok(own)
                } else {
                    Err(refused())
                };
            }
            match host.resolve(name, port, &call.namespace) {
                Backend::Serving { address, .. } => Ok(address),
                Backend::NotServing { .. } => Err(refused()),
                Backend::Unknown => Err(format!(
                    "Could not connect to Redis at {name}:{port}: Name or service not known"
                )),
                Backend::NoDns => Err(format!(
                    "Could not connect to Redis at {name}:{port}: Temporary failure in name resolution"
                )),
            }
        };
        let words = match cli_args(args, &target) {
            Ok(words) => words,
            Err(message) => return failure(message),
        };
        let home = self.pod_dir(call).join("home");
        if let Err(error) = std::fs::create_dir_all(&home) {
            return failure(format!("cannot create {}: {error}", home.display()));
        }
        let mut command = Command::new(binary);
        command.args(&words).env_clear();
        for (name, value) in call.env.iter().chain(extra) {
            if name != "HOME" {
                command.env(name, value);
            }
        }
        command.env("HOME", home);
        process::run(command, &call.stdin, limit)
    }

    /// The chart's probe script: `redis-cli -h localhost -p $REDIS_PORT ping` with the password
    /// as `REDISCLI_AUTH`, bounded by the script's first argument (seconds).
    fn probe(&self, call: &ExecCall, args: &[String], host: &Host, liveness: bool) -> ExecOutcome {
        let pod = host.object("pods", &call.namespace, &call.pod);
        let mut extra = Vec::new();
        if let Some(password) = Self::password(call, pod.as_ref(), Some(host)) {
            extra.push(("REDISCLI_AUTH".to_string(), password));
        }
        let limit = args
            .first()
            .and_then(|seconds| seconds.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(PROBE_TIMEOUT);
        let port = Self::container_port(call).to_string();
        let words: Vec<String> = ["-h", "localhost", "-p", &port, "ping"]
            .iter()
            .map(|word| word.to_string())
            .collect();
        let mut quiet = call.clone();
        quiet.stdin.clear();
        probe_verdict(self.cli(&quiet, &words, host, &extra, limit), liveness)
    }
}

/// Writes `text` to `path`, readable by its owner only (it holds the password).
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        // A file left by an earlier run keeps its mode: make it the owner's only.
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        file.write_all(text.as_bytes())
    };
    write().map_err(|error| format!("cannot write {}: {error}", path.display()))
}

impl Program for Redis {
    fn image(&self) -> &'static Image {
        &catalogue::REDIS
    }

    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        Some(&self.servers)
    }

    fn exec(&self, call: &ExecCall, argv: &[String], host: &Host) -> Option<ExecOutcome> {
        let [program, args @ ..] = argv else {
            return None;
        };
        match program.as_str() {
            "redis-cli" => Some(self.cli(call, args, host, &[], Duration::from_secs(60))),
            "ping_readiness_local.sh" => Some(self.probe(call, args, host, false)),
            "ping_liveness_local.sh" => Some(self.probe(call, args, host, true)),
            _ => None,
        }
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        self.server(call, Some(host)).map(|_| ())
    }

    fn logs(&self, call: &ExecCall) -> Option<String> {
        if self.server_binary.is_none() {
            return Some(format!("{}\n", Self::no_server()));
        }
        std::fs::read_to_string(self.pod_dir(call).join("server.log")).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|word| word.to_string()).collect()
    }

    const OWN: &str = "127.0.0.1:16379";

    /// The pod's own server at [`OWN`] for localhost:6379; `redis-master.redis.svc:6379` a
    /// Service whose pod serves at 127.0.0.1:16380; anything else unknown.
    fn target(name: &str, port: u16) -> Result<SocketAddr, String> {
        let at = |address: &str| {
            address
                .parse::<SocketAddr>()
                .map_err(|error| error.to_string())
        };
        match (name, port) {
            ("localhost" | "127.0.0.1", 6379) => at(OWN),
            ("localhost" | "127.0.0.1", _) => Err(format!(
                "Could not connect to Redis at {name}:{port}: Connection refused"
            )),
            ("redis-master.redis.svc", 6379) => at("127.0.0.1:16380"),
            _ => Err(format!(
                "Could not connect to Redis at {name}:{port}: Name or service not known"
            )),
        }
    }

    #[test]
    fn the_callers_host_and_port_become_the_real_servers() {
        let rewrite = |args: &[&str]| cli_args(&words(args), &target);
        let own = words(&["-h", "127.0.0.1", "-p", "16379"]);
        let with = |rest: &[&str]| {
            let mut all = own.clone();
            all.extend(words(rest));
            Ok(all)
        };
        assert_eq!(rewrite(&["PING"]), with(&["PING"]));
        assert_eq!(
            rewrite(&[
                "-h",
                "localhost",
                "-p",
                "6379",
                "--no-auth-warning",
                "-a",
                "pw",
                "ping"
            ]),
            with(&["--no-auth-warning", "-a", "pw", "ping"])
        );
        // Options after the command are the command's words.
        assert_eq!(rewrite(&["SET", "-h", "-p"]), with(&["SET", "-h", "-p"]));
        assert_eq!(
            rewrite(&["-h", "redis-master.redis.svc", "GET", "k"]),
            Ok(words(&["-h", "127.0.0.1", "-p", "16380", "GET", "k"]))
        );
        assert_eq!(
            rewrite(&["-u", "redis://:pw@localhost:6379/2", "PING"]),
            with(&["-u", "redis://:pw@127.0.0.1:16379/2", "PING"])
        );
        assert_eq!(
            rewrite(&["-p", "6380", "PING"]),
            Err("Could not connect to Redis at 127.0.0.1:6380: Connection refused".into())
        );
        assert_eq!(
            rewrite(&["-h", "nowhere", "PING"]),
            Err("Could not connect to Redis at nowhere:6379: Name or service not known".into())
        );
    }

    #[test]
    fn the_configuration_is_the_charts_with_the_pods_listener_and_folder() {
        let redis_conf = "# User-supplied common configuration:\n# Enable AOF https://redis.io/topics/persistence#append-only-file\nappendonly yes\n# Disable RDB persistence, AOF persistence already enabled.\nsave \"\"\n# End of common configuration";
        let master_conf = "dir /data\n# User-supplied master configuration:\nrename-command FLUSHDB \"\"\nrename-command FLUSHALL \"\"\n# End of master configuration";
        assert_eq!(dir_of(master_conf).as_deref(), Some("/data"));
        let text = config(
            &[("redis.conf", redis_conf), ("master.conf", master_conf)],
            Some("pa\"ss word\n"),
            16379,
            Path::new("/state/redis/redis-master-0/data"),
        );
        assert_eq!(
            text,
            "# Written by bprun-sim: the options the chart's start-master.sh passes, its included files,\n\
             # then the pod's listener and data folder on this machine.\n\
             requirepass \"pa\\\"ss word\\n\"\n\
             masterauth \"pa\\\"ss word\\n\"\n\
             # redis.conf\n\
             # User-supplied common configuration:\n\
             # Enable AOF https://redis.io/topics/persistence#append-only-file\n\
             appendonly yes\n\
             # Disable RDB persistence, AOF persistence already enabled.\n\
             save \"\"\n\
             # End of common configuration\n\
             # master.conf\n\
             # (set below by bprun-sim) dir /data\n\
             # User-supplied master configuration:\n\
             rename-command FLUSHDB \"\"\n\
             rename-command FLUSHALL \"\"\n\
             # End of master configuration\n\
             # The pod's listener and data folder\n\
             bind 127.0.0.1\n\
             port 16379\n\
             dir \"/state/redis/redis-master-0/data\"\n\
             daemonize no\n"
        );
        // Without a password the chart turns protected mode off; the image's paths stay out.
        let open = config(
            &[(
                "redis.conf",
                "logfile /opt/bitnami/redis/logs/redis.log\ntls-port 6380\nmaxmemory 100mb",
            )],
            None,
            16380,
            Path::new("/d"),
        );
        assert!(open.contains("\nprotected-mode no\n# redis.conf\n# (set below by bprun-sim) logfile /opt/bitnami/redis/logs/redis.log\n# (set below by bprun-sim) tls-port 6380\nmaxmemory 100mb\n"), "{open}");
        assert_eq!(quoted("a\u{1}é"), "\"a\\x01\\xc3\\xa9\"");
    }

    #[test]
    fn the_probe_scripts_pass_on_pong_and_echo_anything_else() {
        let outcome = |code: i32, stdout: &str, stderr: &str| ExecOutcome {
            code,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        };
        let verdict = |o: ExecOutcome, liveness: bool| {
            let v = probe_verdict(o, liveness);
            (
                v.code,
                String::from_utf8_lossy(&v.stdout).into_owned(),
                String::from_utf8_lossy(&v.stderr).into_owned(),
            )
        };
        assert_eq!(
            verdict(outcome(0, "PONG\n", ""), false),
            (0, String::new(), String::new())
        );
        assert_eq!(
            verdict(
                outcome(
                    0,
                    "NOAUTH Authentication required.\n\n",
                    "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\n"
                ),
                false
            ),
            (
                1,
                "NOAUTH Authentication required.\n".into(),
                "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\n"
                    .into()
            )
        );
        let loading = "LOADING Redis is loading the dataset in memory\n";
        assert_eq!(verdict(outcome(0, loading, ""), true).0, 0);
        assert_eq!(verdict(outcome(0, loading, ""), false).0, 1);
        assert_eq!(
            verdict(
                outcome(124, "", "redis-cli did not end within 1 s\n"),
                false
            ),
            (1, "Timed out\n".into(), String::new())
        );
    }

    #[test]
    fn without_a_server_binary_the_pod_cannot_start_and_says_why() {
        let redis = Redis::new(
            None,
            None,
            std::env::temp_dir().join("bprun-no-redis"),
            NodeMounts::default(),
        );
        let call = ExecCall {
            namespace: "redis".into(),
            pod: "redis-master-0".into(),
            pod_uid: "u".into(),
            ..Default::default()
        };
        assert_eq!(redis.server(&call, None), Err(Redis::no_server()));
        assert_eq!(redis.logs(&call), Some(format!("{}\n", Redis::no_server())));
    }
}
