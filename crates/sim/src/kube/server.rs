//! The HTTP side of the Kubernetes simulator: routing, content negotiation (JSON, YAML apply
//! patches, protobuf bodies, Tables), streamed watches, and WebSocket exec and port-forward.

use super::cluster::{ApiError, Cluster, FieldValidation, PatchType, Propagation, WriteOptions};
use super::programs::{self, Programs};
use super::rbac;
use super::resources::{self, ResourceType};
use super::runtime::{ExecCall, ExecOutcome, ExecRuntime, Node, Store, StoreGuard};
use super::selectors::{FieldSelector, LabelSelector};
use super::{controllers, crd_schema, protobuf, scale, table};
use crate::http::{Accounting, SimRequest, SimResponse, decode};
use futures::{SinkExt, StreamExt};
use hyper::body::Bytes;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

pub struct KubeSim {
    cluster: Mutex<Cluster>,
    pub accounting: Accounting,
    /// Bearer token clients must send; empty accepts any.
    pub token: String,
    /// The shell basics every container answers (and what the embedding adds).
    pub exec: ExecRuntime,
    /// What runs in the containers of known images (`programs`).
    pub programs: Programs,
    /// Tokens the TokenRequest API issued: token -> its ServiceAccount and expiry.
    pub service_account_tokens: Mutex<std::collections::HashMap<String, IssuedToken>>,
    /// Seconds the API server's clock is ahead of the machine's (`PUT /-/sim/clock`): the clock
    /// tokens are issued and checked by and its `Date` header tells, so a test can let them expire.
    clock_seconds: std::sync::atomic::AtomicI64,
}

/// A ServiceAccount token the TokenRequest API issued.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub namespace: String,
    pub(crate) name: String,
    /// The account's uid: a token outlives neither its account nor a new one of the same name.
    pub(crate) uid: String,
    pub(crate) expires: std::time::SystemTime,
}

impl KubeSim {
    pub fn new(token: String, exec: ExecRuntime) -> KubeSim {
        KubeSim::with_programs(token, exec, Programs::standard())
    }

    pub fn with_programs(token: String, exec: ExecRuntime, programs: Programs) -> KubeSim {
        let mut cluster = Cluster::new();
        cluster.probes.probed_images = programs.probed_images();
        cluster.probes.start_gated_images = programs.start_gated_images();
        cluster.probes.script_images = programs.script_images();
        KubeSim {
            cluster: Mutex::new(cluster),
            accounting: Accounting::default(),
            token,
            exec,
            programs,
            service_account_tokens: Mutex::new(std::collections::HashMap::new()),
            clock_seconds: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// Now on the API server's clock (the machine's, moved by `PUT /-/sim/clock`).
    pub fn now(&self) -> std::time::SystemTime {
        let ahead = self
            .clock_seconds
            .load(std::sync::atomic::Ordering::Relaxed);
        let now = std::time::SystemTime::now();
        let shift = std::time::Duration::from_secs(ahead.unsigned_abs());
        if ahead >= 0 {
            now + shift
        } else {
            now.checked_sub(shift).unwrap_or(now)
        }
    }

    /// Who a request's `Authorization` header says it is: the simulator's own token is the
    /// cluster admin, an issued token its ServiceAccount (while the account exists and the token
    /// has not expired); anything else is no one (401).
    pub fn authenticate(&self, authorization: &str) -> Option<rbac::Identity> {
        if self.token.is_empty() {
            return Some(rbac::Identity::admin());
        }
        let token = authorization.strip_prefix("Bearer ")?.trim();
        if token == self.token {
            return Some(rbac::Identity::admin());
        }
        let issued = self
            .service_account_tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned()?;
        if issued.expires < self.now() {
            return None;
        }
        let cluster = self.cluster();
        let account = cluster.lookup("serviceaccounts", &issued.namespace, &issued.name)?;
        (account["metadata"]["uid"].as_str() == Some(issued.uid.as_str()))
            .then(|| rbac::Identity::service_account(&issued.namespace, &issued.name))
    }

    /// The RBAC authorizer's answer to `identity` asking `attributes`.
    pub fn authorized(&self, identity: &rbac::Identity, attributes: &rbac::Attributes) -> bool {
        identity.admin
            || self.with_policies(|policies| rbac::allowed(identity, attributes, policies))
    }

    /// Runs `decide` over the cluster's Roles, ClusterRoles and their bindings.
    fn with_policies<T>(&self, decide: impl FnOnce(&rbac::Policies) -> T) -> T {
        self.cluster().with_policies(decide)
    }

    /// Runs a command in a container: its image's program, else the shell basics.
    pub fn run_exec(&self, call: &ExecCall) -> ExecOutcome {
        self.programs.exec(self, call)
    }

    pub fn cluster(&self) -> MutexGuard<'_, Cluster> {
        self.cluster
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The store locked, as the programs see it.
struct Locked<'a>(MutexGuard<'a, Cluster>);

impl<'a> std::ops::Deref for Locked<'a> {
    type Target = dyn Store + 'a;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.0
    }
}

/// The node the programs run on: this simulator's store and shell basics.
impl programs::World for KubeSim {
    fn node(&self) -> &dyn Node {
        self
    }

    fn programs(&self) -> &Programs {
        &self.programs
    }
}

impl Node for KubeSim {
    fn store(&self) -> StoreGuard<'_> {
        Box::new(Locked(self.cluster()))
    }

    fn shell(&self, call: &ExecCall) -> ExecOutcome {
        (self.exec)(call)
    }
}

fn full(status: u16, content_type: &str, body: Vec<u8>) -> SimResponse {
    SimResponse::bytes(status, content_type, body)
}

fn json_response(status: u16, value: &Value) -> SimResponse {
    SimResponse::json(status, value)
}

