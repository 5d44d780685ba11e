//! helm's record of a release revision, as its storage driver keeps it: the Secret
//! `sh.helm.release.v1.<release>.v<revision>` whose `release` key holds the revision as JSON,
//! gzip-compressed, then base64-encoded (once more by the API, as any Secret data). A helm
//! killed while it installed or upgraded leaves that record `pending-*`, and every later helm
//! refuses the release ("another operation (install/upgrade/rollback) is in progress"); as
//! Flux's helm-controller does, the owner of the release, knowing no operation of its own is
//! running, marks the stale record failed, over which helm upgrades.

use super::KubeClient;
use crate::error::ClientError;
use crate::reconcile::Mode;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use std::io::{Read, Write};

/// The storage Secret of one revision of a release.
pub fn record_name(release: &str, revision: i64) -> String {
    format!("sh.helm.release.v1.{release}.v{revision}")
}

/// The revision a Secret's `data.release` holds (helm reads plain JSON too, so both are read).
pub fn decode_release(data: &str) -> Result<Value, ClientError> {
    let unreadable =
        |why: String| ClientError::new(format!("helm's release record is unreadable: {why}"));
    let helm_payload = STANDARD
        .decode(data.trim())
        .map_err(|error| unreadable(format!("the Secret's data is not base64: {error}")))?;
    let packed = STANDARD
        .decode(&helm_payload)
        .map_err(|error| unreadable(format!("helm's payload is not base64: {error}")))?;
    let json = if packed.starts_with(&[0x1f, 0x8b, 0x08]) {
        let mut unpacked = Vec::new();
        flate2::read::GzDecoder::new(packed.as_slice())
            .read_to_end(&mut unpacked)
            .map_err(|error| unreadable(format!("its gzip stream: {error}")))?;
        unpacked
    } else {
        packed
    };
    serde_json::from_slice(&json).map_err(|error| unreadable(format!("its JSON: {error}")))
}

/// A Secret's `data.release` for `release`, packed as helm packs it.
pub fn encode_release(release: &Value) -> Result<String, ClientError> {
    let json = serde_json::to_vec(release)
        .map_err(|error| ClientError::new(format!("cannot write a release record: {error}")))?;
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let packed = gzip
        .write_all(&json)
        .and_then(|()| gzip.finish())
        .map_err(|error| ClientError::new(format!("cannot compress a release record: {error}")))?;
    Ok(STANDARD.encode(STANDARD.encode(packed)))
}

/// The merge patch that marks the pending revision held by `record` (its Secret) failed, with
/// `description`; `None` when the record is not pending. The patch carries the record's
/// resourceVersion, so it fails if helm wrote the record meanwhile.
pub fn unlock_patch(record: &Value, description: &str) -> Result<Option<Value>, ClientError> {
    let data = record["data"]["release"]
        .as_str()
        .ok_or_else(|| ClientError::new("helm's release record has no data.release".to_string()))?;
    let mut release = decode_release(data)?;
    let status = release["info"]["status"].as_str().unwrap_or_default();
    if !status.starts_with("pending-") {
        return Ok(None);
    }
    release["info"]["status"] = json!("failed");
    release["info"]["description"] = json!(description);
    Ok(Some(json!({
        "metadata": {
            "resourceVersion": record["metadata"]["resourceVersion"],
            "labels": {"status": "failed"},
        },
        "data": {"release": encode_release(&release)?},
    })))
}

