//! Image pins: infra/VERSIONS.json's `images` names every image the platform runs that it does
//! not build itself, and the values files and CI templates may reference no other. A reference
//! is found where a person writes one: a YAML `image:` (a scalar, a `name:` under it, or a
//! `repository:` with an optional `tag:` under it) and a TOML `image = "..."` inside a values
//! string (the runner's config). References with a placeholder (`{redis_tag}`, `$VAR`) and images
//! of the platform's own registry (built by the apps' pipelines) are not pins.

use serde_json::Value;
use std::path::Path;

use crate::error::ClientError;

/// The version pins (charts, manifests, images), under the repository root.
pub const VERSIONS_FILE: &str = "infra/VERSIONS.json";

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
    /// `sha256:<64 hex>`, where one is known (public digests cannot be looked up from here, so
    /// none is ever invented: `null` in VERSIONS.json).
    pub digest: Option<String>,
}

impl ImagePin {
    /// The reference a template or a values file gets: `repository:tag`, and `@digest` when
    /// the digest is known (a runtime then pulls exactly that image).
    pub fn reference(&self) -> String {
        match &self.digest {
            Some(digest) => format!("{}:{}@{digest}", self.repository, self.tag),
            None => format!("{}:{}", self.repository, self.tag),
        }
    }
}

/// The placeholder a CI template writes for a pinned image: `{images.KEY}`.
const PLACEHOLDER: &str = "{images.";

/// The `{images.KEY}` placeholders of one line: (byte range of the whole placeholder, key).
/// A comment line has none (it may name the placeholder form itself).
fn line_placeholders(line: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let mut found = Vec::new();
    if line.trim_start().starts_with('#') {
        return found;
    }
    let mut from = 0;
    while let Some(start) = line[from..].find(PLACEHOLDER).map(|at| from + at) {
        let key_start = start + PLACEHOLDER.len();
        let Some(end) = line[key_start..].find('}').map(|at| key_start + at) else {
            break;
        };
        found.push((start..end + 1, &line[key_start..end]));
        from = end + 1;
    }
    found
}

/// `text` with every `{images.KEY}` replaced by the reference of VERSIONS.json's pin `KEY`
/// (the CI templates' images are read from there, never spelled out). An unknown key is an
/// error naming `shown`, its line and column, and the known keys. Comment lines are left as
/// they are.
pub fn render(text: &str, shown: &str, pins: &[ImagePin]) -> Result<String, ClientError> {
    let mut rendered = String::with_capacity(text.len());
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let mut copied = 0;
        for (range, key) in line_placeholders(line) {
            let pin = pins.iter().find(|pin| pin.key == key).ok_or_else(|| {
                let known: Vec<&str> = pins.iter().map(|pin| pin.key.as_str()).collect();
                ClientError::new(format!(
                    "{shown}:{}:{}: unknown image pin {{images.{key}}}: infra/VERSIONS.json's images have no `{key}`",
                    index + 1,
                    range.start + 1
                ))
                .with_hint(format!(
                    "pinned images: {}; add the image to infra/VERSIONS.json's images (repository, tag, digest or null)",
                    known.join(", ")
                ))
            })?;
            rendered.push_str(&line[copied..range.start]);
            rendered.push_str(&pin.reference());
            copied = range.end;
        }
        rendered.push_str(&line[copied..]);
    }
    Ok(rendered)
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
            let digest = match &pin["digest"] {
                Value::Null => None,
                Value::String(digest)
                    if digest.strip_prefix("sha256:").is_some_and(|hex| {
                        hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit())
                    }) =>
                {
                    Some(digest.clone())
                }
                other => {
                    return Err(ClientError::new(format!(
                        "infra/VERSIONS.json: images.{key}.digest is {other}, not sha256:<64 hex digits> or null"
                    ))
                    .with_hint("a digest as the registry reports it (docker buildx imagetools inspect IMAGE), or null when none is known: never an invented one"));
                }
            };
            Ok(ImagePin {
                key: key.clone(),
                repository: field("repository")?,
                tag: field("tag")?,
                digest,
            })
        })
        .collect()
}

/// Whether `pins` name `image` (a reference without a tag takes its tag from a chart: its
/// repository must be pinned).
pub fn pinned(image: &str, pins: &[ImagePin]) -> bool {
    pin_of(image, pins).is_some()
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

/// Why a reference breaks the pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// VERSIONS.json pins no such repository and tag.
    Unpinned,
    /// A CI template spells out an image instead of writing `{images.KEY}` (the key, when
    /// VERSIONS.json pins it).
    SpelledOut(Option<String>),
    /// A `{images.KEY}` placeholder whose key VERSIONS.json does not have.
    UnknownPin,
}

