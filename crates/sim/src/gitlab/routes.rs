//! Where a request goes, in the order GitLab checks: the simulator's own `/-/` endpoints, git's
//! smart HTTP, the runner API (authenticated by the runner's own token), then the REST API for
//! users' tokens, authorized per resource. Each table is searched in order; the first route
//! whose method and path match handles the request.

use serde_json::json;

use super::{GitlabSim, message};
use crate::http::{SimRequest, SimResponse};

/// A route's method; `None`: any (the handler tells the methods apart).
type Method = Option<&'static str>;
const GET: Method = Some("GET");
const POST: Method = Some("POST");
const PUT: Method = Some("PUT");
const DELETE: Method = Some("DELETE");
const ANY: Method = None;

/// A handler outside the user API: the request is all it reads.
type Open = fn(&GitlabSim, &SimRequest) -> SimResponse;
/// A handler of the user API: the request, its user and the parts of the path.
type Api = fn(&GitlabSim, &Call) -> SimResponse;

/// Exact paths outside `/api/v4`.
const CONTROL: &[(Method, &str, Open)] = &[
    (GET, "/-/health", |_, _| SimResponse::text(200, "GitLab OK")),
    (GET, "/-/readiness", |_, _| health_status()),
    (GET, "/-/liveness", |_, _| health_status()),
    (GET, "/-/sim/requests", GitlabSim::request_log),
    (DELETE, "/-/sim/requests", GitlabSim::clear_request_log),
    (GET, "/-/sim/faults", GitlabSim::injected_faults),
    (PUT, "/-/sim/faults", GitlabSim::inject_faults),
    (POST, "/-/sim/tokens", GitlabSim::toolbox_token),
    (GET, "/-/sim/clock", GitlabSim::calendar),
    (PUT, "/-/sim/clock", GitlabSim::advance_calendar),
    (POST, "/-/sim/runners", GitlabSim::toolbox_runner),
];

/// Exact paths below `/api/v4` that a runner calls with its own token.
const RUNNER_API: &[(Method, &str, Open)] = &[
    (POST, "/jobs/request", GitlabSim::request_job),
    (POST, "/runners/verify", GitlabSim::verify_runner),
    (DELETE, "/runners", GitlabSim::unregister_runner),
];

