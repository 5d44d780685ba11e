//! After day one: a rehearsal platform kept in a state folder is the same platform the next
//! time, as a kind cluster is after `docker restart`.

use crate::support::expected_recap;

/// The recap tables of a rehearsal's stdout (one per script), as printed.
fn recaps(stdout: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in stdout.lines() {
        inside |= line.starts_with("Recap of ");
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if inside && line.contains(" steps: ") || line.starts_with("1 step: ") {
            inside = false;
        }
    }
    out
}

/// What a rehearsal prints last: the end state of the cluster and of the platform.
fn end_state(stdout: &str) -> &str {
    stdout
        .find("End state of the rehearsal cluster:")
        .map_or("", |at| &stdout[at..])
}

#[test]
fn a_kept_rehearsal_platform_is_the_same_platform_the_next_time() {
    let copy = crate::phase2::with_tools();
    let state = tempfile::tempdir().expect("state folder");
    let state_arg = state.path().to_str().expect("a UTF-8 path").to_string();
    let rehearse = || {
        copy.run(&[
            "rehearse",
            "--state",
            &state_arg,
            "scripts/phase2.rhai",
            "scripts/phase3.rhai",
        ])
    };
    let first = rehearse();
    first.success();
    // The second rehearsal starts the platform again from the state folder: every object,
    // helm revision, volume, OpenBao key, bucket, pushed image and GitLab project is there, and
    // OpenBao, whose pod restarted with it, is unsealed again: nothing is left to do.
    let second = rehearse();
    second.success();
    assert_eq!(
        recaps(&second.stdout),
        format!(
            "{}\n{}\n",
            expected_recap(
                "scripts/phase2.rhai",
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: ok; Redis: ok; MinIO: ok; OpenBao: ok; Wildcard TLS: ok; CoreDNS rewrite: ok; Restore GitLab secrets: ok; Node trust: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
            ),
            expected_recap(
                "scripts/phase3.rhai",
                "Pre-flight: ok; Mint PAT: ok; Seed glab auth: skipped, timed; Ensure group: ok; Provision projects: ok; Smoke test: ok; Workloads reachable: ok"
            ),
        )
    );
    assert_eq!(
        end_state(&second.stdout),
        end_state(&first.stdout),
        "the same platform, helm revisions included"
    );
    assert!(!end_state(&first.stdout).is_empty());
    second.replace(&state_arg, "<state>").partial_stderr(
        "rehearsal platform (kept in <state>, started again as it was; OpenBao, whose pod restarted, unsealed again with the copy's infra/secrets/openbao-init.json):\n",
        "the banner's other lines name ports",
    );
    // The day-two loop: a check of the converged platform finds nothing (exit 0); after an
    // edited value it finds exactly that change (exit 5), and changes nothing.
    let check = |script: &str| {
        copy.run(&[
            "rehearse",
            "--state",
            &state_arg,
            "-q",
            "--check",
            "--detailed-exitcode",
            script,
        ])
    };
    let converged = check("scripts/phase2.rhai");
    converged.code(0);
    assert_eq!(
        recaps(&converged.stdout),
        format!(
            "{}\n",
            expected_recap(
                "scripts/phase2.rhai (check mode)",
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: ok; Redis: ok; MinIO: ok; OpenBao: ok; Wildcard TLS: ok; CoreDNS rewrite: ok; Restore GitLab secrets: ok; Node trust: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
            )
        )
    );
    let values = copy.path().join("infra/helm-values/redis.yaml");
    let text = std::fs::read_to_string(&values).expect("redis values");
    std::fs::write(&values, text.replace("memory: 128Mi", "memory: 192Mi")).expect("edit");
    let edited = check("scripts/phase2.rhai");
    edited.code(5);
    assert_eq!(
        recaps(&edited.stdout),
        format!(
            "{}\n",
            expected_recap(
                "scripts/phase2.rhai (check mode)",
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: ok; Redis: changed 1; MinIO: ok; OpenBao: ok; Wildcard TLS: ok; CoreDNS rewrite: ok; Restore GitLab secrets: ok; Node trust: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
            )
        )
    );
    std::fs::write(&values, text).expect("undo the edit");
    // A values-only edit of OpenBao: one that changes its pod template (a resource request)
    // makes the upgrade replace its pod (OnDelete) and unseal it, and the check says so; one
    // outside the template (the UI's Service) is the upgrade alone.
    let values = copy.path().join("infra/helm-values/openbao.yaml");
    let text = std::fs::read_to_string(&values).expect("openbao values");
    let openbao_check = |edited: &str| {
        std::fs::write(&values, edited).expect("edit");
        let output = copy
            .run(&[
                "rehearse",
                "--state",
                &state_arg,
                "--check",
                "--detailed-exitcode",
                "scripts/phase2.rhai",
            ])
            .replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>");
        output.code(5);
        step_lines(&output.stdout, "OpenBao")
    };
    assert_eq!(
        openbao_check(&text.replace("memory: 128Mi", "memory: 160Mi")),
        "[8/17] OpenBao ...
    ~ would upgrade helm release openbao/openbao from infra/helm-charts/openbao-0.11.0.tgz (chart or values changed)
    warning: http://127.0.0.1:<port> does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
    openbao-0 runs the template openbao-0.11.0 rendered with the values before; the values now change it, so the upgrade replaces it (updateStrategy OnDelete: a pod takes a new template only when deleted)
    ~ would delete Pod/openbao-0 in openbao
    ~ would unseal openbao (the new openbao-0 starts sealed)
[8/17] OpenBao ... changed (#.## s)
"
    );
    assert_eq!(
        openbao_check(&text.replace("ui:\n  enabled: false", "ui:\n  enabled: true")),
        "[8/17] OpenBao ...
    ~ would upgrade helm release openbao/openbao from infra/helm-charts/openbao-0.11.0.tgz (chart or values changed)
    warning: http://127.0.0.1:<port> does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
[8/17] OpenBao ... changed (#.## s)
"
    );
    std::fs::write(&values, text).expect("undo the edit");
    use std::os::unix::fs::PermissionsExt;
    let store = state.path().join("platform/kube-store.json");
    let mode = std::fs::metadata(&store)
        .expect("the kept cluster")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the store holds Secrets");

    // A kept state of one start is not used for another, and a damaged one is refused;
    // neither is replaced.
    let other = copy.run(&[
        "rehearse",
        "--state",
        &state_arg,
        "--platform",
        "phase2",
        "scripts/phase3.rhai",
    ]);
    other
        .replace(&state_arg, "<state>")
        .code(2)
        .partial_stderr(
            "error: rehearsal platform: <state>/platform/kube-store.json holds a platform that started bare, not phase2; start it as it was (--platform bare), or use another state folder\n",
            "the platform's banner precedes nothing here; the error is the whole story",
        );
    std::fs::write(&store, "{not json").expect("damage the store");
    let damaged = rehearse();
    damaged.replace(&state_arg, "<state>").code(2).partial_stderr(
        "error: rehearsal platform: <state>/platform/kube-store.json is not a kept cluster (key must be a string at line 1 column 2); move the state folder away to start a new platform\n",
        "as above",
    );
    assert_eq!(
        std::fs::read_to_string(&store).expect("the store"),
        "{not json",
        "a damaged store is never replaced"
    );
}

/// Vendors `archive` (a newer upstream release from ../shared/upstream/charts/next/) into
/// `copy` and pins it in infra/VERSIONS.json, as an operator's whole upgrade is.
fn bump(copy: &crate::support::Test, key: &str, archive: &str, version: &str) {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/upstream/charts/next")
        .join(archive);
    let bytes = std::fs::read(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    std::fs::write(copy.path().join("infra/helm-charts").join(archive), &bytes).expect("vendor");
    let digest = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(&bytes))
    };
    let path = copy.path().join("infra/VERSIONS.json");
    let mut pins: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("pins")).expect("JSON");
    pins["helm_repositories"][key]["chart_version"] = serde_json::json!(version);
    pins["helm_repositories"][key]["sha256"] = serde_json::json!(digest);
    std::fs::write(&path, serde_json::to_string_pretty(&pins).expect("JSON")).expect("pin");
}

