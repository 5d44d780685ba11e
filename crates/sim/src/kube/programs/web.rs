//! Pods that serve HTTP: each served port of a pod is a loopback listener of its own
//! ([`Served`], also the Envoy proxy's), and two images that serve it: the guestbook as
//! `apps/guestbook/guestbook-go` is written (its pipeline builds it), and nginx's welcome page
//! (the image of a chart made by `helm create`).

use super::PodEndpoints;
use super::catalogue::{self, Image};
use super::{ExecCall, Host, Program};
use crate::http::{SimRequest, SimResponse};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// A task on the shared runtime, aborted when dropped.
pub struct Task(pub tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A pod's served ports: (container port, where it listens, the task serving it).
type PodPorts = Vec<(u16, SocketAddr, Task)>;

/// The loopback listeners of pods, by pod uid.
#[derive(Default)]
pub struct Served {
    listeners: Mutex<BTreeMap<String, PodPorts>>,
}

impl Served {
    /// Serves container port `port` of pod `pod_uid` with `answer` (over TLS with `tls`), on a
    /// loopback port of its own.
    pub fn listen<A, F>(
        &self,
        pod_uid: &str,
        port: u16,
        tls: Option<tokio_rustls::TlsAcceptor>,
        answer: A,
    ) -> Result<(), String>
    where
        A: Fn(SimRequest) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Option<SimResponse>> + Send + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|error| format!("cannot listen on 127.0.0.1: {error}"))?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let runtime = bprun_clients::runtime::runtime();
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?
        };
        let task = Task(runtime.spawn(crate::http::accept_loop(listener, tls, answer)));
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let ports = listeners.entry(pod_uid.to_string()).or_default();
        ports.retain(|(known, _, _)| *known != port);
        ports.push((port, address, task));
        Ok(())
    }
}

impl PodEndpoints for Served {
    /// Stops serving every port of pod `pod_uid`.
    fn stop(&self, pod_uid: &str) {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pod_uid);
    }

    /// Where container port `port` of pod `pod_uid` is served.
    fn forward(&self, pod_uid: &str, port: u16) -> Option<SocketAddr> {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(pod_uid)?
            .iter()
            .find(|(known, _, _)| *known == port)
            .map(|(_, address, _)| *address)
    }
}

/// What Go's `http.Error` writes.
fn go_error(status: u16, message: &str) -> SimResponse {
    SimResponse::text(status, &format!("{message}\n"))
        .with_header("x-content-type-options", "nosniff")
}

/// The guestbook's page for `entries`, as guestbook-go writes it.
pub fn guestbook_page(entries: &[String]) -> String {
    let escape = |entry: &str| {
        entry
            .replace('&', "&amp;")
            .replace('\'', "&#39;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&#34;")
    };
    let mut page = String::from("<h1>Guestbook</h1><ul>\n");
    for entry in entries {
        page.push_str(&format!("<li>{}</li>\n", escape(entry)));
    }
    page.push_str(
        "</ul><form method=\"post\"><input name=\"entry\"><button>Sign</button></form>\n",
    );
    page
}

/// guestbook-go's answer to `request`, its entries in `entries`.
pub fn guestbook_answer(entries: &Mutex<Vec<String>>, request: &SimRequest) -> SimResponse {
    if request.path == "/healthz" {
        return SimResponse::text(200, "ok\n");
    }
    match request.method.as_str() {
        "POST" => {
            let form = crate::http::url_form(&String::from_utf8_lossy(&request.body));
            let entry = form
                .into_iter()
                .find(|(key, _)| key == "entry")
                .map(|(_, value)| value)
                .unwrap_or_default();
            if entry.is_empty() {
                return go_error(400, "empty entry");
            }
            entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(entry);
            SimResponse::empty(303).with_header("location", "/")
        }
        "GET" | "HEAD" => {
            let entries = entries.lock().unwrap_or_else(|p| p.into_inner());
            SimResponse::bytes(
                200,
                "text/html; charset=utf-8",
                guestbook_page(&entries).into_bytes(),
            )
        }
        _ => go_error(405, "method not allowed"),
    }
}

