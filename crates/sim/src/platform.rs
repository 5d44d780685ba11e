//! The embedded platform of `bprun sim all`, `bprun rehearse` and `bprun repl --rehearse`: the
//! GitLab and Kubernetes simulators together (the toolbox pod's `gitlab-rails runner` mints
//! tokens in the GitLab simulator; the registry and OpenBao Services forward to real loopback
//! listeners), plus OpenBao: a real `bao server -dev` when `bao` is on PATH (or in the
//! project's `.tools/bin`), otherwise the in-process stand-in.
//!
//! Start-up happens in two phases so a single process can run a script against it: `prepare`
//! binds every port with the standard library (no threads yet) and says what the environment
//! will be, so a caller may export it while the process is still single-threaded; `start`
//! then serves.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which OpenBao serves the platform.
#[derive(Debug, Clone, PartialEq)]
pub enum BaoKind {
    /// A real `bao server -dev` at this path.
    Real(PathBuf),
    /// bprun's in-process stand-in (KV v2 and the `sys` endpoints bprun uses).
    StandIn,
}

/// Ports bound and secrets chosen, nothing served yet.
pub struct Prepared {
    pub state_dir: PathBuf,
    gitlab: TcpListener,
    kube: TcpListener,
    registry: TcpListener,
    bao: Option<TcpListener>,
    pub bao_kind: BaoKind,
    pub bao_addr: SocketAddr,
    pub bao_token: String,
    pub gitlab_url: String,
    pub gitlab_admin_token: String,
    pub kube_token: String,
    pub kubeconfig: PathBuf,
    pub pipeline_seconds: f64,
    /// Register and run the GitLab Runner stand-in (phase 2's last step); true by default.
    pub with_runner: bool,
    /// Start as a fresh kind cluster does (phase 2 builds the rest): kind's nodes and
    /// `kube-system` with CoreDNS, no StorageClass, no CRDs, no GitLab workloads, no OpenBao
    /// and no runner. False by default: the platform as phase 2 leaves it.
    pub bare: bool,
    /// Milliseconds added to every GitLab answer (API and git smart HTTP; health and the
    /// simulator's own routes are exempt), as `bprun sim gitlab --latency-ms` does.
    pub gitlab_latency_ms: u64,
    /// Play every CI job instead of running it (`bprun sim all --play-jobs`).
    pub play_jobs: bool,
    /// The host folder every node mounts at `/var/local/shared` (phase 1's kind `extra_mounts`
    /// of the repository's `infra/data/shared/`): where the data of the stable volumes' pods
    /// lives (OpenBao's raft storage). None: no node folder is backed, programs keep their data
    /// in the simulator's state folder.
    pub node_shared: Option<PathBuf>,
    /// The repository the scripts run in (the rehearsal's copy): its `infra/tls/wildcard/`
    /// holds the certificate phase 2 would have minted, which the seeded gateway serves.
    /// None: the working folder.
    pub repository: Option<PathBuf>,
}

fn loopback_listener() -> Result<TcpListener, String> {
    TcpListener::bind("127.0.0.1:0").map_err(|error| format!("cannot listen on 127.0.0.1: {error}"))
}

fn random(prefix: &str, length: usize) -> String {
    format!(
        "{prefix}{}",
        (0..length)
            .map(|_| fastrand::alphanumeric())
            .collect::<String>()
    )
}

/// What a state folder keeps across restarts (mode 0600): the ports, so URLs stay the same
/// (working trees' remotes, the kubeconfig in CI variables), and the simulators' own tokens.
/// OpenBao's root token is kept too, so a shell that exported the environment keeps working
/// after a restart (the dev server's data starts empty again).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Saved {
    gitlab_port: u16,
    kube_port: u16,
    registry_port: u16,
    bao_port: u16,
    gitlab_admin_token: String,
    kube_token: String,
    #[serde(default)]
    bao_token: String,
}

/// The saved port when it is free again, else any free port.
fn listener_on(port: u16) -> Result<TcpListener, String> {
    if port != 0
        && let Ok(listener) = TcpListener::bind(("127.0.0.1", port))
    {
        return Ok(listener);
    }
    loopback_listener()
}

