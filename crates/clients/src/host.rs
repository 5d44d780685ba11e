//! The operator's machine, for phase 1: which prerequisite tools are installed (and their
//! versions), how to install a missing one on this OS family, and the only OpenTofu commands
//! bprun runs (it prepares infrastructure, it never applies it).

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::error::{ClientError, ErrorKind};
use crate::process::{ProcessSpec, find_program, run};

/// The tools phase 1 needs on PATH, in the order it checks them.
pub const PREREQUISITES: [&str; 5] = ["docker", "kubectl", "kind", "helm", "tofu"];

/// How long a `--version` style command may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);

/// The package world an install command is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsFamily {
    /// Debian, Ubuntu and their derivatives (apt, snap).
    Debian,
    /// Fedora, RHEL, CentOS Stream, Rocky, Alma (dnf).
    Fedora,
    /// macOS with Homebrew.
    MacOs,
    Other,
}

impl OsFamily {
    pub fn name(self) -> &'static str {
        match self {
            OsFamily::Debian => "debian",
            OsFamily::Fedora => "fedora",
            OsFamily::MacOs => "macos",
            OsFamily::Other => "other",
        }
    }
}

/// The family from the target OS (`std::env::consts::OS`) and, on Linux, the text of
/// `/etc/os-release` (its `ID` and `ID_LIKE`).
pub fn detect_os_family(target_os: &str, os_release: Option<&str>) -> OsFamily {
    if target_os == "macos" {
        return OsFamily::MacOs;
    }
    let Some(text) = os_release else {
        return OsFamily::Other;
    };
    let mut ids = Vec::new();
    for line in text.lines() {
        if let Some((key, value)) = line.split_once('=')
            && (key.trim() == "ID" || key.trim() == "ID_LIKE")
        {
            let value = value.trim().trim_matches('"').trim_matches('\'');
            ids.extend(value.split_whitespace().map(str::to_lowercase));
        }
    }
    let any = |names: &[&str]| ids.iter().any(|id| names.contains(&id.as_str()));
    if any(&["debian", "ubuntu"]) {
        OsFamily::Debian
    } else if any(&["fedora", "rhel", "centos", "rocky", "almalinux"]) {
        OsFamily::Fedora
    } else {
        OsFamily::Other
    }
}

/// This machine's family.
pub fn os_family() -> OsFamily {
    let release = std::fs::read_to_string("/etc/os-release").ok();
    detect_os_family(std::env::consts::OS, release.as_deref())
}

/// The command that installs `tool` on `family` (as an argument list: no shell), or `None`
/// when bprun knows none (the hint then names the project's install page).
pub fn install_command(tool: &str, family: OsFamily) -> Option<Vec<String>> {
    let argv: &[&str] = match (family, tool) {
        (OsFamily::Debian, "docker") => &["sudo", "apt-get", "install", "-y", "docker.io"],
        (OsFamily::Debian, "kubectl") => &["sudo", "snap", "install", "kubectl", "--classic"],
        (OsFamily::Debian, "helm") => &["sudo", "snap", "install", "helm", "--classic"],
        (OsFamily::Debian, "tofu") => &["sudo", "snap", "install", "--classic", "opentofu"],
        (OsFamily::Fedora, "docker") => &["sudo", "dnf", "install", "-y", "moby-engine"],
        (OsFamily::Fedora, "kubectl") => &["sudo", "dnf", "install", "-y", "kubernetes-client"],
        (OsFamily::Fedora, "helm") => &["sudo", "dnf", "install", "-y", "helm"],
        (OsFamily::Fedora, "tofu") => &["sudo", "dnf", "install", "-y", "opentofu"],
        // kind is not packaged for apt or dnf: its docs install it with Go.
        (OsFamily::Debian | OsFamily::Fedora, "kind") => {
            &["go", "install", "sigs.k8s.io/kind@latest"]
        }
        (OsFamily::MacOs, "docker") => &["brew", "install", "--cask", "docker"],
        (OsFamily::MacOs, "kubectl") => &["brew", "install", "kubectl"],
        (OsFamily::MacOs, "kind") => &["brew", "install", "kind"],
        (OsFamily::MacOs, "helm") => &["brew", "install", "helm"],
        (OsFamily::MacOs, "tofu") => &["brew", "install", "opentofu"],
        _ => return None,
    };
    Some(argv.iter().map(|word| word.to_string()).collect())
}

