//! Envoy Gateway, as the Gateway API controller the GitLab chart bundles: it serves the
//! GatewayClasses whose `controllerName` is the one its configuration names (ConfigMap
//! `envoy-gateway-config`, key `envoy-gateway.yaml`, `gateway.controllerName`; default
//! `gateway.envoyproxy.io/gatewayclass-controller`), and only while its Deployment (image
//! `docker.io/envoyproxy/gateway`) is Available. For each Gateway of a served class it creates
//! the Envoy proxy Deployment and Service (labels `app.kubernetes.io/name=envoy`, in the
//! controller's namespace) and writes the Gateway's status: `Accepted`, `Programmed` once the
//! proxy replicas are available, and per listener `ResolvedRefs` (a TLS listener whose Secret is
//! missing or lacks `tls.crt`/`tls.key` gets `InvalidCertificateRef` and is not programmed).

use super::cluster::{Cluster, WriteOptions};
pub use super::listeners::{hostname_matches, listener_for};
use serde_json::{Value, json};

pub const CLASS_STORE_KEY: &str = "gatewayclasses.gateway.networking.k8s.io";
pub const GATEWAY_STORE_KEY: &str = "gateways.gateway.networking.k8s.io";
pub const CONTROLLER_IMAGES: &[&str] = &["docker.io/envoyproxy/gateway", "envoyproxy/gateway"];
pub const DEFAULT_CONTROLLER_NAME: &str = "gateway.envoyproxy.io/gatewayclass-controller";
pub const PROXY_IMAGE: &str = "docker.io/envoyproxy/envoy:distroless-v1.37.0";
const CONFIG_MAP: &str = "envoy-gateway-config";

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or("")
}

fn name_of(object: &Value) -> &str {
    text(&object["metadata"], "name")
}

fn namespace_of(object: &Value) -> &str {
    text(&object["metadata"], "namespace")
}

/// Whether a Deployment runs Envoy Gateway and is Available.
pub fn controller_available(deployment: &Value) -> bool {
    let runs = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            let image = text(c, "image");
            CONTROLLER_IMAGES
                .iter()
                .any(|prefix| image.starts_with(&format!("{prefix}:")))
        });
    let available = deployment["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Available" && c["status"] == "True");
    runs && available && deployment["status"]["availableReplicas"].as_u64() > Some(0)
}

/// The controllerName an Envoy Gateway configuration (the `envoy-gateway.yaml` text) serves.
pub fn controller_name(config: Option<&str>) -> String {
    config
        .and_then(|text| serde_norway::from_str::<Value>(text).ok())
        .and_then(|config| {
            config["gateway"]["controllerName"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| DEFAULT_CONTROLLER_NAME.to_string())
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, generation: &Value) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "observedGeneration": generation, "lastTransitionTime": "1970-01-01T00:00:00Z"})
}

/// A GatewayClass's status: Accepted while its controller runs; as the API server defaults it
/// (`Unknown`, waiting) otherwise.
pub fn class_status(class: &Value, served: bool) -> Value {
    let generation = &class["metadata"]["generation"];
    let accepted = if served {
        condition(
            "Accepted",
            "True",
            "Accepted",
            "Valid GatewayClass",
            generation,
        )
    } else {
        condition(
            "Accepted",
            "Unknown",
            "Pending",
            "Waiting for controller",
            generation,
        )
    };
    json!({"conditions": [accepted]})
}

/// Why a listener's certificate reference does not resolve, in Envoy Gateway's words.
pub fn certificate_problem(
    gateway_namespace: &str,
    reference: &Value,
    secret: Option<&Value>,
) -> Option<String> {
    let namespace = reference["namespace"].as_str().unwrap_or(gateway_namespace);
    let name = text(reference, "name");
    let kind = reference["kind"].as_str().unwrap_or("Secret");
    if kind != "Secret" {
        return Some(format!("Unsupported reference kind: {kind}."));
    }
    let Some(secret) = secret else {
        return Some(format!("Secret {namespace}/{name} does not exist."));
    };
    let has =
        |key: &str| secret["data"].get(key).is_some() || secret["stringData"].get(key).is_some();
    if !has("tls.crt") || !has("tls.key") {
        return Some(format!(
            "Secret {namespace}/{name} must contain tls.crt and tls.key."
        ));
    }
    None
}

