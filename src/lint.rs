//! Checks a compiled script before anything runs: a call to a function that no native, no
//! standard function, no script function and no variable provides is a typo that would
//! otherwise surface only when its step runs, after earlier steps changed things.

use rhai::{AST, Engine, Position};
use rhai::{ASTNode, Expr, Stmt};
use std::collections::HashSet;

use crate::natives::declared::{Kind, declared_options, option_names};

/// Each function name an engine knows (natives and standard functions) with the argument counts
/// of its signatures: read once per check ([`Arities::of`]) and shared by every check below.
pub struct Arities(std::collections::HashMap<String, HashSet<usize>>);

/// Names Rhai handles itself rather than as registered functions.
const KEYWORDS: &[&str] = &[
    "print",
    "debug",
    "type_of",
    "eval",
    "Fn",
    "call",
    "curry",
    "is_shared",
    "is_def_var",
    "is_def_fn",
    "this",
    "global",
];

/// Every call of `ast` (in the top level, functions and closures) to a function that does not
/// exist, with its position: (name, arity, position).
pub fn unknown_calls(arities: &Arities, ast: &AST) -> Vec<(String, usize, Position)> {
    let mut known: HashSet<String> = arities.0.keys().cloned().collect();
    known.extend(
        ast.iter_functions()
            .map(|function| function.name.to_string()),
    );
    known.extend(KEYWORDS.iter().map(|keyword| keyword.to_string()));
    let (mut calls, variables) = calls_and_variables(ast);
    calls.retain(|(name, _, _)| !known.contains(name) && !variables.contains(name));
    calls
}

/// Every plain call of `ast` (in the top level, functions and closures) as (name, arity,
/// position), and every variable name it uses or declares: a variable may hold a function
/// pointer called with function syntax, which is never reported.
fn calls_and_variables(ast: &AST) -> (Vec<(String, usize, Position)>, HashSet<String>) {
    let mut variables: HashSet<String> = HashSet::new();
    let mut calls: Vec<(String, usize, Position)> = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        match path.last() {
            Some(ASTNode::Expr(Expr::Variable(variable, _, _))) => {
                variables.insert(variable.1.to_string());
            }
            Some(ASTNode::Stmt(Stmt::Var(declaration, _, _))) => {
                variables.insert(declaration.0.name.to_string());
            }
            // A call is an expression, or (its value unused) a statement of its own.
            Some(ASTNode::Expr(Expr::FnCall(call, position)))
            | Some(ASTNode::Stmt(Stmt::FnCall(call, position)))
                if call.namespace.is_empty() && call.op_token.is_none() =>
            {
                calls.push((call.name.to_string(), call.args.len(), *position));
            }
            _ => {}
        }
        true
    });
    (calls, variables)
}

/// What a literal option value is, as far as a check before the run can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Literal {
    Str,
    Int,
    Float,
    Bool,
    Array {
        all_strings: bool,
    },
    Map,
    Unit,
    /// Computed when the script runs: not checked now.
    Computed,
}

impl Literal {
    fn of_expr(expr: &Expr) -> Literal {
        match expr {
            Expr::StringConstant(..) | Expr::InterpolatedString(..) => Literal::Str,
            Expr::IntegerConstant(..) => Literal::Int,
            Expr::FloatConstant(..) => Literal::Float,
            Expr::BoolConstant(..) => Literal::Bool,
            Expr::Unit(..) => Literal::Unit,
            Expr::Map(..) => Literal::Map,
            Expr::Array(items, _) => Literal::Array {
                all_strings: items
                    .iter()
                    .all(|item| matches!(Literal::of_expr(item), Literal::Str | Literal::Computed)),
            },
            Expr::DynamicConstant(value, _) => Literal::of_value(value),
            _ => Literal::Computed,
        }
    }

