//! OpenBao benchmark (not a test): 100 idempotent `bao_write` calls of an unchanged value
//! against a real dev server. Each should cost one read and no write.
//!
//!     cargo bench --bench bao_write      (needs `bao`: ./test.sh installs it into .tools/bin)
//!
//! Measures the client directly (time and request count) and the same work through the real
//! binary (a script with a loop of 100 writes).

use std::time::Instant;

use bprun_clients::bao::{BaoClient, BaoSettings, KvPath};
use bprun_clients::reconcile::Mode;
use bprun_testkit::{BaoServer, Bprun};

const BPRUN: Bprun = Bprun::at(env!("CARGO_BIN_EXE_bprun"));

const WRITES: u64 = 100;

fn main() {
    let server = BaoServer::dev();
    let root = tempfile::tempdir().expect("root");
    let mut settings = BaoSettings::from_env(root.path());
    settings.address = server.address.clone();
    settings.token = Some(bprun_clients::secret::Secret::new("root"));
    let client = BaoClient::new(settings);
    let path = KvPath::parse("bench/unchanged", None).expect("path");
    let mut data = serde_json::Map::new();
    data.insert(
        "token".into(),
        serde_json::Value::String("glpat-benchmark-value".into()),
    );
    client
        .kv_write(&path, &data, Mode::Apply)
        .expect("first write");

    let before = client.request_count();
    let started = Instant::now();
    for _ in 0..WRITES {
        let outcome = client.kv_write(&path, &data, Mode::Apply).expect("write");
        assert!(!outcome.changed(), "an unchanged write changed something");
    }
    let elapsed = started.elapsed();
    let requests = client.request_count() - before;
    println!(
        "client: {WRITES} unchanged bao_write calls in {:.1} ms ({:.2} ms each), {requests} HTTP requests ({} per call)",
        elapsed.as_secs_f64() * 1000.0,
        elapsed.as_secs_f64() * 1000.0 / WRITES as f64,
        requests as f64 / WRITES as f64
    );

    // The same through the binary and a script.
    let test = BPRUN
        .test()
        .file(
            "scripts/bench.rhai",
            &format!("step(\"Writes\", || {{ for i in 0..{WRITES} {{ bao_write(\"bench/unchanged\", #{{token: \"glpat-benchmark-value\"}}); }} }});\n"),
        )
        .env("BAO_ADDR", &server.address)
        .env("BAO_TOKEN", "root");
    let started = Instant::now();
    test.run(&["-q", "scripts/bench.rhai"]).success();
    println!(
        "binary: bprun running {WRITES} unchanged bao_write calls took {:.1} ms in all (start-up included)",
        started.elapsed().as_secs_f64() * 1000.0
    );
}
