//! Project CI/CD variables: validated before sending, compared with what GitLab holds, and only
//! the differences written.

use serde_json::{Value, json};

use super::rules::{maskable, valid_variable_key};
use super::{GitlabClient, Method, encode};
use crate::error::{ClientError, Remedy};
use crate::reconcile::{Change, Detail, Mode, Outcome};

/// The desired state of one CI/CD variable. `value` is the plain text (the caller keeps it out of
/// output; errors name the key, never the value).
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    pub key: String,
    pub value: String,
    pub masked: bool,
    pub protected: bool,
    pub raw: bool,
    pub variable_type: String,
    pub environment_scope: String,
    pub description: Option<String>,
    /// Masked and hidden (GitLab's `masked_and_hidden`, set only when a variable is created):
    /// GitLab never shows or returns its value again, so only its description can tell what it
    /// holds.
    pub hidden: bool,
    /// The value came from a `Secret`: `--diff` never shows it (nor the value it replaces),
    /// masked or not.
    pub secret: bool,
}

impl Variable {
    /// A plain, unmasked `env_var` for every environment.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Variable {
        Variable {
            key: key.into(),
            value: value.into(),
            masked: false,
            protected: false,
            raw: false,
            variable_type: "env_var".into(),
            environment_scope: "*".into(),
            description: None,
            hidden: false,
            secret: false,
        }
    }

    /// GitLab's rules, checked before sending so the error names the key and never the value.
    pub fn validate(&self) -> Result<(), ClientError> {
        let key = &self.key;
        if self.variable_type != "env_var" && self.variable_type != "file" {
            return Err(ClientError::new(format!(
                "CI variable {key}: variable_type must be env_var or file, not {}",
                self.variable_type
            )));
        }
        if !valid_variable_key(key) {
            return Err(
                ClientError::new(format!("CI variable key `{key}` is invalid"))
                    .with_hint("keys are 1 to 255 characters of A-Z a-z 0-9 _"),
            );
        }
        if (self.masked || self.hidden) && (self.value.contains('\n') || !maskable(&self.value)) {
            return Err(ClientError::new(format!(
                "CI variable {key} cannot be masked: its value breaks GitLab's masking rules"
            ))
            .with_hint("a masked value is one line of at least 8 characters from the Base64 alphabet plus @ : . ~ (set masked to false, or Base64-encode the value)")
            .with_remedy(Remedy::MaskableValue));
        }
        Ok(())
    }

    fn body(&self) -> Value {
        json!({
            "key": self.key, "value": self.value, "masked": self.masked || self.hidden, "protected": self.protected,
            "raw": self.raw, "variable_type": self.variable_type, "environment_scope": self.environment_scope,
            "description": self.description,
        })
    }

    /// The body that creates it: a hidden variable says so only here.
    fn create_body(&self) -> Value {
        let mut body = self.body();
        if self.hidden {
            body["masked_and_hidden"] = json!(true);
        }
        body
    }

    fn matches(&self, existing: &Value) -> bool {
        existing["value"].as_str() == Some(self.value.as_str())
            && existing["masked"].as_bool().unwrap_or(false) == self.masked
            && existing["protected"].as_bool().unwrap_or(false) == self.protected
            && existing["raw"].as_bool().unwrap_or(false) == self.raw
            && existing["variable_type"].as_str().unwrap_or("env_var") == self.variable_type
            && existing["description"].as_str().map(str::to_string) == self.description
    }
}

/// A failed write, naming the changes that took effect before it (they are not rolled back;
/// a re-run converges).
/// How a CI/CD variable changes, for `--diff`: each attribute that differs as `old -> new`;
/// a masked, hidden or secret value (on either side) only as `changed, value hidden`.
pub fn variable_diff(desired: Option<&Variable>, existing: Option<&Value>) -> String {
    let text = |value: &Value| match value {
        Value::Null => "(none)".to_string(),
        Value::String(text) => format!("{text:?}"),
        other => other.to_string(),
    };
    let hidden_now = existing.is_some_and(|e| {
        e["masked"].as_bool().unwrap_or(false) || e["hidden"].as_bool().unwrap_or(false)
    });
    let Some(desired) = desired else {
        return "removed".to_string();
    };
    let wanted = desired.body();
    let mut lines = Vec::new();
    for field in [
        "value",
        "masked",
        "protected",
        "raw",
        "variable_type",
        "description",
    ] {
        let new = &wanted[field];
        let old = existing.map(|e| &e[field]);
        if old == Some(new)
            || (old.is_none() && field != "value" && (new.is_null() || *new == false))
        {
            continue;
        }
        if field == "value" && (desired.masked || desired.hidden || desired.secret || hidden_now) {
            lines.push(match old {
                None => "value: set, value hidden".to_string(),
                Some(_) => "value: changed, value hidden".to_string(),
            });
            continue;
        }
        lines.push(match old {
            None => format!("{field}: {}", text(new)),
            Some(old) => format!("{field}: {} -> {}", text(old), text(new)),
        });
    }
    lines.join("\n")
}

fn after(error: ClientError, done: &[Change]) -> ClientError {
    if done.is_empty() {
        return error;
    }
    let list: Vec<String> = done
        .iter()
        .map(|change| format!("{} {}", change.action, change.resource))
        .collect();
    error.caused_by(format!("done before the failure: {}", list.join(", ")))
}

