//! CI jobs that really run: the GitLab analogue of the Kubernetes simulator's programs. When
//! the simulator knows a job's image ([`runtime_for`]), the job's script runs as GitLab Runner
//! runs it: a POSIX `sh` in a working copy of the pipeline's commit, with GitLab's variables
//! (predefined, YAML, the project's CI/CD variables; file-type ones written to files) and
//! nothing of the host's environment, the tools the image has on its `PATH`, a timeout, and a
//! trace in the runner's format with masked values replaced by `[MASKED]`.
//!
//! Images it knows:
//! - `alpine/helm:3.*` (and `4.*`): `sh`, basic utilities, and the real helm of that major
//!   (`helm3` on the simulator's `PATH` presented as `helm` for 3, `helm` for 4);
//! - `alpine:*`, `busybox:*`: `sh` and basic utilities;
//! - `gcr.io/kaniko-project/executor:*debug`: `sh`, basic utilities and a stand-in for
//!   `/kaniko/executor` ([`KANIKO_EXECUTOR`]) that checks what kaniko checks before a build, in
//!   kaniko's words, and records the images it would push.
//!
//! A job whose image the simulator does not know is played, as before (see docs/gitlab-sim.md).
//!
//! Where it runs: the pod sandbox of `crate::sandbox`, as the Kubernetes executor runs a job in
//! a pod of the runner's namespace: the image's userland (busybox's, as alpine's and kaniko's
//! debug images have), the working copy under `/builds`, the stage scripts under `/scripts`,
//! the image's tools at their paths (`/usr/bin/helm`, `/kaniko/executor`), and the pod's own
//! network namespace wired to the cluster when the platform has one ([`Settings::network`]):
//! names resolve through the cluster's DNS, connections reach Services' ready endpoints,
//! the host's loopback and the outside are unreachable. Without a cluster, no network at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::sandbox::{Mount, PodNetwork};

/// GitLab's default job timeout (a project's `build_timeout`, 60 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// GitLab Runner's default `output_limit` (4096 KiB): the trace stops growing beyond it.
pub const TRACE_LIMIT: usize = 4096 * 1024;

/// How the GitLab simulator treats jobs (part of its `Config`).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Play every job (the behaviour before jobs ran: `exit N` fails a job, nothing runs), for
    /// tests about GitLab's API and convergence rather than what jobs do. Set by the
    /// environment variable `BPRUN_SIM_PLAY_JOBS=1` ([`Settings::from_env`]).
    pub play: bool,
    /// The runner's default image, for jobs without `image:` (the platform's runner is
    /// configured with `alpine:3.20`); `None`: such jobs are played.
    pub default_image: Option<String>,
    /// The registry's address GitLab gives jobs (`CI_REGISTRY`); `None`: no registry, as a
    /// GitLab without one.
    pub registry: Option<String>,
    /// The platform's registry, shared with the Kubernetes simulator's nodes: kaniko pushes
    /// only to its names, and what it pushes becomes pullable. `None`: kaniko's pushes go
    /// nowhere and any destination is accepted.
    pub image_store: Option<crate::images::PlatformRegistry>,
    /// GitLab's host as its external URL names it (`gitlab.<domain>`), which a job's pod dials
    /// to fetch the sources through the platform's network (`image_store.network`); `None`: the
    /// fetch always reaches GitLab.
    pub clone_host: Option<String>,
    /// The cluster network a job's pod joins, attached by the platform once its cluster
    /// exists; empty: jobs have no network.
    pub network: JobNetwork,
}

/// The cluster a job's pod is wired to ([`crate::netns::Fabric`]), attached later.
pub type JobNetwork = std::sync::Arc<std::sync::Mutex<Option<JobFabric>>>;

/// The cluster seen from the runner's namespace.
#[derive(Clone)]
pub struct JobFabric(pub std::sync::Arc<dyn crate::netns::Fabric>);

impl std::fmt::Debug for JobFabric {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("JobFabric")
    }
}

impl Settings {
    /// Settings with `play` from `BPRUN_SIM_PLAY_JOBS` (`1` or `true`).
    pub fn from_env() -> Settings {
        Settings {
            play: std::env::var("BPRUN_SIM_PLAY_JOBS")
                .is_ok_and(|value| value == "1" || value.eq_ignore_ascii_case("true")),
            ..Settings::default()
        }
    }
}

/// What a known image provides to a job's script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// `sh` and basic utilities (alpine, busybox).
    Shell,
    /// `sh`, basic utilities and a real helm binary presented as `helm`.
    Helm { helm: PathBuf },
    /// kaniko's debug image: busybox `sh` and the `/kaniko/executor` stand-in.
    Kaniko,
}

