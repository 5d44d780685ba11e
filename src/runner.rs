//! Runs a script: compile, run the top level (which declares the plan), select steps, run them
//! in order, report, and keep the journal.

use rhai::{Dynamic, EvalAltResult, NativeCallContext, Scope};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::diagnostics;
use crate::engine::{self, Session, StepDecl, lock};
use crate::error::StepSkip;
use crate::error::{Error, ExitCode};
use crate::journal::{Journal, RunRecord, StepRecord, StepStatus};
use crate::output::{
    CheckLine, CheckResult, Format, Reporter, check_table, recap_summary, recap_table,
};
use crate::state::{Phase, RunState};

/// What the command line asked of the runner.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub script: PathBuf,
    pub script_args: Vec<String>,
    pub check: bool,
    pub list: bool,
    /// `--list-slugs` (hidden; shell completion): the steps' slugs and tags, one per line.
    pub list_slugs: bool,
    pub only: Vec<String>,
    pub skip: Vec<String>,
    /// `--tags`: only steps with one of these tags (and `always` steps).
    pub tags: Vec<String>,
    /// `--skip-tags`: leave out steps with one of these tags.
    pub skip_tags: Vec<String>,
    pub from: Option<String>,
    pub resume: bool,
    pub json: bool,
    /// `--diff`: natives show how each change changes its resource.
    pub diff: bool,
    /// `--detailed-exitcode` (with `--check`): exit 5 when a run would change something.
    pub detailed_exitcode: bool,
    pub verbosity: i8,
    /// The kubeconfig context the Kubernetes natives use (None: the current one).
    pub kube_context: Option<String>,
}

/// Where a script lives: its file, the repository root and the name it is shown by.
pub struct ScriptLocation {
    pub file: PathBuf,
    pub root: PathBuf,
    pub display: String,
}

impl ScriptLocation {
    pub fn find(script: &Path) -> Result<ScriptLocation, Error> {
        let file = script.canonicalize().map_err(|error| {
            if error.kind() == std::io::ErrorKind::NotFound {
                Error::usage(
                    format!("script {} not found", script.display()),
                    Some("give the path of a .rhai file, e.g. scripts/phase3.rhai".to_string()),
                )
            } else {
                Error::io("read the script", script, error)
            }
        })?;
        if file.is_dir() {
            return Err(Error::usage(
                format!("{} is a folder, not a script", script.display()),
                Some("give the path of a .rhai file, e.g. scripts/phase3.rhai".to_string()),
            ));
        }
        let root = find_root(&file);
        let display = file
            .strip_prefix(&root)
            .map(|relative| relative.display().to_string())
            .unwrap_or_else(|_| file.display().to_string());
        Ok(ScriptLocation {
            file,
            root,
            display,
        })
    }
}

/// The repository root: `BPRUN_ROOT`, else the nearest folder above the script holding `.git`,
/// else the current folder when it contains the script, else the script's folder.
pub fn find_root(script_file: &Path) -> PathBuf {
    if let Some(root) = std::env::var_os("BPRUN_ROOT") {
        let root = PathBuf::from(root);
        return root.canonicalize().unwrap_or(root);
    }
    let folder = script_file.parent().unwrap_or(Path::new("/"));
    if let Some(found) = folder.ancestors().find(|dir| dir.join(".git").exists()) {
        return found.to_path_buf();
    }
    if let Ok(current) = std::env::current_dir().and_then(|dir| dir.canonicalize())
        && folder.starts_with(&current)
    {
        return current;
    }
    folder.to_path_buf()
}

/// The parameters the script at `file` declares, read from its compiled text without running
/// it; `None` when it declares none or does not compile (its run reports that).
pub fn declared_params(file: &Path) -> Option<Vec<crate::params::ParamDecl>> {
    let source = std::fs::read_to_string(file).ok()?;
    let mut engine = rhai::Engine::new_raw();
    engine.set_max_expr_depths(64, 32);
    let ast = engine.compile(source).ok()?;
    crate::params::declared_in(&ast)
        .ok()
        .flatten()
        .map(|(decls, _)| decls)
}

/// Script arguments (`--app guestbook --destroy`) as the map `args`.
pub fn parse_script_args(raw: &[String]) -> Result<rhai::Map, Error> {
    let mut map = rhai::Map::new();
    let mut positional = rhai::Array::new();
    let mut index = 0;
    let mut only_positional = false;
    let insert = |map: &mut rhai::Map, key: &str, value: Dynamic| match map.get_mut(key) {
        Some(existing) if existing.is_array() => {
            if let Some(mut array) = existing.write_lock::<rhai::Array>() {
                array.push(value);
            }
        }
        Some(existing) => {
            let first = std::mem::take(existing);
            *existing = Dynamic::from_array(vec![first, value]);
        }
        None => {
            map.insert(key.into(), value);
        }
    };
    while index < raw.len() {
        let token = &raw[index];
        index += 1;
        if only_positional || !token.starts_with("--") {
            positional.push(token.clone().into());
            continue;
        }
        if token == "--" {
            only_positional = true;
            continue;
        }
        let body = &token[2..];
        let (name, inline_value) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (body, None),
        };
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
        if !valid {
            return Err(Error::usage(
                format!("invalid script argument `{token}`"),
                Some(
                    "script arguments look like --name value, --name=value or a bare --flag"
                        .to_string(),
                ),
            ));
        }
        let key = name.replace('-', "_");
        let value = match inline_value {
            Some(value) => Dynamic::from(value),
            None => match raw.get(index) {
                Some(next) if !next.starts_with("--") => {
                    index += 1;
                    Dynamic::from(next.clone())
                }
                _ => Dynamic::TRUE,
            },
        };
        insert(&mut map, &key, value);
    }
    if !positional.is_empty() {
        map.insert("positional".into(), positional.into());
    }
    Ok(map)
}

/// Ctrl-C and SIGTERM set this flag; natives and the engine's progress hook watch it.
pub fn cancel_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let handler_flag = flag.clone();
        // A second Ctrl-C while the run is winding down exits at once.
        let _ = ctrlc::set_handler(move || {
            if handler_flag.swap(true, Ordering::SeqCst) {
                std::process::exit(ExitCode::Interrupted.code());
            }
        });
        flag
    })
    .clone()
}

