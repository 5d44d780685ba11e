//! Helm through the real `helm` binary (v3 or v4), from `HELM_BIN` or `PATH`; KUBECONFIG and the
//! rest of the environment pass through.
//!
//! Idempotence: `upgrade` is only worth running when something changed, so every install is
//! stamped with a digest in the release description (`bprun digest <sha256>`) computed over the
//! chart's name and version, the chart's files when it is local, and the canonical JSON of the
//! merged values. A deployed release with the same digest is left alone.
//!
//! Every call has a timeout, output and errors are scrubbed of registered secrets, and values are
//! handed to helm in files (a mode-0600 temporary file for the script's values), never `--set`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

mod release;

pub use release::{Ensured, ReleaseSpec, verify_cached_archive};

use crate::error::{ClientError, ErrorKind, Remedy};
use crate::fs::Confinement;
use crate::process::{ProcessOutput, ProcessSpec, run};
use crate::secret::scrub;

/// Timeout of the calls that only read (status, list, template, lint, show).
pub const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// helm's own `--timeout` when the script gives none (helm's default too).
pub const DEFAULT_HELM_TIMEOUT: Duration = Duration::from_secs(300);
/// What bprun waits beyond helm's `--timeout` before it kills helm.
const MARGIN: Duration = Duration::from_secs(60);
/// How bprun stamps a release description.
pub const DIGEST_PREFIX: &str = "bprun digest ";
/// The chart cache, under the repository root.
pub const CHART_CACHE: &str = "infra/helm-charts";
/// The version pins, under the repository root (the image pins' module owns the name, as it
/// reads the same file and helm reads its images).
pub use crate::image_pins::VERSIONS_FILE;

/// The helm program: `HELM_BIN` when set, else `helm` from PATH.
pub fn program() -> String {
    std::env::var("HELM_BIN")
        .ok()
        .filter(|bin| !bin.trim().is_empty())
        .unwrap_or_else(|| "helm".to_string())
}

/// One release as `helm history --max 1` describes its latest revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    pub revision: i64,
    pub status: String,
    /// `name-version`, as helm shows it.
    pub chart: String,
    pub app_version: String,
    pub updated: String,
    pub description: String,
}

impl Release {
    /// The digest bprun stamped on this revision, if bprun installed it.
    pub fn digest(&self) -> Option<&str> {
        self.description.strip_prefix(DIGEST_PREFIX).map(str::trim)
    }
}

/// One entry of `helm history -o json` (every field may be missing).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HistoryEntry {
    revision: i64,
    updated: String,
    status: String,
    chart: String,
    app_version: String,
    description: String,
}

/// One entry of `helm list -o json` (every field may be missing).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListEntry {
    name: String,
    namespace: String,
    revision: Value,
    updated: String,
    status: String,
    chart: String,
    app_version: String,
}

/// What `helm lint` said.
#[derive(Debug, Clone, PartialEq)]
pub struct Lint {
    pub ok: bool,
    pub messages: Vec<String>,
}

/// Where a chart comes from, which decides what goes into the digest.
#[derive(Debug, Clone, PartialEq)]
pub enum ChartSource {
    /// A chart folder under the repository root: its Chart.yaml and every file count.
    Dir(PathBuf),
    /// A packaged chart (`.tgz`) under the repository root: its bytes count.
    Archive(PathBuf),
    /// `repo/chart`, `oci://...` or a URL: the reference and the version count.
    Remote(String),
}

/// A chart argument resolved against the repository root.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartRef {
    /// What helm is given (relative to the root, where helm runs).
    pub arg: String,
    pub source: ChartSource,
}

/// Resolves `chart`: a path that exists under the root is local, `repo/chart`, `oci://` and URLs
/// are remote, anything else is an error naming the chart.
pub fn resolve_chart(files: &Confinement, chart: &str) -> Result<ChartRef, ClientError> {
    let remote_scheme = ["oci://", "http://", "https://"]
        .iter()
        .any(|scheme| chart.starts_with(scheme));
    if remote_scheme {
        return Ok(ChartRef {
            arg: chart.to_string(),
            source: ChartSource::Remote(chart.to_string()),
        });
    }
    let resolved = files.resolve(chart);
    match resolved {
        Ok(path) if path.is_dir() => Ok(ChartRef {
            arg: files.display(&path),
            source: ChartSource::Dir(path),
        }),
        Ok(path) if path.is_file() => Ok(ChartRef {
            arg: files.display(&path),
            source: ChartSource::Archive(path),
        }),
        _ if chart.split('/').count() == 2
            && !chart.starts_with('.')
            && !chart.starts_with('/') =>
        {
            Ok(ChartRef {
                arg: chart.to_string(),
                source: ChartSource::Remote(chart.to_string()),
            })
        }
        Err(error) => Err(
            ClientError::new(format!("chart {chart}: {}", error.message))
                .with_hint(error.hint.unwrap_or_default()),
        ),
        Ok(_) => Err(ClientError::new(format!(
            "chart {chart} is neither a folder nor a file under the repository root"
        ))
        .with_hint(
            "give a chart folder (apps/redis/helm-chart), a cached archive \
             (infra/helm-charts/<name>-<version>.tgz), repo/chart or an oci:// reference",
        )),
    }
}

