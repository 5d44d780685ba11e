//! The operator's machine, for phase 1: prerequisite tools, their install commands, and the
//! OpenTofu commands bprun may run (init, validate; never apply).

use crate::natives::options::RhaiResultOf;
use crate::state::Resource;
use rhai::Map;
use rhai::plugin::*;
use std::time::Duration;

use crate::engine::{native_error, session};
use crate::error::NativeError;
use crate::output::Level;
use bprun_clients::fs::Confinement;
use bprun_clients::host;
use bprun_clients::process::{ProcessSpec, find_program, run};

/// How long `tofu init` (which downloads providers) may take by default.
const TOFU_TIMEOUT: Duration = Duration::from_secs(600);

/// The last lines of a program's output, for an error.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[export_module]
pub mod host_functions {
    use super::*;

    /// This machine's OS family, which decides the install commands: `"debian"` (Debian,
    /// Ubuntu), `"fedora"` (Fedora, RHEL and its rebuilds), `"macos"` (Homebrew) or `"other"`.
    ///
    /// ```rhai
    /// info(`installing for ${os_family()}`);
    /// ```
    pub fn os_family() -> String {
        host::os_family().name().to_string()
    }

    /// A phase 1 prerequisite (`docker`, `kubectl`, `kind`, `helm`, `tofu`) as found on PATH:
    /// `#{name, found, path, version, problem, install}`. `version` is the first line of its
    /// version command (which needs no server); `problem` says why a found tool did not answer;
    /// `install` is the command that installs it on this OS family (printed, never run here).
    ///
    /// ```rhai
    /// step("Prerequisites", || {
    ///     let helm = tool_status("helm");
    ///     if helm.found { info(`helm ${helm.version}`) } else { warn(`install: ${helm.install}`) }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn tool_status(context: NativeCallContext, name: &str) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        let state = &session.state;
        state.require_step("tool_status").map_err(native_error)?;
        let status = host::tool_status(name, state.cancel_flag())
            .map_err(|error| native_error(NativeError::from(error)))?;
        let optional = |value: Option<String>| value.map(Dynamic::from).unwrap_or(Dynamic::UNIT);
        let mut map = rhai::Map::new();
        map.insert("name".into(), status.name.into());
        map.insert("found".into(), status.path.is_some().into());
        map.insert("path".into(), optional(status.path));
        map.insert("version".into(), optional(status.version));
        map.insert("problem".into(), optional(status.problem));
        map.insert(
            "install".into(),
            host::install_hint(name, host::os_family()).into(),
        );
        Ok(map)
    }

    /// Installs a missing prerequisite with this OS family's command (`sudo apt-get install -y
    /// docker.io`, `brew install kind`, ...), after saying what it runs; sudo asks for its
    /// password on the terminal, never silently. A tool already on PATH is left alone
    /// (`changed: false`). In check mode it only reports the command. Returns `#{changed, command}`.
    ///
    /// ```rhai
    /// step("Prerequisites", || {
    ///     if !tool_status("kind").found { install_tool("kind"); }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn install_tool(context: NativeCallContext, name: &str) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        let state = &session.state;
        state.require_step("install_tool").map_err(native_error)?;
        if host::version_args(name).is_none() {
            return Err(native_error(
                NativeError::new(format!(
                    "install_tool: {name} is not a phase 1 prerequisite"
                ))
                .with_hint(format!(
                    "the prerequisites are {}",
                    host::PREREQUISITES.join(", ")
                )),
            ));
        }
        let family = host::os_family();
        let mut result = rhai::Map::new();
        if find_program(name).is_some() {
            result.insert("changed".into(), false.into());
            result.insert("command".into(), Dynamic::UNIT);
            return Ok(result);
        }
        let Some(argv) = host::install_command(name, family) else {
            return Err(native_error(
                NativeError::new(format!(
                    "install_tool: bprun has no install command for {name} on this OS family ({})",
                    family.name()
                ))
                .with_hint(format!(
                    "install it by hand: see {}",
                    host::install_page(name)
                )),
            ));
        };
        let command_line = argv.join(" ");
        result.insert("command".into(), command_line.clone().into());
        state.record_change(
            "install",
            Resource::new("tool", name, format!("{name} with `{command_line}`")),
        );
        result.insert("changed".into(), true.into());
        if state.check() {
            return Ok(result);
        }
        state
            .reporter
            .log(Level::Info, &format!("running: {command_line}"));
        // The terminal stays attached: sudo asks for its password there, and the package
        // manager's progress is the operator's to see.
        let status = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .status()
            .map_err(|error| {
                native_error(
                    NativeError::new(format!(
                        "install_tool: cannot run `{command_line}`: {error}"
                    ))
                    .with_hint(format!(
                        "is {} installed? otherwise install {name} by hand: see {}",
                        argv[0],
                        host::install_page(name)
                    )),
                )
            })?;
        if !status.success() {
            return Err(native_error(
                NativeError::new(format!(
                    "install_tool: `{command_line}` exited with {}",
                    status
                        .code()
                        .map(|code| code.to_string())
                        .unwrap_or_else(|| "a signal".to_string())
                ))
                .with_hint(format!(
                    "its output is above; or install {name} by hand: see {}",
                    host::install_page(name)
                )),
            ));
        }
        if find_program(name).is_none() {
            return Err(native_error(
                NativeError::new(format!(
                    "install_tool: `{command_line}` succeeded but {name} is still not on PATH"
                ))
                .with_hint("add its folder to PATH (for `go install`: $(go env GOPATH)/bin)"),
            ));
        }
        Ok(result)
    }

    /// Runs `tofu -chdir=infra/tofu ARGS...`: only `init`, `validate`, `version`, `providers`
    /// and `fmt -check` (bprun prepares, it never applies infrastructure). Returns `#{ok, code,
    /// stdout, stderr, changed}`; a failure is an error with tofu's last lines and the seed's
    /// hints (`.terraform.lock.hcl` present? `tofu.tfvars` exists?). `init` is a change when it
    /// wrote the lock file or `.terraform/`; in check mode it is only reported. Options: `dir`
    /// (default `infra/tofu`), `timeout` (seconds, default 600).
    ///
    /// ```rhai
    /// step("tofu init", || { tofu(["init", "-input=false"], #{}); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn tofu(
        context: NativeCallContext,
        args: rhai::Array,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        let state = &session.state;
        state.require_step("tofu").map_err(native_error)?;
        crate::natives::options::reject_undeclared(&options, "tofu")?;
        let args: Vec<String> = args
            .into_iter()
            .map(|arg| arg.into_immutable_string().map(|text| text.to_string()))
            .collect::<Result<_, _>>()
            .map_err(|type_name| {
                native_error(NativeError::new(format!(
                    "tofu: every argument must be a string, not {type_name}"
                )))
            })?;
        let read_only =
            host::tofu_subcommand(&args).map_err(|error| native_error(NativeError::from(error)))?;
        let shown_dir = crate::natives::options::option_str(&options, "dir", "tofu")?
            .unwrap_or_else(|| "infra/tofu".to_string());
        let dir = Confinement::new(&state.root)
            .resolve(&shown_dir)
            .map_err(native_error)?;
        let timeout = match options.get("timeout") {
            Some(value) => super::super::seconds(value, "tofu timeout")?,
            None => TOFU_TIMEOUT,
        };
        let command_line = format!("tofu -chdir={shown_dir} {}", args.join(" "));
        let Some(program) = find_program("tofu") else {
            return Err(native_error(
                NativeError::new(format!("{command_line}: tofu is not on PATH")).with_hint(
                    format!(
                        "install OpenTofu: {}",
                        host::install_hint("tofu", host::os_family())
                    ),
                ),
            ));
        };
        if !dir.is_dir() {
            return Err(native_error(NativeError::new(format!(
                "{command_line}: the folder {shown_dir} does not exist"
            ))));
        }
        let lock = dir.join(".terraform.lock.hcl");
        let before = (std::fs::read(&lock).ok(), dir.join(".terraform").is_dir());
        let mut result = rhai::Map::new();
        if !read_only && state.check() {
            state.record_change("run", Resource::command(&command_line));
            result.insert("changed".into(), true.into());
            result.insert("ok".into(), true.into());
            return Ok(result);
        }
        state
            .reporter
            .log(Level::Debug, &format!("run: {command_line}"));
        let mut full = vec![format!("-chdir={}", dir.display())];
        full.extend(args.iter().cloned());
        let spec = ProcessSpec {
            program: program.display().to_string(),
            args: full,
            env: vec![("TF_IN_AUTOMATION".to_string(), "1".to_string())],
            timeout,
            ..ProcessSpec::default()
        };
        let output = run(&spec, state.cancel_flag()).map_err(native_error)?;
        if output.code != 0 {
            let subcommand = args.first().map(String::as_str).unwrap_or_default();
            let mut error =
                NativeError::new(format!("`{command_line}` exited with code {}", output.code))
                    .caused_by(tail(&format!("{}\n{}", output.stdout, output.stderr), 12));
            let hints = host::tofu_failure_hints(subcommand, &dir, &shown_dir);
            if !hints.is_empty() {
                error = error.with_hint(hints.join("; "));
            }
            return Err(native_error(error));
        }
        let after = (std::fs::read(&lock).ok(), dir.join(".terraform").is_dir());
        let changed = !read_only && before != after;
        if changed {
            state.record_change("run", Resource::command(&command_line));
        }
        result.insert("changed".into(), changed.into());
        result.insert("ok".into(), true.into());
        result.insert("code".into(), (output.code as i64).into());
        result.insert("stdout".into(), output.stdout.into());
        result.insert("stderr".into(), output.stderr.into());
        Ok(result)
    }
}
