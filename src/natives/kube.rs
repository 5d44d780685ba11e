//! Kubernetes natives (kube-rs): apply, read, patch, delete, Secrets, waits with readiness
//! conditions, exec and port-forward. One client per run, created on first use from
//! KUBECONFIG (or in-cluster config), with the context `--kube-context` (or
//! `BPRUN_KUBE_CONTEXT`) names, else the current one.

use super::reconcile::{mode, settle};
use crate::state::Resource;
use rhai::plugin::*;
use rhai::{Array, Map};
use std::sync::Arc;
use std::time::Duration;

use super::convert::{Secrets, from_json, to_json};
use super::options::{RhaiResultOf, option_bool, option_str, reject_undeclared, remote_session};
use crate::engine::{Session, native_error};
use crate::error::NativeError;
use crate::output::Level;
use bprun_clients::error::{ClientError, ErrorKind};
use bprun_clients::kube::conditions::{self, Readiness};
use bprun_clients::kube::{KubeClient, PatchKind, Until, WaitSpec, Waited, display};
use bprun_clients::secret::Secret;

/// The session's Kubernetes client, created on first use.
pub(crate) fn client(session: &Session) -> Result<Arc<KubeClient>, NativeError> {
    let mut slot = session
        .kube
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(client) = slot.as_ref() {
        return Ok(client.clone());
    }
    let context = session
        .kube_context
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
        .or_else(|| std::env::var("BPRUN_KUBE_CONTEXT").ok())
        .filter(|c| !c.is_empty());
    let client = Arc::new(KubeClient::connect(context.as_deref())?);
    *slot = Some(client.clone());
    Ok(client)
}

/// The native that runs a Kubernetes client operation.
fn kube_operation(operation: &str) -> &str {
    match operation {
        "apply" => "kube_apply",
        "get" => "kube_get",
        "list" => "kube_list",
        "delete" => "kube_delete",
        "patch" => "kube_patch",
        "secret write" => "kube_secret_write",
        "wait" => "kube_wait",
        "exec" => "kube_exec",
        "logs" => "kube_logs",
        "node run" => "kube_on_nodes",
        other => other,
    }
}

/// A client error in the script's words: the native's name for the operation that failed in
/// front, and how to see what exists after a 404.
pub(super) fn kube_error(error: ClientError) -> Box<EvalAltResult> {
    let mut error = error.named_by(kube_operation);
    if error.status == Some(404) && error.hint.is_none() {
        error.hint =
            Some("check the kind, namespace and name (`kube_list` shows what exists)".into());
    }
    native_error(error)
}

/// The error of a patch (or restart) of an object that does not exist.
fn nothing_to_patch(kind: &str, ns: &str, name: &str) -> Box<EvalAltResult> {
    native_error(
        NativeError::new(format!("kube_patch {}: not found", display(kind, ns, name)))
            .with_hint("kube_patch changes existing objects; kube_apply creates them"),
    )
}

pub(super) fn remote(
    context: &NativeCallContext,
    native: &str,
) -> RhaiResultOf<(Arc<Session>, Arc<KubeClient>)> {
    let session = remote_session(context, native)?;
    let client = client(&session).map_err(native_error)?;
    Ok((session, client))
}

pub(super) fn timeout(options: &rhai::Map, native: &str, default: u64) -> RhaiResultOf<Duration> {
    match options.get("timeout") {
        Some(value) => super::seconds(value, &format!("{native}: timeout")),
        None => Ok(Duration::from_secs(default)),
    }
}

