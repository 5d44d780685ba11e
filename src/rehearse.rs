//! `bprun rehearse SCRIPT`, `bprun sim all` and `bprun repl --rehearse`: a script, a shell, or
//! nothing but the environment, against the embedded simulated platform.
//!
//! A rehearsal works on a copy of the repository (under its state folder), so it never writes
//! working trees, journals or files into the operator's checkout.

use std::path::{Path, PathBuf};

use crate::error::{Error, ExitCode};
use crate::runner::{self, RunOptions};
use bprun_sim::platform;

/// What the repository copy leaves out: build output, tools, the working trees and run state,
/// and the data of the operator's volumes (the rehearsal's nodes mount the copy's own
/// `infra/data/shared/`, which starts empty as the rehearsal's cluster does).
const NOT_COPIED: &[&str] = &[
    ".git",
    "target",
    ".tools",
    "apps-local",
    ".bprun",
    NODE_SHARED,
];

/// What phases 2 and 3 write into the repository (gitignored): a kept rehearsal keeps the
/// copy's, which belong to its platform, rather than the checkout's.
const WRITTEN_BY_THE_SCRIPTS: &[&str] = &["infra/secrets", "infra/tls"];

/// The repository folder phase 1's kind cluster mounts at `/var/local/shared` on every node.
const NODE_SHARED: &str = "infra/data/shared";

fn usage(message: impl Into<String>) -> Error {
    Error::usage(message.into(), None)
}

/// Exports the platform's environment.
///
/// SAFETY of `set_var`: callers run this before anything has started a thread (the shared
/// runtime, the Ctrl-C handler and the simulators all start afterwards), so no other thread
/// can be reading the environment.
fn export(prepared: &platform::Prepared, root: &Path, keep_token: bool) {
    // The tools `./test.sh` installs (helm, kubectl, bao) serve the rehearsal too, as the
    // platform's OpenBao already finds `.tools/bin/bao`: first on PATH when they are there.
    let tools = root.join(".tools/bin");
    if tools.is_dir() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let joined =
            std::env::join_paths(std::iter::once(tools).chain(std::env::split_paths(&path)));
        if let Ok(joined) = joined {
            // SAFETY: single-threaded at this point (see above).
            unsafe { std::env::set_var("PATH", joined) };
        }
    }
    for (key, value) in prepared.env() {
        if key == "GITLAB_TOKEN" && !keep_token {
            // A rehearsal starts as a fresh platform does: no GitLab token (phase 3 mints one).
            // SAFETY: single-threaded at this point (see above).
            unsafe { std::env::remove_var(key) };
            continue;
        }
        // SAFETY: single-threaded at this point (see above).
        unsafe { std::env::set_var(key, value) };
    }
}

/// The installer of the tools a rehearsal runs for real (`./test.sh` runs it too).
const INSTALLER: &str = "scripts/install-tools.sh";

/// The programs a rehearsal runs for real that neither the environment, `PATH` nor the
/// checkout's `.tools/` provides, in the order the installer installs them.
fn missing_tools(root: &Path) -> Vec<&'static str> {
    let local = |tool: &str| root.join(".tools/bin").join(tool).is_file();
    let found = |tool: &str| bprun_sim::tools::on_path(tool).is_some() || local(tool);
    let helm = std::env::var_os("HELM_BIN").is_some_and(|path| Path::new(&path).is_file());
    let mut missing = Vec::new();
    if bprun_sim::tools::bao(root).is_none() {
        missing.push("bao");
    }
    if !helm && !found("helm") {
        missing.push("helm");
    }
    if !found("kubectl") {
        missing.push("kubectl");
    }
    // The apps' CI jobs deploy with helm 3 (their image's), as `helm3`.
    if !found("helm3") {
        missing.push("helm3");
    }
    if bprun_sim::tools::redis_server(root).is_none() {
        missing.push("redis-server");
    }
    if bprun_sim::tools::redis_cli(root).is_none() {
        missing.push("redis-cli");
    }
    if bprun_sim::tools::postgres_bindir(root).is_none() {
        missing.push("postgres");
    }
    missing
}

