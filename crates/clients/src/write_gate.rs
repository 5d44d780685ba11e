//! Holding remote writes back until an earlier piece of work has finished, while reads go on.
//!
//! A script that provisions shared-code before the other apps (their CI files include its
//! templates) needs shared-code's writes to land first, but not its reads: on a re-run, which
//! is all reads, every project can be read at once. The runner gives the threads working on the
//! later items a gate (a thread-local, so no signature changes); every remote write (a GitLab
//! POST/PUT/DELETE, a git push, an OpenBao write, a command run in a pod) passes
//! [`before_remote_write`] first, which waits until the gate opens, that is until the first item
//! finished. Server-side applies are not held: a step's Kubernetes objects are its own, and
//! holding them would hold the reads after them.

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::error::ClientError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Closed,
    Open,
    /// The work it waited for failed (its description): the writes behind it are not sent.
    Failed(String),
}

/// Closed until [`WriteGate::open`] or [`WriteGate::fail`]; shared by the threads it holds back.
#[derive(Debug)]
pub struct WriteGate {
    /// What it waits for, for messages (`shared-code`).
    awaited: String,
    state: Mutex<State>,
    changed: Condvar,
    /// The gate of the thread that made this one (nested work): passed first.
    outer: Option<Arc<WriteGate>>,
}

impl WriteGate {
    /// A closed gate waiting for `awaited`, inside the current thread's gate if it has one.
    pub fn new(awaited: impl Into<String>) -> Arc<WriteGate> {
        Arc::new(WriteGate {
            awaited: awaited.into(),
            state: Mutex::new(State::Closed),
            changed: Condvar::new(),
            outer: current(),
        })
    }

    /// The awaited work succeeded: held writes go ahead.
    pub fn open(&self) {
        self.settle(State::Open);
    }

    /// The awaited work failed: held writes fail without being sent.
    pub fn fail(&self, reason: impl Into<String>) {
        self.settle(State::Failed(reason.into()));
    }

    fn settle(&self, state: State) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
        self.changed.notify_all();
    }

    /// Waits while closed (`cancelled` is asked every 100 ms).
    fn pass(&self, what: &str, cancelled: &dyn Fn() -> bool) -> Result<(), ClientError> {
        if let Some(outer) = &self.outer {
            outer.pass(what, cancelled)?;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match &*state {
                State::Open => return Ok(()),
                State::Failed(reason) => {
                    return Err(ClientError::new(format!(
                        "{what}: not sent, because {} failed first ({reason})",
                        self.awaited
                    ))
                    .with_hint(format!(
                        "writes wait for {} to finish; fix its failure and re-run",
                        self.awaited
                    )));
                }
                State::Closed if cancelled() => {
                    return Err(ClientError::new(format!(
                        "{what}: interrupted while waiting for {}",
                        self.awaited
                    ))
                    .with_kind(crate::error::ErrorKind::Interrupted));
                }
                State::Closed => {
                    state = self
                        .changed
                        .wait_timeout(state, Duration::from_millis(100))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<WriteGate>>> = const { RefCell::new(None) };
}

/// The gate the current thread's writes pass (to hand on to threads it starts).
pub fn current() -> Option<Arc<WriteGate>> {
    CURRENT.with(|current| current.borrow().clone())
}

/// Runs `work` with `gate` as this thread's gate, restoring the previous one afterwards.
pub fn with_gate<T>(gate: Option<Arc<WriteGate>>, work: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|current| current.replace(gate));
    let result = work();
    CURRENT.with(|current| *current.borrow_mut() = previous);
    result
}

/// Called before every remote write (`what` names it, as `gitlab: POST /projects`): waits
/// until this thread's gate, if any, opens.
pub fn before_remote_write(what: &str, cancelled: &dyn Fn() -> bool) -> Result<(), ClientError> {
    match current() {
        Some(gate) => gate.pass(what, cancelled),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_waits_for_the_gate_and_fails_when_the_awaited_work_failed() {
        assert!(
            before_remote_write("w", &|| false).is_ok(),
            "no gate, no wait"
        );
        let gate = WriteGate::new("shared-code");
        let waiting = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                with_gate(Some(gate), || before_remote_write("w", &|| false))
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiting.is_finished(), "a closed gate holds the write");
        gate.open();
        assert!(waiting.join().expect("thread").is_ok());

        let failed = WriteGate::new("shared-code");
        failed.fail("push refused");
        let error = with_gate(Some(failed), || {
            before_remote_write("gitlab: POST /projects", &|| false)
        })
        .expect_err("a failed gate refuses");
        assert_eq!(
            error.message,
            "gitlab: POST /projects: not sent, because shared-code failed first (push refused)"
        );
        assert!(current().is_none(), "the previous gate is restored");

        let closed = WriteGate::new("shared-code");
        let error =
            with_gate(Some(closed), || before_remote_write("w", &|| true)).expect_err("cancelled");
        assert_eq!(
            error.message,
            "w: interrupted while waiting for shared-code"
        );
    }
}