/// YAML text (one or more documents), a map, or an array of maps -> JSON objects.
fn objects_of(input: &Dynamic) -> Result<Vec<serde_json::Value>, NativeError> {
    if let Some(text) = input.read_lock::<rhai::ImmutableString>() {
        let mut objects = Vec::new();
        for (index, document) in serde_norway::Deserializer::from_str(text.as_str()).enumerate() {
            use serde::Deserialize;
            let value = serde_json::Value::deserialize(document).map_err(|error| {
                NativeError::new(format!("kube_apply: YAML document {}: {error}", index + 1))
                    .with_hint("the manifest must be valid YAML; `---` separates documents")
            })?;
            if !value.is_null() {
                objects.push(value);
            }
        }
        return Ok(objects);
    }
    if input.is_array() {
        let mut objects = Vec::new();
        for item in input.clone().into_array().unwrap_or_default() {
            objects.extend(objects_of(&item)?);
        }
        return Ok(objects);
    }
    if input.is_map() {
        return Ok(vec![to_json(input, Secrets::Reveal)?]);
    }
    Err(NativeError::new(format!(
        "kube_apply takes YAML text, a map or an array of maps, not {}",
        input.type_name()
    )))
}

fn labels_text(options: &rhai::Map, native: &str) -> RhaiResultOf<String> {
    match options.get("labels") {
        None => Ok(String::new()),
        Some(value) if value.is_string() => Ok(value.to_string()),
        Some(value) if value.is_map() => {
            let map = value.clone().cast::<rhai::Map>();
            Ok(map
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","))
        }
        Some(value) => Err(native_error(NativeError::new(format!(
            "{native}: labels must be a selector string (\"app=web\") or a map, not {}",
            value.type_name()
        )))),
    }
}

/// True when a kind argument names Secrets (`Secret`, `secrets`, `v1/Secret`).
fn secret_kind(kind: &str) -> bool {
    matches!(
        kind.to_ascii_lowercase().as_str(),
        "secret" | "secrets" | "v1/secret"
    )
}

/// A Kubernetes object as scripts see it: a Secret's `data` and `stringData` values are
/// `Secret`s (printing the object shows `***`, not base64 credentials).
fn object_value(object: serde_json::Value, secret: bool) -> Dynamic {
    let secret = secret || object["kind"] == "Secret";
    let value = from_json(object);
    if !secret {
        return value;
    }
    let Some(mut map) = value.clone().try_cast::<rhai::Map>() else {
        return value;
    };
    for field in ["data", "stringData"] {
        if let Some(inner) = map
            .get(field)
            .and_then(|v| v.clone().try_cast::<rhai::Map>())
        {
            let hidden: rhai::Map = inner
                .into_iter()
                .map(|(key, v)| (key, Dynamic::from(Secret::new(v.to_string()))))
                .collect();
            map.insert(field.into(), hidden.into());
        }
    }
    map.into()
}

#[export_module]
pub mod kube_functions {
    use super::*;

    /// Server-side applies YAML text (one or more documents), a map, or an array of maps, with
    /// the field manager `bprun`. Kinds resolve through discovery (CRDs applied earlier in the
    /// same call are waited for). Returns `#{changed, objects: [#{kind, namespace, name, action}]}`
    /// with action `created`, `configured` or `unchanged`. In check mode the server dry-runs it.
    ///
    /// ```rhai
    /// step("Namespace", || {
    ///     let result = kube_apply(#{apiVersion: "v1", kind: "Namespace", metadata: #{name: "apps"}});
    ///     info(`namespace: ${result.objects[0].action}`);
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_apply(context: NativeCallContext, manifest: Dynamic) -> RhaiResultOf<Map> {
        let (session, kube) = remote(&context, "kube_apply")?;
        let objects = objects_of(&manifest).map_err(native_error)?;
        let outcome = kube.apply(&objects, mode(&session)).map_err(kube_error)?;
        let (applied, changed) = settle(&session, outcome);
        let listed: rhai::Array = applied
            .into_iter()
            .map(|object| {
                let mut item = rhai::Map::new();
                item.insert("kind".into(), object.kind.into());
                item.insert("namespace".into(), object.namespace.into());
                item.insert("name".into(), object.name.into());
                item.insert("action".into(), object.action.into());
                item.into()
            })
            .collect();
        let mut result = rhai::Map::new();
        result.insert("changed".into(), changed.into());
        result.insert("objects".into(), listed.into());
        Ok(result)
    }

