//! Everything bprun writes to the terminal goes through the [`Reporter`]: human step lines and a
//! recap, or (with `--json`) one JSON event per line. Every line is scrubbed of live secrets.

use serde_json::{Value, json};
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use crate::journal::{StepRecord, StepStatus};
use bprun_clients::secret::scrub;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
        }
    }
}

/// A step as `--list --json` shows it: its name, why it would be skipped, what it needs, and
/// the group it runs together with (its first and last step, 1-based, and how many at a time),
/// and the step its remote writes wait for (a group's `writes_after_first`).
pub struct PlannedStep {
    pub name: String,
    pub skipped: Option<String>,
    pub needs: Vec<String>,
    pub together: Option<(usize, usize, usize)>,
    pub writes_wait_for: Option<usize>,
}

/// A line-oriented reporter shared by the runner and every native (it is `Sync`).
pub struct Reporter {
    format: Format,
    /// -1 quiet, 0 normal, 1 verbose.
    verbosity: i8,
    state: Mutex<LineState>,
}

use crate::scope::{LineHeld, LineState, StepScope};

/// The line state of the run, or of the grouped step this thread works for (one thread of the
/// step at a time, as the run's mutex is for the run).
enum LineGuard<'a> {
    Run(std::sync::MutexGuard<'a, LineState>),
    Step(LineHeld),
}

impl std::ops::Deref for LineGuard<'_> {
    type Target = LineState;
    fn deref(&self) -> &LineState {
        match self {
            LineGuard::Run(state) => state,
            LineGuard::Step(state) => state,
        }
    }
}

impl std::ops::DerefMut for LineGuard<'_> {
    fn deref_mut(&mut self) -> &mut LineState {
        match self {
            LineGuard::Run(state) => state,
            LineGuard::Step(state) => state,
        }
    }
}

pub fn format_duration(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}

