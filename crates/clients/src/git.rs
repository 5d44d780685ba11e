//! Working trees with git2 (libgit2). Git over HTTP(S) goes through a smart-HTTP transport built
//! on reqwest (rustls), so bprun keeps one TLS stack, takes the platform CA file, and sends the
//! PAT as basic auth without writing it into any remote URL or config.

use std::cell::RefCell;
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream, Transport};

use crate::error::{ClientError, Remedy};
use crate::secret::Secret;

/// Credentials and TLS settings for the git operations of the current thread.
#[derive(Clone, Default)]
pub struct GitAuth {
    pub token: Option<Secret>,
    pub ca_file: Option<PathBuf>,
}

thread_local! {
    static AUTH: RefCell<GitAuth> = RefCell::new(GitAuth::default());
    /// Set when this thread's last push request failed in a way that says nothing about whether
    /// the remote took it (5xx, 429, a broken connection, no answer): only then is a push read
    /// back and retried.
    static PUSH_AMBIGUOUS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The HTTP status of this thread's last refused git request: libgit2 passes a transport's
    /// error on as text only, and the status decides the error's kind.
    static REFUSED_STATUS: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// How long one git HTTP request may take (a large clone included).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(300);

fn register_transport() -> Result<(), ClientError> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            for scheme in ["http", "https"] {
                // SAFETY: called once per process (OnceLock), before any git2 network operation,
                // as git2::transport::register requires.
                unsafe {
                    git2::transport::register(scheme, |remote| {
                        Transport::smart(remote, true, ReqwestTransport)
                    })
                }
                .map_err(|error| error.to_string())?;
            }
            Ok(())
        })
        .clone()
        .map_err(|error| {
            ClientError::new(format!("cannot register the git HTTP transport: {error}"))
        })
}

struct ReqwestTransport;

