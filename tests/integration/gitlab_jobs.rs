//! CI jobs that really run in the GitLab simulator (crates/sim/src/gitlab/ci/jobs.rs): a job of a
//! known image runs its script in `sh` with GitLab's variables and nothing of the host's
//! environment, its trace is the runner's with masked values as `[MASKED]`, and phase 3's
//! smoke pipelines pass because lint, build and deploy ran, or fail in the real tool's words.

use std::time::{Duration, Instant};

use crate::support::{BPRUN, GITLAB_TOKEN, Sim, SimKind, with_recaps};
use serde_json::{Value, json};

/// A group `g` and a project `g/p` with `variables` (JSON bodies of `POST .../variables`) set
/// before `ci` is committed, then a pipeline on `main`.
fn project_with_variables_and_ci(sim: &Sim, variables: &[Value], ci: &str) {
    assert_eq!(
        sim.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#))
            .status,
        201
    );
    let created = sim.api(
        "POST",
        "projects",
        Some(r#"{"name":"p","namespace_id":"g"}"#),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    for variable in variables {
        let set = sim.api(
            "POST",
            "projects/g%2Fp/variables",
            Some(&variable.to_string()),
        );
        assert_eq!(set.status, 201, "{}", set.body);
    }
    let body = json!({"branch": "main", "content": ci, "commit_message": "ci"});
    let committed = sim.api(
        "POST",
        "projects/g%2Fp/repository/files/.gitlab-ci.yml",
        Some(&body.to_string()),
    );
    assert_eq!(committed.status, 201, "{}", committed.body);
    let started = sim.api("POST", "projects/g%2Fp/pipeline", Some(r#"{"ref":"main"}"#));
    assert_eq!(started.status, 201, "{}", started.body);
}

/// `actual` is `expected` (unindented) exactly.
#[track_caller]
fn assert_unindented(actual: &str, expected: &str) {
    bprun_testkit::assert_text(actual, &bprun_testkit::unindent(expected));
}

/// A job's trace with what differs between runs as placeholders: the commit (its time is
/// part of it) and the simulator's address.
fn steady_trace(sim: &Sim, project: &str, trace: &str) -> String {
    let pipelines = sim.api_json(&format!("projects/{project}/pipelines"));
    let sha = pipelines[0]["sha"].as_str().unwrap_or("no sha");
    trace
        .replace(sha, "<sha>")
        .replace(sha.get(..8).unwrap_or(sha), "<short sha>")
        .replace(sim.gitlab_url(), "<gitlab>")
}

/// Waits for the latest pipeline of `project` to end; its status and each job's name, status
/// and trace.
fn finished_pipeline(sim: &Sim, project: &str) -> (String, Vec<(String, String, String)>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pipelines = sim.api_json(&format!("projects/{project}/pipelines"));
        let pipeline = &pipelines[0];
        assert!(!pipeline.is_null(), "no pipeline in {project}");
        let status = pipeline["status"].as_str().unwrap_or("").to_string();
        if matches!(status.as_str(), "success" | "failed") {
            let jobs = sim.api_json(&format!(
                "projects/{project}/pipelines/{}/jobs",
                pipeline["id"]
            ));
            let jobs = jobs
                .as_array()
                .expect("jobs")
                .iter()
                .map(|job| {
                    let trace = sim
                        .api(
                            "GET",
                            &format!("projects/{project}/jobs/{}/trace", job["id"]),
                            None,
                        )
                        .body;
                    (
                        job["name"].as_str().unwrap_or("").to_string(),
                        job["status"].as_str().unwrap_or("").to_string(),
                        trace,
                    )
                })
                .collect();
            return (status, jobs);
        }
        assert!(
            Instant::now() < deadline,
            "pipeline never ended: {pipelines}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_job_runs_its_script_with_gitlab_variables_in_precedence_and_masked_values_hidden() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let ci = r#"
variables:
  GREETING: from-file
  OVERRIDDEN: from-yaml
show:
  image: alpine:3.20
  variables:
    JOB_ONLY: from-job
  before_script:
    - echo "before"
  script:
    - echo "greeting=$GREETING job=$JOB_ONLY overridden=$OVERRIDDEN"
    - echo "secret=$SECRET_TOKEN"
    - echo "file=$CONFIG_FILE"
    - cat "$CONFIG_FILE"
    - echo "project=$CI_PROJECT_PATH name=$CI_PROJECT_NAME job=$CI_JOB_NAME stage=$CI_JOB_STAGE ref=$CI_COMMIT_REF_NAME ci=$CI gitlab=$GITLAB_CI"
    - echo "short=$CI_COMMIT_SHORT_SHA api=$CI_API_V4_URL"
    - echo "path=$PATH"
    - test -f .gitlab-ci.yml && test "$(pwd)" = "$CI_PROJECT_DIR"
    - echo "registry=${CI_REGISTRY:-none} protected=${ONLY_PROTECTED:-absent} scoped=${PROD_ONLY:-absent}"
"#;
    project_with_variables_and_ci(
        &sim,
        &[
            json!({"key": "SECRET_TOKEN", "value": "s3cr3t-value-123", "masked": true}),
            json!({"key": "OVERRIDDEN", "value": "from-project"}),
            json!({"key": "CONFIG_FILE", "value": "file-content-xyz", "variable_type": "file"}),
            // main is protected (the default branch): a protected variable reaches its jobs.
            json!({"key": "ONLY_PROTECTED", "value": "yes", "protected": true}),
            json!({"key": "PROD_ONLY", "value": "prod", "environment_scope": "production"}),
        ],
        ci,
    );
    let (status, jobs) = finished_pipeline(&sim, "g%2Fp");
    let (name, job_status, trace) = &jobs[0];
    assert_eq!(
        (status.as_str(), name.as_str(), job_status.as_str()),
        ("success", "show", "success"),
        "{trace}"
    );
    // Project variables override YAML ones; nothing of the host: the PATH is the image's
    // tools only; a bare GitLab has no registry; a production-scoped variable does not reach
    // a job without that environment.
    assert_unindented(
        &steady_trace(&sim, "g%2Fp", trace),
        &(job_start("alpine:3.20")
            + "$ echo \"before\"\n\
         before\n\
         $ echo \"greeting=$GREETING job=$JOB_ONLY overridden=$OVERRIDDEN\"\n\
         greeting=from-file job=from-job overridden=from-project\n\
         $ echo \"secret=$SECRET_TOKEN\"\n\
         secret=[MASKED]\n\
         $ echo \"file=$CONFIG_FILE\"\n\
         file=/builds/g/p.tmp/CONFIG_FILE\n\
         $ cat \"$CONFIG_FILE\"\n\
         file-content-xyz$ echo \"project=$CI_PROJECT_PATH name=$CI_PROJECT_NAME job=$CI_JOB_NAME stage=$CI_JOB_STAGE ref=$CI_COMMIT_REF_NAME ci=$CI gitlab=$GITLAB_CI\"\n\
         project=g/p name=p job=show stage=test ref=main ci=true gitlab=true\n\
         $ echo \"short=$CI_COMMIT_SHORT_SHA api=$CI_API_V4_URL\"\n\
         short=<short sha> api=<gitlab>/api/v4\n\
         $ echo \"path=$PATH\"\n\
         path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         $ test -f .gitlab-ci.yml && test \"$(pwd)\" = \"$CI_PROJECT_DIR\"\n\
         $ echo \"registry=${CI_REGISTRY:-none} protected=${ONLY_PROTECTED:-absent} scoped=${PROD_ONLY:-absent}\"\n\
         registry=none protected=yes scoped=absent\n\
         Cleaning up project directory and file based variables\n\
         Job succeeded\n"),
    );
    assert!(!trace.contains("s3cr3t-value-123"), "{trace}");
    // A file-type variable holds the path of a file with the value.
    let file_line = trace
        .lines()
        .find(|line| line.starts_with("file="))
        .expect("file line");
    assert_eq!(file_line, "file=/builds/g/p.tmp/CONFIG_FILE");
}

#[test]
fn a_failing_command_fails_the_job_in_the_runners_words_and_skips_the_rest() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let ci = r#"
stages: [build, deploy]
build:
  stage: build
  image: alpine:3.20
  script:
    - echo "token is $API_TOKEN"
    - ls /no/such/dir
    - echo "never printed"
deploy:
  stage: deploy
  image: alpine:3.20
  script: [echo deploy]
"#;
    project_with_variables_and_ci(
        &sim,
        &[json!({"key": "API_TOKEN", "value": "tok-abcdefgh-1234", "masked": true})],
        ci,
    );
    let (status, jobs) = finished_pipeline(&sim, "g%2Fp");
    assert_eq!(status, "failed");
    let (_, build_status, trace) = &jobs
        .iter()
        .find(|(n, _, _)| n == "build")
        .expect("build")
        .clone();
    assert_eq!(build_status, "failed");
    assert_unindented(
        &steady_trace(&sim, "g%2Fp", trace),
        &(job_start("alpine:3.20")
            + "$ echo \"token is $API_TOKEN\"\n\
         token is [MASKED]\n\
         $ ls /no/such/dir\n\
         ls: /no/such/dir: No such file or directory\n\
         Cleaning up project directory and file based variables\n\
         ERROR: Job failed: exit code 1\n"),
    );
    let deploy = jobs.iter().find(|(n, _, _)| n == "deploy").expect("deploy");
    assert_eq!(deploy.1, "skipped");
}

#[test]
fn kaniko_fails_in_its_own_words_and_an_unknown_image_is_still_played() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let ci = r#"
played:
  image: ruby:3.3
  script: [bundle exec rake]
build:
  image:
    name: gcr.io/kaniko-project/executor:v1.23.2-debug
    entrypoint: [""]
  script:
    - /kaniko/executor --context "$CI_PROJECT_DIR" --dockerfile "$CI_PROJECT_DIR/nope/Dockerfile" --destination "registry.example/g/p:1"
"#;
    project_with_variables_and_ci(&sim, &[], ci);
    let (_, jobs) = finished_pipeline(&sim, "g%2Fp");
    let played = jobs.iter().find(|(n, _, _)| n == "played").expect("played");
    assert_eq!(
        played.1, "success",
        "an unknown image is played: {}",
        played.2
    );
    let build = jobs.iter().find(|(n, _, _)| n == "build").expect("build");
    assert_eq!(build.1, "failed");
    assert_unindented(
        &steady_trace(&sim, "g%2Fp", &build.2),
        &(job_start("gcr.io/kaniko-project/executor:v1.23.2-debug")
            + "$ /kaniko/executor --context \"$CI_PROJECT_DIR\" --dockerfile \"$CI_PROJECT_DIR/nope/Dockerfile\" --destination \"registry.example/g/p:1\"\n\
         Error: error resolving dockerfile path: please provide a valid path to a Dockerfile within the build context with --dockerfile\n\
         Usage:\n\
         \x20 executor [flags]\n\
         \x20 executor [command]\n\
         Cleaning up project directory and file based variables\n\
         ERROR: Job failed: exit code 1\n"),
    );
}

#[test]
fn a_job_over_its_timeout_is_killed_with_everything_it_started() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let ci =
        "slow:\n  image: alpine:3.20\n  timeout: 2s\n  script:\n    - sleep 60 &\n    - sleep 60\n";
    project_with_variables_and_ci(&sim, &[], ci);
    let started = Instant::now();
    let (status, jobs) = finished_pipeline(&sim, "g%2Fp");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status, "failed");
    assert_unindented(
        &steady_trace(&sim, "g%2Fp", &jobs[0].2),
        &(job_start("alpine:3.20")
            + "$ sleep 60 &\n\
         $ sleep 60\n\
         Cleaning up project directory and file based variables\n\
         ERROR: Job failed: execution took longer than 2s seconds\n"),
    );
}