impl Reporter {
    pub fn new(format: Format, verbosity: i8) -> Self {
        Reporter {
            format,
            verbosity,
            state: Mutex::new(LineState::default()),
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    fn lock(&self) -> LineGuard<'_> {
        match crate::scope::current() {
            Some(scope) => LineGuard::Step(LineHeld::take(scope)),
            None => LineGuard::Run(
                self.state
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            ),
        }
    }

    /// Writes to stdout, or holds the text for its turn when the step runs in a group.
    fn write_stdout(text: &str) {
        if let Some(scope) = crate::scope::current() {
            crate::scope::lock(&scope.stdout).push_str(&scrub(text));
            return;
        }
        let mut out = std::io::stdout().lock();
        // A closed stdout (a pipe to `head`) must not turn into a panic mid-run.
        let _ = out.write_all(scrub(text).as_bytes());
        let _ = out.flush();
    }

    /// One JSON line, with the time it happened (`ts`, RFC 3339 UTC, milliseconds).
    fn event(&self, value: Value) {
        print_event(value);
    }

    /// Ends a half-written step header so the next line starts clean.
    fn break_header(state: &mut LineState) {
        if state.open_header {
            Self::write_stdout("\n");
            state.open_header = false;
        }
    }

    /// A plain line of human output (plans, recaps, notes). Ignored in JSON mode.
    pub fn line(&self, text: &str) {
        if self.format == Format::Json {
            return;
        }
        let mut state = self.lock();
        Self::break_header(&mut state);
        Self::write_stdout(&format!("{text}\n"));
    }

    pub fn log(&self, level: Level, message: &str) {
        let shown = match level {
            Level::Debug => self.verbosity >= 1,
            Level::Info => self.verbosity >= 0,
            Level::Warn => true,
        };
        if !shown {
            return;
        }
        let mut state = self.lock();
        match self.format {
            Format::Json => self.event(json!({
                "event": "log", "level": level.name(), "step": state.step, "message": message,
            })),
            Format::Human => {
                Self::break_header(&mut state);
                let indent = if state.step.is_some() { "    " } else { "" };
                let prefix = match level {
                    Level::Debug => "debug: ",
                    Level::Info => "",
                    Level::Warn => "warning: ",
                };
                for line in message.lines() {
                    Self::write_stdout(&format!("{indent}{prefix}{line}\n"));
                }
            }
        }
    }

    /// A change a native made (or, in check mode, would make).
    pub fn change(&self, action: &str, resource: &crate::decl::Resource, check: bool) {
        let mut state = self.lock();
        match self.format {
            Format::Json => self.event(json!({
                "event": "change", "step": state.step, "action": action,
                "kind": resource.kind, "name": resource.name, "resource": resource.text, "check": check,
            })),
            Format::Human if self.verbosity >= 0 => {
                Self::break_header(&mut state);
                let would = if check { "would " } else { "" };
                let indent = if state.step.is_some() { "    " } else { "" };
                Self::write_stdout(&format!("{indent}~ {would}{action} {}\n", resource.text));
            }
            Format::Human => {}
        }
    }

    /// How a change changes its resource (`--diff`): indented under the change, `-` lines red
    /// and `+` lines green on a terminal; a `diff` event in JSON mode.
    pub fn diff(&self, text: &str) {
        let mut state = self.lock();
        match self.format {
            Format::Json => self.event(json!({"event": "diff", "step": state.step, "diff": text})),
            Format::Human => {
                Self::break_header(&mut state);
                let indent = if state.step.is_some() { "      " } else { "  " };
                let mut out = String::new();
                for line in text.lines() {
                    let painted = match line.chars().next() {
                        Some('-') if colour_enabled() && !line.starts_with("---") => {
                            format!("\x1b[31m{line}\x1b[0m")
                        }
                        Some('+') if colour_enabled() && !line.starts_with("+++") => {
                            format!("\x1b[32m{line}\x1b[0m")
                        }
                        _ => line.to_string(),
                    };
                    out.push_str(&format!("{indent}{painted}\n"));
                }
                Self::write_stdout(&out);
            }
        }
    }

    /// `--list --json`: the plan as one event (human output prints it line by line).
    /// `params` is the script's declared parameters, when it declares any.
    pub fn plan(
        &self,
        script: &str,
        steps: &[PlannedStep],
        params: Option<&[crate::decl::ParamDecl]>,
    ) {
        if self.format == Format::Json {
            let steps: Vec<Value> = steps
                .iter()
                .enumerate()
                .map(|(index, step)| {
                    json!({
                        "index": index + 1, "name": step.name, "skipped": step.skipped,
                        "needs": step.needs,
                        "together": step.together.map(|(first, last, limit)| {
                            json!({
                                "first": first, "last": last, "limit": limit,
                                "writes_wait_for": step.writes_wait_for,
                            })
                        }),
                    })
                })
                .collect();
            let params: Option<Vec<Value>> = params.map(|decls| {
                decls
                    .iter()
                    .map(|decl| {
                        json!({
                            "name": decl.name, "flag": decl.flag(), "type": decl.kind.name(),
                            "default": decl.default.as_ref().map(|value| {
                                serde_json::to_value(value).unwrap_or(Value::Null)
                            }),
                            "help": decl.help,
                        })
                    })
                    .collect()
            });
            self.event(
                json!({"event": "plan", "script": script, "params": params, "steps": steps}),
            );
        }
    }

    pub fn run_start(&self, script: &str, check: bool, steps: usize) {
        if self.format == Format::Json {
            self.event(
                json!({"event": "run_start", "script": script, "check": check, "steps": steps}),
            );
        } else if check && steps > 0 {
            self.line("check mode: nothing will be changed");
        }
    }

    pub fn step_start(&self, index: usize, total: usize, name: &str) {
        let mut state = self.lock();
        state.step = Some(name.to_string());
        match self.format {
            Format::Json => self.event(json!({
                "event": "step_start", "index": index, "total": total, "name": name,
            })),
            Format::Human => {
                Self::break_header(&mut state);
                Self::write_stdout(&format!("[{index}/{total}] {name} ..."));
                state.open_header = true;
            }
        }
    }

    /// The end of a step (or a deselected step, which has no start).
    pub fn step_end(&self, index: usize, total: usize, record: &StepRecord) {
        let mut state = self.lock();
        state.step = None;
        match self.format {
            Format::Json => self.event(json!({
                "event": "step_end", "index": index, "total": total, "name": record.name,
                "status": record.status, "duration_s": round_ms(record.duration_s),
                "changes": record.changes, "error": record.error, "note": record.note,
            })),
            Format::Human => {
                let status = step_status_text(record);
                if state.open_header {
                    Self::write_stdout(&format!(" {status}\n"));
                    state.open_header = false;
                } else {
                    Self::write_stdout(&format!(
                        "[{index}/{total}] {} ... {status}\n",
                        record.name
                    ));
                }
            }
        }
    }

    /// A check row's verdict (`check_row`): a `check` event in JSON mode; human output shows
    /// the rows as one table after the recap.
    pub fn check_row(&self, row: &CheckLine) {
        if self.format == Format::Json {
            self.event(json!({
                "event": "check", "index": row.index, "name": row.name,
                "expected": row.expected, "found": row.found, "result": row.result.label(),
                "passed": row.result == CheckResult::Passed, "hint": row.hint_if_failed(),
            }));
        }
    }

    pub fn run_end(&self, outcome: &str, exit_code: i32, duration: Duration) {
        if self.format == Format::Json {
            self.event(json!({
                "event": "run_end", "outcome": outcome, "exit_code": exit_code,
                "duration_s": round_ms(duration.as_secs_f64()),
            }));
        }
    }

    /// An error rendered for humans: to stderr in human mode, as an `error` event in JSON mode.
    pub fn error(&self, rendered: &str, headline: &str) {
        let step = self.lock().step.clone();
        self.error_event(
            rendered,
            &ErrorEvent {
                headline,
                step: step.as_deref(),
                location: None,
                hint: None,
            },
        );
    }

    /// [`Reporter::error`] with the step, the script location and the hint it is about.
    pub fn error_event(&self, rendered: &str, details: &ErrorEvent) {
        let mut state = self.lock();
        Self::break_header(&mut state);
        if self.format == Format::Json {
            self.event(json!({
                "event": "error", "step": details.step, "message": details.headline,
                "location": details.location, "hint": details.hint,
            }));
        }
        if let Some(scope) = crate::scope::current() {
            crate::scope::lock(&scope.stderr).push_str(&scrub(rendered));
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(scrub(rendered).as_bytes());
        let _ = err.flush();
    }
}

/// A unified diff of two texts (3 lines of context), headed `--- a/NAME` / `+++ b/NAME`; empty
/// when they are equal. A side that does not exist is `None` (`/dev/null` in the header).
pub fn unified_diff(name: &str, old: Option<&str>, new: Option<&str>) -> String {
    let (before, after) = (old.unwrap_or(""), new.unwrap_or(""));
    if old.is_some() && before == after {
        return String::new();
    }
    let header_old = if old.is_some() {
        format!("a/{name}")
    } else {
        "/dev/null".to_string()
    };
    let header_new = if new.is_some() {
        format!("b/{name}")
    } else {
        "/dev/null".to_string()
    };
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&header_old, &header_new)
        .to_string()
}

/// What an `error` event says besides the rendered text.
pub struct ErrorEvent<'a> {
    pub headline: &'a str,
    pub step: Option<&'a str>,
    /// `file:line:column` of the script line that failed.
    pub location: Option<&'a str>,
    pub hint: Option<&'a str>,
}

