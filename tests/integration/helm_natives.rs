//! Helm natives driving the real helm (./test.sh's .tools/bin) against `bprun sim kube`, through
//! the real bprun binary. A wrapper logs every helm command line, so the tests can tell which
//! helm commands ran and that no secret ever reached one.

use crate::support::Sim;
use crate::support::{BPRUN, SimKind, Test, repo, tool};
use std::path::Path;

const CHART: &str = "apps/redis/helm-chart";
const CANARY: &str = "redis-pass-CANARY-5e4d3c2b1a";

/// A test repository holding the redis chart, wired to the simulator, with `helm` behind a
/// wrapper that logs its arguments (one command per line) and the mode of every values file.
fn helm_test(sim: &Sim) -> Test {
    let mut test = repo();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(CHART);
    for relative in [
        "Chart.yaml",
        "values.yaml",
        "templates/deployment.yaml",
        "templates/service.yaml",
    ] {
        let text = std::fs::read_to_string(source.join(relative)).expect("chart file");
        test = test.file(&format!("{CHART}/{relative}"), &text);
    }
    let log = test.join("helm-argv.log");
    let modes = test.join("helm-values-modes.log");
    let wrapper = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{log}'\nfor arg in \"$@\"; do\n  case \"$arg\" in\n    */bprun-helm-values-*) stat -c '%a' \"$arg\" >> '{modes}' ;;\n  esac\ndone\nexec '{helm}' \"$@\"\n",
        log = log.display(),
        modes = modes.display(),
        helm = tool("helm").display()
    );
    test = test.file("helm-wrapper.sh", &wrapper);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        test.join("helm-wrapper.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod wrapper");
    let kubeconfig = std::fs::read_to_string(sim.kubeconfig()).expect("kubeconfig");
    assert!(kubeconfig.contains(sim.var("KUBE_URL")), "{kubeconfig}");
    let home = sim.home();
    let helm_bin = test.join("helm-wrapper.sh").display().to_string();
    test.env("KUBECONFIG", sim.kubeconfig().display().to_string())
        .env("HOME", home.display().to_string())
        .env(
            "HELM_CACHE_HOME",
            home.join("helm-cache").display().to_string(),
        )
        .env(
            "HELM_CONFIG_HOME",
            home.join("helm-config").display().to_string(),
        )
        .env(
            "HELM_DATA_HOME",
            home.join("helm-data").display().to_string(),
        )
        .env("HELM_BIN", &helm_bin)
}

/// The helm commands run so far (one line each), and forgets them.
fn helm_calls(test: &Test) -> Vec<String> {
    let path = test.join("helm-argv.log");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    text.lines().map(str::to_string).collect()
}

fn run_script(test: &Test, args: &[&str], script: &str) -> crate::support::Output {
    std::fs::write(test.join("scripts/test.rhai"), script).expect("write script");
    let mut all: Vec<&str> = args.to_vec();
    all.push("scripts/test.rhai");
    test.run(&all)
}

fn script(test: Test) -> Test {
    test.script("")
}

