//! The scope of a step that runs beside others (`concurrently([step(...), ...])` at the top
//! level): what it writes, held until its turn comes (grouped steps print in declaration order,
//! each step's lines together), the state of its step header, and the changes it records. Held
//! per thread; the workers a step starts (`parallel`, `concurrently` inside a step) join it.
//! Outside a group there is no scope, and the reporter writes to the terminal at once.

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::decl::Change;

/// Where the reporter is on the current line, for one step or for the whole run.
#[derive(Debug, Default)]
pub struct LineState {
    /// A step header printed without its newline, waiting for the status.
    pub open_header: bool,
    /// The running step, for JSON events and indentation.
    pub step: Option<String>,
}

/// What one grouped step has written and recorded so far.
#[derive(Debug)]
pub struct StepScope {
    pub stdout: Mutex<String>,
    pub stderr: Mutex<String>,
    /// The step's line state; `None` while a thread of the step holds it (see [`LineHeld`]).
    line: Mutex<Option<LineState>>,
    line_returned: Condvar,
    pub changes: Mutex<Vec<Change>>,
}

impl Default for StepScope {
    fn default() -> Self {
        StepScope {
            stdout: Mutex::default(),
            stderr: Mutex::default(),
            line: Mutex::new(Some(LineState::default())),
            line_returned: Condvar::new(),
            changes: Mutex::default(),
        }
    }
}

/// A step's line state, held by one thread at a time (the step's `parallel` workers share it)
/// and given back when dropped: a lock that owns its scope, which a thread-local cannot lend.
pub struct LineHeld {
    scope: Arc<StepScope>,
    state: Option<LineState>,
}

impl LineHeld {
    /// Waits until no other thread of the step holds its line state, and takes it.
    pub fn take(scope: Arc<StepScope>) -> LineHeld {
        let mut slot = lock(&scope.line);
        let state = loop {
            if let Some(state) = slot.take() {
                break state;
            }
            slot = scope
                .line_returned
                .wait(slot)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        };
        drop(slot);
        LineHeld {
            scope,
            state: Some(state),
        }
    }
}

impl std::ops::Deref for LineHeld {
    type Target = LineState;
    fn deref(&self) -> &LineState {
        self.state.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for LineHeld {
    fn deref_mut(&mut self) -> &mut LineState {
        self.state.as_mut().expect("held until dropped")
    }
}

impl Drop for LineHeld {
    fn drop(&mut self) {
        *lock(&self.scope.line) = self.state.take();
        self.scope.line_returned.notify_one();
    }
}

/// Locks a mutex of a scope; a panic elsewhere leaves what was written readable.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<StepScope>>> = const { RefCell::new(None) };
}

/// The scope of the step this thread works for, if it runs in a group.
pub fn current() -> Option<Arc<StepScope>> {
    CURRENT.with(|current| current.borrow().clone())
}

/// Runs `work` in `scope` on this thread, and restores the thread's scope afterwards.
pub fn within<R>(scope: Option<Arc<StepScope>>, work: impl FnOnce() -> R) -> R {
    let before = CURRENT.with(|current| current.replace(scope));
    let result = work();
    CURRENT.with(|current| *current.borrow_mut() = before);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_holds_for_the_work_and_is_restored_after_it() {
        assert!(current().is_none());
        let scope = Arc::new(StepScope::default());
        within(Some(scope.clone()), || {
            assert!(current().is_some_and(|found| Arc::ptr_eq(&found, &scope)));
            within(None, || assert!(current().is_none()));
            assert!(current().is_some());
        });
        assert!(current().is_none());
    }

    #[test]
    fn the_threads_of_one_step_share_its_line_state_one_at_a_time() {
        let scope = Arc::new(StepScope::default());
        {
            let mut held = LineHeld::take(scope.clone());
            held.step = Some("Redis".to_string());
            held.open_header = true;
        }
        let waiting = {
            let held = LineHeld::take(scope.clone());
            let scope = scope.clone();
            let waiter = std::thread::spawn(move || LineHeld::take(scope).step.clone());
            // The other thread waits while this one holds the state, then sees what it left.
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(held.step.as_deref(), Some("Redis"));
            waiter
        };
        assert_eq!(waiting.join().ok().flatten().as_deref(), Some("Redis"));
    }
}
