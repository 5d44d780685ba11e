//! The `Test` fixture: a temporary repository (a folder with `.git`) holding files, in which the
//! real `bprun` binary runs. Output is normalised only where it must vary (durations, times).

use std::path::{Path, PathBuf};
use std::process::Command;

pub const BPRUN: &str = env!("CARGO_BIN_EXE_bprun");

pub struct Test {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Unnormalised, for secret checks.
    pub raw_stdout: String,
    pub raw_stderr: String,
}

impl Test {
    pub fn new() -> Test {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join(".git")).expect(".git marker");
        Test {
            dir,
            env: Vec::new(),
        }
    }

    /// Writes `scripts/test.rhai`.
    pub fn script(self, text: &str) -> Test {
        self.file("scripts/test.rhai", text)
    }

    pub fn file(self, path: &str, text: &str) -> Test {
        let full = self.dir.path().join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, text).expect("write fixture");
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Test {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, path: &str) -> PathBuf {
        self.dir.path().join(path)
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BPRUN);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("BPRUN_ROOT")
            .env_remove("BPRUN_MAX_OPERATIONS");
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let output = self.command(args).output().expect("run bprun");
        let raw_stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let raw_stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        Output {
            code: output.status.code().unwrap_or(-1),
            stdout: normalize(&raw_stdout),
            stderr: normalize(&raw_stderr),
            raw_stdout,
            raw_stderr,
        }
    }
}

/// Durations become `#.## s`, timestamps `<time>`.
pub fn normalize(text: &str) -> String {
    let durations = regex::Regex::new(r"\d+\.\d\d s").expect("regex");
    let times = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").expect("regex");
    let text = durations.replace_all(text, "#.## s");
    times.replace_all(&text, "<time>").into_owned()
}

impl Output {
    #[track_caller]
    pub fn expect(&self, code: i32, stdout: &str, stderr: &str) -> &Output {
        assert_eq!(
            (self.code, self.stdout.as_str(), self.stderr.as_str()),
            (code, stdout, stderr),
            "\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Output {
        assert_eq!(
            self.code, code,
            "\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// A tool ./test.sh installs into `.tools/bin` (helm, kubectl, bao), else from PATH.
pub fn tool(name: &str) -> std::path::PathBuf {
    let local = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".tools/bin")
        .join(name);
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
