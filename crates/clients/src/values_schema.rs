//! Checks helm values against a JSON Schema before anything is installed (the seed's "schema
//! validator over the values files: fails on missing required override keys").
//!
//! A deliberate subset of JSON Schema (draft 2020-12): `type` (one or several), `required`,
//! `properties`, `additionalProperties` (a boolean), `items`, `enum`, `const`, `minLength`,
//! `minimum`, and the annotations `$schema`, `$id`, `$comment`, `title`, `description`,
//! `default`, `examples`. A schema using any other keyword is refused, so a check never passes
//! because a keyword was silently ignored.

use serde_json::Value;

const SUPPORTED: &[&str] = &[
    "type",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minLength",
    "minimum",
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
];

/// The first keyword of `schema` (at any depth) this checker does not implement, with its path.
pub fn unsupported_keyword(schema: &Value) -> Option<String> {
    fn walk(schema: &Value, path: &str) -> Option<String> {
        let map = schema.as_object()?;
        for (key, value) in map {
            if !SUPPORTED.contains(&key.as_str()) {
                return Some(format!("{path}/{key}"));
            }
            match key.as_str() {
                "properties" => {
                    for (name, child) in value.as_object().into_iter().flatten() {
                        if let Some(found) = walk(child, &format!("{path}/properties/{name}")) {
                            return Some(found);
                        }
                    }
                }
                "items" => {
                    if let Some(found) = walk(value, &format!("{path}/items")) {
                        return Some(found);
                    }
                }
                _ => {}
            }
        }
        None
    }
    walk(schema, "")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(wanted: &str, value: &Value) -> bool {
    let actual = type_name(value);
    actual == wanted || (wanted == "number" && actual == "integer")
}

/// Every way `values` breaks `schema`, as `path: problem` in the values' dotted key paths
/// (`global.psql.password.secret: required, missing`). Empty when the values conform.
pub fn violations(values: &Value, schema: &Value) -> Vec<String> {
    fn check(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
        let shown = if path.is_empty() { "(top level)" } else { path };
        let child = |name: &str| {
            if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            }
        };
        if let Some(wanted) = schema.get("type") {
            let types: Vec<&str> = match wanted {
                Value::String(one) => vec![one.as_str()],
                Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !types.is_empty() && !types.iter().any(|t| type_matches(t, value)) {
                out.push(format!(
                    "{shown}: must be {}, not {}",
                    types.join(" or "),
                    type_name(value)
                ));
                return;
            }
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
            out.push(format!("{shown}: must be one of {}", listed.join(", ")));
        }
        if let Some(expected) = schema.get("const")
            && expected != value
        {
            out.push(format!("{shown}: must be {expected}"));
        }
        if let (Some(minimum), Some(text)) = (
            schema.get("minLength").and_then(Value::as_u64),
            value.as_str(),
        ) && (text.chars().count() as u64) < minimum
        {
            out.push(format!(
                "{shown}: must be at least {minimum} characters long"
            ));
        }
        if let (Some(minimum), Some(number)) = (
            schema.get("minimum").and_then(Value::as_f64),
            value.as_f64(),
        ) && number < minimum
        {
            out.push(format!("{shown}: must be at least {minimum}"));
        }
        if let Value::Object(map) = value {
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(name) {
                    out.push(format!("{}: required, missing", child(name)));
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            for (name, item) in map {
                match properties.and_then(|p| p.get(name)) {
                    Some(sub) => check(item, sub, &child(name), out),
                    None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        out.push(format!("{}: not allowed here", child(name)))
                    }
                    None => {}
                }
            }
        }
        if let (Value::Array(items), Some(item_schema)) = (value, schema.get("items")) {
            for (index, item) in items.iter().enumerate() {
                check(item, item_schema, &format!("{shown}[{index}]"), out);
            }
        }
    }
    let mut out = Vec::new();
    check(values, schema, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "required": ["global"],
            "properties": {
                "global": {
                    "type": "object",
                    "required": ["psql"],
                    "properties": {
                        "psql": {
                            "type": "object",
                            "required": ["host", "password"],
                            "properties": {
                                "host": {"type": "string", "minLength": 1},
                                "port": {"type": "integer", "minimum": 1},
                                "password": {
                                    "type": "object",
                                    "required": ["secret", "key"],
                                    "additionalProperties": false,
                                    "properties": {"secret": {"type": "string"}, "key": {"type": "string"}}
                                }
                            }
                        },
                        "edition": {"enum": ["ce", "ee"]}
                    }
                }
            }
        })
    }

    #[test]
    fn conforming_values_pass() {
        let values = json!({"global": {"psql": {"host": "db", "port": 5432,
                                                "password": {"secret": "s", "key": "k"}},
                                       "edition": "ee"},
                            "other": {"anything": true}});
        assert_eq!(violations(&values, &schema()), Vec::<String>::new());
        assert_eq!(unsupported_keyword(&schema()), None);
    }

    #[test]
    fn every_violation_is_named_by_its_key_path() {
        let values = json!({"global": {"psql": {"host": "", "port": 0,
                                                "password": {"secret": 3, "extra": "x"}},
                                       "edition": "free"}});
        assert_eq!(
            violations(&values, &schema()),
            [
                "global.edition: must be one of \"ce\", \"ee\"",
                "global.psql.host: must be at least 1 characters long",
                "global.psql.password.key: required, missing",
                "global.psql.password.extra: not allowed here",
                "global.psql.password.secret: must be string, not integer",
                "global.psql.port: must be at least 1",
            ]
        );
        assert_eq!(
            violations(&json!({}), &schema()),
            ["global: required, missing"]
        );
    }

    #[test]
    fn a_keyword_the_checker_does_not_implement_is_refused() {
        let schema =
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}});
        assert_eq!(
            unsupported_keyword(&schema).as_deref(),
            Some("/properties/a/pattern")
        );
    }
}
