//! Kubernetes through kube-rs: one client per run (KUBECONFIG, in-cluster, or a named
//! context), kinds resolved through discovery (re-discovered when a kind is missing, e.g.
//! right after its CRD), server-side apply with the field manager `bprun`, polling waits with
//! explicit timeouts, exec and port-forward over WebSockets. Plain Rust: no rhai here.

use super::kube_conditions::{self, Readiness};
use crate::error::{ClientError, ErrorKind};
use futures::StreamExt;
use kube::api::{
    Api, AttachParams, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, WatchParams,
};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The field manager of every bprun write.
pub const FIELD_MANAGER: &str = "bprun";
/// Attempts of a retried call (reads and applies, which are idempotent).
const ATTEMPTS: u32 = 4;

pub struct KubeClient {
    client: kube::Client,
    discovery: Mutex<Option<Discovery>>,
    pub context: String,
    pub server: String,
    pub default_namespace: String,
    /// The kubeconfig file in use, when one is.
    pub kubeconfig_path: Option<std::path::PathBuf>,
    /// Without a kubeconfig file (a pod's service account): the CA certificates (DER) and the
    /// token file the connection uses, to write a kubeconfig from.
    in_cluster: Option<(Vec<Vec<u8>>, Option<String>)>,
}

/// What `secret_write` did: whether it changed the Secret, and its data before and after
/// (`{kind: Secret, data}`, base64 values: hide them before showing).
#[derive(Debug, Clone, PartialEq)]
pub struct SecretWritten {
    pub changed: bool,
    pub before: Option<Value>,
    pub after: Value,
}

/// One object's outcome in `apply`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Applied {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// created, configured or unchanged; in a dry run also "created (its kind is not served
    /// yet)" for an object whose CRD a planned step would install.
    pub action: &'static str,
    /// The object before and after (the server's answer; a dry run's in check mode), without
    /// the fields the server keeps for itself, for `--diff`; None where there is none.
    pub before: Option<Value>,
    pub after: Option<Value>,
}

#[derive(Debug, Clone, Default)]
pub struct ExecResult {
    pub code: i64,
    pub stdout: String,
    pub stderr: String,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    super::runtime::runtime().block_on(future)
}

/// The operator's words for a kube-rs error, keeping the server's status and reason.
fn describe_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!(
            "{} {}: {}",
            status.code,
            if status.reason.is_empty() {
                "Error"
            } else {
                status.reason.as_str()
            },
            status.message
        ),
        other => super::error_chain(other),
    }
}

fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

fn transient(error: &kube::Error) -> bool {
    match status_code(error) {
        Some(code) => matches!(code, 429 | 500 | 502 | 503 | 504),
        None => matches!(error, kube::Error::HyperError(_) | kube::Error::Service(_)),
    }
}

fn api_error(what: &str, error: &kube::Error) -> ClientError {
    let hint = match status_code(error) {
        Some(401) => "the cluster refused the credentials: check KUBECONFIG and its user",
        Some(403) => "the kubeconfig's user may not do this: check its RBAC",
        Some(404) => "check the kind, namespace and name (`kube_list` shows what exists)",
        Some(409) => "someone else changed or owns it: read it again, or apply with force",
        Some(422) | Some(400) => "the object is invalid: the message names the field",
        Some(_) => "the API server refused the request",
        None => "is the cluster reachable? check KUBECONFIG and that the API server is up",
    };
    let error_out = ClientError::new(format!("{what}: {}", describe_error(error))).with_hint(hint);
    match status_code(error) {
        Some(status) => error_out.with_status(status),
        None => error_out.with_kind(ErrorKind::Transport),
    }
}

/// Runs `call` up to [`ATTEMPTS`] times while it fails transiently (backoff 0.2, 0.4, 0.8 s).
async fn retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match call().await {
            Err(error) if attempt < ATTEMPTS && transient(&error) => {
                tokio::time::sleep(Duration::from_millis(200 << (attempt - 1))).await;
            }
            other => return other,
        }
    }
}

fn object_json(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The longest a wait sleeps on a watch before it looks again.
const WATCH_SLICE: Duration = Duration::from_secs(2);
/// The pause between looks when no watch can be opened.
const POLL_INTERVAL: Duration = Duration::from_millis(300);

/// A wait's target as list parameters: a label selector (it has `=`), else a name.
fn target_params(target: &str) -> ListParams {
    if target.contains('=') {
        ListParams::default().labels(target)
    } else {
        ListParams::default().fields(&format!("metadata.name={target}"))
    }
}

/// How a patch merges into the live object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// Kubernetes strategic merge patch (lists merged by their keys).
    Strategic,
    /// RFC 6902 JSON patch (a list of operations).
    Json,
}

impl PatchKind {
    pub const NAMES: [&'static str; 3] = ["merge", "strategic", "json"];

    pub fn from_name(name: &str) -> Option<PatchKind> {
        match name {
            "merge" => Some(PatchKind::Merge),
            "strategic" => Some(PatchKind::Strategic),
            "json" => Some(PatchKind::Json),
            _ => None,
        }
    }
}

/// How `patch` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchOptions {
    pub kind: PatchKind,
    /// The server checks and answers, and stores nothing.
    pub dry_run: bool,
}

/// What `wait` waits for.
pub enum Until<'a> {
    /// Every object meets the condition.
    Condition(&'a dyn Fn(&Value) -> Readiness),
    /// No object is left.
    Deleted,
}

/// The objects `wait` watches and how long it may take.
pub struct WaitSpec<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    /// A name, or a label selector (it has `=` in it and must match at least one object).
    pub target: &'a str,
    pub until: Until<'a>,
    pub timeout: Duration,
}

/// `kind/name in namespace` for messages.
pub fn display(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{name} in {namespace}")
    }
}

