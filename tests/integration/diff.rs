//! `--diff` (issue #16): how each change changes its resource, with `--check` or alone; hidden
//! values stay hidden.

use crate::support::one_step_run;
use crate::support::with_recaps;
use crate::support::{BPRUN, GITLAB_TOKEN, SimKind, repo};

const SCRIPT: &str = r#"
let args = params(#{
    version: #{type: "string", default_value: "v1", help: "Content version"},
    token: #{type: "string", default_value: "old-token-value-123456", help: "Masked value"},
});
step("Files", || {
    write_text("out/config.txt", "name: demo\nversion: " + args.version + "\nmode: fast\n");
});
step("Variables", || {
    gitlab_ensure_group("blueprint-apps");
    gitlab_ensure_project("blueprint-apps", "demo");
    gitlab_set_variables("blueprint-apps/demo", #{
        PLAIN: args.version,
        HIDDEN: #{value: secret(args.token), masked: true},
        // Not masked, but a Secret: its values (the old one too) stay out of the diff.
        UNMASKED_SECRET: secret(args.token),
    });
});
step("Push and smoke", || {
    let project = gitlab_ensure_project("blueprint-apps", "demo");
    git_clone_or_pull(project.http_url_to_repo, "apps-local/blueprint-apps/demo");
    write_text("apps-local/blueprint-apps/demo/.gitlab-ci.yml", "test:\n  script: [echo " + args.version + "]\n");
    git_commit_push("apps-local/blueprint-apps/demo", "bprun: sync");
    gitlab_trigger_pipeline("blueprint-apps/demo", "main", #{reuse: true});
});
"#;

#[test]
fn check_with_diff_shows_how_each_change_would_change_and_hides_secrets() {
    let sim = BPRUN.sim(SimKind::Gitlab, &["--runner"]);
    let test = repo()
        .script(SCRIPT)
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN);
    test.run(&["-q", "scripts/test.rhai"]).expect(
        0,
        &with_recaps("
        [1/3] Files ... changed (#.## s)
        [2/3] Variables ... changed (#.## s)
        [3/3] Push and smoke ... changed (#.## s)

        <recap of scripts/test.rhai: Files: changed 1; Variables: changed 5; Push and smoke: changed 3>
        "),
        "",
    );
    sim.clear_requests();
    let planned = test.run(&[
        "--check",
        "--diff",
        "scripts/test.rhai",
        "--version",
        "v2",
        "--token",
        "new-token-value-654321",
    ]);
    // Files as unified diffs; CI/CD variables old -> new, a masked value (or a Secret) only as
    // changed; the downstream effect: the push moves the head, so a new pipeline would start.
    planned.expect(
        0,
        &with_recaps(r#"
        check mode: nothing will be changed
        [1/3] Files ...
            ~ would update file out/config.txt
              --- a/out/config.txt
              +++ b/out/config.txt
              @@ -1,3 +1,3 @@
               name: demo
              -version: v1
              +version: v2
               mode: fast
        [1/3] Files ... changed (#.## s)
        [2/3] Variables ...
            ~ would update CI variable HIDDEN of blueprint-apps/demo
              value: changed, value hidden
            ~ would update CI variable PLAIN of blueprint-apps/demo
              value: "v1" -> "v2"
            ~ would update CI variable UNMASKED_SECRET of blueprint-apps/demo
              value: changed, value hidden
        [2/3] Variables ... changed (#.## s)
        [3/3] Push and smoke ...
            ~ would update file apps-local/blueprint-apps/demo/.gitlab-ci.yml
              --- a/apps-local/blueprint-apps/demo/.gitlab-ci.yml
              +++ b/apps-local/blueprint-apps/demo/.gitlab-ci.yml
              @@ -1,2 +1,2 @@
               test:
              -  script: [echo v1]
              +  script: [echo v2]
            ~ would commit and push apps-local/blueprint-apps/demo
            ~ would start pipeline of blueprint-apps/demo at main (its head commit would change: a push is planned)
        [3/3] Push and smoke ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): Files: changed 1; Variables: changed 3; Push and smoke: changed 3>
        "#),
        "",
    );
    for secret in ["old-token-value-123456", "new-token-value-654321"] {
        planned.stdout_lacks(secret).stderr_lacks(secret);
    }
    assert_eq!(sim.mutating_requests(), 0, "--check --diff writes nothing");
    assert_eq!(
        test.read("out/config.txt"),
        "name: demo\nversion: v1\nmode: fast\n"
    );

    // --diff without --check: the same diffs, and the changes made.
    // The push's pipeline is the one `reuse: true` finds, so none is started.
    test.run(&["--diff", "scripts/test.rhai", "--version", "v2"])
        .replace_regex(r"\(([0-9a-f]{8})\)\n", "(<commit>)\n")
        .expect(
            0,
            &with_recaps(r#"
            [1/3] Files ...
                ~ update file out/config.txt
                  --- a/out/config.txt
                  +++ b/out/config.txt
                  @@ -1,3 +1,3 @@
                   name: demo
                  -version: v1
                  +version: v2
                   mode: fast
            [1/3] Files ... changed (#.## s)
            [2/3] Variables ...
                ~ update CI variable PLAIN of blueprint-apps/demo
                  value: "v1" -> "v2"
            [2/3] Variables ... changed (#.## s)
            [3/3] Push and smoke ...
                ~ update file apps-local/blueprint-apps/demo/.gitlab-ci.yml
                  --- a/apps-local/blueprint-apps/demo/.gitlab-ci.yml
                  +++ b/apps-local/blueprint-apps/demo/.gitlab-ci.yml
                  @@ -1,2 +1,2 @@
                   test:
                  -  script: [echo v1]
                  +  script: [echo v2]
                ~ commit and push apps-local/blueprint-apps/demo (<commit>)
            [3/3] Push and smoke ... changed (#.## s)

            <recap of scripts/test.rhai: Files: changed 1; Variables: changed 1; Push and smoke: changed 2>
            "#),
            "",
        );
    assert_eq!(
        test.read("out/config.txt"),
        "name: demo\nversion: v2\nmode: fast\n"
    );
    // Nothing left to change: no diff at all.
    test.run(&["--check", "--diff", "scripts/test.rhai", "--version", "v2"])
        .expect(
            0,
            &with_recaps(
                "
            check mode: nothing will be changed
            [1/3] Files ... ok (#.## s)
            [2/3] Variables ... ok (#.## s)
            [3/3] Push and smoke ... ok (#.## s)

            <recap of scripts/test.rhai (check mode): Files: ok; Variables: ok; Push and smoke: ok>
            ",
            ),
            "",
        );
}

#[test]
fn diff_of_a_secret_file_and_json_events() {
    let test = repo().script(
        "step(\"Write\", || { write_text(\"secret.txt\", secret(\"hunter2-diff-canary\")); write_text(\"plain.txt\", \"a\\n\"); });\n",
    );
    let output = test.run(&["--diff", "--json", "scripts/test.rhai"]);
    output.code(0);
    output.stdout_lacks("hunter2-diff-canary");
    let diffs: Vec<serde_json::Value> = output
        .raw_stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "diff")
        .collect();
    assert_eq!(diffs.len(), 2, "{}", output.raw_stdout);
    assert_eq!(diffs[0]["diff"], "secret.txt: content hidden (a secret)");
    assert_eq!(diffs[0]["step"], "Write");
    assert_eq!(
        diffs[1]["diff"],
        "--- /dev/null\n+++ b/plain.txt\n@@ -0,0 +1 @@\n+a\n"
    );
}

#[test]
fn kubernetes_objects_diff_as_yaml_and_secrets_name_their_keys_only() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let script = |value: &str| {
        format!(
            "step(\"Apply\", || {{\n    kube_apply(#{{apiVersion: \"v1\", kind: \"ConfigMap\", metadata: #{{name: \"settings\", namespace: \"default\"}}, data: #{{mode: \"{value}\", size: \"10\"}}}});\n    kube_secret_write(\"default\", \"creds\", #{{password: secret(\"pw-{value}-canary-000\"), user: \"admin\"}});\n}});\n"
        )
    };
    let test = repo()
        .script(&script("fast"))
        .env("KUBECONFIG", sim.kubeconfig().display().to_string());
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Apply", "changed 2"), "");
    std::fs::write(test.join("scripts/test.rhai"), script("slow")).expect("edit");
    let planned = test.run(&["--check", "--diff", "scripts/test.rhai"]);
    planned.expect(
        0,
        &with_recaps(
            "
        check mode: nothing will be changed
        [1/1] Apply ...
            ~ would configure ConfigMap/settings in default
              --- a/ConfigMap/default/settings
              +++ b/ConfigMap/default/settings
              @@ -1,6 +1,6 @@
               apiVersion: v1
               data:
              -  mode: fast
              +  mode: slow
                 size: '10'
               kind: ConfigMap
               metadata:
            ~ would write Secret/creds in default
              --- a/Secret/default/creds
              +++ b/Secret/default/creds
              @@ -1,2 +1,2 @@
              -password: (hidden)
              +password: (hidden, changed)
               user: (hidden)
        [1/1] Apply ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): Apply: changed 2>
        ",
        ),
        "",
    );
    for canary in ["pw-fast-canary-000", "pw-slow-canary-000"] {
        planned.stdout_lacks(canary);
    }
    let live = sim.kubectl(&[
        "get",
        "configmap",
        "settings",
        "-n",
        "default",
        "-o",
        "jsonpath={.data.mode}",
    ]);
    assert_eq!(live.ok(), "fast", "--check changed nothing");
}

#[test]
fn openbao_writes_diff_their_keys_by_name_only() {
    let server = crate::support::BaoServer::dev();
    let script =
        |data: &str| format!("step(\"Store\", || {{ bao_write(\"demo/app\", #{{{data}}}); }});\n");
    let test = repo()
        .script(&script(
            "user: \"admin\", password: secret(\"pw-old-canary-111\"), gone: \"x\"",
        ))
        .env("BAO_ADDR", &server.address)
        .env("BAO_TOKEN", "root");
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Store", "changed 1"), "");
    std::fs::write(
        test.join("scripts/test.rhai"),
        script("user: \"admin\", password: secret(\"pw-new-canary-222\"), added: \"y\""),
    )
    .expect("edit");
    let planned = test.run(&["--check", "--diff", "scripts/test.rhai"]);
    planned.expect(
        0,
        &with_recaps(
            "
        check mode: nothing will be changed
        [1/1] Store ...
            ~ would write secret secret/demo/app (version 2)
              + added (added, value hidden)
              ~ password (changed, value hidden)
              - gone (removed)
        [1/1] Store ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): Store: changed 1>
        ",
        ),
        "",
    );
    planned
        .stdout_lacks("pw-old-canary-111")
        .stdout_lacks("pw-new-canary-222")
        .stdout_lacks("user (");
}
