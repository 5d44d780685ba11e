//! A Kubernetes API server simulator (`bprun sim kube`) that the real kubectl and helm, and
//! kube-rs, can drive: discovery, OpenAPI v3, CRUD with server-assigned metadata, server-side
//! apply, strategic merge, watches with bookmarks, Tables, protobuf request bodies, controllers
//! that make waits end, and WebSocket exec and port-forward.
//!
//! `--platform` seeds what phase 3 expects of the cluster phase 2 leaves behind: the GitLab
//! toolbox pod (its `gitlab-rails runner` mints personal access tokens in the GitLab
//! simulator), the in-cluster registry and OpenBao, whose ports forward to real listeners.

pub mod admission;
pub mod batch;
pub mod builtin_schema;
pub mod cluster;
pub mod cnpg;
pub mod controllers;
pub mod crd_schema;
pub mod endpoints;
pub mod gateway;
pub mod kubelet;
pub mod listeners;
pub mod merge;
pub mod object_data;
pub mod persist;
pub mod programs;
pub mod protobuf;
pub mod pulls;
pub mod rbac;
pub mod resources;
pub mod rollout;
pub mod runtime;
pub mod scale;
pub mod seed_gateway;
pub mod selectors;
pub mod server;
pub mod service_accounts;
pub mod storage;
pub mod table;
#[cfg(test)]
pub(crate) mod test_fixtures;
pub mod tls;
pub mod validation;

pub use runtime::{ExecCall, ExecOutcome, ExecRuntime};
use serde_json::json;
pub use server::KubeSim;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the toolbox pod's `gitlab-rails runner` asks GitLab for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenRequest<'a> {
    /// `User.find_by_username('root').personal_access_tokens.create!(name: ...)`: a PAT, with
    /// `expires_at: N.days.from_now` when the code says so.
    PersonalAccessToken {
        name: &'a str,
        expires_in_days: Option<i64>,
    },
    /// `Ci::Runner.create!(runner_type: :instance_type, description: ...)`: an instance runner
    /// and its authentication token. `authenticated_user` when the call says
    /// `registration_type: :authenticated_user`: only such a runner's token starts with `glrt-`
    /// (GitLab's enum defaults to `registration_token`).
    InstanceRunner {
        description: &'a str,
        authenticated_user: bool,
    },
}

/// Answers the toolbox's `gitlab-rails runner` requests with a token from GitLab.
pub type TokenMinter = Arc<dyn Fn(TokenRequest) -> Result<String, String> + Send + Sync>;

/// The `description: '...'` of a `Ci::Runner.create!(...)` call.
fn runner_description(code: &str) -> String {
    quoted_argument(code, "description:").unwrap_or_else(|| "created by gitlab-rails runner".into())
}