#[test]
fn masked_values_stay_out_of_the_state_file_and_survive_a_restart() {
    let state = tempfile::tempdir().expect("state");
    let state_arg = state.path().display().to_string();
    let mut sim = BPRUN.sim(SimKind::Gitlab, &["--state", &state_arg]);
    assert_eq!(
        sim.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#))
            .status,
        201
    );
    let created = sim.api(
        "POST",
        "projects",
        Some(r#"{"name":"p","namespace_id":"g"}"#),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    for body in [
        json!({"key": "MASKED_ONE", "value": "masked-value-0001", "masked": true}),
        json!({"key": "HIDDEN_ONE", "value": "hidden-value-0002", "masked_and_hidden": true}),
        json!({"key": "PLAIN_ONE", "value": "plain-value-0003"}),
    ] {
        let set = sim.api("POST", "projects/g%2Fp/variables", Some(&body.to_string()));
        assert_eq!(set.status, 201, "{}", set.body);
    }
    sim.stop();
    let text = std::fs::read_to_string(state.path().join("gitlab-state.json")).expect("state");
    assert!(
        !text.contains("masked-value-0001") && !text.contains("hidden-value-0002"),
        "{text}"
    );
    assert!(text.contains("plain-value-0003"));
    let secrets = state.path().join("gitlab-secrets.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&secrets)
        .expect("secrets")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let restarted = BPRUN.sim(SimKind::Gitlab, &["--state", &state_arg]);
    let masked = restarted.api_json("projects/g%2Fp/variables/MASKED_ONE");
    assert_eq!(masked["value"], "masked-value-0001");
    let _ = GITLAB_TOKEN;
}

/// A failed phase 3 run with the simulator's address and the commits' ids (their time is part
/// of them) as placeholders.
fn steady_failure(sim: &Sim, run: crate::support::Output) -> crate::support::Output {
    run.replace(sim.gitlab_url(), "<gitlab>")
        .short_commits()
        // An empty line of a quoted trace keeps the quote's indentation, which an expected
        // text cannot show (unindent blanks whitespace-only lines).
        .replace_regex(r"(?m)^    $", "")
}

/// The head of phase 3's report when its smoke step's wait failed with `headline`.
fn smoke_failed(headline: &str) -> String {
    format!(
        "error: step \"Smoke test\" failed\n  × {headline}\n{}",
        crate::phase3::smoke_wait_source()
    )
}

/// Phase 3's whole report when its smoke step's wait failed with `headline`, `trace` naming
/// the failed job (its `caused by` and `hint` lines).
fn smoke_report(headline: &str, trace: &str) -> String {
    [
        &smoke_failed(headline),
        trace,
        crate::phase3::SMOKE_ADVICE_LINE,
        "re-run with --resume to continue from here\n",
    ]
    .concat()
}

/// Phase 3 of the guestbook (and shared-code) with `ci-common.yml`, the apps' CI templates,
/// changed by `edit`.
fn guestbook_with_ci_common(sim: &Sim, edit: &dyn Fn(String) -> String) -> crate::support::Output {
    phase3_with_file(
        sim,
        "apps/shared-code/templates/ci-common.yml",
        edit,
        &["--app", "guestbook", "--smoke-timeout", "120"],
    )
}

/// Phase 3 on the embedded platform, as the repository has it.
fn phase3_as_is(sim: &Sim, args: &[&str]) -> crate::support::Output {
    let test = BPRUN.test_in_repository_copy().envs(sim.vars());
    sim.platform_files(test.path());
    let mut full = vec!["scripts/phase3.rhai"];
    full.extend_from_slice(args);
    test.run(&full)
}

/// Phase 3 on the embedded platform with a changed `scripts/phase3.rhai` (the repository copy's).
fn phase3_with(
    sim: &Sim,
    edit: &dyn Fn(String) -> String,
    args: &[&str],
) -> crate::support::Output {
    phase3_with_file(sim, "scripts/phase3.rhai", edit, args)
}

/// Phase 3 on the embedded platform with `file` of the repository copy changed by `edit`.
fn phase3_with_file(
    sim: &Sim,
    file: &str,
    edit: &dyn Fn(String) -> String,
    args: &[&str],
) -> crate::support::Output {
    let test = BPRUN.test_in_repository_copy().envs(sim.vars());
    sim.platform_files(test.path());
    let script = test.path().join(file);
    let text = std::fs::read_to_string(&script).expect("file to edit");
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit changed nothing");
    std::fs::write(&script, edited).expect("write");
    let mut full = vec!["scripts/phase3.rhai"];
    full.extend_from_slice(args);
    test.run(&full)
}

#[test]
fn phase3_smoke_pipelines_pass_because_lint_build_and_deploy_ran() {
    let sim = BPRUN.sim(SimKind::All, &[]);
    let run = phase3_as_is(&sim, &[]);
    run.success();
    for project in ["guestbook", "redis", "redis-slave"] {
        let (status, jobs) = finished_pipeline(&sim, &format!("blueprint-apps%2F{project}"));
        assert_eq!(status, "success", "{jobs:?}");
        let trace_of = |name: &str| {
            jobs.iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, _, trace)| trace.clone())
                .unwrap_or_else(|| panic!("no job {name} in {jobs:?}"))
        };
        let lint = trace_of("lint");
        assert!(
            lint.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{lint}"
        );
        let deploy = trace_of("deploy");
        assert!(deploy.contains("STATUS: deployed"), "{deploy}");
        assert!(
            deploy.contains("$ echo \"$CI_KUBECONFIG_B64\" | base64 -d > /tmp/kubeconfig\n"),
            "{deploy}"
        );
        if project == "guestbook" {
            let build = trace_of("build");
            assert!(
                build.contains("INFO[0002] Pushing image to gitlab-registry.gitlab.svc:5000/blueprint-apps/guestbook:latest"),
                "{build}"
            );
        }
    }
    // guestbook's pod pulls the image the build job pushed; an image nobody built does not
    // pull, as on a real node.
    let guestbook_image = sim.jsonpath(
        "pods",
        "guestbook",
        "{.items[0].status.containerStatuses[0].image}",
    );
    assert_eq!(
        guestbook_image,
        "registry.local.example.net/blueprint-apps/guestbook:latest"
    );
    let ready = sim.jsonpath(
        "pods",
        "guestbook",
        "{.items[0].status.containerStatuses[0].ready}",
    );
    assert_eq!(ready, "true");
    sim.kubectl(&[
        "run",
        "nobody-built-it",
        "-n",
        "default",
        "--image=registry.local.example.net/blueprint-apps/nobody:latest",
    ])
    .ok();
    let deadline = Instant::now() + Duration::from_secs(30);
    let waiting = loop {
        let reason = sim
            .kubectl(&[
                "get",
                "pod",
                "nobody-built-it",
                "-n",
                "default",
                "-o",
                "jsonpath={.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message}",
            ])
            .stdout;
        if reason.starts_with("ErrImagePull") || Instant::now() > deadline {
            break reason;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        waiting,
        "ErrImagePull: failed to pull and unpack image \"registry.local.example.net/blueprint-apps/nobody:latest\": failed to resolve reference \"registry.local.example.net/blueprint-apps/nobody:latest\": registry.local.example.net/blueprint-apps/nobody:latest: not found"
    );
    // The deploys are real Helm releases on the simulated cluster.
    let releases = sim.helm(&["list", "-A", "-o", "json"]);
    for release in ["guestbook", "redis-master-demo", "redis-slave-demo"] {
        assert!(
            releases.stdout.contains(&format!("\"name\":\"{release}\"")),
            "{}",
            releases.stdout
        );
    }
}

#[test]
fn phase3_with_a_wrong_chart_dir_fails_the_smoke_step_with_helms_words() {
    let sim = BPRUN.sim(SimKind::All, &[]);
    let run = phase3_with(
        &sim,
        &|text| {
            text.replace(
                "CI_HELM_CHART_DIR: app.chart_path,",
                "CI_HELM_CHART_DIR: \"charts/missing\",",
            )
        },
        &["--app", "redis", "--smoke-timeout", "120"],
    );
    // The provisioning's lines come in the order parallel work finishes: only the failure's
    // report is compared.
    steady_failure(&sim, run).code(1).stderr(&[
        &smoke_failed("gitlab: pipeline #9 of blueprint-apps/redis failed"),
        "\x20 caused by: job lint failed; end of its trace:\n\
         \x20   Checking out <commit> as detached HEAD (ref is main)...\n\
         \x20   Skipping Git submodules setup\n\
         \x20   Executing \"step_script\" stage of the job script\n\
         \x20   $ helm lint \"$CI_HELM_CHART_DIR\"\n\
         \x20   ==> Linting charts/missing\n\
         \x20   Error unable to check Chart.yaml file in chart: stat charts/missing/Chart.yaml: no such file or directory\n\
         \x20   \n\
         \x20   Error: 1 chart(s) linted, 1 chart(s) failed\n\
         \x20   Cleaning up project directory and file based variables\n\
         \x20   ERROR: Job failed: exit code 1\n\
         \x20 hint: open <gitlab>/blueprint-apps/redis/-/pipelines/9\n\
         ",
        crate::phase3::SMOKE_ADVICE_LINE,
        "re-run with --resume to continue from here\n",
    ]
    .concat()
    );
}

#[test]
fn phase3_with_a_wrong_kubeconfig_fails_deploy_and_never_shows_the_masked_value() {
    let sim = BPRUN.sim(SimKind::All, &[]);
    // A maskable value that is not a kubeconfig (base64 of "not a kubeconfig").
    let run = phase3_with(
        &sim,
        &|text| {
            text.replace(
                "gitlab_ensure_deployer_kubeconfig(`${group}/${app.name}`, #{namespace: app.helm_namespace});",
                "gitlab_set_variables(`${group}/${app.name}`, #{CI_KUBECONFIG_B64: #{value: \"bm90IGEga3ViZWNvbmZpZw==\", masked: true}});",
            )
        },
        &["--app", "redis", "--smoke-timeout", "120"],
    );
    // helm's words, with the path as the job's script wrote it.
    let run = steady_failure(&sim, run);
    run.code(1).stderr(&[
        &smoke_failed("gitlab: pipeline #9 of blueprint-apps/redis failed"),
        "\x20 caused by: job deploy failed; end of its trace:\n\
         \x20   Created fresh repository.\n\
         \x20   Checking out <commit> as detached HEAD (ref is main)...\n\
         \x20   Skipping Git submodules setup\n\
         \x20   Executing \"step_script\" stage of the job script\n\
         \x20   $ echo \"$CI_KUBECONFIG_B64\" | base64 -d > /tmp/kubeconfig\n\
         \x20   $ export KUBECONFIG=/tmp/kubeconfig\n\
         \x20   $ helm upgrade --install \"$HELM_RELEASE\" \"$CI_HELM_CHART_DIR\" --namespace \"$HELM_NAMESPACE\" --wait --timeout 5m\n\
         \x20   Error: Kubernetes cluster unreachable: error loading config file \"/tmp/kubeconfig\": couldn't get version/kind; json parse error: json: cannot unmarshal string into Go value of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }\n\
         \x20   Cleaning up project directory and file based variables\n\
         \x20   ERROR: Job failed: exit code 1\n\
         \x20 hint: open <gitlab>/blueprint-apps/redis/-/pipelines/9\n\
         ",
        crate::phase3::SMOKE_ADVICE_LINE,
        "re-run with --resume to continue from here\n",
    ]
    .concat()
    );
    let (_, jobs) = finished_pipeline(&sim, "blueprint-apps%2Fredis");
    let deploy = jobs.iter().find(|(n, _, _)| n == "deploy").expect("deploy");
    assert_eq!(deploy.1, "failed", "{}", deploy.2);
    assert!(
        !deploy.2.contains("bm90IGEga3ViZWNvbmZpZw=="),
        "{}",
        deploy.2
    );
    assert!(
        !run.stderr.contains("bm90IGEga3ViZWNvbmZpZw==")
            && !run.stdout.contains("bm90IGEga3ViZWNvbmZpZw==")
    );
}

#[test]
fn a_kaniko_build_without_registry_credentials_fails_as_gitlabs_registry_refuses_it() {
    let sim = BPRUN.sim(SimKind::All, &[]);
    // ci-common.yml without the lines that write kaniko's Docker config.
    let run = guestbook_with_ci_common(&sim, &|text| {
        let start = text
            .find("    - mkdir -p /kaniko/.docker")
            .unwrap_or(text.len());
        let end = text
            .find("    - >-\n      /kaniko/executor")
            .unwrap_or(start);
        format!("{}{}", &text[..start], &text[end..])
    });
    steady_failure(&sim, run).code(1).stderr(&[
        &smoke_failed("gitlab: pipeline #9 of blueprint-apps/guestbook failed"),
        "\x20 caused by: job build failed; end of its trace:\n\
         \x20   Getting source from Git repository\n\
         \x20   Initialized empty Git repository in /builds/blueprint-apps/guestbook/.git/\n\
         \x20   Created fresh repository.\n\
         \x20   Checking out <commit> as detached HEAD (ref is main)...\n\
         \x20   Skipping Git submodules setup\n\
         \x20   Executing \"step_script\" stage of the job script\n\
         \x20   $ /kaniko/executor --context \"$CI_PROJECT_DIR\" --dockerfile \"$CI_PROJECT_DIR/$DOCKERFILE_PATH\" --destination \"$CI_REGISTRY_IMAGE:$CI_COMMIT_SHORT_SHA\" --destination \"$CI_REGISTRY_IMAGE:latest\" --insecure --registry-certificate \"${CI_REGISTRY_IMAGE%%/*}=$CI_SERVER_TLS_CA_FILE\"\n\
         \x20   error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"gitlab-registry.gitlab.svc:5000/blueprint-apps/guestbook:<commit>\": POST http://gitlab-registry.gitlab.svc:5000/v2/blueprint-apps/guestbook/blobs/uploads/: UNAUTHORIZED: authentication required; [map[Action:pull Class: Name:blueprint-apps/guestbook Type:repository] map[Action:push Class: Name:blueprint-apps/guestbook Type:repository]]\n\
         \x20   Cleaning up project directory and file based variables\n\
         \x20   ERROR: Job failed: exit code 1\n\
         \x20 hint: open <gitlab>/blueprint-apps/guestbook/-/pipelines/9\n\
         ",
        crate::phase3::SMOKE_ADVICE_LINE,
        "re-run with --resume to continue from here\n",
    ]
    .concat()
    );
}

/// The start of a job's trace on the simulator's runner stand-in, up to its script, for `image`.
fn job_start(image: &str) -> String {
    format!(
        "Running with gitlab-runner 17.9.0 (bprun-sim)\n\
         \x20 on bprun-sim runner stand-in \n\
         Preparing the \"kubernetes\" executor\n\
         Using Kubernetes executor with image {image} ...\n\
         Getting source from Git repository\n\
         Initialized empty Git repository in /builds/g/p/.git/\n\
         Created fresh repository.\n\
         Checking out <short sha> as detached HEAD (ref is main)...\n\
         Skipping Git submodules setup\n\
         Executing \"step_script\" stage of the job script\n"
    )
}

/// A deploy job runs in a pod: the workstation's kubeconfig (`https://127.0.0.1:PORT`, what
/// `kube_config_b64()` gives without `server`) names the pod's own loopback, where nothing
/// listens, so helm fails with Go's `connection refused`, as every deploy job of a real kind
/// platform would. Phase 3 hands the pipelines `https://kubernetes.default.svc` instead (with
/// their own account's token).
#[test]
fn a_deploy_job_with_the_workstations_kubeconfig_cannot_reach_the_api_from_its_pod() {
    let sim = BPRUN.sim(SimKind::All, &[]);
    let run = phase3_with(
        &sim,
        &|text| {
            text.replace(
                "gitlab_ensure_deployer_kubeconfig(`${group}/${app.name}`, #{namespace: app.helm_namespace});",
                "gitlab_set_variables(`${group}/${app.name}`, #{CI_KUBECONFIG_B64: #{value: kube_config_b64(), masked: true}});",
            )
        },
        &["--app", "redis", "--smoke-timeout", "120"],
    );
    let run = steady_failure(&sim, run).replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>");
    run.code(1).stderr(&[
        &smoke_failed("gitlab: pipeline #9 of blueprint-apps/redis failed"),
        "\x20 caused by: job deploy failed; end of its trace:\n\
         \x20   Created fresh repository.\n\
         \x20   Checking out <commit> as detached HEAD (ref is main)...\n\
         \x20   Skipping Git submodules setup\n\
         \x20   Executing \"step_script\" stage of the job script\n\
         \x20   $ echo \"$CI_KUBECONFIG_B64\" | base64 -d > /tmp/kubeconfig\n\
         \x20   $ export KUBECONFIG=/tmp/kubeconfig\n\
         \x20   $ helm upgrade --install \"$HELM_RELEASE\" \"$CI_HELM_CHART_DIR\" --namespace \"$HELM_NAMESPACE\" --wait --timeout 5m\n\
         \x20   Error: Kubernetes cluster unreachable: Get \"https://127.0.0.1:<port>/version\": dial tcp 127.0.0.1:<port>: connect: connection refused\n\
         \x20   Cleaning up project directory and file based variables\n\
         \x20   ERROR: Job failed: exit code 1\n\
         \x20 hint: open <gitlab>/blueprint-apps/redis/-/pipelines/9\n\
         ",
        crate::phase3::SMOKE_ADVICE_LINE,
        "re-run with --resume to continue from here\n",
    ]
    .concat());
}

#[test]
fn the_platform_as_phase2_leaves_it_resolves_gitlab_through_its_coredns_rewrite() {
    // `bprun sim all` is the platform after phase 2: its CoreDNS carries phase 2's rewrite, and
    // jobs fetch from GitLab's external name through it. Put kind's Corefile back (as an
    // operator undoing the rewrite would) and phase 3's jobs cannot fetch, as on kind.
    let sim = BPRUN.sim(SimKind::All, &[]);
    let corefile = sim
        .kubectl(&[
            "get",
            "configmap",
            "coredns",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.data.Corefile}",
        ])
        .stdout;
    let rule = "    rewrite name regex (.+)\\.local\\.example\\.net gitlab-gateway.gitlab.svc.cluster.local answer auto\n";
    assert_eq!(
        corefile.lines().take(2).collect::<Vec<_>>().join("\n") + "\n",
        format!(".:53 {{\n{rule}")
    );
    let kind_corefile = corefile.replacen(rule, "", 1);
    let patch = json!({"data": {"Corefile": kind_corefile}}).to_string();
    sim.kubectl(&[
        "patch",
        "configmap",
        "coredns",
        "-n",
        "kube-system",
        "--type",
        "merge",
        "-p",
        &patch,
    ])
    .success();
    sim.kubectl(&[
        "rollout",
        "restart",
        "deployment/coredns",
        "-n",
        "kube-system",
    ])
    .success();
    sim.kubectl(&[
        "rollout",
        "status",
        "deployment/coredns",
        "-n",
        "kube-system",
        "--timeout=60s",
    ])
    .success();
    let run = phase3_as_is(&sim, &["--app", "redis", "--smoke-timeout", "120"]);
    // The two pipelines are triggered together: their numbers may come in either order.
    let run = steady_failure(&sim, run)
        .replace_regex(r"pipeline #\d+", "pipeline #<id>")
        .replace_regex(r"pipelines/\d+", "pipelines/<id>");
    let trace = |image: &str, project: &str| {
        format!(
            "    Running with gitlab-runner 17.9.0 (bprun-sim)
      on bprun-sim runner stand-in 
    Preparing the \"kubernetes\" executor
    Using Kubernetes executor with image {image} ...
    Getting source from Git repository
    Initialized empty Git repository in /builds/blueprint-apps/{project}/.git/
    Created fresh repository.
    fatal: unable to access 'https://gitlab.local.example.net/blueprint-apps/{project}.git/': Could not resolve host: gitlab.local.example.net
    ERROR: Job failed: exit code 1
    (open <gitlab>/blueprint-apps/{project}/-/pipelines/<id>)
"
        )
    };
    run.code(1).stderr(&[
        &smoke_failed("gitlab: 2 of 2 pipelines did not succeed"),
        r##"  caused by: gitlab: pipeline #<id> of blueprint-apps/shared-code failed
    job lint-templates failed; end of its trace:
"##,
        &trace("alpine:3.20", "shared-code"),
        "  caused by: gitlab: pipeline #<id> of blueprint-apps/redis failed\n    job lint failed; end of its trace:\n",
        &trace("alpine/helm:3.16.4", "redis"),
        "  hint: each failed pipeline is listed above with its URL\n",
        crate::phase3::SMOKE_ADVICE_LINE,
        "re-run with --resume to continue from here\n",
    ]
    .concat());
}

