//! Admission webhooks as the API server calls them: a write that a
//! `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration` intercepts (its rules
//! match the resource and operation, its selectors match the namespace and object) needs the
//! webhook's Service to answer. The simulator runs no webhook code, so a webhook whose Service
//! has ready endpoints allows the write; one without them fails it with the API server's
//! `failed calling webhook` error, unless its `failurePolicy` is `Ignore`. This is what makes
//! creating a CNPG `Cluster` before the operator is ready fail, as on a real cluster.

use serde_json::Value;

use super::resources::ResourceType;

/// What the API server knows about the Service a webhook calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceState {
    Missing,
    NoEndpoints,
    Ready,
}

/// One write, as admission sees it.
pub struct Write<'a> {
    pub resource: &'a ResourceType,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'a str,
    pub namespace_labels: &'a Value,
    pub object_labels: &'a Value,
}

fn listed(list: &Value, wanted: &str) -> bool {
    list.as_array()
        .is_some_and(|items| items.iter().any(|item| item == "*" || item == wanted))
}

fn rule_matches(rule: &Value, write: &Write) -> bool {
    let resource = write.resource;
    let resources_match = rule["resources"].as_array().is_some_and(|items| {
        items
            .iter()
            .any(|item| item == "*" || item == "*/*" || item == resource.plural.as_str())
    });
    let scope = rule["scope"].as_str().unwrap_or("*");
    let scope_match = match scope {
        "Namespaced" => resource.namespaced,
        "Cluster" => !resource.namespaced,
        _ => true,
    };
    listed(&rule["apiGroups"], &resource.group)
        && listed(&rule["apiVersions"], &resource.version)
        && listed(&rule["operations"], write.operation)
        && resources_match
        && scope_match
}

/// `matchLabels` and `matchExpressions` (In, NotIn, Exists, DoesNotExist) against `labels`;
/// an absent selector matches everything.
pub fn selector_matches(selector: &Value, labels: &Value) -> bool {
    if let Some(wanted) = selector["matchLabels"].as_object()
        && !wanted.iter().all(|(key, value)| &labels[key] == value)
    {
        return false;
    }
    selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|expression| {
            let key = expression["key"].as_str().unwrap_or("");
            let value = &labels[key];
            let values = &expression["values"];
            match expression["operator"].as_str().unwrap_or("") {
                "In" => value.as_str().is_some_and(|v| listed_exactly(values, v)),
                "NotIn" => !value.as_str().is_some_and(|v| listed_exactly(values, v)),
                "Exists" => !value.is_null(),
                "DoesNotExist" => value.is_null(),
                _ => false,
            }
        })
}

fn listed_exactly(list: &Value, wanted: &str) -> bool {
    list.as_array()
        .is_some_and(|items| items.iter().any(|item| item == wanted))
}

