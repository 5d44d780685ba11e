//! The API server's object validation, as pure functions over the object (and the live one for
//! updates): label keys and values, workload selectors that must match their template, required
//! container images, and immutable fields (workload selectors, `immutable` ConfigMaps and
//! Secrets, a PersistentVolumeClaim's spec). Errors carry the API server's own words.

use serde_json::{Value, json};

/// One field error, as `field.Error` renders it.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub kind: ErrorKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ErrorKind {
    /// `Invalid value: <value>: <detail>`
    Invalid { value: String, detail: String },
    /// `Required value`
    Required,
    /// `Forbidden: <detail>`
    Forbidden(String),
    /// `Unsupported value: <value>: supported values: <supported>`
    Unsupported { value: String, supported: String },
    /// `Too long: may not be more than <n> bytes` (the value omitted)
    TooLong { max: u64 },
    /// `Too many: <actual>: must have at most <max> items`
    TooMany { actual: u64, max: u64 },
}

impl FieldError {
    fn invalid(field: impl Into<String>, value: String, detail: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            kind: ErrorKind::Invalid {
                value,
                detail: detail.into(),
            },
        }
    }

    /// The cause's message (without the field), as in `Status.details.causes`.
    pub fn body(&self) -> String {
        match &self.kind {
            ErrorKind::Invalid { value, detail } => format!("Invalid value: {value}: {detail}"),
            ErrorKind::Required => "Required value".to_string(),
            ErrorKind::Forbidden(detail) => format!("Forbidden: {detail}"),
            ErrorKind::Unsupported { value, supported } => {
                format!("Unsupported value: {value}: supported values: {supported}")
            }
            ErrorKind::TooLong { max } => format!(
                "Too long: may not be more than {max} {}",
                if *max == 1 { "byte" } else { "bytes" }
            ),
            ErrorKind::TooMany { actual, max } => format!(
                "Too many: {actual}: must have at most {max} {}",
                if *max == 1 { "item" } else { "items" }
            ),
        }
    }

    pub fn reason(&self) -> &'static str {
        match self.kind {
            ErrorKind::Invalid { .. } => "FieldValueInvalid",
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Forbidden(_) => "FieldValueForbidden",
            ErrorKind::Unsupported { .. } => "FieldValueNotSupported",
            ErrorKind::TooLong { .. } => "FieldValueTooLong",
            ErrorKind::TooMany { .. } => "FieldValueTooMany",
        }
    }

    pub fn cause(&self) -> Value {
        json!({"reason": self.reason(), "message": self.body(), "field": self.field})
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The errors as the API server joins them: one alone, several in brackets.
pub fn joined(errors: &[FieldError]) -> String {
    let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const PREFIX_PART: &str = "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_part(text: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !text.is_empty()
        && text.starts_with(alnum)
        && text.ends_with(alnum)
        && text
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// An RFC 1123 subdomain: lower-case labels of letters, digits and dashes, joined by dots.
pub fn is_dns_subdomain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// What is wrong with a label key (a qualified name), if anything.
fn label_key_problems(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let mut problems = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            problems.push("prefix part must be non-empty".to_string());
        } else if !is_dns_subdomain(prefix) {
            problems.push(PREFIX_PART.to_string());
        }
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else {
        if name.len() > 63 {
            problems.push("name part must be no more than 63 characters".to_string());
        }
        if !is_qualified_part(name) {
            problems.push(NAME_PART.to_string());
        }
    }
    problems
}

fn label_value_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_qualified_part(value) {
        problems.push(LABEL_VALUE.to_string());
    }
    problems
}

/// A labels map's errors, under `field` (`metadata.labels`).
pub fn labels(field: &str, labels: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (key, value) in labels.as_object().into_iter().flatten() {
        for problem in label_key_problems(key) {
            errors.push(FieldError::invalid(field, format!("{key:?}"), problem));
        }
        let text = value.as_str().unwrap_or("");
        for problem in label_value_problems(text) {
            errors.push(FieldError::invalid(field, format!("{text:?}"), problem));
        }
    }
    errors
}

