//! A pipeline's deploying identity: a token of its app's ServiceAccount from the TokenRequest
//! API, in a kubeconfig for the address pods use, kept in the project's hidden CI variable. The
//! variable's description records which account the token is of (by uid), when it expires and
//! its digest, since GitLab never returns a hidden value: the token is kept while it is valid for
//! longer than the renewal margin and the account is the same one, and replaced otherwise.

use crate::error::ClientError;
use crate::gitlab::{GitlabClient, Variable, encode};
use crate::kube::KubeClient;
use crate::reconcile::{Change, Detail, Mode, Outcome};
use std::time::{Duration, SystemTime};

/// What a project's deploying kubeconfig is made of.
#[derive(Debug, Clone)]
pub struct DeployerSpec {
    /// The GitLab project (`group/name`).
    pub project: String,
    /// The CI variable that carries it (`CI_KUBECONFIG_B64`).
    pub variable: String,
    pub namespace: String,
    pub service_account: String,
    /// The API server's address as pods reach it (`https://kubernetes.default.svc`).
    pub server: String,
    pub lifetime: Duration,
    /// Replace a token that expires within this margin.
    pub renew_within: Duration,
}

/// What the project's variable holds after the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployer {
    /// When the token in the variable expires (RFC 3339); empty in check mode when none is yet.
    pub expires_at: String,
    /// Why a token was (or, in check mode, would be) issued; `None`: the stored one is kept.
    pub rotated: Option<String>,
}

/// What a variable's description says of the token in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    account: String,
    uid: String,
    expires_at: String,
}

const PREFIX: &str = "bprun deployer token of ServiceAccount ";

fn describe(spec: &DeployerSpec, uid: &str, expires_at: &str, token: &str) -> String {
    let digest = crate::digest::sha256_hex(token);
    format!(
        "{PREFIX}{}/{} (uid {uid}), expires {expires_at}, sha256 {}",
        spec.namespace,
        spec.service_account,
        &digest[..16]
    )
}

fn recorded(description: &str) -> Option<Recorded> {
    let rest = description.strip_prefix(PREFIX)?;
    let (account, rest) = rest.split_once(" (uid ")?;
    let (uid, rest) = rest.split_once("), expires ")?;
    let (expires_at, _) = rest.split_once(", sha256 ")?;
    Some(Recorded {
        account: account.to_string(),
        uid: uid.to_string(),
        expires_at: expires_at.to_string(),
    })
}

/// Why the stored token must be replaced at `now`, or `None` to keep it.
fn rotation_reason(
    description: Option<&str>,
    spec: &DeployerSpec,
    uid: &str,
    now: SystemTime,
) -> Option<String> {
    let Some(description) = description else {
        return Some("no token stored yet".into());
    };
    let Some(stored) = recorded(description) else {
        return Some("the stored kubeconfig is not one of bprun's deployer tokens".into());
    };
    let account = format!("{}/{}", spec.namespace, spec.service_account);
    if stored.account != account {
        return Some(format!(
            "the stored token is of ServiceAccount {}",
            stored.account
        ));
    }
    if stored.uid != uid {
        return Some(format!(
            "the stored token is of an earlier ServiceAccount {account} (uid {}), deleted since",
            stored.uid
        ));
    }
    let Ok(expires) = humantime::parse_rfc3339_weak(&stored.expires_at) else {
        return Some(format!(
            "the stored expiry {:?} is not a time",
            stored.expires_at
        ));
    };
    if expires <= now {
        return Some(format!("the stored token expired at {}", stored.expires_at));
    }
    if expires <= now + spec.renew_within {
        return Some(format!(
            "the stored token expires at {}, within {} days",
            stored.expires_at,
            spec.renew_within.as_secs() / 86_400
        ));
    }
    None
}

