//! OpenBao natives: status, init, unseal, seal, KV v2 mounts and secrets, policies.
//!
//! Path convention: `gitlab/bootstrap/admin_token` is KV v2 mount `secret`, path
//! `gitlab/bootstrap/admin_token`; `kv:apps/x` addresses mount `kv`; an explicit `#{mount: "kv"}`
//! option wins over both.

use rhai::plugin::*;
use rhai::{Array, Map};
use serde_json::Value;

use super::convert::{Secrets, to_json};
use super::reconcile::{mode, settle};
use crate::engine::{Session, native_error};
use crate::error::NativeError;
use crate::output::Level;
use bprun_clients::bao::{BaoClient, BaoSettings, DEFAULT_INIT_FILE, KvPath};
use bprun_clients::fs::Confinement;
use bprun_clients::reconcile::Outcome;
use bprun_clients::secret::Secret;

use super::options::{
    RhaiResultOf, option_int, option_str, option_strings, reject_undeclared,
    remote_session as remote,
};

/// Where OpenBao runs in the cluster (`BAO_K8S_SERVICE`, default `openbao/openbao:8200`).
fn bao_service() -> (String, String, u16) {
    let text = std::env::var("BAO_K8S_SERVICE").unwrap_or_else(|_| "openbao/openbao:8200".into());
    let (namespace, rest) = text.split_once('/').unwrap_or(("openbao", text.as_str()));
    let (service, port) = rest.split_once(':').unwrap_or((rest, "8200"));
    (
        namespace.to_string(),
        service.to_string(),
        port.parse().unwrap_or(8200),
    )
}

/// When `BAO_ADDR` does not answer and a cluster is configured, a port-forward to OpenBao's
/// Service (the seed's case: OpenBao runs in the cluster) stands in for it.
fn reach_through_cluster(session: &Session, settings: &mut BaoSettings) {
    let Some((scheme, authority)) = settings.address.split_once("://") else {
        return;
    };
    let host_port = authority.split('/').next().unwrap_or(authority);
    // A port-forward stands in only for an OpenBao expected on this machine (the default
    // address, a local forward) or when BAO_K8S_SERVICE asks for it: a remote BAO_ADDR that
    // does not answer is an error, never a silent switch to another server with the token.
    let explicit = std::env::var_os("BAO_K8S_SERVICE").is_some();
    let host = host_port
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(host_port);
    let local = matches!(
        host.trim_matches(['[', ']']),
        "127.0.0.1" | "localhost" | "::1"
    );
    if !local && !explicit {
        return;
    }
    let with_port = if host_port.contains(':') && !host_port.ends_with(']') {
        host_port.to_string()
    } else {
        format!("{host_port}:{}", if scheme == "https" { 443 } else { 80 })
    };
    // BAO_K8S_SERVICE without BAO_ADDR: OpenBao lives in the cluster only, so whatever may
    // answer on the default local address is not it.
    let cluster_only = explicit
        && std::env::var_os("BAO_ADDR").is_none()
        && std::env::var_os("VAULT_ADDR").is_none();
    let answers = !cluster_only
        && std::net::ToSocketAddrs::to_socket_addrs(&with_port)
            .map(|addresses| {
                addresses.into_iter().any(|address| {
                    std::net::TcpStream::connect_timeout(
                        &address,
                        std::time::Duration::from_secs(2),
                    )
                    .is_ok()
                })
            })
            .unwrap_or(false);
    let cluster = std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("HOME")
            .is_some_and(|home| std::path::Path::new(&home).join(".kube/config").is_file());
    if answers || !cluster {
        return;
    }
    let (namespace, service, port) = bao_service();
    let Ok(kube) = super::kube::client(session) else {
        return;
    };
    match kube.port_forward(&namespace, &format!("svc/{service}"), port) {
        Ok(local) => {
            session.state.reporter.log(
                Level::Warn,
                &format!(
                    "{} does not answer; reaching OpenBao through a port-forward to svc/{service}:{port} in {namespace} ({local})",
                    settings.address
                ),
            );
            settings.address = format!("{scheme}://{local}");
        }
        Err(error) => session.state.reporter.log(
            Level::Warn,
            &format!(
                "{} does not answer, and no port-forward to svc/{service} in {namespace}: {}",
                settings.address, error.message
            ),
        ),
    }
}