/// One reference that breaks the pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub reference: ImageRef,
    pub problem: Problem,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reference = &self.reference;
        if reference.line == 0 {
            write!(f, "{}: ", reference.file)?;
        } else {
            write!(f, "{}:{}: ", reference.file, reference.line)?;
        }
        match &self.problem {
            Problem::Unpinned => write!(f, "{} is not pinned", reference.image),
            Problem::SpelledOut(Some(key)) => write!(
                f,
                "{} is spelled out: write {{images.{key}}}",
                reference.image
            ),
            Problem::SpelledOut(None) => write!(
                f,
                "{} is spelled out and not pinned: pin it, then write {{images.KEY}}",
                reference.image
            ),
            Problem::UnknownPin => write!(f, "{} names no pin", reference.image),
        }
    }
}

/// What [`check`] found: how many references it read, and those that break the pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinReport {
    pub checked: usize,
    pub findings: Vec<Finding>,
}

/// Whether `file` is a CI template (its images are `{images.KEY}` placeholders, filled from
/// VERSIONS.json when phase 3 renders it), not a values file.
fn is_ci_template(file: &str) -> bool {
    file.starts_with("templates/ci/") || file.starts_with("apps/shared-code/templates/")
}

/// The `{images.KEY}` placeholders in `text`: (line, key).
fn placeholders(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .flat_map(|(index, line)| {
            line_placeholders(line)
                .into_iter()
                .map(move |(_, key)| (index + 1, key.to_string()))
        })
        .collect()
}

/// The pin of `image` (its repository and tag), if any.
fn pin_of<'a>(image: &str, pins: &'a [ImagePin]) -> Option<&'a ImagePin> {
    let repository = canonical_repository(image);
    pins.iter().find(|pin| {
        canonical_repository(&pin.repository) == repository
            && tag(image).is_none_or(|tag| tag == pin.tag)
    })
}

/// Every image reference under `root` checked against `versions` (infra/VERSIONS.json, as
/// `helm::parse_versions` reads it), in file order: a values file names pinned images; a CI
/// template writes `{images.KEY}` with a known key.
pub fn check(root: &Path, versions: &Value) -> Result<PinReport, ClientError> {
    let pins = pins(versions)?;
    let mut findings = Vec::new();
    let mut checked = 0;
    for file in pinned_files(root) {
        let text = std::fs::read_to_string(root.join(&file))
            .map_err(|error| ClientError::new(format!("cannot read {file}: {error}")))?;
        let found = references(&file, &text);
        checked += found.len();
        let template = is_ci_template(&file);
        for reference in found {
            let problem = match (template, pin_of(&reference.image, &pins)) {
                (true, pin) => Problem::SpelledOut(pin.map(|pin| pin.key.clone())),
                (false, Some(_)) => continue,
                (false, None) => Problem::Unpinned,
            };
            findings.push(Finding { reference, problem });
        }
        if template {
            for (line, key) in placeholders(&text) {
                checked += 1;
                if !pins.iter().any(|pin| pin.key == key) {
                    findings.push(Finding {
                        reference: ImageRef {
                            file: file.clone(),
                            line,
                            image: format!("{{images.{key}}}"),
                        },
                        problem: Problem::UnknownPin,
                    });
                }
            }
        }
    }
    // The charts' values overrides in VERSIONS.json itself (an `images` entry is a pin by
    // construction; a spelled-out override must still be pinned).
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
                    findings.push(Finding {
                        reference: ImageRef {
                            file: format!(
                                "{} (helm_repositories.{key}.values_overrides)",
                                VERSIONS_FILE
                            ),
                            line: 0,
                            image: reference,
                        },
                        problem: Problem::Unpinned,
                    });
                }
            }
        }
    }
    Ok(PinReport { checked, findings })
}