    /// The object as a map, or `()` when it does not exist. `ns` is `""` for cluster-scoped
    /// kinds. Kinds: `Deployment`, `deployments`, `deployments.apps` or `apps/v1/Deployment`.
    ///
    /// ```rhai
    /// step("Look", || {
    ///     let deploy = kube_get("Deployment", "gitlab", "gitlab-toolbox");
    ///     if deploy != () { info(`replicas: ${deploy.spec.replicas}`) }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_get(
        context: NativeCallContext,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> RhaiResultOf<Dynamic> {
        let (_, kube) = remote(&context, "kube_get")?;
        let found = kube.get(kind, ns, name).map_err(kube_error)?;
        Ok(found
            .map(|object| object_value(object, secret_kind(kind)))
            .unwrap_or(Dynamic::UNIT))
    }

    /// The objects of a kind in `ns` (`""`: all namespaces), as an array of maps.
    ///
    /// ```rhai
    /// step("Pods", || { for pod in kube_list("pods", "gitlab") { info(pod.metadata.name) } });
    /// ```
    #[rhai_fn(name = "kube_list", return_raw)]
    pub fn kube_list(context: NativeCallContext, kind: &str, ns: &str) -> RhaiResultOf<Array> {
        kube_list_with(context, kind, ns, rhai::Map::new())
    }

