//! The part of GitLab CI that pipeline creation checks: YAML (with merge keys), `include:`
//! (local and cross-project), `!reference` tags, `extends:`, stages, `script:`, `needs:`, and which jobs a pipeline gets:
//! `workflow:rules`, `rules:` (`if`, `changes`, `exists`, `when`) and `only`/`except`.
//! Messages follow GitLab's.

use serde_json::Value;

/// CI jobs that really run (when their image is known).
pub mod jobs;
mod rules;

use rules::{evaluate_rules, only_except};

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
    /// `on_success`, `always`, `manual` or `delayed` (from `rules:` or the job's `when`).
    pub when: String,
    /// What the job runs, as a runner needs it: its image, scripts, YAML variables, timeout
    /// and environment.
    pub run: JobRun,
}

/// The parts of a job a runner uses to run it (the job's own keys, else `default:`, else the
/// file's top-level keys, as GitLab merges them).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobRun {
    /// `image:` (a string or `{name: ...}`); `None`: the runner's default image.
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub before_script: Vec<String>,
    #[serde(default)]
    pub after_script: Vec<String>,
    /// The YAML `variables:`, the file's first and then the job's (a later key wins), as GitLab
    /// gives them to the job (below every CI/CD variable of the project).
    #[serde(default)]
    pub variables: Vec<(String, String)>,
    /// `timeout:` as written (`1h 30m`, `10 minutes`); `None`: the project's timeout.
    #[serde(default)]
    pub timeout: Option<String>,
    /// `environment:` (its name): which environment-scoped CI/CD variables the job sees.
    #[serde(default)]
    pub environment: Option<String>,
}

/// Where included files come from: `(project path or None for this project, ref, file path)`.
/// `Err` carries GitLab's message (project not found, ref missing).
pub type Fetch<'a> = dyn Fn(Option<&str>, &str, &str) -> Result<Option<String>, String> + 'a;

/// What a pipeline is created for: the predefined variables and the repository facts `rules:`
/// and `only`/`except` read.
pub struct Context<'a> {
    /// `CI_PIPELINE_SOURCE`: `push`, `api`, `web`, ...
    pub source: &'a str,
    /// The branch (`CI_COMMIT_BRANCH`, `CI_COMMIT_REF_NAME`).
    pub reference: &'a str,
    pub default_branch: Option<&'a str>,
    /// `group/project`.
    pub project_path: &'a str,
    /// The project's CI/CD variables.
    pub variables: Vec<(String, String)>,
    /// The files of the tree at `reference` (`rules:exists`).
    pub files: Vec<String>,
    /// For a push that updated a branch: the files it changed. `None` (a new branch, an API
    /// pipeline): `changes` is always true, as GitLab evaluates it.
    pub changed: Option<Vec<String>>,
}

impl Context<'_> {
    /// A context for tests: an API pipeline on `main` of `group/project`.
    pub fn api(reference: &str) -> Context<'_> {
        Context {
            source: "api",
            reference,
            default_branch: Some("main"),
            project_path: "group/project",
            variables: Vec::new(),
            files: Vec::new(),
            changed: None,
        }
    }

    fn predefined(&self) -> Vec<(String, String)> {
        let (namespace, name) = self
            .project_path
            .rsplit_once('/')
            .unwrap_or(("", self.project_path));
        let slug: String = self
            .reference
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let mut variables = vec![
            ("CI".to_string(), "true".to_string()),
            ("GITLAB_CI".to_string(), "true".to_string()),
            ("CI_PIPELINE_SOURCE".to_string(), self.source.to_string()),
            ("CI_COMMIT_BRANCH".to_string(), self.reference.to_string()),
            ("CI_COMMIT_REF_NAME".to_string(), self.reference.to_string()),
            (
                "CI_COMMIT_REF_SLUG".to_string(),
                slug.trim_matches('-').chars().take(63).collect(),
            ),
            ("CI_PROJECT_PATH".to_string(), self.project_path.to_string()),
            ("CI_PROJECT_NAME".to_string(), name.to_string()),
            ("CI_PROJECT_NAMESPACE".to_string(), namespace.to_string()),
        ];
        if let Some(default) = self.default_branch {
            variables.push(("CI_DEFAULT_BRANCH".to_string(), default.to_string()));
        }
        variables
    }
}