impl SmartSubtransport for ReqwestTransport {
    fn action(
        &self,
        url: &str,
        action: Service,
    ) -> Result<Box<dyn SmartSubtransportStream>, git2::Error> {
        let auth = AUTH.with(|auth| auth.borrow().clone());
        Ok(Box::new(HttpStream {
            url: url.trim_end_matches('/').to_string(),
            service: action,
            auth,
            request: Vec::new(),
            response: None,
        }))
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

/// Attempts for a read over smart HTTP (the first included), as for GitLab's API.
const GIT_READ_ATTEMPTS: u32 = 6;

/// Attempts for a push (the first included); each retry follows a read-back of the remote ref.
const GIT_PUSH_ATTEMPTS: u32 = 4;

/// The longest wait between two attempts, `Retry-After` included.
const GIT_MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait before retry number `attempt + 1`: exponential from 200 ms (or
/// BPRUN_GITLAB_BACKOFF_MS, for tests with injected faults), with jitter.
fn git_backoff(attempt: u32) -> Duration {
    let base = std::env::var("BPRUN_GITLAB_BACKOFF_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_millis(200));
    base.saturating_mul(1 << attempt.min(10))
        .min(GIT_MAX_BACKOFF)
        .mul_f64(0.5 + fastrand::f64() / 2.0)
}

/// One HTTP client per CA file for the whole process: building one loads the system CA store
/// (about 150 files), and a shared client keeps its connections alive between requests.
fn shared_client(ca_file: Option<&Path>) -> std::io::Result<reqwest::Client> {
    static CLIENTS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<Option<PathBuf>, reqwest::Client>>,
    > = std::sync::OnceLock::new();
    let clients = CLIENTS.get_or_init(Default::default);
    let key = ca_file.map(Path::to_path_buf);
    if let Some(client) = clients
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&key)
    {
        return Ok(client.clone());
    }
    let mut builder = super::runtime::http_client_builder()
        .timeout(GIT_TIMEOUT)
        .connect_timeout(Duration::from_secs(10));
    if let Some(ca) = ca_file {
        let pem = std::fs::read(ca)?;
        let certificate = reqwest::Certificate::from_pem(&pem).map_err(std::io::Error::other)?;
        builder = builder.add_root_certificate(certificate);
    }
    let client = builder.build().map_err(std::io::Error::other)?;
    clients
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(key, client.clone());
    Ok(client)
}

/// Pushes (receive-pack) one process keeps in flight at most, as the GitLab client bounds its
/// writes: a script may provision many projects at once, and each push can start a pipeline.
fn push_permits() -> std::sync::Arc<tokio::sync::Semaphore> {
    static PUSHES: OnceLock<std::sync::Arc<tokio::sync::Semaphore>> = OnceLock::new();
    PUSHES
        .get_or_init(|| {
            std::sync::Arc::new(tokio::sync::Semaphore::new(
                crate::net::MAX_CONCURRENT_WRITES,
            ))
        })
        .clone()
}

struct HttpStream {
    url: String,
    service: Service,
    auth: GitAuth,
    request: Vec<u8>,
    response: Option<Cursor<Vec<u8>>>,
}

impl HttpStream {
    fn perform(&mut self) -> std::io::Result<Vec<u8>> {
        let (method, path, content_type) = match self.service {
            Service::UploadPackLs => ("GET", "/info/refs?service=git-upload-pack", None),
            Service::ReceivePackLs => ("GET", "/info/refs?service=git-receive-pack", None),
            Service::UploadPack => (
                "POST",
                "/git-upload-pack",
                Some("application/x-git-upload-pack-request"),
            ),
            Service::ReceivePack => (
                "POST",
                "/git-receive-pack",
                Some("application/x-git-receive-pack-request"),
            ),
        };
        let url = format!("{}{path}", self.url);
        let client = shared_client(self.auth.ca_file.as_deref())?;
        let body = std::mem::take(&mut self.request);
        let shown = url.split('?').next().unwrap_or(&url).to_string();
        // Reads (the ref advertisements and upload-pack, which only sends objects) are retried
        // on 429, 5xx and broken connections. A push (receive-pack) is sent once here:
        // `commit_push` reads the remote ref back before it sends it again.
        let retriable = !matches!(self.service, Service::ReceivePack);
        let attempts = if retriable { GIT_READ_ATTEMPTS } else { 1 };
        let mut result = Err(std::io::Error::other("no attempt made"));
        for attempt in 0..attempts {
            let mut request = if method == "GET" {
                client.get(&url)
            } else {
                client.post(&url).body(body.clone())
            };
            if let Some(content_type) = content_type {
                request = request.header("Content-Type", content_type);
            }
            if let Some(token) = &self.auth.token {
                request = request.basic_auth("oauth2", Some(token.reveal()));
            }
            let pushes = matches!(self.service, Service::ReceivePack).then(push_permits);
            let answer = super::runtime::runtime().block_on(async move {
                // The semaphore is never closed: a permit always comes.
                let _permit = match pushes {
                    Some(pushes) => pushes.acquire_owned().await.ok(),
                    None => None,
                };
                let response = request.send().await?;
                let status = response.status().as_u16();
                let retry_after = super::net::retry_after(response.headers());
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, retry_after, body.to_vec()))
            });
            let (transient, retry_after) = match &answer {
                Ok((status, retry_after, _)) => {
                    ((500..=599).contains(status) || *status == 429, *retry_after)
                }
                Err(_) => (true, None),
            };
            if !retriable {
                PUSH_AMBIGUOUS.with(|ambiguous| ambiguous.set(transient));
            }
            result = Ok(answer.map(|(status, _, body)| (status, body)));
            if !transient || attempt + 1 == attempts {
                break;
            }
            std::thread::sleep(
                retry_after
                    .unwrap_or_else(|| git_backoff(attempt))
                    .min(GIT_MAX_BACKOFF),
            );
        }
        let result = result?;
        if let Ok((status, _)) = &result
            && *status != 200
        {
            REFUSED_STATUS.with(|refused| refused.set(Some(*status)));
        }
        match result {
            Ok((200, body)) => Ok(body),
            Ok((401, _)) => Err(std::io::Error::other(format!(
                "{method} {shown} -> 401: authentication failed (is the PAT valid?)"
            ))),
            Ok((status, body)) => Err(std::io::Error::other(format!(
                "{method} {shown} -> {status}: {}",
                String::from_utf8_lossy(&body)
                    .trim()
                    .chars()
                    .take(200)
                    .collect::<String>()
            ))),
            Err(error) => Err(std::io::Error::other(format!(
                "{method} {shown} failed: {}",
                super::error_chain(&error)
            ))),
        }
    }
}

impl Read for HttpStream {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        if self.response.is_none() {
            let body = self.perform()?;
            self.response = Some(Cursor::new(body));
        }
        self.response
            .as_mut()
            .map(|cursor| cursor.read(buffer))
            .unwrap_or(Ok(0))
    }
}

