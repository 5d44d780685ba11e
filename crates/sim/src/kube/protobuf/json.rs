//! Go's `encoding/json` conventions for the decoded values: `omitempty`, maps, base64 bytes and
//! RFC 3339 times.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::wire::{Field, Reader};

/// Go's zero `time.Time` as Unix seconds (0001-01-01T00:00:00Z).
pub(super) const GO_ZERO_TIME_SECS: i64 = -62_135_596_800;

/// Sets a string; an empty value of an `omitempty` field removes the key
/// (last occurrence wins, as in proto).
pub(super) fn put_str(out: &mut Map<String, Value>, key: &str, v: String, omitempty: bool) {
    if omitempty && v.is_empty() {
        out.remove(key);
    } else {
        out.insert(key.into(), Value::String(v));
    }
}

/// Sets the string `key` of `message` from field `f` (see [`put_str`]); errors name
/// `message.key`.
pub(super) fn put_string_field(
    out: &mut Map<String, Value>,
    f: &Field<'_>,
    message: &str,
    key: &str,
    omitempty: bool,
) -> Result<(), String> {
    let value = f.string(&format!("{message}.{key}"))?;
    put_str(out, key, value, omitempty);
    Ok(())
}

/// Sets the boolean `key` of `message` from field `f` (pointer fields: kept even when false).
pub(super) fn put_bool_field(
    out: &mut Map<String, Value>,
    f: &Field<'_>,
    message: &str,
    key: &str,
) -> Result<(), String> {
    let value = f.boolean(&format!("{message}.{key}"))?;
    out.insert(key.into(), Value::Bool(value));
    Ok(())
}

pub(super) fn put_int_omitempty(out: &mut Map<String, Value>, key: &str, v: i64) {
    if v == 0 {
        out.remove(key);
    } else {
        out.insert(key.into(), Value::from(v));
    }
}

pub(super) fn child<'m>(out: &'m mut Map<String, Value>, key: &str) -> &'m mut Map<String, Value> {
    let slot = out
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().expect("just made an object")
}

pub(super) fn push(out: &mut Map<String, Value>, key: &str, v: Value) {
    let slot = out
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(a) = slot {
        a.push(v);
    } else {
        *slot = Value::Array(vec![v]);
    }
}

pub(super) fn default_str(out: &mut Map<String, Value>, key: &str) {
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

pub(super) fn put_map_entry(
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

/// Decodes `meta.v1.Time{seconds=1, nanos=2}`. Returns `None` for Go's zero
/// time (an empty message, as upstream `Time.Unmarshal` treats it, or the
/// zero instant). Nanoseconds are dropped like upstream does.
pub(super) fn decode_time(f: &Field<'_>, ctx: &'static str) -> Result<Option<i64>, String> {
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
pub(super) fn rfc3339(secs: i64, ctx: &str) -> Result<String, String> {
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

pub(super) fn time_value(f: &Field<'_>, ctx: &'static str) -> Result<Value, String> {
    match decode_time(f, ctx)? {
        None => Ok(Value::Null),
        Some(s) => Ok(Value::String(rfc3339(s, ctx)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
