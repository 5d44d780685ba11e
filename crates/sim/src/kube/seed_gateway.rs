//! The gateway as phase 2 leaves it, for the platform the simulator seeds without running phase
//! 2: the Gateway API CRDs of `infra/manifests/`, the EnvoyProxy CRD and the Envoy Gateway
//! controller of the GitLab chart (its stand-in's `gateway-helm`; all vendored at build time), the GatewayClass `gitlab-gw`
//! with its EnvoyProxy (the proxy Service's fixed name `gitlab-gateway`), the listener Secrets
//! of the wildcard certificate in `infra/tls/wildcard/` (minted there as phase 2's wildcard TLS
//! step does, when missing), and phase 2's Gateway (`infra/references/gateway.yaml`). The
//! simulator's controllers then bring up the Envoy proxy, as on the bare platform.

use serde::Deserialize;
use serde_json::{Value, json};
use std::path::Path;

/// The Gateway API CRDs phase 3's apps need (their charts create HTTPRoutes), the EnvoyProxy CRD
/// and phase 2's Gateway, as this build vendors them (a repository copy need not carry them).
const MANIFESTS: &[(&str, &str)] = &[
    (
        "gatewayclasses",
        include_str!(
            "../../../../infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_gatewayclasses.yaml"
        ),
    ),
    (
        "gateways",
        include_str!(
            "../../../../infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_gateways.yaml"
        ),
    ),
    (
        "httproutes",
        include_str!(
            "../../../../infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_httproutes.yaml"
        ),
    ),
    (
        "referencegrants",
        include_str!(
            "../../../../infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_referencegrants.yaml"
        ),
    ),
    (
        "envoyproxies",
        include_str!(
            "../../../../infra/helm-charts/stand-ins/gitlab/charts/gateway-helm/crds/envoyproxies.yaml"
        ),
    ),
];
const GATEWAY_MANIFEST: &str = include_str!("../../../../infra/references/gateway.yaml");
const TLS_DIR: &str = "infra/tls/wildcard";
const DOMAIN: &str = "local.example.net";
/// Phase 2's listener Secrets (scripts/phase2.rhai, LISTENERS).
const LISTENER_SECRETS: &[&str] = &[
    "gitlab-wildcard-tls",
    "registry-tls",
    "kas-tls",
    "minio-tls",
];
/// Phase 2's listener hosts (under [`DOMAIN`]), which its node trust step gives the CA.
const LISTENER_HOSTS: &[&str] = &["gitlab", "registry", "kas", "minio"];
/// The Envoy proxy Service the registry pin points at (infra/helm-values/gitlab.yaml).
const GATEWAY_SERVICE: (&str, &str) = ("gitlab", "gitlab-gateway");
const CONTROLLER_NAME: &str = "gateway.envoyproxy.io/gitlab-gatewayclass-controller";

fn documents(name: &str, text: &str) -> Result<Vec<Value>, String> {
    serde_norway::Deserializer::from_str(text)
        .map(Value::deserialize)
        .filter(|document| !matches!(document, Ok(Value::Null)))
        .collect::<Result<_, _>>()
        .map_err(|error| format!("the vendored {name} manifest: {error}"))
}

/// The wildcard CA and certificate in `root/infra/tls/wildcard/`, minted when missing:
/// (CA PEM, certificate PEM, key PEM).
fn wildcard_tls(root: &Path) -> Result<(String, String, String), String> {
    use bprun_clients::fs::Confinement;
    let files = Confinement::new(root);
    bprun_clients::tls::ensure_ca(&files, TLS_DIR, "blueprint local CA", 3650, false)
        .map_err(|error| error.to_string())?;
    let names = vec![format!("*.{DOMAIN}"), DOMAIN.to_string()];
    bprun_clients::tls::ensure_cert(&files, TLS_DIR, TLS_DIR, &names, 3650, false)
        .map_err(|error| error.to_string())?;
    let read = |name: &str| {
        let path = root.join(TLS_DIR).join(name);
        std::fs::read_to_string(&path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))
    };
    Ok((read("ca.pem")?, read("cert.pem")?, read("key.pem")?))
}