/// A CI/CD or predefined variable as the job receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobVariable {
    pub key: String,
    pub value: String,
    /// Masked (or hidden): the value never appears in the trace.
    pub masked: bool,
    /// File-type: the value is written to a file and the variable holds its path.
    pub file: bool,
}

impl JobVariable {
    pub fn plain(key: &str, value: &str) -> JobVariable {
        JobVariable {
            key: key.to_string(),
            value: value.to_string(),
            masked: false,
            file: false,
        }
    }
}

/// Everything needed to run one job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub id: u64,
    pub name: String,
    pub image: String,
    pub runtime: Runtime,
    pub before_script: Vec<String>,
    pub script: Vec<String>,
    pub after_script: Vec<String>,
    /// Lowest precedence first: a later variable with the same key wins.
    pub variables: Vec<JobVariable>,
    pub timeout: Duration,
    /// The project's bare repository and the pipeline's commit.
    pub repository: PathBuf,
    pub sha: String,
    pub reference: String,
    /// `group/project`: the working copy lives in `builds/<project_path>`.
    pub project_path: String,
    pub runner_description: String,
    /// The registry names kaniko can push to (empty: any).
    pub registry_hosts: Vec<String>,
    /// Those of them the job's pod cannot reach, with why in Go's words (the cluster's DNS and
    /// Services decide: a missing CoreDNS rewrite makes `registry.<domain>` unknown).
    pub unreachable_registries: Vec<(String, String)>,
    /// The registry names served over plain HTTP (the in-cluster registry's Service).
    pub plain_http_registries: Vec<String>,
    /// `host=SHA-256` of each CA (PEM text, as a file holds it) that the job could name and
    /// that verifies what `host` presents (a registry, or GitLab's token realm): kaniko's
    /// `--registry-certificate HOST=FILE` trusts the registry only with such a file. The
    /// candidates are the CAs the job is given (the runner's `CI_SERVER_TLS_CA_FILE`); another
    /// file, even one that would verify, is refused.
    pub registry_cas: Vec<String>,
    /// The host of GitLab's registry token realm (`https://HOST/jwt/auth`: GitLab's external
    /// URL), which kaniko fetches a token from before it pushes to GitLab's registry, over the
    /// destination's transport; `None` without one (a bare GitLab simulator).
    pub token_realm: Option<String>,
    /// Why the job's pod cannot fetch the sources (git's `fatal: unable to access ...` line):
    /// GitLab's external host does not resolve or answer inside the cluster.
    pub fetch_error: Option<String>,
    /// The cluster the job's pod is wired to (`None`: no network).
    pub network: Option<JobFabric>,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub success: bool,
    pub trace: String,
    /// Image references the job pushed (kaniko's destinations).
    #[serde(default)]
    pub pushed: Vec<String>,
}

/// A project (or group, or instance) CI/CD variable, as the job assembly reads it.
#[derive(Debug, Clone)]
pub struct CiCdVariable {
    pub key: String,
    pub value: String,
    /// Masked or hidden.
    pub masked: bool,
    pub file: bool,
    pub protected: bool,
    pub environment_scope: String,
}

/// Whether an environment scope (`*`, `production`, `review/*`) covers the job's environment:
/// `*` covers every job; any other scope only a job whose `environment:` matches it.
pub fn scope_matches(scope: &str, environment: Option<&str>) -> bool {
    if scope == "*" {
        return true;
    }
    let Some(environment) = environment else {
        return false;
    };
    // `*` in a scope is a wildcard (GitLab's `environment_scope` matching).
    let pattern = format!(
        "^{}$",
        scope
            .split('*')
            .map(regex::escape)
            .collect::<Vec<_>>()
            .join(".*")
    );
    regex::Regex::new(&pattern).is_ok_and(|regex| regex.is_match(environment))
}

/// The job's variables in GitLab's precedence, lowest first (a later key wins): predefined
/// variables, then the YAML `variables:` (the file's, then the job's), then the CI/CD
/// variables (instance, group, project, as the caller orders them). A protected CI/CD variable
/// reaches only jobs of protected refs; an environment-scoped one only jobs of a matching
/// environment, and a specific scope wins over `*`.
pub fn job_variables(
    predefined: Vec<JobVariable>,
    yaml: &[(String, String)],
    cicd: &[CiCdVariable],
    protected_ref: bool,
    environment: Option<&str>,
) -> Vec<JobVariable> {
    let mut variables = predefined;
    variables.extend(
        yaml.iter()
            .map(|(key, value)| JobVariable::plain(key, value)),
    );
    let mut reaching: Vec<&CiCdVariable> = cicd
        .iter()
        .filter(|variable| protected_ref || !variable.protected)
        .filter(|variable| scope_matches(&variable.environment_scope, environment))
        .collect();
    // Stable: `*` first, so a variable of the job's own scope overrides it.
    reaching.sort_by_key(|variable| variable.environment_scope != "*");
    variables.extend(reaching.into_iter().map(|variable| JobVariable {
        key: variable.key.clone(),
        value: variable.value.clone(),
        masked: variable.masked,
        file: variable.file,
    }));
    variables
}

