//! `bprun repl`: an interactive session on the same engine, natives, configuration, check mode
//! and redaction as scripts. One scope persists across inputs; `fn` definitions stay.

use rhai::{AST, Dynamic, Engine, EvalAltResult, Scope};
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::engine::{self, Session, lock};
use crate::error::{Error, ExitCode};
use crate::natives::convert::{Secrets, to_json};
use crate::output::{Format, Reporter};
use crate::state::{Phase, RunState};
use bprun_clients::secret::Secret;

/// Results longer than this many lines are cut, with a note.
pub const MAX_OUTPUT_LINES: usize = 200;
/// The prompt while an input continues on further lines.
const CONTINUATION_PROMPT: &str = "   ...> ";
/// Said when an empty line or Ctrl-C drops an unfinished input.
const ABANDONED: &str = "(unfinished input abandoned)";
/// The name inputs are shown by in diagnostics.
const SOURCE: &str = "<repl>";
const COMMANDS: &[(&str, &str)] = &[
    (
        ":help",
        ":help [name]      this list, or a native's documentation and example",
    ),
    (
        ":functions",
        ":functions [text] natives whose name contains text",
    ),
    (":vars", ":vars             the variables in scope"),
    (
        ":check",
        ":check on|off     check mode: natives report what they would change",
    ),
    (
        ":save",
        ":save FILE [N..M] write the session's inputs (or those numbered N to M) to FILE as a step",
    ),
    (
        ":history",
        ":history          the inputs that ran, numbered (for :save FILE N..M)",
    ),
    (
        ":reveal",
        ":reveal EXPR      show a secret's plain value once (never kept in the history)",
    ),
    (
        ":json",
        ":json             switch results between readable and raw JSON",
    ),
    (
        ":run",
        ":run SCRIPT [ARGS] run a script as `bprun SCRIPT ARGS` would (with --check under :check on)",
    ),
    (":quit", ":quit             leave (Ctrl-D does the same)"),
];

#[derive(Debug, Clone, Default)]
pub struct ReplOptions {
    pub check: bool,
    pub load: Option<PathBuf>,
    /// Under `--rehearse`: the repository copy the rehearsal platform works on, where `:run`
    /// runs scripts (the checkout is never written).
    pub rehearsal_copy: Option<PathBuf>,
}

/// Token-looking literals that must never reach the history file.
const TOKEN_PREFIXES: &[&str] = &[
    "glpat-",
    "glrt-",
    "gldt-",
    "glptt-",
    "glsoat-",
    "hvs.",
    "hvb.",
    "ghp_",
    "github_pat_",
];

/// Natives whose map argument carries values to store as secrets: a string literal in it is
/// one.
const SECRET_WRITERS: &[&str] = &["bao_write", "kube_secret_write", "gitlab_set_variables"];

/// True when a line holds a live secret value, something that looks like a token, or a literal
/// secret: `secret("...")`, or a string literal among the values passed to a native that stores
/// secrets (`bao_write("app/db", #{password: "..."})`).
pub fn holds_secret(line: &str) -> bool {
    if bprun_clients::secret::scrub(line) != line {
        return true;
    }
    if literal_secret(line) {
        return true;
    }
    if TOKEN_PREFIXES.iter().any(|prefix| line.contains(prefix)) {
        return true;
    }
    // OpenBao service tokens: `s.` followed by 24 alphanumerics.
    line.match_indices("s.").any(|(index, _)| {
        let rest = &line[index + 2..];
        let run = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .count();
        run >= 24 && (index == 0 || !line[..index].ends_with(|c: char| c.is_ascii_alphanumeric()))
    })
}

/// `secret("...")`, or a string literal in a map or array after a call of a `SECRET_WRITERS`
/// native (its path, the first argument, is not a value).
fn literal_secret(line: &str) -> bool {
    let calls = |name: &str| -> Vec<usize> {
        line.match_indices(&format!("{name}("))
            .filter(|(index, _)| {
                !line[..*index].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
            .map(|(index, _)| index + name.len() + 1)
            .collect()
    };
    if calls("secret")
        .into_iter()
        .any(|after| line[after..].trim_start().starts_with(['"', '`']))
    {
        return true;
    }
    SECRET_WRITERS.iter().any(|name| {
        calls(name).into_iter().any(|after| {
            let rest = &line[after..];
            rest.find(['#', '['])
                .is_some_and(|start| rest[start..].contains(['"', '`']))
        })
    })
}

/// The history file: `BPRUN_HISTORY`, else `$XDG_STATE_HOME/bprun/history`, else
/// `~/.local/state/bprun/history`.
fn history_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BPRUN_HISTORY") {
        return Some(PathBuf::from(path));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(state.join("bprun/history"))
}

struct ReplHelper {
    /// Natives, script functions, variables and commands, refreshed after every input.
    words: Arc<Mutex<Vec<String>>>,
    /// Each native's fullest signature, shown in the list of candidates.
    signatures: std::collections::HashMap<String, String>,
}

impl Completer for ReplHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_alphanumeric() || *c == '_' || *c == ':')
            .last()
            .map(|(index, _)| index)
            .unwrap_or(pos);
        let word = &before[start..];
        if word.is_empty() {
            return Ok((pos, Vec::new()));
        }
        let words = lock(&self.words);
        let mut candidates: Vec<Pair> = words
            .iter()
            .filter(|candidate| candidate.starts_with(word))
            .map(|candidate| Pair {
                display: self
                    .signatures
                    .get(candidate)
                    .cloned()
                    .unwrap_or_else(|| candidate.clone()),
                replacement: candidate.clone(),
            })
            .collect();
        candidates.dedup_by(|a, b| a.replacement == b.replacement);
        Ok((start, candidates))
    }
}

