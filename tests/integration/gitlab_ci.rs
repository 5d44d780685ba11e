//! CI evaluation in the GitLab simulator, through bprun's natives and the real `git`:
//! `workflow:rules`, `rules:` (`if`, `changes`, `when`), and configurations GitLab refuses,
//! worded as GitLab words them.

use crate::support::with_recaps;
use std::path::Path;

use crate::support::{BPRUN, GITLAB_TOKEN, Sim, SimKind};
use crate::support::{Test, repo};

fn with_sim(test: Test, sim: &Sim) -> Test {
    test.env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN)
}

fn git(dir: &Path, home: &Path, args: &[&str]) -> String {
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

fn pipelines(sim: &Sim) -> Vec<serde_json::Value> {
    sim.api_json("projects/g%2Fp/pipelines")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn rules_decide_the_jobs_and_gitlabs_refusals_are_worded_as_gitlab_words_them() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let test = with_sim(
        repo().script(
            r#"
fn commit(file, content) {
    gitlab_post(`projects/g%2Fp/repository/files/${file}`, #{branch: "main", content: content, commit_message: "ci"});
}
fn update(file, content) {
    gitlab_put(`projects/g%2Fp/repository/files/${file}`, #{branch: "main", content: content, commit_message: "ci"});
}
fn refusal(body) {
    let message = "no error";
    try {
        gitlab_trigger_pipeline("g/p", "main");
    } catch (e) {
        message = e.message;
    }
    message
}
step("Set up", || {
    gitlab_ensure_group("g");
    gitlab_ensure_project("g", "p");
    commit(".gitlab-ci.yml", "build:\n  script: [make]\n  rules:\n    - if: $CI_COMMIT_BRANCH != $CI_DEFAULT_BRANCH\n");
});
step("Rules exclude every job", || {
    assert_eq(refusal(()), "gitlab: POST /projects/g%2Fp/pipeline -> 400: Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline.");
});
step("Workflow rules", || {
    update(".gitlab-ci.yml", "workflow:\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"api\"\n      when: never\n    - when: always\nbuild:\n  script: [make]\n");
    assert_eq(refusal(()), "gitlab: POST /projects/g%2Fp/pipeline -> 400: Pipeline filtered out by workflow rules.");
});
step("A job without script", || {
    update(".gitlab-ci.yml", "build:\n  stage: build\nlint:\n  script: [lint]\n");
    assert_eq(refusal(()), "gitlab: POST /projects/g%2Fp/pipeline -> 400: jobs:build config should implement the script:, run:, or trigger: keyword");
});
step("Green", || {
    update(".gitlab-ci.yml", "build:\n  script: [make]\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"api\" && $CI_COMMIT_BRANCH == \"main\"\n");
    let started = gitlab_trigger_pipeline("g/p", "main");
    let done = gitlab_wait_pipeline("g/p", started.id, #{timeout: 60, interval: 0.1});
    assert_eq(done.status, "success");
});
"#,
        ),
        &sim,
    );
    test.run(&["-q", "scripts/test.rhai"]).expect(
        0,
        &with_recaps("[1/5] Set up ... changed (#.## s)\n\
                      [2/5] Rules exclude every job ... ok (#.## s)\n\
                      [3/5] Workflow rules ... changed (#.## s)\n\
                      [4/5] A job without script ... changed (#.## s)\n\
                      [5/5] Green ... changed (#.## s)\n\
                      \n\
                      <recap of scripts/test.rhai: Set up: changed 3; Rules exclude every job: ok; Workflow rules: changed 1; A job without script: changed 1; Green: changed 2>\n"),
        "",
    );
    // The files API commits are commits: each starts a push pipeline unless its rules leave
    // no job. The first (main only runs on other branches) and the last (api only) start none;
    // the workflow one runs, the one without script fails; then the API's.
    let sources: Vec<(String, String)> = pipelines(&sim)
        .iter()
        .rev()
        .map(|p| {
            (
                p["source"].as_str().unwrap_or("").to_string(),
                p["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let sources: Vec<(&str, &str)> = sources
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(sources[0].0, "push");
    assert_eq!(sources[1], ("push", "failed"));
    assert_eq!(sources[2], ("api", "success"));
    assert_eq!(sources.len(), 3);

    // Pushes: `changes:` compares with the branch's previous head; a push whose jobs are all
    // filtered out creates no pipeline; an invalid configuration gives a failed one.
    let work = tempfile::tempdir().expect("work");
    let home = work.path();
    let remote = format!("{}/g/p.git", sim.gitlab_url())
        .replace("http://", &format!("http://oauth2:{GITLAB_TOKEN}@"));
    git(home, home, &["clone", "--quiet", &remote, "tree"]);
    let tree = home.join("tree");
    std::fs::write(
        tree.join(".gitlab-ci.yml"),
        "build:\n  script: [make]\n  rules:\n    - changes: [\"src/**/*\"]\n",
    )
    .expect("write");
    std::fs::create_dir_all(tree.join("src")).expect("src");
    std::fs::write(tree.join("src/main.c"), "int main;\n").expect("write");
    git(&tree, home, &["add", "-A"]);
    git(&tree, home, &["commit", "--quiet", "-m", "src"]);
    git(&tree, home, &["push", "--quiet", "origin", "main"]);
    let after_src = pipelines(&sim);
    assert_eq!(after_src.len(), 4, "{after_src:?}");
    assert_eq!(after_src[0]["source"], "push");

    std::fs::write(tree.join("README.md"), "docs\n").expect("write");
    git(&tree, home, &["add", "-A"]);
    git(&tree, home, &["commit", "--quiet", "-m", "docs only"]);
    git(&tree, home, &["push", "--quiet", "origin", "main"]);
    assert_eq!(
        pipelines(&sim).len(),
        4,
        "a push changing no file under src/ starts no pipeline"
    );

    std::fs::write(tree.join(".gitlab-ci.yml"), "build:\n  stage: build\n").expect("write");
    git(&tree, home, &["commit", "--quiet", "-am", "broken"]);
    git(&tree, home, &["push", "--quiet", "origin", "main"]);
    let broken = pipelines(&sim);
    assert_eq!(broken.len(), 5);
    let detail = sim.api_json(&format!("projects/g%2Fp/pipelines/{}", broken[0]["id"]));
    assert_eq!(detail["status"], "failed");
    assert_eq!(
        detail["yaml_errors"],
        "jobs:build config should implement the script:, run:, or trigger: keyword"
    );
}