/// What the simulator runs for `image`: `Ok(None)` for an image it does not know (the job is
/// played); `Err` for a known image whose tool is missing on this machine.
pub fn runtime_for(image: &str) -> Result<Option<Runtime>, String> {
    let repository = crate::images::canonical_repository(image);
    let tag = crate::images::tag(image);
    let runtime = match repository.as_str() {
        "docker.io/library/alpine" | "docker.io/library/busybox" => Runtime::Shell,
        "docker.io/alpine/helm" => {
            let tool = match tag.split('.').next() {
                Some("3") => "helm3",
                Some("4") => "helm",
                _ => return Ok(None),
            };
            let helm = crate::tools::on_path(tool).ok_or_else(|| {
                format!("the simulator runs image {image} with the real {tool}, which is not on its PATH")
            })?;
            Runtime::Helm { helm }
        }
        "gcr.io/kaniko-project/executor" if tag.contains("debug") => Runtime::Kaniko,
        _ => return Ok(None),
    };
    Ok(Some(runtime))
}

/// A job's `timeout:` (`1h 30m`, `10 minutes`, `3600`), as GitLab's chronic duration reads the
/// common forms; `None` when it cannot be read.
pub fn parse_timeout(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text).ok()
}

/// The stand-in for kaniko's `/kaniko/executor` (v1.23): parses its flags, fails as kaniko
/// fails before a build (no destination, an unknown flag, a Dockerfile that is not there, a
/// destination that is not an image reference, a `COPY` source missing from the context), and
/// otherwise records each destination as pushed (in `.pushed` next to itself). Messages are
/// kaniko's (cobra's `Error: ...` and the `error ...` lines its `exit` prints).
pub const KANIKO_EXECUTOR: &str = r#"#!/bin/sh
usage() {
  echo "Usage:"
  echo "  executor [flags]"
  echo "  executor [command]"
}
set -f
registries="@REGISTRIES@"
plain_http="@PLAIN_HTTP@"
verifying_cas="@REGISTRY_CAS@"
realm="@REALM@"
unreachable="@UNREACHABLE@"
insecure_registries=
skip_tls=
skip_tls_registries=
certified_registries=
scheme=https
context=/workspace/
dockerfile=Dockerfile
destinations=
no_push=
while [ $# -gt 0 ]; do
  flag="$1"
  case "$flag" in
    --*=*) name="${flag%%=*}"; value="${flag#*=}"; has_value=1 ;;
    -?=*) name="${flag%%=*}"; value="${flag#*=}"; has_value=1 ;;
    *) name="$flag"; value=; has_value= ;;
  esac
  case "$name" in
    --context|-c|--dockerfile|-f|--destination|-d|--build-arg|--cache-repo|--cache-dir|--target|--label|--registry-mirror|--verbosity|-v|--tar-path|--digest-file|--image-name-with-digest-file|--image-name-tag-with-digest-file|--snapshot-mode|--custom-platform|--cache-ttl|--registry-certificate|--registry-map|--kaniko-dir|--ignore-path|--push-retry|--image-fs-extract-retry|--git|--log-format|--log-timestamp|--oci-layout-path|--insecure-registry|--skip-tls-verify-registry)
      if [ -z "$has_value" ]; then
        if [ $# -lt 2 ]; then
          echo "Error: flag needs an argument: $name"
          usage
          exit 1
        fi
        shift
        value="$1"
      fi
      case "$name" in
        --context|-c) context="${value#dir://}" ;;
        --dockerfile|-f) dockerfile="$value" ;;
        --destination|-d) destinations="$destinations $value" ;;
        --insecure-registry) insecure_registries="$insecure_registries $value" ;;
        --skip-tls-verify-registry) skip_tls_registries="$skip_tls_registries $value" ;;
        --registry-certificate) certified_registries="$certified_registries $value" ;;
      esac
      ;;
    --no-push) no_push=1 ;;
    --insecure) scheme=http ;;
    --skip-tls-verify) skip_tls=1 ;;
    --insecure-pull|--skip-tls-verify-pull|--cache|--cleanup|--single-snapshot|--reproducible|--use-new-run|--cache-copy-layers|--cache-run-layers|--compressed-caching|--skip-unused-stages|--ignore-var-run|--force|--no-push-cache|--push-ignore-immutable-tag-errors|--skip-push-permission-check) ;;
    version) echo "Kaniko version :  v1.23.2"; exit 0 ;;
    *)
      echo "Error: unknown flag: $name"
      usage
      exit 1
      ;;
  esac
  shift
