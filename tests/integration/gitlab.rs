//! The GitLab natives and client against the GitLab simulator over real HTTP, and contract
//! checks of the simulator's answers against GitLab's documented behaviour.

use crate::support::one_step_run;
use crate::support::with_recaps;
use crate::support::{BPRUN, GITLAB_TOKEN, Sim, SimKind};
use crate::support::{Output, Test, repo};
use crate::support::{gitlab_wait_error, wait_failed};

fn with_sim(test: Test, sim: &Sim) -> Test {
    test.env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN)
        .replace(sim.gitlab_url(), "<gitlab>")
}

/// Commit ids differ between runs (a commit's time is part of it).
fn without_commit_ids(output: Output) -> Output {
    output.short_commits()
}

/// A pipeline wait's lines once it settled: how many `pending` and `running` lines it printed
/// before, and the seconds each took, depend on how fast the runner took the jobs.
fn settled_waits(output: Output) -> Output {
    output
        .replace_regex(
            r"(?m)^    pipeline #\d+ of [^:]+: (pending|running) \(\d+ s\)\n",
            "",
        )
        .replace_regex(
            r"(?m)^(    pipeline #\d+ of [^:]+: \w+) \(\d+ s\)$",
            "$1 (# s)",
        )
}

const ENSURE: &str = r#"
const APPS = ["shared-code", "guestbook", "redis", "redis-slave"];
step("Ensure group", || {
    gitlab_ensure_group("blueprint-apps", #{visibility: "internal"});
});
step("Ensure projects", || {
    for app in APPS { gitlab_ensure_project("blueprint-apps", app, #{visibility: "internal"}); }
});
step("Variables", || {
    for app in APPS {
        gitlab_set_variables(`blueprint-apps/${app}`, #{
            CI_REGISTRY_IMAGE: `gitlab-registry.gitlab.svc:5000/blueprint-apps/${app}`,
            CI_HELM_TIMEOUT: "5m",
            CI_KUBECONFIG_B64: #{value: env_secret("KUBECONFIG_B64"), masked: true},
        });
    }
});
"#;

const KUBECONFIG_B64: &str = "YXBpVmVyc2lvbjogdjEKa2luZDogQ29uZmlnCg==";

#[test]
fn ensure_natives_create_once_then_report_unchanged() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(repo().script(ENSURE), &sim).env("KUBECONFIG_B64", KUBECONFIG_B64);
    let first = test.run(&["scripts/test.rhai"]);
    first.expect(
        0,
        &with_recaps("[1/3] Ensure group ...\n\
                      \x20   ~ create group blueprint-apps (internal)\n\
                      [1/3] Ensure group ... changed (#.## s)\n\
                      [2/3] Ensure projects ...\n\
                      \x20   ~ create project blueprint-apps/shared-code\n\
                      \x20   ~ create project blueprint-apps/guestbook\n\
                      \x20   ~ create project blueprint-apps/redis\n\
                      \x20   ~ create project blueprint-apps/redis-slave\n\
                      [2/3] Ensure projects ... changed (#.## s)\n\
                      [3/3] Variables ...\n\
                      \x20   ~ create CI variable CI_HELM_TIMEOUT of blueprint-apps/shared-code\n\
                      \x20   ~ create CI variable CI_KUBECONFIG_B64 of blueprint-apps/shared-code\n\
                      \x20   ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/shared-code\n\
                      \x20   ~ create CI variable CI_HELM_TIMEOUT of blueprint-apps/guestbook\n\
                      \x20   ~ create CI variable CI_KUBECONFIG_B64 of blueprint-apps/guestbook\n\
                      \x20   ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/guestbook\n\
                      \x20   ~ create CI variable CI_HELM_TIMEOUT of blueprint-apps/redis\n\
                      \x20   ~ create CI variable CI_KUBECONFIG_B64 of blueprint-apps/redis\n\
                      \x20   ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/redis\n\
                      \x20   ~ create CI variable CI_HELM_TIMEOUT of blueprint-apps/redis-slave\n\
                      \x20   ~ create CI variable CI_KUBECONFIG_B64 of blueprint-apps/redis-slave\n\
                      \x20   ~ create CI variable CI_REGISTRY_IMAGE of blueprint-apps/redis-slave\n\
                      [3/3] Variables ... changed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Ensure group: changed 1; Ensure projects: changed 4; Variables: changed 12>\n"),
        "",
    );
    // A masked value leaks nowhere.
    first.stdout_lacks(KUBECONFIG_B64);

    sim.clear_requests();
    let second = test.run(&["-q", "scripts/test.rhai"]);
    second.expect(
        0,
        &with_recaps("[1/3] Ensure group ... ok (#.## s)\n\
                      [2/3] Ensure projects ... ok (#.## s)\n\
                      [3/3] Variables ... ok (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Ensure group: ok; Ensure projects: ok; Variables: ok>\n"),
        "",
    );
    let log = sim.requests();
    assert_eq!(
        log["mutating"], 0,
        "an idempotent run sent writes: {}",
        log["counters"]
    );
    // One group lookup, one lookup per project, one variables list per project.
    assert_eq!(log["total"], 1 + 4 + 4, "{}", log["counters"]);
}

#[test]
fn check_mode_sends_no_write() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(repo().script(ENSURE), &sim).env("KUBECONFIG_B64", KUBECONFIG_B64);
    test.run(&["--check", "scripts/test.rhai"]).expect(
        0,
        &with_recaps("check mode: nothing will be changed\n\
                      [1/3] Ensure group ...\n\
                      \x20   ~ would create group blueprint-apps (internal)\n\
                      [1/3] Ensure group ... changed (#.## s)\n\
                      [2/3] Ensure projects ...\n\
                      \x20   ~ would create project blueprint-apps/shared-code\n\
                      \x20   ~ would create project blueprint-apps/guestbook\n\
                      \x20   ~ would create project blueprint-apps/redis\n\
                      \x20   ~ would create project blueprint-apps/redis-slave\n\
                      [2/3] Ensure projects ... changed (#.## s)\n\
                      [3/3] Variables ...\n\
                      \x20   ~ would create CI variable CI_HELM_TIMEOUT of blueprint-apps/shared-code\n\
                      \x20   ~ would create CI variable CI_KUBECONFIG_B64 of blueprint-apps/shared-code\n\
                      \x20   ~ would create CI variable CI_REGISTRY_IMAGE of blueprint-apps/shared-code\n\
                      \x20   ~ would create CI variable CI_HELM_TIMEOUT of blueprint-apps/guestbook\n\
                      \x20   ~ would create CI variable CI_KUBECONFIG_B64 of blueprint-apps/guestbook\n\
                      \x20   ~ would create CI variable CI_REGISTRY_IMAGE of blueprint-apps/guestbook\n\
                      \x20   ~ would create CI variable CI_HELM_TIMEOUT of blueprint-apps/redis\n\
                      \x20   ~ would create CI variable CI_KUBECONFIG_B64 of blueprint-apps/redis\n\
                      \x20   ~ would create CI variable CI_REGISTRY_IMAGE of blueprint-apps/redis\n\
                      \x20   ~ would create CI variable CI_HELM_TIMEOUT of blueprint-apps/redis-slave\n\
                      \x20   ~ would create CI variable CI_KUBECONFIG_B64 of blueprint-apps/redis-slave\n\
                      \x20   ~ would create CI variable CI_REGISTRY_IMAGE of blueprint-apps/redis-slave\n\
                      [3/3] Variables ... changed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai (check mode): Ensure group: changed 1; Ensure projects: changed 4; Variables: changed 12>\n"),
        "",
    );
    assert_eq!(sim.requests()["mutating"], 0);
    assert_eq!(sim.api("GET", "groups", None).json(), serde_json::json!([]));
}

