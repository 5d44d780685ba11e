//! The one HTTP/1.1 stack of the simulators (hyper underneath): an accept loop over plain TCP
//! or TLS with connection upgrades ([`accept_loop`]), the request and response types every
//! simulator handles ([`SimRequest`], [`SimResponse`], whole or streamed bodies), and for the
//! GitLab simulator and the OpenBao stand-in the fault injection and request accounting the
//! tests and benchmarks use ([`serve`] over a [`Handler`]).

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// A request as a simulator handler sees it.
pub struct SimRequest {
    pub method: String,
    /// The raw (still percent-encoded) path, without the query.
    pub path: String,
    /// The query by key (the last of repeated keys).
    pub query: BTreeMap<String, String>,
    /// The query in order, repeated keys kept (exec repeats `command`).
    pub query_pairs: Vec<(String, String)>,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
    /// The connection once upgraded, when the request asks for an upgrade (WebSocket).
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
}

impl SimRequest {
    /// Reads a request whole (the body collected; an unreadable body is empty).
    pub async fn read(mut request: Request<Incoming>) -> SimRequest {
        let query_pairs = request.uri().query().map(url_form).unwrap_or_default();
        let upgrade = request
            .headers()
            .contains_key(hyper::header::UPGRADE)
            .then(|| hyper::upgrade::on(&mut request));
        let method = request.method().to_string();
        let path = request.uri().path().to_string();
        let headers = request.headers().clone();
        let body = request
            .into_body()
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        SimRequest {
            method,
            path,
            query: query_pairs.iter().cloned().collect(),
            query_pairs,
            headers,
            body,
            upgrade,
        }
    }

