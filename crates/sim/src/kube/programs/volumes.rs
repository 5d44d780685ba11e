//! The files a pod's Secret and ConfigMap volumes put into a container, as the kubelet writes
//! them: a `secret` or `configMap` volume (every key as a file, or its `items` at their `path`),
//! and a `projected` volume's `secret` and `configMap` sources side by side. A pure function of
//! the pod and the objects it names, so a program reads the password file the real container
//! would read (`/etc/gitlab/postgres/psql-password-main` comes from the `init-*-secrets`
//! projected volume). What the kubelet would refuse to mount is `kubelet::verdict`'s business;
//! here a missing object or key is left out.

use serde_json::Value;
use std::collections::BTreeMap;

use crate::kube::object_data::key_text as key_of;

/// The files of one Secret or ConfigMap source: its `items` (key -> path), or every key.
fn source_files(source: &Value, object: &Value, secret: bool) -> Vec<(String, String)> {
    match source["items"].as_array() {
        Some(items) => items
            .iter()
            .filter_map(|item| {
                let key = item["key"].as_str()?;
                let path = item["path"].as_str().unwrap_or(key);
                Some((path.to_string(), key_of(object, key, secret)?))
            })
            .collect(),
        None => ["data", "stringData"]
            .iter()
            .filter_map(|field| object[*field].as_object())
            .flat_map(|map| map.keys().cloned())
            .filter_map(|key| {
                let value = key_of(object, &key, secret)?;
                Some((key, value))
            })
            .collect(),
    }
}

/// The files of volume `volume` of `pod`, by path inside the volume; `lookup(store_key, name)`
/// finds a Secret (`secrets`) or ConfigMap (`configmaps`) of the pod's namespace.
pub fn files(
    pod: &Value,
    volume: &str,
    lookup: &dyn Fn(&str, &str) -> Option<Value>,
) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let Some(spec) = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == volume)
    else {
        return files;
    };
    let mut add = |source: &Value, name_field: &str, store_key: &str, secret: bool| {
        let Some(name) = source[name_field].as_str() else {
            return;
        };
        if let Some(object) = lookup(store_key, name) {
            files.extend(source_files(source, &object, secret));
        }
    };
    if spec["secret"].is_object() {
        add(&spec["secret"], "secretName", "secrets", true);
    }
    if spec["configMap"].is_object() {
        add(&spec["configMap"], "name", "configmaps", false);
    }
    for source in spec["projected"]["sources"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if source["secret"].is_object() {
            add(&source["secret"], "name", "secrets", true);
        }
        if source["configMap"].is_object() {
            add(&source["configMap"], "name", "configmaps", false);
        }
    }
    files
}

/// The file at `path` of any of the pod's Secret or ConfigMap volumes (the first volume that
/// has one), with the volume's name: where a container finds `runner-token` when only the
/// path inside the volume is known.
pub fn find(
    pod: &Value,
    path: &str,
    lookup: &dyn Fn(&str, &str) -> Option<Value>,
) -> Option<(String, String)> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find_map(|volume| {
            files(pod, volume, lookup)
                .remove(path)
                .map(|content| (volume.to_string(), content))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    fn store(store_key: &str, name: &str) -> Option<Value> {
        match (store_key, name) {
            ("secrets", "gitlab-postgresql-password") => Some(json!({"data": {
                "password": base64::engine::general_purpose::STANDARD.encode("s3cret"),
                "other": base64::engine::general_purpose::STANDARD.encode("x"),
            }})),
            ("secrets", "runner") => Some(json!({"stringData": {"runner-token": "glrt-abc"}})),
            ("configmaps", "config") => Some(json!({"data": {"a.yml": "a: 1"}})),
            _ => None,
        }
    }

    fn pod() -> Value {
        json!({"spec": {"volumes": [
            {"name": "init-webservice-secrets", "projected": {"sources": [
                {"secret": {"name": "gitlab-postgresql-password",
                            "items": [{"key": "password", "path": "postgres/psql-password-main"}]}},
                {"secret": {"name": "absent", "items": [{"key": "k", "path": "absent/k"}]}},
                {"configMap": {"name": "config"}},
            ]}},
            {"name": "plain", "secret": {"secretName": "runner"}},
            {"name": "scratch", "emptyDir": {}},
        ]}})
    }

    #[test]
    fn a_projected_volume_holds_its_sources_items_at_their_paths() {
        let files = files(&pod(), "init-webservice-secrets", &store);
        assert_eq!(
            files.into_iter().collect::<Vec<_>>(),
            vec![
                ("a.yml".to_string(), "a: 1".to_string()),
                (
                    "postgres/psql-password-main".to_string(),
                    "s3cret".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_secret_volume_without_items_holds_every_key() {
        assert_eq!(
            files(&pod(), "plain", &store)
                .get("runner-token")
                .map(String::as_str),
            Some("glrt-abc")
        );
        assert!(files(&pod(), "scratch", &store).is_empty());
        assert!(files(&pod(), "no-such-volume", &store).is_empty());
    }

    #[test]
    fn a_path_is_found_in_whichever_volume_has_it() {
        assert_eq!(
            find(&pod(), "runner-token", &store),
            Some(("plain".to_string(), "glrt-abc".to_string()))
        );
        assert_eq!(find(&pod(), "absent/k", &store), None);
    }
}