/// The API server's error for a write the webhooks refuse, or `None` when it is admitted.
/// `configurations` are the mutating ones first, then the validating ones (the order the API
/// server calls them in).
pub fn refusal(
    configurations: &[Value],
    write: &Write,
    service: &dyn Fn(&str, &str) -> ServiceState,
) -> Option<String> {
    // Webhooks never intercept writes to the webhook configurations themselves.
    if write.resource.group == "admissionregistration.k8s.io" {
        return None;
    }
    for configuration in configurations {
        for webhook in configuration["webhooks"].as_array().into_iter().flatten() {
            let intercepts = webhook["rules"]
                .as_array()
                .is_some_and(|rules| rules.iter().any(|rule| rule_matches(rule, write)));
            if !intercepts
                || !selector_matches(&webhook["namespaceSelector"], write.namespace_labels)
                || !selector_matches(&webhook["objectSelector"], write.object_labels)
            {
                continue;
            }
            let target = &webhook["clientConfig"]["service"];
            let Some(service_name) = target["name"].as_str() else {
                continue;
            };
            let service_namespace = target["namespace"].as_str().unwrap_or("default");
            let problem = match service(service_namespace, service_name) {
                ServiceState::Ready => continue,
                ServiceState::NoEndpoints => {
                    format!("no endpoints available for service \"{service_name}\"")
                }
                ServiceState::Missing => format!("service \"{service_name}\" not found"),
            };
            if webhook["failurePolicy"] == "Ignore" {
                continue;
            }
            let name = webhook["name"].as_str().unwrap_or("");
            let port = target["port"].as_u64().unwrap_or(443);
            let path = target["path"].as_str().unwrap_or("");
            let timeout = webhook["timeoutSeconds"].as_u64().unwrap_or(10);
            return Some(format!(
                "Internal error occurred: failed calling webhook \"{name}\": failed to call webhook: Post \"https://{service_name}.{service_namespace}.svc:{port}{path}?timeout={timeout}s\": {problem}"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cnpg_clusters() -> ResourceType {
        ResourceType {
            group: "postgresql.cnpg.io".into(),
            version: "v1".into(),
            kind: "Cluster".into(),
            plural: "clusters".into(),
            singular: "cluster".into(),
            namespaced: true,
            short_names: vec![],
            subresources: vec!["status".into()],
            custom: true,
        }
    }

    /// The shape of the CNPG chart's mutating webhook for clusters.
    fn configuration(policy: &str) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "cnpg-mutating-webhook-configuration"},
               "webhooks": [{"name": "mcluster.cnpg.io", "failurePolicy": policy, "sideEffects": "None",
                             "admissionReviewVersions": ["v1"],
                             "clientConfig": {"service": {"name": "cnpg-webhook-service", "namespace": "cnpg-system",
                                                          "path": "/mutate-postgresql-cnpg-io-v1-cluster", "port": 443}},
                             "rules": [{"apiGroups": ["postgresql.cnpg.io"], "apiVersions": ["v1"],
                                        "operations": ["CREATE", "UPDATE"], "resources": ["clusters"]}]}]})
    }

    fn write<'a>(resource: &'a ResourceType, operation: &'a str) -> Write<'a> {
        static EMPTY: Value = Value::Null;
        Write {
            resource,
            operation,
            namespace_labels: &EMPTY,
            object_labels: &EMPTY,
        }
    }

    #[test]
    fn a_webhook_without_endpoints_refuses_in_the_api_servers_words() {
        let clusters = cnpg_clusters();
        let refused = refusal(
            &[configuration("Fail")],
            &write(&clusters, "CREATE"),
            &|_, _| ServiceState::NoEndpoints,
        );
        assert_eq!(
            refused.as_deref(),
            Some(
                "Internal error occurred: failed calling webhook \"mcluster.cnpg.io\": failed to call webhook: Post \"https://cnpg-webhook-service.cnpg-system.svc:443/mutate-postgresql-cnpg-io-v1-cluster?timeout=10s\": no endpoints available for service \"cnpg-webhook-service\""
            )
        );
    }

    #[test]
    fn ready_endpoints_ignore_policies_and_other_writes_pass() {
        let clusters = cnpg_clusters();
        let ready = |_: &str, _: &str| ServiceState::Ready;
        assert_eq!(
            refusal(
                &[configuration("Fail")],
                &write(&clusters, "CREATE"),
                &ready
            ),
            None
        );
        let down = |_: &str, _: &str| ServiceState::Missing;
        assert_eq!(
            refusal(
                &[configuration("Ignore")],
                &write(&clusters, "CREATE"),
                &down
            ),
            None
        );
        assert_eq!(
            refusal(&[configuration("Fail")], &write(&clusters, "DELETE"), &down),
            None
        );
        let mut secrets = cnpg_clusters();
        secrets.group = String::new();
        secrets.plural = "secrets".into();
        assert_eq!(
            refusal(&[configuration("Fail")], &write(&secrets, "CREATE"), &down),
            None
        );
    }

    #[test]
    fn selectors_decide_which_writes_a_webhook_sees() {
        let selector = json!({"matchLabels": {"team": "db"},
                              "matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]});
        assert!(selector_matches(&selector, &json!({"team": "db"})));
        assert!(!selector_matches(
            &selector,
            &json!({"team": "db", "skip": "yes"})
        ));
        assert!(!selector_matches(&selector, &json!({"team": "web"})));
        assert!(selector_matches(&Value::Null, &json!({})));
    }
}