fn error_response(error: &ApiError) -> SimResponse {
    json_response(error.code, &error.status())
}

/// Serves the simulator on `listener` and runs its controllers, until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    sim: Arc<KubeSim>,
    tls: tokio_rustls::TlsAcceptor,
) {
    let world: std::sync::Weak<dyn programs::World> = Arc::downgrade(&sim) as _;
    let _ = sim.programs.shared.world.set(world);
    if let Ok(address) = listener.local_addr() {
        let _ = sim.programs.shared.api_server.set(address);
    }
    let controller = sim.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            controllers::reconcile(&mut controller.cluster());
        }
    });
    // The containers' side (programs starting, stopping, readiness probes) runs processes, so
    // it runs on its own blocking thread, never under the store's lock.
    let tender = sim.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            let sim = tender.clone();
            if tokio::task::spawn_blocking(move || programs::tend(&*sim, &sim.programs))
                .await
                .is_err()
            {
                continue;
            }
        }
    });
    crate::http::accept_loop(listener, Some(tls), move |request| {
        let sim = sim.clone();
        async move {
            // Every answer carries the API server's clock, as Go's net/http writes it.
            let date = httpdate::fmt_http_date(sim.now());
            Some(answer(sim, request).await.with_header("Date", date))
        }
    })
    .await;
}

fn query_value<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Where a resource URL points.
struct Target {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

/// Splits `/api/v1/...` or `/apis/g/v/...` into group, version and the rest.
fn split_api_path(path: &str) -> Option<(String, String, Vec<String>)> {
    let segments: Vec<String> = path.trim_matches('/').split('/').map(decode).collect();
    match segments.first().map(String::as_str) {
        Some("api") if segments.len() >= 2 => {
            Some((String::new(), segments[1].clone(), segments[2..].to_vec()))
        }
        Some("apis") if segments.len() >= 3 => Some((
            segments[1].clone(),
            segments[2].clone(),
            segments[3..].to_vec(),
        )),
        _ => None,
    }
}

fn resolve(
    cluster: &Cluster,
    group: &str,
    version: &str,
    rest: &[String],
) -> Result<Target, ApiError> {
    let unknown = |plural: &str| {
        ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({plural} in {group}/{version})"
            ),
        )
    };
    let (namespace, rest) = if rest.len() >= 3 && rest[0] == "namespaces" {
        let candidate = cluster.resource(group, version, &rest[2]);
        match candidate {
            Some(rt) if rt.namespaced => (Some(rest[1].clone()), &rest[2..]),
            _ => (None, rest),
        }
    } else {
        (None, rest)
    };
    let Some(plural) = rest.first() else {
        return Err(unknown(""));
    };
    let rt = cluster
        .resource(group, version, plural)
        .ok_or_else(|| unknown(plural))?;
    let subresource = rest.get(2).cloned();
    if let Some(sub) = &subresource
        && !rt.subresources.contains(sub)
    {
        return Err(unknown(&format!("{plural}/{sub}")));
    }
    if rest.len() > 3 {
        return Err(unknown(plural));
    }
    Ok(Target {
        rt,
        namespace,
        name: rest.get(1).cloned(),
        subresource,
    })
}

/// The body as JSON: protobuf envelopes decoded, apply patches parsed as YAML.
fn parse_body(content_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    if protobuf::is_protobuf(content_type) {
        return protobuf::decode(body).map_err(|message| {
            ApiError::bad_request(format!("cannot decode the protobuf body: {message}"))
        });
    }
    if content_type.starts_with("application/apply-patch+yaml") {
        return serde_norway::from_slice(body)
            .map_err(|error| ApiError::bad_request(format!("error decoding YAML: {error}")));
    }
    serde_json::from_slice(body).map_err(|error| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {error}"
        ))
    })
}

/// The field manager: `fieldManager`, else the User-Agent's program name (as the server does).
fn manager_of(pairs: &[(String, String)], user_agent: &str) -> String {
    query_value(pairs, "fieldManager")
        .map(str::to_string)
        .unwrap_or_else(|| {
            user_agent
                .split('/')
                .next()
                .unwrap_or("unknown")
                .to_string()
        })
}

async fn answer(sim: Arc<KubeSim>, mut request: SimRequest) -> SimResponse {
    let method = request.method.clone();
    let path = request.path.clone();
    let on_upgrade = request.upgrade.take();
    let header = |name: &str| request.header(name).unwrap_or("").to_string();
    let Some(identity) = sim.authenticate(&header("authorization")) else {
        sim.accounting.record(&method, &path, 401, None);
        return json_response(
            401,
            &ApiError::new(401, "Unauthorized", "Unauthorized").status(),
        );
    };
    // exec, port-forward and logs are pods' subresources: RBAC decides them before they start.
    if let Some(refused) = refuse_subresource(&sim, &identity, &method, &path) {
        sim.accounting.record(&method, &path, refused.status, None);
        return refused;
    }
    // The simulator's request log (tests count writes with it); the admin's only.
    if (path == "/-/sim/requests" || path == "/-/sim/clock") && !identity.admin {
        return forbidden(&format!(
            "forbidden: User {:?} cannot get path {path:?}",
            identity.user
        ));
    }
    if path == "/-/sim/clock" && identity.admin {
        return clock(&sim, &method, &request.body);
    }
    if path == "/-/sim/requests" {
        return match method.as_str() {
            "GET" => json_response(200, &sim.accounting.snapshot()),
            "DELETE" => {
                sim.accounting.clear();
                full(204, "text/plain", Vec::new())
            }
            _ => error_response(&ApiError::new(405, "MethodNotAllowed", "GET or DELETE")),
        };
    }
    if path.ends_with("/exec") || path.ends_with("/portforward") {
        let upgrade = header("upgrade").to_ascii_lowercase();
        let response = match on_upgrade {
            Some(on_upgrade) if upgrade == "websocket" => {
                let protocols = header("sec-websocket-protocol");
                let key = header("sec-websocket-key");
                stream_session(
                    &sim,
                    &path,
                    &request.query_pairs,
                    &protocols,
                    &key,
                    on_upgrade,
                )
            }
            _ => error_response(&ApiError::bad_request(format!(
                "the simulator speaks the WebSocket exec and port-forward protocols (v5.channel.k8s.io, v4.channel.k8s.io), not {}",
                if upgrade.is_empty() {
                    "plain HTTP".into()
                } else {
                    upgrade
                }
            ))),
        };
        sim.accounting.record(&method, &path, response.status, None);
        return response;
    }
    if method == "GET"
        && path.ends_with("/log")
        && let Some(text) = program_logs(&sim, &path, &request.query_pairs)
    {
        sim.accounting.record(&method, &path, 200, None);
        return full(200, "text/plain", text.into_bytes());
    }
    let response = route(
        &sim,
        &identity,
        &method,
        &path,
        &request.query_pairs,
        &header("content-type"),
        &header("accept"),
        &header("user-agent"),
        &request.body,
    )
    .await;
    sim.accounting.record(&method, &path, response.status, None);
    response
}

