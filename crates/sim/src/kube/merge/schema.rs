//! Schema knowledge: list semantics of the built-in kinds.

/// What [`list_merge_key`] returns for lists that are sets of scalars (e.g. `metadata.finalizers`):
/// they merge as a union without duplicates and their items are owned one by one (`v:<json>`).
pub const SCALAR_SET: &str = "";

/// Kinds whose pod template lives at `spec.template.spec`.
const TEMPLATE_KINDS: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "ReplicationController",
];

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// The part of `path` below the kind's PodSpec, if `path` is inside one.
fn pod_spec_rest<'a, 'b>(kind: &str, path: &'a [&'b str]) -> Option<&'a [&'b str]> {
    let prefix: &[&str] = match kind {
        "Pod" => &["spec"],
        "PodTemplate" => &["template", "spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        k if TEMPLATE_KINDS.contains(&k) => &["spec", "template", "spec"],
        _ => return None,
    };
    path.strip_prefix(prefix)
}

fn pod_spec_list_key(rest: &[&str]) -> Option<&'static str> {
    match rest {
        [list] if CONTAINER_LISTS.contains(list) => Some("name"),
        [list, field] if CONTAINER_LISTS.contains(list) => match *field {
            "env" => Some("name"),
            "ports" => Some("containerPort"),
            "volumeMounts" => Some("mountPath"),
            "volumeDevices" => Some("devicePath"),
            _ => None,
        },
        ["volumes"] | ["imagePullSecrets"] | ["resourceClaims"] | ["schedulingGates"] => {
            Some("name")
        }
        ["hostAliases"] => Some("ip"),
        ["topologySpreadConstraints"] => Some("topologyKey"),
        _ => None,
    }
}

/// The merge key of a list at a field path (path = field names from the object root, list indices skipped), for built-in kinds, e.g.
/// containers / initContainers / ephemeralContainers -> "name"; a container's env -> "name"; a container's ports -> "containerPort";
/// Service spec.ports -> "port"; volumes -> "name"; volumeMounts -> "mountPath"; imagePullSecrets -> "name"; status.conditions -> "type";
/// hostAliases -> "ip"; metadata.ownerReferences -> "uid"; metadata.finalizers is a set of scalars (merge, no dups). Unknown -> None (atomic).
/// Works for Pod specs at spec.* and for templates at spec.template.spec.* (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job) and spec.jobTemplate.spec.template.spec.* (CronJob).
///
/// Sets of scalars (finalizers) return `Some(SCALAR_SET)` (see [`SCALAR_SET`]).
pub fn list_merge_key(kind: &str, path: &[&str]) -> Option<&'static str> {
    // Object metadata is the same everywhere, including a template's metadata.
    match path {
        [.., "metadata", "finalizers"] => return Some(SCALAR_SET),
        [.., "metadata", "ownerReferences"] => return Some("uid"),
        ["status", "conditions"] => return Some("type"),
        _ => {}
    }
    match (kind, path) {
        ("Service", ["spec", "ports"]) => return Some("port"),
        ("Pod", ["status", "podIPs"]) => return Some("ip"),
        ("Node", ["status", "addresses"]) => return Some("type"),
        ("ServiceAccount", ["secrets"] | ["imagePullSecrets"]) => return Some("name"),
        _ => {}
    }
    pod_spec_list_key(pod_spec_rest(kind, path)?)
}

/// Maps that server-side apply owns as a whole (`+structType=atomic` / `+mapType=atomic`).
pub(super) fn is_atomic_map(kind: &str, path: &[&str]) -> bool {
    match path {
        ["spec", "selector"] => {
            kind == "Service" || (TEMPLATE_KINDS.contains(&kind) && kind != "ReplicationController")
        }
        _ => pod_spec_rest(kind, path) == Some(&["nodeSelector"][..]),
    }
}

pub(super) fn str_refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_merge_keys_of_builtin_kinds() {
        let tpl = ["spec", "template", "spec"];
        let at = |prefix: &[&'static str], rest: &[&'static str]| -> Vec<&'static str> {
            prefix.iter().chain(rest).copied().collect()
        };
        assert_eq!(list_merge_key("Pod", &["spec", "containers"]), Some("name"));
        assert_eq!(
            list_merge_key("Pod", &["spec", "initContainers", "env"]),
            Some("name")
        );
        assert_eq!(
            list_merge_key("Deployment", &at(&tpl, &["containers", "ports"])),
            Some("containerPort")
        );
        assert_eq!(
            list_merge_key("StatefulSet", &at(&tpl, &["containers", "volumeMounts"])),
            Some("mountPath")
        );
        assert_eq!(
            list_merge_key("DaemonSet", &at(&tpl, &["volumes"])),
            Some("name")
        );
        assert_eq!(
            list_merge_key("Job", &at(&tpl, &["imagePullSecrets"])),
            Some("name")
        );
        assert_eq!(
            list_merge_key("ReplicaSet", &at(&tpl, &["hostAliases"])),
            Some("ip")
        );
        assert_eq!(
            list_merge_key(
                "CronJob",
                &[
                    "spec",
                    "jobTemplate",
                    "spec",
                    "template",
                    "spec",
                    "ephemeralContainers"
                ]
            ),
            Some("name")
        );
        assert_eq!(list_merge_key("Service", &["spec", "ports"]), Some("port"));
        assert_eq!(
            list_merge_key("Deployment", &["status", "conditions"]),
            Some("type")
        );
        assert_eq!(
            list_merge_key("ConfigMap", &["metadata", "ownerReferences"]),
            Some("uid")
        );
        assert_eq!(
            list_merge_key("Secret", &["metadata", "finalizers"]),
            Some(SCALAR_SET)
        );
        assert_eq!(list_merge_key("Pod", &["spec", "containers", "args"]), None);
        assert_eq!(list_merge_key("Pod", &["spec", "tolerations"]), None);
        assert_eq!(list_merge_key("Deployment", &["spec", "containers"]), None);
        assert_eq!(list_merge_key("Widget", &["spec", "items"]), None);
    }
}
