//! The part of GitLab CI that pipeline creation checks: YAML, `include:` (local and
//! cross-project), stages and `needs:`. Messages follow GitLab's.

use serde_json::Value;

/// The keys of `.gitlab-ci.yml` that are not jobs.
const RESERVED: &[&str] = &[
    "stages",
    "variables",
    "include",
    "default",
    "workflow",
    "image",
    "services",
    "before_script",
    "after_script",
    "cache",
    "spec",
];
const DEFAULT_STAGES: &[&str] = &[".pre", "build", "test", "deploy", ".post"];
/// How deep `include:` may nest (GitLab allows 150 files; 100 levels is plenty here).
const MAX_INCLUDES: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiJob {
    pub name: String,
    pub stage: String,
    /// The job's `script` lines (empty when it comes from `extends`).
    pub script: Vec<String>,
    /// The job's `tags:` (a runner must carry all of them).
    pub tags: Vec<String>,
}

/// Where included files come from: `(project path or None for this project, ref, file path)`.
/// `Err` carries GitLab's message (project not found, ref missing).
pub type Fetch<'a> = dyn Fn(Option<&str>, &str, &str) -> Result<Option<String>, String> + 'a;

/// Checks a pipeline configuration and returns its jobs in stage order, or GitLab's messages.
pub fn resolve(text: &str, reference: &str, fetch: &Fetch) -> Result<Vec<CiJob>, Vec<String>> {
    let mut config = serde_json::Map::new();
    let mut includes = 0;
    merge_document(text, None, reference, fetch, &mut config, &mut includes)
        .map_err(|message| vec![message])?;

    let stages: Vec<String> = match config.get("stages") {
        Some(Value::Array(items)) => {
            let mut stages = vec![".pre".to_string()];
            stages.extend(
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_string)),
            );
            stages.push(".post".to_string());
            stages
        }
        _ => DEFAULT_STAGES.iter().map(|s| s.to_string()).collect(),
    };
    let mut errors = Vec::new();
    let mut jobs = Vec::new();
    for (name, body) in &config {
        if RESERVED.contains(&name.as_str()) || name.starts_with('.') {
            continue;
        }
        let Value::Object(job) = body else {
            errors.push(format!("jobs:{name} config should be a hash"));
            continue;
        };
        let stage = job
            .get("stage")
            .and_then(Value::as_str)
            .unwrap_or("test")
            .to_string();
        if !stages.contains(&stage) {
            errors.push(format!(
                "jobs:{name} job: chosen stage {stage} does not exist; available stages are {}",
                stages.join(", ")
            ));
        }
        let script = match job.get("script") {
            Some(Value::String(line)) => vec![line.clone()],
            Some(Value::Array(lines)) => lines
                .iter()
                .map(|line| {
                    line.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| line.to_string())
                })
                .collect(),
            _ => Vec::new(),
        };
        let tags = match job.get("tags") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect(),
            Some(Value::String(tag)) => vec![tag.clone()],
            _ => Vec::new(),
        };
        jobs.push((
            CiJob {
                name: name.clone(),
                stage,
                script,
                tags,
            },
            job.clone(),
        ));
    }
    for (job, body) in &jobs {
        let needs: Vec<String> = match body.get("needs") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| match item {
                    Value::String(name) => Some(name.clone()),
                    Value::Object(map) => {
                        map.get("job").and_then(Value::as_str).map(str::to_string)
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for need in needs {
            if !jobs.iter().any(|(other, _)| other.name == need) {
                errors.push(format!(
                    "'{}' job needs '{need}' job, but '{need}' does not exist in the pipeline. This might be because of the only, except, or rules keywords. To need a job that sometimes does not exist in the pipeline, use needs:optional.",
                    job.name
                ));
            }
        }
    }
    if jobs.is_empty() {
        errors.push("jobs config should contain at least one visible job".to_string());
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut ordered: Vec<CiJob> = jobs.into_iter().map(|(job, _)| job).collect();
    ordered.sort_by_key(|job| {
        stages
            .iter()
            .position(|stage| *stage == job.stage)
            .unwrap_or(usize::MAX)
    });
    Ok(ordered)
}

fn merge_document(
    text: &str,
    project: Option<&str>,
    reference: &str,
    fetch: &Fetch,
    config: &mut serde_json::Map<String, Value>,
    includes: &mut usize,
) -> Result<(), String> {
    let document: Value = serde_norway::from_str(text)
        .map_err(|error| format!("Invalid configuration format: {error}"))?;
    let Value::Object(document) = document else {
        return Err("Invalid configuration format".to_string());
    };
    if let Some(include) = document.get("include") {
        for entry in include_entries(include)? {
            *includes += 1;
            if *includes > MAX_INCLUDES {
                return Err(format!(
                    "Maximum of {MAX_INCLUDES} nested includes are allowed!"
                ));
            }
            let (source_project, source_ref, file) = match &entry {
                Include::Local(file) => (
                    project.map(str::to_string),
                    reference.to_string(),
                    file.clone(),
                ),
                Include::Project {
                    project,
                    reference,
                    file,
                } => (Some(project.clone()), reference.clone(), file.clone()),
            };
            let included = fetch(
                source_project.as_deref(),
                &source_ref,
                file.trim_start_matches('/'),
            )?;
            let Some(included) = included else {
                return Err(match (&entry, &source_project) {
                    (Include::Local(file), _) => format!("Local file `{file}` does not exist!"),
                    (Include::Project { project, file, .. }, _) => {
                        format!("Project `{project}` file `{file}` does not exist!")
                    }
                });
            };
            merge_document(
                &included,
                source_project.as_deref(),
                &source_ref,
                fetch,
                config,
                includes,
            )?;
        }
    }
    for (key, value) in document {
        if key != "include" {
            config.insert(key, value);
        }
    }
    Ok(())
}

enum Include {
    Local(String),
    Project {
        project: String,
        reference: String,
        file: String,
    },
}

fn include_entries(include: &Value) -> Result<Vec<Include>, String> {
    let items: Vec<&Value> = match include {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let mut entries = Vec::new();
    for item in items {
        match item {
            Value::String(file) => entries.push(Include::Local(file.clone())),
            Value::Object(map) => {
                if let Some(file) = map.get("local").and_then(Value::as_str) {
                    entries.push(Include::Local(file.to_string()));
                } else if let Some(project) = map.get("project").and_then(Value::as_str) {
                    let reference = map
                        .get("ref")
                        .and_then(Value::as_str)
                        .unwrap_or("HEAD")
                        .to_string();
                    let files: Vec<String> = match map.get("file") {
                        Some(Value::String(file)) => vec![file.clone()],
                        Some(Value::Array(files)) => files
                            .iter()
                            .filter_map(|f| f.as_str().map(str::to_string))
                            .collect(),
                        _ => {
                            return Err("Included file `project` must specify a `file`".to_string());
                        }
                    };
                    for file in files {
                        entries.push(Include::Project {
                            project: project.to_string(),
                            reference: reference.clone(),
                            file,
                        });
                    }
                } else {
                    return Err(format!(
                        "Included file `{item}` does not have a valid location!"
                    ));
                }
            }
            _ => return Err("Included file must be a string or a hash".to_string()),
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(
        project: Option<&str>,
        _reference: &str,
        file: &str,
    ) -> Result<Option<String>, String> {
        match (project, file) {
            (Some("blueprint-apps/shared-code"), "templates/app.yml") => Ok(Some(
                "stages: [build, deploy]\n.build:\n  script: [make]\n".to_string(),
            )),
            (Some("blueprint-apps/shared-code"), _) => Ok(None),
            (Some(other), _) if other != "blueprint-apps/guestbook" => Err(format!(
                "Project `{other}` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined."
            )),
            (_, "ci/local.yml") => Ok(Some(
                "lint:\n  stage: build\n  script: [true]\n".to_string(),
            )),
            _ => Ok(None),
        }
    }

    #[test]
    fn cross_project_and_local_includes_resolve() {
        let text = "include:\n  - project: blueprint-apps/shared-code\n    ref: main\n    file: templates/app.yml\n  - local: ci/local.yml\nbuild:\n  extends: .build\n  stage: build\n  script: [make]\ndeploy:\n  stage: deploy\n  needs: [build]\n  script: [helm]\n";
        let jobs = resolve(text, "main", &files).expect("valid");
        let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
        assert_eq!(names, ["build", "lint", "deploy"]);
    }

    #[test]
    fn a_missing_project_or_file_is_reported_as_gitlab_does() {
        let missing_project =
            "include:\n  project: blueprint-apps/nope\n  file: a.yml\njob:\n  script: [x]\n";
        assert_eq!(
            resolve(missing_project, "main", &files),
            Err(vec!["Project `blueprint-apps/nope` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined.".to_string()])
        );
        let missing_file = "include:\n  project: blueprint-apps/shared-code\n  file: templates/none.yml\njob:\n  script: [x]\n";
        assert_eq!(
            resolve(missing_file, "main", &files),
            Err(vec![
                "Project `blueprint-apps/shared-code` file `templates/none.yml` does not exist!"
                    .to_string()
            ])
        );
    }

    #[test]
    fn stages_and_needs_are_checked() {
        let text = "stages: [build]\nbuild:\n  script: [x]\n  stage: build\ndeploy:\n  stage: deploy\n  needs: [compile]\n  script: [y]\n";
        let errors = resolve(text, "main", &files).expect_err("invalid");
        assert_eq!(
            errors[0],
            "jobs:deploy job: chosen stage deploy does not exist; available stages are .pre, build, .post"
        );
        assert!(errors[1].starts_with(
            "'deploy' job needs 'compile' job, but 'compile' does not exist in the pipeline."
        ));
    }
}
