//! Running programs: `{ok, code, stdout, stderr}` instead of throwing.

use crate::natives::options::RhaiResultOf;
use crate::state::Resource;
use rhai::Map;
use rhai::plugin::*;
use std::time::Duration;

use crate::engine::{native_error, session};
use crate::error::NativeError;
use crate::output::Level;
use bprun_clients::fs::Confinement;
use bprun_clients::process::{ProcessSpec, run};
use bprun_clients::secret::Secret;

/// The default timeout of `run_command`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

fn text_arg(value: &Dynamic, what: &str) -> RhaiResultOf<(String, String)> {
    if let Some(secret) = value.read_lock::<Secret>() {
        return Ok((
            secret.reveal().to_string(),
            bprun_clients::secret::REDACTED.to_string(),
        ));
    }
    if value.is_string() || value.is_int() || value.is_float() || value.is_bool() {
        let text = value.to_string();
        return Ok((text.clone(), text));
    }
    Err(native_error(NativeError::new(format!(
        "run_command: {what} must be a string or a Secret, not {}",
        value.type_name()
    ))))
}

#[export_module]
pub mod process_functions {
    use super::*;

    /// Runs a program (no shell) and returns `#{ok, code, stdout, stderr}`; a non-zero exit is a
    /// result, not an exception. Arguments may be `Secret`s: they reach the program but show as
    /// `***` in logs. Options: `read_only` (true lets it run in check mode and records no change),
    /// `cwd` (under the repository root), `env` (a map), `stdin` (a string or `Secret`),
    /// `timeout` (seconds, default 600), `check` (true throws on a non-zero exit).
    /// A command that is not `read_only` cannot say what it would change, so it refuses to run in
    /// check mode, and counts as a change when it runs.
    ///
    /// ```rhai
    /// step("Pre-flight", || {
    ///     let helm = run_command(["helm", "version", "--short"], #{read_only: true});
    ///     if !helm.ok { throw `helm is not usable: ${helm.stderr}` }
    /// });
    /// ```
    #[rhai_fn(name = "run_command", return_raw)]
    pub fn run_command_with(
        context: NativeCallContext,
        argv: rhai::Array,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        let state = &session.state;
        state.require_step("run_command").map_err(native_error)?;
        if argv.is_empty() {
            return Err(native_error(
                NativeError::new("run_command: the argument list is empty")
                    .with_hint("pass the program and its arguments, e.g. [\"helm\", \"version\"]"),
            ));
        }
        let mut plain = Vec::with_capacity(argv.len());
        let mut shown = Vec::with_capacity(argv.len());
        for (index, value) in argv.iter().enumerate() {
            let (text, display) = text_arg(value, &format!("argument {index}"))?;
            plain.push(text);
            shown.push(display);
        }
        let program = plain.remove(0);
        let command_line = shown.join(" ");
        let mut spec = ProcessSpec {
            program,
            args: plain,
            timeout: DEFAULT_TIMEOUT,
            ..ProcessSpec::default()
        };
        let mut read_only = false;
        let mut check_exit = false;
        crate::natives::options::reject_undeclared(&options, "run_command")?;
        for (key, value) in options {
            match key.as_str() {
                "read_only" => {
                    read_only = value.as_bool().map_err(|t| {
                        native_error(NativeError::new(format!(
                            "run_command: read_only must be true or false, not {t}"
                        )))
                    })?
                }
                "check" => {
                    check_exit = value.as_bool().map_err(|t| {
                        native_error(NativeError::new(format!(
                            "run_command: check must be true or false, not {t}"
                        )))
                    })?
                }
                "timeout" => spec.timeout = super::super::seconds(&value, "run_command timeout")?,
                "cwd" => {
                    let cwd = value.into_immutable_string().map_err(|t| {
                        native_error(NativeError::new(format!(
                            "run_command: cwd must be a string, not {t}"
                        )))
                    })?;
                    spec.cwd = Some(
                        Confinement::new(&state.root)
                            .resolve(&cwd)
                            .map_err(native_error)?,
                    );
                }
                "env" => {
                    let map = value.try_cast::<rhai::Map>().ok_or_else(|| {
                        native_error(NativeError::new(
                            "run_command: env must be a map of names to values",
                        ))
                    })?;
                    for (name, value) in map {
                        let (text, _) = text_arg(&value, &format!("env {name}"))?;
                        spec.env.push((name.to_string(), text));
                    }
                }
                "stdin" => spec.stdin = Some(text_arg(&value, "stdin")?.0.into_bytes()),
                // The declared options (crate::natives::declared) are all read above.
                _ => {}
            }
        }
        if !read_only {
            state
                .refuse_in_check(
                    "run_command",
                    &format!("`{command_line}` may change things and bprun cannot tell what"),
                )
                .map_err(native_error)?;
        }
        state
            .reporter
            .log(Level::Debug, &format!("run: {command_line}"));
        let output = run(&spec, state.cancel_flag()).map_err(native_error)?;
        if !read_only {
            state.record_change("run", Resource::command(&command_line));
        }
        if check_exit && output.code != 0 {
            let tail: Vec<&str> = output
                .stderr
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(native_error(
                NativeError::new(format!("`{command_line}` exited with code {}", output.code))
                    .caused_by(tail.join("\n"))
                    .with_hint(
                        "the program's stderr is shown above; run it by hand to investigate",
                    ),
            ));
        }
        let mut result = rhai::Map::new();
        result.insert("ok".into(), (output.code == 0).into());
        result.insert("code".into(), (output.code as i64).into());
        result.insert("stdout".into(), output.stdout.into());
        result.insert("stderr".into(), output.stderr.into());
        Ok(result)
    }

    /// The path of a program found on `PATH` (an executable file), or `()`: a check without
    /// spawning a shell. Reads the environment only, so it also works at the top level.
    ///
    /// ```rhai
    /// if which("glab") == () { info("glab is not installed") }
    /// ```
    pub fn which(name: &str) -> Dynamic {
        bprun_clients::process::find_program(name)
            .map(|path| Dynamic::from(path.display().to_string()))
            .unwrap_or(Dynamic::UNIT)
    }

    /// `run_command(argv, #{})`: runs a program with the default options.
    ///
    /// ```rhai
    /// step("Build", || {
    ///     let result = run_command(["make", "all"]);
    /// });
    /// ```
    #[rhai_fn(name = "run_command", return_raw)]
    pub fn run_command(context: NativeCallContext, argv: rhai::Array) -> RhaiResultOf<Map> {
        run_command_with(context, argv, rhai::Map::new())
    }
}