/// The arguments of the first `call` (`Ci::Runner.create!(`) in Ruby code, up to its closing
/// parenthesis.
fn call_arguments<'a>(code: &'a str, call: &str) -> Option<&'a str> {
    let start = code.find(call)? + call.len();
    let mut depth = 1;
    for (offset, c) in code[start..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&code[start..start + offset]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether a `Ci::Runner.create!` call's arguments set `registration_type: :authenticated_user`.
fn names_authenticated_user(arguments: &str) -> bool {
    arguments.contains("registration_type: :authenticated_user")
        || arguments.contains("registration_type: 'authenticated_user'")
}

/// The quoted string after `key` in Ruby code (single or double quotes).
fn quoted_argument(code: &str, key: &str) -> Option<String> {
    let start = code.find(key)?;
    let rest = code[start + key.len()..].trim_start();
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    rest[1..].split(quote).next().map(str::to_string)
}

/// The `name: '...'` a `personal_access_tokens.create!(...)` call gives its token, as Ruby reads
/// it (single or double quotes); GitLab's default when none is given.
fn token_name(code: &str) -> String {
    let Some(start) = code.find("name:") else {
        return "minted by gitlab-rails runner".to_string();
    };
    let rest = code[start + 5..].trim_start();
    let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
        return "minted by gitlab-rails runner".to_string();
    };
    rest[1..]
        .split(quote)
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The `N` of `expires_at: N.days.from_now` (also `N.day`, `N.years`, `N.year`) in Ruby code.
fn expires_in_days(code: &str) -> Option<i64> {
    let start = code.find("expires_at:")?;
    let rest = code[start + "expires_at:".len()..].trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let count: i64 = digits.parse().ok()?;
    let unit = rest[digits.len()..].strip_prefix('.')?;
    let per_unit = if unit.starts_with("day") {
        1
    } else if unit.starts_with("year") {
        365
    } else {
        return None;
    };
    Some(count * per_unit)
}

/// The images of GitLab's toolbox, where `gitlab-rails` is.
pub const TOOLBOX_IMAGES: &[&str] = &[
    "registry.gitlab.com/gitlab-org/build/cng/gitlab-toolbox-ee",
    "registry.gitlab.com/gitlab-org/build/cng/gitlab-toolbox-ce",
];

/// The commands every simulated container runs (a few shell basics; a simple `sh -c 'cmd'` runs
/// `cmd`), and `gitlab-rails runner` in GitLab toolbox images when a token minter is attached.
/// Anything else is not in the image: containerd's words, or the shell's when a shell ran it.
/// Images with more ([`programs`]) are asked first.
pub fn builtin_exec(minter: Option<TokenMinter>) -> ExecRuntime {
    Arc::new(move |call: &ExecCall| {
        let ok = |stdout: String| ExecOutcome {
            code: 0,
            stdout: stdout.into_bytes(),
            stderr: Vec::new(),
        };
        let fail = |code: i32, stderr: String| ExecOutcome {
            code,
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
        };
        let (words, _, via_shell) = programs::effective_command(&call.command);
        let in_toolbox = TOOLBOX_IMAGES.contains(&crate::images::repository(&call.image));
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        match args.as_slice() {
            [] if via_shell => ok(String::new()),
            [] => fail(126, "no command given\n".into()),
            ["exit", code] if via_shell => fail(code.trim().parse().unwrap_or(2), String::new()),
            ["echo", rest @ ..] => ok(format!("{}\n", rest.join(" "))),
            ["cat"] => ExecOutcome {
                code: 0,
                stdout: call.stdin.clone(),
                stderr: Vec::new(),
            },
            ["true"] => ok(String::new()),
            ["false"] => fail(1, String::new()),
            ["hostname"] => ok(format!("{}\n", call.pod)),
            [shell, _, script, ..] if shell.ends_with("sh") => fail(
                127,
                format!(
                    "sh: the simulator's shell runs only simple commands (no pipes, redirections, variables or several commands), not: {script}\n"
                ),
            ),
            ["gitlab-rails", "runner", code] if in_toolbox => {
                let code = if *code == "-" {
                    String::from_utf8_lossy(&call.stdin).into_owned()
                } else {
                    code.to_string()
                };
                let request = if code.contains("personal_access_tokens.create") {
                    token_name(&code)
                } else if code.contains("Ci::Runner.create") {
                    runner_description(&code)
                } else {
                    return fail(
                        1,
                        "gitlab-rails runner (simulated) only mints personal access tokens and creates runners\n"
                            .into(),
                    );
                };
                let request = if code.contains("Ci::Runner.create") {
                    TokenRequest::InstanceRunner {
                        description: &request,
                        authenticated_user: call_arguments(&code, "Ci::Runner.create!(")
                            .is_some_and(names_authenticated_user),
                    }
                } else {
                    TokenRequest::PersonalAccessToken {
                        name: &request,
                        expires_in_days: expires_in_days(&code),
                    }
                };
                match &minter {
                    Some(mint) => match mint(request) {
                        Ok(token) => ok(format!("{token}\n")),
                        Err(message) => fail(1, format!("gitlab-rails runner: {message}\n")),
                    },
                    None => fail(
                        1,
                        "gitlab-rails runner: no GitLab is attached to this simulated cluster (start it with --gitlab-url, or use `bprun sim all`)\n"
                            .into(),
                    ),
                }
            }
            [program, ..] if via_shell => fail(127, format!("sh: {program}: not found\n")),
            [program, ..] => fail(
                127,
                format!(
                    "OCI runtime exec failed: exec failed: unable to start container process: exec: \"{program}\": executable file not found in $PATH: unknown\n"
                ),
            ),
        }
    })
}

/// A minter that asks a GitLab simulator over HTTP (`POST /-/sim/tokens` with its admin token).
pub fn http_minter(gitlab_url: String, gitlab_token: String) -> TokenMinter {
    Arc::new(move |request: TokenRequest| {
        let (endpoint, body) = match request {
            TokenRequest::PersonalAccessToken {
                name,
                expires_in_days,
            } => (
                "tokens",
                serde_json::json!({"name": name, "expires_in_days": expires_in_days}),
            ),
            TokenRequest::InstanceRunner {
                description,
                authenticated_user,
            } => {
                let registration_type = if authenticated_user {
                    "authenticated_user"
                } else {
                    "registration_token"
                };
                (
                    "runners",
                    serde_json::json!({"description": description, "registration_type": registration_type}),
                )
            }
        };
        let url = format!("{}/-/sim/{endpoint}", gitlab_url.trim_end_matches('/'));
        let client = bprun_clients::runtime::http_client_builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|error| error.to_string())?;
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| "no runtime to reach GitLab from".to_string())?;
        handle.block_on(async {
            let response = client
                .post(&url)
                .header("PRIVATE-TOKEN", &gitlab_token)
                .json(&body)
                .send()
                .await
                .map_err(|error| format!("POST {url}: {error}"))?;
            if !response.status().is_success() {
                return Err(format!("POST {url}: {}", response.status()));
            }
            let body: serde_json::Value = response
                .json()
                .await
                .map_err(|error| format!("POST {url}: {error}"))?;
            body["token"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("POST {url}: no token in the answer"))
        })
    })
}

