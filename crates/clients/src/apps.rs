//! The apps manifest (`apps/apps_manifest.yaml`) and CI rendering (`templates/ci/`): strict
//! loading with file:line:col errors, and templates whose unknown placeholders are errors.

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::error::ClientError;

/// The first entry: the others include its CI templates cross-project.
pub const SHARED_CODE: &str = "shared-code";

/// One app of the manifest (the seed's `AppSpec`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppSpec {
    #[serde(deserialize_with = "text")]
    pub name: String,
    #[serde(deserialize_with = "text")]
    pub src_path: String,
    #[serde(deserialize_with = "text")]
    pub chart_path: String,
    pub build_image: bool,
    #[serde(default)]
    pub has_unit_tests: bool,
    pub helm_release: String,
    pub helm_namespace: String,
    pub registry_image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dockerfile_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_tag: Option<String>,
}

/// A YAML string, and only a string: `name: 42` is a number the author did not mean as a path.
fn text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match serde_norway::Value::deserialize(deserializer)? {
        serde_norway::Value::String(text) => Ok(text),
        other => Err(serde::de::Error::custom(format!(
            "expected a string, found {} (quote it if it is meant as text)",
            match other {
                serde_norway::Value::Number(number) => format!("the number {number}"),
                serde_norway::Value::Bool(flag) => format!("the boolean {flag}"),
                serde_norway::Value::Null => "nothing".to_string(),
                _ => "a list or map".to_string(),
            }
        ))),
    }
}

/// Why `path` cannot be a path inside the repository (absolute, or climbing out with `..`);
/// empty is allowed (shared-code has no chart).
fn path_problem(path: &str) -> Option<&'static str> {
    let path = Path::new(path);
    if path.is_absolute() {
        Some("is absolute")
    } else if path
        .components()
        .any(|part| part == std::path::Component::ParentDir)
    {
        Some("climbs out with `..`")
    } else {
        None
    }
}

/// serde_norway's message without the `.[1]: ` path prefix and the ` at line L column C` suffix
/// (the location is given once, as file:line:col).
fn yaml_message(error: &serde_norway::Error) -> String {
    let text = error.to_string();
    let text = match text.split_once("]: ") {
        Some((path, rest)) if path.starts_with(".[") => rest.to_string(),
        _ => text,
    };
    match text.rfind(" at line ") {
        Some(index) => text[..index].to_string(),
        None => text,
    }
}

/// The line (1-based) where each top-level `- ` entry starts, to place errors about entries.
fn entry_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.starts_with("- ") || line.trim_end() == "-")
        .map(|(index, _)| index + 1)
        .collect()
}

/// Loads and validates the manifest. `shown` names the file in errors.
pub fn load_manifest(text: &str, shown: &str) -> Result<Vec<AppSpec>, ClientError> {
    let apps: Vec<AppSpec> = serde_norway::from_str(text).map_err(|error| {
        let at = error.location().map(|l| format!("{shown}:{}:{}", l.line(), l.column())).unwrap_or_else(|| shown.to_string());
        ClientError::new(format!("{at}: {}", yaml_message(&error))).with_hint(
            "each entry needs name, src_path, chart_path, build_image, helm_release, helm_namespace and registry_image; \
             has_unit_tests, dockerfile_path, redis_host and redis_tag are optional",
        )
    })?;
    let lines = entry_lines(text);
    let at = |index: usize| format!("{shown}:{}:1", lines.get(index).copied().unwrap_or(1));
    if apps.is_empty() {
        return Err(
            ClientError::new(format!("{shown}: the manifest lists no apps"))
                .with_hint("list shared-code first, then the apps that include it"),
        );
    }
    for (index, app) in apps.iter().enumerate() {
        if let Some(first) = apps[..index]
            .iter()
            .position(|other| other.name == app.name)
        {
            return Err(ClientError::new(format!(
                "{}: app `{}` is listed twice (first at {})",
                at(index),
                app.name,
                at(first)
            ))
            .with_hint("app names are project paths in GitLab: each must be unique"));
        }
        // GitLab's path rules, narrowed to what the platform's names use.
        let valid = !app.name.is_empty()
            && !app.name.starts_with('-')
            && !app.name.ends_with('-')
            && app
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid {
            return Err(ClientError::new(format!(
                "{}: app name `{}` is not a valid project path",
                at(index),
                app.name
            ))
            .with_hint(
                "use lower-case letters, digits and dashes, not starting or ending with a dash",
            ));
        }
        if app.src_path.trim().is_empty() {
            return Err(ClientError::new(format!(
                "{}: app `{}` has an empty src_path",
                at(index),
                app.name
            ))
            .with_hint("src_path names the app's folder, e.g. apps/guestbook"));
        }
        let paths = [
            ("src_path", Some(&app.src_path)),
            ("chart_path", Some(&app.chart_path)),
            ("dockerfile_path", app.dockerfile_path.as_ref()),
        ];
        for (field, path) in paths {
            if let Some(path) = path
                && let Some(problem) = path_problem(path)
            {
                return Err(ClientError::new(format!(
                    "{}: {field} `{path}` of app `{}` {problem}",
                    at(index),
                    app.name
                ))
                .with_hint(
                    "paths in the manifest are relative to the repository root, under apps/",
                ));
            }
        }
    }
    if apps[0].name != SHARED_CODE {
        let position = apps.iter().position(|app| app.name == SHARED_CODE);
        let detail = match position {
            Some(index) => format!("it is at {}", at(index)),
            None => "it is missing".to_string(),
        };
        return Err(ClientError::new(format!("{}: `{SHARED_CODE}` must be the first app ({detail})", at(0))).with_hint(
            "the other projects include shared-code's CI templates cross-project, so it must exist before their pipelines run",
        ));
    }
    Ok(apps)
}

