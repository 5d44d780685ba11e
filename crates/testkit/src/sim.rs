//! `bprun sim gitlab|kube|bao|all` as a fixture: the real binary in its own process on free
//! loopback ports, its printed `KEY=value` lines read, stopped by its own process id (SIGTERM,
//! then SIGKILL after 5 s) when dropped. Kind-specific helpers: the GitLab API (raw HTTP), the
//! real kubectl and helm against the Kubernetes simulator, OpenBao reads.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::http::{self, Reply};
use crate::{Bprun, Output, tool};

/// The admin token `Sim::start(SimKind::Gitlab, ..)` gives the GitLab simulator.
pub const GITLAB_TOKEN: &str = "glpat-test-admin-token-0001";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimKind {
    /// `sim gitlab --listen 127.0.0.1:0 --token GITLAB_TOKEN --pipeline-seconds 0.6`:
    /// prints GITLAB_URL, GITLAB_TOKEN. It has no runner, so jobs stay pending: a test that
    /// wants pipelines to run passes `--runner` (and `--runner-tag TAG` for tagged jobs).
    Gitlab,
    /// `sim kube --listen 127.0.0.1:0 --kubeconfig HOME/kubeconfig`: prints KUBE_URL, KUBECONFIG.
    Kube,
    /// `sim bao --listen 127.0.0.1:0`: prints BAO_ADDR, BAO_TOKEN.
    Bao,
    /// `sim all --pipeline-seconds 0.3 --state HOME/state`: prints six variables. The platform
    /// has an online instance runner, as phase 2 leaves it.
    All,
    /// `sim all --platform bare --pipeline-seconds 0.3 --state HOME/state`: a fresh kind
    /// cluster for phase 2 (nodes and CoreDNS only); prints five variables (no OpenBao yet:
    /// BAO_K8S_SERVICE instead of BAO_ADDR and BAO_TOKEN). `All` and `Bare` get
    /// `--node-shared HOME/node-shared` unless the test passes its own (the repository copy's
    /// `infra/data/shared` its scripts run in).
    Bare,
}

impl SimKind {
    fn name(self) -> &'static str {
        match self {
            SimKind::Gitlab => "gitlab",
            SimKind::Kube => "kube",
            SimKind::Bao => "bao",
            SimKind::All | SimKind::Bare => "all",
        }
    }

    /// How many `KEY=value` lines the simulator prints once it serves.
    fn lines(self) -> usize {
        match self {
            SimKind::All => 6,
            SimKind::Bare => 5,
            _ => 2,
        }
    }
}

pub struct Sim {
    kind: SimKind,
    child: Child,
    vars: Vec<(String, String)>,
    /// The simulator's state, and HOME for kubectl and helm.
    home: tempfile::TempDir,
}

