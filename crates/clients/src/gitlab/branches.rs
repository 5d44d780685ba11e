//! Protected branches: who may push to and merge into a branch, ensured as declared.

use serde_json::{Value, json};

use super::{GitlabClient, Method, encode};
use crate::error::ClientError;
use crate::reconcile::{Change, Detail, Mode, Outcome};

/// A role level GitLab accepts for a protected branch (CE: roles only, one per action).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BranchAccess {
    NoOne,
    Developers,
    Maintainers,
    InstanceAdmins,
}

impl BranchAccess {
    /// The names a script uses, in the order GitLab's UI lists them.
    pub const NAMES: [&'static str; 4] = ["no_one", "developers", "maintainers", "admins"];

    pub fn named(name: &str) -> Option<BranchAccess> {
        match name {
            "no_one" => Some(BranchAccess::NoOne),
            "developers" => Some(BranchAccess::Developers),
            "maintainers" => Some(BranchAccess::Maintainers),
            "admins" => Some(BranchAccess::InstanceAdmins),
            _ => None,
        }
    }

    /// GitLab's `access_level` (`Gitlab::Access`).
    pub fn level(self) -> u64 {
        match self {
            BranchAccess::NoOne => 0,
            BranchAccess::Developers => 30,
            BranchAccess::Maintainers => 40,
            BranchAccess::InstanceAdmins => 60,
        }
    }

    fn of_level(level: u64) -> Option<BranchAccess> {
        [
            BranchAccess::NoOne,
            BranchAccess::Developers,
            BranchAccess::Maintainers,
            BranchAccess::InstanceAdmins,
        ]
        .into_iter()
        .find(|access| access.level() == level)
    }

    /// GitLab's words for it (`ProtectedRefAccess.human_access_levels`).
    pub fn describe(self) -> &'static str {
        match self {
            BranchAccess::NoOne => "No one",
            BranchAccess::Developers => "Developers + Maintainers",
            BranchAccess::Maintainers => "Maintainers",
            BranchAccess::InstanceAdmins => "Instance admins",
        }
    }
}

/// How a branch should be protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchProtection {
    pub branch: String,
    pub push: BranchAccess,
    pub merge: BranchAccess,
    pub allow_force_push: bool,
}

/// What a protected branch's answer says, in the spec's terms: `None` for a level bprun cannot
/// declare (a user, group or deploy key of GitLab Premium, or several roles): such a protection
/// differs from any spec.
fn as_declared(branch: &str, answer: &Value) -> Option<BranchProtection> {
    let single_role = |key: &str| -> Option<BranchAccess> {
        let levels = answer[key].as_array()?;
        match levels.as_slice() {
            [only] if only["user_id"].is_null() && only["group_id"].is_null() => {
                BranchAccess::of_level(only["access_level"].as_u64()?)
            }
            _ => None,
        }
    };
    Some(BranchProtection {
        branch: branch.to_string(),
        push: single_role("push_access_levels")?,
        merge: single_role("merge_access_levels")?,
        allow_force_push: answer["allow_force_push"].as_bool().unwrap_or(false),
    })
}

/// One line for `--diff`: `push: No one -> Maintainers, merge: Maintainers`.
fn describe(protection: Option<&BranchProtection>) -> String {
    match protection {
        None => "not protected".to_string(),
        Some(p) => format!(
            "push: {}, merge: {}, force push: {}",
            p.push.describe(),
            p.merge.describe(),
            if p.allow_force_push { "allowed" } else { "no" }
        ),
    }
}

impl GitlabClient {
    /// Protects `spec.branch` of `project` as declared. A branch protected otherwise is
    /// unprotected and protected again (GitLab CE changes a protection's levels no other way):
    /// a run interrupted between the two leaves it unprotected, and the next run protects it.
    pub fn ensure_protected_branch(
        &self,
        project: &str,
        spec: &BranchProtection,
        mode: Mode,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Outcome<()>, ClientError> {
        let list_path = format!("projects/{}/protected_branches", encode(project));
        let branch_path = format!("{list_path}/{}", encode(&spec.branch));
        let current = self.find(&branch_path, cancelled)?;
        let declared = current
            .as_ref()
            .map(|answer| as_declared(&spec.branch, answer));
        if declared.as_ref().is_some_and(|d| d.as_ref() == Some(spec)) {
            return Ok(Outcome::unchanged(()));
        }
        let action = if current.is_some() {
            "update"
        } else {
            "create"
        };
        let name = format!("{project} {}", spec.branch);
        let before = match &declared {
            Some(Some(protection)) => describe(Some(protection)),
            Some(None) => "protected by user, group or several roles".to_string(),
            None => describe(None),
        };
        let change = Change {
            action,
            kind: "protected branch".to_string(),
            name: name.clone(),
            resource: format!("protected branch {name}"),
            detail: Some(Detail::Line(format!(
                "{before} -> {}",
                describe(Some(spec))
            ))),
        };
        if !mode.writes() {
            return Ok(Outcome::single((), change));
        }
        if current.is_some() {
            match self.request(Method::Delete, &branch_path, None, None, cancelled) {
                // Gone already (a concurrent change): protected below all the same.
                Err(error) if !error.is_not_found() => return Err(error),
                _ => {}
            }
        }
        let body = json!({
            "name": spec.branch,
            "push_access_level": spec.push.level(),
            "merge_access_level": spec.merge.level(),
            "allow_force_push": spec.allow_force_push,
        });
        let read_back = || self.find(&branch_path, cancelled);
        self.request(
            Method::Post,
            &list_path,
            Some(&body),
            Some(&read_back),
            cancelled,
        )?;
        Ok(Outcome::single((), change))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(push: u64, merge: u64) -> Value {
        json!({"name": "main",
               "push_access_levels": [{"access_level": push, "user_id": null, "group_id": null}],
               "merge_access_levels": [{"access_level": merge, "user_id": null, "group_id": null}],
               "allow_force_push": false})
    }

    #[test]
    fn a_protection_reads_in_the_specs_terms() {
        assert_eq!(
            as_declared("main", &answer(0, 40)),
            Some(BranchProtection {
                branch: "main".into(),
                push: BranchAccess::NoOne,
                merge: BranchAccess::Maintainers,
                allow_force_push: false,
            })
        );
        // A user allowed to push (Premium) is nothing a spec can say: it differs.
        let mut by_user = answer(40, 40);
        by_user["push_access_levels"][0]["user_id"] = json!(7);
        assert_eq!(as_declared("main", &by_user), None);
        let mut two_roles = answer(40, 40);
        two_roles["push_access_levels"] = json!([{"access_level": 30}, {"access_level": 40}]);
        assert_eq!(as_declared("main", &two_roles), None);
    }

    #[test]
    fn every_name_a_script_uses_is_an_access() {
        for name in BranchAccess::NAMES {
            let access = BranchAccess::named(name).expect("a name of NAMES");
            assert_eq!(BranchAccess::of_level(access.level()), Some(access));
        }
        assert_eq!(BranchAccess::named("owners"), None);
    }
}
