//! MinIO's images (`quay.io/minio/minio`, which ships `mc`, and `quay.io/minio/mc`, the chart's
//! post-install job): `mc` against the MinIO servers of the cluster. A server is a release of
//! the minio chart (namespace and the pod's `release` label); its buckets are kept per release
//! ([`Stores`]: other programs ask which buckets exist) and its credentials are the server
//! container's `MINIO_ROOT_USER` / `MINIO_ROOT_PASSWORD` (the chart's Secret, or its
//! `existingSecret`). Aliases are kept per pod, as `mc` keeps `~/.mc/config.json`.
//!
//! `mc alias set ALIAS URL USER PASSWORD` checks the credentials with the server, as mc does
//! (`http://localhost:9000` in a server pod is that server; `http://SERVICE[.NAMESPACE...]:9000`
//! is the release behind the Service); `mc mb [--ignore-existing|-p] ALIAS/BUCKET`, `mc ls ALIAS`,
//! `mc ls ALIAS/BUCKET`, `mc rb ALIAS/BUCKET`; answers and errors in mc's words.

use super::catalogue::{self, Image};
use super::env::lookup;
use super::{ExecCall, ExecOutcome, Host, Program};
use std::collections::BTreeMap;
use std::sync::Mutex;

const SERVER_IMAGE: &str = "quay.io/minio/minio";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    pub url: String,
    pub access_key: String,
    pub secret_key: String,
}

/// A MinIO server as mc reaches it: its release and root credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub namespace: String,
    pub release: String,
    pub user: String,
    pub password: String,
    /// Where the server keeps its buckets, as MinIO does (a folder per bucket in its data
    /// volume, the chart's `mountPath` /export), when that volume is backed by a host folder:
    /// a kept platform's buckets outlive the server. None: kept in memory.
    pub data: Option<std::path::PathBuf>,
}

/// The chart's `mountPath`, where the server keeps its data.
const DATA_MOUNT_PATH: &str = "/export";

/// Buckets per release, aliases per pod.
#[derive(Default)]
pub struct Stores {
    /// (namespace, release) -> bucket -> creation time (RFC 3339).
    buckets: Mutex<BTreeMap<(String, String), BTreeMap<String, String>>>,
    /// (namespace, pod) -> alias -> where and who.
    aliases: Mutex<BTreeMap<(String, String), BTreeMap<String, Alias>>>,
}

impl Stores {
    /// The server's buckets with their creation times: the folders of its data volume (MinIO's
    /// own `.minio.sys` is not one), else those kept in memory.
    fn listed(&self, endpoint: &Endpoint) -> BTreeMap<String, String> {
        let Some(data) = &endpoint.data else {
            return self
                .buckets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(endpoint.namespace.clone(), endpoint.release.clone()))
                .cloned()
                .unwrap_or_default();
        };
        std::fs::read_dir(data)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let created = entry
                    .metadata()
                    .and_then(|meta| meta.modified())
                    .map(|time| humantime::format_rfc3339_seconds(time).to_string())
                    .ok()?;
                (!name.starts_with('.')).then_some((name, created))
            })
            .collect()
    }

    /// Makes `bucket`; false when it exists.
    fn make(&self, endpoint: &Endpoint, bucket: &str) -> Result<bool, String> {
        if self.listed(endpoint).contains_key(bucket) {
            return Ok(false);
        }
        match &endpoint.data {
            Some(data) => std::fs::create_dir_all(data.join(bucket))
                .map(|_| true)
                .map_err(|error| format!("cannot create {}: {error}", data.join(bucket).display())),
            None => {
                self.buckets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry((endpoint.namespace.clone(), endpoint.release.clone()))
                    .or_default()
                    .insert(bucket.to_string(), crate::kube::runtime::now_rfc3339());
                Ok(true)
            }
        }
    }

    /// Removes `bucket`; false when there is none.
    fn remove(&self, endpoint: &Endpoint, bucket: &str) -> bool {
        if !self.listed(endpoint).contains_key(bucket) {
            return false;
        }
        match &endpoint.data {
            Some(data) => std::fs::remove_dir_all(data.join(bucket)).is_ok(),
            None => self
                .buckets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(&(endpoint.namespace.clone(), endpoint.release.clone()))
                .and_then(|buckets| buckets.remove(bucket))
                .is_some(),
        }
    }

    /// The buckets of a release, in name order.
    pub fn buckets(&self, namespace: &str, release: &str) -> Vec<String> {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_string(), release.to_string()))
            .map(|buckets| buckets.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn bucket_exists(&self, namespace: &str, release: &str, bucket: &str) -> bool {
        self.buckets(namespace, release).iter().any(|b| b == bucket)
    }
}

