//! Phase 3 no-op benchmark (not a test), release build, against `bprun sim all`:
//! - a no-op re-run of `scripts/phase3.rhai` without the smoke step, four apps (target: < 300 ms);
//! - the same with a synthetic 100-app manifest (target: < 3 s).
//!
//! Reports wall time (median and max of 7 runs) and the GitLab requests one run makes.
//!
//!     cargo bench --bench phase3

#[path = "../tests/integration/sim_all.rs"]
#[allow(dead_code)]
mod sim_all;

use sim_all::{BPRUN, SimAll};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repository_copy(apps: usize) -> tempfile::TempDir {
    let dir = sim_all::repository_copy();
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
    sim.gitlab("DELETE", "/-/sim/requests");
    let mut times: Vec<Duration> = (0..7).map(|_| run(copy.path(), &sim, &no_op)).collect();
    let log: serde_json::Value =
        serde_json::from_str(&sim.gitlab("GET", "/-/sim/requests").1).unwrap_or_default();
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
