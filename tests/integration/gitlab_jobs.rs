//! CI jobs that really run in the GitLab simulator (crates/sim/src/gitlab/ci/jobs.rs): a job of a
//! known image runs its script in `sh` with GitLab's variables and nothing of the host's
//! environment, its trace is the runner's with masked values as `[MASKED]`, and phase 3's
//! smoke pipelines pass because lint, build and deploy ran, or fail in the real tool's words.

use std::time::{Duration, Instant};

use crate::support::{BPRUN, GITLAB_TOKEN, Sim, SimKind};
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
    assert!(
        trace.contains("Using Kubernetes executor with image alpine:3.20"),
        "{trace}"
    );
    assert!(trace.contains("$ echo \"before\"\nbefore\n"), "{trace}");
    assert!(
        trace.contains("$ echo \"greeting=$GREETING job=$JOB_ONLY overridden=$OVERRIDDEN\"\ngreeting=from-file job=from-job overridden=from-project\n"),
        "project variables override YAML ones: {trace}"
    );
    assert!(trace.contains("secret=[MASKED]\n"), "{trace}");
    assert!(!trace.contains("s3cr3t-value-123"), "{trace}");
    // A file-type variable holds the path of a file with the value.
    let file_line = trace
        .lines()
        .find(|line| line.starts_with("file="))
        .expect("file line");
    assert_eq!(file_line, "file=/builds/g/p.tmp/CONFIG_FILE");
    assert!(
        trace.contains("$ cat \"$CONFIG_FILE\"\nfile-content-xyz"),
        "{trace}"
    );
    assert!(
        trace.contains("project=g/p name=p job=show stage=test ref=main ci=true gitlab=true\n"),
        "{trace}"
    );
    let pipelines = sim.api_json("projects/g%2Fp/pipelines");
    let sha = pipelines[0]["sha"].as_str().expect("sha");
    assert!(
        trace.contains(&format!(
            "short={} api={}/api/v4\n",
            &sha[..8],
            sim.gitlab_url()
        )),
        "{trace}"
    );
    // Nothing of the host: the PATH is the image's tools only.
    assert!(trace.contains("\npath=/bin\n"), "{trace}");
    assert!(
        trace.contains("registry=none protected=yes scoped=absent\n"),
        "a bare GitLab has no registry; a production-scoped variable does not reach a job without that environment: {trace}"
    );
    assert!(trace.ends_with("Job succeeded\n"), "{trace}");
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
    assert!(trace.contains("token is [MASKED]\n"), "{trace}");
    assert!(trace.contains("$ ls /no/such/dir\n"), "{trace}");
    assert!(trace.contains("No such file or directory"), "{trace}");
    assert!(!trace.contains("never printed"), "{trace}");
    assert!(
        trace.ends_with("ERROR: Job failed: exit code 2\n"),
        "{trace}"
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
    assert!(
        build.2.contains("Error: error resolving dockerfile path: please provide a valid path to a Dockerfile within the build context with --dockerfile\nUsage:\n  executor [flags]\n"),
        "{}",
        build.2
    );
    assert!(
        build.2.ends_with("ERROR: Job failed: exit code 1\n"),
        "{}",
        build.2
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
    assert!(
        jobs[0]
            .2
            .ends_with("ERROR: Job failed: execution took longer than 2s seconds\n"),
        "{}",
        jobs[0].2
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
    let script = test.path().join(file);
    let text = std::fs::read_to_string(&script).expect("file to edit");
    let edited = edit(text.clone());
    assert!(
        edited != text || edit("".into()).is_empty(),
        "the edit changed nothing"
    );
    std::fs::write(&script, edited).expect("write");
    let mut full = vec!["scripts/phase3.rhai"];
    full.extend_from_slice(args);
    test.run(&full)
}

#[test]
fn phase3_smoke_pipelines_pass_because_lint_build_and_deploy_ran() {
    let sim = BPRUN.sim(SimKind::All, &[]);
    let run = phase3_with(&sim, &|text| text, &[]);
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
    run.code(1);
    run.stderr_contains("job lint failed; end of its trace:");
    run.stderr_contains("Error: 1 chart(s) linted, 1 chart(s) failed");
    run.stderr_contains("ERROR: Job failed: exit code 1");
}

#[test]
fn phase3_with_a_wrong_kubeconfig_fails_deploy_and_never_shows_the_masked_value() {
    let sim = BPRUN.sim(SimKind::All, &[]);
    // A maskable value that is not a kubeconfig (base64 of "not a kubeconfig").
    let run = phase3_with(
        &sim,
        &|text| {
            text.replace(
                "CI_KUBECONFIG_B64: #{value: kubeconfig, masked: true},",
                "CI_KUBECONFIG_B64: #{value: \"bm90IGEga3ViZWNvbmZpZw==\", masked: true},",
            )
        },
        &["--app", "redis", "--smoke-timeout", "120"],
    );
    run.code(1);
    run.stderr_contains("job deploy failed; end of its trace:");
    // helm's words, with the path as the job's script wrote it.
    run.stderr_contains(
        "Error: Kubernetes cluster unreachable: error loading config file \"/tmp/kubeconfig\"",
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
    let run = phase3_with_file(
        &sim,
        "apps/shared-code/templates/ci-common.yml",
        &|text| {
            let start = text
                .find("    - mkdir -p /kaniko/.docker")
                .unwrap_or(text.len());
            let end = text
                .find("    - >-\n      /kaniko/executor")
                .unwrap_or(start);
            format!("{}{}", &text[..start], &text[end..])
        },
        &["--app", "guestbook", "--smoke-timeout", "120"],
    );
    run.code(1);
    run.stderr_contains("job build failed; end of its trace:");
    run.stderr_contains(
        "checking push permission for \"gitlab-registry.gitlab.svc:5000/blueprint-apps/guestbook:",
    );
    run.stderr_contains("UNAUTHORIZED: authentication required");
}
