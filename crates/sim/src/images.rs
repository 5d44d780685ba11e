//! Image references and the platform's registry, as every simulator names them: the
//! Kubernetes nodes pull images, CI jobs run and push them.

/// The repository of an image reference: without the tag and the digest
/// (`quay.io/openbao/openbao:2.2.0` -> `quay.io/openbao/openbao`; a registry port stays).
pub fn repository(image: &str) -> &str {
    split_tag(image).0
}

/// `(repository, tag)` of an image reference without its digest; the tag is `None` when the
/// reference has none (the colon searched for is after the last `/`, so a registry port stays).
fn split_tag(image: &str) -> (&str, Option<&str>) {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_slash = without_digest.rfind('/').map(|at| at + 1).unwrap_or(0);
    match without_digest[last_slash..].rfind(':') {
        Some(colon) => (
            &without_digest[..last_slash + colon],
            Some(&without_digest[last_slash + colon + 1..]),
        ),
        None => (without_digest, None),
    }
}

/// An image's repository with Docker Hub's implied names spelled out
/// (`bitnamilegacy/redis` -> `docker.io/bitnamilegacy/redis`, `redis` -> `docker.io/library/redis`).
pub fn canonical_repository(image: &str) -> String {
    let name = repository(image);
    let has_registry = !split_host(name).0.is_empty();
    match (has_registry, name.contains('/')) {
        (true, _) => name.to_string(),
        (false, true) => format!("docker.io/{name}"),
        (false, false) => format!("docker.io/library/{name}"),
    }
}

/// The tag of an image reference (`latest` when none).
pub fn tag(image: &str) -> &str {
    split_tag(image).1.unwrap_or("latest")
}

/// The public registries a kind node pulls from through the host's network. Any repository
/// under them pulls (what exists there is not known here), except on Docker Hub, below.
pub const PUBLIC_REGISTRIES: &[&str] = &[
    "docker.io",
    "quay.io",
    "ghcr.io",
    "gcr.io",
    "registry.k8s.io",
    "registry.gitlab.com",
    "public.ecr.aws",
    "mcr.microsoft.com",
    "cgr.dev",
    "docker.elastic.co",
];

/// Docker Hub's official images (`docker.io/library/NAME`, what a bare `NAME` means): every
/// other `docker.io/library/` name does not exist.
pub const OFFICIAL_IMAGES: &[&str] = &[
    "alpine",
    "almalinux",
    "amazonlinux",
    "bash",
    "buildpack-deps",
    "busybox",
    "caddy",
    "cassandra",
    "centos",
    "clojure",
    "consul",
    "couchdb",
    "debian",
    "docker",
    "eclipse-temurin",
    "elasticsearch",
    "erlang",
    "fedora",
    "gcc",
    "golang",
    "gradle",
    "haproxy",
    "haskell",
    "httpd",
    "influxdb",
    "julia",
    "kibana",
    "mariadb",
    "maven",
    "memcached",
    "mongo",
    "mysql",
    "nats",
    "neo4j",
    "nginx",
    "node",
    "openjdk",
    "oraclelinux",
    "perl",
    "php",
    "postgres",
    "python",
    "rabbitmq",
    "redis",
    "registry",
    "rockylinux",
    "ruby",
    "rust",
    "swift",
    "tomcat",
    "traefik",
    "ubuntu",
    "vault",
    "wordpress",
    "zookeeper",
];

