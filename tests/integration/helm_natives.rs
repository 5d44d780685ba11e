//! Helm natives driving the real helm (./test.sh's .tools/bin) against `bprun sim kube`, through
//! the real bprun binary. A wrapper logs every helm command line, so the tests can tell which
//! helm commands ran and that no secret ever reached one.

use crate::support::Sim;
use crate::support::one_step_run;
use crate::support::with_recaps;
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

/// An upgrade's output with the pods of the rollout it started left out of the recap's
/// `Upgraded releases now run:` lines: the upgrade does not wait, so whether a pod of the old
/// template still runs when the recap reads them depends on how far the rollout got.
fn upgraded(output: crate::support::Output) -> crate::support::Output {
    output.replace_regex(
        r"; pod \S+ still runs redis:7\.4\.1 \(its template is older\)",
        "",
    )
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
    run_script(&test, &[], install).expect(
        0,
        &with_recaps(
            "
        [1/1] Redis ...
            ~ install helm release redis/redis from apps/redis/helm-chart (not installed)
            result: true 1 deployed redis-0.1.0 redis redis
        [1/1] Redis ... changed (#.## s)

        <recap of scripts/test.rhai: Redis: changed 1>
        ",
        ),
        "",
    );
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
    run_script(&test, &[], install).expect(
        0,
        &with_recaps("
        [1/1] Redis ...
            helm release redis/redis left alone: revision 1 of redis-0.1.0 is deployed with the same chart digest and values
            result: false 1 deployed redis-0.1.0 redis redis
        [1/1] Redis ... ok (#.## s)

        <recap of scripts/test.rhai: Redis: ok>
        "),
        "",
    );
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
    upgraded(run_script(&test, &[], changed)).expect(
        0,
        &with_recaps(
            "
        [1/1] Redis ...
            ~ upgrade helm release redis/redis from apps/redis/helm-chart (chart or values changed)
            result: true 2 chart or values changed
            status: 2 deployed redis 0.1.0 64
            list: 1 redis redis 2
            absent: true
        [1/1] Redis ... changed (#.## s)

        <recap of scripts/test.rhai: Redis: changed 1>
        Upgraded releases now run:
          helm release redis/redis (redis-0.1.0): Deployment/redis runs redis:7.4.2
        ",
        ),
        "",
    );
    run_script(&test, &[], changed).expect(
        0,
        "
        [1/1] Redis ...
            helm release redis/redis left alone: revision 2 of redis-0.1.0 is deployed with the same chart digest and values
            result: false 2\x20
            status: 2 deployed redis 0.1.0 64
            list: 1 redis redis 2
            absent: true
        [1/1] Redis ... ok (#.## s)

        Recap of scripts/test.rhai
          #  step   status            changes       time
          1  Redis  ok                      0     #.## s
        1 step: 1 ok, 0 changed, 0 skipped, 0 failed in #.## s
        ",
        "",
    );
    // --check --diff: the values the release would get, against those it has; no upgrade.
    let planned = run_script(
        &test,
        &["--check", "--diff"],
        &changed.replace("7.4.2", "7.4.3"),
    );
    // The manifests too: the rendered image changes.
    let why = "the manifest diff ends with a hunk that removes the stored manifest's last, empty \
               line (`@@ -47,4 +47,3 @@`): a spurious change bprun reports, not pinned";
    planned
        .code(0)
        .stderr("")
        .partial_stdout(
            r#"check mode: nothing will be changed
[1/1] Redis ...
    ~ would upgrade helm release redis/redis from apps/redis/helm-chart (chart or values changed)
      --- a/helm release redis/redis values
      +++ b/helm release redis/redis values
      @@ -1,2 +1,2 @@
       image:
      -  tag: 7.4.2
      +  tag: 7.4.3
      --- a/helm release redis/redis manifest
      +++ b/helm release redis/redis manifest
      @@ -34,7 +34,7 @@
           spec:
             containers:
               - name: redis
      -          image: "redis:7.4.2"
      +          image: "redis:7.4.3"
                 args: ["redis-server", "--appendonly", "no"]
                 ports:
                   - containerPort: 6379
"#,
            why,
        )
        .partial_stdout(
            "    result: true 2 chart or values changed\n    status: 2 deployed redis 0.1.0 64\n    list: 1 redis redis 2\n    absent: true\n[1/1] Redis ... changed (#.## s)\n",
            why,
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
    upgraded(run_script(&test, &[], changed)).expect(
        0,
        &with_recaps(
            "
        [1/1] Redis ...
            ~ upgrade helm release redis/redis from apps/redis/helm-chart (chart or values changed)
            result: true 3 chart or values changed
            status: 3 deployed redis 0.1.0 64
            list: 1 redis redis 3
            absent: true
        [1/1] Redis ... changed (#.## s)

        <recap of scripts/test.rhai: Redis: changed 1>
        Upgraded releases now run:
          helm release redis/redis (redis-0.1.0): Deployment/redis runs redis:7.4.2
        ",
        ),
        "",
    );
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
    output.code(0).stderr("").partial_stdout(
        "
[1/1] Redis ...
    ~ install helm release redis/redis from apps/redis/helm-chart (not installed)
    changed: true
    ---
    # Source: redis/templates/service.yaml
"
        .trim_start_matches('\n'),
        "the rest is helm's rendering of the chart, pinned in helm_template_renders_with_values",
    );
    output.stdout_lacks(CANARY).stderr_lacks(CANARY);
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
    again.expect(
        0,
        &with_recaps("
        [1/1] Redis ...
            helm release redis/redis left alone: revision 1 of redis-0.1.0 is deployed with the same chart digest and values
            changed: false 1
        [1/1] Redis ... ok (#.## s)

        <recap of scripts/test.rhai: Redis: ok>
        "),
        "",
    );
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
    run_script(&test, &["--check"], install).expect(
        0,
        &with_recaps(
            "
        check mode: nothing will be changed
        [1/1] Redis ...
            ~ would install helm release redis/redis from apps/redis/helm-chart (not installed)
            result: true  not installed
        [1/1] Redis ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): Redis: changed 1>
        ",
        ),
        "",
    );
    assert_eq!(
        sim.helm(&["list", "-A", "-q"]).ok(),
        "",
        "check mode created a release"
    );
    let calls = helm_calls(&test);
    assert!(calls.iter().all(|c| !c.starts_with("upgrade")), "{calls:?}");

    run_script(&test, &[], install).expect(
        0,
        &with_recaps(
            "
        [1/1] Redis ...
            ~ install helm release redis/redis from apps/redis/helm-chart (not installed)
            result: true 1 not installed
        [1/1] Redis ... changed (#.## s)

        <recap of scripts/test.rhai: Redis: changed 1>
        ",
        ),
        "",
    );
    let upgrade = r#"step("Redis", || {
    let r = helm_install("redis", "apps/redis/helm-chart", "redis", #{values: #{image: #{tag: "7.4.2"}}});
    print(`result: ${r.changed} ${r.revision} ${r.reason}`);
});
"#;
    helm_calls(&test);
    run_script(&test, &["--check"], upgrade).expect(
        0,
        &with_recaps("
        check mode: nothing will be changed
        [1/1] Redis ...
            ~ would upgrade helm release redis/redis from apps/redis/helm-chart (chart or values changed)
            result: true 1 chart or values changed
        [1/1] Redis ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): Redis: changed 1>
        "),
        "",
    );
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
    output.expect(
        0,
        &with_recaps(
            "
        [1/1] Remove ...
            ~ uninstall helm release redis/redis (redis-0.1.0)
            uninstall: true false
        [1/1] Remove ... changed (#.## s)

        <recap of scripts/test.rhai: Remove: changed 1>
        ",
        ),
        "",
    );
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
    output.expect(
        1,
        &one_step_run("Broken", "failed"),
        r#"
        error: step "Broken" failed
          × helm_install: `helm upgrade --install broken charts/broken -n demo --description 'bprun digest bfd8089b519e34a4096dfde57783dd0e56512cf50d3c59e3b8b5830046eca209' --timeout 300s -o json --create-namespace` exited with code 1
           ╭─[scripts/test.rhai:1:21]
         1 │ step("Broken", || { helm_install("broken", "charts/broken", "demo", #{create_namespace: true}); });
           ·                     ──────┬─────
           ·                           ╰── failed here
           ╰────
          caused by: Error: parse error at (broken/templates/cm.yaml:5): unclosed action started at broken/templates/cm.yaml:4
          hint: the chart does not render; run `helm lint` and `helm template` on it to see the failing template
        re-run with --resume to continue from here
        "#,
    );
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
    lint.expect(
        0,
        &with_recaps(
            "
        [1/1] Lint ...
            bad: false 1
            good: true
        [1/1] Lint ... ok (#.## s)

        <recap of scripts/test.rhai: Lint: ok>
        ",
        ),
        "",
    );
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
    // The values file's tag, then the explicit value over it.
    output.expect(
        0,
        &with_recaps(&format!(
            r#"
        check mode: nothing will be changed
        [1/1] Render ...
{}{}        [1/1] Render ... ok (#.## s)

        <recap of scripts/test.rhai (check mode): Render: ok>
        "#,
            rendered_cache("7.0.0"),
            rendered_cache("7.9.9")
        )),
        "",
    );
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
    output.expect(
        0,
        "
        cloudnative-pg cloudnative-pg 0.26.1 https://cloudnative-pg.github.io/charts
        redis redis 19.6.4 https://charts.bitnami.com/bitnami
        minio minio 5.4.0 https://charts.min.io/
        openbao openbao 0.11.0 https://openbao.github.io/openbao-helm
        gitlab gitlab 10.1.1 https://charts.gitlab.io
        gitlab-runner gitlab-runner 0.71.0 https://charts.gitlab.io
        standalone
        ",
        "",
    );

    // A trailing comma on line 3.
    let broken = repo()
        .file(
            "infra/VERSIONS.json",
            "{\n  \"helm_repositories\": {\n    \"redis\": {\"url\": \"u\", \"chart\": \"redis\", \"chart_version\": \"1\",},\n  }\n}\n",
        )
        .script("let v = versions();\n");
    let output = broken.run(&["scripts/test.rhai"]);
    output.expect(
        3,
        "",
        r#"
        error: the top level of scripts/test.rhai failed
          × infra/VERSIONS.json:3:66: trailing comma
           ╭─[scripts/test.rhai:1:9]
         1 │ let v = versions();
           ·         ────┬───
           ·             ╰── failed here
           ╰────
          hint: the file must be valid JSON (no trailing commas, no comments)
        "#,
    );
    // A typo in a field name is located too.
    let typo = repo()
        .file(
            "infra/VERSIONS.json",
            "{\"helm_repositories\": {\n  \"redis\": {\"url\": \"u\", \"chart\": \"redis\", \"chart_verison\": \"1\"}}}\n",
        )
        .script("let v = versions();\n");
    let output = typo.run(&["scripts/test.rhai"]);
    output.code(3).stdout("").partial_stderr(
        "
error: the top level of scripts/test.rhai failed
  × infra/VERSIONS.json:2:57: unknown field `chart_verison`, expected one of `name`, `url`, `chart`, `chart_version`, `release`, `namespace`, `values_overrides`, `images`, `note`, `sha256`
   ╭─[scripts/test.rhai:1:9]
 1 │ let v = versions();
   ·         ────┬───
   ·             ╰── failed here
   ╰────
"
        .trim_start_matches('\n'),
        "the hint after it lists the optional fields without `sha256`, which the file accepts \
         (see the error line): an incomplete hint of bprun's, not pinned",
    );
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
    output.expect(
        0,
        &with_recaps("
        [1/1] Cache ...
            cached: false infra/helm-charts/redis-19.6.4.tgz redis 19.6.4
            unknown: helm_pull: infra/VERSIONS.json has no helm_repositories.nope / known keys: redis
        [1/1] Cache ... ok (#.## s)

        <recap of scripts/test.rhai: Cache: ok>
        "),
        "",
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
    let repository = format!("http://127.0.0.1:{port}");
    check.replace(&repository, "<charts>").expect(
        0,
        &with_recaps(
            "
        check mode: nothing will be changed
        [1/1] Cache ...
            ~ would pull chart infra/helm-charts/redis-0.1.0.tgz from <charts>
        [1/1] Cache ... changed (#.## s)

        <recap of scripts/check.rhai (check mode): Cache: changed 1>
        ",
        ),
        "",
    );
    assert!(!pulled_in_check, "check mode pulled");
    output.replace(&repository, "<charts>").expect(
        0,
        &with_recaps(
            "
        [1/1] Cache ...
            ~ pull chart infra/helm-charts/redis-0.1.0.tgz from <charts>
            pull: true false infra/helm-charts/redis-0.1.0.tgz
            lint: true
        [1/1] Cache ... changed (#.## s)

        <recap of scripts/test.rhai: Cache: changed 1>
        ",
        ),
        "",
    );
    let left: Vec<_> = std::fs::read_dir(test.join("infra/helm-charts"))
        .expect("cache dir")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["redis-0.1.0.tgz"], "staging folders left behind");
}

/// What `helm_template` renders of the test chart for release `cache` with image tag `tag`
/// (indented as inside a step).
fn rendered_cache(tag: &str) -> String {
    r#"
            ---
            # Source: redis/templates/service.yaml
            apiVersion: v1
            kind: Service
            metadata:
              name: redis-master
              labels:
                app.kubernetes.io/instance: cache
            spec:
              selector:
                app.kubernetes.io/instance: cache
              ports:
                - port: 6379
                  targetPort: 6379
            ---
            # Source: redis/templates/deployment.yaml
            apiVersion: apps/v1
            kind: Deployment
            metadata:
              name: cache
              labels:
                app.kubernetes.io/name: redis
                app.kubernetes.io/instance: cache
            spec:
              replicas: 1
              selector:
                matchLabels:
                  app.kubernetes.io/instance: cache
              template:
                metadata:
                  labels:
                    app.kubernetes.io/name: redis
                    app.kubernetes.io/instance: cache
                spec:
                  containers:
                    - name: redis
                      image: "redis:{tag}"
                      args: ["redis-server", "--appendonly", "no"]
                      ports:
                        - containerPort: 6379
                      readinessProbe:
                        tcpSocket:
                          port: 6379
                      resources:
                        limits:
                          memory: 128Mi
                        requests:
                          cpu: 10m
                          memory: 32Mi
"#
    .trim_start_matches('\n')
    .replace("{tag}", tag)
}

#[test]
fn a_failed_upgrade_says_which_revision_ran_before_and_how_to_go_back() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let test = script(helm_test(&sim));
    let install = |values: &str| {
        format!(
            r#"step("Redis", || {{ helm_install("redis", "apps/redis/helm-chart", "redis", #{{create_namespace: true, wait: true, timeout: 20, values: {values}}}); }});
"#
        )
    };
    run_script(&test, &[], &install("#{}")).success();
    // An image no node can pull: helm's --wait runs out, the release is left failed.
    let failed = run_script(
        &test,
        &[],
        &install(r#"#{image: #{repository: "registry.invalid/redis"}}"#),
    );
    failed
        .replace_regex(r"/tmp/bprun-helm-values-[0-9a-f-]+\.json", "<values>")
        .expect(
            1,
            &one_step_run("Redis", "failed"),
            r#"
        error: step "Redis" failed
          × helm_install: `helm upgrade --install redis apps/redis/helm-chart -n redis --description 'bprun digest 1007e69b20e3a2e24183251ea87548eb2bc273c82a7041a5ec3ab5bb4022cfc1' --timeout 20s -o json -f <values> --wait --create-namespace` exited with code 1
           ╭─[scripts/test.rhai:1:20]
         1 │ step("Redis", || { helm_install("redis", "apps/redis/helm-chart", "redis", #{create_namespace: true, wait: true, timeout: 20, values: #{image: #{repository: "registry.invalid/redis"}}}); });
           ·                    ──────┬─────
           ·                          ╰── failed here
           ╰────
          caused by: level=WARN msg="upgrade failed" name=redis error="resource Deployment/redis/redis not ready. status: InProgress, message: Pending termination: 1\ncontext deadline exceeded"
            Error: UPGRADE FAILED: resource Deployment/redis/redis not ready. status: InProgress, message: Pending termination: 1
            context deadline exceeded
          hint: the release's resources did not become ready in time; raise the timeout or look at the pods of the namespace; revision 1 (redis-0.1.0) ran before this upgrade: to go back, pin redis-0.1.0 again and run again, or `helm rollback redis 1 -n redis` (the `timeout` option, in seconds: #{timeout: 600})
        re-run with --resume to continue from here
        "#,
        );
    // helm keeps the previous revision deployed and records the new one failed.
    assert_eq!(redis_history(&sim), ["deployed", "failed"]);
}

/// With `rollback_on_failure`, helm rolls a failed upgrade back by itself (helm 4's
/// `--rollback-on-failure`, helm 3's `--atomic`), and the error says so.
#[test]
fn a_failed_upgrade_that_rolls_back_by_itself_says_so_with_helm_3_and_4() {
    for helm in ["helm", "helm3"] {
        let sim = BPRUN.sim(SimKind::Kube, &[]);
        let test = script(helm_test(&sim)).env("HELM_BIN", tool(helm));
        let install = |values: &str| {
            format!(
                r#"step("Redis", || {{ helm_install("redis", "apps/redis/helm-chart", "redis", #{{create_namespace: true, wait: true, timeout: 20, rollback_on_failure: true, values: {values}}}); }});
"#
            )
        };
        run_script(&test, &[], &install("#{}")).success();
        let failed = run_script(
            &test,
            &[],
            &install(r#"#{image: #{repository: "registry.invalid/redis"}}"#),
        );
        failed.code(1).partial_stderr(
            "; helm rolled the release back by itself: revision 3 runs redis-0.1.0 again, as revision 1 did; pin redis-0.1.0 again to stay there",
            "helm 3's and 4's own words before it differ",
        );
        assert_eq!(
            redis_history(&sim),
            ["superseded", "failed", "deployed"],
            "{helm}"
        );
    }
}

/// The statuses of the redis release's revisions, oldest first (`helm history`).
fn redis_history(sim: &Sim) -> Vec<String> {
    let history = sim.helm(&["history", "redis", "-n", "redis", "-o", "json"]);
    let revisions: serde_json::Value = serde_json::from_str(history.ok()).expect("history json");
    revisions
        .as_array()
        .expect("revisions")
        .iter()
        .filter_map(|revision| revision["status"].as_str().map(str::to_string))
        .collect()
}

/// Sets the status of revision `revision` of the redis release in helm's own record (its
/// storage Secret), as a helm killed half-way leaves it.
fn set_redis_record_status(sim: &Sim, revision: i64, status: &str) {
    use bprun_clients::kube::helm_storage::{decode_release, encode_release, record_name};
    let name = record_name("redis", revision);
    let record = sim.kubectl(&["get", "secret", &name, "-n", "redis", "-o", "json"]);
    let record: serde_json::Value = serde_json::from_str(record.ok()).expect("record json");
    let mut release =
        decode_release(record["data"]["release"].as_str().expect("data")).expect("decode");
    release["info"]["status"] = serde_json::json!(status);
    let patch = serde_json::json!({
        "metadata": {"labels": {"status": status}},
        "data": {"release": encode_release(&release).expect("encode")},
    });
    sim.kubectl(&[
        "patch",
        "secret",
        &name,
        "-n",
        "redis",
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ])
    .ok();
}

/// The description helm's record of revision `revision` of the redis release carries.
fn redis_record_description(sim: &Sim, revision: i64) -> String {
    use bprun_clients::kube::helm_storage::{decode_release, record_name};
    let name = record_name("redis", revision);
    let record = sim.kubectl(&["get", "secret", &name, "-n", "redis", "-o", "json"]);
    let record: serde_json::Value = serde_json::from_str(record.ok()).expect("record json");
    let release =
        decode_release(record["data"]["release"].as_str().expect("data")).expect("decode");
    release["info"]["description"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A run killed while its helm installed leaves the revision `pending-install` (its helm died
/// with it) and its note under `.bprun/helm/`; the next run marks that revision failed and
/// upgrades over it. A pending revision without the note may be another operator's helm at
/// work: it is left alone, in helm's own words.
#[test]
fn a_revision_a_killed_run_left_pending_is_released_by_the_next_run_and_no_other() {
    // helm 3 and 4 alike: both refuse a pending release and upgrade over a failed one.
    for helm in ["helm", "helm3"] {
        let sim = BPRUN.sim(SimKind::Kube, &[]);
        let test = script(helm_test(&sim)).env("HELM_BIN", tool(helm));
        let install = r#"step("Redis", || { helm_install("redis", "apps/redis/helm-chart", "redis", #{create_namespace: true}); });
"#;
        run_script(&test, &[], install).success();
        let marker = test.join(".bprun/helm/redis.redis.in-flight");
        assert!(!marker.exists(), "helm ended: its note is gone");
        set_redis_record_status(&sim, 1, "pending-install");

        // No note: not this repository's run; helm refuses, and so does bprun.
        let refused = run_script(&test, &[], install);
        refused.expect(
            1,
            &one_step_run("Redis", "failed"),
            r#"
            error: step "Redis" failed
              × helm_install: `helm upgrade --install redis apps/redis/helm-chart -n redis --description 'bprun digest c8388d4c500ac8d2be899889ffa19d03a3e64a077abdf078a687ed71fd04ff0e' --timeout 300s -o json --create-namespace` exited with code 1
               ╭─[scripts/test.rhai:1:20]
             1 │ step("Redis", || { helm_install("redis", "apps/redis/helm-chart", "redis", #{create_namespace: true}); });
               ·                    ──────┬─────
               ·                          ╰── failed here
               ╰────
              caused by: Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress
              hint: another helm may be at work on this release (no killed bprun run here left it pending); when none is, look at `helm history` and roll back or uninstall the release
            re-run with --resume to continue from here
            "#,
        );
        assert_eq!(redis_history(&sim), ["pending-install"], "{helm}");

        // The note a killed run leaves: a check says what a run would do, and does nothing.
        std::fs::write(&marker, "4242 helm upgrade --install redis ...\n").expect("marker");
        run_script(&test, &["--check"], install).expect(
            0,
            &with_recaps(
                "
            check mode: nothing will be changed
            [1/1] Redis ...
                ~ would upgrade helm release redis/redis from apps/redis/helm-chart (status pending-install, left by an interrupted run)
            [1/1] Redis ... changed (#.## s)

            <recap of scripts/test.rhai (check mode): Redis: changed 1>
            ",
            ),
            "",
        );
        assert_eq!(redis_history(&sim), ["pending-install"], "{helm}");
        assert!(marker.exists());

        upgraded(run_script(&test, &[], install)).expect(
            0,
            &with_recaps(
                "
            [1/1] Redis ...
                ~ upgrade helm release redis/redis from apps/redis/helm-chart (status pending-install, left by an interrupted run)
            [1/1] Redis ... changed (#.## s)

            <recap of scripts/test.rhai: Redis: changed 1>
            Upgraded releases now run:
              helm release redis/redis (redis-0.1.0): Deployment/redis runs redis:7.4.1
            ",
            ),
            "",
        );
        // helm upgraded over the failed revision, which it then marks superseded.
        assert_eq!(redis_history(&sim), ["superseded", "deployed"], "{helm}");
        assert_eq!(
            redis_record_description(&sim, 1),
            "pending-install by an interrupted bprun run; marked failed by the next"
        );
        assert!(!marker.exists(), "helm ended: its note is gone");
        run_script(&test, &[], install).expect(
            0,
            &with_recaps(
                "
            [1/1] Redis ...
                helm release redis/redis left alone: revision 2 of redis-0.1.0 is deployed with the same chart digest and values
            [1/1] Redis ... ok (#.## s)

            <recap of scripts/test.rhai: Redis: ok>
            ",
            ),
            "",
        );
    }
}

/// `helm_status` reads helm's storage Secrets (no helm process) and says what helm's own
/// `helm history --max 1` says, field by field, with helm 3 and helm 4 writing the records.
#[test]
fn helm_status_says_what_helm_history_says() {
    for helm in ["helm", "helm3"] {
        let sim = BPRUN.sim(SimKind::Kube, &[]);
        let test = script(helm_test(&sim)).env("HELM_BIN", tool(helm));
        let install = |tag: &str| {
            format!(
                r#"step("Redis", || {{ helm_install("redis", "apps/redis/helm-chart", "redis", #{{create_namespace: true, values: #{{image: #{{tag: "{tag}"}}}}}}); }});
"#
            )
        };
        run_script(&test, &[], &install("7.4.1")).success();
        run_script(&test, &[], &install("7.4.2")).success();
        helm_calls(&test);
        let status = run_script(
            &test,
            &[],
            r#"step("Status", || {
    let s = helm_status("redis", "redis");
    print(json_string(#{revision: s.revision, updated: s.updated, status: s.status, chart: s.chart, app_version: s.app_version, description: s.description}));
});
"#,
        );
        status.success();
        let printed = status
            .raw_stdout
            .lines()
            .find(|line| line.trim_start().starts_with('{'))
            .expect("the status as JSON");
        let read: serde_json::Value = serde_json::from_str(printed.trim()).expect("json");
        let history = sim.helm(&[
            "history", "redis", "-n", "redis", "--max", "1", "-o", "json",
        ]);
        let history: serde_json::Value = serde_json::from_str(history.ok()).expect("history");
        let latest = &history[0];
        assert_eq!(
            read,
            serde_json::json!({
                "revision": latest["revision"],
                "updated": latest["updated"],
                "status": latest["status"],
                "chart": latest["chart"],
                "app_version": latest["app_version"],
                "description": latest["description"],
            }),
            "{helm}"
        );
        assert_eq!(read["revision"], 2, "{helm}");
        // No helm process ran for the status (chart_of reads the chart's name from helm).
        assert!(
            helm_calls(&test)
                .iter()
                .all(|call| !call.starts_with("history")),
            "{helm}"
        );
    }
}
