//! A container's environment as the kubelet builds it before starting the container: `envFrom`
//! first (Secrets and ConfigMaps, with their `prefix`), then `env` in order (literal values with
//! `$(VAR)` expanded from what is already defined, `secretKeyRef`, `configMapKeyRef`,
//! `fieldRef`), later names replacing earlier ones. A pure function of the pod and the objects it
//! names, so a program sees the same `REDIS_PASSWORD` or `MINIO_ROOT_USER` the real container
//! would. What the kubelet would refuse to start with (a missing Secret) is the kubelet verdict's
//! business (`kubelet::verdict`); here a missing optional reference is skipped and a missing
//! required one leaves the variable out.

use crate::kube::kubelet::ClusterView;
use serde_json::Value;

use crate::kube::object_data::key_text as key_of;

/// Every key of a Secret or ConfigMap, in key order.
fn keys_of(object: &Value, secret: bool) -> Vec<(String, String)> {
    let mut names: Vec<String> = ["data", "stringData"]
        .iter()
        .filter_map(|field| object[*field].as_object())
        .flat_map(|map| map.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| key_of(object, &name, secret).map(|value| (name, value)))
        .collect()
}

/// What a `fieldRef` reads (the downward API's fields).
fn field(pod: &Value, path: &str) -> Option<String> {
    let text = |value: &Value| value.as_str().map(str::to_string);
    let keyed = |prefix: &str, map: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")))
            .and_then(|rest| rest.strip_suffix("']").or_else(|| rest.strip_suffix("\"]")))
            .and_then(|key| text(&pod["metadata"][map][key]))
    };
    match path {
        "metadata.name" => text(&pod["metadata"]["name"]),
        "metadata.namespace" => text(&pod["metadata"]["namespace"]),
        "metadata.uid" => text(&pod["metadata"]["uid"]),
        "spec.nodeName" => text(&pod["spec"]["nodeName"]).or(Some("kind-control-plane".into())),
        "spec.serviceAccountName" => {
            text(&pod["spec"]["serviceAccountName"]).or(Some("default".into()))
        }
        "status.podIP" => text(&pod["status"]["podIP"]),
        "status.hostIP" => text(&pod["status"]["hostIP"]),
        _ if path.starts_with("metadata.labels") => keyed("metadata.labels", "labels"),
        _ if path.starts_with("metadata.annotations") => {
            keyed("metadata.annotations", "annotations")
        }
        _ => None,
    }
}

/// Kubernetes' `$(VAR)` expansion: a defined name is replaced, `$$` is a literal `$`, anything
/// else stays as written.
fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            if let Some((_, found)) = defined.iter().rev().find(|(key, _)| key == name) {
                out.push_str(found);
                rest = &inner[end + 1..];
                continue;
            }
        }
        out.push('$');
        rest = after;
    }
    out.push_str(rest);
    out
}

fn set(environment: &mut Vec<(String, String)>, name: String, value: String) {
    environment.retain(|(key, _)| *key != name);
    environment.push((name, value));
}

/// The environment of `container` (an element of the pod's `spec.containers`) in `pod`.
pub fn resolve(pod: &Value, container: &Value, view: &dyn ClusterView) -> Vec<(String, String)> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let mut environment: Vec<(String, String)> = Vec::new();
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = source["prefix"].as_str().unwrap_or("");
        let (reference, store_key, secret) = if source["secretRef"].is_object() {
            (&source["secretRef"], "secrets", true)
        } else {
            (&source["configMapRef"], "configmaps", false)
        };
        let name = reference["name"].as_str().unwrap_or("");
        let Some(object) = view.object(store_key, namespace, name) else {
            continue;
        };
        for (key, value) in keys_of(&object, secret) {
            set(&mut environment, format!("{prefix}{key}"), value);
        }
    }
    for variable in container["env"].as_array().into_iter().flatten() {
        let Some(name) = variable["name"].as_str() else {
            continue;
        };
        let from = &variable["valueFrom"];
        let value = if let Some(literal) = variable["value"].as_str() {
            Some(expand(literal, &environment))
        } else if from["secretKeyRef"].is_object() || from["configMapKeyRef"].is_object() {
            let secret = from["secretKeyRef"].is_object();
            let reference = if secret {
                &from["secretKeyRef"]
            } else {
                &from["configMapKeyRef"]
            };
            let store_key = if secret { "secrets" } else { "configmaps" };
            view.object(
                store_key,
                namespace,
                reference["name"].as_str().unwrap_or(""),
            )
            .and_then(|object| key_of(&object, reference["key"].as_str().unwrap_or(""), secret))
        } else if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
            field(pod, path)
        } else if variable.get("value").is_none() && from.is_null() {
            // `- name: X` without a value is the empty string.
            Some(String::new())
        } else {
            None
        };
        if let Some(value) = value {
            set(&mut environment, name.to_string(), value);
        }
    }
    environment
}