/// Installs what a rehearsal needs and the machine lacks into `.tools/`, with the checkout's
/// installer (the one `./test.sh` uses), so that the main job works first on a fresh machine.
/// A repository without that installer runs with what there is.
fn ensure_tools(root: &Path) -> Result<(), Error> {
    let missing = missing_tools(root);
    if missing.is_empty() {
        return Ok(());
    }
    let installer = root.join(INSTALLER);
    let names = missing.join(", ");
    if !installer.is_file() {
        // Not bprun's own checkout: each step that needs a missing program says so itself.
        return Ok(());
    }
    eprintln!(
        "bprun: the rehearsal needs {names}: installing into .tools/ with {INSTALLER} --main"
    );
    let status = std::process::Command::new("bash")
        .arg(&installer)
        .arg("--main")
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|error| Error::io("run the installer", &installer, error))?;
    if !status.success() {
        let exit = status
            .code()
            .map_or_else(|| "a signal".to_string(), |code| format!("exit {code}"));
        return Err(Error::usage(
            format!("{INSTALLER} --main failed ({exit}): the rehearsal cannot start without {names}"),
            Some("its lines above say what failed; fix that and run the same command again (the installer skips what is there)".to_string()),
        ));
    }
    let still = missing_tools(root);
    if !still.is_empty() {
        return Err(Error::usage(
            format!(
                "{INSTALLER} --main finished, but {} still cannot be found",
                still.join(", ")
            ),
            Some("install them on PATH yourself; `./test.sh` reports the same gap".to_string()),
        ));
    }
    Ok(())
}

/// A temporary folder removed on drop, or a kept one.
struct StateDir {
    path: PathBuf,
    temporary: bool,
}

impl Drop for StateDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn state_dir(given: Option<PathBuf>, purpose: &str) -> Result<StateDir, Error> {
    match given {
        Some(path) => {
            std::fs::create_dir_all(&path)
                .map_err(|error| Error::io("create the state folder", &path, error))?;
            Ok(StateDir {
                path,
                temporary: false,
            })
        }
        None => {
            let path = std::env::temp_dir().join(format!(
                "bprun-{purpose}-{}-{}",
                std::process::id(),
                fastrand::u32(..)
            ));
            std::fs::create_dir_all(&path)
                .map_err(|error| Error::io("create the state folder", &path, error))?;
            Ok(StateDir {
                path,
                temporary: true,
            })
        }
    }
}

/// Copies the repository at `root` into `destination` (rsync -a --delete semantics).
fn copy_repository(root: &Path, destination: &Path, also_skip: &[&Path]) -> Result<(), Error> {
    let mut exclude: Vec<String> = NOT_COPIED.iter().map(|s| s.to_string()).collect();
    exclude.extend(also_skip.iter().map(|path| path.display().to_string()));
    bprun_clients::tree::sync_tree(root, destination, &exclude, false).map_err(|error| {
        usage(format!(
            "copying the repository for the rehearsal: {}",
            error.message
        ))
    })?;
    // The copy is a repository root of its own.
    std::fs::create_dir_all(destination.join(".git"))
        .map_err(|error| Error::io("mark the repository copy", destination, error))?;
    Ok(())
}

fn print_platform(platform: &platform::Platform, with_runner: bool, bare: bool) {
    eprintln!(
        "rehearsal platform{}:",
        if bare {
            " (bare: a fresh kind cluster, phase 2 builds the rest)"
        } else {
            " (as phase 2 leaves it)"
        }
    );
    eprintln!("  GitLab simulator     {}", platform.gitlab_url);
    eprintln!(
        "  GitLab Runner        {}",
        if with_runner {
            "an online instance runner stand-in (as phase 2 registers it)"
        } else if bare {
            "none until phase 2 installs the GitLab Runner chart"
        } else {
            "none (--no-runner): pipelines stay pending"
        }
    );
    eprintln!("  Kubernetes simulator {}", platform.kube.url);
    eprintln!("  OpenBao              {}", platform.bao_description());
}