#[derive(Debug, Deserialize)]
struct ChartYaml {
    name: String,
    version: String,
}

/// `name` and `version` of a chart folder's Chart.yaml.
pub fn chart_yaml(dir: &Path, shown: &str) -> Result<(String, String), ClientError> {
    let path = dir.join("Chart.yaml");
    let shown = format!("{shown}/Chart.yaml");
    let text = std::fs::read_to_string(&path).map_err(|error| {
        ClientError::new(format!("cannot read {shown}: {error}"))
            .with_hint("a chart folder holds a Chart.yaml with name and version")
    })?;
    parse_chart_yaml(&text, &shown)
}

/// A YAML error as `file:line:col: message`.
fn yaml_error_at(error: &serde_norway::Error, shown: &str) -> String {
    let at = error
        .location()
        .map(|l| format!("{shown}:{}:{}", l.line(), l.column()))
        .unwrap_or_else(|| shown.to_string());
    format!("{at}: {}", strip_location(&error.to_string()))
}

fn parse_chart_yaml(text: &str, shown: &str) -> Result<(String, String), ClientError> {
    let chart: ChartYaml = serde_norway::from_str(text).map_err(|error| {
        ClientError::new(yaml_error_at(&error, shown))
            .with_hint("Chart.yaml needs at least name and version")
    })?;
    Ok((chart.name, chart.version))
}

/// Every file of a chart folder, by path relative to it, sorted (`.git` left out).
pub fn chart_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, ClientError> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_dir() || (kind.is_symlink() && path.is_dir()) {
                walk(base, &path, out)?;
            } else {
                let relative = path
                    .strip_prefix(base)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| path.display().to_string());
                out.push((relative, std::fs::read(&path)?));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files).map_err(|error| {
        ClientError::new(format!("cannot read chart {}: {error}", dir.display()))
            .with_hint("check the chart folder's permissions")
    })?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// serde's ` at line L column C` suffix removed (the location is given once, as file:line:col).
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(index) => message[..index].to_string(),
        None => message.to_string(),
    }
}

/// A values file (YAML) as JSON; an empty file is `{}`.
pub fn read_values_file(path: &Path, shown: &str) -> Result<Value, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        ClientError::new(format!("cannot read values file {shown}: {error}"))
            .with_hint("values_files are paths under the repository root")
    })?;
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let value: Value = serde_norway::from_str(&text).map_err(|error| {
        ClientError::new(yaml_error_at(&error, shown))
            .with_hint("a values file is a YAML map with string keys")
    })?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        _ => Err(
            ClientError::new(format!("{shown}: a values file must be a map"))
                .with_hint("write `key: value` pairs at the top level"),
        ),
    }
}

