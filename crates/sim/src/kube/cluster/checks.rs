//! What a write passes before it is stored: the namespace exists and is not terminating, the
//! object is well-formed and its type known, names and data are valid, the structural schema
//! prunes and rejects, admission webhooks and plugins admit it.

use super::errors::{ApiError, decoding_error, qualified, strict_decoding_error};
use super::{Cluster, Decoding, FieldValidation, WriteOptions};
use crate::kube::resources::ResourceType;
use crate::kube::validation::is_dns_subdomain;
use crate::kube::{admission, builtin_schema, crd_schema, validation};
use serde_json::Value;

/// The API server's validation of a whole object, and of an update against the live one.
pub(super) fn check_object(
    rt: &ResourceType,
    name: &str,
    live: Option<&Value>,
    object: &Value,
) -> Result<(), ApiError> {
    let kind = if rt.custom { "" } else { rt.kind.as_str() };
    let mut errors = validation::object(kind, object);
    if let Some(live) = live {
        errors.extend(validation::update(kind, live, object));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields(rt, name, &errors))
    }
}

impl Cluster {
    pub(super) fn namespace_check(
        &self,
        rt: &ResourceType,
        namespace: &str,
    ) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        match self.lookup("namespaces", "", namespace) {
            None => Err(ApiError::new(
                404,
                "NotFound",
                format!("namespaces \"{namespace}\" not found"),
            )
            .with_details(
                &ResourceType {
                    plural: "namespaces".into(),
                    ..rt.clone()
                },
                namespace,
            )),
            Some(ns) if ns["status"]["phase"] == "Terminating" => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    qualified(rt),
                    ""
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// A custom resource against its CRD's structural schema (see `crd_schema`): unknown
    /// fields refused under fieldValidation=Strict, else pruned; defaults filled in; types,
    /// required fields and enums validated. A write to the main resource leaves the status
    /// (which comes from the live object) alone.
    pub(super) fn structural(
        &mut self,
        rt: &ResourceType,
        name: &str,
        object: &mut Value,
        options: &WriteOptions,
        creating: bool,
    ) -> Result<(), ApiError> {
        if !rt.custom {
            return Ok(());
        }
        let crd_name = format!("{}.{}", rt.plural, rt.group);
        let Some(schema) = self
            .lookup(
                "customresourcedefinitions.apiextensions.k8s.io",
                "",
                &crd_name,
            )
            .and_then(|crd| crd_schema::version_schema(crd, &rt.version))
            .cloned()
        else {
            return Ok(());
        };
        let status_write = options.subresource.as_deref() == Some("status");
        let status = if status_write {
            None
        } else {
            object.as_object_mut().and_then(|map| map.remove("status"))
        };
        let unknown = crd_schema::prune(&schema, object);
        if options.field_validation == FieldValidation::Warn {
            self.warnings.extend(
                unknown
                    .iter()
                    .map(|path| format!("unknown field \"{path}\"")),
            );
        }
        let result = if options.field_validation == FieldValidation::Strict && !unknown.is_empty() {
            let fields: Vec<String> = unknown
                .iter()
                .map(|path| format!("unknown field \"{path}\""))
                .collect();
            Err(strict_decoding_error(rt, creating, &fields))
        } else {
            crd_schema::apply_defaults(&schema, object);
            let errors = crd_schema::validate(&schema, object);
            if errors.is_empty() {
                Ok(())
            } else {
                Err(ApiError::invalid_fields(rt, name, &errors))
            }
        };
        if let Some(status) = status {
            object["status"] = status;
        }
        result
    }

    /// What the API server's decoding and validation refuse before anything is stored: bad
    /// names, malformed Secret data, and for built-in kinds type mismatches and unknown fields
    /// at any depth (refused under fieldValidation=Strict, `Warning` headers under Warn).
    pub(super) fn validate(
        &mut self,
        rt: &ResourceType,
        name: &str,
        object: &mut Value,
        options: &WriteOptions,
        decoding: Decoding,
    ) -> Result<(), ApiError> {
        validate_names_and_data(rt, name, object)?;
        // A /status write decodes the whole object too; other subresources have bodies of
        // their own kinds.
        if rt.custom
            || options
                .subresource
                .as_deref()
                .is_some_and(|sub| sub != "status")
        {
            return Ok(());
        }
        let decoded = builtin_schema::decode(&rt.kind, object);
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("");
        if let Some(error) = decoding_error(rt, name, namespace, object, &decoded, decoding) {
            return Err(error);
        }
        if decoding == Decoding::Applied || decoded.unknown.is_empty() {
            return Ok(());
        }
        let fields: Vec<String> = decoded
            .unknown
            .iter()
            .map(|path| format!("unknown field \"{path}\""))
            .collect();
        match options.field_validation {
            FieldValidation::Ignore => {
                builtin_schema::prune(&rt.kind, object);
                Ok(())
            }
            FieldValidation::Warn => {
                self.warnings.extend(fields);
                builtin_schema::prune(&rt.kind, object);
                Ok(())
            }
            FieldValidation::Strict => Err(strict_decoding_error(
                rt,
                decoding == Decoding::Body,
                &fields,
            )),
        }
    }

    /// The admission webhooks' verdict on a write (see `admission`).
    /// Runs `decide` over the store's Roles, ClusterRoles and their bindings (what RBAC reads).
    pub fn with_policies<T>(&self, decide: impl FnOnce(&crate::kube::rbac::Policies) -> T) -> T {
        let all = |key: &str| self.all(key);
        decide(&crate::kube::rbac::Policies {
            roles: &all("roles.rbac.authorization.k8s.io"),
            cluster_roles: &all("clusterroles.rbac.authorization.k8s.io"),
            role_bindings: &all("rolebindings.rbac.authorization.k8s.io"),
            cluster_role_bindings: &all("clusterrolebindings.rbac.authorization.k8s.io"),
        })
    }

    /// RBAC's escalation check on a Role, ClusterRole or binding write by a requester (the
    /// object as it would be stored; `live` on updates, which only the garbage collector's
    /// fields may change unchecked), as the RBAC registry runs it before storing.
    pub(super) fn confirm_no_escalation(
        &self,
        rt: &ResourceType,
        namespace: &str,
        object: &Value,
        live: Option<&Value>,
        options: &super::WriteOptions,
    ) -> Result<(), ApiError> {
        let Some(requester) = &options.requester else {
            return Ok(());
        };
        if rt.group != crate::kube::rbac::GROUP {
            return Ok(());
        }
        if let Some(live) = live {
            let without_gc_fields = |object: &Value| {
                let mut object = object.clone();
                if let Some(metadata) = object["metadata"].as_object_mut() {
                    for field in [
                        "ownerReferences",
                        "finalizers",
                        "managedFields",
                        "resourceVersion",
                    ] {
                        metadata.remove(field);
                    }
                }
                object
            };
            if without_gc_fields(live) == without_gc_fields(object) {
                return Ok(());
            }
        }
        let namespace = if rt.namespaced { namespace } else { "" };
        let refusal = self.with_policies(|policies| {
            crate::kube::rbac::escalation_refusal(
                requester, &rt.plural, namespace, object, policies,
            )
        });
        match refusal {
            None => Ok(()),
            Some(reason) => {
                let name = object["metadata"]["name"].as_str().unwrap_or("");
                Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!("{}.{} {name:?} is forbidden: {reason}", rt.plural, rt.group),
                )
                .with_details(rt, name))
            }
        }
    }

    pub(super) fn admit(
        &self,
        rt: &ResourceType,
        namespace: &str,
        object: &Value,
        operation: &str,
    ) -> Result<(), ApiError> {
        let mut configurations =
            self.all("mutatingwebhookconfigurations.admissionregistration.k8s.io");
        configurations
            .extend(self.all("validatingwebhookconfigurations.admissionregistration.k8s.io"));
        if configurations.is_empty() {
            return Ok(());
        }
        let namespace_labels = self
            .lookup("namespaces", "", namespace)
            .map(|ns| ns["metadata"]["labels"].clone())
            .unwrap_or(Value::Null);
        let write = admission::Write {
            resource: rt,
            operation,
            namespace_labels: &namespace_labels,
            object_labels: &object["metadata"]["labels"],
        };
        let service = |service_namespace: &str, name: &str| {
            if self.lookup("services", service_namespace, name).is_none() {
                return admission::ServiceState::Missing;
            }
            let ready = self
                .lookup("endpoints", service_namespace, name)
                .is_some_and(crate::kube::endpoints::has_ready_address);
            if ready {
                admission::ServiceState::Ready
            } else {
                admission::ServiceState::NoEndpoints
            }
        };
        match admission::refusal(&configurations, &write, &service) {
            Some(message) => Err(ApiError::new(500, "InternalError", message)),
            None => Ok(()),
        }
    }
}

