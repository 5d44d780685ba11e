//! CloudNativePG's PostgreSQL image (`ghcr.io/cloudnative-pg/postgresql`): `psql` in an
//! instance pod, against one in-memory server per Cluster (namespace and `cnpg.io/cluster`), so
//! what one exec creates is there for the next and for other programs ([`Servers`]: does a role
//! with this password exist, does this database). The server starts as `initdb` leaves it: the
//! `postgres` superuser, `template0`, `template1`, `postgres`, and the bootstrap's database and
//! owner (`app`/`app` by default) with the password of its Secret.
//!
//! What `psql` does here is what a bootstrap does: `CREATE ROLE|USER ... [LOGIN] [PASSWORD '...']`,
//! `ALTER ROLE|USER ... PASSWORD`, `CREATE DATABASE d [OWNER r]`, `ALTER DATABASE d OWNER TO r`,
//! `DROP ROLE|DATABASE [IF EXISTS]`, `GRANT ...`, `CREATE EXTENSION`, `SELECT` of literals or of
//! `pg_roles`/`pg_user`/`pg_database` columns with `WHERE col = 'v' [AND ...]`, `\l` and `\du`.
//! Output and errors are psql's: command tags, aligned or `-A`/`-t` rows, `ERROR:  role "x"
//! already exists`; exit 1 for a failing `-c`, and for a script on stdin 0 unless
//! `ON_ERROR_STOP` is set (then 3, its errors prefixed `psql:<stdin>:LINE:`), as psql exits.

use super::{ExecCall, ExecOutcome, Host, Program};
use crate::kube::cnpg;
use base64::Engine;
use std::collections::BTreeMap;
use std::sync::Mutex;

pub const IMAGES: &[&str] = &["ghcr.io/cloudnative-pg/postgresql"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub login: bool,
    pub superuser: bool,
    pub createdb: bool,
    pub password: Option<String>,
}

impl Role {
    fn new(name: &str, login: bool) -> Role {
        Role {
            name: name.to_string(),
            login,
            superuser: false,
            createdb: false,
            password: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    pub name: String,
    pub owner: String,
}

/// One PostgreSQL server: its roles and databases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Server {
    pub roles: BTreeMap<String, Role>,
    pub databases: BTreeMap<String, Database>,
}

impl Server {
    /// What `initdb` and CloudNativePG's bootstrap leave: the superuser, the template and
    /// maintenance databases, and the application database and owner.
    pub fn bootstrapped(database: &str, owner: &str, password: Option<String>) -> Server {
        let mut server = Server::default();
        let mut postgres = Role::new("postgres", true);
        postgres.superuser = true;
        postgres.createdb = true;
        server.roles.insert("postgres".into(), postgres);
        for name in ["postgres", "template0", "template1"] {
            server.databases.insert(
                name.into(),
                Database {
                    name: name.into(),
                    owner: "postgres".into(),
                },
            );
        }
        let mut app = Role::new(owner, true);
        app.password = password;
        server.roles.insert(owner.into(), app);
        server.databases.insert(
            database.into(),
            Database {
                name: database.into(),
                owner: owner.into(),
            },
        );
        server
    }
}

/// The servers of every Cluster, by (namespace, Cluster name): what other programs ask.
#[derive(Default)]
pub struct Servers {
    servers: Mutex<BTreeMap<(String, String), Server>>,
}

impl Servers {
    /// The server of a Cluster as it is now (`None` before any `psql` ran in it).
    pub fn server(&self, namespace: &str, cluster: &str) -> Option<Server> {
        self.lock()
            .get(&(namespace.to_string(), cluster.to_string()))
            .cloned()
    }

    /// Whether role `role` exists, can log in, and has password `password`.
    pub fn role_has_password(
        &self,
        namespace: &str,
        cluster: &str,
        role: &str,
        password: &str,
    ) -> bool {
        self.server(namespace, cluster).is_some_and(|server| {
            server
                .roles
                .get(role)
                .is_some_and(|r| r.login && r.password.as_deref() == Some(password))
        })
    }

