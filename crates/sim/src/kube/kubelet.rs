//! What the scheduler and the kubelet decide about a pod before its containers run, as pure
//! functions from (pod, the cluster's objects) to a verdict, in the order a real node checks:
//! scheduling (its PersistentVolumeClaims exist and are bound, or can be bound once a consumer
//! exists), volume mounts (Secrets and ConfigMaps of `secret`, `configMap` and `projected`
//! volumes), image pulls (an image outside the allow-list cannot be pulled), then each
//! container's configuration (`env` and `envFrom` references). `optional: true` references are
//! skipped, as the kubelet skips them. The messages are the real components' words, so a
//! rehearsal fails where a real node fails, in the same words.

use serde_json::{Value, json};

use crate::images::PlatformRegistry;

/// Read access to the objects a pod depends on (defined with the pulls, which read it too).
pub use super::pulls::ClusterView;

/// Images that no registry serves any more: Bitnami removed its versioned images from
/// `docker.io/bitnami/` on 2025-09-29 (they live on as `docker.io/bitnamilegacy/`), so a chart
/// that still names them pulls nothing on a real cluster.
pub const GONE_IMAGES: &[&str] = &["docker.io/bitnami/"];

/// Which images a node can pull: everything but [`GONE_IMAGES`], or, with an allow-list, only
/// references that start with one of its prefixes (`docker.io/bitnamilegacy/`,
/// `registry.local.example.net/`).
#[derive(Debug, Clone)]
pub struct ImagePolicy {
    pub allow_prefixes: Vec<String>,
    pub deny_prefixes: Vec<String>,
    /// The platform's own registry, when the cluster has one (the embedded platform).
    pub registry: Option<PlatformRegistry>,
    /// The nodes' own folders (`NODE/etc/hosts`, `NODE/etc/containerd/certs.d`), when pulls
    /// from the platform's registry go through the node's network (`super::pulls`); `None`:
    /// the registry's names resolve on every node.
    pub nodes: Option<std::path::PathBuf>,
}

impl Default for ImagePolicy {
    fn default() -> Self {
        ImagePolicy {
            allow_prefixes: Vec::new(),
            deny_prefixes: GONE_IMAGES
                .iter()
                .map(|prefix| prefix.to_string())
                .collect(),
            registry: None,
            nodes: None,
        }
    }
}

impl ImagePolicy {
    /// Why a node cannot pull `image` (what follows `failed to pull and unpack image "...": `
    /// in containerd's message), or `None` when it can.
    /// `node` is the pod's node, `view` the store.
    pub fn pull_error(&self, image: &str, node: &str, view: &dyn ClusterView) -> Option<String> {
        let reach = |host: &str, manifest: &str| match &self.nodes {
            Some(root) => super::pulls::reach_registry(
                host,
                manifest,
                &super::pulls::NodeFolder {
                    root: root.clone(),
                    node: node.to_string(),
                },
                view,
            ),
            None => Ok(()),
        };
        if let Some(registry) = &self.registry
            && registry.serves(image)
        {
            return registry.pull_error(image, &reach);
        }
        if !self.allows(image) {
            return Some("not found".to_string());
        }
        crate::images::public_pull_error(image, super::pulls::NODE_RESOLVER)
    }

    pub fn allows(&self, image: &str) -> bool {
        let matches = |prefixes: &[String]| {
            prefixes
                .iter()
                .any(|prefix| image.starts_with(prefix.as_str()))
        };
        !matches(&self.deny_prefixes)
            && (self.allow_prefixes.is_empty() || matches(&self.allow_prefixes))
    }
}

/// Why a pod does not run yet, or that it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The scheduler cannot place it (`PodScheduled` False, `Unschedulable`).
    Unschedulable { message: String },
    /// Placed, but a volume waits for its claim to be bound (a WaitForFirstConsumer claim).
    VolumeBinding { claim: String },
    /// Placed; a volume cannot be mounted (event `FailedMount`, containers `ContainerCreating`).
    MountFailed { volume: String, message: String },
    /// Placed; an image cannot be pulled (`ErrImagePull`).
    ImagePull {
        container: String,
        image: String,
        /// containerd's reason (`not found`, `failed to resolve reference ...`).
        reason: String,
    },
    /// Placed; a container's configuration names something missing
    /// (`CreateContainerConfigError`).
    ConfigError { container: String, message: String },
    /// Every precondition holds: the containers start.
    Runs,
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or("")
}

