//! The `Test` builder: a temporary repository (a folder with `.git`) holding files, in which the
//! real `bprun` binary runs; and its `Output`, with chainable expectations that print both
//! streams on failure. Output is normalised only where it must vary (durations, times).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::{Bprun, unindent};

pub struct Test {
    bprun: Bprun,
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    args: Vec<String>,
    /// Text that varies between runs (a simulator's address, a temporary folder) and the
    /// placeholder every `run`'s normalised output shows instead.
    replacements: Vec<(String, String)>,
}

impl Test {
    /// An empty temporary repository.
    pub fn new(bprun: Bprun) -> Test {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join(".git")).expect(".git marker");
        Test::in_dir(bprun, dir)
    }

    /// A test in a prepared folder (which it owns and removes).
    pub fn in_dir(bprun: Bprun, dir: tempfile::TempDir) -> Test {
        Test {
            bprun,
            dir,
            env: Vec::new(),
            args: Vec::new(),
            replacements: Vec::new(),
        }
    }

    /// Writes `scripts/test.rhai`.
    pub fn script(self, text: &str) -> Test {
        self.file("scripts/test.rhai", text)
    }

    /// Writes `scripts/test.rhai` from `tests/scripts/NAME` of this repository.
    pub fn script_file(self, name: &str) -> Test {
        let path = crate::root().join("tests/scripts").join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        self.script(&text)
    }

    /// Writes a file (creating its folders).
    pub fn file(self, path: &str, text: &str) -> Test {
        self.write(path, text);
        self
    }

    /// Writes a file (creating its folders) of a test already built.
    pub fn write(&self, path: &str, text: &str) {
        let full = self.dir.path().join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, text).expect("write fixture");
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Test {
        let value = value.as_ref().to_string_lossy().into_owned();
        self.env.push((key.to_string(), value));
        self
    }

    /// Every `KEY=value` pair a simulator printed.
    pub fn envs(mut self, pairs: &[(String, String)]) -> Test {
        self.env.extend(pairs.iter().cloned());
        self
    }

    /// Arguments for every `run` of this test, before the `run`'s own.
    pub fn args(mut self, args: &[&str]) -> Test {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Every `run`'s normalised output shows `placeholder` where it printed `varying` (a
    /// simulator's URL, a port, a folder), so that whole output can be compared.
    pub fn replace(mut self, varying: impl AsRef<str>, placeholder: &str) -> Test {
        let varying = varying.as_ref().to_string();
        if !varying.is_empty() {
            self.replacements.push((varying, placeholder.to_string()));
        }
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

    /// The command `run` runs: the binary in the repository, without colour, with this test's
    /// environment and arguments followed by `args`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = self.bprun.command();
        command
            .args(&self.args)
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

    /// Runs the binary to its end (stdin closed).
    pub fn run(&self, args: &[&str]) -> Output {
        let mut output = Output::normalized(self.command(args).output().expect("run bprun"));
        for (varying, placeholder) in &self.replacements {
            output = output.replace(varying, placeholder);
        }
        output
    }
}

/// What a process printed, and its exit code (-1 when killed by a signal).
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    /// Normalised (see [`normalize`]) for `bprun` runs, as printed for other programs.
    pub stdout: String,
    pub stderr: String,
    /// As printed, for secret checks.
    pub raw_stdout: String,
    pub raw_stderr: String,
}

impl Output {
    /// A `bprun` run's output, with durations and times normalised.
    pub fn normalized(output: std::process::Output) -> Output {
        let mut out = Output::raw(output);
        out.stdout = normalize(&out.raw_stdout);
        out.stderr = normalize(&out.raw_stderr);
        out
    }

    /// Any program's output, as printed.
    pub fn raw(output: std::process::Output) -> Output {
        let raw_stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let raw_stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        Output {
            code: output.status.code().unwrap_or(-1),
            stdout: raw_stdout.clone(),
            stderr: raw_stderr.clone(),
            raw_stdout,
            raw_stderr,
        }
    }

    /// The normalised streams with `varying` shown as `placeholder` (the printed ones stay as
    /// they were, for secret checks).
    pub fn replace(mut self, varying: &str, placeholder: &str) -> Output {
        if !varying.is_empty() {
            self.stdout = self.stdout.replace(varying, placeholder);
            self.stderr = self.stderr.replace(varying, placeholder);
        }
        self
    }

    /// The normalised streams with short commit ids (8 hex digits, as bprun and the runner
    /// print them) shown as `<commit>`: a commit's id holds its time.
    pub fn short_commits(self) -> Output {
        self.replace_regex(r"\b[0-9a-f]{8}\b", "<commit>")
    }

    /// The normalised streams with every match of `pattern` shown as `placeholder` (`$1` names
    /// a group), for values no test can know in advance (generated IDs, process IDs).
    pub fn replace_regex(mut self, pattern: &str, placeholder: &str) -> Output {
        let regex = regex::Regex::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        self.stdout = regex.replace_all(&self.stdout, placeholder).into_owned();
        self.stderr = regex.replace_all(&self.stderr, placeholder).into_owned();
        self
    }

