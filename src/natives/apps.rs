//! The apps manifest and CI rendering as scripts see them.

use rhai::Array;
use rhai::plugin::*;

use super::convert::{Secrets, from_json, to_json};
use super::options::{RhaiResultOf, option_str, reject_undeclared};
use crate::engine::{native_error, session};
use crate::error::NativeError;
use bprun_clients::apps::{self, AppSpec};
use bprun_clients::fs::Confinement;

/// The default folder of the CI templates, relative to the repository root.
pub const TEMPLATES: &str = "templates/ci";

/// The image pins of infra/VERSIONS.json, read as every native reads the file.
fn image_pins(
    session: &crate::engine::Session,
) -> Result<Vec<bprun_clients::image_pins::ImagePin>, bprun_clients::error::ClientError> {
    let (versions, _) = super::helm::load_versions(session)?;
    bprun_clients::image_pins::pins(&versions)
}

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

    /// Refuses an image reference that does not come from infra/VERSIONS.json's `images`: the
    /// values files (infra/helm-values/*.yaml, each app chart's values.yaml, the charts'
    /// values_overrides) name a pinned repository and tag; the CI templates (templates/ci/*,
    /// apps/shared-code/templates/*) write `{images.KEY}`, which `render_ci` and
    /// `render_pinned_images` fill with the pin (`repository:tag`, and `@digest` when known).
    /// Images the platform builds itself (its own registry) and references with another
    /// placeholder are not pins. Returns how many references it checked; reads files only.
    ///
    /// ```rhai
    /// step("Pre-flight", || { require_pinned_images(); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn require_pinned_images(context: NativeCallContext) -> RhaiResultOf<i64> {
        let session = session(&context)?;
        let (versions, _) = crate::natives::helm::load_versions(&session).map_err(native_error)?;
        let report = bprun_clients::image_pins::check(&session.state.root, &versions)
            .map_err(|error| native_error(NativeError::from(error)))?;
        if report.findings.is_empty() {
            return Ok(report.checked as i64);
        }
        let count = report.findings.len();
        let mut error = NativeError::new(format!(
            "{count} image reference{} not read from infra/VERSIONS.json",
            if count == 1 { " is" } else { "s are" }
        ))
        .with_hint(
            "a values file names an image infra/VERSIONS.json's images pin; a CI template writes {images.KEY}; a new image is added there first (repository, tag, and its digest where one is known, else null: never an invented one)",
        );
        for finding in report.findings {
            error = error.caused_by(finding.to_string());
        }
        Err(native_error(error))
    }

    /// The text of a file under the repository root with each `{images.KEY}` replaced by
    /// infra/VERSIONS.json's pin `KEY` (`repository:tag`, and `@digest` when known): how a CI
    /// template that is pushed as it is (shared-code's `templates/ci-common.yml`) gets its
    /// images. An unknown key is an error at file:line:col listing the pins.
    ///
    /// ```rhai
    /// let common = render_pinned_images("apps/shared-code/templates/ci-common.yml");
    /// write_text("apps-local/blueprint-apps/shared-code/templates/ci-common.yml", common);
    /// ```
    #[rhai_fn(return_raw)]
    pub fn render_pinned_images(context: NativeCallContext, path: &str) -> RhaiResultOf<String> {
        let session = session(&context)?;
        let files = Confinement::new(&session.state.root);
        let full = files.resolve(path).map_err(native_error)?;
        let text = files.read_text(path).map_err(native_error)?;
        let pins = image_pins(&session).map_err(native_error)?;
        bprun_clients::image_pins::render(&text, &files.display(&full), &pins).map_err(native_error)
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
        reject_undeclared(&options, "load_manifest")?;
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

    /// Renders an app's `.gitlab-ci.yml` from `templates/ci/` (shared-code's file, the app
    /// template with a build stage, or the redis template without one), its `{images.KEY}` filled
    /// from infra/VERSIONS.json. A placeholder the app or VERSIONS.json does not provide is an
    /// error naming it and the template line; the result is valid YAML.
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
        reject_undeclared(&options, "render_ci")?;
        let folder = option_str(&options, "templates", "render_ci")?
            .unwrap_or_else(|| TEMPLATES.to_string());
        let files = Confinement::new(&session.state.root);
        let full = files.resolve(&folder).map_err(native_error)?;
        let spec = spec_of(&app)?;
        let pins = || image_pins(&session);
        apps::render_ci(&spec, &full, &files.display(&full), pins).map_err(native_error)
    }
}