/// Which of a project's variables that are not desired `set_variables` deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Removal {
    /// None: variables others set stay.
    #[default]
    Nothing,
    /// Every one not desired.
    Unlisted,
    /// Those with these keys (in any scope): a variable an earlier version set and no longer
    /// should, such as a credential that moved elsewhere.
    Named(Vec<String>),
}

/// How many variables each action touched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VariableCounts {
    pub created: i64,
    pub updated: i64,
    pub unchanged: i64,
    pub removed: i64,
}

impl GitlabClient {
    /// POSTs `variable` to `base`; a retried POST is read back at `url` first, so a create that
    /// took effect is not sent twice.
    fn create_variable(
        &self,
        base: &str,
        url: &str,
        variable: &Variable,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(), ClientError> {
        let read_back = || self.find(url, cancelled);
        self.request(
            Method::Post,
            base,
            Some(&variable.create_body()),
            Some(&read_back),
            cancelled,
        )
        .map(|_| ())
    }

    /// Creates missing variables, updates differing ones and leaves equal ones alone (no
    /// request), then deletes what `removal` names. In check mode a project that does not exist
    /// yet (one an earlier step would create) has no variables.
    pub fn set_variables(
        &self,
        project: &str,
        desired: &[Variable],
        removal: &Removal,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<VariableCounts>, ClientError> {
        for variable in desired {
            variable.validate()?;
        }
        let base = format!("projects/{}/variables", encode(project));
        let existing = match self.get_all(&base, cancelled) {
            Ok(existing) => existing,
            Err(error) if !mode.writes() && error.is_not_found() => Vec::new(),
            Err(error) => return Err(error),
        };
        let scoped = |key: &str, scope: &str| {
            format!(
                "{base}/{}?filter%5Benvironment_scope%5D={}",
                encode(key),
                encode(scope)
            )
        };
        let mut counts = VariableCounts::default();
        let mut changes = Vec::new();
        let mut warnings = Vec::new();
        let resource = |key: &str| format!("CI variable {key} of {project}");
        for variable in desired {
            let current = existing.iter().find(|e| {
                e["key"] == variable.key.as_str()
                    && e["environment_scope"].as_str().unwrap_or("*") == variable.environment_scope
            });
            let url = scoped(&variable.key, &variable.environment_scope);
            let hidden_now = current.is_some_and(|c| c["hidden"].as_bool().unwrap_or(false));
            let change = |action: &'static str, detail: String| Change {
                action,
                kind: "CI variable".into(),
                name: variable.key.clone(),
                resource: resource(&variable.key),
                detail: Some(Detail::Line(detail)),
            };
            match current {
                // A hidden value is known by its description only: the same description, the
                // same value; another one, a new value to write.
                Some(current)
                    if hidden_now
                        && variable.hidden
                        && variable.description.is_some()
                        && current["description"].as_str() == variable.description.as_deref() =>
                {
                    counts.unchanged += 1;
                }
                // GitLab hides a value only when the variable is created: delete it, create it.
                Some(current) if variable.hidden && !hidden_now => {
                    if mode.writes() {
                        self.request(Method::Delete, &url, None, None, cancelled)
                            .map_err(|error| after(error, &changes))?;
                        self.create_variable(&base, &url, variable, cancelled)
                            .map_err(|error| after(error, &changes))?;
                    }
                    let diff = variable_diff(Some(variable), Some(current));
                    changes.push(change("update", format!(
                        "{diff}\nhidden: false -> true (deleted and created again: GitLab hides a value only when it creates the variable)"
                    )));
                    counts.updated += 1;
                }
                Some(_) if hidden_now && !variable.hidden => {
                    // GitLab never returns a hidden value, so it cannot be compared: leave it.
                    warnings.push(format!(
                        "CI variable {} of {project} is hidden: its value cannot be compared, left as it is",
                        variable.key
                    ));
                    counts.unchanged += 1;
                }
                Some(current) if !hidden_now && variable.matches(current) => counts.unchanged += 1,
                // Differing, or hidden with another description: a new value.
                Some(current) => {
                    if mode.writes() {
                        self.request(Method::Put, &url, Some(&variable.body()), None, cancelled)
                            .map_err(|error| after(error, &changes))?;
                    }
                    changes.push(change(
                        "update",
                        variable_diff(Some(variable), Some(current)),
                    ));
                    counts.updated += 1;
                }
                None => {
                    if mode.writes() {
                        self.create_variable(&base, &url, variable, cancelled)
                            .map_err(|error| after(error, &changes))?;
                    }
                    changes.push(change("create", variable_diff(Some(variable), None)));
                    counts.created += 1;
                }
            }
        }
        {
            for current in &existing {
                let key = current["key"].as_str().unwrap_or("");
                let scope = current["environment_scope"].as_str().unwrap_or("*");
                let listed = desired
                    .iter()
                    .any(|d| d.key == key && d.environment_scope == scope);
                let removed = match removal {
                    Removal::Nothing => false,
                    Removal::Unlisted => !listed,
                    Removal::Named(names) => !listed && names.iter().any(|name| name == key),
                };
                if !removed {
                    continue;
                }
                if mode.writes() {
                    self.request(Method::Delete, &scoped(key, scope), None, None, cancelled)
                        .map_err(|error| after(error, &changes))?;
                }
                changes.push(Change {
                    action: "delete",
                    kind: "CI variable".into(),
                    name: key.to_string(),
                    resource: resource(key),
                    detail: Some(Detail::Line(variable_diff(None, Some(current)))),
                });
                counts.removed += 1;
            }
        }
        Ok(Outcome {
            value: counts,
            changes,
            warnings,
        })
    }
}
