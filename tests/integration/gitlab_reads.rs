//! The operator's GitLab reads (`gitlab_projects`, `gitlab_variables`, `gitlab_pipelines`,
//! `gitlab_jobs`, `gitlab_job_trace`) against the GitLab simulator, with paths as GitLab shows
//! them and masked values as secrets.

use crate::support::{BPRUN, GITLAB_TOKEN, SimKind, one_step_run, repo, with_recaps};

const SCRIPT: &str = r#"
fn commit(project, file, content) {
    gitlab_post(`projects/${project}/repository/files/${file}`, #{branch: "main", content: content, commit_message: "test"});
}
step("Set up", || {
    gitlab_ensure_group("blueprint-apps");
    for name in ["guestbook", "redis"] { gitlab_ensure_project("blueprint-apps", name); }
    gitlab_set_variables("blueprint-apps/guestbook", #{
        CI_HELM_TIMEOUT: "5m",
        DEPLOY_TOKEN: #{value: secret("a-masked-value-1234"), masked: true},
    });
    // A raw call takes the project's path as GitLab shows it, as the natives do.
    commit("blueprint-apps/guestbook", ".gitlab-ci.yml", "stages: [build, deploy]\nbuild:\n  stage: build\n  script: [make]\ndeploy:\n  stage: deploy\n  script: [helm upgrade]\n");
    let started = gitlab_trigger_pipeline("blueprint-apps/guestbook", "main");
    gitlab_wait_pipeline("blueprint-apps/guestbook", started.id, #{timeout: 30, interval: 0.2});
});
step("Read", || {
    for p in gitlab_projects("blueprint-apps") { print(`project ${p.path_with_namespace} ${p.path} ${p.visibility} ${p.default_branch}`) }
    for v in gitlab_variables("blueprint-apps/guestbook") { print(`variable ${v.key}=${v.value} masked=${v.masked} protected=${v["protected"]} scope=${v.environment_scope}`) }
    let pipelines = gitlab_pipelines("blueprint-apps/guestbook", #{limit: 1, ref: "main"});
    let last = pipelines[0];
    print(`pipelines ${pipelines.len()}: ${last.status} on ${last.ref} (${last.source})`);
    print(`failed ones: ${gitlab_pipelines("blueprint-apps/guestbook", #{status: "failed"}).len()}`);
    let jobs = gitlab_jobs("blueprint-apps/guestbook", last.id);
    for job in jobs { print(`job ${job.name} (${job.stage}) ${job.status}`) }
    print(gitlab_job_trace("blueprint-apps/guestbook", jobs[0].id));
});
"#;

#[test]
fn an_operator_reads_projects_variables_pipelines_jobs_and_traces_by_their_paths() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let test = repo()
        .script(SCRIPT)
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN);
    // How many `pending`/`running` lines the wait prints depends on how fast the runner is.
    let run = test
        .run(&["scripts/test.rhai"])
        .replace_regex(
            r"(?m)^    pipeline #8 of blueprint-apps/guestbook: (pending|running) \(\d+ s\)\n",
            "",
        )
        .replace_regex(r"success \(\d+ s\)", "success (# s)");
    run.expect(
        0,
        &with_recaps(
            "\
[1/2] Set up ...
    ~ create group blueprint-apps (internal)
    ~ create project blueprint-apps/guestbook
    ~ create project blueprint-apps/redis
    ~ create CI variable CI_HELM_TIMEOUT of blueprint-apps/guestbook
    ~ create CI variable DEPLOY_TOKEN of blueprint-apps/guestbook
    ~ post /api/v4/projects/blueprint-apps%2Fguestbook/repository/files/.gitlab-ci.yml
    ~ start pipeline of blueprint-apps/guestbook on main
    pipeline #8 of blueprint-apps/guestbook: success (# s)
[1/2] Set up ... changed (#.## s)
[2/2] Read ...
    project blueprint-apps/guestbook guestbook internal main
    project blueprint-apps/redis redis internal 
    variable CI_HELM_TIMEOUT=5m masked=false protected=false scope=*
    variable DEPLOY_TOKEN=*** masked=true protected=false scope=*
    pipelines 1: success on main (api)
    failed ones: 0
    job build (build) success
    job deploy (deploy) success
    Running with bprun-sim
    Job build (stage build)
    $ make
    Job succeeded
[2/2] Read ... ok (#.## s)

<recap of scripts/test.rhai: Set up: changed 7; Read: ok>
",
        ),
        "",
    );
}

#[test]
fn a_pipeline_list_limit_out_of_range_is_refused_before_gitlab_is_asked() {
    let test = repo()
        .script(
            "step(\"Read\", || { gitlab_pipelines(\"blueprint-apps/guestbook\", #{limit: 0}); });\n",
        )
        .env("GITLAB_URL", "http://127.0.0.1:9")
        .env("GITLAB_TOKEN", GITLAB_TOKEN);
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &one_step_run("Read", "failed"),
        r#"
        error: step "Read" failed
          × gitlab_pipelines: limit must be 1 to 100, not 0
           ╭─[scripts/test.rhai:1:19]
         1 │ step("Read", || { gitlab_pipelines("blueprint-apps/guestbook", #{limit: 0}); });
           ·                   ────────┬───────
           ·                           ╰── failed here
           ╰────
          hint: GitLab returns at most 100 pipelines a page
        re-run with --resume to continue from here
        "#,
    );
}
