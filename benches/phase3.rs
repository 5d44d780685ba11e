//! Phase 3 no-op benchmark (not a test), release build, against `bprun sim all`: a no-op re-run
//! of `scripts/phase3.rhai` for the four apps with every step (the smoke step finds its green
//! pipelines, the reachability check reads the guestbook through the platform's gateway), and
//! for a synthetic 100-app manifest without the smoke step and the check after it, with no added
//! latency and with 50 ms added to every GitLab answer (API and git; the simulator's
//! `latency_ms` fault, the one `bprun sim all --latency-ms` sets, switched at run time so one
//! provisioning serves both).
//!
//! Reports wall time (median and max), the GitLab requests one run makes (git smart HTTP
//! included), the sequential round trips the latency implies ((wall with latency - wall
//! without) / latency), and bprun's CPU time per app (user + system, `getrusage` of the child
//! processes), then the goal table of issue #17. Also `bprun --list scripts/phase3.rhai`.
//!
//!     cargo bench --bench phase3

use bprun_testkit::{Bprun, Sim, SimKind, Test};
use std::time::{Duration, Instant};

const BPRUN: Bprun = Bprun::at(env!("CARGO_BIN_EXE_bprun"));
const LATENCY_MS: u64 = 50;
/// The four apps' runs: every step, as an operator runs phase 3 (`bprun sim all` carries the
/// gateway, the wildcard CA and the routes phase 2 leaves).
const EVERY_STEP: [&str; 2] = ["-q", "scripts/phase3.rhai"];
/// The 100 apps' runs: without the smoke step (a hundred deploying smoke pipelines at once
/// overload a 2-core machine's simulated cluster) and the gateway check after it (no guestbook
/// was deployed to read).
const WITHOUT_SMOKE: [&str; 6] = [
    "-q",
    "--skip",
    "Smoke test",
    "--skip",
    "Workloads reachable",
    "scripts/phase3.rhai",
];

/// What each run of `apps` apps runs.
fn runs_of(apps: usize) -> &'static [&'static str] {
    if apps > 4 {
        &WITHOUT_SMOKE
    } else {
        &EVERY_STEP
    }
}

/// A copy of the repository, wired to `sim`, with `apps` apps in its manifest.
fn repository_copy(sim: &Sim, apps: usize) -> Test {
    let test = BPRUN.test_in_repository_copy().envs(sim.vars());
    // What phase 2 leaves in the repository beside the platform (the wildcard CA the
    // reachability check trusts), as `bprun sim all` keeps it in the one it runs in.
    sim.platform_files(test.path());
    if apps > 4 {
        // shared-code, then synthetic apps built like redis (no image build).
        let text = test.read("apps/apps_manifest.yaml");
        let shared_end = text.find("- name: guestbook").expect("guestbook");
        let mut synthetic = text[..shared_end].to_string();
        for index in 1..apps {
            synthetic.push_str(&format!(
                "- name: app-{index:03}\n  src_path: apps/redis\n  chart_path: helm-chart\n  build_image: false\n  helm_release: app-{index:03}\n  helm_namespace: app-{index:03}\n  registry_image: gitlab-registry.gitlab.svc:5000/blueprint-apps/app-{index:03}\n  redis_host: redis-master.app-{index:03}.svc.cluster.local\n  redis_tag: \"7.4.1\"\n\n"
            ));
        }
        test.write("apps/apps_manifest.yaml", &synthetic);
    }
    test
}

/// User plus system time of every waited-for child process so far, and their peak RSS (KiB).
fn children_usage() -> (Duration, i64) {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    (time(usage.ru_utime) + time(usage.ru_stime), usage.ru_maxrss)
}

