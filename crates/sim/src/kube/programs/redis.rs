//! Bitnami's Redis image (`docker.io/bitnamilegacy/redis`, the redis chart's with phase 2's
//! override; `docker.io/bitnami/redis` cannot be pulled any more, see `kubelet::GONE_IMAGES`):
//! `redis-cli` against the pod's server, whose password is the container's `REDIS_PASSWORD` (the
//! chart resolves it from its Secret, or `auth.existingSecret`). Without a password, or with a
//! wrong one, redis-cli answers as the real one does: `NOAUTH Authentication required.`, and
//! `AUTH failed: WRONGPASS ...` first for a wrong `-a` / `REDISCLI_AUTH`. Commands: `PING [msg]`,
//! `ECHO`, `SET`, `GET`, `DEL`, `EXISTS`, `DBSIZE`, against a small keyspace kept per pod; the
//! chart's probe scripts (`/health/ping_readiness_local.sh`, `ping_liveness_local.sh`) ping with
//! the container's password. Error replies go to stderr with exit 1 (redis-cli 7).

use super::env::lookup;
use super::{ExecCall, ExecOutcome, Host, Program};
use std::collections::BTreeMap;
use std::sync::Mutex;

pub const IMAGES: &[&str] = &["docker.io/bitnamilegacy/redis", "docker.io/bitnami/redis"];

const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

#[derive(Default)]
pub struct Redis {
    /// (namespace, pod) -> key -> value.
    keyspaces: Mutex<BTreeMap<(String, String), BTreeMap<String, String>>>,
}

/// What a `redis-cli` command line asks.
#[derive(Debug, Default, PartialEq, Eq)]
struct Invocation {
    password: Option<String>,
    warn_about_password: bool,
    command: Vec<String>,
}

fn parse(args: &[String], environment: &[(String, String)]) -> Result<Invocation, String> {
    let mut invocation = Invocation {
        password: lookup(environment, "REDISCLI_AUTH").map(str::to_string),
        ..Default::default()
    };
    let mut quiet = false;
    let mut index = 0;
    while index < args.len() {
        let arg = args[index].as_str();
        let mut value = || {
            index += 1;
            args.get(index)
                .cloned()
                .ok_or_else(|| format!("Unrecognized option or bad number of args for: '{arg}'"))
        };
        match arg {
            "-a" | "--pass" => {
                invocation.password = Some(value()?);
                invocation.warn_about_password = true;
            }
            "--no-auth-warning" => quiet = true,
            "-h" | "-p" | "-n" | "--user" | "-s" | "-u" => {
                value()?;
            }
            "--raw" | "--no-raw" | "-e" | "-x" => {}
            _ if arg.starts_with('-') && invocation.command.is_empty() => {
                return Err(format!(
                    "Unrecognized option or bad number of args for: '{arg}'"
                ));
            }
            _ => {
                invocation.command = args[index..].to_vec();
                break;
            }
        }
        index += 1;
    }
    if quiet {
        invocation.warn_about_password = false;
    }
    Ok(invocation)
}

/// The server's answer to one command with the given authentication: (reply, is an error).
fn reply(
    keyspace: &mut BTreeMap<String, String>,
    command: &[String],
    authenticated: bool,
) -> (String, bool) {
    let Some(name) = command.first() else {
        return (String::new(), false);
    };
    if !authenticated {
        return (NOAUTH.to_string(), true);
    }
    let args = &command[1..];
    let wrong_arity = || {
        (
            format!(
                "ERR wrong number of arguments for '{}' command",
                name.to_lowercase()
            ),
            true,
        )
    };
    match (name.to_uppercase().as_str(), args) {
        ("PING", []) => ("PONG".into(), false),
        ("PING" | "ECHO", [message]) => (message.clone(), false),
        ("SET", [key, value, ..]) => {
            keyspace.insert(key.clone(), value.clone());
            ("OK".into(), false)
        }
        ("GET", [key]) => (keyspace.get(key).cloned().unwrap_or_default(), false),
        ("DEL", keys) if !keys.is_empty() => {
            let removed = keys
                .iter()
                .filter(|k| keyspace.remove(*k).is_some())
                .count();
            (removed.to_string(), false)
        }
        ("EXISTS", keys) if !keys.is_empty() => (
            keys.iter()
                .filter(|k| keyspace.contains_key(*k))
                .count()
                .to_string(),
            false,
        ),
        ("DBSIZE", []) => (keyspace.len().to_string(), false),
        ("PING" | "ECHO" | "SET" | "GET" | "DEL" | "EXISTS" | "DBSIZE", _) => wrong_arity(),
        _ => (
            format!(
                "ERR unknown command '{name}', with args beginning with: {}(the simulated Redis runs PING, ECHO, SET, GET, DEL, EXISTS, DBSIZE)",
                args.iter().map(|a| format!("'{a}' ")).collect::<String>()
            ),
            true,
        ),
    }
}

