//! The simulated cluster's state and the API server's write semantics: server-assigned metadata,
//! rising resourceVersions, generation, defaults, validation, conflicts, patches, server-side
//! apply, status only through `/status`, namespaces that pass through Terminating, CRDs that
//! (re-)register in discovery, and a bounded event history for watches.

mod checks;
mod deletion;
mod errors;

use super::merge;
use super::resources::{self, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::service_accounts;
use checks::{check_object, check_type};
use deletion::has_finalizers;
pub use deletion::{Propagation, is_owned_by};
pub use errors::ApiError;
use errors::{apply_error, patch_error, qualified};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// How many past events a watch can resume from.
const HISTORY: usize = 20_000;

/// A change, as a watch sees it.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub resource_version: u64,
    pub store_key: String,
    pub namespace: String,
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    pub object: Value,
}

use super::runtime::now_rfc3339;

/// The kinds of write a patch request can carry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Options every write takes.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub manager: String,
    pub dry_run: bool,
    pub force: bool,
    /// What unknown fields do (`fieldValidation`).
    pub field_validation: FieldValidation,
    pub subresource: Option<String>,
    /// Who asks, when it is not the cluster admin or a controller: RBAC's escalation check
    /// applies to its Role and binding writes.
    pub requester: Option<crate::kube::rbac::Identity>,
}

/// The `fieldValidation` parameter: unknown fields refused (kubectl and helm send Strict),
/// reported as `Warning` headers (the API server's default), or dropped silently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// The controllers' own writes: nothing to report to.
    #[default]
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// The query parameter's value; absent means Warn, as on the API server.
    pub fn from_query(value: Option<&str>) -> FieldValidation {
        match value {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        }
    }
}

/// How the body being validated was decoded: the API server words its errors after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoding {
    /// A create's or an update's body: `Deployment in version "v1" cannot be handled as ...`.
    Body,
    /// The result of a JSON, merge or strategic merge patch.
    Patched,
    /// A server-side apply patch (typed by structured-merge-diff).
    Applied,
}

/// The ClusterIP of `default/kubernetes`, the first of kind's Service range.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

pub struct Cluster {
    /// The answer's `Warning` headers of the write in progress (unknown fields under Warn).
    pub warnings: Vec<String>,
    pub resources: Vec<ResourceType>,
    /// store key -> (namespace, name) -> object
    objects: BTreeMap<String, BTreeMap<(String, String), Value>>,
    resource_version: u64,
    history: VecDeque<Arc<WatchEvent>>,
    events: tokio::sync::broadcast::Sender<Arc<WatchEvent>>,
    next_ip: u32,
    /// Which images the simulated node can pull.
    pub images: super::kubelet::ImagePolicy,
    /// The cluster CA in PEM, published in every namespace's `kube-root-ca.crt` ConfigMap.
    pub root_ca_pem: String,
    /// The containers' readiness probes the programs run, and their verdicts (`programs`).
    pub probes: super::runtime::ProbeBook,
}

impl super::kubelet::ClusterView for Cluster {
    fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value> {
        self.lookup(store_key, namespace, name).cloned()
    }

    fn objects(&self, store_key: &str) -> Vec<Value> {
        self.all(store_key)
    }
}

impl super::runtime::Store for Cluster {
    fn all(&self, store_key: &str) -> Vec<Value> {
        Cluster::all(self, store_key)
    }

    fn probes(&self) -> &super::runtime::ProbeBook {
        &self.probes
    }

    fn probes_mut(&mut self) -> &mut super::runtime::ProbeBook {
        &mut self.probes
    }

    fn view(&self) -> &dyn super::kubelet::ClusterView {
        self
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster::new()
    }
}

