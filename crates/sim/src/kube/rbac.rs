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

/// The RBAC API group, whose Roles and bindings the escalation check guards.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// One permission a rule grants, as RBAC's `BreakdownRule` splits a rule: a verb on one
/// resource of one group (and one name, when the rule names some), or a verb on one
/// non-resource URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Atom {
    group: Option<String>,
    resource: Option<String>,
    name: Option<String>,
    url: Option<String>,
    verb: String,
}

fn breakdown(rule: &Value) -> Vec<Atom> {
    let mut atoms = Vec::new();
    let names = strings(&rule["resourceNames"]);
    let verbs = strings(&rule["verbs"]);
    for group in strings(&rule["apiGroups"]) {
        for resource in strings(&rule["resources"]) {
            for verb in &verbs {
                let atom = |name: Option<&str>| Atom {
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    name: name.map(str::to_string),
                    url: None,
                    verb: verb.to_string(),
                };
                if names.is_empty() {
                    atoms.push(atom(None));
                } else {
                    atoms.extend(names.iter().map(|name| atom(Some(name))));
                }
            }
        }
    }
    for url in strings(&rule["nonResourceURLs"]) {
        for verb in &verbs {
            atoms.push(Atom {
                group: None,
                resource: None,
                name: None,
                url: Some(url.to_string()),
                verb: verb.to_string(),
            });
        }
    }
    atoms
}

/// Whether an owner's rule covers one atom, as RBAC's `ruleCovers` decides (stricter than the
/// authorizer: `pods/*` does not cover `pods/exec`, only `*/exec` or `*` does).
fn covers(owner: &Value, atom: &Atom) -> bool {
    let has = |list: &[&str], wanted: &str| list.contains(&wanted);
    let verbs = strings(&owner["verbs"]);
    let groups = strings(&owner["apiGroups"]);
    let resources = strings(&owner["resources"]);
    let names = strings(&owner["resourceNames"]);
    let urls = strings(&owner["nonResourceURLs"]);
    let verb = has(&verbs, "*") || has(&verbs, &atom.verb);
    let group = atom
        .group
        .as_deref()
        .is_none_or(|group| has(&groups, "*") || has(&groups, group));
    let resource = atom.resource.as_deref().is_none_or(|resource| {
        has(&resources, "*")
            || has(&resources, resource)
            || resource
                .split_once('/')
                .is_some_and(|(_, sub)| has(&resources, &format!("*/{sub}")))
    });
    let url = atom.url.as_deref().is_none_or(|url| {
        urls.iter().any(|owned| {
            *owned == "*"
                || *owned == url
                || owned
                    .strip_suffix('*')
                    .is_some_and(|prefix| url.starts_with(prefix))
        })
    });
    let name = match &atom.name {
        None => names.is_empty(),
        Some(name) => names.is_empty() || has(&names, name),
    };
    verb && group && resource && url && name
}