/// `redis-cli ARGS` in a container whose server's password is `server_password`.
fn redis_cli(
    keyspace: &mut BTreeMap<String, String>,
    args: &[String],
    environment: &[(String, String)],
    server_password: Option<&str>,
) -> ExecOutcome {
    let invocation = match parse(args, environment) {
        Ok(invocation) => invocation,
        Err(message) => {
            return ExecOutcome {
                code: 1,
                stdout: Vec::new(),
                stderr: format!("{message}\n").into_bytes(),
            };
        }
    };
    let mut stderr = String::new();
    if invocation.warn_about_password {
        stderr.push_str(
            "Warning: Using a password with '-a' or '-u' option on the command line interface may not be safe.\n",
        );
    }
    let required = server_password.filter(|p| !p.is_empty());
    let authenticated = match (required, invocation.password.as_deref()) {
        (None, _) => true,
        (Some(expected), Some(given)) if given == expected => true,
        (Some(_), Some(_)) => {
            stderr.push_str(&format!("AUTH failed: {WRONGPASS}\n"));
            false
        }
        (Some(_), None) => false,
    };
    if invocation.command.is_empty() {
        stderr.push_str("the simulated redis-cli has no interactive mode: give a command (PING)\n");
        return ExecOutcome {
            code: 1,
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
        };
    }
    let (answer, error) = reply(keyspace, &invocation.command, authenticated);
    if error {
        stderr.push_str(&format!("{answer}\n"));
        return ExecOutcome {
            code: 1,
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
        };
    }
    ExecOutcome {
        code: 0,
        stdout: format!("{answer}\n").into_bytes(),
        stderr: stderr.into_bytes(),
    }
}

impl Program for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn images(&self) -> &[&'static str] {
        IMAGES
    }

    fn exec(&self, call: &ExecCall, argv: &[String], _host: &Host) -> Option<ExecOutcome> {
        let [program, args @ ..] = argv else {
            return None;
        };
        let server_password = lookup(&call.env, "REDIS_PASSWORD").map(str::to_string);
        let mut keyspaces = self.keyspaces.lock().unwrap_or_else(|p| p.into_inner());
        let keyspace = keyspaces
            .entry((call.namespace.clone(), call.pod.clone()))
            .or_default();
        match program.as_str() {
            "redis-cli" => Some(redis_cli(
                keyspace,
                args,
                &call.env,
                server_password.as_deref(),
            )),
            // The chart's probe scripts: redis-cli PING with the container's password.
            "ping_readiness_local.sh" | "ping_liveness_local.sh" => {
                let mut environment = call.env.clone();
                if let Some(password) = &server_password {
                    environment.push(("REDISCLI_AUTH".into(), password.clone()));
                }
                let outcome = redis_cli(
                    keyspace,
                    &["PING".to_string()],
                    &environment,
                    server_password.as_deref(),
                );
                let answer = String::from_utf8_lossy(&outcome.stdout).trim().to_string();
                Some(if answer == "PONG" {
                    ExecOutcome::default()
                } else {
                    ExecOutcome {
                        code: 1,
                        stdout: outcome.stderr,
                        stderr: Vec::new(),
                    }
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        args: &[&str],
        environment: &[(&str, &str)],
        password: Option<&str>,
    ) -> (i32, String, String) {
        let mut keyspace = BTreeMap::new();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let environment: Vec<(String, String)> = environment
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let outcome = redis_cli(&mut keyspace, &args, &environment, password);
        (
            outcome.code,
            String::from_utf8_lossy(&outcome.stdout).into_owned(),
            String::from_utf8_lossy(&outcome.stderr).into_owned(),
        )
    }

    #[test]
    fn ping_needs_the_servers_password_as_redis_cli_says() {
        let password = Some("s3cret");
        assert_eq!(
            run(&["PING"], &[], password),
            (1, String::new(), "NOAUTH Authentication required.\n".into())
        );
        assert_eq!(
            run(
                &["--no-auth-warning", "-a", "s3cret", "PING"],
                &[],
                password
            ),
            (0, "PONG\n".into(), String::new())
        );
        assert_eq!(
            run(&["-a", "s3cret", "ping"], &[], password),
            (
                0,
                "PONG\n".into(),
                "Warning: Using a password with '-a' or '-u' option on the command line interface may not be safe.\n".into()
            )
        );
        assert_eq!(
            run(&["PING"], &[("REDISCLI_AUTH", "s3cret")], password),
            (0, "PONG\n".into(), String::new())
        );
        assert_eq!(
            run(&["--no-auth-warning", "-a", "wrong", "PING"], &[], password),
            (
                1,
                String::new(),
                "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\nNOAUTH Authentication required.\n".into()
            )
        );
        // A server without a password answers anyone.
        assert_eq!(run(&["PING"], &[], None).1, "PONG\n");
    }

    #[test]
    fn a_small_keyspace_and_unknown_commands_in_redis_words() {
        let mut keyspace = BTreeMap::new();
        let mut cli = |words: &[&str]| {
            let args: Vec<String> = words.iter().map(|a| a.to_string()).collect();
            let outcome = redis_cli(&mut keyspace, &args, &[], None);
            (
                outcome.code,
                String::from_utf8_lossy(&outcome.stdout).into_owned(),
                String::from_utf8_lossy(&outcome.stderr).into_owned(),
            )
        };
        assert_eq!(cli(&["SET", "k", "v"]).1, "OK\n");
        assert_eq!(cli(&["GET", "k"]).1, "v\n");
        assert_eq!(cli(&["DBSIZE"]).1, "1\n");
        assert_eq!(cli(&["DEL", "k", "x"]).1, "1\n");
        assert_eq!(
            cli(&["GET"]).2,
            "ERR wrong number of arguments for 'get' command\n"
        );
        let (code, _, stderr) = cli(&["FLUSHALL"]);
        assert_eq!(code, 1);
        assert!(
            stderr.starts_with("ERR unknown command 'FLUSHALL'"),
            "{stderr}"
        );
    }
}