fn bao(session: &Session) -> &BaoClient {
    session.bao.get_or_init(|| {
        let mut settings = BaoSettings::from_env(&session.state.root);
        reach_through_cluster(session, &mut settings);
        if settings.skip_verify {
            session.state.reporter.log(
                Level::Warn,
                &format!(
                    "BAO_SKIP_VERIFY is set: the TLS certificate of {} is not verified",
                    settings.address
                ),
            );
        }
        BaoClient::new(settings)
    })
}

fn kv_path(path: &str, options: &rhai::Map, native: &str) -> RhaiResultOf<KvPath> {
    reject_undeclared(options, native)?;
    let mount = option_str(options, "mount", native)?;
    KvPath::parse(path, mount.as_deref()).map_err(native_error)
}

/// The init file an option names (confined to the repository root), or the default.
fn init_file(
    session: &Session,
    options: &rhai::Map,
    native: &str,
) -> RhaiResultOf<std::path::PathBuf> {
    let file =
        option_str(options, "file", native)?.unwrap_or_else(|| DEFAULT_INIT_FILE.to_string());
    Confinement::new(&session.state.root)
        .resolve(&file)
        .map_err(native_error)
}

fn client_for_file(session: &Session, file: &std::path::Path) -> BaoClient {
    BaoClient::new(bao(session).settings.with_init_file(file.to_path_buf()))
}

fn data_from_map(
    map: &rhai::Map,
    path: &KvPath,
    native: &str,
) -> RhaiResultOf<serde_json::Map<String, Value>> {
    if map.is_empty() {
        return Err(native_error(
            NativeError::new(format!(
                "{native}({path}): the secret needs at least one key"
            ))
            .with_hint("pass a map such as #{token: secret_value}"),
        ));
    }
    match to_json(&Dynamic::from_map(map.clone()), Secrets::Reveal).map_err(native_error)? {
        Value::Object(data) => Ok(data),
        _ => Err(native_error(NativeError::new(format!(
            "{native}({path}): the data must be a map"
        )))),
    }
}

fn status_map(status: &bprun_clients::bao::Status) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("address".into(), status.address.clone().into());
    map.insert("initialized".into(), status.initialized.into());
    map.insert("sealed".into(), status.sealed.into());
    map.insert("version".into(), status.version.clone().into());
    map
}

fn outcome(changed: bool) -> rhai::Map {
    let mut map = rhai::Map::new();
    map.insert("changed".into(), changed.into());
    map
}

/// Settles a KV write or patch and returns `#{changed, version}`.
fn report_write(session: &Session, written: Outcome<u64>) -> Map {
    let (version, changed) = settle(session, written);
    let mut result = outcome(changed);
    result.insert("version".into(), (version as i64).into());
    result
}

#[export_module]
pub mod bao_functions {
    use super::*;

