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
        let repo = self.path(full_path);
        let parent = self.head(full_path, branch);
        let index = repo.join(format!("bprun-index-{}", std::process::id()));
        let with_index = |args: &[&str]| {
            let mut command = git(&repo);
            command.env("GIT_INDEX_FILE", &index).args(args);
            command
        };
        let result = (|| {
            if let Some(parent) = &parent {
                run(with_index(&["read-tree", parent]), "git read-tree")?;
            }
            let mut hash = git(&repo);
            hash.args(["hash-object", "-w", "--stdin"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = hash
                .spawn()
                .map_err(|error| format!("git hash-object: {error}"))?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin
                    .write_all(content.as_bytes())
                    .map_err(|error| format!("git hash-object: {error}"))?;
            }
            let output = child
                .wait_with_output()
                .map_err(|error| format!("git hash-object: {error}"))?;
            let blob = String::from_utf8_lossy(&output.stdout).trim().to_string();
            run(
                with_index(&[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("100644,{blob},{file}"),
                ]),
                "git update-index",
            )?;
            let tree = run(with_index(&["write-tree"]), "git write-tree")?;
            let mut commit = git(&repo);
            commit.args(["commit-tree", &tree, "-m", message]);
            if let Some(parent) = &parent {
                commit.args(["-p", parent]);
            }
            let commit = run(commit, "git commit-tree")?;
            let mut update = git(&repo);
            update.args(["update-ref", &format!("refs/heads/{branch}"), &commit]);
            if let Some(parent) = &parent {
                update.arg(parent);
            }
            run(update, "git update-ref")?;
            Ok(commit)
        })();
        let _ = std::fs::remove_file(&index);
        result
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
