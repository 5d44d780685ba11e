//! The TLS natives: a CA and a wildcard certificate that `openssl verify` accepts, minted only
//! when needed.

use crate::support::repo;

const SCRIPT: &str = r#"
step("TLS", || {
    let ca = tls_ensure_ca("infra/tls/wildcard", #{cn: "blueprint local CA"});
    let cert = tls_ensure_cert("infra/tls/wildcard", "infra/tls/wildcard", #{dns_names: ["*.local.example.net", "local.example.net"]});
    print(`${ca.changed} ${cert.changed}`);
});
"#;

#[test]
fn a_ca_and_a_wildcard_certificate_that_openssl_verifies() {
    use std::os::unix::fs::PermissionsExt;
    let test = repo().script(SCRIPT);
    let first = test.run(&["scripts/test.rhai"]);
    first.code(0);
    first.stdout_contains("    ~ mint CA infra/tls/wildcard/ca.pem (no CA yet)\n");
    first.stdout_contains("    true true\n");
    for key in ["ca-key.pem", "key.pem"] {
        let mode = std::fs::metadata(test.join(&format!("infra/tls/wildcard/{key}")))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    let verify = std::process::Command::new("openssl")
        .args([
            "verify",
            "-CAfile",
            "infra/tls/wildcard/ca.pem",
            "infra/tls/wildcard/cert.pem",
        ])
        .current_dir(test.path())
        .output()
        .expect("openssl");
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let text = std::process::Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-ext",
            "subjectAltName",
            "-in",
            "infra/tls/wildcard/cert.pem",
        ])
        .current_dir(test.path())
        .output()
        .expect("openssl");
    assert!(String::from_utf8_lossy(&text.stdout).contains("DNS:*.local.example.net"));

    // Nothing to do the second time; the files stay byte for byte.
    let cert_before = test.read("infra/tls/wildcard/cert.pem");
    let second = test.run(&["scripts/test.rhai"]);
    second.stdout_contains("false false");
    assert_eq!(test.read("infra/tls/wildcard/cert.pem"), cert_before);

    // Another CA means a new certificate.
    std::fs::remove_file(test.join("infra/tls/wildcard/ca.pem")).expect("remove CA");
    let new_ca = test.run(&["scripts/test.rhai"]);
    new_ca.stdout_contains("    ~ mint certificate infra/tls/wildcard/cert.pem for *.local.example.net, local.example.net (the certificate is not signed by this CA)\n");
}

#[test]
fn check_mode_mints_nothing() {
    let test = repo().script(SCRIPT);
    let output = test.run(&["--check", "scripts/test.rhai"]);
    // The certificate needs a CA that check mode only planned: it is planned too, and says why.
    output.code(0);
    output.stdout_contains("    ~ would mint CA infra/tls/wildcard/ca.pem (no CA yet)\n");
    output.stdout_contains("    ~ would mint certificate infra/tls/wildcard/cert.pem for *.local.example.net, local.example.net (its CA infra/tls/wildcard/ca.pem is not minted yet)\n");
    assert!(!test.join("infra/tls/wildcard/ca.pem").exists());
    assert!(!test.join("infra/tls/wildcard/cert.pem").exists());
    // Outside check mode a missing CA is still an error.
    test.write(
        "scripts/cert.rhai",
        "step(\"Cert\", || { tls_ensure_cert(\"infra/tls/wildcard\", \"infra/tls/wildcard\", #{dns_names: [\"a.example\"]}); });\n",
    );
    let refused = test.run(&["scripts/cert.rhai"]);
    refused.code(1);
    refused.stderr_contains("hint: create the CA first: tls_ensure_ca");
}
