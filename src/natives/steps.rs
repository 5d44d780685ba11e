//! Declaring steps, and running a closure over items in parallel.

use crate::natives::options::RhaiResultOf;
use rhai::FnPtr;
use rhai::plugin::*;
use rhai::{Array, Map};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::engine::{StepDecl, lock, native_error, session};
use crate::error::NativeError;
use crate::state::Phase;
use bprun_clients::write_gate::{self, WriteGate};

type ItemResult = Result<Dynamic, Box<EvalAltResult>>;

/// The default bound of `parallel(items, body)`.
pub const DEFAULT_PARALLEL_LIMIT: i64 = 4;

fn item_label(item: &Dynamic) -> String {
    if let Some(map) = item.read_lock::<rhai::Map>()
        && let Some(name) = map.get("name")
    {
        return name.to_string();
    }
    let text = item.to_string();
    if text.chars().count() > 40 {
        format!("{}...", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

/// A declared step, as `step(...)` returns it: `concurrently([step(...), step(...)])` at the
/// top level declares that those steps run together.
#[derive(Debug, Clone)]
pub struct StepRef {
    pub index: usize,
    pub name: String,
}

/// The default bound of a group of steps run together: helm, kubectl exec and the API server
/// are shared by its steps.
pub const DEFAULT_GROUP_LIMIT: i64 = 4;

#[export_module]
pub mod step_functions {
    use super::*;

    /// A declared step (what `step(...)` returns).
    pub type Step = super::StepRef;

    /// The name of a declared step.
    ///
    /// ```rhai
    /// let login = step("Login", || {});
    /// assert_eq(login.name, "Login");
    /// ```
    #[rhai_fn(get = "name", pure)]
    pub fn step_name(step: &mut StepRef) -> String {
        step.name.clone()
    }

    /// Declares the script's parameters and returns their values: a literal map from each
    /// parameter's name to its `type` ("bool", "int", "string" or "list"), `help` (one line) and
    /// optional `default_value` (`default` is a reserved word in Rhai). Call it once, first, at the top level: bprun checks the command line
    /// against it before anything runs (an unknown or mistyped argument is a usage error with a
    /// did-you-mean, exit 2), and `bprun --list SCRIPT` and `bprun SCRIPT --help` show it. A
    /// parameter not given is its default, or `()`. The flag of `smoke_timeout` is
    /// `--smoke-timeout`.
    ///
    /// ```rhai
    /// let args = params(#{
    ///     app: #{type: "string", help: "Provision only this app (and shared-code)"},
    ///     smoke_timeout: #{type: "int", default_value: 600, help: "Seconds to wait for pipelines"},
    /// });
    /// info(`waiting up to ${args.smoke_timeout} s`);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn params(context: NativeCallContext, spec: rhai::Map) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        if let Some(bound) = lock(&session.params).as_ref() {
            return Ok(bound.values.clone());
        }
        // Not checked before the run (the REPL, or a script evaluated another way): the
        // declaration is read now and every parameter takes its default.
        let decls = crate::params::from_spec(&spec)
            .map_err(|message| native_error(NativeError::new(message)))?;
        crate::params::bind(&decls, &[])
            .map_err(|error| native_error(NativeError::new(error.message).with_hint(error.hint)))
    }

    /// Declares a step. The top level of a script declares its steps in order; bprun runs them
    /// after the top level finishes, so `bprun --list` shows the plan without running any body.
    /// A step's status (ok / changed / skipped / failed) comes from what its natives report.
    /// Names must be unique; `--only`, `--skip` and `--from` select steps by name.
    ///
    /// ```rhai
    /// step("Ensure group", || {
    ///     info("ensuring blueprint-apps");
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn step(context: NativeCallContext, name: &str, body: FnPtr) -> RhaiResultOf<StepRef> {
        declare(&context, name, body, StepOptions::default())
    }

    /// Declares what the operator is handed when a whole run succeeds: `body` returns the text
    /// (or `()` for none), printed after the recap. Not in check mode, and not after a run
    /// that `--only`, `--from`, `--skip` or `--resume` narrowed, or that failed: the handover
    /// speaks of the platform the whole script leaves. One per script.
    ///
    /// ```rhai
    /// handover(|| `Next: bprun scripts/phase3.rhai`);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn handover(context: NativeCallContext, body: FnPtr) -> RhaiResultOf<()> {
        let session = session(&context)?;
        if session.state.phase() == Phase::Running {
            return Err(native_error(
                NativeError::new("handover(...) was declared inside a step")
                    .with_hint("declare it at the top level of the script, once"),
            ));
        }
        let mut slot = lock(&session.handover);
        if slot.is_some() {
            return Err(native_error(
                NativeError::new("handover(...) is declared twice")
                    .with_hint("a script hands over one text: build it in one closure"),
            ));
        }
        *slot = Some(body);
        Ok(())
    }

    /// Declares a step with options: `always` (true: the step runs whatever `--only`, `--from`
    /// or `--resume` select, as Ansible's `always` tag; only `--skip NAME` leaves it out), for
    /// steps every later step needs, such as logging in; `on_failure` (text shown under the
    /// step's error: where to look when it fails, such as the runbook's failure mapping);
    /// `needs` (names of steps whose work this one needs: the plan and `--list` warn when one of
    /// them comes later in the script, so a reordered script says what it broke before it runs);
    /// `keep_going` (true: when the step fails, its error is reported and the next steps still
    /// run; the run then exits 1), for independent checks whose every failure matters; `tags`
    /// (labels `--tags` and `--skip-tags` select by, as Ansible's tags).
    ///
    /// ```rhai
    /// step("Login", #{always: true}, || {
    ///     info("logging in");
    /// });
    /// step("Database", #{on_failure: "check the claim's annotations (stable storage step)"}, || {
    ///     info("database");
    /// });
    /// step("App", #{needs: ["Database"]}, || {
    ///     info("app");
    /// });
    /// step("Lint", #{keep_going: true, tags: ["checks"]}, || {
    ///     info("a failure here does not stop the next step");
    /// });
    /// ```
    #[rhai_fn(name = "step", return_raw)]
    pub fn step_with(
        context: NativeCallContext,
        name: &str,
        options: rhai::Map,
        body: FnPtr,
    ) -> RhaiResultOf<StepRef> {
        crate::natives::options::reject_undeclared(&options, "step")?;
        let names = |option: &str, what: &str| -> RhaiResultOf<Vec<String>> {
            match options.get(option) {
                None => Ok(Vec::new()),
                Some(value) => Ok(value
                    .clone()
                    .into_typed_array::<rhai::ImmutableString>()
                    .map_err(|_| {
                        native_error(NativeError::new(format!(
                            "step(\"{name}\"): `{option}` must be an array of {what}"
                        )))
                    })?
                    .into_iter()
                    .map(|n| n.to_string())
                    .collect()),
            }
        };
        let needs = names("needs", "step names")?;
        let tags = names("tags", "tags (strings)")?;
        let always =
            crate::natives::options::option_bool(&options, "always", "step")?.unwrap_or(false);
        let on_failure = crate::natives::options::option_str(&options, "on_failure", "step")?;
        let keep_going =
            crate::natives::options::option_bool(&options, "keep_going", "step")?.unwrap_or(false);
        declare(
            &context,
            name,
            body,
            StepOptions {
                always,
                on_failure,
                needs,
                keep_going,
                expected: None,
                tags,
            },
        )
    }

    /// Declares one row of a qualification report (a smoke test): a step that only reads, whose
    /// body returns what it found. The row passes when that equals `expected`; a body may instead
    /// return `#{found: "...", passed: true}` for a verdict that is not an equality. A row that
    /// fails (a different finding, or an error, whose message becomes the finding) is reported
    /// with `hint` and the next rows still run; the run then exits 1. A row that cannot be
    /// checked (something it reads through is down) calls `skip(reason)`: it shows as `not
    /// checked` with the reason, and the run exits 1 too (only passed rows qualify). bprun
    /// then prints the table of rows (check, expected, found, result, the hint of each failed row);
    /// `--json` emits one `check` event per row. Rows are steps: `--only` and `--skip` select
    /// them. Options: `expected` (required text), `hint` (what to look at when the row fails).
    ///
    /// ```rhai
    /// check_row("Answer", #{expected: "42", hint: "see the guide"}, || {
    ///     `${6 * 7}`
    /// });
    /// check_row("Nodes", #{expected: "at least 1"}, || {
    ///     let nodes = 3;
    ///     #{found: `${nodes} nodes`, passed: nodes >= 1}
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn check_row(
        context: NativeCallContext,
        name: &str,
        options: rhai::Map,
        body: FnPtr,
    ) -> RhaiResultOf<()> {
        crate::natives::options::reject_undeclared(&options, "check_row")?;
        let Some(expected) =
            crate::natives::options::option_str(&options, "expected", "check_row")?
        else {
            return Err(native_error(
                NativeError::new(format!(
                    "check_row(\"{name}\"): the option `expected` is missing"
                ))
                .with_hint("say what the row expects to find: check_row(\"Gateway Programmed\", #{expected: \"True\"}, || ...)"),
            ));
        };
        let on_failure = crate::natives::options::option_str(&options, "hint", "check_row")?;
        declare(
            &context,
            name,
            body,
            StepOptions {
                always: false,
                on_failure,
                needs: Vec::new(),
                keep_going: true,
                expected: Some(expected),
                tags: Vec::new(),
            },
        )
        .map(|_| ())
    }

    /// Calls `body(item)` for every item, at most `limit` at a time, and returns the results in
    /// the order of `items`. Every failure is reported (not just the first) in one error that
    /// names each failed item.
    ///
    /// ```rhai
    /// let squares = parallel([1, 2, 3], |n| n * n, 2);
    /// assert_eq(squares, [1, 4, 9]);
    /// ```
    #[rhai_fn(name = "parallel", return_raw)]
    pub fn parallel_with_limit(
        context: NativeCallContext,
        items: rhai::Array,
        body: FnPtr,
        limit: i64,
    ) -> RhaiResultOf<Array> {
        parallel_items(context, items, body, limit, WriteOrder::Free)
    }

    /// Like `parallel(items, body, limit)` with options: `limit` (default 4),
    /// `writes_after_first` (true: the first item runs to its end before any other item sends a
    /// remote write, a GitLab POST, PUT or DELETE or a git push; the others' reads go ahead
    /// meanwhile, and their writes are not sent if the first item fails), and `writes_in_order`
    /// (true: as `writes_after_first`, and each later item's writes also wait until the item
    /// before it has finished, so what they create is created in the items' order, with the
    /// same ids on every rebuild; a later item that fails does not hold the next one back).
    ///
    /// ```rhai
    /// let apps = [#{name: "shared-code"}, #{name: "guestbook"}];
    /// let names = parallel(apps, |app| app.name, #{limit: 16, writes_after_first: true});
    /// ```
    #[rhai_fn(name = "parallel", return_raw)]
    pub fn parallel_with_options(
        context: NativeCallContext,
        items: rhai::Array,
        body: FnPtr,
        options: rhai::Map,
    ) -> RhaiResultOf<Array> {
        crate::natives::options::reject_undeclared(&options, "parallel")?;
        let limit = match options.get("limit") {
            None => DEFAULT_PARALLEL_LIMIT,
            Some(value) => value.as_int().map_err(|type_name| {
                native_error(NativeError::new(format!(
                    "parallel: `limit` must be an integer, not {type_name}"
                )))
            })?,
        };
        let flag = |name: &str| {
            crate::natives::options::option_bool(&options, name, "parallel")
                .map(|value| value.unwrap_or(false))
        };
        let order = if flag("writes_in_order")? {
            WriteOrder::InOrder
        } else if flag("writes_after_first")? {
            WriteOrder::AfterFirst
        } else {
            WriteOrder::Free
        };
        parallel_items(context, items, body, limit, order)
    }

    /// Calls every closure of `tasks` at the same time and returns their results in order: for
    /// independent work, such as reads of different systems, that would otherwise wait for one
    /// another. When one fails, its error is raised as it is; when several fail, each is named.
    ///
    /// ```rhai
    /// let both = concurrently([|| 1 + 1, || "two"]);
    /// assert_eq(both, [2, "two"]);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn concurrently(context: NativeCallContext, tasks: rhai::Array) -> RhaiResultOf<Array> {
        if tasks.iter().any(|task| task.is::<StepRef>()) {
            return group_steps(&context, tasks, DEFAULT_GROUP_LIMIT, false);
        }
        let mut closures = Vec::with_capacity(tasks.len());
        for (index, task) in tasks.iter().enumerate() {
            let closure = task
                .read_lock::<FnPtr>()
                .map(|f| f.clone())
                .ok_or_else(|| {
                    native_error(NativeError::new(format!(
                        "concurrently: task {} is a {}, not a closure",
                        index + 1,
                        task.type_name()
                    )))
                })?;
            closures.push(closure);
        }
        let results = run_concurrently(
            &context,
            closures.len(),
            closures.len(),
            Vec::new(),
            |worker, index| closures[index].call_within_context::<Dynamic>(worker, ()),
        )?;
        let mut values = rhai::Array::with_capacity(closures.len());
        let mut errors = Vec::new();
        for (index, outcome) in results.into_iter().enumerate() {
            match outcome {
                Some(Ok(value)) => values.push(value),
                Some(Err(error)) => errors.push((index, error)),
                None => errors.push((
                    index,
                    native_error(NativeError::new("concurrently: did not run")),
                )),
            }
        }
        if let Some(position) = errors
            .iter()
            .position(|(_, error)| matches!(**error, EvalAltResult::ErrorTerminated(..)))
        {
            return Err(errors.swap_remove(position).1);
        }
        match errors.len() {
            0 => Ok(values),
            // One failure reads as it would have without the others running alongside.
            1 => Err(errors.swap_remove(0).1),
            count => {
                let mut error = NativeError::new(format!(
                    "concurrently: {count} of {} tasks failed",
                    closures.len()
                ));
                for (index, failure) in errors {
                    error = error.caused_by(format!(
                        "task {}: {}",
                        index + 1,
                        crate::diagnostics::headline(&failure)
                    ));
                }
                Err(native_error(error))
            }
        }
    }

    /// At the top level, `concurrently([step(...), step(...), ...])` declares that those steps
    /// run together: they start at once (at most `limit` at a time, default 4, since helm,
    /// kubectl exec and the API server are shared), each step's lines are held and printed
    /// together in declaration order, and when one fails the others still finish; every failed
    /// step is reported, and `--resume` runs the unfinished ones again. Options: `limit`, and
    /// `writes_after_first`: the other steps read at once, but each remote write (GitLab, git
    /// push) waits until the first step has succeeded, and is not sent when it failed. The
    /// steps must be declared right there, in the group's order; `--list` shows them as a
    /// group. Inside a step it calls closures, as `concurrently(tasks)` does.
    ///
    /// ```rhai
    /// concurrently([
    ///     step("Redis", || { info("redis"); }),
    ///     step("MinIO", || { info("minio"); }),
    /// ], #{limit: 2});
    /// ```
    #[rhai_fn(name = "concurrently", return_raw)]
    pub fn concurrently_with(
        context: NativeCallContext,
        tasks: rhai::Array,
        options: rhai::Map,
    ) -> RhaiResultOf<Array> {
        crate::natives::options::reject_undeclared(&options, "concurrently")?;
        let limit = crate::natives::options::option_int(
            &options,
            "limit",
            "concurrently",
            DEFAULT_GROUP_LIMIT,
        )?;
        let writes_after_first =
            crate::natives::options::option_bool(&options, "writes_after_first", "concurrently")?
                .unwrap_or(false);
        if tasks.iter().all(|task| task.is::<StepRef>()) && !tasks.is_empty() {
            return group_steps(&context, tasks, limit, writes_after_first);
        }
        Err(native_error(
            NativeError::new("concurrently(tasks, options): the options are for a group of steps")
                .with_hint("at the top level: concurrently([step(...), step(...)], #{limit: 2}); inside a step: concurrently([|| ..., || ...])"),
        ))
    }

    /// `parallel(items, body, 4)`.
    ///
    /// ```rhai
    /// let names = parallel(["a", "b"], |s| s + "!");
    /// ```
    #[rhai_fn(name = "parallel", return_raw)]
    pub fn parallel(
        context: NativeCallContext,
        items: rhai::Array,
        body: FnPtr,
    ) -> RhaiResultOf<Array> {
        parallel_with_limit(context, items, body, DEFAULT_PARALLEL_LIMIT)
    }
}

