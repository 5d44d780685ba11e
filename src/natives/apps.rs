//! The apps manifest and CI rendering as scripts see them.

use rhai::Array;
use rhai::plugin::*;

use super::convert::{Secrets, from_json, to_json};
use super::options::{RhaiResultOf, option_str, reject_unknown};
use crate::engine::{native_error, session};
use crate::error::NativeError;
use bprun_clients::apps::{self, AppSpec};
use bprun_clients::fs::Confinement;

/// The default folder of the CI templates, relative to the repository root.
pub const TEMPLATES: &str = "templates/ci";

fn spec_of(app: &rhai::Map) -> RhaiResultOf<AppSpec> {
    let json = to_json(&Dynamic::from_map(app.clone()), Secrets::Redact).map_err(native_error)?;
    serde_json::from_value(json).map_err(|error| {
        native_error(
            NativeError::new(format!(
                "render_ci: the app map is not a manifest entry: {error}"
            ))
            .with_hint("pass an entry returned by load_manifest"),
        )
    })
}

#[export_module]
pub mod apps_functions {
    use super::*;

    /// Refuses an image that infra/VERSIONS.json does not pin: every image reference of the
    /// values files (infra/helm-values/*.yaml, each app chart's values.yaml, the charts'
    /// values_overrides) and the CI templates (templates/ci/*, apps/shared-code/templates/*)
    /// must be one of its `images` (repository and tag). Images the platform builds itself
    /// (its own registry) and references with a placeholder are not pins. Returns how many
    /// references it checked; reads files only.
    ///
    /// ```rhai
    /// step("Pre-flight", || { require_pinned_images(); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn require_pinned_images(context: NativeCallContext) -> RhaiResultOf<i64> {
        let session = session(&context)?;
        let report = bprun_clients::image_pins::check(&session.state.root)
            .map_err(|error| native_error(NativeError::from(error)))?;
        let unpinned = report.unpinned;
        if unpinned.is_empty() {
            return Ok(report.checked as i64);
        }
        let count = unpinned.len();
        let mut error = NativeError::new(format!(
            "{count} image reference{} not pinned in infra/VERSIONS.json",
            if count == 1 { " is" } else { "s are" }
        ))
        .with_hint(
            "add each to infra/VERSIONS.json's images (repository, tag, and its digest where one is known, else null: never an invented one), or use an image it pins",
        );
        for reference in unpinned {
            let at = if reference.line == 0 {
                reference.file
            } else {
                format!("{}:{}", reference.file, reference.line)
            };
            error = error.caused_by(format!("{at}: {}", reference.image));
        }
        Err(native_error(error))
    }

    /// Loads and validates the apps manifest: unknown or missing fields, wrong types, duplicate
    /// names and `shared-code` not first are errors with file:line:col. Returns an array of app
    /// maps in manifest order.
    ///
    /// ```rhai
    /// let apps = load_manifest("apps/apps_manifest.yaml");
    /// for app in apps { info(app.name) }
    /// ```
    #[rhai_fn(name = "load_manifest", return_raw)]
    pub fn load_manifest(context: NativeCallContext, path: &str) -> RhaiResultOf<Array> {
        load_manifest_with(context, path, rhai::Map::new())
    }

    /// `load_manifest(path)` with options: `app` (keep only that app; `()` keeps all; an unknown
    /// name is an error listing the valid ones).
    ///
    /// ```rhai
    /// let apps = load_manifest("apps/apps_manifest.yaml", #{app: "guestbook"});
    /// ```
    #[rhai_fn(name = "load_manifest", return_raw)]
    pub fn load_manifest_with(
        context: NativeCallContext,
        path: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Array> {
        let session = session(&context)?;
        reject_unknown(&options, &["app"], "load_manifest")?;
        let wanted = match options.get("app") {
            Some(value) if value.is_unit() => None,
            _ => option_str(&options, "app", "load_manifest")?,
        };
        let files = Confinement::new(&session.state.root);
        let full = files.resolve(path).map_err(native_error)?;
        let text = files.read_text(path).map_err(native_error)?;
        let loaded = apps::load_manifest(&text, &files.display(&full)).map_err(native_error)?;
        let selected = apps::filter_apps(loaded, wanted.as_deref()).map_err(native_error)?;
        Ok(selected
            .iter()
            .map(|app| from_json(serde_json::to_value(app).unwrap_or_default()))
            .collect())
    }

    /// Renders an app's `.gitlab-ci.yml` from `templates/ci/` (shared-code's literal file, the
    /// app template with a build stage, or the redis template without one). A placeholder the app
    /// does not provide is an error naming it and the template line; the result is valid YAML.
    ///
    /// ```rhai
    /// let apps = load_manifest("apps/apps_manifest.yaml");
    /// let ci = render_ci(apps[1]);
    /// ```
    #[rhai_fn(name = "render_ci", return_raw)]
    pub fn render_ci(context: NativeCallContext, app: rhai::Map) -> RhaiResultOf<String> {
        render_ci_with(context, app, rhai::Map::new())
    }

    /// `render_ci(app)` with options: `templates` (the templates folder, default `templates/ci`).
    ///
    /// ```rhai
    /// let apps = load_manifest("apps/apps_manifest.yaml");
    /// let ci = render_ci(apps[0], #{templates: "templates/ci"});
    /// ```
    #[rhai_fn(name = "render_ci", return_raw)]
    pub fn render_ci_with(
        context: NativeCallContext,
        app: rhai::Map,
        options: rhai::Map,
    ) -> RhaiResultOf<String> {
        let session = session(&context)?;
        reject_unknown(&options, &["templates"], "render_ci")?;
        let folder = option_str(&options, "templates", "render_ci")?
            .unwrap_or_else(|| TEMPLATES.to_string());
        let files = Confinement::new(&session.state.root);
        let full = files.resolve(&folder).map_err(native_error)?;
        let spec = spec_of(&app)?;
        apps::render_ci(&spec, &full, &files.display(&full)).map_err(native_error)
    }
}