    /// A request made in-process (a program calling a simulator, a unit test): `body` sent as
    /// `content_type` when given; no query, no upgrade.
    pub fn local(
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> SimRequest {
        let mut headers = hyper::HeaderMap::new();
        if let Some(value) = content_type.and_then(|t| hyper::header::HeaderValue::from_str(t).ok())
        {
            headers.insert(hyper::header::CONTENT_TYPE, value);
        }
        SimRequest {
            method: method.to_string(),
            path: path.to_string(),
            query: BTreeMap::new(),
            query_pairs: Vec::new(),
            headers,
            body: body.into(),
            upgrade: None,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The token in header `name`, else in `Authorization: Bearer`.
    pub fn token(&self, name: &str) -> Option<&str> {
        self.header(name).or_else(|| {
            self.header("authorization")
                .and_then(|value| value.strip_prefix("Bearer "))
        })
    }

    /// The body as JSON, or form fields as a JSON object (GitLab accepts both).
    pub fn json(&self) -> serde_json::Value {
        if self.body.is_empty() {
            return serde_json::Value::Object(Default::default());
        }
        if let Ok(value) = serde_json::from_slice(&self.body) {
            return value;
        }
        let form: serde_json::Map<String, serde_json::Value> =
            url_form(&String::from_utf8_lossy(&self.body))
                .into_iter()
                .map(|(key, value)| (key, serde_json::Value::String(value)))
                .collect();
        serde_json::Value::Object(form)
    }

    /// The parameters as a Rails (Grape) API sees them: the query string's, overlaid by the
    /// body's (JSON or form), so `POST .../pipeline?ref=main` and a `ref` in the body agree.
    pub fn params(&self) -> serde_json::Value {
        let mut params: serde_json::Map<String, serde_json::Value> = self
            .query_pairs
            .iter()
            .map(|(key, value)| (key.clone(), serde_json::Value::String(value.clone())))
            .collect();
        match self.json() {
            serde_json::Value::Object(body) => {
                params.extend(body);
                serde_json::Value::Object(params)
            }
            other => other,
        }
    }
}

/// A response a handler returns.
pub struct SimResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// A body sent chunk by chunk as the channel yields them (watches); `body` is then unused.
    pub stream: Option<tokio::sync::mpsc::Receiver<Bytes>>,
}

impl SimResponse {
    /// No headers and no body.
    pub fn empty(status: u16) -> SimResponse {
        SimResponse {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            stream: None,
        }
    }

    /// `body` as `content_type`.
    pub fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> SimResponse {
        SimResponse {
            body,
            ..SimResponse::empty(status).with_header("content-type", content_type)
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> SimResponse {
        SimResponse::bytes(status, "application/json", value.to_string().into_bytes())
    }

    pub fn text(status: u16, text: &str) -> SimResponse {
        SimResponse::bytes(
            status,
            "text/plain; charset=utf-8",
            text.as_bytes().to_vec(),
        )
    }

    /// A body streamed from `chunks` until the sender goes away.
    pub fn stream(
        status: u16,
        content_type: &str,
        chunks: tokio::sync::mpsc::Receiver<Bytes>,
    ) -> SimResponse {
        SimResponse {
            stream: Some(chunks),
            ..SimResponse::empty(status).with_header("content-type", content_type)
        }
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> SimResponse {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

pub fn url_form(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                decode(&key.replace('+', " ")),
                decode(&value.replace('+', " ")),
            )
        })
        .collect()
}

pub fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Faults injected into answers (admin routes and health checks are exempt).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Added to every answer.
    pub latency_ms: u64,
    /// Share (0 to 1) of requests answered 500, 502 or 503 without being processed.
    pub error_rate: f64,
    /// The next N requests get 429 with `Retry-After`.
    pub rate_limit_burst: u32,
    /// Seconds in `Retry-After` of those 429s.
    pub retry_after_s: u64,
    /// Share of requests whose connection is closed without an answer (not processed).
    pub reset_rate: f64,
    /// Share of mutating requests that are processed but whose answer is dropped.
    pub drop_answer_rate: f64,
    /// When set, only requests whose path ends with this (for example `git-receive-pack`) get
    /// faults, so a test can break one kind of request and leave the rest alone.
    pub path_suffix: Option<String>,
}

impl Faults {
    /// True when these faults apply to a request for `path`.
    pub fn applies_to(&self, path: &str) -> bool {
        self.path_suffix
            .as_deref()
            .is_none_or(|suffix| path.ends_with(suffix))
    }
}

/// The faults a simulator injects now, and what is left of the current 429 burst.
#[derive(Default)]
pub struct FaultState {
    faults: Mutex<Faults>,
    rate_limit_left: Mutex<u32>,
}

impl FaultState {
    pub fn new(faults: Faults) -> FaultState {
        let state = FaultState::default();
        state.set(faults);
        state
    }

    pub fn get(&self) -> Faults {
        lock(&self.faults).clone()
    }

    /// Replaces the faults; a new 429 burst starts.
    pub fn set(&self, faults: Faults) {
        *lock(&self.rate_limit_left) = faults.rate_limit_burst;
        *lock(&self.faults) = faults;
    }

    /// Consumes one request of a 429 burst, if any is left.
    pub fn take_rate_limit(&self) -> bool {
        let mut left = lock(&self.rate_limit_left);
        if *left > 0 {
            *left -= 1;
            true
        } else {
            false
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug, Clone, Serialize)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    /// The answer's status; 0 when the connection was reset or the answer dropped.
    pub status: u16,
    pub fault: Option<String>,
    /// Milliseconds the answer was held back by the latency fault (absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub latency_ms: u64,
    /// Requests being answered when this one arrived, itself included (1: nothing overlapped
    /// it); tests read concurrency from this, not from wall time.
    pub concurrent: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Request log and per-route counters, shared by the server and the admin endpoint.
#[derive(Default)]
pub struct Accounting {
    pub log: Mutex<Vec<LoggedRequest>>,
    /// Requests being answered now (see `LoggedRequest::concurrent`).
    in_flight: std::sync::atomic::AtomicU64,
}

/// One request being answered: counted in `Accounting::in_flight` until dropped.
pub struct InFlight<'a> {
    accounting: &'a Accounting,
    /// Requests being answered when this one arrived, itself included.
    pub concurrent: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.accounting
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Accounting {
    pub fn record(&self, method: &str, path: &str, status: u16, fault: Option<&str>) {
        self.record_delayed(method, path, status, fault, 0, 1);
    }

    /// A request arrives: counted as being answered until the guard is dropped.
    pub fn arrive(&self) -> InFlight<'_> {
        let concurrent = self
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        InFlight {
            accounting: self,
            concurrent,
        }
    }

    /// Like `record`, for an answer held back `latency_ms` by the latency fault, that arrived
    /// while `concurrent` requests (itself included) were being answered.
    pub fn record_delayed(
        &self,
        method: &str,
        path: &str,
        status: u16,
        fault: Option<&str>,
        latency_ms: u64,
        concurrent: u64,
    ) {
        // The simulator's own admin routes are not part of what tests count.
        if path.starts_with("/-/sim/") {
            return;
        }
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Bounded: a long-running simulator keeps the newest 100 000 entries.
        if log.len() >= 100_000 {
            log.drain(..10_000);
        }
        log.push(LoggedRequest {
            method: method.to_string(),
            path: path.to_string(),
            status,
            fault: fault.map(str::to_string),
            latency_ms,
            concurrent,
        });
    }

    pub fn snapshot(&self) -> serde_json::Value {
        let log = self
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut counters: BTreeMap<String, u64> = BTreeMap::new();
        for entry in log.iter() {
            *counters
                .entry(format!("{} {}", entry.method, route_of(&entry.path)))
                .or_default() += 1;
        }
        let mutating = log
            .iter()
            .filter(|entry| writes(&entry.method, &entry.path))
            .count();
        serde_json::json!({"total": log.len(), "mutating": mutating, "counters": counters, "requests": *log})
    }

    pub fn clear(&self) {
        self.log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}

/// `/api/v4/projects/12/variables/KEY` -> `/api/v4/projects/:id/variables/:key`-like templates:
/// numbers and encoded paths become `:id`, so counters group by route.
pub fn route_of(path: &str) -> String {
    let parts: Vec<String> = path
        .split('/')
        .enumerate()
        .map(|(index, part)| {
            let previous = path.split('/').nth(index.wrapping_sub(1)).unwrap_or("");
            if matches!(previous, "variables" | "files") {
                ":key".to_string()
            } else if (part.chars().all(|c| c.is_ascii_digit()) && !part.is_empty())
                || part.contains('%')
                || matches!(previous, "groups" | "projects")
            {
                ":id".to_string()
            } else {
                part.to_string()
            }
        })
        .collect();
    parts.join("/")
}

/// What a simulator provides to the server loop.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, request: SimRequest) -> SimResponse;
    fn faults(&self) -> &FaultState;
    fn accounting(&self) -> &Accounting;
    /// Routes exempt from faults (health, admin).
    fn exempt(&self, path: &str) -> bool;
}

/// The body of every answer: whole, or streamed from a channel.
pub type Body = BoxBody<Bytes, Infallible>;

/// A streamed body fed through a channel (watches).
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// Accepts connections on `listener` until the process ends (over TLS when `tls` is given; a
/// handshake gets 10 seconds) and answers each request with `answer`. `None` closes the
/// connection without an answer (an injected reset). Connections may be upgraded (WebSocket).
pub async fn accept_loop<A, F>(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    answer: A,
) where
    A: Fn(SimRequest) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Option<SimResponse>> + Send + 'static,
{
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            // Out of file descriptors or similar: back off rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let answer = answer.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, answer).await,
                Some(tls) => {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(Duration::from_secs(10), tls.accept(stream)).await
                    {
                        serve_connection(stream, answer).await;
                    }
                }
            }
        });
    }
}

