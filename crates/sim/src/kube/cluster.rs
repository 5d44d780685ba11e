//! The simulated cluster's state and the API server's write semantics: server-assigned metadata,
//! rising resourceVersions, generation, defaults, validation, conflicts, patches, server-side
//! apply, status only through `/status`, namespaces that pass through Terminating, CRDs that
//! (re-)register in discovery, and a bounded event history for watches.

use super::admission;
use super::builtin_schema;
use super::crd_schema;
use super::merge;
use super::resources::{self, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::service_accounts;
use super::validation;
use super::validation::is_dns_subdomain;
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

/// An API error, rendered as a `Status` object with the reason strings clients match on.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: Value::Null,
        }
    }

    fn with_details(mut self, rt: &ResourceType, name: &str) -> ApiError {
        self.details = json!({"name": name, "group": rt.group, "kind": rt.plural});
        self
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(rt)),
        )
        .with_details(rt, name)
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn invalid(rt: &ResourceType, name: &str, causes: &str) -> ApiError {
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {causes}", qualified_kind(rt)),
        )
        .with_details(rt, name)
    }

    /// 422 Invalid with one cause per field error, as the API server reports validation.
    pub fn invalid_fields(
        rt: &ResourceType,
        name: &str,
        errors: &[validation::FieldError],
    ) -> ApiError {
        let mut error = ApiError::new(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {}",
                qualified_kind(rt),
                validation::joined(errors)
            ),
        );
        let causes: Vec<Value> = errors.iter().map(validation::FieldError::cause).collect();
        error.details = json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes});
        error
    }

    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code
        });
        // Errors that are not a Status (an InternalError from a plain Go error) carry no reason.
        if self.reason.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.remove("reason");
        }
        if !self.details.is_null() {
            status["details"] = self.details.clone();
        }
        status
    }
}

/// The decoder's refusal of unknown fields under `fieldValidation=Strict`; a whole body (create,
/// update) is also said not to be handled as its kind, a patch is not.
fn strict_decoding_error(rt: &ResourceType, whole_body: bool, fields: &[String]) -> ApiError {
    let prefix = if whole_body {
        format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: ",
            rt.version,
            kind = rt.kind
        )
    } else {
        String::new()
    };
    ApiError::bad_request(format!(
        "{prefix}strict decoding error: {}",
        fields.join(", ")
    ))
}

/// `Deployment.apps` or `Pod`, as validation errors name kinds.
fn qualified_kind(rt: &ResourceType) -> String {
    if rt.group.is_empty() || rt.kind.contains('.') {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    }
}

/// The API server's validation of a whole object, and of an update against the live one.
fn check_object(
    rt: &ResourceType,
    name: &str,
    live: Option<&Value>,
    object: &Value,
) -> Result<(), ApiError> {
    let kind = if rt.custom { "" } else { rt.kind.as_str() };
    let mut errors = validation::object(kind, object);
    if let Some(live) = live {
        errors.extend(validation::update(kind, live, object));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields(rt, name, &errors))
    }
}

/// `deployments.apps` or `pods`, as error messages name resources.
fn qualified(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

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
    pub probes: super::programs::ProbeBook,
}

