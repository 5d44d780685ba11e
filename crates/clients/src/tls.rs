//! A self-signed CA and the certificates it signs (the platform's `*.local.example.net`
//! wildcard), with rcgen. Files are re-minted only when missing, not signed by the CA, naming
//! other hosts, or expiring within [`RENEW_MARGIN_DAYS`]. Keys are written with mode 0600.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use crate::error::{ClientError, Remedy};
use crate::fs::{Confinement, WriteOutcome};

/// Certificates expiring within this many days are re-minted.
pub const RENEW_MARGIN_DAYS: i64 = 30;

/// What an ensure call found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub changed: bool,
    /// Why it (would have) re-minted, or `None` when the files were fine.
    pub reason: Option<String>,
}

fn tls_error(what: &str, error: impl std::fmt::Display) -> ClientError {
    ClientError::new(format!("tls: {what}: {error}"))
}

struct Parsed {
    not_after: i64,
    dns_names: Vec<String>,
}

fn parse(pem: &[u8], what: &str) -> Result<(Parsed, Vec<u8>), String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|error| format!("{what} is not a PEM certificate: {error}"))?;
    let der = pem.contents.clone();
    let cert = pem
        .parse_x509()
        .map_err(|error| format!("{what} cannot be parsed: {error}"))?;
    let mut dns_names = Vec::new();
    if let Ok(Some(extension)) = cert.subject_alternative_name() {
        for name in &extension.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                dns_names.push(dns.to_string());
            }
        }
    }
    Ok((
        Parsed {
            not_after: cert.validity().not_after.timestamp(),
            dns_names,
        },
        der,
    ))
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn expiring(not_after: i64) -> bool {
    not_after - now() < RENEW_MARGIN_DAYS * 86_400
}

fn validity(params: &mut CertificateParams, days: u32) {
    let start = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
    params.not_before = start;
    params.not_after = start + time::Duration::days(i64::from(days));
}

fn write(
    files: &Confinement,
    path: &str,
    content: &str,
    mode: u32,
) -> Result<WriteOutcome, ClientError> {
    files.write_text(path, content.as_bytes(), Some(mode))
}

/// Ensures `dir/ca.pem` and `dir/ca-key.pem`: a CA named `cn`, valid for `days`.
pub fn ensure_ca(
    files: &Confinement,
    dir: &str,
    cn: &str,
    days: u32,
    check: bool,
) -> Result<Outcome, ClientError> {
    let root = files.resolve(dir)?;
    let (ca_path, key_path) = (root.join("ca.pem"), root.join("ca-key.pem"));
    let reason = match (std::fs::read(&ca_path), key_path.exists()) {
        (Ok(pem), true) => match parse(&pem, "ca.pem") {
            Ok((parsed, _)) if expiring(parsed.not_after) => {
                Some(format!("the CA expires within {RENEW_MARGIN_DAYS} days"))
            }
            // A key that is not the certificate's signs leaves nothing any client trusts.
            Ok((_, der)) if !key_matches(&der, &key_path) => {
                Some("ca-key.pem is not the key of ca.pem".to_string())
            }
            Ok(_) => None,
            Err(problem) => Some(problem),
        },
        _ => Some("no CA yet".to_string()),
    };
    if reason.is_none() || check {
        return Ok(Outcome {
            changed: reason.is_some(),
            reason,
        });
    }
    let key = KeyPair::generate().map_err(|error| tls_error("generate the CA key", error))?;
    let mut params = CertificateParams::new(Vec::<String>::new())
        .map_err(|error| tls_error("CA parameters", error))?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let cert = params
        .self_signed(&key)
        .map_err(|error| tls_error("sign the CA", error))?;
    let shown = files.display(&root);
    write(
        files,
        &format!("{shown}/ca-key.pem"),
        &key.serialize_pem(),
        0o600,
    )?;
    write(files, &format!("{shown}/ca.pem"), &cert.pem(), 0o644)?;
    Ok(Outcome {
        changed: true,
        reason,
    })
}