#[test]
fn helm_install_changes_only_when_chart_or_values_change() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let test = script(helm_test(&sim));
    let install = r#"step("Redis", || {
    let r = helm_install("redis", "apps/redis/helm-chart", "redis", #{create_namespace: true, wait: true, timeout: 60});
    print(`result: ${r.changed} ${r.revision} ${r.status} ${r.chart} ${r.release} ${r.namespace}`);
});
"#;
    let first = run_script(&test, &[], install);
    first.code(0);
    first.stdout_contains("result: true 1 deployed redis-0.1.0 redis redis");
    let calls = helm_calls(&test);
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("upgrade --install redis"))
            .count(),
        1,
        "{calls:?}"
    );

    // The same chart and values: no upgrade, no new revision.
    let second = run_script(&test, &[], install);
    second.code(0);
    second.stdout_contains("result: false 1 deployed redis-0.1.0");
    second.stdout_contains("[1/1] Redis ... ok");
    let calls = helm_calls(&test);
    assert!(calls.iter().all(|c| !c.starts_with("upgrade")), "{calls:?}");
    let history = sim.helm(&["history", "redis", "-n", "redis", "-o", "json"]);
    let revisions: serde_json::Value = serde_json::from_str(history.ok()).expect("history json");
    assert_eq!(revisions.as_array().map(Vec::len), Some(1), "{revisions}");

    // Changed values: revision 2; the same values again: still 2.
    let changed = r#"step("Redis", || {
    let r = helm_install("redis", "apps/redis/helm-chart", "redis", #{values: #{image: #{tag: "7.4.2"}}});
    print(`result: ${r.changed} ${r.revision} ${r.reason}`);
    let s = helm_status("redis", "redis");
    print(`status: ${s.revision} ${s.status} ${s.chart_name} ${s.chart_version} ${s.digest.len()}`);
    let all = helm_list("*");
    print(`list: ${all.len()} ${all[0].name} ${all[0].namespace} ${all[0].revision}`);
    print(`absent: ${helm_status("nope", "redis") == ()}`);
});
"#;
    let third = run_script(&test, &[], changed);
    third.code(0);
    third.stdout_contains("result: true 2 chart or values changed");
    third.stdout_contains("status: 2 deployed redis 0.1.0 64");
    third.stdout_contains("list: 1 redis redis 2");
    third.stdout_contains("absent: true");
    let again = run_script(&test, &[], changed);
    again.code(0);
    again.stdout_contains("result: false 2 \n");
    // --check --diff: the values the release would get, against those it has; no upgrade.
    let planned = run_script(
        &test,
        &["--check", "--diff"],
        &changed.replace("7.4.2", "7.4.3"),
    );
    planned.code(0);
    planned.stdout_contains(
        "      --- a/helm release redis/redis values\n      +++ b/helm release redis/redis values\n      @@ -1,2 +1,2 @@\n       image:\n      -  tag: 7.4.2\n      +  tag: 7.4.3\n",
    );
    // The manifests too: the rendered image changes, nothing else.
    planned.stdout_contains("      --- a/helm release redis/redis manifest\n");
    planned.stdout_contains(
        "      -          image: \"redis:7.4.2\"\n      +          image: \"redis:7.4.3\"\n",
    );
    assert!(
        helm_calls(&test)
            .iter()
            .all(|c| !c.starts_with("upgrade") || !c.contains("7.4.3")),
        "check mode ran no upgrade"
    );
    let image = sim.kubectl(&[
        "get",
        "deployment",
        "redis",
        "-n",
        "redis",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image.ok(), "redis:7.4.2");
    // A change to the chart's files is a change too.
    let values = test.read(&format!("{CHART}/values.yaml"));
    std::fs::write(
        test.join(&format!("{CHART}/values.yaml")),
        values.replace("memory: 32Mi", "memory: 48Mi"),
    )
    .expect("edit chart");
    let edited = run_script(&test, &[], changed);
    edited.code(0);
    edited.stdout_contains("result: true 3 chart or values changed");
}

#[test]
fn secret_values_reach_helm_through_a_private_file_only() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let test = script(helm_test(&sim)).env("REDIS_PASSWORD", CANARY);
    let output = run_script(
        &test,
        &[],
        r#"step("Redis", || {
    let password = env_secret("REDIS_PASSWORD");
    let r = helm_install("redis", "apps/redis/helm-chart", "redis",
        #{create_namespace: true, values: #{auth: #{password: password}, image: #{tag: "7.4.1"}}});
    print(`changed: ${r.changed}`);
    print(helm_template("redis", "apps/redis/helm-chart", "redis", #{values: #{auth: #{password: password}}}));
});
"#,
    );
    output.code(0);
    output.stdout_contains("changed: true");
    for (name, text) in [
        ("stdout", &output.raw_stdout),
        ("stderr", &output.raw_stderr),
    ] {
        assert!(!text.contains(CANARY), "{name} leaked the secret:\n{text}");
    }
    let calls = helm_calls(&test);
    assert!(
        calls.iter().any(|c| c.starts_with("upgrade --install")),
        "{calls:?}"
    );
    for call in &calls {
        assert!(
            !call.contains(CANARY),
            "a helm command line held the secret: {call}"
        );
        assert!(!call.contains("--set"), "--set was used: {call}");
    }
    // The values file was private while helm read it, and is gone now.
    let modes = test.read("helm-values-modes.log");
    assert!(
        !modes.is_empty() && modes.lines().all(|m| m == "600"),
        "{modes}"
    );
    for call in &calls {
        for word in call.split(' ').filter(|w| w.contains("bprun-helm-values-")) {
            assert!(!Path::new(word).exists(), "{word} was left behind");
        }
    }
    // The secret did reach the release.
    let values = sim.helm(&["get", "values", "redis", "-n", "redis", "-o", "json"]);
    let values: serde_json::Value = serde_json::from_str(values.ok()).expect("values json");
    assert_eq!(values["auth"]["password"], CANARY);
    // And a second run with the same secret changes nothing.
    let again = run_script(
        &test,
        &[],
        r#"step("Redis", || {
    let r = helm_install("redis", "apps/redis/helm-chart", "redis",
        #{values: #{auth: #{password: env_secret("REDIS_PASSWORD")}, image: #{tag: "7.4.1"}}});
    print(`changed: ${r.changed} ${r.revision}`);
});
"#,
    );
    again.code(0);
    again.stdout_contains("changed: false 1");
}