/// The apps whose name is `wanted`, or all of them; an unknown name lists the valid ones.
pub fn filter_apps(apps: Vec<AppSpec>, wanted: Option<&str>) -> Result<Vec<AppSpec>, ClientError> {
    let Some(wanted) = wanted else {
        return Ok(apps);
    };
    if !apps.iter().any(|app| app.name == wanted) {
        let names: Vec<&str> = apps.iter().map(|app| app.name.as_str()).collect();
        return Err(ClientError::new(format!("unknown app `{wanted}`"))
            .with_hint(format!("valid apps: {}", names.join(", "))));
    }
    Ok(apps.into_iter().filter(|app| app.name == wanted).collect())
}

/// The template an app's CI is rendered from, as the seed's `render_for` picks it.
pub fn template_for(app: &AppSpec) -> &'static str {
    if app.name == SHARED_CODE {
        "shared-code.gitlab-ci.yml"
    } else if app.build_image {
        "app.gitlab-ci.yml.tpl"
    } else {
        "redis.gitlab-ci.yml.tpl"
    }
}

/// The values templates may use.
fn substitutions(app: &AppSpec) -> serde_json::Value {
    let mut values = serde_json::json!({
        "name": app.name,
        "build": if app.build_image { "true" } else { "false" },
        "tests": if app.has_unit_tests { "true" } else { "false" },
        "release": app.helm_release,
        "namespace": app.helm_namespace,
        "chart_path": app.chart_path,
        "registry_image": app.registry_image,
    });
    for (key, value) in [
        ("dockerfile_path", &app.dockerfile_path),
        ("redis_host", &app.redis_host),
        ("redis_tag", &app.redis_tag),
    ] {
        if let Some(value) = value {
            values[key] = serde_json::Value::String(value.clone());
        }
    }
    values
}

/// Renders an app's `.gitlab-ci.yml` from `templates_dir`: its `{images.KEY}` from `pins` first
/// (read only when the template has one), then (a `.tpl`) the app's placeholders; the result is
/// checked to be YAML.
pub fn render_ci(
    app: &AppSpec,
    templates_dir: &Path,
    shown_dir: &str,
    pins: impl FnOnce() -> Result<Vec<crate::image_pins::ImagePin>, ClientError>,
) -> Result<String, ClientError> {
    let file = template_for(app);
    let shown = format!("{shown_dir}/{file}");
    let text = std::fs::read_to_string(templates_dir.join(file)).map_err(|error| {
        ClientError::new(format!("cannot read the CI template {shown}: {error}"))
            .with_hint("templates/ci/ holds one template per kind of app")
    })?;
    let text = if text.contains("{images.") {
        crate::image_pins::render(&text, &shown, &pins()?)?
    } else {
        text
    };
    let rendered = if file.ends_with(".tpl") {
        let mut engine = tinytemplate::TinyTemplate::new();
        engine.set_default_formatter(&tinytemplate::format_unescaped);
        engine
            .add_template(file, &text)
            .map_err(|error| template_error(&shown, &error))?;
        engine
            .render(file, &substitutions(app))
            .map_err(|error| template_error(&shown, &error))?
    } else {
        text
    };
    serde_norway::from_str::<serde_json::Value>(&rendered).map_err(|error| {
        let at = error
            .location()
            .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
            .unwrap_or_default();
        ClientError::new(format!(
            "the CI file rendered from {shown} for {} is not valid YAML{at}: {error}",
            app.name
        ))
        .with_hint("check the template around that line; GitLab variables must use the $VAR form")
    })?;
    Ok(rendered)
}

