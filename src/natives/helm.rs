//! Helm natives: the real `helm` binary (v3 or v4, `HELM_BIN` or PATH), idempotent installs
//! decided by a digest stamped on the release, and the version pins of `infra/VERSIONS.json`.

use rhai::plugin::*;
use rhai::{Array, Map};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::convert::{Secrets, from_json, to_json};
use super::options::{RhaiResultOf, option_bool, option_str, reject_undeclared, remote_session};
use super::reconcile::{mode, settle};
use crate::engine::{Session, native_error, session};
use crate::error::NativeError;
use bprun_clients::error::ClientError;
use bprun_clients::fs::Confinement;
use bprun_clients::helm::{self, ChartSource, Helm, Release, ReleaseSpec};

fn client(session: &std::sync::Arc<Session>) -> Helm {
    let mut helm = Helm::new(
        session.state.root.clone(),
        session.state.cancel_flag().clone(),
    );
    helm.kube_context = crate::engine::lock(&session.kube_context)
        .clone()
        .or_else(|| std::env::var("BPRUN_KUBE_CONTEXT").ok())
        .filter(|context| !context.is_empty());
    let session = session.clone();
    helm.storage = Some(std::sync::Arc::new(move || {
        crate::natives::kube::client(&session).map_err(|error| {
            let mut cause = ClientError::new(error.message);
            if let Some(hint) = error.hint {
                cause = cause.with_hint(hint);
            }
            cause
        })
    }));
    helm
}

/// A helm client error headed by the native that ran helm (`helm_install: ...`).
fn headed(native: &str, mut error: ClientError) -> NativeError {
    error.message = format!("{native}: {}", error.message);
    error.into()
}

fn from_helm(native: &'static str) -> impl Fn(ClientError) -> Box<EvalAltResult> {
    move |error| native_error(headed(native, error))
}

/// A helm client error headed by the native only where the error leaves room for its name.
fn named(native: &'static str) -> impl Fn(ClientError) -> Box<EvalAltResult> {
    move |error| native_error(error.named_by(|_| native))
}

fn error(message: String) -> Box<EvalAltResult> {
    native_error(NativeError::new(message))
}

fn require_name(value: &str, what: &str, native: &str) -> RhaiResultOf<()> {
    if value.trim().is_empty() {
        return Err(native_error(
            NativeError::new(format!("{native}: the {what} is empty"))
                .with_hint(format!("name the {what}, e.g. \"redis\"")),
        ));
    }
    Ok(())
}

/// `values_files` (a path or an array of paths): (argument for helm, full path, shown name).
fn values_files(
    options: &rhai::Map,
    files: &Confinement,
    native: &str,
) -> RhaiResultOf<Vec<(String, PathBuf)>> {
    let items: Vec<Dynamic> = match options.get("values_files") {
        None => return Ok(Vec::new()),
        Some(value) if value.is_string() => vec![value.clone()],
        Some(value) => value.clone().into_array().map_err(|type_name| {
            error(format!(
                "{native}: option `values_files` must be an array of paths, not {type_name}"
            ))
        })?,
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let path = item.into_immutable_string().map_err(|type_name| {
            error(format!(
                "{native}: option `values_files` must hold paths (strings), not {type_name}"
            ))
        })?;
        let full = files.resolve(&path).map_err(native_error)?;
        if !full.is_file() {
            return Err(native_error(
                NativeError::new(format!("{native}: values file {path} does not exist"))
                    .with_hint("values_files are paths under the repository root"),
            ));
        }
        out.push((files.display(&full), full));
    }
    Ok(out)
}

