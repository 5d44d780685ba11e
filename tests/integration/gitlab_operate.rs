//! What operators do to GitLab by hand besides reading it, against the GitLab simulator: the
//! qualification's access probe.

use crate::support::{BPRUN, GITLAB_TOKEN, SimKind, repo, with_recaps};

const PROBE: &str = r#"
step("Set up", || { gitlab_ensure_group("blueprint-apps"); });
step("Probe", || {
    let probe = gitlab_access_probe("blueprint-apps");
    for name in ["developer_clone", "developer_delete", "outsider_clone", "anonymous_clone"] {
        print(`${name}: ${if probe[name].allowed { "allowed" } else { "refused" }} (${probe[name].detail})`);
    }
    let users = gitlab_get_all("users").map(|user| user.username);
    print(`users: ${users}`);
    print(`projects: ${gitlab_projects("blueprint-apps").len()}`);
});
"#;

#[test]
fn the_access_probe_asks_as_a_developer_an_outsider_and_anonymous_and_leaves_nothing_behind() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    // What an interrupted probe left: removed before the probe starts.
    let leftover = sim.api(
        "POST",
        "users",
        Some(r#"{"username": "bprun-probe-developer-old123", "name": "left", "email": "left@probe.invalid", "force_random_password": true}"#),
    );
    assert_eq!(leftover.status, 201, "{}", leftover.body);
    let test = repo()
        .script(PROBE)
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN);
    let run = || {
        test.run(&["scripts/test.rhai"]).expect(
            0,
            &with_recaps(
                r#"
                [1/2] Set up ... ok (#.## s)
                [2/2] Probe ...
                    developer_clone: allowed (2 refs)
                    developer_delete: refused (403 Forbidden)
                    outsider_clone: refused (404 Not Found)
                    anonymous_clone: refused (401 Unauthorized)
                    users: ["root"]
                    projects: 0
                [2/2] Probe ... ok (#.## s)

                <recap of scripts/test.rhai: Set up: ok; Probe: ok>
                "#,
            ),
            "",
        );
    };
    sim.api(
        "POST",
        "groups",
        Some(r#"{"name": "blueprint-apps", "path": "blueprint-apps", "visibility": "internal"}"#),
    );
    run();
    // Again: a probe changes nothing it leaves behind.
    run();
    sim.clear_requests();
    test.run(&["--check", "scripts/test.rhai"]).expect(
        1,
        &with_recaps(
            r#"
            check mode: nothing will be changed
            [1/2] Set up ... ok (#.## s)
            [2/2] Probe ... failed (#.## s)

            <recap of scripts/test.rhai (check mode): Set up: ok; Probe: failed>
            "#,
        ),
        r#"
        error: step "Probe" failed
          × gitlab_access_probe cannot run in check mode: the probe creates two users and a project (and deletes them again)
           ╭─[scripts/test.rhai:4:17]
         3 │ step("Probe", || {
         4 │     let probe = gitlab_access_probe("blueprint-apps");
           ·                 ─────────┬─────────
           ·                          ╰── failed here
         5 │     for name in ["developer_clone", "developer_delete", "outsider_clone", "anonymous_clone"] {
           ╰────
          hint: run without --check, or guard the call with `if !check_mode() { ... }`
        re-run with --resume to continue from here
        "#,
    );
    assert_eq!(sim.mutating_requests(), 0);
}

const CONTROL: &str = r#"
const PROJECT = "blueprint-apps/guestbook";

/// Polls until the pipeline ends (a failed one makes gitlab_wait_pipeline throw).
fn ended(id) {
    for attempt in 0..600 {
        let status = gitlab_get(`projects/${global::PROJECT}/pipelines/${id}`).status;
        if ["success", "failed", "canceled", "skipped"].contains(status) { return status; }
        sleep(0.05);
    }
    throw `pipeline #${id} did not end`;
}

fn jobs_of(id) {
    gitlab_jobs(global::PROJECT, id).map(|job| `${job.name} ${job.status}`)
}

step("Set up", || {
    gitlab_ensure_group("blueprint-apps");
    gitlab_ensure_project("blueprint-apps", "guestbook");
    gitlab_post(`projects/${PROJECT}/repository/files/.gitlab-ci.yml`, #{branch: "main", commit_message: "ci",
        content: "stages: [build, test]\nbuild:\n  stage: build\n  script: [exit 1]\ntest:\n  stage: test\n  script: [make test]\n"});
});
step("Retry a job", || {
    let pipeline = gitlab_pipelines(PROJECT, #{limit: 1})[0];
    print(`pipeline ${ended(pipeline.id)}: ${jobs_of(pipeline.id)}`);
    let build = gitlab_jobs(PROJECT, pipeline.id)[0];
    let retried = gitlab_retry_job(PROJECT, build.id);
    print(`retried ${retried.name}: changed ${retried.changed}, a new job ${retried.id != build.id}`);
    let again = gitlab_retry_job(PROJECT, build.id);
    print(`again: changed ${again.changed}, the same attempt ${again.id == retried.id}`);
    // Running again: nothing failed or canceled to retry.
    print(`pipeline retry while running: changed ${gitlab_retry_pipeline(PROJECT, pipeline.id).changed}`);
    let canceled = gitlab_cancel_pipeline(PROJECT, pipeline.id);
    print(`cancel: changed ${canceled.changed}; pipeline ${ended(pipeline.id)}: ${jobs_of(pipeline.id)}`);
    print(`cancel again: changed ${gitlab_cancel_pipeline(PROJECT, pipeline.id).changed}`);
    let restarted = gitlab_retry_pipeline(PROJECT, pipeline.id);
    print(`pipeline retry: changed ${restarted.changed}; pipeline ${ended(pipeline.id)}: ${jobs_of(pipeline.id)}`);
    print(`cancel a job that ended: changed ${gitlab_cancel_job(PROJECT, gitlab_jobs(PROJECT, pipeline.id)[0].id).changed}`);
    // Asked not to throw, a wait returns the failure it would have thrown.
    let waited = gitlab_wait_pipeline(PROJECT, pipeline.id, #{check: false});
    print(`waited: ${waited.status}; ${waited.failure.split("\n")[0]}`);
});
step("Play a manual job", || {
    gitlab_put(`projects/${PROJECT}/repository/files/.gitlab-ci.yml`, #{branch: "main", commit_message: "manual",
        content: "deploy:\n  script: [helm upgrade]\n  when: manual\n"});
    let pipeline = gitlab_pipelines(PROJECT, #{limit: 1})[0];
    let deploy = gitlab_jobs(PROJECT, pipeline.id)[0];
    print(`${deploy.name} ${deploy.status}, pipeline ${gitlab_get(`projects/${PROJECT}/pipelines/${pipeline.id}`).status}`);
    print(`played: changed ${gitlab_play_job(PROJECT, deploy.id).changed}`);
    print(`pipeline ${ended(pipeline.id)}: ${jobs_of(pipeline.id)}`);
    print(`played again: changed ${gitlab_play_job(PROJECT, deploy.id).changed}`);
});
"#;

#[test]
fn an_operator_retries_cancels_and_plays_jobs_and_pipelines_and_a_second_call_changes_nothing() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let test = repo()
        .script(CONTROL)
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN);
    test.run(&["scripts/test.rhai"]).expect(
            0,
            &with_recaps(
                r#"
                [1/3] Set up ...
                    ~ create group blueprint-apps (internal)
                    ~ create project blueprint-apps/guestbook
                    ~ post /api/v4/projects/blueprint-apps%2Fguestbook/repository/files/.gitlab-ci.yml
                [1/3] Set up ... changed (#.## s)
                [2/3] Retry a job ...
                    pipeline failed: ["build failed", "test skipped"]
                    ~ retry job #5 (build) of blueprint-apps/guestbook
                    retried build: changed true, a new job true
                    again: changed false, the same attempt true
                    pipeline retry while running: changed false
                    ~ cancel pipeline #4 of blueprint-apps/guestbook (build, test)
                    cancel: changed true; pipeline canceled: ["build canceled", "test canceled"]
                    cancel again: changed false
                    ~ retry pipeline #4 of blueprint-apps/guestbook (build, test)
                    pipeline retry: changed true; pipeline failed: ["build failed", "test skipped"]
                    cancel a job that ended: changed false
                    pipeline #4 of blueprint-apps/guestbook: failed (0 s)
                    waited: failed; gitlab: pipeline #4 of blueprint-apps/guestbook failed
                [2/3] Retry a job ... changed (#.## s)
                [3/3] Play a manual job ...
                    ~ put /api/v4/projects/blueprint-apps%2Fguestbook/repository/files/.gitlab-ci.yml
                    deploy manual, pipeline manual
                    ~ play job #11 (deploy) of blueprint-apps/guestbook
                    played: changed true
                    pipeline success: ["deploy success"]
                    warning: job #11 (deploy) of blueprint-apps/guestbook is success, not waiting to be played: left as it is
                    played again: changed false
                [3/3] Play a manual job ... changed (#.## s)

                <recap of scripts/test.rhai: Set up: changed 3; Retry a job: changed 3; Play a manual job: changed 2>
                "#,
            ),
            "",
        );
    // Check mode says what a retry would do and does not do it.
    sim.clear_requests();
    repo()
        .script(
            r#"step("Retry", || {
    let again = gitlab_retry_pipeline("blueprint-apps/guestbook", 4);
    print(`changed ${again.changed}, still ${again.status}`);
    gitlab_retry_job("blueprint-apps/guestbook", gitlab_jobs("blueprint-apps/guestbook", 4)[0].id);
});
"#,
        )
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN)
        .run(&["--check", "scripts/test.rhai"])
        .expect(
            0,
            &with_recaps(
                r#"
                check mode: nothing will be changed
                [1/1] Retry ...
                    ~ would retry pipeline #4 of blueprint-apps/guestbook (build)
                    changed true, still failed
                    ~ would retry job #9 (build) of blueprint-apps/guestbook
                [1/1] Retry ... changed (#.## s)

                <recap of scripts/test.rhai (check mode): Retry: changed 2>
                "#,
            ),
            "",
        );
    assert_eq!(sim.mutating_requests(), 0);
}