/// Why a node cannot pull a public image (containerd's words after `failed to pull and unpack
/// image "...": `), or `None` when it can: a registry host that is not a public registry does
/// not resolve on the node (`resolver`, the node's DNS server; `localhost/NAME` is an image loaded
/// into the node, as `kind load` names it), a Docker Hub `library/` name that
/// is not an official image is refused as a repository that does not exist. The platform's own
/// registry is [`PlatformRegistry`]'s to decide, before this.
pub fn public_pull_error(image: &str, resolver: &str) -> Option<String> {
    let (host, rest) = split_host(image);
    let reference = with_tag(rest);
    let (path, tag) = reference
        .rsplit_once(':')
        .unwrap_or((reference.as_str(), "latest"));
    if host.is_empty() || host == "docker.io" || host == "index.docker.io" {
        let path = if path.contains('/') {
            path.to_string()
        } else {
            format!("library/{path}")
        };
        let official = path
            .strip_prefix("library/")
            .is_none_or(|name| OFFICIAL_IMAGES.contains(&name));
        return (!official).then(|| {
            format!("failed to resolve reference \"docker.io/{path}:{tag}\": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed")
        });
    }
    // `localhost/NAME` (no port) is how `kind load docker-image` names an image built on the
    // host: it is in the node's image store, not pulled.
    if PUBLIC_REGISTRIES.contains(&host) || host == "localhost" {
        return None;
    }
    let name = host.split(':').next().unwrap_or(host);
    Some(format!(
        "failed to resolve reference \"{image}\": failed to do request: Head \"https://{host}/v2/{path}/manifests/{tag}\": dial tcp: lookup {name} on {resolver}: no such host"
    ))
}

/// The platform's container registry (GitLab's) as the cluster sees it. Every name serves the
/// same storage, but a node resolves only `node_hosts` (phase 2 pins `registry.<domain>` in
/// every node's /etc/hosts; cluster DNS names such as `gitlab-registry.gitlab.svc:5000` resolve
/// in pods, not on nodes), and nothing listens on a node's loopback. An image under a node host
/// pulls only once a CI job pushed it.
#[derive(Clone, Default)]
pub struct PlatformRegistry {
    pub node_hosts: Vec<String>,
    pub cluster_hosts: Vec<String>,
    /// Pushed images as `path:tag`, without the host.
    pub pushed: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// How a CI job's pod dials a registry name (`name`, port): the cluster's network, attached
    /// by the platform once its Kubernetes simulator runs; unset, every name is reached.
    pub network: std::sync::Arc<std::sync::Mutex<Option<PodDial>>>,
    /// The TLS handshake a CI job's pod makes once connected, attached with `network`; unset,
    /// every certificate is trusted.
    pub tls: std::sync::Arc<std::sync::Mutex<Option<PodTls>>>,
}

pub use crate::network::{PodDial, PodTls};

impl std::fmt::Debug for PlatformRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlatformRegistry")
            .field("node_hosts", &self.node_hosts)
            .field("cluster_hosts", &self.cluster_hosts)
            .finish_non_exhaustive()
    }
}

impl PlatformRegistry {
    /// Why a CI job's pod cannot reach `name:port` (`None`: it can, or no network is attached).
    pub fn job_dial(&self, name: &str, port: u16) -> Option<crate::network::DialError> {
        let dial = self
            .network
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        dial(name, port).err()
    }

    /// Why a CI job's pod does not trust what `name:port` presents, verified against `ca` (Go's
    /// words; `None`: it does, or no network is attached).
    pub fn job_handshake(&self, name: &str, port: u16, ca: Option<&str>) -> Option<String> {
        let tls = self.tls.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        tls(name, port, ca).err()
    }

    /// The registry names a CI job's pod cannot reach, each with why (Go's words): what kaniko
    /// meets before it pushes.
    pub fn unreachable_from_jobs(&self) -> Vec<(String, String)> {
        self.hosts()
            .into_iter()
            .filter_map(|host| {
                let (name, port) = match host.rsplit_once(':') {
                    Some((name, port)) => (name.to_string(), port.parse().unwrap_or(443)),
                    None => (host.clone(), 443),
                };
                self.job_dial(&name, port)
                    .map(|why| (host.clone(), why.go_words(&name, port)))
            })
            .collect()
    }

    /// Every name of the registry (where a job may push).
    pub fn hosts(&self) -> Vec<String> {
        self.node_hosts
            .iter()
            .chain(&self.cluster_hosts)
            .cloned()
            .collect()
    }

    /// Whether `image` names this registry (or a loopback one, which is nothing a node reaches).
    pub fn serves(&self, image: &str) -> bool {
        let host = split_host(image).0;
        let loopback = ["127.0.0.1:", "localhost:", "[::1]:"];
        self.hosts().iter().any(|known| known == host)
            || loopback.iter().any(|prefix| host.starts_with(prefix))
    }

