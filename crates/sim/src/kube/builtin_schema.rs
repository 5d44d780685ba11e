//! The OpenAPI schemas of the built-in kinds, generated once from k8s-openapi's `JsonSchema`
//! impls (the real API's descriptions, types and required fields), and the API server's decoding
//! of an object against them: unknown fields at any depth (`strict decoding error: unknown field
//! "spec.template.spec.containers[0].imagee"`) and type mismatches (`json: cannot unmarshal string
//! into Go struct field DeploymentSpec.spec.replicas of type int32`). The same schemas are served
//! under `/openapi/v3` (`kubectl explain`), with the strategic-merge-patch extensions kubectl reads.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::{
    admissionregistration::v1 as admissionregistration, apps::v1 as apps,
    authentication::v1 as authentication, authorization::v1 as authorization,
    autoscaling::v2 as autoscaling, batch::v1 as batch, certificates::v1 as certificates,
    coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
    networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
    scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::schemars::{JsonSchema, generate::SchemaSettings};

/// Every built-in kind's schema name (`io.k8s.api.apps.v1.Deployment`), and all definitions.
pub struct Schemas {
    /// kind -> its schema's name in `definitions`.
    pub kinds: BTreeMap<&'static str, String>,
    /// `components.schemas`: every definition reachable from the kinds.
    pub definitions: Map<String, Value>,
}

macro_rules! generate_kinds {
    ($generator:ident, $kinds:ident, $($kind:literal => $ty:ty),* $(,)?) => {
        $(
            $generator.subschema_for::<$ty>();
            $kinds.insert($kind, <$ty as JsonSchema>::schema_name().into_owned());
        )*
    };
}

/// The schemas, generated on first use (a few milliseconds; most runs never need them).
pub fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(generate)
}

fn generate() -> Schemas {
    // OpenAPI 3 settings: references under #/components/schemas, and a reference with a
    // description becomes `allOf: [{$ref}]`, as the API server publishes them.
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut kinds = BTreeMap::new();
    generate_kinds!(generator, kinds,
        "SelfSubjectAccessReview" => authorization::SelfSubjectAccessReview,
        "SelfSubjectRulesReview" => authorization::SelfSubjectRulesReview,
        "SelfSubjectReview" => authentication::SelfSubjectReview,
        "Namespace" => core::Namespace,
        "Node" => core::Node,
        "Pod" => core::Pod,
        "Service" => core::Service,
        "Endpoints" => core::Endpoints,
        "Secret" => core::Secret,
        "ConfigMap" => core::ConfigMap,
        "ServiceAccount" => core::ServiceAccount,
        "PersistentVolumeClaim" => core::PersistentVolumeClaim,
        "PersistentVolume" => core::PersistentVolume,
        "Event" => core::Event,
        "ResourceQuota" => core::ResourceQuota,
        "LimitRange" => core::LimitRange,
        "Deployment" => apps::Deployment,
        "StatefulSet" => apps::StatefulSet,
        "DaemonSet" => apps::DaemonSet,
        "ReplicaSet" => apps::ReplicaSet,
        "ControllerRevision" => apps::ControllerRevision,
        "Job" => batch::Job,
        "CronJob" => batch::CronJob,
        "HorizontalPodAutoscaler" => autoscaling::HorizontalPodAutoscaler,
        "Ingress" => networking::Ingress,
        "IngressClass" => networking::IngressClass,
        "NetworkPolicy" => networking::NetworkPolicy,
        "EndpointSlice" => discovery::EndpointSlice,
        "PodDisruptionBudget" => policy::PodDisruptionBudget,
        "Role" => rbac::Role,
        "RoleBinding" => rbac::RoleBinding,
        "ClusterRole" => rbac::ClusterRole,
        "ClusterRoleBinding" => rbac::ClusterRoleBinding,
        "StorageClass" => storage::StorageClass,
        "Lease" => coordination::Lease,
        "PriorityClass" => scheduling::PriorityClass,
        "CustomResourceDefinition" => apiextensions::CustomResourceDefinition,
        "ValidatingWebhookConfiguration" => admissionregistration::ValidatingWebhookConfiguration,
        "MutatingWebhookConfiguration" => admissionregistration::MutatingWebhookConfiguration,
        "ValidatingAdmissionPolicy" => admissionregistration::ValidatingAdmissionPolicy,
        "ValidatingAdmissionPolicyBinding" => admissionregistration::ValidatingAdmissionPolicyBinding,
        "CertificateSigningRequest" => certificates::CertificateSigningRequest,
    );
    let mut definitions = generator.take_definitions(true);
    add_patch_extensions(&mut definitions);
    Schemas { kinds, definitions }
}

