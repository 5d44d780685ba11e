//! The command line: `bprun [OPTIONS] SCRIPT [SCRIPT_ARGS...]` and the helper commands.

use clap::{Args, CommandFactory, Parser, Subcommand};
use std::path::PathBuf;

use crate::error::{Error, ExitCode};
use crate::runner::{self, RunOptions};

#[derive(Debug, Parser)]
#[command(
    name = "bprun",
    version,
    about = "Run Rhai scripts that bootstrap and operate the blueprint platform",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Script arguments after SCRIPT reach the script as the map `args`: \
                  `--app guestbook` gives args.app == \"guestbook\", a bare `--destroy` gives args.destroy == true."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Report what would change without changing anything
    #[arg(long)]
    check: bool,
    /// Print the numbered plan (the steps) without running any step or contacting any server
    #[arg(long)]
    list: bool,
    /// For shell completion: the steps' slugs (and `tag:NAME` for their tags), one per line
    #[arg(long, hide = true)]
    list_slugs: bool,
    /// Run only this step (repeatable)
    #[arg(long, value_name = "STEP")]
    only: Vec<String>,
    /// Skip this step (repeatable)
    #[arg(long, value_name = "STEP")]
    skip: Vec<String>,
    /// Run only steps with this tag (repeatable, or comma-separated), and `always` steps
    #[arg(long, value_name = "TAG")]
    tags: Vec<String>,
    /// Leave out steps with this tag (repeatable, or comma-separated)
    #[arg(long, value_name = "TAG")]
    skip_tags: Vec<String>,
    /// Start at this step
    #[arg(long, value_name = "STEP")]
    from: Option<String>,
    /// Start at the first step that did not finish in the previous run
    #[arg(long)]
    resume: bool,
    /// Print one JSON event per line instead of human output
    #[arg(long)]
    json: bool,
    /// Print the last run's per-step timings from the journal and exit
    #[arg(long)]
    timings: bool,
    /// Show how each change changes its resource: files as unified diffs, Kubernetes objects
    /// and helm values as YAML diffs, CI/CD variables old -> new (hidden values hidden),
    /// OpenBao keys by name (with --check: what would change, and how)
    #[arg(long)]
    diff: bool,
    /// With --check: exit 5 (changes-pending) when a run would change something, 0 when
    /// nothing (for a scheduled drift check)
    #[arg(long, requires = "check")]
    detailed_exitcode: bool,
    /// Print where the last run stopped and the next steps, from the journal, and exit
    #[arg(long, conflicts_with = "timings")]
    summary: bool,
    /// Show debug lines
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Show only step lines, warnings and errors
    #[arg(short, long, conflicts_with = "verbose")]
    quiet: bool,
    /// The kubeconfig context the Kubernetes natives use (default: the current context)
    #[arg(long, value_name = "NAME")]
    kube_context: Option<String>,
    /// The script to run
    #[arg(value_name = "SCRIPT", required = true)]
    script: Option<PathBuf>,
    /// Arguments for the script (the map `args`)
    #[arg(
        value_name = "SCRIPT_ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    script_args: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a script (the long form of `bprun SCRIPT`)
    Run(RunArgs),
    /// List the native functions with their signatures and first doc line
    Functions {
        /// Show only functions whose name contains this text
        filter: Option<String>,
    },
    /// Write Rhai definition files (for editor completion) into DIR
    Defs { dir: PathBuf },
    /// Print a shell completion script
    Completions { shell: clap_complete::Shell },
    /// An interactive Rhai session with every native (same engine, check mode and redaction)
    Repl {
        /// Start in check mode (`:check off` leaves it)
        #[arg(long)]
        check: bool,
        /// Run a script's top level first (its functions and imports become available; its
        /// steps are declared, not run)
        #[arg(long, value_name = "SCRIPT")]
        load: Option<PathBuf>,
        /// Start the embedded simulated platform and point the session at it
        #[arg(long)]
        rehearse: bool,
    },
    /// Evaluate one Rhai input as the REPL would (same natives, authentication, check mode and
    /// redaction) and print its value: for scripts and CI (`bprun eval 'bao_status().sealed'`)
    Eval {
        /// Report what would change instead of changing it
        #[arg(long)]
        check: bool,
        /// Run a script's top level first (its functions, imports and constants become
        /// available; its steps are declared, not run)
        #[arg(long, value_name = "SCRIPT")]
        load: Option<PathBuf>,
        /// Print the value as JSON
        #[arg(long)]
        json: bool,
        /// The Rhai input (one expression, or statements; the last one's value is printed)
        #[arg(value_name = "EXPR")]
        input: String,
    },
    /// Rehearse a script on the embedded simulated platform (GitLab and Kubernetes simulators,
    /// OpenBao), on a copy of the repository; prints the platform's end state
    Rehearse {
        /// Keep the platform's state and the repository copy in DIR (default: a temporary
        /// folder, removed at the end)
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
        /// Leave out the GitLab Runner stand-in (as if phase 2's last step had not run):
        /// pipelines then stay pending, as on a GitLab without a runner
        #[arg(long)]
        no_runner: bool,
        /// How the platform starts: `bare` (a fresh kind cluster: nodes and CoreDNS only, phase 2
        /// builds the rest) or `phase2` (as phase 2 leaves it). Default: bare when one of the
        /// scripts is a phase2.rhai, else phase2
        #[arg(long, value_name = "START", value_parser = ["bare", "phase2"])]
        platform: Option<String>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Simulators of systems that cannot run here (GitLab, Kubernetes, OpenBao, all together)
    #[command(subcommand)]
    Sim(SimCommand),
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// bprun's in-process OpenBao stand-in (the `bao server -dev` API bprun uses); prints
    /// BAO_ADDR, BAO_TOKEN and BAO_UNSEAL_KEY
    Bao {
        /// Loopback address to listen on (port 0 picks a free port)
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// The root token (one is generated when none is given)
        #[arg(long, value_name = "TOKEN", default_value = "")]
        token: String,
    },
    /// The whole embedded platform: GitLab and Kubernetes simulators and OpenBao (a real
    /// `bao server -dev` when `bao` is installed, else an in-process stand-in); prints the
    /// environment to use
    All {
        /// Keep the simulators' state in this folder
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
        /// Seconds a pipeline takes from creation to success
        #[arg(long, default_value_t = 2.0)]
        pipeline_seconds: f64,
        /// How the platform starts: `phase2` (as phase 2 leaves it) or `bare` (a fresh kind
        /// cluster: nodes and CoreDNS only; `bprun scripts/phase2.rhai` builds the rest)
        #[arg(long, value_name = "START", value_parser = ["bare", "phase2"], default_value = "phase2")]
        platform: String,
        /// Latency added to every GitLab answer (API and git), in milliseconds
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// The host folder every simulated node mounts at /var/local/shared, as phase 1's kind
        /// cluster mounts the repository's infra/data/shared/ (OpenBao's stable volume keeps
        /// its data there); a folder holding a real platform's data is refused [default:
        /// node-shared in the state folder]
        #[arg(long, value_name = "DIR")]
        node_shared: Option<PathBuf>,
        /// The repository phase 3 runs in, where phase 2 would have left the wildcard
        /// certificate the seeded gateway serves (infra/tls/wildcard/, minted when missing)
        /// [default: the current folder]
        #[arg(long, value_name = "DIR")]
        repository: Option<PathBuf>,
        /// Play every CI job instead of running its script (for tests about GitLab's API and
        /// convergence, not what jobs do; also BPRUN_SIM_PLAY_JOBS=1)
        #[arg(long)]
        play_jobs: bool,
    },
    /// A Kubernetes API server simulator on loopback that kubectl, helm and kube-rs can drive;
    /// writes a kubeconfig and prints KUBECONFIG
    Kube {
        /// Loopback address to listen on (port 0 picks a free port)
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Where to write the kubeconfig (mode 0600)
        #[arg(long, value_name = "FILE", default_value = ".bprun/sim/kubeconfig")]
        kubeconfig: PathBuf,
        /// Seed what phase 3 expects of the cluster: GitLab toolbox and registry, OpenBao
        #[arg(long)]
        platform: bool,
        /// A GitLab simulator whose tokens the toolbox pod's `gitlab-rails runner` mints
        #[arg(long, value_name = "URL")]
        gitlab_url: Option<String>,
        /// That simulator's admin token (default: GITLAB_TOKEN)
        #[arg(long, value_name = "TOKEN")]
        gitlab_token: Option<String>,
        /// Loopback address svc/openbao port 8200 forwards to (with --platform)
        #[arg(long, value_name = "ADDR")]
        openbao: Option<std::net::SocketAddr>,
        /// Loopback address svc/gitlab-registry port 5000 forwards to (with --platform)
        #[arg(long, value_name = "ADDR")]
        registry: Option<std::net::SocketAddr>,
    },
    /// A GitLab REST API v4 simulator on loopback; prints GITLAB_URL and GITLAB_TOKEN
    Gitlab {
        /// Loopback address to listen on (port 0 picks a free port)
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Keep groups, projects, variables and pipelines in this folder across restarts
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
        /// An accepted admin token (repeatable); one is generated when none is given
        #[arg(long = "token", value_name = "TOKEN")]
        tokens: Vec<String>,
        /// Seconds a pipeline takes from creation to success
        #[arg(long, default_value_t = 2.0)]
        pipeline_seconds: f64,
        /// Register an online instance runner (a stand-in that polls for jobs as GitLab Runner
        /// does); without it, jobs stay pending as on a GitLab without runners
        #[arg(long)]
        runner: bool,
        /// A tag of that runner (repeatable; it also takes untagged jobs)
        #[arg(long = "runner-tag", value_name = "TAG", requires = "runner")]
        runner_tags: Vec<String>,
        /// Play every CI job instead of running its script (for tests about GitLab's API and
        /// convergence, not what jobs do; also BPRUN_SIM_PLAY_JOBS=1)
        #[arg(long)]
        play_jobs: bool,
        /// Latency added to every answer, in milliseconds
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Share (0 to 1) of API requests answered 500/502/503
        #[arg(long, default_value_t = 0.0)]
        error_rate: f64,
        /// Answer the first N API requests with 429 and Retry-After
        #[arg(long, default_value_t = 0)]
        rate_limit_burst: u32,
        /// Seconds in the Retry-After of those 429 answers
        #[arg(long, default_value_t = 1)]
        retry_after: u64,
        /// Share (0 to 1) of API requests whose connection is closed without an answer
        #[arg(long, default_value_t = 0.0)]
        reset_rate: f64,
        /// Share (0 to 1) of writes that are processed but whose answer is dropped
        #[arg(long, default_value_t = 0.0)]
        drop_answer_rate: f64,
    },
}