fn optional(reference: &Value) -> bool {
    reference["optional"].as_bool().unwrap_or(false)
}

/// The scheduler's message for an unschedulable pod on the simulator's one node.
pub fn scheduler_message(reason: &str) -> String {
    format!(
        "0/1 nodes are available: {reason}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
}

/// The kind of volume binding a claim's StorageClass asks for (`Immediate` when unknown).
fn binding_mode(claim: &Value, view: &dyn ClusterView) -> String {
    let class = claim["spec"]["storageClassName"].as_str().unwrap_or("");
    view.object("storageclasses.storage.k8s.io", "", class)
        .and_then(|class| class["volumeBindingMode"].as_str().map(str::to_string))
        .unwrap_or_else(|| "Immediate".to_string())
}

fn schedule(pod: &Value, namespace: &str, view: &dyn ClusterView) -> Option<Verdict> {
    let volumes = pod["spec"]["volumes"].as_array()?;
    for volume in volumes {
        let Some(claim_name) = volume["persistentVolumeClaim"]["claimName"].as_str() else {
            continue;
        };
        let Some(claim) = view.object("persistentvolumeclaims", namespace, claim_name) else {
            return Some(Verdict::Unschedulable {
                message: scheduler_message(&format!(
                    "persistentvolumeclaim \"{claim_name}\" not found"
                )),
            });
        };
        if claim["metadata"]["deletionTimestamp"].is_string() {
            return Some(Verdict::Unschedulable {
                message: scheduler_message(&format!(
                    "persistentvolumeclaim \"{claim_name}\" is being deleted"
                )),
            });
        }
        if claim["status"]["phase"] == "Bound" {
            continue;
        }
        if binding_mode(&claim, view) == "WaitForFirstConsumer" {
            return Some(Verdict::VolumeBinding {
                claim: claim_name.to_string(),
            });
        }
        return Some(Verdict::Unschedulable {
            message: scheduler_message("pod has unbound immediate PersistentVolumeClaims"),
        });
    }
    None
}

/// A Secret or ConfigMap a volume source names: why it cannot be mounted, if it cannot.
fn missing_source(
    source: &Value,
    store_key: &str,
    name_key: &str,
    what: &str,
    namespace: &str,
    view: &dyn ClusterView,
) -> Option<String> {
    if optional(source) {
        return None;
    }
    let name = text(source, name_key);
    let Some(object) = view.object(store_key, namespace, name) else {
        return Some(format!("{what} \"{name}\" not found"));
    };
    let items = source["items"].as_array()?;
    for item in items {
        let key = text(item, "key");
        let present = ["data", "binaryData", "stringData"]
            .iter()
            .any(|field| object[*field].get(key).is_some());
        if !present {
            return Some(format!("references non-existent {what} key: {key}"));
        }
    }
    None
}

fn mounts(pod: &Value, namespace: &str, view: &dyn ClusterView) -> Option<Verdict> {
    let volumes = pod["spec"]["volumes"].as_array()?;
    for volume in volumes {
        let name = text(volume, "name");
        let mut problems = Vec::new();
        if volume["secret"].is_object() {
            problems.extend(missing_source(
                &volume["secret"],
                "secrets",
                "secretName",
                "secret",
                namespace,
                view,
            ));
        }
        if volume["configMap"].is_object() {
            problems.extend(missing_source(
                &volume["configMap"],
                "configmaps",
                "name",
                "configmap",
                namespace,
                view,
            ));
        }
        for source in volume["projected"]["sources"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if source["secret"].is_object() {
                problems.extend(missing_source(
                    &source["secret"],
                    "secrets",
                    "name",
                    "secret",
                    namespace,
                    view,
                ));
            }
            if source["configMap"].is_object() {
                problems.extend(missing_source(
                    &source["configMap"],
                    "configmaps",
                    "name",
                    "configmap",
                    namespace,
                    view,
                ));
            }
        }
        if let Some(problem) = problems.into_iter().next() {
            return Some(Verdict::MountFailed {
                volume: name.to_string(),
                message: format!("MountVolume.SetUp failed for volume \"{name}\" : {problem}"),
            });
        }
    }
    None
}

/// The kubelet's words for a key reference that cannot be resolved.
fn missing_key_ref(
    reference: &Value,
    store_key: &str,
    what: &str,
    kind: &str,
    namespace: &str,
    view: &dyn ClusterView,
) -> Option<String> {
    if optional(reference) {
        return None;
    }
    let name = text(reference, "name");
    let key = text(reference, "key");
    let Some(object) = view.object(store_key, namespace, name) else {
        return Some(format!("{what} \"{name}\" not found"));
    };
    let present = ["data", "binaryData", "stringData"]
        .iter()
        .any(|field| object[*field].get(key).is_some());
    (!present).then(|| format!("couldn't find key {key} in {kind} {namespace}/{name}"))
}

fn container_config(container: &Value, namespace: &str, view: &dyn ClusterView) -> Option<String> {
    for variable in container["env"].as_array().into_iter().flatten() {
        let from = &variable["valueFrom"];
        if from["secretKeyRef"].is_object()
            && let Some(problem) = missing_key_ref(
                &from["secretKeyRef"],
                "secrets",
                "secret",
                "Secret",
                namespace,
                view,
            )
        {
            return Some(problem);
        }
        if from["configMapKeyRef"].is_object()
            && let Some(problem) = missing_key_ref(
                &from["configMapKeyRef"],
                "configmaps",
                "configmap",
                "ConfigMap",
                namespace,
                view,
            )
        {
            return Some(problem);
        }
    }
    for source in container["envFrom"].as_array().into_iter().flatten() {
        for (field, store_key, what) in [
            ("secretRef", "secrets", "secret"),
            ("configMapRef", "configmaps", "configmap"),
        ] {
            let reference = &source[field];
            if !reference.is_object() || optional(reference) {
                continue;
            }
            let name = text(reference, "name");
            if view.object(store_key, namespace, name).is_none() {
                return Some(format!("{what} \"{name}\" not found"));
            }
        }
    }
    None
}

/// Init containers first, then the containers, each as the kubelet starts it: pull the
/// image, then resolve its configuration.
fn containers(
    pod: &Value,
    namespace: &str,
    view: &dyn ClusterView,
    images: &ImagePolicy,
) -> Option<Verdict> {
    let all = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(pod["spec"]["containers"].as_array().into_iter().flatten());
    for container in all {
        let name = text(container, "name").to_string();
        let image = text(container, "image");
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or("sim-control-plane");
        if let Some(reason) = images.pull_error(image, node, view) {
            return Some(Verdict::ImagePull {
                container: name,
                image: image.to_string(),
                reason,
            });
        }
        if let Some(message) = container_config(container, namespace, view) {
            return Some(Verdict::ConfigError {
                container: name,
                message,
            });
        }
    }
    None
}

/// The verdict for `pod`, checking in the order a real cluster does.
pub fn verdict(pod: &Value, view: &dyn ClusterView, images: &ImagePolicy) -> Verdict {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    schedule(pod, namespace, view)
        .or_else(|| mounts(pod, namespace, view))
        .or_else(|| containers(pod, namespace, view, images))
        .unwrap_or(Verdict::Runs)
}

/// The status of every container of a started pod, all in `state` (`{"running": ...}` or
/// `{"terminated": ...}`), ready or not.
pub fn started_containers(pod: &Value, ready: bool, state: &Value) -> Vec<Value> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": format!("sim://{}", c["image"].as_str().unwrap_or("")),
                   "ready": ready, "started": ready, "restartCount": 0, "state": state})
        })
        .collect()
}

