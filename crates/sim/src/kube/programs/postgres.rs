//! CloudNativePG's PostgreSQL image (`ghcr.io/cloudnative-pg/postgresql`): when an instance pod
//! starts, a real PostgreSQL server (Debian's, see [`crate::tools::postgres_bindir`]) on a free
//! loopback port, as CloudNativePG's instance manager runs it:
//!
//! - its data (`PGDATA`, `pgdata` in the volume mounted at `/var/lib/postgresql/data`) lives
//!   where the pod's volume lives ([`node::NodeMounts`]: a claim bound to a hostPath under a
//!   node mount is a host folder; otherwise the pod's folder in the simulator's state), so a
//!   deleted pod's successor finds it and a wiped volume starts empty;
//! - an empty volume is bootstrapped as `bootstrap.initdb` says: `initdb` (once per machine
//!   into a template, then copied: the same files, without initdb's second per cluster), then
//!   the owner role with the password of the app Secret (`<cluster>-app`, or
//!   `bootstrap.initdb.secret`) and the application database it owns (`app`/`app` by default);
//! - `pg_hba.conf` and `pg_ident.conf` are the operator's, rewritten at every start: local
//!   connections by peer authentication mapped to `postgres` only, the Cluster's
//!   `postgresql.pg_hba` rules, then `host all all all scram-sha-256`; the Cluster's
//!   `postgresql.parameters` are passed to the server;
//! - PostgreSQL refuses to run as root: as root (CI), the server runs in a user namespace
//!   (`unshare --user`) as `nobody`, which owns the data folder there, and `nobody` is what
//!   `pg_ident.conf` maps to `postgres`, as the image's `postgres` user is.
//!
//! `psql` (and the image's other client programs) in the pod run the real ones against the
//! server's socket as the image's `postgres` user, so a bootstrap's SQL gets PostgreSQL's own
//! answers and exit codes. Port 5432 forwards to the server: Services reach it
//! ([`super::service`]). Without PostgreSQL on the machine the pod's container exits saying so.

use super::PodEndpoints;
use super::catalogue::{self, Image};
use super::node::{self, NodeMounts};
use super::process;
use super::{ExecCall, ExecOutcome, Host, Program};
use crate::kube::cnpg;
use serde_json::Value;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where CloudNativePG mounts an instance's data volume; `PGDATA` is its `pgdata` folder.
pub const DATA_MOUNT_PATH: &str = "/var/lib/postgresql/data";

/// The image's client programs that run against the pod's server.
const CLIENTS: &[&str] = &[
    "psql",
    "pg_dump",
    "pg_dumpall",
    "pg_restore",
    "pg_isready",
    "createdb",
    "dropdb",
    "createuser",
    "dropuser",
];

/// The user a server runs as in its user namespace when the simulator runs as root.
const NAMESPACED_USER: (&str, u32) = ("nobody", 65534);

pub struct Postgres {
    bindir: Option<PathBuf>,
    state_dir: PathBuf,
    node: NodeMounts,
    servers: process::PodServers,
}

/// How the server's processes run: directly as this (non-root) user, or, as root, through
/// `unshare` as [`NAMESPACED_USER`]. The name is the OS user peer authentication sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub wrapper: Option<Vec<OsString>>,
    pub os_user: String,
}

impl Identity {
    pub fn current() -> Identity {
        // SAFETY: geteuid has no preconditions and touches no memory.
        let euid = unsafe { libc::geteuid() };
        if euid == 0 {
            let unshare = crate::tools::on_path("unshare")
                .unwrap_or_else(|| PathBuf::from("/usr/bin/unshare"));
            let (name, id) = NAMESPACED_USER;
            return Identity {
                wrapper: Some(vec![
                    unshare.into(),
                    "--user".into(),
                    format!("--map-user={id}").into(),
                    format!("--map-group={id}").into(),
                ]),
                os_user: name.to_string(),
            };
        }
        let os_user = user_name(euid)
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "postgres".to_string());
        Identity {
            wrapper: None,
            os_user,
        }
    }

    /// The program and leading arguments that run `program` as this identity.
    fn command(&self, program: &Path) -> (PathBuf, Vec<OsString>) {
        match &self.wrapper {
            Some(words) => {
                let mut args: Vec<OsString> = words[1..].to_vec();
                args.push(program.into());
                (PathBuf::from(&words[0]), args)
            }
            None => (program.to_path_buf(), Vec::new()),
        }
    }
}