impl super::kubelet::ClusterView for Cluster {
    fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value> {
        self.lookup(store_key, namespace, name).cloned()
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

    fn namespace_check(&self, rt: &ResourceType, namespace: &str) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        match self.lookup("namespaces", "", namespace) {
            None => Err(ApiError::new(
                404,
                "NotFound",
                format!("namespaces \"{namespace}\" not found"),
            )
            .with_details(
                &ResourceType {
                    plural: "namespaces".into(),
                    ..rt.clone()
                },
                namespace,
            )),
            Some(ns) if ns["status"]["phase"] == "Terminating" => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    qualified(rt),
                    ""
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// A custom resource against its CRD's structural schema (see `crd_schema`): unknown
    /// fields refused under fieldValidation=Strict, else pruned; defaults filled in; types,
    /// required fields and enums validated. A write to the main resource leaves the status
    /// (which comes from the live object) alone.
    fn structural(
        &mut self,
        rt: &ResourceType,
        name: &str,
        object: &mut Value,
        options: &WriteOptions,
        creating: bool,
    ) -> Result<(), ApiError> {
        if !rt.custom {
            return Ok(());
        }
        let crd_name = format!("{}.{}", rt.plural, rt.group);
        let Some(schema) = self
            .lookup(
                "customresourcedefinitions.apiextensions.k8s.io",
                "",
                &crd_name,
            )
            .and_then(|crd| crd_schema::version_schema(crd, &rt.version))
            .cloned()
        else {
            return Ok(());
        };
        let status_write = options.subresource.as_deref() == Some("status");
        let status = if status_write {
            None
        } else {
            object.as_object_mut().and_then(|map| map.remove("status"))
        };
        let unknown = crd_schema::prune(&schema, object);
        if options.field_validation == FieldValidation::Warn {
            self.warnings.extend(
                unknown
                    .iter()
                    .map(|path| format!("unknown field \"{path}\"")),
            );
        }
        let result = if options.field_validation == FieldValidation::Strict && !unknown.is_empty() {
            let fields: Vec<String> = unknown
                .iter()
                .map(|path| format!("unknown field \"{path}\""))
                .collect();
            Err(strict_decoding_error(rt, creating, &fields))
        } else {
            crd_schema::apply_defaults(&schema, object);
            let errors = crd_schema::validate(&schema, object);
            if errors.is_empty() {
                Ok(())
            } else {
                Err(ApiError::invalid_fields(rt, name, &errors))
            }
        };
        if let Some(status) = status {
            object["status"] = status;
        }
        result
    }

    /// What the API server's decoding and validation refuse before anything is stored: bad
    /// names, malformed Secret data, and for built-in kinds type mismatches and unknown fields
    /// at any depth (refused under fieldValidation=Strict, `Warning` headers under Warn).
    fn validate(
        &mut self,
        rt: &ResourceType,
        name: &str,
        object: &mut Value,
        options: &WriteOptions,
        decoding: Decoding,
    ) -> Result<(), ApiError> {
        validate_names_and_data(rt, name, object)?;
        // A /status write decodes the whole object too; other subresources have bodies of
        // their own kinds.
        if rt.custom
            || options
                .subresource
                .as_deref()
                .is_some_and(|sub| sub != "status")
        {
            return Ok(());
        }
        let decoded = builtin_schema::decode(&rt.kind, object);
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("");
        if let Some(error) = decoding_error(rt, name, namespace, object, &decoded, decoding) {
            return Err(error);
        }
        if decoding == Decoding::Applied || decoded.unknown.is_empty() {
            return Ok(());
        }
        let fields: Vec<String> = decoded
            .unknown
            .iter()
            .map(|path| format!("unknown field \"{path}\""))
            .collect();
        match options.field_validation {
            FieldValidation::Ignore => {
                builtin_schema::prune(&rt.kind, object);
                Ok(())
            }
            FieldValidation::Warn => {
                self.warnings.extend(fields);
                builtin_schema::prune(&rt.kind, object);
                Ok(())
            }
            FieldValidation::Strict => Err(strict_decoding_error(
                rt,
                decoding == Decoding::Body,
                &fields,
            )),
        }
    }

    /// The admission webhooks' verdict on a write (see `admission`).
    fn admit(
        &self,
        rt: &ResourceType,
        namespace: &str,
        object: &Value,
        operation: &str,
    ) -> Result<(), ApiError> {
        let mut configurations =
            self.all("mutatingwebhookconfigurations.admissionregistration.k8s.io");
        configurations
            .extend(self.all("validatingwebhookconfigurations.admissionregistration.k8s.io"));
        if configurations.is_empty() {
            return Ok(());
        }
        let namespace_labels = self
            .lookup("namespaces", "", namespace)
            .map(|ns| ns["metadata"]["labels"].clone())
            .unwrap_or(Value::Null);
        let write = admission::Write {
            resource: rt,
            operation,
            namespace_labels: &namespace_labels,
            object_labels: &object["metadata"]["labels"],
        };
        let service = |service_namespace: &str, name: &str| {
            if self.lookup("services", service_namespace, name).is_none() {
                return admission::ServiceState::Missing;
            }
            let ready = self
                .lookup("endpoints", service_namespace, name)
                .and_then(|endpoints| endpoints["subsets"].as_array())
                .is_some_and(|subsets| {
                    subsets.iter().any(|subset| {
                        subset["addresses"]
                            .as_array()
                            .is_some_and(|addresses| !addresses.is_empty())
                    })
                });
            if ready {
                admission::ServiceState::Ready
            } else {
                admission::ServiceState::NoEndpoints
            }
        };
        match admission::refusal(&configurations, &write, &service) {
            Some(message) => Err(ApiError::new(500, "InternalError", message)),
            None => Ok(()),
        }
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

    /// DELETE with background propagation (see [`Cluster::delete_with`]).
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        self.delete_with(rt, namespace, name, dry_run, Propagation::Background)
    }

    /// DELETE: namespaces turn Terminating (the namespace controller empties and removes them);
    /// an object with finalizers gets its deletionTimestamp and stays until the last finalizer
    /// is removed; other objects go at once. Their dependents (ownerReferences) go with them,
    /// or with `Orphan` lose the reference and stay.
    pub fn delete_with(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        dry_run: bool,
        propagation: Propagation,
    ) -> Result<Value, ApiError> {
        let namespace = if rt.namespaced { namespace } else { "" };
        let Some(live) = self.lookup(&rt.store_key(), namespace, name).cloned() else {
            return Err(ApiError::not_found(rt, name));
        };
        if dry_run {
            return Ok(Cluster::present(rt, &live));
        }
        if rt.kind == "Namespace" {
            if live["status"]["phase"] == "Terminating" {
                return Ok(Cluster::present(rt, &live));
            }
            let mut terminating = live.clone();
            terminating["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            terminating["status"]["phase"] = json!("Terminating");
            let stored = self
                .commit("namespaces", "", name, Some(terminating))
                .unwrap_or(Value::Null);
            return Ok(Cluster::present(rt, &stored));
        }
        if has_finalizers(&live) {
            if live["metadata"]["deletionTimestamp"].is_null() {
                let mut marked = live.clone();
                marked["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                if propagation == Propagation::Orphan {
                    self.orphan_dependents(&live);
                }
                let stored = self
                    .commit(&rt.store_key(), namespace, name, Some(marked))
                    .unwrap_or(Value::Null);
                return Ok(Cluster::present(rt, &stored));
            }
            return Ok(Cluster::present(rt, &live));
        }
        if propagation == Propagation::Orphan {
            self.orphan_dependents(&live);
        }
        self.remove_with_dependents(&rt.store_key(), namespace, name);
        if rt.kind == "CustomResourceDefinition" {
            self.unregister_crd(&live);
        }
        Ok(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": live["metadata"]["uid"]}
        }))
    }

    /// Drops the ownerReferences that name `owner` from every object (orphan propagation).
    fn orphan_dependents(&mut self, owner: &Value) {
        let uid = owner["metadata"]["uid"].clone();
        let mut orphans = Vec::new();
        for (key, objects) in &self.objects {
            for ((ns, name), object) in objects {
                if let Some(owners) = object["metadata"]["ownerReferences"].as_array()
                    && owners.iter().any(|o| o["uid"] == uid)
                {
                    let mut orphan = object.clone();
                    let kept: Vec<Value> =
                        owners.iter().filter(|o| o["uid"] != uid).cloned().collect();
                    match orphan["metadata"].as_object_mut() {
                        Some(metadata) if kept.is_empty() => {
                            metadata.remove("ownerReferences");
                        }
                        _ => orphan["metadata"]["ownerReferences"] = json!(kept),
                    }
                    orphans.push((key.clone(), ns.clone(), name.clone(), orphan));
                }
            }
        }
        for (key, ns, name, orphan) in orphans {
            self.commit(&key, &ns, &name, Some(orphan));
        }
    }

    /// Removes an object and, recursively, every object whose ownerReferences name it (the
    /// garbage collector's background propagation). An object with finalizers is only marked
    /// with a deletionTimestamp: it goes when they are removed.
    pub fn remove_with_dependents(&mut self, store_key: &str, namespace: &str, name: &str) {
        if let Some(live) = self.lookup(store_key, namespace, name)
            && has_finalizers(live)
        {
            if live["metadata"]["deletionTimestamp"].is_null() {
                let mut marked = live.clone();
                marked["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.commit(store_key, namespace, name, Some(marked));
            }
            return;
        }
        self.remove_now(store_key, namespace, name);
    }

    /// Removes an object whatever its finalizers say, then its dependents.
    fn remove_now(&mut self, store_key: &str, namespace: &str, name: &str) {
        let Some(removed) = self.commit(store_key, namespace, name, None) else {
            return;
        };
        let uid = removed["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if uid.is_empty() {
            return;
        }
        let mut dependents = Vec::new();
        for (key, objects) in &self.objects {
            for ((ns, dependent), object) in objects {
                if is_owned_by(object, &json!(uid)) {
                    dependents.push((key.clone(), ns.clone(), dependent.clone()));
                }
            }
        }
        for (key, ns, dependent) in dependents {
            self.remove_with_dependents(&key, &ns, &dependent);
        }
    }

    /// Removes every object of a namespace (the namespace controller's sweep).
    /// Deletes every object of a namespace; true when none is left (objects with finalizers
    /// stay, marked, until their finalizers are removed: the namespace stays Terminating).
    pub fn empty_namespace(&mut self, namespace: &str) -> bool {
        let mut doomed = Vec::new();
        for (key, objects) in &self.objects {
            for (ns, name) in objects.keys() {
                if ns == namespace {
                    doomed.push((key.clone(), ns.clone(), name.clone()));
                }
            }
        }
        for (key, ns, name) in &doomed {
            self.remove_with_dependents(key, ns, name);
        }
        !self
            .objects
            .values()
            .any(|objects| objects.keys().any(|(ns, _)| ns == namespace))
    }

    fn register_crd(&mut self, crd: &Value) {
        self.unregister_crd(crd);
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

fn apply_error(rt: &ResourceType, name: &str, manager: &str, error: merge::MergeError) -> ApiError {
    match error {
        merge::MergeError::Conflict(conflicts) => {
            let lines: Vec<String> = conflicts
                .iter()
                .map(|(other, field)| format!("conflict with \"{other}\": {field}"))
                .collect();
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|(other, field)| {
                    json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{other}\""), "field": field})
                })
                .collect();
            let mut error = ApiError::new(
                409,
                "Conflict",
                format!(
                    "Apply failed with {} conflict{}: {}",
                    conflicts.len(),
                    if conflicts.len() == 1 { "" } else { "s" },
                    lines.join("\n")
                ),
            );
            error.details =
                json!({"name": name, "group": rt.group, "kind": rt.plural, "causes": causes});
            let _ = manager;
            error
        }
        merge::MergeError::Invalid(message) => ApiError::invalid(rt, name, &message),
    }
}

