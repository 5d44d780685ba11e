//! Running a real program for a container: bounded in time, stdin passed through, stopped by
//! its process id.

use crate::kube::runtime::ExecOutcome;
use bprun_clients::process::Pipes;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `command` to its end with `stdin` as its input; killed after `limit` (exit code 124
/// and a line saying so, as `timeout` does).
pub fn run(mut command: Command, stdin: &[u8], limit: Duration) -> ExecOutcome {
    let program = command.get_program().to_string_lossy().into_owned();
    let spawned = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            return ExecOutcome {
                code: 126,
                stdout: Vec::new(),
                stderr: format!("cannot start {program}: {error}\n").into_bytes(),
            };
        }
    };
    let pipes = Pipes::serve(&mut child, Some(stdin.to_vec()));
    let deadline = Instant::now() + limit;
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code().unwrap_or(137),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                stop(&mut child);
                break 124;
            }
        }
    };
    let (stdout, mut stderr) = pipes.collect();
    if code == 124 {
        stderr.extend_from_slice(
            format!("{program} did not end within {} s\n", limit.as_secs()).as_bytes(),
        );
    }
    ExecOutcome {
        code,
        stdout,
        stderr,
    }
}

/// Stops a child by its process id and reaps it.
pub fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Asks a child to end by its process id (SIGTERM, so it can stop what it started), waits up
/// to 5 s, then kills it.
pub fn terminate(child: &mut Child) {
    // SAFETY: kill takes plain integers and touches no memory of this process.
    let asked = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) } == 0;
    if asked {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stop(child);
}