/// A container's log when its program keeps one (`kubectl logs openbao-0`: the server's output,
/// or why nothing runs); `None` leaves the answer to the store (an empty log).
fn program_logs(sim: &KubeSim, path: &str, pairs: &[(String, String)]) -> Option<String> {
    let (group, version, rest) = split_api_path(path)?;
    let call = {
        let cluster = sim.cluster();
        let target = resolve(&cluster, &group, &version, &rest).ok()?;
        if target.rt.kind != "Pod" {
            return None;
        }
        let namespace = target.namespace.clone().unwrap_or_default();
        let pod = cluster
            .get(&target.rt, &namespace, target.name.as_deref()?)
            .ok()?;
        let containers = pod["spec"]["containers"].as_array()?;
        let container = match query_value(pairs, "container") {
            Some(name) => containers.iter().find(|c| c["name"] == name)?,
            None => containers.first()?,
        };
        programs::call_for(&*cluster, &pod, container, Vec::new())
    };
    sim.programs
        .logs_tail(&call, query_value(pairs, "tailLines"))
}

#[allow(clippy::too_many_arguments)]
async fn route(
    sim: &Arc<KubeSim>,
    identity: &rbac::Identity,
    method: &str,
    path: &str,
    pairs: &[(String, String)],
    content_type: &str,
    accept: &str,
    user_agent: &str,
    body: &[u8],
) -> SimResponse {
    let trimmed = path.trim_end_matches('/');
    if method == "GET" {
        match trimmed {
            "/version" => {
                return json_response(
                    200,
                    &json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0-bprun-sim",
                            "gitCommit": "bprun", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                            "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"}),
                );
            }
            "/healthz" | "/readyz" | "/livez" => return full(200, "text/plain", b"ok".to_vec()),
            // kubectl validates kinds it cannot find in OpenAPI v3 against v2, which it reads as
            // protobuf only: an empty Swagger 2.0 document (field 1, "2.0") lets it go on to
            // the REST mapping, as against a real server.
            "/openapi/v2" => {
                return full(
                    200,
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    vec![0x0a, 0x03, b'2', b'.', b'0'],
                );
            }
            "/api" => return json_response(200, &resources::api_versions()),
            "/apis" => {
                return json_response(200, &resources::api_group_list(&sim.cluster().resources));
            }
            "/openapi/v3" => {
                return json_response(200, &resources::openapi_index(&sim.cluster().resources));
            }
            _ => {}
        }
        if let Some(rest) = trimmed.strip_prefix("/openapi/v3/") {
            let parts: Vec<&str> = rest.split('/').collect();
            let (group, version) = match parts.as_slice() {
                ["api", version] => ("", *version),
                ["apis", group, version] => (*group, *version),
                _ => ("-", "-"),
            };
            let cluster = sim.cluster();
            if resources::api_resource_list(&cluster.resources, group, version).is_some() {
                return json_response(
                    200,
                    &resources::openapi_document(&cluster.resources, group, version),
                );
            }
            return json_response(404, &ApiError::new(404, "NotFound", "not found").status());
        }
        if let Some(group) = trimmed.strip_prefix("/apis/")
            && !group.contains('/')
        {
            return match resources::api_group(&sim.cluster().resources, group) {
                Some(value) => json_response(200, &value),
                None => error_response(&ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )),
            };
        }
    }
    let Some((group, version, rest)) = split_api_path(trimmed) else {
        return error_response(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    if rest.is_empty() {
        if method != "GET" {
            return error_response(&ApiError::new(
                405,
                "MethodNotAllowed",
                "method not allowed",
            ));
        }
        return match resources::api_resource_list(&sim.cluster().resources, &group, &version) {
            Some(value) => json_response(200, &value),
            None => error_response(&ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )),
        };
    }
    let target = {
        let cluster = sim.cluster();
        match resolve(&cluster, &group, &version, &rest) {
            Ok(target) => target,
            Err(error) => return error_response(&error),
        }
    };
    let watch = matches!(query_value(pairs, "watch"), Some("1" | "true"));
    let attributes = attributes_of(&target, method, watch);
    // Self-subject reviews are every authenticated user's (the `system:basic-user` role).
    let basic_user = resources::is_review(&target.rt.kind) && attributes.verb == "create";
    if !basic_user && !sim.authorized(identity, &attributes) {
        return forbidden_target(identity, &attributes, &target);
    }
    if method == "POST" && resources::is_review(&target.rt.kind) {
        let request = parse_body(content_type, body).unwrap_or(json!({}));
        return json_response(
            201,
            &review_as(
                sim,
                identity,
                &target.rt.kind,
                &target.rt.api_version(),
                &request,
            ),
        );
    }
    if method == "POST" && target.subresource.as_deref() == Some("token") {
        return match issue_token(
            sim,
            &target,
            &parse_body(content_type, body).unwrap_or(json!({})),
        ) {
            Ok(answer) => json_response(201, &answer),
            Err(error) => error_response(&error),
        };
    }
    if method == "GET" && watch {
        return watch_response(sim, &target, pairs);
    }
    let mut warnings = Vec::new();
    let response = match resource_call(
        sim,
        identity,
        method,
        &target,
        pairs,
        content_type,
        accept,
        user_agent,
        body,
        &mut warnings,
    ) {
        Ok((status, value)) => {
            if method == "GET" && table::wants_table(accept) && target.subresource.is_none() {
                let include = query_value(pairs, "includeObject").unwrap_or("Metadata");
                let objects = if value["items"].is_array() {
                    value["items"].as_array().cloned().unwrap_or_default()
                } else {
                    vec![value]
                };
                let cluster = sim.cluster();
                let version = cluster.resource_version();
                let printer_columns = if target.rt.custom {
                    cluster
                        .lookup(
                            "customresourcedefinitions.apiextensions.k8s.io",
                            "",
                            &format!("{}.{}", target.rt.plural, target.rt.group),
                        )
                        .map(|crd| crd_schema::printer_columns(crd, &target.rt.version))
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                let table = if printer_columns.is_empty() {
                    table::table(&target.rt.kind, &objects, include, version)
                } else {
                    table::custom_table(&printer_columns, &objects, include, version)
                };
                return json_response(200, &table);
            }
            json_response(status, &value)
        }
        Err(error) => error_response(&error),
    };
    // RFC 7234 warnings, as the API server sends them (kubectl prints `Warning: <text>`).
    warnings.into_iter().fold(response, |response, text| {
        response.with_header("warning", format!("299 - {text:?}"))
    })
}

#[allow(clippy::too_many_arguments)]
fn resource_call(
    sim: &Arc<KubeSim>,
    identity: &rbac::Identity,
    method: &str,
    target: &Target,
    pairs: &[(String, String)],
    content_type: &str,
    _accept: &str,
    user_agent: &str,
    body: &[u8],
    warnings: &mut Vec<String>,
) -> Result<(u16, Value), ApiError> {
    let rt = &target.rt;
    let namespace = target.namespace.clone().unwrap_or_default();
    if rt.namespaced && target.namespace.is_none() && target.name.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({} is namespaced)",
                rt.plural
            ),
        ));
    }
    let options = WriteOptions {
        manager: manager_of(pairs, user_agent),
        dry_run: query_value(pairs, "dryRun").is_some_and(|v| v == "All"),
        force: query_value(pairs, "force").is_some_and(|v| v == "true"),
        field_validation: FieldValidation::from_query(query_value(pairs, "fieldValidation")),
        subresource: target.subresource.clone(),
        requester: (!identity.admin).then(|| identity.clone()),
    };
    if resources::is_review(&rt.kind) {
        if method != "POST" {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{method} is not supported on {}", rt.plural),
            ));
        }
        let request = parse_body(content_type, body).unwrap_or(json!({}));
        return Ok((201, review(&rt.kind, &rt.api_version(), &request)));
    }
    let mut cluster = sim.cluster();
    if target.subresource.as_deref() == Some("scale")
        && let Some(name) = &target.name
    {
        return scale_call(
            &mut cluster,
            method,
            rt,
            &namespace,
            name,
            content_type,
            body,
            &options,
        );
    }
    cluster.warnings.clear();
    let result = match (method, &target.name, target.subresource.as_deref()) {
        ("GET", None, _) => {
            let labels = LabelSelector::parse(query_value(pairs, "labelSelector").unwrap_or(""))
                .map_err(ApiError::bad_request)?;
            let fields = FieldSelector::parse(query_value(pairs, "fieldSelector").unwrap_or(""))
                .map_err(ApiError::bad_request)?;
            let items = cluster.list(rt, target.namespace.as_deref(), &labels, &fields);
            Ok((
                200,
                json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
                       "metadata": {"resourceVersion": cluster.resource_version().to_string()}, "items": items}),
            ))
        }
        ("GET", Some(name), Some("log")) => {
            cluster.get(rt, &namespace, name)?;
            Ok((200, json!("")))
        }
        ("GET", Some(name), _) => cluster.get(rt, &namespace, name).map(|v| (200, v)),
        ("POST", None, _) => {
            if rt.namespaced && target.namespace.is_none() {
                return Err(ApiError::new(
                    405,
                    "MethodNotAllowed",
                    "create needs a namespace",
                ));
            }
            let value = parse_body(content_type, body)?;
            cluster
                .create(rt, &namespace, value, &options)
                .map(|v| (201, v))
        }
        ("PUT", Some(name), _) => {
            let value = parse_body(content_type, body)?;
            cluster
                .update(rt, &namespace, name, value, &options)
                .map(|(v, created)| (if created { 201 } else { 200 }, v))
        }
        ("PATCH", Some(name), _) => {
            let Some(patch_type) = PatchType::from_content_type(content_type) else {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type})"
                    ),
                ));
            };
            let value = parse_body(content_type, body)?;
            cluster
                .patch(rt, &namespace, name, patch_type, value, &options)
                .map(|(v, created)| (if created { 201 } else { 200 }, v))
        }
        ("DELETE", Some(name), None) => {
            // The DeleteOptions body may come as JSON or protobuf; dryRun may sit in either.
            let options_body = parse_body(content_type, body).unwrap_or(json!({}));
            let dry_run = options.dry_run
                || options_body["dryRun"]
                    .as_array()
                    .is_some_and(|list| list.iter().any(|v| v == "All"));
            let propagation = propagation_of(pairs, &options_body)?;
            cluster
                .delete_preconditions_hold(rt, &namespace, name, &options_body["preconditions"])
                .and_then(|()| cluster.delete_with(rt, &namespace, name, dry_run, propagation))
                .map(|v| (200, v))
        }
        ("DELETE", None, None) => {
            let options_body = parse_body(content_type, body).unwrap_or(json!({}));
            let propagation = propagation_of(pairs, &options_body)?;
            let labels = LabelSelector::parse(query_value(pairs, "labelSelector").unwrap_or(""))
                .map_err(ApiError::bad_request)?;
            let items = cluster.list(
                rt,
                target.namespace.as_deref(),
                &labels,
                &FieldSelector::default(),
            );
            for item in &items {
                let ns = item["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
                cluster.delete_with(rt, &ns, &name, options.dry_run, propagation)?;
            }
            Ok((
                200,
                json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": {}, "items": items}),
            ))
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported on this path"),
        )),
    };
    *warnings = std::mem::take(&mut cluster.warnings);
    result
}

