//! The decoder of `k8s.io/apimachinery/pkg/apis/meta/v1` ObjectMeta: written by hand because its
//! JSON form follows each field's Go tags exactly (`omitempty`, `omitzero`, pointers).

use serde_json::{Map, Value};

use super::json::{
    decode_time, default_str, push, put_bool_field, put_int_omitempty, put_map_entry,
    put_string_field, rfc3339, time_value,
};
use super::wire::Reader;

pub(super) fn decode_object_meta(
    buf: &[u8],
    base: usize,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    const CTX: &str = "ObjectMeta";
    let mut r = Reader::new(buf, base, CTX);
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => put_string_field(out, &f, "ObjectMeta", "name", true)?,
            2 => put_string_field(out, &f, "ObjectMeta", "generateName", true)?,
            3 => put_string_field(out, &f, "ObjectMeta", "namespace", true)?,
            4 => put_string_field(out, &f, "ObjectMeta", "selfLink", true)?,
            5 => put_string_field(out, &f, "ObjectMeta", "uid", true)?,
            6 => put_string_field(out, &f, "ObjectMeta", "resourceVersion", true)?,
            7 => put_int_omitempty(out, "generation", f.int64("ObjectMeta.generation")?),
            // `json:"creationTimestamp,omitempty,omitzero"`: zero is omitted.
            8 => match decode_time(&f, "ObjectMeta.creationTimestamp")? {
                None => {
                    out.remove("creationTimestamp");
                }
                Some(s) => {
                    let v = rfc3339(s, "ObjectMeta.creationTimestamp")?;
                    out.insert("creationTimestamp".into(), Value::String(v));
                }
            },
            // *Time: kept when present.
            9 => {
                let v = time_value(&f, "ObjectMeta.deletionTimestamp")?;
                out.insert("deletionTimestamp".into(), v);
            }
            10 => {
                let v = f.int64("ObjectMeta.deletionGracePeriodSeconds")?;
                out.insert("deletionGracePeriodSeconds".into(), Value::from(v));
            }
            11 => put_map_entry(out, "labels", &f, "ObjectMeta.labels", false)?,
            12 => put_map_entry(out, "annotations", &f, "ObjectMeta.annotations", false)?,
            13 => {
                let (b, off) = f.bytes("ObjectMeta.ownerReferences")?;
                push(out, "ownerReferences", decode_owner_reference(b, off)?);
            }
            14 => push(
                out,
                "finalizers",
                Value::String(f.string("ObjectMeta.finalizers")?),
            ),
            17 => {
                let (b, off) = f.bytes("ObjectMeta.managedFields")?;
                push(out, "managedFields", decode_managed_fields_entry(b, off)?);
            }
            _ => {}
        }
    }
    Ok(())
}

fn decode_owner_reference(buf: &[u8], base: usize) -> Result<Value, String> {
    let mut out = Map::new();
    let mut r = Reader::new(buf, base, "OwnerReference");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => put_string_field(&mut out, &f, "OwnerReference", "kind", false)?,
            3 => put_string_field(&mut out, &f, "OwnerReference", "name", false)?,
            4 => put_string_field(&mut out, &f, "OwnerReference", "uid", false)?,
            5 => put_string_field(&mut out, &f, "OwnerReference", "apiVersion", false)?,
            6 => put_bool_field(&mut out, &f, "OwnerReference", "controller")?,
            7 => put_bool_field(&mut out, &f, "OwnerReference", "blockOwnerDeletion")?,
            _ => {}
        }
    }
    // Not `omitempty` upstream: always serialized.
    for key in ["apiVersion", "kind", "name", "uid"] {
        default_str(&mut out, key);
    }
    Ok(Value::Object(out))
}

