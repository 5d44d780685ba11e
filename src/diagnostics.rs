//! Turns Rhai parse and runtime errors into operator-facing reports: a headline, the source line
//! with a caret (rendered by miette), the "caused by" chain, the script functions that led there,
//! and a `hint:` line.

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteDiagnostic, NamedSource};
use rhai::{EvalAltResult, ParseError, Position};
use std::sync::Arc;

use crate::error::{NativeError, StepSkip};

/// What a report needs from the session that compiled the script: the source text of each file
/// by its display name, and the names of the functions for did-you-mean hints. The engine's
/// `Session` provides them; diagnostics need nothing else of it.
pub trait ScriptSources {
    fn source(&self, name: &str) -> Option<Arc<str>>;
    fn function_names(&self) -> &[String];
    /// Every signature of the native `name`, as `bprun functions` shows them.
    fn signatures_of(&self, _name: &str) -> Vec<String> {
        Vec::new()
    }
}

impl<T: ScriptSources + ?Sized> ScriptSources for Arc<T> {
    fn source(&self, name: &str) -> Option<Arc<str>> {
        T::source(self, name)
    }

    fn function_names(&self) -> &[String] {
        T::function_names(self)
    }

    fn signatures_of(&self, name: &str) -> Vec<String> {
        T::signatures_of(self, name)
    }
}

/// A rendered report plus its one-line headline (for the journal and JSON events).
#[derive(Debug, Clone)]
pub struct Report {
    pub headline: String,
    pub text: String,
    /// Where it happened, `file:line:column` (for `--json`'s `error` event).
    pub location: Option<String>,
    pub hint: Option<String>,
}

/// One script function on the way to the error, outermost first.
struct Frame {
    function: String,
    called_at: Location,
}

#[derive(Clone)]
struct Location {
    source: Option<String>,
    position: Position,
}

impl Location {
    fn describe(&self) -> String {
        let source = self.source.as_deref().unwrap_or("<script>");
        match (self.position.line(), self.position.position()) {
            (Some(line), Some(column)) => format!("{source}:{line}:{column}"),
            (Some(line), None) => format!("{source}:{line}"),
            _ => source.to_string(),
        }
    }
}

/// What went wrong at the innermost level.
struct Cause {
    headline: String,
    label: String,
    hint: Option<String>,
    causes: Vec<String>,
}

fn function_label(name: &str) -> String {
    if name.starts_with("anon$") {
        "a closure".to_string()
    } else {
        format!("fn {name}()")
    }
}

