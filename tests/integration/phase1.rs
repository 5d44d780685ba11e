//! Issue #18: scripts/phase1.rhai. OpenTofu, kind and a Docker daemon are not available on
//! these machines, so phase 1 never runs against a real cluster here. What is tested: the
//! tfvars seeding, the chart cache check with the real helm, the flag rule, the OpenTofu layout;
//! and, with stub programs on PATH (named so in each test), only the detection of tools and
//! the argument lists bprun builds for them.

use crate::support::one_step_run_of;
use crate::support::with_recaps;
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

/// `--only prerequisites` when every tool answers as `version_stubs` makes it (found, or
/// installed by an earlier run).
const EVERY_TOOL_FOUND_ONLY_PREREQUISITES: &str = r#"
    [1/6] Prerequisites ...
        docker: Docker version 28.2.2, build e6534b4 (<bin>/docker)
        kubectl: Client Version: v1.35.2 (<bin>/kubectl)
        kind: kind v0.30.0 go1.24.6 linux/amd64 (<bin>/kind)
        helm: v4.1.4+g05fa379 (<bin>/helm)
        tofu: OpenTofu v1.10.6 (<bin>/tofu)
    [1/6] Prerequisites ... ok (#.## s)
    [2/6] Seed tofu.tfvars ... skipped (not selected by --only)
    [3/6] tofu init ... skipped (not selected by --only)
    [4/6] tofu validate ... skipped (not selected by --only)
    [5/6] Chart cache ... skipped (not selected by --only)
    [6/6] Next commands ...
        The bootstrap prepares; you apply. Next:
          tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
          export KUBECONFIG=$PWD/infra/tofu/kubeconfig
          helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
          bprun scripts/phase2.rhai
    [6/6] Next commands ... ok (#.## s)

    <recap of scripts/phase1.rhai: Prerequisites: ok; Seed tofu.tfvars: skipped; tofu init: skipped; tofu validate: skipped; Chart cache: skipped; Next commands: ok>
"#;

#[test]
fn prerequisites_detection_with_stub_programs_on_path_reports_versions_and_install_commands() {
    let bin = tempfile::tempdir().expect("bin");
    version_stubs(bin.path(), &["docker", "kubectl", "helm"]);
    let family = bprun_clients::host::os_family();
    // The install commands and the OS family are this machine's.
    let copy = BPRUN
        .test_in_repository_copy()
        .env("PATH", bin.path())
        .replace(bin.path().display().to_string(), "<bin>")
        .replace(
            bprun_clients::host::install_hint("kind", family),
            "<install kind>",
        )
        .replace(
            bprun_clients::host::install_hint("tofu", family),
            "<install tofu>",
        )
        .replace(format!("install on {}", family.name()), "install on <os>");
    // The next commands are printed even when a check failed; nothing was applied.
    copy.run(&["--only", "prerequisites", "scripts/phase1.rhai"])
        .expect(
            1,
            &with_recaps(r#"
            [1/6] Prerequisites ...
                docker: Docker version 28.2.2, build e6534b4 (<bin>/docker)
                kubectl: Client Version: v1.35.2 (<bin>/kubectl)
                helm: v4.1.4+g05fa379 (<bin>/helm)
            [1/6] Prerequisites ... failed (#.## s)
            [2/6] Seed tofu.tfvars ... skipped (not selected by --only)
            [3/6] tofu init ... skipped (not selected by --only)
            [4/6] tofu validate ... skipped (not selected by --only)
            [5/6] Chart cache ... skipped (not selected by --only)
            [6/6] Next commands ...
                The bootstrap prepares; you apply. Next:
                  tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
                  export KUBECONFIG=$PWD/infra/tofu/kubeconfig
                  helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
                  bprun scripts/phase2.rhai
            [6/6] Next commands ... ok (#.## s)

            <recap of scripts/phase1.rhai: Prerequisites: failed; Seed tofu.tfvars: skipped; tofu init: skipped; tofu validate: skipped; Chart cache: skipped; Next commands: ok>
            "#),
            &crate::support::with_frame(r#"
            error: step "Prerequisites" failed
              × missing on PATH: kind (install on <os>: <install kind>); tofu (install on <os>: <install tofu>); re-run with --install-missing to run these commands
            <frame>
              when this step fails: install the missing tools with the commands above (or re-run with --install-missing, which runs them and says so)
            the next steps still run; the run will exit 1
            "#, &crate::support::script_frame("scripts/phase1.rhai", "throw `missing on PATH: ${common::joined(lines, \"; \")}; re-run with --install-missing to run these commands`;", "throw", "thrown here")),
        );

    version_stubs(bin.path(), &["kind", "tofu"]);
    copy.run(&["--only", "prerequisites", "scripts/phase1.rhai"])
        .expect(0, &with_recaps(EVERY_TOOL_FOUND_ONLY_PREREQUISITES), "");
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
    let copy = BPRUN
        .test_in_repository_copy()
        .env("PATH", bin.path())
        .replace(bin.path().display().to_string(), "<bin>")
        .replace(command.join(" "), "<install tofu>");

    // Check mode says what it would run and runs nothing.
    let planned = copy.run(&[
        "--check",
        "--only",
        "prerequisites",
        "scripts/phase1.rhai",
        "--install-missing",
    ]);
    planned.code(0).stderr("").partial_stdout(
        "    tofu is missing; installing it with: <install tofu>\n    ~ would install tofu with `<install tofu>`\n",
        "check mode says `installing it with` on the line before `would install`, though it \
         installs nothing: a wrong line of bprun's, not pinned",
    );
    assert!(!log.exists(), "check mode ran the installer");

    let run = copy.run(&[
        "--only",
        "prerequisites",
        "scripts/phase1.rhai",
        "--install-missing",
    ]);
    run.expect(
        0,
        &with_recaps(r#"
        [1/6] Prerequisites ...
            docker: Docker version 28.2.2, build e6534b4 (<bin>/docker)
            kubectl: Client Version: v1.35.2 (<bin>/kubectl)
            kind: kind v0.30.0 go1.24.6 linux/amd64 (<bin>/kind)
            helm: v4.1.4+g05fa379 (<bin>/helm)
            tofu is missing; installing it with: <install tofu>
            ~ install tofu with `<install tofu>`
            running: <install tofu>
        [1/6] Prerequisites ... changed (#.## s)
        [2/6] Seed tofu.tfvars ... skipped (not selected by --only)
        [3/6] tofu init ... skipped (not selected by --only)
        [4/6] tofu validate ... skipped (not selected by --only)
        [5/6] Chart cache ... skipped (not selected by --only)
        [6/6] Next commands ...
            The bootstrap prepares; you apply. Next:
              tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
              export KUBECONFIG=$PWD/infra/tofu/kubeconfig
              helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
              bprun scripts/phase2.rhai
        [6/6] Next commands ... ok (#.## s)

        <recap of scripts/phase1.rhai: Prerequisites: changed 1; Seed tofu.tfvars: skipped; tofu init: skipped; tofu validate: skipped; Chart cache: skipped; Next commands: ok>
        "#),
        "",
    );
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
    again.expect(0, &with_recaps(EVERY_TOOL_FOUND_ONLY_PREREQUISITES), "");
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
    run.expect(
        0,
        &with_recaps(r#"
        [1/6] Prerequisites ... skipped (not selected by --only)
        [2/6] Seed tofu.tfvars ...
            ~ create file infra/tofu/tofu.tfvars
        [2/6] Seed tofu.tfvars ... changed (#.## s)
        [3/6] tofu init ...
            ~ run `tofu -chdir=infra/tofu init -input=false`
        [3/6] tofu init ... changed (#.## s)
        [4/6] tofu validate ... ok (#.## s)
        [5/6] Chart cache ... skipped (not selected by --only)
        [6/6] Next commands ...
            The bootstrap prepares; you apply. Next:
              tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
              export KUBECONFIG=$PWD/infra/tofu/kubeconfig
              helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
              bprun scripts/phase2.rhai
        [6/6] Next commands ... ok (#.## s)

        <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: changed 1; tofu init: changed 1; tofu validate: ok; Chart cache: skipped; Next commands: ok>
        "#),
        "",
    );
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
    again.expect(
        0,
        &with_recaps(r#"
        [1/6] Prerequisites ... skipped (not selected by --only)
        [2/6] Seed tofu.tfvars ...
            infra/tofu/tofu.tfvars kept as it is (preserve_stateful_data = false)
        [2/6] Seed tofu.tfvars ... ok (#.## s)
        [3/6] tofu init ... ok (#.## s)
        [4/6] tofu validate ... ok (#.## s)
        [5/6] Chart cache ... skipped (not selected by --only)
        [6/6] Next commands ...
            The bootstrap prepares; you apply. Next:
              tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
              export KUBECONFIG=$PWD/infra/tofu/kubeconfig
              helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
              bprun scripts/phase2.rhai
        [6/6] Next commands ... ok (#.## s)

        <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: ok; tofu init: ok; tofu validate: ok; Chart cache: skipped; Next commands: ok>
        "#),
        "",
    );
    assert_eq!(
        crate::phase3::recap_of(&again.stdout, "scripts/phase1.rhai")["tofu init"],
        "ok"
    );

    // A failed init shows tofu's words and the seed's hints.
    let fresh = BPRUN
        .test_in_repository_copy()
        .env("PATH", bin.path())
        .env("FAIL_INIT", "1");
    fresh
        .run(&["--only", "tofu-init", "scripts/phase1.rhai"])
        .expect(
            1,
            &with_recaps(r#"
            [1/6] Prerequisites ... skipped (not selected by --only)
            [2/6] Seed tofu.tfvars ... skipped (not selected by --only)
            [3/6] tofu init ... failed (#.## s)
            [4/6] tofu validate ... skipped (not selected by --only)
            [5/6] Chart cache ... skipped (not selected by --only)
            [6/6] Next commands ...
                The bootstrap prepares; you apply. Next:
                  tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
                  export KUBECONFIG=$PWD/infra/tofu/kubeconfig
                  helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
                  bprun scripts/phase2.rhai
            [6/6] Next commands ... ok (#.## s)

            <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: skipped; tofu init: failed; tofu validate: skipped; Chart cache: skipped; Next commands: ok>
            "#),
            &crate::support::with_frame(r#"
            error: step "tofu init" failed
              × `tofu -chdir=infra/tofu init -input=false` exited with code 1
            <frame>
              caused by: Error: Failed to query available provider packages
              hint: infra/tofu/.terraform.lock.hcl is missing: the first `tofu init` writes it (it needs the network to fetch the kind provider); commit it afterwards; infra/tofu/tofu.tfvars does not exist: phase 1's Seed tofu.tfvars step writes it from tofu.tfvars.example
              when this step fails: tofu init fails: check that infra/tofu/.terraform.lock.hcl is present and tofu.tfvars exists; the first init needs the network to fetch the kind provider
            the next steps still run; the run will exit 1
            "#, &crate::support::script_frame("scripts/phase1.rhai", "tofu([\"init\", \"-input=false\"], #{});", "tofu", "failed here")),
        );

    // apply is never bprun's, stub or not.
    copy.write(
        "scripts/apply.rhai",
        "step(\"Apply\", || { tofu([\"apply\", \"-auto-approve\"], #{}); });\n",
    );
    copy.run(&["scripts/apply.rhai"]).expect(
        1,
        &one_step_run_of("scripts/apply.rhai", "Apply", "failed"),
        r#"
        error: step "Apply" failed
          × tofu apply: bprun does not run it
           ╭─[scripts/apply.rhai:1:20]
         1 │ step("Apply", || { tofu(["apply", "-auto-approve"], #{}); });
           ·                    ──┬─
           ·                      ╰── failed here
           ╰────
          hint: bprun prepares infrastructure and never applies it: it runs tofu init, validate, version, providers and fmt -check; run `tofu -chdir=infra/tofu apply` (or destroy) yourself
        re-run with --resume to continue from here
        "#,
    );
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
    copy.run(&["--only", "seed-tofu-tfvars", "scripts/phase1.rhai"])
        .expect(
            0,
            &with_recaps(r#"
            [1/6] Prerequisites ... skipped (not selected by --only)
            [2/6] Seed tofu.tfvars ...
                ~ create file infra/tofu/tofu.tfvars
            [2/6] Seed tofu.tfvars ... changed (#.## s)
            [3/6] tofu init ... skipped (not selected by --only)
            [4/6] tofu validate ... skipped (not selected by --only)
            [5/6] Chart cache ... skipped (not selected by --only)
            [6/6] Next commands ...
                The bootstrap prepares; you apply. Next:
                  tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
                  export KUBECONFIG=$PWD/infra/tofu/kubeconfig
                  helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
                  bprun scripts/phase2.rhai
            [6/6] Next commands ... ok (#.## s)

            <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: changed 1; tofu init: skipped; tofu validate: skipped; Chart cache: skipped; Next commands: ok>
            "#),
            "",
        );
    assert_eq!(
        copy.read("infra/tofu/tofu.tfvars"),
        copy.read("infra/tofu/tofu.tfvars.example")
    );
    copy.write(
        "infra/tofu/tofu.tfvars",
        "cluster_name = \"mine\"\npreserve_stateful_data = true\n",
    );
    copy.run(&["--only", "seed-tofu-tfvars", "scripts/phase1.rhai"])
        .expect(
            0,
            &with_recaps(r#"
            [1/6] Prerequisites ... skipped (not selected by --only)
            [2/6] Seed tofu.tfvars ...
                infra/tofu/tofu.tfvars kept as it is (preserve_stateful_data = true)
            [2/6] Seed tofu.tfvars ... ok (#.## s)
            [3/6] tofu init ... skipped (not selected by --only)
            [4/6] tofu validate ... skipped (not selected by --only)
            [5/6] Chart cache ... skipped (not selected by --only)
            [6/6] Next commands ...
                The bootstrap prepares; you apply. Next:
                  tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
                  export KUBECONFIG=$PWD/infra/tofu/kubeconfig
                  helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
                  bprun scripts/phase2.rhai
            [6/6] Next commands ... ok (#.## s)

            <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: ok; tofu init: skipped; tofu validate: skipped; Chart cache: skipped; Next commands: ok>
            "#),
            "",
        );
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
    copy.replace(&closed, "<closed>/charts")
}

#[test]
fn the_chart_cache_verifies_vendored_pins_and_names_each_chart_it_cannot_get() {
    let copy = offline_chart_copy();
    // The pull folders are named by process and at random.
    let pull_folders = r"\.pull-\d+-[0-9a-f]{8}";
    copy.run(&["--only", "chart-cache", "scripts/phase1.rhai"])
        .replace_regex(pull_folders, ".pull-<pid>-<id>")
        .expect(
            1,
            &with_recaps(r#"
            [1/6] Prerequisites ... skipped (not selected by --only)
            [2/6] Seed tofu.tfvars ... skipped (not selected by --only)
            [3/6] tofu init ... skipped (not selected by --only)
            [4/6] tofu validate ... skipped (not selected by --only)
            [5/6] Chart cache ...
                infra/helm-charts/cloudnative-pg-0.26.1.tgz: SHA-256 matches its pin
                warning: gitlab: infra/helm-charts/gitlab-10.1.1.tgz is missing and could not be pulled (helm_pull: `helm pull gitlab --repo <closed>/charts --version 10.1.1 --destination infra/helm-charts/.pull-<pid>-<id>` exited with code 1)
                warning: gitlab-runner: infra/helm-charts/gitlab-runner-0.71.0.tgz is missing and could not be pulled (helm_pull: `helm pull gitlab-runner --repo <closed>/charts --version 0.71.0 --destination infra/helm-charts/.pull-<pid>-<id>` exited with code 1)
                warning: headlamp: infra/helm-charts/headlamp-0.43.0.tgz is missing and could not be pulled (helm_pull: `helm pull headlamp --repo <closed>/charts --version 0.43.0 --destination infra/helm-charts/.pull-<pid>-<id>` exited with code 1)
                infra/helm-charts/minio-5.4.0.tgz: SHA-256 matches its pin
                infra/helm-charts/openbao-0.11.0.tgz: SHA-256 matches its pin
                infra/helm-charts/redis-19.6.4.tgz: SHA-256 matches its pin
            [5/6] Chart cache ... failed (#.## s)
            [6/6] Next commands ...
                The bootstrap prepares; you apply. Next:
                  tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
                  export KUBECONFIG=$PWD/infra/tofu/kubeconfig
                  helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
                  bprun scripts/phase2.rhai
            [6/6] Next commands ... ok (#.## s)

            <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: skipped; tofu init: skipped; tofu validate: skipped; Chart cache: failed; Next commands: ok>
            "#),
            &crate::support::with_frame(r#"
            error: step "Chart cache" failed
              × 3 of 7 charts are not usable from infra/helm-charts/: gitlab, gitlab-runner, headlamp (each is named above)
            <frame>
              when this step fails: put the missing archives in infra/helm-charts/ (helm pull on a machine with network access), or re-run where the chart repositories are reachable
            the next steps still run; the run will exit 1
            "#, &crate::support::script_frame("scripts/phase1.rhai", "throw `${problems.len()} of ${total} charts are not usable from infra/helm-charts/: ${common::joined(problems, \", \")} (each is named above)`;", "throw", "thrown here")),
        );

    // A vendored archive that differs from its pin is named with both digests.
    let path = copy.path().join("infra/helm-charts/redis-19.6.4.tgz");
    let mut bytes = std::fs::read(&path).expect("redis chart");
    bytes.push(0);
    std::fs::write(&path, bytes).expect("tamper");
    copy.run(&["--only", "chart-cache", "scripts/phase1.rhai"])
        .replace_regex(pull_folders, ".pull-<pid>-<id>")
        .expect(
            1,
            &with_recaps(r#"
            [1/6] Prerequisites ... skipped (not selected by --only)
            [2/6] Seed tofu.tfvars ... skipped (not selected by --only)
            [3/6] tofu init ... skipped (not selected by --only)
            [4/6] tofu validate ... skipped (not selected by --only)
            [5/6] Chart cache ...
                infra/helm-charts/cloudnative-pg-0.26.1.tgz: SHA-256 matches its pin
                warning: gitlab: infra/helm-charts/gitlab-10.1.1.tgz is missing and could not be pulled (helm_pull: `helm pull gitlab --repo <closed>/charts --version 10.1.1 --destination infra/helm-charts/.pull-<pid>-<id>` exited with code 1)
                warning: gitlab-runner: infra/helm-charts/gitlab-runner-0.71.0.tgz is missing and could not be pulled (helm_pull: `helm pull gitlab-runner --repo <closed>/charts --version 0.71.0 --destination infra/helm-charts/.pull-<pid>-<id>` exited with code 1)
                warning: headlamp: infra/helm-charts/headlamp-0.43.0.tgz is missing and could not be pulled (helm_pull: `helm pull headlamp --repo <closed>/charts --version 0.43.0 --destination infra/helm-charts/.pull-<pid>-<id>` exited with code 1)
                infra/helm-charts/minio-5.4.0.tgz: SHA-256 matches its pin
                infra/helm-charts/openbao-0.11.0.tgz: SHA-256 matches its pin
                warning: redis: helm_pull: infra/helm-charts/redis-19.6.4.tgz has SHA-256 a94105c6c8e79bf8671dcc0f9e086d3a023b1e0c3b82011739c2c779422069e9, but infra/VERSIONS.json pins f4f0c284e1eee435dcfff9070037562084536580460e0b08764533532a2f7f98
            [5/6] Chart cache ... failed (#.## s)
            [6/6] Next commands ...
                The bootstrap prepares; you apply. Next:
                  tofu -chdir=infra/tofu apply -var-file=tofu.tfvars
                  export KUBECONFIG=$PWD/infra/tofu/kubeconfig
                  helm install headlamp infra/helm-charts/headlamp-0.43.0.tgz -n headlamp --create-namespace   # optional: the Headlamp dashboard
                  bprun scripts/phase2.rhai
            [6/6] Next commands ... ok (#.## s)

            <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: skipped; tofu init: skipped; tofu validate: skipped; Chart cache: failed; Next commands: ok>
            "#),
            &crate::support::with_frame(r#"
            error: step "Chart cache" failed
              × 4 of 7 charts are not usable from infra/helm-charts/: gitlab, gitlab-runner, headlamp, redis (each is named above)
            <frame>
              when this step fails: put the missing archives in infra/helm-charts/ (helm pull on a machine with network access), or re-run where the chart repositories are reachable
            the next steps still run; the run will exit 1
            "#, &crate::support::script_frame("scripts/phase1.rhai", "throw `${problems.len()} of ${total} charts are not usable from infra/helm-charts/: ${common::joined(problems, \", \")} (each is named above)`;", "throw", "thrown here")),
        );
}

#[test]
fn destroy_flags_must_agree_with_tofu_preserve_stateful_data() {
    let copy = BPRUN.test_in_repository_copy();
    copy.write(
        "infra/tofu/tofu.tfvars",
        "# preserve_stateful_data = false\npreserve_stateful_data = true # keep the data\n",
    );
    copy.run(&["scripts/phase1.rhai", "--destroy"]).expect(
        3,
        "",
        &crate::phase2::destroy_refusal(
            "scripts/phase1.rhai",
            "without --preserve-data",
            true,
            "add --preserve-data",
        ),
    );
    assert!(
        !copy.path().join(".bprun").exists(),
        "a refused run wrote its journal"
    );

    copy.run(&[
        "--only",
        "seed-tofu-tfvars",
        "scripts/phase1.rhai",
        "--destroy",
        "--preserve-data",
    ])
    .expect(
        0,
        &with_recaps(r#"
        [1/6] Prerequisites ... skipped (not selected by --only)
        [2/6] Seed tofu.tfvars ...
            infra/tofu/tofu.tfvars kept as it is (preserve_stateful_data = true)
        [2/6] Seed tofu.tfvars ... ok (#.## s)
        [3/6] tofu init ... skipped (not selected by --only)
        [4/6] tofu validate ... skipped (not selected by --only)
        [5/6] Chart cache ... skipped (not selected by --only)
        [6/6] Next commands ...
            The bootstrap prepares; you apply. Next:
              bprun scripts/phase2.rhai --destroy --preserve-data   # the applications first
              tofu -chdir=infra/tofu destroy -var-file=tofu.tfvars
        [6/6] Next commands ... ok (#.## s)

        <recap of scripts/phase1.rhai: Prerequisites: skipped; Seed tofu.tfvars: ok; tofu init: skipped; tofu validate: skipped; Chart cache: skipped; Next commands: ok>
        "#),
        "",
    );

    // Phase 2 reads the same file the same way (the comment is no setting).
    copy.write(
        "infra/tofu/tofu.tfvars",
        "# preserve_stateful_data = true\npreserve_stateful_data=false\n",
    );
    copy.run(&["scripts/phase2.rhai", "--destroy", "--preserve-data"])
        .expect(
            3,
            "",
            &crate::phase2::destroy_refusal(
                "scripts/phase2.rhai",
                "--preserve-data",
                false,
                "drop --preserve-data, or set preserve_stateful_data = true",
            ),
        );
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