/// One JSON event on stdout, stamped with the time it happened (`ts`) and scrubbed of live
/// secrets: every `--json` line goes through here.
/// Writes what a grouped step held (already scrubbed) to the terminal, when its turn comes.
pub fn release(scope: &StepScope) {
    let held = std::mem::take(&mut *crate::scope::lock(&scope.stdout));
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(held.as_bytes());
    let _ = out.flush();
    let held = std::mem::take(&mut *crate::scope::lock(&scope.stderr));
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(held.as_bytes());
    let _ = err.flush();
}

pub fn print_event(mut value: Value) {
    if let Value::Object(map) = &mut value {
        map.insert("ts".to_string(), Value::String(timestamp()));
    }
    Reporter::write_stdout(&format!("{value}\n"));
}

/// Now, as RFC 3339 UTC with milliseconds: `2026-11-30T23:59:01.123Z`.
fn timestamp() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// Whether status words are coloured: stdout is a terminal, `NO_COLOR` is unset or empty
/// (no-color.org) and `TERM` is not `dumb`; `CLICOLOR_FORCE=1` colours anyway.
fn colour_enabled() -> bool {
    use std::io::IsTerminal;
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| {
        let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
        if set("NO_COLOR") {
            return false;
        }
        if std::env::var_os("CLICOLOR_FORCE").is_some_and(|value| value != "0") {
            return true;
        }
        std::io::stdout().is_terminal() && !dumb_terminal()
    })
}

/// `TERM=dumb`: a terminal that neither colours nor moves its cursor.
fn dumb_terminal() -> bool {
    std::env::var("TERM").is_ok_and(|term| term == "dumb")
}

