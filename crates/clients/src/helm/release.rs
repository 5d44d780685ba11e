//! A release as a script wants it, reconciled: its merged values checked against a schema first,
//! then installed, upgraded or left alone by the digest of its chart and values; its `--diff`
//! the values and manifests it changes. Also the chart pulls, renders and uninstalls, which
//! decide the same way.
//!
//! Errors a caller heads with its own name carry the operation (`install`, `template`; see
//! [`ClientError::in_operation`]); the others stand alone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{
    ChartPin, ChartRef, ChartSource, DigestInput, Helm, InstallSpec, Release, TempValues,
    VERSIONS_FILE,
};
use crate::error::ClientError;
use crate::fs::Confinement;
use crate::reconcile::{Change, Detail, Mode, Outcome, TextDiff};

/// A release as a script asks for it.
#[derive(Debug, Clone)]
pub struct ReleaseSpec {
    pub release: String,
    pub namespace: String,
    pub chart: ChartRef,
    pub version: Option<String>,
    /// The values files in order: as shown (which is what helm is given, relative to the root)
    /// and where they are.
    pub values_files: Vec<(String, PathBuf)>,
    /// The script's values, merged last; they may hold secrets, so they reach helm in a private
    /// temporary file, never on its command line.
    pub values: Option<Value>,
    /// A JSON Schema file under the root the merged values must match before helm runs.
    pub values_schema: Option<String>,
    pub wait: bool,
    pub timeout: Duration,
    pub create_namespace: bool,
    /// A failed upgrade rolls back by itself (see `InstallSpec::rollback_on_failure`).
    pub rollback_on_failure: bool,
    /// Whether a change carries its `--diff` (three more helm runs).
    pub diff: bool,
}

/// What `ensure_release` leaves: the release's latest revision (in check mode the one before
/// the change: None when there is none) and why it changes (None: left alone).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ensured {
    pub release: Option<Release>,
    pub reason: Option<String>,
    /// In check mode, the workloads of the release (`StatefulSet/openbao`) whose pod template
    /// the upgrade changes: their controllers replace the pods, or, under `updateStrategy:
    /// OnDelete`, the old pods keep running until they are deleted. Empty otherwise.
    pub pod_templates_changed: Vec<String>,
}

/// The kinds whose pods follow a pod template (`spec.template`).
const WORKLOAD_KINDS: &[&str] = &["Deployment", "StatefulSet", "DaemonSet"];

/// The workloads of a release's `deployed` manifest whose pod template `rendered` (what the
/// chart renders now) changes, as `Kind/name`, sorted. Both are helm's own renderings, before
/// the API server's defaults, so they compare as they are; a workload new in `rendered` has no
/// pods yet and is not listed.
pub fn changed_pod_templates(deployed: &str, rendered: &str) -> Vec<String> {
    let templates = |text: &str| -> std::collections::BTreeMap<String, Value> {
        use serde::Deserialize;
        serde_norway::Deserializer::from_str(text)
            .filter_map(|document| Value::deserialize(document).ok())
            .filter(|object| WORKLOAD_KINDS.contains(&object["kind"].as_str().unwrap_or_default()))
            .filter_map(|object| {
                let name = object["metadata"]["name"].as_str()?;
                let key = format!("{}/{name}", object["kind"].as_str()?);
                Some((key, object["spec"]["template"].clone()))
            })
            .collect()
    };
    let now = templates(rendered);
    templates(deployed)
        .into_iter()
        .filter(|(key, before)| now.get(key).is_some_and(|after| after != before))
        .map(|(key, _)| key)
        .collect()
}

/// The merged values of `spec`: its values files in order, then its values, as helm merges them.
fn merged_values(spec: &ReleaseSpec) -> Result<Value, ClientError> {
    let mut merged = Value::Object(serde_json::Map::new());
    for (shown, path) in &spec.values_files {
        super::merge_values(&mut merged, super::read_values_file(path, shown)?);
    }
    if let Some(values) = &spec.values {
        super::merge_values(&mut merged, values.clone());
    }
    Ok(merged)
}