/// The (host, port) of an `http://host:port` URL.
fn host_of(url: &str) -> Option<(String, u16)> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().ok()?),
        None => (authority, if url.starts_with("https") { 443 } else { 80 }),
    };
    Some((host.to_string(), port))
}

/// mc's bucket name rules (S3's): 3 to 63 of lowercase letters, digits, dots and hyphens,
/// starting and ending with a letter or digit.
fn bucket_name_error(name: &str) -> Option<&'static str> {
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    let edges = name
        .chars()
        .next()
        .zip(name.chars().last())
        .is_some_and(|(a, b)| a.is_ascii_alphanumeric() && b.is_ascii_alphanumeric());
    if name.len() < 3 || name.len() > 63 {
        Some("Bucket name cannot be shorter than 3 characters or longer than 63 characters.")
    } else if !valid_chars || !edges {
        Some("Bucket name contains invalid characters")
    } else {
        None
    }
}

pub struct Minio {
    /// The nodes' host-backed folders (where a data volume's folder really is).
    node: super::node::NodeMounts,
}

impl Minio {
    pub fn new(node: super::node::NodeMounts) -> Minio {
        Minio { node }
    }

    /// The host folder of `pod`'s data volume (its server container's /export), when backed.
    fn data_folder(
        &self,
        pod: &serde_json::Value,
        container: &str,
        host: &Host,
    ) -> Option<std::path::PathBuf> {
        let node_path = super::node::volume_node_path(pod, container, DATA_MOUNT_PATH, host)?;
        self.node.host_path(&node_path)
    }
}

impl Minio {
    /// The server `url` reaches from the pod of `call`.
    fn endpoint(&self, call: &ExecCall, url: &str, host: &Host) -> Result<Endpoint, String> {
        let (name, port) = host_of(url).ok_or_else(|| format!("Invalid URL. URL `{url}` for MinIO Client should be of the form scheme://host[:port]/ without resource component."))?;
        let refused = || {
            format!(
                "Get \"{}/probe-bsign-sim/?location=\": dial tcp {name}:{port}: connect: connection refused.",
                url.trim_end_matches('/')
            )
        };
        if matches!(name.as_str(), "localhost" | "127.0.0.1") {
            // The pod's own server, when it is one.
            if crate::images::canonical_repository(&call.image) != SERVER_IMAGE || port != 9000 {
                return Err(refused());
            }
            let data = host
                .object("pods", &call.namespace, &call.pod)
                .and_then(|pod| self.data_folder(&pod, &call.container, host));
            return Ok(Endpoint {
                data,
                namespace: call.namespace.clone(),
                release: call
                    .labels
                    .get("release")
                    .cloned()
                    .unwrap_or_else(|| call.pod.clone()),
                user: lookup(&call.env, "MINIO_ROOT_USER")
                    .unwrap_or("minioadmin")
                    .to_string(),
                password: lookup(&call.env, "MINIO_ROOT_PASSWORD")
                    .unwrap_or("minioadmin")
                    .to_string(),
            });
        }
        let mut parts = name.split('.');
        let service = parts.next().unwrap_or("");
        let namespace = parts.next().unwrap_or(&call.namespace).to_string();
        let Some(object) = host.object("services", &namespace, service) else {
            return Err(format!(
                "Get \"{}/probe-bsign-sim/?location=\": dial tcp: lookup {name} on 10.96.0.10:53: no such host.",
                url.trim_end_matches('/')
            ));
        };
        let selector = object["spec"]["selector"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let server = host.objects("pods", &namespace).into_iter().find(|pod| {
            !selector.is_empty()
                && selector
                    .iter()
                    .all(|(k, v)| pod["metadata"]["labels"][k] == *v)
                && pod["status"]["phase"] == "Running"
        });
        let Some(pod) = server else {
            return Err(refused());
        };
        let container = pod["spec"]["containers"]
            .as_array()
            .and_then(|list| {
                list.iter().find(|c| {
                    crate::images::canonical_repository(c["image"].as_str().unwrap_or(""))
                        == SERVER_IMAGE
                })
            })
            .cloned()
            .ok_or_else(refused)?;
        let server_call = host.call_for(&pod, &container);
        let data = self.data_folder(&pod, container["name"].as_str().unwrap_or(""), host);
        Ok(Endpoint {
            data,
            namespace,
            release: server_call
                .labels
                .get("release")
                .cloned()
                .unwrap_or_else(|| server_call.pod.clone()),
            user: lookup(&server_call.env, "MINIO_ROOT_USER")
                .unwrap_or("minioadmin")
                .to_string(),
            password: lookup(&server_call.env, "MINIO_ROOT_PASSWORD")
                .unwrap_or("minioadmin")
                .to_string(),
        })
    }
}

/// Whether credentials open a server, else S3's words for why not.
fn check_credentials(
    endpoint: &Endpoint,
    access_key: &str,
    secret_key: &str,
) -> Result<(), String> {
    if access_key != endpoint.user {
        return Err("The Access Key Id you provided does not exist in our records.".into());
    }
    if secret_key != endpoint.password {
        return Err("The request signature we calculated does not match the signature you provided. Check your key and signing method.".into());
    }
    Ok(())
}

fn error(message: String) -> ExecOutcome {
    ExecOutcome {
        code: 1,
        stdout: Vec::new(),
        stderr: format!("mc: <ERROR> {message}\n").into_bytes(),
    }
}

fn ok(text: String) -> ExecOutcome {
    ExecOutcome {
        code: 0,
        stdout: text.into_bytes(),
        stderr: Vec::new(),
    }
}

impl Program for Minio {
    fn image(&self) -> &'static Image {
        &catalogue::MINIO
    }

