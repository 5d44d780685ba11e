//! Decoders of `k8s.io/api/core/v1`: Secret, ConfigMap, Namespace, ServiceAccount.

use serde_json::{Map, Value};

use super::json::{
    child, default_str, push, put_bool_field, put_map_entry, put_str, put_string_field, time_value,
};
use super::meta::decode_object_meta;
use super::wire::{Field, Reader};

fn metadata_field(
    f: &Field<'_>,
    ctx: &'static str,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let (b, off) = f.bytes(ctx)?;
    decode_object_meta(b, off, child(out, "metadata"))
}

pub(super) fn decode_secret(
    buf: &[u8],
    base: usize,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "Secret");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => metadata_field(&f, "Secret.metadata", out)?,
            2 => put_map_entry(out, "data", &f, "Secret.data", true)?,
            3 => put_string_field(out, &f, "Secret", "type", true)?,
            4 => put_map_entry(out, "stringData", &f, "Secret.stringData", false)?,
            5 => put_bool_field(out, &f, "Secret", "immutable")?,
            _ => {}
        }
    }
    child(out, "metadata");
    Ok(())
}

pub(super) fn decode_config_map(
    buf: &[u8],
    base: usize,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "ConfigMap");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => metadata_field(&f, "ConfigMap.metadata", out)?,
            2 => put_map_entry(out, "data", &f, "ConfigMap.data", false)?,
            3 => put_map_entry(out, "binaryData", &f, "ConfigMap.binaryData", true)?,
            4 => put_bool_field(out, &f, "ConfigMap", "immutable")?,
            _ => {}
        }
    }
    child(out, "metadata");
    Ok(())
}

pub(super) fn decode_namespace(
    buf: &[u8],
    base: usize,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "Namespace");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => metadata_field(&f, "Namespace.metadata", out)?,
            2 => {
                let (b, off) = f.bytes("Namespace.spec")?;
                let spec = child(out, "spec");
                let mut s = Reader::new(b, off, "NamespaceSpec");
                while let Some(g) = s.next_field()? {
                    if g.num == 1 {
                        let v = g.string("NamespaceSpec.finalizers")?;
                        push(spec, "finalizers", Value::String(v));
                    }
                }
            }
            3 => {
                let (b, off) = f.bytes("Namespace.status")?;
                let status = child(out, "status");
                let mut s = Reader::new(b, off, "NamespaceStatus");
                while let Some(g) = s.next_field()? {
                    match g.num {
                        1 => put_string_field(status, &g, "NamespaceStatus", "phase", true)?,
                        2 => {
                            let (cb, coff) = g.bytes("NamespaceStatus.conditions")?;
                            push(status, "conditions", decode_namespace_condition(cb, coff)?);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // Struct fields are always serialized by Go's encoding/json.
    for key in ["metadata", "spec", "status"] {
        child(out, key);
    }
    Ok(())
}

fn decode_namespace_condition(buf: &[u8], base: usize) -> Result<Value, String> {
    let mut out = Map::new();
    let mut r = Reader::new(buf, base, "NamespaceCondition");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => put_string_field(&mut out, &f, "NamespaceCondition", "type", false)?,
            2 => put_string_field(&mut out, &f, "NamespaceCondition", "status", false)?,
            // Non-pointer Time with plain omitempty: zero serializes as null.
            4 => {
                let v = time_value(&f, "NamespaceCondition.lastTransitionTime")?;
                out.insert("lastTransitionTime".into(), v);
            }
            5 => put_string_field(&mut out, &f, "NamespaceCondition", "reason", true)?,
            6 => put_string_field(&mut out, &f, "NamespaceCondition", "message", true)?,
            _ => {}
        }
    }
    default_str(&mut out, "type");
    default_str(&mut out, "status");
    out.entry("lastTransitionTime").or_insert(Value::Null);
    Ok(Value::Object(out))
}

pub(super) fn decode_service_account(
    buf: &[u8],
    base: usize,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "ServiceAccount");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => metadata_field(&f, "ServiceAccount.metadata", out)?,
            2 => {
                let (b, off) = f.bytes("ServiceAccount.secrets")?;
                push(out, "secrets", decode_object_reference(b, off)?);
            }
            3 => {
                let (b, off) = f.bytes("ServiceAccount.imagePullSecrets")?;
                let mut item = Map::new();
                let mut s = Reader::new(b, off, "LocalObjectReference");
                while let Some(g) = s.next_field()? {
                    if g.num == 1 {
                        put_str(
                            &mut item,
                            "name",
                            g.string("LocalObjectReference.name")?,
                            true,
                        );
                    }
                }
                push(out, "imagePullSecrets", Value::Object(item));
            }
            4 => put_bool_field(out, &f, "ServiceAccount", "automountServiceAccountToken")?,
            _ => {}
        }
    }
    child(out, "metadata");
    Ok(())
}

