//! What runs inside a simulated container: a registry from image repository (registry/name,
//! without the tag) to a [`Program`] that answers `kubectl exec`, starts what the image's
//! entrypoint would start when the pod starts (a real `bao server` for OpenBao, a real
//! `redis-server` for Redis), stops it when
//! the pod goes, forwards the container's ports, and runs the image's exec readiness probe, so a
//! pod is Ready for the reason a real one is (OpenBao only once unsealed).
//!
//! The flow of an exec: the API server resolves the container's image and environment
//! ([`env::resolve`]: `env`, `envFrom`, Secret and ConfigMap keys, downward API) into an
//! [`ExecCall`]; [`Programs::exec`] unwraps a simple `sh -c 'cmd args'` ([`shell_words`]), asks
//! the program of the image first, and when it does not know the command falls back to the shell
//! basics of [`super::builtin_exec`] (echo, cat, true, `sh -c 'exit N'`), which answer anything
//! else with containerd's "executable file not found in $PATH".
//!
//! Readiness: the kubelet part (`controllers::pods`) marks a container Ready as soon as it runs,
//! unless its image's program says it [`catalogue::Image::probes_readiness`] and the container declares
//! an exec `readinessProbe`. Then the [`tend`] pass (outside the store's lock, every tick) runs
//! the probe's command through the same [`Programs::exec`], records the verdict in the store's
//! [`ProbeBook`], and the kubelet part turns it into the Ready condition and an `Unhealthy`
//! event with the probe's output, as a real kubelet does.
//!
//! ## Adding a program
//!
//! 1. Write a type implementing [`Program`] in its own file under `programs/` (`bao.rs` and
//!    `postgres.rs` are the models for one backed by a real server, `minio.rs` for one with
//!    in-memory state).
//!    `images` lists the image repositories it runs in (registry/name, no tag); `exec` returns
//!    `None` for commands that are not the image's own, so the shell basics still answer.
//! 2. Keep the parsing and the answers pure functions of the arguments and the state, tested on
//!    their own; the messages are the real tool's words.
//! 3. Register it in [`Programs::standard`]. State other programs must see (databases, buckets)
//!    goes into [`Shared`], reached through [`Host::shared`].

pub mod bao;
pub mod catalogue;
pub mod coredns;
pub mod env;
pub mod envoy;
pub mod gitlab;
pub mod minio;
pub mod node;
pub mod pod_network;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod script;
pub mod service;
pub mod volumes;
pub mod web;

use super::kubelet::ClusterView;
use super::runtime::{
    Crash, ExecCall, ExecOutcome, Exit, Node, ProbeBook, ProbeResult, now_rfc3339,
};
use crate::images::canonical_repository;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The words of a simple shell command line (`bao status -tls-skip-verify`, `psql -c 'SELECT 1'`)
/// as `sh` would split them: quotes and backslashes, nothing else. `None` for what needs a real
/// shell (pipes, redirections, `;`, `&&`, substitutions, variables, several lines), so those are
/// never run as if they were simple.
pub fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            escaped @ ('"' | '\\' | '$' | '`') => word.push(escaped),
                            '\n' => {}
                            other => {
                                word.push('\\');
                                word.push(other);
                            }
                        },
                        '$' | '`' => return None,
                        other => word.push(other),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '$' | '`' | '\n' | '*' | '?' | '~' => {
                return None;
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// The command a container really runs for `command`: the script of `sh -c SCRIPT` (any of
/// `sh`, `/bin/sh`, `bash`, `/bin/bash` with `-c`, `-ec`, `-ce`, ...) split into words when it
/// is a simple command, leading `NAME=value` words taken as environment, `exec` dropped, and
/// a program's path reduced to its name (`/usr/local/bin/bao` -> `bao`). Returns the words, the
/// extra environment, and whether a shell ran them (its "not found" is the shell's, not
/// containerd's).
pub fn effective_command(command: &[String]) -> (Vec<String>, Vec<(String, String)>, bool) {
    let is_shell = |word: &str| matches!(word, "sh" | "/bin/sh" | "bash" | "/bin/bash");
    let is_c_flag = |word: &str| {
        word.starts_with('-')
            && word.len() > 1
            && word[1..].chars().all(|c| "ceux".contains(c))
            && word.contains('c')
    };
    let (mut words, via_shell) = match command {
        [shell, flag, script, ..] if is_shell(shell) && is_c_flag(flag) => {
            match shell_words(script) {
                Some(words) => (words, true),
                None => return (command.to_vec(), Vec::new(), false),
            }
        }
        _ => (command.to_vec(), false),
    };
    let mut environment = Vec::new();
    if via_shell {
        while let Some((name, value)) = words.first().and_then(|word| word.split_once('=')) {
            let valid = !name.is_empty()
                && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                break;
            }
            environment.push((name.to_string(), value.to_string()));
            words.remove(0);
        }
        if words.first().map(String::as_str) == Some("exec") {
            words.remove(0);
        }
    }
    if let Some(first) = words.first_mut()
        && first.starts_with('/')
        && let Some(name) = first.rsplit('/').next()
    {
        *first = name.to_string();
    }
    (words, environment, via_shell)
}