    /// Whether database `database` exists (and its owner).
    pub fn database_owner(&self, namespace: &str, cluster: &str, database: &str) -> Option<String> {
        self.server(namespace, cluster)?
            .databases
            .get(database)
            .map(|d| d.owner.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Server>> {
        self.servers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The (namespace, Cluster) a service host names: `postgresql-cnpg-rw.postgresql.svc`,
/// `...svc.cluster.local`, `postgresql-cnpg-ro.postgresql`, or a bare `NAME-rw` in
/// `default_namespace`.
pub fn cluster_of_host(host: &str, default_namespace: &str) -> Option<(String, String)> {
    let mut parts = host.split('.');
    let service = parts.next()?;
    let namespace = parts.next().unwrap_or(default_namespace);
    let cluster = ["-rw", "-ro", "-r"]
        .iter()
        .find_map(|suffix| service.strip_suffix(suffix))?;
    Some((namespace.to_string(), cluster.to_string()))
}

pub struct Postgres;

impl Program for Postgres {
    fn name(&self) -> &'static str {
        "postgresql"
    }

    fn images(&self) -> &[&'static str] {
        IMAGES
    }

    fn exec(&self, call: &ExecCall, argv: &[String], host: &Host) -> Option<ExecOutcome> {
        let [program, args @ ..] = argv else {
            return None;
        };
        if program != "psql" {
            return None;
        }
        let cluster = call
            .labels
            .get("cnpg.io/cluster")
            .cloned()
            .unwrap_or_else(|| call.pod.clone());
        let key = (call.namespace.clone(), cluster.clone());
        let servers = &host.shared().postgres;
        let initial = {
            let known = servers.lock().contains_key(&key);
            (!known).then(|| initial_server(host, &call.namespace, &cluster))
        };
        let mut all = servers.lock();
        let server = all
            .entry(key)
            .or_insert_with(|| initial.unwrap_or_default());
        let stdin = String::from_utf8_lossy(&call.stdin).into_owned();
        Some(psql(server, args, &stdin))
    }
}

/// The server a Cluster's bootstrap leaves (its `initdb` database and owner, the owner's
/// password from the bootstrap Secret).
pub fn initial_server(host: &Host, namespace: &str, cluster: &str) -> Server {
    let object = host
        .object(cnpg::STORE_KEY, namespace, cluster)
        .unwrap_or_default();
    let initdb = &object["spec"]["bootstrap"]["initdb"];
    let database = initdb["database"].as_str().unwrap_or("app").to_string();
    let owner = initdb["owner"].as_str().unwrap_or(&database).to_string();
    let secret = initdb["secret"]["name"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{cluster}-app"));
    let password = host
        .object("secrets", namespace, &secret)
        .and_then(|s| s["data"]["password"].as_str().map(str::to_string))
        .and_then(|encoded| {
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
        })
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    Server::bootstrapped(&database, &owner, password)
}

/// psql's options that matter here.
#[derive(Debug, Default)]
struct Options {
    commands: Vec<String>,
    tuples_only: bool,
    unaligned: bool,
    quiet: bool,
    on_error_stop: bool,
    user: Option<String>,
    database: Option<String>,
    file: Option<String>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut positional = Vec::new();
    let mut index = 0;
    let set_variable = |options: &mut Options, assignment: &str| {
        let (name, value) = assignment.split_once('=').unwrap_or((assignment, ""));
        if name == "ON_ERROR_STOP" {
            options.on_error_stop =
                !matches!(value.to_ascii_lowercase().as_str(), "0" | "off" | "false");
        }
    };
    while index < args.len() {
        let arg = &args[index];
        let value_of = |rest: &str, index: &mut usize| -> Result<String, String> {
            if !rest.is_empty() {
                return Ok(rest.to_string());
            }
            *index += 1;
            args.get(*index).cloned().ok_or_else(|| {
                format!(
                    "psql: error: option requires an argument -- '{}'",
                    arg.trim_start_matches('-').chars().last().unwrap_or('?')
                )
            })
        };
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            let value = |index: &mut usize| -> Result<String, String> {
                match &inline {
                    Some(value) => Ok(value.clone()),
                    None => {
                        *index += 1;
                        args.get(*index).cloned().ok_or_else(|| {
                            format!("psql: error: option '--{name}' requires an argument")
                        })
                    }
                }
            };
            match name {
                "command" => options.commands.push(value(&mut index)?),
                "tuples-only" => options.tuples_only = true,
                "no-align" => options.unaligned = true,
                "quiet" => options.quiet = true,
                "set" | "variable" => {
                    let assignment = value(&mut index)?;
                    set_variable(&mut options, &assignment);
                }
                "username" => options.user = Some(value(&mut index)?),
                "dbname" => options.database = Some(value(&mut index)?),
                "file" => options.file = Some(value(&mut index)?),
                "host" | "port" => {
                    value(&mut index)?;
                }
                "no-psqlrc" | "no-password" | "echo-errors" | "single-transaction" => {}
                other => {
                    return Err(format!(
                        "psql: error: unrecognized option '--{other}'\npsql: hint: Try \"psql --help\" for more information."
                    ));
                }
            }
        } else if let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) {
            for (at, flag) in flags.char_indices() {
                let rest = &flags[at + flag.len_utf8()..];
                match flag {
                    't' => options.tuples_only = true,
                    'A' => options.unaligned = true,
                    'q' => options.quiet = true,
                    'X' | 'w' | 'W' | 'b' | 'e' | 'a' | '1' => {}
                    'c' => {
                        options.commands.push(value_of(rest, &mut index)?);
                        break;
                    }
                    'v' => {
                        let assignment = value_of(rest, &mut index)?;
                        set_variable(&mut options, &assignment);
                        break;
                    }
                    'U' => {
                        options.user = Some(value_of(rest, &mut index)?);
                        break;
                    }
                    'd' => {
                        options.database = Some(value_of(rest, &mut index)?);
                        break;
                    }
                    'f' => {
                        options.file = Some(value_of(rest, &mut index)?);
                        break;
                    }
                    'h' | 'p' => {
                        value_of(rest, &mut index)?;
                        break;
                    }
                    other => {
                        return Err(format!(
                            "psql: error: invalid option -- '{other}'\npsql: hint: Try \"psql --help\" for more information."
                        ));
                    }
                }
            }
        } else {
            positional.push(arg.clone());
        }
        index += 1;
    }
    let mut positional = positional.into_iter();
    if options.database.is_none() {
        options.database = positional.next();
    }
    if options.user.is_none() {
        options.user = positional.next();
    }
    Ok(options)
}

/// Runs psql against `server`: `-c` commands, else the script on stdin.
pub fn psql(server: &mut Server, args: &[String], stdin: &str) -> ExecOutcome {
    let fail = |code: i32, message: String| ExecOutcome {
        code,
        stdout: Vec::new(),
        stderr: format!("{message}\n").into_bytes(),
    };
    let options = match parse_options(args) {
        Ok(options) => options,
        Err(message) => return fail(1, message),
    };
    let user = options.user.clone().unwrap_or_else(|| "postgres".into());
    let database = options.database.clone().unwrap_or_else(|| user.clone());
    let socket = "psql: error: connection to server on socket \"/controller/run/.s.PGSQL.5432\" failed: FATAL: ";
    if !server.roles.contains_key(&user) {
        return fail(2, format!("{socket} role \"{user}\" does not exist"));
    }
    if !server.databases.contains_key(&database) {
        return fail(
            2,
            format!("{socket} database \"{database}\" does not exist"),
        );
    }
    if options.file.as_deref().is_some_and(|file| file != "-") {
        return fail(
            1,
            format!(
                "psql: error: {}: No such file or directory",
                options.file.clone().unwrap_or_default()
            ),
        );
    }
    let mut stdout = String::new();
    let mut stderr = String::new();
    if !options.commands.is_empty() {
        for command in &options.commands {
            for (_, statement) in statements(command) {
                match run_statement(server, &statement, &options) {
                    Ok(text) => stdout.push_str(&text),
                    Err(error) => {
                        stderr.push_str(&format!("{error}\n"));
                        return ExecOutcome {
                            code: 1,
                            stdout: stdout.into_bytes(),
                            stderr: stderr.into_bytes(),
                        };
                    }
                }
            }
        }
        return ExecOutcome {
            code: 0,
            stdout: stdout.into_bytes(),
            stderr: stderr.into_bytes(),
        };
    }
    for (line, statement) in statements(stdin) {
        match run_statement(server, &statement, &options) {
            Ok(text) => stdout.push_str(&text),
            Err(error) => {
                stderr.push_str(&format!("psql:<stdin>:{line}: {error}\n"));
                if options.on_error_stop {
                    return ExecOutcome {
                        code: 3,
                        stdout: stdout.into_bytes(),
                        stderr: stderr.into_bytes(),
                    };
                }
            }
        }
    }
    ExecOutcome {
        code: 0,
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    }
}

/// The statements of a script with the line each starts on: SQL up to `;` (outside quotes and
/// `--` comments), and backslash meta-commands, one a line.
pub fn statements(script: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start_line = 1;
    let mut line = 1;
    let mut chars = script.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        if current.trim().is_empty() {
            start_line = line;
        }
        if c == '\n' {
            line += 1;
        }
        match quote {
            Some(q) => {
                current.push(c);
                if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    current.push(c);
                }
                '-' if chars.peek() == Some(&'-') => {
                    for skipped in chars.by_ref() {
                        if skipped == '\n' {
                            line += 1;
                            current.push(' ');
                            break;
                        }
                    }
                }
                '\\' if current.trim().is_empty() => {
                    let mut meta = String::from("\\");
                    for next in chars.by_ref() {
                        if next == '\n' {
                            line += 1;
                            break;
                        }
                        meta.push(next);
                    }
                    out.push((start_line, meta.trim().to_string()));
                    current.clear();
                }
                ';' => {
                    if !current.trim().is_empty() {
                        out.push((start_line, current.trim().to_string()));
                    }
                    current.clear();
                }
                _ => current.push(c),
            },
        }
    }
    if !current.trim().is_empty() {
        out.push((start_line, current.trim().to_string()));
    }
    out
}

/// A token of SQL: a word (unquoted, lowercased), a quoted identifier, a string, a symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Ident(String),
    Str(String),
    Symbol(char),
}