    fn of_value(value: &rhai::Dynamic) -> Literal {
        if value.is_string() {
            Literal::Str
        } else if value.is_int() {
            Literal::Int
        } else if value.is_float() {
            Literal::Float
        } else if value.is_bool() {
            Literal::Bool
        } else if value.is_unit() {
            Literal::Unit
        } else if value.is_map() {
            Literal::Map
        } else if value.is_array() {
            let items = value.clone().into_array().unwrap_or_default();
            Literal::Array {
                all_strings: items.iter().all(|item| item.is_string()),
            }
        } else {
            Literal::Computed
        }
    }

    fn fits(self, kind: Kind) -> bool {
        match (self, kind) {
            (Literal::Computed | Literal::Unit, _) | (_, Kind::Any) => true,
            (Literal::Str, Kind::Str | Kind::StrOrStrings | Kind::StrOrMap) => true,
            (Literal::Int, Kind::Int | Kind::Seconds) => true,
            (Literal::Float, Kind::Seconds) => true,
            (Literal::Bool, Kind::Bool) => true,
            (Literal::Array { all_strings }, Kind::Strings | Kind::StrOrStrings) => all_strings,
            (Literal::Map, Kind::Map | Kind::StrOrMap) => true,
            _ => false,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Literal::Str => "a string",
            Literal::Int => "an integer",
            Literal::Float => "a decimal",
            Literal::Bool => "a boolean",
            Literal::Array { .. } => "an array",
            Literal::Map => "a map",
            Literal::Unit | Literal::Computed => "()",
        }
    }
}

/// A literal option map's mistake, found before anything runs.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionMistake {
    pub message: String,
    pub hint: String,
    pub position: Position,
}

/// The argument of a call to `native` with `arguments` arguments that holds its options, when
/// that call takes them: the last one of the longest signature (a step's and a check row's
/// options come before their body).
fn options_argument(native: &str, arguments: usize, longest: usize) -> Option<usize> {
    match native {
        "step" | "check_row" => (arguments == 3).then_some(1),
        _ => (arguments == longest && arguments > 0).then(|| arguments - 1),
    }
}

/// Every literal option map of a call to a native that declares its options
/// (`crate::natives::declared`) that names an option the native does not take, or gives one a
/// literal value of the wrong kind.
pub fn option_mistakes(arities: &Arities, ast: &AST) -> Vec<OptionMistake> {
    // The longest signature of each declared native (its options come last).
    let longest = |native: &str| {
        arities
            .0
            .get(native)
            .and_then(|counts| counts.iter().max().copied())
            .unwrap_or(0)
    };
    let mut mistakes = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        let call = match path.last() {
            Some(ASTNode::Expr(Expr::FnCall(call, _)))
            | Some(ASTNode::Stmt(Stmt::FnCall(call, _)))
                if call.namespace.is_empty() =>
            {
                call
            }
            _ => return true,
        };
        let native = call.name.as_str();
        let Some(declared) = declared_options(native) else {
            return true;
        };
        let Some(index) = options_argument(native, call.args.len(), longest(native)) else {
            return true;
        };
        let entries: Vec<(String, Literal, Position)> = match &call.args[index] {
            Expr::Map(map, _) => map
                .0
                .iter()
                .map(|(name, value)| (name.name.to_string(), Literal::of_expr(value), name.pos))
                .collect(),
            Expr::DynamicConstant(value, position) if value.is_map() => value
                .clone()
                .try_cast::<rhai::Map>()
                .unwrap_or_default()
                .iter()
                .map(|(name, value)| (name.to_string(), Literal::of_value(value), *position))
                .collect(),
            _ => return true,
        };
        let names = option_names(native);
        for (name, literal, position) in entries {
            match declared.iter().find(|(option, _)| *option == name) {
                None => mistakes.push(OptionMistake {
                    message: format!("{native}: unknown option `{name}`"),
                    hint: format!("{native} accepts {}", names.join(", ")),
                    position,
                }),
                Some((_, kind)) if !literal.fits(*kind) => mistakes.push(OptionMistake {
                    message: format!(
                        "{native}: option `{name}` must be {}, not {}",
                        kind.describe(),
                        literal.describe()
                    ),
                    hint: format!("see `bprun functions {native}`"),
                    position,
                }),
                Some(_) => {}
            }
        }
        true
    });
    mistakes
}

