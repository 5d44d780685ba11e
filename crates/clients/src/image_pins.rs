//! Image pins: infra/VERSIONS.json's `images` names every image the platform runs that it does
//! not build itself, and the values files and CI templates may reference no other. A reference
//! is found where a person writes one: a YAML `image:` (a scalar, a `name:` under it, or a
//! `repository:` with an optional `tag:` under it) and a TOML `image = "..."` inside a values
//! string (the runner's config). References with a placeholder (`{redis_tag}`, `$VAR`) and images
//! of the platform's own registry (built by the apps' pipelines) are not pins.

use serde_json::Value;
use std::path::Path;

use crate::error::ClientError;

/// The registries of images the platform builds itself (the apps' pipelines push there).
const OWN_REGISTRIES: &[&str] = &[
    "registry.local.example.net/",
    "gitlab-registry.gitlab.svc:5000/",
];

/// An image reference as written in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Relative to the repository root.
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// `repository[:tag]`, as written.
    pub image: String,
}

/// An image VERSIONS.json pins: `repository` and `tag` (and `digest` where one is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePin {
    pub key: String,
    pub repository: String,
    pub tag: String,
}

/// The repository of `image` as a registry names it (`alpine` -> `docker.io/library/alpine`,
/// `alpine/helm` -> `docker.io/alpine/helm`), without its tag or digest.
pub fn canonical_repository(image: &str) -> String {
    let without_digest = image.split('@').next().unwrap_or(image);
    let repository = match without_digest.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository,
        _ => without_digest,
    };
    let first = repository.split('/').next().unwrap_or("");
    let has_registry = repository.contains('/')
        && (first.contains('.') || first.contains(':') || first == "localhost");
    if has_registry {
        repository.to_string()
    } else if repository.contains('/') {
        format!("docker.io/{repository}")
    } else {
        format!("docker.io/library/{repository}")
    }
}

/// The tag of `image`, when it has one.
pub fn tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    match without_digest.rsplit_once(':') {
        Some((_, tag)) if !tag.contains('/') => Some(tag),
        _ => None,
    }
}

/// The pins of a VERSIONS.json document (`images.<key>.{repository, tag}`).
pub fn pins(versions: &Value) -> Result<Vec<ImagePin>, ClientError> {
    let Some(images) = versions.get("images") else {
        return Ok(Vec::new());
    };
    let Some(images) = images.as_object() else {
        return Err(ClientError::new("infra/VERSIONS.json: `images` must be a map")
            .with_hint("images: {\"<key>\": {\"repository\": \"alpine\", \"tag\": \"3.20\", \"digest\": null}}"));
    };
    images
        .iter()
        .map(|(key, pin)| {
            let field = |name: &str| {
                pin[name].as_str().map(str::to_string).ok_or_else(|| {
                    ClientError::new(format!(
                        "infra/VERSIONS.json: images.{key} has no `{name}` string"
                    ))
                    .with_hint("each image pin has a repository and a tag (and a digest where one is known, else null)")
                })
            };
            Ok(ImagePin {
                key: key.clone(),
                repository: field("repository")?,
                tag: field("tag")?,
            })
        })
        .collect()
}

/// Whether `pins` name `image` (a reference without a tag takes its tag from a chart: its
/// repository must be pinned).
pub fn pinned(image: &str, pins: &[ImagePin]) -> bool {
    let repository = canonical_repository(image);
    pins.iter().any(|pin| {
        canonical_repository(&pin.repository) == repository
            && tag(image).is_none_or(|tag| tag == pin.tag)
    })
}

fn unquoted(text: &str) -> &str {
    let text = match text.split_once(" #") {
        Some((value, _)) => value,
        None => text,
    };
    text.trim().trim_matches(|c| c == '"' || c == '\'')
}