impl Cluster {
    pub fn new() -> Cluster {
        let (events, _) = tokio::sync::broadcast::channel(4096);
        let mut cluster = Cluster {
            warnings: Vec::new(),
            resources: resources::builtin(),
            objects: BTreeMap::new(),
            resource_version: 100,
            history: VecDeque::new(),
            events,
            next_ip: 10,
            images: Default::default(),
            root_ca_pem: String::new(),
            probes: Default::default(),
        };
        let namespaces = cluster.resource("", "v1", "namespaces");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if let Some(rt) = &namespaces {
                let _ = cluster.create(
                    rt,
                    "",
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
                    &WriteOptions {
                        manager: "kube-apiserver".into(),
                        ..Default::default()
                    },
                );
            }
        }
        // The API server's own Service and Endpoints (its address on kind's node network), as
        // kube-apiserver keeps them: pods reach the API at `kubernetes.default.svc`.
        for (resource, object) in [
            (
                "services",
                json!({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": "kubernetes", "namespace": "default",
                                    "labels": {"component": "apiserver", "provider": "kubernetes"}},
                       "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP,
                                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}}),
            ),
            (
                "endpoints",
                json!({"apiVersion": "v1", "kind": "Endpoints",
                       "metadata": {"name": "kubernetes", "namespace": "default",
                                    "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                       "subsets": [{"addresses": [{"ip": "172.18.0.2"}],
                                    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]}),
            ),
        ] {
            if let Some(rt) = cluster.resource("", "v1", resource) {
                let _ = cluster.create(
                    &rt,
                    "default",
                    object,
                    &WriteOptions {
                        manager: "kube-apiserver".into(),
                        ..Default::default()
                    },
                );
            }
        }
        if let Some(nodes) = cluster.resource("", "v1", "nodes") {
            let _ = cluster.create(
                &nodes,
                "",
                json!({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": "sim-control-plane", "labels": {"kubernetes.io/hostname": "sim-control-plane", "node-role.kubernetes.io/control-plane": ""}},
                       "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                                  "nodeInfo": {"kubeletVersion": "v1.35.0", "containerRuntimeVersion": "containerd://2.1.0", "osImage": "bprun simulator"}}}),
                &WriteOptions {
                    manager: "kubelet".into(),
                    ..Default::default()
                },
            );
        }
        cluster
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// A served resource by group, version and plural.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// A served resource by kind and apiVersion.
    pub fn resource_for_kind(&self, api_version: &str, kind: &str) -> Option<ResourceType> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
            .cloned()
    }

    /// Events after `resource_version`, or None when that version is older than the history.
    pub fn events_since(&self, resource_version: u64) -> Option<Vec<Arc<WatchEvent>>> {
        if let Some(oldest) = self.history.front()
            && resource_version + 1 < oldest.resource_version
        {
            return None;
        }
        Some(
            self.history
                .iter()
                .filter(|event| event.resource_version > resource_version)
                .cloned()
                .collect(),
        )
    }

    fn objects_of(&self, rt: &ResourceType) -> Option<&BTreeMap<(String, String), Value>> {
        self.objects.get(&rt.store_key())
    }

    /// The object as clients see it for this resource's version.
    fn present(rt: &ResourceType, object: &Value) -> Value {
        let mut object = object.clone();
        object["apiVersion"] = json!(rt.api_version());
        object["kind"] = json!(rt.kind);
        object
    }

    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.objects_of(rt)
            .and_then(|objects| objects.get(&(namespace.to_string(), name.to_string())))
            .map(|object| Cluster::present(rt, object))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        self.objects_of(rt)
            .map(|objects| {
                objects
                    .iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|wanted| wanted == ns))
                    .filter(|(_, object)| labels.matches(&object["metadata"]["labels"]))
                    .filter(|(_, object)| fields.matches(object))
                    .map(|(_, object)| Cluster::present(rt, object))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every object of a store key (controllers' view).
    /// What etcd would keep of the store: every object by its store key, the last
    /// resourceVersion and the next Service IP (see `kube::persist`).
    pub fn export(&self) -> (u64, u32, BTreeMap<String, Vec<Value>>) {
        let objects = self
            .objects
            .iter()
            .map(|(key, objects)| (key.clone(), objects.values().cloned().collect()))
            .collect();
        (self.resource_version, self.next_ip, objects)
    }

    /// The store as `export` left it: its objects, resourceVersion and Service IPs go on from
    /// there, the custom resources of its CRDs are served again. Watches are not kept: a
    /// client's watch from an older resourceVersion is answered as after an API server restart.
    pub fn import(
        &mut self,
        resource_version: u64,
        next_ip: u32,
        objects: BTreeMap<String, Vec<Value>>,
    ) {
        self.objects = objects
            .into_iter()
            .map(|(key, objects)| {
                let keyed = objects
                    .into_iter()
                    .map(|object| {
                        let metadata = &object["metadata"];
                        let namespace = metadata["namespace"].as_str().unwrap_or("").to_string();
                        let name = metadata["name"].as_str().unwrap_or("").to_string();
                        ((namespace, name), object)
                    })
                    .collect();
                (key, keyed)
            })
            .collect();
        self.resource_version = self.resource_version.max(resource_version);
        self.next_ip = self.next_ip.max(next_ip);
        self.history.clear();
        let crds: Vec<Value> = self
            .objects
            .values()
            .flat_map(|objects| objects.values())
            .filter(|object| object["kind"] == "CustomResourceDefinition")
            .cloned()
            .collect();
        for crd in &crds {
            if let Ok(served) = resources::from_crd(crd) {
                self.resources.extend(served);
            }
        }
    }

    /// The pods of a node that restarted (a kind node after `docker restart`): every pod that
    /// had not ended is Pending again with its containers to be created, so the kubelet starts
    /// them anew and they turn Ready only when their probes pass again. Their workloads count
    /// them unready meanwhile.
    pub fn restart_pods(&mut self, now: &str) {
        for pod in self.all("pods") {
            let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
            if matches!(phase, "Succeeded" | "Failed")
                || pod["metadata"]["deletionTimestamp"].is_string()
            {
                continue;
            }
            let mut restarted = pod.clone();
            restarted["status"] = json!({
                "phase": "Pending", "qosClass": "BestEffort",
                "hostIP": pod["status"]["hostIP"], "startTime": now,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "False", "lastTransitionTime": now},
                    {"type": "Ready", "status": "False", "lastTransitionTime": now}
                ]
            });
            let namespace = pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
            self.commit("pods", &namespace, &name, Some(restarted));
        }
    }

    pub fn all(&self, store_key: &str) -> Vec<Value> {
        self.objects
            .get(store_key)
            .map(|objects| objects.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn lookup(&self, store_key: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(store_key)?
            .get(&(namespace.to_string(), name.to_string()))
    }

    /// Stores an object (or removes it when `object` is None), bumping the resourceVersion and
    /// telling watchers.
    pub fn commit(
        &mut self,
        store_key: &str,
        namespace: &str,
        name: &str,
        object: Option<Value>,
    ) -> Option<Value> {
        self.resource_version += 1;
        let version = self.resource_version;
        let objects = self.objects.entry(store_key.to_string()).or_default();
        let key = (namespace.to_string(), name.to_string());
        let (kind, stored) = match object {
            Some(mut object) => {
                object["metadata"]["resourceVersion"] = json!(version.to_string());
                let kind = if objects.contains_key(&key) {
                    "MODIFIED"
                } else {
                    "ADDED"
                };
                objects.insert(key, object.clone());
                (kind, object)
            }
            None => {
                let mut removed = objects.remove(&key)?;
                removed["metadata"]["resourceVersion"] = json!(version.to_string());
                ("DELETED", removed)
            }
        };
        let event = Arc::new(WatchEvent {
            resource_version: version,
            store_key: store_key.to_string(),
            namespace: namespace.to_string(),
            kind,
            object: stored.clone(),
        });
        if self.history.len() >= HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(event.clone());
        let _ = self.events.send(event);
        Some(stored)
    }

    pub fn create(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        body: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.create_inner(rt, namespace, body, options, false)
    }

    /// `applied`: the body comes from server-side apply and carries its Apply entry already.
    fn create_inner(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        body: Value,
        options: &WriteOptions,
        applied: bool,
    ) -> Result<Value, ApiError> {
        let mut object = body;
        let applied_fields = object["metadata"]["managedFields"].clone();
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not an object",
            ));
        }
        check_type(rt, &object)?;
        let name_for_admission = service_accounts::name_for_errors(&object);
        let mut name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            match object["metadata"]["generateName"].as_str() {
                Some(prefix) if !prefix.is_empty() => {
                    let suffix: String = (0..5)
                        .map(|_| {
                            let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
                            alphabet[fastrand::usize(..alphabet.len())] as char
                        })
                        .collect();
                    name = format!("{prefix}{suffix}");
                    object["metadata"]["name"] = json!(name);
                }
                _ => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            }
        }
        let namespace = self.scope_namespace(rt, namespace, &mut object, &name)?;
        self.namespace_check(rt, &namespace)?;
        if self.lookup(&rt.store_key(), &namespace, &name).is_some() {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", qualified(rt)),
            )
            .with_details(rt, &name));
        }
        if !applied {
            self.validate(rt, &name, &mut object, options, Decoding::Body)?;
        }
        if rt.kind == "Pod" {
            let account = self
                .lookup(
                    "serviceaccounts",
                    &namespace,
                    service_accounts::account_of(&object["spec"]),
                )
                .cloned();
            service_accounts::admit(
                &mut object,
                &name_for_admission,
                &namespace,
                account.as_ref(),
                &random_suffix(),
            )
            .map_err(|message| {
                ApiError::new(403, "Forbidden", message).with_details(rt, &name_for_admission)
            })?;
        }
        self.confirm_no_escalation(rt, &namespace, &object, None, options)?;
        self.admit(rt, &namespace, &object, "CREATE")?;
        let object_has_spec = object.get("spec").is_some();
        let metadata = object["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        for server_owned in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "managedFields",
            "selfLink",
        ] {
            metadata.remove(server_owned);
        }
        metadata.insert("uid".into(), json!(new_uid()));
        metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
        // Like the API server: objects with a spec (and custom resources) have a generation;
        // ConfigMaps, Secrets and the like do not.
        if object_has_spec || rt.custom {
            metadata.insert("generation".into(), json!(1));
        }
        if rt.subresources.iter().any(|s| s == "status") && rt.kind != "Node" {
            // Create ignores status for resources that have a status subresource.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        self.apply_defaults(rt, &mut object);
        object["apiVersion"] = json!(rt.api_version());
        object["kind"] = json!(rt.kind);
        if applied {
            object["metadata"]["managedFields"] = applied_fields;
        } else {
            merge::record_update(
                None,
                &mut object,
                manager_or_default(&options.manager),
                &rt.api_version(),
                &now_rfc3339(),
                None,
            );
        }
        if rt.kind == "CustomResourceDefinition" {
            resources::from_crd(&object)
                .map_err(|message| ApiError::invalid(rt, &name, &message))?;
        }
        self.structural(rt, &name, &mut object, options, true)?;
        check_object(rt, &name, None, &object)?;
        if options.dry_run {
            return Ok(Cluster::present(rt, &object));
        }
        let stored = self
            .commit(&rt.store_key(), &namespace, &name, Some(object))
            .unwrap_or(Value::Null);
        if rt.kind == "CustomResourceDefinition" {
            self.register_crd(&stored);
        }
        Ok(Cluster::present(rt, &stored))
    }

    /// The namespace an object lands in, checking the body against the URL.
    fn scope_namespace(
        &self,
        rt: &ResourceType,
        namespace: &str,
        object: &mut Value,
        name: &str,
    ) -> Result<String, ApiError> {
        if !rt.namespaced {
            if let Some(map) = object["metadata"].as_object_mut() {
                map.remove("namespace");
            }
            return Ok(String::new());
        }
        let body_namespace = object["metadata"]["namespace"].as_str().unwrap_or("");
        if !body_namespace.is_empty() && body_namespace != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )
            .with_details(rt, name));
        }
        object["metadata"]["namespace"] = json!(namespace);
        Ok(namespace.to_string())
    }

    /// PUT: replaces the object (or its status), checking the resourceVersion.
    pub fn update(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: Value,
        options: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        let mut object = body;
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not an object",
            ));
        }
        check_type(rt, &object)?;
        let body_name = object["metadata"]["name"].as_str().unwrap_or("");
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let namespace = self.scope_namespace(rt, namespace, &mut object, name)?;
        let Some(live) = self.lookup(&rt.store_key(), &namespace, name).cloned() else {
            if options.subresource.is_some() {
                return Err(ApiError::not_found(rt, name));
            }
            // PUT creates when the object is missing (allowCreateOnUpdate for most kinds).
            return self
                .create(rt, &namespace, object, options)
                .map(|created| (created, true));
        };
        let sent_version = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if sent_version.is_empty()
            && !matches!(rt.kind.as_str(), "ConfigMap" | "Secret" | "Namespace")
            && !rt.custom
        {
            return Err(ApiError::invalid(
                rt,
                name,
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            ));
        }
        if !sent_version.is_empty()
            && live["metadata"]["resourceVersion"].as_str() != Some(sent_version)
        {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    qualified(rt)
                ),
            )
            .with_details(rt, name));
        }
        self.write_over(rt, &namespace, name, &live, object, options, Decoding::Body)
            .map(|value| (value, false))
    }

    /// Stores `object` over `live`: server-owned metadata kept, status only through /status,
    /// generation bumped on spec changes, no-op writes leave the resourceVersion alone.
    #[allow(clippy::too_many_arguments)]
    fn write_over(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        live: &Value,
        mut object: Value,
        options: &WriteOptions,
        decoding: Decoding,
    ) -> Result<Value, ApiError> {
        self.validate(rt, name, &mut object, options, decoding)?;
        let status_write = options.subresource.as_deref() == Some("status");
        if status_write {
            // Only the status comes from the body of a /status write.
            let status = object.get("status").cloned();
            object = live.clone();
            match status {
                Some(status) => object["status"] = status,
                None => {
                    if let Some(map) = object.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
        }
        let keep_live_status = !status_write && rt.subresources.iter().any(|s| s == "status");
        self.carry_server_fields(rt, live, &mut object, keep_live_status);
        if object["metadata"].get("managedFields").is_none() {
            object["metadata"]["managedFields"] = live["metadata"]["managedFields"].clone();
        }
        merge::record_update(
            Some(live),
            &mut object,
            manager_or_default(&options.manager),
            &rt.api_version(),
            &now_rfc3339(),
            options.subresource.as_deref(),
        );
        self.store_over(rt, namespace, name, live, object, options)
    }

    /// PATCH of any type; apply patches create missing objects (the bool says created).
    pub fn patch(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        patch: Value,
        options: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        let namespace = if rt.namespaced { namespace } else { "" };
        let live = self.lookup(&rt.store_key(), namespace, name).cloned();
        if patch_type == PatchType::Apply {
            if options.manager.is_empty() {
                return Err(ApiError::invalid(
                    &ResourceType {
                        kind: "PatchOptions.meta.k8s.io".into(),
                        ..rt.clone()
                    },
                    "",
                    "fieldManager: Required value: is required for apply patch",
                ));
            }
            if !patch.is_object() {
                return Err(ApiError::bad_request("apply patch must be an object"));
            }
            check_type(rt, &patch)?;
            let applied_name = patch["metadata"]["name"].as_str().unwrap_or("");
            if applied_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({applied_name}) does not match the name on the URL ({name})"
                )));
            }
            let mut patch = patch;
            self.validate(rt, name, &mut patch, options, Decoding::Applied)?;
            let mut applied = patch.clone();
            if options.subresource.as_deref() != Some("status")
                && let Some(map) = applied.as_object_mut()
            {
                map.remove("status");
            }
            let result = merge::server_side_apply(
                live.as_ref(),
                &merge::Apply {
                    applied: &applied,
                    manager: &options.manager,
                    force: options.force,
                    kind: &rt.kind,
                    api_version: &rt.api_version(),
                    time: &now_rfc3339(),
                },
            )
            .map_err(|error| apply_error(rt, name, &options.manager, error))?;
            return match live {
                None => self
                    .create_inner(rt, namespace, result, options, true)
                    .map(|created| (created, true)),
                // server_side_apply already recorded the Apply entry.
                Some(live) => self
                    .write_applied(rt, namespace, name, &live, result, options)
                    .map(|value| (value, false)),
            };
        }
        let Some(live) = live else {
            return Err(ApiError::not_found(rt, name));
        };
        let patched = match patch_type {
            PatchType::Json => {
                merge::json_patch(&live, &patch).map_err(|error| patch_error(rt, name, error))?
            }
            PatchType::Merge => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("merge patch must be an object"));
                }
                merge::json_merge_patch(&live, &patch)
            }
            PatchType::Strategic => {
                if rt.custom {
                    return Err(ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    ));
                }
                merge::strategic_merge_patch(&live, &patch, &rt.kind)
                    .map_err(|error| patch_error(rt, name, error))?
            }
            // Apply patches returned above; a defined answer keeps the match total.
            PatchType::Apply => {
                return Err(ApiError::bad_request(
                    "apply patches go through server-side apply",
                ));
            }
        };
        let mut patched = patched;
        if patched["metadata"]["name"].as_str() != Some(name) {
            patched["metadata"]["name"] = json!(name);
        }
        let namespace = namespace.to_string();
        self.write_over(
            rt,
            &namespace,
            name,
            &live,
            patched,
            options,
            Decoding::Patched,
        )
        .map(|value| (value, false))
    }

    /// Stores the result of an apply over `live`, keeping server-owned metadata and status.
    fn write_applied(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        live: &Value,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let keep_live_status = options.subresource.as_deref() != Some("status");
        self.carry_server_fields(rt, live, &mut object, keep_live_status);
        self.store_over(rt, namespace, name, live, object, options)
    }

    /// What a client cannot set comes from `live`: uid, creation time, generation, deletion
    /// time, resourceVersion, and the status unless this write owns it; then defaults, and the
    /// resource's apiVersion and kind.
    fn carry_server_fields(
        &mut self,
        rt: &ResourceType,
        live: &Value,
        object: &mut Value,
        keep_live_status: bool,
    ) {
        if keep_live_status {
            match live.get("status") {
                Some(status) => object["status"] = status.clone(),
                None => {
                    if let Some(map) = object.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
        }
        for kept in [
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "resourceVersion",
        ] {
            match live["metadata"].get(kept) {
                Some(value) => object["metadata"][kept] = value.clone(),
                None => {
                    if let Some(map) = object["metadata"].as_object_mut() {
                        map.remove(kept);
                    }
                }
            }
        }
        self.apply_defaults(rt, object);
        object["apiVersion"] = json!(rt.api_version());
        object["kind"] = json!(rt.kind);
    }

    /// The end of every write over a live object: generation bumped when the spec changed, a
    /// CRD validated and (re-)registered, a no-op left alone (same resourceVersion), a dry run
    /// answered without storing.
    fn store_over(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        live: &Value,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let dry_run = options.dry_run;
        self.structural(rt, name, &mut object, options, false)?;
        if options.subresource.as_deref() != Some("status") {
            check_object(rt, name, Some(live), &object)?;
        }
        // Status writes go to a subresource that webhooks on the resource do not intercept.
        if options.subresource.is_none() {
            self.confirm_no_escalation(rt, namespace, &object, Some(live), options)?;
            self.admit(rt, namespace, &object, "UPDATE")?;
        }
        if let Some(generation) = live["metadata"]["generation"].as_i64()
            && spec_of(live) != spec_of(&object)
        {
            object["metadata"]["generation"] = json!(generation + 1);
        }
        if rt.kind == "CustomResourceDefinition" {
            resources::from_crd(&object)
                .map_err(|message| ApiError::invalid(rt, name, &message))?;
        }
        if same_ignoring_times(live, &object) {
            return Ok(Cluster::present(rt, live));
        }
        if dry_run {
            return Ok(Cluster::present(rt, &object));
        }
        // The last finalizer of an object being deleted is gone: now it goes.
        if object["metadata"]["deletionTimestamp"].is_string() && !has_finalizers(&object) {
            self.remove_now(&rt.store_key(), namespace, name);
            return Ok(Cluster::present(rt, &object));
        }
        let stored = self
            .commit(&rt.store_key(), namespace, name, Some(object))
            .unwrap_or(Value::Null);
        if rt.kind == "CustomResourceDefinition" {
            self.register_crd(&stored);
        }
        Ok(Cluster::present(rt, &stored))
    }

    /// A created or updated CRD serves its resources as it now says; an update keeps the
    /// custom resources stored (an operator chart's upgrade re-applies its CRDs).
    fn register_crd(&mut self, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or("");
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or("");
        self.resources
            .retain(|r| !(r.custom && r.group == group && r.plural == plural));
        if let Ok(served) = resources::from_crd(crd) {
            self.resources.extend(served);
        }
    }

    /// A deleted CRD takes its custom resources with it, as the API server does.
    fn unregister_crd(&mut self, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or("");
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or("");
        let store_key = format!("{plural}.{group}");
        let doomed: Vec<(String, String)> = self
            .objects
            .get(&store_key)
            .map(|objects| objects.keys().cloned().collect())
            .unwrap_or_default();
        for (namespace, name) in doomed {
            self.commit(&store_key, &namespace, &name, None);
        }
        self.resources
            .retain(|r| !(r.custom && r.group == group && r.plural == plural));
    }

    /// Defaults the API server fills in (only those clients and controllers look at).
    fn apply_defaults(&mut self, rt: &ResourceType, object: &mut Value) {
        match rt.kind.as_str() {
            "Secret" => {
                if let Some(string_data) = object
                    .as_object_mut()
                    .and_then(|map| map.remove("stringData"))
                    && let Some(entries) = string_data.as_object()
                {
                    use base64::Engine;
                    for (key, value) in entries {
                        let text = value.as_str().unwrap_or_default();
                        object["data"][key] =
                            json!(base64::engine::general_purpose::STANDARD.encode(text));
                    }
                }
                if object.get("type").is_none() {
                    object["type"] = json!("Opaque");
                }
            }
            "Namespace" => {
                if object["status"]["phase"].is_null() {
                    object["status"] = json!({"phase": "Active"});
                }
                if object["spec"]["finalizers"].is_null() {
                    object["spec"] = json!({"finalizers": ["kubernetes"]});
                }
                let name = object["metadata"]["name"].clone();
                object["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
            }
            "Service" => {
                let spec = &mut object["spec"];
                if spec["type"].is_null() {
                    spec["type"] = json!("ClusterIP");
                }
                if spec["clusterIP"].is_null() && spec["type"] != "ExternalName" {
                    self.next_ip += 1;
                    let ip = format!("10.96.{}.{}", self.next_ip / 250, self.next_ip % 250 + 1);
                    spec["clusterIP"] = json!(ip);
                    spec["clusterIPs"] = json!([ip]);
                }
                if spec["sessionAffinity"].is_null() {
                    spec["sessionAffinity"] = json!("None");
                }
                if let Some(ports) = spec["ports"].as_array_mut() {
                    for port in ports {
                        if port["protocol"].is_null() {
                            port["protocol"] = json!("TCP");
                        }
                        if port["targetPort"].is_null() {
                            port["targetPort"] = port["port"].clone();
                        }
                    }
                }
            }
            "Deployment" | "StatefulSet" | "ReplicaSet" => workload_defaults(&rt.kind, object),
            "PersistentVolumeClaim" => {
                if object["spec"]["volumeMode"].is_null() {
                    object["spec"]["volumeMode"] = json!("Filesystem");
                }
                if object["status"]["phase"].is_null() {
                    object["status"]["phase"] = json!("Pending");
                }
            }
            "Pod" => {
                if object["status"]["phase"].is_null() {
                    object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
                }
                if object["spec"]["nodeName"].is_null() {
                    object["spec"]["nodeName"] = json!("sim-control-plane");
                }
            }
            _ => {}
        }
    }
}

fn manager_or_default(manager: &str) -> &str {
    if manager.is_empty() {
        "unknown"
    } else {
        manager
    }
}

/// The API server's defaults for workloads (kubectl's rollout commands read them).
fn workload_defaults(kind: &str, object: &mut Value) {
    let spec = &mut object["spec"];
    let mut default = |key: &str, value: Value| {
        if spec[key].is_null() {
            spec[key] = value;
        }
    };
    default("replicas", json!(1));
    match kind {
        "Deployment" => {
            default("revisionHistoryLimit", json!(10));
            default("progressDeadlineSeconds", json!(600));
            // As SetDefaults_Deployment: an empty strategy (`strategy: {}`, as a protobuf body
            // from `kubectl create deployment` has it) is a rolling update of 25 % / 25 %.
            rolling_update_default(
                &mut spec["strategy"],
                &[("maxUnavailable", json!("25%")), ("maxSurge", json!("25%"))],
            );
        }
        "StatefulSet" => {
            default("podManagementPolicy", json!("OrderedReady"));
            default("revisionHistoryLimit", json!(10));
            default(
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            rolling_update_default(&mut spec["updateStrategy"], &[("partition", json!(0))]);
        }
        _ => {}
    }
}

/// A strategy's defaults: no type is `RollingUpdate`, whose parameters default one by one.
fn rolling_update_default(strategy: &mut Value, parameters: &[(&str, Value)]) {
    if strategy["type"].as_str().is_none_or(str::is_empty) {
        strategy["type"] = json!("RollingUpdate");
    }
    if strategy["type"] != "RollingUpdate" {
        return;
    }
    let rolling = &mut strategy["rollingUpdate"];
    for (key, value) in parameters {
        if rolling[*key].is_null() {
            rolling[*key] = value.clone();
        }
    }
}

/// Everything but metadata and status: what bumps `generation`.
fn spec_of(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
        map.remove("apiVersion");
        map.remove("kind");
    }
    copy
}

/// Equal apart from managedFields timestamps and the resourceVersion: a no-op write.
fn same_ignoring_times(a: &Value, b: &Value) -> bool {
    fn normalise(object: &Value) -> Value {
        let mut copy = object.clone();
        if let Some(metadata) = copy["metadata"].as_object_mut() {
            metadata.remove("resourceVersion");
            if let Some(Value::Array(entries)) = metadata.get_mut("managedFields") {
                for entry in entries {
                    if let Some(map) = entry.as_object_mut() {
                        map.remove("time");
                    }
                }
            }
        }
        copy
    }
    normalise(a) == normalise(b)
}

/// Five characters as the API server generates names (`generateName`, `kube-api-access-`).
pub fn random_suffix() -> String {
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| alphabet[fastrand::usize(..alphabet.len())] as char)
        .collect()
}

pub fn new_uid() -> String {
    let hex: String = (0..32)
        .map(|_| char::from_digit(fastrand::u32(..16), 16).unwrap_or('0'))
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A map with the given entries (helper for controllers).
pub fn object_map(entries: &[(&str, Value)]) -> Value {
    let mut map = Map::new();
    for (key, value) in entries {
        map.insert(key.to_string(), value.clone());
    }
    Value::Object(map)
}
