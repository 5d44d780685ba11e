//! The `Secret` value type and the process-wide registry of live secret values.
//!
//! Two nets keep secrets out of output: a `Secret` always displays as `***`, and every value wrapped
//! in a `Secret` is registered here so that any line bprun writes (terminal, journal, JSON events)
//! is scrubbed of it, even when a script revealed it into a plain string.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// What a secret looks like wherever it is displayed.
pub const REDACTED: &str = "***";

/// Values shorter than this are not scrubbed from free text: redacting every "1" or "ok" would
/// mangle unrelated output, and values that short are not credentials. They still display as
/// `***` when shown as a `Secret`.
pub const MIN_SCRUB_LEN: usize = 4;

/// A secret string: a token, password, key or unseal key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps `value` and registers it for scrubbing.
    pub fn new(value: impl Into<String>) -> Self {
        let value: String = value.into();
        register(&value);
        Secret(Arc::from(value))
    }

    /// A secret built from parts that are already registered (a secret joined with text): not
    /// registered itself, so that its text around the secret parts can still be shown.
    pub fn derived(value: String) -> Self {
        Secret(Arc::from(value))
    }

    /// The plain value, for handing to a client or process. Never print it.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

fn registry() -> &'static Mutex<Vec<Arc<str>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Arc<str>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers a live secret value so that [`scrub`] removes it from every line written.
pub fn register(value: &str) {
    if value.len() < MIN_SCRUB_LEN {
        return;
    }
    let mut values = registry()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if values.iter().any(|known| known.as_ref() == value) {
        return;
    }
    values.push(Arc::from(value));
    // Longest first, so a secret that contains another is replaced whole.
    values.sort_by_key(|known| std::cmp::Reverse(known.len()));
}

/// The environment variables that carry credentials bprun knows of.
pub const TOKEN_VARIABLES: &[&str] = &[
    "GITLAB_TOKEN",
    "BAO_TOKEN",
    "VAULT_TOKEN",
    "CI_JOB_TOKEN",
    "GITLAB_ROOT_PASSWORD",
];

/// Registers, at start-up, every credential bprun can see before any script runs: the token
/// variables and the kubeconfig's user credentials (`token`, `client-key-data`, `password`),
/// so that printing `env("GITLAB_TOKEN")` or a kubeconfig shows `***`.
pub fn register_environment() {
    for name in TOKEN_VARIABLES {
        if let Ok(value) = std::env::var(name) {
            register(&value);
        }
    }
    let files: Vec<std::path::PathBuf> = match std::env::var_os("KUBECONFIG") {
        Some(list) => std::env::split_paths(&list).collect(),
        None => std::env::var_os("HOME")
            .map(|home| vec![std::path::Path::new(&home).join(".kube/config")])
            .unwrap_or_default(),
    };
    for file in files {
        if let Ok(text) = std::fs::read_to_string(&file) {
            register_kubeconfig(&text);
        }
    }
}

/// Registers the user credentials of a kubeconfig's text.
pub fn register_kubeconfig(text: &str) {
    let Ok(config) = serde_norway::from_str::<serde_json::Value>(text) else {
        return;
    };
    for user in config["users"].as_array().into_iter().flatten() {
        for key in ["token", "client-key-data", "password"] {
            if let Some(value) = user["user"][key].as_str() {
                register(value);
            }
        }
    }
}

/// Replaces every registered secret value in `text` with `***`.
pub fn scrub(text: &str) -> String {
    let values = registry()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = text.to_string();
    for value in values.iter() {
        if !out.contains(value.as_ref()) {
            continue;
        }
        out = if value.len() >= HIDDEN_ANYWHERE {
            out.replace(value.as_ref(), REDACTED)
        } else {
            replace_standalone(&out, value)
        };
    }
    out
}

