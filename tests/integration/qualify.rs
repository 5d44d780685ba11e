//! Issue #18: scripts/qualify.rhai, the smoke tables of phases 2 and 3 as one report,
//! and the `check_row` steps it is made of.

use crate::support::with_recaps;
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
const ROWS: [&str; 24] = [
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
    "Workloads reachable",
    "Default branch protected",
    "Anonymous clone refused",
    "Developer cannot delete a project",
    "Outsider and anonymous clone refused",
    "Gateway routes answer",
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
    test.run(&["scripts/test.rhai"]).expect(
        1,
        &with_recaps(r#"
        [1/6] Equal ... ok (#.## s)
        [2/6] Different ... failed (#.## s)
        [3/6] Verdict ... failed (#.## s)
        [4/6] Throws ... failed (#.## s)
        [5/6] Cannot read ... skipped: OpenBao is sealed (#.## s)
        [6/6] Plain step ...
            still runs after failed rows
        [6/6] Plain step ... ok (#.## s)

        <recap of scripts/test.rhai: Equal: ok; Different: failed; Verdict: failed; Throws: failed; Cannot read: skipped, timed; Plain step: ok>

        Qualification of scripts/test.rhai
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
        "#),
        r#"
        error: step "Different" failed
        check "Different": expected True, found False
          --> scripts/test.rhai:2
          when this step fails: look at the gateway
        the next steps still run; the run will exit 1
        error: step "Verdict" failed
        check "Verdict": expected at least 2, found 1 node
          --> scripts/test.rhai:3
          when this step fails: add nodes
        the next steps still run; the run will exit 1
        error: step "Throws" failed
          × connection refused
           ╭─[scripts/test.rhai:4:69]
         3 │ check_row("Verdict", #{expected: "at least 2", hint: "add nodes"}, || #{found: "1 node", passed: false});
         4 │ check_row("Throws", #{expected: "PONG", hint: "is redis up?"}, || { throw "connection refused" });
           ·                                                                     ──┬──
           ·                                                                       ╰── thrown here
         5 │ check_row("Cannot read", #{expected: "x", hint: "not shown"}, || { skip("OpenBao is sealed") });
           ╰────
          when this step fails: is redis up?
        the next steps still run; the run will exit 1
        "#,
    );

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
    test.run(&["--only", "equal", "scripts/test.rhai"])
        .code(0)
        .stderr("")
        .stdout(
            &with_recaps("
            [1/6] Equal ... ok (#.## s)
            [2/6] Different ... skipped (not selected by --only)
            [3/6] Verdict ... skipped (not selected by --only)
            [4/6] Throws ... skipped (not selected by --only)
            [5/6] Cannot read ... skipped (not selected by --only)
            [6/6] Plain step ... skipped (not selected by --only)

            <recap of scripts/test.rhai: Equal: ok; Different: skipped; Verdict: skipped; Throws: skipped; Cannot read: skipped; Plain step: skipped>

            Qualification of scripts/test.rhai
              #  check  expected  found  result
              1  Equal  42        42     pass
            1 check: 1 passed, 0 failed
            "),
        );

    // Only passed rows qualify: a row that could not be checked fails the run too.
    test.run(&["--only", "cannot-read", "scripts/test.rhai"])
        .code(1)
        .stderr("")
        .stdout(
            &with_recaps("
            [1/6] Equal ... skipped (not selected by --only)
            [2/6] Different ... skipped (not selected by --only)
            [3/6] Verdict ... skipped (not selected by --only)
            [4/6] Throws ... skipped (not selected by --only)
            [5/6] Cannot read ... skipped: OpenBao is sealed (#.## s)
            [6/6] Plain step ... skipped (not selected by --only)

            <recap of scripts/test.rhai: Equal: skipped; Different: skipped; Verdict: skipped; Throws: skipped; Cannot read: skipped, timed; Plain step: skipped>

            Qualification of scripts/test.rhai
              #  check        expected  found              result
              5  Cannot read  x         OpenBao is sealed  not checked
            1 check: 0 passed, 0 failed, 1 not checked
            "),
        );

    // A plain step that fails still stops the run; `keep_going` lets the next steps run.
    let stop = BPRUN
        .test()
        .script("step(\"A\", || { throw \"broken\" });\nstep(\"B\", || { info(\"B ran\") });\n");
    stop.run(&["scripts/test.rhai"]).expect(
        1,
        &with_recaps(
            r#"
        [1/2] A ... failed (#.## s)

        <recap of scripts/test.rhai: A: failed; B: not run>
        "#,
        ),
        r#"
        error: step "A" failed
          × broken
           ╭─[scripts/test.rhai:1:16]
         1 │ step("A", || { throw "broken" });
           ·                ──┬──
           ·                  ╰── thrown here
         2 │ step("B", || { info("B ran") });
           ╰────
        re-run with --resume to continue from here
        "#,
    );
    let going = BPRUN.test().script(
        "step(\"A\", #{keep_going: true}, || { throw \"broken\" });\nstep(\"B\", || { info(\"B ran\") });\n",
    );
    going.run(&["scripts/test.rhai"]).expect(
        1,
        &with_recaps(
            r#"
        [1/2] A ... failed (#.## s)
        [2/2] B ...
            B ran
        [2/2] B ... ok (#.## s)

        <recap of scripts/test.rhai: A: failed; B: ok>
        "#,
        ),
        r#"
        error: step "A" failed
          × broken
           ╭─[scripts/test.rhai:1:37]
         1 │ step("A", #{keep_going: true}, || { throw "broken" });
           ·                                     ──┬──
           ·                                       ╰── thrown here
         2 │ step("B", || { info("B ran") });
           ╰────
        the next steps still run; the run will exit 1
        "#,
    );

    let missing = BPRUN
        .test()
        .script("check_row(\"Row\", #{hint: \"h\"}, || \"x\");\n");
    missing.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: the top level of scripts/test.rhai failed
          × check_row("Row"): the option `expected` is missing
           ╭─[scripts/test.rhai:1:1]
         1 │ check_row("Row", #{hint: "h"}, || "x");
           · ────┬────
           ·     ╰── failed here
           ╰────
          hint: say what the row expects to find: check_row("Gateway Programmed", #{expected: "True"}, || ...)
        "#,
    );
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
        .env("BPRUN_REDIS_SERVER", tool("redis-server"))
        .env("BPRUN_REDIS_CLI", tool("redis-cli"))
        .envs(&vars)
}

pub(crate) fn kubectl(sim: &Sim, args: &[&str]) -> Output {
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

    // Green, and read-only on Kubernetes; on GitLab only the access probe writes, and it leaves
    // the users and projects as they were.
    let gitlab_state = || {
        let names = |path: &str, field: &str| -> Vec<String> {
            let listed = sim.api_json(path);
            let mut names: Vec<String> = listed
                .as_array()
                .expect("a list")
                .iter()
                .map(|item| item[field].as_str().unwrap_or("").to_string())
                .collect();
            names.sort();
            names
        };
        (
            names("users?per_page=100", "username"),
            names("projects?per_page=100", "path_with_namespace"),
        )
    };
    let before = gitlab_state();
    kubectl(&sim, &["delete", "--raw", "/-/sim/requests"]);
    sim.clear_requests();
    // The forward's local port is chosen by the system.
    copy.run(&["scripts/qualify.rhai"])
        .replace_regex(r"\(127\.0\.0\.1:\d+\)", "(127.0.0.1:<port>)")
        .expect(
            0,
            r#"
            [1/24] Cluster and helm reachable ... ok (#.## s)
            [2/24] Envoy gateway pods ... ok (#.## s)
            [3/24] Gateway/gitlab-gw Programmed ... ok (#.## s)
            [4/24] local-path is the default StorageClass ... ok (#.## s)
            [5/24] CloudNativePG cluster Ready ... ok (#.## s)
            [6/24] Redis answers PING ... ok (#.## s)
            [7/24] MinIO buckets ... ok (#.## s)
            [8/24] OpenBao unsealed ... ok (#.## s)
            [9/24] Wildcard CA on disk ... ok (#.## s)
            [10/24] 4 listener Secrets ... ok (#.## s)
            [11/24] GitLab /-/health ... ok (#.## s)
            [12/24] Runner online ...
                warning: http://127.0.0.1:8200 does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
            [12/24] Runner online ... ok (#.## s)
            [13/24] GitLab pods Running ... ok (#.## s)
            [14/24] Group blueprint-apps ... ok (#.## s)
            [15/24] Projects ... ok (#.## s)
            [16/24] .gitlab-ci.yml in every project ... ok (#.## s)
            [17/24] CI/CD variables ... ok (#.## s)
            [18/24] Smoke pipelines green ... ok (#.## s)
            [19/24] Workloads reachable ... ok (#.## s)
            [20/24] Default branch protected ... ok (#.## s)
            [21/24] Anonymous clone refused ... ok (#.## s)
            [22/24] Developer cannot delete a project ... ok (#.## s)
            [23/24] Outsider and anonymous clone refused ... ok (#.## s)
            [24/24] Gateway routes answer ... ok (#.## s)

            Qualification of scripts/qualify.rhai
              #  check                                   expected                                         found                                               result
              1  Cluster and helm reachable              nodes, helm releases                             5 nodes, 9 helm releases                            pass
              2  Envoy gateway pods                      every replica Ready                              1/1 Ready                                           pass
              3  Gateway/gitlab-gw Programmed            True                                             True                                                pass
              4  local-path is the default StorageClass  true                                             true                                                pass
              5  CloudNativePG cluster Ready             True                                             True                                                pass
              6  Redis answers PING                      PONG                                             PONG                                                pass
              7  MinIO buckets                           11 of 11                                         11 of 11                                            pass
              8  OpenBao unsealed                        sealed: false                                    sealed: false                                       pass
              9  Wildcard CA on disk                     ca.pem, cert.pem, key.pem                        ca.pem, cert.pem, key.pem                           pass
             10  4 listener Secrets                      4 of 4 in gitlab                                 4 of 4 in gitlab                                    pass
             11  GitLab /-/health                        200                                              200                                                 pass
             12  Runner online                           online, its pods Ready                           1 online, 1/1 pods Ready                            pass
             13  GitLab pods Running                     every pod Ready, none missing                    9/9 Ready                                           pass
             14  Group blueprint-apps                    blueprint-apps                                   blueprint-apps                                      pass
             15  Projects                                shared-code, guestbook, redis, redis-slave       shared-code, guestbook, redis, redis-slave          pass
             16  .gitlab-ci.yml in every project         on main in 4 projects                            on main in 4 projects                               pass
             17  CI/CD variables                         2 keys each, a hidden kubeconfig per chart       2 keys each, a hidden kubeconfig per chart          pass
             18  Smoke pipelines green                   success on main in 4 projects                    success on main in 4 projects                       pass
             19  Workloads reachable                     https://guestbook.local.example.net answers 200  https://guestbook.local.example.net answers 200     pass
             20  Default branch protected                main protected in 4 projects                     main protected in 4 projects                        pass
             21  Anonymous clone refused                 401 for 4 projects                               401 for 4 projects                                  pass
             22  Developer cannot delete a project       refused (403 Forbidden)                          refused (403 Forbidden)                             pass
             23  Outsider and anonymous clone refused    both refused                                     outsider 404 Not Found, anonymous 401 Unauthorized  pass
             24  Gateway routes answer                   each host: no 404, no 5xx                        gitlab 200, registry 200, guestbook 200             pass
            24 checks: 24 passed, 0 failed
            "#,
            "",
        );
    assert_eq!(kube_mutating(&sim), 0);
    assert_eq!(gitlab_state(), before);
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
    // In check mode the access probe, which creates users, is not run: its rows say so, and,
    // as any row that could not be checked, they make the run exit 1.
    let checked = copy.run(&["--check", "--json", "scripts/qualify.rhai"]);
    let unprobed = not_passed(&rows(&checked));
    let skipped = Row {
        found: "check mode: the access probe creates two users and a project".to_string(),
        result: "not checked".to_string(),
        hint: None,
    };
    assert_eq!(
        unprobed,
        BTreeMap::from([
            (
                "Developer cannot delete a project".to_string(),
                skipped.clone()
            ),
            ("Outsider and anonymous clone refused".to_string(), skipped),
        ])
    );
    checked.code(1);
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
            "Default branch protected",
            "Developer cannot delete a project",
            "Group blueprint-apps",
            "Outsider and anonymous clone refused",
            "Projects",
            "Runner online",
            "Smoke pipelines green"
        ]
    );
    assert_eq!(failed.len(), 10, "{failed:?}");
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
