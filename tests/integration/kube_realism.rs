//! The Kubernetes simulator fails where a real cluster fails, for the same reason and in the same
//! words, and recovers by itself once the missing piece appears: driven by the real kubectl and
//! helm 4, with the real upstream charts from infra/helm-charts.

use crate::support::helm_install;
use crate::support::wait_failed;
use crate::support::wait_openbao_pod;
use crate::support::{BPRUN, Output, SimKind};

/// helm's output with the release's and the test hooks' times, which are the clock's.
fn helm_times(output: Output) -> Output {
    output.replace_regex(
        r"(?m)^(LAST DEPLOYED: |Last Started:   |Last Completed: ).*$",
        "$1<time>",
    )
}

fn root(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

const WEB_WITH_SECRET: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx:1.27
          env:
            - name: STORAGE
              valueFrom: {secretKeyRef: {name: web-storage, key: connection}}
"#;

/// The waiting reason of the `app=web` pod, once it has one (bounded: 20 s; a controller
/// creates the pod and the kubelet's verdict lands a few reconcile passes later).
fn web_waiting_reason(sim: &crate::support::Sim) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        last = sim
            .kubectl(&[
                "get", "pods", "-n", "demo", "-l", "app=web", "-o",
                "jsonpath={range .items[*]}{.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message}{end}",
            ])
            .ok()
            .to_string();
        if !last.is_empty() && !last.starts_with(": ") {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    last
}

#[test]
fn a_pod_waits_for_its_secret_with_the_kubelets_reason_and_runs_once_it_exists() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl_stdin(&["apply", "-f", "-"], WEB_WITH_SECRET)
        .code(0);
    assert_eq!(
        web_waiting_reason(&sim),
        "CreateContainerConfigError: secret \"web-storage\" not found"
    );
    let events = sim.jsonpath("events", "demo", "{.items[*].message}");
    assert!(
        events.contains("Error: secret \"web-storage\" not found"),
        "{events}"
    );
    // A key the Secret lacks is named too.
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "web-storage",
        "-n",
        "demo",
        "--from-literal=other=x",
    ])
    .ok();
    let key = sim.kubectl(&[
        "wait", "pods", "-l", "app=web", "-n", "demo",
        "--for=jsonpath={.status.containerStatuses[0].state.waiting.message}=couldn't find key connection in Secret demo/web-storage",
        "--timeout=10s",
    ]);
    key.code(0);
    sim.kubectl(&["delete", "secret", "web-storage", "-n", "demo"])
        .ok();
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "web-storage",
        "-n",
        "demo",
        "--from-literal=connection=s3://x",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "pods",
        "-l",
        "app=web",
        "-n",
        "demo",
        "--for=condition=Ready",
        "--timeout=10s",
    ])
    .ok();
    sim.kubectl(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "demo",
        "--timeout=10s",
    ])
    .ok();
}

#[test]
fn kube_wait_names_the_missing_secret() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl_stdin(&["apply", "-f", "-"], WEB_WITH_SECRET)
        .code(0);
    let test = BPRUN.test().envs(sim.vars()).script(
        r#"step("Wait", || { kube_wait("pods", "demo", "app=web", "Ready", #{timeout: 2}); });"#,
    );
    // The pod's name ends in the template's hash and a random suffix.
    let out = test
        .run(&["scripts/test.rhai"])
        .replace_regex(r"Pod/web-[a-z0-9]+-[a-z0-9]{5}:", "Pod/web-<hash>-<id>:");
    out.expect(
        1,
        &wait_failed(),
        "error: step \"Wait\" failed\n\
         \x20 × kube_wait pods matching app=web in demo: not ready after 2s\n\
         \x20  ╭─[scripts/test.rhai:1:19]\n\
         \x201 │ step(\"Wait\", || { kube_wait(\"pods\", \"demo\", \"app=web\", \"Ready\", #{timeout: 2}); });\n\
         \x20  ·                   ────┬────\n\
         \x20  ·                       ╰── failed here\n\
         \x20  ╰────\n\
         \x20 caused by: Pod/web-<hash>-<id>: phase Pending; container web waiting (CreateContainerConfigError: secret \"web-storage\" not found); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady), Ready=False (ContainersNotReady)\n\
         \x20 caused by: event Failed: Error: secret \"web-storage\" not found\n\
         \x20 hint: raise the timeout if it is only slow; the causes show each unready object (the `timeout` option, in seconds: #{timeout: 600})\n\
         re-run with --resume to continue from here\n",
    );
}

#[test]
fn volumes_claims_and_storage_classes_decide_as_on_a_real_cluster() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: demo}\n\
                 spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], claim).code(0);
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: app, namespace: demo}\nspec:\n  containers: [{name: app, image: busybox:1.36}]\n\
               \x20 volumes:\n  - {name: data, persistentVolumeClaim: {claimName: data}}\n  - {name: certs, secret: {secretName: tls}}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], pod).code(0);
    // No StorageClass and no volume: the claim stays Pending, the pod unschedulable.
    sim.kubectl(&[
        "wait",
        "pod/app",
        "-n",
        "demo",
        "--timeout=10s",
        "--for=jsonpath={.status.conditions[0].reason}=Unschedulable",
    ])
    .ok();
    let message = sim.jsonpath("pod/app", "demo", "{.status.conditions[0].message}");
    assert_eq!(
        message,
        "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
    assert_eq!(
        sim.jsonpath("pvc/data", "demo", "{.status.phase}"),
        "Pending"
    );
    let events = sim.jsonpath("events", "demo", "{.items[*].message}");
    assert!(
        events
            .contains("no persistent volumes available for this claim and no storage class is set"),
        "{events}"
    );
    // A matching pre-created volume binds it; then the missing Secret volume is the reason.
    let volume = "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: manual-1}\n\
                  spec: {capacity: {storage: 5Gi}, accessModes: [ReadWriteOnce], storageClassName: \"\", hostPath: {path: /data/manual-1}}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], volume).code(0);
    sim.kubectl(&[
        "wait",
        "pvc/data",
        "-n",
        "demo",
        "--for=jsonpath={.status.phase}=Bound",
        "--timeout=10s",
    ])
    .ok();
    assert_eq!(
        sim.jsonpath("pvc/data", "demo", "{.spec.volumeName}"),
        "manual-1"
    );
    sim.kubectl(&[
        "wait",
        "pod/app",
        "-n",
        "demo",
        "--timeout=10s",
        "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=ContainerCreating",
    ])
    .ok();
    let events = sim.jsonpath("events", "demo", "{.items[*].message}");
    assert!(
        events.contains("MountVolume.SetUp failed for volume \"certs\" : secret \"tls\" not found"),
        "{events}"
    );
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "tls",
        "-n",
        "demo",
        "--from-literal=tls.crt=x",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "pod/app",
        "-n",
        "demo",
        "--for=condition=Ready",
        "--timeout=10s",
    ])
    .ok();
}

