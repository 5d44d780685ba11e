//! `rsync -a --delete` semantics for copying `apps/<name>/` into a working tree: files are
//! created or updated (content and permission bits), files the source no longer has are
//! deleted, `.git` in the destination is never touched, and equal trees change nothing.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::ClientError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub deleted: Vec<String>,
}

impl SyncReport {
    pub fn changed(&self) -> bool {
        !(self.created.is_empty() && self.updated.is_empty() && self.deleted.is_empty())
    }
}

fn io(action: &str, path: &Path, error: std::io::Error) -> ClientError {
    ClientError::new(format!("cannot {action} {}: {error}", path.display()))
}

/// Every file and symlink under `root` (relative paths), and every folder, skipping `.git`.
fn walk(root: &Path) -> Result<(BTreeSet<PathBuf>, BTreeSet<PathBuf>), ClientError> {
    let mut files = BTreeSet::new();
    let mut folders = BTreeSet::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let folder = root.join(&relative);
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(error)
                if error.kind() == std::io::ErrorKind::NotFound
                    && relative.as_os_str().is_empty() =>
            {
                continue;
            }
            Err(error) => return Err(io("read", &folder, error)),
        };
        for entry in entries {
            let entry = entry.map_err(|error| io("read", &folder, error))?;
            let name = entry.file_name();
            if name == ".git" {
                continue;
            }
            let path = relative.join(&name);
            let kind = entry
                .file_type()
                .map_err(|error| io("read", &entry.path(), error))?;
            if kind.is_dir() {
                folders.insert(path.clone());
                pending.push(path);
            } else {
                files.insert(path);
            }
        }
    }
    Ok((files, folders))
}

fn same_file(source: &Path, destination: &Path) -> Result<bool, ClientError> {
    let (Ok(from), Ok(to)) = (
        std::fs::symlink_metadata(source),
        std::fs::symlink_metadata(destination),
    ) else {
        return Ok(false);
    };
    if from.file_type().is_symlink() || to.file_type().is_symlink() {
        return Ok(from.file_type().is_symlink()
            && to.file_type().is_symlink()
            && std::fs::read_link(source).ok() == std::fs::read_link(destination).ok());
    }
    if from.len() != to.len()
        || from.permissions().mode() & 0o777 != to.permissions().mode() & 0o777
    {
        return Ok(false);
    }
    let a = std::fs::read(source).map_err(|error| io("read", source, error))?;
    let b = std::fs::read(destination).map_err(|error| io("read", destination, error))?;
    Ok(a == b)
}

fn copy(source: &Path, destination: &Path) -> Result<(), ClientError> {
    if let Some(parent) = destination.parent() {
        std::fs::create_dir_all(parent).map_err(|error| io("create", parent, error))?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(destination)
        && (meta.is_dir() || meta.file_type().is_symlink())
    {
        remove(destination)?;
    }
    let meta = std::fs::symlink_metadata(source).map_err(|error| io("read", source, error))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(source).map_err(|error| io("read", source, error))?;
        let _ = std::fs::remove_file(destination);
        return std::os::unix::fs::symlink(target, destination)
            .map_err(|error| io("link", destination, error));
    }
    std::fs::copy(source, destination).map_err(|error| io("copy to", destination, error))?;
    std::fs::set_permissions(
        destination,
        std::fs::Permissions::from_mode(meta.permissions().mode() & 0o777),
    )
    .map_err(|error| io("set the mode of", destination, error))
}

fn remove(path: &Path) -> Result<(), ClientError> {
    let meta = std::fs::symlink_metadata(path).map_err(|error| io("read", path, error))?;
    if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
    .map_err(|error| io("delete", path, error))
}

/// Makes `destination` hold exactly what `source` holds (besides `.git`). `check` only reports.
/// Paths in `exclude` (relative, like `.gitlab-ci.yml`) are neither copied nor deleted, as
/// with rsync's `--exclude`: the working tree keeps its own version.
/// What a sync must never delete into: the repository itself and what holds its code, history
/// and secrets. A destination that is one of them, or an ancestor of one, is refused.
pub const PROTECTED: &[&str] = &["", ".git", "scripts", "infra/secrets", "src", "crates"];

