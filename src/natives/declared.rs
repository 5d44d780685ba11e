//! The options each native takes, in one table: the natives refuse an option it does not name
//! when they run (`reject_undeclared`), and a script's literal option maps are checked against
//! it before the first step (`crate::lint::option_mistakes`), so that a misspelt key or a
//! `timeout: "ten"` in the last step is found before the first one changes anything.

/// What a literal value of an option must be. Only literals are checked before the run (a
/// variable's value is known only then); `()` passes everywhere (it means "not given").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    Int,
    Bool,
    /// Seconds: an integer or a decimal.
    Seconds,
    /// An array of strings.
    Strings,
    /// A string or an array of strings.
    StrOrStrings,
    /// A string or a map (`labels`).
    StrOrMap,
    Map,
    /// Whatever the native makes of it (a secret, a value of any type).
    Any,
}

impl Kind {
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Str => "a string",
            Kind::Int => "an integer",
            Kind::Bool => "true or false",
            Kind::Seconds => "a number of seconds",
            Kind::Strings => "an array of strings",
            Kind::StrOrStrings => "a string or an array of strings",
            Kind::StrOrMap => "a string or a map",
            Kind::Map => "a map",
            Kind::Any => "any value",
        }
    }
}

/// A native's options: its name, and each option with its kind.
pub struct Declared {
    pub native: &'static str,
    pub options: &'static [(&'static str, Kind)],
}

use Kind::*;