impl KubeClient {
    /// Connects with KUBECONFIG (or in-cluster config), or a named `context` of the kubeconfig.
    pub fn connect(context: Option<&str>) -> Result<KubeClient, ClientError> {
        super::runtime::install_tls_provider();
        block_on(async {
            let config = match context {
                Some(name) => kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions {
                    context: Some(name.to_string()),
                    ..Default::default()
                })
                .await
                .map_err(|error| {
                    ClientError::new(format!(
                        "kubeconfig context {name}: {}",
                        super::error_chain(&error)
                    ))
                    .with_hint("list contexts with `kubectl config get-contexts`")
                })?,
                None => kube::Config::infer().await.map_err(|error| {
                    ClientError::new(format!(
                        "no Kubernetes configuration: {}",
                        super::error_chain(&error)
                    ))
                    .with_hint("set KUBECONFIG (for the simulator: `bprun sim kube` prints it)")
                })?,
            };
            let mut config = config;
            config.connect_timeout = Some(Duration::from_secs(10));
            config.read_timeout = Some(Duration::from_secs(60));
            config.write_timeout = Some(Duration::from_secs(60));
            let server = config.cluster_url.to_string();
            let default_namespace = config.default_namespace.clone();
            let in_cluster = Some((
                config.root_cert.clone().unwrap_or_default(),
                config.auth_info.token_file.clone(),
            ));
            let client = kube::Client::try_from(config).map_err(|error| {
                ClientError::new(format!(
                    "Kubernetes client for {server}: {}",
                    super::error_chain(&error)
                ))
            })?;
            let kubeconfig_path = std::env::var_os("KUBECONFIG")
                .map(std::path::PathBuf::from)
                .filter(|path| path.is_file());
            Ok(KubeClient {
                client,
                discovery: Mutex::new(None),
                context: context.unwrap_or("current").to_string(),
                server,
                default_namespace,
                kubeconfig_path,
                in_cluster,
            })
        })
    }

    async fn discover(&self) -> Result<Discovery, ClientError> {
        retry(|| Discovery::new(self.client.clone()).run())
            .await
            .map_err(|error| api_error(&format!("discovery on {}", self.server), &error))
    }

    /// Resolves a kind as scripts write it: `Deployment`, `deployment`, `deployments`,
    /// `deployments.apps`, or `apps/v1/Deployment`; re-discovers once when it is unknown.
    pub fn resolve(&self, kind: &str) -> Result<(ApiResource, ApiCapabilities), ClientError> {
        block_on(self.resolve_async(kind, None))
    }

    async fn resolve_async(
        &self,
        kind: &str,
        api_version: Option<&str>,
    ) -> Result<(ApiResource, ApiCapabilities), ClientError> {
        for attempt in 0..2 {
            let cached = self
                .discovery
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let discovery = match cached {
                Some(discovery) if attempt == 0 => discovery,
                _ => self.discover().await?,
            };
            let found = find_kind(&discovery, kind, api_version);
            *self.discovery.lock().unwrap_or_else(|p| p.into_inner()) = Some(discovery);
            if let Some(found) = found {
                return Ok(found);
            }
        }
        let wanted = match api_version {
            Some(version) => format!("{version} {kind}"),
            None => kind.to_string(),
        };
        Err(ClientError::new(format!("unknown kind {wanted} on {}", self.server))
            .with_kind(ErrorKind::NotFound)
            .with_hint(
            "the API server does not serve it: is its CRD installed? (`kubectl api-resources` lists kinds)",
        ))
    }

    fn api(
        &self,
        resource: &ApiResource,
        caps: &ApiCapabilities,
        namespace: &str,
    ) -> Api<DynamicObject> {
        match (caps.scope.clone(), namespace) {
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), resource),
            (Scope::Namespaced, "") => Api::default_namespaced_with(self.client.clone(), resource),
            (Scope::Namespaced, ns) => Api::namespaced_with(self.client.clone(), ns, resource),
        }
    }

    fn list_api(
        &self,
        resource: &ApiResource,
        caps: &ApiCapabilities,
        namespace: &str,
    ) -> Api<DynamicObject> {
        match (caps.scope.clone(), namespace) {
            (Scope::Namespaced, "") | (Scope::Cluster, _) => {
                Api::all_with(self.client.clone(), resource)
            }
            (Scope::Namespaced, ns) => Api::namespaced_with(self.client.clone(), ns, resource),
        }
    }

    /// Server-side applies each object (field manager `bprun`, forced); `dry_run` asks the
    /// server what would change without changing it. Objects whose kind a CRD earlier in the
    /// same batch defines wait (up to 30 s) for it to be served.
    pub fn apply(&self, objects: &[Value], dry_run: bool) -> Result<Vec<Applied>, ClientError> {
        block_on(async {
            let mut outcomes = Vec::new();
            'objects: for object in objects {
                let kind = object["kind"].as_str().unwrap_or_default();
                let api_version = object["apiVersion"].as_str().unwrap_or_default();
                let name = name_of(object);
                if kind.is_empty() || api_version.is_empty() || name.is_empty() {
                    return Err(ClientError::new(format!(
                        "kube_apply: every object needs apiVersion, kind and metadata.name (got {})",
                        display(
                            if kind.is_empty() { "?" } else { kind },
                            "",
                            if name.is_empty() { "?" } else { &name }
                        )
                    )));
                }
                let deadline = Instant::now() + Duration::from_secs(30);
                let crd_in_batch = |action: &str| {
                    outcomes.iter().any(|o: &Applied| {
                        o.kind == "CustomResourceDefinition"
                            && (action.is_empty() || o.action == action)
                    })
                };
                let (resource, caps) = loop {
                    match self.resolve_async(kind, Some(api_version)).await {
                        Ok(found) => break found,
                        // A dry run does not register the CRD it would create: its objects
                        // would be created too.
                        Err(_) if dry_run && crd_in_batch("created") => {
                            let namespace = object["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or("")
                                .to_string();
                            outcomes.push(Applied {
                                kind: kind.to_string(),
                                namespace,
                                name: name.clone(),
                                action: "created",
                                after: Some(for_diff(object)),
                                ..Default::default()
                            });
                            continue 'objects;
                        }
                        Err(_) if Instant::now() < deadline && crd_in_batch("") => {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        // A dry run after planned steps: the CRD an earlier step would install
                        // (a chart's) is not served yet, so the object would be created.
                        Err(error) if dry_run && error.kind == ErrorKind::NotFound => {
                            let namespace = object["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or("")
                                .to_string();
                            outcomes.push(Applied {
                                kind: kind.to_string(),
                                namespace,
                                name: name.clone(),
                                action: "created (its kind is not served yet)",
                                after: Some(for_diff(object)),
                                ..Default::default()
                            });
                            continue 'objects;
                        }
                        Err(error) => return Err(error),
                    }
                };
                let namespace = if caps.scope == Scope::Namespaced {
                    object["metadata"]["namespace"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| self.default_namespace.clone())
                } else {
                    String::new()
                };
                let api = self.api(&resource, &caps, &namespace);
                let shown = display(kind, &namespace, &name);
                let live = retry(|| api.get_opt(&name))
                    .await
                    .map_err(|error| api_error(&format!("kube_apply {shown}"), &error))?;
                let mut params = PatchParams::apply(FIELD_MANAGER).force();
                params.dry_run = dry_run;
                let mut body = object.clone();
                if caps.scope == Scope::Namespaced {
                    body["metadata"]["namespace"] = json!(namespace);
                }
                // Already applied exactly so: no write at all (a re-run sends only reads).
                if let Some(live) = &live
                    && already_applied(&body, &object_json(live))
                {
                    outcomes.push(Applied {
                        kind: kind.to_string(),
                        namespace,
                        name,
                        action: "unchanged",
                        ..Default::default()
                    });
                    continue;
                }
                let apply_patch = Patch::Apply(&body);
                let result = match retry(|| api.patch(&name, &params, &apply_patch)).await {
                    Ok(result) => result,
                    // A dry run cannot place an object in a namespace the same batch would
                    // create: it would be created.
                    Err(error)
                        if dry_run
                            && status_code(&error) == Some(404)
                            && outcomes.iter().any(|o: &Applied| {
                                o.kind == "Namespace"
                                    && o.name == namespace
                                    && o.action == "created"
                            }) =>
                    {
                        outcomes.push(Applied {
                            kind: kind.to_string(),
                            namespace,
                            name,
                            action: "created",
                            after: Some(for_diff(&body)),
                            ..Default::default()
                        });
                        continue;
                    }
                    Err(error) => return Err(api_error(&format!("kube_apply {shown}"), &error)),
                };
                let action = match &live {
                    None => "created",
                    // A write that changed nothing leaves the resourceVersion alone; a controller
                    // that wrote the status meanwhile moves it, so compare what we apply too.
                    Some(live) => {
                        let same_version = !dry_run
                            && live.metadata.resource_version == result.metadata.resource_version;
                        if same_version
                            || normalized(&object_json(live)) == normalized(&object_json(&result))
                        {
                            "unchanged"
                        } else {
                            "configured"
                        }
                    }
                };
                outcomes.push(Applied {
                    kind: kind.to_string(),
                    namespace,
                    name,
                    action,
                    before: live.as_ref().map(|live| for_diff(&object_json(live))),
                    after: Some(for_diff(&object_json(&result))),
                });
            }
            Ok(outcomes)
        })
    }

    pub fn get(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ClientError> {
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.api(&resource, &caps, namespace);
            retry(|| api.get_opt(name))
                .await
                .map(|found| found.as_ref().map(object_json))
                .map_err(|error| {
                    api_error(
                        &format!("kube_get {}", display(kind, namespace, name)),
                        &error,
                    )
                })
        })
    }

    pub fn list(
        &self,
        kind: &str,
        namespace: &str,
        labels: &str,
        fields: &str,
    ) -> Result<Vec<Value>, ClientError> {
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.list_api(&resource, &caps, namespace);
            let mut params = ListParams::default();
            if !labels.is_empty() {
                params = params.labels(labels);
            }
            if !fields.is_empty() {
                params = params.fields(fields);
            }
            retry(|| api.list(&params))
                .await
                .map(|list| list.items.iter().map(object_json).collect())
                .map_err(|error| {
                    api_error(
                        &format!(
                            "kube_list {kind} in {}",
                            if namespace.is_empty() {
                                "all namespaces"
                            } else {
                                namespace
                            }
                        ),
                        &error,
                    )
                })
        })
    }

    /// Deletes an object; false when it did not exist. With `wait`, polls until it is gone.
    pub fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        dry_run: bool,
        wait: Option<Duration>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<bool, ClientError> {
        let shown = display(kind, namespace, name);
        block_on(async {
            let (resource, caps) = match self.resolve_async(kind, None).await {
                Ok(found) => found,
                // A kind the server does not serve (its CRD is gone) has no objects to delete.
                Err(error) if error.kind == ErrorKind::NotFound => return Ok(false),
                Err(error) => return Err(error),
            };
            let api = self.api(&resource, &caps, namespace);
            let present = retry(|| api.get_opt(name))
                .await
                .map_err(|error| api_error(&format!("kube_delete {shown}"), &error))?;
            if present.is_none() {
                return Ok(false);
            }
            if dry_run {
                return Ok(true);
            }
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(error) if status_code(&error) == Some(404) => return Ok(false),
                Err(error) => return Err(api_error(&format!("kube_delete {shown}"), &error)),
            }
            if let Some(timeout) = wait {
                let deadline = Instant::now() + timeout;
                loop {
                    if cancelled() {
                        return Err(ClientError::new(format!(
                            "kube_delete {shown}: interrupted"
                        )));
                    }
                    let still = retry(|| api.get_opt(name))
                        .await
                        .map_err(|error| api_error(&format!("kube_delete {shown}"), &error))?;
                    if still.is_none() {
                        break;
                    }
                    if Instant::now() >= deadline {
                        return Err(ClientError::new(format!(
                            "kube_delete {shown}: still present after {}s",
                            timeout.as_secs()
                        ))
                        .with_hint("finalizers may hold it: `kubectl get -o yaml` shows metadata.finalizers"));
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
            Ok(true)
        })
    }

    /// Patches an object; returns the result and whether it changed (resourceVersion moved).
    pub fn patch(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: &Value,
        options: PatchOptions,
    ) -> Result<(Value, bool), ClientError> {
        let shown = display(kind, namespace, name);
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.api(&resource, &caps, namespace);
            let before = retry(|| api.get_opt(name))
                .await
                .map_err(|error| api_error(&format!("kube_patch {shown}"), &error))?
                .ok_or_else(|| {
                    ClientError::new(format!("kube_patch {shown}: not found"))
                        .with_hint("kube_patch changes existing objects; kube_apply creates them")
                })?;
            // A patch that would leave the object as it is sends no write. Checked locally: a
            // merge (RFC 7386; for a strategic patch the same, lists then compared whole) or the
            // JSON patch's operations applied to a copy.
            let current = object_json(&before);
            let mut patched = current.clone();
            let no_op = match options.kind {
                PatchKind::Merge | PatchKind::Strategic => {
                    json_patch::merge(&mut patched, patch);
                    true
                }
                PatchKind::Json => serde_json::from_value::<json_patch::Patch>(patch.clone())
                    .ok()
                    .is_some_and(|operations| json_patch::patch(&mut patched, &operations).is_ok()),
            } && patched == current;
            if no_op {
                return Ok((current, false));
            }
            let mut params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            params.dry_run = options.dry_run;
            let result = match options.kind {
                PatchKind::Merge => api.patch(name, &params, &Patch::Merge(patch)).await,
                PatchKind::Strategic => api.patch(name, &params, &Patch::Strategic(patch)).await,
                PatchKind::Json => {
                    let operations: json_patch::Patch = serde_json::from_value(patch.clone())
                        .map_err(|error| {
                            ClientError::new(format!("kube_patch {shown}: not a JSON patch: {error}"))
                                .with_kind(ErrorKind::Invalid)
                                .with_hint("a JSON patch is an array of operations like {\"op\": \"replace\", \"path\": \"/spec/replicas\", \"value\": 2}")
                        })?;
                    api.patch(name, &params, &Patch::<Value>::Json(operations)).await
                }
            }
            .map_err(|error| api_error(&format!("kube_patch {shown}"), &error))?;
            let changed = normalized(&object_json(&before)) != normalized(&object_json(&result));
            Ok((object_json(&result), changed))
        })
    }

    /// Creates or updates a Secret from string values; `changed` is false when it already held
    /// them. The Secret as it was and as written come back for `--diff`
    /// ([`hide_secret_values`] before showing them).
    pub fn secret_write(
        &self,
        namespace: &str,
        name: &str,
        data: &std::collections::BTreeMap<String, String>,
        kind: &str,
        dry_run: bool,
    ) -> Result<SecretWritten, ClientError> {
        use base64::Engine;
        let shown = display("Secret", namespace, name);
        let encoded: serde_json::Map<String, Value> = data
            .iter()
            .map(|(key, value)| {
                (
                    key.clone(),
                    json!(base64::engine::general_purpose::STANDARD.encode(value)),
                )
            })
            .collect();
        let live = self.get("secrets", namespace, name)?;
        let written = |changed: bool| SecretWritten {
            changed,
            before: live
                .as_ref()
                .map(|live| json!({"kind": "Secret", "data": live["data"].clone()})),
            after: json!({"kind": "Secret", "data": encoded.clone()}),
        };
        if let Some(live) = &live {
            let live_kind = live["type"].as_str().unwrap_or("Opaque");
            if live_kind != kind {
                // The API server refuses to change a Secret's type (the field is immutable).
                return Err(ClientError::new(format!(
                    "{shown} has type {live_kind}, not {kind}, and a Secret's type cannot change"
                ))
                .with_hint(format!(
                    "delete it first (kubectl -n {namespace} delete secret {name}) or keep type {live_kind}"
                )));
            }
            if live["data"].as_object() == Some(&encoded) {
                return Ok(written(false));
            }
        }
        if dry_run {
            return Ok(written(true));
        }
        let object = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                            "type": kind, "data": encoded});
        block_on(async {
            let (resource, caps) = self.resolve_async("Secret", Some("v1")).await?;
            let api = self.api(&resource, &caps, namespace);
            let object: DynamicObject = serde_json::from_value(object.clone())
                .map_err(|error| ClientError::new(format!("{shown}: {error}")))?;
            // Always server-side apply as `bprun`: bprun then owns every key, so a key the
            // script stops writing is removed (a POST would leave it to another manager).
            let result = api
                .patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&object),
                )
                .await;
            result
                .map(|_| written(true))
                .map_err(|error| api_error(&format!("kube_secret_write {shown}"), &error))
        })
    }

    /// Waits until every object the spec names meets its condition, or is gone. Fails fast on
    /// terminal states; a timeout names every unready object with its conditions and events.
    pub fn wait(
        &self,
        spec: &WaitSpec,
        progress: &dyn Fn(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let WaitSpec {
            kind,
            namespace,
            target: name_or_selector,
            timeout,
            ..
        } = *spec;
        let until_deleted = matches!(spec.until, Until::Deleted);
        let condition: &dyn Fn(&Value) -> Readiness = match spec.until {
            Until::Condition(condition) => condition,
            Until::Deleted => &|_| Readiness::Ready,
        };
        let selector = name_or_selector.contains('=');
        let what = if selector {
            format!(
                "{kind} matching {name_or_selector}{}",
                if namespace.is_empty() {
                    String::new()
                } else {
                    format!(" in {namespace}")
                }
            )
        } else {
            display(kind, namespace, name_or_selector)
        };
        let started = Instant::now();
        let deadline = started + timeout;
        let mut last_report = started;
        loop {
            if cancelled() {
                return Err(ClientError::new(format!("kube_wait {what}: interrupted"))
                    .with_kind(ErrorKind::Interrupted));
            }
            let (objects, version) = self.snapshot(kind, namespace, name_or_selector)?;
            let mut waiting = Vec::new();
            if until_deleted {
                if objects.is_empty() {
                    return Ok(Vec::new());
                }
                waiting.extend(
                    objects
                        .iter()
                        .map(|o| format!("{} still exists", name_of(o))),
                );
            } else if objects.is_empty() {
                waiting.push(if selector {
                    "no objects match yet".to_string()
                } else {
                    "not found yet".to_string()
                });
            } else {
                for object in &objects {
                    // The built-in conditions report terminal states themselves; only an
                    // unready object is checked further (its own state, then its pods').
                    match condition(object) {
                        Readiness::Ready => {}
                        Readiness::Failed(why) => {
                            return Err(self.wait_failure(&what, object, &why, namespace));
                        }
                        Readiness::Waiting(why) => {
                            if let Some(failure) = kube_conditions::terminal_failure(object)
                                .or_else(|| self.pod_failure(object, namespace))
                            {
                                return Err(self.wait_failure(&what, object, &failure, namespace));
                            }
                            waiting.push(format!("{}: {why}", name_of(object)));
                        }
                    }
                }
            }
            if waiting.is_empty() {
                return Ok(objects);
            }
            let now = Instant::now();
            if now >= deadline {
                let mut error = ClientError::new(format!(
                    "kube_wait {what}: not ready after {}s",
                    timeout.as_secs()
                ))
                .with_kind(ErrorKind::Timeout)
                .with_hint(
                    "raise the timeout if it is only slow; the causes show each unready object",
                );
                for object in &objects {
                    error = error.caused_by(kube_conditions::describe(object));
                    for event in self.recent_events(object, namespace) {
                        error = error.caused_by(event);
                    }
                    for line in self.unready_pods(object, namespace) {
                        error = error.caused_by(line);
                    }
                }
                for line in waiting.iter().filter(|_| objects.is_empty()) {
                    error = error.caused_by(line);
                }
                return Err(error);
            }
            if now.duration_since(last_report) >= Duration::from_secs(5) {
                progress(&format!(
                    "waiting for {what} ({}s): {}",
                    now.duration_since(started).as_secs(),
                    waiting.join("; ")
                ));
                last_report = now;
            }
            // Sleep until the API server reports a change to these objects (a watch from the
            // list's version), but look again at least every WATCH_SLICE: readiness can also
            // turn on objects the watch does not cover (a Deployment's pods).
            let slice = WATCH_SLICE.min(deadline.saturating_duration_since(now));
            let woke = Instant::now();
            let watched = self.await_change(kind, namespace, name_or_selector, &version, slice);
            if !watched {
                // No watch (an error, or a server without watches): poll instead of spinning.
                std::thread::sleep(
                    POLL_INTERVAL
                        .saturating_sub(woke.elapsed())
                        .min(deadline.saturating_duration_since(Instant::now())),
                );
            }
        }
    }

    /// The objects a wait looks at (a name is a `metadata.name` field selector, so one watch
    /// serves both) and the list's resourceVersion to watch from.
    fn snapshot(
        &self,
        kind: &str,
        namespace: &str,
        target: &str,
    ) -> Result<(Vec<Value>, String), ClientError> {
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.list_api(&resource, &caps, namespace);
            let params = target_params(target);
            let list = retry(|| api.list(&params)).await.map_err(|error| {
                api_error(
                    &format!("kube_wait {}", display(kind, namespace, target)),
                    &error,
                )
            })?;
            Ok((
                list.items.iter().map(object_json).collect(),
                list.metadata.resource_version.unwrap_or_default(),
            ))
        })
    }

    /// Waits up to `limit` for a watch event on the target's objects after `version`. True when
    /// the watch did its job (an event came, or `limit` passed quietly); false when no watch
    /// could be opened or it ended without an event, so the caller polls.
    fn await_change(
        &self,
        kind: &str,
        namespace: &str,
        target: &str,
        version: &str,
        limit: Duration,
    ) -> bool {
        if version.is_empty() || limit.is_zero() {
            return false;
        }
        block_on(async {
            let Ok((resource, caps)) = self.resolve_async(kind, None).await else {
                return false;
            };
            let api = self.list_api(&resource, &caps, namespace);
            let base = target_params(target);
            let mut params = WatchParams::default().timeout(limit.as_secs().max(1) as u32);
            if let Some(labels) = &base.label_selector {
                params = params.labels(labels);
            }
            if let Some(fields) = &base.field_selector {
                params = params.fields(fields);
            }
            let watch = tokio::time::timeout(limit, async {
                match api.watch(&params, version).await {
                    // An event (even an error event such as 410 Expired) means: look again.
                    Ok(stream) => stream.boxed().next().await.is_some(),
                    Err(_) => false,
                }
            })
            .await;
            // Quiet until the limit: the watch did its job. Ended without an event: poll.
            watch.unwrap_or(true)
        })
    }

    fn wait_failure(&self, what: &str, object: &Value, why: &str, namespace: &str) -> ClientError {
        let mut error = ClientError::new(format!("kube_wait {what}: {why}")).with_hint(
            "this state does not resolve by waiting: fix the image, command or configuration",
        );
        error = error.caused_by(kube_conditions::describe(object));
        for event in self.recent_events(object, namespace) {
            error = error.caused_by(event);
        }
        for line in self.unready_pods(object, namespace) {
            error = error.caused_by(line);
        }
        error
    }

    /// The pods of a workload that are not Ready, each with its recent events (what `kubectl
    /// describe pod` would show first): a missing Secret or a failing probe is named there, not
    /// on the Deployment.
    fn unready_pods(&self, object: &Value, namespace: &str) -> Vec<String> {
        let Some(kind) = object["kind"].as_str() else {
            return Vec::new();
        };
        if !matches!(
            kind,
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job"
        ) {
            return Vec::new();
        }
        let Some(labels) = object["spec"]["selector"]["matchLabels"].as_object() else {
            return Vec::new();
        };
        let selector: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        let pods = self
            .list("pods", ns, &selector.join(","), "")
            .unwrap_or_default();
        let mut lines = Vec::new();
        // A few pods are enough to say why; a large ReplicaSet would drown the error.
        for pod in pods
            .iter()
            .filter(|pod| kube_conditions::ready(pod) != Readiness::Ready)
            .take(3)
        {
            lines.push(format!(
                "pod {}: {}",
                name_of(pod),
                kube_conditions::describe(pod)
            ));
            lines.extend(
                self.recent_events(pod, ns)
                    .into_iter()
                    .map(|event| format!("  {event}")),
            );
        }
        lines
    }

    /// A terminal failure among the pods a workload selects.
    fn pod_failure(&self, object: &Value, namespace: &str) -> Option<String> {
        let kind = object["kind"].as_str()?;
        if !matches!(
            kind,
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job"
        ) {
            return None;
        }
        let labels = object["spec"]["selector"]["matchLabels"].as_object()?;
        let selector: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        let pods = self.list("pods", ns, &selector.join(","), "").ok()?;
        pods.iter().find_map(|pod| {
            kube_conditions::container_failure(pod)
                .map(|why| format!("pod {}: {why}", name_of(pod)))
        })
    }

    /// The last few events about an object, oldest first, as `Reason: message`.
    fn recent_events(&self, object: &Value, namespace: &str) -> Vec<String> {
        let name = name_of(object);
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        if ns.is_empty() {
            return Vec::new();
        }
        let events = self
            .list("events", ns, "", &format!("involvedObject.name={name}"))
            .unwrap_or_default();
        let mut lines: Vec<String> = events
            .iter()
            .map(|event| {
                format!(
                    "event {}: {}",
                    event["reason"].as_str().unwrap_or(""),
                    event["message"].as_str().unwrap_or("")
                )
            })
            .collect();
        let keep = lines.len().saturating_sub(5);
        lines.drain(..keep);
        lines
    }

    /// A running pod by name, `pod/NAME`, or label selector (`app=toolbox`).
    pub fn pick_pod(&self, namespace: &str, target: &str) -> Result<Value, ClientError> {
        let target = target.strip_prefix("pod/").unwrap_or(target);
        if target.contains('=') {
            let pods = self.list("pods", namespace, target, "")?;
            return pods
                .into_iter()
                .find(|pod| {
                    pod["status"]["phase"] == "Running"
                        && pod["metadata"]["deletionTimestamp"].is_null()
                })
                .ok_or_else(|| {
                    ClientError::new(format!("no running pod matches {target} in {namespace}"))
                        .with_hint("list the pods with that label selector to check it")
                });
        }
        self.get("pods", namespace, target)?
            .ok_or_else(|| ClientError::new(format!("pod {target} not found in {namespace}")))
    }

    /// Runs `command` in a pod (WebSocket exec); a non-zero exit is a result, not an error.
    pub fn exec(
        &self,
        namespace: &str,
        target: &str,
        command: &[String],
        container: Option<&str>,
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<ExecResult, ClientError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let pod = self.pick_pod(namespace, target)?;
        let pod_name = name_of(&pod);
        let shown = format!("kube_exec pod/{pod_name} in {namespace}");
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        let mut params = AttachParams::default()
            .stdin(stdin.is_some())
            .stdout(true)
            .stderr(true);
        if let Some(container) = container {
            params = params.container(container);
        }
        let session = async {
            let mut process = pods
                .exec(&pod_name, command.to_vec(), &params)
                .await
                .map_err(|error| api_error(&shown, &error))?;
            if let (Some(bytes), Some(mut writer)) = (stdin, process.stdin()) {
                writer.write_all(bytes).await.map_err(|error| {
                    ClientError::new(format!("{shown}: writing stdin: {error}"))
                })?;
                let _ = writer.shutdown().await;
                drop(writer);
            }
            let mut stdout = Vec::new();
            let mut stderr = Vec::new();
            let out_reader = process.stdout();
            let err_reader = process.stderr();
            let status = process.take_status();
            let read_out = async {
                if let Some(mut reader) = out_reader {
                    let _ = reader.read_to_end(&mut stdout).await;
                }
            };
            let read_err = async {
                if let Some(mut reader) = err_reader {
                    let _ = reader.read_to_end(&mut stderr).await;
                }
            };
            tokio::join!(read_out, read_err);
            let status = match status {
                Some(future) => future.await,
                None => None,
            };
            let _ = process.join().await;
            let code = match status {
                Some(status) if status.status.as_deref() == Some("Success") => 0,
                Some(status) => status
                    .details
                    .and_then(|details| details.causes)
                    .and_then(|causes| {
                        causes
                            .into_iter()
                            .find(|cause| cause.reason.as_deref() == Some("ExitCode"))
                            .and_then(|cause| cause.message)
                    })
                    .and_then(|code| code.parse().ok())
                    .unwrap_or(1),
                None => {
                    return Err(ClientError::new(format!(
                        "{shown}: the connection closed before the command's exit status arrived"
                    ))
                    .with_hint("the pod or the API server may have restarted: run it again"));
                }
            };
            Ok(ExecResult {
                code,
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            })
        };
        block_on(async {
            tokio::time::timeout(timeout, session).await.map_err(|_| {
                ClientError::new(format!("{shown}: no answer within {}s", timeout.as_secs()))
                    .with_kind(ErrorKind::Timeout)
                    .with_hint("raise the timeout for long commands")
            })?
        })
    }

    /// Forwards a local loopback port to `target` (`svc/NAME`, `pod/NAME`, or a pod selector)
    /// port `port`, for the rest of the process; returns the local address.
    pub fn port_forward(
        &self,
        namespace: &str,
        target: &str,
        port: u16,
    ) -> Result<std::net::SocketAddr, ClientError> {
        let pod = if let Some(service) = target
            .strip_prefix("svc/")
            .or_else(|| target.strip_prefix("service/"))
        {
            let svc = self.get("services", namespace, service)?.ok_or_else(|| {
                ClientError::new(format!("service {service} not found in {namespace}"))
            })?;
            let selector: Vec<String> = svc["spec"]["selector"]
                .as_object()
                .map(|labels| {
                    labels
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect()
                })
                .unwrap_or_default();
            if selector.is_empty() {
                return Err(ClientError::new(format!(
                    "service {service} in {namespace} has no selector to find a pod by"
                )));
            }
            let target_port = svc["spec"]["ports"]
                .as_array()
                .and_then(|ports| ports.iter().find(|p| p["port"] == port))
                .map(|p| p["targetPort"].as_u64().unwrap_or(u64::from(port)))
                .ok_or_else(|| {
                    ClientError::new(format!(
                        "service {service} in {namespace} has no port {port}"
                    ))
                })?;
            (
                self.pick_pod(namespace, &selector.join(","))?,
                target_port as u16,
                Some(selector.join(",")),
            )
        } else {
            let target = target.strip_prefix("pod/").unwrap_or(target);
            let selector = target.contains('=').then(|| target.to_string());
            (self.pick_pod(namespace, target)?, port, selector)
        };
        let (pod, pod_port, selector) = (pod.0, pod.1, pod.2);
        let pod_name = name_of(&pod);
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        let runtime = super::runtime::runtime();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .map_err(|error| {
                ClientError::new(format!("port-forward: cannot listen on 127.0.0.1: {error}"))
            })?;
        let local = listener
            .local_addr()
            .map_err(|error| ClientError::new(format!("port-forward: {error}")))?;
        runtime.spawn(async move {
            loop {
                let Ok((mut connection, _)) = listener.accept().await else {
                    // Out of file descriptors or similar: back off rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let pods = pods.clone();
                let mut pod_name = pod_name.clone();
                let selector = selector.clone();
                tokio::spawn(async move {
                    // Behind a Service or selector, each connection goes to a running pod
                    // (the one found at first may have been replaced since).
                    if let Some(selector) = &selector {
                        let listed = tokio::time::timeout(
                            Duration::from_secs(10),
                            pods.list(&ListParams::default().labels(selector)),
                        )
                        .await;
                        if let Ok(Ok(list)) = listed
                            && let Some(running) = list.items.iter().find(|pod| {
                                pod.status.as_ref().and_then(|s| s.phase.as_deref())
                                    == Some("Running")
                                    && pod.metadata.deletion_timestamp.is_none()
                            })
                            && let Some(name) = running.metadata.name.clone()
                        {
                            pod_name = name;
                        }
                    }
                    let ports = [pod_port];
                    let setup = tokio::time::timeout(
                        Duration::from_secs(10),
                        pods.portforward(&pod_name, &ports),
                    );
                    let Ok(Ok(mut forwarder)) = setup.await else {
                        return;
                    };
                    if let Some(mut upstream) = forwarder.take_stream(pod_port) {
                        let _ = tokio::io::copy_bidirectional(&mut connection, &mut upstream).await;
                    }
                    drop(forwarder);
                });
            }
        });
        Ok(local)
    }

    /// The kubeconfig text in use (for CI variables), or an error when none is a file.
    pub fn kubeconfig_text(&self) -> Result<String, ClientError> {
        if std::env::var("KUBECONFIG").is_ok_and(|value| value.contains(':')) {
            return Err(ClientError::new(
                "KUBECONFIG lists several files: say which one holds the cluster's credentials",
            )
            .with_hint("set KUBECONFIG to a single file for this run"));
        }
        let path = self.kubeconfig_path.clone().or_else(|| {
            std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".kube/config"))
        });
        // In a pod without a kubeconfig file: the service account's connection, as a kubeconfig.
        if !path.as_ref().is_some_and(|path| path.is_file())
            && let Some((certificates, Some(token_file))) = &self.in_cluster
        {
            let token = std::fs::read_to_string(token_file).map_err(|error| {
                ClientError::new(format!(
                    "cannot read the service account token {token_file}: {error}"
                ))
            })?;
            return Ok(kubeconfig_from_parts(
                &self.server,
                certificates,
                token.trim(),
            ));
        }
        let path =
            path.ok_or_else(|| ClientError::new("no kubeconfig file: KUBECONFIG is not set"))?;
        let text = std::fs::read_to_string(&path).map_err(|error| {
            ClientError::new(format!(
                "cannot read the kubeconfig {}: {error}",
                path.display()
            ))
            .with_hint("set KUBECONFIG to the file the cluster's credentials are in")
        })?;
        let context = (self.context != "current").then_some(self.context.as_str());
        minimal_kubeconfig(&text, context).map_err(|message| {
            ClientError::new(format!("kubeconfig {}: {message}", path.display()))
        })
    }
}