/// `map[string]string{"a":"b", "c":"d"}`, as Go's `%#v` prints a labels map.
fn go_map(labels: &Value) -> String {
    let entries: Vec<String> = labels
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or("")))
        .collect();
    if labels.as_object().is_none() {
        return "map[string]string(nil)".to_string();
    }
    format!("map[string]string{{{}}}", entries.join(", "))
}

/// `v1.LabelSelector{MatchLabels:..., MatchExpressions:...}`, as `%#v` prints a selector.
fn go_selector(selector: &Value) -> String {
    let expressions: Vec<String> = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| format!("{:?}", v.as_str().unwrap_or("")))
                .collect();
            format!(
                "v1.LabelSelectorRequirement{{Key:{:?}, Operator:{:?}, Values:[]string{{{}}}}}",
                e["key"].as_str().unwrap_or(""),
                e["operator"].as_str().unwrap_or(""),
                values.join(", ")
            )
        })
        .collect();
    let expressions = if selector["matchExpressions"].is_array() {
        format!(
            "[]v1.LabelSelectorRequirement{{{}}}",
            expressions.join(", ")
        )
    } else {
        "[]v1.LabelSelectorRequirement(nil)".to_string()
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{expressions}}}",
        go_map(&selector["matchLabels"])
    )
}

/// Whether a `LabelSelector` (matchLabels and matchExpressions) selects these labels.
pub fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |key: &str| labels[key].as_str();
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| label(key) == value.as_str());
    let by_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str().unwrap_or("") {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        });
    by_labels && by_expressions
}

fn selector_is_empty(selector: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.is_empty())
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(|m| m.is_empty())
}

/// Containers without an image, under `path` (`spec.template.spec`).
fn pod_spec(path: &str, spec: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for list in ["initContainers", "containers"] {
        for (index, container) in spec[list].as_array().into_iter().flatten().enumerate() {
            if container["image"].as_str().is_none_or(str::is_empty) {
                errors.push(FieldError {
                    field: format!("{path}.{list}[{index}].image"),
                    kind: ErrorKind::Required,
                });
            }
        }
    }
    errors
}

