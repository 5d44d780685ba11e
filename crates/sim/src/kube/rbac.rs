//! Who a request is and what it may do, as the API server's authenticators and RBAC authorizer
//! decide: the simulator's own token is the cluster admin (kind's `kubernetes-admin`, in
//! `kubeadm:cluster-admins`); a token issued by the TokenRequest API
//! (`kubectl create token SA`) is that ServiceAccount, allowed what the Roles and ClusterRoles
//! bound to it (or to its groups) grant, and refused in the API server's words otherwise.
//! Discovery, OpenAPI and `/version` are every authenticated user's (`system:discovery`).

use serde_json::Value;

/// The user a request authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
    /// The simulator's own token: allowed everything (kind binds its user to cluster-admin).
    pub admin: bool,
}

impl Identity {
    pub fn admin() -> Identity {
        Identity {
            user: "kubernetes-admin".into(),
            groups: vec![
                "kubeadm:cluster-admins".into(),
                "system:authenticated".into(),
            ],
            admin: true,
        }
    }

    pub fn service_account(namespace: &str, name: &str) -> Identity {
        Identity {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            admin: false,
        }
    }

    /// The ServiceAccount this identity is, as (namespace, name).
    fn account(&self) -> Option<(&str, &str)> {
        let rest = self.user.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
    }
}

/// What a request asks to do (the authorizer's attributes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped resources and for requests across all namespaces.
    pub namespace: String,
    pub name: String,
}

impl Attributes {
    /// The verb of a resource request, as the API server's request info derives it.
    pub fn verb_of(method: &str, named: bool, watch: bool, subresource: &str) -> &'static str {
        // exec, attach and port-forward: `create`, whether POST (SPDY) or a WebSocket GET.
        if matches!(subresource, "exec" | "attach" | "portforward") {
            return "create";
        }
        match (method, named) {
            ("GET" | "HEAD", _) if watch => "watch",
            ("GET" | "HEAD", true) => "get",
            ("GET" | "HEAD", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => "unknown",
        }
    }

    fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The RBAC objects of the cluster the authorizer reads.
pub struct Policies<'a> {
    pub roles: &'a [Value],
    pub cluster_roles: &'a [Value],
    pub role_bindings: &'a [Value],
    pub cluster_role_bindings: &'a [Value],
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn matches_any(list: &[&str], wanted: &str) -> bool {
    list.iter().any(|item| *item == "*" || *item == wanted)
}

/// Whether one rule of a role grants the request.
fn rule_allows(rule: &Value, attributes: &Attributes) -> bool {
    let resource = attributes.resource_path();
    let resources = strings(&rule["resources"]);
    let resource_matches = resources.iter().any(|item| {
        *item == "*"
            || *item == resource
            // `*/scale` grants a subresource of any resource; `pods/*` any subresource of pods.
            || (!attributes.subresource.is_empty()
                && (*item == format!("*/{}", attributes.subresource)
                    || *item == format!("{}/*", attributes.resource)))
    });
    let names = strings(&rule["resourceNames"]);
    matches_any(&strings(&rule["verbs"]), &attributes.verb)
        && matches_any(&strings(&rule["apiGroups"]), &attributes.group)
        && resource_matches
        && (names.is_empty() || names.contains(&attributes.name.as_str()))
}

/// Whether a binding names the identity among its subjects.
fn binds(binding: &Value, identity: &Identity) -> bool {
    let binding_namespace = binding["metadata"]["namespace"].as_str().unwrap_or("");
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|subject| {
            let name = subject["name"].as_str().unwrap_or("");
            match subject["kind"].as_str() {
                Some("ServiceAccount") => identity.account().is_some_and(|(ns, account)| {
                    // A RoleBinding's subject without a namespace is in the binding's.
                    let subject_ns = subject["namespace"]
                        .as_str()
                        .filter(|ns| !ns.is_empty())
                        .unwrap_or(binding_namespace);
                    subject_ns == ns && name == account
                }),
                Some("User") => name == identity.user,
                Some("Group") => identity.groups.iter().any(|group| group == name),
                _ => false,
            }
        })
}

/// The rules a binding's role reference grants (a RoleBinding may name a ClusterRole).
fn rules_of<'a>(binding: &Value, policies: &'a Policies) -> Vec<&'a Value> {
    let name = binding["roleRef"]["name"].as_str().unwrap_or("");
    let namespace = binding["metadata"]["namespace"].as_str().unwrap_or("");
    let role = match binding["roleRef"]["kind"].as_str() {
        Some("ClusterRole") => policies
            .cluster_roles
            .iter()
            .find(|role| role["metadata"]["name"] == name),
        Some("Role") => policies.roles.iter().find(|role| {
            role["metadata"]["name"] == name && role["metadata"]["namespace"] == namespace
        }),
        _ => None,
    };
    role.map(|role| role["rules"].as_array().into_iter().flatten().collect())
        .unwrap_or_default()
}