fn tokens(statement: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = statement.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '\'' || c == '"' {
            chars.next();
            let mut text = String::new();
            loop {
                match chars.next() {
                    Some(q) if q == c => {
                        if chars.peek() == Some(&c) {
                            chars.next();
                            text.push(c);
                        } else {
                            break;
                        }
                    }
                    Some(other) => text.push(other),
                    None => {
                        return Err(if c == '\'' {
                            "ERROR:  unterminated quoted string".to_string()
                        } else {
                            "ERROR:  unterminated quoted identifier".to_string()
                        });
                    }
                }
            }
            out.push(if c == '\'' {
                Token::Str(text)
            } else {
                Token::Ident(text)
            });
        } else if c.is_alphanumeric() || c == '_' || c == '.' || c == '*' {
            let mut word = String::new();
            while let Some(&next) = chars.peek() {
                if next.is_alphanumeric()
                    || next == '_'
                    || next == '.'
                    || next == '$'
                    || next == '*'
                {
                    word.push(next);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Token::Word(word.to_lowercase()));
        } else {
            chars.next();
            out.push(Token::Symbol(c));
        }
    }
    Ok(out)
}

fn text_of(token: &Token) -> String {
    match token {
        Token::Word(word) | Token::Ident(word) | Token::Str(word) => word.clone(),
        Token::Symbol(symbol) => symbol.to_string(),
    }
}

