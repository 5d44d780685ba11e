//! Start-up benchmark (not a test): the release binary creates the engine, compiles
//! `scripts/phase3.rhai` and prints `--list`. Target: under 15 ms, peak memory under 20 MB.
//!
//!     cargo bench --bench startup
//!
//! Prints min / median / p95 wall time over 50 runs and the largest peak RSS of any run.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 50;

fn main() {
    let binary = env!("CARGO_BIN_EXE_bprun");
    let repository = env!("CARGO_MANIFEST_DIR");
    let mut times = Vec::with_capacity(RUNS);
    // One warm-up run so the binary is in the page cache.
    run_once(binary, repository);
    for _ in 0..RUNS {
        let started = Instant::now();
        run_once(binary, repository);
        times.push(started.elapsed());
    }
    times.sort();
    let peak_kib = peak_child_rss_kib();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("bprun --list scripts/phase3.rhai, {RUNS} runs (release):");
    println!(
        "  wall time: min {:.2} ms, median {:.2} ms, p95 {:.2} ms",
        ms(times[0]),
        ms(times[RUNS / 2]),
        ms(times[RUNS * 95 / 100])
    );
    println!("  peak RSS:  {:.1} MB", peak_kib as f64 / 1024.0);
}

fn run_once(binary: &str, repository: &str) {
    let status = Command::new(binary)
        .args(["--list", "scripts/phase3.rhai"])
        .current_dir(repository)
        .stdout(Stdio::null())
        .status()
        .expect("run bprun");
    assert!(status.success(), "bprun --list failed");
}

/// The largest resident set of any finished child, from getrusage(RUSAGE_CHILDREN).
fn peak_child_rss_kib() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the buffer we own.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr());
        usage.assume_init()
    };
    usage.ru_maxrss
}