impl RunArgs {
    fn into_options(self) -> Result<(RunOptions, Report), Error> {
        let script = self.script.ok_or_else(|| {
            Error::usage(
                "no script given",
                Some("bprun [OPTIONS] SCRIPT [SCRIPT_ARGS...]".to_string()),
            )
        })?;
        let verbosity = if self.quiet {
            -1
        } else {
            self.verbose.min(1) as i8
        };
        Ok((
            RunOptions {
                script,
                script_args: self.script_args,
                check: self.check,
                list: self.list || self.list_slugs,
                list_slugs: self.list_slugs,
                only: self.only,
                skip: self.skip,
                tags: self.tags,
                skip_tags: self.skip_tags,
                from: self.from,
                resume: self.resume,
                json: self.json,
                diff: self.diff,
                detailed_exitcode: self.detailed_exitcode,
                verbosity,
                kube_context: self.kube_context,
            },
            if self.timings {
                Report::Timings
            } else if self.summary {
                Report::Summary
            } else {
                Report::None
            },
        ))
    }
}

/// Parses the command line, runs it, renders any error, and returns the process exit code.
pub fn main() -> i32 {
    // Before anything can print: every credential in the environment is scrubbed from output.
    bprun_clients::secret::register_environment();
    let cli = match Cli::try_parse_from(normalize_command_line(std::env::args().collect())) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::Usage.code()
            } else {
                ExitCode::Success.code()
            };
        }
    };
    match dispatch(cli) {
        Ok(code) => code.code(),
        Err(error) => {
            report(&error);
            error.exit_code().code()
        }
    }
}