/// The value of `name` in a resolved environment.
pub fn lookup<'a>(environment: &'a [(String, String)], name: &str) -> Option<&'a str> {
    environment
        .iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::test_fixtures::documents;
    use std::collections::BTreeMap;

    struct Objects(BTreeMap<(String, String, String), Value>);

    impl ClusterView for Objects {
        fn object(&self, store_key: &str, namespace: &str, name: &str) -> Option<Value> {
            self.0
                .get(&(store_key.into(), namespace.into(), name.into()))
                .cloned()
        }
    }

    /// The pod of a fixture file, and the Secrets and ConfigMaps after it.
    fn fixture(name: &str) -> (Value, Objects) {
        let mut documents = documents("programs", name).into_iter();
        let pod = documents.next().expect("a pod first");
        let objects = documents
            .map(|object| {
                let store_key = match object["kind"].as_str() {
                    Some("Secret") => "secrets",
                    _ => "configmaps",
                };
                let key = (
                    store_key.to_string(),
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
        (pod, Objects(objects))
    }

    #[test]
    fn secret_and_configmap_references_and_fields_resolve_as_the_kubelet_resolves_them() {
        let (pod, objects) = fixture("env-pod.yaml");
        let environment = resolve(&pod, &pod["spec"]["containers"][0], &objects);
        let get = |name: &str| lookup(&environment, name).map(str::to_string);
        assert_eq!(get("REDIS_PASSWORD").as_deref(), Some("s3cret"));
        assert_eq!(get("LOG_LEVEL").as_deref(), Some("debug"));
        assert_eq!(get("POD_NAME").as_deref(), Some("app-0"));
        assert_eq!(get("POD_IP").as_deref(), Some("10.244.0.7"));
        assert_eq!(get("APP").as_deref(), Some("web"));
        assert_eq!(get("API_ADDR").as_deref(), Some("http://10.244.0.7:8200"));
        assert_eq!(
            get("LITERAL").as_deref(),
            Some("$(NOT_DEFINED) and $(POD_IP)")
        );
        // envFrom with a prefix; `env` replaces what envFrom defined.
        assert_eq!(get("CFG_mode").as_deref(), Some("standalone"));
        assert_eq!(get("CFG_OVERRIDDEN").as_deref(), Some("from env"));
        assert_eq!(get("rootUser").as_deref(), Some("admin"));
        assert_eq!(get("EMPTY").as_deref(), Some(""));
        // A missing optional reference leaves the variable out.
        assert_eq!(get("OPTIONAL_MISSING"), None);
        let names: Vec<&str> = environment.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names
                .iter()
                .filter(|name| **name == "CFG_OVERRIDDEN")
                .count(),
            1
        );
    }

    #[test]
    fn expansion_keeps_what_it_cannot_resolve() {
        let defined = vec![("A".to_string(), "1".to_string())];
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &defined), "1-$(B)-$(A)-$");
        assert_eq!(expand("no variables", &defined), "no variables");
        assert_eq!(expand("$(A", &defined), "$(A");
    }
}