/// What a program may use of the simulator: the store (read objects; never held while a
/// program runs a process) and the state programs share.
pub struct Host<'a> {
    node: &'a dyn Node,
    programs: &'a Programs,
}

impl<'a> Host<'a> {
    /// The view of the simulator `node` (its store) with its `programs`, for a caller outside
    /// any pod (a CI job's container dialling a Service).
    pub fn new(node: &'a dyn Node, programs: &'a Programs) -> Host<'a> {
        Host { node, programs }
    }
}

impl Host<'_> {
    /// An object of the store (`secrets`, `configmaps`, `pods`, `services`, ...).
    pub fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value> {
        self.node.store().object(store_key, namespace, name)
    }

    /// Every object of `store_key` in `namespace`.
    pub fn objects(&self, store_key: &str, namespace: &str) -> Vec<Value> {
        self.node
            .store()
            .all(store_key)
            .into_iter()
            .filter(|object| object["metadata"]["namespace"].as_str() == Some(namespace))
            .collect()
    }

    /// Every object of `store_key`, in every namespace.
    pub fn all(&self, store_key: &str) -> Vec<Value> {
        self.node.store().all(store_key)
    }

    pub fn shared(&self) -> &Shared {
        &self.programs.shared
    }

    /// Where the program of a container of `pod` really serves `port` (a port-forward's
    /// target, the address a Service's endpoint stands for).
    pub fn serving(&self, pod: &Value, port: u16) -> Option<SocketAddr> {
        self.programs.forward(pod, port)
    }

    /// What a pod in `from_namespace` reaches at `name:port` through a Service (see
    /// [`service::resolve`]).
    pub fn resolve(&self, name: &str, port: u16, from_namespace: &str) -> service::Backend {
        service::resolve(self, name, port, from_namespace)
    }

    /// The call (image, resolved environment, labels; no command) of another pod's container,
    /// to read its configuration (a MinIO server's credentials).
    pub fn call_for(&self, pod: &Value, container: &Value) -> ExecCall {
        call_for(self.node.store().view(), pod, container, Vec::new())
    }
}

/// What runs in the containers of some images.
pub trait Program: Send + Sync {
    /// Its row of the [`catalogue`]: the images it runs in and how its containers behave.
    fn image(&self) -> &'static catalogue::Image;