    /// Records `image` as pushed when it names this registry; false for another registry.
    pub fn record_push(&self, image: &str) -> bool {
        let (host, rest) = split_host(image);
        if !self.hosts().iter().any(|known| known == host) {
            return false;
        }
        self.pushed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(with_tag(rest));
        true
    }

    /// Why a node cannot pull `image` (containerd's words after `failed to pull and unpack
    /// image "...": `), or `None` when it can or the image is not this registry's business.
    /// `reach(host, manifest URL)` says why the node cannot reach a registry name it may pull
    /// from (its `/etc/hosts`, the route, the certificate: `kube::pulls`).
    pub fn pull_error(
        &self,
        image: &str,
        reach: &dyn Fn(&str, &str) -> Result<(), String>,
    ) -> Option<String> {
        let (host, rest) = split_host(image);
        let manifest = || {
            let reference = with_tag(rest);
            let (path, tag) = reference.rsplit_once(':').unwrap_or((&reference, "latest"));
            format!("https://{host}/v2/{path}/manifests/{tag}")
        };
        if self.node_hosts.iter().any(|known| known == host) {
            if let Err(why) = reach(host, &manifest()) {
                return Some(format!("failed to resolve reference \"{image}\": {why}"));
            }
            let pushed = self.pushed.lock().unwrap_or_else(|p| p.into_inner());
            return (!pushed.contains(&with_tag(rest)))
                .then(|| format!("failed to resolve reference \"{image}\": {image}: not found"));
        }
        if self.cluster_hosts.iter().any(|known| known == host) {
            let name = host.split(':').next().unwrap_or(host);
            return Some(format!(
                "failed to resolve reference \"{image}\": failed to do request: Head \"{}\": dial tcp: lookup {name}: no such host",
                manifest()
            ));
        }
        let loopback = ["127.0.0.1:", "localhost:", "[::1]:"];
        if loopback.iter().any(|prefix| host.starts_with(prefix)) {
            let port = host.rsplit(':').next().unwrap_or("443");
            return Some(format!(
                "failed to resolve reference \"{image}\": failed to do request: Head \"{}\": dial tcp 127.0.0.1:{port}: connect: connection refused",
                manifest()
            ));
        }
        None
    }
}

/// `(registry host, rest)` of an image reference whose first part names a registry (it has a
/// `.` or a `:` or is `localhost`); `("", image)` for Docker Hub names.
fn split_host(image: &str) -> (&str, &str) {
    match image.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first, rest)
        }
        _ => ("", image),
    }
}

/// `path:tag`, with `latest` when the reference has no tag.
fn with_tag(reference: &str) -> String {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    if last.contains(':') || reference.contains('@') {
        reference.to_string()
    } else {
        format!("{reference}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_repositories_drop_tags_and_digests_and_spell_out_docker_hub() {
        assert_eq!(
            repository("quay.io/openbao/openbao:2.2.0"),
            "quay.io/openbao/openbao"
        );
        assert_eq!(repository("localhost:5000/app:1"), "localhost:5000/app");
        assert_eq!(repository("localhost:5000/app"), "localhost:5000/app");
        assert_eq!(
            repository("quay.io/minio/minio@sha256:abc"),
            "quay.io/minio/minio"
        );
        assert_eq!(
            canonical_repository("bitnamilegacy/redis:7.2.5-debian-12-r0"),
            "docker.io/bitnamilegacy/redis"
        );
        assert_eq!(canonical_repository("redis"), "docker.io/library/redis");
        assert_eq!(
            canonical_repository("docker.io/bitnamilegacy/redis:7"),
            "docker.io/bitnamilegacy/redis"
        );
    }

    #[test]
    fn tags_default_to_latest() {
        assert_eq!(tag("alpine/helm:3.16.4"), "3.16.4");
        assert_eq!(tag("localhost:5000/x"), "latest");
        assert_eq!(tag("quay.io/minio/minio:1@sha256:abc"), "1");
    }
}