/// `functions` are the names the engine knows, for did-you-mean suggestions.
fn describe(
    error: &EvalAltResult,
    functions: &[String],
    signatures_of: &dyn Fn(&str) -> Vec<String>,
) -> Cause {
    let plain = |headline: String, label: &str, hint: Option<&str>| Cause {
        headline,
        label: label.to_string(),
        hint: hint.map(str::to_string),
        causes: Vec::new(),
    };
    match error {
        EvalAltResult::ErrorRuntime(value, _) => {
            if let Some(native) = value.read_lock::<NativeError>() {
                return Cause {
                    headline: native.message.clone(),
                    label: native.label.unwrap_or("failed here").to_string(),
                    hint: native.hint.clone(),
                    causes: native.causes.clone(),
                };
            }
            if let Some(skip) = value.read_lock::<StepSkip>() {
                return plain(
                    format!("skip(\"{}\") was called outside a step", skip.0),
                    "called here",
                    Some("skip() ends the running step; call it inside a step body"),
                );
            }
            let text = if value.is_unit() { "error thrown".to_string() } else { crate::values::display(value) };
            plain(text, "thrown here", None)
        }
        EvalAltResult::ErrorFunctionNotFound(signature, _) => plain(
            format!("unknown function: {}", signature.replace("&str | ImmutableString | String", "string")),
            "no such function",
            Some(&match suggest(signature, functions) {
                // The name is right, the arguments are not: its signatures say what it takes.
                _ if functions.iter().any(|name| Some(name.as_str()) == signature.split(['(', ' ']).next()) => {
                    let name = signature.split(['(', ' ']).next().unwrap_or(signature);
                    let signatures = signatures_of(name);
                    format!("the arguments do not fit {name}, which is called as {}", signatures.join(" or "))
                }
                Some(name) => format!("did you mean `{name}`? `bprun functions` lists every native with its arguments"),
                None => "`bprun functions` lists every native with its arguments; check the spelling and argument types".to_string(),
            }),
        ),
        EvalAltResult::ErrorVariableNotFound(name, _) => plain(
            format!("unknown variable `{name}`"),
            "not declared",
            Some("variables are strict: declare them with `let` before use (script arguments are in `args`)"),
        ),
        EvalAltResult::ErrorTooManyOperations(_) => plain(
            "the script exceeded its operation limit".to_string(),
            "limit reached here",
            Some("is there an endless loop? BPRUN_MAX_OPERATIONS raises the limit for genuinely large work"),
        ),
        EvalAltResult::ErrorStackOverflow(_) => plain(
            "too many nested function calls".to_string(),
            "limit reached here",
            Some("is a function calling itself without end?"),
        ),
        EvalAltResult::ErrorDataTooLarge(what, _) => plain(
            format!("{what} exceeds the sandbox size limit"),
            "limit reached here",
            Some("strings are limited to 16 MiB, arrays and maps to 100000 items"),
        ),
        EvalAltResult::ErrorTooManyModules(_) => plain(
            "too many imported modules".to_string(),
            "limit reached here",
            None,
        ),
        EvalAltResult::ErrorTerminated(..) => plain("interrupted".to_string(), "stopped here", None),
        EvalAltResult::ErrorParsing(kind, _) => plain(kind.to_string(), "syntax error", Some("check the syntax at this position")),
        other => {
            let text = other.to_string();
            let suffix = format!(" ({})", other.position());
            let text = text.strip_suffix(&suffix).map(str::to_string).unwrap_or(text);
            plain(text, "failed here", None)
        }
    }
}

fn suggest(signature: &str, functions: &[String]) -> Option<String> {
    crate::text::closest(
        signature.split(['(', ' ']).next().unwrap_or(signature),
        functions,
    )
}

/// Byte span of the token at `position` in `text`.
fn span_at(text: &str, position: Position) -> Option<(usize, usize)> {
    let line = position.line()?;
    let column = position.position().unwrap_or(1);
    let mut offset = 0;
    for (index, content) in text.split('\n').enumerate() {
        if index + 1 == line {
            let start = content
                .char_indices()
                .nth(column.saturating_sub(1))
                .map(|(byte, _)| byte)
                .unwrap_or(content.len());
            let rest = &content[start..];
            let word: usize = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .map(char::len_utf8)
                .sum();
            let length = if word > 0 {
                word
            } else {
                rest.chars().next().map(char::len_utf8).unwrap_or(0)
            };
            return Some((offset + start, length));
        }
        offset += content.len() + 1;
    }
    None
}

fn render(
    headline: &str,
    label: &str,
    at: &Location,
    source: Option<Arc<str>>,
    footer: &[String],
) -> String {
    let mut diagnostic = MietteDiagnostic::new(headline.to_string());
    let mut with_source = None;
    if let (Some(text), Some(name)) = (source, at.source.as_ref())
        && let Some((offset, length)) = span_at(&text, at.position)
    {
        diagnostic =
            diagnostic.with_label(LabeledSpan::at(offset..offset + length, label.to_string()));
        with_source = Some(NamedSource::new(name.clone(), text.to_string()).with_language("rhai"));
    }
    let theme = if use_color() {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(400)
        .with_links(false);
    let mut out = String::new();
    let report = match with_source {
        Some(source) => miette::Report::new(diagnostic).with_source_code(source),
        None => miette::Report::new(diagnostic),
    };
    if handler.render_report(&mut out, report.as_ref()).is_err() {
        out = format!("  × {headline}\n");
    }
    if with_source_missing(&out, at) {
        out.push_str(&format!("   at {}\n", at.describe()));
    }
    let mut text = out.trim_end().to_string();
    text.push('\n');
    for line in footer {
        // Continuation lines (a job trace in a cause) are indented under their first line.
        for (index, part) in line.lines().enumerate() {
            text.push_str(if index == 0 { "  " } else { "    " });
            text.push_str(part);
            text.push('\n');
        }
    }
    text
}

fn with_source_missing(rendered: &str, at: &Location) -> bool {
    at.position.line().is_some() && !rendered.contains('╭')
}

fn use_color() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
}

