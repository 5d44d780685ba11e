//! File access confined to the repository root, with idempotent writes.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::error::ClientError;

/// Resolves paths against a root and refuses any that lead outside it (`..`, absolute paths
/// elsewhere, symlinks that point out).
#[derive(Debug, Clone)]
pub struct Confinement {
    root: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Unchanged,
    Created,
    Updated,
}

impl Confinement {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = root.canonicalize().unwrap_or(root);
        Confinement { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path of `path` (relative paths are taken from the root), if it stays inside.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ClientError> {
        if path.is_empty() {
            return Err(
                ClientError::new("empty path").with_hint("name a file under the repository root")
            );
        }
        let candidate = Path::new(path);
        let joined = if candidate.is_absolute() {
            candidate.to_path_buf()
        } else {
            self.root.join(candidate)
        };
        // Normalise `.` and `..` lexically first, then resolve symlinks on the longest existing prefix.
        let mut normal = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::ParentDir => {
                    normal.pop();
                }
                Component::CurDir => {}
                other => normal.push(other),
            }
        }
        let real = canonicalize_existing_prefix(&normal);
        if real.starts_with(&self.root) {
            Ok(real)
        } else {
            Err(ClientError::new(format!(
                "path {path} is outside the repository root {}",
                self.root.display()
            ))
            .with_hint("file natives only reach files under the repository root; use a relative path such as infra/secrets/x.json"))
        }
    }

    /// A path for messages: relative to the root when inside it.
    pub fn display(&self, path: &Path) -> String {
        relative_display(&self.root, path)
    }

    pub fn read_text(&self, path: &str) -> Result<String, ClientError> {
        let full = self.resolve(path)?;
        std::fs::read_to_string(&full).map_err(|error| {
            let hint = match error.kind() {
                std::io::ErrorKind::NotFound => {
                    "check the path; relative paths start at the repository root"
                }
                std::io::ErrorKind::InvalidData => "the file is not UTF-8 text: only text is read",
                _ => "check the file's permissions",
            };
            ClientError::new(format!("cannot read {}: {error}", self.display(&full)))
                .with_hint(hint)
        })
    }

    pub fn exists(&self, path: &str) -> Result<bool, ClientError> {
        Ok(self.resolve(path)?.exists())
    }

    /// What [`write_text`](Self::write_text) would do, without doing it.
    pub fn plan_write(
        &self,
        path: &str,
        content: &[u8],
        mode: Option<u32>,
    ) -> Result<(PathBuf, WriteOutcome), ClientError> {
        let full = self.resolve(path)?;
        let outcome = match std::fs::read(&full) {
            Ok(existing) => {
                let mode_differs = match (mode, std::fs::metadata(&full)) {
                    (Some(wanted), Ok(meta)) => meta.permissions().mode() & 0o777 != wanted,
                    _ => false,
                };
                if existing == content && !mode_differs {
                    WriteOutcome::Unchanged
                } else {
                    WriteOutcome::Updated
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => WriteOutcome::Created,
            Err(error) => {
                return Err(ClientError::new(format!(
                    "cannot read {}: {error}",
                    self.display(&full)
                ))
                .with_hint("check the file's permissions"));
            }
        };
        Ok((full, outcome))
    }

    /// Writes `content` only when it differs (content or mode); creates parent folders. A file
    /// with a mode is created with that mode from the start, so a secret is never world-readable.
    pub fn write_text(
        &self,
        path: &str,
        content: &[u8],
        mode: Option<u32>,
    ) -> Result<WriteOutcome, ClientError> {
        let (full, outcome) = self.plan_write(path, content, mode)?;
        if outcome == WriteOutcome::Unchanged {
            return Ok(outcome);
        }
        let shown = self.display(&full);
        let fail = |error: std::io::Error| {
            ClientError::new(format!("cannot write {shown}: {error}"))
                .with_hint("check the folder's permissions")
        };
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        // Write to a temporary file beside it and rename, so a reader never sees half a file.
        let (temporary, mut file) = create_temporary(&full, mode.unwrap_or(0o644)).map_err(fail)?;
        if let Some(mode) = mode {
            // The umask may have narrowed the mode; set it exactly.
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(fail)?;
        }
        let written = file
            .write_all(content)
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&temporary, &full));
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(fail(error));
        }
        Ok(outcome)
    }

    /// Creates `path` with `content` only when no file is there: the first of two writers wins
    /// and the other finds it `Unchanged` (steps that run together and mint the same kept
    /// secret then agree on it). The file appears whole: it is written beside and linked in
    /// place, which fails when the name exists.
    pub fn write_new(
        &self,
        path: &str,
        content: &[u8],
        mode: Option<u32>,
    ) -> Result<WriteOutcome, ClientError> {
        let full = self.resolve(path)?;
        if full.exists() {
            return Ok(WriteOutcome::Unchanged);
        }
        let shown = self.display(&full);
        let fail = |error: std::io::Error| {
            ClientError::new(format!("cannot write {shown}: {error}"))
                .with_hint("check the folder's permissions")
        };
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        let (temporary, mut file) = create_temporary(&full, mode.unwrap_or(0o644)).map_err(fail)?;
        let written = mode
            .map_or(Ok(()), |mode| {
                file.set_permissions(std::fs::Permissions::from_mode(mode))
            })
            .and_then(|()| file.write_all(content))
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::hard_link(&temporary, &full));
        let _ = std::fs::remove_file(&temporary);
        match written {
            Ok(()) => Ok(WriteOutcome::Created),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                Ok(WriteOutcome::Unchanged)
            }
            Err(error) => Err(fail(error)),
        }
    }

    /// What [`write_new`](Self::write_new) would do, without doing it.
    pub fn plan_write_new(&self, path: &str) -> Result<(PathBuf, WriteOutcome), ClientError> {
        let full = self.resolve(path)?;
        let outcome = if full.exists() {
            WriteOutcome::Unchanged
        } else {
            WriteOutcome::Created
        };
        Ok((full, outcome))
    }
}

