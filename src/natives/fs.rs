//! Text files confined to the repository root.

use crate::natives::options::RhaiResultOf;
use crate::state::Resource;
use rhai::Map;
use rhai::plugin::*;

use crate::engine::{native_error, session};
use crate::error::NativeError;
use bprun_clients::fs::{Confinement, WriteOutcome};

/// The `--diff` of one file: a unified diff of its text, or a line saying why not (a secret's
/// content stays hidden; binary content is only said to differ).
pub(crate) fn file_diff(
    shown: &str,
    before: Option<&[u8]>,
    after: Option<&[u8]>,
    secret: bool,
) -> String {
    if secret {
        return format!("{shown}: content hidden (a secret)");
    }
    let text = |bytes: Option<&[u8]>| bytes.map(|b| std::str::from_utf8(b).map(str::to_string));
    match (text(before), text(after)) {
        (Some(Err(_)), _) | (_, Some(Err(_))) => format!("{shown}: binary content differs"),
        (old, new) => crate::output::unified_diff(
            shown,
            old.and_then(Result::ok).as_deref(),
            new.and_then(Result::ok).as_deref(),
        ),
    }
}

#[export_module]
pub mod fs_functions {
    use super::*;

    /// The UTF-8 text of a file. Relative paths start at the repository root; paths outside it
    /// are refused.
    ///
    /// ```rhai
    /// let manifest = yaml_parse(read_text("apps/apps_manifest.yaml"));
    /// ```
    #[rhai_fn(return_raw)]
    pub fn read_text(context: NativeCallContext, path: &str) -> RhaiResultOf<String> {
        let session = session(&context)?;
        Confinement::new(&session.state.root)
            .read_text(path)
            .map_err(native_error)
    }

    /// A template file with its `{{ NAME }}` placeholders filled from `values` (strings,
    /// numbers or `Secret`s). The result is a `Secret` when any value used was one, so a
    /// rendered credential file never prints. A placeholder without a value, or a value no
    /// placeholder uses, is an error naming the file and line (a typo never renders silently).
    ///
    /// ```rhai
    /// let connection = template_file("infra/references/gitlab-rails-storage-connection.yaml",
    ///     #{ACCESS_KEY: "admin", SECRET_KEY: secret("minio-password-xyz"), ENDPOINT: "http://minio.minio.svc:9000"});
    /// ```
    #[rhai_fn(return_raw)]
    pub fn template_file(
        context: NativeCallContext,
        path: &str,
        values: rhai::Map,
    ) -> RhaiResultOf<Dynamic> {
        let session = session(&context)?;
        let text = Confinement::new(&session.state.root)
            .read_text(path)
            .map_err(native_error)?;
        let mut filled = String::with_capacity(text.len());
        let mut used = std::collections::BTreeSet::new();
        let mut secret = false;
        for (index, line) in text.split_inclusive('\n').enumerate() {
            let mut rest = line;
            while let Some(start) = rest.find("{{") {
                filled.push_str(&rest[..start]);
                let after = &rest[start + 2..];
                let Some(end) = after.find("}}") else {
                    return Err(native_error(NativeError::new(format!(
                        "template_file: {path}:{}: `{{{{` without a closing `}}}}`",
                        index + 1
                    ))));
                };
                let name = after[..end].trim();
                let Some(value) = values.get(name) else {
                    let mut known: Vec<&str> = values.keys().map(|k| k.as_str()).collect();
                    known.sort();
                    return Err(native_error(
                        NativeError::new(format!(
                            "template_file: {path}:{}: no value for {{{{ {name} }}}}",
                            index + 1
                        ))
                        .with_hint(format!("values given: {}", known.join(", "))),
                    ));
                };
                if let Some(hidden) = value.read_lock::<bprun_clients::secret::Secret>() {
                    secret = true;
                    filled.push_str(hidden.reveal());
                } else if value.is_string() || value.is_int() || value.is_bool() || value.is_float()
                {
                    filled.push_str(&value.to_string());
                } else {
                    return Err(native_error(NativeError::new(format!(
                        "template_file: {path}:{}: {name} must be a string, a number or a Secret, not {}",
                        index + 1,
                        value.type_name()
                    ))));
                }
                used.insert(name.to_string());
                rest = &after[end + 2..];
            }
            filled.push_str(rest);
        }
        let mut unused: Vec<&str> = values
            .keys()
            .map(|k| k.as_str())
            .filter(|key| !used.contains(*key))
            .collect();
        if !unused.is_empty() {
            unused.sort();
            return Err(native_error(
                NativeError::new(format!(
                    "template_file: {path} has no placeholder for {}",
                    unused.join(", ")
                ))
                .with_hint("placeholders are written {{ NAME }}; check the spelling"),
            ));
        }
        Ok(if secret {
            Dynamic::from(bprun_clients::secret::Secret::new(filled))
        } else {
            filled.into()
        })
    }

