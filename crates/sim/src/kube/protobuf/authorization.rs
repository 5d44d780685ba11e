//! Decoders of `k8s.io/api/authorization/v1` and `authentication/v1`: the self-subject reviews
//! kubectl sends as protobuf (`kubectl auth can-i`, `kubectl auth whoami`).

use serde_json::{Map, Value};

use super::json::{child, put_str};
use super::meta::decode_object_meta;
use super::wire::Reader;

/// `ResourceAttributes`: namespace=1, verb=2, group=3, version=4, resource=5, subresource=6,
/// name=7 (the selectors, 8 and 9, are not read).
const RESOURCE_ATTRIBUTES: [&str; 7] = [
    "namespace",
    "verb",
    "group",
    "version",
    "resource",
    "subresource",
    "name",
];

fn decode_strings(
    buf: &[u8],
    base: usize,
    keys: &[&str],
    context: &'static str,
) -> Result<Value, String> {
    let mut out = Map::new();
    let mut r = Reader::new(buf, base, context);
    while let Some(f) = r.next_field()? {
        if let Some(key) = usize::try_from(f.num)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| keys.get(i))
        {
            put_str(&mut out, key, f.string(context)?, true);
        }
    }
    Ok(Value::Object(out))
}

/// `SelfSubjectAccessReview` (metadata=1, spec=2{resourceAttributes=1, nonResourceAttributes=2
/// {path=1, verb=2}}), `SelfSubjectRulesReview` (spec=2{namespace=1}) and `SelfSubjectReview`
/// (metadata only).
pub(super) fn decode_review(
    kind: &str,
    buf: &[u8],
    base: usize,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let mut r = Reader::new(buf, base, "SelfSubjectReview");
    while let Some(f) = r.next_field()? {
        match f.num {
            1 => {
                let (b, off) = f.bytes("review.metadata")?;
                decode_object_meta(b, off, child(out, "metadata"))?;
            }
            2 => {
                let (b, off) = f.bytes("review.spec")?;
                let spec = child(out, "spec");
                let mut s = Reader::new(b, off, "review.spec");
                while let Some(g) = s.next_field()? {
                    match (kind, g.num) {
                        ("SelfSubjectAccessReview", 1) => {
                            let (b, off) = g.bytes("ResourceAttributes")?;
                            spec.insert(
                                "resourceAttributes".into(),
                                decode_strings(b, off, &RESOURCE_ATTRIBUTES, "ResourceAttributes")?,
                            );
                        }
                        ("SelfSubjectAccessReview", 2) => {
                            let (b, off) = g.bytes("NonResourceAttributes")?;
                            spec.insert(
                                "nonResourceAttributes".into(),
                                decode_strings(b, off, &["path", "verb"], "NonResourceAttributes")?,
                            );
                        }
                        ("SelfSubjectRulesReview", 1) => {
                            put_str(
                                spec,
                                "namespace",
                                g.string("SelfSubjectRulesReviewSpec")?,
                                true,
                            );
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    child(out, "metadata");
    child(out, "spec");
    Ok(())
}