/// A listener's status; `problem` is its first unresolved certificate reference.
pub fn listener_status(listener: &Value, problem: Option<&str>, generation: &Value) -> Value {
    let kinds = match text(listener, "protocol") {
        "TCP" => json!([{"group": "gateway.networking.k8s.io", "kind": "TCPRoute"}]),
        "TLS" => json!([{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}]),
        _ => json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
                    {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"}]),
    };
    let conditions = match problem {
        Some(message) => json!([
            condition(
                "Programmed",
                "False",
                "Invalid",
                "Listener is invalid, see other Conditions for details.",
                generation
            ),
            condition(
                "Accepted",
                "True",
                "Accepted",
                "Listener has been successfully translated",
                generation
            ),
            condition(
                "ResolvedRefs",
                "False",
                "InvalidCertificateRef",
                message,
                generation
            ),
        ]),
        None => json!([
            condition(
                "Programmed",
                "True",
                "Programmed",
                "Sending translated listener configuration to the data plane",
                generation
            ),
            condition(
                "Accepted",
                "True",
                "Accepted",
                "Listener has been successfully translated",
                generation
            ),
            condition(
                "ResolvedRefs",
                "True",
                "ResolvedRefs",
                "Listener has been successfully translated",
                generation
            ),
        ]),
    };
    json!({"name": listener["name"], "supportedKinds": kinds, "attachedRoutes": 0, "conditions": conditions})
}

/// The Gateway's status from its listeners' problems and its proxy's (ready, wanted) replicas.
pub fn gateway_status(gateway: &Value, problems: &[Option<String>], replicas: (u64, u64)) -> Value {
    let generation = &gateway["metadata"]["generation"];
    let listeners: Vec<Value> = gateway["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(problems.iter().chain(std::iter::repeat(&None)))
        .map(|(listener, problem)| listener_status(listener, problem.as_deref(), generation))
        .collect();
    let invalid: Vec<&str> = gateway["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(problems.iter())
        .filter(|(_, problem)| problem.is_some())
        .map(|(listener, _)| text(listener, "name"))
        .collect();
    let (ready, wanted) = replicas;
    let programmed = if !invalid.is_empty() {
        condition(
            "Programmed",
            "False",
            "Invalid",
            &format!("Gateway has invalid listeners: {}", invalid.join(", ")),
            generation,
        )
    } else if ready == 0 {
        condition(
            "Programmed",
            "False",
            "NoResources",
            "Envoy replicas unavailable",
            generation,
        )
    } else {
        condition(
            "Programmed",
            "True",
            "Programmed",
            &format!("Address assigned to the Gateway, {ready}/{wanted} envoy replicas available"),
            generation,
        )
    };
    json!({
        "conditions": [
            condition("Accepted", "True", "Accepted", "The Gateway has been scheduled by Envoy Gateway", generation),
            programmed
        ],
        "listeners": listeners
    })
}

/// The name Envoy Gateway gives a Gateway's proxy Deployment and Service.
pub fn proxy_name(gateway: &Value) -> String {
    use sha2::{Digest, Sha256};
    let namespace = namespace_of(gateway);
    let name = name_of(gateway);
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("envoy-{namespace}-{name}-{hash}")
}

/// The proxy Deployment and Service of a Gateway, in the controller's namespace; `replicas` and
/// the Service type come from the class's EnvoyProxy (`spec.provider.kubernetes`).
pub fn proxy_objects(
    gateway: &Value,
    controller_namespace: &str,
    envoy_proxy: Option<&Value>,
) -> Vec<(&'static str, Value)> {
    let name = proxy_name(gateway);
    let kubernetes = envoy_proxy
        .map(|p| p["spec"]["provider"]["kubernetes"].clone())
        .unwrap_or(Value::Null);
    let replicas = kubernetes["envoyDeployment"]["replicas"]
        .as_u64()
        .unwrap_or(1);
    let service_type = kubernetes["envoyService"]["type"]
        .as_str()
        .unwrap_or("LoadBalancer")
        .to_string();
    // EnvoyProxy's `envoyService.name` replaces the generated name of the Service (a stable
    // name other configuration, such as a CoreDNS rewrite, can point at).
    let service_name = kubernetes["envoyService"]["name"]
        .as_str()
        .unwrap_or(&name)
        .to_string();
    let labels = json!({
        "app.kubernetes.io/name": "envoy", "app.kubernetes.io/component": "proxy",
        "app.kubernetes.io/managed-by": "envoy-gateway",
        "gateway.envoyproxy.io/owning-gateway-name": name_of(gateway),
        "gateway.envoyproxy.io/owning-gateway-namespace": namespace_of(gateway)
    });
    let ports: Vec<Value> = gateway["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["port"].as_u64())
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .map(|port| json!({"name": format!("port-{port}"), "port": port, "protocol": "TCP", "targetPort": 10000 + port}))
        .collect();
    vec![
        (
            "deployments.apps",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": name, "namespace": controller_namespace, "labels": labels},
                   "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels},
                                         "spec": {"containers": [{"name": "envoy", "image": PROXY_IMAGE,
                                                                  "ports": [{"name": "admin", "containerPort": 19000}]}]}}}}),
        ),
        (
            "services",
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": service_name, "namespace": controller_namespace, "labels": labels},
                   "spec": {"type": service_type, "selector": labels, "ports": ports}}),
        ),
    ]
}