/// What a step declaration may add to a name and a body.
#[derive(Default)]
struct StepOptions {
    always: bool,
    on_failure: Option<String>,
    needs: Vec<String>,
    keep_going: bool,
    expected: Option<String>,
    tags: Vec<String>,
}

/// When the items' remote writes may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteOrder {
    /// As soon as each item sends them.
    Free,
    /// After the first item finished (and not at all if it failed).
    AfterFirst,
    /// After the first item finished, and after the item before.
    InOrder,
}

/// `parallel`: see its forms above.
fn parallel_items(
    context: NativeCallContext,
    items: rhai::Array,
    body: FnPtr,
    limit: i64,
    order: WriteOrder,
) -> RhaiResultOf<Array> {
    let labels: Vec<String> = match order {
        WriteOrder::Free => Vec::new(),
        WriteOrder::AfterFirst => items.first().map(item_label).into_iter().collect(),
        WriteOrder::InOrder => items.iter().map(item_label).collect(),
    };
    if limit < 1 {
        return Err(native_error(NativeError::new(format!(
            "parallel: limit must be at least 1, not {limit}"
        ))));
    }
    let results = run_concurrently(
        &context,
        items.len(),
        limit as usize,
        labels,
        |worker, index| body.call_within_context::<Dynamic>(worker, (items[index].clone(),)),
    )?;
    let mut values = rhai::Array::with_capacity(items.len());
    let mut failures = Vec::new();
    for (index, outcome) in results.into_iter().enumerate() {
        match outcome {
            Some(Ok(value)) => values.push(value),
            Some(Err(error)) => {
                if matches!(*error, EvalAltResult::ErrorTerminated(..)) {
                    return Err(error);
                }
                failures.push(format!(
                    "item {} ({}): {}",
                    index + 1,
                    item_label(&items[index]),
                    crate::diagnostics::headline(&error)
                ));
            }
            None => failures.push(format!(
                "item {} ({}): did not run",
                index + 1,
                item_label(&items[index])
            )),
        }
    }
    if failures.is_empty() {
        return Ok(values);
    }
    let mut error = NativeError::new(format!(
        "parallel: {} of {} items failed",
        failures.len(),
        items.len()
    ));
    for failure in failures {
        error = error.caused_by(failure);
    }
    Err(native_error(error.with_hint(
        "each failed item is listed above; the others finished",
    )))
}

