//! The GitLab simulator's model and validation, as GitLab answers: path rules and reserved
//! names, subgroups, visibility bounds, token scopes and revocation, `?private_token=`, list
//! links, `search`/`simple`, the files API's `start_branch` and `HEAD`, protected branches,
//! `pipelines/latest`, the multiple-scope variable conflict, and the commits API.

use crate::support::one_step_run;
use crate::support::{BPRUN, GITLAB_TOKEN, Sim, SimKind};
use crate::support::{Output, Test, repo};

fn with_sim(test: Test, sim: &Sim) -> Test {
    test.env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN)
}

fn post(sim: &Sim, path: &str, body: &str) -> (u16, serde_json::Value) {
    let reply = sim.api("POST", path, Some(body));
    (
        reply.status,
        serde_json::from_str(&reply.body).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn paths_subgroups_and_visibility_follow_gitlabs_rules() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let group_path = "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-' or end in '.', '.git' or '.atom'.";
    for bad in ["bad group!", "-lead", "ends.git", "dot."] {
        let (status, body) = post(&sim, "groups", &format!(r#"{{"name":"x","path":"{bad}"}}"#));
        assert_eq!(status, 400, "{bad}");
        assert_eq!(
            body["message"],
            format!("Failed to save group {{:path=>[{group_path:?}]}}"),
            "{bad}"
        );
    }
    let (status, body) = post(&sim, "groups", r#"{"name":"admin","path":"admin"}"#);
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        r#"Failed to save group {:path=>["admin is a reserved name"]}"#
    );

    // Subgroups: parent_id, full_path, nested namespaces in URLs; visibility bounded by the
    // parent's.
    let (status, parent) = post(
        &sim,
        "groups",
        r#"{"name":"Apps","path":"apps","visibility":"private"}"#,
    );
    assert_eq!(status, 201, "{parent}");
    let (status, body) = post(
        &sim,
        "groups",
        &format!(
            r#"{{"name":"Team","path":"team","parent_id":{},"visibility":"internal"}}"#,
            parent["id"]
        ),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        r#"Failed to save group {:visibility_level=>["internal is not allowed since the parent group has a private visibility."]}"#
    );
    let (status, child) = post(
        &sim,
        "groups",
        &format!(
            r#"{{"name":"Team","path":"team","parent_id":{}}}"#,
            parent["id"]
        ),
    );
    assert_eq!(status, 201, "{child}");
    assert_eq!(child["full_path"], "apps/team");
    assert_eq!(child["full_name"], "Apps / Team");
    assert_eq!(child["parent_id"], parent["id"]);
    // A subgroup may take a name reserved at the top level.
    let (status, _) = post(
        &sim,
        "groups",
        &format!(
            r#"{{"name":"admin","path":"admin","parent_id":{}}}"#,
            parent["id"]
        ),
    );
    assert_eq!(status, 201);
    assert_eq!(sim.api_json("groups/apps%2Fteam")["id"], child["id"]);

    // Projects: path rules, reserved names, visibility no wider than the group's.
    let project_path = "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-', end in '.git' or end in '.atom'";
    for bad in ["bad path!", "-lead", "ends.git", "feed.atom"] {
        let (status, body) = post(
            &sim,
            "projects",
            &format!(
                r#"{{"name":"x","path":"{bad}","namespace_id":{}}}"#,
                child["id"]
            ),
        );
        assert_eq!(status, 400, "{bad}");
        assert_eq!(body["message"]["path"], serde_json::json!([project_path]));
    }
    let (status, body) = post(
        &sim,
        "projects",
        &format!(
            r#"{{"name":"p","namespace_id":{},"visibility":"internal"}}"#,
            child["id"]
        ),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["message"]["visibility_level"],
        serde_json::json!(["internal is not allowed in a private group."])
    );
    let (status, project) = post(
        &sim,
        "projects",
        &format!(r#"{{"name":"p","namespace_id":{}}}"#, child["id"]),
    );
    assert_eq!(status, 201, "{project}");
    assert_eq!(project["path_with_namespace"], "apps/team/p");
    assert_eq!(project["visibility"], "private");
    assert_eq!(project["namespace"]["full_path"], "apps/team");
    assert_eq!(
        sim.api_json("projects/apps%2Fteam%2Fp")["id"],
        project["id"]
    );

    // bprun's client works on the nested project, and real git reaches it.
    let test = with_sim(
        repo().script(
            r#"
step("Nested", || {
    gitlab_post("projects/apps%2Fteam%2Fp/repository/files/README.md", #{branch: "main", content: "hi\n", commit_message: "readme"});
    gitlab_set_variables("apps/team/p", #{A: "1"});
});
"#,
        ),
        &sim,
    );
    test.run(&["-q", "scripts/test.rhai"]).code(0);
    let remote = format!("{}/apps/team/p.git", sim.gitlab_url())
        .replace("http://", &format!("http://oauth2:{GITLAB_TOKEN}@"));
    let listed = std::process::Command::new("git")
        .args(["ls-remote", &remote])
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("git");
    // The commit of main is the simulator's (its time is part of it).
    Output::raw(listed)
        .replace_regex(r"(?m)^[0-9a-f]{40}\t", "<commit>\t")
        .expect(0, "<commit>\tHEAD\n<commit>\trefs/heads/main\n", "");

    // Deleting the parent deletes the subgroups and their projects.
    assert_eq!(sim.api("DELETE", "groups/apps", None).status, 202);
    assert_eq!(sim.api("GET", "groups/apps%2Fteam", None).status, 404);
    assert_eq!(sim.api("GET", "projects/apps%2Fteam%2Fp", None).status, 404);
}

#[test]
fn tokens_have_scopes_and_can_be_revoked_and_the_query_token_is_accepted() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let user = format!("/api/v4/user?private_token={GITLAB_TOKEN}");
    assert_eq!(sim.raw("GET", &user, None, None).status, 200);

    let (status, admin) = (200, sim.api_json("personal_access_tokens/self"));
    assert_eq!(status, 200);
    assert_eq!(admin["active"], true);
    assert!(
        admin["scopes"]
            .as_array()
            .expect("scopes")
            .contains(&serde_json::json!("api"))
    );

    let (status, created) = post(
        &sim,
        "users/1/personal_access_tokens",
        r#"{"name":"reader","scopes":["read_api"]}"#,
    );
    assert_eq!(status, 201, "{created}");
    let reader = created["token"].as_str().expect("token").to_string();
    assert!(reader.starts_with("glpat-"));
    assert_eq!(
        sim.raw("GET", "/api/v4/groups", Some(&reader), None).status,
        200
    );
    let refused = sim.raw(
        "POST",
        "/api/v4/groups",
        Some(&reader),
        Some(r#"{"name":"g","path":"g"}"#),
    );
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["error"], "insufficient_scope");
    let own = sim.raw(
        "GET",
        "/api/v4/personal_access_tokens/self",
        Some(&reader),
        None,
    );
    assert_eq!(own.json()["scopes"], serde_json::json!(["read_api"]));
    assert_eq!(own.json()["id"], created["id"]);

    // bprun sees GitLab's 403 through its client.
    let test = repo()
        .script("step(\"Write\", || { gitlab_ensure_group(\"g\"); });\n")
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", &reader)
        .replace(sim.gitlab_url(), "<gitlab>");
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &one_step_run("Write", "failed"),
        "error: step \"Write\" failed\n\
         \x20 × gitlab: POST /groups -> 403: insufficient_scope\n\
         \x20  ╭─[scripts/test.rhai:1:20]\n\
         \x201 │ step(\"Write\", || { gitlab_ensure_group(\"g\"); });\n\
         \x20  ·                    ─────────┬─────────\n\
         \x20  ·                             ╰── failed here\n\
         \x20  ╰────\n\
         \x20 caused by: at <gitlab>/api/v4/groups\n\
         \x20 hint: the token lacks the permission or scope for this (phase 3 mints an admin PAT with api and sudo)\n\
         re-run with --resume to continue from here\n",
    );

    // Revoked: 401 from then on.
    assert_eq!(
        sim.api(
            "DELETE",
            &format!("personal_access_tokens/{}", created["id"]),
            None
        )
        .status,
        204
    );
    let revoked = sim.raw("GET", "/api/v4/groups", Some(&reader), None);
    assert_eq!(revoked.status, 401);
    assert_eq!(revoked.json()["error"], "invalid_token");
    assert_eq!(
        sim.api("DELETE", "personal_access_tokens/999999", None)
            .status,
        404
    );
}

#[test]
fn lists_keep_the_query_and_search_and_simple_shape_them() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    post(&sim, "groups", r#"{"name":"g","path":"g"}"#);
    for name in ["alpha", "beta", "alphabet"] {
        post(
            &sim,
            "projects",
            &format!(r#"{{"name":"{name}","namespace_id":"g"}}"#),
        );
    }
    let found = sim.api("GET", "projects?search=ALPHA&per_page=1&order_by=id", None);
    assert_eq!(found.header("x-total"), Some("2"));
    assert_eq!(found.header("x-next-page"), Some("2"));
    let link = found.header("link").expect("link");
    assert!(
        link.contains("page=2&per_page=1&search=ALPHA&order_by=id>; rel=\"next\""),
        "{link}"
    );
    let simple = sim.api_json("projects?simple=true&search=beta");
    assert_eq!(simple.as_array().map(Vec::len), Some(1));
    assert_eq!(simple[0]["path_with_namespace"], "g/beta");
    assert!(simple[0].get("visibility").is_none(), "{simple}");
    assert_eq!(
        sim.api_json("groups?search=G").as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn files_branches_pipelines_latest_and_variable_scopes() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    post(&sim, "groups", r#"{"name":"g","path":"g"}"#);
    post(&sim, "projects", r#"{"name":"p","namespace_id":"g"}"#);
    let file = "projects/g%2Fp/repository/files/.gitlab-ci.yml";
    // The first commit of an empty repository creates its branch.
    let (status, _) = post(
        &sim,
        file,
        r#"{"branch":"main","content":"build:\n  script: [make]\n","commit_message":"ci"}"#,
    );
    assert_eq!(status, 201);
    // An unknown branch needs `start_branch`; from it, the new branch has its files.
    let (status, body) = post(
        &sim,
        "projects/g%2Fp/repository/files/b.txt",
        r#"{"branch":"feature","content":"b\n","commit_message":"b"}"#,
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        "You can only create or edit files when you are on a branch"
    );
    let (status, _) = post(
        &sim,
        "projects/g%2Fp/repository/files/b.txt",
        r#"{"branch":"feature","start_branch":"main","content":"b\n","commit_message":"b"}"#,
    );
    assert_eq!(status, 201);
    let inherited = sim.api("GET", &format!("{file}?ref=feature"), None);
    assert_eq!(inherited.status, 200, "{}", inherited.body);

    // HEAD on a file: its metadata in headers, no body.
    let head = sim.api("HEAD", &format!("{file}?ref=main"), None);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("x-gitlab-file-name"), Some(".gitlab-ci.yml"));
    assert_eq!(head.header("x-gitlab-ref"), Some("main"));
    assert!(head.header("x-gitlab-last-commit-id").is_some());
    assert_eq!(head.body, "");
    assert_eq!(
        sim.api(
            "HEAD",
            "projects/g%2Fp/repository/files/none?ref=main",
            None
        )
        .status,
        404
    );

    // Protected branches: the default branch is protected.
    let protected = sim.api_json("projects/g%2Fp/protected_branches");
    assert_eq!(protected[0]["name"], "main");
    assert_eq!(protected[0]["push_access_levels"][0]["access_level"], 40);
    assert_eq!(
        sim.api_json("projects/g%2Fp/repository/branches/feature")["protected"],
        false
    );
    let (status, _) = post(
        &sim,
        "projects/g%2Fp/protected_branches",
        r#"{"name":"feature"}"#,
    );
    assert_eq!(status, 201);
    let (status, _) = post(
        &sim,
        "projects/g%2Fp/protected_branches",
        r#"{"name":"feature"}"#,
    );
    assert_eq!(status, 409);
    assert_eq!(
        sim.api_json("projects/g%2Fp/repository/branches/feature")["protected"],
        true
    );
    assert_eq!(
        sim.api("DELETE", "projects/g%2Fp/protected_branches/feature", None)
            .status,
        204
    );

    // pipelines/latest: 403 while the head commit has no pipeline. A commit through the files
    // API starts a push pipeline, as any commit does, and that is the latest one.
    post(&sim, "projects", r#"{"name":"q","namespace_id":"g"}"#);
    let (status, _) = post(
        &sim,
        "projects/g%2Fq/repository/files/README.md",
        r#"{"branch":"main","content":"no CI yet\n","commit_message":"readme"}"#,
    );
    assert_eq!(status, 201);
    assert_eq!(
        sim.api("GET", "projects/g%2Fq/pipelines/latest", None)
            .status,
        403
    );
    assert_eq!(
        sim.api_json("projects/g%2Fq/pipelines"),
        serde_json::json!([])
    );
    let (status, _) = post(
        &sim,
        "projects/g%2Fq/repository/files/.gitlab-ci.yml",
        r#"{"branch":"main","content":"build:\n  script: [make]\n","commit_message":"ci"}"#,
    );
    assert_eq!(status, 201);
    let pushed = sim.api_json("projects/g%2Fq/pipelines?source=push");
    assert_eq!(pushed.as_array().map(Vec::len), Some(1), "{pushed}");
    assert_eq!(
        sim.api_json("projects/g%2Fq/pipelines/latest?ref=main")["id"],
        pushed[0]["id"]
    );
    let (status, pipeline) = post(&sim, "projects/g%2Fp/pipeline", r#"{"ref":"main"}"#);
    assert_eq!(status, 201);
    assert_eq!(
        sim.api_json("projects/g%2Fp/pipelines/latest?ref=main")["id"],
        pipeline["id"]
    );

    // One key in two environment scopes: without a filter GitLab answers 409, reads too.
    for scope in ["*", "production"] {
        let (status, _) = post(
            &sim,
            "projects/g%2Fp/variables",
            &format!(r#"{{"key":"K","value":"v","environment_scope":"{scope}"}}"#),
        );
        assert_eq!(status, 201);
    }
    let conflict = sim.api("GET", "projects/g%2Fp/variables/K", None);
    assert_eq!(conflict.status, 409);
    assert_eq!(
        conflict.json()["message"],
        "There are multiple variables with provided parameters. Please use 'filter[environment_scope]'"
    );
    assert_eq!(
        sim.api_json("projects/g%2Fp/variables/K?filter[environment_scope]=production")["environment_scope"],
        "production"
    );
}

#[test]
fn the_state_file_is_private_and_holds_no_token() {
    let dir = tempfile::tempdir().expect("state");
    let state = dir.path().to_str().expect("utf-8");
    let sim = BPRUN.sim(SimKind::Gitlab, &["--state", state, "--runner"]);
    let (status, created) = post(
        &sim,
        "users/1/personal_access_tokens",
        r#"{"name":"reader","scopes":["read_api"]}"#,
    );
    assert_eq!(status, 201);
    // An empty path is refused as GitLab refuses it.
    let (status, _) = post(&sim, "groups", r#"{"name":"g","path":""}"#);
    assert_eq!(status, 400);
    let file = dir.path().join("gitlab-state.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file)
        .expect("state file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    let text = std::fs::read_to_string(&file).expect("read");
    for secret in [GITLAB_TOKEN, created["token"].as_str().expect("token")] {
        assert!(!text.contains(secret), "the state holds a token");
    }
    assert!(!text.contains("glrt-"), "the state holds a runner token");
}

#[test]
fn lists_honour_order_by_and_sort_and_refuse_unknown_values() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let (status, group) = post(&sim, "groups", r#"{"name":"g","path":"g"}"#);
    assert_eq!(status, 201, "{group}");
    for name in ["beta", "alpha", "gamma"] {
        let (status, body) = post(
            &sim,
            "projects",
            &format!(
                r#"{{"name":"{name}","path":"{name}","namespace_id":{}}}"#,
                group["id"]
            ),
        );
        assert_eq!(status, 201, "{body}");
    }
    let names = |query: &str| -> Vec<String> {
        sim.api_json(&format!("groups/g/projects?{query}"))
            .as_array()
            .expect("list")
            .iter()
            .map(|p| p["path"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(names("order_by=name&sort=asc"), ["alpha", "beta", "gamma"]);
    assert_eq!(names("order_by=name&sort=desc"), ["gamma", "beta", "alpha"]);
    // By id, newest first (GitLab's default direction), then oldest first.
    assert_eq!(names("order_by=id"), ["gamma", "alpha", "beta"]);
    assert_eq!(names("order_by=id&sort=asc"), ["beta", "alpha", "gamma"]);
    let bad = sim.api("GET", "groups/g/projects?order_by=colour", None);
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "order_by does not have a valid value");
    let bad = sim.api("GET", "groups/g/projects?sort=up", None);
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "sort does not have a valid value");
}

#[test]
fn the_commits_api_commits_actions_lists_and_reads_as_gitlab_does() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    post(&sim, "groups", r#"{"name":"g","path":"g"}"#);
    post(&sim, "projects", r#"{"name":"p","namespace_id":"g"}"#);
    let commits = "projects/g%2Fp/repository/commits";
    // Grape's parameter errors come first, all of them in one answer.
    let (status, body) = post(
        &sim,
        commits,
        r#"{"branch":"main","actions":[{"action":"rename","file_path":"a"}]}"#,
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["error"],
        "commit_message is missing, actions[0][action] does not have a valid value"
    );

    // The first commit of an empty repository: several files at once, and it becomes the
    // default branch with a push pipeline for its CI configuration.
    let (status, first) = post(
        &sim,
        commits,
        r#"{"branch":"main","commit_message":"Initial files\n\nTwo of them.","author_name":"Ops","author_email":"ops@example.com",
            "actions":[{"action":"create","file_path":"README.md","content":"hello\n"},
                       {"action":"create","file_path":".gitlab-ci.yml","content":"build:\n  script: [make]\n"},
                       {"action":"create","file_path":"bin/run","content":"IyEvYmluL3NoCg==","encoding":"base64","execute_filemode":true}]}"#,
    );
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["title"], "Initial files");
    assert_eq!(first["author_name"], "Ops");
    assert_eq!(first["parent_ids"], serde_json::json!([]));
    assert_eq!(first["stats"]["additions"], 4);
    assert_eq!(sim.api_json("projects/g%2Fp")["default_branch"], "main");
    assert_eq!(
        sim.api(
            "GET",
            "projects/g%2Fp/repository/files/bin%2Frun/raw?ref=main",
            None
        )
        .body,
        "#!/bin/sh\n"
    );
    let pushed = sim.api_json("projects/g%2Fp/pipelines?source=push");
    assert_eq!(pushed[0]["sha"], first["id"], "{pushed}");

    // Actions see the tree as the earlier ones left it; one failing action commits nothing.
    let (status, body) = post(
        &sim,
        commits,
        r#"{"branch":"main","commit_message":"x","actions":[{"action":"delete","file_path":"README.md"},
                                                              {"action":"update","file_path":"README.md","content":"y"}]}"#,
    );
    assert_eq!(status, 400);
    assert_eq!(body["message"], "A file with this name doesn't exist");
    let (status, body) = post(
        &sim,
        commits,
        r#"{"branch":"main","commit_message":"x","actions":[{"action":"create","file_path":"README.md","content":"y"}]}"#,
    );
    assert_eq!(status, 400);
    assert_eq!(body["message"], "A file with this name already exists");
    let (status, second) = post(
        &sim,
        commits,
        &format!(
            r#"{{"branch":"main","commit_message":"Move the readme","actions":[
                {{"action":"move","previous_path":"README.md","file_path":"docs/README.md","last_commit_id":"{}"}},
                {{"action":"update","file_path":".gitlab-ci.yml","content":"build:\n  script: [make all]\n"}}]}}"#,
            first["id"].as_str().expect("id")
        ),
    );
    assert_eq!(status, 201, "{second}");
    assert_eq!(second["parent_ids"][0], first["id"]);
    assert_eq!(
        sim.api(
            "GET",
            "projects/g%2Fp/repository/files/README.md?ref=main",
            None
        )
        .status,
        404
    );
    assert_eq!(
        sim.api(
            "GET",
            "projects/g%2Fp/repository/files/docs%2FREADME.md/raw?ref=main",
            None
        )
        .body,
        "hello\n"
    );
    // A stale last_commit_id is refused: the file changed since.
    let (status, body) = post(
        &sim,
        commits,
        &format!(
            r#"{{"branch":"main","commit_message":"x","actions":[{{"action":"update","file_path":".gitlab-ci.yml","content":"z","last_commit_id":"{}"}}]}}"#,
            first["id"].as_str().expect("id")
        ),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        "You are attempting to update a file that has changed since you started editing it."
    );

    // Branches: a new one needs a start; an existing one is not overwritten without force.
    let one = r#"[{"action":"create","file_path":"f.txt","content":"f"}]"#;
    let (status, body) = post(
        &sim,
        commits,
        &format!(r#"{{"branch":"feature","commit_message":"f","actions":{one}}}"#),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        "You can only create or edit files when you are on a branch"
    );
    let (status, feature) = post(
        &sim,
        commits,
        &format!(
            r#"{{"branch":"feature","start_branch":"main","commit_message":"f","actions":{one}}}"#
        ),
    );
    assert_eq!(status, 201, "{feature}");
    assert_eq!(feature["parent_ids"][0], second["id"]);
    let (status, body) = post(
        &sim,
        commits,
        &format!(
            r#"{{"branch":"feature","start_branch":"main","commit_message":"f","actions":{one}}}"#
        ),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        "A branch called 'feature' already exists. Switch to that branch in order to make changes"
    );
    let (status, forced) = post(
        &sim,
        commits,
        &format!(
            r#"{{"branch":"feature","start_branch":"main","force":true,"commit_message":"again","actions":{one}}}"#
        ),
    );
    assert_eq!(status, 201, "{forced}");
    assert_eq!(forced["parent_ids"][0], second["id"]);
    let (status, body) = post(
        &sim,
        commits,
        &format!(r#"{{"branch":"x","start_sha":"zz","commit_message":"f","actions":{one}}}"#),
    );
    assert_eq!(status, 400);
    assert_eq!(body["message"], "Invalid start_sha 'zz'");

    // Lists: newest first, paginated with the query kept, `path` and `ref_name` filters; an
    // unknown ref lists nothing.
    let listed = sim.api_json(commits);
    let ids: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            second["id"].as_str().expect("id"),
            first["id"].as_str().expect("id")
        ]
    );
    let page = sim.api(
        "GET",
        &format!("{commits}?ref_name=feature&per_page=1"),
        None,
    );
    assert_eq!(page.header("x-total"), Some("3"));
    assert!(
        page.header("link")
            .is_some_and(|link| link.contains("ref_name=feature")),
        "{:?}",
        page.header("link")
    );
    assert_eq!(page.json()[0]["id"], forced["id"]);
    assert_eq!(
        sim.api_json(&format!("{commits}?path=docs%2FREADME.md"))
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        sim.api_json(&format!("{commits}?ref_name=nothing")),
        serde_json::json!([])
    );

    // One commit, by sha, short sha or branch.
    let short = &second["id"].as_str().expect("id")[..8];
    assert_eq!(
        sim.api_json(&format!("{commits}/{short}"))["id"],
        second["id"]
    );
    assert_eq!(
        sim.api_json(&format!("{commits}/feature"))["id"],
        forced["id"]
    );
    let missing = sim.api("GET", &format!("{commits}/0123456789abcdef"), None);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["message"], "404 Commit Not Found");
}

#[test]
fn tokens_expire_on_their_date_for_the_api_and_for_git() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let today = sim.raw("GET", "/-/sim/clock", None, None).json()["today"]
        .as_str()
        .expect("today")
        .to_string();
    let (status, body) = post(
        &sim,
        "users/1/personal_access_tokens",
        r#"{"name":"x","scopes":["api"],"expires_at":"next week"}"#,
    );
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("expires_at is invalid"))
    );
    // Without a date GitLab 16+ gives the longest lifetime: a year.
    let (status, yearly) = post(
        &sim,
        "users/1/personal_access_tokens",
        r#"{"name":"yearly","scopes":["api"]}"#,
    );
    assert_eq!(status, 201, "{yearly}");
    let year: i32 = today[..4].parse().expect("year");
    assert!(
        yearly["expires_at"]
            .as_str()
            .is_some_and(|date| date.starts_with(&(year + 1).to_string())),
        "{yearly} (today {today})"
    );
    sim.api("POST", "groups", Some(r#"{"name":"g","path":"g"}"#));
    sim.api(
        "POST",
        "projects",
        Some(r#"{"name":"p","namespace_id":"g"}"#),
    );
    // A token expiring tomorrow works today...
    let tomorrow = sim
        .raw("PUT", "/-/sim/clock", None, Some(r#"{"advance_days": 1}"#))
        .json()["today"]
        .as_str()
        .expect("today")
        .to_string();
    sim.raw("PUT", "/-/sim/clock", None, Some(r#"{"advance_days": -1}"#));
    let (status, short) = post(
        &sim,
        "users/1/personal_access_tokens",
        &format!(r#"{{"name":"short","scopes":["api"],"expires_at":"{tomorrow}"}}"#),
    );
    assert_eq!(status, 201, "{short}");
    let token = short["token"].as_str().expect("token").to_string();
    let me = sim.raw(
        "GET",
        "/api/v4/personal_access_tokens/self",
        Some(&token),
        None,
    );
    assert_eq!(me.status, 200, "{}", me.body);
    assert_eq!(me.json()["active"], true);
    let remote = format!("{}/g/p.git", sim.gitlab_url())
        .replace("http://", &format!("http://oauth2:{token}@"));
    let ls_remote = || {
        std::process::Command::new("git")
            .args(["ls-remote", &remote])
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .expect("git")
    };
    assert!(ls_remote().status.success());
    // ... and is refused from its date on, by the API and by git; the list shows it inactive.
    sim.raw("PUT", "/-/sim/clock", None, Some(r#"{"advance_days": 1}"#));
    let refused = sim.raw("GET", "/api/v4/projects", Some(&token), None);
    assert_eq!(refused.status, 401);
    assert_eq!(refused.json()["error_description"], "Token has expired.");
    Output::raw(ls_remote())
        .replace(sim.gitlab_url(), "<gitlab>")
        .expect(
            128,
            "",
            "remote: HTTP Basic: Access denied\n\
             fatal: Authentication failed for '<gitlab>/g/p.git/'\n",
        );
    let listed = sim.api_json("personal_access_tokens?per_page=100");
    let short = listed
        .as_array()
        .expect("list")
        .iter()
        .find(|t| t["name"] == "short")
        .expect("listed");
    assert_eq!(short["active"], false);
}

#[test]
fn a_user_who_is_not_an_administrator_gets_gitlabs_refusals() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    // Users are the administrator's to create; GitLab's parameter and uniqueness errors.
    let (status, body) = post(&sim, "users", r#"{"username":"dev"}"#);
    assert_eq!(status, 400);
    assert_eq!(
        body["error"],
        "email is missing, name is missing, password, reset_password, force_random_password are missing, at least one parameter must be provided"
    );
    let (status, dev) = post(
        &sim,
        "users",
        r#"{"username":"dev","name":"Dev","email":"dev@example.com","password":"s3cret-pass"}"#,
    );
    assert_eq!(status, 201, "{dev}");
    assert_eq!(dev["is_admin"], false);
    let (status, body) = post(
        &sim,
        "users",
        r#"{"username":"DEV","name":"x","email":"other@example.com","password":"s3cret-pass"}"#,
    );
    assert_eq!(
        (status, body["message"].as_str()),
        (409, Some("Username has already been taken"))
    );
    let dev_id = dev["id"].as_u64().expect("id");
    let (status, minted) = post(
        &sim,
        &format!("users/{dev_id}/personal_access_tokens"),
        r#"{"name":"dev","scopes":["api"]}"#,
    );
    assert_eq!(status, 201, "{minted}");
    let token = minted["token"].as_str().expect("token").to_string();
    let as_dev = |method: &str, path: &str, body: Option<&str>| {
        sim.raw(method, &format!("/api/v4/{path}"), Some(&token), body)
    };
    assert_eq!(as_dev("GET", "user", None).json()["is_admin"], false);
    assert_eq!(
        as_dev("POST", "users", Some(r#"{"username":"x"}"#)).status,
        403
    );

    // Top-level groups need can_create_group; the creator owns the group.
    sim.api(
        "PUT",
        &format!("users/{dev_id}"),
        Some(r#"{"can_create_group":false}"#),
    );
    let refused = as_dev("POST", "groups", Some(r#"{"name":"devs","path":"devs"}"#));
    assert_eq!(
        (refused.status, refused.json()["message"].clone()),
        (403, "403 Forbidden".into())
    );
    sim.api(
        "PUT",
        &format!("users/{dev_id}"),
        Some(r#"{"can_create_group":true}"#),
    );
    let own = as_dev("POST", "groups", Some(r#"{"name":"devs","path":"devs"}"#));
    assert_eq!(own.status, 201, "{}", own.body);
    assert_eq!(
        as_dev("GET", "groups/devs/members", None).json()[0]["access_level"],
        50
    );
    // A personal project lives in the user's namespace.
    let mine = as_dev("POST", "projects", Some(r#"{"name":"mine"}"#));
    assert_eq!(
        mine.json()["path_with_namespace"],
        "dev/mine",
        "{}",
        mine.body
    );

    // A private group of the administrator's: invisible, as if it did not exist.
    post(
        &sim,
        "groups",
        r#"{"name":"apps","path":"apps","visibility":"private"}"#,
    );
    post(&sim, "projects", r#"{"name":"p","namespace_id":"apps"}"#);
    post(
        &sim,
        "projects/apps%2Fp/repository/files/README.md",
        r#"{"branch":"main","content":"hi\n","commit_message":"readme"}"#,
    );
    let hidden = as_dev("GET", "projects/apps%2Fp", None);
    assert_eq!(
        (hidden.status, hidden.json()["message"].clone()),
        (404, "404 Project Not Found".into())
    );
    assert_eq!(as_dev("GET", "groups/apps", None).status, 404);
    let listed = as_dev("GET", "projects", None).json();
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(1),
        "only dev/mine: {listed}"
    );
    let (status, body) = {
        let reply = as_dev(
            "POST",
            "projects",
            Some(r#"{"name":"q","namespace_id":"apps"}"#),
        );
        (reply.status, reply.json())
    };
    assert_eq!(status, 400);
    assert_eq!(body["message"]["namespace"][0], "is not valid");
    let work = tempfile::tempdir().expect("work");
    let remote = format!("{}/apps/p.git", sim.gitlab_url())
        .replace("http://", &format!("http://dev:{token}@"));
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(work.path())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("HOME", work.path())
            .env("GIT_AUTHOR_NAME", "Dev")
            .env("GIT_AUTHOR_EMAIL", "dev@example.com")
            .env("GIT_COMMITTER_NAME", "Dev")
            .env("GIT_COMMITTER_EMAIL", "dev@example.com")
            .output()
            .expect("git")
    };
    Output::raw(git(&["clone", "--quiet", &remote, "p"]))
        .replace(sim.gitlab_url(), "<gitlab>")
        .expect(128, "", "remote: The project you were looking for could not be found or you don't have permission to view it.\n\
             fatal: repository '<gitlab>/apps/p.git/' not found\n");

    // A Developer of the group: reads, runs pipelines, pushes to unprotected branches only,
    // and may not manage variables or make subgroups.
    let (status, _) = post(
        &sim,
        "groups/apps/members",
        &format!(r#"{{"user_id":{dev_id},"access_level":30}}"#),
    );
    assert_eq!(status, 201);
    assert_eq!(as_dev("GET", "projects/apps%2Fp", None).status, 200);
    assert_eq!(
        as_dev("GET", "projects/apps%2Fp/variables", None).status,
        403
    );
    let protected = as_dev(
        "POST",
        "projects/apps%2Fp/repository/files/x.txt",
        Some(r#"{"branch":"main","content":"x","commit_message":"x"}"#),
    );
    assert_eq!(protected.status, 403);
    assert_eq!(
        protected.json()["message"],
        "403 Forbidden - You are not allowed to push into this branch"
    );
    let protected = as_dev(
        "POST",
        "projects/apps%2Fp/repository/commits",
        Some(
            r#"{"branch":"main","commit_message":"x","actions":[{"action":"create","file_path":"x.txt","content":"x"}]}"#,
        ),
    );
    assert_eq!(protected.status, 400);
    assert_eq!(
        protected.json()["message"],
        "You are not allowed to push into this branch"
    );
    let feature = as_dev(
        "POST",
        "projects/apps%2Fp/repository/commits",
        Some(
            r#"{"branch":"feature","start_branch":"main","commit_message":"x","actions":[{"action":"create","file_path":"x.txt","content":"x"}]}"#,
        ),
    );
    assert_eq!(feature.status, 201, "{}", feature.body);
    assert!(git(&["clone", "--quiet", &remote, "p"]).status.success());
    let checkout = work.path().join("p");
    let in_checkout = |args: &[&str]| {
        let mut all = vec!["-C", checkout.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        git(&all)
    };
    std::fs::write(checkout.join("y.txt"), "y\n").expect("write");
    assert!(in_checkout(&["add", "y.txt"]).status.success());
    assert!(
        in_checkout(&["commit", "--quiet", "-m", "y"])
            .status
            .success()
    );
    let main_head =
        || sim.api_json("projects/apps%2Fp/repository/branches/main")["commit"]["id"].clone();
    let before = main_head();
    // git pads a remote's message with spaces that clear a progress line.
    Output::raw(in_checkout(&["push", "origin", "HEAD:main"]))
        .replace(sim.gitlab_url(), "<gitlab>")
        .expect(1, "", "remote: GitLab: You are not allowed to push code to protected branches on this project.        \n\
             To <gitlab>/apps/p.git\n\
             \x20! [remote rejected] HEAD -> main (pre-receive hook declined)\n\
             error: failed to push some refs to '<gitlab>/apps/p.git'\n");
    assert_eq!(main_head(), before, "the declined push moved nothing");
    let pushed = in_checkout(&["push", "--quiet", "origin", "HEAD:topic"]);
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let subgroup = format!(
        r#"{{"name":"team","path":"team","parent_id":{}}}"#,
        sim.api_json("groups/apps")["id"]
    );
    assert_eq!(as_dev("POST", "groups", Some(&subgroup)).status, 403);

    // A Maintainer may.
    let promoted = sim.api(
        "PUT",
        &format!("groups/apps/members/{dev_id}"),
        Some(r#"{"access_level":40}"#),
    );
    assert_eq!(promoted.status, 200, "{}", promoted.body);
    assert_eq!(as_dev("POST", "groups", Some(&subgroup)).status, 201);
    let variable = as_dev(
        "POST",
        "projects/apps%2Fp/variables",
        Some(r#"{"key":"K","value":"v"}"#),
    );
    assert_eq!(variable.status, 201, "{}", variable.body);
    // Tokens: a user sees only their own.
    let tokens = as_dev("GET", "personal_access_tokens", None).json();
    assert_eq!(tokens.as_array().map(Vec::len), Some(1), "{tokens}");
}

#[test]
fn python_gitlab_finds_gitlabs_behaviour() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    let script = bprun_testkit::root().join("tests/scripts/python_gitlab_session.py");
    let out = bprun_testkit::python_gitlab(
        &script,
        &[
            ("GITLAB_URL", sim.gitlab_url()),
            ("GITLAB_TOKEN", GITLAB_TOKEN),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every check ran (a script that stopped early would print fewer).
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        23,
        "{stdout}"
    );
}

#[test]
fn a_commit_that_says_skip_ci_gets_a_skipped_pipeline_and_the_api_still_runs_one() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    post(&sim, "groups", r#"{"name":"g","path":"g"}"#);
    post(&sim, "projects", r#"{"name":"p","namespace_id":"g"}"#);
    let (status, commit) = post(
        &sim,
        "projects/g%2Fp/repository/commits",
        r#"{"branch":"main","commit_message":"CI file [skip ci]","actions":[{"action":"create","file_path":".gitlab-ci.yml","content":"build:\n  script: [make]\n"}]}"#,
    );
    assert_eq!(status, 201, "{commit}");
    let pushed = sim.api_json("projects/g%2Fp/pipelines?source=push");
    assert_eq!(pushed.as_array().map(Vec::len), Some(1), "{pushed}");
    assert_eq!(pushed[0]["status"], "skipped");
    assert_eq!(pushed[0]["sha"], commit["id"]);
    let jobs = sim.api_json(&format!(
        "projects/g%2Fp/pipelines/{}/jobs",
        pushed[0]["id"]
    ));
    assert_eq!(jobs, serde_json::json!([]));
    // The API ignores the commit message, as GitLab's does.
    let (status, started) = post(&sim, "projects/g%2Fp/pipeline", r#"{"ref":"main"}"#);
    assert_eq!(status, 201, "{started}");
    assert_ne!(
        sim.api_json(&format!("projects/g%2Fp/pipelines/{}", started["id"]))["status"],
        "skipped"
    );
}