impl Sim {
    pub fn start(bprun: Bprun, kind: SimKind, extra: &[&str]) -> Sim {
        let home = tempfile::tempdir().expect("home");
        let mut command = bprun.command();
        command.args(["sim", kind.name()]);
        match kind {
            SimKind::Gitlab => {
                command.args([
                    "--listen",
                    "127.0.0.1:0",
                    "--token",
                    GITLAB_TOKEN,
                    "--pipeline-seconds",
                    "0.6",
                ]);
            }
            SimKind::Kube => {
                command
                    .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
                    .arg(home.path().join("kubeconfig"));
            }
            SimKind::Bao => {
                command.args(["--listen", "127.0.0.1:0"]);
            }
            SimKind::All => {
                command
                    .args(["--pipeline-seconds", "0.3", "--state"])
                    .arg(home.path().join("state"));
            }
            SimKind::Bare => {
                command
                    .args(["--platform", "bare", "--pipeline-seconds", "0.3", "--state"])
                    .arg(home.path().join("state"));
            }
        }
        // The nodes' /var/local/shared: the simulator's own folder unless the test names the
        // repository copy its scripts run in, never the checkout the tests run from.
        if matches!(kind, SimKind::All | SimKind::Bare) && !extra.contains(&"--node-shared") {
            command
                .arg("--node-shared")
                .arg(home.path().join("node-shared"));
        }
        // The repository phase 2 would have left its files in (the wildcard certificate the
        // seeded gateway serves): the simulator's own folder, copied into the repository copies
        // the tests run phase 3 in (`Sim::platform_files`), never the checkout.
        if matches!(kind, SimKind::All) && !extra.contains(&"--repository") {
            command
                .arg("--repository")
                .arg(home.path().join("repository"));
        }
        let mut child = command
            .args(extra)
            .current_dir(crate::root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Kept in a file of the simulator's home: a start that fails says why.
            .stderr(
                std::fs::File::create(home.path().join("sim.stderr"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .spawn()
            .unwrap_or_else(|e| panic!("start bprun sim {}: {e}", kind.name()));
        let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
        let mut vars = Vec::new();
        while vars.len() < kind.lines() {
            let mut line = String::new();
            let read = reader.read_line(&mut line).expect("read a KEY=value line");
            if read == 0 {
                let _ = child.kill();
                let _ = child.wait();
                let said =
                    std::fs::read_to_string(home.path().join("sim.stderr")).unwrap_or_default();
                panic!(
                    "bprun sim {} ended before printing its environment; its stderr:\n{said}",
                    kind.name()
                );
            }
            let (key, value) = line
                .trim()
                .split_once('=')
                .unwrap_or_else(|| panic!("not a KEY=value line: {line}"));
            vars.push((key.to_string(), value.to_string()));
        }
        // Whatever it prints later is read and dropped, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
        });
        let sim = Sim {
            kind,
            child,
            vars,
            home,
        };
        match kind {
            SimKind::Gitlab => {
                assert!(
                    sim.gitlab_url().starts_with("http://127.0.0.1:"),
                    "{}",
                    sim.gitlab_url()
                );
                if !extra.contains(&"--token") {
                    assert_eq!(sim.var("GITLAB_TOKEN"), GITLAB_TOKEN);
                }
            }
            SimKind::Kube => {
                assert!(
                    sim.var("KUBE_URL").starts_with("https://127.0.0.1:"),
                    "{}",
                    sim.var("KUBE_URL")
                );
                assert_eq!(
                    sim.var("KUBECONFIG"),
                    sim.home.path().join("kubeconfig").display().to_string()
                );
            }
            SimKind::Bao => assert!(
                sim.var("BAO_ADDR").starts_with("http://127.0.0.1:"),
                "{}",
                sim.var("BAO_ADDR")
            ),
            SimKind::All | SimKind::Bare => {}
        }
        sim
    }

    pub fn kind(&self) -> SimKind {
        self.kind
    }

    /// Every `KEY=value` line it printed, in order.
    /// Copies what phase 2 would have left in the repository (`infra/tls/wildcard/`, the
    /// certificate the seeded gateway serves) into the repository copy at `copy`.
    pub fn platform_files(&self, copy: &std::path::Path) {
        let from = self.home.path().join("repository/infra/tls/wildcard");
        let Ok(entries) = std::fs::read_dir(&from) else {
            return;
        };
        let to = copy.join("infra/tls/wildcard");
        std::fs::create_dir_all(&to).expect("create infra/tls/wildcard in the copy");
        for entry in entries.flatten() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy a TLS file");
        }
    }

    pub fn vars(&self) -> &[(String, String)] {
        &self.vars
    }

    /// The first printed keys, in order (for checks of what it prints).
    pub fn keys(&self) -> Vec<&str> {
        self.vars.iter().map(|(k, _)| k.as_str()).collect()
    }

    pub fn var(&self, key: &str) -> &str {
        &self
            .vars
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("bprun sim {} did not print {key}", self.kind.name()))
            .1
    }

    /// The simulator's own folder (its state; HOME for kubectl and helm).
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    // GitLab (kinds Gitlab and All).

    pub fn gitlab_url(&self) -> &str {
        self.var("GITLAB_URL")
    }

