//! The reconcile contract every client keeps: an operation takes a [`Mode`] and returns an
//! [`Outcome`]: its result, the changes it made (or, in check mode, would make) and the warnings
//! worth telling the operator. Callers record the changes; the client never prints.

/// Whether an operation may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read, then write what differs.
    Apply,
    /// Read only (or ask the server for a dry run); report what `Apply` would change.
    Check,
}

impl Mode {
    pub fn from_check(check: bool) -> Mode {
        if check { Mode::Check } else { Mode::Apply }
    }

    pub fn writes(self) -> bool {
        self == Mode::Apply
    }
}

/// One change, as the journal and the recap show it (`create` `group blueprint-apps (internal)`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Change {
    pub action: &'static str,
    /// What kind of thing changed (`group`, `project`, `CI variable`, `Deployment`, ...).
    pub kind: String,
    /// Its name.
    pub name: String,
    /// How the journal shows it.
    pub resource: String,
    /// How it changes, for `--diff` (hidden values never shown).
    pub detail: Option<Detail>,
}

/// How a change changes its resource, for `--diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// Shown as it stands (`value: "a" -> "b"`, `value hidden`).
    Line(String),
    /// Texts before and after, each shown as a unified diff, one after the other.
    Diffs(Vec<TextDiff>),
}

/// One text before and after a change (absent: it did not exist, or no longer does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextDiff {
    /// What the diff is headed with.
    pub name: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// The result of a reconciling operation.
#[derive(Debug, Clone)]
pub struct Outcome<T> {
    pub value: T,
    pub changes: Vec<Change>,
    pub warnings: Vec<String>,
}

impl<T> Outcome<T> {
    pub fn unchanged(value: T) -> Outcome<T> {
        Outcome {
            value,
            changes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The outcome of an operation that made one change.
    pub fn single(value: T, change: Change) -> Outcome<T> {
        Outcome {
            value,
            changes: vec![change],
            warnings: Vec::new(),
        }
    }

    pub fn changed_by(
        value: T,
        action: &'static str,
        kind: impl Into<String>,
        name: impl Into<String>,
        resource: impl Into<String>,
    ) -> Outcome<T> {
        Outcome {
            value,
            changes: vec![Change {
                action,
                kind: kind.into(),
                name: name.into(),
                resource: resource.into(),
                detail: None,
            }],
            warnings: Vec::new(),
        }
    }

    pub fn warn(mut self, warning: impl Into<String>) -> Outcome<T> {
        self.warnings.push(warning.into());
        self
    }

    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }
}