/// What a resource request asks, as the authorizer sees it.
fn attributes_of(target: &Target, method: &str, watch: bool) -> rbac::Attributes {
    let subresource = target.subresource.clone().unwrap_or_default();
    rbac::Attributes {
        verb: rbac::Attributes::verb_of(method, target.name.is_some(), watch, &subresource)
            .to_string(),
        group: target.rt.group.clone(),
        resource: target.rt.plural.clone(),
        subresource,
        namespace: target.namespace.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
    }
}

/// `GET /-/sim/clock`: the API server's time; `PUT {"advance_days": N}` moves it (tests only).
fn clock(sim: &KubeSim, method: &str, body: &[u8]) -> SimResponse {
    if method == "PUT" {
        let asked: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let Some(days) = asked["advance_days"].as_i64() else {
            return error_response(&ApiError::bad_request(
                "advance_days is missing".to_string(),
            ));
        };
        sim.clock_seconds.fetch_add(
            days.saturating_mul(86_400),
            std::sync::atomic::Ordering::Relaxed,
        );
    } else if method != "GET" {
        return error_response(&ApiError::new(405, "MethodNotAllowed", "GET or PUT"));
    }
    json_response(
        200,
        &json!({"now": humantime::format_rfc3339_seconds(sim.now()).to_string()}),
    )
}