/// Loopback listeners that phase 3's pods forward to.
#[derive(Debug, Clone, Default)]
pub struct PlatformTargets {
    /// Where OpenBao really listens (svc/openbao 8200 in namespace openbao).
    pub openbao: Option<SocketAddr>,
    /// Where the registry really listens (svc/gitlab-registry 5000 in namespace gitlab).
    pub registry: Option<SocketAddr>,
    /// The gateway phase 2 leaves ([`seed_gateway::objects`]), created last; empty: none.
    pub gateway: Vec<serde_json::Value>,
}

/// Seeds the cluster with what phase 2 leaves behind and phase 3 relies on.
pub fn seed_platform(sim: &KubeSim, targets: &PlatformTargets) -> Result<(), String> {
    let mut cluster = sim.cluster();
    let options = cluster::WriteOptions {
        manager: "bprun-sim".into(),
        ..Default::default()
    };
    let mut apply = |object: serde_json::Value| -> Result<(), String> {
        let api_version = object["apiVersion"].as_str().unwrap_or("v1").to_string();
        let kind = object["kind"].as_str().unwrap_or("").to_string();
        let rt = cluster
            .resource_for_kind(&api_version, &kind)
            .ok_or_else(|| format!("no resource for {kind}"))?;
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        cluster
            .create(&rt, &namespace, object, &options)
            .map(|_| ())
            .map_err(|error| error.message)
    };
    for namespace in ["gitlab", "openbao", "gitlab-runner"] {
        apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))?;
    }
    let forward = |port: u16, target: Option<SocketAddr>| {
        target
            .map(|address| json!({format!("sim.bprun.dev/forward-{port}"): address.to_string()}))
            .unwrap_or(json!({}))
    };
    let workload = |kind: &str,
                    namespace: &str,
                    name: &str,
                    labels: serde_json::Value,
                    image: &str,
                    annotations: serde_json::Value| {
        json!({"apiVersion": "apps/v1", "kind": kind,
               "metadata": {"name": name, "namespace": namespace, "labels": labels},
               "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels, "annotations": annotations},
                                     "spec": {"containers": [{"name": name, "image": image}]}}}})
    };
    apply(workload(
        "Deployment",
        "gitlab",
        "gitlab-toolbox",
        json!({"app": "toolbox", "release": "gitlab"}),
        "registry.gitlab.com/gitlab-org/build/cng/gitlab-toolbox-ee:v17.9.0",
        json!({}),
    ))?;
    // Workloads whose port forwards reach a real listener, each behind a Service.
    let forwarded = [
        (
            "Deployment",
            "gitlab",
            "gitlab-registry",
            json!({"app": "registry", "release": "gitlab"}),
            json!({"app": "registry"}),
            "registry.gitlab.com/gitlab-org/build/cng/gitlab-container-registry:v4.15.2-gitlab",
            5000,
            targets.registry,
        ),
        (
            "StatefulSet",
            "openbao",
            "openbao",
            json!({"app.kubernetes.io/name": "openbao"}),
            json!({"app.kubernetes.io/name": "openbao"}),
            "quay.io/openbao/openbao:2.2.0",
            8200,
            targets.openbao,
        ),
    ];
    for (kind, namespace, name, labels, selector, image, port, target) in forwarded {
        apply(workload(
            kind,
            namespace,
            name,
            labels,
            image,
            forward(port, target),
        ))?;
        apply(json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": name, "namespace": namespace},
                     "spec": {"selector": selector, "ports": [{"name": "http", "port": port}]}}))?;
    }
    if !targets.gateway.is_empty() {
        for object in &targets.gateway {
            apply(object.clone())?;
        }
        // The GitLab chart's route of the registry's name to its Service, as phase 2 leaves it.
        apply(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                     "metadata": {"name": "gitlab-registry", "namespace": "gitlab"},
                     "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                              "name": "gitlab-gw", "namespace": "gitlab",
                                              "sectionName": "registry-web"}],
                              "hostnames": ["registry.local.example.net"],
                              "rules": [{"backendRefs": [{"name": "gitlab-registry", "port": 5000}]}]}}),
        )?;
    }
    Ok(())
}

