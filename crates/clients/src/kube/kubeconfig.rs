//! The kubeconfig in use, as text a CI variable can carry.

use super::KubeClient;
use crate::error::ClientError;
use serde_json::{Value, json};

impl KubeClient {
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
    bearer_kubeconfig(
        server,
        &pem,
        token,
        ("in-cluster", "service-account", "in-cluster"),
        None,
    )
}

/// A kubeconfig of one cluster (`server`, verified against `ca_pem`) and one bearer token, no
/// client certificate: `names` are the cluster's, the user's and the context's, `namespace` the
/// context's when given.
pub(super) fn bearer_kubeconfig(
    server: &str,
    ca_pem: &str,
    token: &str,
    (cluster, user, context): (&str, &str, &str),
    namespace: Option<&str>,
) -> String {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    let mut in_context = json!({"cluster": cluster, "user": user});
    if let Some(namespace) = namespace {
        in_context["namespace"] = json!(namespace);
    }
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": cluster, "cluster": {"server": server.trim_end_matches('/'),
                      "certificate-authority-data": engine.encode(ca_pem)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": in_context}],
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

/// A minimal kubeconfig (one cluster, see [`minimal_kubeconfig`]) whose cluster is reached at
/// `server` instead: the address a pod uses (`https://kubernetes.default.svc`), where the
/// workstation's (`https://127.0.0.1:PORT` on kind) leads nowhere. The CA and the credentials
/// stay; the API server's certificate names its in-cluster addresses.
pub fn with_server(text: &str, server: &str) -> Result<String, String> {
    let mut config: Value = serde_norway::from_str(text).map_err(|error| error.to_string())?;
    let clusters = config["clusters"]
        .as_array_mut()
        .filter(|clusters| clusters.len() == 1)
        .ok_or("it does not hold exactly one cluster")?;
    clusters[0]["cluster"]["server"] = json!(server.trim_end_matches('/'));
    serde_norway::to_string(&config).map_err(|error| error.to_string())
}

#[cfg(test)]
mod in_cluster_tests {
    #[test]
    fn a_kubeconfig_for_pods_names_the_in_cluster_address_and_keeps_the_rest() {
        let text = super::kubeconfig_from_parts("https://127.0.0.1:41234", &[vec![1, 2, 3]], "tok");
        let moved = super::with_server(&text, "https://kubernetes.default.svc/").expect("moved");
        let before: serde_json::Value = serde_norway::from_str(&text).expect("YAML");
        let mut after: serde_json::Value = serde_norway::from_str(&moved).expect("YAML");
        assert_eq!(
            after["clusters"][0]["cluster"]["server"],
            "https://kubernetes.default.svc"
        );
        after["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:41234".into();
        assert_eq!(after, before);
        assert_eq!(
            super::with_server("clusters: []", "https://x"),
            Err("it does not hold exactly one cluster".to_string())
        );
    }

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
