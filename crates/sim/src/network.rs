//! The network as the simulators' clients meet it: why a pod's connection fails, in the words
//! of the client that says it (Go's `net` for helm, kubectl, kaniko and containerd; curl's for
//! git over HTTPS). Neutral: the Kubernetes simulator decides (`kube::programs::service::dial`),
//! the GitLab simulator's jobs report it.

/// The cluster DNS Service's address in a kind cluster (`kube-system/kube-dns`).
pub const CLUSTER_DNS: &str = "10.96.0.10:53";

/// Whether a CI job pod's TCP connection to `name:port` is accepted, or why not.
pub type PodDial = std::sync::Arc<dyn Fn(&str, u16) -> Result<(), DialError> + Send + Sync>;

/// A CI job pod's TLS handshake with `name:port` against a CA (PEM; `None`: none but the
/// image's own roots): `Err` in Go's words (`tls: failed to verify certificate: x509: ...`).
pub type PodTls =
    std::sync::Arc<dyn Fn(&str, u16, Option<&str>) -> Result<(), String> + Send + Sync>;

/// curl's words (git over HTTPS, what follows `fatal: unable to access 'URL': `) for a failed
/// handshake that Go words as `go_words`.
pub fn curl_tls_words(go_words: &str, name: &str, port: u16) -> String {
    if go_words.ends_with("certificate signed by unknown authority") {
        "SSL certificate problem: unable to get local issuer certificate".to_string()
    } else if go_words.contains("certificate is not valid for") {
        format!("SSL: no alternative certificate subject name matches target host name '{name}'")
    } else if go_words.contains("has expired") {
        "SSL certificate problem: certificate has expired".to_string()
    } else {
        format!("OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to {name}:{port} ")
    }
}

/// Why a pod's TCP connection to a name fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialError {
    /// No CoreDNS pod answers the query.
    NoDns,
    /// CoreDNS answers NXDOMAIN.
    NoSuchHost,
    /// The Service has no ready endpoint: kube-proxy rejects the connection.
    Refused { ip: String },
    /// The Service does not declare the port: no kube-proxy rule, the packets go nowhere.
    Timeout { ip: String },
}

impl DialError {
    /// Go's `net` words (helm, kubectl, kaniko, containerd): what follows `Get "URL": `.
    pub fn go_words(&self, name: &str, port: u16) -> String {
        let dns = CLUSTER_DNS;
        match self {
            DialError::NoDns => {
                format!("dial tcp: lookup {name} on {dns}: read: connection refused")
            }
            DialError::NoSuchHost => format!("dial tcp: lookup {name} on {dns}: no such host"),
            DialError::Refused { ip } => {
                format!("dial tcp {ip}:{port}: connect: connection refused")
            }
            DialError::Timeout { ip } => format!("dial tcp {ip}:{port}: i/o timeout"),
        }
    }

    /// curl's words (git over HTTPS): what follows `fatal: unable to access 'URL': `.
    pub fn curl_words(&self, name: &str, port: u16) -> String {
        match self {
            DialError::NoDns | DialError::NoSuchHost => format!("Could not resolve host: {name}"),
            DialError::Refused { .. } => format!(
                "Failed to connect to {name} port {port} after 0 ms: Couldn't connect to server"
            ),
            DialError::Timeout { .. } => format!(
                "Failed to connect to {name} port {port} after 130000 ms: Couldn't connect to server"
            ),
        }
    }
}