/// `values` with, at each dotted path of `images` (`image`, `bprunJobImage`), the map
/// `{repository, tag}` (and `digest` when known) of the pin it names: how a chart's image
/// override is read from VERSIONS.json. An unknown key is an error naming the chart.
pub fn chart_overrides(
    chart: &str,
    images: &std::collections::BTreeMap<String, String>,
    pins: &[ImagePin],
    values: &mut serde_json::Map<String, Value>,
) -> Result<(), ClientError> {
    for (path, key) in images {
        let pin = pins.iter().find(|pin| &pin.key == key).ok_or_else(|| {
            let known: Vec<&str> = pins.iter().map(|pin| pin.key.as_str()).collect();
            ClientError::new(format!(
                "{}: helm_repositories.{chart}.images.{path} names `{key}`, which images does not pin",
                VERSIONS_FILE
            ))
            .with_hint(format!("pinned images: {}", known.join(", ")))
        })?;
        let mut image = serde_json::Map::new();
        image.insert("repository".into(), pin.repository.clone().into());
        image.insert("tag".into(), pin.tag.clone().into());
        if let Some(digest) = &pin.digest {
            image.insert("digest".into(), digest.clone().into());
        }
        let mut segments: Vec<&str> = path.split('.').collect();
        let last = segments.pop().unwrap_or_default();
        let mut at = &mut *values;
        for segment in segments {
            let entry = at
                .entry(segment.to_string())
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(serde_json::Map::new());
            }
            at = entry.as_object_mut().ok_or_else(|| {
                ClientError::new(format!("helm_repositories.{chart}.images.{path}"))
            })?;
        }
        match at.get_mut(last) {
            Some(Value::Object(existing)) => existing.extend(image),
            _ => {
                at.insert(last.to_string(), Value::Object(image));
            }
        }
    }
    Ok(())
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

    fn sample_pins() -> Vec<ImagePin> {
        pins(&json!({"images": {
            "helm-ci": {"repository": "alpine/helm", "tag": "3.16.4", "digest": null},
            "alpine": {"repository": "alpine", "tag": "3.20",
                       "digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
        }}))
        .expect("pins")
    }

    #[test]
    fn a_template_gets_each_pin_with_its_digest_when_known_and_comments_stay() {
        let text = "# write \"{images.KEY}\"\nlint:\n  image: \"{images.helm-ci}\"\ntest:\n  image: {images.alpine}\n";
        assert_eq!(
            render(text, "t.yml", &sample_pins()).expect("rendered"),
            "# write \"{images.KEY}\"\nlint:\n  image: \"alpine/helm:3.16.4\"\ntest:\n  image: alpine:3.20@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
        );
        let unknown = render(
            "a:\n  image: \"{images.kaniko}\"\n",
            "t.yml",
            &sample_pins(),
        )
        .expect_err("no such pin");
        assert_eq!(
            (unknown.message.as_str(), unknown.hint.as_deref()),
            (
                "t.yml:2:11: unknown image pin {images.kaniko}: infra/VERSIONS.json's images have no `kaniko`",
                Some(
                    "pinned images: alpine, helm-ci; add the image to infra/VERSIONS.json's images (repository, tag, digest or null)"
                )
            )
        );
    }

    #[test]
    fn a_digest_that_is_not_sha256_is_refused() {
        let refused = pins(
            &json!({"images": {"x": {"repository": "x", "tag": "1", "digest": "sha256:abc"}}}),
        )
        .expect_err("a short digest");
        assert_eq!(
            refused.message,
            "infra/VERSIONS.json: images.x.digest is \"sha256:abc\", not sha256:<64 hex digits> or null"
        );
    }

    #[test]
    fn a_charts_images_become_its_values_overrides_at_their_paths() {
        let mut values = serde_json::Map::new();
        values.insert("image".into(), json!({"registry": "docker.io"}));
        let images = [
            ("image".to_string(), "helm-ci".to_string()),
            ("job.image".to_string(), "alpine".to_string()),
        ]
        .into_iter()
        .collect();
        chart_overrides("c", &images, &sample_pins(), &mut values).expect("known pins");
        assert_eq!(
            Value::Object(values),
            json!({
                "image": {"registry": "docker.io", "repository": "alpine/helm", "tag": "3.16.4"},
                "job": {"image": {"repository": "alpine", "tag": "3.20",
                        "digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
            })
        );
        let unknown = [("image".to_string(), "nope".to_string())]
            .into_iter()
            .collect();
        let refused = chart_overrides("c", &unknown, &sample_pins(), &mut serde_json::Map::new())
            .expect_err("unknown pin");
        assert_eq!(
            refused.message,
            "infra/VERSIONS.json: helm_repositories.c.images.image names `nope`, which images does not pin"
        );
    }

    #[test]
    fn a_ci_template_that_spells_an_image_out_or_names_no_pin_is_a_finding() {
        let root = tempfile::tempdir().expect("temp dir");
        let write = |path: &str, text: &str| {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(path, text).expect("write");
        };
        write(
            "infra/VERSIONS.json",
            &json!({"helm_repositories": {}, "images": {
                "helm-ci": {"repository": "alpine/helm", "tag": "3.16.4", "digest": null}}})
            .to_string(),
        );
        write(
            "templates/ci/x.yml",
            "a:\n  image: alpine/helm:3.16.4\nb:\n  image: busybox:1\nc:\n  image: \"{images.nope}\"\nd:\n  image: \"{images.helm-ci}\"\n",
        );
        write(
            "infra/helm-values/v.yaml",
            "image:\n  repository: alpine/helm\n  tag: \"3.16.4\"\nother:\n  image: busybox:1\n",
        );
        let versions: Value = serde_json::from_str(
            &std::fs::read_to_string(root.path().join(VERSIONS_FILE)).expect("versions"),
        )
        .expect("JSON");
        let report = check(root.path(), &versions).expect("checked");
        let shown: Vec<String> = report.findings.iter().map(Finding::to_string).collect();
        assert_eq!(
            (report.checked, shown),
            (
                6,
                vec![
                    "infra/helm-values/v.yaml:5: busybox:1 is not pinned".to_string(),
                    "templates/ci/x.yml:2: alpine/helm:3.16.4 is spelled out: write {images.helm-ci}".to_string(),
                    "templates/ci/x.yml:4: busybox:1 is spelled out and not pinned: pin it, then write {images.KEY}".to_string(),
                    "templates/ci/x.yml:6: {images.nope} names no pin".to_string(),
                ]
            )
        );
    }
}