/// Binds every port and chooses every secret; serves nothing.
pub fn prepare(root: &Path, state_dir: &Path, pipeline_seconds: f64) -> Result<Prepared, String> {
    std::fs::create_dir_all(state_dir)
        .map_err(|error| format!("cannot create {}: {error}", state_dir.display()))?;
    let saved_file = state_dir.join("platform.json");
    let saved: Saved = std::fs::read_to_string(&saved_file)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let gitlab = listener_on(saved.gitlab_port)?;
    let kube = listener_on(saved.kube_port)?;
    let registry = listener_on(saved.registry_port)?;
    let address = |listener: &TcpListener| listener.local_addr().map_err(|e| e.to_string());
    let bao_kind = if std::env::var("BPRUN_SIM_BAO").as_deref() == Ok("stand-in") {
        BaoKind::StandIn
    } else {
        crate::tools::bao(root)
            .map(BaoKind::Real)
            .unwrap_or(BaoKind::StandIn)
    };
    let (bao, bao_addr) = match bao_kind {
        // The real server binds the port itself: take a free one and let it go.
        BaoKind::Real(_) => {
            let probe = listener_on(saved.bao_port)?;
            let addr = address(&probe)?;
            drop(probe);
            (None, addr)
        }
        BaoKind::StandIn => {
            let listener = listener_on(saved.bao_port)?;
            let addr = address(&listener)?;
            (Some(listener), addr)
        }
    };
    let keep = |value: &str, fresh: String| {
        if value.is_empty() {
            fresh
        } else {
            value.to_string()
        }
    };
    let gitlab_admin_token = keep(&saved.gitlab_admin_token, random("glpat-sim-", 20));
    let kube_token = keep(&saved.kube_token, crate::kube::random_token());
    let bao_token = keep(&saved.bao_token, random("sim-root-", 24));
    let port = |listener: &TcpListener| listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let record = Saved {
        gitlab_port: port(&gitlab),
        kube_port: port(&kube),
        registry_port: port(&registry),
        bao_port: bao_addr.port(),
        gitlab_admin_token: gitlab_admin_token.clone(),
        kube_token: kube_token.clone(),
        bao_token: bao_token.clone(),
    };
    let text = serde_json::to_string_pretty(&record).map_err(|e| e.to_string())?;
    bprun_clients::fs::write_private(&saved_file, text.as_bytes())
        .map_err(|error| format!("cannot write {}: {error}", saved_file.display()))?;
    Ok(Prepared {
        state_dir: state_dir.to_path_buf(),
        gitlab_url: format!("http://{}", address(&gitlab)?),
        gitlab,
        kube,
        registry,
        bao,
        bao_kind,
        bao_addr,
        bao_token,
        gitlab_admin_token,
        kube_token,
        kubeconfig: state_dir.join("kubeconfig"),
        pipeline_seconds,
        with_runner: true,
        bare: false,
        gitlab_latency_ms: 0,
        play_jobs: false,
        node_shared: None,
        repository: None,
    })
}

impl Prepared {
    /// The environment a script needs to run against the platform.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        if self.bare {
            // No OpenBao yet: phase 2 installs it, and the natives reach it through a
            // port-forward to its Service, with the root token of the init file phase 2 writes.
            return vec![
                ("GITLAB_URL", self.gitlab_url.clone()),
                ("GITLAB_TOKEN", self.gitlab_admin_token.clone()),
                ("KUBECONFIG", self.kubeconfig.display().to_string()),
                ("BAO_K8S_SERVICE", "openbao/openbao:8200".to_string()),
                (
                    "BPRUN_SIM_CA_FILE",
                    self.state_dir.join("kube-ca.pem").display().to_string(),
                ),
            ];
        }
        vec![
            ("GITLAB_URL", self.gitlab_url.clone()),
            // The simulator's own admin token (phase 3 mints and uses its own PAT).
            ("GITLAB_TOKEN", self.gitlab_admin_token.clone()),
            ("KUBECONFIG", self.kubeconfig.display().to_string()),
            ("BAO_ADDR", format!("http://{}", self.bao_addr)),
            ("BAO_TOKEN", self.bao_token.clone()),
            (
                "BPRUN_SIM_CA_FILE",
                self.state_dir.join("kube-ca.pem").display().to_string(),
            ),
        ]
    }
}

/// A child process stopped by its process id when dropped, also when start-up fails half-way.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

enum Bao {
    /// A bare platform: OpenBao is what phase 2 installs into the cluster.
    None,
    Real(KillOnDrop),
    /// Held for its lifetime: dropping it stops the stand-in.
    #[allow(dead_code)]
    StandIn(crate::bao::Running),
}