/// Why no pipeline was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CiError {
    /// The configuration is invalid (GitLab's messages): an API request is refused with them;
    /// a push gets a failed pipeline carrying them as `yaml_errors`.
    Invalid(Vec<String>),
    /// Valid, but `workflow:rules` or the jobs' rules leave nothing to run: an API request is
    /// refused with this message; a push creates no pipeline.
    Filtered(String),
}

impl CiError {
    pub fn messages(&self) -> Vec<String> {
        match self {
            CiError::Invalid(messages) => messages.clone(),
            CiError::Filtered(message) => vec![message.clone()],
        }
    }
}

/// GitLab's words when `workflow:rules` exclude the pipeline.
pub const FILTERED_BY_WORKFLOW: &str = "Pipeline filtered out by workflow rules.";
/// GitLab's words when the jobs' rules leave no job.
pub const FILTERED_BY_RULES: &str = "Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline.";
/// How deep `extends` may nest (GitLab's limit).
const MAX_EXTENDS_DEPTH: usize = 11;

/// Checks a pipeline configuration, evaluates `workflow:rules`, `rules:` and `only`/`except`
/// for `context`, and returns the jobs in stage order, or why there is no pipeline.
pub fn resolve(text: &str, context: &Context, fetch: &Fetch) -> Result<Vec<CiJob>, CiError> {
    let mut config = serde_json::Map::new();
    let mut includes = 0;
    merge_document(
        text,
        None,
        context.reference,
        fetch,
        &mut config,
        &mut includes,
    )
    .map_err(|message| CiError::Invalid(vec![message]))?;
    let config = resolve_references(&config).map_err(|message| CiError::Invalid(vec![message]))?;
    let config = expand_extends(&config).map_err(|message| CiError::Invalid(vec![message]))?;

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
        if !job.contains_key("script") && !job.contains_key("run") && !job.contains_key("trigger") {
            errors.push(format!(
                "jobs:{name} config should implement the script:, run:, or trigger: keyword"
            ));
        }
        let legacy: Vec<&str> = ["only", "except"]
            .into_iter()
            .filter(|key| job.contains_key(*key))
            .collect();
        if job.contains_key("rules") && !legacy.is_empty() {
            errors.push(format!(
                "jobs:{name} config key may not be used with `rules`: {}",
                legacy.join(", ")
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
        let run = job_run(&config, job);
        jobs.push((
            CiJob {
                name: name.clone(),
                stage,
                script,
                tags,
                when: "on_success".to_string(),
                run,
            },
            job.clone(),
        ));
    }
    errors.extend(needs_errors(&jobs));
    if jobs.is_empty() {
        errors.push("jobs config should contain at least one visible job".to_string());
    }
    if !errors.is_empty() {
        return Err(CiError::Invalid(errors));
    }

    // The variables `if:` sees: predefined, the project's, the file's, then the job's.
    let mut variables = context.predefined();
    variables.extend(context.variables.iter().cloned());
    if let Some(Value::Object(global)) = config.get("variables") {
        variables.extend(variable_pairs(global));
    }
    if let Some(rules) = config.get("workflow").and_then(|w| w.get("rules")) {
        match evaluate_rules(rules, &variables, context, None, "workflow:rules")
            .map_err(|message| CiError::Invalid(vec![message]))?
        {
            Some(when) if when != "never" => {}
            _ => return Err(CiError::Filtered(FILTERED_BY_WORKFLOW.to_string())),
        }
    }
    let mut kept = Vec::new();
    for (mut job, body) in jobs {
        let mut own = variables.clone();
        if let Some(Value::Object(local)) = body.get("variables") {
            own.extend(variable_pairs(local));
        }
        let job_when = body.get("when").and_then(Value::as_str);
        let when = match body.get("rules") {
            Some(rules) => evaluate_rules(
                rules,
                &own,
                context,
                job_when,
                &format!("jobs:{}:rules", job.name),
            )
            .map_err(|message| CiError::Invalid(vec![message]))?,
            None => only_except(&body, &own, context)
                .then(|| job_when.unwrap_or("on_success").to_string()),
        };
        match when {
            Some(when) if when != "never" => {
                job.when = when;
                kept.push((job, body));
            }
            _ => {}
        }
    }
    if kept.is_empty() {
        return Err(CiError::Filtered(FILTERED_BY_RULES.to_string()));
    }
    let errors = needs_errors(&kept);
    if !errors.is_empty() {
        return Err(CiError::Invalid(errors));
    }
    let mut ordered: Vec<CiJob> = kept.into_iter().map(|(job, _)| job).collect();
    ordered.sort_by_key(|job| {
        stages
            .iter()
            .position(|stage| *stage == job.stage)
            .unwrap_or(usize::MAX)
    });
    Ok(ordered)
}

/// A job's run settings: its own keys first, then `default:`, then the file's top level.
fn job_run(
    config: &serde_json::Map<String, Value>,
    job: &serde_json::Map<String, Value>,
) -> JobRun {
    let default = config.get("default").and_then(Value::as_object);
    let inherited = |key: &str| -> Option<&Value> {
        job.get(key)
            .or_else(|| default.and_then(|default| default.get(key)))
            .or_else(|| config.get(key))
    };
    let lines = |value: Option<&Value>| -> Vec<String> {
        match value {
            Some(Value::String(line)) => vec![line.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| item.to_string())
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let name_of = |value: Option<&Value>| -> Option<String> {
        match value {
            Some(Value::String(name)) => Some(name.clone()),
            Some(Value::Object(spec)) => {
                spec.get("name").and_then(Value::as_str).map(str::to_string)
            }
            _ => None,
        }
    };
    let mut variables = Vec::new();
    if let Some(Value::Object(global)) = config.get("variables") {
        variables.extend(variable_pairs(global));
    }
    if let Some(Value::Object(own)) = job.get("variables") {
        variables.extend(variable_pairs(own));
    }
    JobRun {
        image: name_of(inherited("image")).filter(|name| !name.is_empty()),
        before_script: lines(inherited("before_script")),
        after_script: lines(inherited("after_script")),
        variables,
        timeout: job
            .get("timeout")
            .or_else(|| default.and_then(|default| default.get("timeout")))
            .and_then(Value::as_str)
            .map(str::to_string),
        environment: name_of(job.get("environment")),
    }
}

/// `needs:` naming a job that is not in `jobs` (optional needs excepted).
fn needs_errors(jobs: &[(CiJob, serde_json::Map<String, Value>)]) -> Vec<String> {
    let mut errors = Vec::new();
    for (job, body) in jobs {
        let needs: Vec<String> = match body.get("needs") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| match item {
                    Value::String(name) => Some(name.clone()),
                    Value::Object(map) if map.get("optional") != Some(&Value::Bool(true)) => {
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
    errors
}

fn variable_pairs(map: &serde_json::Map<String, Value>) -> Vec<(String, String)> {
    map.iter()
        .map(|(key, value)| {
            let value = match value {
                Value::String(text) => text.clone(),
                Value::Object(spec) => spec
                    .get("value")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                other => other.to_string(),
            };
            (key.clone(), value)
        })
        .collect()
}

/// The marker a `!reference [job, key, ...]` tag becomes until it is resolved.
const REFERENCE: &str = "!reference";

/// A YAML document as JSON; a `!reference [...]` tag becomes `{"!reference": [...]}`, other
/// tags are dropped (their value kept).
fn json_of(yaml: serde_norway::Value) -> Value {
    use serde_norway::Value as Yaml;
    match yaml {
        Yaml::Null => Value::Null,
        Yaml::Bool(flag) => Value::Bool(flag),
        Yaml::Number(number) => serde_json::to_value(&number).unwrap_or(Value::Null),
        Yaml::String(text) => Value::String(text),
        Yaml::Sequence(items) => Value::Array(items.into_iter().map(json_of).collect()),
        Yaml::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| {
                    let key = match key {
                        Yaml::String(text) => text,
                        other => serde_norway::to_string(&other)
                            .map(|text| text.trim().to_string())
                            .unwrap_or_default(),
                    };
                    (key, json_of(value))
                })
                .collect(),
        ),
        Yaml::Tagged(tagged) => {
            let value = json_of(tagged.value);
            if tagged.tag == "reference" {
                serde_json::json!({ REFERENCE: value })
            } else {
                value
            }
        }
    }
}

/// `!reference [name, key, ...]` tags resolved as GitLab resolves them: after the includes are
/// merged and before `extends`; a referenced array inside an array is spliced into it; at most
/// 10 nested references.
fn resolve_references(
    config: &serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, String> {
    fn path_of(value: &Value) -> Option<Vec<String>> {
        value.as_object()?.get(REFERENCE)?.as_array().map(|items| {
            items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map_or_else(|| item.to_string(), str::to_string)
                })
                .collect()
        })
    }
    // Ruby's Array#inspect, as GitLab's message prints the path.
    fn shown(path: &[String]) -> String {
        let items: Vec<String> = path.iter().map(|item| format!("{item:?}")).collect();
        format!("!reference [{}]", items.join(", "))
    }
    fn resolve(
        value: &Value,
        config: &serde_json::Map<String, Value>,
        depth: usize,
    ) -> Result<Value, String> {
        if let Some(path) = path_of(value) {
            if depth >= 10 {
                return Err(format!("{} is part of a circular chain", shown(&path)));
            }
            let mut target = path.first().and_then(|name| config.get(name));
            for key in path.iter().skip(1) {
                target = target.and_then(|found| found.get(key));
            }
            let Some(target) = target else {
                return Err(format!("{} could not be found", shown(&path)));
            };
            return resolve(target, config, depth + 1);
        }
        match value {
            Value::Array(items) => {
                let mut out = Vec::new();
                for item in items {
                    let resolved = resolve(item, config, depth)?;
                    match (path_of(item), resolved) {
                        (Some(_), Value::Array(spliced)) => out.extend(spliced),
                        (_, resolved) => out.push(resolved),
                    }
                }
                Ok(Value::Array(out))
            }
            Value::Object(map) => Ok(Value::Object(
                map.iter()
                    .map(|(key, value)| Ok((key.clone(), resolve(value, config, depth)?)))
                    .collect::<Result<_, String>>()?,
            )),
            other => Ok(other.clone()),
        }
    }
    config
        .iter()
        .map(|(key, value)| Ok((key.clone(), resolve(value, config, 0)?)))
        .collect()
}

/// `extends:` resolved as GitLab does: hashes merged deeply (the job's keys win), anything
/// else replaced; several bases apply in order; at most 11 levels.
fn expand_extends(
    config: &serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, String> {
    fn expand(
        name: &str,
        config: &serde_json::Map<String, Value>,
        depth: usize,
    ) -> Result<Value, String> {
        let body = &config[name];
        let Value::Object(job) = body else {
            return Ok(body.clone());
        };
        let bases: Vec<String> = match job.get("extends") {
            None => return Ok(body.clone()),
            Some(Value::String(base)) => vec![base.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect(),
            Some(_) => return Err(format!("{name}: invalid `extends`")),
        };
        if depth >= MAX_EXTENDS_DEPTH {
            return Err(format!("{name}: nesting too deep in `extends`"));
        }
        let unknown: Vec<&str> = bases
            .iter()
            .filter(|base| !config.contains_key(base.as_str()))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "{name}: unknown keys in `extends` ({})",
                unknown.join(", ")
            ));
        }
        let mut merged = Value::Object(serde_json::Map::new());
        for base in &bases {
            if base == name {
                return Err(format!("{name}: circular dependency detected in `extends`"));
            }
            deep_merge(&mut merged, expand(base, config, depth + 1)?);
        }
        let mut own = job.clone();
        own.remove("extends");
        deep_merge(&mut merged, Value::Object(own));
        Ok(merged)
    }
    fn deep_merge(into: &mut Value, from: Value) {
        match (into, from) {
            (Value::Object(into), Value::Object(from)) => {
                for (key, value) in from {
                    match into.get_mut(&key) {
                        Some(existing @ Value::Object(_)) if value.is_object() => {
                            deep_merge(existing, value)
                        }
                        _ => {
                            into.insert(key, value);
                        }
                    }
                }
            }
            (into, from) => *into = from,
        }
    }
    let mut expanded = serde_json::Map::new();
    for name in config.keys() {
        let value = if RESERVED.contains(&name.as_str()) {
            config[name].clone()
        } else {
            expand(name, config, 0)?
        };
        expanded.insert(name.clone(), value);
    }
    Ok(expanded)
}

fn merge_document(
    text: &str,
    project: Option<&str>,
    reference: &str,
    fetch: &Fetch,
    config: &mut serde_json::Map<String, Value>,
    includes: &mut usize,
) -> Result<(), String> {
    let mut yaml: serde_norway::Value = serde_norway::from_str(text)
        .map_err(|error| format!("Invalid configuration format: {error}"))?;
    // YAML's merge keys (`<<: *anchor`), which GitLab's parser applies.
    yaml.apply_merge()
        .map_err(|error| format!("Invalid configuration format: {error}"))?;
    let document = json_of(yaml);
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
        let jobs = resolve(text, &Context::api("main"), &files).expect("valid");
        let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
        assert_eq!(names, ["build", "lint", "deploy"]);
    }

    #[test]
    fn a_missing_project_or_file_is_reported_as_gitlab_does() {
        let missing_project =
            "include:\n  project: blueprint-apps/nope\n  file: a.yml\njob:\n  script: [x]\n";
        assert_eq!(
            resolve(missing_project, &Context::api("main"), &files),
            Err(CiError::Invalid(vec!["Project `blueprint-apps/nope` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined.".to_string()]))
        );
        let missing_file = "include:\n  project: blueprint-apps/shared-code\n  file: templates/none.yml\njob:\n  script: [x]\n";
        assert_eq!(
            resolve(missing_file, &Context::api("main"), &files),
            Err(CiError::Invalid(vec![
                "Project `blueprint-apps/shared-code` file `templates/none.yml` does not exist!"
                    .to_string()
            ]))
        );
    }

    #[test]
    fn reference_tags_reuse_sections_and_merge_keys_apply() {
        let text = ".setup:\n  script: [echo setup, echo more]\n  variables: {A: one}\n.vars: &vars\n  B: two\njob:\n  variables:\n    <<: *vars\n    A: !reference [.setup, variables, A]\n  script:\n    - !reference [.setup, script]\n    - make\n";
        let jobs = resolve(text, &Context::api("main"), &files).expect("valid");
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].script, ["echo setup", "echo more", "make"]);
        let missing = "job:\n  script:\n    - !reference [.nope, script]\n";
        assert_eq!(
            resolve(missing, &Context::api("main"), &files),
            Err(CiError::Invalid(vec![
                "!reference [\".nope\", \"script\"] could not be found".to_string()
            ]))
        );
        let circular = ".a:\n  script: !reference [.b, script]\n.b:\n  script: !reference [.a, script]\njob:\n  script: !reference [.a, script]\n";
        let Err(CiError::Invalid(messages)) = resolve(circular, &Context::api("main"), &files)
        else {
            panic!("a circular chain is an error");
        };
        assert!(
            messages.len() == 1 && messages[0].ends_with("\"script\"] is part of a circular chain"),
            "{messages:?}"
        );
    }

    #[test]
    fn stages_and_needs_are_checked() {
        let text = "stages: [build]\nbuild:\n  script: [x]\n  stage: build\ndeploy:\n  stage: deploy\n  needs: [compile]\n  script: [y]\n";
        let errors = resolve(text, &Context::api("main"), &files)
            .expect_err("invalid")
            .messages();
        assert_eq!(
            errors[0],
            "jobs:deploy job: chosen stage deploy does not exist; available stages are .pre, build, .post"
        );
        assert!(errors[1].starts_with(
            "'deploy' job needs 'compile' job, but 'compile' does not exist in the pipeline."
        ));
    }

    fn names(result: Result<Vec<CiJob>, CiError>) -> Vec<String> {
        result
            .expect("jobs")
            .into_iter()
            .map(|job| format!("{}:{}", job.name, job.when))
            .collect()
    }

    #[test]
    fn rules_if_when_exists_and_changes_pick_the_jobs() {
        let text = r#"
build:
  script: [make]
  rules:
    - if: $CI_PIPELINE_SOURCE == "push" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH
    - if: '$CI_PIPELINE_SOURCE == "api"'
      when: manual
deploy:
  stage: deploy
  script: [helm]
  rules:
    - if: $CI_COMMIT_BRANCH =~ /^release-/i
    - when: never
docs:
  script: [mkdocs]
  rules:
    - exists: ["docs/**/*.md"]
    - changes: [README.md]
      when: always
"#;
        let push = |reference, changed: Option<Vec<&str>>, files: Vec<&str>| Context {
            source: "push",
            reference,
            default_branch: Some("main"),
            project_path: "g/p",
            variables: Vec::new(),
            files: files.into_iter().map(str::to_string).collect(),
            changed: changed.map(|list| list.into_iter().map(str::to_string).collect()),
        };
        assert_eq!(
            names(resolve(
                text,
                &push("main", Some(vec!["src/a.rs"]), vec![]),
                &files
            )),
            ["build:on_success"]
        );
        assert_eq!(
            names(resolve(
                text,
                &push("Release-1", Some(vec!["README.md"]), vec![]),
                &files
            )),
            ["docs:always", "deploy:on_success"]
        );
        assert_eq!(
            names(resolve(
                text,
                &push("feature", Some(vec![]), vec!["docs/guide/a.md"]),
                &files
            )),
            ["docs:on_success"]
        );
        // An API pipeline: `changes` is always true there.
        assert_eq!(
            names(resolve(text, &Context::api("main"), &files)),
            ["build:manual", "docs:always"]
        );
        assert_eq!(
            resolve(text, &push("feature", Some(vec!["x"]), vec![]), &files),
            Err(CiError::Filtered(FILTERED_BY_RULES.to_string()))
        );
    }

    #[test]
    fn workflow_rules_filter_the_whole_pipeline() {
        let text = "workflow:\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"api\"\n      when: never\n    - when: always\nbuild:\n  script: [make]\n";
        assert_eq!(
            resolve(text, &Context::api("main"), &files),
            Err(CiError::Filtered(FILTERED_BY_WORKFLOW.to_string()))
        );
        let only_main = "workflow:\n  rules:\n    - if: $CI_COMMIT_BRANCH == \"main\"\nbuild:\n  script: [make]\n";
        assert_eq!(
            names(resolve(only_main, &Context::api("main"), &files)),
            ["build:on_success"]
        );
        assert_eq!(
            resolve(only_main, &Context::api("other"), &files),
            Err(CiError::Filtered(FILTERED_BY_WORKFLOW.to_string()))
        );
        let invalid = "build:\n  script: [make]\n  rules:\n    - if: $A === 1\n";
        assert_eq!(
            resolve(invalid, &Context::api("main"), &files),
            Err(CiError::Invalid(vec![
                "jobs:build:rules:rule if invalid expression syntax".to_string()
            ]))
        );
    }

    #[test]
    fn only_and_except_refs_and_variables() {
        let text = "a:\n  script: [x]\n  only: [main]\nb:\n  script: [x]\n  except: [main, api]\nc:\n  script: [x]\n  only:\n    refs: [/^feat-/]\n    variables: [$CI_PIPELINE_SOURCE == \"push\"]\nd:\n  script: [x]\n  only: [api]\n";
        assert_eq!(
            names(resolve(text, &Context::api("main"), &files)),
            ["a:on_success", "d:on_success"]
        );
        let mut push = Context::api("feat-x");
        push.source = "push";
        assert_eq!(
            names(resolve(text, &push, &files)),
            ["b:on_success", "c:on_success"]
        );
        let mixed = "a:\n  script: [x]\n  only: [main]\n  rules:\n    - when: always\n";
        assert_eq!(
            resolve(mixed, &Context::api("main"), &files),
            Err(CiError::Invalid(vec![
                "jobs:a config key may not be used with `rules`: only".to_string()
            ]))
        );
    }

    #[test]
    fn a_job_needs_a_script_and_extends_supplies_it() {
        let text = ".base:\n  script: [make]\n  variables:\n    A: '1'\nbuild:\n  extends: .base\n  variables:\n    B: '2'\nlint:\n  stage: test\n";
        assert_eq!(
            resolve(text, &Context::api("main"), &files),
            Err(CiError::Invalid(vec![
                "jobs:lint config should implement the script:, run:, or trigger: keyword"
                    .to_string()
            ]))
        );
        let fixed = ".base:\n  script: [make]\n  rules:\n    - if: $A == \"1\" && $B == \"2\"\nbuild:\n  extends: .base\n  variables:\n    A: '1'\n    B: '2'\n";
        let jobs = resolve(fixed, &Context::api("main"), &files).expect("valid");
        assert_eq!(jobs[0].script, ["make"]);
        let unknown = "build:\n  extends: .nope\n  script: [x]\n";
        assert_eq!(
            resolve(unknown, &Context::api("main"), &files),
            Err(CiError::Invalid(vec![
                "build: unknown keys in `extends` (.nope)".to_string()
            ]))
        );
        assert_eq!(
            resolve("variables:\n  A: 1\n", &Context::api("main"), &files),
            Err(CiError::Invalid(vec![
                "jobs config should contain at least one visible job".to_string()
            ]))
        );
    }
}
