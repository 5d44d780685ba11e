//! Declared script parameters: a script's top-level `params(#{...})` names the arguments it
//! takes (type, default_value, help). The runner finds the declaration in the compiled script before
//! anything runs, binds the command line to it (unknown or mistyped arguments are usage errors
//! with a did-you-mean), and `--list` and `bprun SCRIPT --help` show it.

use rhai::{AST, ASTNode, Dynamic, Expr, Position, Stmt};

/// The name of the native that declares parameters.
pub const PARAMS_NATIVE: &str = "params";

pub use crate::decl::{ParamDecl, ParamKind};

/// The parameters as aligned `--help` lines.
pub fn help_lines(decls: &[ParamDecl]) -> Vec<String> {
    let columns: Vec<(String, String)> = decls.iter().map(ParamDecl::help_columns).collect();
    let width = columns
        .iter()
        .map(|(flag, _)| flag.len())
        .max()
        .unwrap_or(0);
    columns
        .into_iter()
        .map(|(flag, help)| format!("{flag:width$}  {help}"))
        .collect()
}

/// Names a script parameter cannot take: bprun's own options, which may follow the script path.
const RESERVED: &[&str] = &[
    "check",
    "list",
    "only",
    "skip",
    "from",
    "resume",
    "json",
    "timings",
    "summary",
    "verbose",
    "quiet",
    "kube_context",
    "help",
    "diff",
    "tags",
    "skip_tags",
];

/// Reads a `params` map: `#{name: #{type: "int", default_value: 600, help: "..."}, ...}`.
pub fn from_spec(spec: &rhai::Map) -> Result<Vec<ParamDecl>, String> {
    let mut decls = Vec::new();
    for (name, entry) in spec {
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(format!(
                "parameter `{name}`: names are lower-case words joined by `_` (the flag is --{})",
                name.replace('_', "-")
            ));
        }
        if RESERVED.contains(&name.as_str()) {
            return Err(format!(
                "parameter `{name}`: --{} is a runner option (bprun --help lists them); choose another name",
                name.replace('_', "-")
            ));
        }
        let Some(entry) = entry.read_lock::<rhai::Map>() else {
            return Err(format!(
                "parameter `{name}`: expected a map like #{{type: \"string\", help: \"...\"}}, found {}",
                entry.type_name()
            ));
        };
        if let Some(unknown) = entry
            .keys()
            .find(|key| !matches!(key.as_str(), "type" | "default_value" | "help"))
        {
            return Err(format!(
                "parameter `{name}`: unknown key `{unknown}` (a parameter has type, default_value and help)"
            ));
        }
        let kind_text = entry
            .get("type")
            .and_then(|kind| kind.clone().into_immutable_string().ok())
            .ok_or_else(|| {
                format!("parameter `{name}`: `type` is required (bool, int, string or list)")
            })?;
        let kind = ParamKind::parse(&kind_text).ok_or_else(|| {
            format!("parameter `{name}`: unknown type `{kind_text}` (bool, int, string or list)")
        })?;
        let help = entry
            .get("help")
            .and_then(|help| help.clone().into_immutable_string().ok())
            .map(|help| help.to_string())
            .filter(|help| !help.trim().is_empty())
            .ok_or_else(|| format!("parameter `{name}`: `help` is required (one line)"))?;
        let default = entry.get("default_value").cloned();
        if let Some(default) = &default {
            let fits = default.is_unit()
                || match kind {
                    ParamKind::Bool => default.is_bool(),
                    ParamKind::Int => default.is_int(),
                    ParamKind::String => default.is_string(),
                    ParamKind::List => default.is_array(),
                };
            if !fits {
                return Err(format!(
                    "parameter `{name}`: the default_value {default} is not a {}",
                    kind.name()
                ));
            }
        }
        decls.push(ParamDecl {
            name: name.to_string(),
            kind,
            default,
            help,
        });
    }
    Ok(decls)
}

/// A declaration: the parameters and where `params` is called.
pub type Declaration = (Vec<ParamDecl>, Position);

