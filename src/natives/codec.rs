//! Encodings: base64, JSON, YAML and SHA-256.

use crate::natives::options::RhaiResultOf;
use base64::Engine as _;
use rhai::Array;
use rhai::plugin::*;
use serde::Deserialize;

use super::convert::{Secrets, from_json, to_json};
use crate::engine::native_error;
use crate::error::NativeError;
use bprun_clients::secret::Secret;

fn bytes_of(value: &Dynamic, native: &str) -> RhaiResultOf<(Vec<u8>, bool)> {
    if let Some(secret) = value.read_lock::<Secret>() {
        return Ok((secret.reveal().as_bytes().to_vec(), true));
    }
    if value.is_string() {
        return Ok((value.to_string().into_bytes(), false));
    }
    if let Some(blob) = value.read_lock::<rhai::Blob>() {
        return Ok((blob.clone(), false));
    }
    Err(native_error(NativeError::new(format!(
        "{native} takes a string, a Secret or a blob, not {}",
        value.type_name()
    ))))
}

fn yaml_error(error: serde_norway::Error) -> NativeError {
    let located = match error.location() {
        Some(location) => format!(
            "invalid YAML at line {}, column {}: {error}",
            location.line(),
            location.column()
        ),
        None => format!("invalid YAML: {error}"),
    };
    NativeError::new(located).with_hint("check indentation and quoting at that position")
}

#[export_module]
pub mod codec_functions {
    use super::*;

    /// Base64 (standard alphabet, padded) of a string or `Secret`; a `Secret` in gives a `Secret` out.
    ///
    /// ```rhai
    /// assert_eq(base64_encode("hello"), "aGVsbG8=");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn base64_encode(value: Dynamic) -> RhaiResultOf<Dynamic> {
        let (bytes, is_secret) = bytes_of(&value, "base64_encode")?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
        Ok(if is_secret {
            Dynamic::from(Secret::new(encoded))
        } else {
            encoded.into()
        })
    }

    /// Decodes base64 into text (UTF-8); a `Secret` in gives a `Secret` out.
    ///
    /// ```rhai
    /// assert_eq(base64_decode("aGVsbG8="), "hello");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn base64_decode(value: Dynamic) -> RhaiResultOf<Dynamic> {
        let (bytes, is_secret) = bytes_of(&value, "base64_decode")?;
        let trimmed: Vec<u8> = bytes
            .into_iter()
            .filter(|byte| !byte.is_ascii_whitespace())
            .collect();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&trimmed)
            .map_err(|error| {
                native_error(NativeError::new(format!(
                    "base64_decode: not valid base64: {error}"
                )))
            })?;
        let text = String::from_utf8(decoded).map_err(|_| {
            native_error(NativeError::new(
                "base64_decode: the decoded bytes are not UTF-8 text",
            ))
        })?;
        Ok(if is_secret {
            Dynamic::from(Secret::new(text))
        } else {
            text.into()
        })
    }

    /// Parses JSON text into maps, arrays, strings, numbers, booleans and `()` for null.
    ///
    /// ```rhai
    /// let value = json_parse(`{"id": 7, "tags": ["a"]}`);
    /// assert_eq(value.id, 7);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn json_parse(text: &str) -> RhaiResultOf<Dynamic> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|error| {
            native_error(NativeError::new(format!(
                "invalid JSON at line {}, column {}: {error}",
                error.line(),
                error.column()
            )))
        })?;
        Ok(from_json(value))
    }

    /// Compact JSON text of a value. A `Secret` inside is written as `***`.
    ///
    /// ```rhai
    /// assert_eq(json_string(#{a: 1}), `{"a":1}`);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn json_string(value: Dynamic) -> RhaiResultOf<String> {
        let json = to_json(&value, Secrets::Redact).map_err(native_error)?;
        Ok(json.to_string())
    }

    /// Indented JSON text of a value. A `Secret` inside is written as `***`.
    ///
    /// ```rhai
    /// print(json_pretty(#{a: [1, 2]}));
    /// ```
    #[rhai_fn(return_raw)]
    pub fn json_pretty(value: Dynamic) -> RhaiResultOf<String> {
        let json = to_json(&value, Secrets::Redact).map_err(native_error)?;
        serde_json::to_string_pretty(&json)
            .map_err(|error| native_error(NativeError::new(error.to_string())))
    }

    /// Parses one YAML document. Errors give the line and column.
    ///
    /// ```rhai
    /// let apps = yaml_parse("- name: shared-code\n- name: guestbook\n");
    /// assert_eq(apps[1].name, "guestbook");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn yaml_parse(text: &str) -> RhaiResultOf<Dynamic> {
        let value: serde_json::Value =
            serde_norway::from_str(text).map_err(|error| native_error(yaml_error(error)))?;
        Ok(from_json(value))
    }

    /// Parses a multi-document YAML stream (documents separated by `---`) into an array.
    ///
    /// ```rhai
    /// let docs = yaml_parse_all("a: 1\n---\nb: 2\n");
    /// assert_eq(docs.len(), 2);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn yaml_parse_all(text: &str) -> RhaiResultOf<Array> {
        let mut documents = rhai::Array::new();
        for document in serde_norway::Deserializer::from_str(text) {
            let value = serde_json::Value::deserialize(document)
                .map_err(|error| native_error(yaml_error(error)))?;
            if !value.is_null() {
                documents.push(from_json(value));
            }
        }
        Ok(documents)
    }

    /// YAML text of a value. A `Secret` inside is written as `***`.
    ///
    /// ```rhai
    /// assert_eq(yaml_string(#{a: 1}), "a: 1\n");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn yaml_string(value: Dynamic) -> RhaiResultOf<String> {
        let json = to_json(&value, Secrets::Redact).map_err(native_error)?;
        serde_norway::to_string(&json)
            .map_err(|error| native_error(NativeError::new(error.to_string())))
    }

    /// Lower-case hex SHA-256 of a string, `Secret` or blob.
    ///
    /// ```rhai
    /// assert_eq(sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn sha256(value: Dynamic) -> RhaiResultOf<String> {
        let (bytes, _) = bytes_of(&value, "sha256")?;
        Ok(bprun_clients::digest::sha256_hex(bytes))
    }
}
