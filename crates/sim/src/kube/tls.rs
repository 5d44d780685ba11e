//! The simulator's serving certificate: a throw-away CA and a certificate for 127.0.0.1, ::1,
//! localhost and the in-cluster names of `default/kubernetes`, minted in memory at start. kubectl and helm send bearer tokens only over
//! HTTPS, so the simulator serves HTTPS and its kubeconfig carries the CA.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::sync::Arc;

pub struct ServingTls {
    /// PEM of the CA clients trust (certificate-authority-data in the kubeconfig).
    pub ca_pem: String,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

/// The PEM files of a serving identity, as kept in a state folder.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// The identity kept in `file` (written with mode 0600 on first use), so a restarted
/// simulator keeps the CA its kubeconfig names.
pub fn load_or_mint(file: &std::path::Path) -> Result<ServingTls, String> {
    if let Ok(text) = std::fs::read_to_string(file)
        && let Ok(identity) = serde_json::from_str::<Identity>(&text)
    {
        return serve(identity);
    }
    let identity = mint_identity()?;
    let text = serde_json::to_string(&identity).map_err(|e| e.to_string())?;
    bprun_clients::fs::write_private(file, text.as_bytes())
        .map_err(|error| format!("cannot write {}: {error}", file.display()))?;
    serve(identity)
}

pub fn mint() -> Result<ServingTls, String> {
    serve(mint_identity()?)
}

fn serve(identity: Identity) -> Result<ServingTls, String> {
    bprun_clients::runtime::install_tls_provider();
    let chain = vec![rustls::pki_types::CertificateDer::from(x509_der(
        &identity.cert_pem,
    )?)];
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(x509_der(&identity.key_pem)?.into());
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("simulator TLS: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(ServingTls {
        ca_pem: identity.ca_pem,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    })
}

/// The DER bytes of the first PEM block.
fn x509_der(pem: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .map_err(|error| format!("simulator TLS: bad PEM: {error}"))
}

fn mint_identity() -> Result<Identity, String> {
    let error = |what: &str, e: rcgen::Error| format!("simulator TLS: {what}: {e}");
    let ca_key = KeyPair::generate().map_err(|e| error("CA key", e))?;
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| error("CA parameters", e))?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "bprun simulator CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(|e| error("sign the CA", e))?;
    let ca_pem = ca_cert.pem();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(|e| error("use the CA", e))?;
    let key = KeyPair::generate().map_err(|e| error("server key", e))?;
    // The workstation's addresses, and the in-cluster ones kube-apiserver's certificate names
    // (`kubernetes.default.svc`, the Service's ClusterIP), which a pod dials.
    let mut params = CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
        crate::kube::cluster::KUBERNETES_SERVICE_IP.to_string(),
    ])
    .map_err(|e| error("server parameters", e))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| error("sign the server certificate", e))?;
    Ok(Identity {
        ca_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