/// Every native that takes an option map, by name.
pub const DECLARED: &[Declared] = &[
    Declared {
        native: "load_manifest",
        options: &[("app", Str)],
    },
    Declared {
        native: "render_ci",
        options: &[("templates", Str)],
    },
    Declared {
        native: "bao_init",
        options: &[("shares", Int), ("threshold", Int), ("file", Str)],
    },
    Declared {
        native: "bao_unseal",
        options: &[("file", Str)],
    },
    Declared {
        native: "bao_read",
        options: &[("mount", Str), ("plain", Strings)],
    },
    Declared {
        native: "bao_write",
        options: &[("mount", Str)],
    },
    Declared {
        native: "sync_tree",
        options: &[("exclude", Strings)],
    },
    Declared {
        native: "gitlab_ensure_group",
        options: &[
            ("name", Str),
            ("visibility", Str),
            ("description", Str),
            ("update", Bool),
        ],
    },
    Declared {
        native: "gitlab_ensure_project",
        options: &[
            ("path", Str),
            ("visibility", Str),
            ("description", Str),
            ("default_branch", Str),
        ],
    },
    Declared {
        native: "gitlab_protect_branch",
        options: &[("push", Str), ("merge", Str), ("allow_force_push", Bool)],
    },
    Declared {
        native: "gitlab_set_variables",
        options: &[("remove_unlisted", Bool), ("remove", Strings)],
    },
    Declared {
        native: "gitlab_ensure_deployer_kubeconfig",
        options: &[
            ("namespace", Str),
            ("service_account", Str),
            ("server", Str),
            ("variable", Str),
            ("lifetime_days", Int),
            ("renew_within_days", Int),
        ],
    },
    Declared {
        native: "gitlab_trigger_pipeline",
        options: &[("reuse", Bool), ("fingerprint", Strings), ("stale", Str)],
    },
    Declared {
        native: "gitlab_wait_pipelines",
        options: &[
            ("timeout", Seconds),
            ("interval", Seconds),
            ("progress", Seconds),
            ("check", Bool),
        ],
    },
    Declared {
        native: "gitlab_wait_pipeline",
        options: &[
            ("timeout", Seconds),
            ("interval", Seconds),
            ("progress", Seconds),
            ("check", Bool),
        ],
    },
    Declared {
        native: "gitlab_pipelines",
        options: &[("limit", Int), ("ref", Str), ("status", Str)],
    },
    Declared {
        native: "helm_install",
        options: &[
            ("values_files", StrOrStrings),
            ("values", Map),
            ("version", Str),
            ("wait", Bool),
            ("timeout", Seconds),
            ("create_namespace", Bool),
            ("values_schema", Str),
            ("rollback_on_failure", Bool),
        ],
    },
    Declared {
        native: "helm_uninstall",
        options: &[("wait", Bool), ("timeout", Seconds)],
    },
    Declared {
        native: "helm_template",
        options: &[
            ("values_files", StrOrStrings),
            ("values", Map),
            ("version", Str),
            ("values_schema", Str),
        ],
    },
    Declared {
        native: "helm_lint",
        options: &[("strict", Bool), ("values_files", StrOrStrings)],
    },
    Declared {
        native: "tofu",
        options: &[("dir", Str), ("timeout", Seconds)],
    },
    Declared {
        native: "kube_list",
        options: &[("labels", StrOrMap), ("fields", Str)],
    },
    Declared {
        native: "kube_delete",
        options: &[("wait", Bool), ("timeout", Seconds)],
    },
    Declared {
        native: "kube_patch",
        options: &[("type", Str)],
    },
    Declared {
        native: "kube_wait",
        options: &[("timeout", Seconds)],
    },
    Declared {
        native: "kube_exec",
        options: &[
            ("container", Str),
            ("stdin", Any),
            ("timeout", Seconds),
            ("check", Bool),
            ("read_only", Bool),
        ],
    },
    Declared {
        native: "kube_on_nodes",
        options: &[
            ("image", Str),
            ("read_only", Bool),
            ("volumes", Any),
            ("timeout", Seconds),
            ("check", Bool),
        ],
    },
    Declared {
        native: "kube_logs",
        options: &[("container", Str), ("tail", Int), ("timeout", Seconds)],
    },
    Declared {
        native: "kube_config_b64",
        options: &[("server", Str)],
    },
    Declared {
        native: "kube_secret_write",
        options: &[("type", Str)],
    },
    Declared {
        native: "https_get",
        options: &[("connect_to", Str), ("ca_file", Str), ("timeout", Seconds)],
    },
    Declared {
        native: "step",
        options: &[
            ("always", Bool),
            ("on_failure", Str),
            ("needs", Strings),
            ("keep_going", Bool),
            ("tags", Strings),
        ],
    },
    Declared {
        native: "check_row",
        options: &[("expected", Str), ("hint", Str)],
    },
    Declared {
        native: "concurrently",
        options: &[("limit", Int), ("writes_after_first", Bool)],
    },
    Declared {
        native: "parallel",
        options: &[
            ("limit", Int),
            ("writes_after_first", Bool),
            ("writes_in_order", Bool),
        ],
    },
    Declared {
        native: "write_text",
        options: &[("mode", Int), ("create_new", Bool)],
    },
    Declared {
        native: "run_command",
        options: &[
            ("read_only", Bool),
            ("check", Bool),
            ("timeout", Seconds),
            ("cwd", Str),
            ("env", Map),
            ("stdin", Any),
        ],
    },
    Declared {
        native: "tls_ensure_ca",
        options: &[("cn", Str), ("days", Int)],
    },
    Declared {
        native: "tls_ensure_cert",
        options: &[("dns_names", Strings), ("days", Int)],
    },
];

/// The options `native` takes; `None` when it takes no option map.
pub fn declared_options(native: &str) -> Option<&'static [(&'static str, Kind)]> {
    DECLARED
        .iter()
        .find(|declared| declared.native == native)
        .map(|declared| declared.options)
}

/// The names of `native`'s options, as a hint lists them.
pub fn option_names(native: &str) -> Vec<&'static str> {
    declared_options(native)
        .unwrap_or(&[])
        .iter()
        .map(|(name, _)| *name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_native_is_declared_once_with_distinct_options() {
        let mut natives: Vec<&str> = DECLARED.iter().map(|d| d.native).collect();
        natives.sort();
        let count = natives.len();
        natives.dedup();
        assert_eq!(natives.len(), count);
        for declared in DECLARED {
            let mut names: Vec<&str> = declared.options.iter().map(|(n, _)| *n).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), declared.options.len(), "{}", declared.native);
        }
    }
}
