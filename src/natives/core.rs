//! Logging, environment, time, assertions and check-mode helpers every phase needs.

use crate::natives::options::RhaiResultOf;
use rhai::plugin::*;

use crate::engine::{native_error, session};
use crate::error::{NativeError, StepSkip};
use crate::output::Level;

#[export_module]
pub mod core_functions {
    use super::*;

    /// Logs an informational line (shown unless `-q`). `print(x)` does the same.
    ///
    /// ```rhai
    /// info("blueprint-apps group exists; reusing");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn info(context: NativeCallContext, message: Dynamic) -> RhaiResultOf<()> {
        session(&context)?
            .state
            .reporter
            .log(Level::Info, &crate::values::display(&message));
        Ok(())
    }

    /// Logs a warning (always shown, also with `-q`).
    ///
    /// ```rhai
    /// warn("group visibility is private, expected internal");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn warn(context: NativeCallContext, message: Dynamic) -> RhaiResultOf<()> {
        session(&context)?
            .state
            .reporter
            .log(Level::Warn, &crate::values::display(&message));
        Ok(())
    }

    /// Logs a debug line, shown only with `-v`. `debug(x)` does the same.
    ///
    /// ```rhai
    /// log_debug(`polling pipeline ${42}`);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn log_debug(context: NativeCallContext, message: Dynamic) -> RhaiResultOf<()> {
        session(&context)?
            .state
            .reporter
            .log(Level::Debug, &crate::values::display(&message));
        Ok(())
    }

    /// The value of an environment variable, or `()` when it is not set.
    ///
    /// ```rhai
    /// let url = env("GITLAB_URL");
    /// if url == () { warn("GITLAB_URL is not set") }
    /// ```
    #[rhai_fn(name = "env")]
    pub fn env_value(name: &str) -> Dynamic {
        std::env::var(name)
            .map(Dynamic::from)
            .unwrap_or(Dynamic::UNIT)
    }

    /// The value of an environment variable, or `default` when it is not set.
    ///
    /// ```rhai
    /// let namespace = env("GITLAB_NAMESPACE", "gitlab");
    /// ```
    #[rhai_fn(name = "env")]
    pub fn env_or(name: &str, default: Dynamic) -> Dynamic {
        std::env::var(name).map(Dynamic::from).unwrap_or(default)
    }

    /// An environment variable as a `Secret` (for tokens such as `GITLAB_TOKEN`), or `()`.
    ///
    /// ```rhai
    /// let token = env_secret("GITLAB_TOKEN");
    /// ```
    pub fn env_secret(name: &str) -> Dynamic {
        std::env::var(name)
            .map(|value| Dynamic::from(bprun_clients::secret::Secret::new(value)))
            .unwrap_or(Dynamic::UNIT)
    }

    /// Pauses for `seconds` (a number; fractions allowed). Ctrl-C interrupts it.
    ///
    /// ```rhai
    /// sleep(0.5);
    /// ```
    #[rhai_fn(name = "sleep", return_raw, volatile)]
    pub fn sleep_seconds(context: NativeCallContext, seconds: i64) -> RhaiResultOf<()> {
        sleep_for(&context, Dynamic::from(seconds))
    }

    /// Pauses for a fractional number of seconds. Ctrl-C interrupts it.
    ///
    /// ```rhai
    /// sleep(0.25);
    /// ```
    #[rhai_fn(name = "sleep", return_raw, volatile)]
    pub fn sleep_fraction(context: NativeCallContext, seconds: f64) -> RhaiResultOf<()> {
        sleep_for(&context, Dynamic::from(seconds))
    }

    /// Refuses anything that is not a number of seconds, with a clear message.
    ///
    /// ```rhai
    /// try { sleep("soon") } catch (e) { print(e.message) }
    /// ```
    #[rhai_fn(name = "sleep", return_raw)]
    pub fn sleep_other(context: NativeCallContext, seconds: Dynamic) -> RhaiResultOf<()> {
        sleep_for(&context, seconds)
    }

    /// The current time as an RFC 3339 UTC timestamp, e.g. `2026-11-30T06:27:24Z`.
    ///
    /// ```rhai
    /// info(`started at ${now()}`);
    /// ```
    #[rhai_fn(volatile)]
    pub fn now() -> String {
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
    }

    /// True when the run is in check mode (`--check`): natives report what they would change.
    ///
    /// ```rhai
    /// if check_mode() { info("dry run") }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn check_mode(context: NativeCallContext) -> RhaiResultOf<bool> {
        Ok(session(&context)?.state.check())
    }

    /// Reports a change the script made itself (for work no native reports), so the step shows
    /// `changed` and the recap counts it. `action` is a verb, `resource` names what changed.
    ///
    /// ```rhai
    /// step("Seed glab auth", || {
    ///     report_change("write", "glab config for gitlab.local.example.net");
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn report_change(
        context: NativeCallContext,
        action: &str,
        resource: &str,
    ) -> RhaiResultOf<()> {
        session(&context)?
            .state
            .record_change(action, crate::state::Resource::reported(action, resource));
        Ok(())
    }

    /// Fails with `message` unless `condition` is true.
    ///
    /// ```rhai
    /// assert(1 + 1 == 2, "arithmetic works");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn assert(condition: bool, message: &str) -> RhaiResultOf<()> {
        if condition {
            Ok(())
        } else {
            Err(native_error(NativeError::new(format!(
                "assertion failed: {message}"
            ))))
        }
    }

    /// Fails unless `actual == expected`, showing both (a `Secret` shows as `***`).
    ///
    /// ```rhai
    /// assert_eq(40 + 2, 42);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn assert_eq(
        context: NativeCallContext,
        actual: Dynamic,
        expected: Dynamic,
    ) -> RhaiResultOf<()> {
        let equal = context
            .call_native_fn::<bool>("==", (actual.clone(), expected.clone()))
            .unwrap_or(false);
        if equal {
            Ok(())
        } else {
            Err(native_error(NativeError::new(format!(
                "assertion failed: left == right\n  left:  {}\n  right: {}",
                show(&context, &actual),
                show(&context, &expected)
            ))))
        }
    }

    /// Ends the running step as `skipped` with `reason` (the step counts as done for `--resume`).
    ///
    /// ```rhai
    /// step("Seed glab auth", || {
    ///     if env("GLAB_DISABLED") != () { skip("glab disabled on this machine") }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn skip(reason: &str) -> RhaiResultOf<()> {
        Err(EvalAltResult::ErrorRuntime(
            Dynamic::from(StepSkip(reason.to_string())),
            Position::NONE,
        )
        .into())
    }
}

/// Our own sleep (Rhai's built-in one cannot be interrupted): script calls resolve here
/// because the typed variants above match `sleep(30)` and `sleep(0.5)` exactly.
fn sleep_for(context: &NativeCallContext, seconds: Dynamic) -> RhaiResultOf<()> {
    let duration = super::seconds(&seconds, "sleep")?;
    session(context)?
        .state
        .sleep("sleep", duration)
        .map_err(native_error)
}

fn show(context: &NativeCallContext, value: &Dynamic) -> String {
    context
        .call_native_fn::<String>("to_debug", (value.clone(),))
        .unwrap_or_else(|_| value.type_name().to_string())
}
