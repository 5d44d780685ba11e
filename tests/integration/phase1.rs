//! Issue #18: scripts/phase1.rhai. OpenTofu, kind and a Docker daemon are not available on
//! these machines, so phase 1 never runs against a real cluster here. What is tested: the
//! tfvars seeding, the chart cache check with the real helm, the flag rule, the OpenTofu layout;
//! and, with stub programs on PATH (named so in each test), only the detection of tools and
//! the argument lists bprun builds for them.

use crate::support::{BPRUN, Test, free_port, tool};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Writes an executable shell script `name` into `dir`.
fn stub(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write stub");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Stub programs that print what each real tool's version command prints.
fn version_stubs(dir: &Path, tools: &[&str]) {
    for name in tools {
        let line = match *name {
            "docker" => "Docker version 28.2.2, build e6534b4",
            "kubectl" => "Client Version: v1.35.2",
            "kind" => "kind v0.30.0 go1.24.6 linux/amd64",
            "helm" => "v4.1.4+g05fa379",
            "tofu" => "OpenTofu v1.10.6",
            other => panic!("no stub for {other}"),
        };
        stub(dir, name, &format!("echo '{line}'"));
    }
}

#[test]
fn prerequisites_detection_with_stub_programs_on_path_reports_versions_and_install_commands() {
    let bin = tempfile::tempdir().expect("bin");
    version_stubs(bin.path(), &["docker", "kubectl", "helm"]);
    let copy = BPRUN.test_in_repository_copy().env("PATH", bin.path());
    let run = copy.run(&["--only", "prerequisites", "scripts/phase1.rhai"]);
    run.code(1);
    run.stdout_contains(&format!(
        "docker: Docker version 28.2.2, build e6534b4 ({}/docker)",
        bin.path().display()
    ));
    run.stdout_contains("kubectl: Client Version: v1.35.2 (");
    run.stdout_contains("helm: v4.1.4+g05fa379 (");
    let family = bprun_clients::host::os_family();
    for missing in ["kind", "tofu"] {
        run.stderr_contains(&format!(
            "{missing} (install on {}: {})",
            family.name(),
            bprun_clients::host::install_hint(missing, family)
        ));
    }
    run.stderr_contains("re-run with --install-missing to run these commands");
    // The next commands are printed even when a check failed; nothing was applied.
    run.stdout_contains("tofu -chdir=infra/tofu apply -var-file=tofu.tfvars");

    version_stubs(bin.path(), &["kind", "tofu"]);
    let all = copy.run(&["--only", "prerequisites", "scripts/phase1.rhai"]);
    all.code(0);
    all.stdout_contains("tofu: OpenTofu v1.10.6 (");
    all.stdout_contains("kind: kind v0.30.0 go1.24.6 linux/amd64 (");
}

#[test]
fn install_missing_argument_construction_with_a_stub_installer_on_path() {
    let family = bprun_clients::host::os_family();
    let command = bprun_clients::host::install_command("tofu", family)
        .expect("bprun knows how to install tofu on this machine's OS family");
    let bin = tempfile::tempdir().expect("bin");
    version_stubs(bin.path(), &["docker", "kubectl", "kind", "helm"]);
    // The installer (sudo, brew or go) records its arguments and "installs" tofu.
    let log = bin.path().join("installer.log");
    stub(
        bin.path(),
        &command[0],
        &format!(
            "echo \"$@\" > '{}'\nprintf '#!/bin/sh\\necho OpenTofu v1.10.6\\n' > '{}/tofu'\n/bin/chmod 755 '{}/tofu'",
            log.display(),
            bin.path().display(),
            bin.path().display()
        ),
    );
    let copy = BPRUN.test_in_repository_copy().env("PATH", bin.path());

    // Check mode says what it would run and runs nothing.
    let planned = copy.run(&[
        "--check",
        "--only",
        "prerequisites",
        "scripts/phase1.rhai",
        "--install-missing",
    ]);
    planned.code(0);
    planned.stdout_contains(&format!(
        "~ would install tofu with `{}`",
        command.join(" ")
    ));
    assert!(!log.exists(), "check mode ran the installer");

    let run = copy.run(&[
        "--only",
        "prerequisites",
        "scripts/phase1.rhai",
        "--install-missing",
    ]);
    run.code(0);
    run.stdout_contains(&format!("running: {}", command.join(" ")));
    assert_eq!(
        std::fs::read_to_string(&log).expect("installer log").trim(),
        command[1..].join(" ")
    );
    // Installed: a second run finds it and installs nothing.
    std::fs::remove_file(&log).expect("rm log");
    let again = copy.run(&[
        "--only",
        "prerequisites",
        "scripts/phase1.rhai",
        "--install-missing",
    ]);
    again.code(0);
    again.stdout_contains("tofu: OpenTofu v1.10.6 (");
    assert!(!log.exists());
}

#[test]
fn tofu_argument_construction_and_failure_hints_with_a_stub_tofu_on_path() {
    let bin = tempfile::tempdir().expect("bin");
    let log = bin.path().join("tofu.log");
    // init writes the lock file and .terraform/ as the real one does; FAIL_INIT makes it fail.
    stub(
        bin.path(),
        "tofu",
        &format!(
            "echo \"$@ TF_IN_AUTOMATION=$TF_IN_AUTOMATION\" >> '{log}'
dir=${{1#-chdir=}}
case \"$2\" in
  init)
    if [ -n \"$FAIL_INIT\" ]; then echo 'Error: Failed to query available provider packages' >&2; exit 1; fi
    mkdir -p \"$dir/.terraform\"; echo 'provider \"registry.opentofu.org/tehcyx/kind\" {{}}' > \"$dir/.terraform.lock.hcl\"
    echo 'OpenTofu has been successfully initialized!' ;;
  validate) echo 'Success! The configuration is valid.' ;;
esac",
            log = log.display()
        ),
    );
    let copy = BPRUN.test_in_repository_copy().env("PATH", bin.path());
    let tofu_dir = copy.path().join("infra/tofu");
    let only = ["--only", "seed-tofu-tfvars", "--only", "tofu-init"];
    let mut args: Vec<&str> = only.to_vec();
    args.extend(["--only", "tofu-validate", "scripts/phase1.rhai"]);
    let run = copy.run(&args);
    run.code(0);
    let recap = crate::phase3::recap_of(&run.stdout, "scripts/phase1.rhai");
    assert_eq!(recap["tofu init"], "changed", "{recap:?}");
    assert_eq!(recap["tofu validate"], "ok", "{recap:?}");
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        format!(
            "-chdir={dir} init -input=false TF_IN_AUTOMATION=1\n-chdir={dir} validate TF_IN_AUTOMATION=1\n",
            dir = tofu_dir.canonicalize().expect("dir").display()
        )
    );
    // A second init changes nothing (same lock file).
    let again = copy.run(&args);
    again.code(0);
    assert_eq!(
        crate::phase3::recap_of(&again.stdout, "scripts/phase1.rhai")["tofu init"],
        "ok"
    );

    // A failed init shows tofu's words and the seed's hints.
    let fresh = BPRUN
        .test_in_repository_copy()
        .env("PATH", bin.path())
        .env("FAIL_INIT", "1");
    let failed = fresh.run(&["--only", "tofu-init", "scripts/phase1.rhai"]);
    failed.code(1);
    failed.stderr_contains("`tofu -chdir=infra/tofu init -input=false` exited with code 1");
    failed.stderr_contains("Error: Failed to query available provider packages");
    failed.stderr_contains("infra/tofu/.terraform.lock.hcl is missing");
    failed.stderr_contains("infra/tofu/tofu.tfvars does not exist");

    // apply is never bprun's, stub or not.
    copy.write(
        "scripts/apply.rhai",
        "step(\"Apply\", || { tofu([\"apply\", \"-auto-approve\"], #{}); });\n",
    );
    let refused = copy.run(&["scripts/apply.rhai"]);
    refused.code(1);
    refused.stderr_contains("tofu apply: bprun does not run it");
    refused.stderr_contains("run `tofu -chdir=infra/tofu apply` (or destroy) yourself");
    assert!(!log.to_string_lossy().is_empty());
    assert!(
        !std::fs::read_to_string(&log)
            .expect("log")
            .contains("apply"),
        "apply reached tofu"
    );
}

#[test]
fn tfvars_are_seeded_once_and_an_operators_file_is_kept() {
    let copy = BPRUN.test_in_repository_copy();
    let run = copy.run(&["--only", "seed-tofu-tfvars", "scripts/phase1.rhai"]);
    run.code(0);
    run.stdout_contains("~ create file infra/tofu/tofu.tfvars");
    assert_eq!(
        copy.read("infra/tofu/tofu.tfvars"),
        copy.read("infra/tofu/tofu.tfvars.example")
    );
    copy.write(
        "infra/tofu/tofu.tfvars",
        "cluster_name = \"mine\"\npreserve_stateful_data = true\n",
    );
    let kept = copy.run(&["--only", "seed-tofu-tfvars", "scripts/phase1.rhai"]);
    kept.code(0);
    kept.stdout_contains("infra/tofu/tofu.tfvars kept as it is (preserve_stateful_data = true)");
    assert_eq!(
        copy.read("infra/tofu/tofu.tfvars"),
        "cluster_name = \"mine\"\npreserve_stateful_data = true\n"
    );
}

/// A copy whose unvendored charts point at a loopback port nobody listens on, so `helm pull`
/// fails the same way everywhere (no network here; maybe network in CI).
fn offline_chart_copy() -> Test {
    let copy = BPRUN
        .test_in_repository_copy()
        .env("HELM_BIN", tool("helm"))
        .env("PATH", tool("helm").parent().expect("tools folder"));
    let closed = format!("http://127.0.0.1:{}/charts", free_port());
    let versions = copy.read("infra/VERSIONS.json");
    let edited = versions
        .replace("https://charts.gitlab.io", &closed)
        .replace("https://kubernetes-sigs.github.io/headlamp/", &closed);
    assert_ne!(edited, versions);
    copy.write("infra/VERSIONS.json", &edited);
    copy
}

#[test]
fn the_chart_cache_verifies_vendored_pins_and_names_each_chart_it_cannot_get() {
    let copy = offline_chart_copy();
    let run = copy.run(&["--only", "chart-cache", "scripts/phase1.rhai"]);
    run.code(1);
    for chart in [
        "cloudnative-pg-0.26.1",
        "minio-5.4.0",
        "openbao-0.11.0",
        "redis-19.6.4",
    ] {
        run.stdout_contains(&format!(
            "infra/helm-charts/{chart}.tgz: SHA-256 matches its pin"
        ));
    }
    for (key, file) in [
        ("gitlab", "gitlab-10.1.1"),
        ("gitlab-runner", "gitlab-runner-0.71.0"),
        ("headlamp", "headlamp-0.43.0"),
    ] {
        run.stdout_contains(&format!(
            "warning: {key}: infra/helm-charts/{file}.tgz is missing and could not be pulled (helm_pull: `helm pull {key} --repo http://127.0.0.1:"
        ));
    }
    run.stderr_contains(
        "3 of 7 charts are not usable from infra/helm-charts/: gitlab, gitlab-runner, headlamp",
    );
    run.stderr_contains("when this step fails: put the missing archives in infra/helm-charts/");
    // The optional Headlamp install is still printed for the operator.
    run.stdout_contains(
        "helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace",
    );

    // A vendored archive that differs from its pin is named with both digests.
    let path = copy.path().join("infra/helm-charts/redis-19.6.4.tgz");
    let mut bytes = std::fs::read(&path).expect("redis chart");
    bytes.push(0);
    std::fs::write(&path, bytes).expect("tamper");
    let tampered = copy.run(&["--only", "chart-cache", "scripts/phase1.rhai"]);
    tampered.code(1);
    tampered.stdout_contains(
        "warning: redis: helm_pull: infra/helm-charts/redis-19.6.4.tgz has SHA-256 ",
    );
    tampered.stdout_contains(
        ", but infra/VERSIONS.json pins f4f0c284e1eee435dcfff9070037562084536580460e0b08764533532a2f7f98\n",
    );
    tampered.stderr_contains("4 of 7 charts are not usable from infra/helm-charts/: gitlab, gitlab-runner, headlamp, redis");
}

#[test]
fn destroy_flags_must_agree_with_tofu_preserve_stateful_data() {
    let copy = BPRUN.test_in_repository_copy();
    copy.write(
        "infra/tofu/tofu.tfvars",
        "# preserve_stateful_data = false\npreserve_stateful_data = true # keep the data\n",
    );
    let refused = copy.run(&["scripts/phase1.rhai", "--destroy"]);
    refused.code(3);
    refused.stderr_contains("--destroy without --preserve-data disagrees with preserve_stateful_data = true in infra/tofu/tofu.tfvars");
    refused.stderr_contains("add --preserve-data");
    assert!(
        !copy.path().join(".bprun").exists(),
        "a refused run wrote its journal"
    );

    let agreed = copy.run(&[
        "--only",
        "seed-tofu-tfvars",
        "scripts/phase1.rhai",
        "--destroy",
        "--preserve-data",
    ]);
    agreed.code(0);
    agreed.stdout_contains(
        "  bprun scripts/phase2.rhai --destroy --preserve-data   # the applications first\n",
    );
    agreed.stdout_contains("  tofu -chdir=infra/tofu destroy -var-file=tofu.tfvars\n");

    // Phase 2 reads the same file the same way (the comment is no setting).
    copy.write(
        "infra/tofu/tofu.tfvars",
        "# preserve_stateful_data = true\npreserve_stateful_data=false\n",
    );
    let phase2 = copy.run(&["scripts/phase2.rhai", "--destroy", "--preserve-data"]);
    phase2.code(3);
    phase2
        .stderr_contains("--destroy --preserve-data disagrees with preserve_stateful_data = false");
}

#[test]
fn the_tofu_cluster_has_one_control_plane_three_gitlab_nodes_one_runner_and_shared_mounts() {
    // OpenTofu is not installed here, so the configuration is read as text: what `tofu
    // validate` would parse is checked by phase 1 where tofu exists.
    let root = crate::support::BPRUN.test_in_repository_copy();
    let cluster = root.read("infra/tofu/cluster.tf");
    assert_eq!(cluster.matches("role = \"control-plane\"").count(), 1);
    assert!(cluster.contains("[for index in range(3) : \"gitlab\"],\n    [\"runner\"],"));
    assert!(cluster.contains("dynamic \"node\" {\n      for_each = local.workers"));
    // Both node blocks (the control plane and every worker) mount the shared folder.
    assert_eq!(
        cluster
            .matches("extra_mounts {\n          host_path      = local.shared_host_path")
            .count()
            + cluster
                .matches("extra_mounts {\n        host_path      = local.shared_host_path")
                .count(),
        2
    );
    assert!(cluster.contains("abspath(\"${path.module}/${var.shared_data_dir}\")"));
    let variables = root.read("infra/tofu/variables.tf");
    assert!(variables.contains("variable \"preserve_stateful_data\" {\n  description"));
    assert!(variables.contains("default     = \"../data/shared\""));
    assert!(root.path().join("infra/data/shared/.gitkeep").is_file());
    assert!(
        root.read("infra/tofu/tofu.tfvars.example")
            .contains("preserve_stateful_data = false")
    );
}
