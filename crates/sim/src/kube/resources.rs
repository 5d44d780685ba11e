//! The API resources the Kubernetes simulator serves: the built-in table, CRD-registered ones,
//! and the discovery and OpenAPI v3 documents built from them.

use serde_json::{Map, Value, json};

/// One served resource (a plural under a group/version).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    /// "" for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Served subresources ("status", "exec", ...).
    pub subresources: Vec<String>,
    /// True when a CRD registered it.
    pub custom: bool,
}

impl ResourceType {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The key objects are stored under: `deployments.apps`, `pods`.
    pub fn store_key(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The URL prefix of the group/version: `/api/v1` or `/apis/apps/v1`.
    pub fn prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// (group, version, kind, plural, namespaced, short names, subresources)
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
);

const BUILTIN: &[Builtin] = &[
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        false,
        &[],
        &[],
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        false,
        &[],
        &[],
    ),
    (
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        false,
        &[],
        &[],
    ),
    (
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        &["ns"],
        &["status", "finalize"],
    ),
    ("", "v1", "Node", "nodes", false, &["no"], &["status"]),
    (
        "",
        "v1",
        "Pod",
        "pods",
        true,
        &["po"],
        &["status", "exec", "portforward", "log"],
    ),
    (
        "",
        "v1",
        "Service",
        "services",
        true,
        &["svc"],
        &["status", "portforward"],
    ),
    ("", "v1", "Endpoints", "endpoints", true, &["ep"], &[]),
    ("", "v1", "Secret", "secrets", true, &[], &[]),
    ("", "v1", "ConfigMap", "configmaps", true, &["cm"], &[]),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        &["token"],
    ),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        &["pvc"],
        &["status"],
    ),
    (
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        &["pv"],
        &["status"],
    ),
    ("", "v1", "Event", "events", true, &["ev"], &[]),
    (
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        true,
        &["quota"],
        &["status"],
    ),
    (
        "",
        "v1",
        "LimitRange",
        "limitranges",
        true,
        &["limits"],
        &[],
    ),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        &["sts"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        true,
        &["ds"],
        &["status"],
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        &["rs"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
        &[],
        &[],
    ),
    ("batch", "v1", "Job", "jobs", true, &[], &["status"]),
    (
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        true,
        &["cj"],
        &["status"],
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
        &["hpa"],
        &["status"],
    ),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        true,
        &["ing"],
        &["status"],
    ),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
        &[],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
        &["netpol"],
        &[],
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
        &[],
        &[],
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        &["pdb"],
        &["status"],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        &[],
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        &["sc"],
        &[],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        &[],
        &[],
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        &["pc"],
        &[],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        &["status"],
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
        &[],
        &[],
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false,
        &[],
        &[],
    ),
    // Admission policies in CEL (GA in 1.30); the Gateway API CRDs ship one. Stored, not
    // evaluated.
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        false,
        &[],
        &["status"],
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        false,
        &[],
        &[],
    ),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
        &["csr"],
        &["status"],
    ),
];

/// Reviews (`kubectl auth can-i`, `auth whoami`): answered on create, never stored.
pub fn is_review(kind: &str) -> bool {
    matches!(
        kind,
        "SelfSubjectAccessReview" | "SelfSubjectRulesReview" | "SelfSubjectReview"
    )
}

/// The built-in resources.
pub fn builtin() -> Vec<ResourceType> {
    BUILTIN
        .iter()
        .map(
            |(group, version, kind, plural, namespaced, short, sub)| ResourceType {
                group: group.to_string(),
                version: version.to_string(),
                kind: kind.to_string(),
                plural: plural.to_string(),
                singular: kind.to_lowercase(),
                namespaced: *namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                subresources: sub.iter().map(|s| s.to_string()).collect(),
                custom: false,
            },
        )
        .collect()
}

/// The resources a CustomResourceDefinition serves (one per served version).
pub fn from_crd(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = crd.get("spec").ok_or("spec is required")?;
    let group = spec["group"].as_str().ok_or("spec.group is required")?;
    let names = &spec["names"];
    let plural = names["plural"]
        .as_str()
        .ok_or("spec.names.plural is required")?;
    let kind = names["kind"]
        .as_str()
        .ok_or("spec.names.kind is required")?;
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(format!(
                "spec.scope must be Namespaced or Cluster, not {other:?}"
            ));
        }
    };
    let expected = format!("{plural}.{group}");
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if name != expected {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group ({expected})"
        ));
    }
    let short_names: Vec<String> = names["shortNames"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let versions = spec["versions"]
        .as_array()
        .filter(|list| !list.is_empty())
        .ok_or("spec.versions must list at least one version")?;
    let mut served = Vec::new();
    for version in versions {
        if version["served"].as_bool() == Some(false) {
            continue;
        }
        let Some(name) = version["name"].as_str() else {
            return Err("spec.versions[].name is required".into());
        };
        let mut subresources = Vec::new();
        if version["subresources"].get("status").is_some() {
            subresources.push("status".to_string());
        }
        served.push(ResourceType {
            group: group.to_string(),
            version: name.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: singular.clone(),
            namespaced,
            short_names: short_names.clone(),
            subresources,
            custom: true,
        });
    }
    Ok(served)
}