    /// A name for messages ("openbao", "postgresql").
    fn name(&self) -> &'static str {
        self.image().name
    }

    /// The image repositories this program runs in, as [`canonical_repository`] spells them
    /// (`quay.io/openbao/openbao`, `docker.io/bitnamilegacy/redis`).
    fn images(&self) -> &[&'static str] {
        self.image().repositories
    }

    /// Runs `argv` (the effective command, see [`effective_command`]) in the container `call`
    /// describes, with `call.env` its environment. `None` when `argv` is not one of this image's
    /// programs: the shell basics answer, else containerd's "not found". By default the image
    /// has no program of its own to exec.
    fn exec(&self, _call: &ExecCall, _argv: &[String], _host: &Host) -> Option<ExecOutcome> {
        None
    }

    /// What the image's entrypoint starts when the pod starts (`call.command` is empty). Called
    /// once per pod and container; an `Err` says why it cannot run (an event on the pod).
    fn start(&self, _call: &ExecCall, _host: &Host) -> Result<(), String> {
        Ok(())
    }

    /// What serves the pods' ports, for a program whose `start` only starts servers there: its
    /// `stop` and `forward` are theirs.
    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        None
    }

    /// The pod `pod_uid` is gone (deleted, or the simulator stops): stop what `start` started.
    fn stop(&self, pod_uid: &str) {
        if let Some(endpoints) = self.endpoints() {
            endpoints.stop(pod_uid);
        }
    }

    /// Where the container of pod `pod_uid` really serves `port` (a port-forward's target).
    fn forward(&self, pod_uid: &str, port: u16) -> Option<SocketAddr> {
        self.endpoints()?.forward(pod_uid, port)
    }

    /// The container's log (`kubectl logs`), when the program keeps one.
    fn logs(&self, _call: &ExecCall) -> Option<String> {
        None
    }

    /// How the container of pod `pod_uid` ended, for programs that run a pod's command to its
    /// end ([`script::Scripts`]); `None` while it runs, or for programs that serve.
    fn finished(&self, _pod_uid: &str, _container: &str) -> Option<Exit> {
        None
    }
}

/// The servers a program started for its pods (processes, or listeners in this process).
pub trait PodEndpoints: Send + Sync {
    /// Stops what serves pod `pod_uid`.
    fn stop(&self, pod_uid: &str);
    /// Where pod `pod_uid` really serves `port`.
    fn forward(&self, pod_uid: &str, port: u16) -> Option<SocketAddr>;
}

/// State programs share, so one can see what another did (a bucket `mc` made). Real servers
/// share nothing here: other programs reach them through their Services ([`Host::resolve`]).
#[derive(Default)]
pub struct Shared {
    /// The GitLab the GitLab images' programs serve and poll (attached by the embedded bare
    /// platform).
    pub gitlab: gitlab::Link,
    /// The buckets of MinIO releases and the `mc` aliases of pods.
    pub minio: minio::Stores,
    /// The Corefiles the CoreDNS pods loaded: the cluster's DNS.
    pub dns: coredns::Servers,
    /// The simulator itself, for programs that answer connections after `start` returned (the
    /// Envoy proxy routing a request reads the routes and endpoints of that moment). Set when
    /// the simulator starts serving.
    pub world: std::sync::OnceLock<std::sync::Weak<dyn World>>,
    /// Where the API server itself listens (behind `default/kubernetes`). Set when it starts
    /// serving.
    pub api_server: std::sync::OnceLock<SocketAddr>,
}

/// The simulator as a program that serves reaches it later: its store and its programs.
pub trait World: Send + Sync {
    fn node(&self) -> &dyn Node;
    fn programs(&self) -> &Programs;
}

impl Shared {
    /// Runs `read` with the simulator's [`Host`], while the simulator lives and serves.
    pub fn with_host<T>(&self, read: impl FnOnce(&Host) -> T) -> Option<T> {
        let world = self.world.get()?.upgrade()?;
        let host = Host::new(world.node(), world.programs());
        Some(read(&host))
    }
}

/// Whether `pod` runs to completion with a container whose command really runs (a script):
/// it is Running until every such container ended.
pub fn runs_scripts(pod: &Value, book: &ProbeBook) -> bool {
    super::batch::runs_to_completion(pod) && script_containers(pod, book).next().is_some()
}

fn script_containers<'a>(
    pod: &'a Value,
    book: &'a ProbeBook,
) -> impl Iterator<Item = &'a str> + 'a {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|container| {
            let image = canonical_repository(container["image"].as_str().unwrap_or(""));
            book.script_images.contains(&image)
        })
        .filter_map(|container| container["name"].as_str())
}

/// How each script container of `pod` ended, once all of them did.
pub fn script_exits(pod: &Value, book: &ProbeBook) -> Option<BTreeMap<String, Exit>> {
    let uid = pod["metadata"]["uid"].as_str()?;
    let ended = book.completions.get(uid)?;
    let mut exits = BTreeMap::new();
    for name in script_containers(pod, book) {
        exits.insert(name.to_string(), ended.get(name)?.clone());
    }
    Some(exits)
}

