//! Issue #18: scripts/qualify.rhai, the smoke tables of phases 2 and 3 as a read-only report,
//! and the `check_row` steps it is made of.

use crate::support::{BPRUN, Output, Sim, SimKind, Test, tool};
use std::collections::BTreeMap;

/// One row of the report, from its `check` event.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    found: String,
    result: String,
    hint: Option<String>,
}

/// The `check` events of a `--json` run, by row name.
fn rows(run: &Output) -> BTreeMap<String, Row> {
    run.stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "check")
        .map(|event| {
            (
                event["name"].as_str().unwrap_or("").to_string(),
                Row {
                    found: event["found"].as_str().unwrap_or("").to_string(),
                    result: event["result"].as_str().unwrap_or("").to_string(),
                    hint: event["hint"].as_str().map(str::to_string),
                },
            )
        })
        .collect()
}

/// The rows whose result is not `pass`, by name.
fn not_passed(rows: &BTreeMap<String, Row>) -> BTreeMap<String, Row> {
    rows.iter()
        .filter(|(_, row)| row.result != "pass")
        .map(|(name, row)| (name.clone(), row.clone()))
        .collect()
}

/// Every row of both smoke tables, in the script's order.
const ROWS: [&str; 18] = [
    "Cluster and helm reachable",
    "Envoy gateway pods",
    "Gateway/gitlab-gw Programmed",
    "local-path is the default StorageClass",
    "CloudNativePG cluster Ready",
    "Redis answers PING",
    "MinIO buckets",
    "OpenBao unsealed",
    "Wildcard CA on disk",
    "4 listener Secrets",
    "GitLab /-/health",
    "Runner online",
    "GitLab pods Running",
    "Group blueprint-apps",
    "Projects",
    ".gitlab-ci.yml in every project",
    "CI/CD variables",
    "Smoke pipelines green",
];