/// The `all` category (`kubectl get all`) holds the workloads and their services.
fn categories(resource: &ResourceType) -> Vec<&'static str> {
    let all = matches!(
        resource.kind.as_str(),
        "Pod"
            | "Service"
            | "Deployment"
            | "StatefulSet"
            | "DaemonSet"
            | "ReplicaSet"
            | "Job"
            | "CronJob"
            | "HorizontalPodAutoscaler"
    );
    if all { vec!["all"] } else { Vec::new() }
}

/// `GET /api`.
pub fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]
    })
}

fn group_versions(resources: &[ResourceType]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for resource in resources.iter().filter(|r| !r.group.is_empty()) {
        match groups
            .iter_mut()
            .find(|(group, _)| *group == resource.group)
        {
            Some((_, versions)) => {
                if !versions.contains(&resource.version) {
                    versions.push(resource.version.clone());
                }
            }
            None => groups.push((resource.group.clone(), vec![resource.version.clone()])),
        }
    }
    groups
}

/// `GET /apis`.
pub fn api_group_list(resources: &[ResourceType]) -> Value {
    let groups: Vec<Value> = group_versions(resources)
        .into_iter()
        .map(|(group, versions)| {
            let listed: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": listed, "preferredVersion": listed[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`.
pub fn api_group(resources: &[ResourceType], group: &str) -> Option<Value> {
    let (_, versions) = group_versions(resources)
        .into_iter()
        .find(|(name, _)| name == group)?;
    let listed: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    Some(
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": listed, "preferredVersion": listed[0]}),
    )
}

/// `GET /api/v1` or `/apis/{group}/{version}`; None when nothing is served there.
pub fn api_resource_list(resources: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let served: Vec<&ResourceType> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for resource in &served {
        list.push(json!({
            "name": resource.plural,
            "singularName": resource.singular,
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": if is_review(&resource.kind) { &["create"][..] } else { &VERBS[..] },
            "shortNames": resource.short_names,
            "categories": categories(resource),
        }));
        for sub in &resource.subresources {
            let verbs: &[&str] = match sub.as_str() {
                "exec" | "portforward" => &["create", "get"],
                "log" => &["get"],
                "finalize" => &["update"],
                _ => &["get", "patch", "update"],
            };
            let kind = match sub.as_str() {
                "exec" => "PodExecOptions",
                "portforward" if resource.kind == "Pod" => "PodPortForwardOptions",
                "portforward" => "ServiceProxyOptions",
                "log" => "Pod",
                "scale" => "Scale",
                _ => resource.kind.as_str(),
            };
            let mut entry = json!({
                "name": format!("{}/{sub}", resource.plural),
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if sub == "scale" {
                entry["group"] = json!("autoscaling");
                entry["version"] = json!("v1");
            }
            list.push(entry);
        }
    }
    let group_version = served[0].api_version();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list}),
    )
}

/// `GET /openapi/v3`: one entry per group/version, each with a hash that changes with its content.
pub fn openapi_index(resources: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    let mut keys: Vec<(String, String)> = vec![(String::new(), "v1".to_string())];
    for (group, versions) in group_versions(resources) {
        for version in versions {
            keys.push((group.clone(), version));
        }
    }
    for (group, version) in keys {
        let key = if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        };
        let hash = document_hash(resources, &group, &version);
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

/// A group/version's hash; the documents of built-in group/versions never change, so theirs are
/// computed once (a document holds the kinds' whole schemas: hashing it on every index request
/// would cost more than the request).
fn document_hash(resources: &[ResourceType], group: &str, version: &str) -> String {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    static BUILTIN_HASHES: OnceLock<Mutex<BTreeMap<(String, String), String>>> = OnceLock::new();
    let built_in_only = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .all(|r| !r.custom);
    if !built_in_only {
        return openapi_hash(&openapi_document(resources, group, version));
    }
    let cache = BUILTIN_HASHES.get_or_init(Default::default);
    let key = (group.to_string(), version.to_string());
    if let Some(hash) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return hash;
    }
    let hash = openapi_hash(&openapi_document(resources, group, version));
    if let Ok(mut cache) = cache.lock() {
        cache.insert(key, hash.clone());
    }
    hash
}

/// Adds `name` and every definition it refers to, transitively, to `into`.
fn add_with_references(
    name: &str,
    definitions: &Map<String, Value>,
    into: &mut Map<String, Value>,
) {
    fn references<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(reference) = map.get("$ref").and_then(Value::as_str)
                    && let Some(name) = reference.strip_prefix("#/components/schemas/")
                {
                    found.push(name);
                }
                map.values().for_each(|child| references(child, found));
            }
            Value::Array(items) => items.iter().for_each(|child| references(child, found)),
            _ => {}
        }
    }
    let mut pending = vec![name];
    while let Some(next) = pending.pop() {
        if into.contains_key(next) {
            continue;
        }
        let Some(definition) = definitions.get(next) else {
            continue;
        };
        into.insert(next.to_string(), definition.clone());
        references(definition, &mut pending);
    }
}