/// Keeps the project's deploying kubeconfig valid: reads what the variable's description
/// records and the account's uid, and when the token must be replaced issues one, reads the
/// cluster CA from the namespace's `kube-root-ca.crt`, and writes the kubeconfig into the hidden
/// variable with its new description. Check mode reads only and says why it would rotate.
/// Expiry is judged by the API server's clock, which is the one that will refuse the token.
pub fn ensure_deployer_kubeconfig(
    kube: &KubeClient,
    gitlab: &GitlabClient,
    spec: &DeployerSpec,
    mode: Mode,
    cancelled: &dyn Fn() -> bool,
) -> Result<Outcome<Deployer>, ClientError> {
    let account = format!("{}/{}", spec.namespace, spec.service_account);
    let now = kube.server_time()?;
    let uid = kube
        .get("ServiceAccount", &spec.namespace, &spec.service_account)?
        .and_then(|found| found["metadata"]["uid"].as_str().map(str::to_string));
    let url = format!(
        "projects/{}/variables/{}?filter%5Benvironment_scope%5D=%2A",
        encode(&spec.project),
        encode(&spec.variable)
    );
    let current = match gitlab.find(&url, cancelled) {
        Ok(current) => current,
        // Check mode before the project exists: nothing stored.
        Err(error) if !mode.writes() && error.is_not_found() => None,
        Err(error) => return Err(error),
    };
    let description = current
        .as_ref()
        .and_then(|variable| variable["description"].as_str());
    let reason = match &uid {
        Some(uid) => rotation_reason(description, spec, uid, now),
        None => Some(format!("ServiceAccount {account} does not exist yet")),
    };
    let Some(reason) = reason else {
        let expires_at = description
            .and_then(recorded)
            .map(|stored| stored.expires_at)
            .unwrap_or_default();
        return Ok(Outcome::unchanged(Deployer {
            expires_at,
            rotated: None,
        }));
    };
    let resource = format!("CI variable {} of {}", spec.variable, spec.project);
    let change = |detail: String| Change {
        action: if current.is_some() {
            "update"
        } else {
            "create"
        },
        kind: "CI variable".into(),
        name: spec.variable.clone(),
        resource: resource.clone(),
        detail: Some(Detail::Line(detail)),
    };
    if !mode.writes() {
        return Ok(Outcome::single(
            Deployer {
                expires_at: String::new(),
                rotated: Some(reason.clone()),
            },
            change(format!("a new token of ServiceAccount {account}: {reason}")),
        ));
    }
    let uid = uid.ok_or_else(|| {
        ClientError::new(format!("ServiceAccount {account} does not exist"))
            .with_hint("create the app's namespace, ServiceAccount and RoleBinding first")
    })?;
    let ca = cluster_ca(kube, &spec.namespace)?;
    let issued = kube.create_token(
        &spec.namespace,
        &spec.service_account,
        i64::try_from(spec.lifetime.as_secs()).unwrap_or(i64::MAX),
    )?;
    let kubeconfig =
        crate::kube::token_kubeconfig(&spec.server, &ca, issued.token.reveal(), &spec.namespace);
    let mut variable = Variable::new(&spec.variable, {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(kubeconfig)
    });
    variable.hidden = true;
    variable.masked = true;
    variable.secret = true;
    variable.description = Some(describe(
        spec,
        &uid,
        &issued.expires_at,
        issued.token.reveal(),
    ));
    gitlab.set_variables(
        &spec.project,
        &[variable],
        &crate::gitlab::Removal::Nothing,
        mode,
        cancelled,
    )?;
    Ok(Outcome::single(
        Deployer {
            expires_at: issued.expires_at.clone(),
            rotated: Some(reason.clone()),
        },
        change(format!(
            "a new token of ServiceAccount {account}, expires {}: {reason}",
            issued.expires_at
        )),
    ))
}

/// The cluster CA a pod of `namespace` trusts (`kube-root-ca.crt`, which the API server's
/// controller publishes into every namespace soon after it is created: waited for, 10 s).
fn cluster_ca(kube: &KubeClient, namespace: &str) -> Result<String, ClientError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = kube.get("ConfigMap", namespace, "kube-root-ca.crt")?
            && let Some(ca) = found["data"]["ca.crt"].as_str()
        {
            return Ok(ca.to_string());
        }
        if std::time::Instant::now() >= deadline {
            return Err(ClientError::new(format!(
                "ConfigMap {namespace}/kube-root-ca.crt has no ca.crt after 10 s"
            ))
            .with_hint("the cluster publishes its CA into every namespace: is the namespace new, or the controller manager down?"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DeployerSpec {
        DeployerSpec {
            project: "blueprint-apps/guestbook".into(),
            variable: "CI_KUBECONFIG_B64".into(),
            namespace: "guestbook".into(),
            service_account: "ci-deployer".into(),
            server: "https://kubernetes.default.svc".into(),
            lifetime: Duration::from_secs(30 * 86_400),
            renew_within: Duration::from_secs(7 * 86_400),
        }
    }

    #[test]
    fn a_stored_token_is_kept_while_valid_beyond_the_margin_for_the_same_account() {
        let spec = spec();
        let text = describe(&spec, "u-1", "2027-01-31T00:00:00Z", "eyJ.token");
        assert_eq!(
            text,
            "bprun deployer token of ServiceAccount guestbook/ci-deployer (uid u-1), expires 2027-01-31T00:00:00Z, sha256 f1d4f6ec1a9c4cf8"
                .replace("f1d4f6ec1a9c4cf8", &crate::digest::sha256_hex("eyJ.token")[..16])
        );
        let at = |time: &str| humantime::parse_rfc3339(time).expect("time");
        assert_eq!(
            rotation_reason(Some(&text), &spec, "u-1", at("2027-01-01T00:00:00Z")),
            None
        );
        assert_eq!(
            rotation_reason(Some(&text), &spec, "u-1", at("2027-01-25T00:00:00Z")).as_deref(),
            Some("the stored token expires at 2027-01-31T00:00:00Z, within 7 days")
        );
        assert_eq!(
            rotation_reason(Some(&text), &spec, "u-1", at("2027-02-01T00:00:00Z")).as_deref(),
            Some("the stored token expired at 2027-01-31T00:00:00Z")
        );
        assert_eq!(
            rotation_reason(Some(&text), &spec, "u-2", at("2027-01-01T00:00:00Z")).as_deref(),
            Some(
                "the stored token is of an earlier ServiceAccount guestbook/ci-deployer (uid u-1), deleted since"
            )
        );
        assert_eq!(
            rotation_reason(None, &spec, "u-1", at("2027-01-01T00:00:00Z")).as_deref(),
            Some("no token stored yet")
        );
        assert_eq!(
            rotation_reason(
                Some("bprun's kubeconfig"),
                &spec,
                "u-1",
                at("2027-01-01T00:00:00Z")
            )
            .as_deref(),
            Some("the stored kubeconfig is not one of bprun's deployer tokens")
        );
    }
}