fn syntax_error(near: Option<&Token>) -> String {
    match near {
        Some(token) => format!("ERROR:  syntax error at or near \"{}\"", text_of(token)),
        None => "ERROR:  syntax error at end of input".to_string(),
    }
}

/// A name: an identifier (quoted keeps its case) or a word.
fn name_at(tokens: &[Token], at: usize) -> Result<String, String> {
    match tokens.get(at) {
        Some(Token::Word(word)) => Ok(word.clone()),
        Some(Token::Ident(ident)) => Ok(ident.clone()),
        other => Err(syntax_error(other)),
    }
}

fn is_word(token: Option<&Token>, word: &str) -> bool {
    matches!(token, Some(Token::Word(w)) if w == word)
}

/// Role options after the name (`WITH LOGIN PASSWORD '...'`).
fn role_options(role: &mut Role, tokens: &[Token]) -> Result<(), String> {
    let mut at = 0;
    if is_word(tokens.first(), "with") {
        at = 1;
    }
    while at < tokens.len() {
        let Token::Word(word) = &tokens[at] else {
            return Err(syntax_error(tokens.get(at)));
        };
        match word.as_str() {
            "login" => role.login = true,
            "nologin" => role.login = false,
            "superuser" => role.superuser = true,
            "nosuperuser" => role.superuser = false,
            "createdb" => role.createdb = true,
            "nocreatedb" => role.createdb = false,
            "createrole" | "nocreaterole" | "inherit" | "noinherit" | "replication"
            | "noreplication" | "bypassrls" | "nobypassrls" | "encrypted" => {}
            "password" => {
                at += 1;
                role.password = match tokens.get(at) {
                    Some(Token::Str(password)) => Some(password.clone()),
                    Some(Token::Word(null)) if null == "null" => None,
                    other => return Err(syntax_error(other)),
                };
            }
            "connection" | "valid" => {
                // CONNECTION LIMIT n, VALID UNTIL '...'
                at += 2;
            }
            _ => return Err(syntax_error(tokens.get(at))),
        }
        at += 1;
    }
    Ok(())
}

