//! The error every client returns: a headline naming the resource, an optional hint, a chain of
//! causes, and (for decisions) a kind and the remote status. Callers branch on `kind`, never on
//! the message text; `natives/` turn it into the Rhai-facing error. Where the way out is a call
//! of the caller's own (unseal, log in, pull), the client says so as a [`Remedy`] and the caller
//! words it: the client names no native.

use std::fmt;

/// What went wrong, as far as a caller needs to decide what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The remote says the resource does not exist (HTTP 404, Kubernetes `NotFound`).
    NotFound,
    /// The remote refused a write that conflicts with its state (409, "already taken").
    Conflict,
    /// Credentials missing or refused (401).
    Unauthorized,
    /// Credentials valid but not allowed (403).
    Forbidden,
    /// The remote rejected the request as invalid (400, 422 and other 4xx).
    Invalid,
    /// The remote kept rate-limiting (429) until the retries ran out.
    RateLimited,
    /// The remote answered with a server error (5xx) until the retries ran out.
    Unavailable,
    /// No answer: connection refused or reset, DNS, TLS.
    Transport,
    /// A wait or request ran out of time.
    Timeout,
    /// Ctrl-C or SIGTERM stopped the operation.
    Interrupted,
    /// A program the client runs (helm, git, bao) is not installed.
    ProgramMissing,
    /// Everything local: bad input, a file that cannot be read, a failed program.
    Local,
}

impl ErrorKind {
    /// The kind an HTTP status stands for.
    pub fn from_status(status: u16) -> ErrorKind {
        match status {
            404 | 410 => ErrorKind::NotFound,
            409 => ErrorKind::Conflict,
            401 => ErrorKind::Unauthorized,
            403 => ErrorKind::Forbidden,
            429 => ErrorKind::RateLimited,
            408 | 504 => ErrorKind::Timeout,
            500..=599 => ErrorKind::Unavailable,
            _ => ErrorKind::Invalid,
        }
    }

    /// A short name scripts can compare (`e.kind == "not-found"`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not-found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::Invalid => "invalid",
            ErrorKind::RateLimited => "rate-limited",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Transport => "transport",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::ProgramMissing => "program-missing",
            ErrorKind::Local => "local",
        }
    }
}

/// The way out of an error, as a fact the client knows; a caller words it in its own terms (the
/// runner names its natives), and the error's `hint` says the same in the client's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// OpenBao is sealed; its init file holds the unseal keys.
    Unseal,
    /// OpenBao is not initialised.
    Init,
    /// The OpenBao init file is missing; initialising OpenBao writes it.
    RestoreInitFile,
    /// The KV mount `mount` does not exist.
    EnableKv { mount: String },
    /// A chart was not found: check its pin, or pull it.
    PullChart,
    /// The cached archive at `path` is not the pinned `chart` `version`.
    PullPinnedChart {
        chart: String,
        version: String,
        path: String,
    },
    /// GitLab refused the token (or none was given).
    Login,
    /// A project's group does not exist yet.
    CreateGroup,
    /// The job is still running, so it cannot be retried yet.
    AwaitJob,
    /// The job is not a manual one waiting to be played.
    ListJobs,
    /// The remote branch has commits the working tree lacks.
    PullFirst,
    /// The CA a certificate is signed with does not exist yet.
    CreateCa,
    /// A CI/CD variable's value cannot be masked as it is.
    MaskableValue,
}

/// A client operation, as its errors carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// The client's word for it (`get`, `apply`, `secret write`).
    pub name: &'static str,
    /// What joins a caller's name to the headline: `" "` before a subject, `": "` before a
    /// sentence.
    pub join: &'static str,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClientError {
    pub kind: ErrorKind,
    /// The remote's HTTP status, when there was an answer.
    pub status: Option<u16>,
    pub message: String,
    pub hint: Option<String>,
    pub causes: Vec<String>,
    /// The client operation that failed, when its headline leaves room for the caller's name
    /// for it (`Deployment/web in apps: 404 ...` becomes `kube_get Deployment/web in apps: ...`).
    pub operation: Option<Operation>,
    /// The way out, for a caller that words it itself (`hint` says it in the client's words).
    /// Boxed: an error stays small on the `Err` path of every call.
    pub remedy: Option<Box<Remedy>>,
}

impl ClientError {
    /// A local error (`ErrorKind::Local`); set another kind with `with_kind` or `with_status`.
    pub fn new(message: impl Into<String>) -> Self {
        ClientError {
            kind: ErrorKind::Local,
            status: None,
            message: message.into(),
            hint: None,
            causes: Vec::new(),
            operation: None,
            remedy: None,
        }
    }

    /// Records the way out; `hint` should say it in the client's words.
    pub fn with_remedy(mut self, remedy: Remedy) -> Self {
        self.remedy = Some(Box::new(remedy));
        self
    }

    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// Records the remote's status and the kind it stands for.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self.kind = ErrorKind::from_status(status);
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Marks the error as `operation`'s, its headline joined to a caller's name by `join`.
    pub fn in_operation(mut self, operation: &'static str, join: &'static str) -> Self {
        self.operation = Some(Operation {
            name: operation,
            join,
        });
        self
    }

    /// The headline with the caller's name for the failed operation in front (`name_of` maps
    /// the client's word to it), where the error leaves room for one.
    pub fn named_by(mut self, name_of: impl Fn(&str) -> &str) -> Self {
        if let Some(operation) = self.operation.take() {
            self.message = format!(
                "{}{}{}",
                name_of(operation.name),
                operation.join,
                self.message
            );
        }
        self
    }

    pub fn caused_by(mut self, cause: impl fmt::Display) -> Self {
        self.causes.push(cause.to_string());
        self
    }

    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClientError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds() {
        assert_eq!(ErrorKind::from_status(404), ErrorKind::NotFound);
        assert_eq!(ErrorKind::from_status(409), ErrorKind::Conflict);
        assert_eq!(ErrorKind::from_status(401), ErrorKind::Unauthorized);
        assert_eq!(ErrorKind::from_status(403), ErrorKind::Forbidden);
        assert_eq!(ErrorKind::from_status(400), ErrorKind::Invalid);
        assert_eq!(ErrorKind::from_status(429), ErrorKind::RateLimited);
        assert_eq!(ErrorKind::from_status(503), ErrorKind::Unavailable);
        let error = ClientError::new("gitlab: GET /projects/x -> 404: 404 Project Not Found")
            .with_status(404);
        assert!(error.is_not_found());
        assert_eq!(error.status, Some(404));
        assert!(!ClientError::new("a 404 in the text is not a status").is_not_found());
    }
}
