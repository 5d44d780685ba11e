//! Runners in the GitLab simulator, as GitLab 17/18 has them: jobs run only when an online
//! runner that serves the project and carries the job's tags takes them; without one they stay
//! pending and bprun's wait names them.

use crate::support::with_recaps;
use crate::support::{gitlab_wait_error, wait_failed};
use std::time::{Duration, Instant};

use crate::support::{BPRUN, GITLAB_TOKEN, Sim, SimKind};
use crate::support::{Test, repo};

fn with_sim(test: Test, sim: &Sim) -> Test {
    test.env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN)
        .replace(sim.gitlab_url(), "<gitlab>")
}

/// A group `g`, projects `g/p` (with `ci` as its `.gitlab-ci.yml`) and `g/other`.
fn project_with_ci(sim: &Sim, ci: &str) {
    assert_eq!(
        sim.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#))
            .status,
        201
    );
    for name in ["p", "other"] {
        let created = sim.api(
            "POST",
            "projects",
            Some(&format!(r#"{{"name":"{name}","namespace_id":"g"}}"#)),
        );
        assert_eq!(created.status, 201, "{}", created.body);
    }
    let body = serde_json::json!({"branch": "main", "content": ci, "commit_message": "ci"});
    let committed = sim.api(
        "POST",
        "projects/g%2Fp/repository/files/.gitlab-ci.yml",
        Some(&body.to_string()),
    );
    assert_eq!(committed.status, 201, "{}", committed.body);
}

fn jobs(sim: &Sim, pipeline: &serde_json::Value) -> Vec<(String, String)> {
    sim.api_json(&format!("projects/g%2Fp/pipelines/{}/jobs", pipeline["id"]))
        .as_array()
        .expect("jobs")
        .iter()
        .map(|job| {
            (
                job["name"].as_str().unwrap_or("").to_string(),
                job["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Polls `POST /jobs/request` as a runner would until the job `name` has `status` (the
/// deadline only guards against a hang: the end state does not depend on timing).
fn poll_until(sim: &Sim, token: &str, pipeline: &serde_json::Value, name: &str, status: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let polled = sim.raw(
            "POST",
            "/api/v4/jobs/request",
            None,
            Some(&format!(r#"{{"token":"{token}"}}"#)),
        );
        assert_eq!(polled.status, 204, "{}", polled.body);
        let now = jobs(sim, pipeline);
        if now.iter().any(|(job, s)| job == name && s == status) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {name} never became {status}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_waiting_pipeline_says_where_it_stands_at_a_steady_interval() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    project_with_ci(
        &sim,
        "stages: [build, deploy]\nbuild:\n  stage: build\n  script: [make]\ndeploy:\n  stage: deploy\n  script: [helm upgrade]\n",
    );
    let test = with_sim(
        repo().script(
            r#"
step("Smoke", || {
    let started = gitlab_trigger_pipeline("g/p", "main");
    gitlab_wait_pipeline("g/p", started.id, #{timeout: 2.5, interval: 0.2, progress: 1});
});
"#,
        ),
        &sim,
    );
    let output = test.run(&["scripts/test.rhai"]);
    let pipeline = &sim.api_json("projects/g%2Fp/pipelines")[0];
    assert_eq!(
        pipeline["id"], 8,
        "the pipeline id the expected output shows"
    );
    // A line a second, each with the pipeline's page.
    output.expect(
        1,
        &with_recaps("[1/1] Smoke ...\n\
                      \x20   ~ start pipeline of g/p on main\n\
                      \x20   pipeline #8 of g/p: pending (0 s)\n\
                      \x20   waiting for pipeline #8 of g/p (1 s): pending; jobs: build pending, deploy created; <gitlab>/g/p/-/pipelines/8\n\
                      \x20   waiting for pipeline #8 of g/p (2 s): pending; jobs: build pending, deploy created; <gitlab>/g/p/-/pipelines/8\n\
                      [1/1] Smoke ... failed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Smoke: failed 1>\n"),
        "error: step \"Smoke\" failed\n\
         \x20 × gitlab: pipelines did not finish within 2 s: #8 of g/p is pending; no online runner can take job build\n\
         \x20  ╭─[scripts/test.rhai:4:5]\n\
         \x203 │     let started = gitlab_trigger_pipeline(\"g/p\", \"main\");\n\
         \x204 │     gitlab_wait_pipeline(\"g/p\", started.id, #{timeout: 2.5, interval: 0.2, progress: 1});\n\
         \x20  ·     ──────────┬─────────\n\
         \x20  ·               ╰── failed here\n\
         \x205 │ });\n\
         \x20  ╰────\n\
         \x20 hint: register a runner that serves the project (phase 2 ends by registering GitLab Runner), check that its pods run, and that its tags cover the jobs' `tags:`\n\
         re-run with --resume to continue from here\n",
    );
}

#[test]
fn without_a_runner_a_pipeline_stays_pending_and_the_wait_names_the_job() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    project_with_ci(
        &sim,
        "stages: [build, deploy]\nbuild:\n  stage: build\n  script: [make]\ndeploy:\n  stage: deploy\n  script: [helm upgrade]\n",
    );
    assert_eq!(sim.api_json("runners/all"), serde_json::json!([]));
    let test = with_sim(
        repo().script(
            r#"
step("Smoke", || {
    let started = gitlab_trigger_pipeline("g/p", "main");
    gitlab_wait_pipeline("g/p", started.id, #{timeout: 1, interval: 0.2});
});
"#,
        ),
        &sim,
    );
    // The later stage waits for the first: `created`, not pending, so it is not named.
    test.run(&["scripts/test.rhai"]).expect(
        1,
        &with_recaps("[1/1] Smoke ...\n\
                      \x20   ~ start pipeline of g/p on main\n\
                      \x20   pipeline #8 of g/p: pending (0 s)\n\
                      [1/1] Smoke ... failed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Smoke: failed 1>\n"),
        "error: step \"Smoke\" failed\n\
         \x20 × gitlab: pipelines did not finish within 1 s: #8 of g/p is pending; no online runner can take job build\n\
         \x20  ╭─[scripts/test.rhai:4:5]\n\
         \x203 │     let started = gitlab_trigger_pipeline(\"g/p\", \"main\");\n\
         \x204 │     gitlab_wait_pipeline(\"g/p\", started.id, #{timeout: 1, interval: 0.2});\n\
         \x20  ·     ──────────┬─────────\n\
         \x20  ·               ╰── failed here\n\
         \x205 │ });\n\
         \x20  ╰────\n\
         \x20 hint: register a runner that serves the project (phase 2 ends by registering GitLab Runner), check that its pods run, and that its tags cover the jobs' `tags:`\n\
         re-run with --resume to continue from here\n",
    );
    let pipelines = sim.api_json("projects/g%2Fp/pipelines");
    assert_eq!(pipelines[0]["status"], "pending");
    assert_eq!(
        jobs(&sim, &pipelines[0]),
        [
            ("build".to_string(), "pending".to_string()),
            ("deploy".to_string(), "created".to_string())
        ]
    );
}

#[test]
fn a_runner_polling_for_jobs_is_online_and_takes_the_jobs_its_scope_and_tags_allow() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    project_with_ci(
        &sim,
        "stages: [build, deploy]\nbuild:\n  stage: build\n  script: [make]\ndeploy:\n  stage: deploy\n  tags: [k8s]\n  script: [helm upgrade]\n",
    );
    // Creating a runner: GitLab's parameter checks, then an id and a `glrt-` token.
    assert_eq!(
        sim.api("POST", "user/runners", Some("{}")).body,
        r#"{"error":"runner_type is missing"}"#
    );
    assert_eq!(
        sim.api(
            "POST",
            "user/runners",
            Some(r#"{"runner_type":"project_type"}"#)
        )
        .body,
        r#"{"error":"project_id is missing"}"#
    );
    let created = sim.api(
        "POST",
        "user/runners",
        Some(r#"{"runner_type":"instance_type","description":"shared","tag_list":"docker"}"#),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let runner = created.json();
    let token = runner["token"].as_str().expect("token").to_string();
    assert!(token.starts_with("glrt-"), "{token}");
    let other = sim
        .api(
            "POST",
            "user/runners",
            Some(r#"{"runner_type":"project_type","project_id":"g/other"}"#),
        )
        .json();
    let other_token = other["token"].as_str().expect("token").to_string();

    // Verify, as `gitlab-runner register` does; a wrong token is refused.
    let verified = sim.raw(
        "POST",
        "/api/v4/runners/verify",
        None,
        Some(&format!(r#"{{"token":"{token}"}}"#)),
    );
    assert_eq!(verified.status, 200, "{}", verified.body);
    assert_eq!(verified.json()["id"], runner["id"]);
    let wrong = sim.raw(
        "POST",
        "/api/v4/runners/verify",
        None,
        Some(r#"{"token":"glrt-wrong"}"#),
    );
    assert_eq!(wrong.status, 403);
    assert_eq!(
        sim.raw(
            "POST",
            "/api/v4/jobs/request",
            None,
            Some(r#"{"token":"glrt-wrong"}"#)
        )
        .status,
        403
    );

    // Registered but never contacted: not online.
    let detail = sim.api_json(&format!("runners/{}", runner["id"]));
    assert_eq!(detail["status"], "never_contacted");
    assert_eq!(detail["online"], false);
    assert_eq!(detail["tag_list"], serde_json::json!(["docker"]));
    assert_eq!(detail["run_untagged"], true);
    assert_eq!(detail["contacted_at"], serde_json::Value::Null);

    let pipeline = sim
        .api("POST", "projects/g%2Fp/pipeline", Some(r#"{"ref":"main"}"#))
        .json();
    // A runner of another project polls: it cannot take g/p's job.
    let polled = sim.raw(
        "POST",
        "/api/v4/jobs/request",
        None,
        Some(&format!(r#"{{"token":"{other_token}"}}"#)),
    );
    assert_eq!(polled.status, 204);
    assert_eq!(
        jobs(&sim, &pipeline),
        [
            ("build".to_string(), "pending".to_string()),
            ("deploy".to_string(), "created".to_string())
        ]
    );
    assert_eq!(
        sim.api_json("projects/g%2Fp/runners?status=online")
            .as_array()
            .map(Vec::len),
        Some(0),
        "the other project's runner does not serve g/p"
    );

    // The instance runner polls: it is online and takes the untagged job, not the `k8s` one.
    poll_until(&sim, &token, &pipeline, "build", "success");
    let detail = sim.api_json(&format!("runners/{}", runner["id"]));
    assert_eq!(detail["status"], "online");
    assert_eq!(detail["online"], true);
    assert!(detail["contacted_at"].is_string(), "{detail}");
    let online = sim.api_json("runners/all?status=online");
    assert_eq!(online.as_array().map(Vec::len), Some(2), "{online}");
    assert_eq!(
        sim.api_json("runners/all?type=project_type")[0]["id"],
        other["id"]
    );
    let status = sim.raw(
        "POST",
        "/api/v4/jobs/request",
        None,
        Some(&format!(r#"{{"token":"{token}"}}"#)),
    );
    assert_eq!(status.status, 204);
    assert_eq!(
        jobs(&sim, &pipeline)[1],
        ("deploy".to_string(), "pending".to_string())
    );
    assert_eq!(
        sim.api_json(&format!("projects/g%2Fp/pipelines/{}", pipeline["id"]))["status"],
        "running"
    );

    // bprun's wait names the job no online runner can take, with its tags.
    let test = with_sim(
        repo().script(&format!(
            "step(\"Wait\", || {{ gitlab_wait_pipeline(\"g/p\", {}, #{{timeout: 1, interval: 0.2}}); }});\n",
            pipeline["id"]
        )),
        &sim,
    );
    assert_eq!(
        pipeline["id"], 8,
        "the pipeline id the expected output shows"
    );
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &wait_failed(),
        &gitlab_wait_error(
            "gitlab: pipelines did not finish within 1 s: #8 of g/p is running; no online runner can take job deploy (tags: k8s)",
            "step(\"Wait\", || { gitlab_wait_pipeline(\"g/p\", 8, #{timeout: 1, interval: 0.2}); });",
            "  hint: register a runner that serves the project (phase 2 ends by registering GitLab Runner), check that its pods run, and that its tags cover the jobs' `tags:`\n",
        ),
    );

    // Given the tag, the runner takes the job on its next poll and the pipeline goes green.
    let updated = sim.api(
        "PUT",
        &format!("runners/{}", runner["id"]),
        Some(r#"{"tag_list":["docker","k8s"]}"#),
    );
    assert_eq!(updated.status, 200, "{}", updated.body);
    poll_until(&sim, &token, &pipeline, "deploy", "success");
    let done = sim.api_json(&format!("projects/g%2Fp/pipelines/{}", pipeline["id"]));
    assert_eq!(done["status"], "success");
    let listed = sim.api_json(&format!("projects/g%2Fp/pipelines/{}/jobs", pipeline["id"]));
    assert_eq!(listed[1]["runner"]["id"], runner["id"]);
    assert_eq!(listed[1]["tag_list"], serde_json::json!(["k8s"]));

    // Deleting a runner: gone, and its token no longer works.
    assert_eq!(
        sim.api("DELETE", &format!("runners/{}", runner["id"]), None)
            .status,
        204
    );
    assert_eq!(
        sim.raw(
            "POST",
            "/api/v4/jobs/request",
            None,
            Some(&format!(r#"{{"token":"{token}"}}"#))
        )
        .status,
        403
    );
}

#[test]
fn the_runner_flag_and_the_embedded_platform_bring_an_online_runner() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner", "--runner-tag", "k8s"]);
    let runners = sim.api_json("runners/all");
    assert_eq!(runners.as_array().map(Vec::len), Some(1), "{runners}");
    assert_eq!(runners[0]["status"], "online");
    assert_eq!(runners[0]["runner_type"], "instance_type");
    let detail = sim.api_json(&format!("runners/{}", runners[0]["id"]));
    assert_eq!(detail["tag_list"], serde_json::json!(["k8s"]));
    assert_eq!(detail["run_untagged"], true);
    // The stand-in's own polls are not in the request log the tests read.
    assert_eq!(sim.mutating_requests(), 0);

    let all = BPRUN.sim(SimKind::All, &[]);
    let runners = all.api_json("runners/all?status=online");
    assert_eq!(runners.as_array().map(Vec::len), Some(1), "{runners}");
}