done
if [ -z "$no_push" ] && [ -z "$destinations" ]; then
  echo "Error: you must provide --destination, or use --no-push"
  usage
  exit 1
fi
if [ -f "$dockerfile" ]; then
  dockerfile_path="$dockerfile"
elif [ -f "$context/$dockerfile" ]; then
  dockerfile_path="$context/$dockerfile"
else
  echo "Error: error resolving dockerfile path: please provide a valid path to a Dockerfile within the build context with --dockerfile"
  usage
  exit 1
fi
for destination in $destinations; do
  case "${destination##*/}" in *:*) repository="${destination%:*}" ;; *) repository="$destination" ;; esac
  path="${repository#*/}"
  host="${destination%%/*}"
  why=$(printf '%s\n' "$unreachable" | awk -F'|' -v host="$host" '$1 == host { print $2; exit }')
  if [ -n "$why" ]; then
    echo "error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"$destination\": creating push check transport for $host failed: Get \"https://$host/v2/\": $why"
    exit 1
  fi
  if [ -n "$registries" ]; then
    case " $registries " in
      *" $host "*) ;;
      *)
        echo "error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"$destination\": creating push check transport for $host failed: Get \"https://$host/v2/\": dial tcp: lookup ${host%%:*}: no such host"
        exit 1
        ;;
    esac
  fi
  if [ -z "$repository" ]; then
    echo "error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: getting tag for destination: a repository name must be specified"
    exit 1
  fi
  case "$path" in
    *[!abcdefghijklmnopqrstuvwxyz0123456789_./-]*)
      echo "error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: getting tag for destination: repository can only contain the characters \`abcdefghijklmnopqrstuvwxyz0123456789_-./\`: $path"
      exit 1
      ;;
  esac
  # The transport as kaniko's registry client meets it: HTTPS unless --insecure (or
  # --insecure-registry HOST); the in-cluster registry answers plain HTTP, the platform's name
  # is the gateway's, whose wildcard certificate no CA of kaniko's image signs (trusted with
  # --skip-tls-verify, --skip-tls-verify-registry HOST or --registry-certificate HOST=CA).
  case " $insecure_registries " in *" $host "*) host_scheme=http ;; *) host_scheme=$scheme ;; esac
  if [ "$host_scheme" = https ]; then
    transport="error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"$destination\": creating push check transport for $host failed: Get \"https://$host/v2/\""
    case " $plain_http " in
      *" $host "*)
        echo "$transport: http: server gave HTTP response to HTTPS client"
        exit 1
        ;;
    esac
    case " $skip_tls_registries " in *" $host "*) trusted=1 ;; *) trusted=$skip_tls ;; esac
    # --registry-certificate HOST=FILE: trusted when FILE's CA verifies the host's certificate.
    for certificate in $certified_registries; do
      [ "${certificate%%=*}" = "$host" ] || continue
      file="${certificate#*=}"
      digest=$(sha256sum < "$file" 2>/dev/null | cut -d' ' -f1)
      case " $verifying_cas " in *" $host=$digest "*) trusted=1 ;; esac
    done
    if [ -z "$trusted" ]; then
      echo "$transport: tls: failed to verify certificate: x509: certificate signed by unknown authority"
      exit 1
    fi
  fi