/// A kubeconfig for one cluster and a bearer token: what a pod's service account gives.
pub fn kubeconfig_from_parts(server: &str, certificates: &[Vec<u8>], token: &str) -> String {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    let pem: String = certificates
        .iter()
        .map(|der| {
            let body = engine.encode(der);
            let lines: Vec<&str> = body
                .as_bytes()
                .chunks(64)
                .map(|chunk| std::str::from_utf8(chunk).unwrap_or_default())
                .collect();
            format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                lines.join("\n")
            )
        })
        .collect();
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
        "clusters": [{"name": "in-cluster", "cluster": {"server": server.trim_end_matches('/'),
                      "certificate-authority-data": engine.encode(pem)}}],
        "users": [{"name": "service-account", "user": {"token": token}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "service-account"}}],
    });
    serde_norway::to_string(&config).unwrap_or_default()
}

/// A kubeconfig with only the context in use (`context`, else the current one), its cluster and
/// its user: what a CI job needs, and no other cluster's credentials.
pub fn minimal_kubeconfig(text: &str, context: Option<&str>) -> Result<String, String> {
    let config: Value = serde_norway::from_str(text).map_err(|error| error.to_string())?;
    let name = match context {
        Some(name) => name.to_string(),
        None => config["current-context"]
            .as_str()
            .filter(|name| !name.is_empty())
            .ok_or("it names no current-context")?
            .to_string(),
    };
    let find = |list: &str, wanted: &str| {
        config[list]
            .as_array()
            .and_then(|items| items.iter().find(|item| item["name"] == wanted).cloned())
    };
    let entry = find("contexts", &name).ok_or_else(|| format!("no context {name}"))?;
    let cluster_name = entry["context"]["cluster"].as_str().unwrap_or("");
    let user_name = entry["context"]["user"].as_str().unwrap_or("");
    let cluster = find("clusters", cluster_name)
        .ok_or_else(|| format!("context {name} names no known cluster"))?;
    let user =
        find("users", user_name).ok_or_else(|| format!("context {name} names no known user"))?;
    let minimal = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [cluster], "users": [user], "contexts": [entry],
        "current-context": name, "preferences": {}
    });
    serde_norway::to_string(&minimal).map_err(|error| error.to_string())
}