/// Renders a runtime error raised while running `main_source` (the script's display name).
///
/// `in_step` drops the outermost frame when it is the step's own closure: the runner calls it,
/// so its call position would point at no line the operator wrote.
pub fn runtime_error(
    session: &dyn ScriptSources,
    error: &EvalAltResult,
    main_source: &str,
    in_step: bool,
) -> Report {
    let mut frames = Vec::new();
    let mut current = Some(main_source.to_string());
    let mut inner = error;
    let mut outermost = true;
    loop {
        match inner {
            EvalAltResult::ErrorInFunctionCall(name, source, next, _)
                if outermost && in_step && name.starts_with("anon$") =>
            {
                if !source.is_empty() {
                    current = Some(source.clone());
                }
                inner = next;
            }
            EvalAltResult::ErrorInFunctionCall(name, source, next, position) => {
                frames.push(Frame {
                    function: function_label(name),
                    called_at: Location {
                        source: current.clone(),
                        position: *position,
                    },
                });
                if !source.is_empty() {
                    current = Some(source.clone());
                }
                inner = next;
            }
            EvalAltResult::ErrorInModule(path, next, position) => {
                frames.push(Frame {
                    function: format!("module {path}"),
                    called_at: Location {
                        source: current.clone(),
                        position: *position,
                    },
                });
                current = Some(path.clone());
                inner = next;
            }
            _ => break,
        }
        outermost = false;
    }
    let cause = describe(inner, session.function_names(), &|name| {
        session.signatures_of(name)
    });
    let at = Location {
        source: current.clone(),
        position: inner.position(),
    };
    let source = current.as_deref().and_then(|name| session.source(name));
    let mut footer: Vec<String> = cause
        .causes
        .iter()
        .map(|c| format!("caused by: {c}"))
        .collect();
    for frame in &frames {
        footer.push(format!(
            "in {} called at {}",
            frame.function,
            frame.called_at.describe()
        ));
    }
    if let Some(hint) = &cause.hint {
        footer.push(format!("hint: {hint}"));
    }
    Report {
        text: render(&cause.headline, &cause.label, &at, source, &footer),
        headline: cause.headline,
        location: Some(at.describe()),
        hint: cause.hint.clone(),
    }
}

/// Renders a syntax error in `source_name`.
pub fn parse_error(session: &dyn ScriptSources, error: &ParseError, source_name: &str) -> Report {
    let (headline, hint) = match error.err_type() {
        rhai::ParseErrorType::VariableUndefined(name) => (
            format!("unknown variable `{name}`"),
            "variables are strict: declare them with `let` before use (script arguments are in `args`)",
        ),
        // bprun disables `eval` (engine.rs): scripts are reviewed code, and data must not become code.
        rhai::ParseErrorType::BadInput(rhai::LexError::ImproperSymbol(symbol, message))
            if symbol == "eval" =>
        {
            (
                format!("syntax error: {message}"),
                "bprun scripts cannot `eval` text: call a function, or `import` a module from the script's folder",
            )
        }
        other => (
            format!("syntax error: {other}"),
            "check the syntax at this position; Rhai statements end with `;`",
        ),
    };
    let at = Location {
        source: Some(source_name.to_string()),
        position: error.position(),
    };
    let mut footer = vec![format!("hint: {hint}")];
    // An unbalanced brace makes Rhai report a later symptom (an "unknown variable" the extra
    // block hides) at the wrong place: name the brace that looks wrong.
    if let Some(braces) = session
        .source(source_name)
        .and_then(|text| brace_mismatch(&text))
    {
        footer.push(format!("note: {braces}"));
    }
    Report {
        text: render(&headline, "here", &at, session.source(source_name), &footer),
        headline,
        location: Some(at.describe()),
        hint: Some(hint.to_string()),
    }
}