/// The guestbook (guestbook-go): listens on `$PORT` (3000 by default); entries live in memory,
/// so a new pod starts with none, as the real one does.
#[derive(Default)]
pub struct Guestbook {
    served: Served,
}

impl Program for Guestbook {
    fn image(&self) -> &'static Image {
        &catalogue::GUESTBOOK
    }

    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        Some(&self.served)
    }

    fn start(&self, call: &ExecCall, _host: &Host) -> Result<(), String> {
        let port = match super::env::lookup(&call.env, "PORT") {
            None | Some("") => 3000,
            Some(text) => text
                .parse()
                .map_err(|_| format!("listen tcp: address tcp/{text}: unknown port"))?,
        };
        let entries = Arc::new(Mutex::new(Vec::new()));
        self.served
            .listen(&call.pod_uid, port, None, move |request| {
                let entries = entries.clone();
                async move { Some(guestbook_answer(&entries, &request)) }
            })
    }
}

/// nginx's default server: its welcome page at `/` on port 80, its 404 page elsewhere.
#[derive(Default)]
pub struct Nginx {
    served: Served,
}

const NGINX_VERSION: &str = "nginx/1.27.3";

const WELCOME: &str = "<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>\n</head>\n<body>\n<h1>Welcome to nginx!</h1>\n<p>If you see this page, the nginx web server is successfully installed and\nworking. Further configuration is required.</p>\n</body>\n</html>\n";

/// nginx's answer to a request of its default server.
pub fn nginx_answer(request: &SimRequest) -> SimResponse {
    let (status, body) = match request.path.as_str() {
        "/" | "/index.html" => (200, WELCOME.to_string()),
        _ => (
            404,
            format!(
                "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>{NGINX_VERSION}</center>\r\n</body>\r\n</html>\r\n"
            ),
        ),
    };
    SimResponse::bytes(status, "text/html", body.into_bytes()).with_header("server", NGINX_VERSION)
}

impl Program for Nginx {
    fn image(&self) -> &'static Image {
        &catalogue::NGINX
    }

    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        Some(&self.served)
    }

    fn start(&self, call: &ExecCall, _host: &Host) -> Result<(), String> {
        self.served
            .listen(&call.pod_uid, 80, None, |request| async move {
                Some(nginx_answer(&request))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, body: &str) -> SimRequest {
        SimRequest::local(method, path, None, body.as_bytes().to_vec())
    }

    #[test]
    fn the_guestbook_lists_what_was_signed_escaped_and_refuses_empty_entries() {
        let entries = Mutex::new(Vec::new());
        let signed = guestbook_answer(&entries, &request("POST", "/", "entry=a+%3Cb%3E"));
        assert_eq!((signed.status, signed.headers[0].1.as_str()), (303, "/"));
        let empty = guestbook_answer(&entries, &request("POST", "/", "entry="));
        assert_eq!(
            (empty.status, empty.body.as_slice()),
            (400, &b"empty entry\n"[..])
        );
        let page = guestbook_answer(&entries, &request("GET", "/", ""));
        assert_eq!(
            String::from_utf8_lossy(&page.body),
            "<h1>Guestbook</h1><ul>\n<li>a &lt;b&gt;</li>\n</ul><form method=\"post\"><input name=\"entry\"><button>Sign</button></form>\n"
        );
        let health = guestbook_answer(&entries, &request("GET", "/healthz", ""));
        assert_eq!((health.status, health.body.as_slice()), (200, &b"ok\n"[..]));
        assert_eq!(
            guestbook_answer(&entries, &request("PUT", "/", "")).status,
            405
        );
    }

    #[test]
    fn nginx_serves_its_welcome_page_at_the_root_only() {
        let welcome = nginx_answer(&request("GET", "/", ""));
        assert_eq!(
            (welcome.status, welcome.body.as_slice()),
            (200, WELCOME.as_bytes())
        );
        assert_eq!(nginx_answer(&request("GET", "/missing", "")).status, 404);
    }
}