#[test]
fn check_rows_keep_going_report_every_verdict_and_exit_1_when_one_did_not_pass() {
    let test = BPRUN.test().script(
        r#"check_row("Equal", #{expected: "42", hint: "never shown"}, || `${6 * 7}`);
check_row("Different", #{expected: "True", hint: "look at the gateway"}, || "False");
check_row("Verdict", #{expected: "at least 2", hint: "add nodes"}, || #{found: "1 node", passed: false});
check_row("Throws", #{expected: "PONG", hint: "is redis up?"}, || { throw "connection refused" });
check_row("Cannot read", #{expected: "x", hint: "not shown"}, || { skip("OpenBao is sealed") });
step("Plain step", || { info("still runs after failed rows") });
"#,
    );
    let run = test.run(&["scripts/test.rhai"]);
    run.code(1);
    run.stdout_contains("still runs after failed rows");
    run.stdout_contains(
        "Qualification of scripts/test.rhai
  #  check        expected    found               result
  1  Equal        42          42                  pass
  2  Different    True        False               FAIL
       hint: look at the gateway
  3  Verdict      at least 2  1 node              FAIL
       hint: add nodes
  4  Throws       PONG        connection refused  FAIL
       hint: is redis up?
  5  Cannot read  x           OpenBao is sealed   not checked
5 checks: 1 passed, 3 failed, 1 not checked
",
    );
    run.stderr_contains(
        "check \"Different\": expected True, found False\n  --> scripts/test.rhai:2\n  when this step fails: look at the gateway\nthe next steps still run; the run will exit 1",
    );
    run.stdout_lacks("never shown");

    // --json: one check event per row that ran; --only selects rows as it selects steps.
    let json = test.run(&[
        "--json",
        "--only",
        "equal",
        "--only",
        "different",
        "scripts/test.rhai",
    ]);
    json.code(1);
    let found = rows(&json);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found["Equal"].result, "pass");
    assert_eq!(found["Equal"].hint, None);
    assert_eq!(
        found["Different"].hint.as_deref(),
        Some("look at the gateway")
    );
    test.run(&["--only", "equal", "scripts/test.rhai"]).code(0);

    // Only passed rows qualify: a row that could not be checked fails the run too.
    test.run(&["--only", "cannot-read", "scripts/test.rhai"])
        .code(1);

    // A plain step that fails still stops the run; `keep_going` lets the next steps run.
    let stop = BPRUN
        .test()
        .script("step(\"A\", || { throw \"broken\" });\nstep(\"B\", || { info(\"B ran\") });\n");
    let stopped = stop.run(&["scripts/test.rhai"]);
    stopped.code(1);
    stopped.stdout_lacks("B ran");
    let going = BPRUN.test().script(
        "step(\"A\", #{keep_going: true}, || { throw \"broken\" });\nstep(\"B\", || { info(\"B ran\") });\n",
    );
    let went_on = going.run(&["scripts/test.rhai"]);
    went_on.code(1);
    went_on.stdout_contains("B ran");

    let missing = BPRUN
        .test()
        .script("check_row(\"Row\", #{hint: \"h\"}, || \"x\");\n");
    let refused = missing.run(&["scripts/test.rhai"]);
    refused.code(3);
    refused.stderr_contains("check_row(\"Row\"): the option `expected` is missing");
}

/// A copy of the repository with the real helm and bao, wired to a bare platform without
/// GitLab's admin token (phases 2 and 3 start as on a fresh platform).
fn platform_copy(sim: &Sim) -> Test {
    let vars: Vec<(String, String)> = sim
        .vars()
        .iter()
        .filter(|(key, _)| key != "GITLAB_TOKEN")
        .cloned()
        .collect();
    BPRUN
        .test_in_repository_copy()
        .env("HELM_BIN", tool("helm"))
        .env("BPRUN_BAO_BIN", tool("bao"))
        .envs(&vars)
}

fn kubectl(sim: &Sim, args: &[&str]) -> Output {
    let output = std::process::Command::new(tool("kubectl"))
        .args(args)
        .env("KUBECONFIG", sim.var("KUBECONFIG"))
        .env("HOME", sim.home())
        .output()
        .expect("kubectl");
    Output::raw(output)
}

fn kube_mutating(sim: &Sim) -> u64 {
    let log: serde_json::Value =
        serde_json::from_str(&kubectl(sim, &["get", "--raw", "/-/sim/requests"]).stdout)
            .expect("request log");
    log["mutating"].as_u64().expect("mutating")
}

fn qualify(copy: &Test) -> Output {
    copy.run(&["--json", "scripts/qualify.rhai"])
}

#[test]
fn qualify_passes_after_phases_2_and_3_and_names_exactly_the_row_a_break_fails() {
    let sim = Sim::start(BPRUN, SimKind::Bare, &[]);
    let copy = platform_copy(&sim);
    copy.run(&["-q", "scripts/phase2.rhai"]).code(0);
    copy.run(&["-q", "scripts/phase3.rhai"]).code(0);

    // Green, and read-only: no Kubernetes or GitLab write.
    kubectl(&sim, &["delete", "--raw", "/-/sim/requests"]);
    sim.clear_requests();
    let green = copy.run(&["scripts/qualify.rhai"]);
    green.code(0);
    green.stdout_contains("18 checks: 18 passed, 0 failed\n");
    assert_eq!(kube_mutating(&sim), 0);
    assert_eq!(sim.mutating_requests(), 0);
    let events = qualify(&copy);
    events.code(0);
    let all = rows(&events);
    assert_eq!(
        all.keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        ROWS.iter().map(|name| name.to_string()).collect(),
    );
    assert_eq!(not_passed(&all), BTreeMap::new());
    assert_eq!(all["Runner online"].found, "1 online, 1/1 pods Ready");
    assert_eq!(
        all["Smoke pipelines green"].found,
        "success on main in 4 projects"
    );

    // A listener Secret deleted: its row fails with the seed's hint, and the Gateway, whose
    // listener now has no certificate, is no longer Programmed (the simulator's Envoy Gateway
    // names the listener). Nothing else fails. Phase 2's Wildcard TLS step repairs it.
    kubectl(&sim, &["-n", "gitlab", "delete", "secret", "kas-tls"]);
    let broken = qualify(&copy);
    broken.code(1);
    let failed = not_passed(&rows(&broken));
    assert_eq!(
        failed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["4 listener Secrets", "Gateway/gitlab-gw Programmed"],
        "{failed:?}"
    );
    let listener = &failed["4 listener Secrets"];
    assert_eq!(listener.found, "3 of 4 in gitlab, missing kas-tls");
    assert_eq!(listener.result, "FAIL");
    assert!(
        listener
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains("bprun --only wildcard-tls scripts/phase2.rhai")),
        "{listener:?}"
    );
    assert_eq!(
        failed["Gateway/gitlab-gw Programmed"].found,
        "False: Gateway has invalid listeners: kas-web"
    );
    copy.run(&["-q", "--only", "wildcard-tls", "scripts/phase2.rhai"])
        .code(0);
    qualify(&copy).code(0);

    // OpenBao sealed: its row fails with the seed's hint. Without GITLAB_TOKEN the GitLab rows
    // read their token from OpenBao, so they say they could not be checked; with it, the
    // OpenBao row is the only one that does not pass.
    copy.write("scripts/seal.rhai", "step(\"Seal\", || { bao_seal(); });\n");
    copy.run(&["-q", "scripts/seal.rhai"]).code(0);
    let sealed = qualify(&copy);
    sealed.code(1);
    let failed = not_passed(&rows(&sealed));
    let openbao = &failed["OpenBao unsealed"];
    assert_eq!(openbao.found, "sealed: true");
    assert_eq!(openbao.result, "FAIL");
    assert!(
        openbao
            .hint
            .as_deref()
            .is_some_and(|hint| hint.starts_with("OpenBao sealed after a restart")),
        "{openbao:?}"
    );
    let unchecked: Vec<&str> = failed
        .iter()
        .filter(|(_, row)| row.result == "not checked")
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(
        unchecked,
        [
            ".gitlab-ci.yml in every project",
            "CI/CD variables",
            "Group blueprint-apps",
            "Projects",
            "Runner online",
            "Smoke pipelines green"
        ]
    );
    assert_eq!(failed.len(), 7, "{failed:?}");
    let with_token = Output::normalized(
        copy.command(&["--json", "scripts/qualify.rhai"])
            .env("GITLAB_TOKEN", sim.var("GITLAB_TOKEN"))
            .output()
            .expect("run bprun"),
    );
    with_token.code(1);
    let failed = not_passed(&rows(&with_token));
    assert_eq!(
        failed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["OpenBao unsealed"]
    );
    copy.run(&["-q", "--only", "openbao", "scripts/phase2.rhai"])
        .code(0);
    qualify(&copy).code(0);

    // The runner stopped: GitLab still calls it online (for two hours after its last poll, as
    // GitLab does), but it has no pod, so its row fails, and only its row.
    kubectl(
        &sim,
        &[
            "-n",
            "gitlab-runner",
            "scale",
            "deployment",
            "gitlab-runner",
            "--replicas=0",
        ],
    )
    .success();
    let stopped = qualify(&copy);
    stopped.code(1);
    let failed = not_passed(&rows(&stopped));
    assert_eq!(
        failed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["Runner online"]
    );
    let runner = &failed["Runner online"];
    assert_eq!(runner.found, "1 online, 0/0 pods Ready");
    assert!(
        runner
            .hint
            .as_deref()
            .is_some_and(|hint| hint.starts_with("Runner stopped or never registers")),
        "{runner:?}"
    );
    // --skip leaves a row out, as it leaves a step out.
    copy.run(&["--skip", "runner-online", "scripts/qualify.rhai"])
        .code(0);
}