#[test]
fn check_mode_reports_what_would_change_and_runs_no_upgrade() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let test = script(helm_test(&sim));
    let install = r#"step("Redis", || {
    let r = helm_install("redis", "apps/redis/helm-chart", "redis", #{create_namespace: true});
    print(`result: ${r.changed} ${r.revision} ${r.reason}`);
});
"#;
    let check = run_script(&test, &["--check"], install);
    check.code(0);
    check.stdout_contains(
        "    ~ would install helm release redis/redis from apps/redis/helm-chart (not installed)\n",
    );
    check.stdout_contains("result: true  not installed");
    assert_eq!(
        sim.helm(&["list", "-A", "-q"]).ok(),
        "",
        "check mode created a release"
    );
    let calls = helm_calls(&test);
    assert!(calls.iter().all(|c| !c.starts_with("upgrade")), "{calls:?}");

    run_script(&test, &[], install).code(0);
    let upgrade = r#"step("Redis", || {
    let r = helm_install("redis", "apps/redis/helm-chart", "redis", #{values: #{image: #{tag: "7.4.2"}}});
    print(`result: ${r.changed} ${r.revision} ${r.reason}`);
});
"#;
    helm_calls(&test);
    let check = run_script(&test, &["--check"], upgrade);
    check.code(0);
    check.stdout_contains("~ would upgrade helm release redis/redis from apps/redis/helm-chart (chart or values changed)");
    check.stdout_contains("result: true 1 chart or values changed");
    assert!(helm_calls(&test).iter().all(|c| !c.starts_with("upgrade")));
    let status = sim.helm(&["status", "redis", "-n", "redis", "-o", "json"]);
    let status: serde_json::Value = serde_json::from_str(status.ok()).expect("status json");
    assert_eq!(status["version"], 1);
}

#[test]
fn helm_uninstall_is_idempotent() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.helm(&[
        "install",
        "redis",
        CHART,
        "-n",
        "redis",
        "--create-namespace",
    ])
    .ok();
    let test = script(helm_test(&sim));
    let output = run_script(
        &test,
        &[],
        r#"step("Remove", || {
    let first = helm_uninstall("redis", "redis", #{wait: true, timeout: 60});
    let second = helm_uninstall("redis", "redis");
    print(`uninstall: ${first.changed} ${second.changed}`);
});
"#,
    );
    output.code(0);
    output.stdout_contains("    ~ uninstall helm release redis/redis (redis-0.1.0)\n");
    output.stdout_contains("uninstall: true false");
    assert_eq!(sim.helm(&["list", "-A", "-q"]).ok(), "");
}