/// helm's `-f` arguments: the values files in order, then the script's values written to a
/// 0600 temporary file (kept while the returned guard lives).
fn values_args(spec: &ReleaseSpec) -> Result<(Vec<String>, Option<TempValues>), ClientError> {
    let temp = spec.values.as_ref().map(TempValues::write).transpose()?;
    let mut args: Vec<String> = spec
        .values_files
        .iter()
        .map(|(shown, _)| shown.clone())
        .collect();
    if let Some(temp) = &temp {
        args.push(temp.path().display().to_string());
    }
    Ok((args, temp))
}

/// Checks the merged values against the JSON Schema file `spec.values_schema` before helm runs:
/// a missing override key stops `operation` with every violation named. Returns the merged
/// values when it read them (None: no schema), so a caller that needs them reads them once.
fn check_values_schema(
    files: &Confinement,
    spec: &ReleaseSpec,
    operation: &'static str,
) -> Result<Option<Value>, ClientError> {
    let Some(schema_path) = &spec.values_schema else {
        return Ok(None);
    };
    let text = files.read_text(schema_path)?;
    let schema: Value = serde_json::from_str(&text).map_err(|error| {
        ClientError::new(format!(
            "{schema_path}:{}:{}: not JSON: {error}",
            error.line(),
            error.column()
        ))
        .in_operation(operation, ": ")
    })?;
    if let Some(keyword) = crate::values_schema::unsupported_keyword(&schema) {
        return Err(ClientError::new(format!(
            "{schema_path} uses {keyword}, which bprun's values check does not implement"
        ))
        .in_operation(operation, ": ")
        .with_hint("use type, required, properties, additionalProperties, items, enum, const, minLength or minimum"));
    }
    let merged = merged_values(spec).map_err(|error| error.in_operation(operation, ": "))?;
    let problems = crate::values_schema::violations(&merged, &schema);
    if problems.is_empty() {
        return Ok(Some(merged));
    }
    let shown: Vec<&str> = spec
        .values_files
        .iter()
        .map(|(shown, _)| shown.as_str())
        .collect();
    let mut error = ClientError::new(format!(
        "{}/{}: the values ({}) do not match {schema_path}",
        spec.namespace,
        spec.release,
        if shown.is_empty() {
            "the script's map".to_string()
        } else {
            shown.join(", ")
        }
    ))
    .in_operation(operation, " ")
    .with_hint("fix the values file or the override; the schema lists what the chart needs from us. Nothing was installed");
    for problem in problems {
        error = error.caused_by(problem);
    }
    Err(error)
}

/// A chart archive from the cache that `infra/VERSIONS.json` pins is installed only when its
/// SHA-256 is the pinned one (a repository without VERSIONS.json pins nothing).
pub fn verify_cached_archive(root: &Path, chart: &ChartRef) -> Result<(), ClientError> {
    let ChartSource::Archive(path) = &chart.source else {
        return Ok(());
    };
    if !root.join(VERSIONS_FILE).is_file() {
        return Ok(());
    }
    let text = Confinement::new(root).read_text(VERSIONS_FILE)?;
    let (_, pins) = super::parse_versions(&text, VERSIONS_FILE)?;
    match super::pin_for_archive(&pins, &chart.arg) {
        Some(pin) => pin.verify(path),
        None => Ok(()),
    }
}