impl Hinter for ReplHelper {
    type Hint = String;
}

impl Highlighter for ReplHelper {}

/// Continuation is decided in the read loop (with its own prompt), not by the line editor.
impl Validator for ReplHelper {}

impl Helper for ReplHelper {}

/// True when `input` stops in the middle: the parser reports, at the very end of the input, a
/// missing closing brace, bracket or parenthesis, a missing `;` inside an open block, an
/// unexpected end, or a string that a further line can still close (a backtick string, or a
/// `"` string whose line ends in `\`).
pub fn incomplete(parser: &Engine, input: &str) -> bool {
    use rhai::{LexError, ParseErrorType};
    let Err(error) = parser.compile(input) else {
        return false;
    };
    let (depth, quote) = open_brackets(input);
    let at_end = {
        let lines = input.split('\n').count();
        let last = input.rsplit('\n').next().unwrap_or("").chars().count();
        let position = error.position();
        match (position.line(), position.position()) {
            (Some(line), Some(column)) => line > lines || (line == lines && column > last),
            (Some(line), None) => line >= lines,
            _ => true,
        }
    };
    match error.err_type() {
        ParseErrorType::BadInput(LexError::UnterminatedString) => {
            quote == Some('`') || (quote == Some('"') && input.ends_with('\\'))
        }
        ParseErrorType::UnexpectedEOF => at_end,
        ParseErrorType::MissingToken(token, _) => {
            at_end && depth > 0 && matches!(token.as_str(), "}" | ")" | "]" | ";" | ",")
        }
        _ => false,
    }
}

/// Opening minus closing brackets outside strings and `//` comments, and the quote of a string
/// left open at the end.
fn open_brackets(input: &str) -> (i64, Option<char>) {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut comment = false;
    let mut previous = ' ';
    for c in input.chars() {
        if comment {
            if c == '\n' {
                comment = false;
            }
            previous = c;
            continue;
        }
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '/' if previous == '/' => comment = true,
                '"' | '`' | '\'' => quote = Some(c),
                '{' | '(' | '[' => depth += 1,
                '}' | ')' | ']' => depth -= 1,
                _ => {}
            },
        }
        previous = c;
    }
    (depth, quote)
}

/// A value in plain text, secrets included: a `Secret` or a string as it is, the rest as JSON.
fn revealed(value: &Dynamic) -> String {
    if let Some(secret) = value.read_lock::<Secret>() {
        return secret.reveal().to_string();
    }
    if value.is_string() {
        return value.to_string();
    }
    if value.is_unit() {
        return "()".into();
    }
    match to_json(value, Secrets::Reveal) {
        Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_default(),
        Err(_) => format!("{value:?}"),
    }
}

/// Whether a `()` result is worth showing: the input ends in an expression (no `;`), not a
/// declaration, an assignment or a `print`/`debug` that showed its own output.
fn shows_unit(ast: &AST, input: &str) -> bool {
    use rhai::Stmt;
    if input.trim_end().ends_with(';') {
        return false;
    }
    match ast.statements().last() {
        None => false,
        Some(Stmt::Var(..) | Stmt::Import(..) | Stmt::Export(..) | Stmt::Noop(..)) => false,
        Some(Stmt::Assignment(..)) => false,
        Some(Stmt::FnCall(call, _)) => !matches!(call.name.as_str(), "print" | "debug"),
        Some(_) => true,
    }
}

/// A property read on `()` (`bao_read(...)` of a missing path, then `.token`): Rhai says only
/// that `()` has no getter; say what that usually means. Rhai gives this case no kind of its own
/// (an `ErrorDotExpr`), so its type name in the message is what tells it apart.
fn unit_property_hint(error: &EvalAltResult) -> Option<String> {
    let mut inner = error;
    while let EvalAltResult::ErrorInFunctionCall(_, _, next, _)
    | EvalAltResult::ErrorInModule(_, next, _) = inner
    {
        inner = next;
    }
    let EvalAltResult::ErrorDotExpr(message, _) = inner else {
        return None;
    };
    if !message.ends_with("type '()'") {
        return None;
    }
    let property = message
        .split('\'')
        .nth(1)
        .map(|name| format!("`.{name}`"))
        .unwrap_or_else(|| "the property".into());
    Some(format!(
        "the value before {property} was `()`, which has no properties: most likely the read found nothing (bao_read of a missing path, kube_get of an absent object return `()`); check with `if value == () {{ ... }}`"
    ))
}