impl Write for HttpStream {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.request.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `operation` with `auth` as this thread's git credentials.
fn with_auth<T>(
    auth: &GitAuth,
    operation: impl FnOnce() -> Result<T, ClientError>,
) -> Result<T, ClientError> {
    register_transport()?;
    AUTH.with(|current| *current.borrow_mut() = auth.clone());
    REFUSED_STATUS.with(|refused| refused.set(None));
    let result = operation();
    AUTH.with(|current| *current.borrow_mut() = GitAuth::default());
    result
}

/// A git operation's error, with the remote's status when it refused the request.
fn git_error(what: &str, dir: &str, error: git2::Error) -> ClientError {
    let error = ClientError::new(format!(
        "git: {what} in {dir}: {}",
        crate::secret::scrub(error.message())
    ));
    match REFUSED_STATUS.with(|refused| refused.take()) {
        Some(401) => error
            .with_status(401)
            .with_hint("the PAT is missing or invalid: set GITLAB_TOKEN to a valid one")
            .with_remedy(Remedy::Login),
        Some(status) => error.with_status(status),
        None => error,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    Cloned,
    Pulled,
    UpToDate,
}

/// The branch working trees follow.
pub const BRANCH: &str = "main";

/// Clones `url` into `dir`, or fast-forwards `dir`'s `main` to the remote's.
pub fn clone_or_pull(
    url: &str,
    dir: &Path,
    shown: &str,
    auth: &GitAuth,
) -> Result<SyncOutcome, ClientError> {
    with_auth(auth, || {
        // A clone killed half-way leaves a `.git` git cannot open, or one without its `origin`
        // (killed right after `git init`): clone again.
        // Opened once (each open resolves paths and reads git's config files again).
        let existing = if dir.join(".git").exists() {
            match git2::Repository::open(dir) {
                Ok(repo) if repo.find_remote("origin").is_ok() => Some(repo),
                _ => {
                    std::fs::remove_dir_all(dir).map_err(|e| {
                        ClientError::new(format!("cannot remove the unfinished clone {shown}: {e}"))
                    })?;
                    None
                }
            }
        } else {
            None
        };
        let Some(repo) = existing else {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    ClientError::new(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            git2::Repository::clone(url, dir)
                .map_err(|error| git_error(&format!("clone of {url}"), shown, error))?;
            return Ok(SyncOutcome::Cloned);
        };
        let _lock = lock_tree(dir, shown)?;
        let mut remote = repo
            .find_remote("origin")
            .map_err(|error| git_error("find remote origin", shown, error))?;
        // GitLab moved (a new address): follow it rather than fetch from the old one.
        if remote.url().ok() != Some(url) {
            repo.remote_set_url("origin", url)
                .map_err(|error| git_error("set the remote origin", shown, error))?;
            remote = repo
                .find_remote("origin")
                .map_err(|error| git_error("find remote origin", shown, error))?;
        }
        // No FETCH_HEAD: nothing reads it, and writing it made every re-run write a file.
        let mut fetch_options = git2::FetchOptions::new();
        fetch_options.update_fetchhead(false);
        remote
            .fetch(&[BRANCH], Some(&mut fetch_options), None)
            .map_err(|error| git_error(&format!("fetch from {url}"), shown, error))?;
        let Ok(fetched) = repo.find_reference(&format!("refs/remotes/origin/{BRANCH}")) else {
            return Ok(SyncOutcome::UpToDate);
        };
        let theirs = fetched
            .peel_to_commit()
            .map_err(|error| git_error("read origin/main", shown, error))?;
        let ours = repo.head().ok().and_then(|head| head.peel_to_commit().ok());
        match ours {
            Some(ours) if ours.id() == theirs.id() => Ok(SyncOutcome::UpToDate),
            Some(ours) if repo.graph_descendant_of(ours.id(), theirs.id()).unwrap_or(false) => Ok(SyncOutcome::UpToDate),
            Some(ours) if !repo.graph_descendant_of(theirs.id(), ours.id()).unwrap_or(false) => Err(ClientError::new(format!(
                "git: the working tree {shown} has diverged from {url} (local {}, remote {})",
                &ours.id().to_string()[..8],
                &theirs.id().to_string()[..8]
            ))
            .with_hint("re-run with --reset-clones to wipe apps-local/ and clone again (local commits there are lost)")),
            _ => {
                repo.reference(&format!("refs/heads/{BRANCH}"), theirs.id(), true, "bprun: fast-forward")
                    .map_err(|error| git_error("fast-forward", shown, error))?;
                repo.set_head(&format!("refs/heads/{BRANCH}")).map_err(|error| git_error("set HEAD", shown, error))?;
                repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force()))
                    .map_err(|error| git_error("check out", shown, error))?;
                Ok(SyncOutcome::Pulled)
            }
        }
    })
}

/// The refs `url` advertises to `auth` (what `git ls-remote` lists), without a working tree:
/// whether that user may clone the repository at all.
pub fn ls_remote(url: &str, shown: &str, auth: &GitAuth) -> Result<Vec<String>, ClientError> {
    with_auth(auth, || {
        let mut remote = git2::Remote::create_detached(url)
            .map_err(|error| git_error("open the remote", shown, error))?;
        let connection = remote
            .connect_auth(git2::Direction::Fetch, None, None)
            .map_err(|error| git_error("list the remote refs", shown, error))?;
        let refs = connection
            .list()
            .map_err(|error| git_error("list the remote refs", shown, error))?
            .iter()
            .map(|head| head.name().to_string())
            .collect();
        Ok(refs)
    })
}

/// The URL of the tree's `origin`, when it has one.
pub fn origin_url(dir: &Path) -> Option<String> {
    let repo = git2::Repository::open(dir).ok()?;
    let remote = repo.find_remote("origin").ok()?;
    remote.url().ok().map(str::to_string)
}

/// True when the working tree differs from its last commit (or has files but no commit).
pub fn has_changes(dir: &Path, shown: &str) -> Result<bool, ClientError> {
    let repo = git2::Repository::open(dir).map_err(|error| git_error("open", shown, error))?;
    tree_has_changes(&repo, shown)
}

fn tree_has_changes(repo: &git2::Repository, shown: &str) -> Result<bool, ClientError> {
    let mut options = git2::StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true);
    let statuses = repo
        .statuses(Some(&mut options))
        .map_err(|error| git_error("status", shown, error))?;
    Ok(!statuses.is_empty())
}