/// Merges `over` into `base` the way helm merges values: maps merge key by key, anything else
/// replaces, and `null` deletes the key.
///
/// Not RFC 7386 (`json_patch::merge`): a value that is new to `base` is taken as it is, nulls
/// inside it included, because the merged values go to helm in a file and a null there is how a
/// chart default gets removed; a merge patch would drop those nulls on the way.
pub fn merge_values(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                if value.is_null() {
                    base.remove(&key);
                    continue;
                }
                match base.get_mut(&key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge_values(existing, value)
                    }
                    _ => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// JSON with object keys sorted at every level: the same values always give the same text.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*key).clone()).to_string());
                out.push(':');
                if let Some(item) = map.get(*key) {
                    write_canonical(item, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// What the digest is computed over.
#[derive(Debug, Clone, Default)]
pub struct DigestInput {
    pub chart_name: String,
    pub chart_version: String,
    /// The chart's files (local charts), or the archive's bytes as one file.
    pub files: Vec<(String, Vec<u8>)>,
    /// The merged values (values files, then the script's values).
    pub values: Value,
}

/// sha256 (hex) over the chart identity, its files and the canonical JSON of the values.
pub fn digest(input: &DigestInput) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"bprun-helm-digest-v1\0");
    for part in [&input.chart_name, &input.chart_version] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update((input.files.len() as u64).to_le_bytes());
    for (path, bytes) in &input.files {
        hasher.update((path.len() as u64).to_le_bytes());
        hasher.update(path.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    let values = canonical_json(&input.values);
    hasher.update((values.len() as u64).to_le_bytes());
    hasher.update(values.as_bytes());
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A values file only its owner can read, removed when dropped: how the script's values (which
/// may hold secrets) reach helm without touching its command line.
#[derive(Debug)]
pub struct TempValues {
    path: PathBuf,
}

impl TempValues {
    pub fn write(values: &Value) -> Result<TempValues, ClientError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::env::temp_dir();
        let mut last_error = None;
        for _ in 0..8 {
            let path = dir.join(format!(
                "bprun-helm-values-{}-{:016x}.json",
                std::process::id(),
                fastrand::u64(..)
            ));
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match opened {
                Ok(mut file) => {
                    let temp = TempValues { path };
                    let text = serde_json::to_string(values).map_err(|error| {
                        ClientError::new(format!("cannot write helm values: {error}"))
                    })?;
                    file.write_all(text.as_bytes())
                        .and_then(|()| file.sync_all())
                        .map_err(|error| {
                            ClientError::new(format!(
                                "cannot write {}: {error}",
                                temp.path.display()
                            ))
                            .with_hint(
                                "check the free space and permissions of the temporary folder",
                            )
                        })?;
                    return Ok(temp);
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    last_error = Some(error)
                }
                Err(error) => {
                    last_error = Some(error);
                    break;
                }
            }
        }
        Err(ClientError::new(format!(
            "cannot create a temporary values file in {}: {}",
            dir.display(),
            last_error.map(|e| e.to_string()).unwrap_or_default()
        ))
        .with_hint("set TMPDIR to a writable folder"))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempValues {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What `helm upgrade --install` is run with.
#[derive(Debug, Clone, Default)]
pub struct InstallSpec {
    pub release: String,
    pub chart: String,
    pub namespace: String,
    pub version: Option<String>,
    /// `-f` arguments in order (values files, then the temporary file of the script's values).
    pub values_files: Vec<String>,
    pub wait: bool,
    pub timeout: Duration,
    pub create_namespace: bool,
    pub digest: String,
    /// A failed upgrade rolls back to the revision before it (helm 4's
    /// `--rollback-on-failure`, helm 3's `--atomic`).
    pub rollback_on_failure: bool,
}

/// The outcome of an upgrade.
#[derive(Debug, Clone, PartialEq)]
pub struct Installed {
    pub revision: i64,
    pub status: String,
    pub chart: String,
}

/// Runs helm from the repository root.
pub struct Helm {
    program: String,
    root: PathBuf,
    cancel: Arc<AtomicBool>,
    /// The kubeconfig context (`--kube-context`), given to helm as HELM_KUBECONTEXT so helm
    /// and the Kubernetes natives talk to the same cluster.
    pub kube_context: Option<String>,
    /// The cluster helm stores its releases in, reached only to unlock a release a killed run
    /// left pending (connected on first use: most runs never need it).
    pub storage: Option<StorageAccess>,
}

/// How the helm client reaches the cluster holding helm's release records.
pub type StorageAccess =
    Arc<dyn Fn() -> Result<Arc<crate::kube::KubeClient>, ClientError> + Send + Sync>;

/// One argument as it appears in a shown command line.
fn shell_word(arg: &str) -> String {
    if arg.is_empty()
        || arg
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '"')
    {
        format!("'{}'", arg.replace('\'', "'\\''"))
    } else {
        arg.to_string()
    }
}

/// The command as shown in messages: `helm` and its arguments, secrets redacted.
pub fn command_line(args: &[String]) -> String {
    let mut words = vec!["helm".to_string()];
    words.extend(args.iter().map(|arg| shell_word(arg)));
    scrub(&words.join(" "))
}

/// helm's message, for an error: stderr (else stdout), trimmed to its last lines.
fn helm_message(output: &ProcessOutput) -> String {
    let text = if output.stderr.trim().is_empty() {
        &output.stdout
    } else {
        &output.stderr
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let start = lines.len().saturating_sub(20);
    lines[start..].join("\n")
}

/// Whether helm's own words say it ran out of time (helm reports nothing but text).
fn helm_timed_out(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("timed out") || lower.contains("context deadline exceeded")
}

/// The hint for helm's message, and the way out where the caller has a call for it.
fn hint_for(message: &str) -> (String, Option<Remedy>) {
    let lower = message.to_lowercase();
    let hint = if lower.contains("another operation") {
        "another helm may be at work on this release (no killed bprun run here left it \
         pending); when none is, look at `helm history` and roll back or uninstall the release"
    } else if lower.contains("kubernetes cluster unreachable")
        || lower.contains("connection refused")
        || lower.contains("no configuration has been provided")
    {
        "helm cannot reach the cluster: check KUBECONFIG and that the cluster is up"
    } else if lower.contains("parse error")
        || lower.contains("template:")
        || lower.contains("yaml:")
    {
        "the chart does not render; run `helm lint` and `helm template` on it to see the failing \
         template"
    } else if helm_timed_out(message) {
        "the release's resources did not become ready in time; raise the timeout or look at the \
         pods of the namespace"
    } else if lower.contains("not found") && lower.contains("chart") {
        return (
            "check the chart reference and version (infra/VERSIONS.json), or pull the chart again"
                .to_string(),
            Some(Remedy::PullChart),
        );
    } else {
        "helm's message is shown above; run the command by hand with --debug to investigate"
    };
    (hint.to_string(), None)
}

fn is_not_found(output: &ProcessOutput) -> bool {
    let text = format!("{}{}", output.stderr, output.stdout).to_lowercase();
    text.contains("release: not found")
}

/// A release revision as helm's storage holds it, in `helm history`'s terms (`chart` is
/// `name-version`, `updated` the last deployment's time as helm writes it).
fn release_from_record(release: &str, namespace: &str, record: &Value) -> Release {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let metadata = &record["chart"]["metadata"];
    Release {
        name: release.to_string(),
        namespace: namespace.to_string(),
        revision: record["version"].as_i64().unwrap_or(0),
        status: text(&record["info"]["status"]),
        chart: match (metadata["name"].as_str(), metadata["version"].as_str()) {
            (Some(name), Some(version)) => format!("{name}-{version}"),
            _ => String::new(),
        },
        app_version: text(&metadata["appVersion"]),
        updated: text(&record["info"]["last_deployed"]),
        description: text(&record["info"]["description"]),
    }
}

/// Notes that bprun runs `helm args` now (its pid and the command, no secret: values reach
/// helm in files).
fn note_in_flight(marker: &Path, args: &[String]) -> Result<(), ClientError> {
    let note = format!("{} {}\n", std::process::id(), command_line(args));
    marker
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(marker, note))
        .map_err(|error| {
            ClientError::new(format!("cannot write {}: {error}", marker.display()))
                .with_hint("bprun notes each helm upgrade it runs under .bprun/helm/; check that folder's permissions")
        })
}

/// `helm ...` whole seconds for `--timeout`.
fn helm_duration(timeout: Duration) -> String {
    format!("{}s", timeout.as_secs_f64().ceil() as u64)
}

impl Helm {
    pub fn new(root: impl Into<PathBuf>, cancel: Arc<AtomicBool>) -> Helm {
        Helm {
            program: program(),
            root: root.into(),
            cancel,
            kube_context: None,
            storage: None,
        }
    }

    /// Runs helm; output is scrubbed. A non-zero exit is returned, not an error.
    pub fn run(&self, args: &[String], timeout: Duration) -> Result<ProcessOutput, ClientError> {
        let spec = ProcessSpec {
            program: self.program.clone(),
            args: args.to_vec(),
            cwd: Some(self.root.clone()),
            timeout,
            env: self
                .kube_context
                .iter()
                .map(|context| ("HELM_KUBECONTEXT".to_string(), context.clone()))
                .collect(),
            ..ProcessSpec::default()
        };
        let mut output = run(&spec, &self.cancel).map_err(|error| {
            let command = command_line(args);
            let hint = if error.kind == ErrorKind::ProgramMissing {
                "install helm (v3 or v4) on PATH, or set HELM_BIN to its path".to_string()
            } else {
                error.hint.clone().unwrap_or_default()
            };
            ClientError::new(format!("{} (running `{command}`)", scrub(&error.message)))
                .with_hint(hint)
                .with_kind(error.kind)
        })?;
        output.stdout = scrub(&output.stdout);
        output.stderr = scrub(&output.stderr);
        Ok(output)
    }

    /// The error for a helm command that exited non-zero.
    pub fn failure(args: &[String], output: &ProcessOutput) -> ClientError {
        let message = helm_message(output);
        let (hint, remedy) = hint_for(&message);
        let mut error = ClientError::new(format!(
            "`{}` exited with code {}",
            command_line(args),
            output.code
        ));
        if helm_timed_out(&message) {
            error = error.with_kind(ErrorKind::Timeout);
        }
        if !message.is_empty() {
            error = error.caused_by(message);
        }
        if let Some(remedy) = remedy {
            error = error.with_remedy(remedy);
        }
        error.with_hint(hint)
    }

    /// Runs helm and returns stdout, or the failure.
    /// helm's major version (`helm version --short`: `v4.1.4+g05fa379` -> 4).
    pub fn major_version(&self) -> Result<u32, ClientError> {
        let short = self.run_ok(&strings(&["version", "--short"]), Duration::from_secs(30))?;
        short
            .trim()
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|major| major.parse().ok())
            .ok_or_else(|| {
                ClientError::new(format!(
                    "`{} version --short` said {:?}, not a version",
                    self.program,
                    short.trim()
                ))
            })
    }

    fn run_ok(&self, args: &[String], timeout: Duration) -> Result<String, ClientError> {
        let output = self.run(args, timeout)?;
        if output.code != 0 {
            return Err(Self::failure(args, &output));
        }
        Ok(output.stdout)
    }

    /// Where bprun notes a helm upgrade it started on `namespace/release` and has not seen
    /// end (`.bprun/helm/<namespace>.<release>.in-flight`; a namespace has no dot).
    pub fn in_flight_marker(&self, namespace: &str, release: &str) -> PathBuf {
        self.root
            .join(".bprun")
            .join("helm")
            .join(format!("{namespace}.{release}.in-flight"))
    }

    /// Marks `pending` (a revision a killed run's helm left pending) failed in helm's storage,
    /// so helm upgrades over it instead of refusing "another operation ... is in progress".
    fn unlock(&self, pending: &Release) -> Result<(), ClientError> {
        let storage = self.storage.as_ref().ok_or_else(|| {
            ClientError::new(format!(
                "helm release {}/{} is {}, left by an interrupted run, and this helm client cannot reach helm's storage to release it",
                pending.namespace, pending.name, pending.status
            ))
        })?;
        storage()?.unlock_pending_release(
            &pending.namespace,
            &pending.name,
            pending.revision,
            &format!(
                "{} by an interrupted bprun run; marked failed by the next",
                pending.status
            ),
            crate::reconcile::Mode::Apply,
        )?;
        Ok(())
    }

    /// The latest revision of `release` in `namespace`, or `None` when there is no such release.
    /// Read from helm's storage Secrets when helm keeps its releases there (its default) and
    /// the cluster is reachable: the same record `helm history` reads, without a helm process.
    pub fn status(&self, release: &str, namespace: &str) -> Result<Option<Release>, ClientError> {
        let in_secrets = matches!(
            std::env::var("HELM_DRIVER").unwrap_or_default().as_str(),
            "" | "secret" | "secrets"
        );
        let storage = self
            .storage
            .as_ref()
            .filter(|_| in_secrets)
            .and_then(|storage| storage().ok());
        if let Some(storage) = storage {
            let latest = storage.helm_release_latest(namespace, release)?;
            return Ok(latest.map(|record| release_from_record(release, namespace, &record)));
        }
        self.status_from_helm(release, namespace)
    }

    /// `status` as `helm history --max 1` reports it.
    fn status_from_helm(
        &self,
        release: &str,
        namespace: &str,
    ) -> Result<Option<Release>, ClientError> {
        let args = strings(&[
            "history", release, "-n", namespace, "--max", "1", "-o", "json",
        ]);
        let output = self.run(&args, READ_TIMEOUT)?;
        if output.code != 0 {
            if is_not_found(&output) {
                return Ok(None);
            }
            return Err(Self::failure(&args, &output));
        }
        let entries: Vec<HistoryEntry> = serde_json::from_str(&output.stdout).map_err(|error| {
            ClientError::new(format!(
                "cannot read the output of `{}`: {error}",
                command_line(&args)
            ))
            .with_hint("is this helm v3 or v4?")
        })?;
        Ok(entries
            .into_iter()
            .max_by_key(|entry| entry.revision)
            .map(|entry| Release {
                name: release.to_string(),
                namespace: namespace.to_string(),
                revision: entry.revision,
                status: entry.status,
                chart: entry.chart,
                app_version: entry.app_version,
                updated: entry.updated,
                description: entry.description,
            }))
    }

    /// The values a release was installed with (`helm get values`: what the user supplied, not
    /// the chart's defaults); `None` when the release does not exist.
    pub fn user_values(
        &self,
        release: &str,
        namespace: &str,
    ) -> Result<Option<Value>, ClientError> {
        let args = strings(&["get", "values", release, "-n", namespace, "-o", "json"]);
        let output = self.run(&args, READ_TIMEOUT)?;
        if output.code != 0 {
            if is_not_found(&output) {
                return Ok(None);
            }
            return Err(Self::failure(&args, &output));
        }
        let text = output.stdout.trim();
        if text.is_empty() || text == "null" {
            return Ok(Some(Value::Object(serde_json::Map::new())));
        }
        serde_json::from_str(text).map(Some).map_err(|error| {
            ClientError::new(format!(
                "cannot read the output of `{}`: {error}",
                command_line(&args)
            ))
        })
    }

    /// The manifest a release deployed (`helm get manifest`); `None` when it does not exist.
    pub fn manifest(&self, release: &str, namespace: &str) -> Result<Option<String>, ClientError> {
        let args = strings(&["get", "manifest", release, "-n", namespace]);
        let output = self.run(&args, READ_TIMEOUT)?;
        if output.code != 0 {
            if is_not_found(&output) {
                return Ok(None);
            }
            return Err(Self::failure(&args, &output));
        }
        Ok(Some(output.stdout))
    }

    /// The chart name and version of a release (`helm get metadata`), when helm can tell.
    pub fn chart_of(&self, release: &str, namespace: &str) -> Option<(String, String)> {
        let args = strings(&["get", "metadata", release, "-n", namespace, "-o", "json"]);
        let output = self.run(&args, READ_TIMEOUT).ok()?;
        if output.code != 0 {
            return None;
        }
        let value: Value = serde_json::from_str(&output.stdout).ok()?;
        Some((
            value["chart"].as_str()?.to_string(),
            value["version"].as_str()?.to_string(),
        ))
    }

    /// Releases of one namespace, or of all when `namespace` is `None`: deployed, failed, pending
    /// or uninstalling (flags both helm v3 and v4 know).
    pub fn list(&self, namespace: Option<&str>) -> Result<Vec<Release>, ClientError> {
        let mut args = strings(&[
            "list",
            "-o",
            "json",
            "--deployed",
            "--failed",
            "--pending",
            "--uninstalling",
        ]);
        match namespace {
            Some(namespace) => args.extend(strings(&["-n", namespace])),
            None => args.push("-A".to_string()),
        }
        let stdout = self.run_ok(&args, READ_TIMEOUT)?;
        let entries: Vec<ListEntry> = serde_json::from_str(&stdout).map_err(|error| {
            ClientError::new(format!(
                "cannot read the output of `{}`: {error}",
                command_line(&args)
            ))
        })?;
        Ok(entries
            .into_iter()
            .map(|entry| Release {
                name: entry.name,
                namespace: entry.namespace,
                revision: match &entry.revision {
                    Value::Number(number) => number.as_i64().unwrap_or(0),
                    Value::String(text) => text.parse().unwrap_or(0),
                    _ => 0,
                },
                status: entry.status,
                chart: entry.chart,
                app_version: entry.app_version,
                updated: entry.updated,
                description: String::new(),
            })
            .collect())
    }

    /// `helm upgrade --install`, stamped with the digest.
    pub fn upgrade_install(&self, spec: &InstallSpec) -> Result<Installed, ClientError> {
        let mut args = strings(&[
            "upgrade",
            "--install",
            &spec.release,
            &spec.chart,
            "-n",
            &spec.namespace,
            "--description",
            &format!("{DIGEST_PREFIX}{}", spec.digest),
            "--timeout",
            &helm_duration(spec.timeout),
            "-o",
            "json",
        ]);
        if let Some(version) = &spec.version {
            args.extend(strings(&["--version", version]));
        }
        for file in &spec.values_files {
            args.extend(strings(&["-f", file]));
        }
        if spec.wait {
            args.push("--wait".to_string());
        }
        if spec.create_namespace {
            args.push("--create-namespace".to_string());
        }
        if spec.rollback_on_failure {
            // helm 4 renamed the flag; each major knows only its own.
            let flag = if self.major_version()? >= 4 {
                "--rollback-on-failure"
            } else {
                "--atomic"
            };
            args.push(flag.to_string());
        }
        // Noted while helm runs: a run killed meanwhile (its helm dies with it) leaves the
        // note, which tells the next run that a pending revision is its own, not a live one.
        let marker = self.in_flight_marker(&spec.namespace, &spec.release);
        note_in_flight(&marker, &args)?;
        let ran = self.run(&args, spec.timeout + MARGIN);
        if ran.is_ok() {
            // helm ended by itself: whatever it said, its revision is no longer pending.
            let _ = std::fs::remove_file(&marker);
        }
        let output = ran?;
        if output.code != 0 {
            return Err(Self::failure(&args, &output));
        }
        let stdout = output.stdout;
        // helm may print notes or warnings before the JSON document.
        let json = stdout.find('{').map(|start| &stdout[start..]).unwrap_or("");
        match serde_json::from_str::<Value>(json) {
            Ok(value) => Ok(Installed {
                revision: value["version"].as_i64().unwrap_or(0),
                status: value["info"]["status"].as_str().unwrap_or("").to_string(),
                chart: match (
                    value["chart"]["metadata"]["name"].as_str(),
                    value["chart"]["metadata"]["version"].as_str(),
                ) {
                    (Some(name), Some(version)) => format!("{name}-{version}"),
                    _ => String::new(),
                },
            }),
            Err(_) => {
                let release = self.status(&spec.release, &spec.namespace)?;
                let release = release.unwrap_or_default();
                Ok(Installed {
                    revision: release.revision,
                    status: release.status,
                    chart: release.chart,
                })
            }
        }
    }

    /// `helm uninstall`.
    pub fn uninstall(
        &self,
        release: &str,
        namespace: &str,
        wait: bool,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let mut args = strings(&[
            "uninstall",
            release,
            "-n",
            namespace,
            "--timeout",
            &helm_duration(timeout),
        ]);
        if wait {
            args.push("--wait".to_string());
        }
        self.run_ok(&args, timeout + MARGIN).map(|_| ())
    }

    /// `helm template`: the rendered manifests.
    pub fn template(
        &self,
        release: &str,
        chart: &str,
        namespace: &str,
        version: Option<&str>,
        values_files: &[String],
    ) -> Result<String, ClientError> {
        let mut args = strings(&["template", release, chart, "-n", namespace]);
        if let Some(version) = version {
            args.extend(strings(&["--version", version]));
        }
        for file in values_files {
            args.extend(strings(&["-f", file]));
        }
        self.run_ok(&args, READ_TIMEOUT)
    }

    /// `helm lint`: a failing lint is a result, not an error.
    pub fn lint(
        &self,
        chart: &str,
        strict: bool,
        values_files: &[String],
    ) -> Result<Lint, ClientError> {
        let mut args = strings(&["lint", chart]);
        if strict {
            args.push("--strict".to_string());
        }
        for file in values_files {
            args.extend(strings(&["-f", file]));
        }
        let output = self.run(&args, READ_TIMEOUT)?;
        let messages = output
            .stdout
            .lines()
            .chain(output.stderr.lines())
            .map(str::trim)
            .filter(|line| line.starts_with('[') || line.starts_with("Error:"))
            .filter(|line| !line.starts_with("Error: 1 chart(s) linted"))
            .map(str::to_string)
            .collect();
        Ok(Lint {
            ok: output.code == 0,
            messages,
        })
    }

    /// `name` and `version` of a remote chart (`helm show chart`), for charts given without a version.
    pub fn show_chart(
        &self,
        chart: &str,
        version: Option<&str>,
    ) -> Result<(String, String), ClientError> {
        let mut args = strings(&["show", "chart", chart]);
        if let Some(version) = version {
            args.extend(strings(&["--version", version]));
        }
        let stdout = self.run_ok(&args, READ_TIMEOUT)?;
        parse_chart_yaml(&stdout, &format!("`{}`", command_line(&args)))
    }

    /// `helm pull` of `chart` at `version` from `url` into `destination` (a folder).
    pub fn pull(
        &self,
        url: &str,
        chart: &str,
        version: &str,
        destination: &str,
    ) -> Result<(), ClientError> {
        let args = if url.starts_with("oci://") {
            strings(&[
                "pull",
                &format!("{}/{chart}", url.trim_end_matches('/')),
                "--version",
                version,
                "--destination",
                destination,
            ])
        } else {
            strings(&[
                "pull",
                chart,
                "--repo",
                url,
                "--version",
                version,
                "--destination",
                destination,
            ])
        };
        self.run_ok(&args, DEFAULT_HELM_TIMEOUT).map(|_| ())
    }
}

impl Helm {
    /// Pulls a pinned chart into `target` (`infra/helm-charts/<chart>-<version>.tgz`): helm
    /// downloads into a private folder next to it, and the archive is renamed into place, so an
    /// interrupted pull never leaves a partial file in the cache.
    pub fn pull_to(&self, pin: &ChartPin, target: &Path) -> Result<(), ClientError> {
        let dir = target.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|error| {
            ClientError::new(format!("cannot create {}: {error}", dir.display()))
                .with_hint("check the permissions of infra/")
        })?;
        let staging = dir.join(format!(
            ".pull-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        struct Cleanup<'a>(&'a Path);
        impl Drop for Cleanup<'_> {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(self.0);
            }
        }
        std::fs::create_dir(&staging).map_err(|error| {
            ClientError::new(format!("cannot create {}: {error}", staging.display()))
        })?;
        let _cleanup = Cleanup(&staging);
        let shown = crate::fs::relative_display(&self.root, &staging);
        self.pull(&pin.url, &pin.chart, &pin.chart_version, &shown)?;
        let archives: Vec<PathBuf> = std::fs::read_dir(&staging)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|entry| entry.path())
                    .filter(|path| path.extension().is_some_and(|ext| ext == "tgz"))
                    .collect()
            })
            .unwrap_or_default();
        let [archive] = archives.as_slice() else {
            return Err(ClientError::new(format!(
                "helm pull of {} {} left {} archives instead of one",
                pin.chart,
                pin.chart_version,
                archives.len()
            ))
            .with_hint("check the chart name and version in infra/VERSIONS.json"));
        };
        std::fs::rename(archive, target).map_err(|error| {
            ClientError::new(format!(
                "cannot move the pulled chart to {}: {error}",
                target.display()
            ))
        })
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| arg.to_string()).collect()
}