/// The parameters `ast` declares with a top-level `params(#{...})`, and where; `None` when it
/// declares none. The map must be a literal, so that the command line can be checked before
/// anything runs.
pub fn declared_in(ast: &AST) -> Result<Option<Declaration>, (String, Position)> {
    let mut found: Option<Declaration> = None;
    for statement in ast.statements() {
        let call = match statement {
            Stmt::FnCall(call, position) => Some((call, *position)),
            Stmt::Var(declaration, _, _) => match &declaration.1 {
                Expr::FnCall(call, position) => Some((call, *position)),
                _ => None,
            },
            _ => None,
        };
        let Some((call, position)) = call else {
            continue;
        };
        if call.name != PARAMS_NATIVE || !call.namespace.is_empty() {
            continue;
        }
        if found.is_some() {
            return Err(("params() is called twice".to_string(), position));
        }
        let literal = match call.args.as_slice() {
            [argument] => argument.get_literal_value(None),
            _ => None,
        };
        let Some(spec) = literal.and_then(|value| value.try_cast::<rhai::Map>()) else {
            return Err((
                "params() takes one literal map (#{name: #{type, default_value, help}, ...}), so that bprun can check the command line before the script runs".to_string(),
                position,
            ));
        };
        let decls = from_spec(&spec).map_err(|message| (message, position))?;
        found = Some((decls, position));
    }
    Ok(found)
}

/// True when `ast` calls `params` anywhere but at the top level (where it must be).
pub fn misplaced_call(ast: &AST) -> Option<Position> {
    let top: Vec<Position> = ast
        .statements()
        .iter()
        .filter_map(|statement| match statement {
            Stmt::FnCall(call, position) if call.name == PARAMS_NATIVE => Some(*position),
            Stmt::Var(declaration, _, _) => match &declaration.1 {
                Expr::FnCall(call, position) if call.name == PARAMS_NATIVE => Some(*position),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let mut misplaced = None;
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Expr(Expr::FnCall(call, position)))
        | Some(ASTNode::Stmt(Stmt::FnCall(call, position))) = path.last()
            && call.name == PARAMS_NATIVE
            && call.namespace.is_empty()
            && !top.contains(position)
        {
            misplaced = Some(*position);
            return false;
        }
        true
    });
    misplaced
}

/// A script's declared parameters and the values the command line gave them.
#[derive(Debug, Clone)]
pub struct BoundParams {
    pub decls: Vec<ParamDecl>,
    pub values: rhai::Map,
}

/// A command line that does not fit the declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct BindError {
    pub message: String,
    pub hint: String,
}