    /// True when a file or folder exists under the repository root.
    ///
    /// ```rhai
    /// if !path_exists("apps/guestbook") { throw "apps/guestbook is missing" }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn path_exists(context: NativeCallContext, path: &str) -> RhaiResultOf<bool> {
        let session = session(&context)?;
        Confinement::new(&session.state.root)
            .exists(path)
            .map_err(native_error)
    }

    /// Writes `text` (a string or a `Secret`) to a file under the repository root, only when the
    /// content differs; returns `#{changed, path}`. A `Secret` is written with mode 0600.
    /// Honours check mode. Runs inside a step only.
    ///
    /// ```rhai
    /// step("Write note", || {
    ///     let result = write_text("infra/generated/note.txt", "hello\n");
    ///     if result.changed { info("note written") }
    /// });
    /// ```
    #[rhai_fn(name = "write_text", return_raw)]
    pub fn write_text(context: NativeCallContext, path: &str, text: Dynamic) -> RhaiResultOf<Map> {
        write_text_with(context, path, text, rhai::Map::new())
    }

    /// Like `write_text(path, text)` with options: `mode` (an integer such as `0o600`) and
    /// `create_new` (true: write only when no file is there, and change nothing when one is, even
    /// with other text; of two steps running together that mint the same kept secret, the first
    /// write wins and both read it back).
    ///
    /// ```rhai
    /// step("Persist token", || {
    ///     write_text("infra/secrets/token.txt", secret("glpat-xxxxxxxxxxxxxxxxxxxx"), #{mode: 0o600});
    ///     write_text("infra/secrets/pin.txt", random_secret(16), #{mode: 0o600, create_new: true});
    /// });
    /// ```
    #[rhai_fn(name = "write_text", return_raw)]
    pub fn write_text_with(
        context: NativeCallContext,
        path: &str,
        text: Dynamic,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        let state = &session.state;
        state.require_step("write_text").map_err(native_error)?;
        let (content, is_secret) = match text.clone().try_cast::<bprun_clients::secret::Secret>() {
            Some(secret) => (secret.reveal().as_bytes().to_vec(), true),
            None => match text.into_immutable_string() {
                Ok(text) => (text.as_bytes().to_vec(), false),
                Err(type_name) => {
                    return Err(native_error(NativeError::new(format!(
                        "write_text({path}): text must be a string or a Secret, not {type_name}"
                    ))));
                }
            },
        };
        let mut mode = if is_secret { Some(0o600) } else { None };
        crate::natives::options::reject_undeclared(&options, "write_text")?;
        if let Some(value) = options.get("mode") {
            let value = value.as_int().map_err(|type_name| {
                native_error(NativeError::new(format!(
                    "write_text({path}): mode must be an integer such as 0o600, not {type_name}"
                )))
            })?;
            if !(0..=0o777).contains(&value) {
                return Err(native_error(NativeError::new(format!(
                    "write_text({path}): mode {value:o} is not a permission mode (0o000 to 0o777)"
                ))));
            }
            mode = Some(value as u32);
        }
        let create_new =
            crate::natives::options::option_bool(&options, "create_new", "write_text")?
                .unwrap_or(false);
        let files = Confinement::new(&state.root);
        // Read before the write, for --diff.
        let before = if state.diff() {
            files
                .resolve(path)
                .ok()
                .and_then(|full| std::fs::read(full).ok())
        } else {
            None
        };
        let (full, outcome) = if create_new {
            let (full, planned) = files.plan_write_new(path).map_err(native_error)?;
            let outcome = if state.check() {
                planned
            } else {
                files
                    .write_new(path, &content, mode)
                    .map_err(native_error)?
            };
            (full, outcome)
        } else if state.check() {
            files
                .plan_write(path, &content, mode)
                .map_err(native_error)?
        } else {
            let full = files.resolve(path).map_err(native_error)?;
            (
                full,
                files
                    .write_text(path, &content, mode)
                    .map_err(native_error)?,
            )
        };
        let shown = files.display(&full);
        let action = match outcome {
            WriteOutcome::Unchanged => None,
            WriteOutcome::Created => Some("create"),
            WriteOutcome::Updated => Some("update"),
        };
        if let Some(action) = action {
            if state.check() {
                state.plan_write(full.clone());
            }
            state.record_change(action, Resource::named("file", &shown));
            if state.diff() {
                state.record_diff(&file_diff(
                    &shown,
                    before.as_deref(),
                    Some(&content),
                    is_secret,
                ));
            }
        }
        let mut result = rhai::Map::new();
        result.insert("changed".into(), action.is_some().into());
        result.insert("path".into(), shown.into());
        Ok(result)
    }

    /// Makes the folder `destination` hold exactly what `source` holds, with `rsync -a --delete`
    /// semantics: creates and updates files (content and permission bits), deletes what the
    /// source no longer has, never touches `destination/.git`, and changes nothing when the trees
    /// are equal. Both paths are under the repository root. Honours check mode. Returns
    /// `#{changed, created, updated, deleted}` (arrays of relative paths).
    ///
    /// ```rhai
    /// step("Sync", || {
    ///     let result = sync_tree("apps/guestbook", "apps-local/blueprint-apps/guestbook");
    ///     if result.changed { info(`${result.updated.len()} files updated`) }
    /// });
    /// ```
    #[rhai_fn(name = "sync_tree", return_raw)]
    pub fn sync_tree(
        context: NativeCallContext,
        source: &str,
        destination: &str,
    ) -> RhaiResultOf<Map> {
        sync_tree_with(context, source, destination, rhai::Map::new())
    }

    /// `sync_tree(source, destination)` with options: `exclude` (relative paths the
    /// destination keeps as they are, such as the rendered `.gitlab-ci.yml`).
    ///
    /// ```rhai
    /// step("Sync", || {
    ///     sync_tree("apps/guestbook", "apps-local/blueprint-apps/guestbook", #{exclude: [".gitlab-ci.yml"]});
    /// });
    /// ```
    #[rhai_fn(name = "sync_tree", return_raw)]
    pub fn sync_tree_with(
        context: NativeCallContext,
        source: &str,
        destination: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        crate::natives::options::reject_undeclared(&options, "sync_tree")?;
        let exclude: Vec<String> = match options.get("exclude") {
            None => Vec::new(),
            Some(value) => value
                .clone()
                .into_array()
                .map_err(|t| {
                    native_error(NativeError::new(format!(
                        "sync_tree: exclude must be an array of paths, not {t}"
                    )))
                })?
                .into_iter()
                .map(|item| item.to_string())
                .collect(),
        };
        let session = session(&context)?;
        let state = &session.state;
        state.require_step("sync_tree").map_err(native_error)?;
        let files = Confinement::new(&state.root);
        let from = files.resolve(source).map_err(native_error)?;
        let to = files.resolve(destination).map_err(native_error)?;
        let named = |error: bprun_clients::error::ClientError| {
            native_error(error.named_by(|_| "sync_tree"))
        };
        bprun_clients::tree::check_destination(&state.root, &to, destination).map_err(named)?;
        // --diff: what is there before the sync (a dry pass names the files it will touch).
        let before: Vec<(String, Option<Vec<u8>>)> = if state.diff() {
            let planned =
                bprun_clients::tree::sync_tree(&from, &to, &exclude, true).map_err(named)?;
            planned
                .created
                .iter()
                .chain(&planned.updated)
                .chain(&planned.deleted)
                .map(|relative| (relative.clone(), std::fs::read(to.join(relative)).ok()))
                .collect()
        } else {
            Vec::new()
        };
        let report =
            bprun_clients::tree::sync_tree(&from, &to, &exclude, state.check()).map_err(named)?;
        if report.changed() {
            if state.check() {
                state.plan_write(to.clone());
            }
            state.record_change(
                "sync",
                Resource::new(
                    "directory",
                    files.display(&to),
                    format!(
                        "{} from {} ({} created, {} updated, {} deleted)",
                        files.display(&to),
                        files.display(&from),
                        report.created.len(),
                        report.updated.len(),
                        report.deleted.len()
                    ),
                ),
            );
            let shown_to = files.display(&to);
            for (relative, old) in &before {
                let new = if report.deleted.contains(relative) {
                    None
                } else {
                    std::fs::read(from.join(relative)).ok()
                };
                state.record_diff(&file_diff(
                    &format!("{shown_to}/{relative}"),
                    old.as_deref(),
                    new.as_deref(),
                    false,
                ));
            }
        }
        let list = |items: &[String]| -> rhai::Array {
            items
                .iter()
                .map(|item| Dynamic::from(item.clone()))
                .collect()
        };
        let mut result = rhai::Map::new();
        result.insert("changed".into(), report.changed().into());
        result.insert("created".into(), list(&report.created).into());
        result.insert("updated".into(), list(&report.updated).into());
        result.insert("deleted".into(), list(&report.deleted).into());
        Ok(result)
    }

    /// Deletes a file or a whole folder under the repository root (`apps-local/` for
    /// `--reset-clones`). Unchanged when it does not exist. Honours check mode. Returns `#{changed}`.
    ///
    /// ```rhai
    /// step("Reset clones", || { remove_path("apps-local/blueprint-apps"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn remove_path(context: NativeCallContext, path: &str) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        let state = &session.state;
        state.require_step("remove_path").map_err(native_error)?;
        let files = Confinement::new(&state.root);
        let full = files.resolve(path).map_err(native_error)?;
        if full == files.root() {
            return Err(native_error(NativeError::new(
                "remove_path: refusing to delete the repository root",
            )));
        }
        let exists = std::fs::symlink_metadata(&full).is_ok();
        if exists {
            let shown = files.display(&full);
            state.record_change("delete", Resource::new("path", &shown, &shown));
            if !state.check() {
                let removed = if full.is_dir() && !full.is_symlink() {
                    std::fs::remove_dir_all(&full)
                } else {
                    std::fs::remove_file(&full)
                };
                removed.map_err(|error| {
                    native_error(NativeError::new(format!(
                        "cannot delete {}: {error}",
                        files.display(&full)
                    )))
                })?;
            }
        }
        let mut result = rhai::Map::new();
        result.insert("changed".into(), exists.into());
        Ok(result)
    }
}
