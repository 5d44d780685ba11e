#!/usr/bin/env python3
"""Writes crates/sim/src/kube/protobuf/schema.txt: the wire layout of every built-in kind the
simulator decodes from a protobuf body.

Field numbers, wire types and message references come from the `k8s-pb` crate (prost code
generated from the upstream `generated.proto` files, Apache-2.0); JSON names come from
`k8s-openapi` (its `v1_35` module), the crate the simulator already serves its schemas from. Both
are read from Cargo's registry: k8s-openapi is the workspace's own dependency, k8s-pb is not
(`cargo new scratch && cd scratch && cargo add k8s-pb@0.9.0 && cargo fetch` brings it). Neither says which Go fields are
pointers or `omitempty`, which decides the JSON form: that is read from the Go types of
k8s.io/api, k8s.io/apimachinery and k8s.io/apiextensions-apiserver at v0.35.x (Apache-2.0), whose
sources are given as a directory holding `api/`, `apimachinery/`, `apiextensions-apiserver/`
(`git archive v0.35.7` of each). Their `protobuf:` tags are checked against k8s-pb's numbers.

Usage: crates/sim/tools/protobuf_schema.py GO_SOURCES > crates/sim/src/kube/protobuf/schema.txt
"""
import glob
import os
import re
import sys

REGISTRY = os.path.expanduser("~/.cargo/registry/src")
K8S_PB = "k8s-pb-0.9.0"
K8S_OPENAPI = "k8s-openapi-0.29.0"
OPENAPI_VERSION = "v1_35"

# The group versions whose kinds (and the subresource kinds they accept) a client may send.
GROUP_VERSIONS = [
    "v1", "apps/v1", "batch/v1", "autoscaling/v1", "autoscaling/v2", "networking.k8s.io/v1",
    "discovery.k8s.io/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "storage.k8s.io/v1",
    "coordination.k8s.io/v1", "scheduling.k8s.io/v1", "apiextensions.k8s.io/v1",
    "admissionregistration.k8s.io/v1", "certificates.k8s.io/v1", "authentication.k8s.io/v1",
    "authorization.k8s.io/v1", "events.k8s.io/v1", "node.k8s.io/v1",
]
# Kinds every group version registers; their message lives in meta/v1.
META_KINDS = ["DeleteOptions"]
# Subresource kinds (k8s-pb gives them no Resource impl).
SUBRESOURCE_KINDS = [
    ("authentication.k8s.io/v1", "TokenRequest", "api.authentication.v1.TokenRequest"),
    ("autoscaling/v1", "Scale", "api.autoscaling.v1.Scale"),
    ("policy/v1", "Eviction", "api.policy.v1.Eviction"),
]
# JSON names the normalised comparison cannot pair (prost field -> JSON name).
ALIASES = {
    ("apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps", "ref"): "$ref",
}


def crate_dir(name):
    found = glob.glob(os.path.join(REGISTRY, "*", name))
    if not found:
        sys.exit(f"{name} is not in {REGISTRY}: run `cargo fetch` in a crate that depends on it")
    return found[0]


def strip_comments(text):
    return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))


def split_top(s, sep=","):
    depth, cur, out = 0, "", []
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def field_type(body, start):
    """The type written from `start` up to the comma that ends the field, spaces removed."""
    depth = 0
    for i in range(start, len(body)):
        ch = body[i]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            return "".join(body[start:i].split())
    return "".join(body[start:].split())


def resolve(module, path):
    """Absolute dotted module path of a Rust type path written inside `module`."""
    parts = path.replace("::prost::alloc::string::", "").split("::")
    mod = list(module)
    while parts and parts[0] == "super":
        mod.pop()
        parts.pop(0)
    if parts and parts[0] == "crate":
        mod = []
        parts.pop(0)
    return ".".join(mod + parts)


def inner(ty):
    """The element type of Option<..>, Vec<..>, Box<..>, or the value of a map."""
    m = re.match(r"^(?:::core::option::Option|::prost::alloc::vec::Vec|::prost::alloc::boxed::Box|Option|Vec|Box)<(.*)>$", ty)
    if m:
        return inner(m.group(1).rstrip(","))
    m = re.match(r"^(?:::prost::alloc::collections::|::std::collections::)?BTreeMap<(.*?),?>$", ty)
    if m:
        return inner(split_top(m.group(1))[1])
    return ty