/// Runs one statement or meta-command; its output (command tag or rows) or psql's error line.
fn run_statement(
    server: &mut Server,
    statement: &str,
    options: &Options,
) -> Result<String, String> {
    if statement.starts_with('\\') {
        return meta(server, statement, options);
    }
    let tokens = tokens(statement)?;
    let tag = |tag: &str| {
        if options.quiet {
            String::new()
        } else {
            format!("{tag}\n")
        }
    };
    let words: Vec<String> = tokens
        .iter()
        .take(2)
        .map(|t| match t {
            Token::Word(w) => w.clone(),
            _ => String::new(),
        })
        .collect();
    let first = words.first().map(String::as_str).unwrap_or("");
    let second = words.get(1).map(String::as_str).unwrap_or("");
    match (first, second) {
        ("create", "role" | "user") => {
            let name = name_at(&tokens, 2)?;
            if server.roles.contains_key(&name) {
                return Err(format!("ERROR:  role \"{name}\" already exists"));
            }
            let mut role = Role::new(&name, second == "user");
            role_options(&mut role, &tokens[3..])?;
            server.roles.insert(name, role);
            Ok(tag("CREATE ROLE"))
        }
        ("alter", "role" | "user") => {
            let name = name_at(&tokens, 2)?;
            let Some(role) = server.roles.get_mut(&name) else {
                return Err(format!("ERROR:  role \"{name}\" does not exist"));
            };
            if is_word(tokens.get(3), "set") || is_word(tokens.get(3), "reset") {
                return Ok(tag("ALTER ROLE"));
            }
            let mut changed = role.clone();
            role_options(&mut changed, &tokens[3..])?;
            *role = changed;
            Ok(tag("ALTER ROLE"))
        }
        ("create", "database") => {
            let name = name_at(&tokens, 2)?;
            let mut owner = options.user.clone().unwrap_or_else(|| "postgres".into());
            let mut at = 3;
            if is_word(tokens.get(at), "with") {
                at += 1;
            }
            while at < tokens.len() {
                let key = name_at(&tokens, at)?;
                at += 1;
                if tokens.get(at) == Some(&Token::Symbol('=')) {
                    at += 1;
                }
                let value = tokens
                    .get(at)
                    .map(text_of)
                    .ok_or_else(|| syntax_error(None))?;
                at += 1;
                if key == "owner" {
                    owner = value;
                }
            }
            if server.databases.contains_key(&name) {
                return Err(format!("ERROR:  database \"{name}\" already exists"));
            }
            if !server.roles.contains_key(&owner) {
                return Err(format!("ERROR:  role \"{owner}\" does not exist"));
            }
            server
                .databases
                .insert(name.clone(), Database { name, owner });
            Ok(tag("CREATE DATABASE"))
        }
        ("alter", "database") => {
            let name = name_at(&tokens, 2)?;
            if !server.databases.contains_key(&name) {
                return Err(format!("ERROR:  database \"{name}\" does not exist"));
            }
            if is_word(tokens.get(3), "owner") && is_word(tokens.get(4), "to") {
                let owner = name_at(&tokens, 5)?;
                if !server.roles.contains_key(&owner) {
                    return Err(format!("ERROR:  role \"{owner}\" does not exist"));
                }
                if let Some(database) = server.databases.get_mut(&name) {
                    database.owner = owner;
                }
            }
            Ok(tag("ALTER DATABASE"))
        }
        ("drop", "database" | "role" | "user") => {
            let if_exists = is_word(tokens.get(2), "if") && is_word(tokens.get(3), "exists");
            let name = name_at(&tokens, if if_exists { 4 } else { 2 })?;
            let (what, exists) = if second == "database" {
                ("database", server.databases.contains_key(&name))
            } else {
                ("role", server.roles.contains_key(&name))
            };
            let done = if second == "database" {
                "DROP DATABASE"
            } else {
                "DROP ROLE"
            };
            if !exists {
                if if_exists {
                    return Ok(tag(done));
                }
                return Err(format!("ERROR:  {what} \"{name}\" does not exist"));
            }
            if second == "database" {
                server.databases.remove(&name);
            } else {
                let owned: Vec<String> = server
                    .databases
                    .values()
                    .filter(|d| d.owner == name)
                    .map(|d| format!("owner of database {}", d.name))
                    .collect();
                if !owned.is_empty() {
                    return Err(format!(
                        "ERROR:  role \"{name}\" cannot be dropped because some objects depend on it\nDETAIL:  {}",
                        owned.join("\n")
                    ));
                }
                server.roles.remove(&name);
            }
            Ok(tag(done))
        }
        ("grant", _) => {
            // GRANT ... ON DATABASE d TO r: both must exist.
            let on_database = tokens
                .windows(2)
                .position(|pair| is_word(pair.first(), "on") && is_word(pair.get(1), "database"));
            if let Some(at) = on_database {
                let database = name_at(&tokens, at + 2)?;
                if !server.databases.contains_key(&database) {
                    return Err(format!("ERROR:  database \"{database}\" does not exist"));
                }
            }
            if let Some(to) = tokens.iter().position(|t| is_word(Some(t), "to")) {
                let role = name_at(&tokens, to + 1)?;
                if role != "public" && !server.roles.contains_key(&role) {
                    return Err(format!("ERROR:  role \"{role}\" does not exist"));
                }
            }
            Ok(tag("GRANT"))
        }
        ("create", "extension") => Ok(tag("CREATE EXTENSION")),
        ("select", _) => select(server, &tokens[1..], options),
        _ => Err(format!(
            "ERROR:  the simulated PostgreSQL (bprun-sim) does not model this statement: {statement}"
        )),
    }
}