/// The strategic-merge-patch metadata of the real API (`patchStrategy`/`patchMergeKey` struct
/// tags), which k8s-openapi's schemas leave out: kubectl computes `kubectl apply` patches from
/// them once the served schema has the kind, so without them lists would be replaced whole.
/// (schema type, property, strategy, merge key)
const PATCH_STRATEGIES: &[(&str, &str, &str, Option<&str>)] = &[
    ("ObjectMeta", "finalizers", "merge", None),
    ("ObjectMeta", "ownerReferences", "merge", Some("uid")),
    ("PodSpec", "volumes", "merge,retainKeys", Some("name")),
    ("PodSpec", "initContainers", "merge", Some("name")),
    ("PodSpec", "containers", "merge", Some("name")),
    ("PodSpec", "ephemeralContainers", "merge", Some("name")),
    ("PodSpec", "imagePullSecrets", "merge", Some("name")),
    ("PodSpec", "hostAliases", "merge", Some("ip")),
    (
        "PodSpec",
        "topologySpreadConstraints",
        "merge",
        Some("topologyKey"),
    ),
    (
        "PodSpec",
        "resourceClaims",
        "merge,retainKeys",
        Some("name"),
    ),
    ("PodSpec", "schedulingGates", "merge", Some("name")),
    ("Container", "ports", "merge", Some("containerPort")),
    ("Container", "env", "merge", Some("name")),
    ("Container", "volumeMounts", "merge", Some("mountPath")),
    ("Container", "volumeDevices", "merge", Some("devicePath")),
    (
        "EphemeralContainer",
        "ports",
        "merge",
        Some("containerPort"),
    ),
    ("EphemeralContainer", "env", "merge", Some("name")),
    (
        "EphemeralContainer",
        "volumeMounts",
        "merge",
        Some("mountPath"),
    ),
    (
        "EphemeralContainer",
        "volumeDevices",
        "merge",
        Some("devicePath"),
    ),
    ("ServiceSpec", "ports", "merge", Some("port")),
    ("ServiceAccount", "secrets", "merge", Some("name")),
    ("DeploymentSpec", "strategy", "retainKeys", None),
    ("PodStatus", "conditions", "merge", Some("type")),
    ("PodStatus", "podIPs", "merge", Some("ip")),
    ("PodStatus", "hostIPs", "merge", Some("ip")),
    (
        "PodStatus",
        "resourceClaimStatuses",
        "merge,retainKeys",
        Some("name"),
    ),
    ("NodeStatus", "conditions", "merge", Some("type")),
    ("NodeStatus", "addresses", "merge", Some("type")),
    ("NodeSpec", "podCIDRs", "merge", None),
    ("NamespaceStatus", "conditions", "merge", Some("type")),
    (
        "PersistentVolumeClaimStatus",
        "conditions",
        "merge",
        Some("type"),
    ),
    ("ServiceStatus", "conditions", "merge", Some("type")),
    ("DeploymentStatus", "conditions", "merge", Some("type")),
    ("ReplicaSetStatus", "conditions", "merge", Some("type")),
    ("StatefulSetStatus", "conditions", "merge", Some("type")),
    ("DaemonSetStatus", "conditions", "merge", Some("type")),
    ("JobStatus", "conditions", "merge", Some("type")),
    (
        "PodDisruptionBudgetStatus",
        "conditions",
        "merge",
        Some("type"),
    ),
    (
        "HorizontalPodAutoscalerStatus",
        "conditions",
        "merge",
        Some("type"),
    ),
];

