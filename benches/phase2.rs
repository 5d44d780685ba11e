//! Phase 2 benchmark (not a test), release build, against `bprun sim all --platform bare`.
//!
//! First converge: phase 2 builds a bare platform with `--json`; reported are its wall time, the
//! sum of its steps' own times and the longest chain of declared `needs` (Pre-flight, then each
//! step after the longest of what it needs), with wall / chain (issue #32's goal: within 1.3x).
//! With BPRUN_BENCH_LIMITS="1 2 4 6" the first converge runs once per `limit` of phase 2's
//! groups (a fresh platform each; 1 is the sequential baseline).
//!
//! No-op: then 5 no-op re-runs are timed (goal: under 1 s), with the Kubernetes requests of one
//! run (total and mutating, from the simulator's request log) and the helm invocations of one
//! run (counted by a wrapper around the real helm, named in HELM_BIN).
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

/// One first converge of phase 2 on a fresh bare platform, with its groups' `limit` set to
/// `limit` (the script's own when None): (wall, sum of step times, longest needs chain) in
/// seconds, and the platform and copy it left for the no-op runs.
fn first_converge(
    limit: Option<usize>,
    helm: &std::path::Path,
) -> (f64, f64, f64, Sim, bprun_testkit::Test) {
    let sim = BPRUN.sim(SimKind::Bare, &[]);
    let vars: Vec<(String, String)> = sim
        .vars()
        .iter()
        .filter(|(key, _)| key != "GITLAB_TOKEN")
        .cloned()
        .collect();
    let copy = BPRUN
        .test_in_repository_copy()
        .envs(&vars)
        .env("HELM_BIN", helm)
        .env("BPRUN_BAO_BIN", tool("bao"));
    // The script's own limit is 4: only another one needs an edit.
    if let Some(limit) = limit.filter(|&limit| limit != 4) {
        let path = copy.path().join("scripts/phase2.rhai");
        let script = std::fs::read_to_string(&path).expect("phase2.rhai");
        let edited = script.replace("#{limit: 4}", &format!("#{{limit: {limit}}}"));
        assert_ne!(
            script, edited,
            "phase2.rhai has no `#{{limit: 4}}` to change"
        );
        std::fs::write(&path, edited).expect("write phase2.rhai");
    }
    let plan: serde_json::Value = serde_json::from_str(
        copy.run(&["--list", "--json", "scripts/phase2.rhai"])
            .raw_stdout
            .trim(),
    )
    .expect("the plan as JSON");
    let started = Instant::now();
    let run = copy.run(&["--json", "scripts/phase2.rhai"]);
    let wall = started.elapsed().as_secs_f64();
    run.success();
    let mut took = std::collections::HashMap::new();
    for line in run.raw_stdout.lines() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        if event["event"] == "step_end" {
            took.insert(
                event["name"].as_str().unwrap_or("").to_string(),
                event["duration_s"].as_f64().unwrap_or(0.0),
            );
        }
    }
    let sum: f64 = took.values().sum();
    // Each step ends after the longest of what it needs (Pre-flight gates every step).
    let mut ends: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
    let preflight = took.get("Pre-flight").copied().unwrap_or(0.0);
    for step in plan["steps"].as_array().into_iter().flatten() {
        let name = step["name"].as_str().unwrap_or("").to_string();
        let start = step["needs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|need| need.as_str().and_then(|need| ends.get(need)))
            .fold(preflight, |longest, end| longest.max(*end));
        let own = took.get(&name).copied().unwrap_or(0.0);
        ends.insert(
            name.clone(),
            if name == "Pre-flight" {
                own
            } else {
                start + own
            },
        );
    }
    let chain = ends
        .values()
        .fold(0.0_f64, |longest, end| longest.max(*end));
    (wall, sum, chain, sim, copy)
}

fn main() {
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
    let limits: Vec<usize> = std::env::var("BPRUN_BENCH_LIMITS")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|limit| limit.parse().ok())
        .collect();
    for limit in &limits {
        let (wall, sum, chain, _, _) = first_converge(Some(*limit), &wrapper);
        println!(
            "phase2 first converge, limit {limit}: wall {wall:.1} s, steps' sum {sum:.1} s, longest needs chain {chain:.1} s, wall/chain {:.2}",
            wall / chain
        );
    }
    let (wall, sum, chain, sim, copy) = first_converge(None, &wrapper);
    println!(
        "phase2 first converge (the script's limit): wall {wall:.1} s, steps' sum {sum:.1} s, longest needs chain {chain:.1} s, wall/chain {:.2}",
        wall / chain
    );
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
        "phase2 no-op re-run: median {:.2} s, max {:.2} s; per run {} Kubernetes requests ({} mutating in {RUNS} runs), {} helm invocations ({} upgrades in {RUNS} runs)",
        times[RUNS / 2].as_secs_f64(),
        times[RUNS - 1].as_secs_f64(),
        log["total"].as_u64().unwrap_or(0) / RUNS as u64,
        log["mutating"],
        helm_calls.lines().count() / RUNS,
        upgrades,
    );
    // Where a no-op's time goes: each step's own time, in declaration order.
    let run = copy.run(&["--json", "scripts/phase2.rhai"]);
    run.success();
    let steps: Vec<String> = run
        .raw_stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "step_end")
        .map(|event| {
            format!(
                "{} {:.2}",
                event["name"].as_str().unwrap_or(""),
                event["duration_s"].as_f64().unwrap_or(0.0)
            )
        })
        .collect();
    println!("phase2 no-op steps (s): {}", steps.join(", "));
}