/// `text` (a status word, maybe padded) in its status's colour when colours are on.
fn paint(text: &str, status: StepStatus) -> String {
    if !colour_enabled() {
        return text.to_string();
    }
    let code = match status {
        StepStatus::Ok => "32",
        StepStatus::Changed => "33",
        StepStatus::Failed | StepStatus::Interrupted => "1;31",
        StepStatus::Skipped | StepStatus::Deselected | StepStatus::NotRun => "36",
    };
    // Colour the word, not the padding, so that columns stay aligned.
    let word = text.trim_end();
    format!("\x1b[{code}m{word}\x1b[0m{}", &text[word.len()..])
}

fn step_status_text(record: &StepRecord) -> String {
    let timing = format!("({:.2} s)", record.duration_s);
    let label = paint(record.status.label(), record.status);
    match record.status {
        StepStatus::Deselected | StepStatus::NotRun => match &record.note {
            Some(note) => format!("{label} ({note})"),
            None => label,
        },
        // Never started: left out because it finished in an earlier run.
        StepStatus::Skipped if record.started.is_none() => match &record.note {
            Some(note) => format!("{label} ({note})"),
            None => label,
        },
        StepStatus::Skipped => match &record.note {
            Some(note) => format!("{label}: {note} {timing}"),
            None => format!("{label} {timing}"),
        },
        _ => format!("{label} {timing}"),
    }
}

/// The recap table printed at the end of a run and by `--timings`.
pub fn recap_table(steps: &[StepRecord], check: bool, previous: Option<&[StepRecord]>) -> String {
    let name_width = steps
        .iter()
        .map(|step| step.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let changes_title = if check { "would change" } else { "changes" };
    let mut out = format!(
        "  #  {:<name_width$}  {:<11}  {:>12}  {:>9}",
        "step", "status", changes_title, "time"
    );
    if previous.is_some() {
        out.push_str("  previous");
    }
    out = out.trim_end().to_string();
    out.push('\n');
    for (index, step) in steps.iter().enumerate() {
        let time = if step.started.is_none() {
            "-".to_string()
        } else {
            format!("{:.2} s", step.duration_s)
        };
        let mut row = format!(
            "{:>3}  {:<name_width$}  {}  {:>12}  {:>9}",
            index + 1,
            step.name,
            paint(&format!("{:<11}", step.status.label()), step.status),
            step.changes,
            time
        );
        if let Some(previous) = previous {
            let before = previous
                .iter()
                .find(|old| old.name == step.name && old.status.is_done());
            match before {
                Some(old) => row.push_str(&format!("  {:>6.2} s", old.duration_s)),
                None => row.push_str("         -"),
            }
        }
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out
}

/// The verdict of a check row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckResult {
    Passed,
    Failed,
    /// The row called `skip(reason)`: it could not be checked (something it needs is down).
    /// Not a pass: the run still exits 1.
    NotChecked,
}

impl CheckResult {
    pub fn label(self) -> &'static str {
        match self {
            CheckResult::Passed => "pass",
            CheckResult::Failed => "FAIL",
            CheckResult::NotChecked => "not checked",
        }
    }
}

/// One row of a qualification report: a `check_row` step that ran.
#[derive(Debug, Clone)]
pub struct CheckLine {
    /// The step's number in the plan.
    pub index: usize,
    pub name: String,
    pub expected: String,
    pub found: String,
    pub result: CheckResult,
    pub hint: Option<String>,
}

impl CheckLine {
    pub fn new(
        index: usize,
        step: &crate::decl::StepDecl,
        found: &str,
        result: CheckResult,
    ) -> Self {
        CheckLine {
            index,
            name: step.name.clone(),
            expected: step.expected.clone().unwrap_or_default(),
            found: scrub(found),
            result,
            hint: step.on_failure.clone(),
        }
    }

    /// The hint matters only when the row failed.
    pub fn hint_if_failed(&self) -> Option<&str> {
        match self.result {
            CheckResult::Failed => self.hint.as_deref(),
            _ => None,
        }
    }
}

