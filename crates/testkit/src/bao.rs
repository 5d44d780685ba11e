//! Real OpenBao servers for tests: dev mode (in memory) and a one-node raft server whose data
//! survives a restart. Each listens on free loopback ports and is killed by its process id when
//! dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// The `bao` binary: `BPRUN_TEST_BAO`, else `.tools/bin/bao` (installed by ./test.sh), else PATH.
pub fn bao_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BPRUN_TEST_BAO") {
        return PathBuf::from(path);
    }
    crate::tool("bao")
}

pub struct BaoServer {
    child: Option<Child>,
    pub address: String,
    /// HOME and logs of the server process.
    pub home: tempfile::TempDir,
    config: Option<PathBuf>,
}

impl BaoServer {
    /// `bao server -dev` with root token `root` (KV v2 at `secret/`).
    pub fn dev() -> BaoServer {
        let port = free_port();
        let home = tempfile::tempdir().expect("home");
        let args = vec![
            "server".to_string(),
            "-dev".to_string(),
            "-dev-root-token-id=root".to_string(),
            format!("-dev-listen-address=127.0.0.1:{port}"),
        ];
        let mut server = BaoServer {
            child: None,
            address: format!("http://127.0.0.1:{port}"),
            home,
            config: None,
        };
        server.spawn(&args);
        server
    }

    /// A real server with one-node raft storage in `data` (which outlives the process).
    pub fn raft(data: &Path) -> BaoServer {
        let port = free_port();
        let cluster_port = free_port();
        let home = tempfile::tempdir().expect("home");
        std::fs::create_dir_all(data).expect("raft data dir");
        let config = home.path().join("config.hcl");
        std::fs::write(
            &config,
            format!(
                "storage \"raft\" {{\n  path = \"{}\"\n  node_id = \"node1\"\n}}\n\
                 listener \"tcp\" {{\n  address = \"127.0.0.1:{port}\"\n  cluster_address = \"127.0.0.1:{cluster_port}\"\n  tls_disable = 1\n}}\n\
                 api_addr = \"http://127.0.0.1:{port}\"\ncluster_addr = \"http://127.0.0.1:{cluster_port}\"\ndisable_mlock = true\n",
                data.display()
            ),
        )
        .expect("config");
        let mut server = BaoServer {
            child: None,
            address: format!("http://127.0.0.1:{port}"),
            home,
            config: Some(config),
        };
        server.start();
        server
    }

    fn spawn(&mut self, args: &[String]) {
        let log = std::fs::File::create(self.home.path().join("server.log")).expect("log");
        let child = Command::new(bao_binary())
            .args(args)
            .env("HOME", self.home.path())
            .env_remove("BAO_ADDR")
            .env_remove("BAO_TOKEN")
            .env_remove("VAULT_ADDR")
            .env_remove("VAULT_TOKEN")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start bao");
        self.child = Some(child);
        self.wait_ready();
    }

    /// (Re)starts a raft server from its config.
    pub fn start(&mut self) {
        let config = self.config.clone().expect("start() is for raft servers");
        self.spawn(&[
            "server".to_string(),
            format!("-config={}", config.display()),
        ]);
    }

    /// Kills the process (by its id) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("server.log")).unwrap_or_default()
    }

    /// Waits (at most 30 s) until `GET /v1/sys/seal-status` answers 200.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("bao exited early ({status}):\n{}", self.log());
            }
            let url = format!("{}/v1/sys/seal-status", self.address);
            if let Ok(reply) =
                crate::http::try_request("GET", &url, &[], None, Duration::from_secs(2))
                && reply.status == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("bao did not answer within 30 s:\n{}", self.log());
    }

    fn run_cli(&self, token: &str, args: &[&str]) -> std::process::Output {
        Command::new(bao_binary())
            .args(args)
            .env("BAO_ADDR", &self.address)
            .env("BAO_TOKEN", token)
            .env("HOME", self.home.path())
            .output()
            .expect("bao cli")
    }

    /// Runs the real `bao` CLI and returns its stdout whatever its exit code (`bao status`
    /// exits 2 on a sealed server).
    pub fn cli_any(&self, token: &str, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.run_cli(token, args).stdout).into_owned()
    }

    /// Runs the real `bao` CLI against this server (for independent checks); it must succeed.
    pub fn cli(&self, token: &str, args: &[&str]) -> String {
        let output = self.run_cli(token, args);
        assert!(
            output.status.success(),
            "bao {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for BaoServer {
    fn drop(&mut self) {
        self.stop();
    }
}