/// Path patterns below `/api/v4/`: `:name` matches one segment, a final `*` the rest.
const API: &[(Method, &str, Api)] = &[
    (GET, "version", |_, _| {
        SimResponse::json(200, &json!({"version": "17.9.0", "revision": "bprun-sim"}))
    }),
    (GET, "user", |sim, call| sim.current_user(call.user)),
    (ANY, "users", |sim, call| {
        sim.users(call.request, call.user, &[])
    }),
    (ANY, "users/:id", |sim, call| {
        sim.users(call.request, call.user, &[call.param("id")])
    }),
    (ANY, "groups/:id/members/*", |sim, call| {
        sim.members(call.request, true, call.param("id"), call.rest)
    }),
    (ANY, "projects/:id/members/*", |sim, call| {
        sim.members(call.request, false, call.param("id"), call.rest)
    }),
    (POST, "user/runners", |sim, call| {
        sim.create_runner(call.request)
    }),
    (ANY, "personal_access_tokens/*", |sim, call| {
        sim.personal_access_tokens(call.request, call.user, call.rest)
    }),
    (POST, "users/:id/personal_access_tokens", |sim, call| {
        sim.create_token(call.request, call.param("id"))
    }),
    (GET, "runners/all", |sim, call| {
        sim.list_runners(call.request, |_| true)
    }),
    (GET, "runners", |sim, call| {
        sim.list_runners(call.request, |runner| runner.runner_type != "instance_type")
    }),
    (GET, "runners/:id", |sim, call| sim.runner(call.param("id"))),
    (PUT, "runners/:id", |sim, call| {
        sim.update_runner(call.request, call.param("id"))
    }),
    (DELETE, "runners/:id", |sim, call| {
        sim.delete_runner(call.param("id"))
    }),
    (
        POST,
        "runners/:id/reset_authentication_token",
        |sim, call| sim.reset_runner_token(call.param("id")),
    ),
    (GET, "projects/:id/runners", |sim, call| {
        sim.project_runners(call.request, call.param("id"))
    }),
    (POST, "groups", |sim, call| {
        sim.create_group(call.request, call.user)
    }),
    (GET, "groups", |sim, call| {
        sim.list_groups(call.request, call.user)
    }),
    (GET, "groups/:id", |sim, call| sim.group(call.param("id"))),
    (PUT, "groups/:id", |sim, call| {
        sim.update_group(call.request, call.param("id"))
    }),
    (DELETE, "groups/:id", |sim, call| {
        sim.delete_group(call.param("id"))
    }),
    (GET, "groups/:id/projects", |sim, call| {
        sim.group_projects(call.request, call.user, call.param("id"))
    }),
    (POST, "projects", |sim, call| {
        sim.create_project(call.request, call.user)
    }),
    (GET, "projects", |sim, call| {
        sim.list_projects(call.request, call.user, None)
    }),
    (GET, "projects/:id", |sim, call| {
        sim.project(call.param("id"))
    }),
    (DELETE, "projects/:id", |sim, call| {
        sim.delete_project(call.param("id"))
    }),
    (ANY, "projects/:id/variables/*", |sim, call| {
        sim.variables(call.request, call.param("id"), call.rest)
    }),
    (ANY, "projects/:id/repository/commits/*", |sim, call| {
        sim.commits(call.request, call.param("id"), call.rest)
    }),
    (ANY, "projects/:id/repository/files/:file/*", |sim, call| {
        sim.files(
            call.request,
            call.param("id"),
            call.param("file"),
            call.rest,
        )
    }),
    (
        GET,
        "projects/:id/repository/branches/:branch",
        |sim, call| sim.branch(call.param("id"), call.param("branch")),
    ),
    (ANY, "projects/:id/protected_branches/*", |sim, call| {
        sim.protected_branches(call.request, call.param("id"), call.rest)
    }),
    (GET, "projects/:id/pipelines/latest", |sim, call| {
        sim.latest_pipeline(call.request, call.param("id"))
    }),
    (POST, "projects/:id/pipeline", |sim, call| {
        sim.create_pipeline(call.request, call.param("id"))
    }),
    (GET, "projects/:id/pipelines", |sim, call| {
        sim.list_pipelines(call.request, call.param("id"))
    }),
    (GET, "projects/:id/pipelines/:pipeline", |sim, call| {
        sim.pipeline(call.param("id"), call.param("pipeline"))
    }),
    (
        GET,
        "projects/:id/pipelines/:pipeline/variables",
        |sim, call| sim.pipeline_variables_of(call.param("id"), call.param("pipeline")),
    ),
    (GET, "projects/:id/pipelines/:pipeline/jobs", |sim, call| {
        sim.pipeline_jobs(call.request, call.param("id"), call.param("pipeline"))
    }),
    (GET, "projects/:id/jobs/:job/trace", |sim, call| {
        sim.job_trace_of(call.param("id"), call.param("job"))
    }),
    (GET, "projects/:id/jobs/:job", |sim, call| {
        sim.job(call.param("id"), call.param("job"))
    }),
    (POST, "projects/:id/jobs/:job/retry", |sim, call| {
        sim.retry_job(call.param("id"), call.param("job"))
    }),
    (POST, "projects/:id/jobs/:job/cancel", |sim, call| {
        sim.cancel_job(call.param("id"), call.param("job"))
    }),
    (POST, "projects/:id/jobs/:job/play", |sim, call| {
        sim.play_job(call.param("id"), call.param("job"))
    }),
    (
        POST,
        "projects/:id/pipelines/:pipeline/retry",
        |sim, call| sim.retry_pipeline(call.param("id"), call.param("pipeline")),
    ),
    (
        POST,
        "projects/:id/pipelines/:pipeline/cancel",
        |sim, call| sim.cancel_pipeline(call.param("id"), call.param("pipeline")),
    ),
];

fn health_status() -> SimResponse {
    SimResponse::json(200, &json!({"status": "ok"}))
}

/// The segments a pattern's `:name`s matched, by name.
type Params<'a> = Vec<(&'static str, &'a str)>;