def read_k8s_pb(root):
    messages, kinds = {}, []
    for path in glob.glob(os.path.join(root, "src", "**", "mod.rs"), recursive=True):
        rel = os.path.relpath(os.path.dirname(path), os.path.join(root, "src"))
        module = rel.split(os.sep)
        text = strip_comments(open(path).read())
        for m in re.finditer(r"pub struct (\w+) \{(\}|.*?\n\})", text, re.S):
            name, body = m.group(1), m.group(2)[:-1]
            fields = []
            for f in re.finditer(r"#\[prost\((.*?)\)\]\s*pub (r#)?(\w+):", body, re.S):
                attr, fname, ty = f.group(1), f.group(3), field_type(body, f.end())
                tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
                kind = attr.split(",")[0].split("=")[0].strip()
                repeated = "repeated" in attr
                if kind == "btree_map":
                    key, value = [v.strip() for v in re.search(r'btree_map = "([^"]*)"', attr).group(1).split(",")]
                    assert key == "string", (name, fname)
                    ftype = resolve(module, inner(ty)) if value == "message" else value
                    fields.append((tag, fname, ftype, "map"))
                    continue
                if kind == "message":
                    ftype = resolve(module, inner(ty))
                else:
                    ftype = kind
                fields.append((tag, fname, ftype, "repeated" if repeated else ""))
            messages[".".join(module + [name])] = fields
        for k in re.finditer(r'impl crate::Resource for (\w+) \{\s*const API_VERSION: &\'static str = "([^"]*)";.*?const KIND: &\'static str = "([^"]*)";', text, re.S):
            kinds.append((k.group(2), k.group(3), ".".join(module + [k.group(1)])))
    return messages, kinds


def read_k8s_openapi(root):
    """Per struct (module path, lowercased name): {normalised field: (json name, required)}."""
    structs = {}
    base = os.path.join(root, "src", OPENAPI_VERSION)
    for path in glob.glob(os.path.join(base, "**", "*.rs"), recursive=True):
        module = os.path.relpath(os.path.dirname(path), base).split(os.sep)
        text = open(path).read()
        for m in re.finditer(r"pub struct (\w+) \{(\}|.*?\n\})", text, re.S):
            name, body = m.group(1), m.group(2)[:-1]
            body = strip_comments(body)
            rust_fields = {}
            for f in re.finditer(r"pub (r#)?(\w+): (.*?),\n", body + "\n"):
                rust_fields[f.group(2)] = not f.group(3).startswith("Option<")
            json_names = dict(
                (r, j) for j, r in re.findall(r'"([^"]+)" => Field::Key_(\w+),', text)
            )
            fields = {}
            for rust, required in rust_fields.items():
                json = json_names.get(rust)
                if json is None:
                    continue
                fields[normalise(rust)] = (json, required)
            structs[(".".join(module), name.lower())] = fields
    return structs


def go_package_dir(go_root, module):
    """The Go package of a k8s-pb module (`api.core.v1` -> `api/core/v1`)."""
    if module.startswith("api."):
        return os.path.join(go_root, "api", *module.split(".")[1:])
    if module.startswith("apimachinery."):
        return os.path.join(go_root, "apimachinery", *module.split(".")[1:])
    if module.startswith("apiextensions_apiserver."):
        return os.path.join(go_root, "apiextensions-apiserver", *module.split(".")[1:])
    return None


GO_FIELD = re.compile(r'^\s*(?:(\w+)\s+)?(\S+)\s+`([^`]*)`')


def read_go_structs(package_dir):
    """Per lowercased struct name: {protobuf field number: (json name, pointer, omitempty)}."""
    structs = {}
    for path in sorted(glob.glob(os.path.join(package_dir, "*.go"))):
        if path.endswith("_test.go") or os.path.basename(path).startswith("zz_"):
            continue
        text = open(path).read()
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", text, re.S | re.M):
            fields = {}
            for line in m.group(2).splitlines():
                f = GO_FIELD.match(line)
                if not f or line.lstrip().startswith("//"):
                    continue
                go_type, tag = f.group(2), f.group(3)
                proto = re.search(r'protobuf:"[a-z]+,(\d+),', tag)
                json = re.search(r'json:"([^"]*)"', tag)
                if not proto or not json:
                    continue
                options = json.group(1).split(",")
                fields[int(proto.group(1))] = (options[0], go_type.startswith("*"), "omitempty" in options[1:])
            structs[m.group(1).lower()] = fields
    return structs


def normalise(name):
    return name.replace("_", "").lower()


def camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# Messages with a JSON form of their own (decoded by hand in schema.rs): no Go struct needed.
SPECIAL_FORMS = {
    "apimachinery.pkg.api.resource.Quantity",
    "apimachinery.pkg.util.intstr.IntOrString",
    "apimachinery.pkg.runtime.RawExtension",
    "apimachinery.pkg.apis.meta.v1.Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration",
    "apimachinery.pkg.apis.meta.v1.FieldsV1",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.Json",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrBool",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrArray",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrStringArray",
    "api.authentication.v1.ExtraValue",
    "api.authorization.v1.ExtraValue",
    "api.certificates.v1.ExtraValue",
}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    go_root = sys.argv[1]
    messages, kinds = read_k8s_pb(crate_dir(K8S_PB))
    openapi = read_k8s_openapi(crate_dir(K8S_OPENAPI))
    wanted = [(v, k, m) for v, k, m in kinds if v in GROUP_VERSIONS]
    meta = "apimachinery.pkg.apis.meta.v1."
    wanted += [(v, k, meta + k) for v in GROUP_VERSIONS for k in META_KINDS]
    wanted += SUBRESOURCE_KINDS
    wanted.sort()
    # Only the messages these kinds reach.
    reach, todo = set(), [m for _, _, m in wanted]
    while todo:
        m = todo.pop()
        if m in reach:
            continue
        if m not in messages:
            sys.exit(f"message {m} is not in k8s-pb")
        reach.add(m)
        todo += [t for _, _, t, _ in messages[m] if "." in t]
    out = [
        "# Generated by crates/sim/tools/protobuf_schema.py from k8s-pb 0.9.0 (field numbers, wire",
        "# types), k8s-openapi 0.29.0 v1_35 (JSON names) and the Go types of k8s.io/api,",
        "# apimachinery and apiextensions-apiserver v0.35.7 (pointers, omitempty). Do not edit.",
        "# pointer: kept when on the wire; always: serialized even when zero or absent;",
        "# neither: omitted when zero (omitempty).",
        "# kind <apiVersion> <kind> <message>",
        "# message <name>, then: <number> <json name> <type> [repeated|map|inline|pointer|always]",
    ]
    for v, k, m in wanted:
        out.append(f"kind {v} {k} {m}")
    unpaired, go_packages = [], {}
    for m in sorted(reach):
        module, _, name = m.rpartition(".")
        fields_doc = openapi.get((module, name.lower()), {})
        if module not in go_packages:
            package = go_package_dir(go_root, module)
            go_packages[module] = read_go_structs(package) if package else {}
        go = None if m in SPECIAL_FORMS else go_packages[module].get(name.lower())
        if go is None and messages[m] and m not in SPECIAL_FORMS:
            sys.exit(f"no Go struct for {m} in {go_package_dir(go_root, module)}")
        out.append(f"message {m}")
        for tag, fname, ftype, shape in sorted(messages[m]):
            json = ALIASES.get((m, fname))
            pair = fields_doc.get(normalise(fname))
            go_field = (go or {}).get(tag)
            if json is None and go_field is not None and go_field[0]:
                json = go_field[0]
                if pair is not None and pair[0] != json:
                    sys.exit(f"{m}.{fname}: Go's JSON name {json!r} is not k8s-openapi's {pair[0]!r}")
            if json is None and pair is None and ftype in messages and (fields_doc or go):
                # A Go struct embedded with `json:",inline"`: its fields are the parent's.
                json, shape = "-", "inline"
            elif json is None and pair is None:
                json = camel(fname)
                if fields_doc:
                    unpaired.append(f"{m}.{fname}")
            elif json is None:
                json = pair[0]
            if go is not None and shape != "inline":
                if go_field is None:
                    sys.exit(f"{m}.{fname}: field {tag} is not in the Go struct")
                if go_field[0] != json:
                    sys.exit(f"{m}.{fname}: Go's JSON name {go_field[0]!r} is not {json!r}")
            # How Go serializes the field: a pointer when set; a non-pointer scalar without
            # `omitempty`, or any non-pointer struct, always; the rest unless zero.
            serialized = ""
            if go_field is not None and shape == "":
                pointer, omitempty = go_field[1], go_field[2]
                if pointer:
                    serialized = "pointer"
                elif ftype in messages or not omitempty:
                    serialized = "always"
            flags = " ".join(x for x in [shape, serialized] if x)
            out.append(f"{tag} {json} {ftype}" + (f" {flags}" if flags else ""))
    for u in unpaired:
        print(f"warning: no JSON name in k8s-openapi for {u}", file=sys.stderr)
    print("\n".join(out))


main()
