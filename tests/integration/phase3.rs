//! Issue #6's acceptance: phase 3 on the embedded platform (`bprun rehearse` and `bprun sim
//! all`), run through the real binary on a copy of this repository.

use crate::sim_all::{BPRUN, PROJECTS, SimAll, repository_copy};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn bprun(cwd: &Path, env: &[(String, String)], args: &[&str]) -> Run {
    let output = Command::new(BPRUN)
        .args(args)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run bprun");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn end_state(stdout: &str) -> String {
    stdout
        .split_once("End state of the rehearsal platform:\n")
        .map(|(_, state)| state.to_string())
        .unwrap_or_default()
}

fn recap(stdout: &str) -> BTreeMap<String, String> {
    let Some((_, table)) = stdout.split_once("Recap of scripts/phase3.rhai") else {
        return BTreeMap::new();
    };
    table
        .lines()
        .filter(|line| line.starts_with("  "))
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let index = words.first()?.parse::<u32>().ok()?;
            let status_at = words
                .iter()
                .position(|w| matches!(*w, "ok" | "changed" | "skipped" | "failed" | "not"))?;
            let _ = index;
            Some((words[1..status_at].join(" "), words[status_at].to_string()))
        })
        .collect()
}

/// Every file under `dir`, except `infra/secrets/`.
fn files_outside_secrets(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.starts_with(dir.join("infra/secrets")) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn rehearsal_succeeds_and_rebuilds_the_same_platform() {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = repository.join("scripts/phase3.rhai").display().to_string();
    let cwd = tempfile::tempdir().expect("cwd");
    let state = tempfile::tempdir().expect("state");
    let state_arg = state.path().display().to_string();
    // The rehearsal works on a copy: the checkout's working trees and journal stay as they were.
    let untouched = || {
        let journal = std::fs::read(repository.join(".bprun/journal/phase3.json")).ok();
        let trees: Option<Vec<_>> = std::fs::read_dir(repository.join("apps-local/blueprint-apps"))
            .ok()
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect());
        (journal, trees)
    };
    let before = untouched();
    let first = bprun(
        cwd.path(),
        &[],
        &["rehearse", "--state", &state_arg, &script],
    );
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    let first_state = end_state(&first.stdout);
    for name in PROJECTS {
        assert!(
            first_state.contains(&format!("  project blueprint-apps/{name} (id ")),
            "{first_state}"
        );
    }
    let pipelines: Vec<&str> = first_state
        .lines()
        .filter(|l| l.trim_start().starts_with("pipelines:"))
        .collect();
    assert_eq!(pipelines.len(), 4, "{first_state}");
    assert!(
        pipelines.iter().all(|line| line.contains(" success ")),
        "{first_state}"
    );
    assert_eq!(
        first_state.matches("variables (values hidden): CI_HELM_CHART_DIR, CI_INSECURE_REGISTRY, CI_KUBECONFIG_B64 (masked), CI_REGISTRY_IMAGE\n").count(),
        4,
        "{first_state}"
    );
    assert!(
        untouched() == before,
        "the rehearsal wrote into the checkout"
    );
    assert!(
        state
            .path()
            .join("work/.bprun/journal/phase3.json")
            .is_file(),
        "its journal is in the copy"
    );

    // (a) OpenBao wiped (the dev server starts empty), GitLab kept: the PAT is minted again,
    // everything else unchanged, the same project ids.
    let again = bprun(
        cwd.path(),
        &[],
        &["rehearse", "--state", &state_arg, &script],
    );
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    let steps = recap(&again.stdout);
    assert_eq!(
        steps.get("Mint PAT").map(String::as_str),
        Some("changed"),
        "{steps:?}"
    );
    for step in [
        "Pre-flight",
        "Ensure group",
        "Provision projects",
        "Smoke test",
    ] {
        assert_eq!(
            steps.get(step).map(String::as_str),
            Some("ok"),
            "{step}: {}",
            again.stdout
        );
    }
    assert_eq!(end_state(&again.stdout), first_state);

    // (b) Everything wiped: the same group, projects, variables and CI files come back.
    let fresh = tempfile::tempdir().expect("fresh state");
    let rebuilt = bprun(
        cwd.path(),
        &[],
        &[
            "rehearse",
            "--state",
            &fresh.path().display().to_string(),
            &script,
        ],
    );
    assert_eq!(rebuilt.code, 0, "{}\n{}", rebuilt.stdout, rebuilt.stderr);
    // Projects are created in parallel after shared-code, so ids and their order may differ.
    let shape = |text: &str| -> Vec<String> {
        let mut blocks: Vec<String> = text
            .split("  project ")
            .map(|block| {
                block
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("pipelines:"))
                    .map(|l| l.split(" (id ").next().unwrap_or(l).to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        blocks.sort();
        blocks
    };
    assert_eq!(shape(&end_state(&rebuilt.stdout)), shape(&first_state));
}

#[test]
fn a_second_run_changes_nothing_and_secrets_stay_out_of_every_output() {
    let sim = SimAll::start();
    let copy = repository_copy();
    let first = bprun(copy.path(), &sim.env, &["scripts/phase3.rhai"]);
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    let heads = sim.heads();
    let (status, metadata) = sim.bao("secret/metadata/gitlab/bootstrap/admin_token");
    assert_eq!(status, 200, "{metadata}");
    let version = metadata["data"]["current_version"].clone();
    assert_eq!(version, 1);
    sim.gitlab("DELETE", "/-/sim/requests");

    let second = bprun(copy.path(), &sim.env, &["scripts/phase3.rhai"]);
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    assert_eq!(sim.mutating_requests(), 0, "no mutating GitLab request");
    assert_eq!(sim.heads(), heads, "no new commits");
    assert_eq!(
        sim.bao("secret/metadata/gitlab/bootstrap/admin_token").1["data"]["current_version"],
        version
    );
    let steps = recap(&second.stdout);
    assert_eq!(steps.len(), 6, "{}", second.stdout);
    for (step, status) in &steps {
        let expected = if step == "Seed glab auth" {
            "skipped"
        } else {
            "ok"
        };
        assert_eq!(status, expected, "{step}: {}", second.stdout);
    }

    // --check against the provisioned platform: nothing to do, nothing sent.
    let check = bprun(copy.path(), &sim.env, &["--check", "scripts/phase3.rhai"]);
    assert_eq!(check.code, 0, "{}\n{}", check.stdout, check.stderr);
    assert_eq!(sim.mutating_requests(), 0);

    // The PAT and the OpenBao root token appear in no output, journal or file (but infra/secrets/).
    let (_, secret) = sim.bao("secret/data/gitlab/bootstrap/admin_token");
    let pat = secret["data"]["data"]["token"]
        .as_str()
        .expect("PAT")
        .to_string();
    assert!(pat.starts_with("glpat-"), "{pat}");
    let root_token = sim.var("BAO_TOKEN").to_string();
    for run in [&first, &second, &check] {
        for text in [&run.stdout, &run.stderr] {
            assert!(
                !text.contains(&pat) && !text.contains(&root_token),
                "a secret leaked:\n{text}"
            );
        }
    }
    let json = bprun(copy.path(), &sim.env, &["--json", "scripts/phase3.rhai"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    assert!(!json.stdout.contains(&pat) && !json.stdout.contains(&root_token));
    let files = files_outside_secrets(copy.path());
    assert!(
        files
            .iter()
            .any(|f| f.to_string_lossy().contains(".bprun/journal")),
        "the journal is checked too"
    );
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&pat) && !text.contains(&root_token),
            "{} holds a secret",
            file.display()
        );
    }
}

#[test]
fn check_mode_on_a_fresh_platform_reports_everything_and_sends_no_write() {
    let sim = SimAll::start();
    let copy = repository_copy();
    let check = bprun(copy.path(), &sim.env, &["--check", "scripts/phase3.rhai"]);
    assert_eq!(check.code, 0, "{}\n{}", check.stdout, check.stderr);
    assert!(
        check.stdout.contains(
            "    ~ would mint admin PAT through gitlab-rails runner in the toolbox pod\n"
        ),
        "{}",
        check.stdout
    );
    assert!(
        check
            .stdout
            .contains("    ~ would create group blueprint-apps (internal)\n"),
        "{}",
        check.stdout
    );
    for name in PROJECTS {
        assert!(
            check.stdout.contains(&format!(
                "    ~ would create project blueprint-apps/{name}\n"
            )),
            "{}",
            check.stdout
        );
        assert!(
            check.stdout.contains(&format!(
                "    ~ would start pipeline of blueprint-apps/{name} on main\n"
            )),
            "{}",
            check.stdout
        );
    }
    assert_eq!(sim.mutating_requests(), 0);
    assert_eq!(
        sim.bao("secret/metadata/gitlab/bootstrap/admin_token").0,
        404
    );
    assert!(
        !copy.path().join("apps-local").exists(),
        "no working tree was cloned"
    );
}

#[test]
fn the_loader_refuses_a_reorder_and_a_forced_order_fails_the_include() {
    let copy = repository_copy();
    let manifest = copy.path().join("apps/apps_manifest.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    // Swap the first two entries (each starts at "- name: ").
    let shared_at = text.find("- name: shared-code").expect("shared-code entry");
    let guestbook_at = text.find("- name: guestbook").expect("guestbook entry");
    let redis_at = text.find("- name: redis\n").expect("redis entry");
    let reordered = format!(
        "{}{}{}{}",
        &text[..shared_at],
        &text[guestbook_at..redis_at],
        &text[shared_at..guestbook_at],
        &text[redis_at..]
    );
    std::fs::write(&manifest, reordered).expect("write");
    let refused = bprun(copy.path(), &[], &["--list", "scripts/phase3.rhai"]);
    assert_eq!(refused.code, 3, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("apps/apps_manifest.yaml:5:1: `shared-code` must be the first app (it is at apps/apps_manifest.yaml:15:1)"),
        "{}",
        refused.stderr
    );
    std::fs::write(&manifest, text).expect("restore");

    // Forcing the order in the script: guestbook is pushed before shared-code exists.
    let script = copy.path().join("scripts/phase3.rhai");
    let source = std::fs::read_to_string(&script).expect("script");
    let anchor = "let apps = load_manifest(\"apps/apps_manifest.yaml\");\n";
    assert!(source.contains(anchor));
    let forced = source.replace(
        anchor,
        &format!("{anchor}apps = [apps[1], apps[0], apps[2], apps[3]];\n"),
    );
    std::fs::write(&script, forced).expect("write");
    let run = bprun(copy.path(), &[], &["rehearse", "scripts/phase3.rhai"]);
    let state = end_state(&run.stdout);
    let guestbook = state
        .split("  project blueprint-apps/guestbook")
        .nth(1)
        .expect("guestbook in the end state");
    let guestbook = guestbook.split("  project ").next().unwrap_or("");
    assert!(guestbook.contains(" failed (push)"), "{state}");
    assert!(
        guestbook.contains(
            "yaml errors: Project `blueprint-apps/shared-code` not found or access denied!"
        ),
        "{state}"
    );
    assert_eq!(
        run.code, 0,
        "the smoke test's fresh pipeline passes once shared-code exists: {}",
        run.stderr
    );
}

#[test]
fn runs_killed_at_random_points_converge_to_the_clean_end_state() {
    let reference = {
        let sim = SimAll::start();
        let copy = repository_copy();
        let clean = bprun(copy.path(), &sim.env, &["scripts/phase3.rhai"]);
        assert_eq!(clean.code, 0, "{}\n{}", clean.stdout, clean.stderr);
        sim.summary()
    };
    assert_eq!(reference.len(), 4);
    let sim = SimAll::start();
    let copy = repository_copy();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    let mut random = seed;
    let mut delays = Vec::new();
    for _ in 0..10 {
        // xorshift: a reproducible sequence from the printed seed.
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let delay = Duration::from_millis(random % 1500);
        delays.push(delay.as_millis());
        let mut child = Command::new(BPRUN)
            .arg("scripts/phase3.rhai")
            .current_dir(copy.path())
            .envs(sim.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
    }
    let last = bprun(copy.path(), &sim.env, &["scripts/phase3.rhai"]);
    assert_eq!(
        last.code, 0,
        "seed {seed}, kills after {delays:?} ms:\n{}\n{}",
        last.stdout, last.stderr
    );
    assert_eq!(
        sim.summary(),
        reference,
        "seed {seed}, kills after {delays:?} ms"
    );
}

#[test]
fn app_filter_destroy_and_rebuild() {
    let sim = SimAll::start();
    let copy = repository_copy();
    let one = bprun(
        copy.path(),
        &sim.env,
        &["scripts/phase3.rhai", "--app", "guestbook"],
    );
    assert_eq!(one.code, 0, "{}\n{}", one.stdout, one.stderr);
    let names: Vec<String> = sim.summary().into_keys().collect();
    assert_eq!(
        names,
        ["guestbook", "shared-code"],
        "shared-code comes along with any app"
    );
    let unknown = bprun(
        copy.path(),
        &sim.env,
        &["scripts/phase3.rhai", "--app", "nope"],
    );
    assert_eq!(unknown.code, 3);
    assert!(
        unknown.stderr.contains("guestbook"),
        "lists the valid names: {}",
        unknown.stderr
    );

    let destroy = bprun(copy.path(), &sim.env, &["scripts/phase3.rhai", "--destroy"]);
    assert_eq!(destroy.code, 0, "{}\n{}", destroy.stdout, destroy.stderr);
    assert!(sim.summary().is_empty(), "projects and group deleted");
    assert!(
        !copy.path().join("apps-local/blueprint-apps").exists(),
        "working trees wiped"
    );
    assert_eq!(
        sim.bao("secret/metadata/gitlab/bootstrap/admin_token").0,
        200,
        "the PAT stays in OpenBao"
    );

    let rebuilt = bprun(copy.path(), &sim.env, &["scripts/phase3.rhai"]);
    assert_eq!(rebuilt.code, 0, "{}\n{}", rebuilt.stdout, rebuilt.stderr);
    assert_eq!(sim.summary().len(), 4);
}