fn run(test: &Test, args: &[&str]) -> Duration {
    let started = Instant::now();
    let output = test.run(args);
    let elapsed = started.elapsed();
    output.success();
    elapsed
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

struct NoOp {
    median: Duration,
    max: Duration,
    requests_per_run: u64,
    mutating: u64,
    cpu_per_run: Duration,
}

fn no_op_runs(sim: &Sim, copy: &Test, args: &[&str], latency_ms: u64, runs: u32) -> NoOp {
    let reply = sim.raw(
        "PUT",
        "/-/sim/faults",
        None,
        Some(&format!(r#"{{"latency_ms": {latency_ms}}}"#)),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    run(copy, args);
    sim.clear_requests();
    let (cpu_before, _) = children_usage();
    let mut times: Vec<Duration> = (0..runs).map(|_| run(copy, args)).collect();
    let (cpu_after, _) = children_usage();
    let log = sim.requests();
    times.sort();
    NoOp {
        median: times[times.len() / 2],
        max: times[times.len() - 1],
        requests_per_run: log["total"].as_u64().unwrap_or(0) / u64::from(runs),
        mutating: log["mutating"].as_u64().unwrap_or(u64::MAX),
        cpu_per_run: (cpu_after - cpu_before) / runs,
    }
}

struct Measured {
    apps: usize,
    plain: NoOp,
    delayed: NoOp,
}

fn measure(apps: usize) -> Measured {
    let sim = BPRUN.sim(SimKind::All, &[]);
    let copy = repository_copy(&sim, apps);
    let started = Instant::now();
    // Provisioned with what the no-ops run.
    let args = runs_of(apps);
    run(&copy, args);
    let provision = started.elapsed();
    let plain = no_op_runs(&sim, &copy, args, 0, 9);
    let delayed = no_op_runs(&sim, &copy, args, LATENCY_MS, 5);
    for (latency, no_op) in [(0, &plain), (LATENCY_MS, &delayed)] {
        println!(
            "phase3 no-op ({}), {apps} apps, {latency} ms added per GitLab answer: median {:.1} ms, max {:.1} ms; {} GitLab requests per run, {} mutating; bprun CPU {:.1} ms per run, {:.2} ms per app",
            if apps > 4 {
                "without the smoke step"
            } else {
                "every step"
            },
            ms(no_op.median),
            ms(no_op.max),
            no_op.requests_per_run,
            no_op.mutating,
            ms(no_op.cpu_per_run),
            ms(no_op.cpu_per_run) / apps as f64,
        );
    }
    println!(
        "  {apps} apps: sequential round trips {:.1}; first (provisioning) run {:.2} s",
        round_trips(&plain, &delayed),
        provision.as_secs_f64()
    );
    Measured {
        apps,
        plain,
        delayed,
    }
}

fn round_trips(plain: &NoOp, delayed: &NoOp) -> f64 {
    (delayed.median.as_secs_f64() - plain.median.as_secs_f64()) / (LATENCY_MS as f64 / 1000.0)
}

/// `bprun --list scripts/phase3.rhai` in the workspace: median wall time of 30 runs and the peak
/// RSS. Measured first, so the peak RSS of the children is that of these runs alone.
fn list_startup() -> (Duration, i64) {
    let list = || {
        let started = Instant::now();
        let status = BPRUN
            .command()
            .args(["--list", "scripts/phase3.rhai"])
            .current_dir(bprun_testkit::root())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run bprun --list");
        assert!(status.success(), "bprun --list failed");
        started.elapsed()
    };
    list();
    let mut times: Vec<Duration> = (0..30).map(|_| list()).collect();
    times.sort();
    (times[15], children_usage().1)
}

fn main() {
    let (list_median, list_rss_kib) = list_startup();
    let four = measure(4);
    let hundred = measure(100);
    let cpu_per_app = ms(hundred.plain.cpu_per_run) / hundred.apps as f64;
    println!();
    println!("| measure | result | goal |");
    println!("|---|---|---|");
    for measured in [&four, &hundred] {
        let apps = measured.apps;
        println!(
            "| {apps}-app no-op, no added latency | {:.1} ms (max {:.1}) | {} |",
            ms(measured.plain.median),
            ms(measured.plain.max),
            if apps == 4 { "<= 45 ms" } else { "<= 0.4 s" }
        );
        println!(
            "| {apps}-app no-op, {LATENCY_MS} ms per GitLab answer | {:.1} ms (max {:.1}); {:.1} sequential round trips | {} |",
            ms(measured.delayed.median),
            ms(measured.delayed.max),
            round_trips(&measured.plain, &measured.delayed),
            if apps == 4 { "<= 300 ms" } else { "<= 1.0 s" }
        );
    }
    println!(
        "| bprun CPU per app in a no-op | {cpu_per_app:.2} ms (100 apps; {:.2} ms at 4) | <= 3 ms |",
        ms(four.plain.cpu_per_run) / four.apps as f64
    );
    println!(
        "| requests in a 4-app no-op | {}, {} mutating (100 apps: {}, {} mutating) | <= 15, 0 mutating |",
        four.plain.requests_per_run,
        four.plain.mutating + four.delayed.mutating,
        hundred.plain.requests_per_run,
        hundred.plain.mutating + hundred.delayed.mutating
    );
    println!(
        "| `bprun --list scripts/phase3.rhai` | {:.1} ms, {:.1} MiB | < 10 ms, < 20 MiB |",
        ms(list_median),
        list_rss_kib as f64 / 1024.0
    );
}