// How routes attach to listeners (Gateway API's rules), shared with the Envoy proxy program.

/// Whether `listener` of a Gateway in `gateway_namespace` admits routes from `route_namespace`
/// (labelled `namespace_labels`): `allowedRoutes.namespaces.from` Same (the default), All, or
/// Selector (its matchLabels).
pub fn admits(
    listener: &Value,
    gateway_namespace: &str,
    route_namespace: &str,
    namespace_labels: &Value,
) -> bool {
    let namespaces = &listener["allowedRoutes"]["namespaces"];
    match namespaces["from"].as_str().unwrap_or("Same") {
        "All" => true,
        "Selector" => namespaces["selector"]["matchLabels"]
            .as_object()
            .is_some_and(|labels| {
                labels
                    .iter()
                    .all(|(key, value)| namespace_labels[key] == *value)
            }),
        _ => gateway_namespace == route_namespace,
    }
}

/// Whether `route` names `listener` of `gateway` among its parents.
pub fn attaches(route: &Value, gateway: &Value, listener: &Value) -> bool {
    let route_namespace = text(&route["metadata"], "namespace");
    route["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|parent| {
            let kind_ok = parent["kind"].as_str().unwrap_or("Gateway") == "Gateway";
            let name_ok = text(parent, "name") == text(&gateway["metadata"], "name");
            let namespace_ok = parent["namespace"].as_str().unwrap_or(route_namespace)
                == text(&gateway["metadata"], "namespace");
            let section_ok = parent["sectionName"]
                .as_str()
                .is_none_or(|section| section == text(listener, "name"));
            let port_ok = parent["port"].is_null() || parent["port"] == listener["port"];
            kind_ok && name_ok && namespace_ok && section_ok && port_ok
        })
}

pub const ROUTE_STORE_KEY: &str = "httproutes.gateway.networking.k8s.io";

/// Whether two hostnames (either may be a wildcard) have a name in common.
fn hostnames_intersect(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || hostname_matches(a, b) || hostname_matches(b, a)
}

/// Whether `listener` takes `route`: the route names it among its parents, the listener
/// admits the route's namespace, and they have a hostname in common.
pub fn accepts(listener: &Value, gateway: &Value, route: &Value, namespace_labels: &Value) -> bool {
    attaches(route, gateway, listener)
        && admits(
            listener,
            namespace_of(gateway),
            namespace_of(route),
            namespace_labels,
        )
        && shares_hostname(listener, route)
}