/// A value for the terminal: strings as they are, arrays of maps as a table, the rest as
/// indented JSON; `Secret`s as `***`. Long output is cut with a note.
pub fn render_value(value: &Dynamic, json: bool) -> Option<String> {
    if value.is_unit() {
        return None;
    }
    let objects = match (json, value.is_array()) {
        (false, true) => to_json(value, Secrets::Redact)
            .ok()
            .and_then(|listed| listed.as_array().cloned())
            .filter(|items| crate::kube_table::all_objects(items)),
        _ => None,
    };
    let text = if value.is_string() && !json {
        value.to_string()
    } else if let Some(secret) = value.read_lock::<Secret>() {
        crate::values::secret_text(&secret)
    } else if let Some(objects) = objects {
        // As `kubectl get` lists them (a whole object is one `[index]` away).
        crate::kube_table::render(&objects, std::time::SystemTime::now())
    } else if let (Some(table), false) = (
        value
            .read_lock::<rhai::Array>()
            .and_then(|items| table(&items)),
        json,
    ) {
        table
    } else {
        match to_json(value, Secrets::Redact) {
            Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_default(),
            Err(_) => format!("{value:?}"),
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    let text = if lines.len() > MAX_OUTPUT_LINES {
        format!(
            "{}\n... {} more lines (assign the result to a variable and look at parts of it)",
            lines[..MAX_OUTPUT_LINES].join("\n"),
            lines.len() - MAX_OUTPUT_LINES
        )
    } else {
        text
    };
    Some(bprun_clients::secret::scrub(&text))
}

/// An array of maps as a table of their scalar fields (at most 8 columns of 40 characters).
fn table(items: &rhai::Array) -> Option<String> {
    if items.is_empty() || !items.iter().all(|item| item.is_map()) {
        return None;
    }
    let rows: Vec<rhai::Map> = items
        .iter()
        .filter_map(|item| item.read_lock::<rhai::Map>().map(|m| m.clone()))
        .collect();
    let mut columns: Vec<String> = Vec::new();
    for row in &rows {
        for (key, value) in row {
            let scalar = value.is_string()
                || value.is_int()
                || value.is_float()
                || value.is_bool()
                || value.is_unit()
                || value.is::<Secret>();
            if scalar && !columns.contains(&key.to_string()) && columns.len() < 8 {
                columns.push(key.to_string());
            }
        }
    }
    if columns.is_empty() {
        return None;
    }
    // Each cell's text once: cut at 40 characters, and whether any was.
    let mut cut = false;
    let mut lines = vec![columns.clone()];
    for row in &rows {
        lines.push(
            columns
                .iter()
                .map(|column| {
                    let text = match row.get(column.as_str()) {
                        None => String::new(),
                        Some(value) if value.is_unit() => String::new(),
                        Some(value) => crate::values::display(value),
                    };
                    if text.chars().count() > 40 {
                        cut = true;
                        format!("{}...", text.chars().take(37).collect::<String>())
                    } else {
                        text
                    }
                })
                .collect(),
        );
    }
    let mut out = vec![crate::text::aligned(&lines, "  ")];
    if cut {
        out.push(
            "(cells cut at 40 characters; :json shows whole values, or index the result: x[0].field)"
                .to_string(),
        );
    }
    Some(out.join("\n"))
}

/// An input that ran, as `:save` writes it.
struct SavedInput {
    text: String,
    kind: SavedKind,
}

/// Where `:save` puts an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SavedKind {
    /// Named function definitions: the top level of the script (Rhai allows them nowhere else).
    Functions,
    /// Anything else (closures included): inside the step, with its `;`.
    Body,
    /// Typed under `:check on`: it only planned, so it is saved commented out.
    Planned,
    /// It holds a secret value: only a comment saying so is saved.
    Secret,
}

impl SavedKind {
    fn of(ast: &AST, text: &str, check: bool) -> SavedKind {
        if holds_secret(text) {
            return SavedKind::Secret;
        }
        // A closure compiles into an anonymous function: it stays where it was typed.
        let named = ast.iter_functions().any(|f| !f.name.starts_with("anon$"));
        if named && ast.statements().is_empty() {
            return SavedKind::Functions;
        }
        if check {
            return SavedKind::Planned;
        }
        SavedKind::Body
    }
}

struct Repl {
    session: Arc<Session>,
    engine: Engine,
    scope: Scope<'static>,
    functions: AST,
    /// The inputs that ran successfully, for `:save`.
    history: Vec<SavedInput>,
    json: bool,
    words: Arc<Mutex<Vec<String>>>,
    natives: Vec<String>,
    rehearsal_copy: Option<PathBuf>,
    /// The engine's signatures, read once: every input is checked against them.
    arities: crate::lint::Arities,
}

impl Repl {
    /// `:run SCRIPT [ARGS]`: the script runs as `bprun SCRIPT ARGS` in its own process, against
    /// what this session points at (under `--rehearse`, in the rehearsal's repository copy,
    /// as `bprun rehearse` runs it: without the session's GitLab token, so phase 3 mints its
    /// own). Its output streams as it comes; the session goes on whatever its exit code.
    fn run_script(&self, words: &[&str]) {
        let Some((script, args)) = words.split_first() else {
            eprintln!(":run needs a script: :run scripts/phase3.rhai");
            return;
        };
        let program = match std::env::current_exe() {
            Ok(program) => program,
            Err(error) => {
                eprintln!("cannot find the bprun binary to run {script}: {error}");
                return;
            }
        };
        let mut command = std::process::Command::new(program);
        if self.session.state.check() {
            command.arg("--check");
        }
        command.arg(script).args(args);
        if let Some(copy) = &self.rehearsal_copy {
            // A script the copy does not have (one `:save` just wrote) goes along first.
            let here = std::path::Path::new(script);
            let there = copy.join(here);
            if !there.exists() && here.is_relative() && here.is_file() {
                let copied = there
                    .parent()
                    .map(std::fs::create_dir_all)
                    .unwrap_or(Ok(()))
                    .and_then(|()| std::fs::copy(here, &there));
                if let Err(error) = copied {
                    eprintln!("cannot copy {script} into the rehearsal's repository: {error}");
                    return;
                }
            }
            command.current_dir(copy).env_remove("GITLAB_TOKEN");
        }
        match command.status() {
            Ok(status) if status.success() => {}
            Ok(status) => eprintln!(
                "{script} exited with {}",
                status
                    .code()
                    .map_or("a signal".to_string(), |code| code.to_string())
            ),
            Err(error) => eprintln!("cannot run {script}: {error}"),
        }
    }

    fn refresh_words(&self) {
        let mut words: Vec<String> = self.natives.clone();
        words.extend(self.functions.iter_functions().map(|f| f.name.to_string()));
        words.extend(self.scope.iter_raw().map(|(name, _, _)| name.to_string()));
        words.extend(COMMANDS.iter().map(|(name, _)| name.to_string()));
        words.sort();
        words.dedup();
        *lock(&self.words) = words;
    }

    fn prompt(&self) -> &'static str {
        if self.session.state.check() {
            "bprun[check]> "
        } else {
            "bprun> "
        }
    }

    fn print(&self, text: &str) {
        println!("{}", bprun_clients::secret::scrub(text));
    }

    /// A compiled input with its source set, or the parse error reported (scrubbed).
    fn compiled(&self, result: Result<rhai::AST, rhai::ParseError>) -> Option<rhai::AST> {
        match result {
            Ok(mut ast) => {
                ast.set_source(SOURCE);
                Some(ast)
            }
            Err(error) => {
                let report = crate::diagnostics::parse_error(&self.session, &error, SOURCE);
                eprint!("{}", bprun_clients::secret::scrub(&report.text));
                None
            }
        }
    }

    /// Runs one input; returns whether it succeeded.
    fn evaluate(&mut self, input: &str) -> bool {
        self.session.add_source(SOURCE, input);
        let compiled = self.engine.compile_with_scope(&self.scope, input);
        let Some(ast) = self.compiled(compiled) else {
            return false;
        };
        let combined = self.functions.merge(&ast);
        // A call the natives would refuse stops the input before any of it runs, as in a script.
        let reports = crate::lint::call_reports(
            &self.session,
            &self.arities,
            &ast,
            SOURCE,
            "refused before it ran",
        );
        if !reports.is_empty() {
            for (text, _) in reports {
                eprint!("{}", bprun_clients::secret::scrub(&text));
            }
            return false;
        }
        let result = self
            .engine
            .eval_ast_with_scope::<Dynamic>(&mut self.scope, &combined);
        let cancelled = self
            .session
            .state
            .cancel_flag()
            .swap(false, Ordering::SeqCst);
        match result {
            Ok(value) => {
                self.functions = self.functions.merge(&ast.clone_functions_only());
                self.history.push(SavedInput {
                    text: input.trim_end().to_string(),
                    kind: SavedKind::of(&ast, input, self.session.state.check()),
                });
                if let Some(text) = render_value(&value, self.json) {
                    self.print(&text);
                } else if value.is_unit() && shows_unit(&ast, input) {
                    self.print("()");
                }
                true
            }
            Err(error) => {
                if cancelled || matches!(*error, EvalAltResult::ErrorTerminated(..)) {
                    eprintln!("interrupted");
                } else {
                    let report =
                        crate::diagnostics::runtime_error(&self.session, &error, SOURCE, false);
                    let mut text = report.text;
                    if let Some(hint) = unit_property_hint(&error) {
                        text.push_str(&format!("  hint: {hint}\n"));
                    }
                    eprint!("{}", bprun_clients::secret::scrub(&text));
                }
                false
            }
        }
    }

    /// Runs a `:command`; returns false to leave.
    fn command(&mut self, line: &str) -> bool {
        let mut parts = line.split_whitespace();
        let name = parts.next().unwrap_or("");
        let argument = parts.collect::<Vec<_>>().join(" ");
        match name {
            ":quit" | ":exit" | ":q" => return false,
            ":help" if argument.is_empty() => {
                let lines: Vec<&str> = COMMANDS.iter().map(|(_, text)| *text).collect();
                self.print(&format!(
                    "Rhai expressions run at once; `fn` definitions and variables stay.\n{}",
                    lines.join("\n")
                ));
            }
            ":help" => {
                let docs: Vec<_> = crate::catalog::function_docs()
                    .into_iter()
                    .filter(|doc| doc.name == argument)
                    .collect();
                if docs.is_empty() {
                    eprintln!(
                        "no native named {argument}; :functions {argument} lists close names"
                    );
                }
                for doc in docs {
                    self.print(&format!(
                        "{}\n{}\n",
                        doc.signature,
                        doc.repl_text().trim_end()
                    ));
                }
            }
            ":run" => {
                let words: Vec<&str> = argument.split_whitespace().collect();
                self.run_script(&words);
            }
            ":functions" => {
                for doc in crate::catalog::function_docs() {
                    if doc.name.contains(&argument) {
                        self.print(&format!("{}\n    {}", doc.signature, doc.summary()));
                    }
                }
            }
            ":vars" => {
                let mut lines = Vec::new();
                for (name, constant, value) in self.scope.iter_raw() {
                    let shown = render_value(value, true)
                        .unwrap_or_else(|| "()".into())
                        .replace('\n', " ");
                    let shown = if shown.chars().count() > 60 {
                        format!("{}...", shown.chars().take(57).collect::<String>())
                    } else {
                        shown
                    };
                    let kind = if constant { "const" } else { "let" };
                    lines.push(format!(
                        "{kind} {name}: {} = {shown}",
                        value.type_name().rsplit("::").next().unwrap_or("?")
                    ));
                }
                if lines.is_empty() {
                    self.print("no variables");
                }
                for line in lines {
                    self.print(&line);
                }
            }
            ":check" => match argument.as_str() {
                "on" => self.session.state.set_check(true),
                "off" => self.session.state.set_check(false),
                _ => eprintln!(
                    ":check on|off (now {})",
                    if self.session.state.check() {
                        "on"
                    } else {
                        "off"
                    }
                ),
            },
            ":json" => {
                self.json = !self.json;
                self.print(if self.json {
                    "results as raw JSON"
                } else {
                    "results as readable text"
                });
            }
            ":save" => self.save(&argument),
            ":history" => self.list_history(),
            ":reveal" => self.reveal(line.trim_start()[name.len()..].trim()),
            other => eprintln!("unknown command {other}; :help lists the commands"),
        }
        true
    }

    /// `:history`: the inputs that ran, numbered as `:save FILE N..M` takes them; one holding a
    /// secret shows as a note, never its text.
    fn list_history(&self) {
        if self.history.is_empty() {
            eprintln!(":history: nothing has run successfully yet");
            return;
        }
        for (index, input) in self.history.iter().enumerate() {
            let text = match input.kind {
                SavedKind::Secret => "(an input holding a secret)".to_string(),
                SavedKind::Planned => format!("{}   (under :check on)", input.text),
                _ => input.text.clone(),
            };
            for (line_index, line) in text.lines().enumerate() {
                if line_index == 0 {
                    self.print(&format!("{:>3}  {line}", index + 1));
                } else {
                    self.print(&format!("     {line}"));
                }
            }
        }
    }

    /// `:reveal EXPR`: the expression's value with its secrets in plain text, on purpose. The
    /// only output that is not scrubbed; the line never reaches the history file.
    fn reveal(&mut self, expression: &str) {
        if expression.is_empty() {
            eprintln!(":reveal EXPR   (for example :reveal pat.token)");
            return;
        }
        self.session.add_source(SOURCE, expression);
        let compiled = self
            .engine
            .compile_expression_with_scope(&self.scope, expression);
        let Some(ast) = self.compiled(compiled) else {
            return;
        };
        let combined = self.functions.merge(&ast);
        match self
            .engine
            .eval_ast_with_scope::<Dynamic>(&mut self.scope, &combined)
        {
            Ok(value) => println!("{}", revealed(&value)),
            Err(error) => {
                let report =
                    crate::diagnostics::runtime_error(&self.session, &error, SOURCE, false);
                eprint!("{}", bprun_clients::secret::scrub(&report.text));
            }
        }
    }

    /// Writes the session's inputs to `file` as a script: named function definitions at the top
    /// level, everything else inside one step, so that `bprun FILE` runs it. A file that exists
    /// gets another step. An input typed under check mode is saved commented out, one holding a
    /// secret as a comment saying so; the script is compiled before it is written.
    fn save(&self, file: &str) {
        let (file, range) = match file.split_once(char::is_whitespace) {
            Some((file, range)) => (file, Some(range.trim())),
            None => (file, None),
        };
        if file.is_empty() {
            eprintln!(":save FILE [N..M]");
            return;
        }
        let kept: Vec<&SavedInput> = match range {
            None => self.history.iter().collect(),
            Some(range) => {
                let bounds = range.split_once("..").and_then(|(from, to)| {
                    Some((
                        from.trim().parse::<usize>().ok()?,
                        to.trim().parse::<usize>().ok()?,
                    ))
                });
                match bounds {
                    Some((from, to)) if from >= 1 && from <= to && to <= self.history.len() => {
                        self.history[from - 1..to].iter().collect()
                    }
                    _ => {
                        eprintln!(
                            ":save {file} {range}: a range N..M of the inputs :history numbers (1..{})",
                            self.history.len()
                        );
                        return;
                    }
                }
            }
        };
        let left_out = kept
            .iter()
            .filter(|input| input.kind == SavedKind::Secret)
            .count();
        if kept.is_empty() {
            eprintln!(":save: nothing has run successfully yet");
            return;
        }
        let confinement = bprun_clients::fs::Confinement::new(&self.session.state.root);
        let path = match confinement.resolve(file) {
            Ok(path) => path,
            Err(error) => {
                eprintln!("{}", error.message);
                return;
            }
        };
        let existing = std::fs::read_to_string(&path).unwrap_or_default();
        let text = session_script(&kept, &existing);
        // What is written must run: a script that does not compile is not written.
        if let Err(error) = self.engine.compile(format!("{existing}{text}")) {
            eprintln!(
                ":save {file}: the session does not make a script that compiles ({error}); nothing was written"
            );
            return;
        }
        use std::io::Write;
        let written = path
            .parent()
            .map(std::fs::create_dir_all)
            .unwrap_or(Ok(()))
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
            })
            .and_then(|mut handle| handle.write_all(text.as_bytes()));
        match written {
            Ok(()) => {
                self.print(&format!(
                    "wrote {} input(s) as a step to {}; run it with `bprun {}`",
                    kept.len(),
                    confinement.display(&path),
                    confinement.display(&path)
                ));
                if left_out > 0 {
                    eprintln!(
                        "left out {left_out} input(s) holding a secret (a comment marks each place)"
                    );
                }
            }
            Err(error) => eprintln!(":save {file}: {error}"),
        }
    }
}