/// Where a tool's own install instructions are (for families bprun has no command for).
pub fn install_page(tool: &str) -> &'static str {
    match tool {
        "docker" => "https://docs.docker.com/engine/install/",
        "kubectl" => "https://kubernetes.io/docs/tasks/tools/",
        "kind" => "https://kind.sigs.k8s.io/docs/user/quick-start/#installation",
        "helm" => "https://helm.sh/docs/intro/install/",
        "tofu" => "https://opentofu.org/docs/intro/install/",
        _ => "the tool's documentation",
    }
}

/// How to install `tool` here, in one line for an operator.
pub fn install_hint(tool: &str, family: OsFamily) -> String {
    match install_command(tool, family) {
        Some(argv) => argv.join(" "),
        None => format!("see {}", install_page(tool)),
    }
}

/// The arguments that make `tool` print its version without a server (docker's daemon,
/// kubectl's cluster).
pub fn version_args(tool: &str) -> Option<&'static [&'static str]> {
    Some(match tool {
        "docker" => &["--version"],
        "kubectl" => &["version", "--client"],
        "kind" => &["version"],
        "helm" => &["version", "--short"],
        "tofu" => &["version"],
        _ => return None,
    })
}

/// A prerequisite as found on PATH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolStatus {
    pub name: String,
    /// The executable found on PATH, or `None`.
    pub path: Option<String>,
    /// The first line the version command printed (`None` when missing or when it failed).
    pub version: Option<String>,
    /// Why the version could not be read (the tool is there but does not run).
    pub problem: Option<String>,
}

/// Finds `tool` on PATH and asks it for its version (no shell).
pub fn tool_status(tool: &str, cancel: &AtomicBool) -> Result<ToolStatus, ClientError> {
    let Some(args) = version_args(tool) else {
        return Err(
            ClientError::new(format!("{tool} is not a phase 1 prerequisite"))
                .with_kind(ErrorKind::Invalid)
                .with_hint(format!(
                    "the prerequisites are {}",
                    PREREQUISITES.join(", ")
                )),
        );
    };
    let Some(path) = find_program(tool) else {
        return Ok(ToolStatus {
            name: tool.to_string(),
            path: None,
            version: None,
            problem: None,
        });
    };
    let spec = ProcessSpec {
        program: path.display().to_string(),
        args: args.iter().map(|arg| arg.to_string()).collect(),
        timeout: VERSION_TIMEOUT,
        ..ProcessSpec::default()
    };
    let (version, problem) = match run(&spec, cancel) {
        Ok(output) if output.code == 0 => (first_line(&output.stdout, &output.stderr), None),
        Ok(output) => (
            None,
            Some(format!(
                "`{tool} {}` exited with {}: {}",
                args.join(" "),
                output.code,
                first_line(&output.stderr, &output.stdout).unwrap_or_default()
            )),
        ),
        Err(error) => (None, Some(error.to_string())),
    };
    Ok(ToolStatus {
        name: tool.to_string(),
        path: Some(path.display().to_string()),
        version,
        problem,
    })
}

/// The first non-blank line of `text`, else of `fallback`.
fn first_line(text: &str, fallback: &str) -> Option<String> {
    text.lines()
        .chain(fallback.lines())
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_string)
}

/// The OpenTofu subcommands bprun runs, and whether each only reads (so it may run in check
/// mode). `apply`, `destroy` and the rest are the operator's: bprun prepares, never applies.
pub fn tofu_subcommand(args: &[String]) -> Result<bool, ClientError> {
    let Some(subcommand) = args.first() else {
        return Err(ClientError::new("tofu: no subcommand given")
            .with_kind(ErrorKind::Invalid)
            .with_hint("tofu([\"init\"]), tofu([\"validate\"]) or tofu([\"version\"])"));
    };
    match subcommand.as_str() {
        "init" => Ok(false),
        "validate" | "version" | "providers" => Ok(true),
        // `fmt` rewrites files unless it only checks.
        "fmt" if args.iter().any(|arg| arg == "-check") => Ok(true),
        other => Err(ClientError::new(format!("tofu {other}: bprun does not run it"))
            .with_kind(ErrorKind::Invalid)
            .with_hint(
                "bprun prepares infrastructure and never applies it: it runs tofu init, validate, version, providers and fmt -check; run `tofu -chdir=infra/tofu apply` (or destroy) yourself",
            )),
    }
}