/// A catalog row as column -> value.
fn catalog(server: &Server, table: &str) -> Option<Vec<BTreeMap<&'static str, String>>> {
    let boolean = |b: bool| if b { "t" } else { "f" }.to_string();
    match table {
        "pg_roles" | "pg_user" | "pg_catalog.pg_roles" | "pg_catalog.pg_user" => Some(
            server
                .roles
                .values()
                .filter(|r| !table.ends_with("pg_user") || r.login)
                .map(|r| {
                    BTreeMap::from([
                        ("rolname", r.name.clone()),
                        ("usename", r.name.clone()),
                        ("rolcanlogin", boolean(r.login)),
                        ("rolsuper", boolean(r.superuser)),
                        ("usesuper", boolean(r.superuser)),
                        ("rolcreatedb", boolean(r.createdb)),
                    ])
                })
                .collect(),
        ),
        "pg_database" | "pg_catalog.pg_database" => Some(
            server
                .databases
                .values()
                .map(|d| {
                    BTreeMap::from([
                        ("datname", d.name.clone()),
                        ("owner", d.owner.clone()),
                        ("datistemplate", boolean(d.name.starts_with("template"))),
                    ])
                })
                .collect(),
        ),
        _ => None,
    }
}

/// `SELECT exprs [FROM catalog [WHERE col = 'v' [AND ...]]]`.
fn select(server: &Server, tokens: &[Token], options: &Options) -> Result<String, String> {
    let from = tokens.iter().position(|t| is_word(Some(t), "from"));
    let projection = &tokens[..from.unwrap_or(tokens.len())];
    let expressions: Vec<&[Token]> = projection.split(|t| *t == Token::Symbol(',')).collect();
    if expressions.iter().any(|e| e.is_empty()) {
        return Err(syntax_error(tokens.first()));
    }
    let rows: Vec<BTreeMap<&'static str, String>> = match from {
        None => vec![BTreeMap::new()],
        Some(at) => {
            let table = name_at(tokens, at + 1)?;
            let Some(rows) = catalog(server, &table) else {
                return Err(format!("ERROR:  relation \"{table}\" does not exist"));
            };
            let mut conditions = Vec::new();
            let mut index = at + 2;
            if is_word(tokens.get(index), "where") {
                index += 1;
                loop {
                    let column = name_at(tokens, index)?;
                    if tokens.get(index + 1) != Some(&Token::Symbol('=')) {
                        return Err(syntax_error(tokens.get(index + 1)));
                    }
                    let value = tokens
                        .get(index + 2)
                        .map(text_of)
                        .ok_or_else(|| syntax_error(None))?;
                    conditions.push((column, value));
                    index += 3;
                    if is_word(tokens.get(index), "and") {
                        index += 1;
                        continue;
                    }
                    break;
                }
            }
            if index < tokens.len() {
                return Err(syntax_error(tokens.get(index)));
            }
            for (column, _) in &conditions {
                if rows
                    .first()
                    .is_some_and(|row| !row.contains_key(column.as_str()))
                {
                    return Err(format!("ERROR:  column \"{column}\" does not exist"));
                }
            }
            rows.into_iter()
                .filter(|row| {
                    conditions
                        .iter()
                        .all(|(column, value)| row.get(column.as_str()) == Some(value))
                })
                .collect()
        }
    };
    let mut headers = Vec::new();
    let mut columns: Vec<Vec<String>> = Vec::new();
    let mut numeric = Vec::new();
    for expression in &expressions {
        let (header, values, is_number) = match expression {
            [Token::Word(number)] if number.parse::<f64>().is_ok() => (
                "?column?".to_string(),
                vec![number.clone(); rows.len()],
                true,
            ),
            [Token::Str(text)] => (
                "?column?".to_string(),
                vec![text.clone(); rows.len()],
                false,
            ),
            [Token::Word(column)] | [Token::Ident(column)] => {
                let values: Option<Vec<String>> = rows
                    .iter()
                    .map(|row| row.get(column.as_str()).cloned())
                    .collect();
                match values {
                    Some(values) if from.is_some() => (column.clone(), values, false),
                    _ => return Err(format!("ERROR:  column \"{column}\" does not exist")),
                }
            }
            other => return Err(syntax_error(other.first())),
        };
        headers.push(header);
        columns.push(values);
        numeric.push(is_number);
    }
    let records: Vec<Vec<String>> = (0..rows.len())
        .map(|row| columns.iter().map(|column| column[row].clone()).collect())
        .collect();
    Ok(table(&headers, &records, &numeric, options))
}