/// Finds a kind in discovery: `Deployment`, `deployment`, `deployments`, `deployments.apps`,
/// `apps/v1/Deployment`, or (with `api_version`) an exact group/version/kind.
fn find_kind(
    discovery: &Discovery,
    kind: &str,
    api_version: Option<&str>,
) -> Option<(ApiResource, ApiCapabilities)> {
    if let Some(api_version) = api_version {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        return discovery.resolve_gvk(&GroupVersionKind::gvk(group, version, kind));
    }
    if let Some((group_version, kind_name)) = kind.rsplit_once('/') {
        return find_kind(discovery, kind_name, Some(group_version));
    }
    let wanted = kind.to_ascii_lowercase();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let qualified = if resource.group.is_empty() {
                resource.plural.clone()
            } else {
                format!("{}.{}", resource.plural, resource.group)
            };
            if resource.kind.to_ascii_lowercase() == wanted
                || resource.plural == wanted
                || qualified == wanted
            {
                return Some((resource, caps));
            }
        }
    }
    None
}

/// An object without the fields every write touches (resourceVersion, managedFields times),
/// to tell a real change from a no-op. What a patch of the object (not of its `/status`) can change: controllers keep writing the
/// status and their own annotations while we patch, so those are left out of the comparison
/// (an identical second patch must say `changed: false` even while a rollout runs).
/// Whether applying `desired` as bprun's field manager would change nothing on `live`: every
/// field of `desired` has that value in `live` (maps key by key, lists item by item and of the
/// same length, so a list another manager extended is applied again), and bprun's last apply
/// owns no field `desired` has dropped (an apply would remove it). Anything uncertain (a value
/// the server normalised, a list another manager changed) answers false: the apply is sent.
pub fn already_applied(desired: &Value, live: &Value) -> bool {
    fn contains(live: &Value, desired: &Value) -> bool {
        match (live, desired) {
            (Value::Object(live), Value::Object(desired)) => desired
                .iter()
                .all(|(key, value)| live.get(key).is_some_and(|have| contains(have, value))),
            (Value::Array(live), Value::Array(desired)) => {
                live.len() == desired.len()
                    && live
                        .iter()
                        .zip(desired)
                        .all(|(have, want)| contains(have, want))
            }
            (live, desired) => live == desired,
        }
    }
    /// The map-key paths of an object, not descending into lists.
    fn desired_paths(value: &Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
        if let Value::Object(map) = value {
            for (key, child) in map {
                let path = format!("{prefix}/{key}");
                out.insert(path.clone());
                desired_paths(child, &path, out);
            }
        }
    }
    /// The fields a FieldsV1 set owns, as map-key paths; list items (`k:`, `v:`, `i:`) count as
    /// their list.
    fn owned_paths(fields: &Value, prefix: &str, out: &mut Vec<String>) {
        if let Value::Object(map) = fields {
            for (key, child) in map {
                if let Some(field) = key.strip_prefix("f:") {
                    let path = format!("{prefix}/{field}");
                    let is_leaf = child
                        .as_object()
                        .is_none_or(|c| c.is_empty() || c.keys().all(|k| !k.starts_with("f:")));
                    if is_leaf {
                        out.push(path);
                    } else {
                        owned_paths(child, &path, out);
                    }
                }
            }
        }
    }
    let mut wanted = desired.clone();
    if let Some(map) = wanted.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        // An apply to the main resource never writes the status (CRD manifests carry one).
        map.remove("status");
    }
    if !contains(live, &wanted) {
        return false;
    }
    // No entry of bprun's: it owns nothing an apply would remove (the API server drops an
    // apply's empty field set, and another manager may have applied the same values).
    let mut owned = Vec::new();
    if let Some(entry) = live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["manager"] == FIELD_MANAGER && entry["operation"] == "Apply")
    {
        owned_paths(&entry["fieldsV1"], "", &mut owned);
    }
    let mut have = std::collections::BTreeSet::new();
    desired_paths(&wanted, "", &mut have);
    owned.iter().all(|path| have.contains(path))
}