#[test]
fn an_apps_pipeline_deploys_with_its_own_account_and_nothing_outside_its_namespace() {
    // The guestbook's deploy job, given a look at GitLab's namespace and a deploy into the redis
    // app's namespace: its token is guestbook/ci-deployer's, which RBAC limits to guestbook.
    let sim = BPRUN.sim(SimKind::All, &[]);
    let run = guestbook_with_ci_common(&sim, &|text| {
        text.replace(
                "    - helm upgrade --install \"$HELM_RELEASE\"",
                "    - helm list -n gitlab || echo refused\n    - helm upgrade --install \"$HELM_RELEASE\" \"$CI_HELM_CHART_DIR\" --namespace redis-demo --wait --timeout 5m\n    - helm upgrade --install \"$HELM_RELEASE\"",
            )
    });
    steady_failure(&sim, run).code(1).stderr(&smoke_report(
        "gitlab: pipeline #9 of blueprint-apps/guestbook failed",
        r#"  caused by: job deploy failed; end of its trace:
    Executing "step_script" stage of the job script
    $ echo "$CI_KUBECONFIG_B64" | base64 -d > /tmp/kubeconfig
    $ export KUBECONFIG=/tmp/kubeconfig
    $ helm list -n gitlab || echo refused
    Error: list: failed to list: secrets is forbidden: User "system:serviceaccount:guestbook:ci-deployer" cannot list resource "secrets" in API group "" in the namespace "gitlab"
    refused
    $ helm upgrade --install "$HELM_RELEASE" "$CI_HELM_CHART_DIR" --namespace redis-demo --wait --timeout 5m
    Error: query: failed to query with labels: secrets is forbidden: User "system:serviceaccount:guestbook:ci-deployer" cannot list resource "secrets" in API group "" in the namespace "redis-demo"
    Cleaning up project directory and file based variables
    ERROR: Job failed: exit code 1
  hint: open <gitlab>/blueprint-apps/guestbook/-/pipelines/9
"#,
    ));
}

