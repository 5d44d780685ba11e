//! A small CloudNativePG operator: a `postgresql.cnpg.io/v1 Cluster` gets what the real operator
//! creates (per instance a PVC and a pod `<name>-N`; the Services `<name>-rw`, `-ro`, `-r`; the
//! Secret `<name>-app`) and becomes Ready only once its instances run, which needs their claims
//! Bound. Nothing happens while the operator Deployment (image
//! `ghcr.io/cloudnative-pg/cloudnative-pg`) is not Available, as on a real cluster.

use serde_json::{Value, json};

pub const STORE_KEY: &str = "clusters.postgresql.cnpg.io";
pub const OPERATOR_IMAGE: &str = "ghcr.io/cloudnative-pg/cloudnative-pg";
const DEFAULT_IMAGE: &str = "ghcr.io/cloudnative-pg/postgresql:18.1-system-trixie";

/// Whether a Deployment is the CNPG operator and Available.
pub fn operator_available(deployment: &Value) -> bool {
    let runs_operator = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["image"]
                .as_str()
                .is_some_and(|image| image.starts_with(OPERATOR_IMAGE))
        });
    let available = deployment["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Available" && c["status"] == "True");
    runs_operator && available && deployment["status"]["availableReplicas"].as_u64() > Some(0)
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or("")
}

fn instances(cluster: &Value) -> u64 {
    cluster["spec"]["instances"].as_u64().unwrap_or(1).max(1)
}

fn owner(cluster: &Value) -> Value {
    json!([{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": cluster["metadata"]["name"],
            "uid": cluster["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
}

fn metadata(cluster: &Value, name: &str, labels: Value) -> Value {
    json!({"name": name, "namespace": cluster["metadata"]["namespace"], "labels": labels,
           "ownerReferences": owner(cluster)})
}

/// The database and owner the `initdb` bootstrap creates (`app`/`app` by default).
fn database_and_owner(cluster: &Value) -> (String, String) {
    let initdb = &cluster["spec"]["bootstrap"]["initdb"];
    let database = initdb["database"].as_str().unwrap_or("app").to_string();
    let owner = initdb["owner"].as_str().unwrap_or(&database).to_string();
    (database, owner)
}

/// What the operator creates for a Cluster, as (store key, object) without server metadata.
/// `password` is the app user's (the caller chooses it once).
pub fn desired(cluster: &Value, password: &str) -> Vec<(&'static str, Value)> {
    let name = name_of(cluster);
    let namespace = cluster["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let mut objects = Vec::new();
    let size = cluster["spec"]["storage"]["size"]
        .as_str()
        .unwrap_or("1Gi")
        .to_string();
    let image = cluster["spec"]["imageName"]
        .as_str()
        .unwrap_or(DEFAULT_IMAGE)
        .to_string();
    // The instances' account first: the ServiceAccount admission plugin refuses pods whose
    // account does not exist yet.
    objects.push((
        "serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": metadata(cluster, name, json!({"cnpg.io/cluster": name}))}),
    ));
    for index in 1..=instances(cluster) {
        let instance = format!("{name}-{index}");
        let role = if index == 1 { "primary" } else { "replica" };
        let mut claim_spec =
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}});
        if let Some(class) = cluster["spec"]["storage"]["storageClass"].as_str() {
            claim_spec["storageClassName"] = json!(class);
        }
        objects.push((
            "persistentvolumeclaims",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": metadata(cluster, &instance, json!({"cnpg.io/cluster": name, "cnpg.io/instanceName": instance, "cnpg.io/pvcRole": "PG_DATA"})),
                   "spec": claim_spec, "status": {"phase": "Pending"}}),
        ));
        objects.push((
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": metadata(cluster, &instance, json!({"cnpg.io/cluster": name, "cnpg.io/instanceName": instance,
                       "cnpg.io/podRole": "instance", "cnpg.io/instanceRole": role, "role": role})),
                   "spec": {"containers": [{"name": "postgres", "image": image, "ports": [{"name": "postgresql", "containerPort": 5432, "protocol": "TCP"}],
                                             "env": [{"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}],
                                             "volumeMounts": [{"name": "pgdata", "mountPath": "/var/lib/postgresql/data"}]}],
                            "volumes": [{"name": "pgdata", "persistentVolumeClaim": {"claimName": instance}}],
                            "serviceAccountName": name, "nodeName": "sim-control-plane"},
                   "status": {"phase": "Pending", "qosClass": "BestEffort"}}),
        ));
    }
    for (suffix, selector) in [
        (
            "rw",
            json!({"cnpg.io/cluster": name, "cnpg.io/instanceRole": "primary"}),
        ),
        (
            "ro",
            json!({"cnpg.io/cluster": name, "cnpg.io/instanceRole": "replica"}),
        ),
        (
            "r",
            json!({"cnpg.io/cluster": name, "cnpg.io/podRole": "instance"}),
        ),
    ] {
        objects.push((
            "services",
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": metadata(cluster, &format!("{name}-{suffix}"), json!({"cnpg.io/cluster": name})),
                   "spec": {"type": "ClusterIP", "selector": selector,
                            "ports": [{"name": "postgres", "port": 5432, "protocol": "TCP", "targetPort": 5432}]}}),
        ));
    }
    if cluster["spec"]["bootstrap"]["initdb"]["secret"]["name"].is_null() {
        let (database, user) = database_and_owner(cluster);
        let host = format!("{name}-rw");
        let fqdn = format!("{host}.{namespace}");
        let data = [
            ("username", user.clone()),
            ("user", user.clone()),
            ("password", password.to_string()),
            ("dbname", database.clone()),
            ("host", host.clone()),
            ("port", "5432".to_string()),
            (
                "uri",
                format!("postgresql://{user}:{password}@{fqdn}:5432/{database}"),
            ),
            (
                "jdbc-uri",
                format!("jdbc:postgresql://{fqdn}:5432/{database}?password={password}&user={user}"),
            ),
            (
                "pgpass",
                format!("{host}:5432:{database}:{user}:{password}\n"),
            ),
        ];
        use base64::Engine;
        let encoded: serde_json::Map<String, Value> = data
            .iter()
            .map(|(key, value)| {
                (
                    key.to_string(),
                    json!(base64::engine::general_purpose::STANDARD.encode(value)),
                )
            })
            .collect();
        objects.push((
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
                   "metadata": metadata(cluster, &format!("{name}-app"), json!({"cnpg.io/cluster": name, "cnpg.io/reload": "true"})),
                   "data": encoded}),
        ));
    }
    objects
}

