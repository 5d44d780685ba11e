//! Real bare git repositories behind the GitLab simulator: created per project, served over
//! smart HTTP by `git http-backend`, and written by the repository files API through git's own
//! plumbing, so clone, fetch, push and the API all see the same history.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::http::{SimRequest, SimResponse};

pub struct Repos {
    root: PathBuf,
}

/// One change to a tree, as the commits API's actions come down to.
#[derive(Debug, Clone)]
pub enum TreeChange {
    Write {
        path: String,
        content: Vec<u8>,
        executable: bool,
    },
    Remove {
        path: String,
    },
}

/// What `git log` says of a commit.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitInfo {
    pub id: String,
    pub parent_ids: Vec<String>,
    pub author_name: String,
    pub author_email: String,
    pub authored_date: String,
    pub committer_name: String,
    pub committer_email: String,
    pub committed_date: String,
    pub message: String,
}

/// Fields separated by US (0x1f), records ended by RS (0x1e): neither appears in a message.
const LOG_FORMAT: &str = "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1f%B%x1e";

impl CommitInfo {
    fn parse(record: &str) -> Option<CommitInfo> {
        let record = record.trim_start_matches('\n');
        if record.is_empty() {
            return None;
        }
        let fields: Vec<&str> = record.splitn(9, '\u{1f}').collect();
        let [id, parents, an, ae, ad, cn, ce, cd, message] = fields.as_slice() else {
            return None;
        };
        Some(CommitInfo {
            id: id.to_string(),
            parent_ids: parents.split_whitespace().map(str::to_string).collect(),
            author_name: an.to_string(),
            author_email: ae.to_string(),
            authored_date: ad.to_string(),
            committer_name: cn.to_string(),
            committer_email: ce.to_string(),
            committed_date: cd.to_string(),
            message: message.to_string(),
        })
    }

    /// The first line of the message, as GitLab's `title`.
    pub fn title(&self) -> &str {
        self.message.lines().next().unwrap_or("")
    }
}

/// `git` found on PATH once, as an absolute path: a command whose PATH is replaced (as the CGI
/// environment of `http-backend` is) and whose program is looked up by name cannot be started
/// with `posix_spawn`, and forking this large, many-threaded process for every smart-HTTP
/// request cost more CPU than the request itself.
fn git_program() -> &'static Path {
    static PROGRAM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(|| {
        std::env::var_os("PATH")
            .and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join("git"))
                    .find(|path| path.is_file())
            })
            .unwrap_or_else(|| PathBuf::from("git"))
    })
}