/// Why a step will not run, or `None` when it will.
struct Selection {
    only: Vec<String>,
    skip: Vec<String>,
    tags: Vec<String>,
    skip_tags: Vec<String>,
    from: Option<usize>,
    resume: Option<(usize, String)>,
}

/// `--tags a,b --tags c`: every tag named, each checked against the tags the steps have.
fn resolve_tags(args: &[String], steps: &[StepDecl], flag: &str) -> Result<Vec<String>, Error> {
    let mut known: Vec<String> = steps.iter().flat_map(|step| step.tags.clone()).collect();
    known.sort();
    known.dedup();
    let mut tags = Vec::new();
    for tag in args.iter().flat_map(|arg| arg.split(',')).map(str::trim) {
        if tag.is_empty() {
            continue;
        }
        if !known.iter().any(|known| known == tag) {
            let valid = if known.is_empty() {
                "no step of this script has tags".to_string()
            } else {
                format!("the steps' tags: {}", known.join(", "))
            };
            let hint = match crate::text::closest(tag, &known) {
                Some(near) => format!("did you mean \"{near}\"? {valid}"),
                None => valid,
            };
            return Err(Error::usage(
                format!("unknown tag \"{tag}\" in {flag}"),
                Some(hint),
            ));
        }
        tags.push(tag.to_string());
    }
    Ok(tags)
}