/// Phase 3's check of a platform it provisioned with `--app guestbook`: the steps before
/// Provision projects (the smoke pipelines' numbers depend on what each test did).
const CHECKED_HEAD: &str = "check mode: nothing will be changed\n[1/7] Pre-flight ... ok (#.## s)\n[2/7] Mint PAT ...\n    admin PAT already in OpenBao; reusing\n[2/7] Mint PAT ... ok (#.## s)\n[3/7] Seed glab auth ... skipped: glab is not installed; nothing to seed (#.## s)\n[4/7] Ensure group ... ok (#.## s)\n";

/// The embedded platform and a repository copy to run phase 3 of the guestbook in.
fn guestbook_platform() -> (Sim, crate::support::Test) {
    let sim = BPRUN.sim(SimKind::All, &[]);
    let test = BPRUN.test_in_repository_copy().envs(sim.vars());
    sim.platform_files(test.path());
    (sim, test)
}

/// Phase 3 with `--app guestbook`, the runner options `runner` first.
fn run_guestbook(test: &crate::support::Test, runner: &[&str]) -> crate::support::Output {
    let mut all = runner.to_vec();
    all.extend([
        "scripts/phase3.rhai",
        "--app",
        "guestbook",
        "--smoke-timeout",
        "120",
    ]);
    test.run(&all)
}

