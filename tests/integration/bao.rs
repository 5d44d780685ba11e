//! The OpenBao natives against real OpenBao servers (dev mode and one-node raft).

use crate::support::one_step_run;
use crate::support::with_recaps;
use crate::support::{BaoServer, Test, free_port, repo};

/// The KV steps both OpenBao servers (real `bao server -dev` and bprun's stand-in) must pass.
pub const KV_BASICS: &str = include_str!("../scripts/bao/kv_basics.rhai");

/// A secret's versions as `bao_versions` reads them (the same on `bao server -dev` and the
/// stand-in).
pub const VERSIONS: &str = r#"
step("Versions", || {
    bao_write("v/x", #{a: "1"});
    bao_write("v/x", #{a: "2"});
    bao_delete("v/x");
    let meta = bao_versions("v/x");
    print(`current ${meta.current_version}, oldest ${meta.oldest_version}, at most ${meta.max_versions}`);
    for v in meta.versions { print(`version ${v.version}: deleted ${v.deleted}, destroyed ${v.destroyed}`); }
    print(`created and updated: ${meta.created_time != "" && meta.updated_time != ""}`);
    print(`nothing at v/none: ${bao_versions("v/none") == ()}`);
});
"#;

/// What VERSIONS prints.
pub const VERSIONS_PRINTED: &str = "
[1/1] Versions ...
    ~ write secret secret/v/x (version 1)
    ~ write secret secret/v/x (version 2)
    ~ delete latest version of secret secret/v/x
    current 2, oldest 0, at most 0
    version 1: deleted false, destroyed false
    version 2: deleted true, destroyed false
    created and updated: true
    nothing at v/none: true
[1/1] Versions ... changed (#.## s)
";

fn with_dev(test: Test, server: &BaoServer) -> Test {
    test.env("BAO_ADDR", &server.address)
        .env("BAO_TOKEN", "root")
}

fn current_version(server: &BaoServer, path: &str) -> u64 {
    let json = server.cli("root", &["kv", "metadata", "get", "-format=json", path]);
    let value: serde_json::Value = serde_json::from_str(&json).expect("metadata JSON");
    value["data"]["current_version"]
        .as_u64()
        .expect("current_version")
}

#[test]
fn versions_read_a_secrets_metadata_without_its_values() {
    let server = BaoServer::dev();
    let test = with_dev(repo().script(VERSIONS), &server);
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(&format!(
            "{VERSIONS_PRINTED}\n<recap of scripts/test.rhai: Versions: changed 3>\n"
        )),
        "",
    );
}

#[test]
fn kv_reads_writes_idempotently_and_reports_changes() {
    let server = BaoServer::dev();
    let test = with_dev(
        repo().script(
            &format!("{KV_BASICS}{}", r#"
step("Mounts", || {
    assert_eq(bao_enable_kv(), #{changed: false});
    assert_eq(bao_enable_kv("apps", 2), #{changed: true});
    assert_eq(bao_enable_kv("apps", 2), #{changed: false});
    assert_eq(bao_write("apps:team/x", #{a: "1"}).changed, true);
    assert(bao_read("team/x", #{mount: "apps"}).a == "1", "explicit mount");
    try { bao_enable_kv("apps", 1); throw "no error"; } catch (e) {
        assert(e.message.ends_with("apps/ is already mounted as kv (version 2), not kv version 1"), e.message);
    }
});
step("Delete", || {
    assert_eq(bao_delete("gitlab/bootstrap/admin_token"), #{changed: true});
    assert_eq(bao_delete("gitlab/bootstrap/admin_token"), #{changed: false});
    assert_eq(bao_read("gitlab/bootstrap/admin_token"), ());
    // A write after a delete continues the version history.
    assert_eq(bao_write("gitlab/bootstrap/admin_token", #{token: "again"}), #{changed: true, version: 3});
});
step("Destroy", || {
    assert_eq(bao_destroy("gitlab/bootstrap/admin_token"), #{changed: true});
    assert_eq(bao_destroy("gitlab/bootstrap/admin_token"), #{changed: false});
    assert_eq(bao_list("gitlab/bootstrap"), []);
});
"#),
        ),
        &server,
    );
    let output = test.run(&["scripts/test.rhai"]);
    output.code(0).stderr("").partial_stdout(
        "
[1/9] Read missing ... ok (#.## s)
[2/9] Write ...
    ~ write secret secret/gitlab/bootstrap/admin_token (version 1)
[2/9] Write ... changed (#.## s)
[3/9] Write again ... ok (#.## s)
[4/9] Patch ...
    ~ patch secret secret/gitlab/bootstrap/admin_token (version 2)
[4/9] Patch ... changed (#.## s)
[5/9] List ... ok (#.## s)
[6/9] Policy ...
    ~ write policy gitlab-read
[6/9] Policy ... changed (#.## s)
[7/9] Mounts ...
    ~ mount kv version 2 at apps/
    ~ write secret apps/team/x (version 1)
[7/9] Mounts ... changed (#.## s)
"
        .trim_start_matches('\n'),
        "once step 4 has read the secret `user: admin` back, every `admin` is scrubbed, so the \
         later lines name `secret/gitlab/bootstrap/***_token`: a defect of the scrubbing of \
         short values, not pinned",
    );
    output.stdout_lacks("glpat-kv-test-000000000");
    // The policy really is there, as the real CLI sees it.
    assert!(
        server
            .cli("root", &["policy", "read", "gitlab-read"])
            .contains("secret/data/gitlab/*")
    );
}

#[test]
fn check_mode_writes_nothing_and_reports_the_version_it_would_write() {
    let server = BaoServer::dev();
    server.cli("root", &["kv", "put", "secret/app/config", "key=old"]);
    let test = with_dev(
        repo().script(
            r#"step("Write", || {
    assert_eq(bao_write("app/config", #{key: "new"}), #{changed: true, version: 2});
    assert_eq(bao_write("app/config", #{key: "old"}), #{changed: false, version: 1});
    assert_eq(bao_delete("app/config"), #{changed: true});
    assert_eq(bao_enable_kv("other", 2), #{changed: true});
    assert_eq(bao_policy_write("p", "path \"x\" { capabilities = [\"read\"] }"), #{changed: true});
    assert(bao_read("app/config").key == "old", "reads work in check mode");
});
"#,
        ),
        &server,
    );
    test.run(&["--check", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        check mode: nothing will be changed
        [1/1] Write ...
            ~ would write secret secret/app/config (version 2)
            ~ would delete latest version of secret secret/app/config
            ~ would mount kv version 2 at other/
            ~ would write policy p
        [1/1] Write ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): Write: changed 4>
        ",
        ),
        "",
    );
    assert_eq!(
        current_version(&server, "secret/app/config"),
        1,
        "check mode wrote a version"
    );
    assert!(
        server
            .cli("root", &["kv", "get", "-field=key", "secret/app/config"])
            .starts_with("old")
    );
    assert!(
        !server.cli("root", &["secrets", "list"]).contains("other/"),
        "check mode mounted"
    );
    assert!(
        !server.cli("root", &["policy", "list"]).contains("\np\n"),
        "check mode wrote a policy"
    );
}

#[test]
fn concurrent_writers_of_the_same_content_make_one_version() {
    let server = BaoServer::dev();
    let test = with_dev(
        repo().script(
            r#"step("Race", || {
    let results = parallel([1, 2, 3, 4, 5, 6, 7, 8], |n| bao_write("race/same", #{token: "identical"}), 8);
    let changed = results.filter(|r| r.changed);
    assert_eq(changed.len(), 1);
});
"#,
        ),
        &server,
    );
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Race", "changed 1"), "");
    assert_eq!(current_version(&server, "secret/race/same"), 1);
}

#[test]
fn concurrent_writers_of_different_content_lose_no_update() {
    let server = BaoServer::dev();
    let test = with_dev(
        repo().script(
            r#"step("Race", || {
    let results = parallel(["alpha", "beta"], |value| bao_write("race/different", #{value: value}), 2);
    assert_eq(results.filter(|r| r.changed).len(), 2);
});
"#,
        ),
        &server,
    );
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Race", "changed 2"), "");
    assert_eq!(current_version(&server, "secret/race/different"), 2);
    let mut values: Vec<String> = (1..=2)
        .map(|version| {
            server
                .cli(
                    "root",
                    &[
                        "kv",
                        "get",
                        &format!("-version={version}"),
                        "-field=value",
                        "secret/race/different",
                    ],
                )
                .trim()
                .to_string()
        })
        .collect();
    values.sort();
    assert_eq!(
        values,
        ["alpha", "beta"],
        "each writer's content is a version of its own"
    );
}

#[test]
fn the_life_cycle_init_unseal_seal_restart_keeps_the_data() {
    let data = tempfile::tempdir().expect("raft data");
    let mut server = BaoServer::raft(data.path());
    let test = repo()
        .script(
            r#"
step("Status", || {
    let status = bao_status();
    assert_eq(status.initialized, args.initialized == "yes");
    assert_eq(status.sealed, args.sealed == "yes");
});
step("Init", || {
    let init = bao_init(#{shares: 3, threshold: 2});
    assert_eq(init.changed, args.initialized != "yes");
    if init.changed { assert_eq(type_of(init.root_token), "Secret") }
});
step("Unseal", || {
    let unsealed = bao_unseal();
    assert_eq(unsealed.changed, args.sealed != "no");
    assert_eq(bao_health().sealed, false);
});
step("Use", || {
    bao_enable_kv("secret", 2);
    let written = bao_write("gitlab/bootstrap/admin_token", #{token: "glpat-lifecycle-0000"});
    assert_eq(written.changed, args.written != "yes");
    assert(bao_read("gitlab/bootstrap/admin_token").token == "glpat-lifecycle-0000", "data survives");
});
step("Seal", || {
    if args.seal == true {
        assert_eq(bao_seal(), #{changed: true});
        assert_eq(bao_seal(), #{changed: false});
        assert_eq(bao_status().sealed, true);
    }
});
"#,
        )
        .env("BAO_ADDR", &server.address);

    // `bprun {options} scripts/test.rhai` with the script's expectations (`yes` or `no`) and
    // its `--seal` when `seal`.
    let run = |options: &[&str], initialized: &str, sealed: &str, written: &str, seal: bool| {
        let mut args = options.to_vec();
        args.extend(["scripts/test.rhai", "--initialized", initialized]);
        args.extend(["--sealed", sealed, "--written", written]);
        if seal {
            args.push("--seal");
        }
        test.run(&args)
    };
    // Fresh server: init (3 shares, threshold 2) writes the file, unseal uses two keys.
    let first = run(&[], "no", "yes", "no", false);
    first.code(0);
    let file = test.join("infra/secrets/openbao-init.json");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file)
            .expect("init file")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let init_text = test.read("infra/secrets/openbao-init.json");
    let init: serde_json::Value = serde_json::from_str(&init_text).expect("init JSON");
    assert_eq!(init["keys"].as_array().map(Vec::len), Some(3));
    assert_eq!(init["keys_base64"].as_array().map(Vec::len), Some(3));
    assert_eq!(init["unseal_threshold"], 2);
    let root_token = init["root_token"].as_str().expect("root token").to_string();
    assert!(root_token.starts_with("s."), "{root_token}");
    let mut secrets: Vec<String> = init["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .chain(init["keys_base64"].as_array().expect("keys"))
        .map(|k| k.as_str().unwrap_or_default().to_string())
        .collect();
    secrets.push(root_token.clone());

    // Seal, then unseal from the file (the token comes from the init file: no BAO_TOKEN).
    run(&["-q"], "yes", "no", "yes", true).code(0);
    run(&["-q"], "yes", "yes", "yes", false).code(0);

    // Restart the process: it comes back sealed and the data is still there after unsealing.
    server.stop();
    server.start();
    let restarted = run(&["--json"], "yes", "yes", "yes", false);
    restarted.code(0);
    assert_eq!(
        test.read("infra/secrets/openbao-init.json"),
        init_text,
        "a second bao_init touched the file"
    );

    // No key, no root token anywhere in output or the journal.
    let journal = test.read(".bprun/journal/test.json");
    for output in [&first, &restarted] {
        for secret in &secrets {
            output.stdout_lacks(secret).stderr_lacks(secret);
            assert!(
                !journal.contains(secret.as_str()),
                "the journal holds a key or the root token"
            );
        }
    }
}

#[test]
fn bao_init_never_overwrites_an_existing_file() {
    let data = tempfile::tempdir().expect("raft data");
    let server = BaoServer::raft(data.path());
    let test = repo()
        .script("step(\"Init\", || { bao_init(); });\n")
        .file(
            "infra/secrets/openbao-init.json",
            "{\"keys\": [\"from an earlier cluster\"]}\n",
        )
        .env("BAO_ADDR", &server.address);
    let test = test.replace(&server.address, "<bao>");
    test.run(&["-q", "scripts/test.rhai"])
        .expect(
            1,
            &one_step_run("Init", "failed"),
            r#"
            error: step "Init" failed
              × bao_init: refusing to overwrite infra/secrets/openbao-init.json: OpenBao at <bao> is uninitialised but the file exists
               ╭─[scripts/test.rhai:1:19]
             1 │ step("Init", || { bao_init(); });
               ·                   ────┬───
               ·                       ╰── failed here
               ╰────
              hint: the file may hold the keys of an earlier OpenBao; move it away (keep a backup) before initialising again
            re-run with --resume to continue from here
            "#,
        );
    assert_eq!(
        test.read("infra/secrets/openbao-init.json"),
        "{\"keys\": [\"from an earlier cluster\"]}\n"
    );
    assert!(
        server
            .cli_any("", &["status", "-format=json"])
            .contains("\"initialized\": false")
    );
}

#[test]
fn check_mode_neither_initialises_nor_writes_the_file() {
    let data = tempfile::tempdir().expect("raft data");
    let server = BaoServer::raft(data.path());
    let test = repo()
        .script("step(\"Init\", || { assert_eq(bao_init().changed, true); });\n")
        .env("BAO_ADDR", &server.address);
    let output = test.run(&["--check", "scripts/test.rhai"]);
    output.code(0).stderr("").partial_stdout(
        &format!(
            "    ~ would initialise openbao {} (1 shares, threshold 1) and write infra/secrets/openbao-init.json\n",
            server.address
        ),
        "`1 shares` is a grammar defect of bprun's (it should say `1 share`): the rest of the \
         output is not pinned on a wrong line",
    );
    assert!(!test.join("infra/secrets/openbao-init.json").exists());
}

/// Runs a step that reads `gitlab/bootstrap/admin_token` and fails; `<bao>` stands for the
/// server's address in its output.
fn failing_read(test: Test, address: &str) -> crate::support::Output {
    test.script("step(\"Read\", || {\n    bao_read(\"gitlab/bootstrap/admin_token\");\n});\n")
        .replace(address, "<bao>")
        .run(&["-q", "scripts/test.rhai"])
}

/// How a failed read of `failing_read` ends: stdout's recap and stderr's report of `error`
/// with `hint`.
fn expect_read_failure(output: &crate::support::Output, error: &str, hint: &str) {
    output.expect(
        1,
        &one_step_run("Read", "failed"),
        &format!(
            r#"
            error: step "Read" failed
              × {error}
               ╭─[scripts/test.rhai:2:5]
             1 │ step("Read", || {{
             2 │     bao_read("gitlab/bootstrap/admin_token");
               ·     ────┬───
               ·         ╰── failed here
             3 │ }});
               ╰────
              hint: {hint}
            re-run with --resume to continue from here
            "#
        ),
    );
}

#[test]
fn errors_name_the_address_and_carry_a_hint() {
    let server = BaoServer::dev();
    // A wrong token.
    let output = failing_read(
        repo()
            .env("BAO_ADDR", &server.address)
            .env("BAO_TOKEN", "not-a-real-token"),
        &server.address,
    );
    expect_read_failure(
        &output,
        "openbao <bao>: GET secret/data/gitlab/bootstrap/admin_token -> 403: permission denied",
        "the token is invalid or expired: set BAO_TOKEN, or keep the root token in the init file",
    );
    // A token whose policies do not allow the path.
    let limited = server.cli(
        "root",
        &["token", "create", "-policy=default", "-field=token"],
    );
    let output = failing_read(
        repo()
            .env("BAO_ADDR", &server.address)
            .env("BAO_TOKEN", limited.trim()),
        &server.address,
    );
    output.code(1).partial_stderr(
        "  hint: the token's policies (default) do not allow this path\n",
        "the error line above it is OpenBao's multi-error text passed through as it is \
         (`403: 1 error occurred:` then a tab and `* permission denied`): a defect of bprun's \
         wording, not pinned",
    );
    // An unknown mount.
    let test =
        with_dev(repo(), &server).script("step(\"Read\", || { bao_read(\"nomount:x/y\"); });\n");
    test.replace(&server.address, "<bao>")
        .run(&["-q", "scripts/test.rhai"])
        .expect(
            1,
            &one_step_run("Read", "failed"),
            r#"
            error: step "Read" failed
              × openbao <bao>: no KV mount `nomount` (reading nomount/x/y)
               ╭─[scripts/test.rhai:1:19]
             1 │ step("Read", || { bao_read("nomount:x/y"); });
               ·                   ────┬───
               ·                       ╰── failed here
               ╰────
              hint: enable it with bao_enable_kv("nomount", 2), or address another mount as `mount:path`
            re-run with --resume to continue from here
            "#,
        );
    // Nothing listening.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let output = failing_read(
        repo().env("BAO_ADDR", &closed).env("BAO_TOKEN", "root"),
        &closed,
    );
    expect_read_failure(
        &output,
        "openbao <bao>: GET secret/data/gitlab/bootstrap/admin_token failed: connection refused",
        "is OpenBao running and port-forwarded (kubectl -n openbao port-forward svc/openbao 8200)? BAO_ADDR is <bao>",
    );
}

#[test]
fn a_sealed_server_says_to_unseal() {
    let data = tempfile::tempdir().expect("raft data");
    let server = BaoServer::raft(data.path());
    let init = server.cli(
        "",
        &[
            "operator",
            "init",
            "-key-shares=1",
            "-key-threshold=1",
            "-format=json",
        ],
    );
    let init: serde_json::Value = serde_json::from_str(&init).expect("init JSON");
    let token = init["root_token"].as_str().expect("root token").to_string();
    let output = failing_read(
        repo()
            .env("BAO_ADDR", &server.address)
            .env("BAO_TOKEN", &token),
        &server.address,
    );
    expect_read_failure(
        &output,
        "openbao <bao>: GET secret/data/gitlab/bootstrap/admin_token -> 503: Vault is sealed",
        "OpenBao is sealed: run bao_unseal() (it reads the unseal keys from infra/secrets/openbao-init.json)",
    );
    output.stderr_lacks(&token);
}

#[test]
fn tls_needs_the_ca_file_and_names_it() {
    let port = free_port();
    let home = tempfile::tempdir().expect("home");
    let certs = home.path().join("certs");
    std::fs::create_dir_all(&certs).expect("certs");
    let mut child = std::process::Command::new(crate::support::bao_binary())
        .args([
            "server",
            "-dev",
            "-dev-tls",
            &format!("-dev-tls-cert-dir={}", certs.display()),
            "-dev-root-token-id=root",
            &format!("-dev-listen-address=127.0.0.1:{port}"),
        ])
        .env("HOME", home.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start bao -dev-tls");
    let address = format!("https://127.0.0.1:{port}");
    let ca = certs.join("vault-ca.pem");
    let script = "step(\"Status\", || { assert_eq(bao_status().initialized, true); });\n";
    // Wait (bounded) for the TLS listener, using bprun itself with the right CA.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let good = repo()
        .script(script)
        .env("BAO_ADDR", &address)
        .env("BAO_CACERT", ca.to_str().expect("utf-8"));
    loop {
        if ca.exists() && good.run(&["-q", "scripts/test.rhai"]).code == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "bao -dev-tls did not come up"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let bad = repo().script(script).env("BAO_ADDR", &address);
    let output = bad.run(&["-q", "scripts/test.rhai"]);
    let _ = child.kill();
    let _ = child.wait();
    let output = output.replace(&address, "<bao>");
    output
        .code(1)
        .stderr(
            r#"
            error: step "Status" failed
              × openbao <bao>: GET sys/seal-status failed: TLS failure: invalid peer certificate: UnknownIssuer
               ╭─[scripts/test.rhai:1:31]
             1 │ step("Status", || { assert_eq(bao_status().initialized, true); });
               ·                               ─────┬────
               ·                                    ╰── failed here
               ╰────
              hint: no CA file was set: BAO_CACERT names the platform CA (infra/tls/wildcard/ca.pem)
            re-run with --resume to continue from here
            "#,
        )
        .partial_stdout(
            "[1/1] Status ... failed (#.## s)\n",
            "the step retries for seconds, and its time sets the width of the recap's columns",
        );
}

#[test]
fn writers_in_separate_processes_are_kept_apart_by_check_and_set() {
    let server = BaoServer::dev();
    server.cli("root", &["kv", "put", "secret/race/processes", "token=old"]);
    let test = with_dev(
        repo()
            .script("step(\"Write\", || { bao_write(\"race/processes\", #{token: \"new\"}); });\n"),
        &server,
    );
    // Four processes at once: each reads version 1 and writes with cas=1; one wins, the others
    // lose the check-and-set, re-read, find the content current and change nothing.
    let children: Vec<_> = (0..4)
        .map(|_| {
            test.command(&["-q", "scripts/test.rhai"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn bprun")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("wait").success());
    }
    assert_eq!(current_version(&server, "secret/race/processes"), 2);
    let journal: serde_json::Value =
        serde_json::from_str(&test.read(".bprun/journal/test.json")).expect("journal");
    let changed = journal["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|run| run["steps"][0]["status"] == "changed")
        .count();
    assert_eq!(changed, 1, "exactly one process wrote");
}

/// `bao_list("")` lists the root of the default mount and `kv:` another mount's, as
/// `bao kv list secret/` does.
#[test]
fn a_mounts_root_is_listed() {
    let server = BaoServer::dev();
    let test = with_dev(
        repo().script(
            r#"
step("Roots", || {
    bao_write("gitlab/runner/token", #{token: "x"});
    bao_write("platform", #{a: "1"});
    bao_enable_kv("apps", 2);
    bao_write("apps:team/x", #{a: "1"});
    info(`${bao_list("")} ${bao_list("/")} ${bao_list("apps:")}`);
});
"#,
        ),
        &server,
    );
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            r#"
[1/1] Roots ...
    ~ write secret secret/gitlab/runner/token (version 1)
    ~ write secret secret/platform (version 1)
    ~ mount kv version 2 at apps/
    ~ write secret apps/team/x (version 1)
    ["gitlab/", "platform"] ["gitlab/", "platform"] ["team/"]
[1/1] Roots ... changed (#.## s)

<recap of scripts/test.rhai: Roots: changed 4>
"#,
        ),
        "",
    );
}

/// A loopback proxy in front of `upstream` that passes each HTTP/1.1 request on (a connection
/// of its own, `Connection: close`) and answers it, except the first KV write
/// (`POST /v1/secret/data/...`): that one reaches OpenBao, but its connection is closed before
/// the answer comes back, as when a port-forward drops. Serves a bounded number of connections.
fn dropping_first_write_answer(upstream: String) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let address = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        let mut dropped = false;
        for client in listener.incoming().take(32) {
            let Ok(client) = client else { continue };
            let _ = client.set_read_timeout(Some(std::time::Duration::from_secs(10)));
            let mut reader = BufReader::new(client.try_clone().expect("clone"));
            let mut client = client;
            'request: {
                let mut head = Vec::new();
                let mut length = 0usize;
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(value) = lower.strip_prefix("content-length:") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    if !lower.starts_with("connection:") {
                        head.extend_from_slice(line.as_bytes());
                    }
                }
                if head.is_empty() {
                    break 'request;
                }
                let mut body = vec![0u8; length];
                if reader.read_exact(&mut body).is_err() {
                    break 'request;
                }
                let is_write = head.starts_with(b"POST /v1/secret/data/");
                let mut server = std::net::TcpStream::connect(&upstream).expect("upstream");
                let _ = server.write_all(&head);
                let _ = server.write_all(b"Connection: close\r\n\r\n");
                let _ = server.write_all(&body);
                let mut answer = Vec::new();
                let _ = server.read_to_end(&mut answer);
                if is_write && !dropped {
                    dropped = true;
                    break 'request;
                }
                let _ = client.write_all(&answer);
            }
            let _ = client.shutdown(std::net::Shutdown::Both);
        }
    });
    address
}

/// A KV write whose answer is lost (the connection closes after OpenBao took it) is read back:
/// the version after the one read holds what was written, so it is this write's, reported
/// changed once, and no second version is written; a re-run changes nothing.
#[test]
fn a_write_whose_answer_is_lost_is_read_back_and_not_written_twice() {
    let server = BaoServer::dev();
    let upstream = server.address.trim_start_matches("http://").to_string();
    let test = repo()
        .script("step(\"Write\", || { bao_write(\"lost/answer\", #{a: \"1\"}); });\n")
        .env("BAO_ADDR", dropping_first_write_answer(upstream))
        .env("BAO_TOKEN", "root");
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
            [1/1] Write ...
                ~ write secret secret/lost/answer (version 1)
            [1/1] Write ... changed (#.## s)

            <recap of scripts/test.rhai: Write: changed 1>
            ",
        ),
        "",
    );
    assert_eq!(current_version(&server, "secret/lost/answer"), 1);
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Write", "ok"), "");
    assert_eq!(current_version(&server, "secret/lost/answer"), 1);
}