/// The options of the command that runs the scripts (`bprun`, `bprun run` or `bprun
/// rehearse`), read from its clap definition so that every one of them, now and later, may also
/// come after the script path: each spelling (`--diff`, `-v`) with whether it takes a value.
fn runner_options(subcommand: Option<&str>) -> Vec<(String, bool)> {
    let root = Cli::command();
    let command = match subcommand {
        Some(name @ ("run" | "rehearse")) => root.find_subcommand(name).cloned(),
        _ => Some(root),
    };
    let mut options = Vec::new();
    // clap's own --help and --version are not the runner's: after the path they are the
    // script's (--help describes the script, see below).
    let own = |arg: &&clap::Arg| !matches!(arg.get_id().as_str(), "help" | "version");
    for arg in command
        .iter()
        .flat_map(|command| command.get_arguments())
        .filter(own)
    {
        let takes_value = arg.get_action().takes_values();
        if let Some(long) = arg.get_long() {
            options.push((format!("--{long}"), takes_value));
        }
        if let Some(short) = arg.get_short() {
            options.push((format!("-{short}"), takes_value));
            // A counted flag repeated in one word (`-vv`).
            if matches!(arg.get_action(), clap::ArgAction::Count) {
                options.push((format!("-{short}{short}"), false));
            }
        }
    }
    options
}

