//! One central error type with named exit codes, and the error that natives raise into scripts.

use std::fmt;
use std::path::PathBuf;

use bprun_clients::error::{ClientError, ErrorKind, Remedy};

/// Process exit codes. Each has a name that bprun prints next to the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything selected ran and finished ok, changed or skipped.
    Success,
    /// A step failed; the journal records where, `--resume` continues from it.
    StepFailed,
    /// The command line was wrong: unknown option, unknown step name, bad script argument.
    Usage,
    /// The script did not compile, or its top level (the plan) failed.
    ScriptError,
    /// A file bprun needs could not be read or written (the script, the journal).
    Io,
    /// Ctrl-C or SIGTERM stopped the run.
    Interrupted,
    /// `--check --detailed-exitcode`: every step ran, and a run would change something (as
    /// `terraform plan -detailed-exitcode`'s 2; bprun's 2 is a usage error).
    ChangesPending,
}

impl ExitCode {
    pub const ALL: [ExitCode; 7] = [
        ExitCode::Success,
        ExitCode::StepFailed,
        ExitCode::Usage,
        ExitCode::ScriptError,
        ExitCode::Io,
        ExitCode::Interrupted,
        ExitCode::ChangesPending,
    ];

    pub fn code(self) -> i32 {
        match self {
            ExitCode::Success => 0,
            ExitCode::StepFailed => 1,
            ExitCode::Usage => 2,
            ExitCode::ScriptError => 3,
            ExitCode::Io => 4,
            ExitCode::ChangesPending => 5,
            ExitCode::Interrupted => 130,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExitCode::Success => "success",
            ExitCode::StepFailed => "step-failed",
            ExitCode::Usage => "usage",
            ExitCode::ScriptError => "script-error",
            ExitCode::Io => "io-error",
            ExitCode::Interrupted => "interrupted",
            ExitCode::ChangesPending => "changes-pending",
        }
    }

    pub fn meaning(self) -> &'static str {
        match self {
            ExitCode::Success => "every selected step finished ok, changed or skipped",
            ExitCode::StepFailed => "a step failed; re-run with --resume to continue from it",
            ExitCode::Usage => "bad command line: unknown option, step name or script argument",
            ExitCode::ScriptError => {
                "the script failed to compile or its top level (the plan) failed"
            }
            ExitCode::Io => "a file bprun needs could not be read or written",
            ExitCode::Interrupted => "stopped by Ctrl-C or SIGTERM; the journal is consistent",
            ExitCode::ChangesPending => {
                "with --check --detailed-exitcode: no step failed, and a run would change something"
            }
        }
    }
}

/// Errors that end a bprun command. Rendering happens in `cli`; each maps to one exit code.
#[derive(Debug)]
pub enum Error {
    Usage {
        message: String,
        hint: Option<String>,
    },
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Already rendered (a script diagnostic or a failed step); only the exit code is left.
    Reported(ExitCode),
}