/// An object as `--diff` shows it: without status and the server's bookkeeping (versions, uid,
/// managed fields, creation time). A Secret's values are still here: see [`hide_secret_values`].
pub fn for_diff(object: &Value) -> Value {
    let mut copy = normalized(object);
    if let Some(metadata) = copy["metadata"].as_object_mut() {
        metadata.remove("uid");
        metadata.remove("creationTimestamp");
    }
    copy
}

/// A Secret's two sides for `--diff` with every value replaced: `(hidden)`, or `(hidden,
/// changed)` on the new side of a key whose value changes, so the diff names the keys and never
/// shows a value (nor a digest of one).
pub fn hide_secret_values(
    before: Option<&Value>,
    after: Option<&Value>,
) -> (Option<Value>, Option<Value>) {
    let is_secret = |side: Option<&Value>| side.is_some_and(|object| object["kind"] == "Secret");
    if !is_secret(before) && !is_secret(after) {
        return (before.cloned(), after.cloned());
    }
    let value_of = |side: Option<&Value>, field: &str, key: &str| {
        side.and_then(|object| object[field].get(key)).cloned()
    };
    let hide = |side: Option<&Value>, other: Option<&Value>, new_side: bool| {
        side.map(|object| {
            let mut copy = object.clone();
            for field in ["data", "stringData"] {
                // `get_mut`, not indexing: indexing a missing key would add it as null.
                if let Some(values) = copy.get_mut(field).and_then(Value::as_object_mut) {
                    for (key, value) in values.iter_mut() {
                        let changed = value_of(other, field, key).as_ref() != Some(value);
                        *value = json!(if new_side && changed {
                            "(hidden, changed)"
                        } else {
                            "(hidden)"
                        });
                    }
                }
            }
            copy
        })
    };
    (hide(before, after, false), hide(after, before, true))
}

