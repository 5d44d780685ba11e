//! How script values read wherever bprun writes them (logs, thrown values, the REPL): text as
//! it is, a `Secret` as `***` (a secret built by joining text keeps the text: `"t=" + token`
//! reads `t=***`), maps and arrays with their items rendered the same way, a bprun error as its
//! headline.

use bprun_clients::secret::{REDACTED, Secret, scrub};
use rhai::Dynamic;

use crate::error::NativeError;

/// A secret for display: its text with every registered secret value replaced, or `***` when
/// nothing in it is a registered value (the whole of it is the secret).
pub fn secret_text(secret: &Secret) -> String {
    let scrubbed = scrub(secret.reveal());
    if scrubbed == secret.reveal() || !scrubbed.contains(REDACTED) {
        REDACTED.to_string()
    } else {
        scrubbed
    }
}

/// `value` as text for an operator.
pub fn display(value: &Dynamic) -> String {
    render(value, false)
}

fn render(value: &Dynamic, nested: bool) -> String {
    if let Some(secret) = value.read_lock::<Secret>() {
        return secret_text(&secret);
    }
    if let Some(error) = value.read_lock::<NativeError>() {
        return error.message.clone();
    }
    if value.is_string() {
        let text = value.to_string();
        return if nested { format!("{text:?}") } else { text };
    }
    if let Some(map) = value.read_lock::<rhai::Map>() {
        let items: Vec<String> = map
            .iter()
            .map(|(key, item)| format!("{key:?}: {}", render(item, true)))
            .collect();
        return format!("#{{{}}}", items.join(", "));
    }
    if let Some(array) = value.read_lock::<rhai::Array>() {
        let items: Vec<String> = array.iter().map(|item| render(item, true)).collect();
        return format!("[{}]", items.join(", "));
    }
    if value.is_unit() {
        return "()".to_string();
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_read_as_stars_and_joined_text_stays() {
        let token = Secret::new("values-canary-token");
        assert_eq!(display(&Dynamic::from(token.clone())), "***");
        let joined = Secret::derived(format!("t={}", token.reveal()));
        assert_eq!(display(&Dynamic::from(joined)), "t=***");
        let mut map = rhai::Map::new();
        map.insert("msg".into(), Dynamic::from(token));
        map.insert("n".into(), Dynamic::from(1_i64));
        assert_eq!(
            display(&Dynamic::from_map(map)),
            "#{\"msg\": ***, \"n\": 1}"
        );
        assert_eq!(display(&Dynamic::from("plain")), "plain");
        // A short secret is never shown, even though it is too short to scrub from free text.
        assert_eq!(
            display(&Dynamic::from(Secret::derived("abc".to_string()))),
            "***"
        );
    }
}
