//! Run-wide state every native consults: check mode, the repository root, cancellation, the
//! reporter and the changes of the running step. Plain Rust: no rhai here.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::NativeError;
use crate::output::Reporter;

/// Where the script is: declaring its plan (top level) or running its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The top level runs to declare steps; nothing may contact a server or change anything,
    /// so `--list` is safe by construction.
    Planning,
    Running,
}

pub use crate::decl::{Change, Resource};

pub struct RunState {
    /// Check mode: natives report what they would change. The REPL toggles it (`:check on`).
    check: AtomicBool,
    /// Files natives read and write are confined to this folder.
    pub root: PathBuf,
    pub reporter: Reporter,
    cancel: Arc<AtomicBool>,
    running: AtomicBool,
    changes: Mutex<Vec<Change>>,
    change_count: AtomicU32,
    /// `--diff`: natives show how each change changes its resource.
    diff: AtomicBool,
    /// In check mode: files natives would have written, so later natives can tell what would
    /// follow (a working tree with a planned write would be committed and pushed).
    planned_writes: Mutex<Vec<PathBuf>>,
    /// The REPL drives this run: check mode is left with `:check off`, not `--check`.
    interactive: AtomicBool,
}

impl RunState {
    pub fn new(check: bool, root: PathBuf, reporter: Reporter, cancel: Arc<AtomicBool>) -> Self {
        RunState {
            check: AtomicBool::new(check),
            root,
            reporter,
            cancel,
            running: AtomicBool::new(false),
            changes: Mutex::new(Vec::new()),
            change_count: AtomicU32::new(0),
            diff: AtomicBool::new(false),
            planned_writes: Mutex::new(Vec::new()),
            interactive: AtomicBool::new(false),
        }
    }

    /// The REPL drives this run (hints name its commands).
    pub fn set_interactive(&self) {
        self.interactive.store(true, Ordering::SeqCst);
    }

    /// Check mode: `path` would be written (or deleted).
    pub fn plan_write(&self, path: PathBuf) {
        self.planned_writes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(path);
    }

    /// Check mode: whether a write is planned inside `dir`.
    pub fn writes_planned_in(&self, dir: &std::path::Path) -> bool {
        self.planned_writes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .any(|path| path.starts_with(dir))
    }

    /// Whether natives show their changes' diffs (`--diff`).
    pub fn diff(&self) -> bool {
        self.diff.load(Ordering::SeqCst)
    }

    pub fn set_diff(&self, diff: bool) {
        self.diff.store(diff, Ordering::SeqCst);
    }

    /// Shows how the change just recorded changes its resource (only with `--diff`): a unified
    /// diff, or a line such as `value hidden` for a secret.
    pub fn record_diff(&self, text: &str) {
        if self.diff() && !text.trim().is_empty() {
            self.reporter.diff(text);
        }
    }

    pub fn check(&self) -> bool {
        self.check.load(Ordering::SeqCst)
    }

    pub fn set_check(&self, check: bool) {
        self.check.store(check, Ordering::SeqCst);
    }

    pub fn phase(&self) -> Phase {
        if self.running.load(Ordering::SeqCst) {
            Phase::Running
        } else {
            Phase::Planning
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.running
            .store(phase == Phase::Running, Ordering::SeqCst);
    }

    pub fn cancel_flag(&self) -> &Arc<AtomicBool> {
        &self.cancel
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// The error a native returns when Ctrl-C stopped it.
    pub fn check_cancelled(&self, native: &str) -> Result<(), NativeError> {
        if self.is_cancelled() {
            Err(NativeError::new(format!("{native}: interrupted")))
        } else {
            Ok(())
        }
    }

    /// Natives with side effects (network, files, processes) call this first: the top level of
    /// a script only declares steps.
    pub fn require_step(&self, native: &str) -> Result<(), NativeError> {
        match self.phase() {
            Phase::Running => Ok(()),
            Phase::Planning => Err(NativeError::new(format!(
                "{native} was called at the top level of the script"
            ))
            .with_hint(
                "the top level only declares steps (so --list never touches anything); \
                 move this call into a step(\"...\", || { ... }) body",
            )),
        }
    }

    /// Natives that cannot tell what they would change refuse to run in check mode.
    pub fn refuse_in_check(&self, native: &str, why: &str) -> Result<(), NativeError> {
        if self.check() {
            Err(
                NativeError::new(format!("{native} cannot run in check mode: {why}")).with_hint(
                    if self.interactive.load(Ordering::SeqCst) {
                        "leave check mode with `:check off`, or guard the call with `if !check_mode() { ... }`"
                    } else {
                        "run without --check, or guard the call with `if !check_mode() { ... }`"
                    },
                ),
            )
        } else {
            Ok(())
        }
    }

    /// Records one change (in check mode: one change that would happen) and reports it.
    pub fn record_change(&self, action: &str, resource: Resource) {
        self.reporter.change(action, &resource, self.check());
        self.change_count.fetch_add(1, Ordering::SeqCst);
        let change = Change {
            action: action.to_string(),
            resource,
        };
        match crate::scope::current() {
            // A step running beside others counts its own changes.
            Some(scope) => crate::scope::lock(&scope.changes).push(change),
            None => self
                .changes
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(change),
        }
    }

    /// The changes recorded since the last call (the runner calls this at each step's end).
    pub fn take_changes(&self) -> Vec<Change> {
        if let Some(scope) = crate::scope::current() {
            return std::mem::take(&mut *crate::scope::lock(&scope.changes));
        }
        std::mem::take(
            &mut *self
                .changes
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    /// Sleeps in short slices so Ctrl-C interrupts long waits.
    pub fn sleep(&self, native: &str, duration: Duration) -> Result<(), NativeError> {
        let deadline = std::time::Instant::now() + duration;
        loop {
            self.check_cancelled(native)?;
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(());
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
        }
    }
}

#[cfg(test)]
mod resource_tests {
    use super::Resource;

    #[test]
    fn natives_name_what_they_change_and_scripts_words_are_read() {
        assert_eq!(Resource::command("helm version").text, "`helm version`");
        assert_eq!(
            Resource::reported("write", "glab config for gitlab.local.example.net"),
            Resource::new("glab", "config", "glab config for gitlab.local.example.net")
        );
    }
}