    /// One raw request to the GitLab simulator, with `token` as PRIVATE-TOKEN when given.
    pub fn raw(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Reply {
        let url = format!("{}{path}", self.gitlab_url());
        match token {
            Some(token) => http::request(method, &url, &[("PRIVATE-TOKEN", token)], body),
            None => http::request(method, &url, &[], body),
        }
    }

    /// A request to `/api/v4/PATH` with the printed token.
    pub fn api(&self, method: &str, path: &str, body: Option<&str>) -> Reply {
        let token = self.var("GITLAB_TOKEN").to_string();
        self.raw(method, &format!("/api/v4/{path}"), Some(&token), body)
    }

    /// `GET /api/v4/PATH`, which must answer 200 with JSON.
    pub fn api_json(&self, path: &str) -> serde_json::Value {
        let reply = self.api("GET", path, None);
        assert_eq!(reply.status, 200, "GET {path}: {}", reply.body);
        reply.json()
    }

    /// The simulator's request log and counters.
    pub fn requests(&self) -> serde_json::Value {
        self.raw("GET", "/-/sim/requests", None, None).json()
    }

    /// Mutating requests since the log was last cleared.
    pub fn mutating_requests(&self) -> u64 {
        self.requests()["mutating"].as_u64().expect("mutating")
    }

    pub fn clear_requests(&self) {
        self.raw("DELETE", "/-/sim/requests", None, None);
    }

    pub fn set_faults(&self, faults: &str) {
        let reply = self.raw("PUT", "/-/sim/faults", None, Some(faults));
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    // OpenBao (kinds Bao and All).

    /// `GET /v1/PATH` with the printed token: the status and the JSON body (null when none).
    pub fn bao_get(&self, path: &str) -> (u16, serde_json::Value) {
        let token = self.var("BAO_TOKEN").to_string();
        let reply = http::request(
            "GET",
            &format!("{}/v1/{path}", self.var("BAO_ADDR")),
            &[("X-Vault-Token", &token)],
            None,
        );
        (
            reply.status,
            serde_json::from_str(&reply.body).unwrap_or(serde_json::Value::Null),
        )
    }

    // Kubernetes (kind Kube).

    pub fn kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.var("KUBECONFIG"))
    }

    /// A command for a tool of .tools/bin (kubectl, helm) wired to the simulator: KUBECONFIG,
    /// HOME and helm's folders in the simulator's own folder.
    pub fn tool_command(&self, program: &str) -> Command {
        let mut command = Command::new(tool(program));
        command
            .env("KUBECONFIG", self.kubeconfig())
            .env("HOME", self.home())
            .env("HELM_CACHE_HOME", self.home().join("helm-cache"))
            .env("HELM_CONFIG_HOME", self.home().join("helm-config"))
            .env("HELM_DATA_HOME", self.home().join("helm-data"))
            .current_dir(crate::root());
        command
    }

    /// Runs a tool (see [`Sim::tool_command`]) to its end, with `stdin` as its input.
    pub fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = self.tool_command(program);
        command
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn");
        if let Some(text) = stdin {
            use std::io::Write;
            let mut pipe = child.stdin.take().expect("stdin");
            pipe.write_all(text.as_bytes()).expect("write stdin");
        }
        Output::raw(child.wait_with_output().expect("wait"))
    }

    /// `kubectl get TARGET -n NAMESPACE -o jsonpath=PATH`, which must succeed: its output.
    pub fn jsonpath(&self, target: &str, namespace: &str, path: &str) -> String {
        let jsonpath = format!("jsonpath={path}");
        self.kubectl(&["get", target, "-n", namespace, "-o", &jsonpath])
            .ok()
            .to_string()
    }

    /// kubectl with a 20 s request timeout.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        let mut all = vec!["--request-timeout=20s"];
        all.extend_from_slice(args);
        self.run("kubectl", &all, None)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        self.run("kubectl", args, Some(stdin))
    }

    pub fn helm(&self, args: &[&str]) -> Output {
        self.run("helm", args, None)
    }

    /// Stops the simulator: SIGTERM to its own process id (so `sim all` stops the OpenBao it
    /// started), SIGKILL after 5 s.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
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

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop();
    }
}
