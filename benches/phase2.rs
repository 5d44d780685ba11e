//! Phase 2 no-op benchmark (not a test), release build, against `bprun sim all --platform bare`:
//! phase 2 runs once to build the platform, then 5 no-op re-runs are timed (goal: under 3 s, with
//! no helm upgrade and no Kubernetes write).
//!
//! Reports wall time (median and max), the Kubernetes requests of one run (total and mutating,
//! from the simulator's request log) and the helm invocations of one run (counted by a wrapper
//! around the real helm, named in HELM_BIN).
//!
//!     cargo bench --bench phase2

use bprun_testkit::{Bprun, Sim, SimKind, tool};
use std::time::{Duration, Instant};

const BPRUN: Bprun = Bprun::at(env!("CARGO_BIN_EXE_bprun"));
const RUNS: usize = 5;

fn kube_log(sim: &Sim, method: &str) -> serde_json::Value {
    let output = std::process::Command::new(tool("kubectl"))
        .args([method, "--raw", "/-/sim/requests"])
        .env("KUBECONFIG", sim.var("KUBECONFIG"))
        .env("HOME", sim.home())
        .output()
        .expect("kubectl");
    serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null)
}

fn main() {
    let sim = BPRUN.sim(SimKind::Bare, &[]);
    let scratch = tempfile::tempdir().expect("scratch");
    let calls = scratch.path().join("helm-calls.log");
    let wrapper = scratch.path().join("helm");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nexec '{}' \"$@\"\n",
            calls.display(),
            tool("helm").display()
        ),
    )
    .expect("helm wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let vars: Vec<(String, String)> = sim
        .vars()
        .iter()
        .filter(|(key, _)| key != "GITLAB_TOKEN")
        .cloned()
        .collect();
    let copy = BPRUN
        .test_in_repository_copy()
        .envs(&vars)
        .env("HELM_BIN", &wrapper)
        .env("BPRUN_BAO_BIN", tool("bao"));
    let started = Instant::now();
    copy.run(&["-q", "scripts/phase2.rhai"]).success();
    let build = started.elapsed();
    let _ = std::fs::remove_file(&calls);
    kube_log(&sim, "get");
    std::process::Command::new(tool("kubectl"))
        .args(["delete", "--raw", "/-/sim/requests"])
        .env("KUBECONFIG", sim.var("KUBECONFIG"))
        .env("HOME", sim.home())
        .output()
        .expect("clear the request log");
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            copy.run(&["-q", "scripts/phase2.rhai"]).success();
            started.elapsed()
        })
        .collect();
    times.sort();
    let log = kube_log(&sim, "get");
    let helm_calls = std::fs::read_to_string(&calls).unwrap_or_default();
    let upgrades = helm_calls.lines().filter(|l| *l == "upgrade").count();
    println!(
        "phase2 no-op re-run: median {:.2} s, max {:.2} s; per run {} Kubernetes requests ({} mutating in {RUNS} runs), {} helm invocations ({} upgrades in {RUNS} runs); first full run {:.1} s",
        times[RUNS / 2].as_secs_f64(),
        times[RUNS - 1].as_secs_f64(),
        log["total"].as_u64().unwrap_or(0) / RUNS as u64,
        log["mutating"],
        helm_calls.lines().count() / RUNS,
        upgrades,
        build.as_secs_f64()
    );
}