fn forbidden(message: &str) -> SimResponse {
    error_response(&ApiError::new(403, "Forbidden", message))
}

/// The API server's 403 for a request RBAC refuses (`details` names the resource).
fn forbidden_target(
    identity: &rbac::Identity,
    attributes: &rbac::Attributes,
    target: &Target,
) -> SimResponse {
    let mut error = ApiError::new(
        403,
        "Forbidden",
        rbac::forbidden_message(identity, attributes),
    );
    let mut details = json!({"kind": target.rt.plural});
    if let Some(name) = &target.name {
        details["name"] = json!(name);
    }
    if !target.rt.group.is_empty() {
        details["group"] = json!(target.rt.group);
    }
    error.details = details;
    error_response(&error)
}

/// RBAC's answer for a pod's exec, port-forward or log request (`None`: go on).
fn refuse_subresource(
    sim: &KubeSim,
    identity: &rbac::Identity,
    method: &str,
    path: &str,
) -> Option<SimResponse> {
    if identity.admin
        || !(path.ends_with("/exec") || path.ends_with("/portforward") || path.ends_with("/log"))
    {
        return None;
    }
    let (group, version, rest) = split_api_path(path)?;
    let target = resolve(&sim.cluster(), &group, &version, &rest).ok()?;
    let attributes = attributes_of(&target, method, false);
    (!sim.authorized(identity, &attributes))
        .then(|| forbidden_target(identity, &attributes, &target))
}

/// `POST .../serviceaccounts/NAME/token` (TokenRequest, `kubectl create token`): a token that
/// authenticates as the account until it expires (`expirationSeconds`, default an hour) or the
/// account is deleted.
fn issue_token(sim: &KubeSim, target: &Target, request: &Value) -> Result<Value, ApiError> {
    use base64::Engine as _;
    let namespace = target.namespace.clone().unwrap_or_default();
    let name = target.name.clone().unwrap_or_default();
    let account = sim.cluster().get(&target.rt, &namespace, &name)?;
    let uid = account["metadata"]["uid"]
        .as_str()
        .unwrap_or("")
        .to_string();
    // kind's API server sets no --service-account-max-token-expiration: a token lives as long
    // as asked, an hour when no one says; under 10 minutes is invalid.
    let seconds = request["spec"]["expirationSeconds"]
        .as_u64()
        .unwrap_or(3600);
    if seconds < 600 {
        let mut error = ApiError::new(
            422,
            "Invalid",
            format!(
                "TokenRequest.authentication.k8s.io {name:?} is invalid: spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes"
            ),
        );
        error.details =
            json!({"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest"});
        return Err(error);
    }
    let now = sim.now();
    let expires = now + std::time::Duration::from_secs(seconds);
    let epoch = |time: std::time::SystemTime| {
        time.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    // No audience asked: the API server's own.
    let audiences = request["spec"]["audiences"]
        .as_array()
        .filter(|asked| !asked.is_empty())
        .cloned()
        .unwrap_or_else(|| vec![json!("https://kubernetes.default.svc.cluster.local")]);
    // Shaped as the API server's JWTs are; the simulator knows its tokens by their text.
    let encode =
        |value: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string());
    let header = encode(&json!({"alg": "RS256", "kid": "bprun-sim"}));
    let claims = encode(&json!({
        "aud": audiences, "exp": epoch(expires), "iat": epoch(now),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
        "nbf": epoch(now), "sub": format!("system:serviceaccount:{namespace}:{name}"),
    }));
    let signature: String = (0..43).map(|_| fastrand::alphanumeric()).collect();
    let token = format!("{header}.{claims}.{signature}");
    sim.service_account_tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            token.clone(),
            IssuedToken {
                namespace: namespace.clone(),
                name: name.clone(),
                uid,
                expires,
            },
        );
    Ok(json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null},
        "status": {"token": token,
                   "expirationTimestamp": humantime::format_rfc3339_seconds(expires).to_string()}
    }))
}