/// The running platform; dropping it stops everything it started (the OpenBao process by its
/// process id).
pub struct Platform {
    pub gitlab: Arc<crate::gitlab::GitlabSim>,
    pub gitlab_url: String,
    pub gitlab_admin_token: String,
    pub kube: crate::kube::Running,
    pub bao_kind: BaoKind,
    pub bao_addr: SocketAddr,
    bao: Bao,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    env: Vec<(&'static str, String)>,
    /// What keeps the platform in its state folder.
    keeper: Option<Keeper>,
}

/// The store file of the cluster a state folder keeps (`kube::persist`).
pub const KUBE_STORE: &str = "kube-store.json";
/// The images pushed to the platform's registry (kaniko's), kept beside it.
const PUSHED_IMAGES: &str = "registry-images.json";

/// Saves what a kept platform is: the cluster's store and the registry's images.
#[derive(Clone)]
struct Keeper {
    store_file: PathBuf,
    pushed_file: PathBuf,
    kind: &'static str,
    images: crate::images::PlatformRegistry,
}

impl Keeper {
    /// What changes when something worth keeping does: the store's resourceVersion, the
    /// tokens issued, the images pushed.
    fn progress(&self, sim: &crate::kube::KubeSim) -> (u64, usize, usize) {
        let tokens = sim
            .service_account_tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        let pushed = self
            .images
            .pushed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        (crate::kube::persist::version(sim), tokens, pushed)
    }

    fn save(&self, sim: &crate::kube::KubeSim) -> Result<(), String> {
        crate::kube::persist::save(sim, self.kind, &self.store_file)?;
        let pushed: Vec<String> = self
            .images
            .pushed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        let text = serde_json::to_vec(&pushed).map_err(|error| error.to_string())?;
        bprun_clients::fs::write_private(&self.pushed_file, &text)
            .map_err(|error| format!("cannot write {}: {error}", self.pushed_file.display()))
    }
}

/// The images a kept platform's registry held.
fn restore_pushed(images: &crate::images::PlatformRegistry, file: &Path) -> Result<(), String> {
    let text = match std::fs::read(file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(format!("cannot read {}: {error}", file.display())),
    };
    let pushed: Vec<String> = serde_json::from_slice(&text)
        .map_err(|error| format!("{} is not a list of images: {error}", file.display()))?;
    images
        .pushed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(pushed);
    Ok(())
}

impl Drop for Platform {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(keeper) = &self.keeper
            && let Err(message) = keeper.save(&self.kube.sim)
        {
            eprintln!("warning: the platform's state was not saved: {message}");
        }
        crate::sandbox::stop_running_jobs();
        if let Some(folder) = &self.gitlab.temporary_repos {
            let _ = std::fs::remove_dir_all(folder);
        }
    }
}

/// Answers like a container registry's `/v2/` (an empty 200 with the API version header), as
/// the registry image's program does.
async fn registry(listener: tokio::net::TcpListener) {
    crate::http::accept_loop(listener, None, |_| async {
        Some(crate::kube::programs::gitlab::registry_root())
    })
    .await
}

fn to_tokio(listener: TcpListener) -> Result<tokio::net::TcpListener, String> {
    listener
        .set_nonblocking(true)
        .map_err(|error| error.to_string())?;
    let _guard = bprun_clients::runtime::runtime().enter();
    tokio::net::TcpListener::from_std(listener).map_err(|error| error.to_string())
}

/// Where the GitLab Runner chart runs its job pods (infra/helm-values/runner.yaml).
const RUNNER_NAMESPACE: &str = "gitlab-runner";

