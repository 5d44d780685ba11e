//! The machine's programs the simulators run for real (OpenBao's server, Redis, busybox, helm),
//! found the same way for every simulator.

use std::path::{Path, PathBuf};

/// A program on `PATH`.
pub fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// The `bao` binary: `BPRUN_BAO_BIN`, PATH, or the project's `.tools/bin/bao`.
pub fn bao(root: &Path) -> Option<PathBuf> {
    found("BPRUN_BAO_BIN", "bao", root)
}

/// A program found by `variable`, else on PATH as `tool`, else the project's `.tools/bin/tool`.
fn found(variable: &str, tool: &str, root: &Path) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    on_path(tool).or_else(|| {
        let local = root.join(".tools/bin").join(tool);
        local.is_file().then_some(local)
    })
}

/// The `redis-server` binary (Redis 7): `BPRUN_REDIS_SERVER`, PATH, or the project's
/// `.tools/bin/redis-server` (./test.sh extracts Debian's redis-tools there).
pub fn redis_server(root: &Path) -> Option<PathBuf> {
    found("BPRUN_REDIS_SERVER", "redis-server", root)
}

/// The `redis-cli` binary: `BPRUN_REDIS_CLI`, PATH, or the project's `.tools/bin/redis-cli`.
pub fn redis_cli(root: &Path) -> Option<PathBuf> {
    found("BPRUN_REDIS_CLI", "redis-cli", root)
}

/// A statically linked busybox (`BPRUN_BUSYBOX`, else `busybox` on PATH, as Debian's
/// busybox-static installs it): the userland of the busybox and alpine images. Without one the
/// machine's shell and utilities stand in (their words differ a little: dash says
/// `sh: 1: x: not found` where busybox says `sh: x: not found`).
pub fn busybox() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BPRUN_BUSYBOX").map(PathBuf::from) {
        return path.is_file().then_some(path);
    }
    on_path("busybox")
}

/// The folder of PostgreSQL's server and client programs (`postgres`, `initdb`, `psql`):
/// `BPRUN_PG_BINDIR`, the project's `.tools/postgresql/bin` (wrappers of Debian's
/// postgresql-15, which test.sh extracts into `.tools/postgresql` when the machine has none), or
/// Debian's `/usr/lib/postgresql/15/bin`. The major version is CloudNativePG's image's, within what the
/// registries here carry.
pub fn postgres_bindir(root: &Path) -> Option<PathBuf> {
    let has_server = |dir: &Path| dir.join("postgres").is_file() && dir.join("psql").is_file();
    if let Some(dir) = std::env::var_os("BPRUN_PG_BINDIR").map(PathBuf::from) {
        return has_server(&dir).then_some(dir);
    }
    [
        root.join(".tools/postgresql/bin"),
        PathBuf::from("/usr/lib/postgresql/15/bin"),
    ]
    .into_iter()
    .find(|dir| has_server(dir))
}
