//! Structural schemas of CustomResourceDefinitions (`openAPIV3Schema`), as the API server applies
//! them to custom resources: unknown fields pruned (or, under `fieldValidation=Strict`, refused)
//! unless `x-kubernetes-preserve-unknown-fields`, `default`s filled in, then types, `required`,
//! `enum`, bounds, lengths, patterns, item counts and formats validated. `x-kubernetes-validations`
//! (CEL) rules are not evaluated: a rehearsal accepts what they would refuse.

use super::validation::{ErrorKind, FieldError};
use serde_json::Value;

/// The `openAPIV3Schema` of a CRD's version, if it declares one.
pub fn version_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version)
        .map(|v| &v["schema"]["openAPIV3Schema"])
        .filter(|schema| schema.is_object())
}

fn preserves(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"] == true
        || schema["x-kubernetes-embedded-resource"] == true && schema["properties"].is_null()
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Removes the fields the schema does not know; returns their paths (`spec.foo`).
/// `apiVersion`, `kind` and `metadata` of the root are the API server's, not the schema's.
pub fn prune(schema: &Value, object: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    prune_at(schema, object, "", true, &mut unknown);
    unknown
}

fn prune_at(schema: &Value, value: &mut Value, path: &str, root: bool, unknown: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child_path = join(path, &key);
                let child_schema = properties
                    .and_then(|p| p.get(&key))
                    .or_else(|| (additional.is_object()).then_some(additional));
                match child_schema {
                    Some(child) => {
                        if let Some(child_value) = map.get_mut(&key) {
                            prune_at(child, child_value, &child_path, false, unknown);
                        }
                    }
                    None if preserves(schema) || *additional == true => {}
                    None => {
                        map.remove(&key);
                        unknown.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                prune_at(
                    &schema["items"],
                    item,
                    &format!("{path}[{index}]"),
                    false,
                    unknown,
                );
            }
        }
        _ => {}
    }
}

/// Fills in `default`s of missing properties, at every depth the object reaches.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (key, child) in properties {
                    if !map.contains_key(key)
                        && let Some(default) = child.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(child_value) = map.get_mut(key) {
                        apply_defaults(child, child_value);
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                for child_value in map.values_mut() {
                    apply_defaults(&schema["additionalProperties"], child_value);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                apply_defaults(&schema["items"], item);
            }
        }
        _ => {}
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_fits(wanted: &str, value: &Value) -> bool {
    let actual = type_name(value);
    actual == wanted || (wanted == "number" && actual == "integer")
}

/// Types, `required`, `enum`: the errors of a custom resource against its schema.
pub fn validate(schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_at(schema, object, "", true, &mut errors);
    errors
}