done
# GitLab's registry takes no anonymous push: credentials for the destination's registry must be
# in the Docker config (DOCKER_CONFIG, by default /kaniko/.docker), and a CI job token must be
# this job's.
if [ -z "$no_push" ] && [ -n "$registries" ]; then
  config="${DOCKER_CONFIG:-$(dirname "$0")/.docker}/config.json"
  for destination in $destinations; do
    host="${destination%%/*}"
    repository="${destination#*/}"
    repository="${repository%:*}"
    # The registry answers 401 with its token realm on GitLab's external URL: kaniko fetches a
    # token there over the destination's transport (before its credentials are judged), so the
    # realm's certificate must verify with --skip-tls-verify, --skip-tls-verify-registry HOST
    # or the CA of --registry-certificate HOST=FILE.
    if [ -n "$realm" ]; then
      case " $skip_tls_registries " in *" $host "*) realm_trusted=1 ;; *) realm_trusted=$skip_tls ;; esac
      for certificate in $certified_registries; do
        [ "${certificate%%=*}" = "$host" ] || continue
        digest=$(sha256sum < "${certificate#*=}" 2>/dev/null | cut -d' ' -f1)
        case " $verifying_cas " in *" $realm=$digest "*) realm_trusted=1 ;; esac
      done
      if [ -z "$realm_trusted" ]; then
        scope="repository%3A$(printf '%s' "$repository" | sed 's|/|%2F|g')%3Apush%2Cpull"
        echo "error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"$destination\": creating push check transport for $host failed: Get \"https://$realm/jwt/auth?scope=$scope&service=container_registry\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
        exit 1
      fi
    fi
    auth=
    if [ -f "$config" ]; then
      auth=$(tr -d ' \n' < "$config" | sed -n "s|.*\"$host\":{\"auth\":\"\([^\"]*\)\".*|\1|p")
    fi
    if [ -z "$auth" ]; then
      echo "error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"$destination\": POST $scheme://$host/v2/$repository/blobs/uploads/: UNAUTHORIZED: authentication required; [map[Action:pull Class: Name:$repository Type:repository] map[Action:push Class: Name:$repository Type:repository]]"
      exit 1
    fi
    credentials=$(printf '%s' "$auth" | base64 -d 2>/dev/null)
    if [ "${credentials%%:*}" = "gitlab-ci-token" ] && [ "${credentials#*:}" != "$CI_JOB_TOKEN" ]; then
      echo "error checking push permissions -- make sure you entered the correct tag name, and that you are authenticated correctly, and try again: checking push permission for \"$destination\": POST $scheme://$host/v2/$repository/blobs/uploads/: UNAUTHORIZED: HTTP Basic: Access denied"
      exit 1
    fi
  done
fi
grep -i '^[[:space:]]*FROM[[:space:]]' "$dockerfile_path" | while read -r _ image _; do
  echo "INFO[0000] Retrieving image manifest $image"
done
grep -i '^[[:space:]]*\(COPY\|ADD\)[[:space:]]' "$dockerfile_path" | grep -v -- '--from' | while read -r _ rest; do
  set -- $rest
  while [ $# -gt 1 ]; do
    case "$1" in
      --*|http://*|https://*|*\**|*\?*) ;;
      *)
        if [ ! -e "$context/$1" ]; then
          echo "error building image: error building stage: failed to get files used from context: failed to get fileinfo for $context/$1: lstat $context/$1: no such file or directory"
          exit 1
        fi
        ;;
    esac
    shift
  done
done || exit 1
digest=$(sha256sum "$dockerfile_path" | cut -c1-64)
echo "INFO[0001] Building stage from $dockerfile_path"
echo "INFO[0002] Taking snapshot of full filesystem..."
if [ -n "$no_push" ]; then
  echo "INFO[0002] Skipping push to container registry due to --no-push flag"
  exit 0
fi
for destination in $destinations; do
  echo "INFO[0002] Pushing image to $destination"
  echo "$destination" >> "$(dirname "$0")/.pushed"
  case "${destination##*/}" in *:*) repository="${destination%:*}" ;; *) repository="$destination" ;; esac
  echo "INFO[0003] Pushed $repository@sha256:$digest"
done
"#;

/// Replaces every masked value in `text` by `[MASKED]` (longest first, so a value containing
/// another is masked whole).
pub fn mask(text: &str, secrets: &[String]) -> String {
    let mut secrets: Vec<&String> = secrets.iter().filter(|s| !s.is_empty()).collect();
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    let mut masked = text.to_string();
    for secret in secrets {
        masked = masked.replace(secret.as_str(), "[MASKED]");
    }
    masked
}

/// Single-quotes `text` for `sh`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Runs the job and returns its outcome (never panics on the job's doing: a failure to set up
/// ends the job failed, with the reason in its trace).
pub fn execute(spec: &JobSpec) -> Outcome {
    let secrets: Vec<String> = spec
        .variables
        .iter()
        .filter(|variable| variable.masked)
        .map(|variable| variable.value.clone())
        .collect();
    let mut trace = format!(
        "Running with gitlab-runner 17.9.0 (bprun-sim)\n  on {} \nPreparing the \"kubernetes\" executor\nUsing Kubernetes executor with image {} ...\n",
        spec.runner_description, spec.image
    );
    let root = crate::sandbox::JobRoot::new(spec.id);
    let result = run_in(root.path(), spec, &mut trace);
    let (success, pushed) = match result {
        Ok(run) => run,
        Err(reason) => {
            trace.push_str(&format!("ERROR: Job failed: {reason}\n"));
            (false, Vec::new())
        }
    };
    // Paths as the container has them: the job's private root is the container's `/`
    // (`/builds/group/project`, `/tmp/kubeconfig`, `/kaniko/executor` in messages).
    let trace = trace.replace(&root.path().display().to_string(), "");
    let mut trace = mask(&trace, &secrets);
    if trace.len() > TRACE_LIMIT {
        let mut cut = TRACE_LIMIT;
        while !trace.is_char_boundary(cut) {
            cut -= 1;
        }
        trace.truncate(cut);
        trace.push_str(&format!(
            "\nJob's log exceeded limit of {TRACE_LIMIT} bytes.\nJob execution will continue but no more output will be collected.\n"
        ));
    }
    drop(root);
    Outcome {
        success,
        trace,
        pushed,
    }
}

