//! `bprun sim all` as tests and benchmarks use it: the real binary in its own process, its
//! printed environment, raw HTTP to its GitLab simulator and OpenBao, stopped with SIGTERM
//! (it then stops OpenBao by its pid). Shared by tests/integration/phase3.rs and
//! benches/phase3.rs.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BPRUN: &str = env!("CARGO_BIN_EXE_bprun");

/// The projects phase 3 provisions.
pub const PROJECTS: [&str; 4] = ["shared-code", "guestbook", "redis", "redis-slave"];

/// A copy of the repository's scripts and content (what phase 3 reads), with a `.git` marker.
pub fn repository_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("copy");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for folder in ["scripts", "apps", "templates", "infra"] {
        let status = Command::new("cp")
            .arg("-a")
            .arg(root.join(folder))
            .arg(dir.path())
            .status()
            .expect("cp");
        assert!(status.success());
    }
    std::fs::create_dir(dir.path().join(".git")).expect(".git");
    dir
}

/// `bprun sim all` in its own process, stopped with SIGTERM (it stops OpenBao by its pid).
pub struct SimAll {
    child: Child,
    pub env: Vec<(String, String)>,
    _state: tempfile::TempDir,
}

impl SimAll {
    pub fn start() -> SimAll {
        let state = tempfile::tempdir().expect("state");
        let mut child = Command::new(BPRUN)
            .args(["sim", "all", "--pipeline-seconds", "0.3", "--state"])
            .arg(state.path())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start bprun sim all");
        let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut env = Vec::new();
        while env.len() < 6 {
            let mut line = String::new();
            assert!(
                reader.read_line(&mut line).expect("read") > 0,
                "sim all ended early"
            );
            let (key, value) = line.trim().split_once('=').expect("KEY=value");
            env.push((key.to_string(), value.to_string()));
        }
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
        });
        SimAll {
            child,
            env,
            _state: state,
        }
    }

    pub fn var(&self, key: &str) -> &str {
        &self
            .env
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{key} not printed"))
            .1
    }

    pub fn gitlab(&self, method: &str, path: &str) -> (u16, String) {
        let token = self.var("GITLAB_TOKEN").to_string();
        http(
            method,
            &format!("{}{path}", self.var("GITLAB_URL")),
            &[("PRIVATE-TOKEN", &token)],
        )
    }

    pub fn gitlab_json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.gitlab("GET", &format!("/api/v4/{path}"));
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).expect("json")
    }

    pub fn bao(&self, path: &str) -> (u16, serde_json::Value) {
        let token = self.var("BAO_TOKEN").to_string();
        let (status, body) = http(
            "GET",
            &format!("{}/v1/{path}", self.var("BAO_ADDR")),
            &[("X-Vault-Token", &token)],
        );
        (
            status,
            serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    pub fn mutating_requests(&self) -> u64 {
        let (_, body) = self.gitlab("GET", "/-/sim/requests");
        let value: serde_json::Value = serde_json::from_str(&body).expect("requests");
        value["mutating"].as_u64().expect("mutating")
    }

    /// Per project: variable keys (sorted, duplicates kept) and the CI file's content.
    pub fn summary(&self) -> BTreeMap<String, (Vec<String>, String)> {
        let groups = self.gitlab_json("groups?search=blueprint-apps");
        let Some(group) = groups.as_array().and_then(|g| g.first()) else {
            return BTreeMap::new();
        };
        let projects = self.gitlab_json(&format!("groups/{}/projects?per_page=100", group["id"]));
        let mut summary = BTreeMap::new();
        for project in projects.as_array().expect("projects") {
            let id = &project["id"];
            let variables = self.gitlab_json(&format!("projects/{id}/variables?per_page=100"));
            let mut keys: Vec<String> = variables
                .as_array()
                .expect("variables")
                .iter()
                .map(|v| v["key"].as_str().unwrap_or("").to_string())
                .collect();
            keys.sort();
            let (_, ci) = self.gitlab(
                "GET",
                &format!("/api/v4/projects/{id}/repository/files/.gitlab-ci.yml/raw?ref=main"),
            );
            let name = project["path"].as_str().unwrap_or("").to_string();
            assert!(
                summary.insert(name.clone(), (keys, ci)).is_none(),
                "duplicate project {name}"
            );
        }
        summary
    }

    pub fn heads(&self) -> Vec<String> {
        PROJECTS
            .iter()
            .map(|name| {
                let branch = self.gitlab_json(&format!(
                    "projects/blueprint-apps%2F{name}/repository/branches/main"
                ));
                branch["commit"]["id"].as_str().unwrap_or("").to_string()
            })
            .collect()
    }
}

impl Drop for SimAll {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request on loopback (`Connection: close`), bounded by a 10 s timeout.
pub fn http(method: &str, url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Content-Length: 0\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (status, body)
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}
