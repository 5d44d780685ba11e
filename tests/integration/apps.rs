//! The apps manifest and CI rendering, on the repository's own manifest and templates.

use crate::support::one_step_run;
use crate::support::{Test, repo};

fn repository_file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn with_repository_content(test: Test) -> Test {
    test.file(
        "apps/apps_manifest.yaml",
        &repository_file("apps/apps_manifest.yaml"),
    )
    .file(
        "templates/ci/shared-code.gitlab-ci.yml",
        &repository_file("templates/ci/shared-code.gitlab-ci.yml"),
    )
    .file(
        "templates/ci/app.gitlab-ci.yml.tpl",
        &repository_file("templates/ci/app.gitlab-ci.yml.tpl"),
    )
    .file(
        "templates/ci/redis.gitlab-ci.yml.tpl",
        &repository_file("templates/ci/redis.gitlab-ci.yml.tpl"),
    )
    .file(
        "infra/VERSIONS.json",
        &repository_file("infra/VERSIONS.json"),
    )
    .file(
        "apps/shared-code/templates/ci-common.yml",
        &repository_file("apps/shared-code/templates/ci-common.yml"),
    )
}

#[test]
fn the_manifest_lists_the_four_apps_shared_code_first() {
    let test = with_repository_content(repo()).script(
        r#"let apps = load_manifest("apps/apps_manifest.yaml");
assert_eq(apps.map(|a| a.name), ["shared-code", "guestbook", "redis", "redis-slave"]);
assert_eq(apps[1].dockerfile_path, "guestbook-go/Dockerfile");
assert_eq(apps[2].helm_release, "redis-master-demo");
assert_eq(apps[3].redis_tag, "7.4.1");
assert_eq(load_manifest("apps/apps_manifest.yaml", #{app: "redis"}).len(), 1);
print("ok");
"#,
    );
    test.run(&["scripts/test.rhai"]).expect(0, "ok\n", "");
}

#[test]
fn every_app_renders_to_valid_yaml_from_its_template() {
    let test = with_repository_content(repo()).script(
        r#"let apps = load_manifest("apps/apps_manifest.yaml");
let shared_code = render_ci(apps[0]);
let pinned = read_text("templates/ci/shared-code.gitlab-ci.yml");
pinned.replace("{images.alpine}", "alpine:3.20");
assert_eq(shared_code, pinned);
let guestbook = yaml_parse(render_ci(apps[1]));
assert_eq(guestbook.build.variables.DOCKERFILE_PATH, "guestbook-go/Dockerfile");
assert_eq(guestbook.variables.HELM_RELEASE, "guestbook");
assert_eq(guestbook.include[0].project, "blueprint-apps/shared-code");
let redis = yaml_parse(render_ci(apps[2]));
assert_eq(redis.build, ());
assert_eq(redis.variables.REDIS_TAG, "7.4.1");
assert_eq(redis.variables.HELM_NAMESPACE, "redis-demo");
assert_eq(yaml_parse(render_ci(apps[3])).variables.REDIS_HOST, "redis-replica.redis-slave-demo.svc.cluster.local");
print("ok");
"#,
    );
    test.run(&["scripts/test.rhai"]).expect(0, "ok\n", "");
}

#[test]
fn a_placeholder_the_app_lacks_is_an_error_naming_it_and_its_line() {
    let test = with_repository_content(repo())
        .file(
            "templates/ci/redis.gitlab-ci.yml.tpl",
            "variables:\n  APP: \"{name}\"\n  TAG: \"{redis_tga}\"\n",
        )
        .script("let apps = load_manifest(\"apps/apps_manifest.yaml\");\nrender_ci(apps[2]);\n");
    test.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: the top level of scripts/test.rhai failed
          × templates/ci/redis.gitlab-ci.yml.tpl:3:9: unknown placeholder {redis_tga}: the app provides no `redis_tga`
           ╭─[scripts/test.rhai:2:1]
         1 │ let apps = load_manifest("apps/apps_manifest.yaml");
         2 │ render_ci(apps[2]);
           · ────┬────
           ·     ╰── failed here
           ╰────
          hint: placeholders: name, build, tests, release, namespace, chart_path, registry_image, dockerfile_path, redis_host, redis_tag; write \{ for a literal brace
        "#,
    );
}

/// A digest recorded in infra/VERSIONS.json reaches the rendered CI (`repository:tag@digest`,
/// what a runtime pulls exactly), and a CI template naming a pin VERSIONS.json lacks is an
/// error at its line and column listing the pins.
#[test]
fn ci_images_come_from_versions_json_with_their_digest_and_an_unknown_pin_is_located() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let versions = repository_file("infra/VERSIONS.json").replace(
        "\"tag\": \"3.20\",\n      \"digest\": null",
        &format!("\"tag\": \"3.20\",\n      \"digest\": \"{digest}\""),
    );
    let test = with_repository_content(repo())
        .file("infra/VERSIONS.json", &versions)
        .script(
            "let apps = load_manifest(\"apps/apps_manifest.yaml\");\nprint(render_ci(apps[0]));\n",
        );
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &repository_file("templates/ci/shared-code.gitlab-ci.yml")
            .replace("{images.alpine}", &format!("alpine:3.20@{digest}")),
        "",
    );
    let test = with_repository_content(repo())
        .file(
            "templates/ci/shared-code.gitlab-ci.yml",
            "lint:\n  image: \"{images.alpine-edge}\"\n  script: [true]\n",
        )
        .script("let apps = load_manifest(\"apps/apps_manifest.yaml\");\nrender_ci(apps[0]);\n");
    test.run(&["scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: the top level of scripts/test.rhai failed
          × templates/ci/shared-code.gitlab-ci.yml:2:11: unknown image pin {images.alpine-edge}: infra/VERSIONS.json's images have no `alpine-edge`
           ╭─[scripts/test.rhai:2:1]
         1 │ let apps = load_manifest("apps/apps_manifest.yaml");
         2 │ render_ci(apps[0]);
           · ────┬────
           ·     ╰── failed here
           ╰────
          hint: pinned images: alpine, helm-ci, kaniko, redis-app, redis-chart; add the image to infra/VERSIONS.json's images (repository, tag, digest or null)
        "#,
    );
}

#[test]
fn a_broken_manifest_stops_the_plan_with_its_location() {
    let manifest = repository_file("apps/apps_manifest.yaml").replace(
        "  build_image: true\n",
        "  build_image: true\n  buildd: 1\n",
    );
    let test = repo()
        .file("apps/apps_manifest.yaml", &manifest)
        .script("let apps = load_manifest(\"apps/apps_manifest.yaml\");\n");
    test.run(&["--list", "scripts/test.rhai"]).expect(
        3,
        "",
        r#"
        error: the top level of scripts/test.rhai failed
          × apps/apps_manifest.yaml:18:3: unknown field `buildd`, expected one of `name`, `src_path`, `chart_path`, `build_image`, `has_unit_tests`, `helm_release`, `helm_namespace`, `registry_image`, `dockerfile_path`, `redis_host`, `redis_tag`
           ╭─[scripts/test.rhai:1:12]
         1 │ let apps = load_manifest("apps/apps_manifest.yaml");
           ·            ──────┬──────
           ·                  ╰── failed here
           ╰────
          hint: each entry needs name, src_path, chart_path, build_image, helm_release, helm_namespace and registry_image; has_unit_tests, dockerfile_path, redis_host and redis_tag are optional
        "#,
    );
}

/// Rule 0 of the seed: CI YAML lives in templates/ci/, never in the rendering code.
#[test]
fn the_rendering_code_holds_no_ci_yaml() {
    // A CI key at the start of a line, or after a quote or an escaped newline in a literal.
    let yaml_key = regex::Regex::new(
        r#"(?m)(^|"|\\n)\s*(stages|script|include|extends|needs|image|variables):"#,
    )
    .expect("regex");
    for file in ["crates/clients/src/apps.rs", "src/natives/apps.rs"] {
        let source = repository_file(file);
        if let Some(found) = yaml_key.find(&source) {
            panic!(
                "{file} contains CI YAML (`{}`): keep it in templates/ci/",
                found.as_str().trim()
            );
        }
    }
}

fn check_jsonschema(files: &[std::path::PathBuf]) -> std::process::Output {
    bprun_testkit::check_gitlab_ci(files)
}

#[test]
fn rendered_ci_files_validate_against_gitlabs_ci_schema() {
    let test = with_repository_content(repo()).script(
        r#"let apps = load_manifest("apps/apps_manifest.yaml");
step("Render", || {
    for app in apps { write_text(`out/${app.name}.gitlab-ci.yml`, render_ci(app)); }
    write_text("out/ci-common.yml", render_pinned_images("apps/shared-code/templates/ci-common.yml"));
});
"#,
    );
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Render", "changed 5"), "");
    let mut files: Vec<std::path::PathBuf> = ["shared-code", "guestbook", "redis", "redis-slave"]
        .iter()
        .map(|name| test.join(&format!("out/{name}.gitlab-ci.yml")))
        .collect();
    files.push(test.join("out/ci-common.yml"));
    // The images are VERSIONS.json's, filled in.
    assert_eq!(
        std::fs::read_to_string(test.join("out/ci-common.yml"))
            .expect("ci-common")
            .lines()
            .filter(|line| line.trim_start().starts_with("image:")
                || line.trim_start().starts_with("name:"))
            .collect::<Vec<_>>(),
        [
            "  image: \"alpine/helm:3.16.4\"",
            "  image:",
            "    name: \"gcr.io/kaniko-project/executor:v1.23.2-debug\"",
            "  image: \"alpine/helm:3.16.4\"",
        ]
    );
    let output = check_jsonschema(&files);
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The validator is not a rubber stamp: a job with an unknown keyword is refused.
    std::fs::write(test.join("out/bad.yml"), "build:\n  scrpit: [make]\n").expect("write");
    assert!(
        !check_jsonschema(&[test.join("out/bad.yml")])
            .status
            .success()
    );
}
