//! Kubernetes through kube-rs: one client per run (KUBECONFIG, in-cluster, or a named
//! context), kinds resolved through discovery (re-discovered when a kind is missing, e.g.
//! right after its CRD), server-side apply with the field manager `bprun`, polling waits with
//! explicit timeouts, exec and port-forward over WebSockets. Plain Rust: no rhai here.

mod apply;
pub mod conditions;
mod crud;
mod exec;
pub mod helm_storage;
mod kubeconfig;
pub mod nodes;
mod port_forward;
mod tokens;
mod wait;
mod workloads;

pub use apply::{Applied, already_applied, for_diff, hide_secret_values};
pub use crud::PatchKind;
pub use exec::ExecResult;
pub use kubeconfig::{kubeconfig_from_parts, minimal_kubeconfig, with_server};
pub use tokens::{IssuedToken, token_kubeconfig};
pub use wait::{Until, WaitSpec, Waited};
pub use workloads::{WorkloadImages, release_workloads};

use crate::error::{ClientError, ErrorKind};
use crate::reconcile::{Change, Detail, TextDiff};
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

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
    /// The API server's clock less this machine's, in milliseconds, once read
    /// (`server_time`): one request per client, not one per token checked.
    clock_offset_ms: Mutex<Option<i128>>,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    crate::runtime::runtime().block_on(future)
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
        other => crate::error_chain(other),
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
        // The caller names how to list what exists.
        Some(404) => return without_hint(what, error),
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

/// A 404's error: the caller adds the hint (how to list what exists is the caller's word).
fn without_hint(what: &str, error: &kube::Error) -> ClientError {
    let status = status_code(error).unwrap_or(404);
    ClientError::new(format!("{what}: {}", describe_error(error))).with_status(status)
}

/// An error of `operation` on `subject` (`Deployment/web in apps`).
fn failed(operation: &'static str, subject: &str, error: &kube::Error) -> ClientError {
    api_error(subject, error).in_operation(operation, " ")
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

/// A change to a Kubernetes object, shown as `Kind/name in namespace`, named `namespace/name`.
fn object_change(
    action: &'static str,
    kind: &str,
    namespace: &str,
    name: &str,
    detail: Option<Detail>,
) -> Change {
    Change {
        action,
        kind: kind.to_string(),
        name: if namespace.is_empty() {
            name.to_string()
        } else {
            format!("{namespace}/{name}")
        },
        resource: display(kind, namespace, name),
        detail,
    }
}

/// `--diff` of an object (or of one `field` of it) as YAML, a Secret's values hidden first
/// ([`hide_secret_values`]).
fn object_detail(
    shown: String,
    before: Option<&Value>,
    after: Option<&Value>,
    field: Option<&str>,
) -> Detail {
    let (before, after) = hide_secret_values(before, after);
    let yaml = |side: Option<Value>| {
        side.map(|object| {
            let part = field.map_or(&object, |field| &object[field]);
            serde_norway::to_string(part).unwrap_or_default()
        })
    };
    Detail::Diffs(vec![TextDiff {
        name: shown,
        before: yaml(before),
        after: yaml(after),
    }])
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
        crate::runtime::install_tls_provider();
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
                        crate::error_chain(&error)
                    ))
                    .with_hint("list contexts with `kubectl config get-contexts`")
                })?,
                None => kube::Config::infer().await.map_err(|error| {
                    ClientError::new(format!(
                        "no Kubernetes configuration: {}",
                        crate::error_chain(&error)
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
                    crate::error_chain(&error)
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
                clock_offset_ms: Mutex::new(None),
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

    /// The API of one object's kind in `namespace` (`""`: the default namespace).
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

    /// Like [`Self::api`], but for lists: `""` means every namespace.
    fn list_api(
        &self,
        resource: &ApiResource,
        caps: &ApiCapabilities,
        namespace: &str,
    ) -> Api<DynamicObject> {
        match namespace {
            "" => Api::all_with(self.client.clone(), resource),
            _ => self.api(resource, caps, namespace),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_change_is_named_namespace_slash_name_and_shown_kind_slash_name_in_namespace() {
        let change = object_change("create", "Deployment", "gitlab", "web", None);
        assert_eq!(
            (
                change.kind.as_str(),
                change.name.as_str(),
                change.resource.as_str()
            ),
            ("Deployment", "gitlab/web", "Deployment/web in gitlab")
        );
        let cluster_wide = object_change("create", "Namespace", "", "gitlab", None);
        assert_eq!(
            (cluster_wide.name.as_str(), cluster_wide.resource.as_str()),
            ("gitlab", "Namespace/gitlab")
        );
    }
}
