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
//! generated). Field numbers come from the upstream `generated.proto` files of
//! `k8s.io/api/core/v1`, `k8s.io/apimachinery/pkg/apis/meta/v1` and
//! `k8s.io/apimachinery/pkg/runtime`.
//!
//! JSON conventions follow Go's `encoding/json` on the upstream structs:
//! gogo always encodes non-pointer strings/ints (even when empty), so empty
//! values of `omitempty` fields are dropped; pointer fields (`*bool`, `*int64`,
//! `*string`, `*Time`) are kept whenever they are present on the wire; struct
//! fields (`metadata`, `spec`, `status`) are always emitted.

use base64::Engine as _;
use serde_json::{Map, Value};

/// Media type of Kubernetes protobuf bodies.
pub const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8; 4] = b"k8s\0";
/// Go's zero `time.Time` as Unix seconds (0001-01-01T00:00:00Z).
const GO_ZERO_TIME_SECS: i64 = -62_135_596_800;

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
/// Supported kinds: Secret, ConfigMap, Namespace, ServiceAccount (core `v1`)
/// and DeleteOptions (any group version). Anything else is an `Err` naming
/// the kind.
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
    let core = unknown.api_version == "v1";
    let mut obj = Map::new();
    match unknown.kind.as_str() {
        "Secret" if core => decode_secret(raw, raw_off, &mut obj)?,
        "ConfigMap" if core => decode_config_map(raw, raw_off, &mut obj)?,
        "Namespace" if core => decode_namespace(raw, raw_off, &mut obj)?,
        "ServiceAccount" if core => decode_service_account(raw, raw_off, &mut obj)?,
        // DeleteOptions is registered in every group version.
        "DeleteOptions" => decode_delete_options(raw, raw_off, &mut obj)?,
        kind => {
            return Err(format!(
                "protobuf: unsupported kind {kind:?} (apiVersion {:?})",
                unknown.api_version
            ));
        }
    }
    if !unknown.api_version.is_empty() {
        obj.insert("apiVersion".into(), Value::String(unknown.api_version));
    }
    obj.insert("kind".into(), Value::String(unknown.kind));
    Ok(Value::Object(obj))
}

// ---------------------------------------------------------------------------
// Wire level
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Wire<'a> {
    Varint(u64),
    Fixed64,
    /// Payload and its absolute offset in the body.
    Len(&'a [u8], usize),
    /// A whole (already skipped) group.
    Group,
    Fixed32,
}

