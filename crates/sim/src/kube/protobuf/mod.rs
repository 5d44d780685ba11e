//! Decoder for Kubernetes protobuf request bodies.
//!
//! Real clients (kubectl 1.35, helm v4 / client-go) send typed objects with
//! `Content-Type: application/vnd.kubernetes.protobuf`. The simulator speaks
//! JSON, so this module turns such a body into the JSON object the JSON API
//! would have received from the same client.
//!
//! Wire format: the 4-byte magic `k8s\0`, then a `runtime.Unknown` message
//! (`typeMeta{apiVersion=1,kind=2}=1`, `raw=2`, `contentEncoding=3`,
//! `contentType=4`) whose `raw` holds the typed message (proto2, gogo
//! generated).
//!
//! One file per concern: `wire` (the field reader), `json` (Go's JSON conventions and times),
//! `schema` (every built-in kind, decoded by the wire layout in `schema.txt`), `meta` (ObjectMeta,
//! whose JSON form is written by hand); `runtime.Unknown` and the envelope's checks are here.

use serde_json::{Map, Value};

use self::wire::{Reader, hex};

#[cfg(test)]
mod captures;
mod json;
mod meta;
mod schema;
#[cfg(test)]
mod test_support;
mod wire;

/// Media type of Kubernetes protobuf bodies.
pub const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8; 4] = b"k8s\0";

/// True when the content type is the protobuf one (ignoring parameters).
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(PROTOBUF_CONTENT_TYPE))
}

/// Decodes a Kubernetes protobuf body (4-byte magic `k8s\0`, then a
/// `runtime.Unknown` message: typeMeta{apiVersion=1,kind=2}=1, raw=2,
/// contentEncoding=3, contentType=4) into the JSON object the JSON API would
/// have received (with "apiVersion" and "kind" set from typeMeta).
///
/// Supported kinds: every built-in kind of the group versions in `schema.txt` (the ones the
/// simulator serves, and the subresource kinds `TokenRequest`, `Scale`, `Eviction`), and
/// `DeleteOptions` in any group version. Anything else is an `Err` naming the kind.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    if body.len() < MAGIC.len() || &body[..MAGIC.len()] != MAGIC {
        let got: Vec<u8> = body.iter().take(4).copied().collect();
        return Err(format!(
            "protobuf: bad magic at offset 0: expected 6b387300 (\"k8s\\0\"), got {}",
            hex(&got)
        ));
    }
    let unknown = decode_unknown(&body[MAGIC.len()..], MAGIC.len())?;
    if !unknown.content_encoding.is_empty() {
        return Err(format!(
            "protobuf: unsupported runtime.Unknown contentEncoding {:?}",
            unknown.content_encoding
        ));
    }
    if !unknown.content_type.is_empty() && !is_protobuf(&unknown.content_type) {
        return Err(format!(
            "protobuf: unsupported runtime.Unknown contentType {:?}",
            unknown.content_type
        ));
    }
    if unknown.kind.is_empty() {
        return Err("protobuf: runtime.Unknown has no typeMeta.kind".to_string());
    }
    let Some((raw, raw_off)) = unknown.raw else {
        return Err(format!(
            "protobuf: runtime.Unknown for kind {:?} has no raw object",
            unknown.kind
        ));
    };
    let mut obj = Map::new();
    if !schema::decode_kind(&unknown.api_version, &unknown.kind, raw, raw_off, &mut obj)? {
        return Err(format!(
            "protobuf: unsupported kind {:?} (apiVersion {:?})",
            unknown.kind, unknown.api_version
        ));
    }
    if !unknown.api_version.is_empty() {
        obj.insert("apiVersion".into(), Value::String(unknown.api_version));
    }
    obj.insert("kind".into(), Value::String(unknown.kind));
    Ok(Value::Object(obj))
}

// ---------------------------------------------------------------------------
// runtime.Unknown
// ---------------------------------------------------------------------------

struct Unknown<'a> {
    api_version: String,
    kind: String,
    /// The object's bytes and absolute offset; `None` when missing.
    raw: Option<(&'a [u8], usize)>,
    content_encoding: String,
    content_type: String,
}