/// Ensures `dir/cert.pem` and `dir/key.pem` for `dns_names`, signed by the CA in `ca_dir`.
pub fn ensure_cert(
    files: &Confinement,
    dir: &str,
    ca_dir: &str,
    dns_names: &[String],
    days: u32,
    check: bool,
) -> Result<Outcome, ClientError> {
    let ca_root = files.resolve(ca_dir)?;
    let ca_pem = std::fs::read_to_string(ca_root.join("ca.pem")).map_err(|error| {
        tls_error(&format!("read {}/ca.pem", files.display(&ca_root)), error)
            .with_hint("create the CA first")
            .with_remedy(Remedy::CreateCa)
    })?;
    let ca_key_pem = std::fs::read_to_string(ca_root.join("ca-key.pem")).map_err(|error| {
        tls_error(
            &format!("read {}/ca-key.pem", files.display(&ca_root)),
            error,
        )
        .with_hint("create the CA first")
        .with_remedy(Remedy::CreateCa)
    })?;
    let (_, ca_der) =
        parse(ca_pem.as_bytes(), "ca.pem").map_err(|problem| tls_error("the CA", problem))?;
    let root = files.resolve(dir)?;
    let (cert_path, key_path) = (root.join("cert.pem"), root.join("key.pem"));
    let reason = match (std::fs::read(&cert_path), key_path.exists()) {
        (Ok(pem), true) => match parse(&pem, "cert.pem") {
            Err(problem) => Some(problem),
            Ok((parsed, der)) => {
                let mut wanted = dns_names.to_vec();
                let mut present = parsed.dns_names.clone();
                wanted.sort();
                present.sort();
                if expiring(parsed.not_after) {
                    Some(format!(
                        "the certificate expires within {RENEW_MARGIN_DAYS} days"
                    ))
                } else if wanted != present {
                    Some(format!(
                        "the certificate names {present:?}, wanted {wanted:?}"
                    ))
                } else if !signed_by(&der, &ca_der) {
                    Some("the certificate is not signed by this CA".to_string())
                } else if !key_matches(&der, &key_path) {
                    Some("key.pem is not the key of cert.pem".to_string())
                } else {
                    None
                }
            }
        },
        _ => Some("no certificate yet".to_string()),
    };
    if reason.is_none() || check {
        return Ok(Outcome {
            changed: reason.is_some(),
            reason,
        });
    }
    let ca_key =
        KeyPair::from_pem(&ca_key_pem).map_err(|error| tls_error("read the CA key", error))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .map_err(|error| tls_error("use the CA", error))?;
    let key = KeyPair::generate().map_err(|error| tls_error("generate the key", error))?;
    let mut params = CertificateParams::new(dns_names.to_vec())
        .map_err(|error| tls_error("certificate parameters", error))?;
    if let Some(first) = dns_names.first() {
        params
            .distinguished_name
            .push(DnType::CommonName, first.as_str());
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut params, days);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|error| tls_error("sign the certificate", error))?;
    let shown = files.display(&root);
    write(
        files,
        &format!("{shown}/key.pem"),
        &key.serialize_pem(),
        0o600,
    )?;
    write(files, &format!("{shown}/cert.pem"), &cert.pem(), 0o644)?;
    Ok(Outcome {
        changed: true,
        reason,
    })
}

/// Whether the private key in `key_path` is the one whose public key `cert_der` carries.
fn key_matches(cert_der: &[u8], key_path: &std::path::Path) -> bool {
    let (Ok(pem), Ok((_, cert))) = (
        std::fs::read_to_string(key_path),
        x509_parser::parse_x509_certificate(cert_der),
    ) else {
        return false;
    };
    KeyPair::from_pem(&pem)
        .is_ok_and(|key| key.public_key_raw() == cert.public_key().subject_public_key.data.as_ref())
}

fn signed_by(cert_der: &[u8], ca_der: &[u8]) -> bool {
    let (Ok((_, cert)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(cert_der),
        x509_parser::parse_x509_certificate(ca_der),
    ) else {
        return false;
    };
    cert.verify_signature(Some(ca.public_key())).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_or_certificate_whose_key_file_is_another_keys_is_minted_again() {
        let folder = tempfile::tempdir().expect("folder");
        let files = Confinement::new(folder.path());
        let names = vec!["*.local.example.net".to_string()];
        assert!(
            ensure_ca(&files, "tls", "test CA", 30 * 3, false)
                .expect("CA")
                .changed
        );
        let first = ensure_cert(&files, "tls", "tls", &names, 90, false).expect("cert");
        assert!(first.changed);
        let again = ensure_cert(&files, "tls", "tls", &names, 90, false).expect("cert");
        assert_eq!(
            again,
            Outcome {
                changed: false,
                reason: None
            }
        );
        // Another CA's key next to this CA's certificate (a half-copied folder).
        let other = KeyPair::generate().expect("key").serialize_pem();
        std::fs::write(folder.path().join("tls/ca-key.pem"), &other).expect("write");
        let ca = ensure_ca(&files, "tls", "test CA", 90, false).expect("CA");
        assert_eq!(
            ca.reason.as_deref(),
            Some("ca-key.pem is not the key of ca.pem")
        );
        let cert = ensure_cert(&files, "tls", "tls", &names, 90, false).expect("cert");
        assert_eq!(
            cert.reason.as_deref(),
            Some("the certificate is not signed by this CA")
        );
        std::fs::write(folder.path().join("tls/key.pem"), &other).expect("write");
        let cert = ensure_cert(&files, "tls", "tls", &names, 90, true).expect("cert");
        assert_eq!(
            cert.reason.as_deref(),
            Some("key.pem is not the key of cert.pem")
        );
    }
}