impl Wire<'_> {
    fn name(&self) -> &'static str {
        match self {
            Wire::Varint(_) => "0 (varint)",
            Wire::Fixed64 => "1 (64-bit)",
            Wire::Len(..) => "2 (length-delimited)",
            Wire::Group => "3 (group)",
            Wire::Fixed32 => "5 (32-bit)",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Field<'a> {
    num: u64,
    wire: Wire<'a>,
    /// Absolute offset of the field's tag in the body.
    offset: usize,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Absolute offset of `buf[0]` in the body, for error messages.
    base: usize,
    msg: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], base: usize, msg: &'static str) -> Self {
        Reader {
            buf,
            pos: 0,
            base,
            msg,
        }
    }

    fn at(&self) -> usize {
        self.base + self.pos
    }

    fn varint(&mut self) -> Result<u64, String> {
        let start = self.at();
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(format!(
                    "protobuf: {}: truncated varint at offset {start}",
                    self.msg
                ));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(format!(
                    "protobuf: {}: varint overflows 64 bits at offset {start}",
                    self.msg
                ));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "protobuf: {}: varint longer than 10 bytes at offset {start}",
            self.msg
        ))
    }

    fn skip(&mut self, n: usize, what: &str) -> Result<usize, String> {
        let start = self.pos;
        if self.buf.len() - self.pos < n {
            return Err(format!(
                "protobuf: {}: truncated {what} at offset {}: need {n} bytes, {} left",
                self.msg,
                self.at(),
                self.buf.len() - self.pos
            ));
        }
        self.pos += n;
        Ok(start)
    }

    fn tag(&mut self) -> Result<(u64, u8, usize), String> {
        let offset = self.at();
        let key = self.varint()?;
        let num = key >> 3;
        let wire = (key & 7) as u8;
        if num == 0 || num > 0x1fff_ffff {
            return Err(format!(
                "protobuf: {}: invalid field number {num} at offset {offset}",
                self.msg
            ));
        }
        Ok((num, wire, offset))
    }

    /// Reads the next field; `None` at the end of the message.
    fn next_field(&mut self) -> Result<Option<Field<'a>>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let (num, wire, offset) = self.tag()?;
        let wire = match wire {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.skip(8, "64-bit field")?;
                Wire::Fixed64
            }
            2 => {
                let len_at = self.at();
                let len = self.varint()?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= self.buf.len() - self.pos)
                    .ok_or_else(|| {
                        format!(
                            "protobuf: {}: field {num} length {len} at offset {len_at} exceeds the {} remaining bytes",
                            self.msg,
                            self.buf.len() - self.pos
                        )
                    })?;
                let start = self.skip(len, "length-delimited field")?;
                Wire::Len(&self.buf[start..start + len], self.base + start)
            }
            3 => {
                self.skip_group(num, offset)?;
                Wire::Group
            }
            4 => {
                return Err(format!(
                    "protobuf: {}: unexpected end-group for field {num} at offset {offset}",
                    self.msg
                ));
            }
            5 => {
                self.skip(4, "32-bit field")?;
                Wire::Fixed32
            }
            w => {
                return Err(format!(
                    "protobuf: {}: invalid wire type {w} for field {num} at offset {offset}",
                    self.msg
                ));
            }
        };
        Ok(Some(Field { num, wire, offset }))
    }

    /// Skips the body of a group started by field `num` (iteratively, so
    /// nesting depth cannot exhaust the stack).
    fn skip_group(&mut self, num: u64, offset: usize) -> Result<(), String> {
        let mut open = vec![num];
        while let Some(&current) = open.last() {
            if self.pos >= self.buf.len() {
                return Err(format!(
                    "protobuf: {}: unterminated group (field {num}) starting at offset {offset}",
                    self.msg
                ));
            }
            let (n, wire, at) = self.tag()?;
            match wire {
                0 => {
                    self.varint()?;
                }
                1 => {
                    self.skip(8, "64-bit field")?;
                }
                2 => {
                    let len = self.varint()?;
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    self.skip(len, "length-delimited field")?;
                }
                3 => open.push(n),
                4 if n == current => {
                    open.pop();
                }
                4 => {
                    return Err(format!(
                        "protobuf: {}: end-group for field {n} at offset {at} does not match open group {current}",
                        self.msg
                    ));
                }
                5 => {
                    self.skip(4, "32-bit field")?;
                }
                w => {
                    return Err(format!(
                        "protobuf: {}: invalid wire type {w} for field {n} at offset {at}",
                        self.msg
                    ));
                }
            }
        }
        Ok(())
    }
}

fn wrong_wire(f: &Field<'_>, ctx: &str, want: &str) -> String {
    format!(
        "protobuf: {ctx} (field {}) at offset {}: expected wire type {want}, got {}",
        f.num,
        f.offset,
        f.wire.name()
    )
}

impl<'a> Field<'a> {
    fn bytes(&self, ctx: &str) -> Result<(&'a [u8], usize), String> {
        match self.wire {
            Wire::Len(b, off) => Ok((b, off)),
            _ => Err(wrong_wire(self, ctx, "2 (length-delimited)")),
        }
    }

    fn string(&self, ctx: &str) -> Result<String, String> {
        let (b, off) = self.bytes(ctx)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| format!("protobuf: {ctx} at offset {off}: string is not valid UTF-8"))
    }

    fn varint(&self, ctx: &str) -> Result<u64, String> {
        match self.wire {
            Wire::Varint(v) => Ok(v),
            _ => Err(wrong_wire(self, ctx, "0 (varint)")),
        }
    }

    fn int64(&self, ctx: &str) -> Result<i64, String> {
        // proto int64: two's complement in a varint.
        self.varint(ctx).map(|v| v as i64)
    }

    fn boolean(&self, ctx: &str) -> Result<bool, String> {
        self.varint(ctx).map(|v| v != 0)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------
// JSON helpers
// ---------------------------------------------------------------------------

/// Sets a string; an empty value of an `omitempty` field removes the key
/// (last occurrence wins, as in proto).
fn put_str(out: &mut Map<String, Value>, key: &str, v: String, omitempty: bool) {
    if omitempty && v.is_empty() {
        out.remove(key);
    } else {
        out.insert(key.into(), Value::String(v));
    }
}

fn put_int_omitempty(out: &mut Map<String, Value>, key: &str, v: i64) {
    if v == 0 {
        out.remove(key);
    } else {
        out.insert(key.into(), Value::from(v));
    }
}

fn child<'m>(out: &'m mut Map<String, Value>, key: &str) -> &'m mut Map<String, Value> {
    let slot = out
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().expect("just made an object")
}