/// Binds the script's command-line words to its declared parameters: every declared name gets
/// its value (converted) or its default (`()` when it has none).
pub fn bind(decls: &[ParamDecl], words: &[String]) -> Result<rhai::Map, BindError> {
    let flags: Vec<String> = decls.iter().map(ParamDecl::flag).collect();
    let usage_hint = |extra: Option<String>| {
        let list = if flags.is_empty() {
            "no parameters".to_string()
        } else {
            flags.join(", ")
        };
        match extra {
            Some(extra) => format!("{extra} this script takes {list}"),
            None => format!("this script takes {list}"),
        }
    };
    let mut bound = rhai::Map::new();
    let mut index = 0;
    while index < words.len() {
        let word = &words[index];
        index += 1;
        let Some(body) = word.strip_prefix("--").filter(|body| !body.is_empty()) else {
            return Err(BindError {
                message: format!("unexpected argument `{word}`"),
                hint: usage_hint(Some("parameters are given as --name value;".to_string())),
            });
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (body, None),
        };
        let flag = format!("--{name}");
        let Some(decl) = decls.iter().find(|decl| decl.flag() == flag) else {
            let suggestion =
                crate::text::closest(&flag, &flags).map(|near| format!("did you mean {near}?"));
            return Err(BindError {
                message: format!("unknown parameter {flag}"),
                hint: usage_hint(suggestion),
            });
        };
        let mistyped = |value: &str| BindError {
            message: format!(
                "{flag} expects {}, not `{value}`",
                match decl.kind {
                    ParamKind::Bool => "true or false",
                    ParamKind::Int => "a whole number",
                    ParamKind::String | ParamKind::List => "text",
                }
            ),
            hint: decl.help_line(),
        };
        let value = match decl.kind {
            ParamKind::Bool => match inline.as_deref() {
                None | Some("true") => Dynamic::TRUE,
                Some("false") => Dynamic::FALSE,
                Some(other) => return Err(mistyped(other)),
            },
            _ => {
                let text = match inline {
                    Some(text) => text,
                    None => match words.get(index) {
                        Some(next) if !next.starts_with("--") => {
                            index += 1;
                            next.clone()
                        }
                        _ => {
                            return Err(BindError {
                                message: format!("{flag} needs a value"),
                                hint: decl.help_line(),
                            });
                        }
                    },
                };
                match decl.kind {
                    ParamKind::Int => {
                        Dynamic::from_int(text.trim().parse::<i64>().map_err(|_| mistyped(&text))?)
                    }
                    _ => Dynamic::from(text),
                }
            }
        };
        if decl.kind == ParamKind::List {
            let entry = bound
                .entry(decl.name.as_str().into())
                .or_insert_with(|| Dynamic::from_array(Vec::new()));
            if let Some(mut list) = entry.write_lock::<rhai::Array>() {
                list.push(value);
            }
        } else if bound.insert(decl.name.as_str().into(), value).is_some() {
            return Err(BindError {
                message: format!("{flag} is given twice"),
                hint: decl.help_line(),
            });
        }
    }
    for decl in decls {
        bound
            .entry(decl.name.as_str().into())
            .or_insert_with(|| decl.default.clone().unwrap_or(Dynamic::UNIT));
    }
    Ok(bound)
}