/// The warning event the verdict raises: (reason, message, reporting component).
pub fn event(verdict: &Verdict) -> Option<(&'static str, String, &'static str)> {
    match verdict {
        Verdict::Unschedulable { message } => {
            Some(("FailedScheduling", message.clone(), "default-scheduler"))
        }
        Verdict::VolumeBinding { claim } => Some((
            "FailedScheduling",
            format!(
                "running PreBind plugin \"VolumeBinding\": binding volumes: persistentvolumeclaim \"{claim}\" is not bound yet"
            ),
            "default-scheduler",
        )),
        Verdict::MountFailed { message, .. } => Some(("FailedMount", message.clone(), "kubelet")),
        Verdict::ImagePull { image, reason, .. } => Some((
            "Failed",
            format!(
                "Failed to pull image \"{image}\": rpc error: code = {} desc = failed to pull and unpack image \"{image}\": {reason}",
                if reason.ends_with("not found") {
                    "NotFound"
                } else {
                    "Unknown"
                }
            ),
            "kubelet",
        )),
        Verdict::ConfigError { message, .. } => {
            Some(("Failed", format!("Error: {message}"), "kubelet"))
        }
        Verdict::Runs => None,
    }
}

/// The pod status for a verdict that keeps it from running (`None` for `Runs`). `now` stamps
/// transitions; the caller keeps the old status when the verdict did not change.
pub fn waiting_status(pod: &Value, verdict: &Verdict, now: &str) -> Option<Value> {
    let containers: Vec<&Value> = pod["spec"]["containers"]
        .as_array()
        .map(|list| list.iter().collect())
        .unwrap_or_default();
    let waiting = |reason_for: &dyn Fn(&str) -> (String, Option<String>)| -> Vec<Value> {
        containers
            .iter()
            .map(|container| {
                let name = text(container, "name");
                let (reason, message) = reason_for(name);
                let mut state = json!({"reason": reason});
                if let Some(message) = message {
                    state["message"] = json!(message);
                }
                json!({"name": name, "image": container["image"], "imageID": "", "ready": false,
                       "started": false, "restartCount": 0, "state": {"waiting": state}})
            })
            .collect()
    };
    let scheduled = |status: &str| {
        json!([
            {"type": "PodScheduled", "status": status, "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now}
        ])
    };
    let status = match verdict {
        Verdict::Runs => return None,
        Verdict::Unschedulable { message } => json!({
            "phase": "Pending", "qosClass": "BestEffort",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": message, "lastTransitionTime": now}]
        }),
        Verdict::VolumeBinding { .. } => json!({
            "phase": "Pending", "qosClass": "BestEffort",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError",
                            "message": event(verdict).map(|(_, m, _)| m).unwrap_or_default(),
                            "lastTransitionTime": now}]
        }),
        Verdict::MountFailed { .. } => json!({
            "phase": "Pending", "qosClass": "BestEffort", "hostIP": "172.18.0.2", "startTime": now,
            "conditions": scheduled("True"),
            "containerStatuses": waiting(&|_| ("ContainerCreating".to_string(), None))
        }),
        Verdict::ImagePull {
            container,
            image,
            reason,
        } => json!({
            "phase": "Pending", "qosClass": "BestEffort", "hostIP": "172.18.0.2", "startTime": now,
            "conditions": scheduled("True"),
            "containerStatuses": waiting(&|name| if name == container {
                ("ErrImagePull".to_string(), Some(format!("failed to pull and unpack image \"{image}\": {reason}")))
            } else {
                ("PodInitializing".to_string(), None)
            })
        }),
        Verdict::ConfigError { container, message } => json!({
            "phase": "Pending", "qosClass": "BestEffort", "hostIP": "172.18.0.2", "startTime": now,
            "conditions": scheduled("True"),
            "containerStatuses": waiting(&|name| if name == container {
                ("CreateContainerConfigError".to_string(), Some(message.clone()))
            } else {
                ("ContainerCreating".to_string(), None)
            })
        }),
    };
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A fixture: the pod first, then the objects of its cluster.
    struct Fixture {
        pod: Value,
        objects: BTreeMap<(String, String, String), Value>,
    }

    fn store_key(kind: &str) -> &'static str {
        match kind {
            "Secret" => "secrets",
            "ConfigMap" => "configmaps",
            "PersistentVolumeClaim" => "persistentvolumeclaims",
            "StorageClass" => "storageclasses.storage.k8s.io",
            other => panic!("fixture kind {other} is not modelled"),
        }
    }

    impl ClusterView for Fixture {
        fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value> {
            self.objects
                .get(&(store_key.into(), namespace.into(), name.into()))
                .cloned()
        }
    }

    fn fixture(text: &str) -> Fixture {
        use serde::Deserialize;
        let mut documents = serde_norway::Deserializer::from_str(text)
            .map(|document| Value::deserialize(document).expect("fixture YAML"));
        let pod = documents.next().expect("a pod first");
        let objects = documents
            .map(|object| {
                let key = (
                    store_key(object["kind"].as_str().unwrap_or("")).to_string(),
                    object["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                );
                (key, object)
            })
            .collect();
        Fixture { pod, objects }
    }

    fn verdict_of(text: &str) -> Verdict {
        let fixture = fixture(text);
        verdict(&fixture.pod, &fixture, &ImagePolicy::default())
    }

    macro_rules! fixture_file {
        ($name:literal) => {
            include_str!(concat!("../../fixtures/kubelet/", $name))
        };
    }

    #[test]
    fn a_missing_env_secret_is_a_config_error_in_the_kubelets_words() {
        let verdict = verdict_of(fixture_file!("env-secret-missing.yaml"));
        assert_eq!(
            verdict,
            Verdict::ConfigError {
                container: "webservice".into(),
                message: "secret \"gitlab-rails-storage\" not found".into()
            }
        );
        let status = waiting_status(&Value::Null, &verdict, "t").expect("status");
        assert_eq!(status["phase"], "Pending");
        let (reason, message, component) = event(&verdict).expect("event");
        assert_eq!(
            (reason, message.as_str(), component),
            (
                "Failed",
                "Error: secret \"gitlab-rails-storage\" not found",
                "kubelet"
            )
        );
    }

    #[test]
    fn the_same_pod_runs_once_the_secret_exists() {
        let mut text = fixture_file!("env-secret-missing.yaml").to_string();
        text.push_str(
            "---\napiVersion: v1\nkind: Secret\nmetadata: {name: gitlab-rails-storage, namespace: gitlab}\ndata: {connection: eA==}\n",
        );
        assert_eq!(verdict_of(&text), Verdict::Runs);
    }

    #[test]
    fn a_missing_key_names_the_key_and_the_secret() {
        let mut text = fixture_file!("env-secret-missing.yaml").to_string();
        text.push_str(
            "---\napiVersion: v1\nkind: Secret\nmetadata: {name: gitlab-rails-storage, namespace: gitlab}\ndata: {other: eA==}\n",
        );
        assert_eq!(
            verdict_of(&text),
            Verdict::ConfigError {
                container: "webservice".into(),
                message: "couldn't find key connection in Secret gitlab/gitlab-rails-storage"
                    .into()
            }
        );
    }

    #[test]
    fn optional_references_are_skipped() {
        assert_eq!(
            verdict_of(fixture_file!("optional-refs.yaml")),
            Verdict::Runs
        );
    }

    #[test]
    fn a_missing_volume_secret_fails_the_mount() {
        assert_eq!(
            verdict_of(fixture_file!("volume-secret-missing.yaml")),
            Verdict::MountFailed {
                volume: "certs".into(),
                message: "MountVolume.SetUp failed for volume \"certs\" : secret \"gitlab-wildcard-tls\" not found".into()
            }
        );
    }

    #[test]
    fn a_projected_configmap_counts_too() {
        let verdict = verdict_of(fixture_file!("projected-configmap-missing.yaml"));
        assert_eq!(
            verdict,
            Verdict::MountFailed {
                volume: "config".into(),
                message: "MountVolume.SetUp failed for volume \"config\" : configmap \"gitlab-config\" not found".into()
            }
        );
    }

    #[test]
    fn claims_decide_scheduling_first() {
        let verdict = verdict_of(fixture_file!("pvc-missing.yaml"));
        assert_eq!(
            verdict,
            Verdict::Unschedulable {
                message: "0/1 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.".into()
            }
        );
        let status = waiting_status(&Value::Null, &verdict, "t").expect("status");
        assert_eq!(status["conditions"][0]["reason"], "Unschedulable");
    }

    #[test]
    fn an_unbound_immediate_claim_is_unschedulable_and_a_late_binding_one_waits() {
        let text = fixture_file!("pvc-unbound.yaml");
        assert_eq!(
            verdict_of(text),
            Verdict::Unschedulable {
                message: scheduler_message("pod has unbound immediate PersistentVolumeClaims")
            }
        );
        let late = text.replace(
            "volumeBindingMode: Immediate",
            "volumeBindingMode: WaitForFirstConsumer",
        );
        assert_eq!(
            verdict_of(&late),
            Verdict::VolumeBinding {
                claim: "data".into()
            }
        );
    }

    #[test]
    fn images_outside_the_allow_list_cannot_be_pulled() {
        let fixture = fixture(fixture_file!("optional-refs.yaml"));
        let policy = ImagePolicy {
            allow_prefixes: vec!["docker.io/bitnamilegacy/".into()],
            deny_prefixes: Vec::new(),
            registry: None,
            nodes: None,
        };
        assert_eq!(
            verdict(&fixture.pod, &fixture, &policy),
            Verdict::ImagePull {
                container: "app".into(),
                image: "busybox:1.36".into(),
                reason: "not found".into(),
            }
        );
        assert!(ImagePolicy::default().allows("anything"));
        assert!(!ImagePolicy::default().allows("docker.io/bitnami/redis:7.2.5-debian-12-r4"));
        assert!(ImagePolicy::default().allows("docker.io/bitnamilegacy/redis:7.2.5-debian-12-r4"));
    }

    #[test]
    fn the_platform_registry_serves_nodes_only_what_jobs_pushed_under_the_name_nodes_resolve() {
        let registry = PlatformRegistry {
            node_hosts: vec!["registry.local.example.net".into()],
            cluster_hosts: vec!["gitlab-registry.gitlab.svc:5000".into()],
            pushed: Default::default(),
            network: Default::default(),
            tls: Default::default(),
        };
        let policy = ImagePolicy {
            registry: Some(registry.clone()),
            ..ImagePolicy::default()
        };
        let image = "registry.local.example.net/blueprint-apps/guestbook:latest";
        assert_eq!(
            policy.pull_error(
                image,
                "sim-control-plane",
                &fixture(fixture_file!("optional-refs.yaml"))
            ),
            Some(format!(
                "failed to resolve reference \"{image}\": {image}: not found"
            ))
        );
        assert!(
            registry.record_push("gitlab-registry.gitlab.svc:5000/blueprint-apps/guestbook:latest")
        );
        assert!(!registry.record_push("docker.io/library/guestbook:latest"));
        assert_eq!(
            policy.pull_error(
                image,
                "sim-control-plane",
                &fixture(fixture_file!("optional-refs.yaml"))
            ),
            None
        );
        assert_eq!(
            policy.pull_error(
                "registry.local.example.net/blueprint-apps/guestbook",
                "sim-control-plane",
                &fixture(fixture_file!("optional-refs.yaml"))
            ),
            None
        );
        assert!(
            policy
                .pull_error(
                    "gitlab-registry.gitlab.svc:5000/blueprint-apps/guestbook:latest",
                    "sim-control-plane",
                    &fixture(fixture_file!("optional-refs.yaml"))
                )
                .is_some_and(|error| error
                    .ends_with("dial tcp: lookup gitlab-registry.gitlab.svc: no such host"))
        );
        assert!(
            policy
                .pull_error(
                    "127.0.0.1:5000/blueprint-apps/guestbook:latest",
                    "sim-control-plane",
                    &fixture(fixture_file!("optional-refs.yaml"))
                )
                .is_some_and(
                    |error| error.ends_with("dial tcp 127.0.0.1:5000: connect: connection refused")
                )
        );
        assert_eq!(
            policy.pull_error(
                "redis:7.4.1",
                "sim-control-plane",
                &fixture(fixture_file!("optional-refs.yaml"))
            ),
            None
        );
    }
}