/// Where the braces of a script look wrong, skipping strings and comments: the first `{` whose
/// `}` is indented differently from the line that opened it (the usual sign of an extra or a
/// missing brace), or a brace that is never closed or never opened.
pub fn brace_mismatch(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |line: usize| {
        lines
            .get(line)
            .map(|l| l.len() - l.trim_start().len())
            .unwrap_or(0)
    };
    let mut stack: Vec<(usize, usize)> = Vec::new();
    let mut suspect: Option<String> = None;
    let (mut line, mut column) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        let at = (line, column);
        if c == '\n' {
            line += 1;
            column = 0;
        } else {
            column += 1;
        }
        if let Some(q) = quote {
            if c == '\\' {
                if chars.next() == Some('\n') {
                    line += 1;
                    column = 0;
                } else {
                    column += 1;
                }
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '`' | '\'' => quote = Some(c),
            '/' if chars.peek() == Some(&'/') => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        line += 1;
                        column = 0;
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut previous = ' ';
                for next in chars.by_ref() {
                    if next == '\n' {
                        line += 1;
                        column = 0;
                    } else {
                        column += 1;
                    }
                    if previous == '*' && next == '/' {
                        break;
                    }
                    previous = next;
                }
            }
            '{' => stack.push(at),
            '}' => match stack.pop() {
                Some((open_line, open_column)) => {
                    if suspect.is_none() && open_line != at.0 && indent(open_line) != indent(at.0) {
                        suspect = Some(format!(
                            "the `{{` at line {}:{} is closed by the `}}` at line {}:{}, which is indented differently: is a brace missing or extra there?",
                            open_line + 1,
                            open_column + 1,
                            at.0 + 1,
                            at.1 + 1
                        ));
                    }
                }
                None => {
                    return Some(format!(
                        "the `}}` at line {}:{} closes nothing: the braces do not balance",
                        at.0 + 1,
                        at.1 + 1
                    ));
                }
            },
            _ => {}
        }
    }
    if let Some((open_line, open_column)) = stack.last() {
        return Some(suspect.unwrap_or_else(|| {
            format!(
                "the `{{` at line {}:{} is never closed: the braces do not balance",
                open_line + 1,
                open_column + 1
            )
        }));
    }
    None
}

/// The innermost message of an error, for one-line summaries (e.g. a failed `parallel` item).
pub fn headline(error: &EvalAltResult) -> String {
    let mut inner = error;
    while let EvalAltResult::ErrorInFunctionCall(_, _, next, _)
    | EvalAltResult::ErrorInModule(_, next, _) = inner
    {
        inner = next;
    }
    describe(inner, &[], &|_| Vec::new()).headline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_the_identifier_at_a_position() {
        let text = "let a = 1;\n  foo(a);\n";
        assert_eq!(span_at(text, Position::new(2, 3)), Some((13, 3)));
        assert_eq!(span_at(text, Position::new(1, 9)), Some((8, 1)));
    }

    #[test]
    fn an_extra_brace_is_found_by_its_indentation() {
        let text = "let apps = [1];\nstep(\"A\", || {\n    {\n    info(\"{\");\n});\nstep(\"B\", || { info(apps) });\n";
        assert_eq!(
            brace_mismatch(text).as_deref(),
            Some(
                "the `{` at line 3:5 is closed by the `}` at line 5:1, which is indented differently: is a brace missing or extra there?"
            )
        );
        assert_eq!(brace_mismatch("fn a() { // }\n}\n"), None);
        assert_eq!(
            brace_mismatch("}\n").as_deref(),
            Some("the `}` at line 1:1 closes nothing: the braces do not balance")
        );
    }
}
