//! The apps' Helm charts pass the real `helm lint` and `helm template` (helm v4 from
//! ./test.sh's .tools/bin).

fn run_helm(args: &[&str]) -> String {
    let output = crate::stand_in_charts::helm("helm", args);
    assert!(
        output.code == 0,
        "helm {args:?} failed:\n{}{}",
        output.raw_stdout,
        output.raw_stderr
    );
    output.raw_stdout
}

#[test]
fn every_chart_passes_helm_lint_and_template() {
    for (chart, release, namespace, service, image, kinds) in [
        (
            "apps/guestbook/helm-chart",
            "guestbook",
            "guestbook",
            "guestbook",
            "registry.local.example.net/blueprint-apps/guestbook:latest",
            &["Service", "Deployment", "HTTPRoute"][..],
        ),
        (
            "apps/redis/helm-chart",
            "redis-master-demo",
            "redis-demo",
            "redis-master",
            "redis:7.4.1",
            &["Service", "Deployment"][..],
        ),
        (
            "apps/redis-slave/helm-chart",
            "redis-slave-demo",
            "redis-slave-demo",
            "redis-replica",
            "redis:7.4.1",
            &["Service", "Deployment"][..],
        ),
    ] {
        run_helm(&["lint", "--strict", chart]);
        let rendered = run_helm(&["template", release, chart, "--namespace", namespace]);
        let documents: Vec<serde_json::Value> = rendered
            .split("\n---")
            .filter_map(|doc| serde_norway::from_str::<serde_json::Value>(doc).ok())
            .filter(|doc| doc.is_object())
            .collect();
        let found: Vec<&str> = documents
            .iter()
            .filter_map(|d| d["kind"].as_str())
            .collect();
        assert_eq!(found, kinds, "{chart}");
        assert_eq!(
            documents[0]["metadata"]["name"], service,
            "{chart}: the Service name is the host the manifest names"
        );
        assert_eq!(
            documents[1]["spec"]["template"]["spec"]["containers"][0]["image"], image,
            "{chart}"
        );
    }
}

/// The guestbook is served through the apps' listener of phase 2's Gateway, to its Service.
#[test]
fn the_guestbooks_route_attaches_to_the_platforms_gateway() {
    let rendered = run_helm(&[
        "template",
        "guestbook",
        "apps/guestbook/helm-chart",
        "--namespace",
        "guestbook",
    ]);
    let route = rendered
        .split("\n---")
        .filter_map(|doc| serde_norway::from_str::<serde_json::Value>(doc).ok())
        .find(|doc| doc["kind"] == "HTTPRoute")
        .unwrap_or_else(|| panic!("no HTTPRoute in:\n{rendered}"));
    assert_eq!(
        route["spec"],
        serde_json::json!({
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                            "name": "gitlab-gw", "namespace": "gitlab", "sectionName": "apps"}],
            "hostnames": ["guestbook.local.example.net"],
            "rules": [{"backendRefs": [{"name": "guestbook", "port": 80}]}]
        })
    );
}

#[test]
fn the_replica_follows_the_master_service() {
    let rendered = run_helm(&[
        "template",
        "redis-slave-demo",
        "apps/redis-slave/helm-chart",
        "--namespace",
        "redis-slave-demo",
    ]);
    let deployment = rendered
        .split("\n---")
        .filter_map(|doc| serde_norway::from_str::<serde_json::Value>(doc).ok())
        .find(|doc| doc["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("no Deployment in:\n{rendered}"));
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"],
        serde_json::json!([
            "redis-server",
            "--replicaof",
            "redis-master.redis-demo.svc.cluster.local",
            "6379"
        ]),
        "{rendered}"
    );
}