/// The job's folders on the host: what the sandbox mounts into its pod.
struct JobFolders {
    /// The sandbox's (empty) root.
    root: PathBuf,
    /// `/builds`: the working copy and the file variables.
    builds: PathBuf,
    /// `/scripts`: the stage scripts.
    scripts: PathBuf,
    /// `/kaniko` of kaniko's image: the executor, its Docker config and what it pushed.
    kaniko: PathBuf,
}

/// Sets up the job's folders and runs its scripts; `Ok((success, pushed images))`, `Err` for a
/// system failure (the trace then ends with it).
fn run_in(
    job_dir: &Path,
    spec: &JobSpec,
    trace: &mut String,
) -> Result<(bool, Vec<String>), String> {
    let folders = JobFolders {
        root: job_dir.join("root"),
        builds: job_dir.join("builds"),
        scripts: job_dir.join("scripts"),
        kaniko: job_dir.join("kaniko"),
    };
    let project_dir = folders.builds.join(&spec.project_path);
    let container_project_dir = format!("/builds/{}", spec.project_path);
    for dir in [
        &folders.root,
        &folders.scripts,
        &folders.kaniko,
        &project_dir,
    ] {
        std::fs::create_dir_all(dir)
            .map_err(|error| format!("cannot prepare the job's filesystem: {error}"))?;
    }
    let mut mounts = vec![
        Mount {
            source: folders.builds.clone(),
            target: "/builds".to_string(),
            read_only: false,
        },
        Mount {
            source: folders.scripts.clone(),
            target: "/scripts".to_string(),
            read_only: true,
        },
    ];
    let mut path = DEFAULT_PATH.to_string();
    match &spec.runtime {
        Runtime::Shell => {}
        Runtime::Helm { helm } => mounts.push(Mount {
            source: helm.clone(),
            target: "/usr/bin/helm".to_string(),
            read_only: true,
        }),
        Runtime::Kaniko => {
            let executor = folders.kaniko.join("executor");
            let unreachable: Vec<String> = spec
                .unreachable_registries
                .iter()
                .map(|(host, why)| {
                    format!("{host}|{}", why.replace(['"', '$', '`', '\\', '|'], ""))
                })
                .collect();
            let script = KANIKO_EXECUTOR
                .replace("@REGISTRIES@", &spec.registry_hosts.join(" "))
                .replace("@PLAIN_HTTP@", &spec.plain_http_registries.join(" "))
                .replace("@REGISTRY_CAS@", &spec.registry_cas.join(" "))
                .replace("@REALM@", spec.token_realm.as_deref().unwrap_or(""))
                .replace("@UNREACHABLE@", &unreachable.join("\n"));
            std::fs::write(&executor, script)
                .and_then(|()| {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&executor, std::fs::Permissions::from_mode(0o755))
                })
                .map_err(|error| format!("cannot prepare the job's filesystem: {error}"))?;
            mounts.push(Mount {
                source: folders.kaniko.clone(),
                target: "/kaniko".to_string(),
                read_only: false,
            });
            path.push_str(":/kaniko");
        }
    }

    // The source, as the runner fetches it: a fresh working copy of the pipeline's commit.
    trace.push_str(&format!(
        "Getting source from Git repository\nInitialized empty Git repository in {container_project_dir}/.git/\nCreated fresh repository.\n",
    ));
    if let Some(fatal) = &spec.fetch_error {
        trace.push_str(&format!("{fatal}\n"));
        return Err("exit code 1".to_string());
    }
    trace.push_str(&format!(
        "Checking out {} as detached HEAD (ref is {})...\nSkipping Git submodules setup\n",
        spec.sha.get(..8).unwrap_or(&spec.sha),
        spec.reference
    ));
    let clone = Command::new("git")
        .args(["clone", "--quiet", "--no-checkout"])
        .arg(&spec.repository)
        .arg(&project_dir)
        .stdin(Stdio::null())
        .output()
        .and_then(|cloned| {
            if !cloned.status.success() {
                return Ok(cloned);
            }
            Command::new("git")
                .args([
                    "-c",
                    "advice.detachedHead=false",
                    "checkout",
                    "--quiet",
                    "--detach",
                ])
                .arg(&spec.sha)
                .current_dir(&project_dir)
                .stdin(Stdio::null())
                .output()
        })
        .map_err(|error| format!("cannot run git: {error}"))?;
    if !clone.status.success() {
        trace.push_str(&String::from_utf8_lossy(&clone.stderr));
        return Err("exit code 1".to_string());
    }

    // The job's environment: GitLab's variables only, file-type ones as paths to their files
    // (the runner writes them next to the working copy, in `<project dir>.tmp/`).
    let mut environment: BTreeMap<String, String> = BTreeMap::new();
    let file_dir = PathBuf::from(format!("{}.tmp", project_dir.display()));
    for variable in &spec.variables {
        let value = if variable.file {
            std::fs::create_dir_all(&file_dir)
                .and_then(|()| {
                    bprun_clients::fs::write_private(
                        &file_dir.join(&variable.key),
                        variable.value.as_bytes(),
                    )
                })
                .map_err(|error| format!("cannot write file variable {}: {error}", variable.key))?;
            format!("{container_project_dir}.tmp/{}", variable.key)
        } else {
            variable.value.clone()
        };
        environment.insert(variable.key.clone(), value);
    }
    environment.insert("CI_PROJECT_DIR".into(), container_project_dir.clone());
    environment.insert("CI_BUILDS_DIR".into(), "/builds".into());
    environment.insert("HOME".into(), "/root".into());
    environment.insert("PATH".into(), path);

    // The job's pod network, for both stages: the cluster's when the platform attached one.
    let network = match &spec.network {
        Some(fabric) => {
            Some(crate::netns::Network::new(fabric.0.clone()).map_err(|error| error.to_string())?)
        }
        None => None,
    };
    let pod_network = network.as_ref().map(|network| PodNetwork {
        network,
        resolv_conf: crate::netns::resolv_conf(RUNNER_NAMESPACE),
    });
    let sandbox = Sandbox {
        job_dir,
        folders: &folders,
        mounts: &mounts,
        environment: &environment,
        workdir: &container_project_dir,
        hostname: format!("runner-job-{}", spec.id),
        network: pod_network.as_ref(),
    };

    let deadline = Instant::now() + spec.timeout;
    trace.push_str("Executing \"step_script\" stage of the job script\n");
    let lines: Vec<&String> = spec.before_script.iter().chain(&spec.script).collect();
    let step = sandbox.run_step("step_script", &lines, deadline)?;
    trace.push_str(&step.output);
    if !spec.after_script.is_empty() && !step.timed_out {
        trace.push_str("Running after_script\nRunning after script...\n");
        let after_lines: Vec<&String> = spec.after_script.iter().collect();
        // GitLab Runner gives after_script its own 5-minute budget.
        let after_deadline = Instant::now() + Duration::from_secs(300);
        let after = sandbox.run_step("after_script", &after_lines, after_deadline)?;
        trace.push_str(&after.output);
        if after.code != Some(0) {
            trace.push_str(&format!(
                "WARNING: after_script failed, but job will continue unaffected: exit code {}\n",
                after.code.unwrap_or(1)
            ));
        }
    }
    trace.push_str("Cleaning up project directory and file based variables\n");
    let pushed: Vec<String> = std::fs::read_to_string(folders.kaniko.join(".pushed"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    if step.timed_out {
        trace.push_str(&format!(
            "ERROR: Job failed: execution took longer than {} seconds\n",
            humantime::format_duration(spec.timeout)
        ));
        return Ok((false, pushed));
    }
    match step.code {
        Some(0) => {
            trace.push_str("Job succeeded\n");
            Ok((true, pushed))
        }
        code => {
            trace.push_str(&format!(
                "ERROR: Job failed: exit code {}\n",
                code.unwrap_or(1)
            ));
            Ok((false, pushed))
        }
    }
}

/// The namespace the platform's runner starts job pods in (infra/helm-values/runner.yaml).
pub const RUNNER_NAMESPACE: &str = "gitlab-runner";
/// The `PATH` of alpine's and busybox's images.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct StepResult {
    output: String,
    code: Option<i32>,
    timed_out: bool,
}