/// Rows as psql prints them: aligned (headers centred, numbers right-aligned, `(N rows)`),
/// unaligned (`-A`, `|` between fields), tuples only (`-t`).
fn table(
    headers: &[String],
    records: &[Vec<String>],
    numeric: &[bool],
    options: &Options,
) -> String {
    let mut out = String::new();
    if options.unaligned {
        if !options.tuples_only {
            out.push_str(&format!("{}\n", headers.join("|")));
        }
        for record in records {
            out.push_str(&format!("{}\n", record.join("|")));
        }
        if !options.tuples_only {
            out.push_str(&row_count(records.len()));
        }
        return out;
    }
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(column, header)| {
            records
                .iter()
                .map(|record| record[column].chars().count())
                .chain([header.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| format!("{}\n", cells.join("|").trim_end());
    if !options.tuples_only {
        out.push_str(&line(
            headers
                .iter()
                .zip(&widths)
                .map(|(header, width)| {
                    let total = width - header.chars().count();
                    let left = total / 2;
                    format!(" {}{header}{} ", " ".repeat(left), " ".repeat(total - left))
                })
                .collect(),
        ));
        out.push_str(&format!(
            "{}\n",
            widths
                .iter()
                .map(|width| "-".repeat(width + 2))
                .collect::<Vec<_>>()
                .join("+")
        ));
    }
    for record in records {
        out.push_str(&line(
            record
                .iter()
                .zip(&widths)
                .zip(numeric)
                .map(|((value, width), number)| {
                    if *number {
                        format!(" {value:>width$} ")
                    } else {
                        format!(" {value:<width$} ")
                    }
                })
                .collect(),
        ));
    }
    if !options.tuples_only {
        out.push_str(&row_count(records.len()));
    }
    out.push('\n');
    out
}

fn row_count(count: usize) -> String {
    if count == 1 {
        "(1 row)\n".to_string()
    } else {
        format!("({count} rows)\n")
    }
}

/// `\l` (databases and owners), `\du` (roles and attributes), `\q`.
fn meta(server: &Server, command: &str, options: &Options) -> Result<String, String> {
    let name = command.split_whitespace().next().unwrap_or("");
    match name {
        "\\l" | "\\list" | "\\l+" => {
            let records: Vec<Vec<String>> = server
                .databases
                .values()
                .map(|d| vec![d.name.clone(), d.owner.clone(), "UTF8".to_string()])
                .collect();
            let headers = ["Name", "Owner", "Encoding"].map(String::from);
            let mut out = String::new();
            if !options.tuples_only && !options.unaligned {
                out.push_str("                List of databases\n");
            }
            out.push_str(&table(&headers, &records, &[false; 3], options));
            Ok(out)
        }
        "\\du" | "\\du+" | "\\dg" => {
            let records: Vec<Vec<String>> = server
                .roles
                .values()
                .map(|r| {
                    let mut attributes = Vec::new();
                    if r.superuser {
                        attributes.push("Superuser");
                    }
                    if r.createdb && !r.superuser {
                        attributes.push("Create DB");
                    }
                    if !r.login {
                        attributes.push("Cannot login");
                    }
                    vec![r.name.clone(), attributes.join(", ")]
                })
                .collect();
            let headers = ["Role name", "Attributes"].map(String::from);
            let mut out = String::new();
            if !options.tuples_only && !options.unaligned {
                out.push_str("         List of roles\n");
            }
            out.push_str(&table(&headers, &records, &[false; 2], options));
            Ok(out)
        }
        "\\q" => Ok(String::new()),
        other => Err(format!(
            "invalid command {other} (the simulated psql runs \\l, \\du and \\q)"
        )),
    }
}

#[cfg(test)]
mod tests;
