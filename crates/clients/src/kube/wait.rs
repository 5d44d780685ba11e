//! Waits: until every object a name or selector matches meets a condition, or is gone; watches
//! between looks, and on failure the objects' conditions, events and unready pods.

use super::conditions::{self, Readiness};
use super::{KubeClient, block_on, display, failed, name_of, object_json, retry};
use crate::error::{ClientError, ErrorKind};
use crate::reconcile::Mode;
use futures::StreamExt;
use kube::api::{ListParams, WatchParams};
use serde_json::Value;
use std::time::{Duration, Instant};

/// What a wait found.
#[derive(Debug)]
pub enum Waited {
    /// Every object meets the condition (or, waiting for deletion, none is left).
    Met(Vec<Value>),
    /// In check mode, the one look found it unmet (objects a dry run only planned never
    /// appear, so a check does not wait): why, as the wait's error would say.
    Unmet(ClientError),
}

/// The longest a wait sleeps on a watch before it looks again.
const WATCH_SLICE: Duration = Duration::from_secs(2);
/// The pause between looks when no watch can be opened.
const POLL_INTERVAL: Duration = Duration::from_millis(300);

/// A wait's target as list parameters: a label selector (it has `=`), else a name.
fn target_params(target: &str) -> ListParams {
    if target.contains('=') {
        ListParams::default().labels(target)
    } else {
        ListParams::default().fields(&format!("metadata.name={target}"))
    }
}

/// What `wait` waits for.
#[derive(Clone, Copy)]
pub enum Until<'a> {
    /// Every object meets the condition.
    Condition(&'a dyn Fn(&Value) -> Readiness),
    /// No object is left.
    Deleted,
}

/// The objects `wait` watches and how long it may take.
#[derive(Clone, Copy)]
pub struct WaitSpec<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    /// A name, or a label selector (it has `=` in it and must match at least one object).
    pub target: &'a str,
    pub until: Until<'a>,
    pub timeout: Duration,
}