/// The hostnames an HTTPRoute names (none: every host its listeners serve).
pub fn route_hostnames(route: &Value) -> Vec<&str> {
    route["spec"]["hostnames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn shares_hostname(listener: &Value, route: &Value) -> bool {
    let hostnames = route_hostnames(route);
    match listener["hostname"].as_str() {
        None | Some("") => true,
        Some(pattern) => {
            hostnames.is_empty()
                || hostnames
                    .iter()
                    .any(|name| hostnames_intersect(pattern, name))
        }
    }
}

/// The status Envoy Gateway writes for one parent reference of an HTTPRoute to `gateway`:
/// `Accepted` (or why no listener takes it) and `ResolvedRefs` (every backend a Service of the
/// route's namespace that exists; `service_exists(namespace, name)`).
pub fn route_parent_status(
    route: &Value,
    parent: &Value,
    gateway: &Value,
    namespace_labels: &Value,
    service_exists: &dyn Fn(&str, &str) -> bool,
    controller_name: &str,
) -> Value {
    let generation = &route["metadata"]["generation"];
    let single = json!({"metadata": route["metadata"], "spec": {"parentRefs": [parent], "hostnames": route["spec"]["hostnames"]}});
    let listeners: Vec<&Value> = gateway["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|listener| attaches(&single, gateway, listener))
        .collect();
    let admitting: Vec<&&Value> = listeners
        .iter()
        .filter(|listener| {
            admits(
                listener,
                namespace_of(gateway),
                namespace_of(route),
                namespace_labels,
            )
        })
        .collect();
    let accepted = if admitting.is_empty() {
        condition(
            "Accepted",
            "False",
            "NotAllowedByListeners",
            "No listeners included by this parent ref allowed this attachment.",
            generation,
        )
    } else if !admitting
        .iter()
        .any(|listener| shares_hostname(listener, route))
    {
        condition(
            "Accepted",
            "False",
            "NoMatchingListenerHostname",
            "There were no hostname intersections between the HTTPRoute and this parent ref's Listener(s).",
            generation,
        )
    } else {
        condition(
            "Accepted",
            "True",
            "Accepted",
            "Route is accepted",
            generation,
        )
    };
    let mut unresolved = None;
    for (rule_index, rule) in route["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (backend_index, backend) in rule["backendRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let namespace = backend["namespace"].as_str().unwrap_or(namespace_of(route));
            let name = text(backend, "name");
            let problem = if backend["kind"].as_str().unwrap_or("Service") != "Service" {
                Some((
                    "InvalidKind",
                    format!(
                        "Failed to process route rule {rule_index} backendRef {backend_index}: {} is not a supported kind.",
                        text(backend, "kind")
                    ),
                ))
            } else if namespace != namespace_of(route) {
                Some((
                    "RefNotPermitted",
                    format!(
                        "Failed to process route rule {rule_index} backendRef {backend_index}: backend ref to Service {namespace}/{name} not permitted by any ReferenceGrant."
                    ),
                ))
            } else if !service_exists(namespace, name) {
                Some((
                    "BackendNotFound",
                    format!(
                        "Failed to process route rule {rule_index} backendRef {backend_index}: service {namespace}/{name} not found."
                    ),
                ))
            } else {
                None
            };
            if unresolved.is_none() {
                unresolved = problem;
            }
        }
    }
    let resolved = match unresolved {
        Some((reason, message)) => condition("ResolvedRefs", "False", reason, &message, generation),
        None => condition(
            "ResolvedRefs",
            "True",
            "ResolvedRefs",
            "Resolved all the Object references for the Route",
            generation,
        ),
    };
    json!({"parentRef": parent, "controllerName": controller_name, "conditions": [accepted, resolved]})
}

/// The labels of namespace `name` (what `allowedRoutes` selectors match).
fn namespace_labels(cluster: &Cluster, name: &str) -> Value {
    cluster
        .lookup("namespaces", "", name)
        .map(|namespace| namespace["metadata"]["labels"].clone())
        .unwrap_or(Value::Null)
}

/// Writes the status of every HTTPRoute's parents that are Gateways of a served class
/// (`served`: class name -> controllerName); returns how many routes it wrote.
fn reconcile_routes(cluster: &mut Cluster, served: &[(String, String)]) -> usize {
    if cluster
        .resource_for_kind("gateway.networking.k8s.io/v1", "HTTPRoute")
        .is_none()
    {
        return 0;
    }
    let mut writes = 0;
    for route in cluster.all(ROUTE_STORE_KEY) {
        let route_namespace = namespace_of(&route).to_string();
        let labels = namespace_labels(cluster, &route_namespace);
        let mut ours = Vec::new();
        let mut controllers = Vec::new();
        for parent in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
            if parent["kind"].as_str().unwrap_or("Gateway") != "Gateway" {
                continue;
            }
            let namespace = parent["namespace"].as_str().unwrap_or(&route_namespace);
            let Some(gateway) = cluster.lookup(GATEWAY_STORE_KEY, namespace, text(parent, "name"))
            else {
                continue;
            };
            let Some((_, controller)) = served
                .iter()
                .find(|(class, _)| class == text(&gateway["spec"], "gatewayClassName"))
            else {
                continue;
            };
            let exists =
                |namespace: &str, name: &str| cluster.lookup("services", namespace, name).is_some();
            ours.push(route_parent_status(
                &route, parent, gateway, &labels, &exists, controller,
            ));
            controllers.push(controller.clone());
        }
        // Other controllers' entries stay; ours are replaced.
        let mut parents: Vec<Value> = route["status"]["parents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|entry| {
                let name = text(entry, "controllerName");
                !name.starts_with("gateway.envoyproxy.io/")
                    && !controllers.iter().any(|c| c == name)
            })
            .cloned()
            .collect();
        parents.extend(ours);
        let current = route["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if current != parents {
            let mut updated = route.clone();
            updated["status"] = json!({"parents": parents});
            writes += write(cluster, ROUTE_STORE_KEY, updated);
        }
    }
    writes
}