/// kind's default Corefile (kind v0.27, Kubernetes 1.35), which phase 2's CoreDNS step patches.
pub const KIND_COREFILE: &str = ".:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
";

/// The worker nodes of the platform's kind cluster (three for GitLab, one for the runner),
/// next to the control plane every simulated cluster has.
pub const KIND_WORKERS: &[(&str, &str)] = &[
    ("sim-worker", "gitlab"),
    ("sim-worker2", "gitlab"),
    ("sim-worker3", "gitlab"),
    ("sim-worker4", "runner"),
];

/// What a fresh kind cluster has before phase 2: its nodes and `kube-system` with CoreDNS
/// (Deployment, ConfigMap with kind's Corefile, the `kube-dns` Service). No StorageClass, no
/// CRDs, no workloads of the platform.
pub fn seed_bare(sim: &KubeSim) -> Result<(), String> {
    seed_kind(sim, KIND_COREFILE)
}

/// Phase 2's CoreDNS rewrite (scripts/phase2.rhai, step "CoreDNS rewrite"): every name under
/// the platform's domain answers as the Envoy gateway's Service, first in the server block.
pub const PHASE2_COREDNS_REWRITE: &str = r"rewrite name regex (.+)\.local\.example\.net gitlab-gateway.gitlab.svc.cluster.local answer auto";

/// kind's Corefile as phase 2's CoreDNS step leaves it.
pub fn phase2_corefile() -> String {
    KIND_COREFILE.replacen(
        ".:53 {\n",
        &format!(".:53 {{\n    {PHASE2_COREDNS_REWRITE}\n"),
        1,
    )
}

/// A fresh kind cluster's nodes and CoreDNS, its ConfigMap holding `corefile`.
pub fn seed_kind(sim: &KubeSim, corefile: &str) -> Result<(), String> {
    let mut cluster = sim.cluster();
    let create = |cluster: &mut cluster::Cluster, manager: &str, object: serde_json::Value| {
        let api_version = object["apiVersion"].as_str().unwrap_or("v1").to_string();
        let kind = object["kind"].as_str().unwrap_or("").to_string();
        let rt = cluster
            .resource_for_kind(&api_version, &kind)
            .ok_or_else(|| format!("no resource for {kind}"))?;
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let options = cluster::WriteOptions {
            manager: manager.into(),
            ..Default::default()
        };
        cluster
            .create(&rt, &namespace, object, &options)
            .map(|_| ())
            .map_err(|error| error.message)
    };
    for (name, role) in KIND_WORKERS {
        create(
            &mut cluster,
            "kubelet",
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                         "blueprint.dev/pool": role}},
                   "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                              "nodeInfo": {"kubeletVersion": "v1.35.0", "containerRuntimeVersion": "containerd://2.1.0", "osImage": "bprun simulator"}}}),
        )?;
    }
    let labels = json!({"k8s-app": "kube-dns"});
    create(
        &mut cluster,
        "kubeadm",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "coredns", "namespace": "kube-system"},
               "data": {"Corefile": corefile}}),
    )?;
    create(
        &mut cluster,
        "kubeadm",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
               "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"containers": [{"name": "coredns",
                                                               "image": "registry.k8s.io/coredns/coredns:v1.12.1",
                                                               "args": ["-conf", "/etc/coredns/Corefile"],
                                                               "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": true}]}],
                                              "volumes": [{"name": "config-volume",
                                                           "configMap": {"name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}]}}}}),
    )?;
    create(
        &mut cluster,
        "kubeadm",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
               "spec": {"selector": labels, "clusterIP": "10.96.0.10",
                        "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                  {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}}),
    )?;
    Ok(())
}

/// A kubeconfig for a simulator at `url` with `token`.
pub fn kubeconfig(url: &str, token: &str, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: bprun-sim\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: bprun-sim\n  context:\n    cluster: bprun-sim\n    user: bprun-sim\n    namespace: default\ncurrent-context: bprun-sim\nusers:\n- name: bprun-sim\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}

/// Writes the kubeconfig with mode 0600 (it holds the token).
pub fn write_kubeconfig(path: &Path, url: &str, token: &str, ca_pem: &str) -> Result<(), String> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)
            .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
    }
    bprun_clients::fs::write_private(path, kubeconfig(url, token, ca_pem).as_bytes())
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