/// The objects, in the order they are created; the wildcard certificate is kept in (and minted
/// into) `repository`'s `infra/tls/wildcard/`.
pub fn objects(repository: &Path) -> Result<Vec<Value>, String> {
    use base64::Engine;
    let mut objects = Vec::new();
    for (name, text) in MANIFESTS {
        objects.extend(documents(name, text)?);
    }
    let labels = json!({"app.kubernetes.io/name": "gateway-helm", "app.kubernetes.io/instance": "gitlab",
                        "control-plane": "envoy-gateway"});
    objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "envoy-gateway-config", "namespace": "gitlab"},
        "data": {"envoy-gateway.yaml": format!(
            "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: EnvoyGateway\ngateway:\n  controllerName: {CONTROLLER_NAME}\nprovider:\n  type: Kubernetes\n")}}));
    objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "envoy-gateway", "namespace": "gitlab", "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "envoy-gateway",
                                                       "image": "docker.io/envoyproxy/gateway:v1.7.0",
                                                       "args": ["server", "--config-path=/config/envoy-gateway.yaml"]}]}}}}));
    objects.push(
        json!({"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
        "metadata": {"name": "gitlab-envoy-proxy", "namespace": "gitlab"},
        "spec": {"provider": {"type": "Kubernetes", "kubernetes": {
            "envoyService": {"type": "LoadBalancer", "name": "gitlab-gateway"}}}}}),
    );
    objects.push(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "gitlab-gw"},
        "spec": {"controllerName": CONTROLLER_NAME,
                 "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy",
                                   "name": "gitlab-envoy-proxy", "namespace": "gitlab"}}}),
    );
    let (ca, certificate, key) = wildcard_tls(repository)?;
    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    for name in LISTENER_SECRETS {
        objects.push(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": "gitlab"},
            "data": {"tls.crt": encode(&format!("{certificate}{ca}")), "tls.key": encode(&key),
                     "ca.crt": encode(&ca)}}),
        );
    }
    objects.extend(documents("gateway", GATEWAY_MANIFEST)?);
    Ok(objects)
}

/// What phase 2's node trust and registry pin steps leave on every node, once the gateway's
/// Service has its address: containerd's `certs.d/<host>/` (the wildcard CA and `hosts.toml`)
/// for the four listener hosts, `registry.<domain>` pinned to the gateway in `/etc/hosts`, and
/// the CA's ConfigMap in kube-system (the steps read the files, so no marker on the Nodes). `nodes_dir`
/// holds the nodes' folders (`NODE/etc/...`), as the node scripts of phase 2 write them.
pub fn node_network(
    sim: &super::KubeSim,
    nodes_dir: &Path,
    repository: &Path,
) -> Result<(), String> {
    let (ca, _, _) = wildcard_tls(repository)?;
    let mut cluster = sim.cluster();
    let options = super::cluster::WriteOptions {
        manager: "bprun".into(),
        ..Default::default()
    };
    let (namespace, name) = GATEWAY_SERVICE;
    let address = cluster
        .lookup("services", namespace, name)
        .and_then(|service| service["spec"]["clusterIP"].as_str().map(str::to_string))
        .ok_or_else(|| format!("the seeded gateway has no Service {namespace}/{name} yet"))?;
    let pin = format!("{address} registry.{DOMAIN}");
    let write = |path: &Path, text: &str| {
        path.parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| std::fs::write(path, text))
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    };
    let nodes: Vec<String> = cluster
        .all("nodes")
        .iter()
        .filter_map(|node| node["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    for node in &nodes {
        let root = nodes_dir.join(node);
        write(
            &root.join("etc/hosts"),
            &format!("{}{pin}\n", super::pulls::kind_hosts(node)),
        )?;
        for host in LISTENER_HOSTS {
            let host = format!("{host}.{DOMAIN}");
            let certs = root.join("etc/containerd/certs.d").join(&host);
            write(&certs.join("ca.pem"), &ca)?;
            write(
                &certs.join("hosts.toml"),
                &format!(
                    "server = \"https://{host}\"\n\n[host.\"https://{host}\"]\n  ca = \"/etc/containerd/certs.d/{host}/ca.pem\"\n"
                ),
            )?;
        }
    }
    let rt = cluster
        .resource_for_kind("v1", "ConfigMap")
        .ok_or("no resource for ConfigMap")?;
    cluster
        .create(
            &rt,
            "kube-system",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "bprun-wildcard-ca", "namespace": "kube-system"},
                   "data": {"ca.pem": ca}}),
            &options,
        )
        .map_err(|error| error.message)?;
    Ok(())
}