/// The Cluster's status from its instance pods (those of `pods` that are its instances).
pub fn status(cluster: &Value, pods: &[Value]) -> Value {
    let name = name_of(cluster);
    let wanted = instances(cluster);
    let ready_names: Vec<String> = pods
        .iter()
        .filter(|pod| pod["metadata"]["labels"]["cnpg.io/cluster"] == name)
        .filter(|pod| {
            pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .map(|pod| name_of(pod).to_string())
        .collect();
    let ready = ready_names.len() as u64;
    let healthy = ready >= wanted;
    let (phase, status, reason, message) = if healthy {
        (
            "Cluster in healthy state",
            "True",
            "ClusterIsReady",
            "Cluster is Ready",
        )
    } else if ready_names.iter().any(|n| *n == format!("{name}-1")) {
        (
            "Creating a new replica",
            "False",
            "ClusterIsNotReady",
            "Cluster Is Not Ready",
        )
    } else {
        (
            "Setting up primary",
            "False",
            "ClusterIsNotReady",
            "Cluster Is Not Ready",
        )
    };
    let mut instance_names: Vec<String> = (1..=wanted).map(|i| format!("{name}-{i}")).collect();
    instance_names.sort();
    json!({
        "instances": wanted, "readyInstances": ready, "phase": phase,
        "currentPrimary": format!("{name}-1"), "targetPrimary": format!("{name}-1"),
        "writeService": format!("{name}-rw"), "readService": format!("{name}-r"),
        "instanceNames": instance_names,
        "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}]
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_fixtures::documents;
    use super::*;

    #[test]
    fn the_operator_is_its_deployment_when_available() {
        let documents = documents("cnpg", "operator.yaml");
        assert!(operator_available(&documents[0]));
        assert!(!operator_available(&documents[1]), "scaled to 0");
        assert!(!operator_available(&documents[2]), "another image");
    }

    #[test]
    fn a_cluster_gets_instances_services_and_its_app_secret() {
        let cluster = &documents("cnpg", "cluster.yaml")[0];
        let objects = desired(cluster, "s3cret");
        let names: Vec<String> = objects
            .iter()
            .map(|(key, object)| format!("{key}/{}", name_of(object)))
            .collect();
        assert_eq!(
            names,
            vec![
                "serviceaccounts/pg",
                "persistentvolumeclaims/pg-1",
                "pods/pg-1",
                "persistentvolumeclaims/pg-2",
                "pods/pg-2",
                "services/pg-rw",
                "services/pg-ro",
                "services/pg-r",
                "secrets/pg-app"
            ]
        );
        let claim = &objects[1].1;
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "5Gi");
        assert_eq!(claim["spec"]["storageClassName"], "fast");
        assert_eq!(claim["metadata"]["ownerReferences"][0]["uid"], "c-1");
        let secret = &objects[8].1;
        use base64::Engine;
        let decode = |key: &str| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(secret["data"][key].as_str().unwrap())
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(decode("username"), "gitlab");
        assert_eq!(decode("dbname"), "gitlabhq");
        assert_eq!(decode("host"), "pg-rw");
        assert_eq!(
            decode("uri"),
            "postgresql://gitlab:s3cret@pg-rw.db:5432/gitlabhq"
        );
    }

    #[test]
    fn a_cluster_is_ready_once_every_instance_is() {
        let documents = documents("cnpg", "cluster.yaml");
        let (cluster, pods) = (&documents[0], &documents[1..]);
        let partly = status(cluster, &pods[..1]);
        assert_eq!(
            (
                &partly["phase"],
                &partly["readyInstances"],
                &partly["conditions"][0]["status"]
            ),
            (&json!("Creating a new replica"), &json!(1), &json!("False"))
        );
        let none = status(cluster, &[]);
        assert_eq!(none["phase"], "Setting up primary");
        let all = status(cluster, pods);
        assert_eq!(
            (
                &all["phase"],
                &all["readyInstances"],
                &all["conditions"][0]["reason"]
            ),
            (
                &json!("Cluster in healthy state"),
                &json!(2),
                &json!("ClusterIsReady")
            )
        );
    }
}