fn normalized(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("status");
    }
    if let Some(metadata) = copy["metadata"].as_object_mut() {
        metadata.remove("resourceVersion");
        metadata.remove("managedFields");
        metadata.remove("generation");
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| !key.starts_with("deployment.kubernetes.io/"));
        }
    }
    copy
}

#[cfg(test)]
mod already_applied_tests {
    use super::*;

    #[test]
    fn a_secrets_diff_names_the_keys_that_change_and_shows_no_value() {
        let before = json!({"kind": "Secret", "data": {"a": "b2xk", "b": "c2FtZQ=="}});
        let after = json!({"kind": "Secret", "data": {"a": "bmV3", "b": "c2FtZQ==", "c": "eA=="}});
        let (old, new) = hide_secret_values(Some(&before), Some(&after));
        assert_eq!(
            old,
            Some(json!({"kind": "Secret", "data": {"a": "(hidden)", "b": "(hidden)"}}))
        );
        assert_eq!(
            new,
            Some(
                json!({"kind": "Secret", "data": {"a": "(hidden, changed)", "b": "(hidden)", "c": "(hidden, changed)"}})
            )
        );
        let config = json!({"kind": "ConfigMap", "data": {"a": "visible"}});
        assert_eq!(
            hide_secret_values(None, Some(&config)),
            (None, Some(config.clone()))
        );
    }