/// Envoy Gateway's part of a reconcile pass; returns how many objects it wrote.
pub fn reconcile(cluster: &mut Cluster) -> usize {
    if cluster
        .resource_for_kind("gateway.networking.k8s.io/v1", "GatewayClass")
        .is_none()
    {
        return 0;
    }
    // (controllerName, the controller's namespace) of every Available Envoy Gateway.
    let controllers: Vec<(String, String)> = cluster
        .all("deployments.apps")
        .iter()
        .filter(|d| controller_available(d))
        .map(|d| {
            let namespace = namespace_of(d).to_string();
            let config = cluster
                .lookup("configmaps", &namespace, CONFIG_MAP)
                .and_then(|c| c["data"]["envoy-gateway.yaml"].as_str().map(str::to_string));
            (controller_name(config.as_deref()), namespace)
        })
        .collect();
    let mut writes = 0;
    let mut served = Vec::new();
    for class in cluster.all(CLASS_STORE_KEY) {
        let controller = controllers
            .iter()
            .find(|(name, _)| name == text(&class["spec"], "controllerName"));
        if let Some((_, namespace)) = controller {
            served.push((
                name_of(&class).to_string(),
                namespace.clone(),
                class.clone(),
            ));
        }
        let status = class_status(&class, controller.is_some());
        // Classes of other controllers are theirs to report on.
        let ours = text(&class["spec"], "controllerName").starts_with("gateway.envoyproxy.io/");
        if ours && class["status"]["conditions"] != status["conditions"] {
            let mut updated = class.clone();
            updated["status"] = status;
            writes += write(cluster, CLASS_STORE_KEY, updated);
        }
    }
    let options = WriteOptions {
        manager: "envoy-gateway".into(),
        ..Default::default()
    };
    for gateway in cluster.all(GATEWAY_STORE_KEY) {
        let Some((_, controller_namespace, class)) = served
            .iter()
            .find(|(name, _, _)| name == text(&gateway["spec"], "gatewayClassName"))
        else {
            continue;
        };
        let envoy_proxy = class["spec"]["parametersRef"]["name"]
            .as_str()
            .and_then(|name| {
                let namespace = class["spec"]["parametersRef"]["namespace"]
                    .as_str()
                    .unwrap_or(controller_namespace);
                cluster
                    .lookup("envoyproxies.gateway.envoyproxy.io", namespace, name)
                    .cloned()
            });
        for (store_key, wanted) in
            proxy_objects(&gateway, controller_namespace, envoy_proxy.as_ref())
        {
            if cluster
                .lookup(store_key, controller_namespace, name_of(&wanted))
                .is_some()
            {
                continue;
            }
            let (api_version, kind) = (
                text(&wanted, "apiVersion").to_string(),
                text(&wanted, "kind").to_string(),
            );
            if let Some(rt) = cluster.resource_for_kind(&api_version, &kind)
                && cluster
                    .create(&rt, controller_namespace, wanted, &options)
                    .is_ok()
            {
                writes += 1;
            }
        }
        let namespace = namespace_of(&gateway).to_string();
        let problems: Vec<Option<String>> = gateway["spec"]["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|listener| {
                if !matches!(text(listener, "protocol"), "HTTPS" | "TLS") {
                    return None;
                }
                listener["tls"]["certificateRefs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find_map(|reference| {
                        let secret_namespace =
                            reference["namespace"].as_str().unwrap_or(&namespace);
                        let secret =
                            cluster.lookup("secrets", secret_namespace, text(reference, "name"));
                        certificate_problem(&namespace, reference, secret)
                    })
            })
            .collect();
        let proxy = cluster
            .lookup(
                "deployments.apps",
                controller_namespace,
                &proxy_name(&gateway),
            )
            .cloned()
            .unwrap_or(Value::Null);
        let replicas = (
            proxy["status"]["availableReplicas"].as_u64().unwrap_or(0),
            proxy["spec"]["replicas"].as_u64().unwrap_or(1),
        );
        let mut status = gateway_status(&gateway, &problems, replicas);
        let routes = cluster.all(ROUTE_STORE_KEY);
        for (index, listener) in gateway["spec"]["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let attached = routes
                .iter()
                .filter(|route| {
                    accepts(
                        listener,
                        &gateway,
                        route,
                        &namespace_labels(cluster, namespace_of(route)),
                    )
                })
                .count();
            status["listeners"][index]["attachedRoutes"] = json!(attached);
        }
        if gateway["status"]["conditions"] != status["conditions"]
            || gateway["status"]["listeners"] != status["listeners"]
        {
            let mut updated = gateway.clone();
            updated["status"] = status;
            writes += write(cluster, GATEWAY_STORE_KEY, updated);
        }
    }
    let classes: Vec<(String, String)> = served
        .iter()
        .map(|(name, _, class)| {
            (
                name.clone(),
                text(&class["spec"], "controllerName").to_string(),
            )
        })
        .collect();
    writes + reconcile_routes(cluster, &classes)
}