#[test]
fn set_variables_updates_differing_and_removes_unlisted() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().script(
            r#"step("Vars", || {
    gitlab_ensure_group("g");
    gitlab_ensure_project("g", "p");
    assert_eq(gitlab_set_variables("g/p", #{A: "1", B: "2", C: "3"}), #{created: 3, updated: 0, unchanged: 0, removed: 0, changed: true});
    assert_eq(gitlab_set_variables("g/p", #{A: "1", B: "20"}, #{remove_unlisted: true}), #{created: 0, updated: 1, unchanged: 1, removed: 1, changed: true});
    assert_eq(gitlab_set_variables("g/p", #{A: "1", B: "20"}), #{created: 0, updated: 0, unchanged: 2, removed: 0, changed: false});
    assert_eq(gitlab_set_variables("g/p", #{A: #{value: "1", environment_scope: "production"}}), #{created: 1, updated: 0, unchanged: 0, removed: 0, changed: true});
    try {
        gitlab_set_variables("g/p", #{GITLAB_TOKEN: #{value: "has spaces in it", masked: true}});
        throw "no error";
    } catch (e) {
        assert_eq(e.message, "CI variable GITLAB_TOKEN cannot be masked: its value breaks GitLab's masking rules");
    }
});
"#,
        ),
        &sim,
    );
    let output = test.run(&["-q", "scripts/test.rhai"]);
    output.expect(
        0,
        &with_recaps(
            "[1/1] Vars ... changed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Vars: changed 8>\n",
        ),
        "",
    );
    output.stderr_lacks("has spaces in it");
    let variables = sim.api("GET", "projects/g%2Fp/variables", None).json();
    let mut keys: Vec<String> = variables
        .as_array()
        .expect("list")
        .iter()
        .map(|v| {
            format!(
                "{}={}@{}",
                v["key"].as_str().unwrap_or(""),
                v["value"].as_str().unwrap_or(""),
                v["environment_scope"].as_str().unwrap_or("")
            )
        })
        .collect();
    keys.sort();
    assert_eq!(keys, ["A=1@*", "A=1@production", "B=20@*"]);
}

#[test]
fn pipelines_succeed_and_failures_name_the_job_and_trace() {
    // Jobs run only when an online runner takes them: this simulator has one.
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let test = with_sim(
        repo().script(
            r#"
fn commit(project, file, content) {
    gitlab_post(`projects/${project}/repository/files/${file}`, #{branch: "main", content: content, commit_message: "test"});
}
step("Set up", || {
    gitlab_ensure_group("blueprint-apps");
    for name in ["shared-code", "guestbook", "broken", "orphan"] { gitlab_ensure_project("blueprint-apps", name); }
    commit("blueprint-apps%2Fshared-code", "templates%2Fapp.yml", "stages: [build, deploy]\n.helm:\n  script: [helm lint]\n");
    commit("blueprint-apps%2Fguestbook", ".gitlab-ci.yml", "include:\n  project: blueprint-apps/shared-code\n  ref: main\n  file: templates/app.yml\nbuild:\n  stage: build\n  script: [make]\ndeploy:\n  stage: deploy\n  needs: [build]\n  script: [helm upgrade]\n");
    commit("blueprint-apps%2Fbroken", ".gitlab-ci.yml", "stages: [build]\nbuild:\n  stage: build\n  script: ['make', 'exit 2']\n");
    commit("blueprint-apps%2Forphan", ".gitlab-ci.yml", "include:\n  project: blueprint-apps/missing\n  file: templates/app.yml\nbuild:\n  script: [make]\n");
});
step("Green", || {
    let started = gitlab_trigger_pipeline("blueprint-apps/guestbook", "main");
    let done = gitlab_wait_pipeline("blueprint-apps/guestbook", started.id, #{timeout: 30, interval: 0.2});
    assert_eq(done.status, "success");
});
step("Missing include", || {
    try {
        gitlab_trigger_pipeline("blueprint-apps/orphan", "main");
        throw "no error";
    } catch (e) {
        assert_eq(e.message, "gitlab: POST /projects/blueprint-apps%2Forphan/pipeline -> 400: Project `blueprint-apps/missing` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined.");
    }
});
step("Red", || {
    let started = gitlab_trigger_pipeline("blueprint-apps/broken", "main");
    gitlab_wait_pipelines([started], #{timeout: 30, interval: 0.2});
});
"#,
        ),
        &sim,
    );
    // The refused trigger started nothing, so "Missing include" changed nothing.
    settled_waits(test.run(&["scripts/test.rhai"])).expect(
        1,
        &with_recaps("[1/4] Set up ...\n\
                      \x20   ~ create group blueprint-apps (internal)\n\
                      \x20   ~ create project blueprint-apps/shared-code\n\
                      \x20   ~ create project blueprint-apps/guestbook\n\
                      \x20   ~ create project blueprint-apps/broken\n\
                      \x20   ~ create project blueprint-apps/orphan\n\
                      \x20   ~ post /api/v4/projects/blueprint-apps%2Fshared-code/repository/files/templates%2Fapp.yml\n\
                      \x20   ~ post /api/v4/projects/blueprint-apps%2Fguestbook/repository/files/.gitlab-ci.yml\n\
                      \x20   ~ post /api/v4/projects/blueprint-apps%2Fbroken/repository/files/.gitlab-ci.yml\n\
                      \x20   ~ post /api/v4/projects/blueprint-apps%2Forphan/repository/files/.gitlab-ci.yml\n\
                      [1/4] Set up ... changed (#.## s)\n\
                      [2/4] Green ...\n\
                      \x20   ~ start pipeline of blueprint-apps/guestbook on main\n\
                      \x20   pipeline #13 of blueprint-apps/guestbook: success (# s)\n\
                      [2/4] Green ... changed (#.## s)\n\
                      [3/4] Missing include ... ok (#.## s)\n\
                      [4/4] Red ...\n\
                      \x20   ~ start pipeline of blueprint-apps/broken on main\n\
                      \x20   pipeline #16 of blueprint-apps/broken: failed (# s)\n\
                      [4/4] Red ... failed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Set up: changed 9; Green: changed 1; Missing include: ok; Red: failed 1>\n"),
        "error: step \"Red\" failed\n\
         \x20 × gitlab: pipeline #16 of blueprint-apps/broken failed\n\
         \x20   ╭─[scripts/test.rhai:28:5]\n\
         \x2027 │     let started = gitlab_trigger_pipeline(\"blueprint-apps/broken\", \"main\");\n\
         \x2028 │     gitlab_wait_pipelines([started], #{timeout: 30, interval: 0.2});\n\
         \x20   ·     ──────────┬──────────\n\
         \x20   ·               ╰── failed here\n\
         \x2029 │ });\n\
         \x20   ╰────\n\
         \x20 caused by: job build failed; end of its trace:\n\
         \x20   Running with bprun-sim\n\
         \x20   Job build (stage build)\n\
         \x20   $ make\n\
         \x20   $ exit 2\n\
         \x20   ERROR: Job failed: exit code 2\n\
         \x20 hint: open <gitlab>/blueprint-apps/broken/-/pipelines/16\n\
         re-run with --resume to continue from here\n",
    );
}

#[test]
fn with_a_fifth_of_answers_failing_the_natives_still_converge_without_duplicates() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    sim.set_faults(r#"{"error_rate": 0.2, "reset_rate": 0.05}"#);
    let test = with_sim(repo().script(ENSURE), &sim)
        .env("KUBECONFIG_B64", KUBECONFIG_B64)
        .env("BPRUN_GITLAB_BACKOFF_MS", "5");
    // Converging means: the run succeeds, or, when every retry of one request met a fault (a
    // tail of about 0.5% at these rates), the next run with --resume does. Either way no
    // duplicate appears.
    let output = test.run(&["-q", "scripts/test.rhai"]);
    if output.code != 0 {
        test.run(&["-q", "--resume", "scripts/test.rhai"]).code(0);
    }
    sim.set_faults("{}");
    let faults: usize = sim.requests()["requests"]
        .as_array()
        .expect("log")
        .iter()
        .filter(|r| !r["fault"].is_null())
        .count();
    assert!(faults > 0, "no fault was injected");
    assert_eq!(
        sim.api("GET", "groups", None)
            .json()
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        sim.api("GET", "groups/blueprint-apps/projects", None)
            .json()
            .as_array()
            .map(Vec::len),
        Some(4)
    );
    for app in ["shared-code", "guestbook", "redis", "redis-slave"] {
        let variables = sim
            .api(
                "GET",
                &format!("projects/blueprint-apps%2F{app}/variables"),
                None,
            )
            .json();
        assert_eq!(
            variables.as_array().map(Vec::len),
            Some(3),
            "{app}: {variables}"
        );
    }
    // A second run converges to "nothing to do".
    test.run(&["-q", "scripts/test.rhai"]).expect(
        0,
        &with_recaps("[1/3] Ensure group ... ok (#.## s)\n\
                      [2/3] Ensure projects ... ok (#.## s)\n\
                      [3/3] Variables ... ok (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Ensure group: ok; Ensure projects: ok; Variables: ok>\n"),
        "",
    );
}

/// `concurrently([...], #{writes_after_first: true})`: the projects' step reads at once, but its
/// writes wait for the group's step (a project is created inside the group: sent early, GitLab
/// would answer that the namespace does not exist), and are not sent when it failed.
const WRITES_AFTER_FIRST: &str = r#"
concurrently([
    step("Ensure group", || {
        if args.fail == true { throw "asked to fail"; }
        sleep(0.2);
        gitlab_ensure_group("blueprint-apps", #{visibility: "internal"});
    }),
    step("Ensure projects", || {
        for app in ["shared-code", "guestbook"] { gitlab_ensure_project("blueprint-apps", app, #{visibility: "internal"}); }
    }),
], #{writes_after_first: true});
"#;

#[test]
fn a_group_writes_after_its_first_step_and_sends_nothing_when_it_failed() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(repo().script(WRITES_AFTER_FIRST), &sim);
    test.run(&["--list", "scripts/test.rhai"]).expect(
        0,
        "
        scripts/test.rhai: 2 steps
        [1/2] Ensure group  (runs together with steps 1-2, 4 at a time)
        [2/2] Ensure projects  (runs together with steps 1-2, 4 at a time; its writes wait for step 1)
        ",
        "",
    );
    test.run(&["scripts/test.rhai", "--fail"]).expect(
        1,
        &with_recaps(
            "
            [1/2] Ensure group ... failed (#.## s)
            [2/2] Ensure projects ... failed (#.## s)

            <recap of scripts/test.rhai: Ensure group: failed; Ensure projects: failed>
            ",
        ),
        r#"
        error: step "Ensure group" failed
          × asked to fail
           ╭─[scripts/test.rhai:4:32]
         3 │     step("Ensure group", || {
         4 │         if args.fail == true { throw "asked to fail"; }
           ·                                ──┬──
           ·                                  ╰── thrown here
         5 │         sleep(0.2);
           ╰────
        re-run with --resume to continue from here
        error: step "Ensure projects" failed
          × gitlab: POST /projects (blueprint-apps/shared-code): not sent, because step "Ensure group" failed first (asked to fail)
            ╭─[scripts/test.rhai:9:51]
          8 │     step("Ensure projects", || {
          9 │         for app in ["shared-code", "guestbook"] { gitlab_ensure_project("blueprint-apps", app, #{visibility: "internal"}); }
            ·                                                   ──────────┬──────────
            ·                                                             ╰── failed here
         10 │     }),
            ╰────
          hint: writes wait for step "Ensure group" to finish; fix its failure and re-run
        re-run with --resume to continue from here
        "#,
    );
    assert_eq!(
        sim.requests()["mutating"],
        0,
        "{}",
        sim.requests()["counters"]
    );
    // The projects' lookups were sent; no write was.
    assert_eq!(sim.api("GET", "groups", None).json(), serde_json::json!([]));
    // Re-run, the group is created while the projects are looked up, then the projects in it.
    test.run(&["--resume", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
            resuming at step 1 \"Ensure group\" (run of <time>)
            [1/2] Ensure group ...
                ~ create group blueprint-apps (internal)
            [1/2] Ensure group ... changed (#.## s)
            [2/2] Ensure projects ...
                ~ create project blueprint-apps/shared-code
                ~ create project blueprint-apps/guestbook
            [2/2] Ensure projects ... changed (#.## s)

            <recap of scripts/test.rhai: Ensure group: changed 1; Ensure projects: changed 2>
            ",
        ),
        "",
    );
}

#[test]
fn a_dropped_post_answer_does_not_create_a_duplicate() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    sim.set_faults(r#"{"drop_answer_rate": 1.0}"#);
    let test = with_sim(
        repo().script("step(\"Create\", || { let group = gitlab_ensure_group(\"blueprint-apps\"); assert_eq(group.changed, true); });\n"),
        &sim,
    )
    .env("BPRUN_GITLAB_BACKOFF_MS", "5");
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    sim.set_faults("{}");
    let log = sim.requests();
    assert_eq!(
        log["counters"]["POST /api/v4/groups"], 1,
        "{}",
        log["counters"]
    );
    assert_eq!(
        sim.api("GET", "groups", None)
            .json()
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn rate_limits_are_waited_out() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    sim.set_faults(r#"{"rate_limit_burst": 2, "retry_after_s": 1}"#);
    let test = with_sim(
        repo().script("step(\"Create\", || { gitlab_ensure_group(\"blueprint-apps\"); });\n"),
        &sim,
    );
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    let log = sim.requests();
    let limited = log["requests"]
        .as_array()
        .expect("log")
        .iter()
        .filter(|r| r["status"] == 429)
        .count();
    assert_eq!(limited, 2);
    assert_eq!(
        sim.api("GET", "groups", None)
            .json()
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

/// The quiet run of a one-step script whose step "Look" failed.
const LOOK_FAILED: &str = "[1/1] Look ... failed (#.## s)\n\
                           \n\
                           Recap of scripts/test.rhai\n\
                           \x20 #  step  status            changes       time\n\
                           \x20 1  Look  failed                  0     #.## s\n\
                           1 step: 0 ok, 0 changed, 0 skipped, 1 failed in #.## s\n";

#[test]
fn errors_show_method_path_status_and_gitlab_message() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = repo()
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", "wrong-token")
        .replace(sim.gitlab_url(), "<gitlab>")
        .script("step(\"Look\", || { gitlab_get(\"user\"); });\n");
    let output = test.run(&["-q", "scripts/test.rhai"]);
    output.expect(
        1,
        LOOK_FAILED,
        "error: step \"Look\" failed\n\
         \x20 × gitlab: GET /user -> 401: 401 Unauthorized\n\
         \x20  ╭─[scripts/test.rhai:1:19]\n\
         \x201 │ step(\"Look\", || { gitlab_get(\"user\"); });\n\
         \x20  ·                   ─────┬────\n\
         \x20  ·                        ╰── failed here\n\
         \x20  ╰────\n\
         \x20 caused by: at <gitlab>/api/v4/user\n\
         \x20 hint: the token is missing or invalid: set GITLAB_TOKEN or call gitlab_login(token)\n\
         re-run with --resume to continue from here\n",
    );
    output.stderr_lacks("wrong-token");

    let test = with_sim(repo().script("step(\"Dup\", || { gitlab_ensure_group(\"g\"); gitlab_post(\"projects\", #{name: \"p\", namespace_id: 2}); gitlab_post(\"projects\", #{name: \"p\", namespace_id: 2}); });\n"), &sim);
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &one_step_run("Dup", "failed 2"),
        "error: step \"Dup\" failed\n\
         \x20 × gitlab: POST /projects -> 400: name has already been taken, path has already been taken\n\
         \x20  ╭─[scripts/test.rhai:1:100]\n\
         \x201 │ step(\"Dup\", || { gitlab_ensure_group(\"g\"); gitlab_post(\"projects\", #{name: \"p\", namespace_id: 2}); gitlab_post(\"projects\", #{name: \"p\", namespace_id: 2}); });\n\
         \x20  ·                                                                                                    ─────┬─────\n\
         \x20  ·                                                                                                         ╰── failed here\n\
         \x20  ╰────\n\
         \x20 caused by: at <gitlab>/api/v4/projects\n\
         \x20 hint: see GitLab's message above\n\
         re-run with --resume to continue from here\n",
    );

    let closed = format!("http://127.0.0.1:{}", crate::support::free_port());
    let test = repo()
        .env("GITLAB_URL", &closed)
        .env("GITLAB_TOKEN", GITLAB_TOKEN)
        .replace(&closed, "<closed>")
        .script("step(\"Look\", || { gitlab_get(\"user\"); });\n");
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        LOOK_FAILED,
        "error: step \"Look\" failed\n\
         \x20 × gitlab: GET /user failed: Connection refused (os error 111)\n\
         \x20  ╭─[scripts/test.rhai:1:19]\n\
         \x201 │ step(\"Look\", || { gitlab_get(\"user\"); });\n\
         \x20  ·                   ─────┬────\n\
         \x20  ·                        ╰── failed here\n\
         \x20  ╰────\n\
         \x20 caused by: at <closed>/api/v4/user\n\
         \x20 hint: is GitLab running and reachable at <closed>? (GITLAB_URL)\n\
         re-run with --resume to continue from here\n",
    );
}

#[test]
fn the_simulator_answers_as_gitlab_documents() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    // Auth.
    let reply = sim.raw("GET", "/api/v4/user", None, None);
    assert_eq!(
        (reply.status, reply.json()),
        (401, serde_json::json!({"message": "401 Unauthorized"}))
    );
    let bearer = sim.raw("GET", "/api/v4/user", None, None);
    assert_eq!(bearer.status, 401);
    assert_eq!(sim.api("GET", "user", None).json()["username"], "root");
    // Health.
    let health = sim.raw("GET", "/-/health", None, None);
    assert_eq!((health.status, health.body.as_str()), (200, "GitLab OK"));
    // Groups: a taken path answers 400 with a string message.
    assert_eq!(
        sim.api(
            "POST",
            "groups",
            Some(r#"{"name":"g","path":"g","visibility":"internal"}"#)
        )
        .status,
        201
    );
    let taken = sim.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#));
    assert_eq!(
        (taken.status, taken.json()),
        (
            400,
            serde_json::json!({"message": "Failed to save group {:path=>[\"has already been taken\"]}"})
        )
    );
    assert_eq!(
        sim.api("POST", "groups", Some(r#"{"path":"x"}"#)).json(),
        serde_json::json!({"error": "name is missing"})
    );
    // Projects: required fields of the answer; a taken name answers 400 with a field map.
    let created = sim.api(
        "POST",
        "projects",
        Some(r#"{"name":"p","namespace_id":2,"visibility":"internal"}"#),
    );
    assert_eq!(created.status, 201);
    let project = created.json();
    for field in [
        "id",
        "path_with_namespace",
        "http_url_to_repo",
        "web_url",
        "default_branch",
        "namespace",
        "visibility",
    ] {
        assert!(project.get(field).is_some(), "project answer lacks {field}");
    }
    assert_eq!(project["default_branch"], serde_json::Value::Null);
    let duplicate = sim.api("POST", "projects", Some(r#"{"name":"p","namespace_id":2}"#));
    assert_eq!(
        duplicate.json(),
        serde_json::json!({"message": {"name": ["has already been taken"], "path": ["has already been taken"]}})
    );
    assert_eq!(
        sim.api("GET", "projects/g%2Fp", None).json()["id"],
        project["id"]
    );
    // An unencoded slash matches no route.
    assert_eq!(sim.api("GET", "projects/g/p", None).status, 404);
    assert_eq!(
        sim.api("GET", "projects/g%2Fnope", None).json(),
        serde_json::json!({"message": "404 Project Not Found"})
    );
    // Variables: charset, masking and duplicate keys.
    let bad_key = sim.api(
        "POST",
        "projects/g%2Fp/variables",
        Some(r#"{"key":"NO-DASH","value":"x"}"#),
    );
    assert_eq!(
        bad_key.json(),
        serde_json::json!({"message": {"key": ["can contain only letters, digits and '_'."]}})
    );
    let bad_mask = sim.api(
        "POST",
        "projects/g%2Fp/variables",
        Some(r#"{"key":"T","value":"short","masked":true}"#),
    );
    assert_eq!(
        (bad_mask.status, bad_mask.json()),
        (
            400,
            serde_json::json!({"message": {"value": ["is invalid"]}})
        )
    );
    assert_eq!(
        sim.api(
            "POST",
            "projects/g%2Fp/variables",
            Some(r#"{"key":"K","value":"v"}"#)
        )
        .status,
        201
    );
    let dup = sim.api(
        "POST",
        "projects/g%2Fp/variables",
        Some(r#"{"key":"K","value":"v"}"#),
    );
    assert_eq!(
        dup.json(),
        serde_json::json!({"message": {"key": ["(K) has already been taken"]}})
    );
    let variable = sim.api("GET", "projects/g%2Fp/variables/K", None).json();
    for field in [
        "key",
        "value",
        "variable_type",
        "protected",
        "masked",
        "hidden",
        "raw",
        "environment_scope",
        "description",
    ] {
        assert!(
            variable.get(field).is_some(),
            "variable answer lacks {field}"
        );
    }
    // Pagination headers.
    for index in 0..5 {
        sim.api(
            "POST",
            "projects/g%2Fp/variables",
            Some(&format!(r#"{{"key":"V{index}","value":"v"}}"#)),
        );
    }
    let page = sim.api("GET", "projects/g%2Fp/variables?per_page=2&page=2", None);
    assert_eq!(page.json().as_array().map(Vec::len), Some(2));
    assert_eq!(
        (
            page.header("x-page"),
            page.header("x-per-page"),
            page.header("x-total"),
            page.header("x-total-pages")
        ),
        (Some("2"), Some("2"), Some("6"), Some("3"))
    );
    assert_eq!(
        (page.header("x-next-page"), page.header("x-prev-page")),
        (Some("3"), Some("1"))
    );
    let variables = format!("{}/api/v4/projects/g%2Fp/variables", sim.gitlab_url());
    assert_eq!(
        page.header("link"),
        Some(
            format!(
                "<{variables}?page=1&per_page=2>; rel=\"prev\", <{variables}?page=3&per_page=2>; rel=\"next\", \
                 <{variables}?page=1&per_page=2>; rel=\"first\", <{variables}?page=3&per_page=2>; rel=\"last\""
            )
            .as_str()
        )
    );
    assert!(page.header("ratelimit-limit").is_some() && page.header("ratelimit-reset").is_some());
    // Deleting a project answers 202.
    let deleted = sim.api("DELETE", "projects/g%2Fp", None);
    assert_eq!(
        (deleted.status, deleted.json()),
        (202, serde_json::json!({"message": "202 Accepted"}))
    );
    // 429 with Retry-After and a plain-text body.
    sim.set_faults(r#"{"rate_limit_burst": 1, "retry_after_s": 7}"#);
    let limited = sim.api("GET", "user", None);
    assert_eq!(
        (
            limited.status,
            limited.body.as_str(),
            limited.header("retry-after")
        ),
        (429, "Retry later\n", Some("7"))
    );
}

#[test]
fn get_all_follows_pagination() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    sim.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#));
    for index in 0..130 {
        sim.api(
            "POST",
            "projects",
            Some(&format!(r#"{{"name":"p{index}","namespace_id":2}}"#)),
        );
    }
    let test = with_sim(
        repo().script(
            r#"step("All", || {
    assert_eq(gitlab_get_all("groups/g/projects").len(), 130);
    let keyset = gitlab_get_all("projects?pagination=keyset&order_by=id&sort=asc");
    assert_eq(keyset.len(), 130);
    assert_eq(keyset[0].name, "p0");
    assert_eq(keyset[129].name, "p129");
});
"#,
        ),
        &sim,
    );
    sim.clear_requests();
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    let counters = &sim.requests()["counters"];
    assert_eq!(counters["GET /api/v4/groups/:id/projects"], 2, "{counters}");
    assert_eq!(counters["GET /api/v4/projects"], 2, "{counters}");
    // Keyset pages carry only a next link, no totals.
    let page = sim.api(
        "GET",
        "projects?pagination=keyset&order_by=id&sort=asc&per_page=100",
        None,
    );
    assert_eq!(page.header("x-total"), None);
    assert_eq!(
        page.header("link"),
        Some(
            format!(
                "<{}/api/v4/projects?pagination=keyset&per_page=100&order_by=id&sort=asc&id_after=102>; rel=\"next\"",
                sim.gitlab_url()
            )
            .as_str()
        )
    );
}

#[test]
fn state_persists_across_restarts() {
    let state = tempfile::tempdir().expect("state");
    let dir = state.path().to_str().expect("utf-8");
    let first = BPRUN.sim(SimKind::Gitlab, &["--state", dir]);
    first.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#));
    let id = first
        .api("POST", "projects", Some(r#"{"name":"p","namespace_id":2}"#))
        .json()["id"]
        .clone();
    drop(first);
    let second = BPRUN.sim(SimKind::Gitlab, &["--state", dir]);
    assert_eq!(second.api("GET", "projects/g%2Fp", None).json()["id"], id);
}

fn git(dir: &std::path::Path, home: &std::path::Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn git_push_and_clone_round_trip_over_smart_http() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    sim.api(
        "POST",
        "groups",
        Some(r#"{"name":"blueprint-apps","path":"blueprint-apps"}"#),
    );
    let project = sim
        .api(
            "POST",
            "projects",
            Some(r#"{"name":"guestbook","namespace_id":2}"#),
        )
        .json();
    assert_eq!(project["default_branch"], serde_json::Value::Null);
    let work = tempfile::tempdir().expect("work");
    let home = work.path();
    let remote = format!("{}/blueprint-apps/guestbook.git", sim.gitlab_url())
        .replace("http://", &format!("http://oauth2:{GITLAB_TOKEN}@"));

    // Without credentials git is refused.
    let refused = std::process::Command::new("git")
        .args([
            "ls-remote",
            &format!("{}/blueprint-apps/guestbook.git", sim.gitlab_url()),
        ])
        .env("HOME", home)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("git");
    assert!(!refused.status.success());

    git(home, home, &["clone", "--quiet", &remote, "first"]);
    let first = home.join("first");
    std::fs::write(
        first.join(".gitlab-ci.yml"),
        "build:\n  stage: build\n  script: [make]\n",
    )
    .expect("write");
    git(&first, home, &["checkout", "--quiet", "-b", "main"]);
    git(&first, home, &["add", "-A"]);
    git(&first, home, &["commit", "--quiet", "-m", "first"]);
    git(&first, home, &["push", "--quiet", "origin", "main"]);

    // The first push makes main the default branch; the API and a fresh clone see the file.
    assert_eq!(
        sim.api("GET", "projects/blueprint-apps%2Fguestbook", None)
            .json()["default_branch"],
        "main"
    );
    let file = sim
        .api(
            "GET",
            "projects/blueprint-apps%2Fguestbook/repository/files/.gitlab-ci.yml?ref=main",
            None,
        )
        .json();
    assert_eq!(file["last_commit_id"].as_str().map(str::len), Some(40));
    git(home, home, &["clone", "--quiet", &remote, "second"]);
    assert_eq!(
        std::fs::read_to_string(home.join("second/.gitlab-ci.yml")).expect("cloned file"),
        "build:\n  stage: build\n  script: [make]\n"
    );

    // A commit through the files API is fetched by git, and a pipeline runs from the pushed config.
    sim.api(
        "POST",
        "projects/blueprint-apps%2Fguestbook/repository/files/README.md",
        Some(r#"{"branch":"main","content":"hello\n","commit_message":"readme"}"#),
    );
    git(
        &first,
        home,
        &["pull", "--quiet", "--ff-only", "origin", "main"],
    );
    assert_eq!(
        std::fs::read_to_string(first.join("README.md")).expect("pulled"),
        "hello\n"
    );
    let pipeline = sim.api(
        "POST",
        "projects/blueprint-apps%2Fguestbook/pipeline",
        Some(r#"{"ref":"main"}"#),
    );
    assert_eq!(pipeline.status, 201, "{}", pipeline.body);
    let head = git(&first, home, &["rev-parse", "HEAD"]);
    assert_eq!(pipeline.json()["sha"].as_str(), Some(head.trim()));

    // Each push starts a pipeline, as on GitLab; an invalid configuration gives a failed one
    // whose yaml_errors say why, and waiting on it reports them.
    git(&first, home, &["checkout", "--quiet", "-b", "broken"]);
    std::fs::write(
        first.join(".gitlab-ci.yml"),
        "build:\n  stage: compile\n  script: [make]\n",
    )
    .expect("write");
    git(&first, home, &["commit", "--quiet", "-am", "broken"]);
    git(&first, home, &["push", "--quiet", "origin", "broken"]);
    let pipelines = sim
        .api("GET", "projects/blueprint-apps%2Fguestbook/pipelines", None)
        .json();
    let pushed: Vec<&serde_json::Value> = pipelines
        .as_array()
        .expect("list")
        .iter()
        .filter(|p| p["source"] == "push")
        .collect();
    // Three: main's first push, the files API's README commit (a commit like any), broken.
    assert_eq!(pushed.len(), 3, "{pipelines}");
    let broken = pushed
        .iter()
        .find(|p| p["ref"] == "broken")
        .expect("a pipeline for the pushed branch");
    let broken = sim
        .api(
            "GET",
            &format!(
                "projects/blueprint-apps%2Fguestbook/pipelines/{}",
                broken["id"]
            ),
            None,
        )
        .json();
    assert_eq!(broken["status"], "failed");
    assert_eq!(
        broken["yaml_errors"],
        "jobs:build job: chosen stage compile does not exist; available stages are .pre, build, test, deploy, .post"
    );
    let test = with_sim(repo().script(&format!("step(\"Wait\", || {{ gitlab_wait_pipeline(\"blueprint-apps/guestbook\", {}, #{{timeout: 10, interval: 0.2}}); }});\n", broken["id"])), &sim);
    assert_eq!(
        broken["id"], 10,
        "the pipeline id the expected output shows"
    );
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &wait_failed(),
        &gitlab_wait_error(
            "gitlab: pipeline #10 of blueprint-apps/guestbook failed",
            "step(\"Wait\", || { gitlab_wait_pipeline(\"blueprint-apps/guestbook\", 10, #{timeout: 10, interval: 0.2}); });",
            "  caused by: the CI configuration is invalid: jobs:build job: chosen stage compile does not exist; available stages are .pre, build, test, deploy, .post\n  hint: open <gitlab>/blueprint-apps/guestbook/-/pipelines/10\n",
        ),
    );
}

/// Every field the simulator answers with is a property of GitLab's entity in the OpenAPI
/// description (a subset vendored in tests/fixtures/gitlab-entities.json), with its type.
fn assert_documented(entity: &str, value: &serde_json::Value, must_have: &[&str]) {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/gitlab-entities.json")).expect("fixture");
    let properties = &fixture["entities"][entity];
    assert!(properties.is_object(), "no entity {entity} in the fixture");
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("{entity}: not an object: {value}"));
    for (key, field) in object {
        let documented = properties[key]
            .as_str()
            .unwrap_or_else(|| panic!("{entity}.{key} is not in GitLab's OpenAPI description"));
        let matches = match (documented, field) {
            (_, serde_json::Value::Null) | ("any", _) => true,
            // The generated description falls back to "string" for fields it has no type for
            // (ids, is_admin, ...), which GitLab answers as numbers and booleans: any scalar.
            ("string", v) => !v.is_object() && !v.is_array(),
            ("integer", v) => v.is_i64() || v.is_u64(),
            ("number", v) => v.is_number(),
            ("boolean", v) => v.is_boolean(),
            ("object", v) => v.is_object(),
            ("array", v) => v.is_array(),
            _ => false,
        };
        assert!(
            matches,
            "{entity}.{key} should be {documented}, the simulator sent {field}"
        );
    }
    for key in must_have {
        assert!(
            object.contains_key(*key),
            "{entity}: the simulator's answer lacks {key}"
        );
    }
}

#[test]
fn answers_match_the_entities_of_the_openapi_description() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let group = sim
        .api(
            "POST",
            "groups",
            Some(r#"{"name":"g","path":"g","visibility":"internal"}"#),
        )
        .json();
    assert_documented(
        "API_Entities_Group",
        &group,
        &["id", "name", "path", "full_path", "visibility", "web_url"],
    );
    let project = sim
        .api("POST", "projects", Some(r#"{"name":"p","namespace_id":2}"#))
        .json();
    assert_documented(
        "API_Entities_Project",
        &project,
        &[
            "id",
            "path_with_namespace",
            "http_url_to_repo",
            "web_url",
            "default_branch",
            "visibility",
            "namespace",
        ],
    );
    assert_documented(
        "API_Entities_NamespaceBasic",
        &project["namespace"],
        &["id", "path", "full_path", "kind"],
    );
    let variable = sim
        .api(
            "POST",
            "projects/g%2Fp/variables",
            Some(r#"{"key":"K","value":"v"}"#),
        )
        .json();
    assert_documented(
        "API_Entities_Ci_Variable",
        &variable,
        &[
            "key",
            "value",
            "variable_type",
            "protected",
            "masked",
            "hidden",
            "raw",
            "environment_scope",
            "description",
        ],
    );
    sim.api(
        "POST",
        "projects/g%2Fp/repository/files/.gitlab-ci.yml",
        Some(r#"{"branch":"main","content":"build:\n  script: [make]\n","commit_message":"ci"}"#),
    );
    let pipeline = sim
        .api("POST", "projects/g%2Fp/pipeline", Some(r#"{"ref":"main"}"#))
        .json();
    assert_documented(
        "API_Entities_Ci_Pipeline",
        &pipeline,
        &[
            "id",
            "iid",
            "project_id",
            "sha",
            "ref",
            "status",
            "source",
            "web_url",
            "created_at",
        ],
    );
    let jobs = sim
        .api(
            "GET",
            &format!("projects/g%2Fp/pipelines/{}/jobs", pipeline["id"]),
            None,
        )
        .json();
    assert_documented(
        "API_Entities_Ci_Job",
        &jobs[0],
        &["id", "name", "stage", "status", "pipeline", "web_url"],
    );
    let user = sim.api("GET", "user", None).json();
    assert_documented(
        "API_Entities_UserWithAdmin",
        &user,
        &["id", "username", "name", "is_admin"],
    );
}

#[test]
fn pipeline_lists_filter_by_ref() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    sim.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#));
    sim.api("POST", "projects", Some(r#"{"name":"p","namespace_id":2}"#));
    sim.api(
        "POST",
        "projects/g%2Fp/repository/files/.gitlab-ci.yml",
        Some(r#"{"branch":"main","content":"build:\n  script: [make]\n","commit_message":"ci"}"#),
    );
    // As on GitLab, a new branch starts from an existing one (`start_branch`).
    sim.api(
        "POST",
        "projects/g%2Fp/repository/files/README.md",
        Some(r#"{"branch":"other","start_branch":"main","content":"other\n","commit_message":"readme"}"#),
    );
    for branch in ["main", "other"] {
        assert_eq!(
            sim.api(
                "POST",
                "projects/g%2Fp/pipeline",
                Some(&format!(r#"{{"ref":"{branch}"}}"#))
            )
            .status,
            201
        );
    }
    // Each branch has its API pipeline and the push pipeline of its files API commit.
    let main = sim
        .api("GET", "projects/g%2Fp/pipelines?ref=main", None)
        .json();
    assert_eq!(main.as_array().map(Vec::len), Some(2), "{main}");
    assert!(
        main.as_array()
            .into_iter()
            .flatten()
            .all(|p| p["ref"] == "main")
    );
    let api = sim
        .api("GET", "projects/g%2Fp/pipelines?ref=main&source=api", None)
        .json();
    assert_eq!(api.as_array().map(Vec::len), Some(1), "{api}");
}

#[test]
fn working_trees_clone_push_pull_and_refuse_to_diverge() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo()
            .file("apps/demo/main.go", "package main\n")
            .file("apps/demo/helm-chart/Chart.yaml", "name: demo\n")
            .script(
                r#"
const TREE = "apps-local/blueprint-apps/demo";
step("Provision", || {
    gitlab_ensure_group("blueprint-apps");
    let project = gitlab_ensure_project("blueprint-apps", "demo");
    assert_eq(git_clone_or_pull(project.http_url_to_repo, TREE).action, "cloned");
    sync_tree("apps/demo", TREE, #{exclude: [".gitlab-ci.yml"]});
    write_text(`${TREE}/.gitlab-ci.yml`, "build:\n  script: [make]\n");
    let first = git_commit_push(TREE, "bprun: sync demo");
    assert_eq(first.changed, true);
    assert_eq(git_commit_push(TREE, "bprun: sync demo").changed, false);
    assert_eq(git_clone_or_pull(project.http_url_to_repo, TREE).action, "up-to-date");
    assert_eq(gitlab_file("blueprint-apps/demo", "helm-chart/Chart.yaml", "main"), "name: demo\n");
});
step("Pull", || {
    gitlab_post("projects/blueprint-apps%2Fdemo/repository/files/README.md", #{branch: "main", content: "hi\n", commit_message: "remote"});
    assert_eq(git_clone_or_pull(gitlab_get("projects/blueprint-apps%2Fdemo").http_url_to_repo, TREE).action, "pulled");
    assert_eq(read_text(`${TREE}/README.md`), "hi\n");
});
step("Diverge", || {
    write_text(`${TREE}/local.txt`, "local\n");
    git_commit_push(TREE, "local");
    gitlab_post("projects/blueprint-apps%2Fdemo/repository/files/remote.txt", #{branch: "main", content: "remote\n", commit_message: "remote"});
    write_text(`${TREE}/local2.txt`, "again\n");
    git_commit_push(TREE, "local again");
});
step("Pull again", || {
    git_clone_or_pull(gitlab_get("projects/blueprint-apps%2Fdemo").http_url_to_repo, TREE);
});
"#,
            ),
        &sim,
    );
    let output = test.run(&["-q", "scripts/test.rhai"]);
    output.expect(
        1,
        &with_recaps("[1/4] Provision ... changed (#.## s)\n\
                      [2/4] Pull ... changed (#.## s)\n\
                      [3/4] Diverge ... failed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Provision: changed 6; Pull: changed 2; Diverge: failed 4; Pull again: not run>\n"),
        "error: step \"Diverge\" failed\n\
         \x20 × git: push in apps-local/blueprint-apps/demo: cannot push because a reference that you are trying to update on the remote contains commits that are not present locally.\n\
         \x20   ╭─[scripts/test.rhai:25:5]\n\
         \x2024 │     write_text(`${TREE}/local2.txt`, \"again\\n\");\n\
         \x2025 │     git_commit_push(TREE, \"local again\");\n\
         \x20   ·     ───────┬───────\n\
         \x20   ·            ╰── failed here\n\
         \x2026 │ });\n\
         \x20   ╰────\n\
         \x20 hint: the remote has commits this working tree lacks: run git_clone_or_pull first (a fast-forward), then push again\n\
         re-run with --resume to continue from here\n",
    );
    // The PAT is never written into the working tree's configuration.
    let config = test.read("apps-local/blueprint-apps/demo/.git/config");
    assert!(!config.contains(GITLAB_TOKEN), "{config}");
    output.stdout_lacks(GITLAB_TOKEN).stderr_lacks(GITLAB_TOKEN);
    // The push made main the default branch and started a pipeline, as on GitLab.
    assert_eq!(
        sim.api("GET", "projects/blueprint-apps%2Fdemo", None)
            .json()["default_branch"],
        "main"
    );

    // The diverged tree: pulling says how to recover.
    without_commit_ids(test.run(&["-q", "--only", "Pull again", "scripts/test.rhai"])).expect(
        1,
        &with_recaps("[1/4] Provision ... skipped (not selected by --only)\n\
                      [2/4] Pull ... skipped (not selected by --only)\n\
                      [3/4] Diverge ... skipped (not selected by --only)\n\
                      [4/4] Pull again ... failed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Provision: skipped; Pull: skipped; Diverge: skipped; Pull again: failed>\n"),
        "error: step \"Pull again\" failed\n\
         \x20 × git: the working tree apps-local/blueprint-apps/demo has diverged from <gitlab>/blueprint-apps/demo.git (local <commit>, remote <commit>)\n\
         \x20   ╭─[scripts/test.rhai:28:5]\n\
         \x2027 │ step(\"Pull again\", || {\n\
         \x2028 │     git_clone_or_pull(gitlab_get(\"projects/blueprint-apps%2Fdemo\").http_url_to_repo, TREE);\n\
         \x20   ·     ────────┬────────\n\
         \x20   ·             ╰── failed here\n\
         \x2029 │ });\n\
         \x20   ╰────\n\
         \x20 hint: re-run with --reset-clones to wipe apps-local/ and clone again (local commits there are lost)\n\
         re-run with --resume to continue from here\n",
    );
}

#[test]
fn health_checks_the_instance_and_the_token() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(repo().script("step(\"Health\", || { let health = gitlab_health(); assert_eq(health.ok, true); assert_eq(health.version, \"17.9.0\"); });\n"), &sim);
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    let closed = format!("http://127.0.0.1:{}", crate::support::free_port());
    let test = repo()
        .env("GITLAB_URL", &closed)
        .env("GITLAB_TOKEN", GITLAB_TOKEN)
        .replace(&closed, "<closed>")
        .script("step(\"Health\", || { gitlab_health(); });\n");
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &one_step_run("Health", "failed"),
        "error: step \"Health\" failed\n\
         \x20 × gitlab: GET /-/health failed: error sending request for url (<closed>/-/health): client error (Connect): tcp connect error: Connection refused (os error 111)\n\
         \x20  ╭─[scripts/test.rhai:1:21]\n\
         \x201 │ step(\"Health\", || { gitlab_health(); });\n\
         \x20  ·                     ──────┬──────\n\
         \x20  ·                           ╰── failed here\n\
         \x20  ╰────\n\
         \x20 hint: is GitLab reachable at <closed>? (GITLAB_URL)\n\
         re-run with --resume to continue from here\n",
    );
}

/// The run of `PROVISION_DEMO` that finds nothing to do.
const PROVISION_UNCHANGED: &str = "[1/1] Provision ... ok (#.## s)\n\
                                   \n\
                                   Recap of scripts/test.rhai\n\
                                   \x20 #  step       status            changes       time\n\
                                   \x20 1  Provision  ok                      0     #.## s\n\
                                   1 step: 1 ok, 0 changed, 0 skipped, 0 failed in #.## s\n";

/// The run of `PROVISION_DEMO` that only commits and pushes what an earlier one left.
const PROVISION_PUSHES: &str = "[1/1] Provision ...\n\
                                \x20   ~ commit and push apps-local/blueprint-apps/demo (<commit>)\n\
                                [1/1] Provision ... changed (#.## s)\n\
                                \n\
                                Recap of scripts/test.rhai\n\
                                \x20 #  step       status            changes       time\n\
                                \x20 1  Provision  changed                 1     #.## s\n\
                                1 step: 0 ok, 1 changed, 0 skipped, 0 failed in #.## s\n";

/// The first run of `PROVISION_DEMO`, up to its push (which `pushed` ends).
fn provision_first_run(pushed: &str, changes: u32, status: &str) -> String {
    format!(
        "[1/1] Provision ...\n\
         \x20   ~ create group blueprint-apps (internal)\n\
         \x20   ~ create project blueprint-apps/demo\n\
         \x20   ~ clone <gitlab>/blueprint-apps/demo.git into apps-local/blueprint-apps/demo\n\
         \x20   ~ sync apps-local/blueprint-apps/demo from apps/demo (1 created, 0 updated, 0 deleted)\n\
         {pushed}\
         [1/1] Provision ... {status} (#.## s)\n\
         \n\
         Recap of scripts/test.rhai\n\
         \x20 #  step       status            changes       time\n\
         \x20 1  Provision  {status:<7}{changes:>18}     #.## s\n\
         1 step: 0 ok, {} changed, 0 skipped, {} failed in #.## s\n",
        u8::from(status == "changed"),
        u8::from(status == "failed"),
    )
}

/// One project synced from `apps/demo`, committed and pushed.
const PROVISION_DEMO: &str = r#"
const TREE = "apps-local/blueprint-apps/demo";
step("Provision", || {
    gitlab_ensure_group("blueprint-apps");
    let project = gitlab_ensure_project("blueprint-apps", "demo");
    git_clone_or_pull(project.http_url_to_repo, TREE);
    sync_tree("apps/demo", TREE);
    git_commit_push(TREE, "bprun: sync demo");
});
"#;

#[test]
fn a_run_killed_between_commit_and_push_is_finished_by_the_next() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().file("apps/demo/a.txt", "a\n").script(PROVISION_DEMO),
        &sim,
    );
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    // What a kill leaves behind: a commit that was never pushed, git's index lock, and the ref
    // lock of a fetch killed half-way (a later fetch fails on it otherwise).
    // The source gained b.txt; the killed run synced and committed it but never pushed.
    let tree = test.join("apps-local/blueprint-apps/demo");
    std::fs::write(test.join("apps/demo/b.txt"), "b\n").expect("write");
    std::fs::write(tree.join("b.txt"), "b\n").expect("write");
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
            .args(args)
            .current_dir(&tree)
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    };
    git(&["add", "b.txt"]);
    git(&["commit", "-q", "-m", "killed before the push"]);
    std::fs::write(tree.join(".git/index.lock"), "").expect("lock");
    std::fs::write(tree.join(".git/refs/remotes/origin/main.lock"), "").expect("ref lock");
    test.run(&["--check", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "check mode: nothing will be changed\n\
                      [1/1] Provision ...\n\
                      \x20   ~ would commit and push apps-local/blueprint-apps/demo\n\
                      [1/1] Provision ... changed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai (check mode): Provision: changed 1>\n",
        ),
        "",
    );
    without_commit_ids(test.run(&["scripts/test.rhai"])).expect(0, PROVISION_PUSHES, "");
    assert!(!tree.join(".git/index.lock").exists());
    assert!(!tree.join(".git/refs/remotes/origin/main.lock").exists());
    assert_eq!(
        sim.api(
            "GET",
            "projects/blueprint-apps%2Fdemo/repository/files/b.txt/raw?ref=main",
            None
        )
        .body,
        "b\n"
    );
    test.run(&["scripts/test.rhai"])
        .expect(0, PROVISION_UNCHANGED, "");
}

/// Pushes of a one-file project whose push requests meet `faults` (the rest of GitLab answers).
fn push_under_faults(faults: &str) -> (Sim, Test, Output) {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().file("apps/demo/a.txt", "a\n").script(PROVISION_DEMO),
        &sim,
    )
    .env("BPRUN_GITLAB_BACKOFF_MS", "5");
    sim.set_faults(faults);
    let output = without_commit_ids(test.run(&["scripts/test.rhai"]));
    sim.set_faults("{}");
    (sim, test, output)
}

/// The push requests (POST .../git-receive-pack) the simulator saw, with their fault.
fn receive_packs(sim: &Sim) -> Vec<Option<String>> {
    sim.requests()["requests"]
        .as_array()
        .expect("log")
        .iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("git-receive-pack"))
        })
        .map(|r| r["fault"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_push_whose_answer_is_lost_is_read_back_and_not_sent_again() {
    // GitLab takes every push but its answer never arrives.
    let (sim, test, output) =
        push_under_faults(r#"{"drop_answer_rate": 1.0, "path_suffix": "git-receive-pack"}"#);
    output.expect(
        0,
        &provision_first_run(
            "    ~ commit and push apps-local/blueprint-apps/demo (<commit>)\n",
            5,
            "changed",
        ),
        "",
    );
    assert_eq!(receive_packs(&sim), [Some("dropped-answer".to_string())]);
    assert_eq!(
        sim.api(
            "GET",
            "projects/blueprint-apps%2Fdemo/repository/files/a.txt/raw?ref=main",
            None
        )
        .body,
        "a\n"
    );
    test.run(&["scripts/test.rhai"])
        .expect(0, PROVISION_UNCHANGED, "");
}

#[test]
fn a_push_that_failed_is_sent_again_after_reading_the_remote_back() {
    // Two pushes are refused with 429 before being processed; the third lands.
    let (sim, _test, output) = push_under_faults(
        r#"{"rate_limit_burst": 2, "retry_after_s": 1, "path_suffix": "git-receive-pack"}"#,
    );
    output.expect(
        0,
        &provision_first_run(
            "    ~ commit and push apps-local/blueprint-apps/demo (<commit>)\n",
            5,
            "changed",
        ),
        "",
    );
    assert_eq!(
        receive_packs(&sim),
        [
            Some("rate-limit".to_string()),
            Some("rate-limit".to_string()),
            None
        ]
    );
    // A remote that fails every push: four attempts, then the error names the push.
    let (sim, test, output) =
        push_under_faults(r#"{"error_rate": 1.0, "path_suffix": "git-receive-pack"}"#);
    // The injected server error is a 500, 502 or 503 at random.
    let output = output.replace_regex(r"5\d\d( injected fault)?", "5xx$1");
    output.expect(
        1,
        &provision_first_run("", 4, "failed"),
        "error: step \"Provision\" failed\n\
         \x20 × git: push in apps-local/blueprint-apps/demo: POST <gitlab>/blueprint-apps/demo.git/git-receive-pack -> 5xx: {\"message\":\"5xx injected fault\"}\n\
         \x20  ╭─[scripts/test.rhai:8:5]\n\
         \x207 │     sync_tree(\"apps/demo\", TREE);\n\
         \x208 │     git_commit_push(TREE, \"bprun: sync demo\");\n\
         \x20  ·     ───────┬───────\n\
         \x20  ·            ╰── failed here\n\
         \x209 │ });\n\
         \x20  ╰────\n\
         \x20 caused by: sent 4 times; each time origin/main was read back and had not taken it\n\
         \x20 hint: the remote kept failing (5xx, 429 or a broken connection): the commit stays in the working tree, and the next run pushes it\n\
         re-run with --resume to continue from here\n",
    );
    assert_eq!(receive_packs(&sim).len(), 4);
    assert!(
        receive_packs(&sim)
            .iter()
            .all(|fault| fault.as_deref() == Some("error"))
    );
    // Once GitLab answers again, the next run pushes the commit the failed one made.
    without_commit_ids(test.run(&["scripts/test.rhai"])).expect(0, PROVISION_PUSHES, "");
}

#[test]
fn a_clone_killed_half_way_is_cloned_again() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().file("apps/demo/a.txt", "a\n").script(
            r#"
const TREE = "apps-local/blueprint-apps/demo";
step("Provision", || {
    gitlab_ensure_group("blueprint-apps");
    let project = gitlab_ensure_project("blueprint-apps", "demo");
    assert_eq(git_clone_or_pull(project.http_url_to_repo, TREE).action, "cloned");
    sync_tree("apps/demo", TREE);
    git_commit_push(TREE, "bprun: sync demo");
});
"#,
        ),
        &sim,
    );
    // What a kill during the clone leaves: a `.git` folder git cannot open.
    std::fs::create_dir_all(test.join("apps-local/blueprint-apps/demo/.git/objects"))
        .expect("mkdir");
    test.run(&["scripts/test.rhai"]).code(0);
    // Killed right after `git init`: a repository without its origin.
    let tree = test.join("apps-local/blueprint-apps/demo");
    std::fs::remove_dir_all(&tree).expect("remove the clone");
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&tree)
        .status()
        .expect("git init");
    assert!(init.success());
    test.run(&["scripts/test.rhai"]).code(0);
    assert!(tree.join("a.txt").is_file(), "cloned again");
    assert_eq!(
        sim.api(
            "GET",
            "projects/blueprint-apps%2Fdemo/repository/files/a.txt/raw?ref=main",
            None
        )
        .body,
        "a\n"
    );
}

#[test]
fn git_reads_are_retried_through_rate_limits_and_server_errors() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().script(
            r#"
const TREE = "apps-local/blueprint-apps/demo";
step("Project", || {
    gitlab_ensure_group("blueprint-apps");
    gitlab_ensure_project("blueprint-apps", "demo");
});
step("Clone", || {
    let url = `${env("GITLAB_URL")}/blueprint-apps/demo.git`;
    assert_eq(git_clone_or_pull(url, TREE).action, "cloned");
});
"#,
        ),
        &sim,
    );
    test.run(&["--only", "Project", "scripts/test.rhai"])
        .code(0);
    // The next three requests (the clone's ref advertisement and its retries) are refused.
    sim.set_faults(r#"{"rate_limit_burst": 3, "retry_after_s": 0}"#);
    test.run(&["--only", "Clone", "scripts/test.rhai"]).code(0);
    assert!(test.join("apps-local/blueprint-apps/demo/.git").is_dir());
}

#[test]
fn concurrent_runs_ensuring_the_same_group_and_project_all_succeed() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let script = r#"step("Ensure", || {
    gitlab_ensure_group("race");
    gitlab_ensure_project("race", "app");
});"#;
    // Separate checkouts (the run lock serializes runs of one repository, not of several).
    let tests: Vec<Test> = (0..6)
        .map(|_| with_sim(repo().script(script), &sim))
        .collect();
    let children: Vec<std::process::Child> = tests
        .iter()
        .map(|test| {
            test.command(&["-q", "scripts/test.rhai"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().expect("wait");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let groups = sim.api_json("groups?search=race");
    assert_eq!(groups.as_array().map(Vec::len), Some(1), "{groups}");
    let projects = sim.api_json("groups/race/projects");
    assert_eq!(projects.as_array().map(Vec::len), Some(1), "{projects}");
}

/// The most requests the simulator saw being answered at once, among those `keep` selects.
fn most_concurrent(log: &serde_json::Value, keep: impl Fn(&serde_json::Value) -> bool) -> u64 {
    log["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter(|request| keep(request))
        .filter_map(|request| request["concurrent"].as_u64())
        .max()
        .unwrap_or(0)
}

/// With 100 ms added to every answer, a `parallel` far wider than the client's bounds: the
/// simulator's own count of requests in flight shows the reads overlapping yet at most 32 at
/// once, and at most 4 writes at once.
#[test]
fn the_client_bounds_reads_and_writes_in_flight_per_gitlab() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--latency-ms", "100"]);
    let test = with_sim(
        repo().script(
            r#"step("Reads", || {
    let reads = [];
    for i in 0..70 { reads.push(i); }
    parallel(reads, |i| gitlab_get("version"), 70);
});
step("Writes", || {
    let writes = [];
    for i in 0..10 { writes.push(`bounded-${i}`); }
    parallel(writes, |name| gitlab_post("groups", #{name: name, path: name}), 10);
});
"#,
        ),
        &sim,
    );
    test.run(&["-q", "--only", "Reads", "scripts/test.rhai"])
        .code(0);
    let log = sim.requests();
    assert_eq!(log["total"], 70, "{}", log["counters"]);
    let reads = most_concurrent(&log, |_| true);
    assert!(matches!(reads, 2..=32), "{reads} reads at once");
    assert!(
        log["requests"]
            .as_array()
            .expect("requests")
            .iter()
            .all(|request| request["latency_ms"] == 100),
        "every answer was held back by --latency-ms"
    );

    sim.clear_requests();
    test.run(&["-q", "--only", "Writes", "scripts/test.rhai"])
        .code(0);
    let log = sim.requests();
    assert_eq!(log["mutating"], 10, "{}", log["counters"]);
    let writes = most_concurrent(&log, |request| request["method"] == "POST");
    assert!(matches!(writes, 2..=4), "{writes} writes at once");
}

/// `parallel(..., #{writes_after_first: true})`: the other items read at once, but their writes
/// wait for the first item, and are not sent when it fails.
#[test]
fn writes_after_the_first_item_are_not_sent_when_it_fails() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().script(
            r#"step("Fan out", || {
    parallel(["first", "second", "third"], |name| {
        gitlab_get("version");
        if name == "first" && args.fail == true { throw "first broke" }
        gitlab_post("groups", #{name: name, path: name});
    }, #{limit: 3, writes_after_first: true});
});
"#,
        ),
        &sim,
    );
    test.run(&["-q", "scripts/test.rhai", "--fail"]).expect(
        1,
        &one_step_run("Fan out", "failed"),
        "error: step \"Fan out\" failed\n\
         \x20 × parallel: 3 of 3 items failed\n\
         \x20  ╭─[scripts/test.rhai:2:5]\n\
         \x201 │ step(\"Fan out\", || {\n\
         \x202 │     parallel([\"first\", \"second\", \"third\"], |name| {\n\
         \x20  ·     ────┬───\n\
         \x20  ·         ╰── failed here\n\
         \x203 │         gitlab_get(\"version\");\n\
         \x20  ╰────\n\
         \x20 caused by: item 1 (first): first broke\n\
         \x20 caused by: item 2 (second): gitlab: POST /groups: not sent, because first failed first (first broke)\n\
         \x20 caused by: item 3 (third): gitlab: POST /groups: not sent, because first failed first (first broke)\n\
         \x20 hint: each failed item is listed above; the others finished\n\
         re-run with --resume to continue from here\n",
    );
    let log = sim.requests();
    assert_eq!(log["mutating"], 0, "{}", log["counters"]);
    assert_eq!(
        log["total"], 3,
        "every read went ahead: {}",
        log["counters"]
    );

    sim.clear_requests();
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    let log = sim.requests();
    let posts: Vec<&serde_json::Value> = log["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter(|request| request["method"] == "POST")
        .collect();
    assert_eq!(posts.len(), 3, "{}", log["counters"]);
    // Group ids grow with creation: the first item's is the smallest.
    let groups = sim.api_json("groups");
    let first_created = groups
        .as_array()
        .expect("groups")
        .iter()
        .min_by_key(|group| group["id"].as_i64().unwrap_or(i64::MAX))
        .map(|group| group["path"].clone());
    assert_eq!(first_created, Some(serde_json::json!("first")), "{groups}");
}

/// `parallel(..., #{writes_in_order: true})`: every item reads at once, and what they create
/// is created in the items' order, whichever item is slower to get there; a later item that
/// fails does not hold the next back.
#[test]
fn writes_in_order_create_in_the_items_order_and_a_later_failure_holds_nothing_back() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().script(
            r#"step("Fan out", || {
    parallel(["first", "second", "third", "fourth"], |name| {
        gitlab_get("version");
        // The earlier items are the slower ones: a free order would create them last.
        if name == "first" || name == "second" { sleep(0.3); }
        if name == "second" && args.fail == true { throw "second broke" }
        gitlab_post("groups", #{name: name, path: name});
    }, #{limit: 4, writes_in_order: true});
});
"#,
        ),
        &sim,
    );
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    let ids = |sim: &crate::support::Sim| {
        let mut groups: Vec<(i64, String)> = sim
            .api_json("groups")
            .as_array()
            .expect("groups")
            .iter()
            .map(|group| {
                (
                    group["id"].as_i64().unwrap_or(0),
                    group["path"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        groups.sort();
        groups.into_iter().map(|(_, path)| path).collect::<Vec<_>>()
    };
    assert_eq!(ids(&sim), ["first", "second", "third", "fourth"]);

    let again = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(test, &again);
    test.run(&["-q", "scripts/test.rhai", "--fail"]).code(1);
    assert_eq!(ids(&again), ["first", "third", "fourth"]);
}

/// `gitlab_adopt_token`: a token GitLab accepts is used from then on and the other live tokens
/// of its name are revoked, its record and the token list read at once (two requests, no
/// write when nothing is stale); check mode only reports; a refused token changes nothing.
#[test]
fn adopting_a_token_revokes_its_stale_namesakes_in_one_round_of_reads() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let mint = || {
        let reply = sim.raw(
            "POST",
            "/-/sim/tokens",
            Some(GITLAB_TOKEN),
            Some(r#"{"name": "adopted"}"#),
        );
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.json()["token"].as_str().expect("token").to_string()
    };
    let kept = mint();
    mint();
    let live = || {
        sim.api_json("personal_access_tokens?per_page=100")
            .as_array()
            .expect("tokens")
            .iter()
            .filter(|token| token["name"] == "adopted" && token["active"] == true)
            .count()
    };
    assert_eq!(live(), 2);
    const ADOPT: &str = r#"step("Adopt", || {
    let adopted = gitlab_adopt_token("adopted", env_secret("ADOPTED"));
    info(`valid ${adopted.valid} revoked ${adopted.revoked} changed ${adopted.changed}`);
    if adopted.valid { info(`user ${gitlab_get("user").username}`); }
});
"#;
    let with_kept = with_sim(repo().script(ADOPT), &sim).env("ADOPTED", &kept);
    sim.clear_requests();
    with_kept.run(&["--check", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "check mode: nothing will be changed\n\
                      [1/1] Adopt ...\n\
                      \x20   ~ would revoke personal access token adopted (#3)\n\
                      \x20   valid true revoked 1 changed true\n\
                      \x20   user root\n\
                      [1/1] Adopt ... changed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai (check mode): Adopt: changed 1>\n",
        ),
        "",
    );
    assert_eq!(sim.mutating_requests(), 0);
    assert_eq!(live(), 2);

    with_kept.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "[1/1] Adopt ...\n\
                      \x20   ~ revoke personal access token adopted (#3)\n\
                      \x20   valid true revoked 1 changed true\n\
                      \x20   user root\n\
                      [1/1] Adopt ... changed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Adopt: changed 1>\n",
        ),
        "",
    );
    assert_eq!(live(), 1);

    sim.clear_requests();
    with_kept.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "[1/1] Adopt ...\n\
                      \x20   valid true revoked 0 changed false\n\
                      \x20   user root\n\
                      [1/1] Adopt ... ok (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Adopt: ok>\n",
        ),
        "",
    );
    let log = sim.requests();
    assert_eq!(log["mutating"], 0, "{}", log["counters"]);
    // Its record and the list, then `user` with it.
    assert_eq!(log["total"], 3, "{}", log["counters"]);

    with_sim(repo().script(ADOPT), &sim)
        .env("ADOPTED", "glpat-never-issued-0000")
        .run(&["scripts/test.rhai"])
        .expect(
            0,
            &with_recaps(
                "[1/1] Adopt ...\n\
                          \x20   valid false revoked 0 changed false\n\
                          [1/1] Adopt ... ok (#.## s)\n\
                          \n\
                          <recap of scripts/test.rhai: Adopt: ok>\n",
            ),
            "",
        );
    assert_eq!(live(), 1);
}

/// The design record's access rows a read-only qualification cannot check (they need a second
/// user): a Developer may not delete a project, and neither an outsider (a user who is no
/// member) nor an anonymous client may clone a private one, as the real git sees it.
#[test]
fn a_developer_cannot_delete_a_project_and_outsiders_and_anonymous_cannot_clone_it() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let created = |path: &str, body: &str| {
        let reply = sim.api("POST", path, Some(body));
        assert_eq!(reply.status, 201, "POST {path}: {}", reply.body);
        reply.json()
    };
    let group = created(
        "groups",
        r#"{"name": "team", "path": "team", "visibility": "private"}"#,
    );
    let project = created(
        "projects",
        &format!(
            r#"{{"name": "app", "path": "app", "namespace_id": {}, "visibility": "private", "initialize_with_readme": true}}"#,
            group["id"]
        ),
    );
    let user_with_token = |name: &str| {
        let user = created(
            "users",
            &format!(
                r#"{{"username": "{name}", "name": "{name}", "email": "{name}@example.net", "password": "a-long-password-1", "skip_confirmation": true}}"#
            ),
        );
        let token = created(
            &format!("users/{}/personal_access_tokens", user["id"]),
            r#"{"name": "t", "scopes": ["api", "read_repository"], "expires_at": "2030-01-01"}"#,
        );
        (
            user["id"].clone(),
            token["token"].as_str().expect("token").to_string(),
        )
    };
    let (developer, developer_token) = user_with_token("dev");
    let (_, outsider_token) = user_with_token("outsider");
    created(
        &format!("projects/{}/members", project["id"]),
        &format!(r#"{{"user_id": {developer}, "access_level": 30}}"#),
    );
    let deleted = sim.raw(
        "DELETE",
        &format!("/api/v4/projects/{}", project["id"]),
        Some(&developer_token),
        None,
    );
    assert_eq!(
        (deleted.status, deleted.body.as_str()),
        (403, r#"{"message":"403 Forbidden"}"#)
    );
    let repository = |token: Option<&str>| {
        let url = sim.gitlab_url().replacen("http://", "", 1);
        match token {
            Some(token) => format!("http://oauth2:{token}@{url}/team/app.git"),
            None => format!("http://{url}/team/app.git"),
        }
    };
    let ls_remote = |token: Option<&str>| {
        let output = std::process::Command::new("git")
            .args(["ls-remote", &repository(token)])
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .expect("git");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
                .replace(&sim.gitlab_url().replacen("http://", "", 1), "<gitlab>")
                .replace(&outsider_token, "<token>"),
        )
    };
    assert_eq!(ls_remote(Some(&developer_token)).0, Some(0));
    assert_eq!(
        ls_remote(Some(&outsider_token)),
        (
            Some(128),
            "remote: The project you were looking for could not be found or you don't have permission to view it.\nfatal: repository 'http://<gitlab>/team/app.git/' not found\n".to_string()
        )
    );
    assert_eq!(
        ls_remote(None),
        (
            Some(128),
            "fatal: could not read Username for 'http://<gitlab>': terminal prompts disabled\n"
                .to_string()
        )
    );
}

/// A route GitLab has but the simulator does not model answers GitLab's 404 for an unknown
/// route, saying whose gap it is, and the error's hint says the call cannot be rehearsed
/// (instead of suggesting a path encoding that is already right).
#[test]
fn a_route_the_simulator_does_not_model_says_so_instead_of_looking_like_a_missing_project() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().script("step(\"Erase\", || { gitlab_post(\"projects/blueprint-apps%2Fguestbook/jobs/1/erase\", #{}); });\n"),
        &sim,
    );
    let run = test.run(&["scripts/test.rhai"]);
    run.code(1).stderr(
        "error: step \"Erase\" failed
  × gitlab: POST /projects/blueprint-apps%2Fguestbook/jobs/1/erase -> 404: 404 Not Found: the GitLab simulator does not serve POST /api/v4/projects/blueprint-apps%2Fguestbook/jobs/1/erase (it models the routes bprun's natives and the seeds' clients use)
   ╭─[scripts/test.rhai:1:20]
 1 │ step(\"Erase\", || { gitlab_post(\"projects/blueprint-apps%2Fguestbook/jobs/1/erase\", #{}); });
   ·                    ─────┬─────
   ·                         ╰── failed here
   ╰────
  caused by: at <gitlab>/api/v4/projects/blueprint-apps%2Fguestbook/jobs/1/erase
  hint: this GitLab is bprun's simulator, which does not model this route: the call is right for a real GitLab, but cannot be rehearsed
re-run with --resume to continue from here
",
    );
}

/// A wait without an options map takes the defaults, instead of an "unknown function" that
/// points at another native.
#[test]
fn a_pipeline_wait_without_options_takes_the_defaults() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let test = with_sim(
        repo().script("step(\"Wait\", || { gitlab_wait_pipeline(\"nobody/nothing\", 1); });\n"),
        &sim,
    );
    test.run(&["scripts/test.rhai"]).code(1).stderr(
        "error: step \"Wait\" failed
  × gitlab: GET /projects/nobody%2Fnothing/pipelines/1 -> 404: 404 Project Not Found
   ╭─[scripts/test.rhai:1:19]
 1 │ step(\"Wait\", || { gitlab_wait_pipeline(\"nobody/nothing\", 1); });
   ·                   ──────────┬─────────
   ·                             ╰── failed here
   ╰────
  caused by: at <gitlab>/api/v4/projects/nobody%2Fnothing/pipelines/1
  hint: the path is encoded as GitLab wants it: check that the project or group exists and that the token may see it (a project the token may not see answers 404 too)
re-run with --resume to continue from here
",
    );
}