/// A user API request as its route matched it.
pub(super) struct Call<'a> {
    pub(super) request: &'a SimRequest,
    pub(super) user: u64,
    params: Params<'a>,
    /// What the pattern's final `*` matched.
    pub(super) rest: &'a [&'a str],
}

impl<'a> Call<'a> {
    /// The segment `:name` matched (every handler reads only the names of its own pattern).
    pub(super) fn param(&self, name: &str) -> &'a str {
        self.params
            .iter()
            .find(|(key, _)| *key == name)
            .map_or("", |(_, value)| value)
    }
}

fn method_matches(method: Method, request: &SimRequest) -> bool {
    method.is_none_or(|method| method == request.method)
}

fn exact(table: &[(Method, &str, Open)], request: &SimRequest, path: &str) -> Option<Open> {
    table
        .iter()
        .find(|(method, pattern, _)| method_matches(*method, request) && *pattern == path)
        .map(|(_, _, handler)| *handler)
}

/// The `:name` segments and the rest that `pattern` matches in `segments`, if it matches.
fn matches<'a>(
    pattern: &'static str,
    segments: &'a [&'a str],
) -> Option<(Params<'a>, &'a [&'a str])> {
    let mut params = Vec::new();
    for (index, part) in pattern.split('/').enumerate() {
        if part == "*" {
            return Some((params, segments.get(index..)?));
        }
        let segment = *segments.get(index)?;
        match part.strip_prefix(':') {
            Some(name) => params.push((name, segment)),
            None if part == segment => {}
            None => return None,
        }
    }
    (pattern.split('/').count() == segments.len()).then_some((params, &[]))
}

impl GitlabSim {
    pub(super) fn route(&self, request: &SimRequest) -> SimResponse {
        let path = request.path.as_str();
        if let Some(handler) = exact(CONTROL, request, path) {
            return handler(self, request);
        }
        if let Some((full, rest)) = path.split_once(".git/") {
            return self.git_http(request, full.trim_start_matches('/'), rest);
        }
        let Some(api) = path.strip_prefix("/api/v4") else {
            return message(404, "404 Not Found");
        };
        if let Some(handler) = exact(RUNNER_API, request, api) {
            return handler(self, request);
        }
        if let Some(refused) = self.refuse_token(request) {
            return refused;
        }
        let Some(user) = self.authenticate(request) else {
            return message(401, "401 Unauthorized");
        };
        let segments: Vec<&str> = api.trim_start_matches('/').split('/').collect();
        if let Some(refused) = self.authorize(&self.lock(), user, request, &segments) {
            return refused;
        }
        for (method, pattern, handler) in API {
            if method_matches(*method, request)
                && let Some((params, rest)) = matches(pattern, &segments)
            {
                return handler(
                    self,
                    &Call {
                        request,
                        user,
                        params,
                        rest,
                    },
                );
            }
        }
        not_served(request)
    }
}

/// A route the simulator does not serve: GitLab's 404 for an unknown route (Grape's
/// `{"error": "404 Not Found"}`), saying that it is the simulator's gap, so a route GitLab has
/// but the simulator does not model is not mistaken for a missing project.
fn not_served(request: &SimRequest) -> SimResponse {
    SimResponse::json(
        404,
        &json!({"error": format!(
            "404 Not Found: the GitLab simulator does not serve {} {} (it models the routes bprun's natives and the seeds' clients use)",
            request.method, request.path
        )}),
    )
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_match_whole_paths_and_name_their_segments() {
        let segments = ["projects", "7", "repository", "files", "a%2Fb", "raw"];
        let (params, rest) =
            matches("projects/:id/repository/files/:file/*", &segments).expect("matches");
        assert_eq!(params, [("id", "7"), ("file", "a%2Fb")]);
        assert_eq!(rest, ["raw"]);
        assert_eq!(matches("projects/:id", &segments), None);
        assert_eq!(matches("projects/:id/variables/*", &segments), None);
        let (_, rest) = matches("projects/:id/variables/*", &["projects", "7", "variables"])
            .expect("an empty rest");
        assert!(rest.is_empty());
    }
}
