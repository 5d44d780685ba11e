//! The run journal: `.bprun/journal/<script>.json` keeps the recent runs of one script, so that
//! `--resume` knows where the last run stopped and `--timings` can show where time goes.
//! It never holds a secret: error headlines are scrubbed before they are recorded.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::error::Error;

/// How many runs a journal keeps.
pub const KEEP_RUNS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    /// Ran; nothing changed (or, in check mode, nothing would change).
    Ok,
    /// Ran and changed something (in check mode: would change something).
    Changed,
    /// The step decided it had nothing to do (`skip("reason")`).
    Skipped,
    /// Left out by `--only`, `--skip`, `--from` or `--resume`.
    Deselected,
    Failed,
    /// Stopped by Ctrl-C while running.
    Interrupted,
    /// Not reached: an earlier step failed or the run was interrupted.
    NotRun,
}

impl StepStatus {
    /// The word shown in step lines and the recap.
    pub fn label(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Changed => "changed",
            StepStatus::Skipped | StepStatus::Deselected => "skipped",
            StepStatus::Failed => "failed",
            StepStatus::Interrupted => "interrupted",
            StepStatus::NotRun => "not run",
        }
    }

    /// A step that finished and does not need to run again on `--resume`.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            StepStatus::Ok | StepStatus::Changed | StepStatus::Skipped
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub name: String,
    pub status: StepStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    pub duration_s: f64,
    pub changes: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub started: String,
    pub check: bool,
    /// The exit code's name: success, step-failed, interrupted, ...
    pub outcome: String,
    pub duration_s: f64,
    pub steps: Vec<StepRecord>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Journal {
    pub script: String,
    pub runs: Vec<RunRecord>,
}

impl Journal {
    /// The journal file of `script` (a path relative to the root) under `root`.
    pub fn path(root: &Path, script: &str) -> PathBuf {
        let stem = Path::new(script)
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| "script".to_string());
        root.join(".bprun")
            .join("journal")
            .join(format!("{stem}.json"))
    }

    /// Loads the journal, or an empty one when the script never ran.
    pub fn load(root: &Path, script: &str) -> Result<Journal, Error> {
        let path = Self::path(root, script);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|error| {
                Error::usage(
                    format!("the journal {} is not valid: {error}", path.display()),
                    Some(format!(
                        "delete {} to start a fresh history",
                        path.display()
                    )),
                )
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Journal {
                script: script.to_string(),
                runs: Vec::new(),
            }),
            Err(error) => Err(Error::io("read the journal", path, error)),
        }
    }

    /// Fails before the first step when the journal cannot be written (`.bprun` a file, a
    /// read-only folder): a run must not change things and then fail to record them.
    pub fn check_writable(root: &Path, script: &str) -> Result<(), Error> {
        let path = Self::path(root, script);
        let folder = path.parent().unwrap_or(root);
        std::fs::create_dir_all(folder)
            .map_err(|e| Error::io("create the journal folder", folder, e))?;
        let lock_path = path.with_extension("lock");
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map(drop)
            .map_err(|e| Error::io("write the journal", &lock_path, e))
    }

    /// The last run that was not a check run: the one `--resume` continues and `--timings` shows.
    pub fn last_real_run(&self) -> Option<&RunRecord> {
        self.runs.iter().rev().find(|run| !run.check)
    }

    /// The real run before the last one, for comparing timings.
    pub fn previous_real_run(&self) -> Option<&RunRecord> {
        self.runs.iter().rev().filter(|run| !run.check).nth(1)
    }

    /// Appends `run`, keeps the newest [`KEEP_RUNS`], and writes the file atomically. A lock
    /// file serialises runs of the same script that end at the same moment.
    pub fn append(root: &Path, script: &str, run: RunRecord) -> Result<(), Error> {
        let path = Self::path(root, script);
        let folder = path.parent().unwrap_or(root).to_path_buf();
        std::fs::create_dir_all(&folder).map_err(|e| Error::io("create", &folder, e))?;
        ensure_gitignored(root);
        let lock_path = path.with_extension("lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io("open", &lock_path, e))?;
        lock.lock().map_err(|e| Error::io("lock", &lock_path, e))?;

        let mut journal = Self::load(root, script).unwrap_or_default();
        journal.script = script.to_string();
        journal.runs.push(run);
        let excess = journal.runs.len().saturating_sub(KEEP_RUNS);
        journal.runs.drain(..excess);
        let text = serde_json::to_string_pretty(&journal)
            .map_err(|e| Error::io("encode", &path, std::io::Error::other(e)))?;
        let text = bprun_clients::secret::scrub(&text);
        let temporary = path.with_extension(format!("json.{}.tmp", std::process::id()));
        std::fs::write(&temporary, text + "\n").map_err(|e| Error::io("write", &temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| Error::io("write", &path, e))
        // The lock is released when `lock` is dropped.
    }
}

/// `.bprun/` is runtime state: make sure git ignores it even where the project's .gitignore does not.
fn ensure_gitignored(root: &Path) {
    let ignore = root.join(".bprun").join(".gitignore");
    if !ignore.exists() {
        // Best effort: a missing .gitignore inside .bprun only matters to git hygiene.
        let _ = std::fs::write(ignore, "*\n");
    }
}

/// How long a run waits for another run of the same repository.
pub const RUN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// One run at a time per repository: `.bprun/run.lock`, an OS lock held for the whole run (the
/// system releases it when the process dies, so a killed run never blocks the next one). The
/// file names the holder: a second run says whom it waits for, waits up to
/// [`RUN_LOCK_WAIT`], and then gives up naming the holder.
pub struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    pub fn acquire(
        root: &Path,
        script: &str,
        notify: &dyn Fn(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<RunLock, Error> {
        use std::io::{Read, Seek, Write};
        let path = root.join(".bprun").join("run.lock");
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder)
                .map_err(|e| Error::io("create the state folder", folder, e))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("open the run lock", &path, e))?;
        // BPRUN_RUN_LOCK_WAIT_MS shortens the wait (tests).
        let wait = std::env::var("BPRUN_RUN_LOCK_WAIT_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(std::time::Duration::from_millis)
            .unwrap_or(RUN_LOCK_WAIT);
        let deadline = std::time::Instant::now() + wait;
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    let _ = file.rewind();
                    let _ = file.read_to_string(&mut holder);
                    let holder = holder.trim().to_string();
                    let holder = if holder.is_empty() {
                        "(unknown)".to_string()
                    } else {
                        holder
                    };
                    if std::time::Instant::now() >= deadline || cancelled() {
                        return Err(Error::usage(
                            format!("another bprun run is working in this repository: {holder}"),
                            Some("wait for it to finish (bprun runs one script per repository at a time; --check runs do not lock)".to_string()),
                        ));
                    }
                    if !told {
                        notify(&format!(
                            "waiting for the other bprun run in this repository: {holder}"
                        ));
                        told = true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::Error(error)) => {
                    return Err(Error::io("lock", &path, error));
                }
            }
        }
        let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = write!(
            file,
            "pid {} running {script} since {started}",
            std::process::id()
        );
        let _ = file.flush();
        Ok(RunLock { _file: file })
    }
}