/// One chart pin of infra/VERSIONS.json (`helm_repositories.<key>`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChartPin {
    /// The repository's usual name (`helm repo add <name> <url>`).
    #[serde(default)]
    pub name: Option<String>,
    pub url: String,
    pub chart: String,
    pub chart_version: String,
    #[serde(default)]
    pub release: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub values_overrides: Option<serde_json::Map<String, Value>>,
    /// The chart's images read from VERSIONS.json's `images`: a values path (`image`) to the
    /// pin it takes (`redis-chart`), merged into `values_overrides` as `{repository, tag}` (and
    /// `digest` when known) by [`parse_versions`].
    #[serde(default)]
    pub images: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub note: Option<String>,
    /// The SHA-256 of the archive in the chart cache (vendored charts are pinned by it).
    #[serde(default)]
    pub sha256: Option<String>,
}

impl ChartPin {
    /// Where helm_pull caches it, relative to the repository root.
    pub fn cache_path(&self) -> String {
        format!("{CHART_CACHE}/{}-{}.tgz", self.chart, self.chart_version)
    }

    /// Checks the cached archive at `path` against the pinned SHA-256 (no pin: nothing to
    /// check). A mismatch names both digests.
    pub fn verify(&self, path: &Path) -> Result<(), ClientError> {
        let Some(pinned) = &self.sha256 else {
            return Ok(());
        };
        let bytes = std::fs::read(path).map_err(|error| {
            ClientError::new(format!("cannot read {}: {error}", self.cache_path()))
        })?;
        let actual = crate::digest::sha256_hex(&bytes);
        if actual.eq_ignore_ascii_case(pinned) {
            return Ok(());
        }
        Err(ClientError::new(format!(
            "{} has SHA-256 {actual}, but {VERSIONS_FILE} pins {pinned}",
            self.cache_path()
        ))
        .with_kind(ErrorKind::Invalid)
        .with_hint(format!(
            "the archive is not the pinned {} {}: restore it (git checkout -- {}) or delete it and pull the chart again",
            self.chart,
            self.chart_version,
            self.cache_path()
        ))
        .with_remedy(Remedy::PullPinnedChart {
            chart: self.chart.clone(),
            version: self.chart_version.clone(),
            path: self.cache_path(),
        }))
    }
}

