//! Natives that talk to processes and sockets, against real local peers on loopback.

use crate::support::one_step_run;
use crate::support::with_recaps;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::support::repo;

/// A one-shot HTTP server on a free loopback port: answers `requests` connections, then stops.
fn http_server(status_line: &'static str, requests: usize) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    let handle = std::thread::spawn(move || {
        for _ in 0..requests {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(
                format!("HTTP/1.1 {status_line}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    (port, handle)
}

/// A port on loopback that nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("addr").port()
}

#[test]
fn http_status_returns_the_status_or_unit_when_nothing_answers() {
    let (port, server) = http_server("503 Service Unavailable", 1);
    let dead = closed_port();
    let test = repo().script(&format!(
        r#"step("Probe", || {{
    assert_eq(http_status("http://127.0.0.1:{port}/-/health", 5), 503);
    assert_eq(http_status("http://127.0.0.1:{dead}/-/health", 2), ());
}});
"#
    ));
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Probe", "ok"), "");
    server.join().expect("server thread");
}

#[test]
fn http_status_rejects_a_malformed_url_with_a_hint() {
    let test = repo().script("step(\"Probe\", || { http_status(\"not a url\", 1); });\n");
    test.run(&["-q", "scripts/test.rhai"]).expect(
        1,
        &one_step_run("Probe", "failed"),
        r#"
        error: step "Probe" failed
          × invalid URL not a url: relative URL without a base
           ╭─[scripts/test.rhai:1:20]
         1 │ step("Probe", || { http_status("not a url", 1); });
           ·                    ─────┬─────
           ·                         ╰── failed here
           ╰────
          hint: write a full URL such as http://127.0.0.1:8200/v1/sys/health
        re-run with --resume to continue from here
        "#,
    );
}

#[test]
fn tcp_probe_tells_an_open_port_from_a_closed_one() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let open = listener.local_addr().expect("addr").port();
    let closed = closed_port();
    let test = repo().script(&format!(
        r#"step("Probe", || {{
    assert_eq(tcp_probe("127.0.0.1", {open}, 2), true);
    assert_eq(tcp_probe("127.0.0.1", {closed}, 2), false);
}});
"#
    ));
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Probe", "ok"), "");
    drop(listener);
}

#[test]
fn run_command_returns_a_result_instead_of_throwing() {
    let test = repo().script(
        r#"step("Run", || {
    let ok = run_command(["sh", "-c", "echo out; echo err >&2"], #{read_only: true});
    assert_eq(ok, #{ok: true, code: 0, stdout: "out\n", stderr: "err\n"});
    let failed = run_command(["sh", "-c", "exit 3"], #{read_only: true});
    assert_eq(failed.ok, false);
    assert_eq(failed.code, 3);
    let piped = run_command(["cat"], #{read_only: true, stdin: "fed"});
    assert_eq(piped.stdout, "fed");
    let env = run_command(["sh", "-c", "echo $GREETING"], #{read_only: true, env: #{GREETING: "hi"}});
    assert_eq(env.stdout, "hi\n");
    try {
        run_command(["sh", "-c", "echo broke >&2; exit 4"], #{read_only: true, check: true});
        throw "check: true did not throw";
    } catch (e) {
        assert_eq(e.message, "`sh -c echo broke >&2; exit 4` exited with code 4");
    }
    try {
        run_command(["sleep", "5"], #{read_only: true, timeout: 0.2});
        throw "the timeout did not fire";
    } catch (e) {
        assert_eq(e.message, "sleep did not finish within 0 s");
    }
    try {
        run_command(["no-such-program-bprun"], #{read_only: true});
    } catch (e) {
        assert_eq(e.hint, "is no-such-program-bprun installed and on PATH?");
    }
});
"#,
    );
    test.run(&["-q", "scripts/test.rhai"])
        .expect(0, &one_step_run("Run", "ok"), "");
}

#[test]
fn a_command_that_is_not_read_only_counts_as_a_change() {
    let test = repo().script("step(\"Touch\", || { run_command([\"touch\", \"made\"]); });\n");
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/1] Touch ...
            ~ run `touch made`
        [1/1] Touch ... changed (#.## s)

        <recap of scripts/test.rhai: Touch: changed 1>
        ",
        ),
        "",
    );
}

#[test]
fn ctrl_c_stops_a_wait_and_leaves_the_journal_consistent() {
    let test = repo().script(
        r#"step("Wait", || {
    info("waiting");
    sleep(30);
});
step("After", || {});
"#,
    );
    let mut child = test
        .command(&["scripts/test.rhai"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn bprun");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let started = Instant::now();
    while !line.contains("waiting") {
        line.clear();
        if stdout.read_line(&mut line).expect("read") == 0
            || started.elapsed() > Duration::from_secs(20)
        {
            panic!("bprun never started waiting");
        }
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("bprun did not stop within 10 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(130));
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("rest of stdout");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert_eq!(
        stderr,
        "interrupted during step \"Wait\"\nre-run with --resume to continue from here\n"
    );
    let journal: serde_json::Value =
        serde_json::from_str(&test.read(".bprun/journal/test.json")).expect("journal");
    let steps = &journal["runs"][0]["steps"];
    assert_eq!(journal["runs"][0]["outcome"], "interrupted");
    assert_eq!(steps[0]["status"], "interrupted");
    assert_eq!(steps[1]["status"], "not-run");
    // --resume starts again at the interrupted step.
    test.run(&["--list", "--resume", "scripts/test.rhai"])
        .expect(
            0,
            r#"
            scripts/test.rhai: 2 steps
            resuming at step 1 "Wait" (run of <time>)
            [1/2] Wait
            [2/2] After
            "#,
            "",
        );
}
