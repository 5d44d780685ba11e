//! ACL policies: `sys/policy/{name}` (the legacy API) and `sys/policies/acl/{name}`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    Operation, SimRequest, SimResponse, State, UNSUPPORTED_OPERATION, body_of, errors, legacy,
    no_content, not_found, ok, timestamp,
};

pub(super) struct Policy {
    rules: String,
    version: u64,
    modified: Option<String>,
}

/// The `default` policy of OpenBao 2.7.2, verbatim.
const DEFAULT_POLICY: &str = r#"
# Allow tokens to look up their own properties
path "auth/token/lookup-self" {
    capabilities = ["read"]
}

# Allow tokens to renew themselves
path "auth/token/renew-self" {
    capabilities = ["update"]
}

# Allow tokens to revoke themselves
path "auth/token/revoke-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own capabilities on a path
path "sys/capabilities-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own entity by id or name
path "identity/entity/id/{{identity.entity.id}}" {
  capabilities = ["read"]
}
path "identity/entity/name/{{identity.entity.name}}" {
  capabilities = ["read"]
}


# Allow a token to look up its resultant ACL from all policies. This is useful
# for UIs. It is an internal path because the format may change at any time
# based on how the internal ACL features and capabilities change.
path "sys/internal/ui/resultant-acl" {
    capabilities = ["read"]
}

# Allow a token to renew a lease via lease_id in the request body; old path for
# old clients, new path for newer
path "sys/leases/renew" {
    capabilities = ["update"]
}

# Allow looking up lease properties. This requires knowing the lease ID ahead
# of time and does not divulge any sensitive information.
path "sys/leases/lookup" {
    capabilities = ["update"]
}

# Allow a token to manage its own cubbyhole
path "cubbyhole/*" {
    capabilities = ["create", "read", "update", "delete", "list"]
}

# Allow a token to wrap arbitrary values in a response-wrapping token
path "sys/wrapping/wrap" {
    capabilities = ["update"]
}

# Allow a token to look up the creation time and TTL of a given
# response-wrapping token
path "sys/wrapping/lookup" {
    capabilities = ["update"]
}

# Allow a token to unwrap a response-wrapping token. This is a convenience to
# avoid client token swapping since this is also part of the response wrapping
# policy.
path "sys/wrapping/unwrap" {
    capabilities = ["update"]
}

# Allow general purpose tools
path "sys/tools/hash" {
    capabilities = ["update"]
}
path "sys/tools/hash/*" {
    capabilities = ["update"]
}

# Allow a token to make requests to the Authorization Endpoint for OIDC providers.
path "identity/oidc/provider/+/authorize" {
    capabilities = ["read", "update"]
}
"#;

/// The policies a fresh server has: `default` and `root`.
pub(super) fn builtin_policies() -> BTreeMap<String, Policy> {
    let mut policies = BTreeMap::new();
    policies.insert(
        "default".to_string(),
        Policy {
            rules: DEFAULT_POLICY.to_string(),
            version: 1,
            modified: Some(timestamp()),
        },
    );
    policies.insert(
        "root".to_string(),
        Policy {
            rules: String::new(),
            version: 0,
            modified: None,
        },
    );
    policies
}

/// `sys/policy/{name}` (`legacy`) and `sys/policies/acl/{name}`.
pub(super) fn policy(
    state: &mut State,
    op: Operation,
    name: &str,
    request: &SimRequest,
    legacy_api: bool,
) -> SimResponse {
    let name = name.to_lowercase();
    match op {
        Operation::Read => {
            let Some(found) = state.policies.get(&name) else {
                return not_found();
            };
            let mut data = json!({
                "allow_slashes_in_identity_templates": false,
                "allow_wildcards_in_identity_templates": false,
                "cas_required": false,
                "name": name,
                "version": found.version,
            });
            if let Some(modified) = &found.modified {
                data["modified"] = json!(modified);
            }
            if legacy_api {
                data["rules"] = json!(found.rules);
                legacy(data)
            } else {
                data["policy"] = json!(found.rules);
                ok(data)
            }
        }
        Operation::Write => {
            let body = match body_of(request) {
                Ok(body) => body,
                Err(answer) => return answer,
            };
            let text = body
                .get("policy")
                .or_else(|| if legacy_api { body.get("rules") } else { None })
                .and_then(Value::as_str)
                .unwrap_or("");
            if text.is_empty() {
                return errors(400, &["'policy' parameter not supplied or empty"]);
            }
            if name == "root" {
                return errors(400, &["cannot update \"root\" policy"]);
            }
            let version = state
                .policies
                .get(&name)
                .map(|p| p.version)
                .unwrap_or(1)
                .max(1);
            state.policies.insert(
                name,
                Policy {
                    rules: text.to_string(),
                    version,
                    modified: Some(timestamp()),
                },
            );
            no_content()
        }
        Operation::Delete => match name.as_str() {
            "root" => errors(400, &["cannot delete \"root\" policy"]),
            "default" => errors(400, &["cannot delete default policy"]),
            _ => {
                state.policies.remove(&name);
                no_content()
            }
        },
        _ => errors(405, &[UNSUPPORTED_OPERATION]),
    }
}