fn validate_at(
    schema: &Value,
    value: &Value,
    path: &str,
    root: bool,
    errors: &mut Vec<FieldError>,
) {
    if value.is_null() && schema["nullable"] == true {
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    if int_or_string {
        if !matches!(type_name(value), "integer" | "string") {
            errors.push(FieldError {
                field: path.to_string(),
                kind: ErrorKind::Invalid {
                    value: format!("{:?}", type_name(value)),
                    detail: format!("{path} in body must be of type integer,string: {value}"),
                },
            });
        }
        return;
    }
    if let Some(wanted) = schema["type"].as_str()
        && !type_fits(wanted, value)
    {
        errors.push(FieldError {
            field: path.to_string(),
            kind: ErrorKind::Invalid {
                value: format!("{:?}", type_name(value)),
                detail: format!(
                    "{path} in body must be of type {wanted}: {:?}",
                    type_name(value)
                ),
            },
        });
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        errors.push(FieldError {
            field: path.to_string(),
            kind: ErrorKind::Unsupported {
                value: value.to_string(),
                supported: supported.join(", "),
            },
        });
    }
    errors.extend(value_bounds(schema, value, path));
    match value {
        Value::Object(map) => {
            for required in schema["required"].as_array().into_iter().flatten() {
                let Some(key) = required.as_str() else {
                    continue;
                };
                if root && matches!(key, "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if !map.contains_key(key) {
                    errors.push(FieldError {
                        field: join(path, key),
                        kind: ErrorKind::Required,
                    });
                }
            }
            let properties = schema["properties"].as_object();
            for (key, child) in map {
                if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child_schema = properties
                    .and_then(|p| p.get(key))
                    .or_else(|| Some(&schema["additionalProperties"]).filter(|s| s.is_object()));
                if let Some(child_schema) = child_schema {
                    validate_at(child_schema, child, &join(path, key), false, errors);
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (index, item) in items.iter().enumerate() {
                validate_at(
                    &schema["items"],
                    item,
                    &format!("{path}[{index}]"),
                    false,
                    errors,
                );
            }
        }
        _ => {}
    }
}

/// A value against its schema's `minimum`/`maximum` (and exclusive ones), `minLength`/`maxLength`,
/// `pattern`, `minItems`/`maxItems` and `format`, in kube-openapi's words as the API server
/// reports them (`spec.replicas in body should be less than or equal to 10`).
fn value_bounds(schema: &Value, value: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let invalid = |detail: String| FieldError {
        field: path.to_string(),
        kind: ErrorKind::Invalid {
            value: value.to_string(),
            detail,
        },
    };
    if let Some(number) = value.as_f64() {
        let exclusive = |key: &str| schema[key] == true;
        if let Some(maximum) = schema["maximum"].as_f64() {
            if exclusive("exclusiveMaximum") && number >= maximum {
                errors.push(invalid(format!(
                    "{path} in body should be less than {}",
                    schema["maximum"]
                )));
            } else if number > maximum {
                errors.push(invalid(format!(
                    "{path} in body should be less than or equal to {}",
                    schema["maximum"]
                )));
            }
        }
        if let Some(minimum) = schema["minimum"].as_f64() {
            if exclusive("exclusiveMinimum") && number <= minimum {
                errors.push(invalid(format!(
                    "{path} in body should be greater than {}",
                    schema["minimum"]
                )));
            } else if number < minimum {
                errors.push(invalid(format!(
                    "{path} in body should be greater than or equal to {}",
                    schema["minimum"]
                )));
            }
        }
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if let Some(max) = schema["maxLength"].as_u64()
            && length > max
        {
            errors.push(FieldError {
                field: path.to_string(),
                kind: ErrorKind::TooLong { max },
            });
        }
        if let Some(min) = schema["minLength"].as_u64()
            && length < min
        {
            errors.push(invalid(format!(
                "{path} in body should be at least {min} chars long"
            )));
        }
        if let Some(pattern) = schema["pattern"].as_str()
            && let Ok(regex) = regex::Regex::new(pattern)
            && !regex.is_match(text)
        {
            errors.push(invalid(format!("{path} in body should match '{pattern}'")));
        }
        if let Some(format) = schema["format"].as_str()
            && !format_fits(format, text)
        {
            errors.push(invalid(format!(
                "{path} in body must be of type {format}: {text:?}"
            )));
        }
    }
    if let Some(items) = value.as_array() {
        let count = items.len() as u64;
        if let Some(max) = schema["maxItems"].as_u64()
            && count > max
        {
            errors.push(FieldError {
                field: path.to_string(),
                kind: ErrorKind::TooMany { actual: count, max },
            });
        }
        if let Some(min) = schema["minItems"].as_u64()
            && count < min
        {
            errors.push(invalid(format!(
                "{path} in body should have at least {min} items"
            )));
        }
    }
    errors
}

/// The string formats the API server checks (others pass, as unknown formats do).
fn format_fits(format: &str, text: &str) -> bool {
    let pattern = match format {
        "date-time" => r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$",
        "date" => r"^\d{4}-\d{2}-\d{2}$",
        "uuid" => r"^(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
        "byte" => r"^[A-Za-z0-9+/]*={0,2}$",
        _ => return true,
    };
    regex::Regex::new(pattern).is_ok_and(|regex| regex.is_match(text))
}

/// The printer columns of a CRD's version: (name, type, JSONPath).
pub fn printer_columns(crd: &Value, version: &str) -> Vec<(String, String, String)> {
    let Some(found) = crd["spec"]["versions"]
        .as_array()
        .and_then(|list| list.iter().find(|v| v["name"] == version))
    else {
        return Vec::new();
    };
    found["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["type"].as_str().unwrap_or("string").to_string(),
                c["jsonPath"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The values a printer column's JSONPath finds: `.status.phase`, `.spec.items[0].name`,
/// `.status.addresses[*].value`, `.status.conditions[?(@.type=="Ready")].status`.
pub fn json_path(object: &Value, path: &str) -> Vec<Value> {
    let text = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut steps: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '[' => {
                if depth == 0 && !current.is_empty() {
                    steps.push(std::mem::take(&mut current));
                }
                depth += 1;
                current.push(c);
            }
            ']' => {
                depth = depth.saturating_sub(1);
                current.push(c);
                if depth == 0 {
                    steps.push(std::mem::take(&mut current));
                }
            }
            '.' if depth == 0 => {
                if !current.is_empty() {
                    steps.push(std::mem::take(&mut current));
                }
            }
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        steps.push(current);
    }
    let mut values = vec![object.clone()];
    for step in steps {
        let mut next = Vec::new();
        for value in &values {
            match step.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                Some("*") => match value {
                    Value::Array(items) => next.extend(items.iter().cloned()),
                    Value::Object(map) => next.extend(map.values().cloned()),
                    _ => {}
                },
                Some(filter) if filter.starts_with("?(") => {
                    let condition = filter.trim_start_matches("?(").trim_end_matches(')');
                    let Some((left, right)) = condition.split_once("==") else {
                        continue;
                    };
                    let key = left.trim().trim_start_matches("@.");
                    let wanted = right.trim().trim_matches('"').trim_matches('\'');
                    for item in value.as_array().into_iter().flatten() {
                        if item[key].as_str() == Some(wanted) {
                            next.push(item.clone());
                        }
                    }
                }
                Some(index) => {
                    if let Some(item) = index.parse::<usize>().ok().and_then(|i| value.get(i)) {
                        next.push(item.clone());
                    }
                }
                None => {
                    if let Some(child) = value.get(&step) {
                        next.push(child.clone());
                    }
                }
            }
        }
        values = next;
    }
    values
}

/// A printer column's cell: the one value the path finds, several joined with commas, or null.
pub fn cell(object: &Value, kind: &str, path: &str) -> Value {
    let found: Vec<Value> = json_path(object, path)
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    let text = |value: &Value| match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match found.as_slice() {
        [] => Value::Null,
        [Value::Object(map)] if map.is_empty() => Value::Null,
        [value] if kind == "string" => Value::String(text(value)),
        [value] => value.clone(),
        many => Value::String(many.iter().map(text).collect::<Vec<_>>().join(",")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_fixtures::documents;
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_pruned_except_where_preserved_and_defaults_fill_in() {
        let documents = documents("crd", "widgets.yaml");
        let schema = version_schema(&documents[0], "v1").unwrap();
        let mut widget = documents[1].clone();
        let unknown = prune(schema, &mut widget);
        assert_eq!(
            unknown,
            vec![
                "spec.colour".to_string(),
                "spec.parts[0].weight".to_string()
            ]
        );
        assert_eq!(widget["spec"]["extra"], json!({"anything": {"goes": 1}}));
        assert_eq!(widget["metadata"]["name"], "w");
        apply_defaults(schema, &mut widget);
        assert_eq!(widget["spec"]["size"], "small");
        assert_eq!(widget["spec"]["parts"][0]["count"], 1);
        assert!(
            validate(schema, &widget).is_empty(),
            "{:?}",
            validate(schema, &widget)
        );
    }

    #[test]
    fn types_required_fields_and_enums_are_validated_in_the_api_servers_words() {
        let documents = documents("crd", "widgets.yaml");
        let schema = version_schema(&documents[0], "v1").unwrap();
        let errors: Vec<String> = validate(schema, &documents[2])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            vec![
                "spec.parts[0].name: Required value".to_string(),
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".to_string(),
                "spec.size: Unsupported value: \"huge\": supported values: \"small\", \"large\"".to_string(),
            ]
        );
    }

    #[test]
    fn bounds_patterns_lengths_and_formats_are_checked_in_kube_openapis_words() {
        let documents = documents("crd", "bounds.yaml");
        let schema = version_schema(&documents[0], "v1").unwrap();
        let errors: Vec<String> = validate(schema, &documents[1])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            vec![
                "spec.at: Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"".to_string(),
                "spec.name: Too long: may not be more than 8 bytes".to_string(),
                "spec.name: Invalid value: \"Not-A-DNS-Name\": spec.name in body should match '^[a-z0-9-]+$'".to_string(),
                "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10".to_string(),
                "spec.shards: Invalid value: 0: spec.shards in body should be greater than 0".to_string(),
                "spec.tags: Too many: 3: must have at most 2 items".to_string(),
                "spec.tier: Invalid value: \"a\": spec.tier in body should be at least 2 chars long".to_string(),
            ]
        );
        assert!(validate(schema, &documents[2]).is_empty());
    }

    #[test]
    fn printer_columns_read_their_json_paths() {
        let documents = documents("crd", "widgets.yaml");
        assert_eq!(
            printer_columns(&documents[0], "v1"),
            vec![
                (
                    "Size".to_string(),
                    "string".to_string(),
                    ".spec.size".to_string()
                ),
                (
                    "Replicas".to_string(),
                    "integer".to_string(),
                    ".spec.replicas".to_string()
                ),
            ]
        );
        assert_eq!(cell(&documents[1], "integer", ".spec.replicas"), json!(2));
        assert_eq!(cell(&documents[1], "string", ".status.phase"), Value::Null);
        assert_eq!(
            cell(&documents[1], "string", ".spec.parts[0].name"),
            json!("bolt")
        );
    }
}
