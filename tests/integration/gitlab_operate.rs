//! What operators do to GitLab by hand besides reading it, against the GitLab simulator: the
//! qualification's access probe.

use crate::support::{BPRUN, GITLAB_TOKEN, SimKind, repo, with_recaps};

const PROBE: &str = r#"
step("Set up", || { gitlab_ensure_group("blueprint-apps"); });
step("Probe", || {
    let probe = gitlab_access_probe("blueprint-apps");
    for name in ["developer_clone", "developer_delete", "outsider_clone", "anonymous_clone"] {
        print(`${name}: ${if probe[name].allowed { "allowed" } else { "refused" }} (${probe[name].detail})`);
    }
    let users = gitlab_get_all("users").map(|user| user.username);
    print(`users: ${users}`);
    print(`projects: ${gitlab_projects("blueprint-apps").len()}`);
});
"#;

#[test]
fn the_access_probe_asks_as_a_developer_an_outsider_and_anonymous_and_leaves_nothing_behind() {
    let sim = BPRUN.sim(SimKind::Gitlab, &[]);
    // What an interrupted probe left: removed before the probe starts.
    let leftover = sim.api(
        "POST",
        "users",
        Some(r#"{"username": "bprun-probe-developer-old123", "name": "left", "email": "left@probe.invalid", "force_random_password": true}"#),
    );
    assert_eq!(leftover.status, 201, "{}", leftover.body);
    let test = repo()
        .script(PROBE)
        .env("GITLAB_URL", sim.gitlab_url())
        .env("GITLAB_TOKEN", GITLAB_TOKEN);
    let run = || {
        test.run(&["scripts/test.rhai"]).expect(
            0,
            &with_recaps(
                r#"
                [1/2] Set up ... ok (#.## s)
                [2/2] Probe ...
                    developer_clone: allowed (2 refs)
                    developer_delete: refused (403 Forbidden)
                    outsider_clone: refused (404 Not Found)
                    anonymous_clone: refused (401 Unauthorized)
                    users: ["root"]
                    projects: 0
                [2/2] Probe ... ok (#.## s)

                <recap of scripts/test.rhai: Set up: ok; Probe: ok>
                "#,
            ),
            "",
        );
    };
    sim.api(
        "POST",
        "groups",
        Some(r#"{"name": "blueprint-apps", "path": "blueprint-apps", "visibility": "internal"}"#),
    );
    run();
    // Again: a probe changes nothing it leaves behind.
    run();
    sim.clear_requests();
    test.run(&["--check", "scripts/test.rhai"]).expect(
        1,
        &with_recaps(
            r#"
            check mode: nothing will be changed
            [1/2] Set up ... ok (#.## s)
            [2/2] Probe ... failed (#.## s)

            <recap of scripts/test.rhai (check mode): Set up: ok; Probe: failed>
            "#,
        ),
        r#"
        error: step "Probe" failed
          × gitlab_access_probe cannot run in check mode: the probe creates two users and a project (and deletes them again)
           ╭─[scripts/test.rhai:4:17]
         3 │ step("Probe", || {
         4 │     let probe = gitlab_access_probe("blueprint-apps");
           ·                 ─────────┬─────────
           ·                          ╰── failed here
         5 │     for name in ["developer_clone", "developer_delete", "outsider_clone", "anonymous_clone"] {
           ╰────
          hint: run without --check, or guard the call with `if !check_mode() { ... }`
        re-run with --resume to continue from here
        "#,
    );
    assert_eq!(sim.mutating_requests(), 0);
}
