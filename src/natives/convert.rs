//! Conversions between Rhai values and JSON values, shared by every adapter.

use rhai::{Array, Dynamic, Map};
use serde_json::Value;

use crate::error::NativeError;
use bprun_clients::secret::{REDACTED, Secret};

/// What to do with a `Secret` found inside a value being turned into JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// For display: `***`.
    Redact,
    /// For a request body sent to a server: the value itself.
    Reveal,
}

pub fn to_json(value: &Dynamic, secrets: Secrets) -> Result<Value, NativeError> {
    if value.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(flag) = value.as_bool() {
        return Ok(Value::Bool(flag));
    }
    if let Ok(int) = value.as_int() {
        return Ok(Value::from(int));
    }
    if let Ok(float) = value.as_float() {
        return serde_json::Number::from_f64(float)
            .map(Value::Number)
            .ok_or_else(|| NativeError::new(format!("{float} cannot be written as JSON")));
    }
    if value.is_string() || value.is_char() {
        return Ok(Value::String(value.to_string()));
    }
    if let Some(secret) = value.read_lock::<Secret>() {
        return Ok(Value::String(match secrets {
            Secrets::Redact => REDACTED.to_string(),
            Secrets::Reveal => secret.reveal().to_string(),
        }));
    }
    if let Some(array) = value.read_lock::<Array>() {
        return array
            .iter()
            .map(|item| to_json(item, secrets))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if let Some(map) = value.read_lock::<Map>() {
        let mut object = serde_json::Map::new();
        for (key, item) in map.iter() {
            object.insert(key.to_string(), to_json(item, secrets)?);
        }
        return Ok(Value::Object(object));
    }
    if let Some(timestamp) = value.read_lock::<rhai::Instant>() {
        let _ = timestamp;
        return Err(NativeError::new(
            "a timestamp cannot be written as JSON; use now() for a time string",
        ));
    }
    Err(NativeError::new(format!(
        "a value of type {} cannot be written as JSON",
        value.type_name()
    )))
}

pub fn from_json(value: Value) -> Dynamic {
    match value {
        Value::Null => Dynamic::UNIT,
        Value::Bool(flag) => flag.into(),
        Value::Number(number) => match number.as_i64() {
            Some(int) => int.into(),
            None => number.as_f64().unwrap_or(f64::NAN).into(),
        },
        Value::String(text) => text.into(),
        Value::Array(items) => items.into_iter().map(from_json).collect::<Array>().into(),
        Value::Object(object) => object
            .into_iter()
            .map(|(key, item)| (key.into(), from_json(item)))
            .collect::<Map>()
            .into(),
    }
}
