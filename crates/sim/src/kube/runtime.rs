//! What the API server and the programs of its containers share, as a kubelet and its container
//! runtime share an interface: the exec call and its outcome, the store's record of probes,
//! crashes and script exits ([`ProbeBook`]), and what a program may ask of the node it runs on
//! ([`Node`]: the store, the shell basics). The server implements [`Node`]; `programs` only
//! names this module, never the server, the store or the controllers.

use super::kubelet::ClusterView;
use crate::images::canonical_repository;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::DerefMut;
use std::sync::Arc;

/// Now, in RFC 3339 with seconds (timestamps of objects, events, exits).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// What an exec into a pod runs, and the container it runs in.
#[derive(Debug, Clone, Default)]
pub struct ExecCall {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    /// The container's image as the pod spec names it (`quay.io/openbao/openbao:2.2.0`).
    pub image: String,
    /// The container's environment, resolved from the store at exec time
    /// (`programs::env::resolve`).
    pub env: Vec<(String, String)>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
    pub command: Vec<String>,
    pub stdin: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
pub struct ExecOutcome {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs the commands of `kubectl exec` / kube-rs exec inside simulated containers.
pub type ExecRuntime = Arc<dyn Fn(&ExecCall) -> ExecOutcome + Send + Sync>;

/// The last verdict of a container's readiness probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub passed: bool,
    /// What the probe printed (the `Unhealthy` event's message when it failed).
    pub output: String,
}

/// What the kubelet part needs to know about probes, kept in the store (`Cluster::probes`).
#[derive(Debug, Clone, Default)]
pub struct ProbeBook {
    /// Images whose exec readiness probes run through their program (see
    /// `programs::catalogue::Image::probes_readiness`); set when the simulator is built.
    pub probed_images: Vec<String>,
    /// pod uid -> container -> the last verdict.
    pub results: BTreeMap<String, BTreeMap<String, ProbeResult>>,
    /// pod uid -> why its program could not start (an event on the pod).
    pub start_errors: BTreeMap<String, String>,
    /// Images whose containers exit when their program's `start` fails (see
    /// `programs::catalogue::Image::exits_when_start_fails`); set when the simulator is built.
    pub start_gated_images: Vec<String>,
    /// pod uid -> the containers of such images whose `start` succeeded.
    pub started: BTreeMap<String, BTreeSet<String>>,
    /// pod uid -> container -> its last exit, while it crash-loops.
    pub crashes: BTreeMap<String, BTreeMap<String, Crash>>,
    /// Images whose run-to-completion pods end when their command ends (see
    /// `programs::catalogue::Image::runs_to_its_end`); set when the simulator is built.
    pub script_images: Vec<String>,
    /// pod uid -> container -> how its command ended, for such pods.
    pub completions: BTreeMap<String, BTreeMap<String, Exit>>,
}

/// A container that exited because its program's `start` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// What the process printed last (the terminated state's message).
    pub message: String,
    /// How often it exited so far (the container's `restartCount`).
    pub restarts: u64,
    /// When it last exited (RFC 3339).
    pub finished_at: String,
}

impl ProbeBook {
    pub(crate) fn probes_image(&self, image: &str) -> bool {
        let wanted = canonical_repository(image);
        self.probed_images.contains(&wanted)
    }

    /// Whether the container's readiness waits for its program's `start`.
    pub fn start_gated(&self, container: &Value) -> bool {
        let wanted = canonical_repository(container["image"].as_str().unwrap_or(""));
        self.start_gated_images.contains(&wanted)
    }
}

/// How a script container ended: its exit code and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    pub log: String,
}

/// The store as the programs see it: read objects, and the probes' book.
pub trait Store: ClusterView {
    /// Every object of `store_key`.
    fn all(&self, store_key: &str) -> Vec<Value>;
    /// The probes' record.
    fn probes(&self) -> &ProbeBook;
    /// The probes' record, to write.
    fn probes_mut(&mut self) -> &mut ProbeBook;
    /// The store as a [`ClusterView`] (to resolve a container's environment).
    fn view(&self) -> &dyn ClusterView;
}

/// The store, locked for as long as the guard lives.
pub type StoreGuard<'a> = Box<dyn DerefMut<Target = dyn Store + 'a> + 'a>;

/// What the programs of a node's containers may ask of the API server they run under.
pub trait Node: Send + Sync {
    /// The store, locked (never held while a program runs a process).
    fn store(&self) -> StoreGuard<'_>;
    /// The shell basics every container answers (and what the embedding adds).
    fn shell(&self, call: &ExecCall) -> ExecOutcome;
}