fn decode_object_reference(buf: &[u8], base: usize) -> Result<Value, String> {
    const KEYS: [&str; 7] = [
        "kind",
        "namespace",
        "name",
        "uid",
        "apiVersion",
        "resourceVersion",
        "fieldPath",
    ];
    let mut out = Map::new();
    let mut r = Reader::new(buf, base, "ObjectReference");
    while let Some(f) = r.next_field()? {
        if let Some(key) = usize::try_from(f.num)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| KEYS.get(i))
        {
            put_str(&mut out, key, f.string("ObjectReference")?, true);
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::super::decode;
    use super::super::test_support::*;
    use base64::Engine as _;
    use serde_json::Value;
    use serde_json::json;

    #[test]
    fn namespace_create_real_capture() {
        // `kubectl create ns demo` (kubectl v1.35.2). The expectation is the
        // output of `kubectl create ns demo --dry-run=client -o json`.
        assert_eq!(
            decode(NAMESPACE_CREATE).unwrap(),
            json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"demo"},"spec":{},"status":{}})
        );
    }

    #[test]
    fn secret_create_real_capture() {
        // `kubectl create secret generic s -n demo --from-literal=password=s3cret --type=Opaque`
        assert_eq!(
            decode(SECRET_CREATE).unwrap(),
            json!({"apiVersion":"v1","kind":"Secret","type":"Opaque",
                   "metadata":{"name":"s","namespace":"demo"},
                   "data":{"password":"czNjcmV0"}})
        );
    }

    #[test]
    fn secret_create_binary_real_capture() {
        // `kubectl create secret generic s2 -n demo --from-literal=a=b --from-file=bin.dat`
        // with bin.dat = 00 ff fe 01 (no --type: `type` is sent empty and omitted).
        assert_eq!(
            decode(SECRET_CREATE_BINARY).unwrap(),
            json!({"apiVersion":"v1","kind":"Secret",
                   "metadata":{"name":"s2","namespace":"demo"},
                   "data":{"a":"Yg==","bin.dat":"AP/+AQ=="}})
        );
    }

    #[test]
    fn configmap_create_real_capture() {
        // `kubectl create configmap c -n demo --from-literal=k=v`
        assert_eq!(
            decode(CONFIGMAP_CREATE).unwrap(),
            json!({"apiVersion":"v1","kind":"ConfigMap",
                   "metadata":{"name":"c","namespace":"demo"},"data":{"k":"v"}})
        );
    }

    #[test]
    fn configmap_create_binary_real_capture() {
        // `kubectl create configmap cm2 -n demo --from-literal=k=v --from-file=bin.dat --from-file=text.txt`
        // (matches `--dry-run=client -o json` of the same command).
        assert_eq!(
            decode(CONFIGMAP_CREATE_BINARY).unwrap(),
            json!({"apiVersion":"v1","kind":"ConfigMap",
                   "metadata":{"name":"cm2","namespace":"demo"},
                   "data":{"k":"v","text.txt":"hello\n"},
                   "binaryData":{"bin.dat":"AP/+AQ=="}})
        );
    }

    #[test]
    fn serviceaccount_create_real_capture() {
        // `kubectl create sa robot -n demo`
        assert_eq!(
            decode(SERVICEACCOUNT_CREATE).unwrap(),
            json!({"apiVersion":"v1","kind":"ServiceAccount",
                   "metadata":{"name":"robot","namespace":"demo"}})
        );
    }

    fn release_payload(v: &Value) -> String {
        // Helm stores base64(gzip(json)) as the bytes of data.release; the
        // JSON form base64-encodes those bytes once more.
        let outer = v["data"]["release"].as_str().unwrap();
        let inner = base64::engine::general_purpose::STANDARD
            .decode(outer)
            .unwrap();
        String::from_utf8(inner).unwrap()
    }

    #[test]
    fn helm_release_create_real_capture() {
        // `helm install rel ./chart -n demo` (helm v4.1.4, chart without
        // templates): POST of the pending-install release Secret.
        let v = decode(HELM_RELEASE_CREATE).unwrap();
        let obj = v.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["apiVersion", "data", "kind", "metadata", "type"]);
        assert_eq!(v["type"], "helm.sh/release.v1");
        assert_eq!(
            v["metadata"],
            json!({"name":"sh.helm.release.v1.rel.v1",
                   "labels":{"createdAt":"1796030011","name":"rel","owner":"helm",
                             "status":"pending-install","version":"1"}})
        );
        let payload = release_payload(&v);
        assert!(
            payload.starts_with("H4sI"),
            "gzip magic in base64: {payload}"
        );
        assert_eq!(payload.len(), 372);
    }

    #[test]
    fn helm_release_update_real_capture() {
        // Same `helm install`: the PUT marking the release deployed.
        let v = decode(HELM_RELEASE_UPDATE).unwrap();
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["type"], "helm.sh/release.v1");
        assert_eq!(v["metadata"]["labels"]["status"], "deployed");
        assert_eq!(v["metadata"]["labels"]["modifiedAt"], "1796030011");
        assert!(v["metadata"].get("namespace").is_none());
        assert!(release_payload(&v).starts_with("H4sI"));
    }

    #[test]
    fn namespace_spec_and_status() {
        let cond = Encoder::new()
            .str(1, "NamespaceDeletionContentFailure")
            .str(2, "False")
            .msg(4, time(0, 0))
            .str(5, "")
            .str(6, "ok");
        let raw = Encoder::new()
            .msg(1, Encoder::new().str(1, "demo").entry(11, "team", b"a"))
            .msg(2, Encoder::new().str(1, "kubernetes").junk(10))
            .msg(
                3,
                Encoder::new()
                    .str(1, "Terminating")
                    .msg(2, cond)
                    .msg(2, Encoder::new()),
            );
        assert_eq!(
            decode(&body("v1", "Namespace", raw)).unwrap(),
            json!({"apiVersion":"v1","kind":"Namespace",
            "metadata":{"name":"demo","labels":{"team":"a"}},
            "spec":{"finalizers":["kubernetes"]},
            "status":{"phase":"Terminating","conditions":[
                {"type":"NamespaceDeletionContentFailure","status":"False",
                 "lastTransitionTime":"1970-01-01T00:00:00Z","message":"ok"},
                {"type":"","status":"","lastTransitionTime":null}
            ]}})
        );
    }

    #[test]
    fn service_account_fields() {
        let raw = Encoder::new()
            .msg(1, Encoder::new().str(1, "robot"))
            .msg(2, Encoder::new().str(1, "Secret").str(3, "tok").str(2, ""))
            .msg(3, Encoder::new().str(1, "pull"))
            .varint(4, 0);
        assert_eq!(
            decode(&body("v1", "ServiceAccount", raw)).unwrap(),
            json!({"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"robot"},
                   "secrets":[{"kind":"Secret","name":"tok"}],
                   "imagePullSecrets":[{"name":"pull"}],
                   "automountServiceAccountToken":false})
        );
    }
}