/// Secrets this long are hidden wherever they appear. A shorter one (a password such as
/// `repl-trial`) is hidden where it stands as a value of its own, not where it is only part of
/// a longer name (`ConfigMap/repl-trial-config`): a name that merely contains it says nothing
/// of the secret, while `password: repl-trial`, `user:repl-trial@host` or `"repl-trial"` do.
const HIDDEN_ANYWHERE: usize = 16;

/// Whether `c` continues a name (a Kubernetes name, a path segment, an identifier).
fn continues_a_name(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '_'
}

/// `text` with each occurrence of `value` that no name character touches replaced.
fn replace_standalone(text: &str, value: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (start, _) in text.match_indices(value) {
        if start < rest {
            continue;
        }
        let end = start + value.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let inside_a_name =
            before.is_some_and(continues_a_name) || after.is_some_and(continues_a_name);
        out.push_str(&text[rest..start]);
        out.push_str(if inside_a_name { value } else { REDACTED });
        rest = end;
    }
    out.push_str(&text[rest..]);
    out
}

/// A password of `length` characters from `[A-Za-z0-9]`, drawn from the operating system's
/// CSPRNG (rejection sampling, so every character is equally likely). Registered for scrubbing.
pub fn random_password(length: usize) -> Result<Secret, String> {
    use ring::rand::{SecureRandom, SystemRandom};
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let random = SystemRandom::new();
    let mut password = String::with_capacity(length);
    let mut buffer = [0u8; 64];
    while password.len() < length {
        random
            .fill(&mut buffer)
            .map_err(|_| "the system's random number generator failed".to_string())?;
        // 248 = 4 * 62: bytes at or above it would favour the first characters.
        for byte in buffer.iter().filter(|byte| **byte < 248) {
            if password.len() == length {
                break;
            }
            password.push(ALPHABET[usize::from(*byte) % ALPHABET.len()] as char);
        }
    }
    Ok(Secret::new(password))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_and_debugs_as_stars() {
        let secret = Secret::new("glpat-display-canary");
        assert_eq!(format!("{secret}"), "***");
        assert_eq!(format!("{secret:?}"), "***");
        assert_eq!(secret.reveal(), "glpat-display-canary");
    }

    #[test]
    fn scrubs_registered_values_longest_first() {
        Secret::new("scrub-canary");
        Secret::new("scrub-canary-longer");
        assert_eq!(
            scrub("a scrub-canary-longer and scrub-canary b"),
            "a *** and *** b"
        );
    }

    #[test]
    fn a_short_secret_is_hidden_as_a_value_but_not_inside_a_longer_name() {
        Secret::new("short-trial");
        assert_eq!(
            scrub("password: short-trial; user:short-trial@db \"short-trial\" short-trial."),
            "password: ***; user:***@db \"***\" ***."
        );
        assert_eq!(
            scrub("ConfigMap/short-trial-config, my-short-trial, short-trial2"),
            "ConfigMap/short-trial-config, my-short-trial, short-trial2"
        );
        // A long one is hidden wherever it appears, inside a name too.
        Secret::new("a-long-random-secret-value");
        assert_eq!(scrub("x-a-long-random-secret-value-y"), "x-***-y");
    }

    #[test]
    fn kubeconfig_credentials_are_registered() {
        register_kubeconfig("users:\n- name: admin\n  user:\n    token: kubeconfig-canary-token\n");
        assert_eq!(scrub("Bearer kubeconfig-canary-token"), "Bearer ***");
    }

    #[test]
    fn random_passwords_have_the_length_and_alphabet_asked_for_and_differ() {
        let first = random_password(32).unwrap();
        let second = random_password(32).unwrap();
        assert_eq!(first.reveal().len(), 32);
        assert!(first.reveal().chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(first.reveal(), second.reveal());
        assert_eq!(scrub(&format!("x {} y", first.reveal())), "x *** y");
    }

    #[test]
    fn short_values_are_not_scrubbed_from_free_text() {
        Secret::new("ab");
        assert_eq!(scrub("ab cd"), "ab cd");
    }
}