fn write(cluster: &mut Cluster, store_key: &str, object: Value) -> usize {
    let namespace = namespace_of(&object).to_string();
    let name = name_of(&object).to_string();
    cluster.commit(store_key, &namespace, &name, Some(object));
    1
}

#[cfg(test)]
mod tests {
    use super::super::test_fixtures::documents;
    use super::*;

    fn conditions(status: &Value) -> Vec<String> {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}={} {}: {}",
                    c["type"].as_str().unwrap(),
                    c["status"].as_str().unwrap(),
                    c["reason"].as_str().unwrap(),
                    c["message"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn the_controller_is_its_deployment_when_available_and_serves_its_configured_name() {
        let documents = documents("gateway", "controller.yaml");
        assert!(controller_available(&documents[0]));
        assert!(!controller_available(&documents[1]), "not available");
        assert!(!controller_available(&documents[2]), "another image");
        assert_eq!(
            controller_name(documents[3]["data"]["envoy-gateway.yaml"].as_str()),
            "gateway.envoyproxy.io/gitlab-gatewayclass-controller"
        );
        assert_eq!(controller_name(None), DEFAULT_CONTROLLER_NAME);
        let class = &documents[4];
        assert_eq!(
            conditions(&class_status(class, true)),
            ["Accepted=True Accepted: Valid GatewayClass"]
        );
        assert_eq!(
            conditions(&class_status(class, false)),
            ["Accepted=Unknown Pending: Waiting for controller"]
        );
    }

    #[test]
    fn a_listener_without_its_certificate_secret_is_not_programmed_nor_the_gateway() {
        let documents = documents("gateway", "gateway.yaml");
        let (gateway, good, no_key) = (&documents[0], &documents[1], &documents[2]);
        let refs = |i: usize| gateway["spec"]["listeners"][i]["tls"]["certificateRefs"][0].clone();
        assert_eq!(
            certificate_problem("gitlab", &refs(0), None).as_deref(),
            Some("Secret gitlab/gitlab-wildcard-tls does not exist.")
        );
        assert_eq!(
            certificate_problem("gitlab", &refs(1), Some(no_key)).as_deref(),
            Some("Secret gitlab/registry-tls must contain tls.crt and tls.key.")
        );
        assert_eq!(certificate_problem("gitlab", &refs(0), Some(good)), None);
        let missing = gateway_status(
            gateway,
            &[
                Some("Secret gitlab/gitlab-wildcard-tls does not exist.".into()),
                None,
                None,
            ],
            (1, 1),
        );
        assert_eq!(
            conditions(&missing),
            [
                "Accepted=True Accepted: The Gateway has been scheduled by Envoy Gateway",
                "Programmed=False Invalid: Gateway has invalid listeners: gitlab-web"
            ]
        );
        assert_eq!(
            conditions(&missing["listeners"][0]),
            [
                "Programmed=False Invalid: Listener is invalid, see other Conditions for details.",
                "Accepted=True Accepted: Listener has been successfully translated",
                "ResolvedRefs=False InvalidCertificateRef: Secret gitlab/gitlab-wildcard-tls does not exist."
            ]
        );
        assert_eq!(missing["listeners"][1]["conditions"][2]["status"], "True");
        let unavailable = gateway_status(gateway, &[None, None, None], (0, 1));
        assert_eq!(
            conditions(&unavailable)[1],
            "Programmed=False NoResources: Envoy replicas unavailable"
        );
        let ready = gateway_status(gateway, &[None, None, None], (2, 2));
        assert_eq!(
            conditions(&ready)[1],
            "Programmed=True Programmed: Address assigned to the Gateway, 2/2 envoy replicas available"
        );
    }

    #[test]
    fn the_proxy_is_an_envoy_deployment_per_gateway_with_the_envoy_proxys_replicas() {
        let documents = documents("gateway", "gateway.yaml");
        let proxy = &documents[3];
        let objects = proxy_objects(&documents[0], "gitlab", Some(proxy));
        let deployment = &objects[0].1;
        assert_eq!(deployment["spec"]["replicas"], 5);
        assert_eq!(
            deployment["metadata"]["labels"]["app.kubernetes.io/name"],
            "envoy"
        );
        assert_eq!(
            deployment["metadata"]["labels"]["gateway.envoyproxy.io/owning-gateway-name"],
            "gitlab-gw"
        );
        assert!(
            deployment["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("envoy-gitlab-gitlab-gw-")
        );
        let service = &objects[1].1;
        assert_eq!(service["spec"]["type"], "NodePort");
        let ports: Vec<u64> = service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_u64().unwrap())
            .collect();
        assert_eq!(ports, [80, 443]);
        assert_eq!(
            proxy_objects(&documents[0], "gitlab", None)[0].1["spec"]["replicas"],
            1
        );
    }

    #[test]
    fn a_routes_parents_say_whether_a_listener_took_it_and_its_backends_resolve() {
        let fixtures = documents("envoy", "routes.yaml");
        let gateway = &fixtures[0];
        let by_name = |name: &str| {
            fixtures
                .iter()
                .find(|object| object["metadata"]["name"] == name && object["kind"] == "HTTPRoute")
                .unwrap()
        };
        let exists = |_: &str, name: &str| name != "gone";
        let verdict = |name: &str| {
            let route = by_name(name);
            let status = route_parent_status(
                route,
                &route["spec"]["parentRefs"][0],
                gateway,
                &Value::Null,
                &exists,
                "gateway.envoyproxy.io/gitlab-gatewayclass-controller",
            );
            conditions(&status)
        };
        assert_eq!(
            verdict("guestbook"),
            [
                "Accepted=True Accepted: Route is accepted",
                "ResolvedRefs=True ResolvedRefs: Resolved all the Object references for the Route"
            ]
        );
        assert_eq!(
            verdict("sneaky")[0],
            "Accepted=False NotAllowedByListeners: No listeners included by this parent ref allowed this attachment."
        );
        assert_eq!(
            verdict("cross")[1],
            "ResolvedRefs=False RefNotPermitted: Failed to process route rule 0 backendRef 0: backend ref to Service redis/redis-master not permitted by any ReferenceGrant."
        );
        assert_eq!(
            verdict("wrong-host"),
            [
                "Accepted=False NoMatchingListenerHostname: There were no hostname intersections between the HTTPRoute and this parent ref's Listener(s).",
                "ResolvedRefs=False BackendNotFound: Failed to process route rule 0 backendRef 0: service gitlab/gone not found."
            ]
        );
        let apps = &gateway["spec"]["listeners"][2];
        assert!(accepts(apps, gateway, by_name("guestbook"), &Value::Null));
        assert!(!accepts(apps, gateway, by_name("sneaky"), &Value::Null));
    }
}