/// The rules bound to `identity` that apply in `namespace` (empty: cluster-scoped requests,
/// which RoleBindings never grant): its ClusterRoleBindings', then that namespace's RoleBindings'.
fn granted<'a>(
    identity: &'a Identity,
    namespace: &'a str,
    policies: &'a Policies,
) -> impl Iterator<Item = &'a Value> + 'a {
    let cluster_wide = policies
        .cluster_role_bindings
        .iter()
        .filter(move |binding| binds(binding, identity));
    let namespaced = policies.role_bindings.iter().filter(move |binding| {
        !namespace.is_empty()
            && binding["metadata"]["namespace"].as_str() == Some(namespace)
            && binds(binding, identity)
    });
    cluster_wide
        .chain(namespaced)
        .flat_map(move |binding| rules_of(binding, policies))
}

/// The RBAC authorizer's decision.
pub fn allowed(identity: &Identity, attributes: &Attributes, policies: &Policies) -> bool {
    identity.admin
        || granted(identity, &attributes.namespace, policies)
            .any(|rule| rule_allows(rule, attributes))
}

/// The API server's 403 message for a refused request.
pub fn forbidden_message(identity: &Identity, attributes: &Attributes) -> String {
    let resource = attributes.resource_path();
    // The object is named by its group-qualified resource (`deployments.apps`), without the
    // subresource; the reason says the subresource.
    let qualified = if attributes.group.is_empty() {
        attributes.resource.clone()
    } else {
        format!("{}.{}", attributes.resource, attributes.group)
    };
    let subject = if attributes.name.is_empty() {
        qualified
    } else {
        format!("{qualified} {:?}", attributes.name)
    };
    let scope = if attributes.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", attributes.namespace)
    };
    format!(
        "{subject} is forbidden: User {:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        identity.user, attributes.verb, attributes.group
    )
}

/// The `resourceRules` a SelfSubjectRulesReview lists for `namespace`.
pub fn rules_in(identity: &Identity, namespace: &str, policies: &Policies) -> Vec<Value> {
    if identity.admin {
        return vec![serde_json::json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})];
    }
    granted(identity, namespace, policies).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture() -> (Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>) {
        let roles = vec![json!({
            "metadata": {"name": "reader", "namespace": "gitlab"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["services"], "resourceNames": ["registry"], "verbs": ["get"]}
            ]
        })];
        let cluster_roles = vec![json!({
            "metadata": {"name": "ns-lister"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]
        })];
        let role_bindings = vec![json!({
            "metadata": {"name": "reader", "namespace": "gitlab"},
            "roleRef": {"kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "bprun", "namespace": "bprun"}]
        })];
        let cluster_role_bindings = vec![json!({
            "metadata": {"name": "all-accounts-list-namespaces"},
            "roleRef": {"kind": "ClusterRole", "name": "ns-lister"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts"}]
        })];
        (roles, cluster_roles, role_bindings, cluster_role_bindings)
    }

    fn ask(verb: &str, resource: &str, sub: &str, namespace: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: String::new(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn roles_grant_within_their_namespace_and_names_narrow_them() {
        let (roles, cluster_roles, role_bindings, cluster_role_bindings) = fixture();
        let policies = Policies {
            roles: &roles,
            cluster_roles: &cluster_roles,
            role_bindings: &role_bindings,
            cluster_role_bindings: &cluster_role_bindings,
        };
        let bprun = Identity::service_account("bprun", "bprun");
        let other = Identity::service_account("default", "default");
        assert!(allowed(
            &bprun,
            &ask("list", "pods", "", "gitlab", ""),
            &policies
        ));
        assert!(allowed(
            &bprun,
            &ask("create", "pods", "exec", "gitlab", "toolbox"),
            &policies
        ));
        assert!(!allowed(
            &bprun,
            &ask("list", "pods", "", "default", ""),
            &policies
        ));
        assert!(!allowed(
            &bprun,
            &ask("delete", "pods", "", "gitlab", "x"),
            &policies
        ));
        assert!(allowed(
            &bprun,
            &ask("get", "services", "", "gitlab", "registry"),
            &policies
        ));
        assert!(!allowed(
            &bprun,
            &ask("get", "services", "", "gitlab", "web"),
            &policies
        ));
        // Through a group: every ServiceAccount lists namespaces.
        assert!(allowed(
            &other,
            &ask("list", "namespaces", "", "", ""),
            &policies
        ));
        assert!(!allowed(
            &other,
            &ask("list", "pods", "", "gitlab", ""),
            &policies
        ));
        assert!(allowed(
            &Identity::admin(),
            &ask("delete", "nodes", "", "", "n"),
            &policies
        ));
    }

    #[test]
    fn refusals_are_worded_as_the_api_server_words_them() {
        let bprun = Identity::service_account("bprun", "bprun");
        assert_eq!(
            forbidden_message(&bprun, &ask("list", "pods", "", "default", "")),
            "pods is forbidden: User \"system:serviceaccount:bprun:bprun\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        assert_eq!(
            forbidden_message(&bprun, &ask("get", "namespaces", "", "", "kube-system")),
            "namespaces \"kube-system\" is forbidden: User \"system:serviceaccount:bprun:bprun\" cannot get resource \"namespaces\" in API group \"\" at the cluster scope"
        );
        assert_eq!(
            forbidden_message(&bprun, &ask("create", "pods", "exec", "gitlab", "toolbox")),
            "pods \"toolbox\" is forbidden: User \"system:serviceaccount:bprun:bprun\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"gitlab\""
        );
    }
}
