//! Runs a program with a timeout, capturing its output. A non-zero exit is a result, not an error.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{ClientError, ErrorKind};

#[derive(Debug, Clone, Default)]
pub struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<std::path::PathBuf>,
    pub env: Vec<(String, String)>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct ProcessOutput {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(spec: &ProcessSpec, cancel: &AtomicBool) -> Result<ProcessOutput, ClientError> {
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    for (key, value) in &spec.env {
        command.env(key, value);
    }
    ends_with_this_thread(&mut command);
    let mut child = command.spawn().map_err(|error| {
        let (hint, kind) = if error.kind() == std::io::ErrorKind::NotFound {
            (
                format!("is {} installed and on PATH?", spec.program),
                ErrorKind::ProgramMissing,
            )
        } else {
            (
                "check the program's permissions".to_string(),
                ErrorKind::Local,
            )
        };
        ClientError::new(format!("cannot start {}: {error}", spec.program))
            .with_hint(hint)
            .with_kind(kind)
    })?;

    let pipes = Pipes::serve(&mut child, spec.stdin.clone());

    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(error) => {
                return Err(ClientError::new(format!(
                    "cannot wait for {}: {error}",
                    spec.program
                )));
            }
        }
        let stop = if cancel.load(Ordering::SeqCst) {
            Some(format!("{}: interrupted", spec.program))
        } else if started.elapsed() >= spec.timeout {
            Some(format!(
                "{} did not finish within {} s",
                spec.program,
                spec.timeout.as_secs()
            ))
        } else {
            None
        };
        if let Some(message) = stop {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ClientError::new(message)
                .with_kind(ErrorKind::Timeout)
                .with_hint("raise the timeout if the command is just slow"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (stdout, stderr) = pipes.collect();
    Ok(ProcessOutput {
        // A signal-killed process has no code; report it as shells do (128 + signal).
        code: status.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(0)
        }),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// A child of a killed bprun must not go on: an orphaned `helm upgrade` still writing its
/// release while the next run installs it again fails that run ("release: already exists"),
/// and helm 4 given SIGTERM may well finish its install. The kernel kills the child when the
/// thread that started it ends (which, here, waits for the child, so only a killed bprun ends
/// first); what a killed helm leaves pending, the next run releases (see `Helm::unlock`).
fn ends_with_this_thread(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only calls prctl and getppid, which
    // are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // bprun may have gone before prctl took effect.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "bprun ended before the command started",
                ));
            }
            Ok(())
        });
    }
}

/// A child's pipes served on threads, so a chatty child never blocks on a full pipe: its stdin
/// fed (then closed), its stdout and stderr drained.
pub struct Pipes {
    input: Option<std::thread::JoinHandle<()>>,
    stdout: std::thread::JoinHandle<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

impl Pipes {
    /// Serves the pipes `child` was spawned with (a pipe it was not given stays unserved).
    pub fn serve(child: &mut Child, stdin: Option<Vec<u8>>) -> Pipes {
        let input = match (child.stdin.take(), stdin) {
            (Some(mut pipe), Some(bytes)) => Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            })),
            _ => None,
        };
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let stderr = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        Pipes {
            input,
            stdout,
            stderr,
        }
    }

    /// What the child wrote to stdout and stderr, once it has ended.
    pub fn collect(self) -> (Vec<u8>, Vec<u8>) {
        if let Some(input) = self.input {
            let _ = input.join();
        }
        (
            self.stdout.join().unwrap_or_default(),
            self.stderr.join().unwrap_or_default(),
        )
    }
}

/// The program `name` found on `PATH` as the shell would find it (an executable file), without
/// spawning anything. A name with a `/` is checked as it is.
pub fn find_program(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &std::path::Path| {
        std::fs::metadata(path)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if name.is_empty() {
        return None;
    }
    if name.contains('/') {
        let path = std::path::PathBuf::from(name);
        return executable(&path).then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|candidate| executable(candidate))
}
