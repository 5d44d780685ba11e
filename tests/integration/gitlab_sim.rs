//! The GitLab simulator as the tests use it: the real `bprun sim gitlab` process on a free
//! loopback port, killed by its process id when dropped, plus a minimal raw HTTP client for
//! contract checks (status line, headers and body exactly as sent).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const TOKEN: &str = "glpat-test-admin-token-0001";

pub struct GitlabSim {
    child: Child,
    pub url: String,
    /// Kept open for the simulator's lifetime.
    _stdout: BufReader<std::process::ChildStdout>,
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

impl GitlabSim {
    pub fn start(extra: &[&str]) -> GitlabSim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bprun"))
            .args([
                "sim",
                "gitlab",
                "--listen",
                "127.0.0.1:0",
                "--token",
                TOKEN,
                "--pipeline-seconds",
                "0.6",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start bprun sim gitlab");
        let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        reader.read_line(&mut line).expect("read GITLAB_URL");
        let url = line
            .trim()
            .strip_prefix("GITLAB_URL=")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let mut token_line = String::new();
        reader
            .read_line(&mut token_line)
            .expect("read GITLAB_TOKEN");
        assert_eq!(token_line.trim(), format!("GITLAB_TOKEN={TOKEN}"));
        GitlabSim {
            child,
            url,
            _stdout: reader,
        }
    }

    /// One raw request (HTTP/1.1, `Connection: close`), with the admin token unless `token` is None.
    pub fn raw(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Reply {
        let host = self.url.trim_start_matches("http://");
        let mut stream = TcpStream::connect(host).expect("connect to the simulator");
        stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if let Some(token) = token {
            request.push_str(&format!("PRIVATE-TOKEN: {token}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Reply {
            status,
            headers,
            body: body.to_string(),
        }
    }

    pub fn api(&self, method: &str, path: &str, body: Option<&str>) -> Reply {
        self.raw(method, &format!("/api/v4/{path}"), Some(TOKEN), body)
    }

    /// The simulator's request log and counters.
    pub fn requests(&self) -> serde_json::Value {
        self.raw("GET", "/-/sim/requests", None, None).json()
    }

    pub fn clear_requests(&self) {
        self.raw("DELETE", "/-/sim/requests", None, None);
    }

    pub fn set_faults(&self, faults: &str) {
        let reply = self.raw("PUT", "/-/sim/faults", None, Some(faults));
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
}

impl Drop for GitlabSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