/// A call to a native with a number of arguments none of its signatures takes.
#[derive(Debug, Clone, PartialEq)]
pub struct ArityMistake {
    pub name: String,
    pub arguments: usize,
    pub position: Position,
}

/// Every call of `ast` to one of `natives` (not a script function of the same name, not a
/// variable holding a function) with an argument count no signature of that name takes.
pub fn arity_mistakes(arities: &Arities, ast: &AST, natives: &[String]) -> Vec<ArityMistake> {
    let scripted: HashSet<String> = ast
        .iter_functions()
        .map(|function| function.name.to_string())
        .collect();
    let (calls, variables) = calls_and_variables(ast);
    calls
        .into_iter()
        .filter(|(name, _, _)| !scripted.contains(name) && !variables.contains(name))
        .filter(|(name, _, _)| natives.binary_search(name).is_ok())
        .filter(|(name, arguments, _)| {
            // Standard functions share some names: any signature of the name will do.
            !arities
                .0
                .get(name)
                .is_some_and(|counts| counts.contains(arguments))
        })
        .map(|(name, arguments, position)| ArityMistake {
            name,
            arguments,
            position,
        })
        .collect()
}

impl Arities {
    /// Every signature `engine` knows, by name.
    pub fn of(engine: &Engine) -> Arities {
        let mut arities: std::collections::HashMap<String, HashSet<usize>> = Default::default();
        for signature in engine.gen_fn_signatures(true) {
            let Some((head, rest)) = signature.split_once('(') else {
                continue;
            };
            let name = head.rsplit(' ').next().unwrap_or(head).to_string();
            let parameters = rest.split(')').next().unwrap_or("");
            let arity = if parameters.trim().is_empty() {
                0
            } else {
                parameters.split(',').count()
            };
            arities.entry(name).or_default().insert(arity);
        }
        Arities(arities)
    }
}

/// The reports of every arity and option mistake of `ast` (see [`arity_mistakes`] and
/// [`option_mistakes`]), as `(text, headline)` for the reporter: each names `display`, the
/// call's line and what the native takes. `label` marks the call (nothing ran yet).
pub fn call_reports(
    session: &crate::engine::Session,
    arities: &Arities,
    ast: &AST,
    display: &str,
    label: &'static str,
) -> Vec<(String, String)> {
    use crate::error::NativeError;
    let report = |what: &str, error: NativeError, position: Position| {
        let mut error = crate::engine::native_error(error.labelled(label));
        error.set_position(position);
        let report = crate::diagnostics::runtime_error(session, &error, display, false);
        (
            format!("error: {display} {what}\n{}", report.text),
            report.headline,
        )
    };
    let mut reports: Vec<(String, String)> = arity_mistakes(arities, ast, session.function_names())
        .into_iter()
        .map(|mistake| {
            // The docs are read only now, for the hint.
            let signatures = crate::docs::signatures_of(session.function_docs(), &mistake.name);
            report(
                "calls a native with the wrong number of arguments",
                NativeError::new(format!(
                    "{} takes {}, not {}",
                    mistake.name,
                    crate::docs::argument_counts(&signatures),
                    crate::docs::arguments(mistake.arguments)
                ))
                .with_hint(format!("it is called as {}", signatures.join(" or "))),
                mistake.position,
            )
        })
        .collect();
    // Options only once the calls themselves are right (a wrong count hides which map is which).
    if reports.is_empty() {
        reports.extend(option_mistakes(arities, ast).into_iter().map(|mistake| {
            report(
                "gives a native an option it would refuse",
                NativeError::new(mistake.message).with_hint(mistake.hint),
                mistake.position,
            )
        }));
    }
    reports
}
