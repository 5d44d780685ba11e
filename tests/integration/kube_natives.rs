//! The Kubernetes natives (kube-rs) through the real binary against `bprun sim kube`,
//! cross-checked with the real kubectl.

use crate::support::one_step_run;
use crate::support::with_recaps;
use crate::support::{BPRUN, Sim, SimKind};
use crate::support::{Test, repo};

fn with_kube(test: Test, sim: &Sim) -> Test {
    test.env("KUBECONFIG", sim.kubeconfig().display().to_string())
}

const MANIFEST: &str = r#"
const MANIFEST = `
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
`;
"#;

#[test]
fn apply_is_idempotent_and_waits_see_the_rollout() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let script = format!(
        "{MANIFEST}
step(\"Apply\", || {{
    let first = kube_apply(global::MANIFEST);
    assert_eq(first.objects.map(|o| o.action), [\"created\", \"created\"]);
    assert_eq(first.changed, true);
    let second = kube_apply(global::MANIFEST);
    assert_eq(second.objects.map(|o| o.action), [\"unchanged\", \"unchanged\"]);
    assert_eq(second.changed, false);
}});
step(\"Wait\", || {{
    let ready = kube_wait(\"Deployment\", \"demo\", \"web\", \"Rollout\", #{{timeout: 20}});
    assert_eq(ready[0].status.readyReplicas, 2);
    let pods = kube_wait(\"pods\", \"demo\", \"app=web\", #{{type: \"Ready\", status: \"True\"}}, #{{timeout: 20}});
    assert_eq(pods.len(), 2);
    kube_wait(\"pods\", \"demo\", \"app=web\", |pod| pod.status.phase == \"Running\", #{{timeout: 20}});
    assert_eq(kube_list(\"pods\", \"demo\", #{{labels: #{{app: \"web\"}}}}).len(), 2);
    assert_eq(kube_get(\"Deployment\", \"demo\", \"nope\"), ());
}});
step(\"Change\", || {{
    let patched = kube_patch(\"Deployment\", \"demo\", \"web\", #{{spec: #{{replicas: 3}}}}, #{{}});
    assert_eq(patched.changed, true);
    assert_eq(kube_patch(\"Deployment\", \"demo\", \"web\", #{{spec: #{{replicas: 3}}}}, #{{}}).changed, false);
    kube_wait(\"deployments.apps\", \"demo\", \"web\", \"Available\", #{{timeout: 20}});
    assert_eq(kube_delete(\"Namespace\", \"\", \"demo\", #{{wait: true, timeout: 20}}).changed, true);
    assert_eq(kube_delete(\"Namespace\", \"\", \"demo\").changed, false);
}});
"
    );
    let test = with_kube(repo().script(&script), &sim);
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/3] Apply ...
            ~ create Namespace/demo
            ~ create Deployment/web in demo
        [1/3] Apply ... changed (#.## s)
        [2/3] Wait ... ok (#.## s)
        [3/3] Change ...
            ~ patch Deployment/web in demo
            ~ delete Namespace/demo
        [3/3] Change ... changed (#.## s)

        <recap of scripts/test.rhai: Apply: changed 2; Wait: ok; Change: changed 2>
        ",
        ),
        "",
    );
    let gone = sim.kubectl(&["get", "ns", "demo"]);
    gone.code(1);
}

#[test]
fn check_mode_dry_runs_and_changes_nothing() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let script = format!(
        "{MANIFEST}
step(\"Apply\", || {{
    let planned = kube_apply(global::MANIFEST);
    assert_eq(planned.objects.map(|o| o.action), [\"created\", \"created\"]);
}});
"
    );
    let test = with_kube(repo().script(&script), &sim);
    test.run(&["--check", "scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        check mode: nothing will be changed
        [1/1] Apply ...
            ~ would create Namespace/demo
            ~ would create Deployment/web in demo
        [1/1] Apply ... changed (#.## s)

        <recap of scripts/test.rhai (check mode): Apply: changed 2>
        ",
        ),
        "",
    );
    assert_eq!(sim.kubectl(&["get", "ns", "demo", "-o", "name"]).code, 1);
}

#[test]
fn terminal_states_fail_fast_and_timeouts_say_why() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let script = r#"
step("Broken image", || {
    kube_apply(#{apiVersion: "apps/v1", kind: "Deployment", metadata: #{name: "broken", namespace: "demo"},
        spec: #{selector: #{matchLabels: #{app: "broken"}},
                template: #{metadata: #{labels: #{app: "broken"}},
                            spec: #{containers: [#{name: "app", image: "registry.invalid/app:nope"}]}}}});
    kube_wait("Deployment", "demo", "broken", "Rollout", #{timeout: 60});
});
"#;
    let test = with_kube(repo().script(script), &sim);
    // Failed on the terminal state, not at the end of the 60 s timeout; the names the
    // ReplicaSet and the pod get are generated.
    test.run(&["scripts/test.rhai"])
        .replace_regex(r"broken-[a-z0-9]{10}-[a-z0-9]{5}", "broken-<hash>-<pod>")
        .replace_regex(r"broken-[a-z0-9]{10}\b", "broken-<hash>")
        .expect(
            1,
            &with_recaps("
            [1/1] Broken image ...
                ~ create Deployment/broken in demo
            [1/1] Broken image ... failed (#.## s)

            <recap of scripts/test.rhai: Broken image: failed 1>
            "),
            r#"
            error: step "Broken image" failed
              × kube_wait Deployment/broken in demo: pod broken-<hash>-<pod>: container app: ErrImagePull (failed to pull and unpack image "registry.invalid/app:nope": failed to resolve r…nvalid/app:nope": failed to do request: Head "https://registry.invalid/v2/app/manifests/nope": dial tcp: lookup registry.invalid on 172.18.0.1:53: no such host)
               ╭─[scripts/test.rhai:7:5]
             6 │                             spec: #{containers: [#{name: "app", image: "registry.invalid/app:nope"}]}}}});
             7 │     kube_wait("Deployment", "demo", "broken", "Rollout", #{timeout: 60});
               ·     ────┬────
               ·         ╰── failed here
             8 │ });
               ╰────
              caused by: Deployment/broken: replicas desired=1 ready=0 updated=0 available=0 total=0; conditions: Available=False (MinimumReplicasUnavailable: Deployment does not have minimum availability.), Progressing=True (ReplicaSetUpdated: ReplicaSet "broken-<hash>" is progressing.)
              caused by: pod broken-<hash>-<pod>: Pod/broken-<hash>-<pod>: phase Pending; container app waiting (ErrImagePull: failed to pull and unpack image "registry.invalid/app:nope": failed to resolve r…nvalid/app:nope": failed to do request: Head "https://registry.invalid/v2/app/manifests/nope": dial tcp: lookup registry.invalid on 172.18.0.1:53: no such host); conditions: PodScheduled=True, Initialized=True, ContainersReady=False (ContainersNotReady), Ready=False (ContainersNotReady)
              caused by: pod broken-<hash>-<pod>: event Failed: Failed to pull image "registry.invalid/app:nope": rpc error: code = Unknown desc = failed to pull and unpack image "registry.invalid/app:nope": failed to resolve reference "registry.invalid/app:nope": failed to do request: Head "https://registry.invalid/v2/app/manifests/nope": dial tcp: lookup registry.invalid on 172.18.0.1:53: no such host
              hint: this state does not resolve by waiting: fix the image, command or configuration
            re-run with --resume to continue from here
            "#,
        );

    let timeout = r#"
step("Never ready", || { kube_wait("pods", "demo", "app=nothing", "Ready", #{timeout: 1}); });
"#;
    let test = with_kube(repo().script(timeout), &sim);
    test.run(&["scripts/test.rhai"]).expect(
        1,
        &one_step_run("Never ready", "failed"),
        r#"
        error: step "Never ready" failed
          × kube_wait pods matching app=nothing in demo: not ready after 1s
           ╭─[scripts/test.rhai:2:26]
         1 │ 
         2 │ step("Never ready", || { kube_wait("pods", "demo", "app=nothing", "Ready", #{timeout: 1}); });
           ·                          ────┬────
           ·                              ╰── failed here
           ╰────
          caused by: no objects match yet
          hint: raise the timeout if it is only slow; the causes show each unready object (the `timeout` option, in seconds: #{timeout: 600})
        re-run with --resume to continue from here
        "#,
    );
}

#[test]
fn exec_secrets_and_port_forward() {
    // A loopback HTTP server plays OpenBao behind svc/openbao; it answers a bounded number of
    // connections and stops with the test.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("upstream");
    let upstream_address = upstream.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for connection in upstream.incoming().take(8) {
            let Ok(mut connection) = connection else {
                continue;
            };
            let mut buffer = [0u8; 1024];
            let _ = connection.read(&mut buffer);
            let _ = connection.write_all(
                b"HTTP/1.1 418 I'm a teapot\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    let sim = BPRUN.sim(
        SimKind::Kube,
        &[
            "--platform",
            "--openbao",
            &upstream_address,
            "--registry",
            &upstream_address,
        ],
    );
    let script = r#"
step("Exec", || {
    kube_wait("pods", "gitlab", "app=toolbox", "Ready", #{timeout: 20});
    let hello = kube_exec("gitlab", "app=toolbox", ["echo", "hello"], #{});
    assert_eq(hello, #{ok: true, code: 0, stdout: "hello\n", stderr: ""});
    let piped = kube_exec("gitlab", "app=toolbox", ["cat"], #{stdin: "from stdin"});
    assert_eq(piped.stdout, "from stdin");
    let failed = kube_exec("gitlab", "app=toolbox", ["sh", "-c", "exit 4"], #{});
    assert_eq(failed.code, 4);
    assert_eq(failed.ok, false);
});
step("Secrets", || {
    assert_eq(kube_secret_write("gitlab", "registry", #{password: secret("s3cret-value-1")}).changed, true);
    assert_eq(kube_secret_write("gitlab", "registry", #{password: secret("s3cret-value-1")}).changed, false);
    let read = kube_secret_read("gitlab", "registry");
    info(`read ${read.password}`);
    assert_eq(reveal(read.password), "s3cret-value-1");
    assert_eq(kube_secret_read("gitlab", "absent"), ());
    info(`object ${kube_get("Secret", "gitlab", "registry").data}`);
    info(`listed ${kube_list("secrets", "gitlab")[0].data}`);
    info(`kubeconfig ${kube_config_b64()}`);
});
step("Forward", || {
    let address = kube_port_forward("openbao", "svc/openbao", 8200);
    assert_eq(http_status(`http://${address}/v1/sys/health`, 10), 418);
    assert_eq(http_status(`http://${address}/again`, 10), 418);
    // A replaced pod behind the Service: later connections reach the new one.
    let registry = kube_port_forward("gitlab", "svc/gitlab-registry", 5000);
    assert_eq(http_status(`http://${registry}/v2/`, 10), 418);
    let old = kube_list("pods", "gitlab", #{labels: "app=registry"})[0].metadata.name;
    kube_delete("pods", "gitlab", old, #{wait: true, timeout: 20});
    kube_wait("Deployment", "gitlab", "gitlab-registry", "Rollout", #{timeout: 20});
    kube_wait("pods", "gitlab", "app=registry", "Ready", #{timeout: 20});
    assert_eq(http_status(`http://${registry}/v2/`, 10), 418);
});
"#;
    let test = with_kube(repo().script(script), &sim);
    let output = test.run(&["scripts/test.rhai"]);
    // The registry pod's name is generated.
    let output = output.replace_regex(
        r"pods/gitlab-registry-[a-z0-9]{10}-[a-z0-9]{5}",
        "pods/gitlab-registry-<hash>-<pod>",
    );
    output.expect(
        0,
        &with_recaps(
            r#"
        [1/3] Exec ...
            ~ exec echo in gitlab/app=toolbox
            ~ exec cat in gitlab/app=toolbox
            ~ exec sh in gitlab/app=toolbox
        [1/3] Exec ... changed (#.## s)
        [2/3] Secrets ...
            ~ write Secret/registry in gitlab
            read ***
            object #{"password": ***}
            listed #{"password": ***}
            kubeconfig ***
        [2/3] Secrets ... changed (#.## s)
        [3/3] Forward ...
            ~ delete pods/gitlab-registry-<hash>-<pod> in gitlab
        [3/3] Forward ... changed (#.## s)

        <recap of scripts/test.rhai: Exec: changed 3; Secrets: changed 1; Forward: changed 1>
        "#,
        ),
        "",
    );
    // No base64 secret either.
    output
        .stdout_lacks("czNjcmV0LXZhbHVlLTE=")
        .stdout_lacks("s3cret-value-1")
        .stderr_lacks("s3cret-value-1");
    let stored = sim.kubectl(&[
        "get",
        "secret",
        "registry",
        "-n",
        "gitlab",
        "-o",
        "jsonpath={.data.password}",
    ]);
    assert_eq!(stored.ok(), "czNjcmV0LXZhbHVlLTE=");
}

#[test]
fn kube_context_picks_the_kubeconfig_context() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let script = "step(\"Look\", || { info(`${kube_get(\"Namespace\", \"\", \"default\").metadata.name}`); });\n";
    let test = with_kube(repo().script(script), &sim);
    test.run(&["--kube-context", "bprun-sim", "scripts/test.rhai"])
        .expect(
            0,
            &with_recaps(
                "
            [1/1] Look ...
                default
            [1/1] Look ... ok (#.## s)

            <recap of scripts/test.rhai: Look: ok>
            ",
            ),
            "",
        );
    test.run(&["--kube-context", "nope", "scripts/test.rhai"])
        .expect(
            1,
            &one_step_run("Look", "failed"),
            r#"
            error: step "Look" failed
              × kubeconfig context nope: failed to load current context: nope
               ╭─[scripts/test.rhai:1:27]
             1 │ step("Look", || { info(`${kube_get("Namespace", "", "default").metadata.name}`); });
               ·                           ────┬───
               ·                               ╰── failed here
               ╰────
              hint: list contexts with `kubectl config get-contexts`
            re-run with --resume to continue from here
            "#,
        );
}

#[test]
fn openbao_is_reached_through_a_port_forward_when_bao_addr_does_not_answer() {
    let server = crate::support::BaoServer::dev();
    let upstream = server.address.trim_start_matches("http://").to_string();
    let sim = BPRUN.sim(SimKind::Kube, &["--platform", "--openbao", &upstream]);
    let closed = crate::support::free_port();
    let script = r#"
step("Write", || {
    bao_write("apps/demo", #{answer: "42"});
    assert_eq(reveal(bao_read("apps/demo").answer), "42");
});
"#;
    let test = with_kube(repo().script(script), &sim)
        .env("BAO_ADDR", format!("http://127.0.0.1:{closed}"))
        .env("BAO_TOKEN", "root");
    // The forward's local port is chosen by the system.
    test.replace(format!("http://127.0.0.1:{closed}"), "<bao-addr>")
        .run(&["scripts/test.rhai"])
        .replace_regex(r"\(127\.0\.0\.1:\d+\)", "(127.0.0.1:<port>)")
        .expect(
            0,
            &with_recaps("
            [1/1] Write ...
                warning: <bao-addr> does not answer; reaching OpenBao through a port-forward to svc/openbao:8200 in openbao (127.0.0.1:<port>)
                ~ write secret secret/apps/demo (version 1)
            [1/1] Write ... changed (#.## s)

            <recap of scripts/test.rhai: Write: changed 1>
            "),
            "",
        );
    let stored = server.cli("root", &["kv", "get", "-field=answer", "secret/apps/demo"]);
    assert_eq!(stored.trim(), "42");
}

#[test]
fn rollout_restart_replaces_the_pods() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let script = format!(
        "{MANIFEST}
step(\"Restart\", || {{
    kube_apply(global::MANIFEST);
    kube_wait(\"Deployment\", \"demo\", \"web\", \"Rollout\", #{{timeout: 20}});
    let before = kube_list(\"pods\", \"demo\", #{{labels: \"app=web\"}}).map(|p| p.metadata.name);
    assert_eq(kube_rollout_restart(\"Deployment\", \"demo\", \"web\").changed, true);
    kube_wait(\"Deployment\", \"demo\", \"web\", \"Rollout\", #{{timeout: 20}});
    let after = kube_wait(\"pods\", \"demo\", \"app=web\", \"Ready\", #{{timeout: 20}}).map(|p| p.metadata.name);
    assert_eq(after.len(), 2);
    for name in after {{ if before.contains(name) {{ throw `pod ${{name}} survived the restart` }} }}
    let failed = kube_exec(\"demo\", \"app=web\", [\"false\"], #{{}});
    assert_eq(failed.ok, false);
    kube_exec(\"demo\", \"app=web\", [\"false\"], #{{check: true}});
}});
"
    );
    let test = with_kube(repo().script(&script), &sim);
    let output = test.run(&["scripts/test.rhai"]);
    output.code(1).stdout(&with_recaps(
        "
        [1/1] Restart ...
            ~ create Namespace/demo
            ~ create Deployment/web in demo
            ~ restart Deployment/web in demo
            ~ exec false in demo/app=web
            ~ exec false in demo/app=web
        [1/1] Restart ... failed (#.## s)

        <recap of scripts/test.rhai: Restart: failed 5>
        ",
    ));
    output.partial_stderr(
        "  × kube_exec false in demo/app=web: exit code 1\n",
        "the report ends with an empty `caused by: ` line (the command wrote no stderr): a \
         defect of bprun's, not pinned",
    );
}

#[test]
fn check_mode_plans_a_crd_with_its_objects_and_does_not_wait() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let root = env!("CARGO_MANIFEST_DIR");
    let script = r#"
step("Operator", || {
    let planned = kube_apply([read_text("crd.yaml"), read_text("ns.yaml"), read_text("pg.yaml")]);
    assert_eq(planned.objects.map(|o| o.action), ["created", "created", "created"]);
    assert_eq(kube_wait("clusters.postgresql.cnpg.io", "demo", "pg", "Ready", #{timeout: 120}), []);
});
"#;
    let test = with_kube(
        repo()
            .file(
                "crd.yaml",
                &std::fs::read_to_string(format!("{root}/tests/fixtures/kube/crd.yaml"))
                    .expect("crd"),
            )
            .file(
                "ns.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n",
            )
            .file(
                "pg.yaml",
                &std::fs::read_to_string(format!("{root}/tests/fixtures/kube/pg.yaml"))
                    .expect("pg"),
            )
            .script(script),
        &sim,
    );
    // The planned Cluster is reported without waiting for its CRD (which a dry run never
    // registers), and kube_wait looks once instead of waiting its 120 s.
    test.replace(sim.var("KUBE_URL"), "<kube>")
        .run(&["--check", "scripts/test.rhai"])
        .expect(
            0,
            &with_recaps(
                "
            check mode: nothing will be changed
            [1/1] Operator ...
                ~ would create CustomResourceDefinition/clusters.postgresql.cnpg.io
                ~ would create Namespace/demo
                ~ would create Cluster/pg in demo
                check mode: would wait (unknown kind clusters.postgresql.cnpg.io on <kube>/)
            [1/1] Operator ... changed (#.## s)

            <recap of scripts/test.rhai (check mode): Operator: changed 3>
            ",
            ),
            "",
        );
    assert_eq!(sim.kubectl(&["get", "crd", "-o", "name"]).ok(), "");
}

/// A StatefulSet recreates its pod under the same name: a delete that waits ends when the pod
/// it deleted is gone (its uid), not when the name is free, which may never be seen.
#[test]
fn a_waiting_delete_of_a_statefulsets_pod_ends_when_that_pod_is_gone() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    let script = r#"
step("Replace", || {
    kube_apply(`
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: demo}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: "nginx:1.27"}]
`);
    kube_wait("pods", "demo", "app=db", "Ready", #{timeout: 20});
    let before = kube_get("Pod", "demo", "db-0").metadata.uid;
    assert_eq(kube_delete("Pod", "demo", "db-0", #{wait: true, timeout: 20}).changed, true);
    let after = kube_wait("pods", "demo", "app=db", "Ready", #{timeout: 20});
    assert_eq(after.len(), 1);
    assert_eq(after[0].metadata.name, "db-0");
    if after[0].metadata.uid == before { throw "db-0 was not replaced" }
});
"#;
    let test = with_kube(repo().script(script), &sim);
    test.run(&["scripts/test.rhai"]).expect(
        0,
        &with_recaps(
            "
        [1/1] Replace ...
            ~ create Namespace/demo
            ~ create StatefulSet/db in demo
            ~ delete Pod/db-0 in demo
        [1/1] Replace ... changed (#.## s)

        <recap of scripts/test.rhai: Replace: changed 3>
        ",
        ),
        "",
    );
}

/// bprun deletes the object it looked at (a uid precondition); the real kubectl shows the
/// API server's refusal of a delete whose uid is not the object's, and the pod stays.
#[test]
fn a_delete_whose_uid_precondition_fails_is_refused_and_deletes_nothing() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: one, namespace: default}\nspec:\n  containers: [{name: one, image: \"nginx:1.27\"}]\n",
    )
    .success();
    let uid = sim.jsonpath("pod/one", "default", "{.metadata.uid}");
    let body =
        r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"not-the-uid"}}"#;
    sim.kubectl_stdin(
        &["delete", "--raw", "/api/v1/namespaces/default/pods/one", "-f", "-"],
        body,
    )
    .expect(
        1,
        "",
        &format!(
            "Error from server (Conflict): Precondition failed: UID in precondition: not-the-uid, UID in object meta: {uid}\n"
        ),
    );
    assert_eq!(sim.jsonpath("pod/one", "default", "{.metadata.uid}"), uid);
}

#[test]
fn a_met_wait_says_what_met_it_under_verbose() {
    let sim = BPRUN.sim(SimKind::Kube, &[]);
    sim.kubectl(&["create", "ns", "demo"]).ok();
    let script = r#"
step("Wait", || {
    kube_apply(#{apiVersion: "v1", kind: "ConfigMap", metadata: #{name: "settings", namespace: "demo"}, data: #{a: "1"}});
    kube_wait("ConfigMap", "demo", "settings", |c| c.data.a == "1", #{timeout: 10});
});
"#;
    let test = with_kube(repo().script(script), &sim);
    let run = test.run(&["-v", "scripts/test.rhai"]);
    run.code(0);
    let said: Vec<&str> = run
        .stdout
        .lines()
        .chain(run.stderr.lines())
        .filter(|line| line.contains("kube_wait"))
        .collect();
    assert_eq!(
        said,
        ["    debug: kube_wait ConfigMap settings in demo: met by settings"]
    );
}