    /// Like `kube_list(kind, ns)` with options `labels` (a selector string such as
    /// `"app=toolbox"`, or a map) and `fields` (a field selector such as `"status.phase=Running"`).
    ///
    /// ```rhai
    /// step("Toolbox", || { let pods = kube_list("pods", "gitlab", #{labels: #{app: "toolbox"}}); });
    /// ```
    #[rhai_fn(name = "kube_list", return_raw)]
    pub fn kube_list_with(
        context: NativeCallContext,
        kind: &str,
        ns: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Array> {
        let (_, kube) = remote(&context, "kube_list")?;
        reject_undeclared(&options, "kube_list")?;
        let labels = labels_text(&options, "kube_list")?;
        let fields = option_str(&options, "fields", "kube_list")?.unwrap_or_default();
        let items = kube.list(kind, ns, &labels, &fields).map_err(kube_error)?;
        Ok(items
            .into_iter()
            .map(|object| object_value(object, secret_kind(kind)))
            .collect())
    }

    /// Deletes an object; `#{changed: false}` when it was already gone.
    ///
    /// ```rhai
    /// step("Clean", || { kube_delete("ConfigMap", "default", "scratch"); });
    /// ```
    #[rhai_fn(name = "kube_delete", return_raw)]
    pub fn kube_delete(
        context: NativeCallContext,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> RhaiResultOf<Map> {
        kube_delete_with(context, kind, ns, name, rhai::Map::new())
    }

    /// Like `kube_delete(kind, ns, name)` with options `wait` (true: until it is gone) and
    /// `timeout` (seconds, default 120).
    ///
    /// ```rhai
    /// step("Clean", || { kube_delete("Namespace", "", "scratch", #{wait: true, timeout: 60}); });
    /// ```
    #[rhai_fn(name = "kube_delete", return_raw)]
    pub fn kube_delete_with(
        context: NativeCallContext,
        kind: &str,
        ns: &str,
        name: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let (session, kube) = remote(&context, "kube_delete")?;
        reject_undeclared(&options, "kube_delete")?;
        let wait = option_bool(&options, "wait", "kube_delete")?.unwrap_or(false);
        let limit = timeout(&options, "kube_delete", 120)?;
        let cancelled = || session.state.is_cancelled();
        let outcome = kube
            .delete(
                kind,
                ns,
                name,
                mode(&session),
                wait.then_some(limit),
                &cancelled,
            )
            .map_err(kube_error)?;
        let ((), deleted) = settle(&session, outcome);
        let mut result = rhai::Map::new();
        result.insert("changed".into(), deleted.into());
        Ok(result)
    }

    /// Patches an object. Options: `type` (`merge` default, `strategic`, `json`). Returns
    /// `#{changed, object}`; in check mode the server dry-runs it.
    ///
    /// ```rhai
    /// step("Scale", || { kube_patch("Deployment", "gitlab", "gitlab-toolbox", #{spec: #{replicas: 1}}, #{}); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_patch(
        context: NativeCallContext,
        kind: &str,
        ns: &str,
        name: &str,
        patch: Dynamic,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let (session, kube) = remote(&context, "kube_patch")?;
        reject_undeclared(&options, "kube_patch")?;
        let patch_type =
            option_str(&options, "type", "kube_patch")?.unwrap_or_else(|| "merge".into());
        let patch_kind = PatchKind::from_name(&patch_type).ok_or_else(|| {
            native_error(
                NativeError::new(format!("kube_patch: unknown patch type {patch_type}"))
                    .with_hint(format!("type is one of {}", PatchKind::NAMES.join(", "))),
            )
        })?;
        let body = to_json(&patch, Secrets::Reveal).map_err(native_error)?;
        let outcome = kube
            .patch(kind, ns, name, &body, patch_kind, mode(&session))
            .map_err(|mut error| {
                // Invalid without an answer: the patch itself, refused before sending.
                if error.kind == ErrorKind::Invalid && error.status.is_none() {
                    error.hint = Some("a JSON patch is an array like [#{op: \"replace\", path: \"/spec/replicas\", value: 2}]".into());
                }
                kube_error(error)
            })?
            .ok_or_else(|| nothing_to_patch(kind, ns, name))?;
        let (object, changed) = settle(&session, outcome);
        let mut result = rhai::Map::new();
        result.insert("changed".into(), changed.into());
        result.insert("object".into(), object_value(object, secret_kind(kind)));
        Ok(result)
    }

    /// A Secret's data as a map of `Secret` values (decoded from base64), or `()` when absent.
    ///
    /// ```rhai
    /// step("Read", || { let pg = kube_secret_read("databases", "pg-app"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_secret_read(
        context: NativeCallContext,
        ns: &str,
        name: &str,
    ) -> RhaiResultOf<Dynamic> {
        use base64::Engine;
        let (_, kube) = remote(&context, "kube_secret_read")?;
        let Some(secret) = kube.get("secrets", ns, name).map_err(kube_error)? else {
            return Ok(Dynamic::UNIT);
        };
        let mut map = rhai::Map::new();
        if let Some(data) = secret["data"].as_object() {
            for (key, value) in data {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(value.as_str().unwrap_or_default())
                    .map_err(|error| {
                        native_error(NativeError::new(format!(
                            "kube_secret_read {}: data.{key} is not base64: {error}",
                            display("Secret", ns, name)
                        )))
                    })?;
                map.insert(
                    key.into(),
                    Dynamic::from(Secret::new(String::from_utf8_lossy(&bytes).into_owned())),
                );
            }
        }
        Ok(map.into())
    }