/// Refuses a sync destination that is the repository root, an ancestor of it, or holds one of
/// [`PROTECTED`]: a sync deletes what the source lacks.
pub fn check_destination(root: &Path, destination: &Path, shown: &str) -> Result<(), ClientError> {
    let hit = PROTECTED
        .iter()
        .map(|relative| root.join(relative))
        .find(|protected| protected.starts_with(destination));
    match hit {
        Some(protected) => Err(ClientError::new(format!(
            "refusing to sync into {shown}: it holds {}",
            if protected == root {
                "the repository itself".to_string()
            } else {
                crate::fs::relative_display(root, &protected)
            }
        ))
        .with_kind(crate::error::ErrorKind::Invalid)
        .with_hint("a sync deletes what the source lacks; sync into a working tree such as apps-local/blueprint-apps/<app>")
        .in_operation("sync", ": ")),
        None => Ok(()),
    }
}

pub fn sync_tree(
    source: &Path,
    destination: &Path,
    exclude: &[String],
    check: bool,
) -> Result<SyncReport, ClientError> {
    if !source.is_dir() {
        return Err(
            ClientError::new(format!("the source {} is not a folder", source.display()))
                .with_hint("the manifest's src_path must name a folder under apps/")
                .in_operation("sync", ": "),
        );
    }
    let excluded = |path: &PathBuf| {
        exclude
            .iter()
            .any(|pattern| path == Path::new(pattern) || path.starts_with(pattern))
    };
    let (mut source_files, _) = walk(source)?;
    let (mut destination_files, mut destination_folders) = walk(destination)?;
    source_files.retain(|path| !excluded(path));
    destination_files.retain(|path| !excluded(path));
    destination_folders.retain(|path| !excluded(path));
    let mut report = SyncReport::default();
    for file in &source_files {
        let (from, to) = (source.join(file), destination.join(file));
        let shown = file.display().to_string();
        if !destination_files.contains(file) {
            report.created.push(shown);
            if !check {
                copy(&from, &to)?;
            }
        } else if !same_file(&from, &to)? {
            report.updated.push(shown);
            if !check {
                copy(&from, &to)?;
            }
        }
    }
    for file in destination_files.difference(&source_files) {
        // A file where the source has a folder is replaced by the copy above.
        if source.join(file).is_dir() {
            continue;
        }
        report.deleted.push(file.display().to_string());
        if !check {
            remove(&destination.join(file))?;
        }
    }
    // Folders the source does not have, deepest first.
    for folder in destination_folders.iter().rev() {
        if !source.join(folder).is_dir() {
            let full = destination.join(folder);
            if !check && full.exists() {
                remove(&full)?;
            }
            report.deleted.push(format!("{}/", folder.display()));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let full = root.join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, text).expect("write");
    }

    #[test]
    fn mirrors_the_source_keeps_git_and_changes_nothing_when_equal() {
        let source = tempfile::tempdir().expect("source");
        let destination = tempfile::tempdir().expect("destination");
        write(source.path(), "helm-chart/Chart.yaml", "name: guestbook\n");
        write(source.path(), "main.go", "package main\n");
        std::fs::set_permissions(
            source.path().join("main.go"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        write(destination.path(), ".git/HEAD", "ref: refs/heads/main\n");
        write(destination.path(), "old/stale.txt", "gone\n");
        write(destination.path(), "main.go", "package old\n");

        let report = sync_tree(source.path(), destination.path(), &[], true).expect("check");
        assert!(report.changed());
        assert!(
            destination.path().join("old/stale.txt").exists(),
            "check mode deleted a file"
        );

        let report = sync_tree(source.path(), destination.path(), &[], false).expect("sync");
        assert_eq!(report.created, ["helm-chart/Chart.yaml"]);
        assert_eq!(report.updated, ["main.go"]);
        assert_eq!(report.deleted, ["old/stale.txt", "old/"]);
        assert_eq!(
            std::fs::read_to_string(destination.path().join(".git/HEAD")).expect("git kept"),
            "ref: refs/heads/main\n"
        );
        let mode = std::fs::metadata(destination.path().join("main.go"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            sync_tree(source.path(), destination.path(), &[], false).expect("again"),
            SyncReport::default()
        );
    }
}