/// What the guestbook's deployer variable's description records (account uid, expiry, digest).
fn deployer_description(sim: &Sim) -> String {
    sim.api_json("projects/blueprint-apps%2Fguestbook/variables/CI_KUBECONFIG_B64")["description"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_deployer_account_deleted_since_gets_a_new_token_on_the_next_run() {
    // Deleting an app's ServiceAccount revokes its tokens at once (the hand rotation of
    // deploy/README.md); the next phase 3 run creates the account anew and replaces the stored
    // kubeconfig, which `--check` announces with the reason.
    let (sim, test) = guestbook_platform();
    let run = |runner: &[&str]| run_guestbook(&test, runner);
    run(&[]).success();
    let description = || deployer_description(&sim);
    let uid = || {
        sim.kubectl(&[
            "get",
            "serviceaccount",
            "ci-deployer",
            "-n",
            "guestbook",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .ok()
        .to_string()
    };
    let first = description();
    assert!(first.contains(&format!("(uid {})", uid())), "{first}");
    sim.kubectl(&["delete", "serviceaccount", "ci-deployer", "-n", "guestbook"])
        .success();
    let check = run(&["--check", "--diff"]);
    // A provisioned platform, checked: the steps before and after Provision projects.
    let head = CHECKED_HEAD;
    check.code(0).stdout(&with_recaps(&format!(
        r##"
{head}[5/7] Provision projects ...
    ~ would create ServiceAccount/ci-deployer in guestbook
      --- /dev/null
      +++ b/ServiceAccount/guestbook/ci-deployer
      @@ -0,0 +1,5 @@
      +apiVersion: v1
      +kind: ServiceAccount
      +metadata:
      +  name: ci-deployer
      +  namespace: guestbook
    ~ would update CI variable CI_KUBECONFIG_B64 of blueprint-apps/guestbook
      a new token of ServiceAccount guestbook/ci-deployer: ServiceAccount guestbook/ci-deployer does not exist yet
[5/7] Provision projects ... changed (#.## s)
[6/7] Smoke test ...
    pipeline #9 of blueprint-apps/guestbook is not reused: its CI/CD variables would change: a write is planned
    ~ would start pipeline of blueprint-apps/guestbook on main
    pipeline #7 of blueprint-apps/shared-code: success (0 s)
[6/7] Smoke test ... changed (#.## s)
[7/7] Workloads reachable ... ok (#.## s)

<recap of scripts/phase3.rhai (check mode): Pre-flight: ok; Mint PAT: ok; Seed glab auth: skipped, timed; Ensure group: ok; Provision projects: changed 2; Smoke test: changed 1; Workloads reachable: ok>
"##,
    )));
    // The run does it: a new account, a token of it in the variable, recorded by its uid.
    run(&[]).success();
    let second = description();
    assert_ne!(second, first);
    assert!(second.contains(&format!("(uid {})", uid())), "{second}");
    // And then there is nothing left to do.
    run(&["--check"]).code(0).stdout(&with_recaps(&format!(
        r##"
{head}[5/7] Provision projects ... ok (#.## s)
[6/7] Smoke test ...
    pipeline #7 of blueprint-apps/shared-code: success (0 s)
    pipeline #13 of blueprint-apps/guestbook: success (0 s)
[6/7] Smoke test ... ok (#.## s)
[7/7] Workloads reachable ... ok (#.## s)

<recap of scripts/phase3.rhai (check mode): Pre-flight: ok; Mint PAT: ok; Seed glab auth: skipped, timed; Ensure group: ok; Provision projects: ok; Smoke test: ok; Workloads reachable: ok>
"##,
    )));
}

/// Starts a pipeline of `project` on main and waits for it to end: its status and the trace
/// lines of its deploy job that begin with `Error:`.
fn deploy_errors_of_a_new_pipeline(sim: &Sim, project: &str) -> (String, Vec<String>) {
    let started = sim.api(
        "POST",
        &format!("projects/{project}/pipeline?ref=main"),
        None,
    );
    assert_eq!(started.status, 201, "{}", started.body);
    let (status, jobs) = finished_pipeline(sim, project);
    let errors = jobs
        .iter()
        .filter(|(name, _, _)| name == "deploy")
        .flat_map(|(_, _, trace)| trace.lines().filter(|line| line.starts_with("Error:")))
        .map(str::to_string)
        .collect();
    (status, errors)
}

#[test]
fn an_expired_deployer_token_is_refused_by_the_cluster_and_replaced_by_the_next_run() {
    // A deployer token lives 30 days by the API server's clock. Moved 31 days on, the cluster
    // refuses the stored one (helm's words in the deploy job); `--check` names it, and the
    // next run replaces it with a token that deploys again.
    let (sim, test) = guestbook_platform();
    let run = |runner: &[&str]| run_guestbook(&test, runner);
    run(&[]).success();
    let description = || deployer_description(&sim);
    let first = description();
    let clock = test.path().join("clock.json");
    std::fs::write(&clock, r#"{"advance_days": 31}"#).expect("clock file");
    sim.kubectl(&[
        "replace",
        "--raw",
        "/-/sim/clock",
        "-f",
        &clock.to_string_lossy(),
    ])
    .success();
    let (status, errors) = deploy_errors_of_a_new_pipeline(&sim, "blueprint-apps%2Fguestbook");
    assert_eq!(
        (status.as_str(), errors),
        (
            "failed",
            vec!["Error: Kubernetes cluster unreachable: the server has asked for the client to provide credentials".to_string()]
        )
    );
    // The smoke step sees that failed pipeline as the head commit's latest: it would start one.
    let head = CHECKED_HEAD;
    run(&["--check", "--diff"])
        .replace_regex(
            r"expired at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
            "expired at <time>",
        )
        .code(0)
        .stdout(&with_recaps(&format!(
            r##"
{head}[5/7] Provision projects ...
    ~ would update CI variable CI_KUBECONFIG_B64 of blueprint-apps/guestbook
      a new token of ServiceAccount guestbook/ci-deployer: the stored token expired at <time>
[5/7] Provision projects ... changed (#.## s)
[6/7] Smoke test ...
    ~ would start pipeline of blueprint-apps/guestbook on main
    pipeline #7 of blueprint-apps/shared-code: success (0 s)
[6/7] Smoke test ... changed (#.## s)
[7/7] Workloads reachable ... ok (#.## s)

<recap of scripts/phase3.rhai (check mode): Pre-flight: ok; Mint PAT: ok; Seed glab auth: skipped, timed; Ensure group: ok; Provision projects: changed 1; Smoke test: changed 1; Workloads reachable: ok>
"##,
        )));
    run(&[]).success();
    assert_ne!(description(), first);
    let (status, errors) = deploy_errors_of_a_new_pipeline(&sim, "blueprint-apps%2Fguestbook");
    assert_eq!((status.as_str(), errors), ("success", vec![]));
}

#[test]
fn an_app_that_left_the_manifest_loses_its_deploying_identity_and_shared_code_its_old_variables() {
    // What an earlier platform leaves: the identity of an app no longer in the manifest (its
    // namespace labelled as an app's, its account and binding), and bprun's own kubeconfig in
    // shared-code, as bprun stored it before apps had identities. A full run removes both and
    // keeps the namespace; a second check finds nothing to do.
    let sim = BPRUN.sim(SimKind::All, &[]);
    let test = BPRUN.test_in_repository_copy().envs(sim.vars());
    sim.platform_files(test.path());
    let run = |runner: &[&str]| {
        let mut all = runner.to_vec();
        all.extend(["scripts/phase3.rhai", "--smoke-timeout", "120"]);
        test.run(&all)
    };
    run(&[]).success();
    let retired = r#"
apiVersion: v1
kind: Namespace
metadata: {name: retired, labels: {bprun.dev/app: retired}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ci-deployer, namespace: retired}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ci-deployer, namespace: retired}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bprun-ci-deployer}
subjects: [{kind: ServiceAccount, name: ci-deployer, namespace: retired}]
"#;
    sim.kubectl_stdin(&["apply", "-f", "-"], retired).success();
    let old = sim.api(
        "POST",
        "projects/blueprint-apps%2Fshared-code/variables",
        Some(
            r#"{"key": "CI_KUBECONFIG_B64", "value": "YWRtaW4ga3ViZWNvbmZpZw==", "masked": true}"#,
        ),
    );
    assert_eq!(old.status, 201, "{}", old.body);
    // The variable an older bprun set and no job read: phase 3 removes it too.
    let insecure = sim.api(
        "POST",
        "projects/blueprint-apps%2Fshared-code/variables",
        Some(r#"{"key": "CI_INSECURE_REGISTRY", "value": "1"}"#),
    );
    assert_eq!(insecure.status, 201, "{}", insecure.body);
    let only = ["--only", "Provision projects"];
    let checked = |changes: &str, status: &str| {
        let short = status.split(' ').next().unwrap_or(status);
        // A step that prints nothing shows its one line.
        let provision = if changes.is_empty() {
            format!("[5/7] Provision projects ... {short} (#.## s)")
        } else {
            format!(
                "[5/7] Provision projects ...\n{changes}[5/7] Provision projects ... {short} (#.## s)"
            )
        };
        with_recaps(&format!(
            r##"
check mode: nothing will be changed
[1/7] Pre-flight ... skipped (not selected by --only)
[2/7] Mint PAT ...
    admin PAT already in OpenBao; reusing
[2/7] Mint PAT ... ok (#.## s)
[3/7] Seed glab auth ... skipped (not selected by --only)
[4/7] Ensure group ... skipped (not selected by --only)
{provision}
[6/7] Smoke test ... skipped (not selected by --only)
[7/7] Workloads reachable ... skipped (not selected by --only)

<recap of scripts/phase3.rhai (check mode): Pre-flight: skipped; Mint PAT: ok; Seed glab auth: skipped; Ensure group: skipped; Provision projects: {status}; Smoke test: skipped; Workloads reachable: skipped>
"##
        ))
    };
    run(&["--check", "--only", "Provision projects"])
        .code(0)
        .stdout(&checked(
            "    ~ would delete CI variable CI_KUBECONFIG_B64 of blueprint-apps/shared-code\n    ~ would delete CI variable CI_INSECURE_REGISTRY of blueprint-apps/shared-code\n    ~ would delete RoleBinding/ci-deployer in retired\n    ~ would delete ServiceAccount/ci-deployer in retired\n",
            "changed 4",
        ));
    run(&only).success();
    assert_eq!(
        sim.kubectl(&[
            "get",
            "serviceaccounts,rolebindings",
            "-n",
            "retired",
            "-o",
            "name"
        ])
        .ok(),
        "serviceaccount/default\n",
        "the retired app's identity is gone; the namespace's own account stays"
    );
    assert_eq!(
        sim.kubectl(&["get", "namespace", "retired", "-o", "name"])
            .ok(),
        "namespace/retired\n"
    );
    let variables = sim.api_json("projects/blueprint-apps%2Fshared-code/variables");
    let mut keys: Vec<&str> = variables
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|variable| variable["key"].as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["CI_HELM_CHART_DIR", "CI_REGISTRY_IMAGE"]);
    run(&["--check", "--only", "Provision projects"])
        .code(0)
        .stdout(&checked("", "ok"));
}

#[test]
fn helm_4_deploys_under_the_deployer_role_as_helm_3_does() {
    // The deployer role was derived from what helm 3 calls; helm 4 (its jobs' image
    // alpine/helm:4.*) deploys the guestbook with the same token and role.
    // The jobs read their image from infra/VERSIONS.json: moving to helm 4 is one edit there.
    let sim = BPRUN.sim(SimKind::All, &[]);
    let test = BPRUN.test_in_repository_copy().envs(sim.vars());
    sim.platform_files(test.path());
    let edit = |file: &str, from: &str, to: &str| {
        let path = test.path().join(file);
        let text = std::fs::read_to_string(&path).expect("file to edit");
        assert!(text.contains(from), "{file}");
        std::fs::write(&path, text.replace(from, to)).expect("write");
    };
    edit(
        "infra/VERSIONS.json",
        "\"repository\": \"alpine/helm\",\n      \"tag\": \"3.16.4\"",
        "\"repository\": \"alpine/helm\",\n      \"tag\": \"4.1.4\"",
    );
    edit(
        "apps/shared-code/templates/ci-common.yml",
        "    - helm upgrade --install \"$HELM_RELEASE\"",
        "    - helm version --short\n    - helm upgrade --install \"$HELM_RELEASE\"",
    );
    test.run(&[
        "scripts/phase3.rhai",
        "--app",
        "guestbook",
        "--smoke-timeout",
        "120",
    ])
    .success();
    let (status, jobs) = finished_pipeline(&sim, "blueprint-apps%2Fguestbook");
    let deploy = jobs
        .iter()
        .find(|(name, _, _)| name == "deploy")
        .expect("deploy");
    let version = deploy
        .2
        .lines()
        .skip_while(|line| *line != "$ helm version --short")
        .nth(1);
    assert_eq!(
        (status.as_str(), deploy.1.as_str(), version),
        ("success", "success", Some("v4.1.4+g05fa379")),
        "{}",
        deploy.2
    );
}

/// What the smoke step says when the guestbook's build fails at kaniko's push check: the
/// executor run with its trust flags `flags` (the template's, as the trace shows them), then
/// kaniko's `why` after the transport's `Get "URL": `.
fn kaniko_refused(flags: &str, url: &str, why: &str) -> String {
    smoke_report(
        "gitlab: pipeline #9 of blueprint-apps/guestbook failed",
        &format!(
            "\x20 caused by: job build failed; end of its trace:\n\
             \x20   Created fresh repository.\n\
             \x20   Checking out <commit> as detached HEAD (ref is main)...\n\
             \x20   Skipping Git submodules setup\n\
             \x20   Executing \"step_script\" stage of the job script\n\
             \x20   $ mkdir -p /kaniko/.docker\n\
             \x20   $ echo \"{{\\\"auths\\\":{{\\\"${{CI_REGISTRY_IMAGE%%/*}}\\\":{{\\\"auth\\\":\\\"$(printf '%s:%s' \"$CI_REGISTRY_USER\" \"$CI_REGISTRY_PASSWORD\" | base64 | tr -d '\\n')\\\"}}}}}}\" > /kaniko/.docker/config.json\n\
             \x20   $ /kaniko/executor --context \"$CI_PROJECT_DIR\" --dockerfile \"$CI_PROJECT_DIR/$DOCKERFILE_PATH\" --destination \"$CI_REGISTRY_IMAGE:$CI_COMMIT_SHORT_SHA\" --destination \"$CI_REGISTRY_IMAGE:latest\" {flags}\n\
             \x20   error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"gitlab-registry.gitlab.svc:5000/blueprint-apps/guestbook:<commit>\": creating push check transport for gitlab-registry.gitlab.svc:5000 failed: Get \"{url}\": {why}\n\
             \x20   Cleaning up project directory and file based variables\n\
             \x20   ERROR: Job failed: exit code 1\n\
             \x20 hint: open <gitlab>/blueprint-apps/guestbook/-/pipelines/9\n\
             "
        ),
    )
}

#[test]
fn kaniko_without_insecure_meets_the_in_cluster_registrys_plain_http() {
    // The in-cluster registry (gitlab-registry.gitlab.svc:5000) speaks plain HTTP: kaniko's
    // client, asked for HTTPS (no --insecure), fails as go-containerregistry does.
    let sim = BPRUN.sim(SimKind::All, &[]);
    let run = guestbook_with_ci_common(&sim, &|text| text.replace("      --insecure\n", ""));
    steady_failure(&sim, run).code(1).stderr(&kaniko_refused(
        "--registry-certificate \"${CI_REGISTRY_IMAGE%%/*}=$CI_SERVER_TLS_CA_FILE\"",
        "https://gitlab-registry.gitlab.svc:5000/v2/",
        "http: server gave HTTP response to HTTPS client",
    ));
}

#[test]
fn kaniko_without_the_runners_ca_cannot_fetch_a_token_from_gitlabs_realm() {
    // The in-cluster registry answers plain HTTP, but its token realm is GitLab's external URL
    // behind the gateway: kaniko fetches the push token there over the destination's transport,
    // which trusts the wildcard CA only through --registry-certificate (the runner's CA file).
    let sim = BPRUN.sim(SimKind::All, &[]);
    let run = guestbook_with_ci_common(&sim, &|text| {
        text.replace(
            "      --registry-certificate \"${CI_REGISTRY_IMAGE%%/*}=$CI_SERVER_TLS_CA_FILE\"\n",
            "",
        )
    });
    steady_failure(&sim, run).code(1).stderr(&kaniko_refused(
        "--insecure",
        "https://gitlab.local.example.net/jwt/auth?scope=repository%3Ablueprint-apps%2Fguestbook%3Apush%2Cpull&service=container_registry",
        "tls: failed to verify certificate: x509: certificate signed by unknown authority",
    ));
}

#[test]
fn without_a_running_toolbox_the_pat_mint_fails_and_says_where_to_look() {
    // The failure mapping of the phase 3 deep dive: a token mint that fails points at the
    // toolbox pod, whose `gitlab-rails runner` mints it.
    let (sim, test) = guestbook_platform();
    sim.kubectl(&[
        "scale",
        "deployment",
        "gitlab-toolbox",
        "-n",
        "gitlab",
        "--replicas=0",
    ])
    .success();
    sim.kubectl(&[
        "wait",
        "--for=delete",
        "pod",
        "-l",
        "app=toolbox",
        "-n",
        "gitlab",
        "--timeout=20s",
    ])
    .success();
    let failed = run_guestbook(&test, &[]);
    failed.code(1).stderr(&format!(
        "error: step \"Mint PAT\" failed\n  × no running pod matches app=toolbox in gitlab\n{}  hint: list the pods with that label selector to check it\n  when this step fails: the PAT is minted by `gitlab-rails runner` in the toolbox pod: it must be Running (kubectl -n gitlab get pods -l app=toolbox); a mint that hangs or fails means an unhealthy toolbox (kubectl -n gitlab logs -l app=toolbox --tail 50); a stored PAT GitLab refuses (a rebuilt GitLab) is replaced by the next run\nre-run with --resume to continue from here\n",
        crate::support::script_frame(
            "scripts/phase3.rhai",
            "let result = kube_exec(\"gitlab\", \"app=toolbox\"",
            "kube_exec",
            "failed here"
        )
    ));
}

/// The release of the guestbook, as helm lists it on the simulated cluster (empty when none).
fn guestbook_release(sim: &Sim) -> String {
    sim.helm(&["list", "-n", "guestbook", "-o", "json"])
        .ok()
        .to_string()
}

#[test]
fn a_green_smoke_pipeline_whose_deploy_is_gone_is_not_reused_and_the_app_is_deployed_again() {
    // The guestbook's last smoke pipeline is green, but what it deployed is gone: first its
    // release (helm uninstall), then its whole namespace. Each time the next run starts a new
    // pipeline, saying why, and the guestbook runs again; a run after that starts nothing.
    let (sim, test) = guestbook_platform();
    let run = |runner: &[&str]| run_guestbook(&test, runner);
    run(&[]).success();
    assert!(guestbook_release(&sim).contains("\"name\":\"guestbook\""));
    sim.helm(&["uninstall", "guestbook", "-n", "guestbook", "--wait"])
        .ok();
    let check = run(&["--check"]);
    check.code(0).stdout(&with_recaps(&format!(
        r##"
{CHECKED_HEAD}[5/7] Provision projects ... ok (#.## s)
[6/7] Smoke test ...
    pipeline #9 of blueprint-apps/guestbook is not reused: release guestbook has no workload in namespace guestbook
    ~ would start pipeline of blueprint-apps/guestbook on main
    pipeline #7 of blueprint-apps/shared-code: success (0 s)
[6/7] Smoke test ... changed (#.## s)
[7/7] Workloads reachable ... ok (#.## s)

<recap of scripts/phase3.rhai (check mode): Pre-flight: ok; Mint PAT: ok; Seed glab auth: skipped, timed; Ensure group: ok; Provision projects: ok; Smoke test: changed 1; Workloads reachable: ok>
"##,
    )));
    run(&[]).success();
    assert!(guestbook_release(&sim).contains("\"status\":\"deployed\""));
    sim.kubectl(&[
        "delete",
        "namespace",
        "guestbook",
        "--wait=true",
        "--timeout=60s",
    ])
    .success();
    run(&[]).success();
    assert!(guestbook_release(&sim).contains("\"status\":\"deployed\""));
    let ready = sim.jsonpath(
        "deployments",
        "guestbook",
        "{.items[0].status.readyReplicas}",
    );
    assert_eq!(ready, "1");
    run(&["--check"]).code(0).stdout(&with_recaps(&format!(
        r##"
{CHECKED_HEAD}[5/7] Provision projects ... ok (#.## s)
[6/7] Smoke test ...
    pipeline #7 of blueprint-apps/shared-code: success (0 s)
    pipeline #17 of blueprint-apps/guestbook: success (0 s)
[6/7] Smoke test ... ok (#.## s)
[7/7] Workloads reachable ... ok (#.## s)

<recap of scripts/phase3.rhai (check mode): Pre-flight: ok; Mint PAT: ok; Seed glab auth: skipped, timed; Ensure group: ok; Provision projects: ok; Smoke test: ok; Workloads reachable: ok>
"##,
    )));
}