/// A step's lower-case words joined by dashes (`Ensure group` -> `ensure-group`).
fn slug(name: &str) -> String {
    name.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// The step a command-line argument names: its exact name, its number (1-based, as `--list`
/// shows), or its slug (`ensure-group`, any case). An unknown one is a usage error with the
/// closest step and the valid ones.
fn resolve_step(arg: &str, names: &[&str], flag: &str) -> Result<String, Error> {
    if let Some(name) = names.iter().find(|name| **name == arg) {
        return Ok(name.to_string());
    }
    if let Ok(number) = arg.parse::<usize>()
        && (1..=names.len()).contains(&number)
    {
        return Ok(names[number - 1].to_string());
    }
    let wanted = slug(arg);
    if let Some(name) = names.iter().find(|name| slug(name) == wanted) {
        return Ok(name.to_string());
    }
    let slugs: Vec<String> = names.iter().map(|name| slug(name)).collect();
    let closest = crate::text::closest(&wanted, &slugs)
        .and_then(|found| names.iter().find(|name| slug(name) == found));
    let valid = names
        .iter()
        .enumerate()
        .map(|(index, n)| format!("{} \"{n}\"", index + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let hint = match (names.is_empty(), closest) {
        (true, _) => "the script declares no steps".to_string(),
        (false, Some(name)) => format!("did you mean \"{name}\"? valid steps: {valid}"),
        (false, None) => format!("valid steps: {valid}"),
    };
    Err(Error::usage(
        format!("unknown step \"{arg}\" in {flag}"),
        Some(hint),
    ))
}

impl Selection {
    fn new(
        options: &RunOptions,
        steps: &[StepDecl],
        journal: Option<&Journal>,
    ) -> Result<(Selection, Option<String>), Error> {
        let names: Vec<&str> = steps.iter().map(|step| step.name.as_str()).collect();
        let only = options
            .only
            .iter()
            .map(|arg| resolve_step(arg, &names, "--only"))
            .collect::<Result<Vec<_>, _>>()?;
        let skip = options
            .skip
            .iter()
            .map(|arg| resolve_step(arg, &names, "--skip"))
            .collect::<Result<Vec<_>, _>>()?;
        let tags = resolve_tags(&options.tags, steps, "--tags")?;
        let skip_tags = resolve_tags(&options.skip_tags, steps, "--skip-tags")?;
        let from = match &options.from {
            Some(arg) => {
                let name = resolve_step(arg, &names, "--from")?;
                names.iter().position(|n| *n == name)
            }
            None => None,
        };
        if options.from.is_some() && options.resume {
            return Err(Error::usage(
                "--from and --resume both choose where to start",
                Some("use one of them".to_string()),
            ));
        }
        let mut note = None;
        let resume = if options.resume {
            match journal.and_then(Journal::last_real_run) {
                None => {
                    note =
                        Some("no previous run to resume; starting from the first step".to_string());
                    None
                }
                Some(last) => {
                    // Left out on purpose with --skip is not unfinished work.
                    let done = |name: &str| {
                        last.steps.iter().any(|record| {
                            record.name == name
                                && (record.status.is_done()
                                    || (record.status == StepStatus::Deselected
                                        && record.note.as_deref() == Some("--skip")))
                        })
                    };
                    match names.iter().position(|name| !done(name)) {
                        Some(index) => {
                            note = Some(format!(
                                "resuming at step {} \"{}\" (run of {})",
                                index + 1,
                                names[index],
                                last.started
                            ));
                            Some((index, last.started.clone()))
                        }
                        None => {
                            note = Some(format!(
                                "nothing to resume: every step finished in the run of {}",
                                last.started
                            ));
                            Some((names.len(), last.started.clone()))
                        }
                    }
                }
            }
        } else {
            None
        };
        let selection = Selection {
            only,
            skip,
            tags,
            skip_tags,
            from,
            resume,
        };
        // Always steps run anyway; what counts is whether the selection itself chose a step.
        let runs_a_step = steps.iter().enumerate().any(|(index, step)| {
            selection.reason_to_skip(index, step).is_none()
                && (!step.always || selection.only.contains(&step.name))
        });
        let chose = !options.only.is_empty()
            || !options.skip.is_empty()
            || options.from.is_some()
            || !options.tags.is_empty()
            || !options.skip_tags.is_empty();
        if chose && !steps.is_empty() && !runs_a_step {
            return Err(Error::usage(
                "the selection runs no step",
                Some(
                    "--only, --skip, --from, --tags and --skip-tags combine: --from X --only Y runs Y only when it comes at or after X (bprun --list shows the plan)"
                        .to_string(),
                ),
            ));
        }
        Ok((selection, note))
    }

    /// Why the step will not run, and whether it still counts as done (it finished in the run
    /// being resumed, so the next `--resume` must not run it either).
    fn reason_to_skip(&self, index: usize, step: &StepDecl) -> Option<(String, bool)> {
        let name = step.name.as_str();
        if self.skip.iter().any(|n| n == name) {
            return Some(("--skip".to_string(), false));
        }
        if let Some(tag) = step.tags.iter().find(|tag| self.skip_tags.contains(tag)) {
            return Some((format!("--skip-tags {tag}"), false));
        }
        if step.always {
            return None;
        }
        if !self.only.is_empty() && !self.only.iter().any(|n| n == name) {
            return Some(("not selected by --only".to_string(), false));
        }
        if !self.tags.is_empty() && !step.tags.iter().any(|tag| self.tags.contains(tag)) {
            return Some((format!("not tagged {}", self.tags.join(" or ")), false));
        }
        if let Some(from) = self.from
            && index < from
        {
            return Some(("before --from".to_string(), false));
        }
        if let Some((resume, _)) = &self.resume
            && index < *resume
        {
            return Some(("done in the last run".to_string(), true));
        }
        None
    }
}

/// What the step phase decided, read by [`run`] after the script finishes.
enum Outcome {
    Finished(ExitCode),
    Failed(Error),
}

/// Runs a script end to end and returns the exit code.
pub fn run(options: RunOptions) -> Result<ExitCode, Error> {
    let location = ScriptLocation::find(&options.script)?;
    let source = std::fs::read_to_string(&location.file)
        .map_err(|error| Error::io("read the script", &location.file, error))?;
    let format = if options.json {
        Format::Json
    } else {
        Format::Human
    };
    let reporter = Reporter::new(format, options.verbosity);
    let state = RunState::new(
        options.check,
        location.root.clone(),
        reporter,
        cancel_flag(),
    );
    let import_root = location
        .file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| location.root.clone());
    state.set_diff(options.diff);
    let session = Arc::new(Session::new(state, import_root));
    *crate::engine::lock(&session.kube_context) = options.kube_context.clone();
    session.add_source(&location.display, &source);
    let engine = engine::build(session.clone());

    let mut scope = Scope::new();
    scope.push("args", rhai::Map::new());
    let mut ast = match engine.compile_with_scope(&scope, &source) {
        Ok(ast) => ast,
        Err(error) => {
            let report = diagnostics::parse_error(&session, &error, &location.display);
            session.state.reporter.error(
                &format!(
                    "error: {} does not compile\n{}",
                    location.display, report.text
                ),
                &report.headline,
            );
            return Err(Error::Reported(ExitCode::ScriptError));
        }
    };
    // A call to a function nothing provides is reported now, before any step changes things.
    // What the engine's functions are, read once for the checks below.
    let arities = crate::lint::Arities::of(&engine);
    let unknown = crate::lint::unknown_calls(&arities, &ast);
    if !unknown.is_empty() {
        for (name, _, position) in &unknown {
            let error = EvalAltResult::ErrorFunctionNotFound(name.clone(), *position);
            let report = diagnostics::runtime_error(&session, &error, &location.display, false);
            session.state.reporter.error(
                &format!(
                    "error: {} calls a function that does not exist\n{}",
                    location.display, report.text
                ),
                &report.headline,
            );
        }
        return Err(Error::Reported(ExitCode::ScriptError));
    }
    // And a native called with an argument count none of its signatures takes, or given a
    // literal option map it would refuse when its step runs.
    let reports = crate::lint::call_reports(
        &session,
        &arities,
        &ast,
        &location.display,
        "refused before the run",
    );
    if !reports.is_empty() {
        for (text, headline) in &reports {
            session.state.reporter.error(text, headline);
        }
        return Err(Error::Reported(ExitCode::ScriptError));
    }
    // Declared parameters: the command line is checked against them before anything runs.
    let declared = crate::params::declared_in(&ast).map_err(|(message, position)| {
        script_error(
            &session,
            &location.display,
            "declares its parameters wrongly",
            message,
            position,
        )
    })?;
    if let Some(position) = crate::params::misplaced_call(&ast) {
        return Err(script_error(
            &session,
            &location.display,
            "declares its parameters wrongly",
            "params() belongs at the top level of the script (once, before its steps)".to_string(),
            position,
        ));
    }
    let args = match declared {
        Some((decls, _)) => {
            let values = crate::params::bind(&decls, &options.script_args).map_err(|error| {
                Error::usage(
                    format!("{}: {}", location.display, error.message),
                    Some(format!(
                        "{} (`bprun {} --help` describes them)",
                        error.hint, location.display
                    )),
                )
            })?;
            *lock(&session.params) = Some(crate::params::BoundParams {
                decls,
                values: values.clone(),
            });
            values
        }
        None => parse_script_args(&options.script_args)?,
    };
    scope.set_value("args", args);
    // The steps run when the top level has finished, inside the same evaluation, so that
    // imports and functions declared at the top level are visible in step bodies.
    let tail = engine
        .compile(format!("{}();", engine::RUN_STEPS_NATIVE))
        .map_err(|error| Error::usage(format!("internal: {error}"), None))?;
    ast = ast.merge(&tail);
    ast.set_source(location.display.as_str());

    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::new(Mutex::new(None));
    let hook_outcome = outcome.clone();
    let display = location.display.clone();
    let root = location.root.clone();
    *lock(&session.run_hook) = Some(Box::new(
        move |context: &NativeCallContext, session: &Session| {
            let result = run_steps(context, session, &options, &display, &root);
            *lock(&hook_outcome) = Some(match result {
                Ok(code) => Outcome::Finished(code),
                Err(error) => Outcome::Failed(error),
            });
        },
    ));

    let evaluated = engine.run_ast_with_scope(&mut scope, &ast);
    if let Some(outcome) = lock(&outcome).take() {
        return match outcome {
            Outcome::Finished(code) => Ok(code),
            Outcome::Failed(error) => Err(error),
        };
    }
    match evaluated {
        Ok(()) => Ok(ExitCode::Success),
        Err(error) => Err(top_level_failure(&session, &error, &location.display)),
    }
}

/// A mistake in the script found before it runs, reported at its position (exit 3).
fn script_error(
    session: &Session,
    display: &str,
    what: &str,
    message: String,
    position: rhai::Position,
) -> Error {
    let error = EvalAltResult::ErrorRuntime(message.into(), position);
    let report = diagnostics::runtime_error(session, &error, display, false);
    session.state.reporter.error(
        &format!("error: {display} {what}\n{}", report.text),
        &report.headline,
    );
    Error::Reported(ExitCode::ScriptError)
}

fn top_level_failure(session: &Session, error: &EvalAltResult, display: &str) -> Error {
    if matches!(error, EvalAltResult::ErrorTerminated(..)) || session.state.is_cancelled() {
        session.state.reporter.error("interrupted\n", "interrupted");
        return Error::Reported(ExitCode::Interrupted);
    }
    let report = diagnostics::runtime_error(session, error, display, false);
    session.state.reporter.error(
        &format!("error: the top level of {display} failed\n{}", report.text),
        &report.headline,
    );
    Error::Reported(ExitCode::ScriptError)
}

/// Warnings for steps that come before a step they need; an error for a need naming no step.
fn order_warnings(steps: &[StepDecl]) -> Result<Vec<String>, Error> {
    let position = |name: &str| steps.iter().position(|step| step.name == name);
    let mut warnings = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        for need in &step.needs {
            match position(need) {
                None => {
                    let names: Vec<String> = steps.iter().map(|s| s.name.clone()).collect();
                    let hint = match crate::text::closest(need, &names) {
                        Some(name) => format!("did you mean \"{name}\"?"),
                        None => format!("steps: {}", names.join(", ")),
                    };
                    return Err(Error::usage(
                        format!("step \"{}\" needs \"{need}\", which is not a step", step.name),
                        Some(hint),
                    ));
                }
                Some(at) if at > index => warnings.push(format!(
                    "step {} \"{}\" needs \"{need}\", which runs after it (step {}): expect it to fail",
                    index + 1,
                    step.name,
                    at + 1
                )),
                Some(at) if step.group.is_some() && steps[at].group == step.group => {
                    warnings.push(format!(
                        "step {} \"{}\" needs \"{need}\", which runs together with it (step {}): expect it to fail",
                        index + 1,
                        step.name,
                        at + 1
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(warnings)
}

fn plan_line(index: usize, total: usize, name: &str, note: Option<&str>) -> String {
    match note {
        Some(note) => format!("[{index}/{total}] {name} (skipped: {note})"),
        None => format!("[{index}/{total}] {name}"),
    }
}

/// The group a step runs together with: its first and last step (1-based) and how many run at
/// a time; none for a step outside a group, or in a group of one (which runs as any other step).
fn group_span(steps: &[StepDecl], index: usize) -> Option<(usize, usize, usize)> {
    let group = steps[index].group?;
    let last = steps
        .iter()
        .rposition(|step| step.group == Some(group))
        .unwrap_or(index);
    (last != group.first).then_some((group.first + 1, last + 1, group.limit))
}

/// The step (1-based) whose success a grouped step's remote writes wait for: its group's first
/// step, when the group says `writes_after_first` and this is another of its steps.
fn writes_wait_for(steps: &[StepDecl], index: usize) -> Option<usize> {
    let (first, _, _) = group_span(steps, index)?;
    steps[index]
        .group
        .filter(|group| group.writes_after_first && group.first != index)
        .map(|_| first)
}

/// `--list`'s word for a step of a group: which steps it runs together with.
fn together_note(steps: &[StepDecl], index: usize) -> Option<String> {
    let (first, last, limit) = group_span(steps, index)?;
    let together = format!("runs together with steps {first}-{last}, {limit} at a time");
    Some(match writes_wait_for(steps, index) {
        Some(awaited) => format!("{together}; its writes wait for step {awaited}"),
        None => together,
    })
}

fn run_steps(
    context: &NativeCallContext,
    session: &Session,
    options: &RunOptions,
    display: &str,
    root: &Path,
) -> Result<ExitCode, Error> {
    let steps: Vec<StepDecl> = lock(&session.steps).clone();
    let journal = if options.resume {
        Some(Journal::load(root, display)?)
    } else {
        None
    };
    let (selection, note) = Selection::new(options, &steps, journal.as_ref())?;
    let reporter = &session.state.reporter;
    let total = steps.len();
    for warning in order_warnings(&steps)? {
        reporter.log(crate::output::Level::Warn, &warning);
    }

    if options.list_slugs {
        let mut words: Vec<String> = steps.iter().map(|step| slug(&step.name)).collect();
        for step in &steps {
            words.extend(step.tags.iter().map(|tag| format!("tag:{tag}")));
        }
        words.dedup();
        for word in words {
            println!("{word}");
        }
        return Ok(ExitCode::Success);
    }
    if options.list {
        let plan: Vec<crate::output::PlannedStep> = steps
            .iter()
            .enumerate()
            .map(|(index, step)| crate::output::PlannedStep {
                name: step.name.clone(),
                skipped: selection
                    .reason_to_skip(index, step)
                    .map(|(reason, _)| reason),
                needs: step.needs.clone(),
                together: group_span(&steps, index),
                writes_wait_for: writes_wait_for(&steps, index),
            })
            .collect();
        let declared = lock(&session.params)
            .as_ref()
            .map(|bound| bound.decls.clone());
        reporter.plan(display, &plan, declared.as_deref());
        reporter.line(&format!("{display}: {}", crate::text::count(total, "step")));
        if let Some(note) = &note {
            reporter.line(note);
        }
        for (index, planned) in plan.iter().enumerate() {
            let line = plan_line(index + 1, total, &planned.name, planned.skipped.as_deref());
            match together_note(&steps, index) {
                Some(note) => reporter.line(&format!("{line}  ({note})")),
                None => reporter.line(&line),
            }
        }
        if let Some(bound) = lock(&session.params).as_ref() {
            reporter.line(if bound.decls.is_empty() {
                "parameters: none"
            } else {
                "parameters:"
            });
            for line in crate::params::help_lines(&bound.decls) {
                reporter.line(&format!("  {line}"));
            }
        }
        return Ok(ExitCode::Success);
    }
    if total == 0 {
        return Ok(ExitCode::Success);
    }
    // Before the first step: the journal can be written, and no other run is working here.
    Journal::check_writable(root, display)?;
    let _run_lock = if options.check {
        None
    } else {
        let notify = |line: &str| reporter.line(line);
        let cancelled = || session.state.is_cancelled();
        Some(crate::journal::RunLock::acquire(
            root, display, &notify, &cancelled,
        )?)
    };

    let run_started = Instant::now();
    let started_at = crate::natives::core::core_functions::now();
    reporter.run_start(display, options.check, total);
    if let Some(note) = &note {
        reporter.line(note);
    }
    session.state.set_phase(Phase::Running);
    let mut records: Vec<StepRecord> = Vec::with_capacity(total);
    let mut rows: Vec<CheckLine> = Vec::new();
    let mut stop: Option<ExitCode> = None;
    // A failed `keep_going` step (every check row) does not stop the run, but the run fails.
    let mut failed_and_went_on = false;
    // The end of the group the loop ran last: its steps are recorded already.
    let mut group_end = 0;
    for (index, step) in steps.iter().enumerate() {
        if index < group_end {
            continue;
        }
        let number = index + 1;
        // Steps declared to run together: the whole group in one go, its steps' lines printed
        // in declaration order.
        if stop.is_none()
            && let Some(group) = step.group
            && group.first == index
        {
            let end = steps[index..]
                .iter()
                .position(|member| member.group != Some(group))
                .map_or(steps.len(), |offset| index + offset);
            let runs = run_group(
                context,
                session,
                &steps,
                (index, end),
                group,
                &selection,
                display,
            );
            for run in runs {
                failed_and_went_on |= run.went_on;
                stop = stop.or(run.stop);
                rows.extend(run.row);
                records.push(run.record);
            }
            group_end = end;
            continue;
        }
        if let Some(code) = stop {
            let note = if code == ExitCode::Interrupted {
                "interrupted"
            } else {
                "an earlier step failed"
            };
            records.push(record(
                step,
                StepStatus::NotRun,
                None,
                Duration::ZERO,
                0,
                None,
                Some(note.to_string()),
            ));
            continue;
        }
        if let Some(skipped) = left_out(&selection, index, step) {
            reporter.step_end(number, total, &skipped);
            records.push(skipped);
            continue;
        }
        let run = run_step(context, session, step, number, total, display);
        failed_and_went_on |= run.went_on;
        stop = stop.or(run.stop);
        rows.extend(run.row);
        records.push(run.record);
    }
    if stop.is_none() && failed_and_went_on {
        stop = Some(ExitCode::StepFailed);
    }
    session.state.set_phase(Phase::Planning);
    let duration = run_started.elapsed();
    let pending = options.check
        && options.detailed_exitcode
        && records.iter().any(|record| record.changes > 0);
    let code = stop.unwrap_or(if pending {
        ExitCode::ChangesPending
    } else {
        ExitCode::Success
    });
    if reporter.format() == Format::Human {
        reporter.line("");
        // A script of check rows only (a qualification report) ends with their table alone.
        let only_rows = steps.iter().all(|step| step.expected.is_some()) && !rows.is_empty();
        if !only_rows {
            let title = if options.check {
                format!("Recap of {display} (check mode)")
            } else {
                format!("Recap of {display}")
            };
            reporter.line(&title);
            reporter.line(recap_table(&records, options.check, None).trim_end());
            reporter.line(&recap_summary(&records, duration));
            // After an upgrade, what its workloads run now (not always what the chart says).
            let upgraded = crate::natives::helm::upgraded_workloads(session);
            if !upgraded.is_empty() {
                reporter.line("Upgraded releases now run:");
                for line in upgraded {
                    reporter.line(&format!("  {line}"));
                }
            }
        }
        if !rows.is_empty() {
            if !only_rows {
                reporter.line("");
            }
            reporter.line(&format!("Qualification of {display}"));
            reporter.line(check_table(&rows).trim_end());
        }
        let whole = records.iter().all(|record| {
            !matches!(
                record.status,
                StepStatus::Deselected | StepStatus::NotRun | StepStatus::Failed
            )
        });
        let handover = lock(&session.handover).clone();
        if let Some(body) =
            handover.filter(|_| code == ExitCode::Success && !options.check && whole)
        {
            // It reads the platform it describes (a Service's address): natives run as in a step.
            session.state.set_phase(Phase::Running);
            let text = body.call_within_context::<Dynamic>(context, ());
            session.state.set_phase(Phase::Planning);
            match text {
                Ok(text) if text.is_unit() => {}
                Ok(text) => {
                    reporter.line("");
                    reporter.line(bprun_clients::secret::scrub(&text.to_string()).trim_end());
                }
                Err(error) => reporter.line(&format!(
                    "\nwarning: the handover could not be written: {}",
                    diagnostics::runtime_error(session, &error, display, false).headline
                )),
            }
        }
    }
    reporter.run_end(code.name(), code.code(), duration);
    Journal::append(
        root,
        display,
        RunRecord {
            started: started_at,
            check: options.check,
            outcome: code.name().to_string(),
            duration_s: duration.as_secs_f64(),
            steps: records,
        },
    )?;
    Ok(code)
}

/// How long a group runs before its progress line appears, and how often the line is redrawn
/// when no step starts or ends.
const PROGRESS_AFTER: Duration = Duration::from_millis(300);
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Where each grouped step not printed yet is (when it started, what it left when it ended), for
/// the progress line.
fn slot_states<'a>(
    slots: &[(Option<Instant>, Option<StepRun>)],
    names: impl Iterator<Item = &'a str>,
) -> Vec<(&'a str, crate::output::GroupSlot)> {
    let now = Instant::now();
    names
        .zip(slots)
        .map(|(name, slot)| {
            let state = match slot {
                (_, Some(_)) => crate::output::GroupSlot::Done,
                (Some(began), None) => crate::output::GroupSlot::Running(now - *began),
                (None, None) => crate::output::GroupSlot::Queued,
            };
            (name, state)
        })
        .collect()
}

/// Runs the steps `first..end` of a group together, at most `limit` at a time, and reports
/// them in declaration order, each as soon as it and those before it are done: a deselected
/// step as usual, a step that ran with the lines it held. When one fails the others still run to
/// their end (each failure reported with its own error); after Ctrl-C the ones not started yet
/// do not start.
fn run_group(
    context: &NativeCallContext,
    session: &Session,
    steps: &[StepDecl],
    (first, end): (usize, usize),
    group: crate::decl::StepGroup,
    selection: &Selection,
    display: &str,
) -> Vec<StepRun> {
    let total = steps.len();
    let limit = group.limit;
    let reporter = &session.state.reporter;
    let selected: Vec<usize> = (first..end)
        .filter(|&index| left_out(selection, index, &steps[index]).is_none())
        .collect();
    let scopes: Vec<Arc<crate::scope::StepScope>> = selected
        .iter()
        .map(|_| Arc::new(crate::scope::StepScope::default()))
        .collect();
    // Per selected step: when it started, and what it left when it finished.
    let slots: Mutex<Vec<(Option<Instant>, Option<StepRun>)>> =
        Mutex::new(selected.iter().map(|_| (None, None)).collect());
    // `writes_after_first`: the gate the other steps' remote writes pass, opened when the first
    // step succeeded and failed when it failed (their writes then not sent). None when the
    // first step does not run (left out, or done in the run `--resume` continues).
    let gate = (group.writes_after_first && selected.first() == Some(&first)).then(|| {
        bprun_clients::write_gate::WriteGate::new(format!("step \"{}\"", steps[first].name))
    });
    let finished = std::sync::Condvar::new();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let engine = context.engine();
    let mut runs = Vec::with_capacity(end - first);
    std::thread::scope(|threads| {
        for _ in 0..limit.min(selected.len()) {
            let store = engine::detach_context(context);
            let (selected, scopes, slots, finished, next, gate) =
                (&selected, &scopes, &slots, &finished, &next, &gate);
            threads.spawn(move || {
                let worker = engine::attach_context(&store, engine);
                loop {
                    let slot = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&index) = selected.get(slot) else {
                        break;
                    };
                    let step = &steps[index];
                    lock(slots)[slot].0 = Some(Instant::now());
                    finished.notify_all();
                    let run = if session.state.is_cancelled() {
                        let note = Some("interrupted".to_string());
                        let not_run = record(
                            step,
                            StepStatus::NotRun,
                            None,
                            Duration::ZERO,
                            0,
                            None,
                            note,
                        );
                        StepRun::ended(not_run, Some(ExitCode::Interrupted))
                    } else {
                        let scope = Some(scopes[slot].clone());
                        let held_back = gate.clone().filter(|_| slot > 0);
                        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            crate::scope::within(scope, || {
                                bprun_clients::write_gate::with_gate(held_back, || {
                                    run_step(&worker, session, step, index + 1, total, display)
                                })
                            })
                        }));
                        // A panic must not leave the reporting thread waiting for this step.
                        ran.unwrap_or_else(|_| {
                            let error = Some("bprun panicked while running this step".to_string());
                            let failed = record(
                                step,
                                StepStatus::Failed,
                                None,
                                Duration::ZERO,
                                0,
                                error,
                                None,
                            );
                            StepRun::ended(failed, Some(ExitCode::StepFailed))
                        })
                    };
                    if let (0, Some(gate)) = (slot, gate) {
                        match run.record.status {
                            StepStatus::Ok | StepStatus::Changed | StepStatus::Skipped => {
                                gate.open()
                            }
                            _ => gate.fail(run.record.error.clone().unwrap_or_else(|| {
                                run.record
                                    .note
                                    .clone()
                                    .unwrap_or_else(|| "not run".to_string())
                            })),
                        }
                    }
                    lock(slots)[slot].1 = Some(run);
                    finished.notify_all();
                }
            });
        }
        // The steps' lines are held and printed in declaration order; on a terminal a live
        // line says meanwhile which steps run, for how long, and which finished.
        let mut progress = crate::output::Progress::new(reporter);
        let group_began = Instant::now();
        let mut slot = 0;
        for (index, step) in steps.iter().enumerate().take(end).skip(first) {
            if let Some(skipped) = left_out(selection, index, step) {
                progress.clear();
                reporter.step_end(index + 1, total, &skipped);
                runs.push(StepRun::ended(skipped, None));
                continue;
            }
            let mut held = lock(&slots);
            let run = loop {
                if let Some(run) = held[slot].1.take() {
                    break run;
                }
                if !progress.enabled() {
                    held = finished
                        .wait(held)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    continue;
                }
                // A group that ends at once draws nothing; a longer one every second, and
                // whenever a step starts or ends.
                let since = group_began.elapsed();
                if since >= PROGRESS_AFTER {
                    let names = selected[slot..]
                        .iter()
                        .map(|&index| steps[index].name.as_str());
                    progress.draw(&slot_states(&held[slot..], names));
                }
                let wait = PROGRESS_AFTER.checked_sub(since).unwrap_or(PROGRESS_EVERY);
                held = finished
                    .wait_timeout(held, wait)
                    .map(|(held, _)| held)
                    .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            };
            drop(held);
            progress.clear();
            crate::output::release(&scopes[slot]);
            runs.push(run);
            slot += 1;
        }
    });
    runs
}

/// What running one step left: its record, its check row, and whether the run stops or goes
/// on failed.
struct StepRun {
    record: StepRecord,
    row: Option<CheckLine>,
    stop: Option<ExitCode>,
    went_on: bool,
}

impl StepRun {
    /// A step that ended without running its body (left out, interrupted, or a panic).
    fn ended(record: StepRecord, stop: Option<ExitCode>) -> StepRun {
        StepRun {
            record,
            row: None,
            stop,
            went_on: false,
        }
    }
}

/// The record of a step the selection leaves out (`--only`, `--skip`, `--from`, or done in the
/// run `--resume` continues), or `None` when it runs.
fn left_out(selection: &Selection, index: usize, step: &StepDecl) -> Option<StepRecord> {
    let (reason, done) = selection.reason_to_skip(index, step)?;
    let status = if done {
        StepStatus::Skipped
    } else {
        StepStatus::Deselected
    };
    Some(record(
        step,
        status,
        None,
        Duration::ZERO,
        0,
        None,
        Some(reason),
    ))
}

/// Runs one step, reporting it as it goes: its header, its lines, its status and its error.
/// In a group this runs on a worker thread, inside the step's scope (its lines held).
fn run_step(
    context: &NativeCallContext,
    session: &Session,
    step: &StepDecl,
    number: usize,
    total: usize,
    display: &str,
) -> StepRun {
    let reporter = &session.state.reporter;
    let mut row: Option<CheckLine> = None;
    let mut stop: Option<ExitCode> = None;
    let mut went_on = false;
    reporter.step_start(number, total, &step.name);
    session.state.take_changes();
    let began = Instant::now();
    let began_at = crate::natives::core::core_functions::now();
    let result = step.body.call_within_context::<Dynamic>(context, ());
    let elapsed = began.elapsed();
    let changes = session.state.take_changes().len() as u32;
    // A check row that ran to its end passes or fails on what it found.
    let result = match (&step.expected, result) {
        (Some(expected), Ok(value)) => match row_finding(expected, &value) {
            Ok((found, true)) => {
                row = Some(CheckLine::new(number, step, &found, CheckResult::Passed));
                Ok(value)
            }
            Ok((found, false)) => Err(RowFailure::Finding(found)),
            Err(message) => Err(RowFailure::Finding(message)),
        },
        (_, Ok(value)) => Ok(value),
        (_, Err(error)) => Err(RowFailure::Error(error)),
    };
    let finished = match result {
        Ok(_) => {
            let status = if changes > 0 {
                StepStatus::Changed
            } else {
                StepStatus::Ok
            };
            record(step, status, Some(began_at), elapsed, changes, None, None)
        }
        Err(RowFailure::Error(error)) if skip_reason(&error).is_some() => {
            let reason = skip_reason(&error);
            if step.expected.is_some() {
                // A row that could not be checked is no pass: the run exits 1.
                went_on = true;
                let found = reason.clone().unwrap_or_default();
                row = Some(CheckLine::new(
                    number,
                    step,
                    &found,
                    CheckResult::NotChecked,
                ));
            }
            record(
                step,
                StepStatus::Skipped,
                Some(began_at),
                elapsed,
                changes,
                None,
                reason,
            )
        }
        Err(RowFailure::Error(error))
            if session.state.is_cancelled()
                || matches!(*error, EvalAltResult::ErrorTerminated(..)) =>
        {
            stop = Some(ExitCode::Interrupted);
            reporter.error(
                &format!(
                    "interrupted during step \"{}\"\nre-run with --resume to continue from here\n",
                    step.name
                ),
                "interrupted",
            );
            record(
                step,
                StepStatus::Interrupted,
                Some(began_at),
                elapsed,
                changes,
                Some("interrupted".to_string()),
                None,
            )
        }
        Err(failure) => {
            if step.keep_going {
                went_on = true;
            } else {
                stop = Some(ExitCode::StepFailed);
            }
            let report = match &failure {
                RowFailure::Error(error) => {
                    diagnostics::runtime_error(session, error, display, true)
                }
                RowFailure::Finding(found) => {
                    let expected = step.expected.as_deref().unwrap_or_default();
                    let headline = format!(
                        "check \"{}\": expected {expected}, found {found}",
                        step.name
                    );
                    let at = match (&step.source, step.position.line()) {
                        (Some(source), Some(line)) => format!("  --> {source}:{line}\n"),
                        (None, Some(line)) => format!("  --> {display}:{line}\n"),
                        _ => String::new(),
                    };
                    diagnostics::Report {
                        text: format!("{headline}\n{at}"),
                        headline,
                        location: match (&step.source, step.position.line()) {
                            (Some(source), Some(line)) => Some(format!("{source}:{line}")),
                            (None, Some(line)) => Some(format!("{display}:{line}")),
                            _ => None,
                        },
                        hint: step.on_failure.clone(),
                    }
                }
            };
            if step.expected.is_some() {
                let found = match &failure {
                    RowFailure::Finding(found) => found.clone(),
                    RowFailure::Error(_) => report.headline.clone(),
                };
                row = Some(CheckLine::new(number, step, &found, CheckResult::Failed));
            }
            let failed = record(
                step,
                StepStatus::Failed,
                Some(began_at),
                elapsed,
                changes,
                Some(bprun_clients::secret::scrub(&report.headline)),
                None,
            );
            if let Some(row) = &row {
                reporter.check_row(row);
            }
            reporter.step_end(number, total, &failed);
            let look_at = step
                .on_failure
                .as_ref()
                .map(|text| format!("  when this step fails: {text}\n"))
                .unwrap_or_default();
            let next = if step.keep_going {
                "the next steps still run; the run will exit 1\n"
            } else {
                "re-run with --resume to continue from here\n"
            };
            reporter.error_event(
                &format!(
                    "error: step \"{}\" failed\n{}{look_at}{next}",
                    step.name, report.text
                ),
                &crate::output::ErrorEvent {
                    headline: &report.headline,
                    step: Some(&step.name),
                    location: report.location.as_deref(),
                    hint: report.hint.as_deref().or(step.on_failure.as_deref()),
                },
            );
            return StepRun {
                record: failed,
                row,
                stop,
                went_on,
            };
        }
    };
    if let Some(row) = &row {
        reporter.check_row(row);
    }
    reporter.step_end(number, total, &finished);
    StepRun {
        record: finished,
        row,
        stop,
        went_on,
    }
}

/// Why a step's body did not succeed: an error, or (for a check row) a finding that differs
/// from what the row expects.
enum RowFailure {
    Error(Box<EvalAltResult>),
    Finding(String),
}

/// What a check row's body returned: its finding, and whether the row passes. A string (or any
/// value) passes when it equals `expected`; a map `#{found, passed}` carries its own verdict.
fn row_finding(expected: &str, value: &Dynamic) -> Result<(String, bool), String> {
    if let Some(map) = value.read_lock::<rhai::Map>() {
        let found = map.get("found").map(|found| found.to_string());
        let passed = map.get("passed").map(|passed| passed.as_bool());
        return match (found, passed) {
            (Some(found), Some(Ok(passed))) => Ok((bprun_clients::secret::scrub(&found), passed)),
            (Some(_), Some(Err(type_name))) => Err(format!(
                "the row's `passed` is {type_name}, not a bool (return #{{found: \"...\", passed: true}})"
            )),
            _ => Err(
                "the row returned a map without `found` and `passed` (return a string, or #{found: \"...\", passed: true})"
                    .to_string(),
            ),
        };
    }
    let found = if value.is_unit() {
        "nothing".to_string()
    } else {
        bprun_clients::secret::scrub(&value.to_string())
    };
    let passed = found == expected;
    Ok((found, passed))
}

fn skip_reason(error: &EvalAltResult) -> Option<String> {
    let mut inner = error;
    while let EvalAltResult::ErrorInFunctionCall(_, _, next, _) = inner {
        inner = next;
    }
    match inner {
        EvalAltResult::ErrorRuntime(value, _) => {
            value.read_lock::<StepSkip>().map(|skip| skip.0.clone())
        }
        _ => None,
    }
}

fn record(
    step: &StepDecl,
    status: StepStatus,
    started: Option<String>,
    duration: Duration,
    changes: u32,
    error: Option<String>,
    note: Option<String>,
) -> StepRecord {
    StepRecord {
        name: step.name.clone(),
        status,
        started,
        duration_s: duration.as_secs_f64(),
        changes,
        error,
        note,
    }
}

/// `bprun --timings SCRIPT`: the last real run's table, compared with the run before it.
/// `--summary`: where the last run stopped and the next three steps, from the journal alone
/// (no script step runs, no server is contacted).
pub fn summary(script: &Path, json: bool) -> Result<ExitCode, Error> {
    let location = ScriptLocation::find(script)?;
    let journal = Journal::load(&location.root, &location.display)?;
    let Some(last) = journal.last_real_run() else {
        if json {
            crate::output::print_event(serde_json::json!({
                "event": "summary", "script": location.display, "last_run": null,
                "stopped_at": null, "next": [],
            }));
            return Ok(ExitCode::Success);
        }
        println!(
            "no recorded run of {} yet: the next run starts at step 1 (`bprun --list {}` shows the plan)",
            location.display, location.display
        );
        return Ok(ExitCode::Success);
    };
    let total = last.steps.len();
    let unfinished = |status: &StepStatus| {
        matches!(
            status,
            StepStatus::Failed | StepStatus::Interrupted | StepStatus::NotRun
        )
    };
    let current = last.steps.iter().position(|step| unfinished(&step.status));
    if json {
        let stopped_at = current.map(|index| {
            let step = &last.steps[index];
            serde_json::json!({
                "index": index + 1, "name": step.name, "status": step.status,
                "error": step.error,
            })
        });
        let next: Vec<serde_json::Value> = current
            .map(|index| {
                last.steps
                    .iter()
                    .enumerate()
                    .skip(index)
                    .map(|(at, step)| serde_json::json!({"index": at + 1, "name": step.name}))
                    .collect()
            })
            .unwrap_or_default();
        crate::output::print_event(serde_json::json!({
            "event": "summary", "script": location.display,
            "last_run": {"started": last.started, "outcome": last.outcome,
                         "duration_s": last.duration_s, "steps": total},
            "stopped_at": stopped_at, "next": next,
        }));
        return Ok(ExitCode::Success);
    }
    println!(
        "Last run of {}: {} ({}, {:.2} s)",
        location.display, last.started, last.outcome, last.duration_s
    );
    match current {
        None => {
            println!(
                "all {total} steps finished; a re-run checks each and changes only what drifted"
            );
        }
        Some(index) => {
            let step = &last.steps[index];
            let why = step
                .error
                .as_deref()
                .map(|error| format!(": {}", bprun_clients::secret::scrub(error)))
                .unwrap_or_default();
            println!(
                "stopped at step {}/{total} \"{}\" ({}){why}",
                index + 1,
                step.name,
                step.status.label()
            );
            let next: Vec<String> = last
                .steps
                .iter()
                .enumerate()
                .skip(index)
                .take(4)
                .map(|(at, step)| format!("{} {}", at + 1, step.name))
                .collect();
            let more = total.saturating_sub(index + 4);
            println!(
                "next: {}{}",
                next.join(", "),
                if more > 0 {
                    format!(" (then {more} more)")
                } else {
                    String::new()
                }
            );
            println!("continue with: bprun --resume {}", location.display);
        }
    }
    Ok(ExitCode::Success)
}

pub fn timings(script: &Path, json: bool) -> Result<ExitCode, Error> {
    let location = ScriptLocation::find(script)?;
    let journal = Journal::load(&location.root, &location.display)?;
    let last = journal.last_real_run();
    let previous = journal.previous_real_run();
    if json {
        crate::output::print_event(serde_json::json!({
            "event": "timings", "script": location.display, "last_run": last,
            "previous_run": previous,
        }));
        return Ok(ExitCode::Success);
    }
    let Some(last) = last else {
        println!("no recorded run of {} yet", location.display);
        return Ok(ExitCode::Success);
    };
    println!(
        "Last run of {}: {} ({}, {:.2} s)",
        location.display, last.started, last.outcome, last.duration_s
    );
    if let Some(previous) = previous {
        println!(
            "previous: {} ({}, {:.2} s)",
            previous.started, previous.outcome, previous.duration_s
        );
    }
    print!(
        "{}",
        bprun_clients::secret::scrub(&recap_table(
            &last.steps,
            false,
            previous.map(|run| run.steps.as_slice())
        ))
    );
    Ok(ExitCode::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn script_args_become_a_map() {
        let map = parse_script_args(&strings(&[
            "--app",
            "guestbook",
            "--destroy",
            "--tag",
            "a",
            "--tag=b",
            "extra",
            "--no-overwrite-ci",
        ]))
        .expect("valid");
        assert_eq!(map["app"].to_string(), "guestbook");
        assert!(map["destroy"].as_bool().expect("bool"));
        assert!(map["no_overwrite_ci"].as_bool().expect("bool"));
        let tags = map["tag"].clone().into_array().expect("array");
        assert_eq!(
            tags.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let positional = map["positional"].clone().into_array().expect("array");
        assert_eq!(positional[0].to_string(), "extra");
    }

    #[test]
    fn bad_script_argument_is_a_usage_error() {
        let error = parse_script_args(&strings(&["--=x"])).expect_err("invalid");
        assert_eq!(error.exit_code(), ExitCode::Usage);
    }
}
