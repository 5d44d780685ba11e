//! bprun's one test harness, shared by the integration tests and the benchmarks:
//!
//! - [`Bprun`]: the binary under test (its path is known only at compile time of the root
//!   package's tests and benches, as `env!("CARGO_BIN_EXE_bprun")`, so they hand it in once);
//! - [`Test`]: a temporary repository (a folder with `.git`) with files, environment and
//!   arguments, whose [`Test::run`] gives an [`Output`] with chainable expectations;
//! - [`Sim`]: `bprun sim gitlab|kube|bao|all` as a fixture (spawn, read its `KEY=value` lines,
//!   stop it by its own process id when dropped);
//! - [`http`]: one raw HTTP/1.1 helper (loopback only, bounded in time);
//! - [`BaoServer`]: the real OpenBao server (dev or one-node raft) on free loopback ports;
//! - [`tool`], [`unindent`], [`free_port`], [`repository_copy`].

mod bao;
pub mod http;
mod sim;
mod test;

pub use bao::{BaoServer, bao_binary};
pub use http::Reply;
pub use sim::{GITLAB_TOKEN, Sim, SimKind};
pub use test::{Output, Test, assert_text, expect_output, normalize};

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `bprun` binary under test: `Bprun::at(env!("CARGO_BIN_EXE_bprun"))`.
#[derive(Clone, Copy, Debug)]
pub struct Bprun {
    path: &'static str,
}

impl Bprun {
    pub const fn at(path: &'static str) -> Bprun {
        Bprun { path }
    }

    pub fn path(&self) -> &'static str {
        self.path
    }

    /// A plain command for the binary (no arguments, no environment changes).
    pub fn command(&self) -> Command {
        Command::new(self.path)
    }

    /// A new temporary repository in which to run the binary.
    pub fn test(&self) -> Test {
        Test::new(*self)
    }

    /// A test over a copy of this repository's scripts and content (see [`repository_copy`]).
    pub fn test_in_repository_copy(&self) -> Test {
        Test::in_dir(*self, repository_copy())
    }

    /// `bprun sim KIND` with its standard arguments and `extra`.
    pub fn sim(&self, kind: SimKind, extra: &[&str]) -> Sim {
        Sim::start(*self, kind, extra)
    }
}

/// The workspace root (where `Cargo.toml`, `scripts/` and `.tools/` are).
pub fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// A tool ./test.sh installs into `.tools/bin` (helm, kubectl, bao), else from PATH.
pub fn tool(name: &str) -> PathBuf {
    let local = root().join(".tools/bin").join(name);
    if local.exists() {
        return local;
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| {
            panic!("{name} is missing: run ./test.sh, which installs it into .tools/bin")
        })
}

/// Removes a leading newline and the indentation common to every non-blank line; blank lines
/// (spaces only) become empty. So an exact expectation can be written indented with the code:
///
/// ```
/// assert_eq!(bprun_testkit::unindent("
///     a
///       b
///     "), "a\n  b\n");
/// ```
pub fn unindent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let indent = text
        .split('\n')
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    text.split('\n')
        .map(|line| {
            if line.trim().is_empty() {
                ""
            } else {
                &line[indent..]
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// check-jsonschema from ./test.sh's .tools/pypi, with GitLab's CI schema built in, on `files`.
pub fn check_gitlab_ci(files: &[PathBuf]) -> std::process::Output {
    let tools = root().join(".tools/pypi");
    let script = tools.join("bin/check-jsonschema");
    assert!(
        script.exists(),
        "check-jsonschema is missing: run ./test.sh, which installs it into .tools/pypi"
    );
    std::process::Command::new("python3")
        .arg(&script)
        .args(["--builtin-schema", "vendor.gitlab-ci"])
        .args(files)
        .env("PYTHONPATH", &tools)
        .output()
        .expect("run check-jsonschema")
}

/// Runs a Python script with python-gitlab from ./test.sh's .tools/pygitlab, with `env`.
pub fn python_gitlab(script: &std::path::Path, env: &[(&str, &str)]) -> std::process::Output {
    let tools = root().join(".tools/pygitlab");
    assert!(
        tools.join("gitlab").is_dir(),
        "python-gitlab is missing: run ./test.sh, which installs it into .tools/pygitlab"
    );
    let mut command = std::process::Command::new("python3");
    command
        .arg(script)
        .env("PYTHONPATH", &tools)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Loopback only: no proxy may take the simulator's requests elsewhere.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run python3")
}

/// A free loopback port below Linux's ephemeral range (32768-60999), so that no outgoing
/// connection of another test can take it while a server restarts on it.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let port = fastrand::u16(20_000..32_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between 20000 and 32000")
}

/// A copy of this repository's scripts and content (what phase 3 reads: scripts, apps,
/// templates, infra) in a temporary folder, with a `.git` marker.
pub fn repository_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("copy");
    for folder in ["scripts", "apps", "templates", "infra"] {
        let status = Command::new("cp")
            .arg("-a")
            .arg(root().join(folder))
            .arg(dir.path())
            .status()
            .expect("cp");
        assert!(status.success(), "cp -a {folder}");
    }
    std::fs::create_dir_all(dir.path().join(".git")).expect(".git");
    dir
}

#[cfg(test)]
mod tests {
    use super::unindent;

    #[test]
    fn unindent_strips_the_common_indentation() {
        assert_eq!(unindent("\n    a\n      b\n\n    c\n    "), "a\n  b\n\nc\n");
        assert_eq!(unindent("a\n  b\n"), "a\n  b\n");
        assert_eq!(unindent(""), "");
    }
}