/// The image references in one file's text.
pub fn references(file: &str, text: &str) -> Vec<ImageRef> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut found = Vec::new();
    let mut push = |line: usize, image: &str| {
        found.push(ImageRef {
            file: file.to_string(),
            line,
            image: image.to_string(),
        })
    };
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start().trim_start_matches("- ");
        if trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("image:") {
            let value = unquoted(rest);
            if !value.is_empty() {
                push(index + 1, value);
                continue;
            }
            // A map under `image:`: its `name`, or its `repository` and `tag`.
            let (mut name, mut repository, mut image_tag) = (None, None, None);
            for (offset, nested) in lines[index + 1..].iter().enumerate() {
                if nested.trim().is_empty() {
                    continue;
                }
                if indent(nested) <= indent(line) {
                    break;
                }
                let nested = nested.trim_start();
                let at = index + 2 + offset;
                if let Some(value) = nested.strip_prefix("name:") {
                    name = Some((at, unquoted(value).to_string()));
                } else if let Some(value) = nested.strip_prefix("repository:") {
                    repository = Some((at, unquoted(value).to_string()));
                } else if let Some(value) = nested.strip_prefix("tag:") {
                    image_tag = Some(unquoted(value).to_string());
                }
            }
            match (name, repository) {
                (Some((at, name)), _) => push(at, &name),
                (None, Some((at, repository))) => match image_tag {
                    Some(image_tag) if !image_tag.is_empty() => {
                        push(at, &format!("{repository}:{image_tag}"))
                    }
                    _ => push(at, &repository),
                },
                _ => {}
            }
        } else if let Some(rest) = trimmed.strip_prefix("image =") {
            push(index + 1, unquoted(rest));
        }
    }
    found.retain(|reference| {
        !reference.image.contains(['{', '$'])
            && !OWN_REGISTRIES
                .iter()
                .any(|own| reference.image.starts_with(own))
    });
    found
}

/// The files whose image references must be pinned, relative to `root`: the values files
/// (infra/helm-values/*.yaml, each app chart's values.yaml) and the CI templates
/// (templates/ci/*, apps/shared-code/templates/*).
pub fn pinned_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut add_dir = |dir: &str, wanted: &dyn Fn(&str) -> bool| {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            let mut names: Vec<String> = entries
                .flatten()
                .filter(|entry| entry.path().is_file())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| wanted(name))
                .collect();
            names.sort();
            files.extend(names.into_iter().map(|name| format!("{dir}/{name}")));
        }
    };
    add_dir("infra/helm-values", &|name| name.ends_with(".yaml"));
    add_dir("templates/ci", &|_| true);
    add_dir("apps/shared-code/templates", &|name| {
        name.ends_with(".yml") || name.ends_with(".yaml")
    });
    if let Ok(entries) = std::fs::read_dir(root.join("apps")) {
        let mut apps: Vec<String> = entries
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        apps.sort();
        for app in apps {
            let values = format!("apps/{app}/helm-chart/values.yaml");
            if root.join(&values).is_file() {
                files.push(values);
            }
        }
    }
    files
}

/// What [`check`] found: how many references it read, and those VERSIONS.json does not pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinReport {
    pub checked: usize,
    pub unpinned: Vec<ImageRef>,
}