fn patch_error(rt: &ResourceType, name: &str, error: merge::MergeError) -> ApiError {
    match error {
        merge::MergeError::Invalid(message) => {
            ApiError::new(422, "Invalid", message).with_details(rt, name)
        }
        merge::MergeError::Conflict(_) => ApiError::new(409, "Conflict", "patch conflict"),
    }
}

/// The body must be of this resource's kind and group/version.
fn check_type(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({}) or kind {kind} does not match {}",
            object["apiVersion"].as_str().unwrap_or(""),
            rt.api_version(),
            rt.kind
        )));
    }
    if let Some(api_version) = object.get("apiVersion").and_then(Value::as_str)
        && api_version != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    Ok(())
}

/// How a DELETE treats the deleted object's dependents (`propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes now, its dependents after it (the default for most kinds).
    Background,
    /// Dependents first (the simulator's end state is the same as Background).
    Foreground,
    /// Dependents stay, without the ownerReference.
    Orphan,
}

impl Propagation {
    pub fn from_name(name: &str) -> Option<Propagation> {
        match name {
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }
}

/// Whether `object` names `uid` among its owners (garbage collection, controllers).
pub fn is_owned_by(object: &Value, uid: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|owners| owners.iter().any(|owner| owner["uid"] == *uid))
}

fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|list| !list.is_empty())
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
            default(
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            default("revisionHistoryLimit", json!(10));
            default("progressDeadlineSeconds", json!(600));
        }
        "StatefulSet" => {
            default(
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            default("podManagementPolicy", json!("OrderedReady"));
            default("revisionHistoryLimit", json!(10));
            default(
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
        }
        _ => {}
    }
}

/// What the API server rejects before storing: bad names, malformed Secret data.
fn validate_names_and_data(rt: &ResourceType, name: &str, object: &Value) -> Result<(), ApiError> {
    let label_only = matches!(rt.kind.as_str(), "Namespace" | "Service");
    let valid_name = if label_only {
        is_dns_subdomain(name) && !name.contains('.') && name.len() <= 63
    } else {
        is_dns_subdomain(name)
    };
    if !valid_name && rt.kind != "Node" {
        return Err(ApiError::invalid(
            rt,
            name,
            &format!(
                "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 {} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                if label_only { "label" } else { "subdomain" }
            ),
        ));
    }
    if rt.kind == "Secret"
        && let Some(data) = object["data"].as_object()
    {
        use base64::Engine;
        for (key, value) in data {
            let text = value.as_str().unwrap_or_default();
            if base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_err()
            {
                return Err(ApiError::bad_request(format!(
                    "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 0 (data.{key})"
                )));
            }
        }
    }
    if rt.kind == "ConfigMap"
        && let Some(data) = object["data"].as_object()
        && let Some((key, _)) = data.iter().find(|(_, value)| !value.is_string())
    {
        return Err(ApiError::bad_request(format!(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal non-string into Go struct field ConfigMap.data of type string (data.{key})"
        )));
    }
    Ok(())
}