async fn serve_connection<S, A, F>(stream: S, answer: A)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    A: Fn(SimRequest) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Option<SimResponse>> + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let service = hyper::service::service_fn(move |request| {
        let answer = answer.clone();
        async move {
            match answer(SimRequest::read(request).await).await {
                Some(response) => Ok(to_hyper(response)),
                None => Err(InjectedReset),
            }
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .with_upgrades()
        .await;
}

/// Serves `handler` on `listener` (plain HTTP) until the process ends, with its faults and
/// request accounting.
pub async fn serve<H: Handler>(listener: tokio::net::TcpListener, handler: Arc<H>) {
    accept_loop(listener, None, move |request| {
        answer(handler.clone(), request)
    })
    .await;
}

/// Waits until the process is asked to stop (SIGINT or SIGTERM): how every `bprun sim ...`
/// command serves until stopped.
pub async fn shutdown_signal() -> Result<(), String> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| format!("cannot watch for SIGTERM: {error}"))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    Ok(())
}

/// Resolves a listen address such as `127.0.0.1:0`; only loopback addresses are accepted.
pub fn loopback(address: &str) -> Result<SocketAddr, String> {
    let parsed: SocketAddr = address
        .parse()
        .map_err(|error| format!("invalid listen address {address}: {error}"))?;
    if !parsed.ip().is_loopback() {
        return Err(format!(
            "the simulator listens on loopback only (127.0.0.1 or ::1), not {}",
            parsed.ip()
        ));
    }
    Ok(parsed)
}

