//! The plain declarations the runner core shares: what a change touched (`Resource`), a step
//! the script declared (`StepDecl`), a script parameter (`ParamDecl`). They depend on nothing
//! else in the crate, so the state, the output and the engine can all name them without a loop.

use rhai::{Dynamic, FnPtr, Position};

/// What a change touched: its kind and name, as `--json`'s `change` events carry them, and the
/// text the journal and the step lines show (`group blueprint-apps (internal)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: String,
    pub name: String,
    pub text: String,
}

impl Resource {
    pub fn new(kind: impl Into<String>, name: impl Into<String>, text: impl Into<String>) -> Self {
        Resource {
            kind: kind.into(),
            name: name.into(),
            text: text.into(),
        }
    }

    /// A resource shown as `KIND NAME`.
    pub fn named(kind: &str, name: &str) -> Self {
        Resource::new(kind, name, format!("{kind} {name}"))
    }

    /// A command a native ran, shown in backticks.
    pub fn command(line: &str) -> Self {
        Resource::new("command", line, format!("`{line}`"))
    }

    /// What a script reported itself (`report_change`): its free text, the kind and name read
    /// from it (`KIND NAME ...`).
    pub fn reported(action: &str, text: &str) -> Self {
        let (kind, name) = resource_kind_and_name(action, text);
        Resource::new(kind, name, text)
    }
}

/// One change a native recorded: what it did to which resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub action: String,
    pub resource: Resource,
}

/// Kinds of resources whose names are more than one word, as natives describe them.
const MULTI_WORD_KINDS: &[&str] = &[
    "personal access token",
    "helm release",
    "CI variable",
    "latest version of secret",
    "all versions of secret",
    "kv version",
];

/// The kind and name of a change a script reported in its own words (`report_change`), for
/// `--json`'s `change` events: `KIND NAME [detail]` (`project blueprint-apps/demo`,
/// `helm release gitlab/gitlab from ... (...)`), a path (`URL into TREE`, `TREE (commit)`), whose
/// kind comes from the action, or a command line in backticks. Natives give theirs as a
/// [`crate::state::Resource`].
pub fn resource_kind_and_name(action: &str, resource: &str) -> (String, String) {
    let resource = resource.trim();
    let first_word = |text: &str| {
        text.split_whitespace()
            .next()
            .unwrap_or("")
            .trim_matches(|c| c == '"' || c == '\'')
            .to_string()
    };
    if let Some(command) = resource.strip_prefix('`') {
        let line = command.split('`').next().unwrap_or(command);
        return ("command".to_string(), line.to_string());
    }
    if let Some(kind) = MULTI_WORD_KINDS
        .iter()
        .find(|kind| resource.starts_with(&format!("{kind} ")))
    {
        return (kind.to_string(), first_word(&resource[kind.len()..]));
    }
    let first = first_word(resource);
    // Kubernetes objects: `Kind/name in namespace` (crates/clients/src/kube.rs `display`).
    if let Some((kind, name)) = first.split_once('/')
        && kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric())
        && !name.contains('/')
    {
        let namespace = resource
            .split_once(" in ")
            .map(|(_, namespace)| first_word(namespace));
        let name = match namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_string(),
        };
        return (kind.to_string(), name);
    }
    let looks_like_a_path = first.contains('/') || first.contains("://") || first.starts_with('.');
    if !looks_like_a_path {
        let rest = resource.split_once(' ').map_or("", |(_, rest)| rest);
        return (first, first_word(rest));
    }
    let kind = match action {
        "clone" | "pull" | "commit and push" => "working tree",
        "sync" => "directory",
        _ => "path",
    };
    // `URL into TREE`: the tree is what changed.
    let name = match resource.split_once(" into ") {
        Some((_, tree)) => first_word(tree),
        None => first,
    };
    (kind.to_string(), name)
}

/// A step declared by the script's top level.
#[derive(Clone)]
pub struct StepDecl {
    pub name: String,
    pub body: FnPtr,
    pub position: Position,
    pub source: Option<String>,
    /// Runs whatever `--only`, `--from` or `--resume` select (only `--skip NAME` leaves it
    /// out): for steps later steps depend on, such as logging in.
    pub always: bool,
    /// What to look at when the step fails (the seed's failure mapping), shown after its error.
    pub on_failure: Option<String>,
    /// Steps whose work this one needs (`needs: [...]`): the plan warns when one runs later.
    pub needs: Vec<String>,
    /// A failure is reported and the run goes on with the next step (it still exits 1):
    /// `keep_going: true`, and every `check_row`.
    pub keep_going: bool,
    /// For a `check_row`: what the row expects to find (its body returns what it found).
    pub expected: Option<String>,
    /// Labels `--tags` and `--skip-tags` select by (`tags: ["gitlab"]`).
    pub tags: Vec<String>,
    /// The group of steps it runs together with (`concurrently([step(...), ...])` at the top
    /// level): the first member's index and the group's bound on steps at a time.
    pub group: Option<StepGroup>,
}

/// Steps declared to run together: they start at once (at most `limit` at a time) and their
/// lines print in declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepGroup {
    /// The index of the group's first step among the declared steps.
    pub first: usize,
    pub limit: usize,
    /// The other steps' remote writes wait until the first step has succeeded (their reads
    /// do not), and are not sent when it failed.
    pub writes_after_first: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A flag: `--destroy` (or `--destroy=false`).
    Bool,
    Int,
    String,
    /// Repeatable: `--tag a --tag b` gives `["a", "b"]`.
    List,
}

impl ParamKind {
    pub fn parse(text: &str) -> Option<ParamKind> {
        match text {
            "bool" => Some(ParamKind::Bool),
            "int" => Some(ParamKind::Int),
            "string" => Some(ParamKind::String),
            "list" => Some(ParamKind::List),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ParamKind::Bool => "bool",
            ParamKind::Int => "int",
            ParamKind::String => "string",
            ParamKind::List => "list",
        }
    }

    /// What `--help` shows after the flag.
    pub fn placeholder(self) -> &'static str {
        match self {
            ParamKind::Bool => "",
            ParamKind::Int => " N",
            ParamKind::String => " TEXT",
            ParamKind::List => " TEXT...",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ParamDecl {
    /// The key in `args` (`smoke_timeout`); the flag is `--smoke-timeout`.
    pub name: String,
    pub kind: ParamKind,
    pub default: Option<Dynamic>,
    pub help: String,
}

impl ParamDecl {
    pub fn flag(&self) -> String {
        format!("--{}", self.name.replace('_', "-"))
    }

    /// The two columns of `--help`: `--smoke-timeout N` and `Seconds ... (default: 600)`.
    pub fn help_columns(&self) -> (String, String) {
        let default = match &self.default {
            // A flag's false needs no mention.
            Some(value) if !value.is_unit() && value.as_bool() != Ok(false) => {
                format!(" (default: {value})")
            }
            _ => String::new(),
        };
        (
            format!("{}{}", self.flag(), self.kind.placeholder()),
            format!("{}{default}", self.help),
        )
    }

    /// One line of `--help`: `--smoke-timeout N  Seconds ... (default: 600)`.
    pub fn help_line(&self) -> String {
        let (flag, help) = self.help_columns();
        format!("{flag}  {help}")
    }
}