fn template_error(shown: &str, error: &tinytemplate::error::Error) -> ClientError {
    use tinytemplate::error::Error as T;
    match error {
        T::RenderError { msg, line, column } | T::ParseError { msg, line, column } => {
            let msg = match msg
                .strip_prefix("Failed to find value '")
                .and_then(|rest| rest.split_once('\''))
            {
                Some((name, _)) => {
                    format!("unknown placeholder {{{name}}}: the app provides no `{name}`")
                }
                None => msg.clone(),
            };
            ClientError::new(format!("{shown}:{line}:{column}: {msg}"))
                .with_hint("placeholders: name, build, tests, release, namespace, chart_path, registry_image, dockerfile_path, redis_host, redis_tag; write \\{ for a literal brace")
        }
        other => ClientError::new(format!("{shown}: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "- name: shared-code\n  src_path: apps/shared-code\n  chart_path: \"\"\n  build_image: false\n  helm_release: s\n  helm_namespace: s\n  registry_image: r/s\n- name: guestbook\n  src_path: apps/guestbook\n  chart_path: helm-chart\n  build_image: true\n  helm_release: g\n  helm_namespace: g\n  registry_image: r/g\n  dockerfile_path: guestbook-go/Dockerfile\n";

    #[test]
    fn a_valid_manifest_loads() {
        let apps = load_manifest(MANIFEST, "m.yaml").expect("valid");
        assert_eq!(apps.len(), 2);
        assert!(!apps[1].has_unit_tests);
    }

    #[test]
    fn numbers_and_escaping_paths_are_refused_at_their_entry() {
        let number = MANIFEST.replace("- name: guestbook", "- name: 42");
        let error = load_manifest(&number, "m.yaml").expect_err("number");
        assert!(
            error
                .message
                .starts_with("m.yaml:8:3: expected a string, found the number 42"),
            "{}",
            error.message
        );
        let climbing = MANIFEST.replace("chart_path: helm-chart", "chart_path: ../../etc");
        assert_eq!(
            load_manifest(&climbing, "m.yaml")
                .expect_err("climb")
                .message,
            "m.yaml:8:1: chart_path `../../etc` of app `guestbook` climbs out with `..`"
        );
        let absolute = MANIFEST.replace("src_path: apps/guestbook", "src_path: /etc");
        assert_eq!(
            load_manifest(&absolute, "m.yaml")
                .expect_err("absolute")
                .message,
            "m.yaml:8:1: src_path `/etc` of app `guestbook` is absolute"
        );
        let dash = MANIFEST.replace("- name: guestbook", "- name: -lead");
        assert!(load_manifest(&dash, "m.yaml").is_err());
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let typo = MANIFEST.replace("build_image: true", "buid_image: true");
        let error = load_manifest(&typo, "m.yaml").expect_err("typo");
        assert!(
            error
                .message
                .starts_with("m.yaml:11:3: unknown field `buid_image`, expected one of `name`,"),
            "{}",
            error.message
        );
        let wrong_type = MANIFEST.replace("build_image: true", "build_image: yes please");
        assert!(
            load_manifest(&wrong_type, "m.yaml")
                .expect_err("type")
                .message
                .contains("invalid type")
        );
        let missing = MANIFEST.replace("  registry_image: r/g\n", "");
        assert!(
            load_manifest(&missing, "m.yaml")
                .expect_err("missing")
                .message
                .contains("missing field `registry_image`")
        );
    }

    #[test]
    fn shared_code_must_come_first_and_names_must_be_unique() {
        let (first, second) = MANIFEST.split_at(MANIFEST.find("- name: guestbook").expect("entry"));
        let reordered = format!("{second}{first}");
        let error = load_manifest(&reordered, "m.yaml").expect_err("order");
        assert_eq!(
            error.message,
            "m.yaml:1:1: `shared-code` must be the first app (it is at m.yaml:9:1)"
        );
        let doubled = format!("{MANIFEST}{second}");
        assert_eq!(
            load_manifest(&doubled, "m.yaml").expect_err("dup").message,
            "m.yaml:16:1: app `guestbook` is listed twice (first at m.yaml:8:1)"
        );
    }

    #[test]
    fn filtering_an_unknown_app_lists_the_valid_ones() {
        let apps = load_manifest(MANIFEST, "m.yaml").expect("valid");
        let error = filter_apps(apps, Some("redis")).expect_err("unknown");
        assert_eq!(
            error.hint.as_deref(),
            Some("valid apps: shared-code, guestbook")
        );
    }
}
