//! A key of a Secret or ConfigMap as the kubelet reads it: a Secret's `data` is base64, its
//! `stringData` (not folded into `data` until the API server stores it) plain text; a ConfigMap's
//! `data` is plain text. One reading for env vars, volumes, the Envoy proxy, the PostgreSQL
//! stand-in and image pulls.

use base64::Engine as _;
use serde_json::Value;

/// The bytes of `key` of a Secret; `None` when it has no such key or its base64 is broken.
pub fn secret_bytes(secret: &Value, key: &str) -> Option<Vec<u8>> {
    match secret["data"][key].as_str() {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok(),
        None => secret["stringData"][key]
            .as_str()
            .map(|plain| plain.as_bytes().to_vec()),
    }
}

/// The text of `key` of a Secret (`secret`) or a ConfigMap, invalid UTF-8 replaced as the
/// kubelet's consumers see it.
pub fn key_text(object: &Value, key: &str, secret: bool) -> Option<String> {
    if secret {
        return secret_bytes(object, key).map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    }
    object["data"][key].as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_decode_data_and_fall_back_to_string_data_configmaps_are_plain() {
        let secret =
            json!({"data": {"a": "aGk=", "bad": "%%"}, "stringData": {"b": "plain", "a": "no"}});
        assert_eq!(secret_bytes(&secret, "a"), Some(b"hi".to_vec()));
        assert_eq!(secret_bytes(&secret, "b"), Some(b"plain".to_vec()));
        assert_eq!(secret_bytes(&secret, "bad"), None);
        assert_eq!(secret_bytes(&secret, "c"), None);
        let config_map = json!({"data": {"a": "aGk="}});
        assert_eq!(key_text(&config_map, "a", false), Some("aGk=".into()));
        assert_eq!(key_text(&secret, "a", true), Some("hi".into()));
    }
}