    /// Creates or updates a Secret from a map of strings or `Secret`s; `#{changed: false}` when
    /// it already holds exactly those values.
    ///
    /// ```rhai
    /// step("Credentials", || { kube_secret_write("apps", "registry", #{password: secret("s3cret-value")}); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_secret_write(
        context: NativeCallContext,
        ns: &str,
        name: &str,
        data: rhai::Map,
    ) -> RhaiResultOf<Map> {
        secret_write(&context, ns, name, &data, &rhai::Map::new())
    }

    /// Like `kube_secret_write(ns, name, data)` with options: `type` (default `Opaque`; for
    /// example `kubernetes.io/tls` with the keys `tls.crt` and `tls.key`). A Secret's type cannot
    /// change on a live object: a different one is an error that says how to proceed.
    ///
    /// ```rhai
    /// step("TLS", || {
    ///     kube_secret_write("gitlab", "gitlab-wildcard-tls",
    ///         #{"tls.crt": read_text("infra/tls/wildcard/cert.pem"), "tls.key": secret(read_text("infra/tls/wildcard/key.pem"))},
    ///         #{type: "kubernetes.io/tls"});
    /// });
    /// ```
    #[rhai_fn(name = "kube_secret_write", return_raw)]
    pub fn kube_secret_write_with(
        context: NativeCallContext,
        ns: &str,
        name: &str,
        data: rhai::Map,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        secret_write(&context, ns, name, &data, &options)
    }

    /// Restarts a Deployment, StatefulSet or DaemonSet's pods as `kubectl rollout restart` does
    /// (a `kubectl.kubernetes.io/restartedAt` annotation on the pod template).
    ///
    /// ```rhai
    /// step("Restart", || { kube_rollout_restart("Deployment", "gitlab", "gitlab-toolbox"); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_rollout_restart(
        context: NativeCallContext,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> RhaiResultOf<Map> {
        let (session, kube) = remote(&context, "kube_rollout_restart")?;
        let outcome = kube
            .rollout_restart(kind, ns, name, mode(&session))
            // A restart is a patch, and its errors say so.
            .map_err(|error| kube_error(error.named_by(|_| "kube_patch")))?
            .ok_or_else(|| nothing_to_patch(kind, ns, name))?;
        let (changed, _) = settle(&session, outcome);
        let mut result = rhai::Map::new();
        result.insert("changed".into(), changed.into());
        Ok(result)
    }

    /// Waits until the object (a name) or every object a label selector (`app=web`) matches
    /// meets `condition`: a built-in name (`Ready`, `Available`, `Established`, `Complete`,
    /// `Rollout`, `Running`, or `deleted`), a map `#{type: "Ready", status: "True"}`, or a
    /// closure over the object returning true. Options: `timeout` (seconds, default 300).
    /// Fails fast on terminal states (ImagePullBackOff, CrashLoopBackOff, a failed Job); on
    /// timeout the error lists each unready object with its conditions and recent events.
    /// Returns the objects.
    ///
    /// ```rhai
    /// step("Wait", || {
    ///     kube_wait("Deployment", "gitlab", "gitlab-toolbox", "Rollout", #{timeout: 600});
    ///     kube_wait("pods", "gitlab", "app=toolbox", #{type: "Ready", status: "True"}, #{});
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_wait(
        context: NativeCallContext,
        kind: &str,
        ns: &str,
        name_or_selector: &str,
        condition: Dynamic,
        options: rhai::Map,
    ) -> RhaiResultOf<Array> {
        let (session, kube) = remote(&context, "kube_wait")?;
        reject_undeclared(&options, "kube_wait")?;
        let limit = timeout(&options, "kube_wait", 300)?;
        let mut until_deleted = false;
        let check: Box<dyn Fn(&serde_json::Value) -> Readiness + '_> = if condition.is_string() {
            let name = condition.to_string();
            if name.eq_ignore_ascii_case("deleted") {
                until_deleted = true;
                Box::new(|_| Readiness::Ready)
            } else {
                let builtin = conditions::builtin(&name).ok_or_else(|| {
                    native_error(
                        NativeError::new(format!("kube_wait: unknown condition {name}")).with_hint(
                            format!(
                                "use one of {}, deleted, a map #{{type, status}} or a closure",
                                conditions::BUILTIN_NAMES.join(", ")
                            ),
                        ),
                    )
                })?;
                Box::new(builtin)
            }
        } else if condition.is_map() {
            let map = condition.clone().cast::<rhai::Map>();
            let condition_type = map.get("type").map(|v| v.to_string()).ok_or_else(|| {
                native_error(NativeError::new(
                    "kube_wait: a condition map needs `type` (and `status`, default \"True\")",
                ))
            })?;
            let status = map
                .get("status")
                .map(|v| v.to_string())
                .unwrap_or_else(|| "True".into());
            Box::new(move |object| conditions::condition_is(object, &condition_type, &status))
        } else if let Some(function) = condition.read_lock::<rhai::FnPtr>().map(|f| f.clone()) {
            let context = &context;
            let call = move |object: &serde_json::Value| match function
                .call_within_context::<bool>(context, (from_json(object.clone()),))
            {
                Ok(true) => Readiness::Ready,
                Ok(false) => Readiness::Waiting("the condition closure returned false".into()),
                Err(error) => Readiness::Failed(format!("the condition closure failed: {error}")),
            };
            Box::new(call)
        } else {
            return Err(native_error(NativeError::new(format!(
                "kube_wait: condition must be a name, a map or a closure, not {}",
                condition.type_name()
            ))));
        };
        let spec = WaitSpec {
            kind,
            namespace: ns,
            target: name_or_selector,
            until: if until_deleted {
                Until::Deleted
            } else {
                Until::Condition(&*check)
            },
            timeout: limit,
        };
        let progress = |line: &str| session.state.reporter.log(Level::Info, line);
        let cancelled = || session.state.is_cancelled();
        match kube
            .wait(&spec, mode(&session), &progress, &cancelled)
            .map_err(kube_error)?
        {
            Waited::Met(objects) => {
                // What became ready, for -v (the REPL prints the objects themselves).
                let names: Vec<String> = objects
                    .iter()
                    .filter_map(|object| object["metadata"]["name"].as_str().map(str::to_string))
                    .collect();
                session.state.reporter.log(
                    Level::Debug,
                    &format!(
                        "kube_wait {kind} {name_or_selector}{}: met by {}",
                        if ns.is_empty() {
                            String::new()
                        } else {
                            format!(" in {ns}")
                        },
                        if names.is_empty() {
                            "nothing left (deleted)".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                );
                Ok(objects
                    .into_iter()
                    .map(|object| object_value(object, secret_kind(kind)))
                    .collect())
            }
            Waited::Unmet(error) => {
                let error = error.named_by(kube_operation);
                session.state.reporter.log(
                    Level::Info,
                    &format!("check mode: would wait ({})", error.message),
                );
                Ok(rhai::Array::new())
            }
        }
    }

    /// Runs a command in a pod (by name, `pod/NAME`, or a label selector such as `app=toolbox`)
    /// over the WebSocket exec protocol; returns `#{ok, code, stdout, stderr}` (a non-zero
    /// exit is a result). Options: `container`, `stdin` (string or `Secret`), `timeout`
    /// (seconds, default 300), `check` (true throws on a non-zero exit), `read_only` (true: the
    /// script vouches the command only reads, such as `psql -c 'SELECT ...'` or `mc ls`; it runs
    /// in check mode too and is not counted as a change). Any other command may change
    /// anything: it is recorded as a change and refused in check mode. Arguments may be
    /// `Secret`s (shown as `***`).
    ///
    /// ```rhai
    /// step("Toolbox", || {
    ///     let result = kube_exec("gitlab", "app=toolbox", ["gitlab-rails", "runner", "-"], #{stdin: "puts 1"});
    ///     info(result.stdout);
    ///     let buckets = kube_exec("minio", "app=minio", ["mc", "ls", "local"], #{read_only: true});
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_exec(
        context: NativeCallContext,
        ns: &str,
        pod_or_selector: &str,
        command: rhai::Array,
        options: rhai::Map,
    ) -> RhaiResultOf<Map> {
        let (session, kube) = remote(&context, "kube_exec")?;
        reject_undeclared(&options, "kube_exec")?;
        let read_only = option_bool(&options, "read_only", "kube_exec")?.unwrap_or(false);
        if !read_only {
            session
                .state
                .refuse_in_check("kube_exec", "a command in a pod may change anything")
                .map_err(native_error)?;
        }
        let argv: Vec<String> = command
            .iter()
            .map(|arg| match arg.read_lock::<Secret>() {
                Some(secret) => secret.reveal().to_string(),
                None => arg.to_string(),
            })
            .collect();
        // What messages show: Secret arguments as ***.
        let shown_argv: Vec<String> = command
            .iter()
            .map(|arg| match arg.read_lock::<Secret>() {
                Some(_) => bprun_clients::secret::REDACTED.to_string(),
                None => arg.to_string(),
            })
            .collect();
        if argv.is_empty() {
            return Err(native_error(NativeError::new(
                "kube_exec: the command is empty",
            )));
        }
        let container = option_str(&options, "container", "kube_exec")?;
        let stdin = options
            .get("stdin")
            .map(|value| match value.read_lock::<Secret>() {
                Some(secret) => secret.reveal().to_string(),
                None => value.to_string(),
            });
        let limit = timeout(&options, "kube_exec", 300)?;
        let result = kube
            .exec(
                ns,
                pod_or_selector,
                &argv,
                container.as_deref(),
                stdin.as_deref().map(str::as_bytes),
                limit,
            )
            .map_err(kube_error)?;
        if !read_only {
            session.state.record_change(
                "exec",
                // The shown argv: a Secret argument is never kept in the run's changes.
                Resource::new(
                    "command",
                    shown_argv.join(" "),
                    format!(
                        "{} in {ns}/{pod_or_selector}",
                        shown_argv.first().map(String::as_str).unwrap_or("")
                    ),
                ),
            );
        }
        if option_bool(&options, "check", "kube_exec")?.unwrap_or(false) && result.code != 0 {
            return Err(native_error(
                NativeError::new(format!(
                    "kube_exec {} in {ns}/{pod_or_selector}: exit code {}",
                    shown_argv.join(" "),
                    result.code
                ))
                .caused_by(bprun_clients::secret::scrub(result.stderr.trim())),
            ));
        }
        let mut map = rhai::Map::new();
        map.insert("ok".into(), (result.code == 0).into());
        map.insert("code".into(), result.code.into());
        map.insert("stdout".into(), result.stdout.into());
        map.insert("stderr".into(), result.stderr.into());
        Ok(map)
    }

    /// The log of a running pod's container (by name, `pod/NAME` or a label selector), as
    /// `kubectl logs` prints it. Options: `container`, `tail` (the last lines only), `timeout`
    /// (seconds, default 30). Reads only, so it runs in check mode too.
    ///
    /// ```rhai
    /// step("Runner", || {
    ///     let log = kube_logs("gitlab-runner", "app=gitlab-runner", #{tail: 20});
    ///     if !log.contains("Verifying runner... is valid") { warn("the runner has not registered yet"); }
    /// });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_logs(
        context: NativeCallContext,
        ns: &str,
        pod_or_selector: &str,
        options: rhai::Map,
    ) -> RhaiResultOf<String> {
        let (_, kube) = remote(&context, "kube_logs")?;
        reject_undeclared(&options, "kube_logs")?;
        let container = option_str(&options, "container", "kube_logs")?;
        let tail = match options.contains_key("tail") {
            true => match crate::natives::options::option_int(&options, "tail", "kube_logs", 0)? {
                lines if lines >= 0 => Some(lines),
                lines => {
                    return Err(native_error(
                        NativeError::new(format!("kube_logs: option `tail` is {lines}"))
                            .with_hint("`tail` is how many of the last lines to read: 0 or more"),
                    ));
                }
            },
            false => None,
        };
        let limit = timeout(&options, "kube_logs", 30)?;
        kube.pod_log(ns, pod_or_selector, container.as_deref(), tail, limit)
            .map_err(kube_error)
    }

    /// Forwards a local loopback port to `target` (`svc/NAME`, `pod/NAME`, or a pod label
    /// selector) port `port` for the rest of the run; returns the local `"127.0.0.1:PORT"`.
    ///
    /// ```rhai
    /// step("OpenBao", || { let address = kube_port_forward("openbao", "svc/openbao", 8200); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_port_forward(
        context: NativeCallContext,
        ns: &str,
        target: &str,
        port: i64,
    ) -> RhaiResultOf<String> {
        let (_, kube) = remote(&context, "kube_port_forward")?;
        let port = u16::try_from(port).map_err(|_| {
            native_error(NativeError::new(format!(
                "kube_port_forward: {port} is not a port"
            )))
        })?;
        let local = kube.port_forward(ns, target, port).map_err(kube_error)?;
        Ok(local.to_string())
    }

    /// The kubeconfig in use, base64-encoded, as a `Secret` (for a masked CI variable such as
    /// `CI_KUBECONFIG_B64`).
    ///
    /// ```rhai
    /// step("CI", || { let kubeconfig = kube_config_b64(); });
    /// ```
    #[rhai_fn(return_raw)]
    pub fn kube_config_b64(context: NativeCallContext) -> RhaiResultOf<Secret> {
        use base64::Engine;
        let (_, kube) = remote(&context, "kube_config_b64")?;
        let text = kube.kubeconfig_text().map_err(kube_error)?;
        Ok(Secret::new(
            base64::engine::general_purpose::STANDARD.encode(text),
        ))
    }

    /// The kubeconfig in use, base64-encoded, as a `Secret`, with its cluster reached at
    /// `server` (option `server`): the address a pod can reach, for a CI job that runs in the
    /// cluster (`https://kubernetes.default.svc`; the workstation's `https://127.0.0.1:PORT`
    /// of a kind cluster is the pod's own loopback there).
    ///
    /// ```rhai
    /// step("CI", || {
    ///     let kubeconfig = kube_config_b64(#{server: "https://kubernetes.default.svc"});
    /// });
    /// ```
    #[rhai_fn(name = "kube_config_b64", return_raw)]
    pub fn kube_config_b64_for(context: NativeCallContext, options: Map) -> RhaiResultOf<Secret> {
        use base64::Engine;
        const NATIVE: &str = "kube_config_b64";
        reject_undeclared(&options, NATIVE)?;
        let (_, kube) = remote(&context, NATIVE)?;
        let text = kube.kubeconfig_text().map_err(kube_error)?;
        let text = match option_str(&options, "server", NATIVE)? {
            Some(server) => bprun_clients::kube::with_server(&text, &server)
                .map_err(|message| {
                    native_error(
                        NativeError::new(format!("{NATIVE}: the kubeconfig in use: {message}"))
                            .with_hint("give bprun a kubeconfig with a single context (KUBECONFIG, --context)"),
                    )
                })?,
            None => text,
        };
        Ok(Secret::new(
            base64::engine::general_purpose::STANDARD.encode(text),
        ))
    }
}

fn secret_write(
    context: &NativeCallContext,
    ns: &str,
    name: &str,
    data: &rhai::Map,
    options: &rhai::Map,
) -> RhaiResultOf<Map> {
    const NATIVE: &str = "kube_secret_write";
    reject_undeclared(options, NATIVE)?;
    let kind = option_str(options, "type", NATIVE)?.unwrap_or_else(|| "Opaque".to_string());
    let (session, kube) = remote(context, NATIVE)?;
    let mut values = std::collections::BTreeMap::new();
    for (key, value) in data {
        let text = if let Some(secret) = value.read_lock::<Secret>() {
            secret.reveal().to_string()
        } else if value.is_string() || value.is_int() || value.is_bool() {
            value.to_string()
        } else {
            return Err(native_error(NativeError::new(format!(
                "{NATIVE} {}: {key} must be a string or a Secret, not {}",
                display("Secret", ns, name),
                value.type_name()
            ))));
        };
        values.insert(key.to_string(), text);
    }
    let outcome = kube
        .secret_write(ns, name, &values, &kind, mode(&session))
        .map_err(kube_error)?;
    let ((), changed) = settle(&session, outcome);
    let mut result = rhai::Map::new();
    result.insert("changed".into(), changed.into());
    Ok(result)
}
