//! The PersistentVolume controller's decisions, as pure functions: a claim binds to a matching
//! pre-created volume, or a StorageClass (the default one when the claim names none) provisions
//! one; otherwise it stays Pending with the event a real cluster raises. A WaitForFirstConsumer
//! class provisions only once a pod uses the claim, and an external provisioner provisions only
//! while it runs (local-path: its provisioner pod is Ready).

use serde_json::{Value, json};

/// The annotation that marks the default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// What to do with an unbound claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Bind to this pre-created volume.
    Bind { volume: String },
    /// Create this volume (already bound to the claim) and bind.
    Provision { volume: Value },
    /// Set the claim's `storageClassName` to the default class first (a claim created before a
    /// default class existed gets it retroactively, as since Kubernetes 1.28).
    AssignDefaultClass { class: String },
    /// Stay Pending; `event` is (type, reason, message) as the controller reports it.
    Pending {
        event: (&'static str, &'static str, String),
    },
}

/// Everything the decision reads besides the claim.
pub struct StorageView<'a> {
    /// Every PersistentVolume.
    pub volumes: &'a [Value],
    /// Every StorageClass.
    pub classes: &'a [Value],
    /// Whether a pod that uses the claim exists (a WaitForFirstConsumer class waits for one).
    pub has_consumer: bool,
    /// Whether an external provisioner is running (`rancher.io/local-path` -> its pod Ready).
    pub provisioner_running: &'a dyn Fn(&str) -> bool,
}

fn quantity_bytes(text: &str) -> Option<u128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((number * factor) as u128)
}

fn request(claim: &Value) -> Option<u128> {
    claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(quantity_bytes)
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .is_none_or(|wanted| wanted.iter().all(|(key, value)| &labels[key] == value))
}

/// Whether `volume` can serve `claim` (class, size, access modes, selector, claimRef).
fn volume_fits(volume: &Value, claim: &Value, class: &str) -> bool {
    if volume["status"]["phase"] != "Available" && !volume["status"]["phase"].is_null() {
        return false;
    }
    let claim_ref = &volume["spec"]["claimRef"];
    if claim_ref.is_object()
        && (claim_ref["name"] != claim["metadata"]["name"]
            || claim_ref["namespace"] != claim["metadata"]["namespace"])
    {
        return false;
    }
    if volume["spec"]["storageClassName"].as_str().unwrap_or("") != class {
        return false;
    }
    let size = volume["spec"]["capacity"]["storage"]
        .as_str()
        .and_then(quantity_bytes);
    if let (Some(size), Some(wanted)) = (size, request(claim))
        && size < wanted
    {
        return false;
    }
    let modes = volume["spec"]["accessModes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let wanted = claim["spec"]["accessModes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !wanted.iter().all(|mode| modes.contains(mode)) {
        return false;
    }
    labels_match(&claim["spec"]["selector"], &volume["metadata"]["labels"])
}

fn default_class(classes: &[Value]) -> Option<String> {
    classes
        .iter()
        .filter(|class| class["metadata"]["annotations"][DEFAULT_CLASS] == "true")
        .filter_map(|class| class["metadata"]["name"].as_str())
        .max()
        .map(str::to_string)
}

/// The volume a provisioner creates for `claim`.
fn provisioned_volume(claim: &Value, class: &Value) -> Value {
    let namespace = claim["metadata"]["namespace"].as_str().unwrap_or("");
    let name = claim["metadata"]["name"].as_str().unwrap_or("");
    let uid = claim["metadata"]["uid"].as_str().unwrap_or(name);
    let volume_name = format!("pvc-{uid}");
    let provisioner = class["provisioner"].as_str().unwrap_or("");
    let base = class["parameters"]["pathBase"]
        .as_str()
        .unwrap_or("/opt/local-path-provisioner");
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name,
            "annotations": {"pv.kubernetes.io/provisioned-by": provisioner},
            "finalizers": ["kubernetes.io/pv-protection"]
        },
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"].clone()},
            "accessModes": claim["spec"]["accessModes"].clone(),
            "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
            "storageClassName": class["metadata"]["name"].clone(),
            "volumeMode": claim["spec"]["volumeMode"].as_str().unwrap_or("Filesystem"),
            "hostPath": {"path": format!("{base}/{volume_name}_{namespace}_{name}"), "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace,
                         "name": name, "uid": claim["metadata"]["uid"].clone()}
        },
        "status": {"phase": "Bound"}
    })
}

