//! The simulator's serving certificate: a throw-away CA and a certificate for 127.0.0.1, ::1
//! and localhost, minted in memory at start. kubectl and helm send bearer tokens only over
//! HTTPS, so the simulator serves HTTPS and its kubeconfig carries the CA.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::sync::Arc;

pub struct ServingTls {
    /// PEM of the CA clients trust (certificate-authority-data in the kubeconfig).
    pub ca_pem: String,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

pub fn mint() -> Result<ServingTls, String> {
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
    let mut params = CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "localhost".to_string(),
    ])
    .map_err(|e| error("server parameters", e))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| error("sign the server certificate", e))?;
    crate::clients::runtime::install_tls_provider();
    let chain = vec![cert.der().clone()];
    let private = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| format!("simulator TLS: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(ServingTls {
        ca_pem,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    })
}