/// The answer to a review by `identity`: what RBAC allows it.
fn review_as(
    sim: &KubeSim,
    identity: &rbac::Identity,
    kind: &str,
    api_version: &str,
    request: &Value,
) -> Value {
    if identity.admin {
        return review(kind, api_version, request);
    }
    let attributes = &request["spec"]["resourceAttributes"];
    let text = |key: &str| attributes[key].as_str().unwrap_or("").to_string();
    let status = match kind {
        "SelfSubjectAccessReview" => {
            let asked = rbac::Attributes {
                verb: text("verb"),
                group: text("group"),
                resource: text("resource"),
                subresource: text("subresource"),
                namespace: text("namespace"),
                name: text("name"),
            };
            if sim.authorized(identity, &asked) {
                json!({"allowed": true, "reason": "RBAC: allowed by a binding"})
            } else {
                json!({"allowed": false})
            }
        }
        "SelfSubjectRulesReview" => {
            let namespace = request["spec"]["namespace"].as_str().unwrap_or("");
            let rules = sim.with_policies(|policies| rbac::rules_in(identity, namespace, policies));
            json!({"resourceRules": rules,
                   "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/"]}],
                   "incomplete": false})
        }
        _ => json!({"userInfo": {"username": identity.user, "groups": identity.groups}}),
    };
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"creationTimestamp": null},
           "spec": request.get("spec").cloned().unwrap_or(json!({})), "status": status})
}

/// The answer to a review by the cluster admin (the simulator's own token): everything.
fn review(kind: &str, api_version: &str, request: &Value) -> Value {
    let status = match kind {
        "SelfSubjectAccessReview" => json!({"allowed": true,
            "reason": "the simulator's single token belongs to a cluster admin"}),
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false}),
        _ => json!({"userInfo": {"username": "kubernetes-admin",
            "groups": ["kubeadm:cluster-admins", "system:authenticated"]}}),
    };
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"creationTimestamp": null},
           "spec": request.get("spec").cloned().unwrap_or(json!({})), "status": status})
}

/// GET, PUT and PATCH of a workload's `/scale` (an `autoscaling/v1 Scale`).
#[allow(clippy::too_many_arguments)]
fn scale_call(
    cluster: &mut Cluster,
    method: &str,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    content_type: &str,
    body: &[u8],
    options: &WriteOptions,
) -> Result<(u16, Value), ApiError> {
    let live = cluster.get(rt, namespace, name)?;
    let current = scale::scale_of(&live);
    let value = match method {
        "GET" => return Ok((200, current)),
        "PUT" | "PATCH" => parse_body(content_type, body)?,
        _ => {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{method} is not supported on this path"),
            ));
        }
    };
    let write = if method == "PUT" {
        let sent = value["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if !sent.is_empty() && live["metadata"]["resourceVersion"].as_str() != Some(sent) {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    rt.plural, rt.group
                ),
            ));
        }
        scale::ScaleWrite::Replace(&value)
    } else if PatchType::from_content_type(content_type) == Some(PatchType::Json) {
        scale::ScaleWrite::Json(&value)
    } else {
        scale::ScaleWrite::Merge(&value)
    };
    let replicas = scale::requested_replicas(&current, write).map_err(|causes| {
        ApiError::new(
            422,
            "Invalid",
            format!("Scale.autoscaling \"{name}\" is invalid: {causes}"),
        )
    })?;
    let (stored, _) = cluster.patch(
        rt,
        namespace,
        name,
        PatchType::Merge,
        json!({"spec": {"replicas": replicas}}),
        options,
    )?;
    Ok((200, scale::scale_of(&stored)))
}