/// What the controller does with an unbound claim.
/// The phase the PersistentVolume controller gives a volume: a bound volume whose claim (by
/// uid) is gone is `Released` under the `Retain` policy (its data kept, still naming the old
/// claim, so no new claim binds it); a released volume whose `claimRef.uid` an administrator
/// cleared is `Available` again. `None`: no change. `claim_uid` is the uid of the claim the
/// volume names, when that claim exists.
pub fn volume_phase(volume: &Value, claim_uid: Option<&str>) -> Option<&'static str> {
    let phase = volume["status"]["phase"].as_str().unwrap_or("");
    let reference = &volume["spec"]["claimRef"];
    let bound_uid = reference["uid"].as_str();
    let retain = volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain";
    match (phase, bound_uid) {
        ("Bound", Some(uid)) if retain && claim_uid != Some(uid) => Some("Released"),
        ("Released", None) => Some("Available"),
        _ => None,
    }
}

pub fn decide(claim: &Value, view: &StorageView) -> Decision {
    if let Some(volume_name) = claim["spec"]["volumeName"].as_str() {
        return match view
            .volumes
            .iter()
            .find(|volume| volume["metadata"]["name"] == volume_name)
        {
            // Still reserved for another claim (a released volume names its old claim's uid).
            Some(volume)
                if volume["spec"]["claimRef"]["uid"]
                    .as_str()
                    .is_some_and(|uid| Some(uid) != claim["metadata"]["uid"].as_str()) =>
            {
                Decision::Pending {
                    event: (
                        "Warning",
                        "FailedBinding",
                        format!("volume \"{volume_name}\" already bound to a different claim."),
                    ),
                }
            }
            Some(_) => Decision::Bind {
                volume: volume_name.to_string(),
            },
            None => Decision::Pending {
                event: (
                    "Warning",
                    "FailedBinding",
                    format!("volume \"{volume_name}\" not found"),
                ),
            },
        };
    }
    let named_class = claim["spec"]["storageClassName"].as_str();
    if named_class.is_none()
        && let Some(class) = default_class(view.classes)
    {
        return Decision::AssignDefaultClass { class };
    }
    let class_name = named_class.unwrap_or("");
    if let Some(volume) = view
        .volumes
        .iter()
        .find(|volume| volume_fits(volume, claim, class_name))
    {
        return Decision::Bind {
            volume: volume["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        };
    }
    if class_name.is_empty() {
        return Decision::Pending {
            event: (
                "Normal",
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set"
                    .to_string(),
            ),
        };
    }
    let Some(class) = view
        .classes
        .iter()
        .find(|class| class["metadata"]["name"] == class_name)
    else {
        return Decision::Pending {
            event: (
                "Warning",
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
            ),
        };
    };
    if class["volumeBindingMode"] == "WaitForFirstConsumer" && !view.has_consumer {
        return Decision::Pending {
            event: (
                "Normal",
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding".to_string(),
            ),
        };
    }
    let provisioner = class["provisioner"].as_str().unwrap_or("");
    if provisioner == "kubernetes.io/no-provisioner" {
        return Decision::Pending {
            event: (
                "Normal",
                "WaitForPodScheduled",
                "waiting for pod to be scheduled".to_string(),
            ),
        };
    }
    if !(view.provisioner_running)(provisioner) {
        return Decision::Pending {
            event: (
                "Normal",
                "ExternalProvisioning",
                format!(
                    "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
                ),
            ),
        };
    }
    Decision::Provision {
        volume: provisioned_volume(claim, class),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(class: Option<&str>) -> Value {
        let mut claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "export", "namespace": "minio", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
        });
        if let Some(class) = class {
            claim["spec"]["storageClassName"] = json!(class);
        }
        claim
    }

    fn local_path(default: bool, mode: &str) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "local-path", "annotations": {DEFAULT_CLASS: default.to_string()}},
               "provisioner": "rancher.io/local-path", "volumeBindingMode": mode, "reclaimPolicy": "Retain",
               "parameters": {"pathBase": "/data"}})
    }

    fn decide_with(
        claim: &Value,
        volumes: &[Value],
        classes: &[Value],
        consumer: bool,
        running: bool,
    ) -> Decision {
        let running = move |_: &str| running;
        decide(
            claim,
            &StorageView {
                volumes,
                classes,
                has_consumer: consumer,
                provisioner_running: &running,
            },
        )
    }

    #[test]
    fn without_a_class_or_volume_a_claim_stays_pending_in_the_controllers_words() {
        assert_eq!(
            decide_with(&claim(None), &[], &[], true, true),
            Decision::Pending {
                event: (
                    "Normal",
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set"
                        .into()
                )
            }
        );
    }

    #[test]
    fn a_default_class_is_assigned_then_provisions() {
        let classes = [local_path(true, "Immediate")];
        assert_eq!(
            decide_with(&claim(None), &[], &classes, false, true),
            Decision::AssignDefaultClass {
                class: "local-path".into()
            }
        );
        let Decision::Provision { volume } =
            decide_with(&claim(Some("local-path")), &[], &classes, false, true)
        else {
            panic!("expected a provisioned volume");
        };
        assert_eq!(volume["metadata"]["name"], "pvc-u1");
        assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(
            volume["spec"]["hostPath"]["path"],
            "/data/pvc-u1_minio_export"
        );
        assert_eq!(volume["spec"]["claimRef"]["name"], "export");
    }

    #[test]
    fn late_binding_waits_for_a_consumer_and_the_provisioner() {
        let classes = [local_path(true, "WaitForFirstConsumer")];
        let claim = claim(Some("local-path"));
        assert!(matches!(
            decide_with(&claim, &[], &classes, false, true),
            Decision::Pending {
                event: (_, "WaitForFirstConsumer", _)
            }
        ));
        assert!(matches!(
            decide_with(&claim, &[], &classes, true, false),
            Decision::Pending {
                event: (_, "ExternalProvisioning", _)
            }
        ));
        assert!(matches!(
            decide_with(&claim, &[], &classes, true, true),
            Decision::Provision { .. }
        ));
    }

    #[test]
    fn a_missing_class_is_named() {
        assert_eq!(
            decide_with(&claim(Some("fast")), &[], &[], true, true),
            Decision::Pending {
                event: (
                    "Warning",
                    "ProvisioningFailed",
                    "storageclass.storage.k8s.io \"fast\" not found".into()
                )
            }
        );
    }

    #[test]
    fn a_pre_created_volume_binds_when_it_fits() {
        let volume = |name: &str, size: &str, class: &str| {
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                   "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": class},
                   "status": {"phase": "Available"}})
        };
        let volumes = [
            volume("small", "1Gi", "manual"),
            volume("right", "20Gi", "manual"),
        ];
        assert_eq!(
            decide_with(&claim(Some("manual")), &volumes, &[], false, false),
            Decision::Bind {
                volume: "right".into()
            }
        );
        let mut reserved = volume("reserved", "20Gi", "manual");
        reserved["spec"]["claimRef"] = json!({"namespace": "other", "name": "export"});
        assert!(matches!(
            decide_with(&claim(Some("manual")), &[reserved], &[], false, false),
            Decision::Pending {
                event: (_, "ProvisioningFailed", _)
            }
        ));
    }

    #[test]
    fn a_retained_volume_whose_claim_is_gone_is_released_until_its_claim_ref_is_freed() {
        let mut volume = json!({"metadata": {"name": "stable-redis"},
                                "spec": {"persistentVolumeReclaimPolicy": "Retain",
                                         "claimRef": {"namespace": "redis", "name": "data", "uid": "old"}},
                                "status": {"phase": "Bound"}});
        assert_eq!(volume_phase(&volume, Some("old")), None);
        assert_eq!(volume_phase(&volume, None), Some("Released"));
        volume["status"]["phase"] = json!("Released");
        // A new claim of the same name cannot bind it, in the controller's words.
        let claim = json!({"metadata": {"name": "data", "namespace": "redis", "uid": "new"},
                           "spec": {"volumeName": "stable-redis"}});
        let classes = Vec::new();
        let volumes = vec![volume.clone()];
        let never = |_: &str| false;
        let view = StorageView {
            volumes: &volumes,
            classes: &classes,
            has_consumer: false,
            provisioner_running: &never,
        };
        match decide(&claim, &view) {
            Decision::Pending { event } => assert_eq!(
                event,
                (
                    "Warning",
                    "FailedBinding",
                    "volume \"stable-redis\" already bound to a different claim.".to_string()
                )
            ),
            other => panic!("{other:?}"),
        }
        // Freed by an administrator (the uid cleared): Available, and the claim binds.
        volume["spec"]["claimRef"] = json!({"namespace": "redis", "name": "data"});
        assert_eq!(volume_phase(&volume, None), Some("Available"));
        let volumes = vec![volume];
        let view = StorageView {
            volumes: &volumes,
            classes: &classes,
            has_consumer: false,
            provisioner_running: &never,
        };
        assert!(matches!(decide(&claim, &view), Decision::Bind { .. }));
    }

    #[test]
    fn quantities_compare_by_bytes() {
        assert_eq!(quantity_bytes("1Gi"), Some(1 << 30));
        assert!(quantity_bytes("500Mi") < quantity_bytes("1G"));
        assert_eq!(quantity_bytes("2x"), None);
    }
}
