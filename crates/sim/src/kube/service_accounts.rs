//! The API server's ServiceAccount admission plugin, as a pure function over a pod being
//! created: `spec.serviceAccountName` defaults to `default`; a pod naming an account that does
//! not exist is refused (`pods "x" is forbidden: error looking up service account NS/SA:
//! serviceaccount "SA" not found`); unless the pod or its account sets
//! `automountServiceAccountToken: false`, a projected `kube-api-access-xxxxx` volume (token,
//! the cluster CA from `kube-root-ca.crt`, the namespace) is mounted read-only at
//! `/var/run/secrets/kubernetes.io/serviceaccount` in every container that mounts nothing there.

use serde_json::{Value, json};

pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The account a pod (or pod template) spec runs as.
pub fn account_of(spec: &Value) -> &str {
    spec["serviceAccountName"]
        .as_str()
        .filter(|name| !name.is_empty())
        .or(spec["serviceAccount"]
            .as_str()
            .filter(|name| !name.is_empty()))
        .unwrap_or("default")
}

/// The refusal of a pod named `pod_name` (its generateName when it has no name yet).
pub fn refusal(pod_name: &str, namespace: &str, account: &str) -> String {
    format!(
        "pods \"{pod_name}\" is forbidden: error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found"
    )
}

/// The name admission errors give a pod: its name, else its generateName (admission runs
/// before the name is generated).
pub fn name_for_errors(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or(pod["metadata"]["generateName"].as_str())
        .unwrap_or("Unknown")
        .to_string()
}

/// Admits `pod` (named `pod_name` in errors) in `namespace` given its account (None: it does
/// not exist); `volume_suffix` is the five random characters of the token volume's name.
pub fn admit(
    pod: &mut Value,
    pod_name: &str,
    namespace: &str,
    account: Option<&Value>,
    volume_suffix: &str,
) -> Result<(), String> {
    let name = account_of(&pod["spec"]).to_string();
    let Some(account) = account else {
        return Err(refusal(pod_name, namespace, &name));
    };
    // Stored pods carry both fields (the deprecated one from the v1 conversion).
    pod["spec"]["serviceAccountName"] = json!(name);
    pod["spec"]["serviceAccount"] = json!(name);
    let automount = pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or(account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if automount {
        mount_token(pod, &format!("kube-api-access-{volume_suffix}"));
    }
    Ok(())
}

fn mounts_token(container: &Value) -> bool {
    container["volumeMounts"]
        .as_array()
        .is_some_and(|mounts| mounts.iter().any(|m| m["mountPath"] == TOKEN_MOUNT_PATH))
}

fn mount_token(pod: &mut Value, volume: &str) {
    let lists = ["initContainers", "containers"];
    let needing = lists.iter().any(|list| {
        pod["spec"][*list]
            .as_array()
            .is_some_and(|containers| containers.iter().any(|c| !mounts_token(c)))
    });
    if !needing {
        return;
    }
    let projected = json!({
        "name": volume,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    });
    match pod["spec"]["volumes"].as_array_mut() {
        Some(volumes) => volumes.push(projected),
        None => pod["spec"]["volumes"] = json!([projected]),
    }
    let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    for list in lists {
        for container in pod["spec"][list].as_array_mut().into_iter().flatten() {
            if mounts_token(container) {
                continue;
            }
            match container["volumeMounts"].as_array_mut() {
                Some(mounts) => mounts.push(mount.clone()),
                None => container["volumeMounts"] = json!([mount.clone()]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> std::collections::BTreeMap<String, Value> {
        super::super::test_fixtures::documents("service_accounts", "pods.yaml")
            .into_iter()
            .map(|object| {
                let name = object["metadata"]["name"]
                    .as_str()
                    .or(object["metadata"]["generateName"].as_str())
                    .unwrap_or_default()
                    .to_string();
                (name, object)
            })
            .collect()
    }

    #[test]
    fn a_pod_gets_its_accounts_token_mounted_in_every_container() {
        let objects = fixture();
        let mut pod = objects["web"].clone();
        admit(&mut pod, "x", "demo", Some(&objects["default"]), "abcde").expect("admitted");
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["serviceAccount"], "default");
        assert_eq!(pod["spec"]["volumes"][1]["name"], "kube-api-access-abcde");
        let sources = &pod["spec"]["volumes"][1]["projected"]["sources"];
        assert_eq!(sources[0]["serviceAccountToken"]["path"], "token");
        assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
        for list in ["initContainers", "containers"] {
            let mounts = &pod["spec"][list][0]["volumeMounts"];
            let last = mounts.as_array().and_then(|m| m.last()).cloned();
            assert_eq!(
                last,
                Some(
                    json!({"name": "kube-api-access-abcde", "readOnly": true, "mountPath": TOKEN_MOUNT_PATH})
                )
            );
        }
    }

    #[test]
    fn no_token_when_the_pod_or_its_account_says_so() {
        let objects = fixture();
        let mut pod = objects["no-token"].clone();
        admit(&mut pod, "x", "demo", Some(&objects["default"]), "abcde").expect("admitted");
        assert!(pod["spec"]["volumes"].is_null());
        let mut pod = objects["web"].clone();
        admit(&mut pod, "x", "demo", Some(&objects["quiet"]), "abcde").expect("admitted");
        assert_eq!(pod["spec"]["volumes"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn a_missing_account_refuses_the_pod() {
        let objects = fixture();
        let mut pod = objects["runner-"].clone();
        let name = name_for_errors(&pod);
        assert_eq!(
            admit(&mut pod, &name, "demo", None, "abcde"),
            Err("pods \"runner-\" is forbidden: error looking up service account demo/gitlab-runner: serviceaccount \"gitlab-runner\" not found".to_string())
        );
    }
}