fn decode_managed_fields_entry(buf: &[u8], base: usize) -> Result<Value, String> {
    const CTX: &str = "ManagedFieldsEntry";
    let mut out = Map::new();
    let mut r = Reader::new(buf, base, CTX);
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => put_string_field(&mut out, &f, "ManagedFieldsEntry", "manager", true)?,
            2 => put_string_field(&mut out, &f, "ManagedFieldsEntry", "operation", true)?,
            3 => put_string_field(&mut out, &f, "ManagedFieldsEntry", "apiVersion", true)?,
            4 => {
                let v = time_value(&f, "ManagedFieldsEntry.time")?;
                out.insert("time".into(), v);
            }
            6 => put_string_field(&mut out, &f, "ManagedFieldsEntry", "fieldsType", true)?,
            7 => {
                let (b, off) = f.bytes("ManagedFieldsEntry.fieldsV1")?;
                out.insert("fieldsV1".into(), decode_fields_v1(b, off)?);
            }
            8 => put_string_field(&mut out, &f, "ManagedFieldsEntry", "subresource", true)?,
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

/// `FieldsV1{Raw=1}`: the raw bytes are the JSON value itself.
fn decode_fields_v1(buf: &[u8], base: usize) -> Result<Value, String> {
    let mut raw: Option<(&[u8], usize)> = None;
    let mut r = Reader::new(buf, base, "FieldsV1");
    while let Some(f) = r.next_field()? {
        if f.num == 1 {
            raw = Some(f.bytes("FieldsV1.Raw")?);
        }
    }
    match raw {
        None | Some(([], _)) => Ok(Value::Null),
        Some((b, off)) => serde_json::from_slice(b)
            .map_err(|e| format!("protobuf: FieldsV1.Raw at offset {off} is not valid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode;
    use super::super::json::GO_ZERO_TIME_SECS;
    use super::super::test_support::*;
    use serde_json::json;

    #[test]
    fn delete_options_real_capture() {
        // `helm uninstall rel -n demo`: DELETE of the release Secret with an
        // empty protobuf DeleteOptions body.
        assert_eq!(
            decode(DELETE_OPTIONS_HELM).unwrap(),
            json!({"apiVersion":"v1","kind":"DeleteOptions"})
        );
    }

    #[test]
    fn delete_options_all_fields() {
        // Built with the test encoder: kubectl sends DeleteOptions as JSON
        // and helm only sends empty ones. Pointer fields keep zero values.
        let raw = Encoder::new()
            .varint(1, 0)
            .msg(2, Encoder::new().str(1, "uid-1").str(2, ""))
            .varint(3, 0)
            .str(4, "Foreground")
            .str(5, "All")
            .str(5, "Other")
            .varint(6, 1)
            .junk(40);
        assert_eq!(
            decode(&body("meta.k8s.io/v1", "DeleteOptions", raw)).unwrap(),
            json!({"apiVersion":"meta.k8s.io/v1","kind":"DeleteOptions",
                   "gracePeriodSeconds":0,
                   "preconditions":{"uid":"uid-1","resourceVersion":""},
                   "orphanDependents":false,
                   "propagationPolicy":"Foreground",
                   "dryRun":["All","Other"],
                   "ignoreStoreReadErrorWithClusterBreakingPotential":true})
        );
        // Negative int64 (10-byte varint).
        let v = decode(&body(
            "apps/v1",
            "DeleteOptions",
            Encoder::new().varint(1, -1i64 as u64),
        ))
        .unwrap();
        assert_eq!(
            v,
            json!({"apiVersion":"apps/v1","kind":"DeleteOptions","gracePeriodSeconds":-1})
        );
    }

    #[test]
    fn object_meta_all_fields() {
        // Built with the test encoder (clients do not send most of these on
        // create). Unknown fields of every wire type are sprinkled in.
        let owner = Encoder::new()
            .str(5, "apps/v1")
            .str(1, "Deployment")
            .str(3, "web")
            .str(4, "u-1")
            .varint(6, 1)
            .junk(20);
        let owner_minimal = Encoder::new().str(3, "bare").varint(7, 0);
        let managed = Encoder::new()
            .str(1, "kubectl")
            .str(2, "Update")
            .str(3, "v1")
            .msg(4, time(1_700_000_000, 5))
            .str(6, "FieldsV1")
            .msg(
                7,
                Encoder::new().bytes(1, br#"{"f:data":{".":{},"f:k":{}}}"#),
            )
            .str(8, "")
            .junk(30);
        let meta = Encoder::new()
            .str(1, "n")
            .str(2, "gen-")
            .str(3, "ns")
            .str(4, "/self")
            .str(5, "uid-9")
            .str(6, "42")
            .varint(7, 3)
            .msg(8, time(1_700_000_000, 123))
            .msg(9, time(951_782_400, 0))
            .varint(10, 30)
            .entry(11, "app", b"web")
            .entry(11, "tier", b"")
            .entry(12, "note", b"hi")
            .msg(13, owner)
            .msg(13, owner_minimal)
            .str(14, "a/b")
            .str(14, "c")
            .msg(17, managed)
            .msg(
                17,
                Encoder::new().msg(4, Encoder::new()).msg(7, Encoder::new()),
            )
            .junk(100);
        let raw = Encoder::new()
            .msg(1, meta)
            .varint(5, 1)
            .entry(2, "bin", &[0, 255])
            .entry(4, "plain", b"text")
            .str(3, "kubernetes.io/basic-auth")
            .junk(50);
        assert_eq!(
            decode(&body("v1", "Secret", raw)).unwrap(),
            json!({
                "apiVersion":"v1","kind":"Secret",
                "immutable":true,
                "data":{"bin":"AP8="},
                "stringData":{"plain":"text"},
                "type":"kubernetes.io/basic-auth",
                "metadata":{
                    "name":"n","generateName":"gen-","namespace":"ns","selfLink":"/self",
                    "uid":"uid-9","resourceVersion":"42","generation":3,
                    "creationTimestamp":"2023-11-14T22:13:20Z",
                    "deletionTimestamp":"2000-02-29T00:00:00Z",
                    "deletionGracePeriodSeconds":30,
                    "labels":{"app":"web","tier":""},
                    "annotations":{"note":"hi"},
                    "ownerReferences":[
                        {"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"u-1","controller":true},
                        {"apiVersion":"","kind":"","name":"bare","uid":"","blockOwnerDeletion":false}
                    ],
                    "finalizers":["a/b","c"],
                    "managedFields":[
                        {"manager":"kubectl","operation":"Update","apiVersion":"v1",
                         "time":"2023-11-14T22:13:20Z","fieldsType":"FieldsV1",
                         "fieldsV1":{"f:data":{".":{},"f:k":{}}}},
                        {"time":null,"fieldsV1":null}
                    ]
                }
            })
        );
    }

    #[test]
    fn empty_gogo_values_are_omitted() {
        // gogo writes every non-pointer field; omitempty ones vanish in JSON,
        // a zero creationTimestamp (omitzero) too, whether empty or explicit.
        for ts in [Encoder::new(), time(GO_ZERO_TIME_SECS, 0)] {
            let meta = Encoder::new()
                .str(1, "x")
                .str(2, "")
                .str(3, "")
                .varint(7, 0)
                .msg(8, ts);
            let raw = Encoder::new().msg(1, meta).str(3, "");
            assert_eq!(
                decode(&body("v1", "Secret", raw)).unwrap(),
                json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}})
            );
        }
        // No metadata at all still serializes `metadata: {}`.
        assert_eq!(
            decode(&body("v1", "Secret", Encoder::new())).unwrap(),
            json!({"apiVersion":"v1","kind":"Secret","metadata":{}})
        );
        // Later occurrences win, and an empty later value removes the key.
        let meta = Encoder::new()
            .str(1, "a")
            .str(1, "b")
            .str(3, "ns")
            .str(3, "");
        assert_eq!(
            decode(&body("v1", "Secret", Encoder::new().msg(1, meta))).unwrap()["metadata"],
            json!({"name":"b"})
        );
    }
}