    #[track_caller]
    fn fail(&self, what: String) -> ! {
        panic!(
            "{what}\n--- exit code {} ---\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// The exit code is `code`.
    #[track_caller]
    pub fn code(&self, code: i32) -> &Output {
        if self.code != code {
            self.fail(format!("exit code {} (expected {code})", self.code));
        }
        self
    }

    /// Exit code 0.
    #[track_caller]
    pub fn success(&self) -> &Output {
        self.code(0)
    }

    /// Exit code 0; returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        self.code(0);
        &self.stdout
    }

    /// Exit code, stdout and stderr, each exactly (stdout and stderr unindented, see
    /// [`unindent`]).
    #[track_caller]
    pub fn expect(&self, code: i32, stdout: &str, stderr: &str) -> &Output {
        self.code(code).stdout(stdout).stderr(stderr)
    }

    /// Stdout is exactly `expected` (unindented, see [`unindent`]).
    #[track_caller]
    pub fn stdout(&self, expected: &str) -> &Output {
        self.exact("stdout", &self.stdout, expected)
    }

    /// Stderr is exactly `expected` (unindented, see [`unindent`]).
    #[track_caller]
    pub fn stderr(&self, expected: &str) -> &Output {
        self.exact("stderr", &self.stderr, expected)
    }

    #[track_caller]
    fn exact(&self, stream: &str, actual: &str, expected: &str) -> &Output {
        let expected = unindent(expected);
        if actual != expected {
            self.fail(format!(
                "{stream} differs\n--- expected {stream} ---\n{expected}\n--- first difference ---\n{}",
                first_difference(&expected, actual)
            ));
        }
        self
    }

    /// The named exception to whole-output comparison: stdout holds `part`, where the rest of
    /// the output truly varies (`why` says how, and shows in the failure).
    #[track_caller]
    pub fn partial_stdout(&self, part: &str, why: &str) -> &Output {
        if !self.stdout.contains(part) {
            self.fail(format!("stdout lacks {part:?} (partial check: {why})"));
        }
        self
    }

    /// The named exception to whole-output comparison: stderr holds `part`, where the rest of
    /// the output truly varies (`why` says how, and shows in the failure).
    #[track_caller]
    pub fn partial_stderr(&self, part: &str, why: &str) -> &Output {
        if !self.stderr.contains(part) {
            self.fail(format!("stderr lacks {part:?} (partial check: {why})"));
        }
        self
    }

    /// Neither the printed nor the normalised stdout holds `part`.
    #[track_caller]
    pub fn stdout_lacks(&self, part: &str) -> &Output {
        if self.stdout.contains(part) || self.raw_stdout.contains(part) {
            self.fail(format!("stdout holds {part:?}"));
        }
        self
    }

    /// Neither the printed nor the normalised stderr holds `part`.
    #[track_caller]
    pub fn stderr_lacks(&self, part: &str) -> &Output {
        if self.stderr.contains(part) || self.raw_stderr.contains(part) {
            self.fail(format!("stderr holds {part:?}"));
        }
        self
    }
}

/// A table case's whole output: exit code, stdout and stderr exactly (see [`Output::expect`]),
/// with the case's name in the failure.
#[track_caller]
pub fn expect_output(case: &str, output: &Output, code: i32, stdout: &str, stderr: &str) {
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        output.expect(code, stdout, stderr);
    }));
    if let Err(failure) = checked {
        let message = failure
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| failure.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        panic!("case {case:?}: {message}");
    }
}

/// `actual` is exactly `expected`, as written (no unindenting): for text that is not a run's
/// output, or output whose every line is indented, which `Output::stdout`/`stderr` cannot
/// express (they unindent). A failure shows both whole and the first differing line.
#[track_caller]
pub fn assert_text(actual: &str, expected: &str) {
    assert!(
        actual == expected,
        "text differs at {}\n--- expected ---\n{expected}\n--- actual ---\n{actual}\n--- end ---",
        first_difference(expected, actual)
    );
}

/// The first line where two texts differ, for failure messages.
fn first_difference(expected: &str, actual: &str) -> String {
    let mut expected_lines = expected.split('\n');
    let mut actual_lines = actual.split('\n');
    let mut line = 1;
    loop {
        match (expected_lines.next(), actual_lines.next()) {
            (Some(e), Some(a)) if e == a => line += 1,
            (None, None) => return "(none)".into(),
            (e, a) => return format!("line {line}:\n  expected {e:?}\n  actual   {a:?}"),
        }
    }
}

/// Durations become `#.## s`, timestamps `<time>`. A duration right-aligned in a column (after
/// two spaces or more, as the recap's time column) keeps the column's width, so `  12.34 s`
/// reads `   #.## s` as `   1.23 s` does.
pub fn normalize(text: &str) -> String {
    static PATTERNS: OnceLock<(regex::Regex, regex::Regex)> = OnceLock::new();
    let (durations, times) = PATTERNS.get_or_init(|| {
        (
            regex::Regex::new(r"(  +)?(\d+\.\d\d s)").expect("regex"),
            regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").expect("regex"),
        )
    });
    let text = durations.replace_all(text, |found: &regex::Captures<'_>| match found.get(1) {
        Some(padding) => {
            let width = padding.as_str().len() + found[2].len();
            format!("{:>width$}", "#.## s")
        }
        None => "#.## s".to_string(),
    });
    times.replace_all(&text, "<time>").into_owned()
}