/// The latest revision among `records` (a release's storage Secrets), decoded.
pub fn latest_release(records: &[Value]) -> Result<Option<Value>, ClientError> {
    let revision = |record: &Value| {
        record["metadata"]["labels"]["version"]
            .as_str()
            .and_then(|version| version.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let Some(latest) = records.iter().max_by_key(|record| revision(record)) else {
        return Ok(None);
    };
    let data = latest["data"]["release"]
        .as_str()
        .ok_or_else(|| ClientError::new("helm's release record has no data.release".to_string()))?;
    decode_release(data).map(Some)
}

impl KubeClient {
    /// The latest revision of helm release `namespace/release` as helm's storage holds it
    /// (what `helm history --max 1` reads), or None when there is none. One list request,
    /// where a helm process costs a tenth of a second to start.
    pub fn helm_release_latest(
        &self,
        namespace: &str,
        release: &str,
    ) -> Result<Option<Value>, ClientError> {
        let records = self.list(
            "Secret",
            namespace,
            &format!("owner=helm,name={release}"),
            "",
        )?;
        latest_release(&records)
    }

    /// Marks revision `revision` of helm release `namespace/release` failed when it is still
    /// pending (in check mode: only says whether it would). True when it was (or would be).
    /// Only for a record its owner knows to be stale: a live helm's record is not touched by
    /// anyone else.
    pub fn unlock_pending_release(
        &self,
        namespace: &str,
        release: &str,
        revision: i64,
        description: &str,
        mode: Mode,
    ) -> Result<bool, ClientError> {
        let name = record_name(release, revision);
        let Some(record) = self.get("Secret", namespace, &name)? else {
            return Ok(false);
        };
        let Some(patch) = unlock_patch(&record, description)? else {
            return Ok(false);
        };
        if !mode.writes() {
            return Ok(true);
        }
        self.patch(
            "Secret",
            namespace,
            &name,
            &patch,
            super::PatchKind::Merge,
            mode,
        )?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as helm 4 wrote it for a `helm upgrade --install` killed half-way.
    fn pending_record() -> Value {
        let release = json!({
            "name": "cnpg", "namespace": "cnpg-system", "version": 1,
            "info": {"status": "pending-install", "description": "Initial install underway"},
            "manifest": "---\nkind: Deployment\n",
        });
        json!({
            "metadata": {
                "name": "sh.helm.release.v1.cnpg.v1", "resourceVersion": "41",
                "labels": {"name": "cnpg", "owner": "helm", "status": "pending-install", "version": "1"},
            },
            "data": {"release": encode_release(&release).expect("encode")},
        })
    }

    #[test]
    fn a_pending_record_is_marked_failed_with_its_reason_and_the_rest_kept() {
        let patch = unlock_patch(&pending_record(), "left by an interrupted bprun run")
            .expect("patch")
            .expect("pending");
        assert_eq!(
            patch["metadata"],
            json!({"resourceVersion": "41", "labels": {"status": "failed"}})
        );
        let release =
            decode_release(patch["data"]["release"].as_str().expect("data")).expect("decode");
        assert_eq!(
            release,
            json!({
                "name": "cnpg", "namespace": "cnpg-system", "version": 1,
                "info": {"status": "failed", "description": "left by an interrupted bprun run"},
                "manifest": "---\nkind: Deployment\n",
            })
        );
    }

    #[test]
    fn the_latest_of_a_releases_records_is_the_highest_revision_not_the_last_listed() {
        let record = |version: &str, status: &str| {
            json!({
                "metadata": {"labels": {"version": version}},
                "data": {"release": encode_release(&json!({"version": version, "info": {"status": status}})).expect("encode")},
            })
        };
        let records = [
            record("2", "superseded"),
            record("10", "deployed"),
            record("9", "superseded"),
        ];
        assert_eq!(
            latest_release(&records).expect("latest"),
            Some(json!({"version": "10", "info": {"status": "deployed"}}))
        );
        assert_eq!(latest_release(&[]).expect("none"), None);
    }

    #[test]
    fn a_record_that_is_not_pending_is_left_alone() {
        let mut record = pending_record();
        let release = json!({"info": {"status": "deployed"}});
        record["data"]["release"] = json!(encode_release(&release).expect("encode"));
        assert_eq!(unlock_patch(&record, "why").expect("patch"), None);
    }

    #[test]
    fn a_record_helm_left_uncompressed_is_read_too() {
        let plain = STANDARD.encode(STANDARD.encode(br#"{"info":{"status":"pending-upgrade"}}"#));
        assert_eq!(
            decode_release(&plain).expect("decode"),
            json!({"info": {"status": "pending-upgrade"}})
        );
    }

    #[test]
    fn a_record_that_is_not_helms_says_why_it_cannot_be_read() {
        let error = decode_release("not base64!").expect_err("unreadable");
        assert_eq!(
            error.message,
            "helm's release record is unreadable: the Secret's data is not base64: Invalid symbol 32, offset 3."
        );
    }
}
