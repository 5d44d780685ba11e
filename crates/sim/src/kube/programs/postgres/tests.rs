use super::*;

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).collect()
}

fn run(server: &mut Server, words: &[&str], stdin: &str) -> (i32, String, String) {
    let outcome = psql(server, &args(words), stdin);
    (
        outcome.code,
        String::from_utf8_lossy(&outcome.stdout).into_owned(),
        String::from_utf8_lossy(&outcome.stderr).into_owned(),
    )
}

fn fresh() -> Server {
    Server::bootstrapped("app", "app", Some("app-password".into()))
}

#[test]
fn the_bootstrap_leaves_the_superuser_the_templates_and_the_app_database() {
    let mut server = fresh();
    assert_eq!(
        run(
            &mut server,
            &["psql", "-tAc", "SELECT 1 FROM pg_roles WHERE rolname='app'"][1..],
            ""
        ),
        (0, "1\n".into(), String::new())
    );
    assert_eq!(
        run(
            &mut server,
            &[
                "-tAc",
                "SELECT datname FROM pg_database WHERE datname = 'app'"
            ],
            ""
        )
        .1,
        "app\n"
    );
    let (code, listing, _) = run(&mut server, &["-c", "\\l"], "");
    assert_eq!(code, 0);
    assert!(listing.contains(" app       | app"), "{listing}");
    assert!(listing.contains(" template0 | postgres"), "{listing}");
}

#[test]
fn a_bootstrap_creates_its_role_and_database_once_in_postgresqls_words() {
    let mut server = fresh();
    let probe = [
        "-v",
        "ON_ERROR_STOP=1",
        "-tAc",
        "SELECT 1 FROM pg_roles WHERE rolname='gitlab'",
    ];
    assert_eq!(
        run(&mut server, &probe, ""),
        (0, String::new(), String::new())
    );
    // The password on stdin, as phase 2 sends it.
    let create = "CREATE ROLE gitlab LOGIN PASSWORD 'it''s-secret';\n";
    assert_eq!(
        run(&mut server, &["-v", "ON_ERROR_STOP=1"], create),
        (0, "CREATE ROLE\n".into(), String::new())
    );
    assert_eq!(run(&mut server, &probe, "").1, "1\n");
    // Again: PostgreSQL's error, exit 3 with ON_ERROR_STOP from a script, 0 without.
    assert_eq!(
        run(&mut server, &["-v", "ON_ERROR_STOP=1"], create),
        (
            3,
            String::new(),
            "psql:<stdin>:1: ERROR:  role \"gitlab\" already exists\n".into()
        )
    );
    assert_eq!(run(&mut server, &[], create).0, 0);
    let database = [
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        "CREATE DATABASE gitlabhq_production OWNER gitlab",
    ];
    assert_eq!(
        run(&mut server, &database, ""),
        (0, "CREATE DATABASE\n".into(), String::new())
    );
    assert_eq!(
        run(&mut server, &database, ""),
        (
            1,
            String::new(),
            "ERROR:  database \"gitlabhq_production\" already exists\n".into()
        )
    );
    assert_eq!(
        run(
            &mut server,
            &["-c", "CREATE DATABASE other OWNER nobody"],
            ""
        )
        .2,
        "ERROR:  role \"nobody\" does not exist\n"
    );
    assert_eq!(
        run(
            &mut server,
            &[
                "-tAc",
                "SELECT 1 FROM pg_database WHERE datname='gitlabhq_production'"
            ],
            ""
        )
        .1,
        "1\n"
    );
    // What other programs see.
    assert_eq!(
        server
            .roles
            .get("gitlab")
            .and_then(|r| r.password.clone())
            .as_deref(),
        Some("it's-secret")
    );
    assert_eq!(
        server
            .databases
            .get("gitlabhq_production")
            .map(|d| d.owner.as_str()),
        Some("gitlab")
    );
    // A new password.
    assert_eq!(
        run(
            &mut server,
            &["-c", "ALTER ROLE gitlab WITH PASSWORD 'new'"],
            ""
        )
        .1,
        "ALTER ROLE\n"
    );
    assert_eq!(
        server
            .roles
            .get("gitlab")
            .and_then(|r| r.password.clone())
            .as_deref(),
        Some("new")
    );
    assert_eq!(
        run(&mut server, &["-c", "ALTER ROLE ghost PASSWORD 'x'"], "").2,
        "ERROR:  role \"ghost\" does not exist\n"
    );
}

#[test]
fn output_is_aligned_unless_asked_otherwise() {
    let mut server = fresh();
    assert_eq!(
        run(&mut server, &["-c", "SELECT 1"], "").1,
        " ?column?\n----------\n        1\n(1 row)\n\n"
    );
    assert_eq!(
        run(&mut server, &["-t", "-c", "SELECT 1"], "").1,
        "        1\n\n"
    );
    assert_eq!(
        run(
            &mut server,
            &["-A", "-c", "SELECT rolname, rolsuper FROM pg_roles"],
            ""
        )
        .1,
        "rolname|rolsuper\napp|f\npostgres|t\n(2 rows)\n"
    );
    assert_eq!(run(&mut server, &["-q", "-c", "CREATE ROLE x"], "").1, "");
}

#[test]
fn connections_and_statements_fail_as_postgresql_fails_them() {
    let mut server = fresh();
    assert_eq!(
        run(&mut server, &["-U", "ghost", "-c", "SELECT 1"], "").2,
        "psql: error: connection to server on socket \"/controller/run/.s.PGSQL.5432\" failed: FATAL:  role \"ghost\" does not exist\n"
    );
    assert_eq!(run(&mut server, &["-d", "nodb", "-c", "SELECT 1"], "").0, 2);
    assert_eq!(
        run(&mut server, &["-c", "SELECT 1 FROM nowhere"], "").2,
        "ERROR:  relation \"nowhere\" does not exist\n"
    );
    assert_eq!(
        run(&mut server, &["-c", "CREATE ROLE"], "").2,
        "ERROR:  syntax error at end of input\n"
    );
    // Statements after an error still run without ON_ERROR_STOP; the line is the statement's.
    let (code, stdout, stderr) = run(
        &mut server,
        &[],
        "CREATE ROLE a;\n-- a comment; with a semicolon\nCREATE ROLE a;\nCREATE ROLE b;\n",
    );
    assert_eq!(code, 0);
    assert_eq!(stdout, "CREATE ROLE\nCREATE ROLE\n");
    assert_eq!(
        stderr,
        "psql:<stdin>:3: ERROR:  role \"a\" already exists\n"
    );
    assert_eq!(
        run(&mut server, &["-c", "DROP ROLE app"], "").2,
        "ERROR:  role \"app\" cannot be dropped because some objects depend on it\nDETAIL:  owner of database app\n"
    );
}

#[test]
fn a_service_host_names_its_cluster() {
    assert_eq!(
        cluster_of_host("postgresql-cnpg-rw.postgresql.svc", "gitlab"),
        Some(("postgresql".into(), "postgresql-cnpg".into()))
    );
    assert_eq!(
        cluster_of_host("pg-ro", "demo"),
        Some(("demo".into(), "pg".into()))
    );
    assert_eq!(cluster_of_host("redis-master.redis.svc", "demo"), None);
}
