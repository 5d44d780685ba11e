//! The known images, one row each: what runs in them (the program's name) and how their
//! containers behave for the kubelet. The programs read their row ([`super::Program::image`]),
//! and the kubelet's probe book is built from the same rows, so an image's behaviour is written
//! once, here.

/// One known image family and how its containers behave.
#[derive(Debug, PartialEq, Eq)]
pub struct Image {
    /// A name for messages ("openbao", "postgresql").
    pub name: &'static str,
    /// The image repositories, as `canonical_repository` spells them.
    pub repositories: &'static [&'static str],
    /// An exec `readinessProbe` of a container of this image runs through the program's `exec`
    /// (Ready only when it passes); otherwise the container is Ready once it runs.
    pub probes_readiness: bool,
    /// The container's process is what the program's `start` starts, so that a failed `start`
    /// is the container exiting: the kubelet restarts it after a back-off (`CrashLoopBackOff`,
    /// the error as the last state's message, `start` called again), and the container is Ready
    /// only once `start` succeeded (GitLab's webservice checking its database, GitLab Runner
    /// verifying its token). Otherwise a failed `start` is only an event on a running pod.
    pub exits_when_start_fails: bool,
    /// A pod that runs to completion (`restartPolicy: Never` or `OnFailure`) ends when the
    /// program's run of its command ends (its exit code, its log), rather than at once.
    pub runs_to_its_end: bool,
}

impl Image {
    /// A row whose containers are Ready once they run, whose start failures are events only
    /// and whose run-to-completion pods end at once; the builders below say otherwise.
    pub const fn new(name: &'static str, repositories: &'static [&'static str]) -> Image {
        Image {
            name,
            repositories,
            probes_readiness: false,
            exits_when_start_fails: false,
            runs_to_its_end: false,
        }
    }

    pub const fn probed(self) -> Image {
        Image {
            probes_readiness: true,
            ..self
        }
    }

    pub const fn exits_when_start_fails(self) -> Image {
        Image {
            exits_when_start_fails: true,
            ..self
        }
    }

    pub const fn runs_to_its_end(self) -> Image {
        Image {
            runs_to_its_end: true,
            ..self
        }
    }
}

/// GitLab's webservice images (the first two of [`GITLAB_WEBSERVICE`]'s; the workhorse's are the
/// same program's).
pub const WEBSERVICE_IMAGES: &[&str] = &[
    "registry.gitlab.com/gitlab-org/build/cng/gitlab-webservice-ee",
    "registry.gitlab.com/gitlab-org/build/cng/gitlab-webservice-ce",
];

/// A real `bao server`; the chart's `bao status` readiness probe decides Ready.
pub const OPENBAO: Image = Image::new("openbao", &["quay.io/openbao/openbao"])
    .probed()
    .exits_when_start_fails();
/// A real PostgreSQL, bootstrapped as the CloudNativePG operator does.
pub const POSTGRESQL: Image =
    Image::new("postgresql", &["ghcr.io/cloudnative-pg/postgresql"]).exits_when_start_fails();
/// A real `redis-server`; the chart's ping scripts decide Ready.
pub const REDIS: Image = Image::new(
    "redis",
    &["docker.io/bitnamilegacy/redis", "docker.io/bitnami/redis"],
)
.probed()
.exits_when_start_fails();
/// `mc` against the buckets on MinIO's volume.
pub const MINIO: Image = Image::new("minio", &["quay.io/minio/minio", "quay.io/minio/mc"]);
/// GitLab's webservice and workhorse: the GitLab simulator, once its database answers.
pub const GITLAB_WEBSERVICE: Image = Image::new(
    "gitlab-webservice",
    &[
        "registry.gitlab.com/gitlab-org/build/cng/gitlab-webservice-ee",
        "registry.gitlab.com/gitlab-org/build/cng/gitlab-webservice-ce",
        "registry.gitlab.com/gitlab-org/build/cng/gitlab-workhorse-ee",
        "registry.gitlab.com/gitlab-org/build/cng/gitlab-workhorse-ce",
    ],
)
.exits_when_start_fails();
/// GitLab's container registry's root.
pub const GITLAB_REGISTRY: Image = Image::new(
    "gitlab-container-registry",
    &["registry.gitlab.com/gitlab-org/build/cng/gitlab-container-registry"],
);
/// GitLab Runner, registered with its token and polling for jobs.
pub const GITLAB_RUNNER: Image = Image::new(
    "gitlab-runner",
    &["registry.gitlab.com/gitlab-org/gitlab-runner"],
)
.exits_when_start_fails();
/// CoreDNS serving the Corefile it loaded (a Corefile it cannot parse crash-loops it). The image
/// has no shell or tools (distroless): an exec gets containerd's "not found".
pub const COREDNS: Image = Image::new(
    "coredns",
    &[
        "registry.k8s.io/coredns/coredns",
        "docker.io/coredns/coredns",
    ],
)
.exits_when_start_fails();
/// Envoy routing the Gateway's listeners to the Services' ready pods.
pub const ENVOY: Image = Image::new("envoy", &["docker.io/envoyproxy/envoy"]);
/// guestbook-go, its entries in memory, under the names the guestbook's pipeline pushes (the
/// registry's two names).
pub const GUESTBOOK: Image = Image::new(
    "guestbook",
    &[
        "registry.local.example.net/blueprint-apps/guestbook",
        "gitlab-registry.gitlab.svc:5000/blueprint-apps/guestbook",
    ],
);
/// nginx's default server.
pub const NGINX: Image = Image::new("nginx", &["docker.io/library/nginx"]);
/// busybox's and alpine's shell running a pod's command to its end.
pub const SHELL: Image = Image::new(
    "shell",
    &["docker.io/library/busybox", "docker.io/library/alpine"],
)
.runs_to_its_end();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webservice_images_are_the_webservice_programs() {
        assert_eq!(&GITLAB_WEBSERVICE.repositories[..2], WEBSERVICE_IMAGES);
    }

    #[test]
    fn no_image_belongs_to_two_programs() {
        let all = [
            &OPENBAO,
            &POSTGRESQL,
            &GITLAB_WEBSERVICE,
            &GITLAB_REGISTRY,
            &GITLAB_RUNNER,
            &REDIS,
            &MINIO,
            &COREDNS,
            &ENVOY,
            &GUESTBOOK,
            &NGINX,
            &SHELL,
        ];
        let mut seen = std::collections::BTreeMap::new();
        for image in all {
            for repository in image.repositories {
                assert_eq!(
                    seen.insert(*repository, image.name),
                    None,
                    "{repository} is {}'s and {}'s",
                    image.name,
                    seen[repository]
                );
            }
        }
    }
}
