//! The scope of a step that runs beside others (`concurrently([step(...), ...])` at the top
//! level): what it writes, held until its turn comes (grouped steps print in declaration order,
//! each step's lines together), the state of its step header, and the changes it records. Held
//! per thread; the workers a step starts (`parallel`, `concurrently` inside a step) join it.
//! Outside a group there is no scope, and the reporter writes to the terminal at once.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard};

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
#[derive(Debug, Default)]
pub struct StepScope {
    pub stdout: Mutex<String>,
    pub stderr: Mutex<String>,
    pub line: Mutex<LineState>,
    pub changes: Mutex<Vec<Change>>,
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
}
