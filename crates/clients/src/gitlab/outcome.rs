//! What a reconciling operation did: its result, the changes it made (or, in check mode, would
//! make) and the warnings worth telling the operator. Callers record the changes; the client
//! never prints.

/// Whether an operation may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read, then write what differs.
    Apply,
    /// Read only; report what `Apply` would change.
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
    /// What kind of thing changed (`group`, `project`, `CI variable`, ...) and its name.
    pub kind: &'static str,
    pub name: String,
    /// How the journal shows it.
    pub resource: String,
    /// How it changes, for `--diff` (`value: "a" -> "b"`; hidden values never shown).
    pub detail: Option<String>,
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

    pub fn changed_by(
        value: T,
        action: &'static str,
        kind: &'static str,
        name: impl Into<String>,
        resource: impl Into<String>,
    ) -> Outcome<T> {
        Outcome {
            value,
            changes: vec![Change {
                action,
                kind,
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