/// How a DELETE treats dependents: `propagationPolicy` from the query or the DeleteOptions body
/// (JSON or protobuf), else the deprecated `orphanDependents`, else Background.
fn propagation_of(
    pairs: &[(String, String)],
    options_body: &Value,
) -> Result<Propagation, ApiError> {
    let named = query_value(pairs, "propagationPolicy")
        .or_else(|| options_body["propagationPolicy"].as_str())
        .filter(|name| !name.is_empty());
    if let Some(name) = named {
        return Propagation::from_name(name).ok_or_else(|| {
            ApiError::new(
                422,
                "Invalid",
                format!(
                    "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{name}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )
        });
    }
    let orphan = query_value(pairs, "orphanDependents")
        .map(|v| v == "true")
        .or_else(|| options_body["orphanDependents"].as_bool());
    Ok(match orphan {
        Some(true) => Propagation::Orphan,
        _ => Propagation::Background,
    })
}

/// A watch: initial events (when asked or from version 0), a bookmark marking their end,
/// then live events, until `timeoutSeconds` (at most 30 minutes) or the client goes away.
fn watch_response(sim: &Arc<KubeSim>, target: &Target, pairs: &[(String, String)]) -> SimResponse {
    let rt = target.rt.clone();
    let labels = match LabelSelector::parse(query_value(pairs, "labelSelector").unwrap_or("")) {
        Ok(selector) => selector,
        Err(message) => return error_response(&ApiError::bad_request(message)),
    };
    let mut field_text = query_value(pairs, "fieldSelector")
        .unwrap_or("")
        .to_string();
    if let Some(name) = &target.name {
        field_text = format!("metadata.name={name}");
    }
    let fields = match FieldSelector::parse(&field_text) {
        Ok(selector) => selector,
        Err(message) => return error_response(&ApiError::bad_request(message)),
    };
    let send_initial = query_value(pairs, "sendInitialEvents") == Some("true");
    let bookmarks = query_value(pairs, "allowWatchBookmarks") == Some("true");
    let since = query_value(pairs, "resourceVersion").unwrap_or("");
    let timeout = query_value(pairs, "timeoutSeconds")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1800)
        .min(1800);
    let namespace = target.namespace.clone();
    let matches = {
        let rt = rt.clone();
        let labels = labels.clone();
        let fields = fields.clone();
        let namespace = namespace.clone();
        move |store_key: &str, ns: &str, object: &Value| {
            store_key == rt.store_key()
                && namespace.as_deref().is_none_or(|wanted| wanted == ns)
                && labels.matches(&object["metadata"]["labels"])
                && fields.matches(object)
        }
    };
    let (initial, mut receiver, start_version) = {
        let cluster = sim.cluster();
        let receiver = cluster.subscribe();
        let current = cluster.resource_version();
        let initial: Vec<Value> = if send_initial || since.is_empty() || since == "0" {
            cluster
                .list(&rt, namespace.as_deref(), &labels, &fields)
                .into_iter()
                .map(|object| json!({"type": "ADDED", "object": object}))
                .collect()
        } else {
            let Ok(version) = since.parse::<u64>() else {
                return error_response(&ApiError::bad_request(format!(
                    "invalid resourceVersion {since:?}"
                )));
            };
            match cluster.events_since(version) {
                Some(events) => events
                    .iter()
                    .filter(|event| matches(&event.store_key, &event.namespace, &event.object))
                    .map(|event| {
                        let mut object = event.object.clone();
                        object["apiVersion"] = json!(rt.api_version());
                        json!({"type": event.kind, "object": object})
                    })
                    .collect(),
                None => vec![
                    json!({"type": "ERROR", "object": ApiError::new(410, "Expired", format!("too old resource version: {version} ({current})")).status()}),
                ],
            }
        };
        (initial, receiver, current)
    };
    let (sender, channel) = tokio::sync::mpsc::channel::<Bytes>(64);
    let kind = rt.kind.clone();
    let api_version = rt.api_version();
    tokio::spawn(async move {
        let line = |value: &Value| Bytes::from(format!("{value}\n"));
        for event in &initial {
            if sender.send(line(event)).await.is_err() {
                return;
            }
        }
        if send_initial {
            let bookmark = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                "metadata": {"resourceVersion": start_version.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}});
            if sender.send(line(&bookmark)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut last_version = start_version;
        let mut bookmark_tick = tokio::time::interval(Duration::from_secs(15));
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = bookmark_tick.tick(), if bookmarks => {
                    let bookmark = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": last_version.to_string()}}});
                    if sender.send(line(&bookmark)).await.is_err() { return; }
                }
                received = receiver.recv() => {
                    let Ok(event) = received else { return };
                    if event.resource_version <= start_version { continue; }
                    last_version = event.resource_version;
                    if !matches(&event.store_key, &event.namespace, &event.object) { continue; }
                    let mut object = event.object.clone();
                    object["apiVersion"] = json!(api_version);
                    let value = json!({"type": event.kind, "object": object});
                    if sender.send(line(&value)).await.is_err() { return; }
                }
            }
        }
    });
    SimResponse::stream(200, "application/json", channel)
        .with_header("transfer-encoding", "chunked")
}

/// Answers the WebSocket upgrade of an exec or port-forward and runs the session.
fn stream_session(
    sim: &Arc<KubeSim>,
    path: &str,
    pairs: &[(String, String)],
    protocols: &str,
    key: &str,
    on_upgrade: hyper::upgrade::OnUpgrade,
) -> SimResponse {
    let Some((group, version, rest)) = split_api_path(path) else {
        return error_response(&ApiError::new(404, "NotFound", "not found"));
    };
    let (pod, namespace, subresource) = {
        let cluster = sim.cluster();
        let target = match resolve(&cluster, &group, &version, &rest) {
            Ok(target) => target,
            Err(error) => return error_response(&error),
        };
        let namespace = target.namespace.clone().unwrap_or_default();
        let name = target.name.clone().unwrap_or_default();
        if target.rt.kind != "Pod" {
            return error_response(&ApiError::bad_request("exec and port-forward go to pods"));
        }
        match cluster.get(&target.rt, &namespace, &name) {
            Ok(pod) => (pod, namespace, target.subresource.unwrap_or_default()),
            Err(error) => return error_response(&error),
        }
    };
    if pod["status"]["phase"] != "Running" {
        return error_response(&ApiError::bad_request(format!(
            "pod {} is not running (phase {})",
            pod["metadata"]["name"].as_str().unwrap_or(""),
            pod["status"]["phase"].as_str().unwrap_or("unknown")
        )));
    }
    let offered: Vec<&str> = protocols.split(',').map(str::trim).collect();
    let Some(protocol) = ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"]
        .into_iter()
        .find(|p| offered.contains(p))
    else {
        return error_response(&ApiError::bad_request(format!(
            "no supported WebSocket subprotocol in {protocols:?}; the simulator speaks v5.channel.k8s.io and v4.channel.k8s.io"
        )));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let sim = sim.clone();
    let pairs = pairs.to_vec();
    let protocol_v5 = protocol == "v5.channel.k8s.io";
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let io = hyper_util::rt::TokioIo::new(upgraded);
        let socket = tokio_tungstenite::WebSocketStream::from_raw_socket(
            io,
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            None,
        )
        .await;
        if subresource == "exec" {
            exec_session(sim, socket, pod, namespace, pairs, protocol_v5).await;
        } else {
            port_forward_session(&sim, socket, pod, pairs).await;
        }
    });
    SimResponse::empty(101)
        .with_header("upgrade", "websocket")
        .with_header("connection", "Upgrade")
        .with_header("sec-websocket-accept", accept)
        .with_header("sec-websocket-protocol", protocol)
}