/// The command line as clap should see it. Runner options may come after the script path as
/// well as before it (`bprun scripts/phase3.rhai --app x --check` is a check run, never a real
/// one): they are moved before the path, and what is left after it is the script's. `bprun
/// SCRIPT --help` describes the script (its parameters and steps, as `--list` does) rather
/// than bprun. Words after `--` are the script's, whatever they look like.
fn normalize_command_line(mut words: Vec<String>) -> Vec<String> {
    let subcommand = words.get(1).map(String::as_str);
    let runs_a_script = !matches!(
        subcommand,
        Some("functions" | "defs" | "completions" | "repl" | "eval" | "sim" | "help")
    );
    let end = words
        .iter()
        .position(|word| word == "--")
        .unwrap_or(words.len());
    let Some(script) = words[..end]
        .iter()
        .skip(1)
        .position(|word| !word.starts_with('-') && word.ends_with(".rhai"))
        .map(|index| index + 1)
    else {
        return words;
    };
    if !runs_a_script {
        return words;
    }
    let options = runner_options(subcommand);
    let option = |name: &str| {
        options
            .iter()
            .find(|(spelling, _)| spelling == name)
            .map(|(_, takes_value)| *takes_value)
    };
    let mut hoisted = Vec::new();
    let mut kept = Vec::new();
    let mut index = script + 1;
    while index < end {
        let word = &words[index];
        let name = word.split('=').next().unwrap_or(word);
        if word == "--help" || word == "-h" {
            if subcommand != Some("rehearse") {
                hoisted.push("--list".to_string());
            } else {
                kept.push(word.clone());
            }
        } else if option(word) == Some(false) {
            hoisted.push(word.clone());
        } else if option(name) == Some(true) {
            hoisted.push(word.clone());
            if !word.contains('=')
                && let Some(value) = words.get(index + 1).filter(|_| index + 1 < end)
            {
                hoisted.push(value.clone());
                index += 1;
            }
        } else {
            kept.push(word.clone());
        }
        index += 1;
    }
    let rest = words.split_off(end);
    words.truncate(script + 1);
    let path = words.pop().unwrap_or_default();
    words.extend(hoisted);
    words.push(path);
    // `--` after the path: clap then reads none of the script's words as its own (a script
    // parameter `--version` is the script's, not bprun's).
    if !kept.is_empty() || !rest.is_empty() {
        words.push("--".to_string());
    }
    words.extend(kept);
    words.extend(rest);
    words
}