fn add_patch_extensions(definitions: &mut Map<String, Value>) {
    for (name, schema) in definitions.iter_mut() {
        let short = name.rsplit('.').next().unwrap_or(name);
        for (_, property, strategy, key) in PATCH_STRATEGIES.iter().filter(|row| row.0 == short) {
            let Some(target) = schema["properties"].get_mut(*property) else {
                continue;
            };
            target["x-kubernetes-patch-strategy"] = json!(strategy);
            if let Some(key) = key {
                target["x-kubernetes-patch-merge-key"] = json!(key);
            }
        }
    }
}

/// The schema name of a built-in kind (`io.k8s.api.apps.v1.Deployment`).
pub fn schema_name(kind: &str) -> Option<&'static str> {
    schemas().kinds.get(kind).map(String::as_str)
}

/// What decoding an object found wrong.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Decoded {
    /// The first type mismatch, as Go's JSON decoder words it (it stops at the first).
    pub type_error: Option<String>,
    /// Every unknown field's path (`spec.template.spec.containers[0].imagee`), in order.
    pub unknown: Vec<String>,
}

/// Decodes `object` (of a built-in `kind`) against its schema.
pub fn decode(kind: &str, object: &Value) -> Decoded {
    let mut decoded = Decoded::default();
    let schemas = schemas();
    if let Some(name) = schemas.kinds.get(kind) {
        let walk = Walk {
            definitions: &schemas.definitions,
        };
        let schema = json!({"$ref": format!("#/components/schemas/{name}")});
        walk.visit(object, &schema, &Position::root(kind), &mut decoded);
    }
    decoded
}

/// Where the walk is: the strict-decoding path (with indices), Go's field path (without), and
/// the Go struct holding the current field.
#[derive(Clone)]
struct Position {
    path: String,
    go_path: String,
    go_struct: String,
    /// The SSA path (`.spec.containers[name="web"]`), for server-side apply's errors.
    typed_path: String,
}

impl Position {
    fn root(kind: &str) -> Position {
        Position {
            path: String::new(),
            go_path: String::new(),
            go_struct: kind.to_string(),
            typed_path: String::new(),
        }
    }

    fn field(&self, name: &str, holder: &str) -> Position {
        let join = |base: &str| {
            if base.is_empty() {
                name.to_string()
            } else {
                format!("{base}.{name}")
            }
        };
        Position {
            path: join(&self.path),
            go_path: join(&self.go_path),
            go_struct: holder.to_string(),
            typed_path: format!("{}.{name}", self.typed_path),
        }
    }

    fn map_value(&self, key: &str) -> Position {
        Position {
            path: format!("{}.{key}", self.path),
            typed_path: format!("{}.{key}", self.typed_path),
            ..self.clone()
        }
    }

    fn item(&self, index: usize, item: &Value, merge_key: Option<&str>) -> Position {
        let typed = match merge_key.and_then(|key| item.get(key).map(|value| (key, value))) {
            Some((key, value)) => format!("{}[{key}={value}]", self.typed_path),
            None => format!("{}[{index}]", self.typed_path),
        };
        Position {
            path: format!("{}[{index}]", self.path),
            typed_path: typed,
            ..self.clone()
        }
    }
}

struct Walk<'a> {
    definitions: &'a Map<String, Value>,
}

/// A `$ref` (or `allOf: [{$ref}]`) resolved: the definition and its short Go name (`v1.PodSpec`).
fn referenced<'a>(
    definitions: &'a Map<String, Value>,
    schema: &'a Value,
) -> (&'a Value, Option<String>) {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str());
    match reference
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .and_then(|name| definitions.get(name).map(|d| (d, name)))
    {
        Some((definition, name)) => {
            let mut parts = name.rsplit('.');
            let go_name = match (parts.next(), parts.next()) {
                (Some(kind), Some(package)) => format!("{package}.{kind}"),
                _ => name.to_string(),
            };
            (definition, Some(go_name))
        }
        None => (schema, None),
    }
}

