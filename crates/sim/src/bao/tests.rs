//! The stand-in driven over HTTP by bprun's OpenBao client, answer by answer as OpenBao gives them.

use super::kv1::KV1_LEASE_SECONDS;
use super::*;
use bprun_clients::bao::{BaoClient, BaoSettings, InitResponse, KvPath};
use bprun_clients::reconcile::Mode;

const TOKEN: &str = "root-test-token";

fn client(running: &Running, token: &str) -> BaoClient {
    BaoClient::new(BaoSettings {
        address: running.url.clone(),
        token: Some(bprun_clients::secret::Secret::new(token)),
        ca_cert: None,
        skip_verify: false,
        timeout: Duration::from_secs(10),
        init_file: std::path::PathBuf::from("/nonexistent/openbao-init.json"),
    })
}

fn path(text: &str) -> KvPath {
    KvPath::parse(text, None).expect("valid KV path")
}

fn data(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), json!(value)))
        .collect()
}

/// One raw request: status and body (JSON, or `null` when empty).
fn call(
    running: &Running,
    method: &str,
    route: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Value) {
    let url = format!("{}{route}", running.url);
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let body = body.map(str::to_string);
    bprun_clients::runtime::runtime().block_on(async move {
        let client = bprun_clients::runtime::http_client_builder()
            .build()
            .expect("client");
        let mut request = client.request(method, url);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.expect("answer");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, value)
    })
}

fn root(running: &Running, method: &str, route: &str, body: Option<&str>) -> (u16, Value) {
    call(running, method, route, &[("X-Vault-Token", TOKEN)], body)
}