#[test]
fn local_path_provisions_only_as_the_default_class_with_its_provisioner_running() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    helm_install(&sim, "openbao", "openbao-0.11.0", "openbao", &[]).code(0);
    // The StatefulSet's claim exists but nothing can bind it yet.
    wait_openbao_pod(&sim, "--for=create", "10s");
    wait_openbao_pod(
        &sim,
        "--for=jsonpath={.status.conditions[0].reason}=Unschedulable",
        "10s",
    );
    assert_eq!(
        sim.kubectl(&["get", "pvc", "-n", "openbao", "-o", "name"])
            .ok(),
        "persistentvolumeclaim/data-openbao-0\n"
    );
    // The real local-path manifest: its class is not the default, so nothing changes yet.
    sim.kubectl(&[
        "apply",
        "-f",
        &root("infra/manifests/local-path-provisioner-v0.0.30/local-path-storage.yaml"),
    ])
    .ok();
    sim.kubectl(&[
        "rollout",
        "status",
        "deployment/local-path-provisioner",
        "-n",
        "local-path-storage",
        "--timeout=10s",
    ])
    .ok();
    assert_eq!(
        sim.jsonpath("pvc/data-openbao-0", "openbao", "{.status.phase}"),
        "Pending"
    );
    crate::programs::make_local_path_the_default(&sim);
    sim.kubectl(&[
        "wait",
        "pvc/data-openbao-0",
        "-n",
        "openbao",
        "--for=jsonpath={.status.phase}=Bound",
        "--timeout=10s",
    ])
    .ok();
    let path = sim.kubectl(&["get", "pv", "-o", "jsonpath={.items[0].spec.hostPath.path}"]);
    assert!(
        path.ok().starts_with("/opt/local-path-provisioner/pvc-")
            && path.stdout.ends_with("_openbao_data-openbao-0"),
        "{}",
        path.stdout
    );
    // Running; Ready only once OpenBao is unsealed (tests/integration/programs.rs).
    wait_openbao_pod(&sim, "--for=jsonpath={.status.phase}=Running", "10s");
}

#[test]
fn a_webhook_without_endpoints_refuses_writes_until_its_operator_runs() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    // The real CNPG chart, without waiting: its operator pod is not up when the Cluster comes.
    helm_install(
        &sim,
        "cnpg",
        "cloudnative-pg-0.26.1",
        "cnpg-system",
        &["--set", "replicaCount=0"],
    )
    .code(0);
    let cluster = "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata: {name: postgresql-cnpg, namespace: default}\n\
                   spec: {instances: 1, storage: {size: 1Gi}}\n";
    let refused = sim.kubectl_stdin(&["apply", "-f", "-"], cluster);
    refused.expect(
        1,
        "",
        "Error from server (InternalError): error when creating \"STDIN\": Internal error occurred: failed calling webhook \"mcluster.cnpg.io\": failed to call webhook: Post \"https://cnpg-webhook-service.cnpg-system.svc:443/mutate-postgresql-cnpg-io-v1-cluster?timeout=10s\": no endpoints available for service \"cnpg-webhook-service\"\n",
    );
    sim.helm(&[
        "upgrade",
        "cnpg",
        &root("infra/helm-charts/cloudnative-pg-0.26.1.tgz"),
        "-n",
        "cnpg-system",
        "--set",
        "replicaCount=1",
        "--wait",
        "--timeout",
        "20s",
    ])
    .code(0);
    // Its pod is Ready, so its Service has endpoints: the same write is admitted.
    sim.kubectl_stdin(&["apply", "-f", "-"], cluster).code(0);
}

#[test]
fn namespaces_hold_their_service_account_and_ca_and_a_missing_account_refuses_pods() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl(&[
        "wait",
        "serviceaccount/default",
        "-n",
        "demo",
        "--for=create",
        "--timeout=10s",
    ])
    .ok();
    let ca = sim.jsonpath("configmap/kube-root-ca.crt", "demo", "{.data.ca\\.crt}");
    assert!(ca.contains("-----BEGIN CERTIFICATE-----"), "{ca}");
    let runner = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: runner, namespace: demo}\n\
                  spec:\n  selector: {matchLabels: {app: runner}}\n  template:\n    metadata: {labels: {app: runner}}\n\
                  \x20   spec: {serviceAccountName: gitlab-runner, containers: [{name: runner, image: gitlab/gitlab-runner:v17.5.0}]}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], runner).code(0);
    sim.kubectl(&[
        "wait",
        "deployment/runner",
        "-n",
        "demo",
        "--timeout=10s",
        "--for=condition=ReplicaFailure",
    ])
    .ok();
    let message = sim.jsonpath(
        "deployment/runner",
        "demo",
        "{.status.conditions[?(@.type==\"ReplicaFailure\")].message}",
    );
    assert!(message.starts_with("pods \"runner-"), "{message}");
    assert!(message.ends_with("-\" is forbidden: error looking up service account demo/gitlab-runner: serviceaccount \"gitlab-runner\" not found"), "{message}");
    let events = sim.jsonpath(
        "events",
        "demo",
        "{.items[?(@.reason==\"FailedCreate\")].message}",
    );
    assert!(
        events.starts_with("Error creating: pods \"runner-"),
        "{events}"
    );
    assert_eq!(
        sim.kubectl(&["get", "pods", "-n", "demo", "-o", "name"])
            .ok(),
        ""
    );
    sim.kubectl(&["create", "serviceaccount", "gitlab-runner", "-n", "demo"])
        .ok();
    sim.kubectl(&[
        "rollout",
        "status",
        "deployment/runner",
        "-n",
        "demo",
        "--timeout=10s",
    ])
    .ok();
}

#[test]
fn stateful_set_pods_come_up_in_order() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let set = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: gitaly, namespace: demo}\n\
               spec:\n  replicas: 2\n  serviceName: gitaly\n  selector: {matchLabels: {app: gitaly}}\n  template:\n\
               \x20   metadata: {labels: {app: gitaly}}\n    spec:\n      containers:\n      - name: gitaly\n        image: registry.gitlab.com/gitlab-org/build/cng/gitaly:v18.1.1\n\
               \x20       envFrom: [{secretRef: {name: gitaly-secret}}]\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], set).code(0);
    sim.kubectl(&[
        "wait",
        "pod/gitaly-0",
        "-n",
        "demo",
        "--for=create",
        "--timeout=10s",
    ])
    .ok();
    sim.kubectl(&[
        "wait", "pod/gitaly-0", "-n", "demo", "--timeout=10s",
        "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=CreateContainerConfigError",
    ])
    .ok();
    // Pod 1 waits for pod 0 to be Ready (OrderedReady).
    assert_eq!(
        sim.kubectl(&["get", "pods", "-n", "demo", "-o", "name"])
            .ok(),
        "pod/gitaly-0\n"
    );
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "gitaly-secret",
        "-n",
        "demo",
        "--from-literal=token=t",
    ])
    .ok();
    sim.kubectl(&[
        "rollout",
        "status",
        "statefulset/gitaly",
        "-n",
        "demo",
        "--timeout=10s",
    ])
    .ok();
    assert_eq!(
        sim.kubectl(&["get", "pods", "-n", "demo", "-o", "name"])
            .ok(),
        "pod/gitaly-0\npod/gitaly-1\n"
    );
    // A rolling update to a template whose pods never get Ready: the highest ordinal goes
    // first, and gitaly-0 keeps serving the old template.
    let broken = set.replace("gitaly-secret", "gitaly-secret-v2");
    sim.kubectl_stdin(&["apply", "-f", "-"], &broken).code(0);
    sim.kubectl(&[
        "wait", "pod/gitaly-1", "-n", "demo", "--timeout=10s",
        "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=CreateContainerConfigError",
    ])
    .ok();
    let status = sim.kubectl(&[
        "rollout",
        "status",
        "statefulset/gitaly",
        "-n",
        "demo",
        "--timeout=2s",
    ]);
    status.expect(
        1,
        "Waiting for 1 pods to be ready...\n",
        "error: timed out waiting for the condition\n",
    );
    let ready = sim.jsonpath(
        "pod/gitaly-0",
        "demo",
        "{.status.conditions[?(@.type==\"Ready\")].status} {.spec.containers[0].envFrom[0].secretRef.name}",
    );
    assert_eq!(ready, "True gitaly-secret");
    // Its Secret appears: gitaly-1 gets Ready, then gitaly-0 is replaced too.
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "gitaly-secret-v2",
        "-n",
        "demo",
        "--from-literal=token=t",
    ])
    .ok();
    sim.kubectl(&[
        "rollout",
        "status",
        "statefulset/gitaly",
        "-n",
        "demo",
        "--timeout=15s",
    ])
    .ok();
    assert_eq!(
        sim.jsonpath(
            "pods",
            "demo",
            "{.items[*].spec.containers[0].envFrom[0].secretRef.name}"
        ),
        "gitaly-secret-v2 gitaly-secret-v2"
    );
}