/// `values` (a map; `Secret`s inside are revealed for helm, through a private file).
fn script_values(options: &rhai::Map, native: &str) -> RhaiResultOf<Option<Value>> {
    let Some(value) = options.get("values") else {
        return Ok(None);
    };
    if value.is_unit() {
        return Ok(None);
    }
    if !value.is_map() {
        return Err(error(format!(
            "{native}: option `values` must be a map, not {}",
            value.type_name()
        )));
    }
    let json = to_json(value, Secrets::Reveal)
        .map_err(|e| error(format!("{native}: option `values`: {}", e.message)))?;
    Ok(match &json {
        Value::Object(map) if map.is_empty() => None,
        _ => Some(json),
    })
}

fn helm_timeout(options: &rhai::Map, native: &str) -> RhaiResultOf<Duration> {
    match options.get("timeout") {
        None => Ok(helm::DEFAULT_HELM_TIMEOUT),
        Some(value) => {
            let timeout = super::seconds(value, &format!("{native}: option `timeout`"))?;
            if timeout < Duration::from_secs(1) {
                return Err(error(format!(
                    "{native}: option `timeout` must be at least 1 second"
                )));
            }
            Ok(timeout)
        }
    }
}

fn release_map(release: &Release) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("name".into(), release.name.clone().into());
    map.insert("namespace".into(), release.namespace.clone().into());
    map.insert("revision".into(), release.revision.into());
    map.insert("status".into(), release.status.clone().into());
    map.insert("chart".into(), release.chart.clone().into());
    map.insert("app_version".into(), release.app_version.clone().into());
    map.insert("updated".into(), release.updated.clone().into());
    map
}

/// The chart pin `helm_repositories.<key>` of `infra/VERSIONS.json`.
fn pinned_chart(session: &Session, key: &str, native: &str) -> RhaiResultOf<helm::ChartPin> {
    let (_, mut pins) = load_versions(session).map_err(native_error)?;
    pins.remove(key).ok_or_else(|| {
        let known: Vec<&str> = pins.keys().map(String::as_str).collect();
        native_error(
            NativeError::new(format!(
                "{native}: {} has no helm_repositories.{key}",
                helm::VERSIONS_FILE
            ))
            .with_hint(format!("known keys: {}", known.join(", "))),
        )
    })
}

/// infra/VERSIONS.json, parsed and checked (errors at file:line:col), with its chart pins.
pub(super) fn load_versions(
    session: &Session,
) -> Result<(Value, std::collections::BTreeMap<String, helm::ChartPin>), ClientError> {
    let files = Confinement::new(&session.state.root);
    let text = files.read_text(helm::VERSIONS_FILE)?;
    helm::parse_versions(&text, helm::VERSIONS_FILE)
}