/// True when `main` has a commit the remote-tracking `origin/main` does not point at (a commit
/// an interrupted run made but did not push).
pub fn unpushed(dir: &Path) -> bool {
    let Ok(repo) = git2::Repository::open(dir) else {
        return false;
    };
    let target = |name: &str| repo.find_reference(name).ok().and_then(|r| r.target());
    match target(&format!("refs/heads/{BRANCH}")) {
        Some(head) => target(&format!("refs/remotes/origin/{BRANCH}")) != Some(head),
        None => false,
    }
}

/// Holds `.git/bprun.lock` (an OS file lock, released when the process dies) while bprun works
/// in a tree. Holding it proves no other bprun is inside: git's own lock files left behind
/// (`index.lock`, `HEAD.lock`, `config.lock`, `packed-refs.lock`, `refs/**/*.lock`, as a fetch
/// or commit killed half-way leaves them) then come from a run that was killed, and are removed
/// (git itself would refuse to go on).
pub struct TreeLock {
    _file: std::fs::File,
    /// True when a crashed run's lock files were removed.
    pub recovered: bool,
}

/// Git's lock files in `git_dir` that a killed git operation leaves behind.
fn stale_git_locks(git_dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = [
        "index.lock",
        "HEAD.lock",
        "config.lock",
        "packed-refs.lock",
        "shallow.lock",
    ]
    .iter()
    .map(|name| git_dir.join(name))
    .filter(|path| path.exists())
    .collect();
    // refs/heads/main.lock, refs/remotes/origin/main.lock, ... (bounded: a tree bprun manages
    // has a handful of refs).
    let mut folders = vec![git_dir.join("refs")];
    let mut visited = 0;
    while let Some(folder) = folders.pop() {
        visited += 1;
        if visited > 1000 {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "lock") {
                found.push(path);
            }
        }
    }
    found
}

pub fn lock_tree(dir: &Path, shown: &str) -> Result<TreeLock, ClientError> {
    let git_dir = dir.join(".git");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(git_dir.join("bprun.lock"))
        .map_err(|error| {
            ClientError::new(format!("git: cannot open {shown}/.git/bprun.lock: {error}"))
        })?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(ClientError::new(format!(
                    "git: another bprun has been working in {shown} for over 60 s"
                ))
                .with_hint("wait for the other run to finish"));
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(ClientError::new(format!(
                    "git: cannot lock {shown}/.git/bprun.lock: {error}"
                )));
            }
        }
    }
    let mut recovered = false;
    for stale in stale_git_locks(&git_dir) {
        recovered |= std::fs::remove_file(&stale).is_ok();
    }
    Ok(TreeLock {
        _file: file,
        recovered,
    })
}

