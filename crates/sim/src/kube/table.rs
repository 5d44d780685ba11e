//! `Table` responses (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), which `kubectl get`
//! prints and `helm status` asks for.

use serde_json::{Value, json};

/// True when the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn age(object: &Value) -> String {
    let Some(created) = object["metadata"]["creationTimestamp"].as_str() else {
        return "<unknown>".into();
    };
    let Ok(created) = humantime::parse_rfc3339(created) else {
        return "<unknown>".into();
    };
    let seconds = std::time::SystemTime::now()
        .duration_since(created)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        7200..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

fn column(name: &str, kind: &str) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": kind, "format": format, "description": name, "priority": 0})
}

fn count(value: &Value) -> usize {
    value.as_object().map(|m| m.len()).unwrap_or(0)
}

/// Columns and cells per kind, as the real server prints the common ones.
fn columns_and_cells(kind: &str, object: &Value) -> (Vec<Value>, Vec<Value>) {
    let name = json!(object["metadata"]["name"]);
    let age = json!(age(object));
    let status = &object["status"];
    let spec = &object["spec"];
    match kind {
        "Pod" => {
            let statuses = status["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = spec["containers"].as_array().map(Vec::len).unwrap_or(0);
            let ready = statuses.iter().filter(|s| s["ready"] == true).count();
            let restarts: u64 = statuses
                .iter()
                .filter_map(|s| s["restartCount"].as_u64())
                .sum();
            let reason = statuses
                .iter()
                .find_map(|s| s["state"]["waiting"]["reason"].as_str())
                .or_else(|| status["phase"].as_str())
                .unwrap_or("Pending");
            (
                vec![
                    column("Name", "string"),
                    column("Ready", "string"),
                    column("Status", "string"),
                    column("Restarts", "string"),
                    column("Age", "string"),
                ],
                vec![
                    name,
                    json!(format!("{ready}/{total}")),
                    json!(reason),
                    json!(restarts.to_string()),
                    age,
                ],
            )
        }
        "Deployment" => {
            let desired = spec["replicas"].as_u64().unwrap_or(1);
            (
                vec![
                    column("Name", "string"),
                    column("Ready", "string"),
                    column("Up-to-date", "integer"),
                    column("Available", "integer"),
                    column("Age", "string"),
                ],
                vec![
                    name,
                    json!(format!(
                        "{}/{desired}",
                        status["readyReplicas"].as_u64().unwrap_or(0)
                    )),
                    json!(status["updatedReplicas"].as_u64().unwrap_or(0)),
                    json!(status["availableReplicas"].as_u64().unwrap_or(0)),
                    age,
                ],
            )
        }
        "StatefulSet" => {
            let desired = spec["replicas"].as_u64().unwrap_or(1);
            (
                vec![
                    column("Name", "string"),
                    column("Ready", "string"),
                    column("Age", "string"),
                ],
                vec![
                    name,
                    json!(format!(
                        "{}/{desired}",
                        status["readyReplicas"].as_u64().unwrap_or(0)
                    )),
                    age,
                ],
            )
        }
        "Namespace" => (
            vec![
                column("Name", "string"),
                column("Status", "string"),
                column("Age", "string"),
            ],
            vec![name, status["phase"].clone(), age],
        ),
        "Service" => {
            let ports: Vec<String> = spec["ports"]
                .as_array()
                .map(|ports| {
                    ports
                        .iter()
                        .map(|p| {
                            format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            (
                vec![
                    column("Name", "string"),
                    column("Type", "string"),
                    column("Cluster-IP", "string"),
                    column("External-IP", "string"),
                    column("Port(s)", "string"),
                    column("Age", "string"),
                ],
                vec![
                    name,
                    spec["type"].clone(),
                    spec["clusterIP"].clone(),
                    json!("<none>"),
                    json!(ports.join(",")),
                    age,
                ],
            )
        }
        "Secret" => (
            vec![
                column("Name", "string"),
                column("Type", "string"),
                column("Data", "string"),
                column("Age", "string"),
            ],
            vec![
                name,
                object["type"].clone(),
                json!(count(&object["data"])),
                age,
            ],
        ),
        "ConfigMap" => (
            vec![
                column("Name", "string"),
                column("Data", "string"),
                column("Age", "string"),
            ],
            vec![
                name,
                json!(count(&object["data"]) + count(&object["binaryData"])),
                age,
            ],
        ),
        "Job" => {
            let complete = status["succeeded"].as_u64().unwrap_or(0);
            let state = if status["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Failed"))
            {
                "Failed"
            } else if complete > 0 {
                "Complete"
            } else {
                "Running"
            };
            (
                vec![
                    column("Name", "string"),
                    column("Status", "string"),
                    column("Completions", "string"),
                    column("Age", "string"),
                ],
                vec![name, json!(state), json!(format!("{complete}/1")), age],
            )
        }
        _ => (
            vec![column("Name", "string"), column("Age", "string")],
            vec![name, age],
        ),
    }
}

/// Column definitions and cells of one object.
type CellsOf<'a> = dyn Fn(&Value) -> (Vec<Value>, Vec<Value>) + 'a;

/// A printer column of a CustomResourceDefinition: name, type, JSONPath.
pub type PrinterColumn = (String, String, String);

/// A Table of custom resources whose CRD declares `additionalPrinterColumns`: Name, then those
/// columns (a `date` column holds the timestamp; kubectl prints it as an age).
pub fn custom_table(
    printer_columns: &[PrinterColumn],
    objects: &[Value],
    include: &str,
    resource_version: u64,
) -> Value {
    let mut definitions = vec![column("Name", "string")];
    definitions.extend(printer_columns.iter().map(|(name, kind, _)| {
        json!({"name": name, "type": kind, "format": "", "description": name, "priority": 0})
    }));
    let cells_of = |object: &Value| {
        let mut cells = vec![json!(object["metadata"]["name"])];
        cells.extend(
            printer_columns
                .iter()
                .map(|(_, kind, path)| super::crd_schema::cell(object, kind, path)),
        );
        (definitions.clone(), cells)
    };
    rows_table(
        objects,
        include,
        resource_version,
        &cells_of,
        definitions.clone(),
    )
}

/// A Table of `objects`; `include` is the `includeObject` parameter (None, Metadata, Object).
pub fn table(kind: &str, objects: &[Value], include: &str, resource_version: u64) -> Value {
    let empty = columns_and_cells(kind, &json!({})).0;
    rows_table(
        objects,
        include,
        resource_version,
        &|object| columns_and_cells(kind, object),
        empty,
    )
}

fn rows_table(
    objects: &[Value],
    include: &str,
    resource_version: u64,
    cells_of: &CellsOf<'_>,
    empty: Vec<Value>,
) -> Value {
    let mut columns = None;
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let (definitions, cells) = cells_of(object);
            columns.get_or_insert(definitions);
            let embedded = match include {
                "None" => Value::Null,
                "Object" => object.clone(),
                _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]}),
            };
            let mut row = json!({"cells": cells});
            if !embedded.is_null() {
                row["object"] = embedded;
            }
            row
        })
        .collect();
    let columns = columns.unwrap_or(empty);
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": columns, "rows": rows
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_header_asks_for_a_table() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }

    #[test]
    fn pods_print_ready_and_status() {
        let pod = json!({"metadata": {"name": "web-1"}, "spec": {"containers": [{"name": "c"}]},
                         "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 0}]}});
        let table = table("Pod", &[pod], "Metadata", 7);
        assert_eq!(table["rows"][0]["cells"][1], "1/1");
        assert_eq!(table["rows"][0]["cells"][2], "Running");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["columnDefinitions"][0]["name"], "Name");
    }
}