fn report(error: &Error) {
    let text = match error {
        Error::Reported(_) => return,
        Error::Usage { message, hint } => match hint {
            Some(hint) => format!("error: {message}\n  hint: {hint}\n"),
            None => format!("error: {message}\n"),
        },
        Error::Io { .. } => format!("error: {error}\n"),
    };
    eprint!("{}", bprun_clients::secret::scrub(&text));
}

fn dispatch(cli: Cli) -> Result<ExitCode, Error> {
    match cli.command {
        None => run(cli.run),
        Some(Command::Run(args)) => run(args),
        Some(Command::Functions { filter }) => {
            let listing = functions_listing(filter.as_deref());
            if listing.is_empty() {
                let wanted = filter.unwrap_or_default();
                let names: Vec<String> = crate::catalog::function_docs()
                    .into_iter()
                    .map(|doc| doc.name)
                    .collect();
                let hint = match crate::text::closest(&wanted, &names) {
                    Some(name) => {
                        format!("did you mean `{name}`? `bprun functions` lists them all")
                    }
                    None => "`bprun functions` lists them all".to_string(),
                };
                return Err(Error::usage(
                    format!("no native matches `{wanted}`"),
                    Some(hint),
                ));
            }
            print!("{listing}");
            Ok(ExitCode::Success)
        }
        Some(Command::Defs { dir }) => {
            write_definitions(&dir)?;
            println!("wrote Rhai definitions to {}", dir.display());
            Ok(ExitCode::Success)
        }
        Some(Command::Completions { shell }) => {
            // Generated into memory, then written: a reader that stops early (`| head`) ends
            // the output quietly instead of a panic on the broken pipe.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "bprun", &mut script);
            if shell == clap_complete::Shell::Bash {
                script = bash_step_completion(&String::from_utf8_lossy(&script)).into_bytes();
            }
            write_stdout(&script)?;
            Ok(ExitCode::Success)
        }
        Some(Command::Repl {
            check,
            load,
            rehearse: true,
        }) => crate::rehearse::repl(check, load),
        Some(Command::Eval {
            check,
            load,
            json,
            input,
        }) => crate::repl::eval(
            crate::repl::ReplOptions {
                check,
                load,
                rehearsal_copy: None,
            },
            &input,
            json,
        ),
        Some(Command::Repl { check, load, .. }) => crate::repl::run(crate::repl::ReplOptions {
            check,
            load,
            rehearsal_copy: None,
        }),
        Some(Command::Rehearse {
            state,
            no_runner,
            platform,
            run,
        }) => {
            let (options, _) = run.into_options()?;
            crate::rehearse::rehearse(state, !no_runner, platform.as_deref(), options)
        }
        Some(Command::Sim(SimCommand::Bao { listen, token })) => {
            bprun_sim::bao::run(&listen, &token)
                .map_err(|message| Error::usage(format!("bprun sim bao: {message}"), None))?;
            Ok(ExitCode::Success)
        }
        Some(Command::Sim(SimCommand::All {
            state,
            pipeline_seconds,
            platform,
            latency_ms,
            node_shared,
            repository,
            play_jobs,
        })) => crate::rehearse::sim_all(
            state,
            pipeline_seconds,
            platform == "bare",
            latency_ms,
            node_shared,
            repository,
            play_jobs,
        ),
        Some(Command::Sim(SimCommand::Kube {
            listen,
            kubeconfig,
            platform,
            gitlab_url,
            gitlab_token,
            openbao,
            registry,
        })) => {
            bprun_sim::kube::run(bprun_sim::kube::Config {
                listen,
                kubeconfig: Some(kubeconfig),
                gitlab_url,
                gitlab_token: gitlab_token.or_else(|| std::env::var("GITLAB_TOKEN").ok()),
                platform,
                openbao,
                registry,
            })
            .map_err(|message| Error::usage(format!("bprun sim kube: {message}"), None))?;
            Ok(ExitCode::Success)
        }
        Some(Command::Sim(SimCommand::Gitlab {
            listen,
            state,
            tokens,
            pipeline_seconds,
            runner,
            runner_tags,
            play_jobs,
            latency_ms,
            error_rate,
            rate_limit_burst,
            retry_after,
            reset_rate,
            drop_answer_rate,
        })) => {
            let config = bprun_sim::gitlab::Config {
                listen,
                state_dir: state,
                tokens,
                pipeline_seconds,
                runner: runner.then_some(runner_tags),
                jobs: {
                    let mut jobs = bprun_sim::gitlab::ci::jobs::Settings::from_env();
                    jobs.play |= play_jobs;
                    jobs
                },
                faults: bprun_sim::http::Faults {
                    latency_ms,
                    error_rate,
                    rate_limit_burst,
                    retry_after_s: retry_after,
                    reset_rate,
                    drop_answer_rate,
                    path_suffix: None,
                },
            };
            bprun_sim::gitlab::run(config)
                .map_err(|message| Error::usage(format!("bprun sim gitlab: {message}"), None))?;
            Ok(ExitCode::Success)
        }
    }
}