#[test]
fn a_finalizer_holds_an_object_and_its_namespace_until_it_is_removed() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, namespace: demo, finalizers: [example.com/hold]}\ndata: {a: b}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], held).code(0);
    sim.kubectl(&["delete", "configmap/held", "-n", "demo", "--wait=false"])
        .ok();
    let marked = sim.jsonpath("configmap/held", "demo", "{.metadata.deletionTimestamp}");
    assert!(!marked.is_empty(), "the object stays, marked for deletion");
    sim.kubectl(&["delete", "ns", "demo", "--wait=false"]).ok();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        sim.kubectl(&["get", "ns", "demo", "-o", "jsonpath={.status.phase}"])
            .ok(),
        "Terminating"
    );
    // The namespace controller says what holds it, in the real condition's words.
    sim.kubectl(&[
        "wait",
        "ns/demo",
        "--for=jsonpath={.status.conditions[?(@.type==\"NamespaceContentRemaining\")].reason}=SomeResourcesRemain",
        "--timeout=10s",
    ])
    .ok();
    sim.kubectl(&[
        "patch",
        "configmap/held",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .ok();
    sim.kubectl(&["wait", "ns/demo", "--for=delete", "--timeout=10s"])
        .ok();
}

#[test]
fn custom_resources_go_with_their_definition() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&[
        "apply",
        "--server-side",
        "-f",
        &root("infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_gatewayclasses.yaml"),
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "crd/gatewayclasses.gateway.networking.k8s.io",
        "--for=condition=Established",
        "--timeout=10s",
    ])
    .ok();
    let class = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: envoy}\nspec: {controllerName: gateway.envoyproxy.io/gatewayclass-controller}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], class).code(0);
    sim.kubectl(&["delete", "crd", "gatewayclasses.gateway.networking.k8s.io"])
        .ok();
    sim.kubectl(&[
        "apply",
        "--server-side",
        "-f",
        &root("infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_gatewayclasses.yaml"),
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "crd/gatewayclasses.gateway.networking.k8s.io",
        "--for=condition=Established",
        "--timeout=10s",
    ])
    .ok();
    assert_eq!(
        sim.kubectl(&["get", "gatewayclasses", "-o", "name"]).ok(),
        ""
    );
}

const WEB: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\n\
                   spec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n\
                   \x20   spec: {containers: [{name: web, image: nginx:1.27}]}\n";

#[test]
fn cascade_orphan_keeps_the_replica_set_and_its_pods_without_the_owner() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl_stdin(&["apply", "-f", "-"], WEB).code(0);
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=10s"])
        .ok();
    sim.kubectl(&["delete", "deploy/web", "--cascade=orphan"])
        .ok();
    let owners = sim.kubectl(&[
        "get",
        "rs",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}:{.metadata.ownerReferences}{end}",
    ]);
    assert!(
        owners.ok().starts_with("web-") && owners.stdout.ends_with(':'),
        "{}",
        owners.stdout
    );
    let pods = sim.kubectl(&["get", "pods", "-l", "app=web", "-o", "name"]);
    assert_eq!(pods.ok().lines().count(), 2, "{}", pods.stdout);
    // Background (kubectl's default) takes the dependents with the owner.
    let rs = owners.stdout.trim_end_matches(':').to_string();
    sim.kubectl(&["delete", &format!("rs/{rs}")]).ok();
    sim.kubectl(&[
        "wait",
        "pods",
        "-l",
        "app=web",
        "--for=delete",
        "--timeout=10s",
    ])
    .ok();
}

#[test]
fn kubectl_scale_goes_through_the_scale_subresource() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl_stdin(&["apply", "-f", "-"], WEB).code(0);
    sim.kubectl(&["scale", "deploy/web", "--replicas=3"])
        .stdout("deployment.apps/web scaled\n");
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=10s"])
        .ok();
    let ready = sim.kubectl(&[
        "get",
        "deploy/web",
        "-o",
        "jsonpath={.status.readyReplicas}",
    ]);
    assert_eq!(ready.ok(), "3");
    let scale = sim.kubectl(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
    ]);
    let scale: serde_json::Value = serde_json::from_str(scale.ok()).unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");
    // A precondition that no longer holds refuses, as on a real cluster.
    let stale = sim.kubectl(&[
        "scale",
        "deploy/web",
        "--current-replicas=2",
        "--replicas=1",
    ]);
    stale.expect(1, "", "error: Expected replicas to be 2, was 3\n");
    let set = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, namespace: default}\n\
               spec:\n  serviceName: db\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n\
               \x20   spec: {containers: [{name: db, image: postgres:17}]}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], set).code(0);
    sim.kubectl(&["scale", "statefulset/db", "--replicas=2"])
        .ok();
    sim.kubectl(&[
        "wait",
        "statefulset/db",
        "--for=jsonpath={.status.readyReplicas}=2",
        "--timeout=10s",
    ])
    .ok();
    let negative = sim.kubectl(&["scale", "statefulset/db", "--replicas=-1"]);
    negative.code(1);
}

#[test]
fn rollout_history_lists_revisions_and_undo_restores_the_previous_template() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl_stdin(&["apply", "-f", "-"], WEB).code(0);
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=10s"])
        .ok();
    sim.kubectl(&["set", "image", "deploy/web", "web=nginx:1.28"])
        .ok();
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=10s"])
        .ok();
    sim.kubectl(&["rollout", "history", "deploy/web"]).stdout(
        "deployment.apps/web \nREVISION  CHANGE-CAUSE\n1         <none>\n2         <none>\n\n",
    );
    let old = sim.kubectl(&[
        "get",
        "rs",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}={.spec.replicas} {end}",
    ]);
    assert_eq!(
        {
            let mut sets: Vec<&str> = old.ok().split_whitespace().collect();
            sets.sort();
            sets
        },
        vec!["nginx:1.27=0", "nginx:1.28=2"]
    );
    sim.kubectl(&["rollout", "history", "deploy/web", "--revision=1"])
        .stdout(
            "deployment.apps/web with revision #1\n\
             Pod Template:\n\
             \x20 Labels:\tapp=web\n\
             \tpod-template-hash=dlltsx8slf\n\
             \x20 Containers:\n\
             \x20  web:\n\
             \x20   Image:\tnginx:1.27\n\
             \x20   Port:\t<none>\n\
             \x20   Host Port:\t<none>\n\
             \x20   Environment:\t<none>\n\
             \x20   Mounts:\t<none>\n\
             \x20 Volumes:\t<none>\n\
             \x20 Node-Selectors:\t<none>\n\
             \x20 Tolerations:\t<none>\n\
             \n",
        );
    sim.kubectl(&["rollout", "undo", "deploy/web"])
        .stdout("deployment.apps/web rolled back\n");
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=10s"])
        .ok();
    let restored = sim.kubectl(&[
        "get",
        "deploy/web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}",
    ]);
    assert_eq!(restored.ok(), "nginx:1.27 3");
    // The old ReplicaSet came back as revision 3: still two of them.
    sim.kubectl(&["rollout", "history", "deploy/web"]).stdout(
        "deployment.apps/web \nREVISION  CHANGE-CAUSE\n2         <none>\n3         <none>\n\n",
    );
    let images = sim.kubectl(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(images.ok(), "nginx:1.27 nginx:1.27");
}

