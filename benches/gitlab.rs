//! GitLab benchmark (not a test), against the local simulator with the release binary:
//! - `gitlab_set_variables` with four unchanged variables: how many requests it costs (target: 1);
//! - ensuring 100 existing projects with `parallel`: how long the step takes (target: under 1 s).
//!
//!     cargo bench --bench gitlab

use bprun_testkit::{Bprun, Sim, SimKind, Test};

const BPRUN: Bprun = Bprun::at(env!("CARGO_BIN_EXE_bprun"));

fn run_script(test: &Test, script: &str) -> Vec<serde_json::Value> {
    test.write("scripts/bench.rhai", script);
    test.run(&["--json", "scripts/bench.rhai"])
        .success()
        .raw_stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn step_seconds(events: &[serde_json::Value], name: &str) -> f64 {
    events
        .iter()
        .find(|e| e["event"] == "step_end" && e["name"] == name)
        .and_then(|e| e["duration_s"].as_f64())
        .unwrap_or(f64::NAN)
}

fn main() {
    let sim: Sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = BPRUN.test().envs(sim.vars());
    sim.api(
        "POST",
        "groups",
        Some(r#"{"name":"blueprint-apps","path":"blueprint-apps"}"#),
    );
    for index in 0..100 {
        sim.api(
            "POST",
            "projects",
            Some(&format!(r#"{{"name":"app-{index}","namespace_id":2}}"#)),
        );
    }

    let variables = r#"step("Variables", || {
    gitlab_set_variables("blueprint-apps/app-0", #{
        CI_REGISTRY_IMAGE: "gitlab-registry.gitlab.svc:5000/blueprint-apps/app-0",
        CI_HELM_CHART_DIR: "helm-chart",
        CI_HELM_TIMEOUT: "5m",
        CI_KUBECONFIG_B64: #{value: "YXBpVmVyc2lvbjogdjEK", masked: true},
    });
});
"#;
    run_script(&test, variables);
    sim.clear_requests();
    let events = run_script(&test, variables);
    let log = sim.requests();
    println!(
        "gitlab_set_variables, 4 unchanged variables: {} request(s), {} mutating, step {:.1} ms",
        log["total"],
        log["mutating"],
        step_seconds(&events, "Variables") * 1000.0
    );

    let ensure = r#"step("Ensure 100", || {
    let names = [];
    for i in 0..100 { names.push(`app-${i}`); }
    let results = parallel(names, |name| gitlab_ensure_project("blueprint-apps", name), 16);
    assert_eq(results.filter(|r| r.changed).len(), 0);
});
"#;
    sim.clear_requests();
    let started = std::time::Instant::now();
    let events = run_script(&test, ensure);
    let wall = started.elapsed();
    println!(
        "ensure 100 existing projects with parallel(16): step {:.1} ms, whole run {:.1} ms, {} requests",
        step_seconds(&events, "Ensure 100") * 1000.0,
        wall.as_secs_f64() * 1000.0,
        sim.requests()["total"]
    );
}
