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
//! `decoder` (the `runtime.Unknown` envelope and every built-in kind, decoded by the wire layout
//! in `schema.txt`), `meta` (ObjectMeta, whose JSON form is written by hand).

pub use self::decoder::{PROTOBUF_CONTENT_TYPE, decode, is_protobuf};

#[cfg(test)]
mod captures;
mod decoder;
mod json;
mod meta;
#[cfg(test)]
mod test_support;
mod wire;

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