#[test]
fn a_rollout_whose_pods_never_become_ready_exceeds_its_progress_deadline() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let stuck = WEB_WITH_SECRET
        .replace("namespace: demo", "namespace: default")
        .replace(
            "spec:\n  selector",
            "spec:\n  progressDeadlineSeconds: 1\n  selector",
        );
    sim.kubectl_stdin(&["apply", "-f", "-"], &stuck).code(0);
    sim.kubectl(&[
        "wait",
        "deploy/web",
        "--for=condition=Progressing=False",
        "--timeout=15s",
    ])
    .ok();
    let reason = sim.kubectl(&[
        "get",
        "deploy/web",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}",
    ]);
    assert_eq!(reason.ok(), "ProgressDeadlineExceeded");
    let status = sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=10s"]);
    status.expect(
        1,
        "",
        "error: deployment \"web\" exceeded its progress deadline\n",
    );
    // The Secret appears: the pods run and the rollout completes (a real rollout status
    // still fails at once while the condition says the deadline passed, so wait for it).
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "web-storage",
        "--from-literal=connection=s3://x",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "deploy/web",
        "--for=condition=Progressing=True",
        "--timeout=10s",
    ])
    .ok();
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=10s"])
        .ok();
}

#[test]
fn the_api_server_refuses_invalid_objects_and_changes_to_immutable_fields_in_its_words() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let labelled = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: labelled\n  labels: {app: \"bad value!\"}\n";
    let mismatch = WEB.replace(
        "metadata: {labels: {app: web}}",
        "metadata: {labels: {app: api}}",
    );
    let imageless = WEB.replace("image: nginx:1.27", "imagePullPolicy: Always");
    assert_refused(
        &sim,
        &[
            Refusal {
                name: "an invalid label",
                before: vec![],
                manifest: labelled.to_string(),
                stderr: "The ConfigMap \"labelled\" is invalid: metadata.labels: Invalid value: \"bad value!\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')\n",
            },
            Refusal {
                name: "a selector that does not match the template",
                before: vec![],
                manifest: mismatch,
                stderr: "The Deployment \"web\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"api\"}: `selector` does not match template `labels`\n",
            },
            Refusal {
                name: "a container without image",
                before: vec![],
                manifest: imageless,
                stderr: "The Deployment \"web\" is invalid: spec.template.spec.containers[0].image: Required value\n",
            },
        ],
    );
    sim.kubectl(&["get", "deploy"])
        .stderr("No resources found in default namespace.\n");
    let frozen = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: frozen}\nimmutable: true\ndata: {a: \"1\"}\n";
    let claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\n\
                 spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n";
    assert_refused(
        &sim,
        &[
            Refusal {
                name: "a workload's selector changed",
                before: vec![WEB.to_string()],
                manifest: WEB.replace("app: web", "app: api"),
                stderr: "The Deployment \"web\" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"api\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable\n",
            },
            Refusal {
                name: "an immutable ConfigMap's data changed",
                before: vec![frozen.to_string()],
                manifest: frozen.replace("\"1\"", "\"2\""),
                stderr: "The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set\n",
            },
            Refusal {
                // Its requested size may change.
                name: "a claim's spec changed",
                before: vec![claim.to_string(), claim.replace("1Gi", "2Gi")],
                manifest: claim
                    .replace("1Gi", "2Gi")
                    .replace("ReadWriteOnce", "ReadWriteMany"),
                stderr: "The PersistentVolumeClaim \"data\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n",
            },
        ],
    );
    // The immutable ConfigMap's labels may change.
    sim.kubectl(&["label", "configmap/frozen", "team=a"]).ok();
}

/// A manifest `kubectl apply` sends and the API server refuses, in kubectl's whole words.
struct Refusal {
    name: &'static str,
    /// Applied first, each accepted.
    before: Vec<String>,
    manifest: String,
    stderr: &'static str,
}

#[track_caller]
fn assert_refused(sim: &crate::support::Sim, refusals: &[Refusal]) {
    for refusal in refusals {
        for accepted in &refusal.before {
            sim.kubectl_stdin(&["apply", "-f", "-"], accepted).code(0);
        }
        let refused = sim.kubectl_stdin(&["apply", "-f", "-"], &refusal.manifest);
        assert_eq!(
            (
                refused.code,
                refused.stdout.as_str(),
                refused.stderr.as_str()
            ),
            (1, "", refusal.stderr),
            "case {:?}",
            refusal.name
        );
    }
}

#[test]
fn crd_schemas_reject_prune_default_and_print_their_columns() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    for crd in ["gatewayclasses", "gateways"] {
        sim.kubectl(&[
            "apply",
            "--server-side",
            "-f",
            &root(&format!(
                "infra/manifests/gateway-api-v1.5.0/gateway.networking.k8s.io_{crd}.yaml"
            )),
        ])
        .ok();
    }
    sim.kubectl(&[
        "wait",
        "crd/gateways.gateway.networking.k8s.io",
        "--for=condition=Established",
        "--timeout=10s",
    ])
    .ok();
    let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: web, namespace: default}\n\
                   spec:\n  gatewayClassName: sim\n  colour: red\n  listeners: [{name: http, port: 80, protocol: HTTP}]\n";
    // kubectl validates strictly by default: the unknown field is refused.
    let refused = sim.kubectl_stdin(&["apply", "-f", "-"], gateway);
    refused.expect(
        1,
        "",
        "Error from server (BadRequest): error when creating \"STDIN\": Gateway in version \"v1\" cannot be handled as a Gateway: strict decoding error: unknown field \"spec.colour\"\n",
    );
    // Without validation it is pruned, and defaults fill in.
    sim.kubectl_stdin(&["apply", "--validate=false", "-f", "-"], gateway)
        .code(0);
    let stored = sim.kubectl(&[
        "get",
        "gateway/web",
        "-o",
        "jsonpath={.spec.colour}|{.spec.listeners[0].allowedRoutes.namespaces.from}",
    ]);
    assert_eq!(stored.ok(), "|Same");
    // Types, required fields and enums.
    let wrong = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: wrong, namespace: default}\n\
                 spec:\n  listeners: [{name: http, port: \"80\", protocol: HTTP, allowedRoutes: {namespaces: {from: Nowhere}}}]\n";
    let refused = sim.kubectl_stdin(&["apply", "-f", "-"], wrong);
    refused.expect(
        1,
        "",
        "The Gateway \"wrong\" is invalid: \n\
         * spec.gatewayClassName: Required value\n\
         * spec.listeners[0].allowedRoutes.namespaces.from: Unsupported value: \"Nowhere\": supported values: \"All\", \"Selector\", \"Same\"\n\
         * spec.listeners[0].port: Invalid value: \"string\": spec.listeners[0].port in body must be of type integer: \"string\"\n",
    );
    // Bounds and patterns, in kube-openapi's words.
    let out_of_bounds = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: bounds, namespace: default}\n\
                         spec:\n  gatewayClassName: sim\n  listeners: [{name: HTTP_1, port: 70000, protocol: HTTP}]\n";
    let refused = sim.kubectl_stdin(&["apply", "-f", "-"], out_of_bounds);
    refused.expect(
        1,
        "",
        "The Gateway \"bounds\" is invalid: \n\
         * spec.listeners[0].name: Invalid value: \"HTTP_1\": spec.listeners[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'\n\
         * spec.listeners[0].port: Invalid value: 70000: spec.listeners[0].port in body should be less than or equal to 65535\n",
    );
    // The CRD's printer columns.
    let table = sim.kubectl(&["get", "gateways"]);
    let header: Vec<&str> = table
        .ok()
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        vec!["NAME", "CLASS", "ADDRESS", "PROGRAMMED", "AGE"]
    );
    let row: Vec<&str> = table
        .stdout
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..2], &["web", "sim"]);
}

