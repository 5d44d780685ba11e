//! The natives' half of the reconcile contract: check mode goes to the client as a `Mode`, and
//! what the client's `Outcome` reports comes back into the run once, here.

use crate::engine::Session;
use crate::output::Level;
use crate::state::Resource;
use bprun_clients::reconcile::{Detail, Mode, Outcome};

/// The run's mode: `Check` under `--check`.
pub(crate) fn mode(session: &Session) -> Mode {
    Mode::from_check(session.state.check())
}

/// Records the outcome's changes (and their `--diff`), logs its warnings; returns its value and
/// whether anything changed.
pub(crate) fn settle<T>(session: &Session, outcome: Outcome<T>) -> (T, bool) {
    for warning in &outcome.warnings {
        session.state.reporter.log(Level::Warn, warning);
    }
    for change in &outcome.changes {
        session.state.record_change(
            change.action,
            Resource::new(&change.kind, &change.name, &change.resource),
        );
        match &change.detail {
            Some(Detail::Line(line)) => session.state.record_diff(line),
            // Only `--diff` shows them: no diff computed otherwise.
            Some(Detail::Diffs(diffs)) if session.state.diff() => {
                let text: String = diffs
                    .iter()
                    .map(|diff| {
                        crate::output::unified_diff(
                            &diff.name,
                            diff.before.as_deref(),
                            diff.after.as_deref(),
                        )
                    })
                    .collect();
                session.state.record_diff(&text);
            }
            _ => {}
        }
    }
    let changed = outcome.changed();
    (outcome.value, changed)
}
