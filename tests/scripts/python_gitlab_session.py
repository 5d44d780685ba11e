"""A python-gitlab session against the GitLab simulator, as a new user would try it.

Every check prints `ok NAME` or `FAILED NAME: why`; the exit code is the number of failures.
GITLAB_URL and GITLAB_TOKEN name the simulator and an administrator's token.
"""

import os
import sys

import gitlab

failures = 0


def check(name, condition, detail=""):
    global failures
    if condition:
        print(f"ok {name}")
    else:
        failures += 1
        print(f"FAILED {name}: {detail}")


def refusal(action):
    """The (status, message) of the GitlabError `action` raises; (None, None) if none."""
    try:
        action()
    except gitlab.exceptions.GitlabError as error:
        return error.response_code, str(error.error_message)
    return None, None


gl = gitlab.Gitlab(os.environ["GITLAB_URL"], private_token=os.environ["GITLAB_TOKEN"], timeout=10)
gl.auth()
check("auth", gl.user.username == "root", gl.user.username)

# Groups: subgroups, path rules, reserved names.
apps = gl.groups.create({"name": "Apps", "path": "apps", "visibility": "private"})
team = gl.groups.create({"name": "Team", "path": "team", "parent_id": apps.id})
check("subgroup full_path", team.full_path == "apps/team", team.full_path)
status, text = refusal(lambda: gl.groups.create({"name": "x", "path": "bad group!"}))
check("bad group path", status == 400 and "can contain only" in text, f"{status} {text}")
status, text = refusal(lambda: gl.groups.create({"name": "admin", "path": "admin"}))
check("reserved group path", status == 400 and "admin is a reserved name" in text, f"{status} {text}")

# Projects: visibility bounded by the group, default private.
status, text = refusal(
    lambda: gl.projects.create({"name": "wide", "namespace_id": team.id, "visibility": "internal"})
)
check("visibility bounded", status == 400 and "visibility_level" in text, f"{status} {text}")
project = gl.projects.create({"name": "svc-0", "namespace_id": team.id})
check("default private", project.visibility == "private", project.visibility)
check("nested path", project.path_with_namespace == "apps/team/svc-0", project.path_with_namespace)
for number in range(1, 12):
    gl.projects.create({"name": f"svc-{number}", "namespace_id": team.id})
gl.projects.create({"name": "other", "namespace_id": team.id})

# Lists: the Link header keeps the query (python-gitlab follows it).
found = gl.projects.list(search="svc", per_page=5, get_all=True)
check("search over pages", len(found) == 12, len(found))
simple = gl.projects.list(search="other", simple=True, get_all=True)
check("simple", len(simple) == 1 and "visibility" not in simple[0].attributes, simple)

# Files and commits.
project.files.create(
    {"file_path": "README.md", "branch": "main", "content": "hello\n", "commit_message": "readme"}
)
status, text = refusal(
    lambda: project.files.create(
        {"file_path": "b.txt", "branch": "feature", "content": "b", "commit_message": "b"}
    )
)
check(
    "files need a branch",
    status == 400 and "You can only create or edit files when you are on a branch" in text,
    f"{status} {text}",
)
commit = project.commits.create(
    {
        "branch": "main",
        "commit_message": "two files",
        "actions": [
            {"action": "create", "file_path": "a.txt", "content": "a"},
            {"action": "update", "file_path": "README.md", "content": "hello again\n"},
        ],
    }
)
listed = project.commits.list(ref_name="main", get_all=True)
check("commits list", [c.id for c in listed][:1] == [commit.id] and len(listed) == 2, listed)
check("commit get", project.commits.get(commit.short_id).title == "two files")
check(
    "file read",
    project.files.raw(file_path="README.md", ref="main") == b"hello again\n",
)
check("protected default branch", [b.name for b in project.protectedbranches.list()] == ["main"])

# Variables: one key in two scopes is ambiguous without a filter.
project.variables.create({"key": "K", "value": "v", "environment_scope": "*"})
project.variables.create({"key": "K", "value": "p", "environment_scope": "production"})
status, text = refusal(lambda: project.variables.get("K"))
check("multi-scope conflict", status == 409 and "multiple variables" in text, f"{status} {text}")
scoped = project.variables.get("K", filter={"environment_scope": "production"})
check("scope filter", scoped.value == "p", scoped.value)
status, text = refusal(
    lambda: project.variables.create({"key": "M", "value": "short", "masked": True})
)
check("masked value rules", status == 400, f"{status} {text}")

# Users and tokens: scopes, a non-administrator's limits, revocation.
user = gl.users.create(
    {"email": "dev@example.com", "username": "dev", "name": "Dev", "password": "s3cret-pass-word"}
)
reader = user.personal_access_tokens.create({"name": "reader", "scopes": ["read_api"]})
as_reader = gitlab.Gitlab(os.environ["GITLAB_URL"], private_token=reader.token, timeout=10)
status, text = refusal(lambda: as_reader.groups.create({"name": "r", "path": "r"}))
check("read_api cannot write", status == 403 and "insufficient_scope" in text, f"{status} {text}")
status, _ = refusal(lambda: as_reader.projects.get(project.id))
check("private project hidden from non-members", status == 404, status)
apps.members.create({"user_id": user.id, "access_level": gitlab.const.AccessLevel.DEVELOPER})
check("member reads", as_reader.projects.get(project.id).name == "svc-0")
writer = user.personal_access_tokens.create({"name": "writer", "scopes": ["api"]})
as_writer = gitlab.Gitlab(os.environ["GITLAB_URL"], private_token=writer.token, timeout=10)
status, text = refusal(lambda: as_writer.projects.get(project.id).variables.list())
check("developer cannot read variables", status == 403, f"{status} {text}")
as_writer.auth()
check("self", as_writer.personal_access_tokens.get("self").name == "writer")
as_writer.personal_access_tokens.get("self").delete()
status, _ = refusal(as_writer.auth)
check("revoked token refused", status == 401, status)

sys.exit(failures)