/// How Go's decoder names a JSON value's type in an error.
fn json_kind(value: &Value) -> String {
    match value {
        Value::String(_) => "string".into(),
        Value::Number(number) => format!("number {number}"),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Null => "null".into(),
    }
}

/// `number` alone where the Go type is not a number (the literal only shows for numbers that
/// do not fit a numeric type).
fn json_kind_short(value: &Value) -> String {
    match value {
        Value::Number(_) => "number".into(),
        other => json_kind(other),
    }
}

const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// `resource.ParseQuantity`'s verdict on a string.
fn quantity_error(text: &str) -> Option<&'static str> {
    let text = text.trim();
    let digits_end = text
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && matches!(c, '+' | '-'))))
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let digits = number.trim_start_matches(['+', '-']);
    if digits.is_empty()
        || !digits.chars().any(|c| c.is_ascii_digit())
        || digits.matches('.').count() > 1
    {
        return Some(QUANTITY_FORMAT);
    }
    let known = [
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
    ];
    let exponent = suffix.strip_prefix(['e', 'E']).is_some_and(|rest| {
        let rest = rest.trim_start_matches(['+', '-']);
        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit())
    });
    if !suffix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-'))
    {
        return Some(QUANTITY_FORMAT);
    }
    if known.contains(&suffix) || exponent {
        None
    } else {
        Some("unable to parse quantity's suffix")
    }
}

impl Walk<'_> {
    /// The Go type a schema decodes into, as the decoder names it (`int32`, `[]v1.Container`).
    fn go_type(&self, schema: &Value) -> String {
        let (schema, go_name) = referenced(self.definitions, schema);
        if let Some(go_name) = go_name
            && schema.get("properties").is_some()
        {
            return go_name;
        }
        match schema["type"].as_str() {
            Some("integer") => schema["format"].as_str().unwrap_or("int64").to_string(),
            Some("number") => "float64".into(),
            Some("boolean") => "bool".into(),
            Some("string") => "string".into(),
            Some("array") => format!("[]{}", self.go_type(&schema["items"])),
            Some("object") if schema.get("additionalProperties").is_some() => {
                format!(
                    "map[string]{}",
                    self.go_type(&schema["additionalProperties"])
                )
            }
            _ => "interface {}".into(),
        }
    }

    fn mismatch(&self, value: &Value, schema: &Value, at: &Position, decoded: &mut Decoded) {
        if decoded.type_error.is_some() {
            return;
        }
        let go_type = self.go_type(schema);
        let shown = if matches!(go_type.as_str(), "int32" | "int64" | "float64") {
            json_kind(value)
        } else {
            json_kind_short(value)
        };
        decoded.type_error = Some(format!(
            "json: cannot unmarshal {shown} into Go struct field {}.{} of type {go_type}",
            at.go_struct, at.go_path
        ));
    }

    fn visit(&self, value: &Value, schema: &Value, at: &Position, decoded: &mut Decoded) {
        // null decodes into anything (the field keeps its zero value).
        if value.is_null() {
            return;
        }
        let (resolved, go_name) = referenced(self.definitions, schema);
        // apiextensions' JSON (a CRD schema's `default`, `enum`, `example`) holds any value.
        if go_name.as_deref() == Some("v1.JSON") {
            return;
        }
        if resolved["x-kubernetes-int-or-string"] == true {
            let quantity = go_name.as_deref() == Some("resource.Quantity");
            match value {
                Value::String(text) if quantity => {
                    if let Some(problem) = quantity_error(text)
                        && decoded.type_error.is_none()
                    {
                        decoded.type_error = Some(problem.to_string());
                    }
                }
                Value::String(_) => {}
                Value::Number(_) if quantity => {}
                Value::Number(number) if number.is_i64() || number.is_u64() => {}
                other if decoded.type_error.is_none() => {
                    decoded.type_error = Some(if quantity {
                        QUANTITY_FORMAT.to_string()
                    } else {
                        format!(
                            "json: cannot unmarshal {} into Go value of type int32",
                            json_kind_short(other)
                        )
                    });
                }
                _ => {}
            }
            return;
        }
        let holder = go_name
            .as_deref()
            .map(|name| name.rsplit('.').next().unwrap_or(name).to_string())
            .unwrap_or_else(|| at.go_struct.clone());
        match resolved["type"].as_str() {
            Some("object") => {
                let Some(map) = value.as_object() else {
                    return self.mismatch(value, schema, at, decoded);
                };
                if let Some(properties) = resolved["properties"].as_object() {
                    for (key, child) in map {
                        match properties.get(key) {
                            Some(property) => {
                                let position = at.field(key, &holder);
                                let merge_key = property["x-kubernetes-patch-merge-key"].as_str();
                                self.visit_property(child, property, &position, merge_key, decoded);
                            }
                            None => decoded.unknown.push(at.field(key, &holder).path),
                        }
                    }
                } else if let Some(values) = resolved.get("additionalProperties") {
                    for (key, child) in map {
                        self.visit(child, values, &at.map_value(key), decoded);
                    }
                }
            }
            Some("array") => {
                let Some(items) = value.as_array() else {
                    return self.mismatch(value, schema, at, decoded);
                };
                for (index, item) in items.iter().enumerate() {
                    self.visit(
                        item,
                        &resolved["items"],
                        &at.item(index, item, None),
                        decoded,
                    );
                }
            }
            Some("string") if !value.is_string() => self.mismatch(value, schema, at, decoded),
            Some("boolean") if !value.is_boolean() => self.mismatch(value, schema, at, decoded),
            Some("number") if !value.is_number() => self.mismatch(value, schema, at, decoded),
            Some("integer") => {
                let fits = match resolved["format"].as_str() {
                    Some("int32") => value.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                    _ => value.is_i64() || value.is_u64() && value.as_i64().is_some(),
                };
                if !fits {
                    self.mismatch(value, schema, at, decoded);
                }
            }
            _ => {}
        }
    }

    /// A property: a list with a merge key names its items by that key in SSA paths.
    fn visit_property(
        &self,
        value: &Value,
        schema: &Value,
        at: &Position,
        merge_key: Option<&str>,
        decoded: &mut Decoded,
    ) {
        let (resolved, _) = referenced(self.definitions, schema);
        match (resolved["type"].as_str(), value.as_array()) {
            (Some("array"), Some(items)) => {
                for (index, item) in items.iter().enumerate() {
                    self.visit(
                        item,
                        &resolved["items"],
                        &at.item(index, item, merge_key),
                        decoded,
                    );
                }
            }
            _ => self.visit(value, schema, at, decoded),
        }
    }
}