fn install(
    session: Arc<Session>,
    release: &str,
    chart: &str,
    namespace: &str,
    options: &rhai::Map,
) -> RhaiResultOf<Map> {
    const NATIVE: &str = "helm_install";
    reject_undeclared(options, NATIVE)?;
    require_name(release, "release name", NATIVE)?;
    require_name(namespace, "namespace", NATIVE)?;
    let files = Confinement::new(&session.state.root);
    let chart = helm::resolve_chart(&files, chart).map_err(from_helm(NATIVE))?;
    helm::verify_cached_archive(&session.state.root, &chart).map_err(from_helm(NATIVE))?;
    let spec = ReleaseSpec {
        release: release.to_string(),
        namespace: namespace.to_string(),
        chart,
        version: option_str(options, "version", NATIVE)?,
        wait: option_bool(options, "wait", NATIVE)?.unwrap_or(false),
        create_namespace: option_bool(options, "create_namespace", NATIVE)?.unwrap_or(false),
        rollback_on_failure: option_bool(options, "rollback_on_failure", NATIVE)?.unwrap_or(false),
        timeout: helm_timeout(options, NATIVE)?,
        values_files: values_files(options, &files, NATIVE)?,
        values: script_values(options, NATIVE)?,
        values_schema: option_str(options, "values_schema", NATIVE)?,
        diff: session.state.diff(),
    };
    let outcome = client(&session)
        .ensure_release(&spec, mode(&session))
        .map_err(named(NATIVE))?;
    let upgraded = outcome
        .changes
        .iter()
        .any(|change| change.action == "upgrade");
    let (ensured, changed) = settle(&session, outcome);
    if let (true, false, Some(found)) = (upgraded, session.state.check(), &ensured.release) {
        let mut upgraded = crate::engine::lock(&session.upgraded_releases);
        upgraded.retain(|(ns, name, _)| (ns.as_str(), name.as_str()) != (namespace, release));
        upgraded.push((
            namespace.to_string(),
            release.to_string(),
            found.chart.clone(),
        ));
    }
    if let (None, Some(found)) = (&ensured.reason, &ensured.release) {
        // Said, so a re-run's output shows what it left alone and why.
        session.state.reporter.log(
            crate::output::Level::Info,
            &format!(
                "helm release {namespace}/{release} left alone: revision {} of {} is deployed with the same chart digest and values",
                found.revision, found.chart
            ),
        );
    }
    let mut result = rhai::Map::new();
    result.insert("release".into(), release.into());
    result.insert("namespace".into(), namespace.into());
    result.insert("changed".into(), changed.into());
    result.insert(
        "reason".into(),
        ensured.reason.map(Dynamic::from).unwrap_or(Dynamic::UNIT),
    );
    let templates: rhai::Array = (ensured.pod_templates_changed.into_iter())
        .map(Dynamic::from)
        .collect();
    result.insert("pod_templates_changed".into(), templates.into());
    match ensured.release {
        Some(found) => {
            result.insert("revision".into(), found.revision.into());
            result.insert("status".into(), found.status.into());
            result.insert("chart".into(), found.chart.into());
        }
        // In check mode, a release not installed yet.
        None => {
            for key in ["revision", "status", "chart"] {
                result.insert(key.into(), Dynamic::UNIT);
            }
        }
    }
    Ok(result)
}

fn uninstall(
    session: Arc<Session>,
    release: &str,
    namespace: &str,
    options: &rhai::Map,
) -> RhaiResultOf<Map> {
    const NATIVE: &str = "helm_uninstall";
    reject_undeclared(options, NATIVE)?;
    require_name(release, "release name", NATIVE)?;
    require_name(namespace, "namespace", NATIVE)?;
    let wait = option_bool(options, "wait", NATIVE)?.unwrap_or(false);
    let timeout = helm_timeout(options, NATIVE)?;
    let outcome = client(&session)
        .ensure_uninstalled(release, namespace, wait, timeout, mode(&session))
        .map_err(from_helm(NATIVE))?;
    let ((), changed) = settle(&session, outcome);
    let mut result = rhai::Map::new();
    result.insert("release".into(), release.into());
    result.insert("namespace".into(), namespace.into());
    result.insert("changed".into(), changed.into());
    Ok(result)
}

fn template(
    session: Arc<Session>,
    release: &str,
    chart: &str,
    namespace: &str,
    options: &rhai::Map,
) -> RhaiResultOf<String> {
    const NATIVE: &str = "helm_template";
    reject_undeclared(options, NATIVE)?;
    require_name(release, "release name", NATIVE)?;
    require_name(namespace, "namespace", NATIVE)?;
    let files = Confinement::new(&session.state.root);
    let chart = helm::resolve_chart(&files, chart).map_err(from_helm(NATIVE))?;
    let spec = ReleaseSpec {
        release: release.to_string(),
        namespace: namespace.to_string(),
        chart,
        version: option_str(options, "version", NATIVE)?,
        values_files: values_files(options, &files, NATIVE)?,
        values: script_values(options, NATIVE)?,
        values_schema: option_str(options, "values_schema", NATIVE)?,
        wait: false,
        timeout: helm::DEFAULT_HELM_TIMEOUT,
        create_namespace: false,
        rollback_on_failure: false,
        diff: false,
    };
    client(&session).render(&spec).map_err(named(NATIVE))
}