/// The pin whose cache archive is `relative` (`infra/helm-charts/redis-19.6.4.tgz`), if any.
pub fn pin_for_archive<'a>(
    pins: &'a std::collections::BTreeMap<String, ChartPin>,
    relative: &str,
) -> Option<&'a ChartPin> {
    pins.values().find(|pin| pin.cache_path() == relative)
}

#[derive(Debug, Clone, Deserialize)]
struct VersionsShape {
    helm_repositories: BTreeMap<String, ChartPin>,
}

/// infra/VERSIONS.json, parsed and checked: the whole document (for scripts) and the chart pins.
pub fn parse_versions(
    text: &str,
    shown: &str,
) -> Result<(Value, BTreeMap<String, ChartPin>), ClientError> {
    let located = |error: serde_json::Error, hint: &str| {
        ClientError::new(format!(
            "{shown}:{}:{}: {}",
            error.line(),
            error.column(),
            strip_location(&error.to_string())
        ))
        .with_hint(hint.to_string())
    };
    let document: Value = serde_json::from_str(text).map_err(|error| {
        located(
            error,
            "the file must be valid JSON (no trailing commas, no comments)",
        )
    })?;
    let shape: VersionsShape = serde_json::from_str(text).map_err(|error| {
        located(
            error,
            "helm_repositories maps a key to #{url, chart, chart_version} and optionally name, \
             release, namespace, values_overrides, images and note",
        )
    })?;
    for (key, pin) in &shape.helm_repositories {
        for (field, value) in [
            ("url", &pin.url),
            ("chart", &pin.chart),
            ("chart_version", &pin.chart_version),
        ] {
            if value.trim().is_empty() {
                return Err(ClientError::new(format!(
                    "{shown}: helm_repositories.{key}.{field} is empty"
                ))
                .with_hint("every chart pin names its repository url, chart and exact version"));
            }
        }
    }
    let mut repositories = shape.helm_repositories;
    if repositories.values().any(|pin| pin.images.is_some()) {
        let image_pins = crate::image_pins::pins(&document)?;
        for (key, pin) in repositories.iter_mut() {
            if let Some(images) = &pin.images {
                let values = pin.values_overrides.get_or_insert_with(Default::default);
                crate::image_pins::chart_overrides(key, images, &image_pins, values)?;
            }
        }
    }
    Ok((document, repositories))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_follows_helm_rules() {
        let mut base = json!({"a": {"b": 1, "c": 2}, "d": [1], "e": 1});
        merge_values(&mut base, json!({"a": {"c": 3}, "d": [2], "e": null}));
        assert_eq!(base, json!({"a": {"b": 1, "c": 3}, "d": [2]}));
    }

    #[test]
    fn canonical_json_sorts_keys_everywhere() {
        let value = json!({"b": [{"z": 1, "a": 2}], "a": "x"});
        assert_eq!(canonical_json(&value), r#"{"a":"x","b":[{"a":2,"z":1}]}"#);
    }

    #[test]
    fn digest_depends_on_values_and_chart() {
        let input = DigestInput {
            chart_name: "redis".into(),
            chart_version: "0.1.0".into(),
            files: vec![("Chart.yaml".into(), b"name: redis".to_vec())],
            values: json!({"a": 1, "b": 2}),
        };
        let same = DigestInput {
            values: json!({"b": 2, "a": 1}),
            ..input.clone()
        };
        let other = DigestInput {
            values: json!({"a": 2, "b": 2}),
            ..input.clone()
        };
        let bumped = DigestInput {
            chart_version: "0.1.1".into(),
            ..input.clone()
        };
        assert_eq!(digest(&input), digest(&same));
        assert_ne!(digest(&input), digest(&other));
        assert_ne!(digest(&input), digest(&bumped));
        assert_eq!(digest(&input).len(), 64);
    }

    #[test]
    fn versions_errors_have_file_line_and_column() {
        let error = parse_versions("{\n  \"helm_repositories\": {,\n}", "infra/VERSIONS.json")
            .expect_err("malformed");
        assert!(
            error.message.starts_with("infra/VERSIONS.json:2:25: "),
            "{}",
            error.message
        );
        let missing = parse_versions(
            "{\"helm_repositories\": {\"redis\": {\"url\": \"u\", \"chart\": \"redis\"}}}",
            "V.json",
        )
        .expect_err("missing version");
        assert!(
            missing.message.contains("missing field `chart_version`"),
            "{}",
            missing.message
        );
    }

    #[test]
    fn commands_are_shown_quoted() {
        assert_eq!(
            command_line(&strings(&["upgrade", "--description", "bprun digest ab"])),
            "helm upgrade --description 'bprun digest ab'"
        );
    }

    #[test]
    fn temporary_values_are_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let temp = TempValues::write(&json!({"password": "x"})).expect("write");
        let path = temp.path().to_path_buf();
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(temp);
        assert!(!path.exists());
    }
}