/// The qualification table: one line per row (number, check, expected, found, result), the
/// hint of a failed row on the line below it, and a count.
pub fn check_table(rows: &[CheckLine]) -> String {
    let width = |text: fn(&CheckLine) -> &str, title: &str| {
        rows.iter()
            .map(|row| text(row).chars().count())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let name_width = width(|row| &row.name, "check");
    let expected_width = width(|row| &row.expected, "expected");
    let found_width = width(|row| &row.found, "found");
    let mut out = format!(
        "  #  {:<name_width$}  {:<expected_width$}  {:<found_width$}  result\n",
        "check", "expected", "found"
    );
    for row in rows {
        out.push_str(&format!(
            "{:>3}  {:<name_width$}  {:<expected_width$}  {:<found_width$}  {}\n",
            row.index,
            row.name,
            row.expected,
            row.found,
            row.result.label()
        ));
        if let Some(hint) = row.hint_if_failed() {
            out.push_str(&format!("       hint: {hint}\n"));
        }
    }
    let count = |wanted: CheckResult| rows.iter().filter(|row| row.result == wanted).count();
    let mut summary = format!(
        "{}: {} passed, {} failed",
        crate::text::count(rows.len(), "check"),
        count(CheckResult::Passed),
        count(CheckResult::Failed)
    );
    let not_checked = count(CheckResult::NotChecked);
    if not_checked > 0 {
        summary.push_str(&format!(", {not_checked} not checked"));
    }
    out.push_str(&summary);
    out.push('\n');
    out
}

/// `6 steps: 3 ok, 2 changed, 1 skipped, 0 failed in 1.23 s`
pub fn recap_summary(steps: &[StepRecord], duration: Duration) -> String {
    let count = |wanted: &[StepStatus]| {
        steps
            .iter()
            .filter(|step| wanted.contains(&step.status))
            .count()
    };
    let mut parts = vec![
        format!("{} ok", count(&[StepStatus::Ok])),
        format!("{} changed", count(&[StepStatus::Changed])),
        format!(
            "{} skipped",
            count(&[StepStatus::Skipped, StepStatus::Deselected])
        ),
        format!("{} failed", count(&[StepStatus::Failed])),
    ];
    let interrupted = count(&[StepStatus::Interrupted]);
    if interrupted > 0 {
        parts.push(format!("{interrupted} interrupted"));
    }
    let not_run = count(&[StepStatus::NotRun]);
    if not_run > 0 {
        parts.push(format!("{not_run} not run"));
    }
    format!(
        "{}: {} in {}",
        crate::text::count(steps.len(), "step"),
        parts.join(", "),
        format_duration(duration)
    )
}

/// Where one step of a running group is, for the progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GroupSlot {
    /// Not started: the group's limit holds it back.
    Queued,
    /// Running for this long.
    Running(Duration),
    /// Finished; its lines wait for the steps declared before it.
    Done,
}

/// The live line a terminal shows while a group's steps run (their own lines are held and
/// printed in declaration order): which run and for how long, which finished, which wait for
/// the limit. Cut to `width` columns less one, so it never wraps and one `\r` erases it.
pub fn progress_line(slots: &[(&str, GroupSlot)], width: usize) -> String {
    let names = |wanted: fn(&GroupSlot) -> bool| -> Vec<String> {
        slots
            .iter()
            .filter(|(_, slot)| wanted(slot))
            .map(|(name, slot)| match slot {
                GroupSlot::Running(time) => format!("{name} ({})", format_duration(*time)),
                _ => name.to_string(),
            })
            .collect()
    };
    let mut parts = Vec::new();
    for (label, listed) in [
        (
            "running",
            names(|slot| matches!(slot, GroupSlot::Running(_))),
        ),
        ("done", names(|slot| *slot == GroupSlot::Done)),
        ("queued", names(|slot| *slot == GroupSlot::Queued)),
    ] {
        if !listed.is_empty() {
            parts.push(format!("{label}: {}", listed.join(", ")));
        }
    }
    let line = format!("  {}", parts.join("; "));
    let room = width.saturating_sub(1).max(4);
    if line.chars().count() <= room {
        return line;
    }
    let mut cut: String = line.chars().take(room - 3).collect();
    cut.push_str("...");
    cut
}

/// The progress line of a running group on stderr, drawn only when stderr is a terminal (not
/// with `--json` or `-q`, nor with `TERM=dumb`): tests and logs get exactly the step lines.
pub struct Progress {
    enabled: bool,
    drawn: bool,
}