    fn exec(&self, call: &ExecCall, argv: &[String], host: &Host) -> Option<ExecOutcome> {
        let [program, args @ ..] = argv else {
            return None;
        };
        if program != "mc" {
            return None;
        }
        // Global flags mc accepts anywhere; none changes what is modelled.
        let words: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .filter(|a| {
                !matches!(
                    *a,
                    "--quiet" | "-q" | "--no-color" | "--insecure" | "--disable-pager"
                )
            })
            .collect();
        let stores = &host.shared().minio;
        let pod_key = (call.namespace.clone(), call.pod.clone());
        let alias_of = |alias: &str| {
            stores
                .aliases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&pod_key)
                .and_then(|aliases| aliases.get(alias).cloned())
        };
        // ALIAS/BUCKET: the alias's server, checked with the alias's credentials now.
        let target = |path: &str| -> Result<Option<(Endpoint, String)>, String> {
            let (alias, bucket) = path.split_once('/').unwrap_or((path, ""));
            let Some(found) = alias_of(alias) else {
                return Ok(None);
            };
            let endpoint = self.endpoint(call, &found.url, host)?;
            check_credentials(&endpoint, &found.access_key, &found.secret_key)?;
            Ok(Some((endpoint, bucket.trim_end_matches('/').to_string())))
        };
        let outcome = match words.as_slice() {
            ["alias", "set", rest @ ..] | ["config", "host", "add", rest @ ..] => {
                let positional: Vec<&str> = rest
                    .iter()
                    .copied()
                    .filter(|a| !a.starts_with("--"))
                    .collect();
                let [alias, url, access_key, secret_key, ..] = positional.as_slice() else {
                    return Some(error(
                        "Incorrect number of arguments for alias set command.".into(),
                    ));
                };
                let checked = self
                    .endpoint(call, url, host)
                    .and_then(|endpoint| check_credentials(&endpoint, access_key, secret_key));
                if let Err(message) = checked {
                    return Some(error(format!(
                        "Unable to initialize new alias from the provided credentials. {message}"
                    )));
                }
                stores
                    .aliases
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(pod_key.clone())
                    .or_default()
                    .insert(
                        alias.to_string(),
                        Alias {
                            url: url.trim_end_matches('/').to_string(),
                            access_key: access_key.to_string(),
                            secret_key: secret_key.to_string(),
                        },
                    );
                ok(format!("Added `{alias}` successfully.\n"))
            }
            ["mb", rest @ ..] => {
                let ignore_existing = rest
                    .iter()
                    .any(|a| matches!(*a, "--ignore-existing" | "-p"));
                let mut stdout = String::new();
                for path in rest.iter().filter(|a| !a.starts_with('-')) {
                    let shown = path.trim_end_matches('/');
                    match target(path) {
                        Err(message) => {
                            return Some(error(format!(
                                "Unable to make bucket `{shown}`. {message}"
                            )));
                        }
                        // Not an alias: mc makes a local folder.
                        Ok(None) => {
                            stdout.push_str(&format!("Bucket created successfully `{shown}`.\n"))
                        }
                        Ok(Some((endpoint, bucket))) => {
                            if let Some(problem) = bucket_name_error(&bucket) {
                                return Some(error(format!(
                                    "Unable to make bucket `{shown}`. {problem}"
                                )));
                            }
                            match stores.make(&endpoint, &bucket) {
                                Err(message) => {
                                    return Some(error(format!(
                                        "Unable to make bucket `{shown}`. {message}"
                                    )));
                                }
                                Ok(false) if !ignore_existing => {
                                    return Some(error(format!(
                                        "Unable to make bucket `{shown}`. Your previous request to create the named bucket succeeded and you already own it."
                                    )));
                                }
                                Ok(_) => {}
                            }
                            stdout.push_str(&format!("Bucket created successfully `{shown}`.\n"));
                        }
                    }
                }
                ok(stdout)
            }
            ["rb", rest @ ..] => {
                let mut stdout = String::new();
                for path in rest.iter().filter(|a| !a.starts_with('-')) {
                    let shown = path.trim_end_matches('/');
                    match target(path) {
                        Err(message) => {
                            return Some(error(format!(
                                "Unable to validate target `{shown}`. {message}"
                            )));
                        }
                        Ok(None) => {
                            return Some(error(format!(
                                "Unable to validate target `{shown}`. Requested path `{shown}` not found"
                            )));
                        }
                        Ok(Some((endpoint, bucket))) => {
                            if !stores.remove(&endpoint, &bucket) {
                                return Some(error(format!(
                                    "Unable to validate target `{shown}`. Bucket `{bucket}` does not exist."
                                )));
                            }
                            stdout.push_str(&format!("Removed `{shown}` successfully.\n"));
                        }
                    }
                }
                ok(stdout)
            }
            ["ls", path] | ["ls", path, ..] => match target(path) {
                Err(message) => error(format!("Unable to list folder. {message}")),
                Ok(None) => error(format!("Unable to stat `{path}`. Object does not exist.")),
                Ok(Some((endpoint, bucket))) => {
                    let buckets = stores.listed(&endpoint);
                    if bucket.is_empty() {
                        ok(buckets
                            .iter()
                            .map(|(name, created)| {
                                format!("[{}]     0B {name}/\n", listing_time(created))
                            })
                            .collect())
                    } else if buckets.contains_key(&bucket) {
                        ok(String::new())
                    } else {
                        error("Unable to list folder. The specified bucket does not exist".into())
                    }
                }
            },
            _ => error(format!(
                "the simulated mc runs alias set, mb, rb and ls, not: mc {}",
                args.join(" ")
            )),
        };
        Some(outcome)
    }
}

