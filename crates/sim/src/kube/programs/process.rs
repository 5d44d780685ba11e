//! Running a real program for a container: a command bounded in time with stdin passed
//! through ([`run`]), or a server the container keeps running ([`Server`]), stopped by its
//! process id.

use crate::kube::runtime::ExecOutcome;
use bprun_clients::process::Pipes;
use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Runs `command` to its end with `stdin` as its input; killed after `limit` (exit code 124
/// and a line saying so, as `timeout` does).
pub fn run(mut command: Command, stdin: &[u8], limit: Duration) -> ExecOutcome {
    let program = command.get_program().to_string_lossy().into_owned();
    let spawned = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            return ExecOutcome {
                code: 126,
                stdout: Vec::new(),
                stderr: format!("cannot start {program}: {error}\n").into_bytes(),
            };
        }
    };
    let pipes = Pipes::serve(&mut child, Some(stdin.to_vec()));
    let deadline = Instant::now() + limit;
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code().unwrap_or(137),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                stop(&mut child);
                break 124;
            }
        }
    };
    let (stdout, mut stderr) = pipes.collect();
    if code == 124 {
        stderr.extend_from_slice(
            format!("{program} did not end within {} s\n", limit.as_secs()).as_bytes(),
        );
    }
    ExecOutcome {
        code,
        stdout,
        stderr,
    }
}

/// Stops a child by its process id and reaps it.
pub fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Asks a child to end by its process id (SIGTERM, so it can stop what it started), waits up
/// to 5 s, then kills it.
pub fn terminate(child: &mut Child) {
    // SAFETY: kill takes plain integers and touches no memory of this process.
    let asked = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) } == 0;
    if asked {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stop(child);
}

/// A free loopback port, for a server a pod's container runs.
pub fn free_port() -> Result<SocketAddr, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|error| format!("no free loopback port: {error}"))
}

/// Runs `$3...` (a server) and stops it with signal `$2` (then waits) when it gets SIGTERM or
/// when process `$1` (the simulator) is gone: a rehearsal that exits without running
/// destructors leaves no server behind. Checked once a second.
const WATCHDOG: &str = r#"parent="$1"; signal="$2"; shift 2
"$@" &
child=$!
trap 'kill -"$signal" "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1 & wait $!; done
kill -"$signal" "$child" 2>/dev/null
wait "$child""#;

/// What a container's server is: its program and arguments, environment (nothing else is
/// inherited), the file its output goes to, the address it listens on once started, and the
/// signal that stops it quickly (PostgreSQL's fast shutdown is SIGINT; SIGTERM waits for clients).
pub struct ServerSpec<'a> {
    pub program: &'a Path,
    pub args: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
    pub log: &'a Path,
    pub listens_on: SocketAddr,
    pub stop_signal: &'a str,
    /// How long the server may take to listen.
    pub start_within: Duration,
}

/// A running server of a container, stopped by its process id when dropped.
pub struct Server {
    child: Child,
    pub address: SocketAddr,
}

impl Server {
    /// Starts the server (through the watchdog) and waits, bounded, until it accepts
    /// connections. If it ends or does not listen in time, it is stopped and the error names the
    /// address and the last lines of its log.
    pub fn start(spec: ServerSpec) -> Result<Server, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(spec.log)
            .map_err(|error| format!("cannot open {}: {error}", spec.log.display()))?;
        let log_err = log.try_clone().map_err(|error| error.to_string())?;
        let mut command = Command::new("sh");
        command
            .args(["-c", WATCHDOG, "server-watchdog"])
            .arg(std::process::id().to_string())
            .arg(spec.stop_signal)
            .arg(spec.program)
            .args(&spec.args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        for (name, value) in &spec.env {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", spec.program.display()))?;
        let deadline = Instant::now() + spec.start_within;
        loop {
            if TcpStream::connect_timeout(&spec.listens_on, Duration::from_millis(200)).is_ok() {
                return Ok(Server {
                    child,
                    address: spec.listens_on,
                });
            }
            let ended = !matches!(child.try_wait(), Ok(None));
            if ended || Instant::now() > deadline {
                terminate(&mut child);
                let log = std::fs::read_to_string(spec.log).unwrap_or_default();
                let last: Vec<&str> = log.lines().rev().take(3).collect();
                let name = spec
                    .program
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy();
                return Err(format!(
                    "{name} did not listen on {}: {}",
                    spec.listens_on,
                    last.into_iter().rev().collect::<Vec<_>>().join(" / ")
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server still runs.
    pub fn runs(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// A pod's server: what serves which container port from which data folder.
pub struct PodServer {
    pub server: Server,
    /// The folder it keeps its data in (two pods never serve one folder at once).
    pub data: PathBuf,
    /// The container port that forwards to it.
    pub port: u16,
}

/// The servers of a program's pods, by pod uid.
#[derive(Default)]
pub struct PodServers {
    servers: Mutex<HashMap<String, PodServer>>,
}

/// The servers while locked: held across a start, so an exec and the kubelet's pass never start
/// two servers for one pod.
pub struct Locked<'a> {
    servers: MutexGuard<'a, HashMap<String, PodServer>>,
}

impl PodServers {
    pub fn lock(&self) -> Locked<'_> {
        Locked {
            servers: self.servers.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// The address of the pod's server while it runs: a short look that spares an exec or a
    /// probe of a running pod the store reads a start needs (done again under the lock when
    /// it must start one).
    pub fn running(&self, pod_uid: &str) -> Option<SocketAddr> {
        self.lock().running(pod_uid)
    }
}

impl super::PodEndpoints for PodServers {
    /// The pod is gone: its server stops (by process id).
    fn stop(&self, pod_uid: &str) {
        let server = self.lock().servers.remove(pod_uid);
        drop(server);
    }

    /// Where the pod's server serves its container port `port`.
    fn forward(&self, pod_uid: &str, port: u16) -> Option<SocketAddr> {
        self.lock()
            .servers
            .get(pod_uid)
            .filter(|served| served.port == port)
            .map(|served| served.server.address)
    }
}

impl Locked<'_> {
    /// The address of the pod's server while it runs; a server that ended is forgotten.
    pub fn running(&mut self, pod_uid: &str) -> Option<SocketAddr> {
        let served = self.servers.get_mut(pod_uid)?;
        if served.server.runs() {
            return Some(served.server.address);
        }
        self.servers.remove(pod_uid);
        None
    }

    /// Stops the servers of other pods on `data`: a pod that is gone may still serve it (the
    /// kubelet part stops it on its next pass), and a real pod is gone before its successor
    /// mounts the volume.
    pub fn free(&mut self, pod_uid: &str, data: &Path) {
        self.servers
            .retain(|uid, served| uid == pod_uid || served.data != data);
    }

    pub fn insert(&mut self, pod_uid: &str, served: PodServer) {
        self.servers.insert(pod_uid.to_string(), served);
    }

    pub fn remove(&mut self, pod_uid: &str) -> Option<PodServer> {
        self.servers.remove(pod_uid)
    }
}