/// The lines of step `name` in a run's stdout (its start line to its end line).
fn step_lines(stdout: &str, name: &str) -> String {
    let start = format!("] {name} ...");
    let mut out = String::new();
    let mut inside = false;
    for line in stdout.lines() {
        if line.contains(&start) {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
            if line.contains(&start) && line.len() > start.len() + line.find(&start).unwrap_or(0) {
                break;
            }
        }
    }
    out
}

#[test]
fn a_pinned_chart_upgrade_finishes_its_rollout_and_keeps_the_data() {
    // Converge on the pins, bump OpenBao (its StatefulSet updates OnDelete) and CloudNativePG
    // to the newer upstream releases, rehearse again on the kept platform: the run upgrades
    // both, replaces OpenBao's pod (unsealed) so that it runs the new image, keeps every
    // OpenBao path; the run after it changes nothing.
    let copy = crate::phase2::with_tools();
    let state = tempfile::tempdir().expect("state folder");
    let state_arg = state.path().to_str().expect("a UTF-8 path").to_string();
    let rehearse = |extra: &[&str]| {
        let mut args = vec!["rehearse", "--state", &state_arg];
        args.extend_from_slice(extra);
        args.push("scripts/phase2.rhai");
        copy.run(&args)
    };
    let converged = rehearse(&[]);
    converged.success();
    bump(&copy, "openbao", "openbao-0.16.4.tgz", "0.16.4");
    bump(
        &copy,
        "cloudnative-pg",
        "cloudnative-pg-0.27.1.tgz",
        "0.27.1",
    );
    // The check names both upgrades and what follows OpenBao's: its pod replaced, unsealed.
    let planned = rehearse(&["--check", "--detailed-exitcode"])
        .replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>");
    planned.code(5);
    assert_eq!(
        step_lines(&planned.stdout, "OpenBao"),
        "[8/17] OpenBao ...
    ~ would upgrade helm release openbao/openbao from infra/helm-charts/openbao-0.16.4.tgz (chart or values changed)
    warning: http://127.0.0.1:<port> does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
    openbao-0 runs openbao-0.11.0's template; the upgrade to openbao-0.16.4 replaces it (updateStrategy OnDelete: a pod takes a new template only when deleted)
    ~ would delete Pod/openbao-0 in openbao
    ~ would unseal openbao (the new openbao-0 starts sealed)
[8/17] OpenBao ... changed (#.## s)
"
    );
    assert_eq!(
        recaps(&planned.stdout),
        format!(
            "{}\n",
            expected_recap(
                "scripts/phase2.rhai (check mode)",
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: changed 1; Redis: ok; MinIO: ok; OpenBao: changed 3; Wildcard TLS: ok; CoreDNS rewrite: ok; Restore GitLab secrets: ok; Node trust: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
            )
        )
    );
    let upgraded = rehearse(&[]).replace_regex(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>");
    upgraded.success();
    assert_eq!(
        step_lines(&upgraded.stdout, "OpenBao"),
        "[8/17] OpenBao ...
    ~ upgrade helm release openbao/openbao from infra/helm-charts/openbao-0.16.4.tgz (chart or values changed)
    warning: http://127.0.0.1:<port> does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
    openbao-0 runs revision openbao-dtstx8mljw, the StatefulSet's is openbao-wkxw82hvjx (updateStrategy OnDelete: a pod takes a new template only when deleted)
    ~ delete Pod/openbao-0 in openbao
    ~ unseal openbao http://127.0.0.1:<port>
    openbao-0 replaced: it runs quay.io/openbao/openbao:2.3.2, unsealed
[8/17] OpenBao ... changed (#.## s)
"
    );
    // The recap says what the upgraded releases' workloads run now.
    let block: Vec<&str> = upgraded
        .stdout
        .lines()
        .skip_while(|line| *line != "Upgraded releases now run:")
        .take_while(|line| !line.is_empty())
        .collect();
    assert_eq!(
        block,
        [
            "Upgraded releases now run:",
            "  helm release cnpg-system/cnpg (cloudnative-pg-0.27.1): Deployment/cnpg-controller-manager runs ghcr.io/cloudnative-pg/cloudnative-pg:1.28.1",
            "  helm release openbao/openbao (openbao-0.16.4): StatefulSet/openbao runs quay.io/openbao/openbao:2.3.2",
        ]
    );
    assert_eq!(
        step_lines(&upgraded.stdout, "CloudNativePG"),
        "[5/17] CloudNativePG ...
    ~ upgrade helm release cnpg-system/cnpg from infra/helm-charts/cloudnative-pg-0.27.1.tgz (chart or values changed)
[5/17] CloudNativePG ... changed (#.## s)
"
    );
    // The data is as it was: the same OpenBao paths, the same claims; the two releases and
    // what their workloads run moved on, and the end state says what they run now.
    let moved = |line: &&str| {
        line.contains(" revision ")
            || line.starts_with("  StatefulSet/openbao ")
            || line.starts_with("  Deployment/cnpg-controller-manager ")
    };
    let end = |output: &crate::support::Output| {
        end_state(&output.stdout)
            .lines()
            .filter(|line| !moved(line))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(end(&upgraded), end(&converged));
    let now: Vec<&str> = end_state(&upgraded.stdout)
        .lines()
        .filter(|line| moved(line) && !line.contains(" revision "))
        .collect();
    assert_eq!(
        now,
        [
            "  Deployment/cnpg-controller-manager 1/1 ready, runs ghcr.io/cloudnative-pg/cloudnative-pg:1.28.1",
            "  StatefulSet/openbao 1/1 ready, runs quay.io/openbao/openbao:2.3.2",
        ]
    );
    assert!(end(&converged).contains("OpenBao secret/ (values hidden): "));
    let again = rehearse(&["-q"]);
    again.success();
    assert_eq!(
        recaps(&again.stdout),
        format!(
            "{}\n",
            expected_recap(
                "scripts/phase2.rhai",
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: ok; Redis: ok; MinIO: ok; OpenBao: ok; Wildcard TLS: ok; CoreDNS rewrite: ok; Restore GitLab secrets: ok; Node trust: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
            )
        )
    );
}

#[test]
fn resume_continues_across_rehearsals_on_the_same_state() {
    let copy = crate::phase2::with_tools().file(
        "scripts/steps.rhai",
        r#"let args = params(#{ok: #{type: "bool", default_value: false, help: "Let the second step pass"}});
step("First", || { write_text("out/first.txt", "done\n"); });
step("Second", || { if !args.ok { throw "not yet"; } });
"#,
    );
    let state = tempfile::tempdir().expect("state folder");
    let state_arg = state.path().to_str().expect("a UTF-8 path").to_string();
    let rehearse = |extra: &[&str]| {
        let mut args = vec!["rehearse", "--state", &state_arg, "-q"];
        args.extend_from_slice(extra);
        copy.run(&args)
    };
    rehearse(&["scripts/steps.rhai"]).code(1);
    let resumed = rehearse(&["--resume", "scripts/steps.rhai", "--ok"]);
    resumed.success();
    assert_eq!(
        recaps(&resumed.stdout),
        format!(
            "{}\n",
            expected_recap("scripts/steps.rhai", "First: skipped; Second: ok")
        )
    );
}