    /// OpenBao's state: `#{address, initialized, sealed, version}`. Works on a sealed or
    /// uninitialised server; fails only when OpenBao cannot be reached.
    ///
    /// ```rhai
    /// step("Pre-flight", || {
    ///     let status = bao_status();
    ///     if status.sealed { warn(`OpenBao at ${status.address} is sealed`) }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_status(context: NativeCallContext) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_status")?;
        bao(&session)
            .status()
            .map(|status| status_map(&status))
            .map_err(native_error)
    }

    /// Like `bao_status()`, but fails (with a hint) unless OpenBao is initialised and unsealed.
    ///
    /// ```rhai
    /// step("Pre-flight", || { bao_health(); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_health(context: NativeCallContext) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_health")?;
        let status = bao(&session).status().map_err(native_error)?;
        if !status.initialized {
            return Err(native_error(
                NativeError::new(format!("openbao {} is not initialised", status.address))
                    .with_hint("run bao_init()"),
            ));
        }
        if status.sealed {
            return Err(native_error(
                NativeError::new(format!("openbao {} is sealed", status.address))
                    .with_hint("run bao_unseal(); it reads the unseal keys from infra/secrets/openbao-init.json"),
            ));
        }
        Ok(status_map(&status))
    }

    /// Initialises an uninitialised OpenBao and writes the whole response (unseal keys, root
    /// token) to `file` (default `infra/secrets/openbao-init.json`) with mode 0600. On an
    /// initialised server it does nothing (`changed: false`); it never overwrites an existing
    /// file. Options: `shares` (default 1), `threshold` (default 1), `file`.
    /// Returns `#{changed, file}` plus `root_token` (a `Secret`) when it initialised.
    ///
    /// ```rhai
    /// step("OpenBao init", || {
    ///     let init = bao_init(#{shares: 1, threshold: 1});
    ///     if init.changed { info(`unseal keys written to ${init.file}`) }
    /// });
    /// ```
    #[rhai_fn(name = "bao_init", return_raw)]
    pub fn bao_init_with(context: NativeCallContext, options: rhai::Map) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_init")?;
        reject_undeclared(&options, "bao_init")?;
        let shares = option_int(&options, "shares", "bao_init", 1)?;
        let threshold = option_int(&options, "threshold", "bao_init", 1)?;
        if shares < 1 || threshold < 1 || threshold > shares {
            return Err(native_error(NativeError::new(format!(
                "bao_init: threshold {threshold} and shares {shares} must satisfy 1 <= threshold <= shares"
            ))));
        }
        let file = init_file(&session, &options, "bao_init")?;
        let initialized = client_for_file(&session, &file)
            .ensure_initialized(
                shares as u64,
                threshold as u64,
                &session.state.root,
                mode(&session),
            )
            .map_err(|error| native_error(error.named_by(|_| "bao_init")))?;
        let (init, changed) = settle(&session, initialized);
        let mut result = outcome(changed);
        result.insert("file".into(), session.display_path(&file).into());
        if let Some(init) = init {
            result.insert(
                "root_token".into(),
                Dynamic::from(Secret::new(init.root_token)),
            );
        }
        Ok(result)
    }

    /// `bao_init(#{})`: one share, threshold one, the default file.
    ///
    /// ```rhai
    /// step("OpenBao init", || { bao_init(); });
    /// ```
    #[rhai_fn(name = "bao_init", return_raw)]
    pub fn bao_init(context: NativeCallContext) -> RhaiResultOf<Map> {
        bao_init_with(context, rhai::Map::new())
    }

    /// Unseals OpenBao with the keys persisted by `bao_init`, only when it is sealed.
    /// Options: `file` (default `infra/secrets/openbao-init.json`). Returns `#{changed}`.
    ///
    /// ```rhai
    /// step("OpenBao unseal", || { bao_unseal(#{file: "infra/secrets/openbao-init.json"}); });
    /// ```
    #[rhai_fn(name = "bao_unseal", return_raw)]
    pub fn bao_unseal_with(context: NativeCallContext, options: rhai::Map) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_unseal")?;
        reject_undeclared(&options, "bao_unseal")?;
        let file = init_file(&session, &options, "bao_unseal")?;
        let client = client_for_file(&session, &file);
        let unsealed = client
            .ensure_unsealed(mode(&session))
            .map_err(native_error)?
            .ok_or_else(|| {
                native_error(
                    NativeError::new(format!(
                        "openbao {} is not initialised, so it cannot be unsealed",
                        client.settings.address
                    ))
                    .with_hint("run bao_init() first"),
                )
            })?;
        Ok(outcome(settle(&session, unsealed).1))
    }

    /// `bao_unseal(#{})` with the default init file.
    ///
    /// ```rhai
    /// step("OpenBao unseal", || { bao_unseal(); });
    /// ```
    #[rhai_fn(name = "bao_unseal", return_raw)]
    pub fn bao_unseal(context: NativeCallContext) -> RhaiResultOf<Map> {
        bao_unseal_with(context, rhai::Map::new())
    }

    /// Seals OpenBao (only when unsealed). Returns `#{changed}`.
    ///
    /// ```rhai
    /// step("Seal", || { bao_seal(); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_seal(context: NativeCallContext) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_seal")?;
        let sealed = bao(&session)
            .ensure_sealed(mode(&session))
            .map_err(native_error)?;
        Ok(outcome(settle(&session, sealed).1))
    }

    /// Mounts a KV secrets engine of `version` (1 or 2) at `path`, unless it is already there.
    /// A mount of another type or version at that path is an error naming both.
    ///
    /// ```rhai
    /// step("KV", || { bao_enable_kv("secret", 2); });
    /// ```
    #[rhai_fn(name = "bao_enable_kv", return_raw)]
    pub fn bao_enable_kv_at(
        context: NativeCallContext,
        path: &str,
        version: i64,
    ) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_enable_kv")?;
        if !(1..=2).contains(&version) {
            return Err(native_error(NativeError::new(format!(
                "bao_enable_kv: KV version must be 1 or 2, not {version}"
            ))));
        }
        let mounted = bao(&session)
            .ensure_kv(path, version as u8, mode(&session))
            .map_err(native_error)?;
        Ok(outcome(settle(&session, mounted).1))
    }

    /// `bao_enable_kv("secret", 2)`.
    ///
    /// ```rhai
    /// step("KV", || { bao_enable_kv(); });
    /// ```
    #[rhai_fn(name = "bao_enable_kv", return_raw)]
    pub fn bao_enable_kv(context: NativeCallContext) -> RhaiResultOf<Map> {
        bao_enable_kv_at(context, "secret", 2)
    }

    /// The data of a KV v2 secret as a map of `Secret` values (a value that is not a string is
    /// kept as its JSON text), or `()` when the path has no secret. A missing mount is an error.
    ///
    /// ```rhai
    /// step("Mint PAT", || {
    ///     let existing = bao_read("gitlab/bootstrap/admin_token");
    ///     if existing != () { info("admin PAT already in OpenBao; reusing") }
    /// });
    /// ```
    #[rhai_fn(name = "bao_read", return_raw)]
    pub fn bao_read(context: NativeCallContext, path: &str) -> RhaiResultOf<Dynamic> {
        bao_read_with(context, path, rhai::Map::new())
    }

    /// `bao_read(path)` with options: `mount`, and `plain`, the keys whose values are not
    /// secrets (a host name, a port, a user name): those are returned as strings, so they are
    /// printed as they are and never hidden as `***` wherever else they appear.
    ///
    /// ```rhai
    /// step("Read", || {
    ///     let value = bao_read("apps/x", #{mount: "kv"});
    ///     let database = bao_read("openbao/postgresql", #{plain: ["host", "port", "database", "username"]});
    ///     info(`database ${database.database} on ${database.host}`);
    /// });
    /// ```
    #[rhai_fn(name = "bao_read", return_raw)]
    pub fn bao_read_with(
        context: NativeCallContext,
        path: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Dynamic> {
        let session = remote(&context, "bao_read")?;
        reject_undeclared(&options, "bao_read")?;
        let plain = option_strings(&options, "plain", "bao_read")?;
        let mut path_options = options;
        path_options.remove("plain");
        let path = kv_path(path, &path_options, "bao_read")?;
        let secret = bao(&session).kv_read(&path).map_err(native_error)?;
        Ok(match secret.data {
            None => Dynamic::UNIT,
            Some(data) => {
                let map: rhai::Map = data
                    .into_iter()
                    .map(|(key, value)| {
                        let text = match value {
                            Value::String(text) => text,
                            other => other.to_string(),
                        };
                        let value = if plain.contains(&key) {
                            Dynamic::from(text)
                        } else {
                            Dynamic::from(Secret::new(text))
                        };
                        (key.into(), value)
                    })
                    .collect();
                map.into()
            }
        })
    }

    /// Writes a KV v2 secret only when its content differs, with check-and-set on the version
    /// read (two writers never silently lose an update). Values may be strings, `Secret`s or
    /// other JSON values. Returns `#{changed, version}`.
    ///
    /// ```rhai
    /// step("Store PAT", || {
    ///     let result = bao_write("gitlab/bootstrap/admin_token", #{token: secret("glpat-xxxxxxxxxxxxxxxxxxxx")});
    ///     info(`version ${result.version}, changed: ${result.changed}`);
    /// });
    /// ```
    #[rhai_fn(name = "bao_write", return_raw)]
    pub fn bao_write(context: NativeCallContext, path: &str, data: rhai::Map) -> RhaiResultOf<Map> {
        bao_write_with(context, path, data, rhai::Map::new())
    }

    /// `bao_write(path, data)` with options: `mount`.
    ///
    /// ```rhai
    /// step("Store", || { bao_write("apps/x", #{a: "1"}, #{mount: "kv"}); });
    /// ```
    #[rhai_fn(name = "bao_write", return_raw)]
    pub fn bao_write_with(
        context: NativeCallContext,
        path: &str,
        data: rhai::Map,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_write")?;
        let path = kv_path(path, &options, "bao_write")?;
        let data = data_from_map(&data, &path, "bao_write")?;
        let written = bao(&session)
            .kv_write(&path, &data, mode(&session))
            .map_err(native_error)?;
        Ok(report_write(&session, written))
    }

    /// Merges keys into an existing KV v2 secret (read, merge, check-and-set write); unchanged
    /// when the keys already hold those values. Returns `#{changed, version}`.
    ///
    /// ```rhai
    /// step("Rotate", || { bao_patch("gitlab/runner", #{registration_token: secret("glrt-xxxxxxxxxxxx")}); });
    /// ```
    #[rhai_fn(name = "bao_patch", return_raw)]
    pub fn bao_patch(context: NativeCallContext, path: &str, data: rhai::Map) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_patch")?;
        let path = kv_path(path, &rhai::Map::new(), "bao_patch")?;
        let data = data_from_map(&data, &path, "bao_patch")?;
        let client = bao(&session);
        let written = client
            .kv_patch(&path, &data, mode(&session))
            .map_err(native_error)?
            .ok_or_else(|| {
                native_error(
                    NativeError::new(format!(
                        "openbao {}: nothing to patch at {path}",
                        client.settings.address
                    ))
                    .with_hint("bao_patch changes an existing secret; use bao_write to create it"),
                )
            })?;
        Ok(report_write(&session, written))
    }

    /// The keys under a KV v2 folder (sub-folders end with `/`); `[]` when there are none.
    /// `""` lists the root of the `secret` mount, `kv:` another mount's.
    ///
    /// ```rhai
    /// step("List", || { for key in bao_list("gitlab") { info(key) } for top in bao_list("") { info(top) } });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_list(context: NativeCallContext, path: &str) -> RhaiResultOf<Array> {
        let session = remote(&context, "bao_list")?;
        let path = KvPath::parse_folder(path, None).map_err(native_error)?;
        let keys = bao(&session).kv_list(&path).map_err(native_error)?;
        Ok(keys.into_iter().map(Dynamic::from).collect())
    }

    /// A KV v2 secret's metadata (its values stay unread): `#{current_version, oldest_version,
    /// max_versions, created_time, updated_time, versions}`, `versions` oldest first, each
    /// `#{version, created_time, deleted, destroyed}`; `()` when the path holds no secret.
    ///
    /// ```rhai
    /// let meta = bao_versions("gitlab/bootstrap/admin_token");
    /// if meta != () { print(`version ${meta.current_version} of ${meta.versions.len()}`) }
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_versions(context: NativeCallContext, path: &str) -> RhaiResultOf<Dynamic> {
        let session = remote(&context, "bao_versions")?;
        let path = kv_path(path, &rhai::Map::new(), "bao_versions")?;
        let metadata = bao(&session).kv_metadata(&path).map_err(native_error)?;
        Ok(metadata
            .map(crate::natives::convert::from_json)
            .unwrap_or(Dynamic::UNIT))
    }

    /// Soft-deletes the latest version of a KV v2 secret; unchanged when there is none.
    ///
    /// ```rhai
    /// step("Forget PAT", || { bao_delete("gitlab/bootstrap/admin_token"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_delete(context: NativeCallContext, path: &str) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_delete")?;
        let path = kv_path(path, &rhai::Map::new(), "bao_delete")?;
        let deleted = bao(&session)
            .kv_delete(&path, mode(&session))
            .map_err(native_error)?;
        Ok(outcome(settle(&session, deleted).1))
    }

    /// Destroys every version and the metadata of a KV v2 secret; unchanged when there is none.
    ///
    /// ```rhai
    /// step("Wipe PAT", || { bao_destroy("gitlab/bootstrap/admin_token"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_destroy(context: NativeCallContext, path: &str) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_destroy")?;
        let path = kv_path(path, &rhai::Map::new(), "bao_destroy")?;
        let destroyed = bao(&session)
            .kv_destroy(&path, mode(&session))
            .map_err(native_error)?;
        Ok(outcome(settle(&session, destroyed).1))
    }

    /// Writes an ACL policy unless it already has exactly this HCL. Returns `#{changed}`.
    ///
    /// ```rhai
    /// step("Policy", || {
    ///     bao_policy_write("gitlab-read", `path "secret/data/gitlab/*" { capabilities = ["read"] }`);
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn bao_policy_write(
        context: NativeCallContext,
        name: &str,
        hcl: &str,
    ) -> RhaiResultOf<Map> {
        let session = remote(&context, "bao_policy_write")?;
        if name.is_empty() || name.contains('/') {
            return Err(native_error(NativeError::new(format!(
                "bao_policy_write: invalid policy name `{name}`"
            ))));
        }
        let written = bao(&session)
            .policy_write(name, hcl, mode(&session))
            .map_err(native_error)?;
        Ok(outcome(settle(&session, written).1))
    }
}