impl Progress {
    pub fn new(reporter: &Reporter) -> Progress {
        use std::io::IsTerminal;
        let enabled = reporter.format == Format::Human
            && reporter.verbosity >= 0
            && std::io::stderr().is_terminal()
            && !dumb_terminal();
        Progress {
            enabled,
            drawn: false,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Draws the line over the one before it.
    pub fn draw(&mut self, slots: &[(&str, GroupSlot)]) {
        if !self.enabled {
            return;
        }
        let line = scrub(&progress_line(slots, terminal_width()));
        // Over the line before it: its text, then the rest of the old one erased.
        Self::write(&format!("\r{line}\x1b[K"));
        self.drawn = true;
    }

    /// Erases the line, before anything else is written to the terminal.
    pub fn clear(&mut self) {
        if self.drawn {
            Self::write("\r\x1b[K");
            self.drawn = false;
        }
    }

    fn write(text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The terminal's width in columns (stderr's), 80 when it does not say.
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ only fills the winsize it is given.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let asked = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) };
    if asked == 0 && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        80
    }
}

#[cfg(test)]
mod progress_tests {
    use super::{GroupSlot, progress_line};
    use std::time::Duration;

    #[test]
    fn the_progress_line_names_what_runs_what_is_done_and_what_waits() {
        let slots = [
            (
                "CloudNativePG",
                GroupSlot::Running(Duration::from_millis(3_700)),
            ),
            ("Redis", GroupSlot::Done),
            ("MinIO", GroupSlot::Running(Duration::from_millis(1_250))),
            ("OpenBao", GroupSlot::Queued),
        ];
        assert_eq!(
            progress_line(&slots, 120),
            "  running: CloudNativePG (3.70 s), MinIO (1.25 s); done: Redis; queued: OpenBao"
        );
        assert_eq!(progress_line(&[("A", GroupSlot::Done)], 120), "  done: A");
    }

    #[test]
    fn the_progress_line_never_wraps() {
        let slots = [
            (
                "CloudNativePG",
                GroupSlot::Running(Duration::from_millis(3_700)),
            ),
            ("Redis", GroupSlot::Done),
        ];
        assert_eq!(progress_line(&slots, 30), "  running: CloudNativePG (...");
        assert_eq!(progress_line(&slots, 30).chars().count(), 29);
    }
}

#[cfg(test)]
mod resource_tests {
    use crate::decl::resource_kind_and_name;

    #[test]
    fn every_natives_resource_text_has_a_kind_and_a_name() {
        for (action, resource, kind, name) in [
            (
                "create",
                "project blueprint-apps/demo",
                "project",
                "blueprint-apps/demo",
            ),
            (
                "create",
                "group blueprint-apps (internal)",
                "group",
                "blueprint-apps",
            ),
            ("create", "file out.txt", "file", "out.txt"),
            (
                "write",
                "secret secret/gitlab/x (version 2)",
                "secret",
                "secret/gitlab/x",
            ),
            (
                "revoke",
                "personal access token blueprint-phase3 (#5)",
                "personal access token",
                "blueprint-phase3",
            ),
            (
                "install",
                "helm release gitlab/gitlab from infra/x.tgz (new)",
                "helm release",
                "gitlab/gitlab",
            ),
            (
                "set",
                "CI variable CI_KUBECONFIG_B64 of g/p",
                "CI variable",
                "CI_KUBECONFIG_B64",
            ),
            (
                "create",
                "Deployment/web in gitlab",
                "Deployment",
                "gitlab/web",
            ),
            ("create", "Namespace/gitlab", "Namespace", "gitlab"),
            (
                "clone",
                "http://127.0.0.1:1/g/p.git into apps-local/g/p",
                "working tree",
                "apps-local/g/p",
            ),
            (
                "commit and push",
                "apps-local/g/p (0123abcd)",
                "working tree",
                "apps-local/g/p",
            ),
            (
                "sync",
                "apps-local/g/p from apps/p (1 created, 0 updated, 0 deleted)",
                "directory",
                "apps-local/g/p",
            ),
            ("run", "`helm version`", "command", "helm version"),
            ("post", "/api/v4/projects", "path", "/api/v4/projects"),
            (
                "mint",
                "certificate infra/tls/cert.pem for *.x (new)",
                "certificate",
                "infra/tls/cert.pem",
            ),
        ] {
            assert_eq!(
                resource_kind_and_name(action, resource),
                (kind.to_string(), name.to_string()),
                "{action} {resource}"
            );
        }
    }
}