#[test]
fn a_broken_chart_names_the_command_the_exit_code_and_helms_message() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let test = script(helm_test(&sim))
        .file(
            "charts/broken/Chart.yaml",
            "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
        )
        .file(
            "charts/broken/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name \n",
        );
    let output = run_script(
        &test,
        &[],
        r#"step("Broken", || { helm_install("broken", "charts/broken", "demo", #{create_namespace: true}); });
"#,
    );
    output.code(1);
    let stderr = output.stderr.replace('\n', " ");
    let stderr = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    for expected in [
        "helm_install: `helm upgrade --install broken charts/broken -n demo --description 'bprun digest ",
        "exited with code 1",
        "caused by: Error: ",
        "parse error at (broken/templates/cm.yaml:5): unclosed action",
        "hint: the chart does not render",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{}",
            output.stderr
        );
    }
    // helm_lint reports the same problem as a result.
    let lint = run_script(
        &test,
        &[],
        r#"step("Lint", || {
    let bad = helm_lint("charts/broken");
    print(`bad: ${bad.ok} ${bad.messages.filter(|m| m.starts_with("[ERROR]")).len()}`);
    let good = helm_lint("apps/redis/helm-chart", #{strict: true});
    print(`good: ${good.ok}`);
});
"#,
    );
    lint.code(0);
    lint.stdout_contains("bad: false 1");
    lint.stdout_contains("good: true");
}

#[test]
fn helm_template_renders_with_values() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let test =
        script(helm_test(&sim)).file("infra/values/redis.yaml", "image:\n  tag: \"7.0.0\"\n");
    let output = run_script(
        &test,
        &["--check"],
        r#"step("Render", || {
    print(helm_template("cache", "apps/redis/helm-chart", "redis", #{values_files: ["infra/values/redis.yaml"]}));
    print(helm_template("cache", "apps/redis/helm-chart", "redis",
        #{values_files: "infra/values/redis.yaml", values: #{image: #{tag: "7.9.9"}}}));
});
"#,
    );
    output.code(0);
    output.stdout_contains("kind: Deployment");
    output.stdout_contains("name: cache");
    assert!(
        output.stdout.contains("namespace: redis") || output.stdout.contains("name: redis-master"),
        "{}",
        output.stdout
    );
    output.stdout_contains("image: \"redis:7.0.0\"");
    output.stdout_contains("image: \"redis:7.9.9\"");
    assert!(helm_calls(&test).iter().all(|c| c.starts_with("template")));
}

#[test]
fn versions_reads_the_pins_and_locates_a_malformed_file() {
    let pins =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/VERSIONS.json"))
            .expect("infra/VERSIONS.json");
    let test = repo().file("infra/VERSIONS.json", &pins).script(
        r#"let v = versions();
for key in ["cloudnative-pg", "redis", "minio", "openbao", "gitlab", "gitlab-runner"] {
    let pin = v.helm_repositories[key];
    print(`${key} ${pin.chart} ${pin.chart_version} ${pin.url}`);
}
print(v.helm_repositories.redis.values_overrides.architecture);
"#,
    );
    let output = test.run(&["scripts/test.rhai"]);
    output.code(0);
    output.stdout_contains("redis redis 19.6.4 https://charts.bitnami.com/bitnami\n");
    output.stdout_contains("gitlab gitlab 10.1.1 https://charts.gitlab.io\n");
    output.stdout_contains("gitlab-runner gitlab-runner 0.71.0 https://charts.gitlab.io\n");
    output.stdout_contains("standalone\n");

    // A trailing comma on line 3.
    let broken = repo()
        .file(
            "infra/VERSIONS.json",
            "{\n  \"helm_repositories\": {\n    \"redis\": {\"url\": \"u\", \"chart\": \"redis\", \"chart_version\": \"1\",},\n  }\n}\n",
        )
        .script("let v = versions();\n");
    let output = broken.run(&["scripts/test.rhai"]);
    output.code(3);
    output.stderr_contains("infra/VERSIONS.json:3:66: trailing comma");
    // A typo in a field name is located too.
    let typo = repo()
        .file(
            "infra/VERSIONS.json",
            "{\"helm_repositories\": {\n  \"redis\": {\"url\": \"u\", \"chart\": \"redis\", \"chart_verison\": \"1\"}}}\n",
        )
        .script("let v = versions();\n");
    let output = typo.run(&["scripts/test.rhai"]);
    output.code(3);
    output.stderr_contains("infra/VERSIONS.json:2:57: unknown field `chart_verison`");
}

#[test]
fn helm_pull_uses_the_cached_archive_without_helm() {
    let test = repo()
        .file(
            "infra/VERSIONS.json",
            r#"{"helm_repositories": {"redis": {"url": "https://charts.invalid/never", "chart": "redis", "chart_version": "19.6.4"}}}"#,
        )
        .file("infra/helm-charts/redis-19.6.4.tgz", "cached")
        // Any helm call fails: the cache must answer alone.
        .env("HELM_BIN", "/bin/false")
        .script(
            r#"step("Cache", || {
    let cached = helm_pull("redis");
    print(`cached: ${cached.changed} ${cached.path} ${cached.chart} ${cached.version}`);
    try { helm_pull("nope"); } catch (e) { print(`unknown: ${e.message} / ${e.hint}`); }
});
"#,
        );
    let output = test.run(&["scripts/test.rhai"]);
    output.code(0);
    output.stdout_contains("cached: false infra/helm-charts/redis-19.6.4.tgz redis 19.6.4");
    output.stdout_contains(
        "unknown: helm_pull: infra/VERSIONS.json has no helm_repositories.nope / known keys: redis",
    );
}