/// The body must be of this resource's kind and group/version.
pub(super) fn check_type(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({}) or kind {kind} does not match {}",
            object["apiVersion"].as_str().unwrap_or(""),
            rt.api_version(),
            rt.kind
        )));
    }
    if let Some(api_version) = object.get("apiVersion").and_then(Value::as_str)
        && api_version != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    Ok(())
}

/// What the API server rejects before storing: bad names, malformed Secret data.
pub(super) fn validate_names_and_data(
    rt: &ResourceType,
    name: &str,
    object: &Value,
) -> Result<(), ApiError> {
    let label_only = matches!(rt.kind.as_str(), "Namespace" | "Service");
    let valid_name = if label_only {
        is_dns_subdomain(name) && !name.contains('.') && name.len() <= 63
    } else {
        is_dns_subdomain(name)
    };
    if !valid_name && rt.kind != "Node" {
        return Err(ApiError::invalid(
            rt,
            name,
            &format!(
                "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 {} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                if label_only { "label" } else { "subdomain" }
            ),
        ));
    }
    if rt.kind == "Secret"
        && let Some(data) = object["data"].as_object()
    {
        use base64::Engine;
        for (key, value) in data {
            let text = value.as_str().unwrap_or_default();
            if base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_err()
            {
                return Err(ApiError::bad_request(format!(
                    "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 0 (data.{key})"
                )));
            }
        }
    }
    if rt.kind == "ConfigMap"
        && let Some(data) = object["data"].as_object()
        && let Some((key, _)) = data.iter().find(|(_, value)| !value.is_string())
    {
        return Err(ApiError::bad_request(format!(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal non-string into Go struct field ConfigMap.data of type string (data.{key})"
        )));
    }
    Ok(())
}