    fn live(extra_owned: bool) -> Value {
        let mut owned = json!({"f:metadata": {"f:labels": {"f:app": {}}},
                               "f:data": {"f:config": {}}});
        if extra_owned {
            owned["f:data"]["f:old"] = json!({});
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "n", "resourceVersion": "7", "uid": "u",
                            "labels": {"app": "x", "other": "y"},
                            "managedFields": [{"manager": "bprun", "operation": "Apply", "fieldsV1": owned}]},
               "data": {"config": "a", "old": "b", "theirs": "c"}})
    }

    #[test]
    fn an_object_applied_before_with_the_same_fields_needs_no_write() {
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "c", "namespace": "n", "labels": {"app": "x"}},
                             "data": {"config": "a"}});
        assert!(already_applied(&desired, &live(false)));
        // A changed value, a new field, or a field bprun owned and dropped: apply.
        let mut changed = desired.clone();
        changed["data"]["config"] = json!("z");
        assert!(!already_applied(&changed, &live(false)));
        let mut added = desired.clone();
        added["data"]["new"] = json!("n");
        assert!(!already_applied(&added, &live(false)));
        assert!(!already_applied(&desired, &live(true)));
        // Applied with the same values by another manager: nothing to write either.
        let mut foreign = live(false);
        foreign["metadata"]["managedFields"][0]["manager"] = json!("helm");
        assert!(already_applied(&desired, &foreign));
        let mut differs = foreign.clone();
        differs["data"]["config"] = json!("helm's");
        assert!(!already_applied(&desired, &differs));
    }

    #[test]
    fn lists_must_match_item_by_item() {
        let mut live = live(false);
        live["spec"] = json!({"ports": [{"port": 80, "protocol": "TCP"}]});
        live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"] =
            json!({"f:ports": {"k:{\"port\":80}": {".": {}, "f:port": {}}}});
        let desired = json!({"metadata": {"name": "c", "namespace": "n", "labels": {"app": "x"}},
                             "data": {"config": "a"}, "spec": {"ports": [{"port": 80}]}});
        assert!(already_applied(&desired, &live));
        let two = json!({"metadata": {"name": "c", "namespace": "n", "labels": {"app": "x"}},
                         "data": {"config": "a"}, "spec": {"ports": [{"port": 80}, {"port": 81}]}});
        assert!(!already_applied(&two, &live));
    }
}