impl KubeClient {
    /// Waits until every object the spec names meets its condition, or is gone. Fails fast on
    /// terminal states; a timeout names every unready object with its conditions and events.
    /// In check mode it looks once and does not wait: objects a dry run only planned never
    /// appear.
    pub fn wait(
        &self,
        spec: &WaitSpec,
        mode: Mode,
        progress: &dyn Fn(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Waited, ClientError> {
        if mode.writes() {
            return self.wait_until(spec, progress, cancelled).map(Waited::Met);
        }
        let once = WaitSpec {
            timeout: Duration::ZERO,
            ..*spec
        };
        Ok(match self.wait_until(&once, &|_| {}, &|| false) {
            Ok(objects) => Waited::Met(objects),
            Err(error) => Waited::Unmet(error),
        })
    }

    fn wait_until(
        &self,
        spec: &WaitSpec,
        progress: &dyn Fn(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, ClientError> {
        let WaitSpec {
            kind,
            namespace,
            target: name_or_selector,
            timeout,
            ..
        } = *spec;
        let until_deleted = matches!(spec.until, Until::Deleted);
        let condition: &dyn Fn(&Value) -> Readiness = match spec.until {
            Until::Condition(condition) => condition,
            Until::Deleted => &|_| Readiness::Ready,
        };
        let selector = name_or_selector.contains('=');
        let what = if selector {
            format!(
                "{kind} matching {name_or_selector}{}",
                if namespace.is_empty() {
                    String::new()
                } else {
                    format!(" in {namespace}")
                }
            )
        } else {
            display(kind, namespace, name_or_selector)
        };
        let started = Instant::now();
        let deadline = started + timeout;
        let mut last_report = started;
        loop {
            if cancelled() {
                return Err(ClientError::new(format!("{what}: interrupted"))
                    .with_kind(ErrorKind::Interrupted)
                    .in_operation("wait", " "));
            }
            let (objects, version) = self.snapshot(kind, namespace, name_or_selector)?;
            let mut waiting = Vec::new();
            if until_deleted {
                if objects.is_empty() {
                    return Ok(Vec::new());
                }
                waiting.extend(
                    objects
                        .iter()
                        .map(|o| format!("{} still exists", name_of(o))),
                );
            } else if objects.is_empty() {
                waiting.push(if selector {
                    "no objects match yet".to_string()
                } else {
                    "not found yet".to_string()
                });
            } else {
                for object in &objects {
                    // The built-in conditions report terminal states themselves; only an
                    // unready object is checked further (its own state, then its pods').
                    match condition(object) {
                        Readiness::Ready => {}
                        Readiness::Failed(why) => {
                            return Err(self.wait_failure(&what, object, &why, namespace));
                        }
                        Readiness::Waiting(why) => {
                            if let Some(failure) = conditions::terminal_failure(object) {
                                return Err(self.wait_failure(&what, object, &failure, namespace));
                            }
                            if let Some(failure) = self.pod_failure(object, namespace) {
                                // The pods were listed after the workload: describe the workload
                                // as it is now, so both causes tell the same moment.
                                let current = self.reread(kind, namespace, object);
                                let object = current.as_ref().unwrap_or(object);
                                return Err(self.wait_failure(&what, object, &failure, namespace));
                            }
                            waiting.push(format!("{}: {why}", name_of(object)));
                        }
                    }
                }
            }
            if waiting.is_empty() {
                return Ok(objects);
            }
            let now = Instant::now();
            if now >= deadline {
                let mut error = ClientError::new(format!(
                    "{what}: not ready after {}s",
                    timeout.as_secs()
                ))
                .with_kind(ErrorKind::Timeout)
                .in_operation("wait", " ")
                .with_hint(
                    "raise the timeout if it is only slow; the causes show each unready object",
                );
                for object in &objects {
                    error = error.caused_by(conditions::describe(object));
                    for event in self.recent_events(object, namespace) {
                        error = error.caused_by(event);
                    }
                    for line in self.unready_pods(object, namespace) {
                        error = error.caused_by(line);
                    }
                }
                for line in waiting.iter().filter(|_| objects.is_empty()) {
                    error = error.caused_by(line);
                }
                return Err(error);
            }
            if now.duration_since(last_report) >= Duration::from_secs(5) {
                progress(&format!(
                    "waiting for {what} ({}s): {}",
                    now.duration_since(started).as_secs(),
                    waiting.join("; ")
                ));
                last_report = now;
            }
            // Sleep until the API server reports a change to these objects (a watch from the
            // list's version), but look again at least every WATCH_SLICE: readiness can also
            // turn on objects the watch does not cover (a Deployment's pods).
            let slice = WATCH_SLICE.min(deadline.saturating_duration_since(now));
            let woke = Instant::now();
            let watched = self.await_change(kind, namespace, name_or_selector, &version, slice);
            if !watched {
                // No watch (an error, or a server without watches): poll instead of spinning.
                std::thread::sleep(
                    POLL_INTERVAL
                        .saturating_sub(woke.elapsed())
                        .min(deadline.saturating_duration_since(Instant::now())),
                );
            }
        }
    }

    /// The objects a wait looks at (a name is a `metadata.name` field selector, so one watch
    /// serves both) and the list's resourceVersion to watch from.
    fn snapshot(
        &self,
        kind: &str,
        namespace: &str,
        target: &str,
    ) -> Result<(Vec<Value>, String), ClientError> {
        block_on(async {
            let (resource, caps) = self.resolve_async(kind, None).await?;
            let api = self.list_api(&resource, &caps, namespace);
            let params = target_params(target);
            let list = retry(|| api.list(&params))
                .await
                .map_err(|error| failed("wait", &display(kind, namespace, target), &error))?;
            Ok((
                list.items.iter().map(object_json).collect(),
                list.metadata.resource_version.unwrap_or_default(),
            ))
        })
    }

    /// The object as the API server has it now; None when it cannot be read (the older copy
    /// then describes it).
    fn reread(&self, kind: &str, namespace: &str, object: &Value) -> Option<Value> {
        let name = name_of(object);
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        let (objects, _) = self.snapshot(kind, namespace, &name).ok()?;
        objects.into_iter().find(|fresh| name_of(fresh) == name)
    }

    /// Waits up to `limit` for a watch event on the target's objects after `version`. True when
    /// the watch did its job (an event came, or `limit` passed quietly); false when no watch
    /// could be opened or it ended without an event, so the caller polls.
    fn await_change(
        &self,
        kind: &str,
        namespace: &str,
        target: &str,
        version: &str,
        limit: Duration,
    ) -> bool {
        if version.is_empty() || limit.is_zero() {
            return false;
        }
        block_on(async {
            let Ok((resource, caps)) = self.resolve_async(kind, None).await else {
                return false;
            };
            let api = self.list_api(&resource, &caps, namespace);
            let base = target_params(target);
            let mut params = WatchParams::default().timeout(limit.as_secs().max(1) as u32);
            if let Some(labels) = &base.label_selector {
                params = params.labels(labels);
            }
            if let Some(fields) = &base.field_selector {
                params = params.fields(fields);
            }
            let watch = tokio::time::timeout(limit, async {
                match api.watch(&params, version).await {
                    // An event (even an error event such as 410 Expired) means: look again.
                    Ok(stream) => stream.boxed().next().await.is_some(),
                    Err(_) => false,
                }
            })
            .await;
            // Quiet until the limit: the watch did its job. Ended without an event: poll.
            watch.unwrap_or(true)
        })
    }

    fn wait_failure(&self, what: &str, object: &Value, why: &str, namespace: &str) -> ClientError {
        let mut error = ClientError::new(format!("{what}: {why}"))
            .in_operation("wait", " ")
            .with_hint(
                "this state does not resolve by waiting: fix the image, command or configuration",
            );
        error = error.caused_by(conditions::describe(object));
        for event in self.recent_events(object, namespace) {
            error = error.caused_by(event);
        }
        for line in self.unready_pods(object, namespace) {
            error = error.caused_by(line);
        }
        error
    }

    /// The pods of a workload that are not Ready, each with its recent events (what `kubectl
    /// describe pod` would show first): a missing Secret or a failing probe is named there, not
    /// on the Deployment.
    fn unready_pods(&self, object: &Value, namespace: &str) -> Vec<String> {
        let Some((ns, pods)) = self.workload_pods(object, namespace) else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        // A few pods are enough to say why; a large ReplicaSet would drown the error.
        for pod in pods
            .iter()
            .filter(|pod| conditions::ready(pod) != Readiness::Ready)
            .take(3)
        {
            lines.push(format!(
                "pod {}: {}",
                name_of(pod),
                conditions::describe(pod)
            ));
            lines.extend(
                self.recent_events(pod, ns)
                    .into_iter()
                    .map(|event| format!("pod {}: {event}", name_of(pod))),
            );
        }
        lines
    }

    /// A terminal failure among the pods a workload selects.
    fn pod_failure(&self, object: &Value, namespace: &str) -> Option<String> {
        let (_, pods) = self.workload_pods(object, namespace)?;
        pods.iter().find_map(|pod| {
            conditions::container_failure(pod).map(|why| format!("pod {}: {why}", name_of(pod)))
        })
    }

    /// The namespace and pods of a workload (a Deployment, StatefulSet, DaemonSet, ReplicaSet
    /// or Job); None for other objects, or when its pods cannot be listed.
    fn workload_pods<'a>(
        &self,
        object: &'a Value,
        namespace: &'a str,
    ) -> Option<(&'a str, Vec<Value>)> {
        let kind = object["kind"].as_str()?;
        if !matches!(
            kind,
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job"
        ) {
            return None;
        }
        let labels = object["spec"]["selector"]["matchLabels"].as_object()?;
        let selector: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        let pods = self.list("pods", ns, &selector.join(","), "").ok()?;
        Some((ns, pods))
    }

    /// The last few events about an object, oldest first, as `Reason: message`.
    fn recent_events(&self, object: &Value, namespace: &str) -> Vec<String> {
        let name = name_of(object);
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        if ns.is_empty() {
            return Vec::new();
        }
        let events = self
            .list("events", ns, "", &format!("involvedObject.name={name}"))
            .unwrap_or_default();
        let mut lines: Vec<String> = events
            .iter()
            .map(|event| {
                format!(
                    "event {}: {}",
                    event["reason"].as_str().unwrap_or(""),
                    event["message"].as_str().unwrap_or("")
                )
            })
            .collect();
        let keep = lines.len().saturating_sub(5);
        lines.drain(..keep);
        lines
    }
}