/// Serves what `prepare` bound and waits until every part answers (bounded: 30 s).
pub fn start(prepared: Prepared) -> Result<Platform, String> {
    let runtime = bprun_clients::runtime::runtime();
    let env = prepared.env();
    // GitLab.
    // GitLab's registry, shared by the GitLab simulator (kaniko pushes there) and the
    // Kubernetes simulator's nodes (they pull from it under registry.<domain>).
    let image_store = crate::images::PlatformRegistry {
        node_hosts: vec!["registry.local.example.net".to_string()],
        cluster_hosts: vec!["gitlab-registry.gitlab.svc:5000".to_string()],
        pushed: Default::default(),
        network: Default::default(),
        tls: Default::default(),
    };
    let mut jobs = crate::gitlab::ci::jobs::Settings {
        // The platform's runner (infra/helm-values/runner.yaml) defaults to alpine:3.20; its
        // registry is GitLab's, at registry.<domain>.
        default_image: Some("alpine:3.20".to_string()),
        registry: Some("registry.local.example.net".to_string()),
        image_store: Some(image_store.clone()),
        // GitLab's external host (infra/helm-values/gitlab.yaml's global.hosts): a job's pod
        // fetches the sources there, once the platform's network is attached (bare platform).
        clone_host: Some("gitlab.local.example.net".to_string()),
        ..crate::gitlab::ci::jobs::Settings::from_env()
    };
    jobs.play |= prepared.play_jobs;
    let job_network = jobs.network.clone();
    let gitlab_config = crate::gitlab::Config {
        listen: "127.0.0.1:0".into(),
        state_dir: Some(prepared.state_dir.join("gitlab")),
        tokens: vec![prepared.gitlab_admin_token.clone()],
        pipeline_seconds: prepared.pipeline_seconds,
        faults: crate::http::Faults {
            latency_ms: prepared.gitlab_latency_ms,
            ..Default::default()
        },
        runner: None,
        jobs,
    };
    let gitlab = Arc::new(crate::gitlab::GitlabSim::new(gitlab_config)?);
    *gitlab.url.lock().unwrap_or_else(|p| p.into_inner()) = prepared.gitlab_url.clone();
    // GitLab is served once the Kubernetes simulator exists (on a bare platform, through the
    // Gateway that needs a Ready webservice pod).
    let gitlab_listener = prepared.gitlab;
    let mut tasks = Vec::new();
    // Phase 2 ends by registering GitLab Runner: the platform has an online instance runner,
    // online because its stand-in polls for jobs.
    let mut standin_token = None;
    if prepared.with_runner && !prepared.bare {
        let runner_token = gitlab.register_standin_runner(&[]);
        standin_token = Some(runner_token.clone());
        crate::gitlab::standin_poll(&gitlab, &runner_token);
        tasks.push(runtime.spawn(crate::gitlab::runner_standin(
            gitlab.clone(),
            runner_token,
            crate::gitlab::standin_interval(prepared.pipeline_seconds),
        )));
    }
    // The registry.
    let registry_addr = prepared.registry.local_addr().map_err(|e| e.to_string())?;
    tasks.push(runtime.spawn(registry(to_tokio(prepared.registry)?)));
    // OpenBao.
    let bao = match &prepared.bao_kind {
        _ if prepared.bare => Bao::None,
        BaoKind::Real(binary) => {
            // The root token goes through the environment, not the command line (`ps` shows that).
            let mut command = Command::new(binary);
            // The dev server ends with this process even when it is killed (SIGKILL runs no
            // destructor): the kernel sends it SIGTERM when its parent goes.
            // SAFETY: the closure runs between fork and exec and only calls prctl and getppid,
            // which are async-signal-safe.
            unsafe {
                use std::os::unix::process::CommandExt;
                let parent = std::process::id() as libc::pid_t;
                command.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // The parent may have gone before prctl took effect.
                    if libc::getppid() != parent {
                        return Err(std::io::Error::other(
                            "the simulator ended before OpenBao started",
                        ));
                    }
                    Ok(())
                });
            }
            let child = command
                .args([
                    "server",
                    "-dev",
                    &format!("-dev-listen-address={}", prepared.bao_addr),
                ])
                .env("BAO_DEV_ROOT_TOKEN_ID", &prepared.bao_token)
                .env("HOME", &prepared.state_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|error| format!("cannot start {}: {error}", binary.display()))?;
            Bao::Real(KillOnDrop(child))
        }
        BaoKind::StandIn => {
            let listener = prepared.bao.ok_or("the OpenBao stand-in has no listener")?;
            Bao::StandIn(crate::bao::start_on(listener, &prepared.bao_token)?)
        }
    };
    // Kubernetes, seeded with what phase 2 leaves behind.
    let minter_sim = gitlab.clone();
    let minter: crate::kube::TokenMinter =
        Arc::new(move |request: crate::kube::TokenRequest| match request {
            crate::kube::TokenRequest::PersonalAccessToken {
                name,
                expires_in_days,
            } => Ok(minter_sim.mint_token(name, expires_in_days)),
            crate::kube::TokenRequest::InstanceRunner {
                description,
                authenticated_user,
            } => Ok(minter_sim.create_instance_runner(
                description,
                crate::gitlab::RegistrationType::created(authenticated_user),
            )),
        });
    let node = prepared
        .node_shared
        .clone()
        .map(crate::kube::programs::node::NodeMounts::shared)
        .unwrap_or_default();
    // The nodes' folders and the cluster's store live in the state folder: a platform started
    // again on it is the one it was, as a kind cluster after `docker restart`.
    let kube_sim = Arc::new(crate::kube::KubeSim::with_programs(
        prepared.kube_token.clone(),
        crate::kube::builtin_exec(Some(minter)),
        crate::kube::programs::Programs::standard_with_nodes(
            node,
            prepared.state_dir.join("nodes"),
        ),
    ));
    let store_file = prepared.state_dir.join(KUBE_STORE);
    let platform_kind = if prepared.bare { "bare" } else { "phase2" };
    let restored = crate::kube::persist::restore(&kube_sim, platform_kind, &store_file)?;
    if restored {
        restore_pushed(&image_store, &prepared.state_dir.join(PUSHED_IMAGES))?;
    }
    kube_sim.cluster().images.registry = Some(image_store.clone());
    // CI jobs run in pods of the runner's namespace, wired to this cluster's network.
    let world: std::sync::Weak<dyn crate::kube::programs::World> = Arc::downgrade(&kube_sim) as _;
    *job_network.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(crate::gitlab::ci::jobs::JobFabric(
            crate::kube::programs::pod_network::PodFabric::in_world(world, RUNNER_NAMESPACE),
        ));
    // The network as on a kind cluster: nodes pull through their own /etc/hosts and
    // containerd's certs.d, CI job pods dial the registry through the cluster's DNS.
    let nodes_dir = kube_sim.programs.nodes.clone();
    kube_sim.cluster().images.nodes = Some(nodes_dir.clone());
    let weak = Arc::downgrade(&kube_sim);
    let dial: crate::images::PodDial = Arc::new(move |name: &str, port: u16| {
        // The cluster is gone with the platform: nothing answers DNS any more.
        let sim = weak
            .upgrade()
            .ok_or(crate::kube::programs::service::DialError::NoDns)?;
        let host = crate::kube::programs::Host::new(&*sim, &sim.programs);
        crate::kube::programs::service::dial(&host, name, port, RUNNER_NAMESPACE)
    });
    *image_store
        .network
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = Some(dial);
    let weak = Arc::downgrade(&kube_sim);
    let tls: crate::images::PodTls = Arc::new(move |name: &str, port: u16, ca: Option<&str>| {
        let sim = weak.upgrade().ok_or_else(|| "EOF".to_string())?;
        let host = crate::kube::programs::Host::new(&*sim, &sim.programs);
        crate::kube::programs::service::handshake(&host, name, port, RUNNER_NAMESPACE, ca)
    });
    *image_store.tls.lock().unwrap_or_else(|p| p.into_inner()) = Some(tls);
    // Where the platform as phase 2 leaves it keeps its wildcard certificate (infra/tls/wildcard/
    // of the repository the scripts run in).
    let repository = prepared
        .repository
        .clone()
        .unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
    if prepared.bare {
        if !restored {
            crate::kube::seed_bare(&kube_sim)?;
        }
        // Phase 2 installs GitLab: GITLAB_URL is the Gateway, which serves GitLab only while a
        // webservice pod is Ready; the webservice pods' ports forward to GitLab itself, and the
        // runner pods verify their token and poll for jobs there.
        let backend = loopback_listener()?;
        let healthy = crate::kube::programs::gitlab::upstream(&kube_sim);
        kube_sim
            .programs
            .shared
            .gitlab
            .attach(crate::kube::programs::gitlab::Attached {
                gitlab: gitlab.clone(),
                backend: backend.local_addr().map_err(|e| e.to_string())?,
                healthy: healthy.clone(),
                poll_interval: crate::gitlab::standin_interval(prepared.pipeline_seconds),
                redial: {
                    let weak = Arc::downgrade(&kube_sim);
                    Arc::new(move |url: &str, namespace: &str, ca: Option<&str>| {
                        let sim = weak.upgrade().ok_or_else(|| "EOF".to_string())?;
                        let host = crate::kube::programs::Host::new(&*sim, &sim.programs);
                        crate::kube::programs::gitlab::reach_url(&host, url, namespace, ca)
                    })
                },
            })?;
        tasks.push(runtime.spawn(crate::http::serve(to_tokio(backend)?, gitlab.clone())));
        tasks.push(runtime.spawn(crate::http::serve(
            to_tokio(gitlab_listener)?,
            Arc::new(crate::kube::programs::gitlab::Gateway::new(
                gitlab.clone(),
                healthy,
            )),
        )));
    } else {
        tasks.push(runtime.spawn(crate::http::serve(
            to_tokio(gitlab_listener)?,
            gitlab.clone(),
        )));
        // A kind cluster's nodes and CoreDNS, its Corefile with phase 2's rewrite.
        if !restored {
            crate::kube::seed_kind(&kube_sim, &crate::kube::phase2_corefile())?;
        }
        // A kept platform's objects are as it left them (the forwards to OpenBao and the
        // registry name the ports platform.json keeps).
        if !restored {
            crate::kube::seed_platform(
                &kube_sim,
                &crate::kube::PlatformTargets {
                    openbao: Some(prepared.bao_addr),
                    registry: Some(registry_addr),
                    // The wildcard certificate phase 2 would have left in the repository the
                    // scripts run in (infra/tls/wildcard/).
                    gateway: crate::kube::seed_gateway::objects(&repository)?,
                },
            )?;
        }
    }
    // Phase 2 gives the runner the wildcard CA (its chart's certsSecretName), so its jobs
    // verify GitLab's certificate with it: the one in the repository (minted above if absent).
    if let Some(token) = &standin_token {
        let ca = repository.join("infra/tls/wildcard/ca.pem");
        gitlab.set_runner_side(
            token,
            crate::gitlab::RunnerSide {
                server_tls_ca: std::fs::read_to_string(ca).ok(),
            },
        );
    }
    let identity = crate::kube::tls::load_or_mint(&prepared.state_dir.join("kube-tls.json"))?;
    let kube = crate::kube::start_with(prepared.kube, kube_sim, identity)?;
    crate::kube::write_kubeconfig(&prepared.kubeconfig, &kube.url, &kube.token, &kube.ca_pem)?;
    std::fs::write(prepared.state_dir.join("kube-ca.pem"), &kube.ca_pem)
        .map_err(|error| format!("cannot write the CA file: {error}"))?;
    let prepared_bare = prepared.bare;
    let platform_state = prepared.state_dir.clone();
    let mut platform = Platform {
        gitlab,
        gitlab_url: prepared.gitlab_url,
        gitlab_admin_token: prepared.gitlab_admin_token,
        kube,
        bao_kind: prepared.bao_kind,
        bao_addr: prepared.bao_addr,
        bao,
        tasks: Vec::new(),
        env,
        keeper: None,
    };
    platform.tasks.append(&mut tasks);
    platform.wait_ready()?;
    if !prepared_bare {
        wait_seeded_gateway(&platform.kube.sim)?;
        if !restored {
            crate::kube::seed_gateway::node_network(&platform.kube.sim, &nodes_dir, &repository)?;
        }
    }
    if restored {
        wait_restarted(&platform.kube.sim);
    }
    // Kept: the store after writes, at most once a second, and when the platform stops.
    platform.keeper = Some(Keeper {
        store_file,
        pushed_file: platform_state.join(PUSHED_IMAGES),
        kind: platform_kind,
        images: image_store,
    });
    let sim = platform.kube.sim.clone();
    let keeper = platform.keeper.clone();
    platform.tasks.push(runtime.spawn(async move {
        let mut saved = (0, usize::MAX, usize::MAX);
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Some(keeper) = &keeper {
                let now = keeper.progress(&sim);
                if now != saved {
                    let (sim, keeper) = (sim.clone(), keeper.clone());
                    if let Ok(Ok(())) = tokio::task::spawn_blocking(move || keeper.save(&sim)).await
                    {
                        saved = now;
                    }
                }
            }
        }
    }));
    Ok(platform)
}