/// Commits everything on `main` when the tree changed, and pushes `main` when the remote does
/// not have it yet (also a commit an interrupted run made but did not push). Returns the
/// commit pushed, or None when there was nothing to do.
pub fn commit_push(
    dir: &Path,
    shown: &str,
    message: &str,
    auth: &GitAuth,
) -> Result<Option<String>, ClientError> {
    let _lock = lock_tree(dir, shown)?;
    let repo = git2::Repository::open(dir).map_err(|error| git_error("open", shown, error))?;
    let changed = tree_has_changes(&repo, shown)?;
    let local = |repo: &git2::Repository, name: &str| {
        repo.find_reference(name)
            .ok()
            .and_then(|reference| reference.target())
    };
    let commit = if changed {
        let mut index = repo
            .index()
            .map_err(|error| git_error("read the index", shown, error))?;
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .map_err(|error| git_error("stage", shown, error))?;
        index
            .update_all(["*"], None)
            .map_err(|error| git_error("stage deletions", shown, error))?;
        index
            .write()
            .map_err(|error| git_error("write the index", shown, error))?;
        let tree_id = index
            .write_tree()
            .map_err(|error| git_error("write the tree", shown, error))?;
        let tree = repo
            .find_tree(tree_id)
            .map_err(|error| git_error("read the tree", shown, error))?;
        let signature = git2::Signature::now("bprun", "bprun@localhost")
            .map_err(|error| git_error("sign", shown, error))?;
        // The tip of `main` itself: a run killed inside a pull can leave HEAD elsewhere, and
        // libgit2 refuses a commit on `main` whose parent is not main's tip.
        let parent = repo
            .find_reference(&format!("refs/heads/{BRANCH}"))
            .ok()
            .and_then(|reference| reference.peel_to_commit().ok())
            .or_else(|| repo.head().ok().and_then(|head| head.peel_to_commit().ok()));
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let commit = repo
            .commit(
                Some(&format!("refs/heads/{BRANCH}")),
                &signature,
                &signature,
                message,
                &tree,
                &parents,
            )
            .map_err(|error| git_error("commit", shown, error))?;
        repo.set_head(&format!("refs/heads/{BRANCH}"))
            .map_err(|error| git_error("set HEAD", shown, error))?;
        commit
    } else {
        match local(&repo, &format!("refs/heads/{BRANCH}")) {
            Some(head) => head,
            None => return Ok(None),
        }
    };
    if local(&repo, &format!("refs/remotes/origin/{BRANCH}")) == Some(commit) {
        return Ok(None);
    }
    crate::write_gate::before_remote_write(&format!("git: push from {shown}"), &|| false)?;
    with_auth(auth, || {
        let mut attempt = 0;
        loop {
            PUSH_AMBIGUOUS.with(|ambiguous| ambiguous.set(false));
            let error = match push_once(&repo, shown) {
                Ok(()) => break,
                Err(error) => error,
            };
            attempt += 1;
            if !PUSH_AMBIGUOUS.with(|ambiguous| ambiguous.get()) {
                return Err(error);
            }
            // The remote may or may not have taken the push: read its ref back (a read, itself
            // retried) and decide from what it holds.
            let remote_head = remote_branch(&repo, shown).map_err(|read_error| {
                error.clone().caused_by(format!(
                    "reading origin/{BRANCH} back to see whether the push landed failed too: {}",
                    read_error.message
                ))
            })?;
            match remote_head {
                Some(head) if head == commit => break,
                Some(head) if !repo.graph_descendant_of(commit, head).unwrap_or(false) => {
                    return Err(error.caused_by(format!(
                        "origin/{BRANCH} moved to {} meanwhile, which this commit does not follow",
                        &head.to_string()[..8]
                    )));
                }
                // The remote still holds an ancestor (or nothing): the push did not land, and
                // sending it again is a fast-forward the remote checks itself.
                _ if attempt < GIT_PUSH_ATTEMPTS => std::thread::sleep(git_backoff(attempt - 1)),
                _ => {
                    return Err(error
                        .caused_by(format!(
                            "sent {GIT_PUSH_ATTEMPTS} times; each time origin/{BRANCH} was read back and had not taken it"
                        ))
                        .with_hint(
                            "the remote kept failing (5xx, 429 or a broken connection): the commit stays in the working tree, and the next run pushes it",
                        ));
                }
            }
        }
        // The remote has it now: remember that, so the next run does not push again.
        repo.reference(
            &format!("refs/remotes/origin/{BRANCH}"),
            commit,
            true,
            "bprun: pushed",
        )
        .map_err(|error| git_error("record the push", shown, error))?;
        Ok(Some(commit.to_string()))
    })
}

