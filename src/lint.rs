//! Checks a compiled script before anything runs: a call to a function that no native, no
//! standard function, no script function and no variable provides is a typo that would
//! otherwise surface only when its step runs, after earlier steps changed things.

use rhai::{AST, Engine, Position};
use rhai::{ASTNode, Expr, Stmt};
use std::collections::HashSet;

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
pub fn unknown_calls(engine: &Engine, ast: &AST) -> Vec<(String, usize, Position)> {
    let mut known: HashSet<String> = engine
        .gen_fn_signatures(true)
        .iter()
        .filter_map(|signature| {
            signature
                .split('(')
                .next()
                .map(|name| name.rsplit(' ').next().unwrap_or(name).to_string())
        })
        .collect();
    known.extend(
        ast.iter_functions()
            .map(|function| function.name.to_string()),
    );
    known.extend(KEYWORDS.iter().map(|keyword| keyword.to_string()));
    // A variable may hold a function pointer called with function syntax: never report those.
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
    calls.retain(|(name, _, _)| !known.contains(name) && !variables.contains(name));
    calls
}
