//! The house rules the source keeps (docs/architecture.md, "Rules the graph keeps"): no module
//! cycle inside a crate but natives <-> engine (the natives register into the engine that calls
//! them), simulators that import each other only where GitLab's webservice program serves the
//! GitLab simulator, no simulator file over 1,500 lines, and whole-output checks outnumbering
//! substring checks in these tests. Read from the source, so a change that breaks a rule fails
//! here with the offending modules named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use bprun_testkit::root;

/// A module's path inside its crate (`["kube", "programs", "gitlab"]`; the crate root is `[]`).
type ModulePath = Vec<String>;

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("read source folder") {
            let path = entry.expect("folder entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn module_of(src: &Path, file: &Path) -> ModulePath {
    let relative = file
        .strip_prefix(src)
        .expect("file under src")
        .with_extension("");
    let mut path: ModulePath = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// Test-only modules: what they import is no part of the crate's graph.
fn is_test_module(module: &ModulePath) -> bool {
    matches!(
        module.last().map(String::as_str),
        Some("tests" | "test_fixtures")
    )
}

/// The source without comments and without its trailing `#[cfg(test)] mod tests { ... }`.
fn production_code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules each module of the crate at `src` names (`crate::a::b`, `super::c`,
/// `crate::{a, b}`), resolved to the longest module that exists.
fn imports(src: &Path) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let paths = regex::Regex::new(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    // `use crate::kube::{cluster::Cluster, server}`: every name in the braces, under the prefix.
    let groups =
        regex::Regex::new(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^}]*)\}").unwrap();
    let names = regex::Regex::new(r"\b([a-z_][a-z0-9_]*)\b").unwrap();
    let files = rust_files(src);
    let modules: BTreeSet<ModulePath> = files.iter().map(|f| module_of(src, f)).collect();
    let resolve = |target: &[String]| -> ModulePath {
        (0..=target.len())
            .rev()
            .map(|n| target[..n].to_vec())
            .find(|prefix| modules.contains(prefix))
            .unwrap_or_default()
    };
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(src, file);
        if is_test_module(&module) {
            continue;
        }
        let text = production_code(&std::fs::read_to_string(file).expect("read source"));
        let mut targets = BTreeSet::new();
        for found in paths.captures_iter(&text) {
            let segments: Vec<String> = found[2].split("::").skip(1).map(str::to_string).collect();
            let mut target = if &found[1] == "crate" {
                Vec::new()
            } else {
                module[..module.len().saturating_sub(1)].to_vec()
            };
            target.extend(segments);
            targets.insert(resolve(&target));
        }
        for group in groups.captures_iter(&text) {
            let mut prefix = if &group[1] == "crate" {
                Vec::new()
            } else {
                module[..module.len().saturating_sub(1)].to_vec()
            };
            prefix.extend(group[2].split("::").skip(1).map(str::to_string));
            // The first word of each entry (`cluster` of `cluster::Cluster`).
            for entry in group[3].split(',') {
                if let Some(name) = names.captures(entry) {
                    let mut target = prefix.clone();
                    target.push(name[1].to_string());
                    targets.insert(resolve(&target));
                }
            }
        }
        graph.insert(module, targets);
    }
    graph
}

/// The import cycles among sibling modules, at every level of the crate at `src`:
/// `PARENT: a <-> b <-> c`, each strongly connected set once, sorted.
fn cycles(src: &Path) -> Vec<String> {
    let graph = imports(src);
    let parents: BTreeSet<ModulePath> = graph
        .keys()
        .flat_map(|module| (0..module.len()).map(|n| module[..n].to_vec()))
        .collect();
    let mut found = Vec::new();
    for parent in parents {
        let depth = parent.len();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, targets) in &graph {
            for to in targets {
                let under = |m: &ModulePath| m.len() > depth && m[..depth] == parent[..];
                if under(from) && under(to) && from[depth] != to[depth] {
                    edges
                        .entry(from[depth].clone())
                        .or_default()
                        .insert(to[depth].clone());
                }
            }
        }
        let label = if parent.is_empty() {
            "crate".to_string()
        } else {
            parent.join("::")
        };
        for set in strongly_connected(&edges) {
            found.push(format!("{label}: {}", set.join(" <-> ")));
        }
    }
    found.sort();
    found
}