/// The exec readiness probe command of a container, when its image's program runs it.
pub fn probe_command(container: &Value, book: &ProbeBook) -> Option<Vec<String>> {
    let image = container["image"].as_str().unwrap_or("");
    if !book.probes_image(image) {
        return None;
    }
    let command: Vec<String> = container["readinessProbe"]["exec"]["command"]
        .as_array()?
        .iter()
        .filter_map(|word| word.as_str().map(str::to_string))
        .collect();
    (!command.is_empty()).then_some(command)
}

/// Whether some container of the pod has a readiness the programs decide.
pub fn probed(pod: &Value, book: &ProbeBook) -> bool {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|container| probe_command(container, book).is_some() || book.start_gated(container))
}

/// A running pod's status (as the kubelet part made it, with its probes' initial delay) with
/// each probed container's readiness from the book as well (not Ready until its probe passed
/// once), and the pod's `ContainersReady` and `Ready` conditions
/// following, in the kubelet's words. Also the failed probes' outputs (for `Unhealthy` events).
pub fn with_readiness(pod: &Value, status: &Value, book: &ProbeBook) -> (Value, Vec<String>) {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let results = book.results.get(uid);
    let mut status = status.clone();
    let mut unready = Vec::new();
    let mut failures = Vec::new();
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(statuses) = status["containerStatuses"].as_array_mut() {
        for container_status in statuses.iter_mut() {
            let name = container_status["name"].as_str().unwrap_or("").to_string();
            let spec = containers
                .iter()
                .find(|c| c["name"] == name.as_str())
                .cloned()
                .unwrap_or(Value::Null);
            let running = container_status["state"]["running"].is_object();
            // What the kubelet part decided already (a probe's initial delay not yet passed).
            let may_be_ready = container_status["ready"].as_bool().unwrap_or(true);
            let crash = results_crash(book, uid, &name);
            if let Some(crash) = crash {
                crashed_status(
                    container_status,
                    crash,
                    &format!(
                        "{}_{}",
                        pod["metadata"]["name"].as_str().unwrap_or(""),
                        pod["metadata"]["namespace"].as_str().unwrap_or("")
                    ),
                );
            }
            // A container whose process is its program's `start` runs once that succeeded.
            let not_started = book.start_gated(&spec)
                && !book
                    .started
                    .get(uid)
                    .is_some_and(|started| started.contains(&name));
            let ready = if !running || crash.is_some() || not_started {
                false
            } else if probe_command(&spec, book).is_some() {
                let verdict = results.and_then(|by_container| by_container.get(&name));
                if let Some(failed) = verdict.filter(|result| !result.passed) {
                    failures.push(failed.output.clone());
                }
                may_be_ready && verdict.is_some_and(|result| result.passed)
            } else {
                may_be_ready
            };
            container_status["ready"] = json!(ready);
            if !ready {
                unready.push(name);
            }
        }
    }
    let message = format!("containers with unready status: [{}]", unready.join(" "));
    if let Some(conditions) = status["conditions"].as_array_mut() {
        for condition in conditions.iter_mut() {
            if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                if unready.is_empty() {
                    condition["status"] = json!("True");
                    if let Some(map) = condition.as_object_mut() {
                        map.remove("reason");
                        map.remove("message");
                    }
                } else {
                    condition["status"] = json!("False");
                    condition["reason"] = json!("ContainersNotReady");
                    condition["message"] = json!(message);
                }
            }
        }
    }
    (status, failures)
}

fn results_crash<'a>(book: &'a ProbeBook, uid: &str, container: &str) -> Option<&'a Crash> {
    book.crashes.get(uid)?.get(container)
}

/// A container status as the kubelet shows a container that keeps exiting: waiting in
/// `CrashLoopBackOff`, its last exit as `lastState.terminated`, and its restarts.
fn crashed_status(status: &mut Value, crash: &Crash, pod: &str) {
    let name = status["name"].as_str().unwrap_or("").to_string();
    status["state"] = json!({"waiting": {
        "reason": "CrashLoopBackOff",
        "message": format!("back-off 10s restarting failed container={name} pod={pod}"),
    }});
    status["lastState"] = json!({"terminated": {
        "exitCode": 1, "reason": "Error", "message": crash.message,
        "startedAt": crash.finished_at, "finishedAt": crash.finished_at,
    }});
    status["restartCount"] = json!(crash.restarts);
    status["started"] = json!(false);
}