/// The scripts of `bprun rehearse A.rhai B.rhai ... [ARGS...]`: the first positional word and
/// every following one ending in `.rhai`, until the first script argument.
fn split_scripts(options: &RunOptions) -> (Vec<PathBuf>, Vec<String>) {
    let mut scripts = vec![options.script.clone()];
    let mut rest = options.script_args.iter().peekable();
    while let Some(next) = rest.peek() {
        if next.starts_with('-') || !next.ends_with(".rhai") {
            break;
        }
        scripts.push(PathBuf::from(next.as_str()));
        rest.next();
    }
    (scripts, rest.cloned().collect())
}

/// The command-line words each rehearsed script gets: the parameters it declares (a script
/// that declares none gets them all). A word no script declares is refused before anything
/// starts, with a did-you-mean over every script's parameters.
fn words_per_script(
    located: &[(runner::ScriptLocation, PathBuf)],
    words: &[String],
) -> Result<Vec<Vec<String>>, Error> {
    let declared: Vec<Option<Vec<crate::params::ParamDecl>>> = located
        .iter()
        .map(|(location, _)| runner::declared_params(&location.file))
        .collect();
    if located.len() < 2 || declared.iter().any(Option::is_none) {
        return Ok(vec![words.to_vec(); located.len()]);
    }
    let all: Vec<crate::params::ParamDecl> = declared.iter().flatten().flatten().cloned().collect();
    let (_, unclaimed) = crate::params::words_for(&all, words);
    if let Some(word) = unclaimed.first() {
        let flags: Vec<String> = all.iter().map(|decl| decl.flag()).collect();
        let mut unique = flags.clone();
        unique.sort();
        unique.dedup();
        let suggestion = crate::text::closest(word, &flags)
            .map(|near| format!("did you mean {near}? "))
            .unwrap_or_default();
        return Err(Error::usage(
            format!("no rehearsed script takes `{word}`"),
            Some(format!(
                "{suggestion}the scripts take {} (`bprun SCRIPT --help` describes them)",
                unique.join(", ")
            )),
        ));
    }
    Ok(declared
        .iter()
        .flatten()
        .map(|decls| crate::params::words_for(decls, words).0)
        .collect())
}

/// Whether the platform starts bare: asked for, or because a phase 2 script will build it.
fn starts_bare(asked: Option<&str>, scripts: &[PathBuf]) -> bool {
    match asked {
        Some(start) => start == "bare",
        None => scripts
            .iter()
            .any(|script| script.file_name().is_some_and(|name| name == "phase2.rhai")),
    }
}

