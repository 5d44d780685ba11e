//! The YAML fixtures of the simulator's unit tests (`crates/sim/fixtures/<folder>/<name>`): every
//! document of a file, in order.

use serde::Deserialize;
use serde_json::Value;

pub fn documents(folder: &str, name: &str) -> Vec<Value> {
    let path = format!("{}/fixtures/{folder}/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    serde_norway::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).expect("fixture YAML"))
        .collect()
}