fn lint(session: Arc<Session>, chart: &str, options: &rhai::Map) -> RhaiResultOf<Map> {
    const NATIVE: &str = "helm_lint";
    reject_undeclared(options, NATIVE)?;
    let files = Confinement::new(&session.state.root);
    let chart_ref = helm::resolve_chart(&files, chart).map_err(from_helm(NATIVE))?;
    if matches!(chart_ref.source, ChartSource::Remote(_)) {
        return Err(native_error(
            NativeError::new(format!(
                "{NATIVE}: {chart} is not a chart under the repository root"
            ))
            .with_hint("helm lint checks a local chart folder or archive"),
        ));
    }
    let strict = option_bool(options, "strict", NATIVE)?.unwrap_or(false);
    let file_args: Vec<String> = values_files(options, &files, NATIVE)?
        .into_iter()
        .map(|(shown, _)| shown)
        .collect();
    let report = client(&session)
        .lint(&chart_ref.arg, strict, &file_args)
        .map_err(from_helm(NATIVE))?;
    let mut map = rhai::Map::new();
    map.insert("ok".into(), report.ok.into());
    map.insert(
        "messages".into(),
        report
            .messages
            .into_iter()
            .map(Dynamic::from)
            .collect::<rhai::Array>()
            .into(),
    );
    Ok(map)
}

#[export_module]
pub mod helm_functions {
    use super::*;