#[test]
fn a_cnpg_cluster_runs_only_with_its_operator_and_bound_storage() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    sim.kubectl(&["apply", "-f", &root("tests/fixtures/kube/crd.yaml")])
        .ok();
    sim.kubectl(&[
        "wait",
        "crd/clusters.postgresql.cnpg.io",
        "--for=condition=Established",
        "--timeout=10s",
    ])
    .ok();
    sim.kubectl(&["apply", "-f", &root("tests/fixtures/kube/pg.yaml")])
        .ok();
    // No operator: nothing happens.
    sim.kubectl(&[
        "wait",
        "clusters.postgresql.cnpg.io/pg",
        "-n",
        "demo",
        "--for=condition=Ready",
        "--timeout=1s",
    ])
    .code(1);
    sim.kubectl(&["get", "pods,pvc", "-n", "demo"])
        .stderr("No resources found in demo namespace.\n");
    // The operator runs: the instance, its claim, Services and the app Secret appear; the claim
    // finds no StorageClass, so the instance stays Pending and the Cluster unready.
    sim.kubectl(&["create", "ns", "cnpg-system"]).ok();
    let operator = WEB
        .replace(
            "name: web, namespace: default",
            "name: cnpg-controller-manager, namespace: cnpg-system",
        )
        .replace(
            "image: nginx:1.27",
            "image: ghcr.io/cloudnative-pg/cloudnative-pg:1.27.1",
        );
    sim.kubectl_stdin(&["apply", "-f", "-"], &operator).code(0);
    sim.kubectl(&[
        "wait",
        "clusters.postgresql.cnpg.io/pg",
        "-n",
        "demo",
        "--for=jsonpath={.status.phase}=Setting up primary",
        "--timeout=10s",
    ])
    .ok();
    let pending = sim.kubectl(&[
        "get",
        "pvc/pg-1",
        "pod/pg-1",
        "-n",
        "demo",
        "-o",
        "jsonpath={.items[*].status.phase}",
    ]);
    assert_eq!(pending.ok(), "Pending Pending");
    let services = sim.kubectl(&["get", "services", "-n", "demo", "-o", "name"]);
    assert_eq!(
        services.ok(),
        "service/pg-r\nservice/pg-ro\nservice/pg-rw\n"
    );
    let secret = sim.kubectl(&[
        "get",
        "secret/pg-app",
        "-n",
        "demo",
        "-o",
        "go-template={{range $k, $v := .data}}{{$k}} {{end}}",
    ]);
    assert_eq!(
        secret.ok(),
        "dbname host jdbc-uri password pgpass port uri user username "
    );
    // A volume appears: the claim binds, the instance runs, the Cluster is healthy.
    let volume = "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pg-volume}\n\
                  spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], hostPath: {path: /data/pg}}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], volume).code(0);
    sim.kubectl(&[
        "wait",
        "clusters.postgresql.cnpg.io/pg",
        "-n",
        "demo",
        "--for=condition=Ready",
        "--timeout=10s",
    ])
    .ok();
    let status = sim.jsonpath(
        "clusters.postgresql.cnpg.io/pg",
        "demo",
        "{.status.phase}/{.status.readyInstances}",
    );
    assert_eq!(status, "Cluster in healthy state/1");
}

const HOOKS_CHART: &str = "tests/fixtures/kube/hooks-chart";

#[test]
fn jobs_run_their_pods_to_completion_and_fail_past_their_backoff_limit() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: migrate, namespace: default}\n\
               spec:\n  backoffLimit: 1\n  template:\n    metadata: {annotations: {sim.bprun.dev/behaviour: BEHAVIOUR}}\n\
               \x20   spec:\n      restartPolicy: Never\n      containers: [{name: m, image: busybox:1.37, envFrom: [{secretRef: {name: migrate-env}}]}]\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], &job.replace("BEHAVIOUR", "\"\""))
        .code(0);
    // Its pod waits for its Secret like any other: the Job is not complete.
    sim.kubectl(&[
        "wait",
        "job/migrate",
        "--for=condition=Complete",
        "--timeout=1s",
    ])
    .code(1);
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "migrate-env",
        "--from-literal=A=1",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "job/migrate",
        "--for=condition=Complete",
        "--timeout=10s",
    ])
    .ok();
    let pod = sim.kubectl(&[
        "get",
        "pods",
        "-l",
        "job-name=migrate",
        "-o",
        "jsonpath={.items[*].status.phase}:{.items[*].status.containerStatuses[0].state.terminated.reason}",
    ]);
    assert_eq!(pod.ok(), "Succeeded:Completed");
    sim.kubectl(&["delete", "job/migrate"]).ok();
    sim.kubectl_stdin(&["apply", "-f", "-"], &job.replace("BEHAVIOUR", "fail"))
        .code(0);
    sim.kubectl(&[
        "wait",
        "job/migrate",
        "--for=condition=Failed",
        "--timeout=10s",
    ])
    .ok();
    let failed = sim.kubectl(&[
        "get",
        "job/migrate",
        "-o",
        "jsonpath={.status.failed} {.status.conditions[?(@.type==\"Failed\")].reason}",
    ]);
    assert_eq!(failed.ok(), "2 BackoffLimitExceeded");
}