#[test]
fn helm_pull_fetches_a_missing_chart_from_its_repository() {
    // A chart repository served from a folder over HTTP on loopback.
    let charts = tempfile::tempdir().expect("repo dir");
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join(CHART);
    let helm = tool("helm");
    let packaged = std::process::Command::new(&helm)
        .args(["package"])
        .arg(&chart)
        .arg("--destination")
        .arg(charts.path())
        .output()
        .expect("helm package");
    assert!(
        packaged.status.success(),
        "{}",
        String::from_utf8_lossy(&packaged.stderr)
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let indexed = std::process::Command::new(&helm)
        .args(["repo", "index"])
        .arg(charts.path())
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .output()
        .expect("helm repo index");
    assert!(
        indexed.status.success(),
        "{}",
        String::from_utf8_lossy(&indexed.stderr)
    );
    let mut server = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--directory",
        ])
        .arg(charts.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 http.server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the chart server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let home = tempfile::tempdir().expect("helm home");
    let test = repo()
        .file(
            "infra/VERSIONS.json",
            &format!(
                r#"{{"helm_repositories": {{"redis": {{"url": "http://127.0.0.1:{port}", "chart": "redis", "chart_version": "0.1.0"}}}}}}"#
            ),
        )
        .env("HELM_BIN", helm.display().to_string())
        .env("HOME", home.path().display().to_string())
        .env("HELM_CACHE_HOME", home.path().join("cache").display().to_string())
        .env("HELM_CONFIG_HOME", home.path().join("config").display().to_string())
        .env("HELM_DATA_HOME", home.path().join("data").display().to_string())
        .script(
            r#"step("Cache", || {
    let first = helm_pull("redis");
    let second = helm_pull("redis");
    print(`pull: ${first.changed} ${second.changed} ${first.path}`);
    print(`lint: ${helm_lint(first.path).ok}`);
});
"#,
        );
    std::fs::write(
        test.join("scripts/check.rhai"),
        "step(\"Cache\", || { helm_pull(\"redis\"); });\n",
    )
    .expect("check script");
    let check = test.run(&["--check", "scripts/check.rhai"]);
    let pulled_in_check = test.join("infra/helm-charts/redis-0.1.0.tgz").exists();
    let output = test.run(&["scripts/test.rhai"]);
    let _ = server.kill();
    let _ = server.wait();
    check.code(0);
    check.stdout_contains(&format!(
        "~ would pull chart infra/helm-charts/redis-0.1.0.tgz from http://127.0.0.1:{port}"
    ));
    assert!(!pulled_in_check, "check mode pulled");
    output.code(0);
    output.stdout_contains("pull: true false infra/helm-charts/redis-0.1.0.tgz");
    output.stdout_contains("lint: true");
    let left: Vec<_> = std::fs::read_dir(test.join("infra/helm-charts"))
        .expect("cache dir")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["redis-0.1.0.tgz"], "staging folders left behind");
}