    /// `helm upgrade --install` that only runs when something changed: the release is left alone
    /// (`changed: false`, no new revision) when its latest revision is deployed and carries the
    /// same digest of chart (name, version, files of a local chart) and merged values. Options:
    /// `values_files` (paths), `values` (a map; `Secret`s inside reach helm through a private
    /// temporary file, never the command line), `version`, `wait` (default false), `timeout`
    /// (seconds, default 300), `create_namespace` (default false), `values_schema` (a JSON
    /// Schema file the merged values must match before helm runs: a missing override key stops
    /// the install, nothing installed, every violation named by its key path),
    /// `rollback_on_failure` (default false: a failed upgrade rolls back to the revision before
    /// it, helm 4's `--rollback-on-failure`, helm 3's `--atomic`; the error says so). Returns
    /// `#{changed, release, namespace, revision, status, chart, reason, pod_templates_changed}`.
    /// Honours check mode; there `pod_templates_changed` lists the release's workloads
    /// (`"StatefulSet/openbao"`) whose pod template the upgrade changes (what the release deployed
    /// against what the chart renders now), so a script can say which pods the run replaces.
    ///
    /// ```rhai
    /// step("Redis", || {
    ///     let pin = versions().helm_repositories.redis;
    ///     let chart = helm_pull("redis");
    ///     helm_install("redis", chart.path, "redis", #{values: pin.values_overrides, wait: true, create_namespace: true});
    /// });
    /// ```
    #[rhai_fn(name = "helm_install", return_raw)]
    pub fn helm_install_with(
        context: NativeCallContext,
        release: &str,
        chart: &str,
        namespace: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "helm_install")?;
        install(session, release, chart, namespace, &options)
    }

    /// `helm_install(release, chart, namespace, #{})`: the chart with its default values.
    ///
    /// ```rhai
    /// step("Redis", || { helm_install("redis", "apps/redis/helm-chart", "redis"); });
    /// ```
    #[rhai_fn(name = "helm_install", return_raw)]
    pub fn helm_install(
        context: NativeCallContext,
        release: &str,
        chart: &str,
        namespace: &str,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "helm_install")?;
        install(session, release, chart, namespace, &rhai::Map::new())
    }

    /// The latest revision of a release: `#{name, namespace, revision, status, chart,
    /// chart_name, chart_version, app_version, updated, description, digest}`, or `()` when there
    /// is no such release. Reads only; runs in check mode.
    ///
    /// ```rhai
    /// step("Redis", || {
    ///     let release = helm_status("redis", "redis");
    ///     if release == () || release.status != "deployed" { warn("redis is not deployed") }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn helm_status(
        context: NativeCallContext,
        release: &str,
        namespace: &str,
    ) -> RhaiResultOf<Dynamic> {
        const NATIVE: &str = "helm_status";
        let session = remote_session(&context, NATIVE)?;
        require_name(release, "release name", NATIVE)?;
        require_name(namespace, "namespace", NATIVE)?;
        let helm = client(&session);
        let Some(found) = helm.status(release, namespace).map_err(from_helm(NATIVE))? else {
            return Ok(Dynamic::UNIT);
        };
        let mut map = release_map(&found);
        map.insert("description".into(), found.description.clone().into());
        map.insert(
            "digest".into(),
            found
                .digest()
                .map(|digest| Dynamic::from(digest.to_string()))
                .unwrap_or(Dynamic::UNIT),
        );
        let (name, version) = helm
            .chart_of(release, namespace)
            .map(|(name, version)| (Dynamic::from(name), Dynamic::from(version)))
            .unwrap_or((Dynamic::UNIT, Dynamic::UNIT));
        map.insert("chart_name".into(), name);
        map.insert("chart_version".into(), version);
        Ok(map.into())
    }

    /// The releases of a namespace (`"*"` or `""`: of every namespace) that are deployed, failed,
    /// pending or uninstalling, as `#{name, namespace, revision, status, chart, app_version,
    /// updated}` maps. Reads only.
    ///
    /// ```rhai
    /// step("Inventory", || {
    ///     for release in helm_list("*") { info(`${release.namespace}/${release.name}: ${release.status}`) }
    /// });
    /// ```
    #[rhai_fn(name = "helm_list", return_raw)]
    pub fn helm_list_in(context: NativeCallContext, namespace: &str) -> RhaiResultOf<Array> {
        const NATIVE: &str = "helm_list";
        let session = remote_session(&context, NATIVE)?;
        let scope = match namespace.trim() {
            "" | "*" => None,
            namespace => Some(namespace),
        };
        let releases = client(&session).list(scope).map_err(from_helm(NATIVE))?;
        Ok(releases
            .iter()
            .map(|release| Dynamic::from(release_map(release)))
            .collect())
    }

    /// `helm_list("*")`: the releases of every namespace.
    ///
    /// ```rhai
    /// step("Inventory", || { let count = helm_list().len(); });
    /// ```
    #[rhai_fn(name = "helm_list", return_raw)]
    pub fn helm_list(context: NativeCallContext) -> RhaiResultOf<Array> {
        helm_list_in(context, "*")
    }

    /// Uninstalls a release; an absent release is `changed: false`. Options: `wait` (default
    /// false), `timeout` (seconds, default 300). Returns `#{changed, release, namespace}`.
    /// Honours check mode.
    ///
    /// ```rhai
    /// step("Remove redis", || { helm_uninstall("redis", "redis", #{wait: true}); });
    /// ```
    #[rhai_fn(name = "helm_uninstall", return_raw)]
    pub fn helm_uninstall_with(
        context: NativeCallContext,
        release: &str,
        namespace: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "helm_uninstall")?;
        uninstall(session, release, namespace, &options)
    }

    /// `helm_uninstall(release, namespace, #{})`.
    ///
    /// ```rhai
    /// step("Remove redis", || { helm_uninstall("redis", "redis"); });
    /// ```
    #[rhai_fn(name = "helm_uninstall", return_raw)]
    pub fn helm_uninstall(
        context: NativeCallContext,
        release: &str,
        namespace: &str,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "helm_uninstall")?;
        uninstall(session, release, namespace, &rhai::Map::new())
    }

    /// The manifests a chart renders to (`helm template`), as one string. Options: `values`
    /// (a map, through a private temporary file), `values_files`, `version`. Registered secrets in
    /// the output read `***`. Reads only; runs in check mode.
    ///
    /// ```rhai
    /// step("Render", || {
    ///     let yaml = helm_template("redis", "apps/redis/helm-chart", "redis", #{values: #{image: #{tag: "7.4.2"}}});
    /// });
    /// ```
    #[rhai_fn(name = "helm_template", return_raw)]
    pub fn helm_template_with(
        context: NativeCallContext,
        release: &str,
        chart: &str,
        namespace: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<String> {
        let session = remote_session(&context, "helm_template")?;
        template(session, release, chart, namespace, &options)
    }

    /// `helm_template(release, chart, namespace, #{})`.
    ///
    /// ```rhai
    /// step("Render", || { let yaml = helm_template("redis", "apps/redis/helm-chart", "redis"); });
    /// ```
    #[rhai_fn(name = "helm_template", return_raw)]
    pub fn helm_template(
        context: NativeCallContext,
        release: &str,
        chart: &str,
        namespace: &str,
    ) -> RhaiResultOf<String> {
        let session = remote_session(&context, "helm_template")?;
        template(session, release, chart, namespace, &rhai::Map::new())
    }

    /// `helm lint` of a local chart: `#{ok, messages}` (a failing lint is a result, not an
    /// exception; messages are helm's `[INFO]`/`[WARNING]`/`[ERROR]` lines). Options: `strict`
    /// (warnings fail too), `values_files`. Reads only.
    ///
    /// ```rhai
    /// step("Lint", || {
    ///     let lint = helm_lint("apps/redis/helm-chart", #{strict: true});
    ///     if !lint.ok { throw lint.messages }
    /// });
    /// ```
    #[rhai_fn(name = "helm_lint", return_raw)]
    pub fn helm_lint_with(
        context: NativeCallContext,
        chart: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "helm_lint")?;
        lint(session, chart, &options)
    }

    /// `helm_lint(chart, #{})`.
    ///
    /// ```rhai
    /// step("Lint", || { let ok = helm_lint("apps/redis/helm-chart").ok; });
    /// ```
    #[rhai_fn(name = "helm_lint", return_raw)]
    pub fn helm_lint(context: NativeCallContext, chart: &str) -> RhaiResultOf<Map> {
        let session = remote_session(&context, "helm_lint")?;
        lint(session, chart, &rhai::Map::new())
    }

    /// Caches the chart pinned under `helm_repositories.<key>` of `infra/VERSIONS.json` as
    /// `infra/helm-charts/<chart>-<version>.tgz`; no network when that file exists. Returns
    /// `#{changed, path, chart, version}` (`path` is what helm_install takes). Honours check mode.
    ///
    /// ```rhai
    /// step("Cache charts", || { for key in ["redis", "gitlab"] { helm_pull(key); } });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn helm_pull(context: NativeCallContext, key: &str) -> RhaiResultOf<Map> {
        const NATIVE: &str = "helm_pull";
        let session = remote_session(&context, NATIVE)?;
        let pin = &pinned_chart(&session, key, NATIVE)?;
        let relative = pin.cache_path();
        let files = Confinement::new(&session.state.root);
        let target = files.resolve(&relative).map_err(native_error)?;
        let mut result = rhai::Map::new();
        result.insert("path".into(), relative.clone().into());
        result.insert("chart".into(), pin.chart.clone().into());
        result.insert("version".into(), pin.chart_version.clone().into());
        let outcome = client(&session)
            .ensure_pulled(pin, &relative, &target, mode(&session))
            .map_err(from_helm(NATIVE))?;
        result.insert("changed".into(), settle(&session, outcome).1.into());
        Ok(result)
    }

    /// The chart to install for `helm_repositories.<key>` of `infra/VERSIONS.json`, with its pin:
    /// the cached archive `infra/helm-charts/<chart>-<version>.tgz` (verified against its
    /// SHA-256) when it is there; otherwise the stand-in chart `infra/helm-charts/stand-ins/<chart>`
    /// when one exists (with a warning: the real chart could not be had); otherwise it is
    /// pulled as `helm_pull` does. Returns `#{path, chart, version, release, namespace,
    /// values_overrides, stand_in}`; `path` is what `helm_install` takes.
    ///
    /// ```rhai
    /// step("Redis", || {
    ///     let redis = helm_chart("redis");
    ///     helm_install(redis.release, redis.path, redis.namespace,
    ///         #{values_files: ["infra/helm-values/redis.yaml"], values: redis.values_overrides});
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn helm_chart(context: NativeCallContext, key: &str) -> RhaiResultOf<Map> {
        const NATIVE: &str = "helm_chart";
        let session = remote_session(&context, NATIVE)?;
        let pin = &pinned_chart(&session, key, NATIVE)?;
        let files = Confinement::new(&session.state.root);
        let cached = pin.cache_path();
        let stand_in = format!("{}/stand-ins/{}", helm::CHART_CACHE, pin.chart);
        let (path, is_stand_in) = if files.resolve(&cached).map_err(native_error)?.is_file() {
            (cached, false)
        } else if files
            .resolve(&format!("{stand_in}/Chart.yaml"))
            .map_err(native_error)?
            .is_file()
        {
            session.state.reporter.log(
                crate::output::Level::Warn,
                &format!(
                    "{cached} is not in the chart cache: using the stand-in chart {stand_in} (not the real {} {}; see its README)",
                    pin.chart, pin.chart_version
                ),
            );
            (stand_in, true)
        } else {
            let pulled = helm_pull(context, key)?;
            (
                pulled.get("path").map(|p| p.to_string()).unwrap_or(cached),
                false,
            )
        };
        if !is_stand_in && let Ok(archive) = files.resolve(&path) {
            pin.verify(&archive).map_err(from_helm(NATIVE))?;
        }
        let mut result = rhai::Map::new();
        result.insert("path".into(), path.into());
        result.insert("chart".into(), pin.chart.clone().into());
        result.insert("version".into(), pin.chart_version.clone().into());
        result.insert(
            "release".into(),
            pin.release
                .clone()
                .unwrap_or_else(|| key.to_string())
                .into(),
        );
        result.insert(
            "namespace".into(),
            pin.namespace
                .clone()
                .unwrap_or_else(|| key.to_string())
                .into(),
        );
        result.insert(
            "values_overrides".into(),
            from_json(Value::Object(
                pin.values_overrides.clone().unwrap_or_default(),
            )),
        );
        result.insert("stand_in".into(), is_stand_in.into());
        Ok(result)
    }

    /// The YAML of `manifests.<key>` of `infra/VERSIONS.json` (one file, or every pinned file of
    /// a folder in name order, joined as one multi-document text), each file checked against its
    /// pinned SHA-256 first: a file that differs from its pin, or a pinned file that is missing,
    /// is an error and nothing is returned. `kube_apply` takes the result.
    ///
    /// ```rhai
    /// step("Gateway API CRDs", || { kube_apply(pinned_manifest("gateway-api")); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn pinned_manifest(context: NativeCallContext, key: &str) -> RhaiResultOf<String> {
        const NATIVE: &str = "pinned_manifest";
        let session = session(&context)?;
        let (document, _) = load_versions(&session).map_err(native_error)?;
        let pin = &document["manifests"][key];
        if !pin.is_object() {
            let known: Vec<String> = document["manifests"]
                .as_object()
                .map(|all| all.keys().cloned().collect())
                .unwrap_or_default();
            return Err(native_error(
                NativeError::new(format!(
                    "{NATIVE}: {} has no manifests.{key}",
                    helm::VERSIONS_FILE
                ))
                .with_hint(format!("known keys: {}", known.join(", "))),
            ));
        }
        let path = pin["path"].as_str().unwrap_or_default();
        let files: Vec<(String, String)> = match &pin["sha256"] {
            Value::String(digest) => vec![(path.to_string(), digest.clone())],
            Value::Object(per_file) => per_file
                .iter()
                .map(|(file, digest)| {
                    (
                        format!("{path}/{file}"),
                        digest.as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
            _ => {
                return Err(native_error(NativeError::new(format!(
                    "{NATIVE}: manifests.{key} in {} has no sha256 pin",
                    helm::VERSIONS_FILE
                ))));
            }
        };
        let confinement = Confinement::new(&session.state.root);
        let mut text = String::new();
        for (file, pinned) in files {
            let bytes = std::fs::read(confinement.resolve(&file).map_err(native_error)?).map_err(
                |error| {
                    native_error(
                        NativeError::new(format!("{NATIVE}: cannot read {file}: {error}"))
                            .with_hint(format!(
                                "the pinned manifests of {key} belong in {path} (see {})",
                                helm::VERSIONS_FILE
                            )),
                    )
                },
            )?;
            let actual = bprun_clients::digest::sha256_hex(&bytes);
            if !actual.eq_ignore_ascii_case(&pinned) {
                return Err(native_error(
                    NativeError::new(format!(
                        "{NATIVE}: {file} has SHA-256 {actual}, but {} pins {pinned}",
                        helm::VERSIONS_FILE
                    ))
                    .with_hint("restore the upstream file unmodified, or update the pin after reviewing the new upstream version"),
                ));
            }
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            if !text.is_empty() {
                text.push_str("---\n");
            }
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
        Ok(text)
    }

    /// `infra/VERSIONS.json`, the single source of truth for chart repositories, chart versions
    /// and value overrides (`helm_repositories.<key>` = `#{name, url, chart, chart_version,
    /// release, namespace, values_overrides}`). A malformed file is an error at file:line:col.
    /// Reads a local file, so it also works at the top level.
    ///
    /// ```rhai
    /// let gitlab = versions().helm_repositories.gitlab;
    /// info(`GitLab chart ${gitlab.chart_version}`);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn versions(context: NativeCallContext) -> RhaiResultOf<Map> {
        let session = session(&context)?;
        let (document, _) = load_versions(&session).map_err(native_error)?;
        from_json(document).try_cast::<rhai::Map>().ok_or_else(|| {
            error(format!(
                "versions: {} must hold a JSON object",
                helm::VERSIONS_FILE
            ))
        })
    }
}

/// What the workloads of the releases this run upgraded run now, a line each (`helm release
/// openbao/openbao (openbao-0.16.4): StatefulSet/openbao runs quay.io/openbao/openbao:2.3.2`),
/// for the recap: an upgrade that moved a template has not always moved the pods (a rollout
/// still under way, `updateStrategy: OnDelete`). A release whose workloads cannot be read says
/// why instead. Sorted by namespace and release: steps that run together upgrade in any order.
pub fn upgraded_workloads(session: &Session) -> Vec<String> {
    let mut upgraded = crate::engine::lock(&session.upgraded_releases).clone();
    upgraded.sort();
    if upgraded.is_empty() {
        return Vec::new();
    }
    let kube = super::kube::client(session);
    let mut lines = Vec::new();
    for (namespace, release, chart) in upgraded {
        let head = format!("helm release {namespace}/{release} ({chart})");
        match kube
            .as_ref()
            .map_err(|error| error.message.clone())
            .and_then(|kube| {
                kube.release_workload_images(&namespace, &release)
                    .map_err(|error| error.message)
            }) {
            Ok(workloads) if workloads.is_empty() => lines.push(format!("{head}: no workloads")),
            Ok(workloads) => lines.extend(
                workloads
                    .iter()
                    .map(|workload| format!("{head}: {}", workload.describe())),
            ),
            Err(why) => lines.push(format!("{head}: cannot read its workloads: {why}")),
        }
    }
    lines
}