fn git(repo: &Path) -> Command {
    let mut command = Command::new(git_program());
    command
        .arg("--git-dir")
        .arg(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Administrator")
        .env("GIT_AUTHOR_EMAIL", "admin@example.com")
        .env("GIT_COMMITTER_NAME", "Administrator")
        .env("GIT_COMMITTER_EMAIL", "admin@example.com")
        .stdin(Stdio::null());
    command
}

fn run(mut command: Command, what: &str) -> Result<String, String> {
    let output = command
        .output()
        .map_err(|error| format!("{what}: cannot run git: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Runs a git command with `input` on its standard input; its standard output, trimmed.
fn run_with_input(command: &mut Command, input: &[u8], what: &str) -> Result<String, String> {
    let output = run_bytes(command, input).map_err(|error| format!("{what}: {error}"))?;
    Ok(String::from_utf8_lossy(&output).trim().to_string())
}

/// Runs a git command with `input` on its standard input; its standard output as it is.
fn run_bytes(command: &mut Command, input: &[u8]) -> Result<Vec<u8>, String> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot run git: {error}"))?;
    // Written from another thread: git may fill its output pipe before it has read all of
    // its input (`cat-file --batch`), and both would wait for ever.
    let writer = child.stdin.take().map(|mut stdin| {
        let input = input.to_vec();
        std::thread::spawn(move || stdin.write_all(&input))
    });
    let output = child
        .wait_with_output()
        .map_err(|error| error.to_string())?;
    if let Some(writer) = writer {
        writer
            .join()
            .map_err(|_| "the writer thread panicked".to_string())?
            .map_err(|error| error.to_string())?;
    }
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
    }
    Ok(output.stdout)
}

impl Repos {
    /// The repositories' folder. The simulator keeps repositories with the real git, so a
    /// missing git is reported here, at start-up, rather than as a 500 on the first project.
    pub fn new(root: PathBuf) -> Result<Repos, String> {
        let found = Command::new("git")
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !found {
            return Err("the GitLab simulator needs git on PATH (it keeps the projects' repositories with it): install it (apt-get install git, dnf install git or brew install git) and start again".to_string());
        }
        std::fs::create_dir_all(&root)
            .map_err(|error| format!("cannot create {}: {error}", root.display()))?;
        Ok(Repos { root })
    }

    pub fn path(&self, full_path: &str) -> PathBuf {
        self.root.join(format!("{full_path}.git"))
    }

    pub fn create(&self, full_path: &str) -> Result<(), String> {
        let path = self.path(full_path);
        if path.exists() {
            return Ok(());
        }
        let mut init = Command::new(git_program());
        init.args(["init", "--quiet", "--bare", "--initial-branch=main"])
            .arg(&path);
        run(init, "git init")?;
        let mut config = git(&path);
        config.args(["config", "http.receivepack", "true"]);
        run(config, "git config")?;
        Ok(())
    }

    pub fn remove(&self, full_path: &str) {
        let _ = std::fs::remove_dir_all(self.path(full_path));
    }

    pub fn branch_exists(&self, full_path: &str, branch: &str) -> bool {
        self.head(full_path, branch).is_some()
    }

    pub fn branches(&self, full_path: &str) -> Vec<String> {
        let mut command = git(&self.path(full_path));
        command.args(["for-each-ref", "--format=%(refname:short)", "refs/heads"]);
        run(command, "git for-each-ref")
            .map(|out| out.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// The commit a branch points at.
    pub fn head(&self, full_path: &str, branch: &str) -> Option<String> {
        let mut command = git(&self.path(full_path));
        command.args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ]);
        run(command, "git rev-parse").ok().filter(|s| !s.is_empty())
    }

    /// A file's content at a ref, or `None` when the ref or file does not exist.
    pub fn read_file(&self, full_path: &str, reference: &str, file: &str) -> Option<String> {
        let mut command = git(&self.path(full_path));
        command.args(["cat-file", "blob", &format!("{reference}:{file}")]);
        let output = command.output().ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Creates `branch` at `commit` (the files API's `start_branch`).
    pub fn create_branch(&self, full_path: &str, branch: &str, commit: &str) -> Result<(), String> {
        let mut command = git(&self.path(full_path));
        command.args(["update-ref", &format!("refs/heads/{branch}"), commit]);
        run(command, "git update-ref").map(|_| ())
    }

    /// Every file of the tree at `reference` (for `rules:exists`).
    pub fn list_files(&self, full_path: &str, reference: &str) -> Vec<String> {
        self.lines(full_path, &["ls-tree", "-r", "--name-only", reference])
    }

    /// The files a push changed between two commits (for `rules:changes`).
    pub fn changed_files(&self, full_path: &str, before: &str, after: &str) -> Vec<String> {
        self.lines(full_path, &["diff", "--name-only", before, after])
    }

    /// The lines a git command prints in the repository, or none when it fails.
    fn lines(&self, full_path: &str, args: &[&str]) -> Vec<String> {
        let mut command = git(&self.path(full_path));
        command.args(args);
        match command.output() {
            Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Commits one file to a branch (created when missing); returns the new commit.
    pub fn commit_file(
        &self,
        full_path: &str,
        branch: &str,
        file: &str,
        content: &str,
        message: &str,
    ) -> Result<String, String> {
        let parent = self.head(full_path, branch);
        let executable = parent
            .as_deref()
            .and_then(|parent| self.file_entry(full_path, parent, file))
            .is_some_and(|(executable, _)| executable);
        let change = TreeChange::Write {
            path: file.to_string(),
            content: content.as_bytes().to_vec(),
            executable,
        };
        let parent = parent.as_deref();
        self.commit_changes(full_path, branch, parent, parent, &[change], message, None)
    }

    /// Applies `changes` on top of `parent` (none: an empty repository) in one commit and moves
    /// `branch` there, compare-and-swap against `old_head` (none: the branch must not exist).
    /// Returns the new commit. The changes were checked by the caller against the parent's
    /// tree; a git failure is an `Err`.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_changes(
        &self,
        full_path: &str,
        branch: &str,
        old_head: Option<&str>,
        parent: Option<&str>,
        changes: &[TreeChange],
        message: &str,
        author: Option<(&str, &str)>,
    ) -> Result<String, String> {
        let repo = self.path(full_path);
        // One index per commit: two API commits may run at once.
        static NEXT_INDEX: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let index = repo.join(format!(
            "bprun-index-{}-{}",
            std::process::id(),
            NEXT_INDEX.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let with_index = |args: &[&str]| {
            let mut command = git(&repo);
            command.env("GIT_INDEX_FILE", &index).args(args);
            command
        };
        let result = (|| {
            if let Some(parent) = parent {
                run(with_index(&["read-tree", parent]), "git read-tree")?;
            }
            // One `--index-info` call for every change: a mode of 0 removes a path (a bare
            // repository has no work tree, which `--force-remove` would want).
            let mut index_info = String::new();
            for change in changes {
                match change {
                    TreeChange::Write {
                        path,
                        content,
                        executable,
                    } => {
                        let blob = run_with_input(
                            git(&repo).args(["hash-object", "-w", "--stdin"]),
                            content,
                            "git hash-object",
                        )?;
                        let mode = if *executable { "100755" } else { "100644" };
                        index_info.push_str(&format!("{mode} {blob}\t{path}\n"));
                    }
                    TreeChange::Remove { path } => {
                        index_info.push_str(&format!("0 {}\t{path}\n", "0".repeat(40)));
                    }
                }
            }
            run_with_input(
                &mut with_index(&["update-index", "--index-info"]),
                index_info.as_bytes(),
                "git update-index",
            )?;
            let tree = run(with_index(&["write-tree"]), "git write-tree")?;
            let mut commit = git(&repo);
            commit.args(["commit-tree", &tree, "-m", message]);
            if let Some((name, email)) = author {
                commit
                    .env("GIT_AUTHOR_NAME", name)
                    .env("GIT_AUTHOR_EMAIL", email);
            }
            if let Some(parent) = parent {
                commit.args(["-p", parent]);
            }
            let commit = run(commit, "git commit-tree")?;
            let mut update = git(&repo);
            update.args(["update-ref", &format!("refs/heads/{branch}"), &commit]);
            // Refuses when the branch moved since it was read (a push in between).
            update.arg(old_head.unwrap_or("0000000000000000000000000000000000000000"));
            run(update, "git update-ref")?;
            Ok(commit)
        })();
        let _ = std::fs::remove_file(&index);
        result
    }

    /// A file's mode and content at a commit (`None`: no such file).
    pub fn file_entry(&self, full_path: &str, commit: &str, file: &str) -> Option<(bool, Vec<u8>)> {
        let listing = self.lines(full_path, &["ls-tree", commit, "--", file]);
        let line = listing.first()?;
        let (meta, _) = line.split_once('\t')?;
        let mut parts = meta.split_whitespace();
        let mode = parts.next()?;
        if parts.next()? != "blob" {
            return None;
        }
        let mut command = git(&self.path(full_path));
        command.args(["cat-file", "blob", &format!("{commit}:{file}")]);
        let output = command.output().ok()?;
        output
            .status
            .success()
            .then(|| (mode == "100755", output.stdout))
    }

    /// Every file of the tree at `commit` with its mode and content: one `ls-tree -r` and one
    /// `cat-file --batch`, not two processes per file.
    pub fn tree_files(
        &self,
        full_path: &str,
        commit: &str,
    ) -> std::collections::BTreeMap<String, (bool, Vec<u8>)> {
        let mut files = std::collections::BTreeMap::new();
        // `mode type sha<TAB>path`, submodules (`commit`) skipped.
        let entries: Vec<(bool, String, String)> = self
            .lines(full_path, &["ls-tree", "-r", commit])
            .iter()
            .filter_map(|line| {
                let (meta, path) = line.split_once('\t')?;
                let mut parts = meta.split_whitespace();
                let (mode, kind, sha) = (parts.next()?, parts.next()?, parts.next()?);
                (kind == "blob").then(|| (mode == "100755", sha.to_string(), path.to_string()))
            })
            .collect();
        if entries.is_empty() {
            return files;
        }
        let input: String = entries
            .iter()
            .map(|(_, sha, _)| format!("{sha}\n"))
            .collect();
        let mut command = git(&self.path(full_path));
        command.args(["cat-file", "--batch"]);
        let Ok(output) = run_bytes(&mut command, input.as_bytes()) else {
            return files;
        };
        // Each answer: `sha blob size\n`, the content, `\n`.
        let mut rest = output.as_slice();
        for (executable, _, path) in entries {
            let Some(end) = rest.iter().position(|b| *b == b'\n') else {
                break;
            };
            let header = String::from_utf8_lossy(&rest[..end]).to_string();
            let Some(size) = header
                .split_whitespace()
                .nth(2)
                .and_then(|n| n.parse::<usize>().ok())
            else {
                break;
            };
            let start = end + 1;
            if rest.len() < start + size + 1 {
                break;
            }
            files.insert(path, (executable, rest[start..start + size].to_vec()));
            rest = &rest[start + size + 1..];
        }
        files
    }

    /// The commit a revision (sha, abbreviated sha, branch) names.
    pub fn resolve(&self, full_path: &str, revision: &str) -> Option<String> {
        if revision.starts_with('-') {
            return None;
        }
        let mut command = git(&self.path(full_path));
        command.args([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{revision}^{{commit}}"),
        ]);
        run(command, "git rev-parse").ok().filter(|s| !s.is_empty())
    }

    /// Commits reachable from `revisions` (`--all` for every branch), newest first as `git log`
    /// lists them, optionally only those touching `path` or within `since`/`until`.
    pub fn log(
        &self,
        full_path: &str,
        revisions: &[&str],
        path: Option<&str>,
        since: Option<&str>,
        until: Option<&str>,
    ) -> Vec<CommitInfo> {
        let since = since.map(|date| format!("--since={date}"));
        let until = until.map(|date| format!("--until={date}"));
        let mut args = vec!["log", LOG_FORMAT];
        args.extend(since.as_deref());
        args.extend(until.as_deref());
        args.extend(revisions);
        args.push("--");
        args.extend(path);
        self.commits(full_path, &args)
    }

    /// One commit's details and its line statistics against its first parent.
    pub fn commit_info(&self, full_path: &str, commit: &str) -> Option<(CommitInfo, (u64, u64))> {
        let info = self
            .commits(full_path, &["log", LOG_FORMAT, "--max-count=1", commit])
            .into_iter()
            .next()?;
        let mut additions = 0;
        let mut deletions = 0;
        for line in self.lines(full_path, &["show", "--numstat", "--format=", commit]) {
            let mut parts = line.split_whitespace();
            additions += parts
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            deletions += parts
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        Some((info, (additions, deletions)))
    }

    fn commits(&self, full_path: &str, args: &[&str]) -> Vec<CommitInfo> {
        let mut command = git(&self.path(full_path));
        command.args(args);
        let Ok(output) = command.output() else {
            return Vec::new();
        };
        if !output.status.success() {
            return Vec::new();
        }
        String::from_utf8_lossy(&output.stdout)
            .split('\u{1e}')
            .filter_map(CommitInfo::parse)
            .collect()
    }

    /// Points HEAD at `branch` (the project's default branch).
    pub fn set_head(&self, full_path: &str, branch: &str) {
        let mut command = git(&self.path(full_path));
        command.args(["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")]);
        let _ = command.output();
    }

    /// Serves git's smart HTTP protocol for `path_info` (`/group/project.git/info/refs`, ...)
    /// through `git http-backend` (CGI).
    pub fn http_backend(&self, request: &SimRequest, path_info: &str, user: &str) -> SimResponse {
        let query: String = request
            .query
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let mut command = Command::new(git_program());
        command
            .arg("http-backend")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GIT_PROJECT_ROOT", &self.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("PATH_INFO", path_info)
            .env("REQUEST_METHOD", &request.method)
            .env("QUERY_STRING", query)
            .env("REMOTE_USER", user)
            .env("REMOTE_ADDR", "127.0.0.1")
            .env("CONTENT_TYPE", request.header("content-type").unwrap_or(""))
            .env("CONTENT_LENGTH", request.body.len().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(encoding) = request.header("content-encoding") {
            command.env("HTTP_CONTENT_ENCODING", encoding);
        }
        if let Some(protocol) = request.header("git-protocol") {
            command.env("GIT_PROTOCOL", protocol);
        }
        let Ok(mut child) = command.spawn() else {
            return SimResponse::text(500, "git http-backend could not start\n");
        };
        // A GET has no body: its stdin is closed at once, with no writer thread.
        let body = request.body.to_vec();
        let writer = child
            .stdin
            .take()
            .filter(|_| !body.is_empty())
            .map(|mut stdin| std::thread::spawn(move || stdin.write_all(&body)));
        let output = child.wait_with_output();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        let Ok(output) = output else {
            return SimResponse::text(500, "git http-backend failed\n");
        };
        parse_cgi(&output.stdout)
    }
}

/// A CGI answer: headers (with an optional `Status:`), a blank line, the body.
fn parse_cgi(raw: &[u8]) -> SimResponse {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, gap)) = split else {
        return SimResponse::text(500, "git http-backend gave no headers\n");
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut response = SimResponse {
        body: raw[end + gap..].to_vec(),
        ..SimResponse::empty(200)
    };
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            response.status = value
                .split_whitespace()
                .next()
                .and_then(|code| code.parse().ok())
                .unwrap_or(500);
        } else {
            response
                .headers
                .push((name.trim().to_string(), value.to_string()));
        }
    }
    response
}
