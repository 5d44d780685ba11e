//! GitLab's own rules for values bprun sends, checked before sending so that errors name the key
//! and never the value. The GitLab simulator enforces the same rules.

/// GitLab's rule for masked values: one line, at least 8 characters, Base64 alphabet plus `@:.~`
/// (and `-`, `_` of Base64URL).
pub fn maskable(value: &str) -> bool {
    value.chars().count() >= 8
        && value.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '+' | '/' | '=' | '@' | ':' | '.' | '~' | '-' | '_')
        })
}

/// A CI/CD variable key: 1 to 255 characters of `A-Z a-z 0-9 _`.
pub fn valid_variable_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 255
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_rules() {
        assert!(maskable("a3ViZWNvbmZpZw=="));
        assert!(!maskable("short"));
        assert!(!maskable("has a space"));
        assert!(!maskable("two\nlines!!"));
    }

    #[test]
    fn key_rules() {
        assert!(valid_variable_key("CI_KUBECONFIG_B64"));
        assert!(!valid_variable_key(""));
        assert!(!valid_variable_key("BAD-KEY"));
        assert!(!valid_variable_key(&"K".repeat(256)));
    }
}
