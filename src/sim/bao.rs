//! TEMPORARY stub: the OpenBao stand-in is being written.

pub struct Running {
    pub url: String,
}

pub fn start_on(_listener: std::net::TcpListener, _root_token: &str) -> Result<Running, String> {
    Err("the in-process OpenBao stand-in is not built yet: install `bao`".into())
}
