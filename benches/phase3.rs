//! Phase 3 no-op benchmark (not a test), release build, against `bprun sim all`:
//! - a no-op re-run of `scripts/phase3.rhai` without the smoke step, four apps (target: < 300 ms);
//! - the same with a synthetic 100-app manifest (target: < 3 s).
//!
//! Reports wall time (median and max of 7 runs) and the GitLab requests one run makes.
//!
//!     cargo bench --bench phase3

use bprun_testkit::{Bprun, Sim, SimKind, Test};
use std::time::{Duration, Instant};

const BPRUN: Bprun = Bprun::at(env!("CARGO_BIN_EXE_bprun"));

/// A copy of the repository, wired to `sim`, with `apps` apps in its manifest.
fn repository_copy(sim: &Sim, apps: usize) -> Test {
    let test = BPRUN.test_in_repository_copy().envs(sim.vars());
    if apps > 4 {
        // shared-code, then synthetic apps built like redis (no image build).
        let text = test.read("apps/apps_manifest.yaml");
        let shared_end = text.find("- name: guestbook").expect("guestbook");
        let mut synthetic = text[..shared_end].to_string();
        for index in 1..apps {
            synthetic.push_str(&format!(
                "- name: app-{index:03}\n  src_path: apps/redis\n  chart_path: helm-chart\n  build_image: false\n  helm_release: app-{index:03}\n  helm_namespace: app-{index:03}\n  registry_image: gitlab-registry.gitlab.svc:5000/blueprint-apps/app-{index:03}\n  redis_host: redis-master.app-{index:03}.svc.cluster.local\n  redis_tag: \"7.4.1\"\n\n"
            ));
        }
        test.write("apps/apps_manifest.yaml", &synthetic);
    }
    test
}

fn run(test: &Test, args: &[&str]) -> Duration {
    let started = Instant::now();
    let output = test.run(args);
    let elapsed = started.elapsed();
    output.success();
    elapsed
}

fn measure(apps: usize) {
    let sim = BPRUN.sim(SimKind::All, &[]);
    let copy = repository_copy(&sim, apps);
    let provision = run(&copy, &["-q", "scripts/phase3.rhai"]);
    let no_op = ["-q", "--skip", "Smoke test", "scripts/phase3.rhai"];
    run(&copy, &no_op);
    sim.clear_requests();
    let mut times: Vec<Duration> = (0..7).map(|_| run(&copy, &no_op)).collect();
    let log = sim.requests();
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