#[cfg(test)]
mod in_cluster_tests {
    #[test]
    fn in_cluster_kubeconfigs_carry_the_ca_and_token() {
        let text =
            super::kubeconfig_from_parts("https://10.96.0.1:443/", &[vec![1, 2, 3]], "sa-token");
        let config: serde_json::Value = serde_norway::from_str(&text).expect("YAML");
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://10.96.0.1:443"
        );
        assert_eq!(config["users"][0]["user"]["token"], "sa-token");
        use base64::Engine;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(
                config["clusters"][0]["cluster"]["certificate-authority-data"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(
            String::from_utf8(pem).unwrap(),
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
        );
        // What bprun hands a CI job is the same minimal form it makes of any kubeconfig.
        assert!(super::minimal_kubeconfig(&text, None).is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_CLUSTERS: &str = "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n- name: dev\n  cluster: {server: https://127.0.0.1:6443}\n- name: prod\n  cluster: {server: https://prod.example.net}\nusers:\n- name: dev\n  user: {token: dev-token}\n- name: prod\n  user: {token: prod-token}\ncontexts:\n- name: dev\n  context: {cluster: dev, user: dev}\n- name: prod\n  context: {cluster: prod, user: prod}\n";

    #[test]
    fn minimal_kubeconfig_keeps_only_the_context_in_use() {
        let current = minimal_kubeconfig(TWO_CLUSTERS, None).expect("current");
        assert!(
            current.contains("dev-token") && !current.contains("prod-token"),
            "{current}"
        );
        assert!(current.contains("current-context: dev"), "{current}");
        let named = minimal_kubeconfig(TWO_CLUSTERS, Some("prod")).expect("prod");
        assert!(
            named.contains("prod-token") && !named.contains("dev-token"),
            "{named}"
        );
        assert_eq!(
            minimal_kubeconfig(TWO_CLUSTERS, Some("nope")).unwrap_err(),
            "no context nope"
        );
    }
}