/// `bprun rehearse [--state DIR] [--platform bare|phase2] [RUN OPTIONS] SCRIPT [SCRIPT...] [ARGS...]`:
/// the scripts run one after the other, unchanged, on one platform; the first that fails
/// stops the rehearsal. Script arguments reach every script.
pub fn rehearse(
    state: Option<PathBuf>,
    with_runner: bool,
    start: Option<&str>,
    options: RunOptions,
) -> Result<ExitCode, Error> {
    let (scripts, script_args) = split_scripts(&options);
    let mut located = Vec::new();
    for script in &scripts {
        let location = runner::ScriptLocation::find(script)?;
        let relative = location
            .file
            .strip_prefix(&location.root)
            .map(Path::to_path_buf)
            .map_err(|_| usage("the script is not inside its repository"))?;
        located.push((location, relative));
    }
    let words_per_script = words_per_script(&located, &script_args)?;
    let root = located[0].0.root.clone();
    if let Some((other, _)) = located.iter().find(|(location, _)| location.root != root) {
        return Err(usage(format!(
            "{} is in another repository than {}: a rehearsal copies one repository",
            other.display, located[0].0.display
        )));
    }
    let bare = starts_bare(start, &scripts);
    ensure_tools(&root)?;
    let state = state_dir(state, "rehearse")?;
    let work = state.path.join("work");
    // A state folder inside the repository must not copy itself (and its tokens) along.
    let state_inside = std::path::absolute(&state.path)
        .ok()
        .and_then(|path| path.strip_prefix(&root).ok().map(Path::to_path_buf));
    // A --state folder that holds a platform keeps it: the cluster, its nodes' volumes, and
    // what the scripts wrote into the copy (phase 2's secrets and certificates, the journal,
    // the working trees) stay, while the checkout's files are copied over as they are now.
    let kept = state
        .path
        .join("platform")
        .join(platform::KUBE_STORE)
        .is_file();
    let mut skipped: Vec<&Path> = state_inside.iter().map(PathBuf::as_path).collect();
    if kept {
        skipped.extend(WRITTEN_BY_THE_SCRIPTS.iter().map(Path::new));
    }
    copy_repository(&root, &work, &skipped)?;
    let node_shared = work.join(NODE_SHARED);
    if !kept && node_shared.exists() {
        // A new platform starts with empty volumes.
        std::fs::remove_dir_all(&node_shared)
            .map_err(|error| Error::io("empty the rehearsal's node folder", &node_shared, error))?;
    }
    std::fs::create_dir_all(&node_shared)
        .map_err(|error| Error::io("create the rehearsal's node folder", &node_shared, error))?;
    let mut prepared = platform::prepare(&root, &state.path.join("platform"), 1.0)
        .map_err(|message| usage(format!("rehearsal platform: {message}")))?;
    prepared.with_runner = with_runner && !bare;
    prepared.bare = bare;
    prepared.node_shared = Some(node_shared);
    prepared.repository = Some(work.clone());
    export(&prepared, &root, false);
    let platform = platform::start(prepared)
        .map_err(|message| usage(format!("rehearsal platform: {message}")))?;
    if kept {
        eprintln!(
            "rehearsal platform (kept in {}, started again as it was{}):",
            state.path.display(),
            if bare {
                reopen_openbao(&work)
            } else {
                String::new()
            }
        );
        eprintln!("  GitLab simulator     {}", platform.gitlab_url);
        eprintln!("  Kubernetes simulator {}", platform.kube.url);
    } else {
        print_platform(&platform, with_runner && !bare, bare);
    }
    let mut code = Ok(ExitCode::Success);
    let mut pending = false;
    for (index, (location, relative)) in located.iter().enumerate() {
        if located.len() > 1 {
            eprintln!(
                "\n== rehearsal {}/{}: {} ==",
                index + 1,
                located.len(),
                location.display
            );
        }
        code = runner::run(RunOptions {
            script: work.join(relative),
            script_args: words_per_script[index].clone(),
            ..options.clone()
        });
        // A check that finds changes goes on to the next script; the rehearsal then says so.
        if matches!(code, Ok(ExitCode::ChangesPending)) {
            pending = true;
            code = Ok(ExitCode::Success);
        }
        if !matches!(code, Ok(ExitCode::Success)) {
            if index + 1 < located.len() {
                eprintln!(
                    "rehearsal stopped: {} failed, so {} did not run",
                    location.display,
                    located[index + 1..]
                        .iter()
                        .map(|(l, _)| l.display.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            break;
        }
    }
    // Under --json stdout carries JSON lines only: the end state is one event per part.
    let show = |title: &str, part: &str, text: &str| {
        if options.json {
            let lines: Vec<&str> = text.lines().collect();
            crate::output::print_event(
                serde_json::json!({"event": "end_state", "part": part, "lines": lines}),
            );
        } else {
            println!("\nEnd state of the rehearsal {title}:");
            print!("{}", bprun_clients::secret::scrub(text));
        }
    };
    if bare {
        let cluster = format!(
            "{}{}{}",
            helm_releases(&work),
            platform.kube_summary(),
            openbao_paths(&work)
        );
        show("cluster", "cluster", &cluster);
    }
    match platform.end_state() {
        Ok(text) => show("platform", "platform", &text),
        Err(message) => eprintln!("warning: cannot read the end state: {message}"),
    }
    drop(platform);
    match code {
        Ok(ExitCode::Success) if pending => Ok(ExitCode::ChangesPending),
        other => other,
    }
}

/// A kept platform's OpenBao as the last rehearsal left it: its pod restarted with the
/// platform, so it is sealed again, which on the operator's model of the platform (a kind
/// cluster that stayed up between two runs) it never was. Unsealed with the copy's init file,
/// through a port-forward as phase 2 reaches it; what it did, in words for the banner.
fn reopen_openbao(work: &Path) -> String {
    let unsealed = openbao_through_forward(work).and_then(|reached| {
        let Some((kube, client)) = reached else {
            return Ok(false);
        };
        if !client.status()?.sealed {
            return Ok(false);
        }
        let init = client.read_init_file()?;
        client.unseal(&init)?;
        // Ready again once its readiness probe has seen it unsealed (bounded: 30 s; a pod
        // still unready then is left to the scripts' own waits, which say why).
        use bprun_clients::kube::{Until, WaitSpec, conditions};
        let _ = kube.wait(
            &WaitSpec {
                kind: "Pod",
                namespace: "openbao",
                target: "openbao-0",
                until: Until::Condition(&conditions::ready),
                timeout: std::time::Duration::from_secs(30),
            },
            bprun_clients::reconcile::Mode::Apply,
            &|_| {},
            &|| false,
        );
        Ok(true)
    });
    match unsealed {
        Ok(true) => "; OpenBao, whose pod restarted, unsealed again with the copy's infra/secrets/openbao-init.json".into(),
        Ok(false) => String::new(),
        Err(error) => format!("; OpenBao stays sealed ({})", error.message),
    }
}

/// The OpenBao phase 2 installed into the rehearsal's cluster, reached as phase 2 reaches it:
/// through a port-forward to svc/openbao, with the copy's init file (its root token). `None`:
/// phase 2 has not initialised it (no init file).
fn openbao_through_forward(
    work: &Path,
) -> Result<
    Option<(
        bprun_clients::kube::KubeClient,
        bprun_clients::bao::BaoClient,
    )>,
    bprun_clients::error::ClientError,
> {
    use bprun_clients::bao::{BaoClient, BaoSettings};
    let settings = BaoSettings::from_env(work);
    if !settings.init_file.is_file() {
        return Ok(None);
    }
    let kube = bprun_clients::kube::KubeClient::connect(None)?;
    let address = kube.port_forward("openbao", "svc/openbao", 8200)?;
    let client = BaoClient::new(BaoSettings {
        address: format!("http://{address}"),
        ..settings
    });
    Ok(Some((kube, client)))
}

/// The KV paths under `secret/` in the OpenBao phase 2 installed (values never read), through a
/// port-forward to its Service with the root token of the init file phase 2 wrote.
fn openbao_paths(work: &Path) -> String {
    use bprun_clients::bao::KvPath;
    let client = match openbao_through_forward(work) {
        Ok(Some((_, client))) => client,
        Ok(None) => {
            return "OpenBao: not initialised (no infra/secrets/openbao-init.json)\n".to_string();
        }
        Err(error) => return format!("OpenBao: cannot reach svc/openbao ({})\n", error.message),
    };
    // Depth-first over folders (keys ending in `/`), bounded: a KV store of a rehearsal is small.
    let mut paths = Vec::new();
    let mut folders = vec![String::new()];
    while let Some(folder) = folders.pop() {
        if paths.len() > 500 {
            break;
        }
        let listed = client.kv_list(&KvPath {
            mount: "secret".to_string(),
            path: folder.clone(),
        });
        match listed {
            Ok(keys) => {
                for key in keys {
                    let full = format!("{folder}{key}");
                    if key.ends_with('/') {
                        folders.push(full);
                    } else {
                        paths.push(full);
                    }
                }
            }
            Err(error) => return format!("OpenBao: cannot list secret/ ({})\n", error.message),
        }
    }
    paths.sort();
    if paths.is_empty() {
        return "OpenBao secret/: no paths\n".to_string();
    }
    format!("OpenBao secret/ (values hidden): {}\n", paths.join(", "))
}

/// The helm releases with chart and the digest bprun stamped on them, read with the real helm.
fn helm_releases(work: &Path) -> String {
    let helm = bprun_clients::helm::Helm::new(
        work,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    match helm.list(None) {
        Ok(releases) if releases.is_empty() => "helm releases: none\n".to_string(),
        Ok(releases) => {
            let mut out = String::from("helm releases:\n");
            for listed in &releases {
                // `helm list` leaves out the description, where bprun stamps its digest.
                let status = helm.status(&listed.name, &listed.namespace).ok().flatten();
                let release = status.as_ref().unwrap_or(listed);
                out.push_str(&format!(
                    "  {}/{} {} revision {} {}{}\n",
                    release.namespace,
                    release.name,
                    release.chart,
                    release.revision,
                    release.status,
                    release
                        .digest()
                        .map(|digest| format!(" (digest {})", &digest[..digest.len().min(16)]))
                        .unwrap_or_default()
                ));
            }
            out
        }
        Err(error) => format!("helm releases: cannot list ({})\n", error.message),
    }
}

/// Marks a folder as a rehearsal's node data, so that a later `--node-shared` can tell it from
/// a real platform's.
const REHEARSAL_MARKER: &str = ".bprun-rehearsal";

/// `folder`, made ready for a rehearsal's nodes: created when missing, and marked. A folder
/// that holds data no rehearsal wrote (phase 1's `infra/data/shared` of a real kind platform,
/// with OpenBao's raft storage and PostgreSQL's files) is refused: a rehearsal would write its
/// own OpenBao and databases over them. Hidden files alone (a `.gitkeep`) are no data.
fn rehearsal_folder(folder: &Path) -> Result<PathBuf, Error> {
    if folder.join(REHEARSAL_MARKER).exists() {
        return Ok(folder.to_path_buf());
    }
    let data: Vec<String> = match std::fs::read_dir(folder) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(Error::io("read the node folder", folder, error)),
    };
    if let Some(first) = data.iter().min() {
        return Err(Error::usage(
            format!(
                "--node-shared {}: it holds data no rehearsal wrote ({first}{}), such as a real platform's",
                folder.display(),
                if data.len() > 1 { ", ..." } else { "" }
            ),
            Some(
                "give an empty folder, or leave --node-shared out: the rehearsal keeps its nodes' data in its state folder"
                    .into(),
            ),
        ));
    }
    std::fs::create_dir_all(folder)
        .map_err(|error| Error::io("create the node folder", folder, error))?;
    std::fs::write(
        folder.join(REHEARSAL_MARKER),
        "bprun's rehearsal nodes keep their data here (bprun sim all, bprun rehearse)\n",
    )
    .map_err(|error| Error::io("mark the node folder", folder, error))?;
    Ok(folder.to_path_buf())
}

/// `bprun sim all [--state DIR] [--node-shared DIR] [--repository DIR]`: serves the platform
/// and prints its environment. The nodes mount `node_shared` (default: `node-shared` in the
/// state folder; a folder with a real platform's data is refused) at `/var/local/shared`; the
/// seeded gateway serves the wildcard certificate of `repository`'s `infra/tls/wildcard/`.
pub fn sim_all(
    state: Option<PathBuf>,
    pipeline_seconds: f64,
    bare: bool,
    gitlab_latency_ms: u64,
    node_shared: Option<PathBuf>,
    repository: Option<PathBuf>,
    play_jobs: bool,
) -> Result<ExitCode, Error> {
    let root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    // Before anything starts: a folder with a real platform's data is refused untouched.
    let asked_node_shared = match node_shared {
        Some(asked) => Some(rehearsal_folder(&std::path::absolute(&asked).map_err(
            |error| usage(format!("bprun sim all: --node-shared: {error}")),
        )?)?),
        None => None,
    };
    ensure_tools(&root)?;
    let state = state_dir(state.or_else(|| Some(root.join(".bprun/sim"))), "sim")?;
    let mut prepared = platform::prepare(&root, &state.path, pipeline_seconds)
        .map_err(|message| usage(format!("bprun sim all: {message}")))?;
    prepared.bare = bare;
    prepared.gitlab_latency_ms = gitlab_latency_ms;
    prepared.play_jobs = play_jobs;
    prepared.node_shared = Some(match asked_node_shared {
        Some(folder) => folder,
        None => rehearsal_folder(&state.path.join("node-shared"))?,
    });
    prepared.repository = Some(
        std::path::absolute(repository.unwrap_or_else(|| root.clone()))
            .map_err(|error| usage(format!("bprun sim all: --repository: {error}")))?,
    );
    let platform =
        platform::start(prepared).map_err(|message| usage(format!("bprun sim all: {message}")))?;
    use std::io::Write;
    let mut out = std::io::stdout();
    // The same as `export` lines for `source` (written first: whoever read the lines may use
    // it at once); it holds tokens, so 0600 like the rest of the state.
    let exports: String = platform
        .env()
        .iter()
        .map(|(key, value)| format!("export {key}='{}'\n", value.replace('\'', "'\\''")))
        .collect();
    let env_file = state.path.join("env.sh");
    bprun_clients::fs::write_private(&env_file, exports.as_bytes()).map_err(|error| {
        usage(format!(
            "bprun sim all: cannot write {}: {error}",
            env_file.display()
        ))
    })?;
    for (key, value) in platform.env() {
        let _ = writeln!(out, "{key}={value}");
    }
    let _ = out.flush();
    eprintln!("OpenBao: {}", platform.bao_description());
    eprintln!(
        "set these variables in the shell that runs `bprun scripts/phase3.rhai` or `bprun repl` (`source {}` does it); Ctrl-C stops the platform",
        env_file.display()
    );
    bprun_clients::runtime::runtime()
        .block_on(bprun_sim::http::shutdown_signal())
        .map_err(usage)?;
    drop(platform);
    Ok(ExitCode::Success)
}

/// `bprun repl --rehearse`: the REPL with the platform's environment.
pub fn repl(check: bool, load: Option<PathBuf>) -> Result<ExitCode, Error> {
    let root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    ensure_tools(&root)?;
    let state = state_dir(None, "repl")?;
    // A copy of the repository, as `bprun rehearse` works on: phase 2's files (the wildcard
    // certificate) land there, and `:run` runs scripts there, so the session changes no file of
    // the checkout.
    let copy = state.path.join("work");
    copy_repository(&root, &copy, &[])?;
    let mut prepared = platform::prepare(&root, &state.path.join("platform"), 1.0)
        .map_err(|message| usage(format!("rehearsal platform: {message}")))?;
    prepared.repository = Some(copy.clone());
    export(&prepared, &root, true);
    let platform = platform::start(prepared)
        .map_err(|message| usage(format!("rehearsal platform: {message}")))?;
    print_platform(&platform, true, false);
    eprintln!(
        "  :run scripts/phase3.rhai brings it to where phase 3 leaves it (in a copy of the repository)"
    );
    if std::env::var("GITLAB_TOKEN").is_ok_and(|token| !token.is_empty()) {
        eprintln!(
            "  GITLAB_TOKEN is set (the simulator's admin token): gitlab_* natives work at once; gitlab_login(TOKEN) switches to another token"
        );
    } else {
        eprintln!(
            "  (no GITLAB_TOKEN: run phase 3 first, then gitlab_login(bao_read(\"gitlab/bootstrap/admin_token\").token))"
        );
    }
    let code = crate::repl::run(crate::repl::ReplOptions {
        check,
        load,
        rehearsal_copy: Some(copy),
    });
    drop(platform);
    code
}
