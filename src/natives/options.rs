//! Option maps (`#{timeout: 30, mount: "kv"}`) read the same way by every native, with errors
//! that name the native, the option and what it should have been.

use rhai::{EvalAltResult, Map, NativeCallContext};
use std::sync::Arc;

use crate::engine::{Session, native_error, session};
use crate::error::NativeError;

pub type NativeResult<T> = Result<T, Box<EvalAltResult>>;

/// The same as [`NativeResult`], under the name Rhai's metadata reads as "returns T or raises"
/// (`bprun functions` and `bprun defs` then show `-> T`).
pub type RhaiResultOf<T> = Result<T, Box<EvalAltResult>>;

/// The session, after checking that a native with side effects may run now (inside a step,
/// not interrupted).
pub fn remote_session(context: &NativeCallContext, native: &str) -> NativeResult<Arc<Session>> {
    let session = session(context)?;
    session.state.require_step(native).map_err(native_error)?;
    session
        .state
        .check_cancelled(native)
        .map_err(native_error)?;
    Ok(session)
}

/// Fails on an option `native` does not declare (`crate::natives::declared`), listing the ones
/// it does.
pub fn reject_undeclared(options: &Map, native: &str) -> NativeResult<()> {
    reject_unknown(options, &super::declared::option_names(native), native)
}

/// Fails on an option the native does not know, listing the ones it does.
pub fn reject_unknown(options: &Map, known: &[&str], native: &str) -> NativeResult<()> {
    for key in options.keys() {
        if !known.contains(&key.as_str()) {
            return Err(native_error(
                NativeError::new(format!("{native}: unknown option `{key}`"))
                    .with_hint(format!("{native} accepts {}", known.join(", "))),
            ));
        }
    }
    Ok(())
}

pub fn option_str(options: &Map, key: &str, native: &str) -> NativeResult<Option<String>> {
    match options.get(key) {
        None => Ok(None),
        Some(value) => value
            .clone()
            .into_immutable_string()
            .map(|s| Some(s.to_string()))
            .map_err(|type_name| {
                native_error(NativeError::new(format!(
                    "{native}: option `{key}` must be a string, not {type_name}"
                )))
            }),
    }
}

pub fn option_int(options: &Map, key: &str, native: &str, default: i64) -> NativeResult<i64> {
    match options.get(key) {
        None => Ok(default),
        Some(value) => value.as_int().map_err(|type_name| {
            native_error(NativeError::new(format!(
                "{native}: option `{key}` must be an integer, not {type_name}"
            )))
        }),
    }
}

pub fn option_bool(options: &Map, key: &str, native: &str) -> NativeResult<Option<bool>> {
    match options.get(key) {
        None => Ok(None),
        Some(value) => value.as_bool().map(Some).map_err(|type_name| {
            native_error(NativeError::new(format!(
                "{native}: option `{key}` must be true or false, not {type_name}"
            )))
        }),
    }
}

/// An option that is an array of strings (`#{plain: ["host", "port"]}`); empty when absent.
pub fn option_strings(options: &Map, key: &str, native: &str) -> NativeResult<Vec<String>> {
    let Some(value) = options.get(key) else {
        return Ok(Vec::new());
    };
    let not_strings = || {
        native_error(NativeError::new(format!(
            "{native}: option `{key}` must be an array of strings, not {}",
            value.type_name()
        )))
    };
    let array = value.clone().into_array().map_err(|_| not_strings())?;
    array
        .into_iter()
        .map(|item| {
            item.into_immutable_string()
                .map(|text| text.to_string())
                .map_err(|_| not_strings())
        })
        .collect()
}