/// The registry of programs and what they started.
pub struct Programs {
    registry: Vec<Arc<dyn Program>>,
    pub shared: Shared,
    /// (pod uid, container) -> the program index `start` was called for.
    started: Mutex<BTreeMap<(String, String), usize>>,
    /// (pod uid, container) -> when its probe last ran.
    last_probe: Mutex<HashMap<(String, String), Instant>>,
    /// (pod uid, container) -> when its container last exited (a failed `start` of a program
    /// that [`catalogue::Image::exits_when_start_fails`]): restarted after [`CRASH_BACK_OFF`].
    exited: Mutex<HashMap<(String, String), Instant>>,
    /// Where programs keep files (OpenBao's storage); removed when the simulator stops.
    pub state_dir: PathBuf,
    /// The nodes' own folders (`nodes/<node>/...`): in `state_dir` unless the platform keeps
    /// them elsewhere.
    pub nodes: PathBuf,
}

/// The name of programs' state folders under the temporary folder, before `PID-RANDOM`.
const STATE_PREFIX: &str = "bprun-sim-programs-";

/// The shortest and longest time between two runs of a probe: a real kubelet's
/// `periodSeconds` (10 s by default, the openbao chart's 5 s) shortened to at most 2 s, since
/// nothing in the simulator waits for wall time it does not need, and at least 0.5 s, since a
/// probe can start a process (`bao status`) on a machine tests share.
const PROBE_PERIOD_RANGE: (Duration, Duration) =
    (Duration::from_millis(500), Duration::from_secs(2));

/// How long the kubelet part waits between two runs of a container's readiness probe.
pub fn probe_period(container: &Value) -> Duration {
    let seconds = container["readinessProbe"]["periodSeconds"]
        .as_u64()
        .unwrap_or(10);
    Duration::from_secs(seconds).clamp(PROBE_PERIOD_RANGE.0, PROBE_PERIOD_RANGE.1)
}

/// How long a container whose program's `start` failed waits before it is started again (a
/// real kubelet starts at 10 s and doubles up to 5 min; shortened, as the probe period is).
const CRASH_BACK_OFF: Duration = Duration::from_secs(2);