type Socket = tokio_tungstenite::WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

async fn exec_session(
    sim: Arc<KubeSim>,
    socket: Socket,
    pod: Value,
    namespace: String,
    pairs: Vec<(String, String)>,
    protocol_v5: bool,
) {
    let (mut sink, mut stream) = socket.split();
    let command: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let container = query_value(&pairs, "container")
        .map(str::to_string)
        .or_else(|| containers.first().cloned())
        .unwrap_or_default();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let send_status =
        |status: Value| Message::binary([vec![3u8], status.to_string().into_bytes()].concat());
    if !containers.contains(&container) {
        let _ = sink
            .send(send_status(
                json!({"metadata": {}, "status": "Failure", "reason": "BadRequest",
                "message": format!("container {container} is not valid for pod {pod_name}")}),
            ))
            .await;
        close_normally(&mut sink).await;
        return;
    }
    let mut stdin = Vec::new();
    if query_value(&pairs, "stdin").is_some_and(|v| v == "true" || v == "1") {
        // v5 clients say when stdin ends (channel 255); v4 ones cannot, so a pause ends it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let idle = if protocol_v5 || stdin.is_empty() {
                deadline
            } else {
                (tokio::time::Instant::now() + Duration::from_millis(300)).min(deadline)
            };
            let frame = tokio::time::timeout_at(idle, stream.next()).await;
            let Ok(Some(Ok(message))) = frame else { break };
            match message {
                Message::Binary(data) if !data.is_empty() => match data[0] {
                    0 => stdin.extend_from_slice(&data[1..]),
                    255 if data.get(1) == Some(&0) => break,
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
    }
    let mut call = {
        let cluster = sim.cluster();
        // The pod as it is now (its Secrets may have changed since the session began).
        let current = cluster
            .lookup("pods", &namespace, &pod_name)
            .cloned()
            .unwrap_or(pod.clone());
        let spec = current["spec"]["containers"]
            .as_array()
            .and_then(|list| list.iter().find(|c| c["name"] == container.as_str()))
            .cloned()
            .unwrap_or(Value::Null);
        programs::call_for(&*cluster, &current, &spec, command)
    };
    call.stdin = stdin;
    let runner = sim.clone();
    let outcome = tokio::task::spawn_blocking(move || runner.run_exec(&call))
        .await
        .unwrap_or(ExecOutcome {
            code: 1,
            stdout: Vec::new(),
            stderr: b"exec runtime failed\n".to_vec(),
        });
    if !outcome.stdout.is_empty() {
        let _ = sink
            .send(Message::binary([vec![1u8], outcome.stdout].concat()))
            .await;
    }
    if !outcome.stderr.is_empty() {
        let _ = sink
            .send(Message::binary([vec![2u8], outcome.stderr].concat()))
            .await;
    }
    let status = if outcome.code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
               "message": format!("command terminated with non-zero exit code: error executing command, exit status {}", outcome.code),
               "details": {"causes": [{"reason": "ExitCode", "message": outcome.code.to_string()}]}})
    };
    let _ = sink.send(send_status(status)).await;
    close_normally(&mut sink).await;
}

/// Ends a session with a Normal close frame (clients report a bare close as an error).
async fn close_normally(sink: &mut futures::stream::SplitSink<Socket, Message>) {
    use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    let _ = sink.close().await;
}

/// Where a pod's port is really served on this machine: the pod annotation
/// `sim.bprun.dev/forward-<port>: 127.0.0.1:NNNN` (loopback only).
pub fn forward_target(pod: &Value, port: u16) -> Option<std::net::SocketAddr> {
    let address: std::net::SocketAddr = pod["metadata"]["annotations"]
        [format!("sim.bprun.dev/forward-{port}")]
    .as_str()?
    .parse()
    .ok()?;
    address.ip().is_loopback().then_some(address)
}

async fn port_forward_session(
    sim: &KubeSim,
    socket: Socket,
    pod: Value,
    pairs: Vec<(String, String)>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut sink, mut stream) = socket.split();
    let port: u16 = query_value(&pairs, "ports")
        .and_then(|p| p.split(',').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(0);
    let prefix = port.to_le_bytes();
    for channel in [0u8, 1u8] {
        if sink
            .send(Message::binary(vec![channel, prefix[0], prefix[1]]))
            .await
            .is_err()
        {
            return;
        }
    }
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let target = sim
        .programs
        .forward(&pod, port)
        .or_else(|| forward_target(&pod, port));
    let connection = match target {
        Some(address) => tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(address),
        )
        .await
        .ok()
        .and_then(Result::ok),
        None => None,
    };
    let Some(connection) = connection else {
        let message = format!(
            "error forwarding port {port} to pod {pod_name}: dial tcp 127.0.0.1:{port}: connect: connection refused (the simulator forwards ports its pods declare with sim.bprun.dev/forward-{port})"
        );
        let _ = sink
            .send(Message::binary([vec![1u8], message.into_bytes()].concat()))
            .await;
        close_normally(&mut sink).await;
        return;
    };
    let (mut reader, mut writer) = connection.into_split();
    let upstream = async {
        while let Some(Ok(message)) = stream.next().await {
            match message {
                Message::Binary(data)
                    if data.first() == Some(&0) && writer.write_all(&data[1..]).await.is_err() =>
                {
                    break;
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = writer.shutdown().await;
    };
    let downstream = async {
        let mut buffer = vec![0u8; 32 * 1024];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink
                        .send(Message::binary([&[0u8][..], &buffer[..n]].concat()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        close_normally(&mut sink).await;
    };
    tokio::join!(upstream, downstream);
}