/// A running in-process simulator.
pub struct Running {
    pub sim: Arc<KubeSim>,
    pub url: String,
    pub token: String,
    /// The CA that signed the serving certificate.
    pub ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
        // The processes programs started (OpenBao servers) end with the simulator.
        self.sim.programs.stop_all();
    }
}

pub fn random_token() -> String {
    format!(
        "sim-{}",
        (0..32)
            .map(|_| fastrand::alphanumeric())
            .collect::<String>()
    )
}

/// Starts a simulator on `listen` (loopback only) inside the shared runtime.
pub fn start(listen: &str, sim: Arc<KubeSim>) -> Result<Running, String> {
    let address = crate::http::loopback(listen)?;
    let listener = std::net::TcpListener::bind(address)
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    start_on(listener, sim)
}

/// Serves a simulator on a listener bound earlier (loopback only).
pub fn start_on(listener: std::net::TcpListener, sim: Arc<KubeSim>) -> Result<Running, String> {
    start_with(listener, sim, tls::mint()?)
}

/// Serves a simulator on a listener bound earlier with a given serving identity.
pub fn start_with(
    listener: std::net::TcpListener,
    sim: Arc<KubeSim>,
    tls: tls::ServingTls,
) -> Result<Running, String> {
    let runtime = bprun_clients::runtime::runtime();
    let local = listener.local_addr().map_err(|error| error.to_string())?;
    if !local.ip().is_loopback() {
        return Err(format!(
            "the simulator listens on loopback only, not {}",
            local.ip()
        ));
    }
    listener
        .set_nonblocking(true)
        .map_err(|error| error.to_string())?;
    let listener = {
        let _guard = runtime.enter();
        tokio::net::TcpListener::from_std(listener).map_err(|error| error.to_string())?
    };
    let bound = listener.local_addr().map_err(|error| error.to_string())?;
    let url = format!("https://{bound}");
    let token = sim.token.clone();
    let ca_pem = tls.ca_pem.clone();
    sim.cluster().root_ca_pem = ca_pem.clone();
    let task = runtime.spawn(server::serve(listener, sim.clone(), tls.acceptor));
    Ok(Running {
        sim,
        url,
        token,
        ca_pem,
        task,
    })
}

pub struct Config {
    pub listen: String,
    pub kubeconfig: Option<PathBuf>,
    pub gitlab_url: Option<String>,
    /// The GitLab simulator's admin token (minting needs it).
    pub gitlab_token: Option<String>,
    pub platform: bool,
    pub openbao: Option<SocketAddr>,
    pub registry: Option<SocketAddr>,
}

/// `bprun sim kube`: serves until SIGINT or SIGTERM, printing KUBECONFIG= first.
pub fn run(config: Config) -> Result<(), String> {
    let token = config.gitlab_token.clone().unwrap_or_default();
    let minter = config
        .gitlab_url
        .clone()
        .map(|url| http_minter(url, token.clone()));
    let sim = Arc::new(KubeSim::new(random_token(), builtin_exec(minter)));
    if config.platform {
        seed_platform(
            &sim,
            &PlatformTargets {
                openbao: config.openbao,
                registry: config.registry,
                gateway: Vec::new(),
            },
        )?;
    }
    let running = start(&config.listen, sim)?;
    let path = config
        .kubeconfig
        .clone()
        .unwrap_or_else(|| PathBuf::from(".bprun/sim/kubeconfig"));
    write_kubeconfig(&path, &running.url, &running.token, &running.ca_pem)?;
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "KUBE_URL={}", running.url);
    let _ = writeln!(out, "KUBECONFIG={}", path.display());
    let _ = out.flush();
    let runtime = bprun_clients::runtime::runtime();
    runtime.block_on(crate::http::shutdown_signal())?;
    drop(running);
    Ok(())
}