/// The hint for a refused push: the remote moved on, or it did not let this PAT push.
fn refused_push(error: ClientError, not_fast_forward: bool) -> ClientError {
    if error.remedy.is_some() || error.hint.is_some() {
        error
    } else if not_fast_forward {
        error
            .with_hint(
                "the remote has commits this working tree lacks: pull them first (a fast-forward), then push again",
            )
            .with_remedy(Remedy::PullFirst)
    } else {
        error.with_hint("is the PAT allowed to push (write_repository) to this branch?")
    }
}

/// Sends `main` to `origin` once.
fn push_once(repo: &git2::Repository, shown: &str) -> Result<(), ClientError> {
    let mut remote = repo
        .find_remote("origin")
        .map_err(|error| git_error("find remote origin", shown, error))?;
    // libgit2 reports a refused ref update through this callback, not as an error.
    let refused: RefCell<Option<String>> = RefCell::new(None);
    // What the remote says on its side band (git prints it as `remote: ...`): a server's
    // pre-receive hook gives its reason there (GitLab: "You are not allowed to push code to
    // protected branches on this project.").
    let said: RefCell<Vec<u8>> = RefCell::new(Vec::new());
    let mut callbacks = git2::RemoteCallbacks::new();
    callbacks.push_update_reference(|reference, status| {
        if let Some(message) = status {
            *refused.borrow_mut() = Some(format!("{reference}: {message}"));
        }
        Ok(())
    });
    callbacks.sideband_progress(|data| {
        let mut said = said.borrow_mut();
        // Bounded: a chatty remote cannot grow an error without end.
        if said.len() < 4096 {
            said.extend_from_slice(data);
        }
        true
    });
    let mut options = git2::PushOptions::new();
    options.remote_callbacks(callbacks);
    remote
        .push(
            &[format!("refs/heads/{BRANCH}:refs/heads/{BRANCH}")],
            Some(&mut options),
        )
        .map_err(|error| {
            let not_fast_forward = error.code() == git2::ErrorCode::NotFastForward;
            refused_push(git_error("push", shown, error), not_fast_forward)
        })?;
    drop(options);
    let Some(reason) = refused.into_inner() else {
        return Ok(());
    };
    // The remote's words in the headline, where every caller shows them (as git prints them).
    let remote_said = remote_lines(&said.into_inner());
    let words: String = remote_said
        .iter()
        .map(|line| format!("; remote: {line}"))
        .collect();
    let mut error = ClientError::new(format!("git: push from {shown} refused: {reason}{words}"));
    if remote_said
        .iter()
        .any(|line| line.contains("protected branch"))
    {
        error = error.with_hint(format!(
            "the branch's protection does not admit the PAT's user: Settings > Repository > Protected branches, allowed to push ({BRANCH})"
        ));
    }
    Err(refused_push(error, false))
}

/// The remote's side-band messages as lines, without the padding git clears a progress line
/// with.
fn remote_lines(said: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(said)
        .split(['\n', '\r'])
        .map(str::trim_end)
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

/// The commit `origin`'s `main` points at now (None when the remote has no `main`), read with
/// the ref advertisement only.
fn remote_branch(repo: &git2::Repository, shown: &str) -> Result<Option<git2::Oid>, ClientError> {
    let mut remote = repo
        .find_remote("origin")
        .map_err(|error| git_error("find remote origin", shown, error))?;
    let connection = remote
        .connect_auth(git2::Direction::Fetch, None, None)
        .map_err(|error| git_error("list the remote refs", shown, error))?;
    let wanted = format!("refs/heads/{BRANCH}");
    let head = connection
        .list()
        .map_err(|error| git_error("list the remote refs", shown, error))?
        .iter()
        .find(|head| head.name() == wanted)
        .map(|head| head.oid());
    Ok(head)
}
