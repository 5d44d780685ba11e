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
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: ok; Redis: ok; MinIO: ok; OpenBao: ok; Wildcard TLS: ok; CoreDNS rewrite: ok; Node trust: ok; Restore GitLab secrets: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
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
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: ok; Redis: ok; MinIO: ok; OpenBao: ok; Wildcard TLS: ok; CoreDNS rewrite: ok; Node trust: ok; Restore GitLab secrets: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
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
                "Pre-flight: ok; Gateway API CRDs: ok; local-path StorageClass: ok; Stable storage: ok; CloudNativePG: ok; Redis: changed 1; MinIO: ok; OpenBao: ok; Wildcard TLS: ok; CoreDNS rewrite: ok; Node trust: ok; Restore GitLab secrets: ok; GitLab: ok; Snapshot GitLab secrets: ok; Registry hosts pin: ok; Runner: ok; Destroy: skipped, timed"
            )
        )
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