/// A decoding error of a built-in kind (a type mismatch; under server-side apply an undeclared
/// field too), worded after how the body was decoded.
fn decoding_error(
    rt: &ResourceType,
    name: &str,
    namespace: &str,
    object: &Value,
    decoded: &builtin_schema::Decoded,
    decoding: Decoding,
) -> Option<ApiError> {
    if decoding == Decoding::Applied
        && let Some(errors) = builtin_schema::apply_errors(&rt.kind, object)
    {
        // structured-merge-diff types the applied object whatever fieldValidation says, and
        // its error is not a Status: the API server answers 500 without a reason.
        return Some(ApiError::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({namespace}/{name}; {}, Kind={}): {errors}",
                rt.api_version(),
                rt.kind
            ),
        ));
    }
    let type_error = decoded.type_error.as_ref()?;
    Some(match decoding {
        Decoding::Patched => ApiError::new(
            422,
            "Invalid",
            format!(
                " \"\" is invalid: patch: Invalid value: {:?}: {type_error}",
                object.to_string()
            ),
        ),
        // A create's or an update's body; an applied object that structured-merge-diff took
        // (a malformed quantity) fails when converted, in words close to these.
        _ => ApiError::bad_request(format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: {type_error}",
            rt.version,
            kind = rt.kind
        )),
    })
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