fn mutating(running: &Running) -> usize {
    lock(&running.sim.accounting().log)
        .iter()
        .filter(|entry| matches!(entry.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .count()
}

#[test]
fn kv_life_cycle_through_bprun_client() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    let bao = client(&running, TOKEN);
    let secret = path("gitlab/bootstrap/admin_token");

    let missing = bao.kv_read(&secret).expect("read missing");
    assert_eq!((missing.data, missing.version), (None, 0));
    assert!(bao.kv_list(&path("gitlab")).expect("list").is_empty());

    let first = data(&[("token", "glpat-one"), ("user", "root")]);
    let written = bao.kv_write(&secret, &first, Mode::Apply).expect("write");
    assert_eq!((written.changed(), written.value), (true, 1));
    let before = mutating(&running);
    let again = bao
        .kv_write(&secret, &first, Mode::Apply)
        .expect("write again");
    assert_eq!((again.changed(), again.value), (false, 1));
    assert_eq!(
        mutating(&running),
        before,
        "the same content is not written again"
    );

    let second = data(&[("token", "glpat-two"), ("user", "root")]);
    let written = bao
        .kv_write(&secret, &second, Mode::Apply)
        .expect("write different");
    assert_eq!((written.changed(), written.value), (true, 2));
    let read = bao.kv_read(&secret).expect("read");
    assert_eq!(read.version, 2);
    assert_eq!(read.data, Some(second));

    let patched = bao
        .kv_patch(&secret, &data(&[("user", "admin")]), Mode::Apply)
        .expect("patch")
        .expect("a secret to patch");
    assert_eq!((patched.changed(), patched.value), (true, 3));
    let read = bao.kv_read(&secret).expect("read patched");
    assert_eq!(
        read.data,
        Some(data(&[("token", "glpat-two"), ("user", "admin")]))
    );
    let nothing = bao
        .kv_patch(&path("gitlab/none"), &data(&[("a", "b")]), Mode::Apply)
        .expect("patch nothing");
    assert!(nothing.is_none(), "nothing to patch at secret/gitlab/none");

    bao.kv_write(&path("gitlab/runner"), &data(&[("t", "1")]), Mode::Apply)
        .expect("write a sibling");
    assert_eq!(
        bao.kv_list(&path("gitlab")).expect("list"),
        vec!["bootstrap/".to_string(), "runner".to_string()]
    );
    assert_eq!(
        bao.kv_list(&path("gitlab/bootstrap")).expect("list"),
        vec!["admin_token".to_string()]
    );

    assert!(
        bao.kv_delete(&secret, Mode::Apply)
            .expect("delete")
            .changed()
    );
    assert!(
        !bao.kv_delete(&secret, Mode::Apply)
            .expect("delete again")
            .changed()
    );
    let deleted = bao.kv_read(&secret).expect("read deleted");
    assert_eq!((deleted.data, deleted.version), (None, 3));
    // A write after a delete continues the version history (check-and-set on 3).
    let written = bao
        .kv_write(&secret, &data(&[("token", "again")]), Mode::Apply)
        .expect("write after delete");
    assert_eq!((written.changed(), written.value), (true, 4));

    assert!(
        bao.kv_destroy(&secret, Mode::Apply)
            .expect("destroy")
            .changed()
    );
    assert!(
        !bao.kv_destroy(&secret, Mode::Apply)
            .expect("destroy again")
            .changed()
    );
    let destroyed = bao.kv_read(&secret).expect("read destroyed");
    assert_eq!((destroyed.data, destroyed.version), (None, 0));
    assert!(
        bao.kv_list(&path("gitlab/bootstrap"))
            .expect("list")
            .is_empty()
    );
}

#[test]
fn check_and_set_conflicts_use_openbao_s_words() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    let write = |body: &str| root(&running, "POST", "/v1/secret/data/app/x", Some(body));
    let (status, answer) = write(r#"{"data":{"a":"1"},"options":{"cas":0}}"#);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["version"], 1);
    assert_eq!(answer["data"]["deletion_time"], "");
    for stale in [
        r#"{"data":{"a":"2"},"options":{"cas":0}}"#,
        r#"{"data":{"a":"2"},"options":{"cas":5}}"#,
    ] {
        let (status, answer) = write(stale);
        assert_eq!(status, 400);
        assert_eq!(
            answer,
            json!({"errors": ["check-and-set parameter did not match the current version"]})
        );
    }
    let (status, _) = write(r#"{"data":{"a":"2"},"options":{"cas":1}}"#);
    assert_eq!(status, 200);
    let (status, answer) = write(r#"{"data":{"a":"3"},"options":{"cas":"x"}}"#);
    assert_eq!(
        (status, answer),
        (
            400,
            json!({"errors": ["error parsing check-and-set parameter"]})
        )
    );
    let (status, answer) = write(r#"{"nodata":1}"#);
    assert_eq!(
        (status, answer),
        (400, json!({"errors": ["no data provided"]}))
    );

    // Through vaultrs, as bprun's client sends it: the error bprun matches on.
    let bao = client(&running, TOKEN);
    let vault = vaultrs::client::VaultClient::new(
        vaultrs::client::VaultClientSettingsBuilder::default()
            .address(running.url.as_str())
            .token(TOKEN)
            .build()
            .expect("settings"),
    )
    .expect("vault client");
    let result = bprun_clients::runtime::runtime().block_on(vaultrs::kv2::set_with_options(
        &vault,
        "secret",
        "app/x",
        &data(&[("a", "4")]),
        vaultrs::api::kv2::requests::SetSecretRequestOptions { cas: 1 },
    ));
    let error = result.expect_err("stale check-and-set");
    let message = bao.describe(error, "POST secret/data/app/x").message;
    assert!(
        message.ends_with("-> 400: check-and-set parameter did not match the current version"),
        "{message}"
    );
}

#[test]
fn reads_versions_patches_and_deletes_answer_like_openbao() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    root(
        &running,
        "POST",
        "/v1/secret/data/p",
        Some(r#"{"data":{"a":"1","b":"2"}}"#),
    );
    root(
        &running,
        "PUT",
        "/v1/secret/data/p",
        Some(r#"{"data":{"a":"9"}}"#),
    );

    let (status, answer) = root(&running, "GET", "/v1/secret/data/p?version=1", None);
    assert_eq!(status, 200);
    assert_eq!(answer["data"]["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(answer["data"]["metadata"]["version"], 1);
    for field in [
        "request_id",
        "lease_id",
        "renewable",
        "lease_duration",
        "wrap_info",
        "warnings",
        "auth",
    ] {
        assert!(answer.get(field).is_some(), "{field} missing: {answer}");
    }
    assert_eq!(
        root(&running, "GET", "/v1/secret/data/p?version=7", None),
        (404, json!({"errors": []}))
    );
    assert_eq!(
        root(&running, "GET", "/v1/secret/data/none", None),
        (404, json!({"errors": []}))
    );
    let (status, answer) = root(&running, "GET", "/v1/secret/data/p?version=abc", None);
    assert_eq!(status, 400, "{answer}");

    // Merge patch: null removes a key; the content type is required.
    let merge = [
        ("X-Vault-Token", TOKEN),
        ("Content-Type", "application/merge-patch+json"),
    ];
    let (status, answer) = call(
        &running,
        "PATCH",
        "/v1/secret/data/p",
        &merge,
        Some(r#"{"data":{"c":"3","a":null}}"#),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["version"], 3);
    let (_, answer) = root(&running, "GET", "/v1/secret/data/p", None);
    assert_eq!(answer["data"]["data"], json!({"c": "3"}));
    let json_type = [
        ("X-Vault-Token", TOKEN),
        ("Content-Type", "application/json"),
    ];
    let (status, answer) = call(
        &running,
        "PATCH",
        "/v1/secret/data/p",
        &json_type,
        Some(r#"{"data":{}}"#),
    );
    assert_eq!(status, 415);
    assert_eq!(
        answer,
        json!({"errors": ["PATCH requires Content-Type of application/merge-patch+json, provided application/json"]})
    );
    let (status, answer) = call(
        &running,
        "PATCH",
        "/v1/secret/data/none",
        &merge,
        Some(r#"{"data":{"c":"3"}}"#),
    );
    assert_eq!((status, answer), (404, Value::Null));

    // Soft delete: 204, then a 404 that still carries the version's metadata.
    assert_eq!(
        root(&running, "DELETE", "/v1/secret/data/p", None),
        (204, Value::Null)
    );
    let (status, answer) = root(&running, "GET", "/v1/secret/data/p", None);
    assert_eq!(status, 404);
    assert_eq!(answer["data"]["data"], Value::Null);
    assert_eq!(answer["data"]["metadata"]["version"], 3);
    assert_ne!(answer["data"]["metadata"]["deletion_time"], "");
    assert!(answer.get("errors").is_none());
    let (status, metadata) = root(&running, "GET", "/v1/secret/metadata/p", None);
    assert_eq!(status, 200);
    assert_eq!(metadata["data"]["current_version"], 3);
    assert_eq!(metadata["data"]["oldest_version"], 0);
    assert_eq!(
        metadata["data"]["versions"].as_object().map(Map::len),
        Some(3)
    );
    assert_ne!(metadata["data"]["versions"]["3"]["deletion_time"], "");
    assert_eq!(metadata["data"]["versions"]["2"]["deletion_time"], "");

    // Undelete and destroy single versions.
    assert_eq!(
        root(
            &running,
            "POST",
            "/v1/secret/undelete/p",
            Some(r#"{"versions":[3]}"#)
        )
        .0,
        204
    );
    assert_eq!(root(&running, "GET", "/v1/secret/data/p", None).0, 200);
    assert_eq!(
        root(
            &running,
            "POST",
            "/v1/secret/destroy/p",
            Some(r#"{"versions":[1]}"#)
        )
        .0,
        204
    );
    let (status, answer) = root(&running, "GET", "/v1/secret/data/p?version=1", None);
    assert_eq!(status, 404);
    assert_eq!(answer["data"]["metadata"]["destroyed"], true);

    // Listing: LIST and GET ?list=true; folders end with a slash; nothing is a 404.
    root(
        &running,
        "POST",
        "/v1/secret/data/p/q",
        Some(r#"{"data":{"x":"1"}}"#),
    );
    let (status, answer) = root(&running, "LIST", "/v1/secret/metadata/", None);
    assert_eq!(status, 200);
    assert_eq!(answer["data"]["keys"], json!(["p", "p/"]));
    let (_, answer) = root(&running, "GET", "/v1/secret/metadata/p?list=true", None);
    assert_eq!(answer["data"]["keys"], json!(["q"]));
    assert_eq!(
        root(&running, "LIST", "/v1/secret/metadata/nothing", None),
        (404, json!({"errors": []}))
    );
    assert_eq!(
        root(&running, "LIST", "/v1/nomount/metadata/x", None),
        (
            404,
            json!({"errors": ["no handler for route \"nomount/metadata/x/\". route entry not found."]})
        )
    );

    // Destroying the metadata forgets the key.
    assert_eq!(
        root(&running, "DELETE", "/v1/secret/metadata/p", None),
        (204, Value::Null)
    );
    assert_eq!(
        root(&running, "GET", "/v1/secret/metadata/p", None),
        (404, json!({"errors": []}))
    );
    assert_eq!(
        root(&running, "DELETE", "/v1/secret/metadata/p", None).0,
        204
    );
}

#[test]
fn only_ten_versions_are_kept() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    for n in 1..=12 {
        let body = format!(r#"{{"data":{{"n":"{n}"}}}}"#);
        assert_eq!(
            root(&running, "POST", "/v1/secret/data/many", Some(&body)).0,
            200
        );
    }
    let (_, metadata) = root(&running, "GET", "/v1/secret/metadata/many", None);
    assert_eq!(metadata["data"]["current_version"], 12);
    assert_eq!(metadata["data"]["oldest_version"], 3);
    assert_eq!(
        metadata["data"]["versions"].as_object().map(Map::len),
        Some(10)
    );
    assert_eq!(
        root(&running, "GET", "/v1/secret/data/many?version=2", None).0,
        404
    );
}

#[test]
fn mounts_enable_kv_and_answer_their_config() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    let bao = client(&running, TOKEN);
    assert_eq!(
        bao.mount("secret").expect("mounts"),
        Some(("kv".to_string(), "2".to_string()))
    );
    assert_eq!(bao.mount("apps").expect("mounts"), None);
    bao.enable_kv("apps", 2).expect("enable kv v2");
    assert_eq!(
        bao.mount("apps").expect("mounts"),
        Some(("kv".to_string(), "2".to_string()))
    );
    let (status, config) = root(&running, "GET", "/v1/apps/config", None);
    assert_eq!(status, 200);
    assert_eq!(
        config["data"],
        json!({"cas_required": false, "delete_version_after": "0s", "max_versions": 0, "metadata_cas_required": false})
    );
    let error = bao.enable_kv("apps", 2).expect_err("already mounted");
    assert!(
        error
            .message
            .ends_with("-> 400: path is already in use at apps/"),
        "{}",
        error.message
    );

    bao.enable_kv("legacy", 1).expect("enable kv v1");
    assert_eq!(
        bao.mount("legacy").expect("mounts"),
        Some(("kv".to_string(), "1".to_string()))
    );
    assert_eq!(root(&running, "GET", "/v1/legacy/config", None).0, 404);
    assert_eq!(
        root(&running, "PUT", "/v1/legacy/k", Some(r#"{"a":"1"}"#)).0,
        204
    );
    let (status, answer) = root(&running, "GET", "/v1/legacy/k", None);
    assert_eq!(status, 200);
    assert_eq!(answer["data"], json!({"a": "1"}));
    assert_eq!(answer["lease_duration"], KV1_LEASE_SECONDS);

    // A KV v2 secret on the new mount, through bprun's `mount:path` addressing.
    let other = KvPath::parse("apps:team/x", None).expect("path");
    assert!(
        bao.kv_write(&other, &data(&[("a", "1")]), Mode::Apply)
            .expect("write")
            .changed()
    );
    let missing = KvPath::parse("nomount:x/y", None).expect("path");
    let error = bao.kv_read(&missing).expect_err("no such mount");
    assert!(
        error.message.contains("no KV mount `nomount`"),
        "{}",
        error.message
    );

    let (status, mounts) = root(&running, "GET", "/v1/sys/mounts", None);
    assert_eq!(status, 200);
    for mount in [
        "cubbyhole/",
        "identity/",
        "sys/",
        "secret/",
        "apps/",
        "legacy/",
    ] {
        assert!(mounts["data"].get(mount).is_some(), "{mount} missing");
        assert!(
            mounts.get(mount).is_some(),
            "{mount} missing at the top level"
        );
    }
    assert_eq!(
        root(
            &running,
            "POST",
            "/v1/sys/mounts/sys",
            Some(r#"{"type":"kv"}"#)
        ),
        (400, json!({"errors": ["cannot mount \"sys/\""]}))
    );
    assert_eq!(
        root(
            &running,
            "POST",
            "/v1/sys/mounts/transit",
            Some(r#"{"type":"transit"}"#)
        )
        .0,
        400
    );
    assert_eq!(
        root(&running, "DELETE", "/v1/sys/mounts/legacy", None).0,
        204
    );
    assert_eq!(bao.mount("legacy").expect("mounts"), None);
}

#[test]
fn a_wrong_token_is_permission_denied() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    let bao = client(&running, "not-the-token");
    let error = bao.kv_read(&path("a/b")).expect_err("denied");
    assert!(
        error
            .message
            .ends_with("GET secret/data/a/b -> 403: permission denied"),
        "{}",
        error.message
    );
    assert_eq!(
        error.hint.as_deref(),
        Some(
            "the token is invalid or expired: set BAO_TOKEN, or keep the root token in the init file"
        )
    );
    assert_eq!(
        call(&running, "GET", "/v1/sys/mounts", &[], None),
        (403, json!({"errors": ["permission denied"]}))
    );
    // Health and seal status need no token.
    assert_eq!(call(&running, "GET", "/v1/sys/health", &[], None).0, 200);
    assert_eq!(
        call(&running, "GET", "/v1/sys/seal-status", &[], None).0,
        200
    );
    // The root token looks itself up.
    let (status, answer) = root(&running, "GET", "/v1/auth/token/lookup-self", None);
    assert_eq!(status, 200);
    assert_eq!(answer["data"]["policies"], json!(["root"]));
    assert_eq!(answer["data"]["id"], TOKEN);
}

#[test]
fn seal_status_seal_and_unseal() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    let bao = client(&running, TOKEN);
    let status = bao.status().expect("status");
    assert!(status.initialized && !status.sealed, "{status:?}");
    assert_eq!(status.version, VERSION);
    bao.wait_active().expect("active");

    bao.seal().expect("seal");
    assert!(bao.status().expect("status").sealed);
    let (status, health) = call(&running, "GET", "/v1/sys/health", &[], None);
    assert_eq!(status, 503);
    assert_eq!(health["sealed"], true);
    let error = bao.kv_read(&path("a/b")).expect_err("sealed");
    assert!(
        error.message.ends_with("-> 503: Vault is sealed"),
        "{}",
        error.message
    );
    assert!(
        error
            .hint
            .as_deref()
            .is_some_and(|hint| hint.starts_with("OpenBao is sealed"))
    );

    let wrong = InitResponse {
        keys: vec![base64::engine::general_purpose::STANDARD.encode([7u8; 32])],
        keys_base64: Vec::new(),
        root_token: TOKEN.to_string(),
        unseal_shares: 1,
        unseal_threshold: 1,
    };
    assert!(bao.unseal(&wrong).is_err());
    let right = InitResponse {
        keys: vec![running.unseal_key()],
        ..wrong
    };
    assert_eq!(bao.unseal(&right).expect("unseal"), 1);
    let status = bao.status().expect("status");
    assert!(!status.sealed);
    assert_eq!(
        call(&running, "GET", "/v1/sys/init", &[], None),
        (200, json!({"initialized": true}))
    );
}

#[test]
fn policies_are_written_once_and_read_back() {
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    let bao = client(&running, TOKEN);
    let hcl = r#"path "secret/data/gitlab/*" { capabilities = ["read"] }"#;
    assert!(
        bao.policy_write("gitlab-read", hcl, Mode::Apply)
            .expect("write")
            .changed()
    );
    assert!(
        !bao.policy_write("gitlab-read", hcl, Mode::Apply)
            .expect("write again")
            .changed()
    );
    let (status, answer) = root(&running, "GET", "/v1/sys/policies/acl/gitlab-read", None);
    assert_eq!(status, 200);
    assert_eq!(answer["data"]["policy"], hcl);
    assert_eq!(answer["data"]["name"], "gitlab-read");
    let (_, legacy) = root(&running, "GET", "/v1/sys/policy/gitlab-read", None);
    assert_eq!(legacy["rules"], hcl);
    assert_eq!(legacy["data"]["rules"], hcl);
    let (_, list) = root(&running, "LIST", "/v1/sys/policies/acl", None);
    assert_eq!(
        list["data"]["keys"],
        json!(["default", "gitlab-read", "root"])
    );
    assert_eq!(
        root(
            &running,
            "PUT",
            "/v1/sys/policies/acl/x",
            Some(r#"{"policy":""}"#)
        ),
        (
            400,
            json!({"errors": ["'policy' parameter not supplied or empty"]})
        )
    );
    assert_eq!(
        root(&running, "GET", "/v1/sys/policies/acl/nope", None),
        (404, json!({"errors": []}))
    );
}

#[test]
fn unclean_paths_redirect_like_go() {
    assert_eq!(clean_path("/v1//sys/policy/p"), "/v1/sys/policy/p");
    assert_eq!(clean_path("/v1/secret/metadata/"), "/v1/secret/metadata/");
    assert_eq!(clean_path("/v1/a/./b/../c"), "/v1/a/c");
    let running = start("127.0.0.1:0", TOKEN).expect("start");
    // reqwest follows the 307 with the method, body and token, as with the real server.
    let (status, _) = root(
        &running,
        "PUT",
        "/v1//sys/policy/p1",
        Some(r#"{"policy":"path \"a\" {}"}"#),
    );
    assert_eq!(status, 204);
    let log = running.sim.accounting().snapshot();
    let statuses: Vec<u64> = log["requests"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e["status"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(statuses, vec![307, 204]);
}

#[test]
fn dropping_the_handle_stops_the_server() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let running = start_on(listener, "").expect("start on a bound listener");
    assert!(running.token.starts_with("s."), "{}", running.token);
    assert_eq!(running.url, format!("http://{address}"));
    assert_eq!(call(&running, "GET", "/v1/sys/health", &[], None).0, 200);
    drop(running);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(address).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "still listening on {address}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(start("0.0.0.0:0", TOKEN).is_err(), "loopback only");
}