/// A report from the journal instead of a run.
enum Report {
    None,
    Timings,
    Summary,
}

fn run(args: RunArgs) -> Result<ExitCode, Error> {
    let (options, report) = args.into_options()?;
    match report {
        Report::Timings => runner::timings(&options.script, options.json),
        Report::Summary => runner::summary(&options.script, options.json),
        Report::None => runner::run(options),
    }
}

/// Bash completion of `--only`, `--skip` and `--from` offers the steps of the script on the
/// command line (their slugs, from `bprun --list-slugs SCRIPT`) instead of file names, and
/// `--tags`/`--skip-tags` its tags.
fn bash_step_completion(generated: &str) -> String {
    let files = "COMPREPLY=($(compgen -f \"${cur}\"))";
    let words = |filter: &str| {
        format!(
            "local script=\"\"; for word in \"${{COMP_WORDS[@]}}\"; do [[ \"$word\" == *.rhai ]] && script=\"$word\"; done\n                    COMPREPLY=($(compgen -W \"$(bprun --list-slugs \"$script\" 2>/dev/null | {filter})\" -- \"${{cur}}\"))"
        )
    };
    let mut out = String::new();
    let mut option: Option<&str> = None;
    for line in generated.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_suffix(')')
            && name.starts_with("--")
        {
            option = Some(match name {
                "--only" | "--skip" | "--from" => "steps",
                "--tags" | "--skip-tags" => "tags",
                _ => "other",
            });
        }
        match option {
            Some("steps") if trimmed == files => {
                out.push_str(&line.replace(files, &words("grep -v '^tag:'")));
            }
            Some("tags") if trimmed == files => {
                out.push_str(&line.replace(files, &words("sed -n 's/^tag://p'")));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Writes to stdout; a closed pipe is not an error (the reader had enough).
fn write_stdout(bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("write to", "standard output", error))
        }
        _ => Ok(()),
    }
}