/// A new temporary file beside `path`, created exclusively (`O_CREAT|O_EXCL`: it never opens an
/// existing file, and never follows a symbolic link planted at its name) with a random name and
/// `mode` from the start. Its name carries this process's id, so the temporaries a killed
/// writer left beside `path` (a secret's content, perhaps) are found and removed first.
fn create_temporary(path: &Path, mode: u32) -> std::io::Result<(PathBuf, std::fs::File)> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    remove_stray_temporaries(path, &name);
    let pid = std::process::id();
    let mut last = None;
    for _ in 0..16 {
        let temporary = path.with_file_name(format!(
            ".{name}.{pid}-{:016x}.{TEMPORARY_SUFFIX}",
            fastrand::u64(..)
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temporary)
        {
            Ok(file) => return Ok((temporary, file)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

const TEMPORARY_SUFFIX: &str = "bprun-tmp";

/// Removes the temporaries of `path` (named `.{name}.{pid}-{random}.bprun-tmp`) whose writer is
/// no longer running: a process killed between writing one and moving it into place. Another
/// live writer's temporary is left alone. Best effort: what cannot be removed stays.
fn remove_stray_temporaries(path: &Path, name: &str) {
    let Some(folder) = path.parent() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    let prefix = format!(".{name}.");
    let suffix = format!(".{TEMPORARY_SUFFIX}");
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        let Some(middle) = file_name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(&suffix))
        else {
            continue;
        };
        let Some(Ok(writer)) = middle.split_once('-').map(|(pid, _)| pid.parse::<u32>()) else {
            continue;
        };
        if !process_is_running(writer) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether a process with this id exists (Linux's /proc; this process always does).
fn process_is_running(pid: u32) -> bool {
    pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
}

/// Writes a file only its owner can read (mode 0600 from creation, atomically replaced): for
/// files that hold secrets, such as kubeconfigs and unseal keys.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (temporary, mut file) = create_temporary(path, 0o600)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// `path` relative to `root` when inside it, else as it is: how paths appear in messages.
pub fn relative_display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .map(|relative| relative.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

fn canonicalize_existing_prefix(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match existing.file_name() {
            Some(name) => {
                rest.push(name.to_os_string());
                existing.pop();
            }
            None => break,
        }
    }
    let mut real = existing.canonicalize().unwrap_or(existing);
    for name in rest.into_iter().rev() {
        real.push(name);
    }
    real
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_root() -> (tempfile::TempDir, Confinement) {
        let dir = tempfile::tempdir().expect("temp dir");
        let confinement = Confinement::new(dir.path());
        (dir, confinement)
    }

    #[test]
    fn refuses_paths_outside_the_root() {
        let (_dir, fs) = temp_root();
        assert!(fs.resolve("../outside").is_err());
        assert!(fs.resolve("/etc/passwd").is_err());
        assert!(fs.resolve("infra/../../x").is_err());
        assert!(fs.resolve("infra/secrets/x.json").is_ok());
    }

    #[test]
    fn refuses_symlinks_that_lead_out() {
        let (dir, fs) = temp_root();
        std::os::unix::fs::symlink("/etc", dir.path().join("escape")).expect("symlink");
        let error = fs.resolve("escape/passwd").expect_err("must refuse");
        assert!(
            error.message.contains("outside the repository root"),
            "{}",
            error.message
        );
    }

    #[test]
    fn of_writers_racing_to_create_a_file_the_first_wins_and_the_others_change_nothing() {
        let (dir, fs) = temp_root();
        let outcomes: Vec<(WriteOutcome, String)> = std::thread::scope(|threads| {
            let racing: Vec<_> = (0..8)
                .map(|writer| {
                    let fs = &fs;
                    threads.spawn(move || {
                        let mine = format!("minted by writer {writer}");
                        let outcome = fs
                            .write_new("kept/password.txt", mine.as_bytes(), Some(0o600))
                            .expect("write");
                        (outcome, mine)
                    })
                })
                .collect();
            racing
                .into_iter()
                .map(|writer| writer.join().expect("writer"))
                .collect()
        });
        let winners: Vec<&String> = outcomes
            .iter()
            .filter(|(outcome, _)| *outcome == WriteOutcome::Created)
            .map(|(_, mine)| mine)
            .collect();
        assert_eq!(winners.len(), 1, "{outcomes:?}");
        let kept = std::fs::read_to_string(dir.path().join("kept/password.txt")).expect("read");
        assert_eq!(&kept, winners[0]);
        let mode = std::fs::metadata(dir.path().join("kept/password.txt"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let left: Vec<String> = std::fs::read_dir(dir.path().join("kept"))
            .expect("list")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(left, ["password.txt"], "no temporary file is left behind");
        assert_eq!(
            fs.plan_write_new("kept/password.txt").expect("plan").1,
            WriteOutcome::Unchanged
        );
    }

    #[test]
    fn the_temporaries_a_killed_writer_left_go_with_the_next_write_and_live_ones_stay() {
        let (dir, fs) = temp_root();
        // A process id that has ended: a child that exited and was waited for.
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let dead = child.id();
        child.wait().expect("wait");
        let folder = dir.path().join("kept");
        std::fs::create_dir_all(&folder).expect("folder");
        let live = std::process::id();
        for name in [
            format!(".password.txt.{dead}-00000000000000aa.bprun-tmp"),
            format!(".password.txt.{live}-00000000000000bb.bprun-tmp"),
            format!(".other.txt.{dead}-00000000000000cc.bprun-tmp"),
        ] {
            std::fs::write(folder.join(name), "half a secret").expect("plant");
        }
        assert_eq!(
            fs.plan_write_new("kept/password.txt").expect("plan").1,
            WriteOutcome::Created
        );
        assert_eq!(
            fs.write_new("kept/password.txt", b"minted", Some(0o600))
                .expect("write"),
            WriteOutcome::Created
        );
        let mut left: Vec<String> = std::fs::read_dir(&folder)
            .expect("list")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                format!(".other.txt.{dead}-00000000000000cc.bprun-tmp"),
                format!(".password.txt.{live}-00000000000000bb.bprun-tmp"),
                "password.txt".to_string(),
            ],
            "only the dead writer's temporary of this file is removed"
        );
    }

    #[test]
    fn writes_once_then_reports_unchanged() {
        let (dir, fs) = temp_root();
        assert_eq!(
            fs.write_text("a/b.txt", b"x", Some(0o600)).expect("write"),
            WriteOutcome::Created
        );
        assert_eq!(
            fs.write_text("a/b.txt", b"x", Some(0o600)).expect("write"),
            WriteOutcome::Unchanged
        );
        let mode = std::fs::metadata(dir.path().join("a/b.txt"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            fs.write_text("a/b.txt", b"x", Some(0o644)).expect("write"),
            WriteOutcome::Updated
        );
        assert_eq!(
            fs.write_text("a/b.txt", b"y", None).expect("write"),
            WriteOutcome::Updated
        );
    }
}
