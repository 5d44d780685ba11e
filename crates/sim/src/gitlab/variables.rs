//! Project CI/CD variables, with GitLab's validation of keys, masking and scopes.

use super::{GitlabSim, bool_field, field_errors, message, not_found, param_error, string_field};
use crate::http::{SimRequest, SimResponse};
use bprun_clients::gitlab::rules::{maskable, valid_variable_key as valid_key};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Variable {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) variable_type: String,
    pub(super) protected: bool,
    pub(super) masked: bool,
    pub(super) hidden: bool,
    pub(super) raw: bool,
    pub(super) environment_scope: String,
    pub(super) description: Option<String>,
}

impl GitlabSim {
    pub(super) fn variable_json(variable: &Variable) -> Value {
        json!({
            "key": variable.key, "value": if variable.hidden { Value::Null } else { Value::String(variable.value.clone()) },
            "variable_type": variable.variable_type, "protected": variable.protected, "masked": variable.masked,
            "hidden": variable.hidden, "raw": variable.raw, "environment_scope": variable.environment_scope,
            "description": variable.description,
        })
    }

    pub(super) fn variables(&self, request: &SimRequest, id: &str, rest: &[&str]) -> SimResponse {
        let mut state = self.lock();
        let Some(project) = Self::find_project(&state, id) else {
            return not_found("Project");
        };
        let scope_filter = request.query.get("filter[environment_scope]").cloned();
        let list = state.variables.entry(project).or_default();
        match (request.method.as_str(), rest) {
            ("GET", []) => {
                let items = list.iter().map(Self::variable_json).collect();
                drop(state);
                self.paginate(request, items)
            }
            ("POST", []) => {
                let body = request.params();
                let variable = match Self::variable_from(&body, None) {
                    Ok(variable) => variable,
                    Err(response) => return response,
                };
                if list.iter().any(|v| {
                    v.key == variable.key && v.environment_scope == variable.environment_scope
                }) {
                    return field_errors(
                        json!({"key": [format!("({}) has already been taken", variable.key)]}),
                    );
                }
                let answer = Self::variable_json(&variable);
                list.push(variable);
                drop(state);
                self.persist();
                SimResponse::json(201, &answer)
            }
            (method, [key]) => {
                let matches: Vec<usize> = list
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| {
                        v.key == *key
                            && scope_filter
                                .as_ref()
                                .is_none_or(|scope| &v.environment_scope == scope)
                    })
                    .map(|(index, _)| index)
                    .collect();
                if matches.is_empty() {
                    return not_found("Variable");
                }
                if matches.len() > 1 {
                    return message(
                        409,
                        "There are multiple variables with provided parameters. Please use 'filter[environment_scope]'",
                    );
                }
                let index = matches[0];
                match method {
                    "GET" => SimResponse::json(200, &Self::variable_json(&list[index])),
                    "PUT" => {
                        let body = request.params();
                        let updated = match Self::variable_from(&body, Some(&list[index])) {
                            Ok(variable) => variable,
                            Err(response) => return response,
                        };
                        list[index] = updated;
                        let answer = Self::variable_json(&list[index]);
                        drop(state);
                        self.persist();
                        SimResponse::json(200, &answer)
                    }
                    "DELETE" => {
                        list.remove(index);
                        drop(state);
                        self.persist();
                        SimResponse::empty(204)
                    }
                    _ => message(405, "405 Method Not Allowed"),
                }
            }
            _ => message(404, "404 Not Found"),
        }
    }

    /// A variable from a request body (on top of `existing` for updates), validated as GitLab does.
    pub(super) fn variable_from(
        body: &Value,
        existing: Option<&Variable>,
    ) -> Result<Variable, SimResponse> {
        let key = match (string_field(body, "key"), existing) {
            (Some(key), _) => key,
            (None, Some(existing)) => existing.key.clone(),
            (None, None) => return Err(param_error("key is missing")),
        };
        let value = match (string_field(body, "value"), existing) {
            (Some(value), _) => value,
            (None, Some(existing)) => existing.value.clone(),
            (None, None) => return Err(param_error("value is missing")),
        };
        let variable_type = string_field(body, "variable_type")
            .or(existing.map(|e| e.variable_type.clone()))
            .unwrap_or_else(|| "env_var".into());
        if !matches!(variable_type.as_str(), "env_var" | "file") {
            return Err(param_error("variable_type does not have a valid value"));
        }
        let masked_and_hidden = bool_field(body, "masked_and_hidden").unwrap_or(false);
        let masked = bool_field(body, "masked")
            .or(existing.map(|e| e.masked))
            .unwrap_or(false)
            || masked_and_hidden;
        let mut errors = serde_json::Map::new();
        if !valid_key(&key) {
            let mut messages = Vec::new();
            if key.len() > 255 {
                messages.push("is too long (maximum is 255 characters)");
            }
            if !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || key.is_empty() {
                messages.push("can contain only letters, digits and '_'.");
            }
            errors.insert("key".into(), json!(messages));
        }
        if masked && (value.contains('\n') || !maskable(&value)) {
            errors.insert("value".into(), json!(["is invalid"]));
        }
        if !errors.is_empty() {
            return Err(field_errors(Value::Object(errors)));
        }
        Ok(Variable {
            key,
            value,
            variable_type,
            protected: bool_field(body, "protected")
                .or(existing.map(|e| e.protected))
                .unwrap_or(false),
            masked,
            hidden: masked_and_hidden || existing.is_some_and(|e| e.hidden),
            raw: bool_field(body, "raw")
                .or(existing.map(|e| e.raw))
                .unwrap_or(false),
            environment_scope: string_field(body, "environment_scope")
                .or(existing.map(|e| e.environment_scope.clone()))
                .unwrap_or_else(|| "*".into()),
            description: match body.get("description") {
                Some(Value::String(text)) => Some(text.clone()),
                Some(Value::Null) => None,
                _ => existing.and_then(|e| e.description.clone()),
            },
        })
    }
}