/// `2026-11-30T21:00:00Z` as mc lists it: `2026-11-30 21:00:00 UTC`.
fn listing_time(rfc3339: &str) -> String {
    let trimmed = rfc3339.trim_end_matches('Z');
    let (date, time) = trimmed.split_once('T').unwrap_or((trimmed, ""));
    format!("{date} {} UTC", time.split('.').next().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_bucket_names_and_listing_times_as_mc_reads_them() {
        assert_eq!(
            host_of("http://localhost:9000"),
            Some(("localhost".into(), 9000))
        );
        assert_eq!(
            host_of("http://minio.minio.svc:9000/"),
            Some(("minio.minio.svc".into(), 9000))
        );
        assert_eq!(host_of("minio:9000"), None);
        assert_eq!(bucket_name_error("git-lfs"), None);
        assert_eq!(
            bucket_name_error("Bad_Name"),
            Some("Bucket name contains invalid characters")
        );
        assert!(bucket_name_error("ab").is_some());
        assert_eq!(
            listing_time("2026-11-30T21:00:00Z"),
            "2026-11-30 21:00:00 UTC"
        );
    }

    #[test]
    fn credentials_are_the_servers_root_user_and_password() {
        let endpoint = Endpoint {
            namespace: "minio".into(),
            release: "minio".into(),
            user: "admin".into(),
            password: "pw".into(),
            data: None,
        };
        assert_eq!(check_credentials(&endpoint, "admin", "pw"), Ok(()));
        assert_eq!(
            check_credentials(&endpoint, "root", "pw"),
            Err("The Access Key Id you provided does not exist in our records.".into())
        );
        assert!(
            check_credentials(&endpoint, "admin", "nope")
                .is_err_and(|e| e.starts_with("The request signature we calculated"))
        );
    }

    #[test]
    fn buckets_are_folders_of_the_servers_data_volume_and_outlive_it() {
        let volume = tempfile::tempdir().expect("volume");
        std::fs::create_dir(volume.path().join(".minio.sys")).expect("MinIO's own folder");
        let endpoint = Endpoint {
            namespace: "minio".into(),
            release: "minio".into(),
            user: "admin".into(),
            password: "pw".into(),
            data: Some(volume.path().to_path_buf()),
        };
        let stores = Stores::default();
        assert_eq!(stores.make(&endpoint, "lfs"), Ok(true));
        assert_eq!(stores.make(&endpoint, "lfs"), Ok(false));
        assert!(volume.path().join("lfs").is_dir());
        // A new server on the same volume (the pod restarted) has the same buckets.
        let again = Stores::default();
        let listed: Vec<String> = again.listed(&endpoint).into_keys().collect();
        assert_eq!(listed, ["lfs"]);
        assert!(again.remove(&endpoint, "lfs"));
        assert!(!again.remove(&endpoint, "lfs"));
        assert!(again.listed(&endpoint).is_empty());
    }
}
