//! Test helpers: the captured request bodies and a tiny protobuf encoder.

use super::decode;

/// A captured body in `crates/sim/fixtures/protobuf/`.
macro_rules! captured {
    ($name:literal) => {
        include_bytes!(concat!("../../../fixtures/protobuf/", $name, ".bin"))
    };
}

// Real request bodies captured from the real clients against a throw-away
// loopback capture server (see each test for the command).
pub(super) const NAMESPACE_CREATE: &[u8] = captured!("namespace-create");
pub(super) const SECRET_CREATE: &[u8] = captured!("secret-create");
pub(super) const SECRET_CREATE_BINARY: &[u8] = captured!("secret-create-binary");
pub(super) const CONFIGMAP_CREATE: &[u8] = captured!("configmap-create");
pub(super) const CONFIGMAP_CREATE_BINARY: &[u8] = captured!("configmap-create-binary");
pub(super) const SERVICEACCOUNT_CREATE: &[u8] = captured!("serviceaccount-create");
pub(super) const HELM_RELEASE_CREATE: &[u8] = captured!("helm-release-secret-create");
pub(super) const HELM_RELEASE_UPDATE: &[u8] = captured!("helm-release-secret-update");
pub(super) const DELETE_OPTIONS_HELM: &[u8] = captured!("delete-options-helm-uninstall");

pub(super) const ALL_FIXTURES: [&[u8]; 9] = [
    NAMESPACE_CREATE,
    SECRET_CREATE,
    SECRET_CREATE_BINARY,
    CONFIGMAP_CREATE,
    CONFIGMAP_CREATE_BINARY,
    SERVICEACCOUNT_CREATE,
    HELM_RELEASE_CREATE,
    HELM_RELEASE_UPDATE,
    DELETE_OPTIONS_HELM,
];

/// Tiny protobuf encoder, for kinds and fields the real clients could
/// not be made to send against the capture server.
#[derive(Default)]
pub(super) struct Encoder(pub(super) Vec<u8>);

impl Encoder {
    pub(super) fn new() -> Self {
        Encoder::default()
    }
    pub(super) fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    pub(super) fn tag(&mut self, num: u64, wire: u8) {
        self.raw_varint((num << 3) | u64::from(wire));
    }
    pub(super) fn varint(mut self, num: u64, v: u64) -> Self {
        self.tag(num, 0);
        self.raw_varint(v);
        self
    }
    pub(super) fn bytes(mut self, num: u64, b: &[u8]) -> Self {
        self.tag(num, 2);
        self.raw_varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    pub(super) fn str(self, num: u64, s: &str) -> Self {
        self.bytes(num, s.as_bytes())
    }
    pub(super) fn msg(self, num: u64, m: Encoder) -> Self {
        self.bytes(num, &m.0)
    }
    pub(super) fn entry(self, num: u64, k: &str, v: &[u8]) -> Self {
        self.msg(num, Encoder::new().str(1, k).bytes(2, v))
    }
    pub(super) fn fixed32(mut self, num: u64, v: u32) -> Self {
        self.tag(num, 5);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn fixed64(mut self, num: u64, v: u64) -> Self {
        self.tag(num, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn group(mut self, num: u64, inner: Encoder) -> Self {
        self.tag(num, 3);
        self.0.extend_from_slice(&inner.0);
        self.tag(num, 4);
        self
    }
    /// Unknown fields of every wire type, including nested groups.
    pub(super) fn junk(self, base: u64) -> Self {
        self.varint(base, u64::MAX)
            .fixed64(base + 1, 7)
            .bytes(base + 2, b"\xff\x00junk")
            .fixed32(base + 3, 9)
            .group(
                base + 4,
                Encoder::new()
                    .varint(1, 1)
                    .group(2, Encoder::new().str(1, "x").fixed32(2, 3))
                    .fixed64(3, 4),
            )
    }
}

pub(super) fn time(secs: i64, nanos: u64) -> Encoder {
    Encoder::new().varint(1, secs as u64).varint(2, nanos)
}

/// Magic + runtime.Unknown as client-go writes it (empty contentEncoding
/// and contentType included).
pub(super) fn body(api_version: &str, kind: &str, raw: Encoder) -> Vec<u8> {
    let unknown = Encoder::new()
        .msg(1, Encoder::new().str(1, api_version).str(2, kind))
        .msg(2, raw)
        .str(3, "")
        .str(4, "");
    let mut out = b"k8s\0".to_vec();
    out.extend_from_slice(&unknown.0);
    out
}

pub(super) fn err_of(b: &[u8]) -> String {
    match decode(b) {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e,
    }
}

pub(super) fn with_raw(raw: &[u8]) -> Vec<u8> {
    let mut e = Encoder::new().msg(1, Encoder::new().str(1, "v1").str(2, "Secret"));
    e = e.bytes(2, raw);
    let mut out = b"k8s\0".to_vec();
    out.extend(e.0);
    out
}