/// The strongly connected sets of more than one node (a plain reachability check: the graphs
/// are small).
fn strongly_connected(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reachable = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(node) = todo.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|node| (node, reachable(node))).collect();
    let mut sets = BTreeSet::new();
    for (node, reached) in &reach {
        let mut set: Vec<String> = reached
            .iter()
            .filter(|other| reach.get(other).is_some_and(|back| back.contains(*node)))
            .cloned()
            .collect();
        if !set.contains(*node) {
            continue;
        }
        set.sort();
        if set.len() > 1 {
            sets.insert(set);
        }
    }
    sets.into_iter().collect()
}

#[test]
fn no_module_cycle_inside_a_crate_but_natives_and_engine() {
    let mut found = Vec::new();
    for krate in [
        "src",
        "crates/clients/src",
        "crates/sim/src",
        "crates/testkit/src",
    ] {
        for cycle in cycles(&root().join(krate)) {
            found.push(format!("{krate}: {cycle}"));
        }
    }
    assert_eq!(found, ["src: crate: engine <-> natives"]);
}

/// The simulators are the sim crate's top-level modules but its plumbing (the HTTP stack, git,
/// the neutral modules they share) and the platform, which composes them and which none imports.
#[test]
fn simulators_import_each_other_only_where_gitlabs_webservice_serves_gitlab() {
    let simulators = ["gitlab", "kube", "bao"];
    let graph = imports(&root().join("crates/sim/src"));
    let mut crossings = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            let (Some(a), Some(b)) = (from.first(), to.first()) else {
                continue;
            };
            let a_simulator = simulators.contains(&a.as_str());
            let b_simulator = simulators.contains(&b.as_str());
            // A simulator naming another, or anything naming the platform that composes them.
            if a != b && ((a_simulator && b_simulator) || b == "platform") {
                crossings.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    let expected: Vec<String> = crossings
        .iter()
        .filter(|line| line.starts_with("kube::programs::gitlab -> gitlab"))
        .cloned()
        .collect();
    assert_eq!(
        crossings, expected,
        "only GitLab's webservice program may cross"
    );
    assert!(
        !expected.is_empty(),
        "GitLab's webservice program serves the GitLab simulator"
    );
}

#[test]
fn no_simulator_file_is_over_1500_lines() {
    let src = root().join("crates/sim/src");
    let long: Vec<String> = rust_files(&src)
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).expect("read").lines().count();
            let name = file.strip_prefix(&src).expect("under src").display();
            (lines > 1500).then(|| format!("{name}: {lines} lines"))
        })
        .collect();
    assert_eq!(long, Vec::<String>::new());
}

/// Whole-output checks (`expect(code, stdout, stderr)`, `.stdout(..)`, `.stderr(..)`) against
/// substring checks (`partial_stdout`/`partial_stderr` with their reason, `assert!(...contains)`)
/// in this folder's tests.
#[test]
fn whole_output_checks_outnumber_substring_checks() {
    let exact =
        regex::Regex::new(r"\.(stdout|stderr)\(|\.expect\(\s*(-?\d+|[a-z_]*code\b)").unwrap();
    let partial =
        regex::Regex::new(r"_contains\(|\.partial_(stdout|stderr)\(|assert!\([^;]*\.contains\(")
            .unwrap();
    let (mut exact_checks, mut partial_checks) = (0, 0);
    for file in rust_files(&root().join("tests/integration")) {
        if file.ends_with("house.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read test");
        exact_checks += exact.find_iter(&text).count();
        partial_checks += partial.find_iter(&text).count();
    }
    assert!(
        exact_checks > partial_checks,
        "{exact_checks} whole-output checks, {partial_checks} substring checks"
    );
}