/// Waits (at most 60 s) until the pods of a restarted platform are back as its node's kubelet
/// leaves them: each Ready again, or told otherwise by its own containers (a failed probe, such
/// as a sealed OpenBao's; a start error). The scripts then meet the platform as it was,
/// not its first second of restart; a pod still settling after that is left to their waits.
fn wait_restarted(sim: &crate::kube::KubeSim) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let settling = {
            let cluster = sim.cluster();
            let probes = &cluster.probes;
            cluster.all("pods").iter().any(|pod| {
                let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
                let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
                let ended = matches!(phase, "Succeeded" | "Failed")
                    || pod["metadata"]["deletionTimestamp"].is_string();
                let ready = pod["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                // A crash is not an answer yet: after a restart a pod may crash while
                // what it needs still starts, and comes back once it is there.
                let told = probes
                    .results
                    .get(uid)
                    .is_some_and(|verdicts| verdicts.values().any(|v| !v.passed))
                    || probes.start_errors.contains_key(uid);
                !(ended || ready || (phase == "Running" && told))
            })
        };
        if !settling || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most 30 s) until the seeded gateway's Envoy proxy pod is Ready: phase 2 leaves it
/// running, so phase 3's first port-forward to it must find it.
fn wait_seeded_gateway(sim: &crate::kube::KubeSim) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = sim.cluster().all("pods").iter().any(|pod| {
            pod["metadata"]["namespace"] == "gitlab"
                && pod["metadata"]["labels"]["app.kubernetes.io/name"] == "envoy"
                && pod["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err("the seeded gateway's Envoy proxy pod was not Ready within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Platform {
    pub fn env(&self) -> &[(&'static str, String)] {
        &self.env
    }

    /// Which OpenBao runs, in words.
    pub fn bao_description(&self) -> String {
        if matches!(self.bao, Bao::None) {
            return "none yet: phase 2 installs it into the cluster (reached through a port-forward to svc/openbao)".into();
        }
        match &self.bao_kind {
            BaoKind::Real(path) => format!("a real `bao server -dev` ({})", path.display()),
            BaoKind::StandIn if std::env::var("BPRUN_SIM_BAO").as_deref() == Ok("stand-in") => {
                "bprun's in-process OpenBao stand-in (BPRUN_SIM_BAO=stand-in)".into()
            }
            BaoKind::StandIn => {
                "bprun's in-process OpenBao stand-in (no `bao` binary found)".into()
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        if matches!(self.bao, Bao::None) {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let health = format!("http://{}/v1/sys/health", self.bao_addr);
        loop {
            if let Bao::Real(child) = &mut self.bao
                && let Ok(Some(status)) = child.0.try_wait()
            {
                return Err(format!("`bao server -dev` exited at start ({status})"));
            }
            if matches!(
                bprun_clients::net::http_status(&health, Duration::from_secs(2)),
                Ok(Ok(200))
            ) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("OpenBao did not answer {health} within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The cluster as phase 2 left it, read from the Kubernetes simulator's store: workloads
    /// with their ready replicas, claims with their phase, and Secrets by name (values never
    /// shown; helm's release records and service-account tokens left out), per namespace.
    pub fn kube_summary(&self) -> String {
        use crate::kube::selectors::{FieldSelector, LabelSelector};
        let cluster = self.kube.sim.cluster();
        let everything = LabelSelector::default();
        let any_field = FieldSelector::default();
        let list = |group: &str, version: &str, plural: &str| -> Vec<serde_json::Value> {
            cluster
                .resource(group, version, plural)
                .map(|rt| cluster.list(&rt, None, &everything, &any_field))
                .unwrap_or_default()
        };
        let text = |value: &serde_json::Value| value.as_str().unwrap_or("").to_string();
        let mut lines: Vec<(String, String)> = Vec::new();
        let pods = list("", "v1", "pods");
        // Why an unready workload's first waiting pod waits (`kubectl describe`'s first answer:
        // an image pull, a crash, a missing Secret).
        let waiting = |namespace: &str, selector: &serde_json::Value| -> Option<String> {
            let wanted = selector.as_object()?;
            pods.iter()
                .filter(|pod| text(&pod["metadata"]["namespace"]) == namespace)
                .filter(|pod| {
                    wanted
                        .iter()
                        .all(|(key, value)| pod["metadata"]["labels"][key] == *value)
                })
                .find_map(|pod| {
                    pod["status"]["containerStatuses"]
                        .as_array()?
                        .iter()
                        .find_map(|status| {
                            let state = &status["state"]["waiting"];
                            let reason = state["reason"].as_str()?;
                            // A crash loop's own message is only the back-off: its last exit
                            // says why.
                            let last = &status["lastState"]["terminated"];
                            let message = if reason == "CrashLoopBackOff" && last.is_object() {
                                format!(
                                    "last exit code {}: {}",
                                    last["exitCode"],
                                    text(&last["message"]).trim_end()
                                )
                            } else {
                                text(&state["message"])
                            };
                            (reason != "ContainerCreating").then(|| {
                                format!(
                                    "pod {} container {} {reason}: {message}",
                                    text(&pod["metadata"]["name"]),
                                    text(&status["name"]),
                                )
                            })
                        })
                })
        };
        for (plural, kind) in [
            ("deployments", "Deployment"),
            ("statefulsets", "StatefulSet"),
        ] {
            for object in list("apps", "v1", plural) {
                let namespace = text(&object["metadata"]["namespace"]);
                let wanted = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let ready = object["status"]["readyReplicas"].as_u64().unwrap_or(0);
                let selector = &object["spec"]["selector"]["matchLabels"];
                let why = (ready < wanted)
                    .then(|| waiting(&namespace, selector))
                    .flatten()
                    .map(|reason| format!(" ({reason})"))
                    .unwrap_or_default();
                // What its pods run (not what its template says: an OnDelete StatefulSet's pods
                // keep an older one until they are replaced).
                let images: std::collections::BTreeSet<String> = pods
                    .iter()
                    .filter(|pod| text(&pod["metadata"]["namespace"]) == namespace)
                    .filter(|pod| {
                        selector.as_object().is_some_and(|wanted| {
                            wanted
                                .iter()
                                .all(|(key, value)| pod["metadata"]["labels"][key] == *value)
                        })
                    })
                    .flat_map(|pod| {
                        pod["spec"]["containers"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                    })
                    .map(|container| text(&container["image"]))
                    .collect();
                let runs = if images.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", runs {}",
                        images.into_iter().collect::<Vec<_>>().join(", ")
                    )
                };
                lines.push((
                    namespace,
                    format!(
                        "{kind}/{} {ready}/{wanted} ready{why}{runs}",
                        text(&object["metadata"]["name"])
                    ),
                ));
            }
        }
        for claim in list("", "v1", "persistentvolumeclaims") {
            lines.push((
                text(&claim["metadata"]["namespace"]),
                format!(
                    "PersistentVolumeClaim/{} {}",
                    text(&claim["metadata"]["name"]),
                    text(&claim["status"]["phase"])
                ),
            ));
        }
        for secret in list("", "v1", "secrets") {
            let kind = text(&secret["type"]);
            if kind == "helm.sh/release.v1" || kind == "kubernetes.io/service-account-token" {
                continue;
            }
            let mut keys: Vec<String> = secret["data"]
                .as_object()
                .map(|data| data.keys().cloned().collect())
                .unwrap_or_default();
            keys.sort();
            lines.push((
                text(&secret["metadata"]["namespace"]),
                format!(
                    "Secret/{} ({})",
                    text(&secret["metadata"]["name"]),
                    keys.join(", ")
                ),
            ));
        }
        lines.sort();
        let mut out = String::new();
        let mut current = None;
        for (namespace, line) in lines {
            if current.as_deref() != Some(namespace.as_str()) {
                out.push_str(&format!("namespace {namespace}\n"));
                current = Some(namespace);
            }
            out.push_str(&format!("  {line}\n"));
        }
        out
    }

    /// The end state as an operator wants to see it after a rehearsal: the group, projects
    /// with ids, CI/CD variables by key (values masked), CI files' hashes, pipelines. Read with
    /// bprun's own GitLab client (timeouts, retries, pagination).
    pub fn end_state(&self) -> Result<String, String> {
        use bprun_clients::gitlab::{GitlabClient, GitlabSettings};
        let client = GitlabClient::new(GitlabSettings {
            url: self.gitlab_url.clone(),
            token: Some(bprun_clients::secret::Secret::new(
                self.gitlab_admin_token.clone(),
            )),
            ca_file: None,
            timeout: Duration::from_secs(10),
            base_backoff: Duration::from_millis(200),
        })
        .map_err(|error| error.message)?;
        let never = || false;
        let all = |path: &str| client.get_all(path, &never).map_err(|error| error.message);
        let mut out = String::new();
        let groups = all("groups")?;
        if groups.is_empty() {
            out.push_str("GitLab: no groups\n");
            return Ok(out);
        }
        for group in &groups {
            out.push_str(&format!(
                "group {} (id {}, {})\n",
                group["full_path"].as_str().unwrap_or(""),
                group["id"],
                group["visibility"].as_str().unwrap_or("")
            ));
            let projects = all(&format!(
                "groups/{}/projects?order_by=id&sort=asc",
                group["id"]
            ))?;
            for project in &projects {
                let id = &project["id"];
                out.push_str(&format!(
                    "  project {} (id {})\n",
                    project["path_with_namespace"].as_str().unwrap_or(""),
                    id
                ));
                let mut keys: Vec<String> = all(&format!("projects/{id}/variables"))?
                    .iter()
                    .map(|v| {
                        format!(
                            "{}{}",
                            v["key"].as_str().unwrap_or(""),
                            match (v["masked"] == true, v["hidden"] == true) {
                                (_, true) => " (masked, hidden)",
                                (true, false) => " (masked)",
                                _ => "",
                            }
                        )
                    })
                    .collect();
                keys.sort();
                out.push_str(&format!(
                    "    variables (values hidden): {}\n",
                    keys.join(", ")
                ));
                let file = client
                    .find(
                        &format!("projects/{id}/repository/files/.gitlab-ci.yml?ref=main"),
                        &never,
                    )
                    .map_err(|error| error.message)?;
                match file.as_ref().and_then(|f| f["content"].as_str()) {
                    Some(content) => {
                        use base64::Engine;
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(content)
                            .map_err(|error| format!(".gitlab-ci.yml of project {id}: {error}"))?;
                        let hex = &bprun_clients::digest::sha256_hex(&bytes)[..16];
                        out.push_str(&format!("    .gitlab-ci.yml sha256 {hex}…\n"));
                    }
                    None => out.push_str("    .gitlab-ci.yml: none on main\n"),
                }
                let pipelines = client
                    .get(&format!("projects/{id}/pipelines?per_page=5"), &never)
                    .map_err(|error| error.message)?;
                let pipelines = pipelines.as_array().cloned().unwrap_or_default();
                let listed: Vec<String> = pipelines
                    .iter()
                    .map(|p| {
                        format!(
                            "#{} {} ({})",
                            p["id"],
                            p["status"].as_str().unwrap_or(""),
                            p["source"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                out.push_str(&format!(
                    "    pipelines: {}\n",
                    if listed.is_empty() {
                        "none".to_string()
                    } else {
                        listed.join(", ")
                    }
                ));
                // A pipeline GitLab could not even start says why (e.g. a missing include).
                for pipeline in pipelines.iter().filter(|p| p["status"] == "failed") {
                    let detail = client
                        .get(
                            &format!("projects/{id}/pipelines/{}", pipeline["id"]),
                            &never,
                        )
                        .map_err(|error| error.message)?;
                    if let Some(errors) = detail["yaml_errors"].as_str().filter(|e| !e.is_empty()) {
                        out.push_str(&format!(
                            "    pipeline #{} yaml errors: {errors}\n",
                            pipeline["id"]
                        ));
                    }
                }
            }
        }
        Ok(out)
    }
}