fn push(out: &mut Map<String, Value>, key: &str, v: Value) {
    let slot = out
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(a) = slot {
        a.push(v);
    } else {
        *slot = Value::Array(vec![v]);
    }
}

fn default_str(out: &mut Map<String, Value>, key: &str) {
    out.entry(key.to_string())
        .or_insert_with(|| Value::String(String::new()));
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Decodes a map entry message (`key=1`, `value=2`). With `bytes_value` the
/// value is base64 encoded (Go's `[]byte` JSON form), else a UTF-8 string.
fn map_entry(
    f: &Field<'_>,
    ctx: &'static str,
    bytes_value: bool,
) -> Result<(String, Value), String> {
    let (buf, off) = f.bytes(ctx)?;
    let mut r = Reader::new(buf, off, ctx);
    let mut key = String::new();
    // A missing value is the empty string (or empty bytes, base64 "").
    let mut value = Value::String(String::new());
    while let Some(e) = r.next_field()? {
        match e.num {
            1 => key = e.string(ctx)?,
            2 if bytes_value => value = Value::String(b64(e.bytes(ctx)?.0)),
            2 => value = Value::String(e.string(ctx)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn put_map_entry(
    out: &mut Map<String, Value>,
    key: &str,
    f: &Field<'_>,
    ctx: &'static str,
    bytes_value: bool,
) -> Result<(), String> {
    let (k, v) = map_entry(f, ctx, bytes_value)?;
    child(out, key).insert(k, v);
    Ok(())
}

// ---------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------

/// Decodes `meta.v1.Time{seconds=1, nanos=2}`. Returns `None` for Go's zero
/// time (an empty message, as upstream `Time.Unmarshal` treats it, or the
/// zero instant). Nanoseconds are dropped like upstream does.
fn decode_time(f: &Field<'_>, ctx: &'static str) -> Result<Option<i64>, String> {
    let (buf, off) = f.bytes(ctx)?;
    if buf.is_empty() {
        return Ok(None);
    }
    let mut r = Reader::new(buf, off, ctx);
    let mut secs = 0i64;
    while let Some(e) = r.next_field()? {
        match e.num {
            1 => secs = e.int64(ctx)?,
            2 => {
                e.varint(ctx)?;
            }
            _ => {}
        }
    }
    Ok(if secs == GO_ZERO_TIME_SECS {
        None
    } else {
        Some(secs)
    })
}

/// Formats Unix seconds as RFC 3339 UTC (`YYYY-MM-DDTHH:MM:SSZ`), like
/// `metav1.Time`'s JSON form.
fn rfc3339(secs: i64, ctx: &str) -> Result<String, String> {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (proleptic Gregorian), era-based.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(0..=9999).contains(&year) {
        return Err(format!(
            "protobuf: {ctx}: timestamp {secs} is outside years 0000-9999"
        ));
    }
    Ok(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    ))
}

fn time_value(f: &Field<'_>, ctx: &'static str) -> Result<Value, String> {
    match decode_time(f, ctx)? {
        None => Ok(Value::Null),
        Some(s) => Ok(Value::String(rfc3339(s, ctx)?)),
    }
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
                const TM: &str = "runtime.TypeMeta";
                let (b, off) = f.bytes("runtime.Unknown.typeMeta")?;
                let mut t = Reader::new(b, off, TM);
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

// ---------------------------------------------------------------------------
// meta/v1
// ---------------------------------------------------------------------------

fn decode_object_meta(buf: &[u8], base: usize, out: &mut Map<String, Value>) -> Result<(), String> {
    const CTX: &str = "ObjectMeta";
    let mut r = Reader::new(buf, base, CTX);
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => put_str(out, "name", f.string("ObjectMeta.name")?, true),
            2 => put_str(
                out,
                "generateName",
                f.string("ObjectMeta.generateName")?,
                true,
            ),
            3 => put_str(out, "namespace", f.string("ObjectMeta.namespace")?, true),
            4 => put_str(out, "selfLink", f.string("ObjectMeta.selfLink")?, true),
            5 => put_str(out, "uid", f.string("ObjectMeta.uid")?, true),
            6 => put_str(
                out,
                "resourceVersion",
                f.string("ObjectMeta.resourceVersion")?,
                true,
            ),
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
            1 => put_str(&mut out, "kind", f.string("OwnerReference.kind")?, false),
            3 => put_str(&mut out, "name", f.string("OwnerReference.name")?, false),
            4 => put_str(&mut out, "uid", f.string("OwnerReference.uid")?, false),
            5 => put_str(
                &mut out,
                "apiVersion",
                f.string("OwnerReference.apiVersion")?,
                false,
            ),
            6 => {
                let v = f.boolean("OwnerReference.controller")?;
                out.insert("controller".into(), Value::Bool(v));
            }
            7 => {
                let v = f.boolean("OwnerReference.blockOwnerDeletion")?;
                out.insert("blockOwnerDeletion".into(), Value::Bool(v));
            }
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
            1 => put_str(
                &mut out,
                "manager",
                f.string("ManagedFieldsEntry.manager")?,
                true,
            ),
            2 => put_str(
                &mut out,
                "operation",
                f.string("ManagedFieldsEntry.operation")?,
                true,
            ),
            3 => put_str(
                &mut out,
                "apiVersion",
                f.string("ManagedFieldsEntry.apiVersion")?,
                true,
            ),
            4 => {
                let v = time_value(&f, "ManagedFieldsEntry.time")?;
                out.insert("time".into(), v);
            }
            6 => put_str(
                &mut out,
                "fieldsType",
                f.string("ManagedFieldsEntry.fieldsType")?,
                true,
            ),
            7 => {
                let (b, off) = f.bytes("ManagedFieldsEntry.fieldsV1")?;
                out.insert("fieldsV1".into(), decode_fields_v1(b, off)?);
            }
            8 => put_str(
                &mut out,
                "subresource",
                f.string("ManagedFieldsEntry.subresource")?,
                true,
            ),
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

fn decode_delete_options(
    buf: &[u8],
    base: usize,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "DeleteOptions");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => {
                let v = f.int64("DeleteOptions.gracePeriodSeconds")?;
                out.insert("gracePeriodSeconds".into(), Value::from(v));
            }
            2 => {
                let (b, off) = f.bytes("DeleteOptions.preconditions")?;
                let pre = child(out, "preconditions");
                let mut p = Reader::new(b, off, "Preconditions");
                while let Some(g) = p.next_field()? {
                    // Both are pointers upstream: kept when present.
                    match g.num {
                        1 => put_str(pre, "uid", g.string("Preconditions.uid")?, false),
                        2 => put_str(
                            pre,
                            "resourceVersion",
                            g.string("Preconditions.resourceVersion")?,
                            false,
                        ),
                        _ => {}
                    }
                }
            }
            3 => {
                let v = f.boolean("DeleteOptions.orphanDependents")?;
                out.insert("orphanDependents".into(), Value::Bool(v));
            }
            4 => put_str(
                out,
                "propagationPolicy",
                f.string("DeleteOptions.propagationPolicy")?,
                false,
            ),
            5 => push(
                out,
                "dryRun",
                Value::String(f.string("DeleteOptions.dryRun")?),
            ),
            6 => {
                let v =
                    f.boolean("DeleteOptions.ignoreStoreReadErrorWithClusterBreakingPotential")?;
                out.insert(
                    "ignoreStoreReadErrorWithClusterBreakingPotential".into(),
                    Value::Bool(v),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// core/v1
// ---------------------------------------------------------------------------

fn metadata_field(
    f: &Field<'_>,
    ctx: &'static str,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let (b, off) = f.bytes(ctx)?;
    decode_object_meta(b, off, child(out, "metadata"))
}

fn decode_secret(buf: &[u8], base: usize, out: &mut Map<String, Value>) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "Secret");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => metadata_field(&f, "Secret.metadata", out)?,
            2 => put_map_entry(out, "data", &f, "Secret.data", true)?,
            3 => put_str(out, "type", f.string("Secret.type")?, true),
            4 => put_map_entry(out, "stringData", &f, "Secret.stringData", false)?,
            5 => {
                let v = f.boolean("Secret.immutable")?;
                out.insert("immutable".into(), Value::Bool(v));
            }
            _ => {}
        }
    }
    child(out, "metadata");
    Ok(())
}

fn decode_config_map(buf: &[u8], base: usize, out: &mut Map<String, Value>) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "ConfigMap");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => metadata_field(&f, "ConfigMap.metadata", out)?,
            2 => put_map_entry(out, "data", &f, "ConfigMap.data", false)?,
            3 => put_map_entry(out, "binaryData", &f, "ConfigMap.binaryData", true)?,
            4 => {
                let v = f.boolean("ConfigMap.immutable")?;
                out.insert("immutable".into(), Value::Bool(v));
            }
            _ => {}
        }
    }
    child(out, "metadata");
    Ok(())
}