/// The clients serve any caller: a way out that is a native's call travels as a `Remedy`, which
/// the runner words (src/error.rs), so no client string literal names a native.
#[test]
fn the_client_crate_names_no_native() {
    let native = regex::Regex::new(r"(?m)^\s*pub fn ([a-z][a-z0-9]*_[a-z0-9_]+)\(").unwrap();
    let mut natives = BTreeSet::new();
    for file in rust_files(&root().join("src/natives")) {
        let text = std::fs::read_to_string(&file).expect("read native");
        natives.extend(
            native
                .captures_iter(&text)
                .map(|found| found[1].to_string()),
        );
    }
    assert!(natives.contains("bao_unseal") && natives.contains("gitlab_login"));
    // Read left to right: raw strings, strings, comments, char literals and lifetimes (so a
    // `'"'` opens no string and a `//` inside a string is no comment).
    let token = regex::Regex::new(
        r##"r#"(?s:.*?)"#|r"[^"]*"|"(?s:(?:[^"\\]|\\.)*)"|//[^\n]*|'(?:\\.|[^\\'])'|'[A-Za-z_]+"##,
    )
    .unwrap();
    let word = regex::Regex::new(r"[a-z][a-z0-9_]*").unwrap();
    let src = root().join("crates/clients/src");
    let mut named = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("read client");
        let text = match text.find("#[cfg(test)]\nmod tests") {
            Some(at) => &text[..at],
            None => &text,
        };
        let literals = token
            .find_iter(text)
            .filter(|found| !found.as_str().starts_with(['\'', '/']));
        for found in literals {
            for name in word.find_iter(found.as_str()) {
                if natives.contains(name.as_str()) {
                    let shown = file.strip_prefix(&src).expect("under src").display();
                    named.push(format!("{shown}: {} in {}", name.as_str(), found.as_str()));
                }
            }
        }
    }
    assert_eq!(named, Vec::<String>::new());
}

/// Operators edit the shipped scripts: no test, benchmark or harness pins a place in them. A
/// frame or a "called at" position is rendered from the script's current text
/// (tests/integration/support.rs: `script_frame`, `source_frame`, `script_location`), so a line
/// added anywhere in a script leaves every test as it was. Flagged: a shipped script's name
/// followed by `:LINE`, and a bare `"LINE:COLUMN"` string literal (a position passed apart from
/// its script's name).
#[test]
fn no_test_pins_a_line_of_a_shipped_script() {
    let root = root();
    let mut scripts: Vec<String> = Vec::new();
    for folder in ["scripts", "scripts/lib"] {
        for entry in std::fs::read_dir(root.join(folder)).expect("read scripts") {
            let path = entry.expect("scripts entry").path();
            if path.extension().is_some_and(|ext| ext == "rhai") {
                let relative = path.strip_prefix(root).expect("under the root");
                scripts.push(regex::escape(&relative.to_string_lossy()));
            }
        }
    }
    scripts.sort();
    let pinned = regex::Regex::new(&format!(r"(?:{})[:]\d", scripts.join("|"))).expect("regex");
    let bare_position = regex::Regex::new(r#""\d+[:]\d+""#).expect("regex");
    let mut found = Vec::new();
    let folders = ["tests", "benches", "src", "crates"];
    for folder in folders {
        for file in rust_files(&root.join(folder)) {
            let text = std::fs::read_to_string(&file).expect("read source");
            for (index, line) in text.lines().enumerate() {
                if pinned.is_match(line) || bare_position.is_match(line) {
                    let relative = file.strip_prefix(root).expect("under the root");
                    found.push(format!(
                        "{}:{}: {}",
                        relative.display(),
                        index + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        scripts.len() >= 6,
        "the shipped scripts were not found: {scripts:?}"
    );
    assert_eq!(
        found,
        Vec::<String>::new(),
        "positions in the shipped scripts, pinned: render them from the script's text instead (support::script_frame, source_frame, script_location)"
    );
}