fn decode_unknown(buf: &[u8], base: usize) -> Result<Unknown<'_>, String> {
    const CTX: &str = "runtime.Unknown";
    let mut u = Unknown {
        api_version: String::new(),
        kind: String::new(),
        raw: None,
        content_encoding: String::new(),
        content_type: String::new(),
    };
    let mut r = Reader::new(buf, base, CTX);
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => {
                const TYPE_META: &str = "runtime.TypeMeta";
                let (b, off) = f.bytes("runtime.Unknown.typeMeta")?;
                let mut t = Reader::new(b, off, TYPE_META);
                while let Some(g) = t.next_field()? {
                    match g.num {
                        1 => u.api_version = g.string("runtime.TypeMeta.apiVersion")?,
                        2 => u.kind = g.string("runtime.TypeMeta.kind")?,
                        _ => {}
                    }
                }
            }
            2 => u.raw = Some(f.bytes("runtime.Unknown.raw")?),
            3 => u.content_encoding = f.string("runtime.Unknown.contentEncoding")?,
            4 => u.content_type = f.string("runtime.Unknown.contentType")?,
            _ => {}
        }
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_magic() {
        assert!(err_of(b"").contains("bad magic"));
        assert!(err_of(b"k8s").contains("bad magic"));
        assert!(err_of(b"{\"kind\":\"Secret\"}").contains("bad magic"));
        let mut b = SECRET_CREATE.to_vec();
        b[3] = 1;
        assert!(err_of(&b).contains("offset 0"));
    }

    #[test]
    fn unsupported_kind_is_named() {
        assert_eq!(
            err_of(&body("example.com/v1", "Widget", Encoder::new())),
            r#"protobuf: unsupported kind "Widget" (apiVersion "example.com/v1")"#
        );
        // Core kinds only in the core group version.
        assert!(err_of(&body("example.com/v1", "Secret", Encoder::new())).contains("Secret"));
        assert!(err_of(&body("v1", "", Encoder::new())).contains("kind"));
    }

    #[test]
    fn unknown_wrapper_checks() {
        let mut gz = b"k8s\0".to_vec();
        gz.extend(
            Encoder::new()
                .msg(1, Encoder::new().str(1, "v1").str(2, "Secret"))
                .bytes(2, b"")
                .str(3, "gzip")
                .0,
        );
        assert!(err_of(&gz).contains("gzip"));
        let mut json_ct = b"k8s\0".to_vec();
        json_ct.extend(
            Encoder::new()
                .msg(1, Encoder::new().str(1, "v1").str(2, "Secret"))
                .str(4, "application/json")
                .0,
        );
        assert!(err_of(&json_ct).contains("contentType"));
        // A wrapper without `raw` (e.g. cut right after typeMeta) is refused.
        let no_raw = &NAMESPACE_CREATE[..4 + 2 + 15];
        assert!(
            err_of(no_raw).contains("no raw object"),
            "{}",
            err_of(no_raw)
        );
        // Unknown fields in runtime.Unknown and TypeMeta are skipped.
        let mut extra = b"k8s\0".to_vec();
        extra.extend(
            Encoder::new()
                .junk(10)
                .msg(1, Encoder::new().junk(5).str(1, "v1").str(2, "ConfigMap"))
                .msg(2, Encoder::new().msg(1, Encoder::new().str(1, "c")))
                .str(4, "application/vnd.kubernetes.protobuf")
                .0,
        );
        assert_eq!(
            decode(&extra).unwrap(),
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}})
        );
    }

    #[test]
    fn content_type_detection() {
        assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
        assert!(is_protobuf(
            "application/vnd.kubernetes.protobuf; charset=binary"
        ));
        assert!(is_protobuf(
            " Application/VND.Kubernetes.Protobuf;stream=watch"
        ));
        assert!(!is_protobuf("application/json"));
        assert!(!is_protobuf("application/vnd.kubernetes.protobuf+json"));
        assert!(!is_protobuf(""));
    }
}
