//! The async runtime and TLS set-up shared by every network client. Created lazily: a `--list`
//! or a script that never touches the network pays nothing for them.

use std::sync::OnceLock;

/// The tokio runtime natives block on. Rhai is synchronous; natives call `runtime().block_on`.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        install_tls_provider();
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bprun-io")
            .enable_all()
            .build()
            .unwrap_or_else(|error| panic!("cannot start the async runtime: {error}"))
    })
}

/// An HTTP client builder with the TLS provider in place (every HTTP client starts here).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    install_tls_provider();
    reqwest::Client::builder()
}

/// One TLS stack for every client: rustls with the ring provider.
pub fn install_tls_provider() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // Err means a provider is already installed, which is what we want.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
