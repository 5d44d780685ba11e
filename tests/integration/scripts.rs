//! Script tests: every `tests/scripts/*.rhai` runs through the real binary (in a temporary
//! repository) and must exit 0; its `assert`/`assert_eq` calls are the checks.

use crate::support::repo;

fn run_script_test(name: &str) {
    let source = std::fs::read_to_string(format!(
        "{}/tests/scripts/{name}.rhai",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_else(|error| panic!("tests/scripts/{name}.rhai: {error}"));
    let mut test = repo()
        .file(&format!("scripts/{name}.rhai"), &source)
        .file("fixtures/apps.yaml", FIXTURE_YAML);
    let lib = format!("{}/tests/scripts/lib", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(&lib)
        .expect("tests/scripts/lib")
        .flatten()
    {
        let text = std::fs::read_to_string(entry.path()).expect("module");
        test = test.file(
            &format!("scripts/lib/{}", entry.file_name().to_string_lossy()),
            &text,
        );
    }
    let output = test.run(&["-q", &format!("scripts/{name}.rhai")]);
    output.code(0);
}

const FIXTURE_YAML: &str =
    "- name: shared-code\n  build_image: false\n- name: guestbook\n  build_image: true\n";

macro_rules! script_tests {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { run_script_test(stringify!($name)); })*
        const SCRIPT_TESTS: &[&str] = &[$(stringify!($name)),*];
    };
}

script_tests!(codec, files, secrets, steps_and_modules, errors, sync);

#[test]
fn every_script_in_tests_scripts_has_a_test() {
    let folder = format!("{}/tests/scripts", env!("CARGO_MANIFEST_DIR"));
    let mut found: Vec<String> = std::fs::read_dir(&folder)
        .expect("tests/scripts")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rhai").map(str::to_string)
        })
        .collect();
    found.sort();
    let mut listed: Vec<String> = SCRIPT_TESTS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "add the new script to script_tests! in tests/integration/scripts.rs"
    );
}