/// The words of `words` that `decls` declares (with their values), for a rehearsal that hands
/// one command line to several scripts; the rest are left for the other scripts.
pub fn words_for(decls: &[ParamDecl], words: &[String]) -> (Vec<String>, Vec<String>) {
    let mut mine = Vec::new();
    let mut others = Vec::new();
    let mut index = 0;
    while index < words.len() {
        let word = &words[index];
        index += 1;
        let flag = word.split('=').next().unwrap_or(word);
        let decl = decls.iter().find(|decl| decl.flag() == flag);
        let target = if decl.is_some() {
            &mut mine
        } else {
            &mut others
        };
        target.push(word.clone());
        let takes_value = decl.is_none_or(|decl| decl.kind != ParamKind::Bool);
        if takes_value
            && !word.contains('=')
            && word.starts_with("--")
            && let Some(next) = words.get(index)
            && !next.starts_with("--")
        {
            target.push(next.clone());
            index += 1;
        }
    }
    (mine, others)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decls() -> Vec<ParamDecl> {
        let engine = rhai::Engine::new();
        let spec: rhai::Map = engine
            .eval(
                r#"#{
                    app: #{type: "string", help: "Only this app"},
                    destroy: #{type: "bool", default_value: false, help: "Tear down"},
                    smoke_timeout: #{type: "int", default_value: 600, help: "Seconds"},
                    tag: #{type: "list", help: "Tags"},
                }"#,
            )
            .expect("spec");
        from_spec(&spec).expect("valid")
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_command_line_binds_with_types_and_defaults() {
        let bound = bind(
            &decls(),
            &words("--app guestbook --smoke-timeout=30 --tag a --tag b --destroy"),
        )
        .expect("binds");
        assert_eq!(bound["app"].to_string(), "guestbook");
        assert_eq!(bound["smoke_timeout"].as_int(), Ok(30));
        assert_eq!(bound["destroy"].as_bool(), Ok(true));
        assert_eq!(bound["tag"].to_string(), r#"["a", "b"]"#);
        let defaults = bind(&decls(), &[]).expect("binds");
        assert!(defaults["app"].is_unit());
        assert_eq!(defaults["smoke_timeout"].as_int(), Ok(600));
        assert_eq!(defaults["destroy"].as_bool(), Ok(false));
    }

    #[test]
    fn unknown_and_mistyped_arguments_are_refused_with_a_suggestion() {
        let error = bind(&decls(), &words("--ap guestbook")).expect_err("unknown");
        assert_eq!(error.message, "unknown parameter --ap");
        assert_eq!(
            error.hint,
            "did you mean --app? this script takes --app, --destroy, --smoke-timeout, --tag"
        );
        let error = bind(&decls(), &words("--smoke-timeout soon")).expect_err("not an int");
        assert_eq!(
            error.message,
            "--smoke-timeout expects a whole number, not `soon`"
        );
        assert_eq!(error.hint, "--smoke-timeout N  Seconds (default: 600)");
        let error = bind(&decls(), &words("--app")).expect_err("no value");
        assert_eq!(error.message, "--app needs a value");
        let error = bind(&decls(), &words("--destroy=yes")).expect_err("not a bool");
        assert_eq!(error.message, "--destroy expects true or false, not `yes`");
        let error = bind(&decls(), &words("guestbook")).expect_err("positional");
        assert_eq!(error.message, "unexpected argument `guestbook`");
        let error = bind(&decls(), &words("--app a --app b")).expect_err("twice");
        assert_eq!(error.message, "--app is given twice");
    }

    #[test]
    fn a_bool_flag_does_not_take_the_next_word() {
        let error = bind(&decls(), &words("--destroy guestbook")).expect_err("positional");
        assert_eq!(error.message, "unexpected argument `guestbook`");
    }

    #[test]
    fn declarations_are_checked() {
        let engine = rhai::Engine::new();
        for (spec, message) in [
            (
                r#"#{app: #{type: "text", help: "x"}}"#,
                "parameter `app`: unknown type `text` (bool, int, string or list)",
            ),
            (
                r#"#{app: #{type: "string"}}"#,
                "parameter `app`: `help` is required (one line)",
            ),
            (
                r#"#{n: #{type: "int", default_value: "ten", help: "x"}}"#,
                "parameter `n`: the default_value ten is not a int",
            ),
            (
                r#"#{Bad: #{type: "int", help: "x"}}"#,
                "parameter `Bad`: names are lower-case words joined by `_` (the flag is --Bad)",
            ),
            (
                r#"#{check: #{type: "bool", help: "x"}}"#,
                "parameter `check`: --check is a runner option (bprun --help lists them); choose another name",
            ),
            (
                r#"#{n: #{type: "int", help: "x", required: true}}"#,
                "parameter `n`: unknown key `required` (a parameter has type, default_value and help)",
            ),
        ] {
            let spec: rhai::Map = engine.eval(spec).expect("spec");
            assert_eq!(from_spec(&spec).expect_err(message), message);
        }
    }

    #[test]
    fn the_declaration_is_found_in_the_compiled_script() {
        let engine = rhai::Engine::new();
        let ast = engine
            .compile(
                r#"let args = params(#{app: #{type: "string", help: "Only this app"}});
                   let x = 1;"#,
            )
            .expect("compiles");
        let (decls, position) = declared_in(&ast).expect("valid").expect("declared");
        assert_eq!(decls.len(), 1);
        assert_eq!(position.line(), Some(1));
        let dynamic = engine
            .compile(r#"let spec = #{}; let args = params(spec);"#)
            .expect("compiles");
        let (message, _) = declared_in(&dynamic).expect_err("not a literal");
        assert!(
            message.starts_with("params() takes one literal map"),
            "{message}"
        );
        let nested = engine
            .compile(r#"fn f() { params(#{}) } let x = 1;"#)
            .expect("compiles");
        assert!(declared_in(&nested).expect("valid").is_none());
        assert!(misplaced_call(&nested).is_some());
        assert!(misplaced_call(&ast).is_none());
    }

    #[test]
    fn a_rehearsal_hands_each_script_the_words_it_declares() {
        let (mine, others) = words_for(
            &decls(),
            &words("--wait-timeout 60 --app guestbook --destroy --preserve-data"),
        );
        assert_eq!(mine, words("--app guestbook --destroy"));
        assert_eq!(others, words("--wait-timeout 60 --preserve-data"));
    }
}