/// What to look at when `tofu <subcommand>` failed in `dir` (the seed's phase 1 failure path).
pub fn tofu_failure_hints(subcommand: &str, dir: &Path, shown_dir: &str) -> Vec<String> {
    let mut hints = Vec::new();
    let lock = dir.join(".terraform.lock.hcl");
    let tfvars = dir.join("tofu.tfvars");
    if subcommand == "init" || subcommand == "validate" {
        hints.push(if lock.is_file() {
            format!("{shown_dir}/.terraform.lock.hcl is present: a provider whose version or checksum differs from it needs `tofu -chdir={shown_dir} init -upgrade` (then commit the lock file)")
        } else {
            format!("{shown_dir}/.terraform.lock.hcl is missing: the first `tofu init` writes it (it needs the network to fetch the kind provider); commit it afterwards")
        });
        if !tfvars.is_file() {
            hints.push(format!(
                "{shown_dir}/tofu.tfvars does not exist: phase 1's Seed tofu.tfvars step writes it from tofu.tfvars.example"
            ));
        }
    }
    if subcommand == "validate" && !dir.join(".terraform").is_dir() {
        hints.push(format!(
            "{shown_dir}/.terraform/ is missing: run tofu init first"
        ));
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_come_from_os_release_ids() {
        let ubuntu = "NAME=\"Ubuntu\"\nID=ubuntu\nID_LIKE=debian\n";
        assert_eq!(detect_os_family("linux", Some(ubuntu)), OsFamily::Debian);
        let rocky = "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n";
        assert_eq!(detect_os_family("linux", Some(rocky)), OsFamily::Fedora);
        assert_eq!(
            detect_os_family("linux", Some("ID=fedora\n")),
            OsFamily::Fedora
        );
        assert_eq!(
            detect_os_family("linux", Some("ID=arch\n")),
            OsFamily::Other
        );
        assert_eq!(detect_os_family("linux", None), OsFamily::Other);
        assert_eq!(detect_os_family("macos", None), OsFamily::MacOs);
    }

    #[test]
    fn every_prerequisite_has_an_install_hint_per_family() {
        assert_eq!(
            install_hint("docker", OsFamily::Debian),
            "sudo apt-get install -y docker.io"
        );
        assert_eq!(
            install_hint("tofu", OsFamily::Fedora),
            "sudo dnf install -y opentofu"
        );
        assert_eq!(
            install_hint("tofu", OsFamily::MacOs),
            "brew install opentofu"
        );
        assert_eq!(
            install_hint("kind", OsFamily::Debian),
            "go install sigs.k8s.io/kind@latest"
        );
        assert_eq!(
            install_hint("helm", OsFamily::Other),
            "see https://helm.sh/docs/intro/install/"
        );
        for tool in PREREQUISITES {
            assert!(version_args(tool).is_some(), "{tool}");
            for family in [OsFamily::Debian, OsFamily::Fedora, OsFamily::MacOs] {
                assert!(install_command(tool, family).is_some(), "{tool} {family:?}");
            }
            // Homebrew never needs sudo.
            let brew = install_command(tool, OsFamily::MacOs).unwrap_or_default();
            assert_eq!(brew.first().map(String::as_str), Some("brew"), "{tool}");
        }
    }

    #[test]
    fn only_preparing_tofu_subcommands_run() {
        let args = |text: &str| text.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            tofu_subcommand(&args("init -input=false")).ok(),
            Some(false)
        );
        assert_eq!(tofu_subcommand(&args("validate")).ok(), Some(true));
        assert_eq!(tofu_subcommand(&args("fmt -check")).ok(), Some(true));
        for refused in [
            "apply -auto-approve",
            "destroy",
            "fmt",
            "state rm x",
            "import a b",
        ] {
            let error = tofu_subcommand(&args(refused)).expect_err(refused);
            assert!(
                error.to_string().contains("bprun does not run it"),
                "{error}"
            );
        }
        assert!(tofu_subcommand(&[]).is_err());
    }

    #[test]
    fn tofu_failure_hints_follow_the_seed() {
        let dir = tempfile::tempdir().expect("dir");
        let hints = tofu_failure_hints("init", dir.path(), "infra/tofu");
        assert!(
            hints[0].contains("infra/tofu/.terraform.lock.hcl is missing"),
            "{hints:?}"
        );
        assert!(
            hints[1].contains("infra/tofu/tofu.tfvars does not exist"),
            "{hints:?}"
        );
        std::fs::write(dir.path().join(".terraform.lock.hcl"), "").expect("lock");
        std::fs::write(dir.path().join("tofu.tfvars"), "").expect("tfvars");
        let hints = tofu_failure_hints("validate", dir.path(), "infra/tofu");
        assert_eq!(hints.len(), 2, "{hints:?}");
        assert!(hints[0].contains("is present"), "{hints:?}");
        assert!(hints[1].contains(".terraform/ is missing: run tofu init first"));
    }
}