#[test]
fn helm_test_finishes_and_a_failing_pre_upgrade_hook_fails_the_upgrade() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let chart = root(HOOKS_CHART);
    sim.helm(&["install", "hooks", &chart, "--wait", "--timeout", "20s"])
        .ok();
    let test = helm_times(sim.helm(&["test", "hooks", "--timeout", "20s"]));
    test.expect(
        0,
        "NAME: hooks\n\
         LAST DEPLOYED: <time>\n\
         NAMESPACE: default\n\
         STATUS: deployed\n\
         REVISION: 1\n\
         DESCRIPTION: Install complete\n\
         TEST SUITE:     hooks-test\n\
         Last Started:   <time>\n\
         Last Completed: <time>\n\
         Phase:          Succeeded\n",
        "",
    );
    let failing = sim.helm(&[
        "upgrade",
        "hooks",
        &chart,
        "--set",
        "testBehaviour=fail",
        "--wait",
        "--timeout",
        "20s",
    ]);
    failing.code(0);
    let test = helm_times(sim.helm(&["test", "hooks", "--timeout", "20s"]));
    test.expect(
        1,
        "NAME: hooks\n\
         LAST DEPLOYED: <time>\n\
         NAMESPACE: default\n\
         STATUS: deployed\n\
         REVISION: 2\n\
         DESCRIPTION: Upgrade complete\n\
         TEST SUITE:     hooks-test\n\
         Last Started:   <time>\n\
         Last Completed: <time>\n\
         Phase:          Failed\n",
        "Error: resource Pod/default/hooks-test not ready. status: Failed, message: pod hooks-test failed\n",
    );
    // A failing pre-upgrade hook Job fails the upgrade: the release stays at its revision.
    let upgrade = sim.helm(&[
        "upgrade",
        "hooks",
        &chart,
        "--set",
        "hookBehaviour=fail,message=changed",
        "--wait",
        "--timeout",
        "20s",
    ]);
    upgrade.expect(
        1,
        "",
        "level=WARN msg=\"upgrade failed\" name=hooks error=\"pre-upgrade hooks failed: resource Job/default/hooks-migrate not ready. status: Failed, message: Job Failed. failed: 2/1\"\n\
         Error: UPGRADE FAILED: pre-upgrade hooks failed: resource Job/default/hooks-migrate not ready. status: Failed, message: Job Failed. failed: 2/1\n",
    );
    let message = sim.kubectl(&[
        "get",
        "configmap/hooks-settings",
        "-o",
        "jsonpath={.data.message}",
    ]);
    assert_eq!(message.ok(), "hello");
}

#[test]
fn kubectl_auth_can_i_answers_yes_for_the_admin_token() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["auth", "can-i", "create", "deployments", "-n", "demo"])
        .stdout("yes\n");
    sim.kubectl(&["auth", "can-i", "delete", "nodes"])
        .stdout("yes\n");
    sim.kubectl(&["auth", "can-i", "--list"]).stdout(
        "Resources   Non-Resource URLs   Resource Names   Verbs\n\
         *.*         []                  []               [*]\n\
         \x20           [*]                 []               [*]\n",
    );
    sim.kubectl(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ])
    .stdout("kubernetes-admin");
}

#[test]
fn the_four_upstream_charts_install_and_run_for_the_real_reasons() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let chart = |name: &str| root(&format!("infra/helm-charts/{name}.tgz"));
    // Without a StorageClass minio's claim never binds: helm --wait times out as on a bare cluster.
    let bare = sim.helm(&[
        "install", "minio", &chart("minio-5.4.0"), "-n", "minio", "--create-namespace", "--set",
        "mode=standalone,replicas=1,resources.requests.memory=256Mi,rootUser=admin,rootPassword=admin-password-123",
        "--wait", "--timeout", "3s",
    ]);
    bare.code(1);
    sim.helm(&["uninstall", "minio", "-n", "minio"]).code(0);
    // The platform's storage: local-path, made the default class.
    crate::programs::with_default_storage(&sim);
    for (release, archive, namespace, values) in [
        ("cnpg", "cloudnative-pg-0.26.1", "cnpg-system", ""),
        ("openbao", "openbao-0.11.0", "openbao", ""),
        (
            "minio",
            "minio-5.4.0",
            "minio",
            "mode=standalone,replicas=1,resources.requests.memory=256Mi,rootUser=admin,rootPassword=admin-password-123",
        ),
        (
            "redis",
            "redis-19.6.4",
            "redis",
            "architecture=standalone,image.repository=bitnamilegacy/redis",
        ),
    ] {
        let mut extra = vec!["--wait", "--timeout", "60s"];
        if !values.is_empty() {
            extra.extend(["--set", values]);
        }
        helm_install(&sim, release, archive, namespace, &extra).code(0);
    }
    // Sealed: Running, not Ready (its readiness probe runs `bao status`).
    wait_openbao_pod(&sim, "--for=jsonpath={.status.phase}=Running", "20s");
    sim.kubectl(&[
        "wait",
        "pod/redis-master-0",
        "-n",
        "redis",
        "--for=condition=Ready",
        "--timeout=20s",
    ])
    .ok();
    // Bitnami's versioned images left docker.io/bitnami/ (2025-09-29): without the override the
    // redis image cannot be pulled.
    sim.helm(&[
        "install",
        "stale-redis",
        &chart("redis-19.6.4"),
        "-n",
        "stale",
        "--create-namespace",
        "--set",
        "architecture=standalone",
    ])
    .code(0);
    sim.kubectl(&[
        "wait",
        "pod/stale-redis-master-0",
        "-n",
        "stale",
        "--for=create",
        "--timeout=20s",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "pod/stale-redis-master-0",
        "-n",
        "stale",
        "--timeout=20s",
        "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=ErrImagePull",
    ])
    .ok();
}

/// A Deployment with a typo deep in its container (`imagee`), and another field (`portz`).
const WEB_TYPO: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\n\
                        spec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n\
                        \x20   spec:\n      containers:\n        - name: web\n          image: nginx:1.27\n          imagee: nginx:1.28\n          portz: [80]\n";

#[test]
fn unknown_fields_deep_in_built_in_kinds_are_refused_warned_or_dropped_as_asked() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    // kubectl sends fieldValidation=Strict: every unknown field, joined, and nothing stored.
    let refused = sim.kubectl_stdin(&["apply", "-f", "-"], WEB_TYPO);
    refused.expect(
        1,
        "",
        "Error from server (BadRequest): error when creating \"STDIN\": Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.template.spec.containers[0].imagee\", unknown field \"spec.template.spec.containers[0].portz\"\n",
    );
    sim.kubectl(&["get", "deploy"])
        .stderr("No resources found in default namespace.\n");
    // A wrong type is a decoding error whatever the validation asked.
    let wrong_type = WEB_TYPO
        .replace("          imagee: nginx:1.28\n          portz: [80]\n", "")
        .replace("spec:\n  selector", "spec:\n  replicas: two\n  selector");
    let refused = sim.kubectl_stdin(&["apply", "--validate=false", "-f", "-"], &wrong_type);
    refused.expect(
        1,
        "",
        "Error from server (BadRequest): error when creating \"STDIN\": Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32\n",
    );
    // Server-side apply types the object with structured-merge-diff, whatever was asked.
    let applied = sim.kubectl_stdin(&["apply", "--server-side", "-f", "-"], WEB_TYPO);
    applied.expect(
        1,
        "",
        "Error from server: failed to create typed patch object (default/web; apps/v1, Kind=Deployment): errors:\n\
         \x20 .spec.template.spec.containers[name=\"web\"].imagee: field not declared in schema\n\
         \x20 .spec.template.spec.containers[name=\"web\"].portz: field not declared in schema\n",
    );
    let applied = sim.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &wrong_type);
    applied.expect(
        1,
        "",
        "Error from server: failed to create typed patch object (default/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string\n",
    );
    // --validate=warn: stored without the unknown fields, kubectl prints the warnings.
    let warned = sim.kubectl_stdin(&["apply", "--validate=warn", "-f", "-"], WEB_TYPO);
    warned.expect(
        0,
        "deployment.apps/web created\n",
        "Warning: unknown field \"spec.template.spec.containers[0].imagee\"\n\
         Warning: unknown field \"spec.template.spec.containers[0].portz\"\n",
    );
    let stored = sim.jsonpath(
        "deploy/web",
        "default",
        "{.spec.template.spec.containers[0]}",
    );
    assert!(!stored.contains("imagee"), "{stored}");
    // kubectl patch sends no fieldValidation: the API server's default, Warn.
    let patched = sim.kubectl(&[
        "patch",
        "deploy/web",
        "--type=merge",
        "-p",
        "{\"spec\":{\"template\":{\"spec\":{\"dnsPolicyy\":\"None\"}}}}",
    ]);
    patched.expect(
        0,
        "deployment.apps/web patched (no change)\n",
        "Warning: unknown field \"spec.template.spec.dnsPolicyy\"\n",
    );
    // Applied over the live object (a strategic merge patch): the patched object's unknown
    // fields, without the create's prefix.
    let refused = sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &WEB_TYPO.replace("nginx:1.28", "nginx:1.29"),
    );
    refused.expect(
        1,
        "",
        "Error from server (BadRequest): error when applying patch:\n\
         {\"metadata\":{\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"{\\\"apiVersion\\\":\\\"apps/v1\\\",\\\"kind\\\":\\\"Deployment\\\",\\\"metadata\\\":{\\\"annotations\\\":{},\\\"name\\\":\\\"web\\\",\\\"namespace\\\":\\\"default\\\"},\\\"spec\\\":{\\\"selector\\\":{\\\"matchLabels\\\":{\\\"app\\\":\\\"web\\\"}},\\\"template\\\":{\\\"metadata\\\":{\\\"labels\\\":{\\\"app\\\":\\\"web\\\"}},\\\"spec\\\":{\\\"containers\\\":[{\\\"image\\\":\\\"nginx:1.27\\\",\\\"imagee\\\":\\\"nginx:1.29\\\",\\\"name\\\":\\\"web\\\",\\\"portz\\\":[80]}]}}}}\\n\"}},\"spec\":{\"template\":{\"spec\":{\"$setElementOrder/containers\":[{\"name\":\"web\"}],\"containers\":[{\"imagee\":\"nginx:1.29\",\"name\":\"web\",\"portz\":[80]}]}}}}\n\
         to:\n\
         Resource: \"apps/v1, Resource=deployments\", GroupVersionKind: \"apps/v1, Kind=Deployment\"\n\
         Name: \"web\", Namespace: \"default\"\n\
         for: \"STDIN\": error when patching \"STDIN\": strict decoding error: unknown field \"spec.template.spec.containers[0].imagee\", unknown field \"spec.template.spec.containers[0].portz\"\n",
    );
    // --validate=false (Ignore): dropped silently.
    let ignored = sim.kubectl_stdin(
        &["apply", "--validate=false", "-f", "-"],
        &WEB_TYPO.replace("nginx:1.28", "nginx:1.30"),
    );
    ignored.expect(0, "deployment.apps/web configured\n", "");
}