/// Every image reference under `root` checked against infra/VERSIONS.json, in file order.
pub fn check(root: &Path) -> Result<PinReport, ClientError> {
    let versions_file = root.join(crate::helm::VERSIONS_FILE);
    let text = std::fs::read_to_string(&versions_file).map_err(|error| {
        ClientError::new(format!(
            "cannot read {}: {error}",
            crate::helm::VERSIONS_FILE
        ))
    })?;
    let versions: Value = serde_json::from_str(&text).map_err(|error| {
        ClientError::new(format!(
            "{} is not JSON: {error}",
            crate::helm::VERSIONS_FILE
        ))
    })?;
    let pins = pins(&versions)?;
    let mut unpinned = Vec::new();
    let mut checked = 0;
    for file in pinned_files(root) {
        let text = std::fs::read_to_string(root.join(&file))
            .map_err(|error| ClientError::new(format!("cannot read {file}: {error}")))?;
        let found = references(&file, &text);
        checked += found.len();
        unpinned.extend(
            found
                .into_iter()
                .filter(|reference| !pinned(&reference.image, &pins)),
        );
    }
    // The charts' values overrides in VERSIONS.json itself.
    if let Some(repositories) = versions["helm_repositories"].as_object() {
        for (key, chart) in repositories {
            let image = &chart["values_overrides"]["image"];
            if let Some(repository) = image["repository"].as_str() {
                let reference = match image["tag"].as_str() {
                    Some(image_tag) => format!("{repository}:{image_tag}"),
                    None => repository.to_string(),
                };
                checked += 1;
                if !pinned(&reference, &pins) {
                    unpinned.push(ImageRef {
                        file: format!(
                            "{} (helm_repositories.{key}.values_overrides)",
                            crate::helm::VERSIONS_FILE
                        ),
                        line: 0,
                        image: reference,
                    });
                }
            }
        }
    }
    Ok(PinReport { checked, unpinned })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repositories_are_canonical_as_a_registry_names_them() {
        assert_eq!(
            canonical_repository("alpine:3.20"),
            "docker.io/library/alpine"
        );
        assert_eq!(
            canonical_repository("alpine/helm:3.16.4"),
            "docker.io/alpine/helm"
        );
        assert_eq!(
            canonical_repository("gcr.io/kaniko-project/executor:v1.23.2-debug"),
            "gcr.io/kaniko-project/executor"
        );
        assert_eq!(canonical_repository("localhost:5000/x"), "localhost:5000/x");
        assert_eq!(tag("localhost:5000/x"), None);
        assert_eq!(tag("redis:7.4.1"), Some("7.4.1"));
    }

    #[test]
    fn references_are_found_in_every_form_people_write_them() {
        let text = "\
.lint:
  image: alpine/helm:3.16.4
.build:
  image:
    name: gcr.io/kaniko-project/executor:v1.23.2-debug
    entrypoint: [\"\"]
image:
  repository: redis
  tag: \"7.4.1\"
chart:
  image:
    repository: bitnamilegacy/redis
config: |
  [runners.kubernetes]
    image = \"alpine:3.20\"
own:
  image:
    repository: registry.local.example.net/blueprint-apps/guestbook
    tag: latest
templated:
  image: redis:{redis_tag}
# image: commented:1
";
        let found: Vec<(usize, String)> = references("f.yaml", text)
            .into_iter()
            .map(|reference| (reference.line, reference.image))
            .collect();
        assert_eq!(
            found,
            vec![
                (2, "alpine/helm:3.16.4".to_string()),
                (
                    5,
                    "gcr.io/kaniko-project/executor:v1.23.2-debug".to_string()
                ),
                (8, "redis:7.4.1".to_string()),
                (12, "bitnamilegacy/redis".to_string()),
                (15, "alpine:3.20".to_string()),
            ]
        );
    }

    #[test]
    fn a_reference_is_pinned_by_its_repository_and_tag() {
        let pins = pins(&json!({"images": {
            "alpine": {"repository": "alpine", "tag": "3.20", "digest": null},
            "redis-chart": {"repository": "docker.io/bitnamilegacy/redis", "tag": "7.2.5-debian-12-r4", "digest": null},
        }}))
        .expect("pins");
        assert!(pinned("docker.io/library/alpine:3.20", &pins));
        assert!(!pinned("alpine:3.21", &pins));
        assert!(pinned("bitnamilegacy/redis", &pins));
        assert!(!pinned("busybox:1.37", &pins));
        let refused =
            super::pins(&json!({"images": {"x": {"repository": "x"}}})).expect_err("no tag");
        assert_eq!(
            refused.message,
            "infra/VERSIONS.json: images.x has no `tag` string"
        );
    }
}
