//! The `Secret` type and `NativeError` type as scripts see them.

use rhai::plugin::*;

#[export_module]
pub mod secret_functions {
    /// A secret value: a token, password or key.
    pub type Secret = bprun_clients::secret::Secret;
    /// The error a bprun native raised; `e.message` and `e.hint` read it in a `catch`.
    pub type NativeError = crate::error::NativeError;

    /// Wraps a string as a `Secret`: it prints as `***` everywhere (print, logs, errors, the
    /// journal, JSON events) and its value is scrubbed from every line bprun writes.
    ///
    /// ```rhai
    /// let token = secret("glpat-xxxxxxxxxxxxxxxxxxxx");
    /// print(token);            // ***
    /// print(`token: ${token}`); // token: ***
    /// ```
    #[rhai_fn(name = "secret")]
    pub fn new_secret(value: &str) -> Secret {
        Secret::new(value)
    }

    /// Returns an existing `Secret` unchanged (so `secret(x)` is safe on either kind of value).
    ///
    /// ```rhai
    /// let token = secret(secret("glpat-xxxxxxxxxxxxxxxxxxxx"));
    /// ```
    #[rhai_fn(name = "secret")]
    pub fn keep_secret(value: Secret) -> Secret {
        value
    }

    /// A new random password as a `Secret`: `length` characters (12 to 256) from `[A-Za-z0-9]`,
    /// drawn from the operating system's CSPRNG. Scripts keep it somewhere (a 0600 file,
    /// OpenBao) before they use it, so a re-run reads it back instead of minting another.
    ///
    /// ```rhai
    /// let password = random_secret(32);
    /// assert(password.len == 32, "length");
    /// ```
    #[rhai_fn(return_raw)]
    pub fn random_secret(length: i64) -> crate::natives::options::RhaiResultOf<Secret> {
        if !(12..=256).contains(&length) {
            return Err(format!(
                "random_secret: a length of {length} is outside 12..=256 (hint: passwords phase 2 mints are 32 characters)"
            )
            .into());
        }
        bprun_clients::secret::random_password(length as usize).map_err(|message| message.into())
    }

    /// The plain value of a `Secret`, for the rare place that needs text. The result is still
    /// scrubbed from output, but prefer passing the `Secret` itself to natives.
    ///
    /// ```rhai
    /// let token = secret("glpat-xxxxxxxxxxxxxxxxxxxx");
    /// let header = "Bearer " + token.reveal();
    /// ```
    #[rhai_fn(pure)]
    pub fn reveal(value: &mut Secret) -> String {
        value.reveal().to_string()
    }

    /// The number of characters of the secret value.
    ///
    /// ```rhai
    /// assert(secret("abcd").len == 4, "length");
    /// ```
    #[rhai_fn(get = "len", pure)]
    pub fn secret_len(value: &mut Secret) -> i64 {
        value.reveal().chars().count() as i64
    }

    /// True when the secret value is empty.
    ///
    /// ```rhai
    /// assert(secret("").is_empty, "empty");
    /// ```
    #[rhai_fn(get = "is_empty", pure)]
    pub fn secret_is_empty(value: &mut Secret) -> bool {
        value.is_empty()
    }

    /// `***`; a secret joined with text keeps the text (`"t=" + token` reads `t=***`).
    #[rhai_fn(global, name = "to_string", name = "to_debug", pure)]
    pub fn secret_to_string(value: &mut Secret) -> String {
        crate::values::secret_text(value)
    }

    /// Secrets compare by value.
    #[rhai_fn(name = "==", pure)]
    pub fn secret_eq(left: &mut Secret, right: Secret) -> bool {
        *left == right
    }
    /// Secrets compare by value.
    #[rhai_fn(name = "!=", pure)]
    pub fn secret_ne(left: &mut Secret, right: Secret) -> bool {
        *left != right
    }
    /// A secret compares with a plain string by value.
    #[rhai_fn(name = "==", pure)]
    pub fn secret_eq_str(left: &mut Secret, right: &str) -> bool {
        left.reveal() == right
    }
    /// A secret compares with a plain string by value.
    #[rhai_fn(name = "!=", pure)]
    pub fn secret_ne_str(left: &mut Secret, right: &str) -> bool {
        left.reveal() != right
    }

    /// Joining a secret with text gives a secret: `"Bearer " + token` stays hidden.
    #[rhai_fn(name = "+")]
    pub fn secret_plus_str(left: Secret, right: &str) -> Secret {
        Secret::derived(format!("{}{right}", left.reveal()))
    }
    /// Joining text with a secret gives a secret.
    #[rhai_fn(name = "+")]
    pub fn str_plus_secret(left: &str, right: Secret) -> Secret {
        Secret::derived(format!("{left}{}", right.reveal()))
    }
    /// Joining two secrets gives a secret.
    #[rhai_fn(name = "+")]
    pub fn secret_plus_secret(left: Secret, right: Secret) -> Secret {
        Secret::derived(format!("{}{}", left.reveal(), right.reveal()))
    }

    /// The error's headline.
    ///
    /// ```rhai
    /// try { read_text("no/such/file") } catch (e) { print(e.message) }
    /// ```
    #[rhai_fn(get = "message", pure)]
    pub fn error_message(error: &mut NativeError) -> String {
        error.message.clone()
    }

    /// The error's hint, or `()`.
    ///
    /// ```rhai
    /// try { read_text("no/such/file") } catch (e) { print(e.hint) }
    /// ```
    #[rhai_fn(get = "hint", pure)]
    pub fn error_hint(error: &mut NativeError) -> Dynamic {
        error
            .hint
            .clone()
            .map(Dynamic::from)
            .unwrap_or(Dynamic::UNIT)
    }

    /// What kind of failure a client reported (`"not-found"`, `"conflict"`, `"unauthorized"`,
    /// `"forbidden"`, `"invalid"`, `"timeout"`, `"transport"`, ...; `"local"` for a failure on
    /// this machine a client found: a file it cannot read, a values schema refusing a value, a
    /// program that failed), or `()` when the native refused the call itself (a wrong argument)
    /// before any client ran. A git refusal carries the remote's status too.
    ///
    /// ```rhai
    /// try { read_text("no/such/file") } catch (e) { print(e.kind) }
    /// ```
    #[rhai_fn(get = "kind", pure)]
    pub fn error_kind(error: &mut NativeError) -> Dynamic {
        error.kind.map(|kind| kind.into()).unwrap_or(Dynamic::UNIT)
    }

    /// The remote's HTTP status (`404`), or `()` when there was no answer.
    ///
    /// ```rhai
    /// try { read_text("no/such/file") } catch (e) { print(e.status) }
    /// ```
    #[rhai_fn(get = "status", pure)]
    pub fn error_status(error: &mut NativeError) -> Dynamic {
        error
            .status
            .map(|status| Dynamic::from(status as i64))
            .unwrap_or(Dynamic::UNIT)
    }

    /// The error's headline.
    #[rhai_fn(global, name = "to_string", name = "to_debug", pure)]
    pub fn error_to_string(error: &mut NativeError) -> String {
        error.message.clone()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn native_error_displays_its_message() {
        let error = crate::error::NativeError::new("boom").with_hint("try again");
        assert_eq!(error.to_string(), "boom");
    }
}