/// A job's pod: what every stage runs in.
struct Sandbox<'a> {
    job_dir: &'a Path,
    folders: &'a JobFolders,
    mounts: &'a [Mount],
    environment: &'a BTreeMap<String, String>,
    workdir: &'a str,
    hostname: String,
    network: Option<&'a PodNetwork<'a>>,
}

impl Sandbox<'_> {
    /// One of the runner's script stages: the lines in one `sh`, each echoed as `$ line` before
    /// it runs, stopping at the first failure (`errexit`, and `pipefail` where the shell has it).
    fn run_step(
        &self,
        stage: &str,
        lines: &[&String],
        deadline: Instant,
    ) -> Result<StepResult, String> {
        let mut script = String::from(
            "if set -o | grep pipefail > /dev/null; then set -o pipefail; fi; set -o errexit\n",
        );
        for line in lines {
            script.push_str(&format!(
                "printf '%s\\n' {}\n",
                quoted(&format!("$ {line}"))
            ));
            script.push_str(line);
            script.push('\n');
        }
        let script_path = self.folders.scripts.join(stage);
        std::fs::write(&script_path, script)
            .map_err(|error| format!("cannot write the job's script /scripts/{stage}: {error}"))?;
        // The sandbox's own limit is a backstop: the deadline below ends the stage first.
        let limit = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(10);
        let mut command = crate::sandbox::pod_command(
            &self.folders.root,
            self.workdir,
            self.mounts,
            &["sh".to_string(), format!("/scripts/{stage}")],
            &self.hostname,
            limit,
            self.network,
        );
        command.envs(self.environment);
        let run =
            crate::sandbox::run_in_group(self.job_dir, command, deadline, TRACE_LIMIT + 4096)?;
        Ok(StepResult {
            output: String::from_utf8_lossy(&run.output).into_owned(),
            code: run.code,
            timed_out: run.timed_out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_images_and_unknown_ones() {
        assert_eq!(runtime_for("alpine:3.20"), Ok(Some(Runtime::Shell)));
        assert_eq!(runtime_for("busybox"), Ok(Some(Runtime::Shell)));
        assert_eq!(
            runtime_for("gcr.io/kaniko-project/executor:v1.23.2-debug"),
            Ok(Some(Runtime::Kaniko))
        );
        assert_eq!(
            runtime_for("gcr.io/kaniko-project/executor:v1.23.2"),
            Ok(None)
        );
        assert_eq!(runtime_for("ruby:3.3"), Ok(None));
        assert_eq!(runtime_for("alpine/helm:latest"), Ok(None));
    }

    #[test]
    fn masking_replaces_every_occurrence_longest_first() {
        let secrets = vec!["abcdefgh".to_string(), "abcdefgh12".to_string()];
        assert_eq!(
            mask("x abcdefgh12 y abcdefgh", &secrets),
            "x [MASKED] y [MASKED]"
        );
    }

    #[test]
    fn project_variables_override_yaml_ones_and_scopes_and_protection_apply() {
        let cicd = |key: &str, value: &str, scope: &str, protected: bool| CiCdVariable {
            key: key.into(),
            value: value.into(),
            masked: false,
            file: false,
            protected,
            environment_scope: scope.into(),
        };
        let yaml = vec![
            ("A".to_string(), "yaml".to_string()),
            ("B".to_string(), "yaml".to_string()),
        ];
        let project = vec![
            cicd("A", "project", "*", false),
            cicd("C", "prod", "production", false),
            cicd("C", "any", "*", false),
            cicd("D", "protected", "*", true),
        ];
        let final_values =
            |protected_ref: bool, environment: Option<&str>| -> BTreeMap<String, String> {
                job_variables(
                    vec![JobVariable::plain("CI", "true")],
                    &yaml,
                    &project,
                    protected_ref,
                    environment,
                )
                .into_iter()
                .map(|variable| (variable.key, variable.value))
                .collect()
            };
        let on_main = final_values(true, Some("production"));
        assert_eq!(on_main["A"], "project");
        assert_eq!(on_main["B"], "yaml");
        assert_eq!(on_main["C"], "prod");
        assert_eq!(on_main["D"], "protected");
        let elsewhere = final_values(false, None);
        assert_eq!(elsewhere["C"], "any");
        assert!(!elsewhere.contains_key("D"));
        assert!(scope_matches("review/*", Some("review/x")));
        assert!(!scope_matches("review/*", Some("production")));
    }

    #[test]
    fn timeouts_read_gitlab_forms() {
        assert_eq!(parse_timeout("1h 30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_timeout("10 minutes"), Some(Duration::from_secs(600)));
        assert_eq!(parse_timeout("90"), Some(Duration::from_secs(90)));
    }
}
