//! The `/scale` subresource of Deployments, StatefulSets and ReplicaSets, as `autoscaling/v1
//! Scale`: what `kubectl scale` and autoscalers read and write.

use super::merge;
use serde_json::{Value, json};

/// A label selector (`matchLabels`, `matchExpressions`) in its string form, as the API server
/// prints it in `Scale.status.selector` (`app=web,tier in (a,b)`), requirements sorted by key.
pub fn selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (key, value) in labels {
            requirements.push((
                key.clone(),
                format!("{key}={}", value.as_str().unwrap_or("")),
            ));
        }
    }
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or("").to_string();
        let mut values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort();
        let text = match expression["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key, text));
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

/// The Scale of a workload.
pub fn scale_of(object: &Value) -> Value {
    let metadata = &object["metadata"];
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"],
                     "resourceVersion": metadata["resourceVersion"], "creationTimestamp": metadata["creationTimestamp"]},
        "spec": {"replicas": object["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0),
                   "selector": selector_string(&object["spec"]["selector"])}
    })
}

/// How a write to `/scale` says the new replica count.
pub enum ScaleWrite<'a> {
    /// PUT of a whole Scale.
    Replace(&'a Value),
    /// JSON patch.
    Json(&'a Value),
    /// Merge or strategic merge patch (the same for a Scale).
    Merge(&'a Value),
}

/// The replica count a write to `/scale` asks for, or the API server's complaint.
pub fn requested_replicas(current: &Value, write: ScaleWrite<'_>) -> Result<i64, String> {
    let scale = match write {
        ScaleWrite::Replace(body) => body.clone(),
        ScaleWrite::Json(patch) => merge::json_patch(current, patch).map_err(|e| e.to_string())?,
        ScaleWrite::Merge(patch) => merge::json_merge_patch(current, patch),
    };
    let replicas = &scale["spec"]["replicas"];
    let Some(count) = replicas.as_i64() else {
        return Err(if replicas.is_null() {
            "spec.replicas: Required value".to_string()
        } else {
            format!("spec.replicas: Invalid value: {replicas}: must be an integer")
        });
    };
    if count < 0 {
        return Err(format!(
            "spec.replicas: Invalid value: {count}: must be greater than or equal to 0"
        ));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_sorted_as_the_api_server_does() {
        let selector = json!({"matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                 {"key": "legacy", "operator": "DoesNotExist"}]});
        assert_eq!(
            selector_string(&selector),
            "app=shop,env in (dev,prod),!legacy,tier=web"
        );
    }

    #[test]
    fn a_scale_shows_the_wanted_and_the_running_replicas() {
        let deployment: Value = serde_norway::from_str(
            "metadata: {name: web, namespace: default, uid: u1, resourceVersion: '7'}\n\
             spec: {replicas: 3, selector: {matchLabels: {app: web}}}\nstatus: {replicas: 2}\n",
        )
        .unwrap();
        let scale = scale_of(&deployment);
        assert_eq!(scale["spec"]["replicas"], 3);
        assert_eq!(
            scale["status"],
            json!({"replicas": 2, "selector": "app=web"})
        );
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn writes_ask_for_a_count_and_negative_ones_are_invalid() {
        let current = json!({"spec": {"replicas": 1}});
        assert_eq!(
            requested_replicas(
                &current,
                ScaleWrite::Merge(&json!({"spec": {"replicas": 4}}))
            ),
            Ok(4)
        );
        assert_eq!(
            requested_replicas(
                &current,
                ScaleWrite::Json(&json!([{"op": "replace", "path": "/spec/replicas", "value": 0}]))
            ),
            Ok(0)
        );
        assert_eq!(
            requested_replicas(
                &current,
                ScaleWrite::Replace(&json!({"spec": {"replicas": -1}}))
            ),
            Err("spec.replicas: Invalid value: -1: must be greater than or equal to 0".into())
        );
    }
}