#[cfg(test)]
mod toolbox_tests {
    use super::*;
    use std::sync::Mutex;

    fn toolbox_call(code: &str) -> ExecCall {
        ExecCall {
            namespace: "gitlab".into(),
            pod: "gitlab-toolbox-0".into(),
            container: "toolbox".into(),
            command: vec!["gitlab-rails".into(), "runner".into(), "-".into()],
            stdin: code.as_bytes().to_vec(),
            image: "registry.gitlab.com/gitlab-org/build/cng/gitlab-toolbox-ee:v19.1.1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_toolbox_mints_pats_and_creates_runners_through_gitlab() {
        let asked: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = asked.clone();
        let minter: TokenMinter = Arc::new(move |request: TokenRequest| {
            let mut seen = seen.lock().unwrap();
            seen.push(format!("{request:?}"));
            Ok(match request {
                TokenRequest::PersonalAccessToken { .. } => "glpat-minted".to_string(),
                TokenRequest::InstanceRunner { .. } => "glrt-created".to_string(),
            })
        });
        let exec = builtin_exec(Some(minter));
        let pat = exec(&toolbox_call(
            "token = User.find_by_username('root').personal_access_tokens.create!(scopes: ['api'], name: 'blueprint-phase3', expires_at: 365.days.from_now); puts token.token",
        ));
        assert_eq!((pat.code, pat.stdout), (0, b"glpat-minted\n".to_vec()));
        let runner = exec(&toolbox_call(
            "runner = Ci::Runner.create!(runner_type: :instance_type, description: 'blueprint gitlab-runner'); puts runner.token",
        ));
        assert_eq!(
            (runner.code, runner.stdout),
            (0, b"glrt-created\n".to_vec())
        );
        exec(&toolbox_call(
            "runner = Ci::Runner.find_by(description: 'x') || Ci::Runner.create!(runner_type: :instance_type, registration_type: :authenticated_user, description: 'x'); puts runner.token",
        ));
        assert_eq!(
            *asked.lock().unwrap(),
            [
                "PersonalAccessToken { name: \"blueprint-phase3\", expires_in_days: Some(365) }",
                "InstanceRunner { description: \"blueprint gitlab-runner\", authenticated_user: false }",
                "InstanceRunner { description: \"x\", authenticated_user: true }"
            ]
        );
        let other = exec(&toolbox_call("puts User.count"));
        assert_eq!(other.code, 1);
        assert!(
            String::from_utf8_lossy(&other.stderr)
                .contains("only mints personal access tokens and creates runners")
        );
    }
}

#[cfg(test)]
mod seed_tests {
    use super::*;

    /// The seeded Corefile's rewrite is the rule phase 2's CoreDNS step writes: its pieces, as
    /// scripts/phase2.rhai builds the rule from them (a substring check of the script's source,
    /// since the rule exists only as the script's template).
    #[test]
    fn the_seeded_rewrite_is_the_one_phase2_writes() {
        let script = include_str!("../../../../scripts/phase2.rhai");
        assert!(script.contains("const DOMAIN = \"local.example.net\";"));
        assert!(
            script.contains("const GATEWAY_SERVICE = \"gitlab-gateway.gitlab.svc.cluster.local\";")
        );
        assert!(script.contains(
            "let rule = `rewrite name regex (.+)\\.${escaped} ${GATEWAY_SERVICE} answer auto`;"
        ));
        assert!(
            script.contains("patched.replace(\".:53 {\\n\", \".:53 {\\n    \" + rule + \"\\n\");")
        );
        let corefile = phase2_corefile();
        assert_eq!(
            corefile.lines().take(2).collect::<Vec<_>>(),
            [".:53 {", &format!("    {PHASE2_COREDNS_REWRITE}")]
        );
        assert_eq!(
            corefile.replacen(&format!("    {PHASE2_COREDNS_REWRITE}\n"), "", 1),
            KIND_COREFILE
        );
    }
}
