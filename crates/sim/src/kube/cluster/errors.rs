//! The API server's errors as `Status` objects, in its words: not found, invalid (with causes),
//! strict decoding, apply conflicts, bad patches.

use super::Decoding;
use crate::kube::resources::ResourceType;
use crate::kube::{builtin_schema, merge, validation};
use serde_json::{Value, json};

/// An API error, rendered as a `Status` object with the reason strings clients match on.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: Value::Null,
        }
    }

    pub(super) fn with_details(mut self, rt: &ResourceType, name: &str) -> ApiError {
        self.details = json!({"name": name, "group": rt.group, "kind": rt.plural});
        self
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(rt)),
        )
        .with_details(rt, name)
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn invalid(rt: &ResourceType, name: &str, causes: &str) -> ApiError {
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {causes}", qualified_kind(rt)),
        )
        .with_details(rt, name)
    }

    /// 422 Invalid with one cause per field error, as the API server reports validation.
    pub fn invalid_fields(
        rt: &ResourceType,
        name: &str,
        errors: &[validation::FieldError],
    ) -> ApiError {
        let mut error = ApiError::new(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {}",
                qualified_kind(rt),
                validation::joined(errors)
            ),
        );
        let causes: Vec<Value> = errors.iter().map(validation::FieldError::cause).collect();
        error.details = json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes});
        error
    }

    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code
        });
        // Errors that are not a Status (an InternalError from a plain Go error) carry no reason.
        if self.reason.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.remove("reason");
        }
        if !self.details.is_null() {
            status["details"] = self.details.clone();
        }
        status
    }
}

/// The decoder's refusal of unknown fields under `fieldValidation=Strict`; a whole body (create,
/// update) is also said not to be handled as its kind, a patch is not.
pub(super) fn strict_decoding_error(
    rt: &ResourceType,
    whole_body: bool,
    fields: &[String],
) -> ApiError {
    let prefix = if whole_body {
        format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: ",
            rt.version,
            kind = rt.kind
        )
    } else {
        String::new()
    };
    ApiError::bad_request(format!(
        "{prefix}strict decoding error: {}",
        fields.join(", ")
    ))
}

/// `Deployment.apps` or `Pod`, as validation errors name kinds.
pub(super) fn qualified_kind(rt: &ResourceType) -> String {
    if rt.group.is_empty() || rt.kind.contains('.') {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    }
}

/// `deployments.apps` or `pods`, as error messages name resources.
pub(super) fn qualified(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    }
}

pub(super) fn apply_error(
    rt: &ResourceType,
    name: &str,
    manager: &str,
    error: merge::MergeError,
) -> ApiError {
    match error {
        merge::MergeError::Conflict(conflicts) => {
            let lines: Vec<String> = conflicts
                .iter()
                .map(|(other, field)| format!("conflict with \"{other}\": {field}"))
                .collect();
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|(other, field)| {
                    json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{other}\""), "field": field})
                })
                .collect();
            let mut error = ApiError::new(
                409,
                "Conflict",
                format!(
                    "Apply failed with {} conflict{}: {}",
                    conflicts.len(),
                    if conflicts.len() == 1 { "" } else { "s" },
                    lines.join("\n")
                ),
            );
            error.details =
                json!({"name": name, "group": rt.group, "kind": rt.plural, "causes": causes});
            let _ = manager;
            error
        }
        merge::MergeError::Invalid(message) => ApiError::invalid(rt, name, &message),
    }
}

pub(super) fn patch_error(rt: &ResourceType, name: &str, error: merge::MergeError) -> ApiError {
    match error {
        merge::MergeError::Invalid(message) => {
            ApiError::new(422, "Invalid", message).with_details(rt, name)
        }
        merge::MergeError::Conflict(_) => ApiError::new(409, "Conflict", "patch conflict"),
    }
}

/// A decoding error of a built-in kind (a type mismatch; under server-side apply an undeclared
/// field too), worded after how the body was decoded.
pub(super) fn decoding_error(
    rt: &ResourceType,
    name: &str,
    namespace: &str,
    object: &Value,
    decoded: &builtin_schema::Decoded,
    decoding: Decoding,
) -> Option<ApiError> {
    if decoding == Decoding::Applied
        && let Some(errors) = builtin_schema::apply_errors(&rt.kind, object)
    {
        // structured-merge-diff types the applied object whatever fieldValidation says, and
        // its error is not a Status: the API server answers 500 without a reason.
        return Some(ApiError::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({namespace}/{name}; {}, Kind={}): {errors}",
                rt.api_version(),
                rt.kind
            ),
        ));
    }
    let type_error = decoded.type_error.as_ref()?;
    Some(match decoding {
        Decoding::Patched => ApiError::new(
            422,
            "Invalid",
            format!(
                " \"\" is invalid: patch: Invalid value: {:?}: {type_error}",
                object.to_string()
            ),
        ),
        // A create's or an update's body; an applied object that structured-merge-diff took
        // (a malformed quantity) fails when converted, in words close to these.
        _ => ApiError::bad_request(format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: {type_error}",
            rt.version,
            kind = rt.kind
        )),
    })
}