fn decode_namespace(buf: &[u8], base: usize, out: &mut Map<String, Value>) -> Result<(), String> {
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
                        1 => put_str(status, "phase", g.string("NamespaceStatus.phase")?, true),
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
            1 => put_str(
                &mut out,
                "type",
                f.string("NamespaceCondition.type")?,
                false,
            ),
            2 => put_str(
                &mut out,
                "status",
                f.string("NamespaceCondition.status")?,
                false,
            ),
            // Non-pointer Time with plain omitempty: zero serializes as null.
            4 => {
                let v = time_value(&f, "NamespaceCondition.lastTransitionTime")?;
                out.insert("lastTransitionTime".into(), v);
            }
            5 => put_str(
                &mut out,
                "reason",
                f.string("NamespaceCondition.reason")?,
                true,
            ),
            6 => put_str(
                &mut out,
                "message",
                f.string("NamespaceCondition.message")?,
                true,
            ),
            _ => {}
        }
    }
    default_str(&mut out, "type");
    default_str(&mut out, "status");
    out.entry("lastTransitionTime").or_insert(Value::Null);
    Ok(Value::Object(out))
}

fn decode_service_account(
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
            4 => {
                let v = f.boolean("ServiceAccount.automountServiceAccountToken")?;
                out.insert("automountServiceAccountToken".into(), Value::Bool(v));
            }
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
    use super::*;
    use serde_json::json;

    // Real request bodies captured from the real clients against a throw-away
    // loopback capture server (see each test for the command).
    const NAMESPACE_CREATE: &[u8] = include_bytes!("../../fixtures/protobuf/namespace-create.bin");
    const SECRET_CREATE: &[u8] = include_bytes!("../../fixtures/protobuf/secret-create.bin");
    const SECRET_CREATE_BINARY: &[u8] =
        include_bytes!("../../fixtures/protobuf/secret-create-binary.bin");
    const CONFIGMAP_CREATE: &[u8] = include_bytes!("../../fixtures/protobuf/configmap-create.bin");
    const CONFIGMAP_CREATE_BINARY: &[u8] =
        include_bytes!("../../fixtures/protobuf/configmap-create-binary.bin");
    const SERVICEACCOUNT_CREATE: &[u8] =
        include_bytes!("../../fixtures/protobuf/serviceaccount-create.bin");
    const HELM_RELEASE_CREATE: &[u8] =
        include_bytes!("../../fixtures/protobuf/helm-release-secret-create.bin");
    const HELM_RELEASE_UPDATE: &[u8] =
        include_bytes!("../../fixtures/protobuf/helm-release-secret-update.bin");
    const DELETE_OPTIONS_HELM: &[u8] =
        include_bytes!("../../fixtures/protobuf/delete-options-helm-uninstall.bin");

    const ALL_FIXTURES: [&[u8]; 9] = [
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
    struct Enc(Vec<u8>);

    impl Enc {
        fn new() -> Self {
            Enc::default()
        }
        fn raw_varint(&mut self, mut v: u64) {
            while v >= 0x80 {
                self.0.push((v as u8) | 0x80);
                v >>= 7;
            }
            self.0.push(v as u8);
        }
        fn tag(&mut self, num: u64, wire: u8) {
            self.raw_varint((num << 3) | u64::from(wire));
        }
        fn varint(mut self, num: u64, v: u64) -> Self {
            self.tag(num, 0);
            self.raw_varint(v);
            self
        }
        fn bytes(mut self, num: u64, b: &[u8]) -> Self {
            self.tag(num, 2);
            self.raw_varint(b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        fn str(self, num: u64, s: &str) -> Self {
            self.bytes(num, s.as_bytes())
        }
        fn msg(self, num: u64, m: Enc) -> Self {
            self.bytes(num, &m.0)
        }
        fn entry(self, num: u64, k: &str, v: &[u8]) -> Self {
            self.msg(num, Enc::new().str(1, k).bytes(2, v))
        }
        fn fixed32(mut self, num: u64, v: u32) -> Self {
            self.tag(num, 5);
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn fixed64(mut self, num: u64, v: u64) -> Self {
            self.tag(num, 1);
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn group(mut self, num: u64, inner: Enc) -> Self {
            self.tag(num, 3);
            self.0.extend_from_slice(&inner.0);
            self.tag(num, 4);
            self
        }
        /// Unknown fields of every wire type, including nested groups.
        fn junk(self, base: u64) -> Self {
            self.varint(base, u64::MAX)
                .fixed64(base + 1, 7)
                .bytes(base + 2, b"\xff\x00junk")
                .fixed32(base + 3, 9)
                .group(
                    base + 4,
                    Enc::new()
                        .varint(1, 1)
                        .group(2, Enc::new().str(1, "x").fixed32(2, 3))
                        .fixed64(3, 4),
                )
        }
    }

    fn time(secs: i64, nanos: u64) -> Enc {
        Enc::new().varint(1, secs as u64).varint(2, nanos)
    }

    /// Magic + runtime.Unknown as client-go writes it (empty contentEncoding
    /// and contentType included).
    fn body(api_version: &str, kind: &str, raw: Enc) -> Vec<u8> {
        let unknown = Enc::new()
            .msg(1, Enc::new().str(1, api_version).str(2, kind))
            .msg(2, raw)
            .str(3, "")
            .str(4, "");
        let mut out = b"k8s\0".to_vec();
        out.extend_from_slice(&unknown.0);
        out
    }

    fn err_of(b: &[u8]) -> String {
        match decode(b) {
            Ok(v) => panic!("expected an error, got {v}"),
            Err(e) => e,
        }
    }

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
        let raw = Enc::new()
            .varint(1, 0)
            .msg(2, Enc::new().str(1, "uid-1").str(2, ""))
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
            Enc::new().varint(1, -1i64 as u64),
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
        let owner = Enc::new()
            .str(5, "apps/v1")
            .str(1, "Deployment")
            .str(3, "web")
            .str(4, "u-1")
            .varint(6, 1)
            .junk(20);
        let owner_minimal = Enc::new().str(3, "bare").varint(7, 0);
        let managed = Enc::new()
            .str(1, "kubectl")
            .str(2, "Update")
            .str(3, "v1")
            .msg(4, time(1_700_000_000, 5))
            .str(6, "FieldsV1")
            .msg(7, Enc::new().bytes(1, br#"{"f:data":{".":{},"f:k":{}}}"#))
            .str(8, "")
            .junk(30);
        let meta = Enc::new()
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
            .msg(17, Enc::new().msg(4, Enc::new()).msg(7, Enc::new()))
            .junk(100);
        let raw = Enc::new()
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
        for ts in [Enc::new(), time(GO_ZERO_TIME_SECS, 0)] {
            let meta = Enc::new()
                .str(1, "x")
                .str(2, "")
                .str(3, "")
                .varint(7, 0)
                .msg(8, ts);
            let raw = Enc::new().msg(1, meta).str(3, "");
            assert_eq!(
                decode(&body("v1", "Secret", raw)).unwrap(),
                json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}})
            );
        }
        // No metadata at all still serializes `metadata: {}`.
        assert_eq!(
            decode(&body("v1", "Secret", Enc::new())).unwrap(),
            json!({"apiVersion":"v1","kind":"Secret","metadata":{}})
        );
        // Later occurrences win, and an empty later value removes the key.
        let meta = Enc::new().str(1, "a").str(1, "b").str(3, "ns").str(3, "");
        assert_eq!(
            decode(&body("v1", "Secret", Enc::new().msg(1, meta))).unwrap()["metadata"],
            json!({"name":"b"})
        );
    }

    #[test]
    fn namespace_spec_and_status() {
        let cond = Enc::new()
            .str(1, "NamespaceDeletionContentFailure")
            .str(2, "False")
            .msg(4, time(0, 0))
            .str(5, "")
            .str(6, "ok");
        let raw = Enc::new()
            .msg(1, Enc::new().str(1, "demo").entry(11, "team", b"a"))
            .msg(2, Enc::new().str(1, "kubernetes").junk(10))
            .msg(
                3,
                Enc::new()
                    .str(1, "Terminating")
                    .msg(2, cond)
                    .msg(2, Enc::new()),
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
        let raw = Enc::new()
            .msg(1, Enc::new().str(1, "robot"))
            .msg(2, Enc::new().str(1, "Secret").str(3, "tok").str(2, ""))
            .msg(3, Enc::new().str(1, "pull"))
            .varint(4, 0);
        assert_eq!(
            decode(&body("v1", "ServiceAccount", raw)).unwrap(),
            json!({"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"robot"},
                   "secrets":[{"kind":"Secret","name":"tok"}],
                   "imagePullSecrets":[{"name":"pull"}],
                   "automountServiceAccountToken":false})
        );
    }

    #[test]
    fn rfc3339_formatting() {
        assert_eq!(rfc3339(0, "t").unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400, "t").unwrap(), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199, "t").unwrap(), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339(-1, "t").unwrap(), "1969-12-31T23:59:59Z");
        assert_eq!(
            rfc3339(GO_ZERO_TIME_SECS + 1, "t").unwrap(),
            "0001-01-01T00:00:01Z"
        );
        assert_eq!(
            rfc3339(253_402_300_799, "t").unwrap(),
            "9999-12-31T23:59:59Z"
        );
        assert_eq!(
            rfc3339(-62_167_219_200, "t").unwrap(),
            "0000-01-01T00:00:00Z"
        );
        assert!(rfc3339(253_402_300_800, "t").is_err());
        assert!(rfc3339(i64::MIN, "t").is_err());
        assert!(rfc3339(i64::MAX, "t").is_err());
    }

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
    fn truncation_is_an_error_never_a_panic() {
        for fixture in ALL_FIXTURES {
            // Real bodies end with the raw field followed by empty
            // contentEncoding (1a 00) and contentType (22 00): every cut
            // before that point breaks a length or varint.
            let raw_end = fixture.len() - 4;
            for cut in 0..fixture.len() {
                let r = decode(&fixture[..cut]);
                if cut < raw_end {
                    assert!(r.is_err(), "cut at {cut} decoded: {r:?}");
                }
            }
        }
        let e = err_of(&SECRET_CREATE[..20]);
        assert!(e.contains("exceeds") && e.contains("offset"), "{e}");
    }

    #[test]
    fn corrupted_bytes_never_panic() {
        for fixture in ALL_FIXTURES {
            for i in 0..fixture.len() {
                for v in [0x00, 0x01, 0x07, 0x0b, 0x0c, 0x7f, 0x80, 0xff] {
                    let mut b = fixture.to_vec();
                    b[i] = v;
                    let _ = decode(&b);
                }
            }
        }
    }

    #[test]
    fn unsupported_kind_is_named() {
        let e = err_of(&body("apps/v1", "Deployment", Enc::new()));
        assert!(e.contains("Deployment") && e.contains("apps/v1"), "{e}");
        // Core kinds only in the core group version.
        assert!(err_of(&body("example.com/v1", "Secret", Enc::new())).contains("Secret"));
        assert!(err_of(&body("v1", "", Enc::new())).contains("kind"));
    }

    #[test]
    fn unknown_wrapper_checks() {
        let mut gz = b"k8s\0".to_vec();
        gz.extend(
            Enc::new()
                .msg(1, Enc::new().str(1, "v1").str(2, "Secret"))
                .bytes(2, b"")
                .str(3, "gzip")
                .0,
        );
        assert!(err_of(&gz).contains("gzip"));
        let mut json_ct = b"k8s\0".to_vec();
        json_ct.extend(
            Enc::new()
                .msg(1, Enc::new().str(1, "v1").str(2, "Secret"))
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
            Enc::new()
                .junk(10)
                .msg(1, Enc::new().junk(5).str(1, "v1").str(2, "ConfigMap"))
                .msg(2, Enc::new().msg(1, Enc::new().str(1, "c")))
                .str(4, "application/vnd.kubernetes.protobuf")
                .0,
        );
        assert_eq!(
            decode(&extra).unwrap(),
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}})
        );
    }

    fn with_raw(raw: &[u8]) -> Vec<u8> {
        let mut e = Enc::new().msg(1, Enc::new().str(1, "v1").str(2, "Secret"));
        e = e.bytes(2, raw);
        let mut out = b"k8s\0".to_vec();
        out.extend(e.0);
        out
    }

    #[test]
    fn malformed_wire_data() {
        // Wrong wire type for a known field.
        let e = err_of(&body("v1", "Secret", Enc::new().varint(3, 1)));
        assert!(
            e.contains("Secret.type") && e.contains("wire type 2"),
            "{e}"
        );
        let e = err_of(&body("v1", "Secret", Enc::new().str(5, "yes")));
        assert!(
            e.contains("Secret.immutable") && e.contains("wire type 0"),
            "{e}"
        );
        // Varint longer than 10 bytes / overflowing 64 bits.
        let e = err_of(&with_raw(&[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]));
        assert!(e.contains("varint"), "{e}");
        let e = err_of(&with_raw(&[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ]));
        assert!(e.contains("overflows"), "{e}");
        // Truncated varint inside the raw object.
        assert!(err_of(&with_raw(&[0x08, 0x80])).contains("truncated varint"));
        // Length beyond the message.
        let e = err_of(&with_raw(&[0x1a, 0x05, b'a']));
        assert!(e.contains("exceeds"), "{e}");
        // Huge length (would overflow naive arithmetic).
        let e = err_of(&with_raw(&[
            0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]));
        assert!(e.contains("exceeds"), "{e}");
        // Truncated fixed-width fields.
        assert!(err_of(&with_raw(&[0x31, 1, 2, 3])).contains("truncated"));
        assert!(err_of(&with_raw(&[0x35, 1, 2])).contains("truncated"));
        // Invalid wire types 6 and 7, field number 0.
        assert!(err_of(&with_raw(&[0x0e, 0])).contains("invalid wire type 6"));
        assert!(err_of(&with_raw(&[0x0f, 0])).contains("invalid wire type 7"));
        assert!(err_of(&with_raw(&[0x02, 0])).contains("invalid field number 0"));
        // Groups: stray end, unterminated, mismatched end.
        assert!(err_of(&with_raw(&[0x0c])).contains("unexpected end-group"));
        assert!(err_of(&with_raw(&[0x0b, 0x08, 0x01])).contains("unterminated group"));
        assert!(err_of(&with_raw(&[0x0b, 0x14])).contains("does not match"));
        // Deeply nested groups are skipped without recursion.
        let mut deep = vec![0x7b; 100_000];
        deep.extend(vec![0x7c; 100_000]);
        assert_eq!(decode(&with_raw(&deep)).unwrap()["kind"], "Secret");
        // Invalid UTF-8 in a string field; invalid JSON in FieldsV1.
        let e = err_of(&body("v1", "Secret", Enc::new().bytes(3, b"\xff")));
        assert!(e.contains("UTF-8") && e.contains("offset"), "{e}");
        let meta = Enc::new().msg(17, Enc::new().msg(7, Enc::new().bytes(1, b"{nope")));
        let e = err_of(&body("v1", "Secret", Enc::new().msg(1, meta)));
        assert!(e.contains("FieldsV1"), "{e}");
        // Errors carry absolute offsets: the tag of Secret.type inside raw.
        let b = body("v1", "Secret", Enc::new().varint(3, 1));
        let at = b.len() - 6;
        assert!(
            err_of(&b).contains(&format!("offset {at}")),
            "{}",
            err_of(&b)
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
