//! Phase 3 no-op benchmark (not a test), release build, against `bprun sim all`:
//! - a no-op re-run of `scripts/phase3.rhai` without the smoke step, four apps (target: < 300 ms);
//! - the same with a synthetic 100-app manifest (target: < 3 s).
//!
//! Reports wall time (median and max of 7 runs) and the GitLab requests one run makes.
//!
//!     cargo bench --bench phase3

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BPRUN: &str = env!("CARGO_BIN_EXE_bprun");

struct SimAll {
    child: std::process::Child,
    env: Vec<(String, String)>,
    _state: tempfile::TempDir,
}

impl SimAll {
    fn start() -> SimAll {
        let state = tempfile::tempdir().expect("state");
        let mut child = Command::new(BPRUN)
            .args(["sim", "all", "--pipeline-seconds", "0.3", "--state"])
            .arg(state.path())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bprun sim all");
        let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut env = Vec::new();
        while env.len() < 6 {
            let mut line = String::new();
            assert!(reader.read_line(&mut line).expect("read") > 0);
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

    fn var(&self, key: &str) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// GET or DELETE on the GitLab simulator's request log.
    fn requests(&self, method: &str) -> serde_json::Value {
        let url = self.var("GITLAB_URL");
        let host = url.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(host).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            stream,
            "{method} /-/sim/requests HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        )
        .expect("send");
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
    }
}

impl Drop for SimAll {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid (it then stops OpenBao by its pid).
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

fn repository_copy(apps: usize) -> tempfile::TempDir {
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
    if apps > 4 {
        // shared-code, then synthetic apps built like redis (no image build).
        let manifest = dir.path().join("apps/apps_manifest.yaml");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        let shared_end = text.find("- name: guestbook").expect("guestbook");
        let mut synthetic = text[..shared_end].to_string();
        for index in 1..apps {
            synthetic.push_str(&format!(
                "- name: app-{index:03}\n  src_path: apps/redis\n  chart_path: helm-chart\n  build_image: false\n  helm_release: app-{index:03}\n  helm_namespace: app-{index:03}\n  registry_image: gitlab-registry.gitlab.svc:5000/blueprint-apps/app-{index:03}\n  redis_host: redis-master.app-{index:03}.svc.cluster.local\n  redis_tag: \"7.4.1\"\n\n"
            ));
        }
        std::fs::write(&manifest, synthetic).expect("write manifest");
    }
    dir
}

fn run(dir: &Path, sim: &SimAll, args: &[&str]) -> Duration {
    let started = Instant::now();
    let output = Command::new(BPRUN)
        .args(args)
        .current_dir(dir)
        .envs(sim.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .output()
        .expect("bprun");
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

fn measure(apps: usize) {
    let sim = SimAll::start();
    let copy = repository_copy(apps);
    let provision = run(copy.path(), &sim, &["-q", "scripts/phase3.rhai"]);
    let no_op = ["-q", "--skip", "Smoke test", "scripts/phase3.rhai"];
    run(copy.path(), &sim, &no_op);
    sim.requests("DELETE");
    let mut times: Vec<Duration> = (0..7).map(|_| run(copy.path(), &sim, &no_op)).collect();
    let log = sim.requests("GET");
    times.sort();
    let per_run = log["total"].as_u64().unwrap_or(0) / 7;
    println!(
        "phase3 no-op without the smoke step, {apps} apps: median {:.1} ms, max {:.1} ms; {} GitLab requests per run, {} mutating in 7 runs (first full run {:.2} s)",
        times[3].as_secs_f64() * 1000.0,
        times[6].as_secs_f64() * 1000.0,
        per_run,
        log["mutating"],
        provision.as_secs_f64()
    );
}

fn main() {
    measure(4);
    measure(100);
}