#[test]
fn kubectl_explain_reads_the_real_descriptions_of_built_in_kinds() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let containers = sim.kubectl(&["explain", "deployment.spec.template.spec.containers"]);
    let text = containers.ok();
    assert!(text.contains("KIND:       Deployment"), "{text}");
    assert!(text.contains("GROUP:      apps"), "{text}");
    assert!(text.contains("FIELD: containers <[]Container>"), "{text}");
    assert!(
        text.contains("List of containers belonging to the pod."),
        "{text}"
    );
    assert!(text.contains("image\t<string>"), "{text}");
    assert!(text.contains("name\t<string> -required-"), "{text}");
    let pods = sim.kubectl(&["explain", "pods", "--recursive"]);
    let text = pods.ok();
    assert!(text.contains("KIND:       Pod"), "{text}");
    assert!(text.contains("serviceAccountName\t<string>"), "{text}");
    let missing = sim.kubectl(&["explain", "deployment.spec.replicaz"]);
    missing.expect(
        1,
        "GROUP:      apps\n\
         KIND:       Deployment\n\
         VERSION:    v1\n\
         \n",
        "error: field \"replicaz\" does not exist\n",
    );
}

#[test]
fn a_rolling_update_to_pods_that_never_get_ready_keeps_the_old_pod_serving() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let web = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\n\
               spec:\n  progressDeadlineSeconds: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n\
               \x20   spec: {containers: [{name: web, image: nginx:1.27}]}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], web).code(0);
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=15s"])
        .ok();
    let first = sim.jsonpath("pods", "default", "{.items[*].metadata.name}");
    // The new revision needs a Secret that does not exist: its pod never gets Ready.
    let broken = WEB_WITH_SECRET
        .replace("namespace: demo", "namespace: default")
        .replace(
            "spec:\n  selector",
            "spec:\n  progressDeadlineSeconds: 2\n  selector",
        );
    sim.kubectl_stdin(&["apply", "-f", "-"], &broken).code(0);
    let status = sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=20s"]);
    status
        .code(1)
        .stderr("error: deployment \"web\" exceeded its progress deadline\n")
        .partial_stdout(
            "Waiting for deployment \"web\" rollout to finish: 1 old replicas are pending termination...\n",
            "kubectl prints the rollout's state each time it sees it change: whether it saw \
             the new replica set before its pod was created depends on timing",
        );
    // The old pod is still there and Ready, beside the new one waiting for its Secret.
    let ready = sim.jsonpath(
        "pods",
        "default",
        "{range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}",
    );
    assert!(ready.contains(&format!("{first}=True")), "{first}: {ready}");
    assert_eq!(ready.matches("=False").count(), 1, "{ready}");
    let conditions = sim.jsonpath(
        "deploy/web",
        "default",
        "{range .status.conditions[*]}{.type}={.status}/{.reason} {end}",
    );
    assert!(
        conditions.contains("Available=True/MinimumReplicasAvailable"),
        "{conditions}"
    );
    assert!(
        conditions.contains("Progressing=False/ProgressDeadlineExceeded"),
        "{conditions}"
    );
    // The Secret appears: the new pod gets Ready, then the old one goes.
    sim.kubectl(&[
        "create",
        "secret",
        "generic",
        "web-storage",
        "--from-literal=connection=s3://x",
    ])
    .ok();
    sim.kubectl(&[
        "wait",
        "deploy/web",
        "--for=condition=Progressing=True",
        "--timeout=15s",
    ])
    .ok();
    sim.kubectl(&["rollout", "status", "deploy/web", "--timeout=15s"])
        .ok();
    sim.kubectl(&[
        "wait",
        &format!("pod/{first}"),
        "--for=delete",
        "--timeout=15s",
    ])
    .ok();
}

#[test]
fn pods_get_their_service_account_token_unless_they_opt_out_and_a_missing_account_is_refused() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&[
        "wait",
        "serviceaccount/default",
        "--for=create",
        "--timeout=10s",
    ])
    .ok();
    sim.kubectl(&["run", "web", "--image=nginx:1.27"]).ok();
    let spec = sim.jsonpath(
        "pod/web",
        "default",
        "{.spec.serviceAccountName} {.spec.volumes[0].name} {.spec.volumes[0].projected.sources[1].configMap.name} {.spec.containers[0].volumeMounts[0].mountPath} {.spec.containers[0].volumeMounts[0].readOnly}",
    );
    let parts: Vec<&str> = spec.split(' ').collect();
    assert_eq!(parts.len(), 5, "{spec}");
    assert_eq!(parts[0], "default");
    assert!(
        parts[1].starts_with("kube-api-access-") && parts[1].len() == 21,
        "{spec}"
    );
    assert_eq!(
        &parts[2..],
        &[
            "kube-root-ca.crt",
            "/var/run/secrets/kubernetes.io/serviceaccount",
            "true"
        ]
    );
    sim.kubectl(&["wait", "pod/web", "--for=condition=Ready", "--timeout=10s"])
        .ok();
    // automountServiceAccountToken: false on the pod: no token volume.
    let quiet = "apiVersion: v1\nkind: Pod\nmetadata: {name: quiet}\n\
                 spec: {automountServiceAccountToken: false, containers: [{name: web, image: nginx:1.27}]}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], quiet).code(0);
    assert_eq!(sim.jsonpath("pod/quiet", "default", "{.spec.volumes}"), "");
    // A pod naming an account that does not exist is refused by admission.
    let refused = sim.kubectl(&[
        "run",
        "runner",
        "--image=gitlab/gitlab-runner:v17.5.0",
        "--overrides={\"spec\":{\"serviceAccountName\":\"gitlab-runner\"}}",
    ]);
    refused.expect(
        1,
        "",
        "Error from server (Forbidden): pods \"runner\" is forbidden: error looking up service account default/gitlab-runner: serviceaccount \"gitlab-runner\" not found\n",
    );
}