/// The name of user `uid` in the password database (what peer authentication sees).
fn user_name(uid: libc::uid_t) -> Option<String> {
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes only into `entry` and `buffer`, whose sizes it is given, and
    // `found` points at `entry` (or is null) afterwards.
    let status = unsafe {
        libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buffer`, NUL-terminated by getpwuid_r.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    name.to_str().ok().map(str::to_string)
}

/// The operator's `pg_hba.conf`: local peer authentication through the `local` map, the
/// Cluster's own rules (`spec.postgresql.pg_hba`), then password authentication for the rest.
pub fn pg_hba(cluster: &Value) -> String {
    let mut text = String::from(
        "# Grant local access ('local' user map)\nlocal all all peer map=local\n\n\
         # Require client certificate authentication for the streaming_replica user\n\
         hostssl postgres streaming_replica all cert\nhostssl replication streaming_replica all cert\n\n\
         #\n# USER-DEFINED RULES\n#\n",
    );
    for rule in cluster["spec"]["postgresql"]["pg_hba"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        text.push_str(rule);
        text.push('\n');
    }
    text.push_str(
        "\n#\n# FIXED RULES\n#\n\n# Otherwise use the default authentication method\n\
         host all all all scram-sha-256\n",
    );
    text
}

/// The operator's `pg_ident.conf`: the OS user the server runs as is `postgres`.
pub fn pg_ident(os_user: &str) -> String {
    format!("local {os_user} postgres\n")
}

/// A PostgreSQL identifier, quoted.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A PostgreSQL string literal.
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The SQL the initdb bootstrap runs after `initdb`: the owner role (with its password, when
/// the Secret has one) and the application database it owns.
pub fn bootstrap_sql(database: &str, owner: &str, password: Option<&str>) -> String {
    let password = password
        .map(|password| format!(" PASSWORD {}", quote_literal(password)))
        .unwrap_or_default();
    format!(
        "CREATE ROLE {owner} LOGIN{password};\nCREATE DATABASE {database} OWNER {owner};\n",
        owner = quote_identifier(owner),
        database = quote_identifier(database),
    )
}

/// The server's settings: the Cluster's `postgresql.parameters`, then what the simulator needs
/// (loopback only, its port and socket, files it writes, little memory, no fsync: a rehearsal's
/// data lives as long as its volume folder, not across a power loss).
pub fn settings(cluster: &Value, port: u16, socket_dir: &Path, pgdata: &Path) -> Vec<String> {
    let mut settings: Vec<String> = cluster["spec"]["postgresql"]["parameters"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| match value {
            Value::String(text) => format!("{name}={text}"),
            other => format!("{name}={other}"),
        })
        .collect();
    settings.extend([
        "listen_addresses=127.0.0.1".to_string(),
        format!("port={port}"),
        format!("unix_socket_directories={}", socket_dir.display()),
        format!("hba_file={}", pgdata.join("pg_hba.conf").display()),
        format!("ident_file={}", pgdata.join("pg_ident.conf").display()),
        "shared_buffers=16MB".to_string(),
        "max_connections=40".to_string(),
        "fsync=off".to_string(),
        "synchronous_commit=off".to_string(),
        "full_page_writes=off".to_string(),
    ]);
    settings
}

/// A value of a Secret's `data`, decoded.
fn secret_value(secret: &Value, key: &str) -> Option<String> {
    String::from_utf8(crate::kube::object_data::secret_bytes(secret, key)?).ok()
}

/// Where the instance manager puts the server's socket in the pod, and the port it listens on.
const POD_SOCKET: &str = "/controller/run/.s.PGSQL.5432";

/// A client's messages as they read in the pod: the server's socket and port there, not the
/// simulator's folder and loopback port.
pub fn as_in_the_pod(stderr: &[u8], address: SocketAddr, socket_dir: &Path) -> String {
    let port = address.port();
    String::from_utf8_lossy(stderr)
        .replace(
            &format!("{}/.s.PGSQL.{port}", socket_dir.display()),
            POD_SOCKET,
        )
        .replace(&format!(", port {port} failed"), ", port 5432 failed")
}

/// Copies `from` to `to` (which must not exist) with its modes, as `cp -a`.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let outcome = process::run(
        {
            let mut command = Command::new("cp");
            command.arg("-a").arg(from).arg(to);
            command
        },
        b"",
        Duration::from_secs(60),
    );
    if outcome.code != 0 {
        return Err(format!(
            "cannot copy {} to {}: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&outcome.stderr).trim()
        ));
    }
    Ok(())
}

impl Postgres {
    pub fn new(bindir: Option<PathBuf>, state_dir: PathBuf, node: NodeMounts) -> Postgres {
        Postgres {
            bindir,
            state_dir,
            node,
            servers: process::PodServers::default(),
        }
    }

    fn no_server() -> String {
        "bprun-sim found no PostgreSQL server (BPRUN_PG_BINDIR, .tools/postgresql, /usr/lib/postgresql/15/bin; ./test.sh installs it), so nothing runs in this instance pod".to_string()
    }

    fn bindir(&self) -> Result<&Path, String> {
        self.bindir.as_deref().ok_or_else(Self::no_server)
    }

    /// The pod's folder: socket, log, HOME, and its data when its volume has no host folder.
    fn pod_dir(&self, call: &ExecCall) -> PathBuf {
        self.state_dir.join(&call.namespace).join(&call.pod)
    }

    /// The folder of the pod's data volume (`PGDATA` is its `pgdata`).
    fn volume_folder(&self, call: &ExecCall, host: &Host) -> PathBuf {
        host.object("pods", &call.namespace, &call.pod)
            .and_then(|pod| {
                let node_path =
                    node::volume_node_path(&pod, &call.container, DATA_MOUNT_PATH, host)?;
                self.node.host_path(&node_path)
            })
            .unwrap_or_else(|| self.pod_dir(call).join("data"))
    }

    /// A data folder as `initdb` leaves it, made once per machine, user and PostgreSQL build
    /// (in the temporary folder) and copied for every new volume.
    fn template(&self, bindir: &Path, identity: &Identity) -> Result<PathBuf, String> {
        let tag: String = bindir
            .to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let template =
            std::env::temp_dir().join(format!("bprun-pg-template-{}{tag}", identity.os_user));
        if template.join("PG_VERSION").is_file() {
            return Ok(template);
        }
        let building =
            template.with_extension(format!("{}-{}", std::process::id(), fastrand::u32(..)));
        let (program, mut args) = identity.command(&bindir.join("initdb"));
        args.extend(
            [
                "-D",
                &building.to_string_lossy(),
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--auth-local=peer",
                "--auth-host=scram-sha-256",
            ]
            .map(OsString::from),
        );
        let mut command = Command::new(program);
        command.args(args).env_clear().env("PATH", "/usr/bin:/bin");
        let outcome = process::run(command, b"", Duration::from_secs(120));
        if outcome.code != 0 {
            let _ = std::fs::remove_dir_all(&building);
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&outcome.stderr).trim()
            ));
        }
        // Another simulator may have made it meanwhile: keep the first.
        if std::fs::rename(&building, &template).is_err() {
            let _ = std::fs::remove_dir_all(&building);
        }
        Ok(template)
    }

    /// The server of the pod, started (and its volume bootstrapped when empty) when it has none.
    fn server(&self, call: &ExecCall, host: &Host) -> Result<(SocketAddr, PathBuf), String> {
        let bindir = self.bindir()?.to_path_buf();
        let folder = self.pod_dir(call);
        let socket_dir = folder.join("run");
        if let Some(address) = self.servers.running(&call.pod_uid) {
            return Ok((address, socket_dir));
        }
        // Read from the store before the servers' lock is taken (never the other way round).
        let volume = self.volume_folder(call, host);
        let cluster_name = call
            .labels
            .get("cnpg.io/cluster")
            .cloned()
            .unwrap_or_else(|| call.pod.clone());
        let cluster = host
            .object(cnpg::STORE_KEY, &call.namespace, &cluster_name)
            .unwrap_or_default();
        let mut servers = self.servers.lock();
        if let Some(address) = servers.running(&call.pod_uid) {
            return Ok((address, socket_dir));
        }
        let pgdata = volume.join("pgdata");
        servers.free(&call.pod_uid, &pgdata);
        let identity = Identity::current();
        for dir in [&volume, &socket_dir] {
            std::fs::create_dir_all(dir)
                .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        }
        let fresh = !pgdata.join("PG_VERSION").is_file();
        if fresh {
            let template = self.template(&bindir, &identity)?;
            let _ = std::fs::remove_dir_all(&pgdata);
            copy_tree(&template, &pgdata)?;
        }
        for (file, text) in [
            ("pg_hba.conf", pg_hba(&cluster)),
            ("pg_ident.conf", pg_ident(&identity.os_user)),
        ] {
            let path = pgdata.join(file);
            std::fs::write(&path, text)
                .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        }
        let address = process::free_port()?;
        let (program, mut args) = identity.command(&bindir.join("postgres"));
        args.push("-D".into());
        args.push(pgdata.clone().into());
        for setting in settings(&cluster, address.port(), &socket_dir, &pgdata) {
            args.push("-c".into());
            args.push(setting.into());
        }
        let server = process::Server::start(process::ServerSpec {
            program: &program,
            args,
            env: Vec::new(),
            log: &folder.join("postgres.log"),
            listens_on: address,
            stop_signal: "INT",
            start_within: Duration::from_secs(30),
        })
        .map_err(|error| error.replacen("unshare did not listen", "postgres did not listen", 1))?;
        servers.insert(
            &call.pod_uid,
            process::PodServer {
                server,
                data: pgdata,
                port: 5432,
            },
        );
        // Still under the lock: no exec meets the server before its bootstrap ended.
        if fresh
            && let Err(error) =
                self.bootstrap(call, host, &cluster, &cluster_name, address, &socket_dir)
        {
            // An interrupted bootstrap starts again from an empty volume, as the operator's
            // bootstrap job does.
            if let Some(served) = servers.remove(&call.pod_uid) {
                let pgdata = served.data.clone();
                drop(served);
                let _ = std::fs::remove_dir_all(pgdata);
            }
            return Err(error);
        }
        Ok((address, socket_dir))
    }

    /// `bootstrap.initdb`'s owner and database, as `postgres` over the socket.
    fn bootstrap(
        &self,
        call: &ExecCall,
        host: &Host,
        cluster: &Value,
        cluster_name: &str,
        address: SocketAddr,
        socket_dir: &Path,
    ) -> Result<(), String> {
        let initdb = &cluster["spec"]["bootstrap"]["initdb"];
        let database = initdb["database"].as_str().unwrap_or("app");
        let owner = initdb["owner"].as_str().unwrap_or(database);
        let secret_name = initdb["secret"]["name"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{cluster_name}-app"));
        let password = host
            .object("secrets", &call.namespace, &secret_name)
            .and_then(|secret| secret_value(&secret, "password"));
        let sql = bootstrap_sql(database, owner, password.as_deref());
        let outcome = self.client(
            call,
            "psql",
            &["-v".into(), "ON_ERROR_STOP=1".into(), "-q".into()],
            sql.as_bytes(),
            address,
            socket_dir,
        )?;
        if outcome.code != 0 {
            // psql quotes the failing statement (`LINE 1: CREATE ROLE ... PASSWORD '...'`):
            // only its error lines are kept, so the password never reaches a pod's status.
            let stderr = String::from_utf8_lossy(&outcome.stderr);
            let said: Vec<&str> = stderr
                .lines()
                .filter(|line| !line.starts_with("LINE ") && !line.trim_start().starts_with('^'))
                .collect();
            return Err(format!(
                "bootstrap of {cluster_name} failed: {}",
                said.join("\n").trim()
            ));
        }
        Ok(())
    }

    /// Runs a client program of the image against the pod's server, as the image's `postgres`
    /// user over its socket unless the arguments say otherwise.
    fn client(
        &self,
        call: &ExecCall,
        program: &str,
        args: &[String],
        stdin: &[u8],
        address: SocketAddr,
        socket_dir: &Path,
    ) -> Result<ExecOutcome, String> {
        let bindir = self.bindir()?;
        let home = self.pod_dir(call).join("home");
        std::fs::create_dir_all(&home)
            .map_err(|error| format!("cannot create {}: {error}", home.display()))?;
        let mut command = Command::new(bindir.join(program));
        command.args(args).env_clear().env("PATH", "/usr/bin:/bin");
        for (name, value) in &call.env {
            if !matches!(name.as_str(), "PGHOST" | "PGPORT" | "HOME" | "PATH") {
                command.env(name, value);
            }
        }
        if !call.env.iter().any(|(name, _)| name == "PGUSER") {
            command.env("PGUSER", "postgres");
        }
        command
            .env("PGHOST", socket_dir)
            .env("PGPORT", address.port().to_string())
            .env("HOME", home);
        let mut outcome = process::run(command, stdin, Duration::from_secs(120));
        outcome.stderr = as_in_the_pod(&outcome.stderr, address, socket_dir).into_bytes();
        Ok(outcome)
    }
}

impl Program for Postgres {
    fn image(&self) -> &'static Image {
        &catalogue::POSTGRESQL
    }

    fn endpoints(&self) -> Option<&dyn PodEndpoints> {
        Some(&self.servers)
    }

    fn exec(&self, call: &ExecCall, argv: &[String], host: &Host) -> Option<ExecOutcome> {
        let [program, args @ ..] = argv else {
            return None;
        };
        if !CLIENTS.contains(&program.as_str()) {
            return None;
        }
        let fail = |message: String| ExecOutcome {
            code: 2,
            stdout: Vec::new(),
            stderr: format!("{message}\n").into_bytes(),
        };
        let outcome = self.server(call, host).and_then(|(address, socket_dir)| {
            self.client(call, program, args, &call.stdin, address, &socket_dir)
        });
        Some(outcome.unwrap_or_else(fail))
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        self.server(call, host).map(|_| ())
    }

    fn logs(&self, call: &ExecCall) -> Option<String> {
        if self.bindir.is_none() {
            return Some(format!("{}\n", Self::no_server()));
        }
        std::fs::read_to_string(self.pod_dir(call).join("postgres.log")).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_operators_hba_rules_put_the_clusters_own_between_peer_and_password_rules() {
        let cluster = json!({"spec": {"postgresql": {"pg_hba": ["host all all 10.0.0.0/8 md5"]}}});
        assert_eq!(
            pg_hba(&cluster),
            "# Grant local access ('local' user map)\n\
             local all all peer map=local\n\n\
             # Require client certificate authentication for the streaming_replica user\n\
             hostssl postgres streaming_replica all cert\n\
             hostssl replication streaming_replica all cert\n\n\
             #\n# USER-DEFINED RULES\n#\n\
             host all all 10.0.0.0/8 md5\n\n\
             #\n# FIXED RULES\n#\n\n\
             # Otherwise use the default authentication method\n\
             host all all all scram-sha-256\n"
        );
        assert_eq!(pg_ident("nobody"), "local nobody postgres\n");
    }

    #[test]
    fn a_clients_messages_name_the_pods_socket_and_port() {
        let address: SocketAddr = "127.0.0.1:41234".parse().expect("an address");
        let said = as_in_the_pod(
            b"psql: error: connection to server on socket \"/tmp/x/run/.s.PGSQL.41234\" failed: FATAL:  Peer authentication failed for user \"gitlab\"\n\
              psql: error: connection to server at \"127.0.0.1\", port 41234 failed: FATAL:  password authentication failed for user \"gitlab\"\n",
            address,
            Path::new("/tmp/x/run"),
        );
        assert_eq!(
            said,
            "psql: error: connection to server on socket \"/controller/run/.s.PGSQL.5432\" failed: FATAL:  Peer authentication failed for user \"gitlab\"\n\
             psql: error: connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  password authentication failed for user \"gitlab\"\n"
        );
    }

    #[test]
    fn the_bootstrap_quotes_names_and_the_password() {
        assert_eq!(
            bootstrap_sql("app", "app", Some("it's")),
            "CREATE ROLE \"app\" LOGIN PASSWORD 'it''s';\nCREATE DATABASE \"app\" OWNER \"app\";\n"
        );
        assert_eq!(
            bootstrap_sql("d\"b", "o", None),
            "CREATE ROLE \"o\" LOGIN;\nCREATE DATABASE \"d\"\"b\" OWNER \"o\";\n"
        );
    }

    #[test]
    fn the_clusters_parameters_come_first_and_the_server_listens_on_loopback_only() {
        let cluster = json!({"spec": {"postgresql": {"parameters": {"password_encryption": "scram-sha-256", "max_wal_senders": 5}}}});
        let settings = settings(
            &cluster,
            5555,
            Path::new("/run/pg"),
            Path::new("/data/pgdata"),
        );
        assert_eq!(
            settings,
            [
                "max_wal_senders=5",
                "password_encryption=scram-sha-256",
                "listen_addresses=127.0.0.1",
                "port=5555",
                "unix_socket_directories=/run/pg",
                "hba_file=/data/pgdata/pg_hba.conf",
                "ident_file=/data/pgdata/pg_ident.conf",
                "shared_buffers=16MB",
                "max_connections=40",
                "fsync=off",
                "synchronous_commit=off",
                "full_page_writes=off",
            ]
        );
    }

    #[test]
    fn the_user_name_comes_from_the_password_database() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_name(65534).as_deref(), Some("nobody"));
    }

    #[test]
    fn as_root_the_server_runs_in_a_user_namespace_as_nobody() {
        let identity = Identity {
            wrapper: Some(vec!["/usr/bin/unshare".into(), "--user".into()]),
            os_user: "nobody".into(),
        };
        assert_eq!(
            identity.command(Path::new("/pg/bin/postgres")),
            (
                PathBuf::from("/usr/bin/unshare"),
                vec![OsString::from("--user"), OsString::from("/pg/bin/postgres")]
            )
        );
        let direct = Identity {
            wrapper: None,
            os_user: "dev".into(),
        };
        assert_eq!(
            direct.command(Path::new("/pg/bin/postgres")),
            (PathBuf::from("/pg/bin/postgres"), Vec::new())
        );
    }
}