/// The text `:save` appends to a file holding `existing`: the inputs' functions, then a step
/// `REPL session` (numbered when the file has one already) with the other inputs.
fn session_script(inputs: &[&SavedInput], existing: &str) -> String {
    let earlier = existing.matches("step(\"REPL session").count();
    let name = if earlier == 0 {
        "REPL session".to_string()
    } else {
        format!("REPL session {}", earlier + 1)
    };
    let mut text = String::new();
    if !existing.is_empty() && !existing.ends_with('\n') {
        text.push('\n');
    }
    for input in inputs
        .iter()
        .filter(|input| input.kind == SavedKind::Functions)
    {
        text.push_str(&input.text);
        text.push('\n');
    }
    text.push_str(&format!("step(\"{name}\", || {{\n"));
    for input in inputs
        .iter()
        .filter(|input| input.kind != SavedKind::Functions)
    {
        let mut body = input.text.clone();
        if !body.ends_with(';') && !body.ends_with('}') {
            body.push(';');
        }
        let (note, prefix) = match input.kind {
            SavedKind::Secret => {
                text.push_str("    // an input here held a secret value and is left out: read it with bao_read or env_secret instead\n");
                continue;
            }
            SavedKind::Planned => (
                Some(
                    "    // typed under :check on, so it only planned: remove the `// ` to run it\n",
                ),
                "// ",
            ),
            _ => (None, ""),
        };
        if let Some(note) = note {
            text.push_str(note);
        }
        for line in body.lines() {
            text.push_str("    ");
            text.push_str(prefix);
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str("});\n");
    text
}

/// After `--load`: the script's top-level imports (`import "common" as common;`) become modules
/// of the session under the same names, and its top-level constants become `global::NAME`, as
/// they are for the script's own functions in a run.
fn share_imports_and_constants(
    engine: &mut Engine,
    scope: &Scope<'static>,
    ast: &AST,
) -> Result<(), Error> {
    use rhai::{Expr, Stmt};
    for statement in ast.statements() {
        let Stmt::Import(import, position) = statement else {
            continue;
        };
        let (Expr::StringConstant(path, _), alias) = &**import else {
            continue;
        };
        if alias.name.is_empty() {
            continue;
        }
        let module = engine
            .module_resolver()
            .resolve(engine, ast.source(), path, *position)
            .map_err(|error| Error::usage(format!("import \"{path}\": {error}"), None))?;
        engine.register_static_module(alias.name.as_str(), module);
    }
    let mut constants = rhai::Module::new();
    for (name, constant, value) in scope.iter_raw() {
        if constant {
            constants.set_var(name, value.clone());
        }
    }
    if constants.iter_var().next().is_some() {
        constants.build_index();
        engine.register_static_module("global", constants.into());
    }
    Ok(())
}

/// `step(...)` in the REPL: steps only run from a script (`bprun SCRIPT`).
fn step_explainer() -> rhai::Module {
    fn refuse(name: &str) -> Box<EvalAltResult> {
        engine::native_error(
            crate::error::NativeError::new(format!(
                "step(\"{name}\") does not run in the REPL: steps run with `bprun SCRIPT`"
            ))
            .with_hint(
                "type the step's body here to run it at once, or put the step in a script (`:save FILE` writes the session's lines as one) and run `bprun FILE`",
            ),
        )
    }
    let mut module = rhai::Module::new();
    module.set_native_fn("step", |name: &str, _body: rhai::FnPtr| {
        Err::<(), _>(refuse(name))
    });
    module.set_native_fn(
        "step",
        |name: &str, _options: rhai::Map, _body: rhai::FnPtr| Err::<(), _>(refuse(name)),
    );
    module
}

/// The repository root for a REPL: `BPRUN_ROOT`, the nearest folder with `.git`, or the current folder.
fn repl_root() -> PathBuf {
    let current = std::env::current_dir()
        .and_then(|dir| dir.canonicalize())
        .unwrap_or_else(|_| PathBuf::from("."));
    crate::runner::find_root(&current.join("repl.rhai"))
}

/// A session with every native, the script's top level run when `--load` names one.
fn start(options: &ReplOptions) -> Result<Repl, Error> {
    let root = repl_root();
    let reporter = Reporter::new(Format::Human, 0);
    let state = RunState::new(
        options.check,
        root.clone(),
        reporter,
        crate::runner::cancel_flag(),
    );
    state.set_interactive();
    let scripts = root.join("scripts");
    let import_root = match &options.load {
        Some(script) => script
            .canonicalize()
            .ok()
            .and_then(|s| s.parent().map(Path::to_path_buf))
            .unwrap_or(scripts),
        None if scripts.is_dir() => scripts,
        None => root.clone(),
    };
    let session = Arc::new(Session::new(state, import_root));
    let engine = engine::build(session.clone());
    let arities = crate::lint::Arities::of(&engine);
    let natives: Vec<String> = crate::catalog::function_docs()
        .into_iter()
        .map(|doc| doc.name)
        .collect();
    let mut repl = Repl {
        session: session.clone(),
        engine,
        scope: Scope::new(),
        functions: AST::empty(),
        history: Vec::new(),
        json: false,
        words: Arc::new(Mutex::new(Vec::new())),
        natives,
        rehearsal_copy: options.rehearsal_copy.clone(),
        arities,
    };
    repl.scope.push("args", rhai::Map::new());

    if let Some(script) = &options.load {
        let location = crate::runner::ScriptLocation::find(script)?;
        let source = std::fs::read_to_string(&location.file)
            .map_err(|error| Error::io("read the script", &location.file, error))?;
        session.add_source(&location.display, &source);
        let mut ast = match repl.engine.compile_with_scope(&repl.scope, &source) {
            Ok(ast) => ast,
            Err(error) => {
                eprint!(
                    "{}",
                    crate::diagnostics::parse_error(&session, &error, &location.display).text
                );
                return Err(Error::Reported(ExitCode::ScriptError));
            }
        };
        ast.set_source(location.display.as_str());
        // The top level runs (functions, imports, variables); steps are only declared.
        if let Err(error) = repl.engine.run_ast_with_scope(&mut repl.scope, &ast) {
            eprint!(
                "{}",
                crate::diagnostics::runtime_error(&session, &error, &location.display, false).text
            );
            return Err(Error::Reported(ExitCode::ScriptError));
        }
        repl.functions = ast.clone_functions_only();
        share_imports_and_constants(&mut repl.engine, &repl.scope, &ast)?;
        let steps = lock(&session.steps).len();
        println!(
            "loaded {} ({} declared, not run)",
            location.display,
            crate::text::count(steps, "step")
        );
    }
    session.state.set_phase(Phase::Running);
    // Loaded scripts have declared their steps by now; a step typed here would be declared in the
    // middle of a run, so `step` explains itself instead.
    repl.engine.register_global_module(step_explainer().into());
    repl.refresh_words();
    Ok(repl)
}

/// `bprun eval EXPR`: one input evaluated as the REPL would (same engine, authentication, check
/// mode and redaction), its value printed; exit 3 when it fails.
pub fn eval(options: ReplOptions, input: &str, json: bool) -> Result<ExitCode, Error> {
    let mut repl = start(&options)?;
    repl.json = json;
    if repl.evaluate(input) {
        Ok(ExitCode::Success)
    } else {
        Err(Error::Reported(ExitCode::ScriptError))
    }
}

pub fn run(options: ReplOptions) -> Result<ExitCode, Error> {
    let mut repl = start(&options)?;

    let mut parser = Engine::new_raw();
    parser.set_max_expr_depths(0, 0);
    let mut signatures = std::collections::HashMap::new();
    for doc in crate::catalog::function_docs() {
        let fuller = signatures
            .get(&doc.name)
            .is_none_or(|known: &String| known.len() < doc.signature.len());
        if fuller {
            signatures.insert(doc.name.clone(), doc.signature.clone());
        }
    }
    let helper = ReplHelper {
        words: repl.words.clone(),
        signatures,
    };
    // Tab completes what the candidates share; a second Tab lists them with their signatures.
    let config = rustyline::Config::builder()
        .completion_type(rustyline::CompletionType::List)
        .auto_add_history(false)
        .max_history_size(10_000)
        .map_err(|e| Error::usage(format!("{e}"), None))?
        .build();
    let mut editor: Editor<ReplHelper, DefaultHistory> = Editor::with_config(config)
        .map_err(|error| Error::usage(format!("cannot start the line editor: {error}"), None))?;
    editor.set_helper(Some(helper));
    let history = history_path();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    println!("bprun repl: Rhai with every bprun native. :help for commands, Ctrl-D to leave.");
    // Lines of an input that is not complete yet (an open brace, bracket or string).
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() {
            repl.prompt()
        } else {
            CONTINUATION_PROMPT
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                if !pending.is_empty() {
                    pending.clear();
                    eprintln!("{ABANDONED}");
                }
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(error) => {
                eprintln!("input error: {error}");
                break;
            }
        };
        if !pending.is_empty() {
            if line.trim().is_empty() {
                pending.clear();
                eprintln!("{ABANDONED}");
                continue;
            }
            pending.push('\n');
            pending.push_str(&line);
        } else if line.trim().is_empty() {
            continue;
        } else if line.trim_start().starts_with(':') {
            let keep_going = repl.command(line.trim());
            if !line.trim_start().starts_with(":reveal") {
                remember(&mut editor, history.as_deref(), &line);
            }
            if !keep_going {
                break;
            }
            continue;
        } else {
            pending = line;
        }
        if incomplete(&parser, &pending) {
            continue;
        }
        let input = std::mem::take(&mut pending);
        repl.evaluate(&input);
        repl.refresh_words();
        // Evaluated first, so secrets the input created are known: such inputs are never saved.
        remember(&mut editor, history.as_deref(), &input);
    }
    Ok(ExitCode::Success)
}

/// Adds an input to the history file, unless it holds a secret.
fn remember(editor: &mut Editor<ReplHelper, DefaultHistory>, history: Option<&Path>, input: &str) {
    if holds_secret(input) {
        return;
    }
    let _ = editor.add_history_entry(input);
    if let Some(path) = history {
        save_history(editor, path);
    }
}

fn save_history(editor: &mut Editor<ReplHelper, DefaultHistory>, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(folder) = path.parent() {
        let _ = std::fs::create_dir_all(folder);
    }
    if editor.save_history(path).is_ok() {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_looking_lines_are_recognised() {
        assert!(holds_secret("gitlab_login(\"glpat-abcdefghijklmnopqrst\")"));
        assert!(holds_secret("let t = \"s.AbCdEfGhIjKlMnOpQrStUvWx\";"));
        assert!(!holds_secret("let status = bao_status();"));
        bprun_clients::secret::Secret::new("repl-canary-value");
        assert!(holds_secret("print(\"repl-canary-value\")"));
        assert!(holds_secret(
            "bao_write(\"x\", #{password: \"hunter2-long-pw\"})"
        ));
        assert!(holds_secret("let s = secret(\"hunter2\");"));
        assert!(holds_secret(
            "gitlab_set_variables(p, [#{key: \"A\", value: `v`}])"
        ));
        assert!(!holds_secret("bao_write(\"x\", #{password: pw})"));
        assert!(!holds_secret("let t = env_secret(\"GITLAB_TOKEN\");"));
        assert!(!holds_secret("bao_read(\"gitlab/bootstrap/admin_token\")"));
    }

    #[test]
    fn incomplete_inputs_continue() {
        let mut parser = Engine::new_raw();
        parser.set_max_expr_depths(0, 0);
        for input in [
            "fn add2(v) {",
            "fn add2(v) {\n  v + 2",
            "if true {\n1",
            "let a = [\n \"x\", \"y\"",
            "foo(1,",
            "let s = `multi",
            "let m = #{a: 1",
        ] {
            assert!(incomplete(&parser, input), "{input:?} continues");
        }
        for input in [
            "fn add2(v) {\n  v + 2\n}",
            "let broken = ;",
            "let x = \"abc",
            "1 + 1",
            "let x = 1 // don't",
            "x]",
        ] {
            assert!(
                !incomplete(&parser, input),
                "{input:?} is complete or wrong"
            );
        }
    }

    #[test]
    fn arrays_of_maps_render_as_tables() {
        let mut first = rhai::Map::new();
        first.insert("name".into(), "guestbook".into());
        first.insert("id".into(), Dynamic::from(4_i64));
        let mut second = rhai::Map::new();
        second.insert("name".into(), "redis".into());
        second.insert("id".into(), Dynamic::from(5_i64));
        let value = Dynamic::from_array(vec![Dynamic::from_map(first), Dynamic::from_map(second)]);
        assert_eq!(
            render_value(&value, false).as_deref(),
            Some("id  name\n4   guestbook\n5   redis")
        );
        assert!(render_value(&value, true).is_some_and(|text| text.starts_with("[\n  {")));
    }

    #[test]
    fn a_cut_cell_says_how_to_see_it_whole() {
        let mut row = rhai::Map::new();
        row.insert(
            "web_url".into(),
            "https://gitlab.local.example.net/blueprint-apps/guestbook".into(),
        );
        let value = Dynamic::from_array(vec![Dynamic::from_map(row)]);
        assert_eq!(
            render_value(&value, false).as_deref(),
            Some(
                "web_url\nhttps://gitlab.local.example.net/blue...\n(cells cut at 40 characters; :json shows whole values, or index the result: x[0].field)"
            )
        );
    }
}