/// What the API server refuses in an object of this kind, created or updated.
pub fn object(kind: &str, object: &Value) -> Vec<FieldError> {
    let mut errors = labels("metadata.labels", &object["metadata"]["labels"]);
    match kind {
        "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" => {
            let template_labels = &object["spec"]["template"]["metadata"]["labels"];
            errors.extend(labels("spec.template.metadata.labels", template_labels));
            let selector = &object["spec"]["selector"];
            if selector.is_null() {
                errors.push(FieldError {
                    field: "spec.selector".into(),
                    kind: ErrorKind::Required,
                });
            } else if selector_is_empty(selector) {
                errors.push(FieldError::invalid(
                    "spec.selector",
                    go_selector(selector),
                    format!("empty selector is invalid for {}", kind.to_lowercase()),
                ));
            }
            if selector.is_null() || !selector_matches(selector, template_labels) {
                errors.push(FieldError::invalid(
                    "spec.template.metadata.labels",
                    go_map(template_labels),
                    "`selector` does not match template `labels`",
                ));
            }
            errors.extend(pod_spec(
                "spec.template.spec",
                &object["spec"]["template"]["spec"],
            ));
        }
        "Job" => errors.extend(pod_spec(
            "spec.template.spec",
            &object["spec"]["template"]["spec"],
        )),
        "CronJob" => errors.extend(pod_spec(
            "spec.jobTemplate.spec.template.spec",
            &object["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        )),
        "Pod" => errors.extend(pod_spec("spec", &object["spec"])),
        _ => {}
    }
    errors
}

/// What an update may not change.
pub fn update(kind: &str, live: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match kind {
        "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" => {
            let selector = &object["spec"]["selector"];
            if !selector.is_null() && *selector != live["spec"]["selector"] {
                errors.push(FieldError::invalid(
                    "spec.selector",
                    go_selector(selector),
                    "field is immutable",
                ));
            }
        }
        "ConfigMap" | "Secret" if live["immutable"] == true => {
            let forbidden = |field: &str| FieldError {
                field: field.into(),
                kind: ErrorKind::Forbidden("field is immutable when `immutable` is set".into()),
            };
            if object["immutable"] != true {
                errors.push(forbidden("immutable"));
            }
            let fields: &[&str] = if kind == "Secret" {
                &["data"]
            } else {
                &["data", "binaryData"]
            };
            for field in fields {
                if normal_map(&object[field]) != normal_map(&live[field]) {
                    errors.push(forbidden(field));
                }
            }
        }
        "PersistentVolumeClaim" => {
            let without_requests = |claim: &Value| {
                let mut spec = claim["spec"].clone();
                if let Some(resources) = spec["resources"].as_object_mut() {
                    resources.remove("requests");
                    if resources.is_empty() {
                        spec.as_object_mut().map(|s| s.remove("resources"));
                    }
                }
                if let Some(map) = spec.as_object_mut() {
                    map.remove("volumeAttributesClassName");
                }
                spec
            };
            if without_requests(live) != without_requests(object) {
                errors.push(FieldError {
                    field: "spec".into(),
                    kind: ErrorKind::Forbidden(
                        "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".into(),
                    ),
                });
            }
        }
        _ => {}
    }
    errors
}

/// An absent map and an empty one are the same.
fn normal_map(value: &Value) -> Value {
    match value {
        Value::Object(map) if map.is_empty() => Value::Null,
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture file's documents by `metadata.name`.
    fn fixture(name: &str) -> std::collections::BTreeMap<String, Value> {
        super::super::test_fixtures::documents("validation", name)
            .into_iter()
            .map(|object| {
                (
                    object["metadata"]["name"].as_str().unwrap().to_string(),
                    object,
                )
            })
            .collect()
    }

    #[test]
    fn label_keys_and_values_are_checked_in_the_api_servers_words() {
        let objects = fixture("objects.yaml");
        let errors = object("ConfigMap", &objects["bad-labels"]);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            vec![
                format!("metadata.labels: Invalid value: \"Example.com/x\": {PREFIX_PART}"),
                format!("metadata.labels: Invalid value: \"bad value!\": {LABEL_VALUE}"),
                format!("metadata.labels: Invalid value: \"no spaces\": {NAME_PART}"),
            ]
        );
        assert!(object("ConfigMap", &objects["good-labels"]).is_empty());
    }

    #[test]
    fn a_workload_selector_must_match_its_template_and_containers_need_images() {
        let objects = fixture("objects.yaml");
        let errors = object("Deployment", &objects["mismatch"]);
        assert_eq!(
            joined(&errors),
            "[spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\", \"tier\":\"front\"}: `selector` does not match template `labels`, spec.template.spec.containers[0].image: Required value]"
        );
        assert!(object("Deployment", &objects["matching"]).is_empty());
    }

    #[test]
    fn immutable_fields_stay_as_they_were() {
        let objects = fixture("objects.yaml");
        let moved = update("Deployment", &objects["matching"], &objects["reselected"]);
        assert_eq!(
            joined(&moved),
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"api\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
        );
        let frozen = update("ConfigMap", &objects["frozen"], &objects["good-labels"]);
        assert_eq!(
            joined(&frozen),
            "[immutable: Forbidden: field is immutable when `immutable` is set, data: Forbidden: field is immutable when `immutable` is set]"
        );
        let mut relabelled = objects["frozen"].clone();
        relabelled["metadata"]["labels"] = json!({"team": "a"});
        assert!(update("ConfigMap", &objects["frozen"], &relabelled).is_empty());
        let mut grown = objects["claim"].clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(update("PersistentVolumeClaim", &objects["claim"], &grown).is_empty());
        let mut reclassed = objects["claim"].clone();
        reclassed["spec"]["storageClassName"] = json!("fast");
        assert_eq!(
            joined(&update(
                "PersistentVolumeClaim",
                &objects["claim"],
                &reclassed
            )),
            "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
        );
    }
}