/// The error a connection gets when a fault closes it without an answer.
#[derive(Debug)]
struct InjectedReset;

impl std::fmt::Display for InjectedReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("injected connection reset")
    }
}

impl std::error::Error for InjectedReset {}

/// Faults first (latency, rate limits, resets, errors), then the handler on a blocking thread;
/// every request is logged. `None` drops the connection.
async fn answer<H: Handler>(handler: Arc<H>, request: SimRequest) -> Option<SimResponse> {
    let method = request.method.clone();
    let path = request.path.clone();
    let faults = handler.faults().get();
    let exempt = handler.exempt(&path) || !faults.applies_to(&path);
    let arrival = handler.accounting().arrive();
    let faults = if exempt { Faults::default() } else { faults };
    if faults.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
    }
    let accounting = handler.accounting();
    if !exempt && handler.faults().take_rate_limit() {
        accounting.record_delayed(
            &method,
            &path,
            429,
            Some("rate-limit"),
            faults.latency_ms,
            arrival.concurrent,
        );
        let retry_after = faults.retry_after_s.max(1);
        let reset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            + retry_after;
        let response = SimResponse::text(429, "Retry later\n")
            .with_header("retry-after", retry_after.to_string())
            .with_header("ratelimit-reset", reset.to_string())
            .with_header(
                "ratelimit-resettime",
                humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + Duration::from_secs(reset),
                )
                .to_string(),
            );
        return Some(response);
    }
    if faults.reset_rate > 0.0 && fastrand::f64() < faults.reset_rate {
        accounting.record_delayed(
            &method,
            &path,
            0,
            Some("reset"),
            faults.latency_ms,
            arrival.concurrent,
        );
        return None;
    }
    if faults.error_rate > 0.0 && fastrand::f64() < faults.error_rate {
        let status = [500, 502, 503][fastrand::usize(0..3)];
        accounting.record_delayed(
            &method,
            &path,
            status,
            Some("error"),
            faults.latency_ms,
            arrival.concurrent,
        );
        return Some(SimResponse::json(
            status,
            &serde_json::json!({"message": format!("{status} injected fault")}),
        ));
    }
    let mutating = writes(&method, &path);
    let drop_answer =
        mutating && faults.drop_answer_rate > 0.0 && fastrand::f64() < faults.drop_answer_rate;
    let handler_for_call = handler.clone();
    let response = tokio::task::spawn_blocking(move || handler_for_call.handle(request))
        .await
        .unwrap_or_else(|_| {
            SimResponse::json(
                500,
                &serde_json::json!({"message": "500 Internal Server Error"}),
            )
        });
    if drop_answer {
        accounting.record_delayed(
            &method,
            &path,
            0,
            Some("dropped-answer"),
            faults.latency_ms,
            arrival.concurrent,
        );
        return None;
    }
    accounting.record_delayed(
        &method,
        &path,
        response.status,
        None,
        faults.latency_ms,
        arrival.concurrent,
    );
    Some(response)
}

fn to_hyper(response: SimResponse) -> Response<Body> {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for (name, value) in &response.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let body = match response.stream {
        Some(chunks) => ChannelBody(chunks).boxed(),
        None => Full::new(Bytes::from(response.body)).boxed(),
    };
    builder
        .body(body)
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// Whether a request may change what the server holds: every method but GET and HEAD, except
/// GitLab's `POST /runners/verify`, which only reads (as long as no `system_id` is sent, which
/// bprun never does: with one, GitLab records a runner manager).
fn writes(method: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    method != "GET" && method != "HEAD" && !(method == "POST" && path.ends_with("/runners/verify"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_group_ids_and_keys() {
        assert_eq!(
            route_of("/api/v4/projects/12/variables/CI_TOKEN"),
            "/api/v4/projects/:id/variables/:key"
        );
        assert_eq!(
            route_of("/api/v4/projects/blueprint-apps%2Fguestbook"),
            "/api/v4/projects/:id"
        );
        assert_eq!(route_of("/api/v4/groups"), "/api/v4/groups");
    }

    #[test]
    fn only_loopback_addresses_are_accepted() {
        assert!(loopback("127.0.0.1:0").is_ok());
        assert!(loopback("[::1]:0").is_ok());
        assert!(loopback("0.0.0.0:80").is_err());
        assert!(loopback("10.0.0.1:80").is_err());
    }
}