impl Error {
    pub fn usage(message: impl Into<String>, hint: impl Into<Option<String>>) -> Self {
        Error::Usage {
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Usage { .. } => ExitCode::Usage,
            Error::Io { .. } => ExitCode::Io,
            Error::Reported(code) => *code,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage { message, .. } => f.write_str(message),
            Error::Io {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
            Error::Reported(code) => write!(f, "{}", code.name()),
        }
    }
}

impl std::error::Error for Error {}

/// The error a native raises into a script: a headline naming the resource, an optional `hint:`
/// and a chain of causes (innermost last). Scripts can catch it and read `e.message`, `e.hint`,
/// and for a client's error `e.kind` ("not-found", "conflict", ...) and `e.status` (HTTP).
#[derive(Debug, Clone, PartialEq)]
pub struct NativeError {
    pub message: String,
    pub hint: Option<String>,
    pub causes: Vec<String>,
    /// The client's classification (`ErrorKind::name`), when a client raised it.
    pub kind: Option<&'static str>,
    /// The remote's HTTP status, when there was an answer.
    pub status: Option<u16>,
    /// What the report's label says at the call (default: `failed here`); a check before the
    /// run says so, since nothing failed yet.
    pub label: Option<&'static str>,
}

/// A client's way out in a script's words: the native that takes it.
fn remedy_hint(remedy: &Remedy) -> String {
    match remedy {
        Remedy::Unseal => "OpenBao is sealed: run bao_unseal() (it reads the unseal keys from infra/secrets/openbao-init.json)".to_string(),
        Remedy::Init => "OpenBao is not initialised: run bao_init()".to_string(),
        Remedy::RestoreInitFile => "bao_init() writes it when it initialises OpenBao; restore it from your backup if OpenBao was initialised elsewhere".to_string(),
        Remedy::EnableKv { mount } => format!(
            "enable it with bao_enable_kv(\"{mount}\", 2), or address another mount as `mount:path`"
        ),
        Remedy::PullChart => {
            "check the chart reference and version (infra/VERSIONS.json), or pull it with helm_pull"
                .to_string()
        }
        Remedy::PullPinnedChart { chart, version, path } => format!(
            "the archive is not the pinned {chart} {version}: restore it (git checkout -- {path}) or delete it so helm_pull fetches it again"
        ),
        Remedy::Login => {
            "the token is missing or invalid: set GITLAB_TOKEN or call gitlab_login(token)"
                .to_string()
        }
        Remedy::CreateGroup => "ensure the group first: gitlab_ensure_group".to_string(),
        Remedy::AwaitJob => {
            "wait for it to end (gitlab_wait_pipeline), or cancel it first".to_string()
        }
        Remedy::ListJobs => "gitlab_jobs(project, pipeline) lists the jobs with their status; a manual job shows `manual`".to_string(),
        Remedy::PullFirst => "the remote has commits this working tree lacks: run git_clone_or_pull first (a fast-forward), then push again".to_string(),
        Remedy::CreateCa => "create the CA first: tls_ensure_ca".to_string(),
        Remedy::MaskableValue => "a masked value is one line of at least 8 characters from the Base64 alphabet plus @ : . ~ (use masked: false, or encode it with base64_encode)".to_string(),
    }
}

impl From<ClientError> for NativeError {
    fn from(error: ClientError) -> Self {
        // Clients speak of "the timeout"; a script sets it as an option.
        let hint = match (error.kind, error.hint, &error.remedy) {
            (_, _, Some(remedy)) => Some(remedy_hint(remedy)),
            (ErrorKind::Timeout, Some(hint), None) if hint.contains("the timeout") => Some(
                format!("{hint} (the `timeout` option, in seconds: #{{timeout: 600}})"),
            ),
            (_, hint, None) => hint,
        };
        NativeError {
            message: error.message,
            hint,
            causes: error.causes,
            kind: Some(error.kind.name()),
            status: error.status,
            label: None,
        }
    }
}

impl NativeError {
    pub fn new(message: impl Into<String>) -> Self {
        NativeError {
            message: message.into(),
            hint: None,
            causes: Vec::new(),
            kind: None,
            status: None,
            label: None,
        }
    }

    /// The label under the call in the report, instead of `failed here`.
    pub fn labelled(mut self, label: &'static str) -> Self {
        self.label = Some(label);
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn caused_by(mut self, cause: impl fmt::Display) -> Self {
        self.causes.push(cause.to_string());
        self
    }
}

impl fmt::Display for NativeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NativeError {}

/// The signal `skip(reason)` raises; the runner turns it into a `skipped` step.
#[derive(Debug, Clone)]
pub struct StepSkip(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_remedy_is_worded_as_the_native_that_takes_it() {
        let refused = ClientError::new("gitlab: GET /user -> 401: 401 Unauthorized")
            .with_status(401)
            .with_hint("the token is missing or invalid: set GITLAB_TOKEN to a valid one")
            .with_remedy(Remedy::Login);
        let native = NativeError::from(refused);
        assert_eq!(
            native.hint.as_deref(),
            Some("the token is missing or invalid: set GITLAB_TOKEN or call gitlab_login(token)")
        );
        assert_eq!(
            (native.kind, native.status),
            (Some("unauthorized"), Some(401))
        );
        // Without a remedy the client's own hint is the native's.
        let plain = ClientError::new("x").with_hint("check the path");
        assert_eq!(
            NativeError::from(plain).hint.as_deref(),
            Some("check the path")
        );
    }
}