#[test]
fn helm_4_refuses_a_chart_with_an_unknown_field_and_helm_3_installs_it_with_a_warning() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let chart = tempfile::tempdir().expect("chart folder");
    std::fs::create_dir(chart.path().join("templates")).expect("templates");
    std::fs::write(
        chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: typo\nversion: 0.1.0\n",
    )
    .expect("Chart.yaml");
    std::fs::write(chart.path().join("templates/web.yaml"), WEB_TYPO).expect("template");
    let chart = chart.path().to_string_lossy().to_string();
    // helm 4 installs with server-side apply: structured-merge-diff refuses the field.
    let refused = sim.run("helm", &["install", "typo", &chart], None);
    refused.expect(
        1,
        "",
        "Error: INSTALLATION FAILED: failed to create typed patch object (default/web; apps/v1, Kind=Deployment): errors:\n\
         \x20 .spec.template.spec.containers[name=\"web\"].imagee: field not declared in schema\n\
         \x20 .spec.template.spec.containers[name=\"web\"].portz: field not declared in schema\n",
    );
    // helm 3 sends no fieldValidation: the API server's default warns and drops the fields.
    // client-go's warning handler prefixes klog's header (date, time, pid, source line).
    let warned = helm_times(sim.run("helm3", &["install", "typo-v3", &chart], None))
        .replace_regex(r"(?m)^W\d{4} [\d:.]+ +\d+ warnings\.go:\d+\] ", "W<klog> ");
    warned.expect(
        0,
        "NAME: typo-v3\n\
         LAST DEPLOYED: <time>\n\
         NAMESPACE: default\n\
         STATUS: deployed\n\
         REVISION: 1\n\
         TEST SUITE: None\n",
        "W<klog> unknown field \"spec.template.spec.containers[0].imagee\"\n\
         W<klog> unknown field \"spec.template.spec.containers[0].portz\"\n",
    );
    let stored = sim.jsonpath(
        "deploy/web",
        "default",
        "{.spec.template.spec.containers[0]}",
    );
    assert!(!stored.contains("imagee"), "{stored}");
}

#[test]
fn scripts_of_pods_that_run_to_completion_really_run_on_their_node() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let pod = |name: &str, node: &str, script: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: demo}}\nspec:\n  restartPolicy: Never\n  nodeName: {node}\n\
             \x20 containers:\n  - name: run\n    image: docker.io/library/busybox:1.37\n    command: [sh, -c, {script:?}]\n\
             \x20   env: [{{name: GREETING, valueFrom: {{configMapKeyRef: {{name: settings, key: greeting}}}}}}]\n\
             \x20   volumeMounts: [{{name: host, mountPath: /host}}, {{name: settings, mountPath: /settings, readOnly: true}}]\n\
             \x20 volumes:\n  - {{name: host, hostPath: {{path: /etc, type: DirectoryOrCreate}}}}\n  - {{name: settings, configMap: {{name: settings}}}}\n"
        )
    };
    let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: demo}\ndata: {greeting: hello, pin: '10.96.0.9 registry.example.net'}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], settings).code(0);
    let finished = |name: &str| {
        sim.kubectl(&[
            "wait",
            &format!("pod/{name}"),
            "-n",
            "demo",
            "--timeout=30s",
            "--for=jsonpath={.status.phase}=Succeeded",
        ])
    };
    // The node's /etc/hosts is kind's; the script edits it as phase 2's registry pin does.
    let edit = "set -e; echo \"$GREETING from $(hostname)\"; grep -v ' registry.example.net$' /host/hosts > /tmp/hosts || true; cat /settings/pin >> /tmp/hosts; echo >> /tmp/hosts; cat /tmp/hosts > /host/hosts";
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &pod("pin", "sim-control-plane", edit),
    )
    .code(0);
    finished("pin").code(0);
    let logs = sim.kubectl(&["logs", "pin", "-n", "demo"]);
    logs.expect(0, "hello from pin\n", "");
    // Another pod on the same node sees the edit; the file keeps kind's lines.
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &pod("read", "sim-control-plane", "cat /host/hosts"),
    )
    .code(0);
    finished("read").code(0);
    let hosts = sim.kubectl(&["logs", "read", "-n", "demo"]);
    hosts.expect(
        0,
        "127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         ff00::0\tip6-mcastprefix\n\
         ff02::1\tip6-allnodes\n\
         ff02::2\tip6-allrouters\n\
         172.18.0.2\tsim-control-plane\n\
         10.96.0.9 registry.example.net\n",
        "",
    );
    // A broken script fails as on a node: the shell's words in the log, the exit code in the
    // status, the pod Failed; a read-only volume refuses writes.
    let broken = "set -e; cpy /settings/pin /host/pin";
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &pod("broken", "sim-control-plane", broken),
    )
    .code(0);
    sim.kubectl(&[
        "wait",
        "pod/broken",
        "-n",
        "demo",
        "--timeout=30s",
        "--for=jsonpath={.status.phase}=Failed",
    ])
    .code(0);
    assert_eq!(
        sim.jsonpath(
            "pod/broken",
            "demo",
            "{.status.containerStatuses[0].state.terminated.exitCode}"
        ),
        "127"
    );
    sim.kubectl(&["logs", "broken", "-n", "demo"])
        .stdout("sh: cpy: not found\n");
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &pod("readonly", "sim-control-plane", "echo x > /settings/pin"),
    )
    .code(0);
    sim.kubectl(&[
        "wait",
        "pod/readonly",
        "-n",
        "demo",
        "--timeout=30s",
        "--for=jsonpath={.status.phase}=Failed",
    ])
    .code(0);
    sim.kubectl(&["logs", "readonly", "-n", "demo"])
        .stdout("sh: can't create /settings/pin: Read-only file system\n");
    // Another node has its own /etc/hosts, without the pin.
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: sim-worker}\n";
    sim.kubectl_stdin(&["apply", "-f", "-"], node).code(0);
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        &pod("other", "sim-worker", "cat /host/hosts"),
    )
    .code(0);
    finished("other").code(0);
    // Without the control plane's registry line. The simulator gives every node 172.18.0.2,
    // where kind gives each node its own address: not pinned.
    let other = sim
        .kubectl(&["logs", "other", "-n", "demo"])
        .replace_regex(r"(?m)^[\d.]+\tsim-worker$", "<worker address>\tsim-worker");
    other.expect(
        0,
        "127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         ff00::0\tip6-mcastprefix\n\
         ff02::1\tip6-allnodes\n\
         ff02::2\tip6-allrouters\n\
         <worker address>\tsim-worker\n",
        "",
    );
}