impl Programs {
    /// A fresh folder for programs' files under the system's temporary folder
    /// (`bprun-sim-programs-PID-RANDOM`). The folders of simulators that ended without removing
    /// theirs (a process that exits without running destructors) are removed first.
    pub fn fresh_state_dir() -> PathBuf {
        let temp = std::env::temp_dir();
        let stale = std::fs::read_dir(&temp)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                name.strip_prefix(STATE_PREFIX)
                    .and_then(|rest| rest.split('-').next())
                    .and_then(|pid| pid.parse::<u32>().ok())
                    .is_some_and(|pid| {
                        pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
                    })
            });
        for entry in stale {
            let _ = std::fs::remove_dir_all(entry.path());
        }
        temp.join(format!(
            "{STATE_PREFIX}{}-{}",
            std::process::id(),
            (0..8).map(|_| fastrand::alphanumeric()).collect::<String>()
        ))
    }

    pub fn new(registry: Vec<Arc<dyn Program>>) -> Programs {
        Programs::with_state_dir(registry, Programs::fresh_state_dir())
    }

    pub fn with_state_dir(registry: Vec<Arc<dyn Program>>, state_dir: PathBuf) -> Programs {
        Programs {
            registry,
            shared: Shared::default(),
            started: Mutex::new(BTreeMap::new()),
            last_probe: Mutex::new(HashMap::new()),
            exited: Mutex::new(HashMap::new()),
            nodes: state_dir.join("nodes"),
            state_dir,
        }
    }

    /// The programs of the platform's images. OpenBao runs the `bao` binary found as the
    /// embedded platform finds it (`BPRUN_BAO_BIN`, PATH, `.tools/bin/bao` of the working folder),
    /// Redis `redis-server` and `redis-cli` the same way (`BPRUN_REDIS_SERVER`, `BPRUN_REDIS_CLI`).
    pub fn standard() -> Programs {
        Programs::standard_on(node::NodeMounts::default())
    }

    /// [`Programs::standard`] on nodes whose folders `node` backs with host folders (where a
    /// pod's hostPath data lives).
    pub fn standard_on(node: node::NodeMounts) -> Programs {
        let state_dir = Programs::fresh_state_dir();
        Programs::standard_with_nodes(node, state_dir.join("nodes"))
    }

    /// [`Programs::standard_on`] with the nodes' own folders (`/etc/hosts`, containerd's
    /// `certs.d`, hostPath volumes outside the node mounts) in `nodes`, which outlives the
    /// simulator: a kept platform's nodes keep what phase 2 wrote on them.
    pub fn standard_with_nodes(node: node::NodeMounts, nodes: PathBuf) -> Programs {
        let state_dir = Programs::fresh_state_dir();
        let root = std::env::current_dir().unwrap_or_default();
        let postgres_bindir = crate::tools::postgres_bindir(&root);
        let registry: Vec<Arc<dyn Program>> = vec![
            Arc::new(bao::OpenBao::new(
                crate::tools::bao(&root),
                state_dir.join("openbao"),
                node.clone(),
            )),
            Arc::new(postgres::Postgres::new(
                postgres_bindir.clone(),
                state_dir.join("postgresql"),
                node.clone(),
            )),
            Arc::new(gitlab::Webservice::new(postgres_bindir)),
            Arc::new(gitlab::Registry::default()),
            Arc::new(gitlab::Runner::default()),
            Arc::new(redis::Redis::new(
                crate::tools::redis_server(&root),
                crate::tools::redis_cli(&root),
                state_dir.join("redis"),
                node.clone(),
            )),
            Arc::new(minio::Minio::new(node.clone())),
            Arc::new(coredns::CoreDns),
            Arc::new(envoy::Envoy::default()),
            Arc::new(web::Guestbook::default()),
            Arc::new(web::Nginx::default()),
            Arc::new(script::Scripts::new(
                nodes.clone(),
                node,
                state_dir.join("scripts"),
            )),
        ];
        let mut programs = Programs::with_state_dir(registry, state_dir);
        programs.nodes = nodes;
        programs
    }

    /// The program that runs in `image`.
    fn program_for(&self, image: &str) -> Option<(usize, &Arc<dyn Program>)> {
        let wanted = canonical_repository(image);
        self.registry
            .iter()
            .enumerate()
            .find(|(_, program)| program.images().contains(&wanted.as_str()))
    }

    /// The image repositories of the registered programs whose catalogue row says `behaves`.
    fn images_where(&self, behaves: impl Fn(&catalogue::Image) -> bool) -> Vec<String> {
        self.registry
            .iter()
            .map(|program| program.image())
            .filter(|image| behaves(image))
            .flat_map(|image| image.repositories.iter().map(|name| name.to_string()))
            .collect()
    }

    /// The image repositories whose containers exit when their program's `start` fails (the
    /// store's [`ProbeBook::start_gated_images`]).
    pub fn start_gated_images(&self) -> Vec<String> {
        self.images_where(|image| image.exits_when_start_fails)
    }

    /// The image repositories whose run-to-completion pods end when their command ends (the
    /// store's [`ProbeBook::script_images`]).
    pub fn script_images(&self) -> Vec<String> {
        self.images_where(|image| image.runs_to_its_end)
    }

    /// The image repositories whose readiness probes run through their programs (the store's
    /// [`ProbeBook::probed_images`]).
    pub fn probed_images(&self) -> Vec<String> {
        self.images_where(|image| image.probes_readiness)
    }

    /// Runs an exec: the image's program, else the shell basics (`sim.exec`).
    pub fn exec(&self, node: &dyn Node, call: &ExecCall) -> ExecOutcome {
        let (argv, extra_environment, _) = effective_command(&call.command);
        if let Some((index, program)) = self.program_for(&call.image) {
            let mut call = call.clone();
            call.env.extend(extra_environment);
            let host = Host {
                node,
                programs: self,
            };
            self.ensure_started(index, program, &call, &host);
            if let Some(outcome) = program.exec(&call, &argv, &host) {
                return outcome;
            }
        }
        node.shell(call)
    }

    fn ensure_started(
        &self,
        index: usize,
        program: &Arc<dyn Program>,
        call: &ExecCall,
        host: &Host,
    ) {
        let key = (call.pod_uid.clone(), call.container.clone());
        let exits = program.image().exits_when_start_fails;
        {
            let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
            if started.contains_key(&key) {
                return;
            }
            let exited = self.exited.lock().unwrap_or_else(|p| p.into_inner());
            if exited
                .get(&key)
                .is_some_and(|at| at.elapsed() < CRASH_BACK_OFF)
            {
                return;
            }
            started.insert(key.clone(), index);
        }
        let mut start_call = call.clone();
        start_call.command.clear();
        start_call.stdin.clear();
        let result = program.start(&start_call, host);
        if exits {
            let mut cluster = host.node.store();
            let probes = cluster.probes_mut();
            match result {
                Ok(()) => {
                    self.exited
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                    if let Some(crashes) = probes.crashes.get_mut(&key.0) {
                        crashes.remove(&key.1);
                    }
                    probes.started.entry(key.0).or_default().insert(key.1);
                }
                Err(message) => {
                    // The process exited: nothing runs, it is started again after the back-off.
                    self.started
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                    self.exited
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key.clone(), Instant::now());
                    let crashes = probes.crashes.entry(key.0).or_default();
                    let restarts = crashes.get(&key.1).map_or(0, |crash| crash.restarts + 1);
                    crashes.insert(
                        key.1,
                        Crash {
                            message,
                            restarts,
                            finished_at: now_rfc3339(),
                        },
                    );
                }
            }
            return;
        }
        let mut cluster = host.node.store();
        let probes = cluster.probes_mut();
        match result {
            Ok(()) => probes.start_errors.remove(&call.pod_uid),
            Err(message) => probes.start_errors.insert(call.pod_uid.clone(), message),
        };
    }

    /// Where a pod's port is served by its program.
    pub fn forward(&self, pod: &Value, port: u16) -> Option<SocketAddr> {
        let uid = pod["metadata"]["uid"].as_str()?;
        pod["spec"]["containers"]
            .as_array()?
            .iter()
            .filter_map(|container| self.program_for(container["image"].as_str().unwrap_or("")))
            .find_map(|(_, program)| program.forward(uid, port))
    }

    /// A container's log, from its program.
    pub fn logs(&self, call: &ExecCall) -> Option<String> {
        self.program_for(&call.image)?.1.logs(call)
    }

    /// A container's log as `GET .../log?tailLines=N` answers: its last `N` lines when given.
    pub fn logs_tail(&self, call: &ExecCall, tail_lines: Option<&str>) -> Option<String> {
        Some(tail_of(&self.logs(call)?, tail_lines))
    }

    /// Stops what every program started (the simulator stops).
    pub fn stop_all(&self) {
        let started = std::mem::take(&mut *self.started.lock().unwrap_or_else(|p| p.into_inner()));
        for ((uid, _), index) in started {
            if let Some(program) = self.registry.get(index) {
                program.stop(&uid);
            }
        }
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

impl Drop for Programs {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The exec call for container `container` of `pod`, its environment resolved from the store.
pub fn call_for(
    cluster: &dyn ClusterView,
    pod: &Value,
    container: &Value,
    command: Vec<String>,
) -> ExecCall {
    let text = |value: &Value| value.as_str().unwrap_or("").to_string();
    let map = |value: &Value| -> BTreeMap<String, String> {
        value
            .as_object()
            .map(|entries| {
                entries
                    .iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    };
    ExecCall {
        namespace: text(&pod["metadata"]["namespace"]),
        pod: text(&pod["metadata"]["name"]),
        pod_uid: text(&pod["metadata"]["uid"]),
        container: text(&container["name"]),
        image: text(&container["image"]),
        env: env::resolve(pod, container, cluster),
        labels: map(&pod["metadata"]["labels"]),
        annotations: map(&pod["metadata"]["annotations"]),
        command,
        stdin: Vec::new(),
    }
}

/// A running container with a program: its call (no command), its probe command (empty when
/// none runs through the program) and period, and its program's index.
type ContainerToTend = (ExecCall, Vec<String>, Duration, usize);

/// The kubelet's running side, once per tick and outside the store's lock while programs run:
/// starts the programs of pods that run, stops those of pods that are gone or being deleted,
/// and runs the due readiness probes, recording their verdicts in the store.
pub fn tend(node: &dyn Node, programs: &Programs) {
    let (existing, running, probes): (BTreeSet<String>, BTreeSet<String>, Vec<ContainerToTend>) = {
        let cluster = node.store();
        let mut existing = BTreeSet::new();
        let mut running = BTreeSet::new();
        let mut probes = Vec::new();
        for pod in cluster.all("pods") {
            if let Some(uid) = pod["metadata"]["uid"].as_str() {
                existing.insert(uid.to_string());
            }
            let live = pod["status"]["phase"] == "Running"
                && !pod["metadata"]["deletionTimestamp"].is_string();
            if !live {
                continue;
            }
            let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
            running.insert(uid);
            for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
                let image = container["image"].as_str().unwrap_or("");
                let Some((index, _)) = programs.program_for(image) else {
                    continue;
                };
                let probe = probe_command(container, cluster.probes()).unwrap_or_default();
                probes.push((
                    call_for(cluster.view(), &pod, container, Vec::new()),
                    probe,
                    probe_period(container),
                    index,
                ));
            }
        }
        (existing, running, probes)
    };
    // Pods that are gone: stop their programs, forget their verdicts.
    let gone: Vec<((String, String), usize)> = {
        let mut started = programs.started.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<_> = started
            .iter()
            .filter(|((uid, _), _)| !running.contains(uid))
            .map(|(key, index)| (key.clone(), *index))
            .collect();
        for (key, _) in &gone {
            started.remove(key);
        }
        gone
    };
    for ((uid, _), index) in &gone {
        if let Some(program) = programs.registry.get(*index) {
            program.stop(uid);
        }
    }
    {
        let mut cluster = node.store();
        let probes = cluster.probes_mut();
        probes.results.retain(|uid, _| running.contains(uid));
        probes.start_errors.retain(|uid, _| running.contains(uid));
        probes.started.retain(|uid, _| running.contains(uid));
        probes.crashes.retain(|uid, _| running.contains(uid));
        // How scripts ended stays while their pods exist (their status says it).
        probes.completions.retain(|uid, _| existing.contains(uid));
    }
    programs
        .exited
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(uid, _), _| running.contains(uid));
    programs
        .last_probe
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(uid, _), _| running.contains(uid));
    let host = Host { node, programs };
    for (call, probe, period, index) in probes {
        let program = &programs.registry[index];
        programs.ensure_started(index, program, &call, &host);
        if let Some(exit) = program.finished(&call.pod_uid, &call.container) {
            node.store()
                .probes_mut()
                .completions
                .entry(call.pod_uid.clone())
                .or_default()
                .insert(call.container.clone(), exit);
        }
        if probe.is_empty() {
            continue;
        }
        let key = (call.pod_uid.clone(), call.container.clone());
        {
            let mut last = programs
                .last_probe
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.get(&key).is_some_and(|at| at.elapsed() < period) {
                continue;
            }
            last.insert(key.clone(), Instant::now());
        }
        let mut probe_call = call.clone();
        probe_call.command = probe;
        let outcome = programs.exec(node, &probe_call);
        let output = String::from_utf8_lossy(&[outcome.stdout, outcome.stderr].concat())
            .trim_end()
            .to_string();
        let result = ProbeResult {
            passed: outcome.code == 0,
            output,
        };
        node.store()
            .probes_mut()
            .results
            .entry(key.0)
            .or_default()
            .insert(key.1, result);
    }
}

#[cfg(test)]
mod tests;

/// The last `tail_lines` lines of `log` (the API server's `tailLines`: a number; anything else,
/// or none, is the whole log).
fn tail_of(log: &str, tail_lines: Option<&str>) -> String {
    let Some(count) = tail_lines.and_then(|n| n.parse::<usize>().ok()) else {
        return log.to_string();
    };
    let lines: Vec<&str> = log.split_inclusive('\n').collect();
    lines[lines.len().saturating_sub(count)..].concat()
}