/// Drops the fields the schema of `kind` does not know, as decoding into Go structs does (under
/// fieldValidation=Warn or Ignore the object is stored without them).
pub fn prune(kind: &str, object: &mut Value) {
    let schemas = schemas();
    let Some(name) = schemas.kinds.get(kind) else {
        return;
    };
    let walk = Walk {
        definitions: &schemas.definitions,
    };
    walk.prune(
        object,
        &json!({"$ref": format!("#/components/schemas/{name}")}),
    );
}

impl Walk<'_> {
    fn prune(&self, value: &mut Value, schema: &Value) {
        let (resolved, _) = referenced(self.definitions, schema);
        match value {
            Value::Object(map) if resolved["type"] == "object" => {
                if let Some(properties) = resolved["properties"].as_object() {
                    map.retain(|key, _| properties.contains_key(key));
                    for (key, child) in map.iter_mut() {
                        self.prune(child, &properties[key]);
                    }
                } else if let Some(values) = resolved.get("additionalProperties") {
                    for child in map.values_mut() {
                        self.prune(child, values);
                    }
                }
            }
            Value::Array(items) if resolved["type"] == "array" => {
                for item in items {
                    self.prune(item, &resolved["items"]);
                }
            }
            _ => {}
        }
    }
}

/// Server-side apply's verdict on an applied object, as structured-merge-diff types it: fields
/// the schema does not declare (`.spec.containers[name="web"].x: field not declared in
/// schema`) and scalars of the wrong type; one error alone, several as its `errors:` list.
pub fn apply_errors(kind: &str, object: &Value) -> Option<String> {
    let schemas = schemas();
    let name = schemas.kinds.get(kind)?;
    let walk = Walk {
        definitions: &schemas.definitions,
    };
    let mut found = Vec::new();
    let schema = json!({"$ref": format!("#/components/schemas/{name}")});
    walk.typed(object, &schema, &Position::root(kind), &mut found);
    match found.len() {
        0 => None,
        1 => found.pop(),
        _ => Some(
            std::iter::once("errors:".to_string())
                .chain(found.iter().map(|error| format!("  {error}")))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    }
}

/// Go's `%#v` of an unstructured value (`map[string]interface {}{"a":1}`).
fn go_syntax(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".into(),
        Value::String(text) => format!("{text:?}"),
        Value::Array(items) => format!(
            "[]interface {{}}{{{}}}",
            items.iter().map(go_syntax).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "map[string]interface {{}}{{{}}}",
            map.iter()
                .map(|(key, value)| format!("{key:?}:{}", go_syntax(value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Go's `%T` of an unstructured value.
fn go_type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

impl Walk<'_> {
    fn typed(&self, value: &Value, schema: &Value, at: &Position, found: &mut Vec<String>) {
        let (resolved, _) = referenced(self.definitions, schema);
        let path = if at.typed_path.is_empty() {
            "."
        } else {
            at.typed_path.as_str()
        };
        match (value, resolved["type"].as_str()) {
            (Value::Null, _) => {}
            (Value::Object(map), Some("object")) => {
                if let Some(properties) = resolved["properties"].as_object() {
                    for (key, child) in map {
                        let position = at.field(key, "");
                        match properties.get(key) {
                            Some(property) => {
                                let (list, _) = referenced(self.definitions, property);
                                match (child.as_array(), list["type"].as_str()) {
                                    (Some(items), Some("array")) => {
                                        let merge_key =
                                            property["x-kubernetes-patch-merge-key"].as_str();
                                        for (index, item) in items.iter().enumerate() {
                                            let position = position.item(index, item, merge_key);
                                            self.typed(item, &list["items"], &position, found);
                                        }
                                    }
                                    _ => self.typed(child, property, &position, found),
                                }
                            }
                            None => found.push(format!(
                                "{}: field not declared in schema",
                                position.typed_path
                            )),
                        }
                    }
                } else if let Some(values) = resolved.get("additionalProperties") {
                    for (key, child) in map {
                        self.typed(child, values, &at.map_value(key), found);
                    }
                }
            }
            (Value::Array(items), Some("array")) => {
                for (index, item) in items.iter().enumerate() {
                    self.typed(item, &resolved["items"], &at.item(index, item, None), found);
                }
            }
            (Value::String(_), Some("string"))
            | (Value::Bool(_), Some("boolean"))
            | (Value::Number(_), Some("integer" | "number")) => {}
            (other, Some("string")) => found.push(format!(
                "{path}: expected string, got &value.valueUnstructured{{Value:{}}}",
                go_syntax(other)
            )),
            (other, Some("integer" | "number")) => found.push(format!(
                "{path}: expected numeric (int or float), got {}",
                go_type_of(other)
            )),
            (other, Some("boolean")) => {
                let shown = match other {
                    Value::String(text) => text.clone(),
                    value => go_syntax(value),
                };
                found.push(format!("{path}: expected boolean, got &{{{shown}}}"))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> BTreeMap<String, Value> {
        super::super::test_fixtures::documents("builtin_schema", name)
            .into_iter()
            .map(|object| {
                (
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    object,
                )
            })
            .collect()
    }

    #[test]
    fn every_builtin_kind_has_a_schema() {
        for resource in super::super::resources::builtin() {
            assert!(
                schema_name(&resource.kind).is_some(),
                "{} has no schema",
                resource.kind
            );
        }
        let schemas = schemas();
        let deployment = &schemas.definitions["io.k8s.api.apps.v1.DeploymentSpec"];
        assert!(
            deployment["required"]
                .as_array()
                .is_some_and(|r| r.contains(&json!("template")))
        );
        let containers =
            &schemas.definitions["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    }

    #[test]
    fn unknown_fields_are_found_at_every_depth() {
        let objects = fixture("objects.yaml");
        let decoded = decode("Deployment", &objects["typo-deep"]);
        assert_eq!(decoded.type_error, None);
        assert_eq!(
            decoded.unknown,
            vec![
                "metadata.labelz".to_string(),
                "spec.template.spec.containers[0].imagee".to_string(),
                "spec.template.spec.containers[1].env[0].valueFromm".to_string(),
            ]
        );
        assert_eq!(
            apply_errors("Deployment", &objects["typo-deep"]).as_deref(),
            Some(
                "errors:\n  .metadata.labelz: field not declared in schema\n  .spec.template.spec.containers[name=\"web\"].imagee: field not declared in schema\n  .spec.template.spec.containers[name=\"side\"].env[name=\"A\"].valueFromm: field not declared in schema"
            )
        );
        let mut only_container = objects["typo-deep"].clone();
        only_container["metadata"]
            .as_object_mut()
            .map(|m| m.remove("labelz"));
        if let Some(containers) =
            only_container["spec"]["template"]["spec"]["containers"].as_array_mut()
        {
            containers.truncate(1);
        }
        assert_eq!(
            apply_errors("Deployment", &only_container).as_deref(),
            Some(
                ".spec.template.spec.containers[name=\"web\"].imagee: field not declared in schema"
            )
        );
        assert_eq!(decode("Deployment", &objects["valid"]), Decoded::default());
        let mut pruned = objects["typo-deep"].clone();
        prune("Deployment", &mut pruned);
        assert_eq!(decode("Deployment", &pruned), Decoded::default());
        assert_eq!(
            pruned["spec"]["template"]["spec"]["containers"][1]["env"][0],
            json!({"name": "A"})
        );
        assert_eq!(apply_errors("Deployment", &objects["valid"]), None);
        // Scalars of the wrong type, as structured-merge-diff words them.
        assert_eq!(
            apply_errors("Deployment", &objects["replicas-text"]).as_deref(),
            Some(".spec.replicas: expected numeric (int or float), got string")
        );
        assert_eq!(
            apply_errors("Deployment", &objects["env-number"]).as_deref(),
            Some(
                ".spec.template.spec.containers[name=\"web\"].env[name=\"PORT\"].value: expected string, got &value.valueUnstructured{Value:8080}"
            )
        );
    }

    #[test]
    fn type_mismatches_read_like_gos_decoder() {
        let objects = fixture("objects.yaml");
        assert_eq!(
            decode("Deployment", &objects["replicas-text"])
                .type_error
                .as_deref(),
            Some(
                "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
            )
        );
        assert_eq!(
            decode("Deployment", &objects["env-number"])
                .type_error
                .as_deref(),
            Some(
                "json: cannot unmarshal number into Go struct field EnvVar.spec.template.spec.containers.env.value of type string"
            )
        );
        assert_eq!(
            decode("Deployment", &objects["containers-map"])
                .type_error
                .as_deref(),
            Some(
                "json: cannot unmarshal object into Go struct field PodSpec.spec.template.spec.containers of type []v1.Container"
            )
        );
        assert_eq!(
            decode("Deployment", &objects["bad-quantity"])
                .type_error
                .as_deref(),
            Some("unable to parse quantity's suffix")
        );
    }

    #[test]
    fn quantities_parse_like_the_api_server() {
        for good in ["1", "100m", "1.5Gi", "512Mi", "1e3", "0.5", "+1k", "2E"] {
            assert_eq!(quantity_error(good), None, "{good}");
        }
        assert_eq!(
            quantity_error("1GB"),
            Some("unable to parse quantity's suffix")
        );
        assert_eq!(quantity_error("lots"), Some(QUANTITY_FORMAT));
        assert_eq!(quantity_error("1 Gi"), Some(QUANTITY_FORMAT));
    }
}