/// Calls `call(worker_context, index)` for every index below `count`, at most `limit` at a
/// time on worker threads (each with the caller's context and write gate); the outcomes in
/// index order (`None`: not run, as when the run was interrupted first). `awaited` holds the
/// labels of the items whose end later items' remote writes wait for: with one label (the
/// first item's), every other item waits for the first, and sends nothing if it failed; with
/// one label per item, item `i` waits for item `i - 1` as well (whose failure, past the
/// first, only lets it go on). Reads go ahead meanwhile.
fn run_concurrently(
    context: &NativeCallContext,
    count: usize,
    limit: usize,
    awaited: Vec<String>,
    call: impl Fn(&NativeCallContext, usize) -> ItemResult + Sync,
) -> Result<Vec<Option<ItemResult>>, Box<EvalAltResult>> {
    let session = session(context)?;
    let workers = limit.min(count).max(1);
    // The workers work for the step that called: its lines and changes, when it runs in a group.
    let step_scope = crate::scope::current();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<ItemResult>>> = Mutex::new((0..count).map(|_| None).collect());
    let engine = context.engine();
    let outer = write_gate::current();
    // gates[i]: opened when item i has finished. The first one's inside the caller's gate;
    // each later one inside the first's, so the first item's failure holds everything back.
    let mut gates: Vec<std::sync::Arc<WriteGate>> = Vec::new();
    for label in awaited {
        let gate = match gates.first() {
            Some(first) => write_gate::with_gate(Some(first.clone()), || WriteGate::new(label)),
            None => WriteGate::new(label),
        };
        gates.push(gate);
    }
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let store = crate::engine::detach_context(context);
            let (call, next, results, session) = (&call, &next, &results, &session);
            let (outer, gates) = (&outer, &gates);
            let step_scope = step_scope.clone();
            scope.spawn(move || {
                crate::scope::within(step_scope, || {
                    let worker_context = crate::engine::attach_context(&store, engine);
                    loop {
                        let index = next.fetch_add(1, Ordering::SeqCst);
                        if index >= count {
                            break;
                        }
                        // The gate of the item it waits for: the one before, or the first.
                        let gate = match index {
                            0 => outer.clone(),
                            _ => gates
                                .get(index - 1)
                                .or_else(|| gates.first())
                                .cloned()
                                .or_else(|| outer.clone()),
                        };
                        let outcome = if session.state.is_cancelled() {
                            Err(native_error(NativeError::new("parallel: interrupted")))
                        } else {
                            write_gate::with_gate(gate, || call(&worker_context, index))
                        };
                        if let Some(gate) = gates.get(index) {
                            match &outcome {
                                Err(error) if index == 0 => {
                                    gate.fail(crate::diagnostics::headline(error))
                                }
                                _ => gate.open(),
                            }
                        }
                        lock(results)[index] = Some(outcome);
                    }
                })
            });
        }
    });
    Ok(results
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// Records a step the top level declares.
fn declare(
    context: &NativeCallContext,
    name: &str,
    body: FnPtr,
    options: StepOptions,
) -> RhaiResultOf<StepRef> {
    let session = session(context)?;
    if session.state.phase() == Phase::Running {
        return Err(native_error(
                NativeError::new(format!("step(\"{name}\") was declared inside another step"))
                    .with_hint("declare every step at the top level of the script; use functions to share code between steps"),
            ));
    }
    if name.trim().is_empty() {
        return Err(native_error(
            NativeError::new("a step needs a name").with_hint("step(\"Ensure group\", || { ... })"),
        ));
    }
    let mut steps = lock(&session.steps);
    if steps.iter().any(|existing| existing.name == name) {
        return Err(native_error(
            NativeError::new(format!("step \"{name}\" is declared twice"))
                .with_hint("step names select steps on the command line, so each must be unique"),
        ));
    }
    steps.push(StepDecl {
        name: name.to_string(),
        body,
        position: context.call_position(),
        source: context.call_source().map(str::to_string),
        always: options.always,
        on_failure: options.on_failure,
        needs: options.needs,
        keep_going: options.keep_going,
        expected: options.expected,
        tags: options.tags,
        group: None,
    });
    Ok(StepRef {
        index: steps.len() - 1,
        name: name.to_string(),
    })
}

/// `concurrently([step(...), ...])` at the top level: marks the steps, just declared in this
/// order, as a group that runs together.
fn group_steps(
    context: &NativeCallContext,
    tasks: rhai::Array,
    limit: i64,
    writes_after_first: bool,
) -> RhaiResultOf<Array> {
    let session = session(context)?;
    let refs: Vec<StepRef> = tasks
        .iter()
        .enumerate()
        .map(|(index, task)| {
            task.read_lock::<StepRef>().map(|step| step.clone()).ok_or_else(|| {
                native_error(
                    NativeError::new(format!(
                        "concurrently: item {} is a {}, not a step",
                        index + 1,
                        task.type_name()
                    ))
                    .with_hint("a group holds steps only: concurrently([step(\"A\", || ...), step(\"B\", || ...)])"),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    if session.state.phase() == Phase::Running {
        return Err(native_error(
            NativeError::new(
                "concurrently: steps run together are declared at the top level, not inside a step",
            )
            .with_hint("declare the group where its steps are declared"),
        ));
    }
    if limit < 1 {
        return Err(native_error(NativeError::new(format!(
            "concurrently: limit must be at least 1, not {limit}"
        ))));
    }
    let mut steps = lock(&session.steps);
    let first = refs[0].index;
    let declared_together = refs
        .iter()
        .enumerate()
        .all(|(offset, step)| step.index == first + offset)
        && first + refs.len() == steps.len();
    if !declared_together {
        let names: Vec<&str> = refs.iter().map(|step| step.name.as_str()).collect();
        return Err(native_error(
            NativeError::new(format!(
                "concurrently: the steps {} are not the ones just declared, in this order",
                names.join(", ")
            ))
            .with_hint("declare a group's steps inside it: concurrently([step(\"A\", || ...), step(\"B\", || ...)]), so the script shows where they run"),
        ));
    }
    if let Some(grouped) = refs.iter().find(|step| steps[step.index].group.is_some()) {
        return Err(native_error(NativeError::new(format!(
            "concurrently: step \"{}\" is in a group already",
            grouped.name
        ))));
    }
    let group = crate::decl::StepGroup {
        first,
        limit: limit as usize,
        writes_after_first,
    };
    for step in &refs {
        steps[step.index].group = Some(group);
    }
    Ok(tasks)
}
