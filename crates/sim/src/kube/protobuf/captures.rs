//! The decoder on real request bodies of the core kinds (captured from kubectl and helm) and on
//! hand-encoded ones for the fields the real clients could not be made to send.

use super::decode;
use super::test_support::*;
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
