//! What a helm release's workloads run: the images their pod templates name and the images
//! their pods run. They differ while a rollout is under way, and for good under
//! `updateStrategy: OnDelete` until a pod is deleted: an upgrade that moved the template has not
//! moved the pods.

use std::collections::BTreeSet;

use serde_json::Value;

use super::KubeClient;
use crate::error::ClientError;

/// The kinds whose pods follow a pod template.
const WORKLOAD_KINDS: &[&str] = &["Deployment", "StatefulSet", "DaemonSet"];

/// One workload of a release and what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadImages {
    /// `StatefulSet/openbao`.
    pub workload: String,
    /// The images its pod template names, in container order.
    pub template: Vec<String>,
    /// Its pods that run other images than the template names: (pod, the images it runs).
    pub behind: Vec<(String, Vec<String>)>,
}

impl WorkloadImages {
    /// `StatefulSet/openbao runs quay.io/openbao/openbao:2.3.2`, and the pods that still run
    /// something else.
    pub fn describe(&self) -> String {
        let mut text = format!("{} runs {}", self.workload, self.template.join(", "));
        for (pod, images) in &self.behind {
            text.push_str(&format!(
                "; pod {pod} still runs {} (its template is older)",
                images.join(", ")
            ));
        }
        text
    }
}

/// The images of a pod (spec) or a pod template, in container order.
fn images(pod_spec: &Value) -> Vec<String> {
    pod_spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|container| container["image"].as_str().map(str::to_string))
        .collect()
}

/// Whether `pod` carries every label of `selector`'s `matchLabels`.
fn selected(selector: &Value, pod: &Value) -> bool {
    let Some(wanted) = selector["matchLabels"].as_object() else {
        return false;
    };
    !wanted.is_empty()
        && wanted
            .iter()
            .all(|(key, value)| pod["metadata"]["labels"][key] == *value)
}

/// The workloads among `workloads` that helm release `release` deployed (helm's
/// `meta.helm.sh/release-name` annotation), each with the pods among `pods` it selects, sorted
/// by workload.
pub fn release_workloads(
    workloads: &[Value],
    pods: &[Value],
    release: &str,
) -> Vec<WorkloadImages> {
    let mut found: Vec<WorkloadImages> = workloads
        .iter()
        .filter(|object| {
            WORKLOAD_KINDS.contains(&object["kind"].as_str().unwrap_or_default())
                && object["metadata"]["annotations"]["meta.helm.sh/release-name"] == release
        })
        .map(|object| {
            let template = images(&object["spec"]["template"]["spec"]);
            let behind = pods
                .iter()
                // A pod being deleted is on its way out, whatever it runs.
                .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
                .filter(|pod| selected(&object["spec"]["selector"], pod))
                .filter_map(|pod| {
                    let running = images(&pod["spec"]);
                    (running != template).then(|| {
                        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                        (name.to_string(), running)
                    })
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            WorkloadImages {
                workload: format!(
                    "{}/{}",
                    object["kind"].as_str().unwrap_or_default(),
                    object["metadata"]["name"].as_str().unwrap_or_default()
                ),
                template,
                behind,
            }
        })
        .collect();
    found.sort_by(|a, b| a.workload.cmp(&b.workload));
    found
}

impl KubeClient {
    /// What the workloads helm release `release` deployed in `namespace` run (reads only).
    pub fn release_workload_images(
        &self,
        namespace: &str,
        release: &str,
    ) -> Result<Vec<WorkloadImages>, ClientError> {
        let mut workloads = Vec::new();
        for kind in WORKLOAD_KINDS {
            workloads.extend(
                self.list(kind, namespace, "", "")?
                    .into_iter()
                    .map(|mut object| {
                        // Lists leave each item's kind out.
                        object["kind"] = Value::String(kind.to_string());
                        object
                    }),
            );
        }
        let pods = self.list("Pod", namespace, "", "")?;
        Ok(release_workloads(&workloads, &pods, release))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Vec<Value> {
        serde_norway::from_str(text).expect("fixture")
    }

    const WORKLOADS: &str = "
- kind: StatefulSet
  metadata:
    name: openbao
    annotations: {meta.helm.sh/release-name: openbao}
  spec:
    selector: {matchLabels: {app: openbao}}
    template:
      spec:
        containers: [{name: openbao, image: 'quay.io/openbao/openbao:2.3.2'}]
- kind: Deployment
  metadata:
    name: injector
    annotations: {meta.helm.sh/release-name: openbao}
  spec:
    selector: {matchLabels: {app: injector}}
    template:
      spec:
        containers: [{name: injector, image: 'quay.io/openbao/openbao-k8s:1.4.0'}]
- kind: Deployment
  metadata:
    name: other
    annotations: {meta.helm.sh/release-name: another}
  spec:
    selector: {matchLabels: {app: other}}
    template:
      spec:
        containers: [{name: other, image: 'nginx:1.27'}]
- kind: Deployment
  metadata: {name: unmanaged}
  spec:
    selector: {matchLabels: {app: unmanaged}}
    template:
      spec:
        containers: [{name: x, image: 'busybox:1.36'}]
";

    #[test]
    fn an_ondelete_pod_on_an_older_template_is_named_with_what_it_still_runs() {
        let pods = yaml(
            "
- metadata: {name: openbao-0, labels: {app: openbao}}
  spec:
    containers: [{name: openbao, image: 'quay.io/openbao/openbao:2.2.0'}]
- metadata: {name: injector-abc, labels: {app: injector}}
  spec:
    containers: [{name: injector, image: 'quay.io/openbao/openbao-k8s:1.4.0'}]
- metadata: {name: injector-old, labels: {app: injector}, deletionTimestamp: '2026-12-04T18:00:00Z'}
  spec:
    containers: [{name: injector, image: 'quay.io/openbao/openbao-k8s:1.3.0'}]
",
        );
        let found = release_workloads(&yaml(WORKLOADS), &pods, "openbao");
        let described: Vec<String> = found.iter().map(WorkloadImages::describe).collect();
        assert_eq!(
            described,
            [
                "Deployment/injector runs quay.io/openbao/openbao-k8s:1.4.0",
                "StatefulSet/openbao runs quay.io/openbao/openbao:2.3.2; pod openbao-0 still runs quay.io/openbao/openbao:2.2.0 (its template is older)",
            ]
        );
    }

    #[test]
    fn pods_on_the_template_and_other_releases_workloads_are_left_out() {
        let pods = yaml(
            "
- metadata: {name: openbao-0, labels: {app: openbao}}
  spec:
    containers: [{name: openbao, image: 'quay.io/openbao/openbao:2.3.2'}]
",
        );
        let found = release_workloads(&yaml(WORKLOADS), &pods, "another");
        assert_eq!(
            found,
            [WorkloadImages {
                workload: "Deployment/other".to_string(),
                template: vec!["nginx:1.27".to_string()],
                behind: Vec::new(),
            }]
        );
        let openbao = release_workloads(&yaml(WORKLOADS), &pods, "openbao");
        assert!(openbao.iter().all(|workload| workload.behind.is_empty()));
    }
}