impl Helm {
    /// `helm upgrade --install` only when something changed: the release is left alone when
    /// its latest revision is deployed and carries the digest of the same chart (name, version,
    /// files of a local chart) and merged values. In check mode it only reads. The change
    /// (`install` or `upgrade`) says why; its `--diff` shows the values and the manifests.
    pub fn ensure_release(
        &self,
        spec: &ReleaseSpec,
        mode: Mode,
    ) -> Result<Outcome<Ensured>, ClientError> {
        const OPERATION: &str = "install";
        let named = |error: ClientError| error.in_operation(OPERATION, ": ");
        let checked = check_values_schema(&Confinement::new(&self.root), spec, OPERATION)?;
        // Read once: the schema check, the digest and `--diff` all need them.
        let merged = match checked {
            Some(merged) => merged,
            None => merged_values(spec)?,
        };
        let digest = self.install_digest(spec, &merged)?;
        let current = self.status(&spec.release, &spec.namespace).map_err(named)?;
        // A pending revision that bprun's own helm left when its run was killed (that helm
        // died with it): no operation runs on it, and it is marked failed before the upgrade.
        let left_pending = current.as_ref().filter(|found| {
            found.status.starts_with("pending-")
                && self
                    .in_flight_marker(&spec.namespace, &spec.release)
                    .exists()
        });
        let reason = match &current {
            None => "not installed".to_string(),
            Some(found) if left_pending.is_some() => {
                format!("status {}, left by an interrupted run", found.status)
            }
            Some(found) if found.status != "deployed" => format!("status {}", found.status),
            Some(found) => match found.digest() {
                Some(stamped) if stamped == digest => {
                    return Ok(Outcome::unchanged(Ensured {
                        release: Some(found.clone()),
                        ..Ensured::default()
                    }));
                }
                Some(_) => "chart or values changed".to_string(),
                None => "not installed by bprun".to_string(),
            },
        };
        // Read before an upgrade replaces them: what the release deployed, what the chart
        // renders now. A check of an upgrade needs them to tell which pods it replaces.
        let manifests = match (spec.diff, mode.writes(), &current) {
            (true, _, _) | (false, false, Some(_)) => Some(self.manifests(spec)?),
            _ => None,
        };
        let (namespace, release) = (&spec.namespace, &spec.release);
        let change = Change {
            action: if current.is_none() {
                "install"
            } else {
                "upgrade"
            },
            kind: "helm release".into(),
            name: format!("{namespace}/{release}"),
            resource: format!(
                "helm release {namespace}/{release} from {} ({reason})",
                spec.chart.arg
            ),
            detail: match (&manifests, spec.diff) {
                (Some(manifests), true) => Some(self.release_diff(spec, &merged, manifests)?),
                _ => None,
            },
        };
        if !mode.writes() {
            let pod_templates_changed = match &manifests {
                Some((Some(deployed), rendered)) => changed_pod_templates(deployed, rendered),
                _ => Vec::new(),
            };
            let ensured = Ensured {
                release: current,
                reason: Some(reason),
                pod_templates_changed,
            };
            return Ok(Outcome::single(ensured, change));
        }
        if let Some(pending) = left_pending {
            self.unlock(pending).map_err(named)?;
        }
        let (values_files, temp) = values_args(spec)?;
        let installed = self
            .upgrade_install(&InstallSpec {
                release: spec.release.clone(),
                chart: spec.chart.arg.clone(),
                namespace: spec.namespace.clone(),
                version: spec.version.clone(),
                values_files,
                wait: spec.wait,
                timeout: spec.timeout,
                create_namespace: spec.create_namespace,
                digest,
                rollback_on_failure: spec.rollback_on_failure,
            })
            .map_err(|error| named(self.way_back(error, current.as_ref(), spec)))?;
        drop(temp);
        let release = Some(Release {
            revision: installed.revision,
            status: installed.status,
            chart: installed.chart,
            ..current.unwrap_or_default()
        });
        let reason = Some(reason);
        let ensured = Ensured {
            release,
            reason,
            ..Ensured::default()
        };
        Ok(Outcome::single(ensured, change))
    }

    /// The manifests a chart renders to with `spec`'s values (`helm template`), its values
    /// checked against the schema first.
    pub fn render(&self, spec: &ReleaseSpec) -> Result<String, ClientError> {
        const OPERATION: &str = "template";
        check_values_schema(&Confinement::new(&self.root), spec, OPERATION)?;
        // The guard keeps the temporary values file until helm has read it.
        let (values_files, _temp) = values_args(spec)?;
        self.template(
            &spec.release,
            &spec.chart.arg,
            &spec.namespace,
            spec.version.as_deref(),
            &values_files,
        )
        .map_err(|error| error.in_operation(OPERATION, ": "))
    }