/// Every native whose name contains `filter` with its signature and first sentence; a filter
/// that names a native exactly shows its whole documentation.
fn functions_listing(filter: Option<&str>) -> String {
    let docs = crate::catalog::function_docs();
    let exact = filter.is_some_and(|wanted| docs.iter().any(|doc| doc.name == wanted));
    let mut out = String::new();
    for doc in &docs {
        let selected = match filter {
            Some(wanted) if exact => doc.name == wanted,
            Some(wanted) => doc.name.contains(wanted),
            None => true,
        };
        if !selected {
            continue;
        }
        out.push_str(&doc.signature);
        out.push('\n');
        let text = if exact {
            doc.full_text()
        } else {
            doc.summary()
        };
        for line in text.lines() {
            out.push_str(if line.is_empty() { "" } else { "    " });
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn write_definitions(dir: &std::path::Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|error| Error::io("create", dir, error))?;
    crate::catalog::documentation_engine()
        .definitions()
        .with_headers(true)
        .include_standard_packages(false)
        .write_to_dir(dir)
        .map_err(|error| Error::io("write definitions into", dir, error))?;
    // Rhai's writer lists the runner's internal hook too, and writes `-> ()` for natives that
    // return nothing: drop the one, shorten the other.
    let entries = std::fs::read_dir(dir).map_err(|error| Error::io("read", dir, error))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let cleaned = clean_definitions(&text);
        if cleaned != text {
            std::fs::write(&path, cleaned).map_err(|error| Error::io("write", &path, error))?;
        }
    }
    Ok(())
}

/// Definitions without internal functions and with `fn f() -> ();` as `fn f();`.
fn clean_definitions(text: &str) -> String {
    let internal = format!("fn {}(", crate::engine::RUN_STEPS_NATIVE);
    let mut out = String::new();
    let mut skip_blank = false;
    for line in text.lines() {
        if line.starts_with(&internal) {
            skip_blank = true;
            continue;
        }
        if skip_blank && line.trim().is_empty() {
            skip_blank = false;
            continue;
        }
        skip_blank = false;
        let line = line.replace(") -> ();", ");");
        // Parameter types as Rhai's own definition files spell them (String, Map, Array).
        let line = if line.starts_with("fn ") || line.starts_with("op ") {
            let (head, tail) = line.split_once(')').unwrap_or((&line, ""));
            let head = head
                .split(", ")
                .map(|part| {
                    let (before, ty) = part.rsplit_once([' ', '(']).unwrap_or(("", part));
                    let separator = &part[before.len()..part.len() - ty.len()];
                    let ty = match ty {
                        "string" => "String",
                        "map" => "Map",
                        "array" => "Array",
                        "Fn" => "FnPtr",
                        other => other,
                    };
                    format!("{before}{separator}{ty}")
                })
                .collect::<Vec<_>>()
                .join(", ");
            format!("{head}){tail}")
        } else {
            line
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalize_command_line;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn runner_options_after_the_script_are_moved_before_it() {
        assert_eq!(
            normalize_command_line(words("bprun s.rhai --app x --check --only=A --skip B -q")),
            words("bprun --check --only=A --skip B -q s.rhai -- --app x")
        );
        assert_eq!(
            normalize_command_line(words("bprun rehearse a.rhai b.rhai --json --app x")),
            words("bprun rehearse --json a.rhai -- b.rhai --app x")
        );
        // After `--` everything is the script's.
        assert_eq!(
            normalize_command_line(words("bprun s.rhai --app x -- --check")),
            words("bprun s.rhai -- --app x -- --check")
        );
        // A script's own `--version` is not bprun's.
        assert_eq!(
            normalize_command_line(words("bprun s.rhai --version v2")),
            words("bprun s.rhai -- --version v2")
        );
    }

    #[test]
    fn every_runner_option_may_come_after_the_script_path() {
        // One rule for all of them, read from the definition: the same run either way.
        for subcommand in [None, Some("run"), Some("rehearse")] {
            let prefix = match subcommand {
                Some(name) => format!("bprun {name}"),
                None => "bprun".to_string(),
            };
            let options = super::runner_options(subcommand);
            assert!(options.iter().any(|(name, _)| name == "--diff"));
            for (option, takes_value) in options {
                let given = if takes_value {
                    format!("{option} V")
                } else {
                    option.clone()
                };
                assert_eq!(
                    normalize_command_line(words(&format!("{prefix} s.rhai --app x {given}"))),
                    words(&format!("{prefix} {given} s.rhai -- --app x")),
                    "{prefix}: {option}"
                );
            }
        }
        let rehearse = super::runner_options(Some("rehearse"));
        for option in [
            "--state",
            "--platform",
            "--no-runner",
            "--check",
            "--json",
            "-vv",
        ] {
            assert!(rehearse.iter().any(|(name, _)| name == option), "{option}");
        }
    }

    #[test]
    fn help_after_a_script_describes_the_script() {
        assert_eq!(
            normalize_command_line(words("bprun scripts/phase3.rhai --help")),
            words("bprun --list scripts/phase3.rhai")
        );
        assert_eq!(
            normalize_command_line(words("bprun run s.rhai --app x -h")),
            words("bprun run --list s.rhai -- --app x")
        );
        // Elsewhere --help is bprun's own.
        assert_eq!(
            normalize_command_line(words("bprun --help")),
            words("bprun --help")
        );
        assert_eq!(
            normalize_command_line(words("bprun repl --load s.rhai --help")),
            words("bprun repl --load s.rhai --help")
        );
    }
}
