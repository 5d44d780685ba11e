//! The TLS natives: a CA and a wildcard certificate that `openssl verify` accepts, minted only
//! when needed.

use crate::support::one_step_run_of;
use crate::support::with_recaps;
use crate::support::{assert_text, repo};

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
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps("
        [1/1] TLS ...
            ~ mint CA infra/tls/wildcard/ca.pem (no CA yet)
            ~ mint certificate infra/tls/wildcard/cert.pem for *.local.example.net, local.example.net (no certificate yet)
            true true
        [1/1] TLS ... changed (#.## s)

        <recap of scripts/test.rhai: TLS: changed 2>
        "),
        "",
    );
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
    assert_text(
        &String::from_utf8_lossy(&text.stdout),
        "X509v3 Subject Alternative Name: \n    DNS:*.local.example.net, DNS:local.example.net\n",
    );

    // Nothing to do the second time; the files stay byte for byte.
    let cert_before = test.read("infra/tls/wildcard/cert.pem");
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/1] TLS ...
            false false
        [1/1] TLS ... ok (#.## s)

        <recap of scripts/test.rhai: TLS: ok>
        ",
        ),
        "",
    );
    assert_eq!(test.read("infra/tls/wildcard/cert.pem"), cert_before);

    // Another CA means a new certificate.
    std::fs::remove_file(test.join("infra/tls/wildcard/ca.pem")).expect("remove CA");
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps("
        [1/1] TLS ...
            ~ mint CA infra/tls/wildcard/ca.pem (no CA yet)
            ~ mint certificate infra/tls/wildcard/cert.pem for *.local.example.net, local.example.net (the certificate is not signed by this CA)
            true true
        [1/1] TLS ... changed (#.## s)

        <recap of scripts/test.rhai: TLS: changed 2>
        "),
        "",
    );
}

#[test]
fn check_mode_mints_nothing() {
    let test = repo().script(SCRIPT);
    let output = test.run(&["--check", "scripts/test.rhai"]);
    // The certificate needs a CA that check mode only planned: it is planned too, and says why.
    output.expect(
        0,
        &with_recaps("
        check mode: nothing will be changed
        [1/1] TLS ...
            ~ would mint CA infra/tls/wildcard/ca.pem (no CA yet)
            ~ would mint certificate infra/tls/wildcard/cert.pem for *.local.example.net, local.example.net (its CA infra/tls/wildcard/ca.pem is not minted yet)
            true true
        [1/1] TLS ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): TLS: changed 2>
        "),
        "",
    );
    assert!(!test.join("infra/tls/wildcard/ca.pem").exists());
    assert!(!test.join("infra/tls/wildcard/cert.pem").exists());
    // Outside check mode a missing CA is still an error.
    test.write(
        "scripts/cert.rhai",
        "step(\"Cert\", || { tls_ensure_cert(\"infra/tls/wildcard\", \"infra/tls/wildcard\", #{dns_names: [\"a.example\"]}); });\n",
    );
    test.run(&["scripts/cert.rhai"]).expect(
        1,
        &one_step_run_of("scripts/cert.rhai", "Cert", "failed"),
        r#"
        error: step "Cert" failed
          × tls: read infra/tls/wildcard/ca.pem: No such file or directory (os error 2)
           ╭─[scripts/cert.rhai:1:19]
         1 │ step("Cert", || { tls_ensure_cert("infra/tls/wildcard", "infra/tls/wildcard", #{dns_names: ["a.example"]}); });
           ·                   ───────┬───────
           ·                          ╰── failed here
           ╰────
          hint: create the CA first: tls_ensure_ca
        re-run with --resume to continue from here
        "#,
    );
}