    /// `helm uninstall` of a release that exists (an `uninstall` change); unchanged when there is
    /// none. In check mode it only reads.
    pub fn ensure_uninstalled(
        &self,
        release: &str,
        namespace: &str,
        wait: bool,
        timeout: Duration,
        mode: Mode,
    ) -> Result<Outcome<()>, ClientError> {
        let Some(found) = self.status(release, namespace)? else {
            return Ok(Outcome::unchanged(()));
        };
        if mode.writes() {
            self.uninstall(release, namespace, wait, timeout)?;
        }
        Ok(Outcome::changed_by(
            (),
            "uninstall",
            "helm release",
            format!("{namespace}/{release}"),
            format!("helm release {namespace}/{release} ({})", found.chart),
        ))
    }

    /// Caches a pinned chart at `target` (`relative` from the root) unless it is there (then it
    /// is verified against its pin); a `pull` change. Never leaves an archive that is not the
    /// pinned one in the cache. In check mode it only looks.
    pub fn ensure_pulled(
        &self,
        pin: &ChartPin,
        relative: &str,
        target: &Path,
        mode: Mode,
    ) -> Result<Outcome<()>, ClientError> {
        if target.is_file() {
            pin.verify(target)?;
            return Ok(Outcome::unchanged(()));
        }
        if mode.writes() {
            self.pull_to(pin, target)?;
            if let Err(error) = pin.verify(target) {
                let _ = std::fs::remove_file(target);
                return Err(error);
            }
        }
        Ok(Outcome::changed_by(
            (),
            "pull",
            "chart",
            relative,
            format!("chart {relative} from {}", pin.url),
        ))
    }

    /// The digest of what `ensure_release` would deploy (`merged`: see [`merged_values`]).
    fn install_digest(&self, spec: &ReleaseSpec, merged: &Value) -> Result<String, ClientError> {
        let chart = &spec.chart;
        let version = spec.version.as_deref();
        let (chart_name, chart_version, files) = match &chart.source {
            ChartSource::Dir(dir) => {
                let (name, version) = super::chart_yaml(dir, &chart.arg)?;
                (name, version, super::chart_files(dir)?)
            }
            ChartSource::Archive(path) => {
                let bytes = std::fs::read(path).map_err(|error| {
                    ClientError::new(format!("cannot read chart {}: {error}", chart.arg))
                        .in_operation("install", ": ")
                })?;
                (
                    chart.arg.clone(),
                    version.unwrap_or_default().to_string(),
                    vec![("archive".to_string(), bytes)],
                )
            }
            ChartSource::Remote(reference) => match version {
                Some(version) => (reference.clone(), version.to_string(), Vec::new()),
                // Without a pin, the digest follows the version the repository serves today.
                None => {
                    let (_, latest) = self
                        .show_chart(reference, None)
                        .map_err(|error| error.in_operation("install", ": "))?;
                    (reference.clone(), latest, Vec::new())
                }
            },
        };
        Ok(super::digest(&DigestInput {
            chart_name,
            chart_version,
            files,
            values: merged.clone(),
        }))
    }

    /// What the release deployed (`helm get manifest`; None before its first install) and what
    /// the chart renders now with `spec`'s values (`helm template`, which knows no cluster: a
    /// chart that generates random values or looks up live objects renders those otherwise
    /// every time).
    fn manifests(&self, spec: &ReleaseSpec) -> Result<(Option<String>, String), ClientError> {
        let (release, namespace) = (&spec.release, &spec.namespace);
        let (values_files, _temp) = values_args(spec)?;
        let rendered = self.template(
            release,
            &spec.chart.arg,
            namespace,
            spec.version.as_deref(),
            &values_files,
        )?;
        Ok((self.manifest(release, namespace)?, rendered))
    }

