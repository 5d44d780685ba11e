//! RFC 6902 JSON patch. The `json-patch` crate parses and applies the operations; this file
//! keeps kube-apiserver's `test` semantics where the crate differs and says which operation
//! failed, on which path and why.

use json_patch::{PatchErrorKind, PatchOperation};
use serde_json::Value;

use super::{MergeError, invalid, json_eq};

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test; JSON pointer escaping ~0 ~1, "-" append). Errors name the failing operation index and path.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, MergeError> {
    let operations = patch
        .as_array()
        .ok_or_else(|| invalid("json patch must be a JSON array of operations"))?;
    let mut doc = target.clone();
    for (index, operation) in operations.iter().enumerate() {
        apply_operation(&mut doc, index, operation)?;
    }
    Ok(doc)
}

fn apply_operation(doc: &mut Value, index: usize, raw: &Value) -> Result<(), MergeError> {
    if !raw.is_object() {
        return Err(invalid(format!(
            "json patch operation {index}: not a JSON object"
        )));
    }
    let name = raw.get("op").and_then(Value::as_str).unwrap_or("");
    let path = raw.get("path").and_then(Value::as_str).unwrap_or("");
    let err = |msg: String| {
        invalid(format!(
            "json patch operation {index} ({name}) on path {path:?}: {msg}"
        ))
    };
    let operation: PatchOperation =
        serde_json::from_value(raw.clone()).map_err(|error| err(error.to_string()))?;
    // The crate's `test` compares serde_json values, where 3 != 3.0; kube-apiserver compares
    // decoded JSON (numbers are float64), so numbers compare by value here.
    if let PatchOperation::Test(test) = &operation {
        return match doc.pointer(test.path.as_str()) {
            Some(actual) if json_eq(actual, &test.value) => Ok(()),
            Some(actual) => Err(err(format!(
                "test failed: value is {actual}, expected {}",
                test.value
            ))),
            None => Err(err("test failed: path does not exist".into())),
        };
    }
    json_patch::patch(doc, std::slice::from_ref(&operation)).map_err(|error| {
        err(match (&error.kind, &operation) {
            (PatchErrorKind::InvalidPointer, _) => missing_step(doc, path),
            (PatchErrorKind::InvalidFromPointer, PatchOperation::Move(op)) => {
                format!("from: {}", missing_step(doc, op.from.as_str()))
            }
            (PatchErrorKind::InvalidFromPointer, PatchOperation::Copy(op)) => {
                format!("from: {}", missing_step(doc, op.from.as_str()))
            }
            (kind, _) => kind.to_string(),
        })
    })
}

/// Why `pointer` does not lead to a value of `doc`: the first step that is missing.
fn missing_step(doc: &Value, pointer: &str) -> String {
    let mut at = doc;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let next = match at {
            Value::Object(fields) => fields.get(&token),
            Value::Array(items) => match token.parse::<usize>() {
                Ok(index) if index < items.len() => items.get(index),
                _ => {
                    return format!(
                        "array index {token:?} out of bounds (length {})",
                        items.len()
                    );
                }
            },
            _ => None,
        };
        match next {
            Some(value) => at = value,
            None => return "path does not exist".into(),
        }
    }
    "path is invalid".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // ---- JSON patch ----

    #[test]
    fn json_patch_add_with_escapes_index_and_append() {
        let doc = json!({"a": [1, 3], "m": {}});
        let patch = json!([
            {"op": "add", "path": "/a/1", "value": 2},
            {"op": "add", "path": "/a/-", "value": 4},
            {"op": "add", "path": "/m/x~1y", "value": "slash"},
            {"op": "add", "path": "/m/t~0", "value": "tilde"},
            {"op": "add", "path": "/new", "value": {"k": true}}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap(),
            json!({"a": [1, 2, 3, 4], "m": {"x/y": "slash", "t~": "tilde"}, "new": {"k": true}})
        );
    }

    #[test]
    fn json_patch_remove_and_replace() {
        let doc = json!({"a": [1, 2, 3], "b": "x"});
        let patch = json!([
            {"op": "remove", "path": "/a/0"},
            {"op": "replace", "path": "/b", "value": "y"},
            {"op": "replace", "path": "/a/1", "value": 9}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap(),
            json!({"a": [2, 9], "b": "y"})
        );
        let err = json_patch(&doc, &json!([{"op": "replace", "path": "/zz", "value": 1}]));
        assert!(
            matches!(err, Err(MergeError::Invalid(m)) if m.contains("operation 0") && m.contains("/zz"))
        );
        let err = json_patch(&doc, &json!([{"op": "remove", "path": "/a/7"}]));
        assert!(matches!(err, Err(MergeError::Invalid(m)) if m.contains("out of bounds")));
    }

    #[test]
    fn json_patch_move_and_copy() {
        let doc = json!({"a": {"b": 1}, "l": [1, 2]});
        let patch = json!([
            {"op": "move", "from": "/a/b", "path": "/c"},
            {"op": "copy", "from": "/l", "path": "/l2"},
            {"op": "move", "from": "/l/0", "path": "/l/-"}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap(),
            json!({"a": {}, "c": 1, "l": [2, 1], "l2": [1, 2]})
        );
        let err = json_patch(
            &doc,
            &json!([{"op": "move", "from": "/a", "path": "/a/b/c"}]),
        );
        assert!(matches!(err, Err(MergeError::Invalid(_))));
    }

    #[test]
    fn json_patch_test_op_passes_and_fails_with_index_and_path() {
        let doc = json!({"spec": {"replicas": 3}});
        let ok = json!([
            {"op": "test", "path": "/spec/replicas", "value": 3.0},
            {"op": "replace", "path": "/spec/replicas", "value": 4}
        ]);
        assert_eq!(
            json_patch(&doc, &ok).unwrap(),
            json!({"spec": {"replicas": 4}})
        );
        let bad = json!([
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "test", "path": "/spec/replicas", "value": 3}
        ]);
        let Err(MergeError::Invalid(msg)) = json_patch(&doc, &bad) else {
            panic!("test op should fail");
        };
        assert!(msg.contains("operation 1 (test)"), "{msg}");
        assert!(msg.contains("/spec/replicas"), "{msg}");
    }

    #[test]
    fn json_patch_rejects_malformed_operations() {
        let doc = json!({});
        for bad in [
            json!({"op": "add"}),
            json!([{"op": "add", "path": "/a"}]),
            json!([{"op": "frob", "path": "/a"}]),
            json!([{"op": "add", "path": "a", "value": 1}]),
            json!([{"op": "add", "path": "/x/y", "value": 1}]),
            json!([{"op": "add", "path": "/~2", "value": 1}]),
        ] {
            assert!(
                matches!(json_patch(&doc, &bad), Err(MergeError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