fn openapi_hash(document: &Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha512::digest(document.to_string().as_bytes());
    digest.iter().take(32).map(|b| format!("{b:02X}")).collect()
}

/// The OpenAPI v3 document of one group/version: every resource's paths, each PATCH declaring
/// the `fieldValidation` parameter (kubectl checks it to know the server validates fields), and
/// a schema per kind carrying its group/version/kind: a built-in kind's real one (descriptions
/// for `kubectl explain`, strategic-merge-patch keys for `kubectl apply`), a permissive one for
/// custom resources.
pub fn openapi_document(resources: &[ResourceType], group: &str, version: &str) -> Value {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    let field_validation = json!({
        "name": "fieldValidation", "in": "query", "uniqueItems": true,
        "description": "Strict, Warn or Ignore: how the server treats unknown or duplicate fields.",
        "schema": {"type": "string"}
    });
    for resource in resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let schema_name = format!(
            "{}.{}.{}",
            if group.is_empty() {
                "io.k8s.api.core"
            } else {
                group
            },
            version,
            resource.kind
        );
        let gvk = json!([{"group": group, "version": version, "kind": resource.kind}]);
        let builtin = super::builtin_schema::schemas();
        let builtin_name = builtin
            .kinds
            .get(resource.kind.as_str())
            .filter(|_| !resource.custom);
        let schema_name = builtin_name.cloned().unwrap_or(schema_name);
        let reference = json!({"$ref": format!("#/components/schemas/{schema_name}")});
        if let Some(name) = builtin_name {
            add_with_references(name, &builtin.definitions, &mut schemas);
            if let Some(schema) = schemas.get_mut(name.as_str()) {
                schema["x-kubernetes-group-version-kind"] = gvk.clone();
            }
        } else {
            schemas.insert(
                schema_name.clone(),
                json!({
                    "type": "object",
                    "x-kubernetes-group-version-kind": gvk,
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }),
            );
        }
        let base = if resource.namespaced {
            format!(
                "{}/namespaces/{{namespace}}/{}",
                resource.prefix(),
                resource.plural
            )
        } else {
            format!("{}/{}", resource.prefix(), resource.plural)
        };
        let operation = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", resource.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": resource.kind},
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}}
            })
        };
        let mut patch = operation("patch");
        patch["parameters"] = json!([field_validation]);
        patch["requestBody"] = json!({"content": {
            "application/apply-patch+yaml": {"schema": {"type": "object"}},
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/strategic-merge-patch+json": {"schema": {"type": "object"}}
        }});
        let mut post = operation("post");
        post["parameters"] = json!([field_validation]);
        let mut put = operation("put");
        put["parameters"] = json!([field_validation]);
        paths.insert(
            base.clone(),
            json!({"get": operation("list"), "post": post}),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({"get": operation("get"), "put": put.clone(), "patch": patch.clone(), "delete": operation("delete")}),
        );
        if resource.subresources.iter().any(|s| s == "status") {
            // Every PATCH of the kind declares the parameter: kubectl picks any of them.
            paths.insert(
                format!("{base}/{{name}}/status"),
                json!({"get": operation("get"), "put": put.clone(), "patch": patch.clone()}),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0"},
        "paths": paths,
        "components": {"schemas": schemas}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_group_version_reads_v1() {
        let list = api_resource_list(&builtin(), "", "v1").expect("core served");
        assert_eq!(list["groupVersion"], "v1");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(names.contains(&"pods/exec"));
        assert!(names.contains(&"secrets"));
    }

    #[test]
    fn crd_registers_each_served_version() {
        let crd = json!({
            "metadata": {"name": "clusters.postgresql.cnpg.io"},
            "spec": {"group": "postgresql.cnpg.io", "scope": "Namespaced",
                     "names": {"plural": "clusters", "kind": "Cluster"},
                     "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}
        });
        let served = from_crd(&crd).expect("valid");
        assert_eq!(served.len(), 1);
        assert_eq!(served[0].store_key(), "clusters.postgresql.cnpg.io");
        assert_eq!(served[0].subresources, vec!["status".to_string()]);
        let mut bad = crd.clone();
        bad["metadata"]["name"] = json!("wrong");
        assert!(from_crd(&bad).unwrap_err().contains("spec.names.plural"));
    }

    #[test]
    fn every_patch_declares_field_validation() {
        let document = openapi_document(&builtin(), "apps", "v1");
        let patch =
            &document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["parameters"][0]["name"], "fieldValidation");
        let index = openapi_index(&builtin());
        assert!(
            index["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap_or_default()
                .starts_with("/openapi/v3/apis/apps/v1?hash=")
        );
    }
}