    /// `--diff` of a release: its values (what it was installed with against `merged`) and its
    /// manifests (deployed against rendered now), as YAML.
    fn release_diff(
        &self,
        spec: &ReleaseSpec,
        merged: &Value,
        (deployed, rendered): &(Option<String>, String),
    ) -> Result<Detail, ClientError> {
        let (release, namespace) = (&spec.release, &spec.namespace);
        let installed = self.user_values(release, namespace)?;
        let yaml = |value: &Value| serde_norway::to_string(value).unwrap_or_default();
        let values = TextDiff {
            name: format!("helm release {namespace}/{release} values"),
            before: installed.as_ref().map(yaml),
            after: Some(yaml(merged)),
        };
        let manifest = TextDiff {
            name: format!("helm release {namespace}/{release} manifest"),
            before: deployed.clone(),
            after: Some(rendered.clone()),
        };
        Ok(Detail::Diffs(vec![values, manifest]))
    }
}

impl Helm {
    /// A failed upgrade's error, with how to go back to the revision that ran before it.
    /// Without `rollback_on_failure` helm leaves the new revision `failed` and the previous one
    /// deployed; with it, helm rolled back by itself, which the release's status now says.
    fn way_back(
        &self,
        error: ClientError,
        before: Option<&Release>,
        spec: &ReleaseSpec,
    ) -> ClientError {
        let Some(before) = before.filter(|before| before.status == "deployed") else {
            return error;
        };
        let now = self.status(&spec.release, &spec.namespace).ok().flatten();
        let back = match now {
            Some(now)
                if spec.rollback_on_failure
                    && now.status == "deployed"
                    && now.chart == before.chart =>
            {
                format!(
                    "helm rolled the release back by itself: revision {} runs {} again, as revision {} did; pin {} again to stay there",
                    now.revision, now.chart, before.revision, before.chart
                )
            }
            _ => format!(
                "revision {} ({}) ran before this upgrade: to go back, pin {} again and run again, or `helm rollback {} {} -n {}`",
                before.revision,
                before.chart,
                before.chart,
                spec.release,
                before.revision,
                spec.namespace
            ),
        };
        let hint = match &error.hint {
            Some(hint) => format!("{hint}; {back}"),
            None => back,
        };
        error.with_hint(hint)
    }
}

#[cfg(test)]
mod tests {
    use super::changed_pod_templates;

    /// A release's manifest as helm renders it: a StatefulSet, a Deployment, a Service.
    fn manifest(bao_image: &str, bao_env: &str, web_replicas: u32) -> String {
        format!(
            "---
# Source: openbao/templates/server-statefulset.yaml
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: openbao
spec:
  updateStrategy:
    type: OnDelete
  template:
    metadata:
      labels:
        helm.sh/chart: openbao-0.11.0
    spec:
      containers:
        - name: openbao
          image: {bao_image}
          env:
            - name: EXTRA
              value: {bao_env}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: {web_replicas}
  template:
    spec:
      containers:
        - name: web
          image: nginx:1.27
---
apiVersion: v1
kind: Service
metadata:
  name: openbao
spec:
  ports:
    - port: 8200
"
        )
    }

    #[test]
    fn a_pod_template_that_the_chart_now_renders_otherwise_is_named() {
        let deployed = manifest("quay.io/openbao/openbao:2.2.0", "a", 1);
        // The same rendering: nothing changes.
        assert_eq!(
            changed_pod_templates(&deployed, &deployed),
            Vec::<String>::new()
        );
        // A value outside any pod template (replicas) leaves the pods alone.
        let scaled = manifest("quay.io/openbao/openbao:2.2.0", "a", 3);
        assert_eq!(
            changed_pod_templates(&deployed, &scaled),
            Vec::<String>::new()
        );
        // A values-only change inside OpenBao's template (an environment variable).
        let env = manifest("quay.io/openbao/openbao:2.2.0", "b", 1);
        assert_eq!(
            changed_pod_templates(&deployed, &env),
            ["StatefulSet/openbao"]
        );
        // A new image.
        let image = manifest("quay.io/openbao/openbao:2.3.2", "a", 1);
        assert_eq!(
            changed_pod_templates(&deployed, &image),
            ["StatefulSet/openbao"]
        );
        // A workload the chart no longer renders, or renders for the first time, has no pods
        // to replace by this upgrade.
        assert_eq!(
            changed_pod_templates(&deployed, "---\n"),
            Vec::<String>::new()
        );
        assert_eq!(changed_pod_templates("", &deployed), Vec::<String>::new());
    }
}