/// Go's `%q` of a string list: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|item| format!("{item:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// The atoms nobody granted, compacted as RBAC's `CompactRules` does (the verbs of one group,
/// resource and name together, in the order they came) and written as `CompactString` writes
/// each rule; sorted, without repeats, as the API server lists them.
fn describe_missing(missing: &[Atom]) -> String {
    let mut compacted: Vec<(Atom, Vec<String>)> = Vec::new();
    for atom in missing {
        let key = Atom {
            verb: String::new(),
            ..atom.clone()
        };
        match compacted
            .iter_mut()
            .find(|(known, _)| known.url.is_none() && *known == key)
        {
            Some((_, verbs)) => verbs.push(atom.verb.clone()),
            None => compacted.push((key, vec![atom.verb.clone()])),
        }
    }
    let mut lines: Vec<String> = compacted
        .into_iter()
        .map(|(atom, verbs)| {
            let mut parts = Vec::new();
            if let Some(group) = atom.group {
                parts.push(format!("APIGroups:{}", go_quoted(&[group])));
            }
            if let Some(resource) = atom.resource {
                parts.push(format!("Resources:{}", go_quoted(&[resource])));
            }
            if let Some(url) = atom.url {
                parts.push(format!("NonResourceURLs:{}", go_quoted(&[url])));
            }
            if let Some(name) = atom.name {
                parts.push(format!("ResourceNames:{}", go_quoted(&[name])));
            }
            parts.push(format!("Verbs:{}", go_quoted(&verbs)));
            format!("{{{}}}", parts.join(", "))
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines.join("\n")
}

/// What a write of a Role, ClusterRole, RoleBinding or ClusterRoleBinding (`resource`, the
/// object as it would be stored, in `namespace`) asks to grant that `identity` may not: the API
/// server's 403 reason, or `None` when it may go on. As the RBAC registry decides: the cluster
/// admin may; a role writer with `escalate` on it may, a binding writer with `bind` on the role
/// it references (by name) may; otherwise every permission granted must be one the writer
/// already holds in that namespace (cluster-wide for cluster objects).
pub fn escalation_refusal(
    identity: &Identity,
    resource: &str,
    namespace: &str,
    object: &Value,
    policies: &Policies,
) -> Option<String> {
    if identity.admin {
        return None;
    }
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let ask = |verb: &str, resource: &str, name: &str| Attributes {
        verb: verb.into(),
        group: GROUP.into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
    };
    let granted_rules: Vec<Value> = match resource {
        "roles" | "clusterroles" => {
            if allowed(identity, &ask("escalate", resource, name), policies) {
                return None;
            }
            object["rules"].as_array().cloned().unwrap_or_default()
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &object["roleRef"];
            let role_name = role_ref["name"].as_str().unwrap_or("");
            let (role_resource, singular) = match role_ref["kind"].as_str() {
                Some("ClusterRole") => ("clusterroles", "clusterrole"),
                Some("Role") => ("roles", "role"),
                _ => return None,
            };
            if allowed(identity, &ask("bind", role_resource, role_name), policies) {
                return None;
            }
            let role = if role_resource == "clusterroles" {
                policies
                    .cluster_roles
                    .iter()
                    .find(|role| role["metadata"]["name"] == role_name)
            } else {
                policies.roles.iter().find(|role| {
                    role["metadata"]["name"] == role_name
                        && role["metadata"]["namespace"] == namespace
                })
            };
            let Some(role) = role else {
                return Some(format!("{singular}.{GROUP} {role_name:?} not found"));
            };
            role["rules"].as_array().cloned().unwrap_or_default()
        }
        _ => return None,
    };
    let held: Vec<&Value> = granted(identity, namespace, policies).collect();
    let missing: Vec<Atom> = granted_rules
        .iter()
        .flat_map(breakdown)
        .filter(|atom| !held.iter().any(|owner| covers(owner, atom)))
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        identity.user,
        go_quoted(&identity.groups),
        describe_missing(&missing)
    ))
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

    #[test]
    fn a_writer_grants_only_what_it_holds_unless_it_may_escalate_or_bind() {
        let roles = vec![
            json!({"metadata": {"name": "deployer", "namespace": "apps"},
                   "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
                             {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
                             {"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]}]}),
            json!({"metadata": {"name": "escalator", "namespace": "apps"},
                   "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"], "resourceNames": ["anything"]}]}),
        ];
        let cluster_roles = vec![
            json!({"metadata": {"name": "ci"},
                   "rules": [{"apiGroups": ["", "apps"], "resources": ["secrets", "deployments"], "verbs": ["get", "delete"]}]}),
            json!({"metadata": {"name": "binder"},
                   "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["ci"]}]}),
        ];
        let role_bindings = vec![
            json!({"metadata": {"name": "deployer", "namespace": "apps"}, "roleRef": {"kind": "Role", "name": "deployer"},
                   "subjects": [{"kind": "ServiceAccount", "name": "bprun", "namespace": "bprun"}]}),
            json!({"metadata": {"name": "escalator", "namespace": "apps"}, "roleRef": {"kind": "Role", "name": "escalator"},
                   "subjects": [{"kind": "ServiceAccount", "name": "bprun", "namespace": "bprun"}]}),
        ];
        let mut cluster_role_bindings = vec![];
        let bprun = Identity::service_account("bprun", "bprun");
        let role = |name: &str, rules: Value| json!({"metadata": {"name": name}, "rules": rules});
        let binding = |kind: &str, name: &str| json!({"metadata": {"name": "b"}, "roleRef": {"kind": kind, "name": name}});
        let refusal = |resource: &str, object: &Value, cluster_role_bindings: &[Value]| {
            let policies = Policies {
                roles: &roles,
                cluster_roles: &cluster_roles,
                role_bindings: &role_bindings,
                cluster_role_bindings,
            };
            escalation_refusal(&bprun, resource, "apps", object, &policies)
        };
        // What it holds it may grant; a subresource is covered by `*/status`.
        let held = role(
            "r",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
                                        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get"]}]),
        );
        assert_eq!(refusal("roles", &held, &cluster_role_bindings), None);
        // What it does not hold, compacted per resource and sorted.
        let more = role(
            "r",
            json!([{"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "watch", "list"]}]),
        );
        assert_eq!(
            refusal("roles", &more, &cluster_role_bindings).as_deref(),
            Some(
                "user \"system:serviceaccount:bprun:bprun\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:bprun\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"watch\"]}\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"watch\" \"list\"]}"
            )
        );
        // `escalate` on that role's name lets it through.
        assert_eq!(
            refusal(
                "roles",
                &role(
                    "anything",
                    json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
                ),
                &cluster_role_bindings
            ),
            None
        );
        // A binding to a ClusterRole it neither holds nor may bind.
        assert_eq!(
            refusal("rolebindings", &binding("ClusterRole", "ci"), &cluster_role_bindings).map(|m| m.lines().skip(1).collect::<Vec<_>>().join("\n")),
            Some("{APIGroups:[\"\"], Resources:[\"deployments\"], Verbs:[\"get\" \"delete\"]}\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}\n{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"get\" \"delete\"]}\n{APIGroups:[\"apps\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}".to_string())
        );
        assert_eq!(
            refusal(
                "rolebindings",
                &binding("ClusterRole", "missing"),
                &cluster_role_bindings
            )
            .as_deref(),
            Some("clusterrole.rbac.authorization.k8s.io \"missing\" not found")
        );
        // `bind` on the ClusterRole by name, cluster-wide: allowed.
        cluster_role_bindings.push(json!({"metadata": {"name": "binder"}, "roleRef": {"kind": "ClusterRole", "name": "binder"},
                                          "subjects": [{"kind": "ServiceAccount", "name": "bprun", "namespace": "bprun"}]}));
        assert_eq!(
            refusal(
                "rolebindings",
                &binding("ClusterRole", "ci"),
                &cluster_role_bindings
            ),
            None
        );
        assert!(
            refusal(
                "rolebindings",
                &binding("ClusterRole", "binder"),
                &cluster_role_bindings
            )
            .is_none()
        );
        // The cluster admin may grant anything.
        let policies = Policies {
            roles: &roles,
            cluster_roles: &cluster_roles,
            role_bindings: &role_bindings,
            cluster_role_bindings: &cluster_role_bindings,
        };
        assert_eq!(
            escalation_refusal(&Identity::admin(), "clusterroles", "", &more, &policies),
            None
        );
    }
}
