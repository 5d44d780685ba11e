//! The natives' documentation, read from the engine's metadata (the `///` comments of every
//! `#[export_module]`): `bprun functions`, `bprun defs` and the REPL's completion and `:help`.
//! Only parsing lives here; `crate::catalog` builds the engine it is read from.

/// One documented native, from the engine's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionDoc {
    pub name: String,
    pub signature: String,
    /// The `///` doc text, without the slashes.
    pub doc: String,
}

impl FunctionDoc {
    /// The first non-empty doc line.
    /// The first sentence of the docs (it may span lines), never cut mid-sentence.
    pub fn summary(&self) -> String {
        let paragraph: Vec<&str> = self
            .doc
            .lines()
            .map(str::trim)
            .skip_while(|line| line.is_empty())
            .take_while(|line| !line.is_empty() && !line.starts_with("```"))
            .collect();
        let text = paragraph.join(" ");
        // A sentence ends at ". " outside backticks (`#{a: 1}. ` and `e.g. ` stay inside).
        let mut in_code = false;
        let bytes: Vec<char> = text.chars().collect();
        for (index, c) in bytes.iter().enumerate() {
            match c {
                '`' => in_code = !in_code,
                '.' if !in_code && bytes.get(index + 1) == Some(&' ') => {
                    let sentence: String = bytes[..=index].iter().collect();
                    if !sentence.ends_with("e.g.") && !sentence.ends_with("i.e.") {
                        return sentence;
                    }
                }
                _ => {}
            }
        }
        text
    }

    /// The whole docs without the examples' fences, for `bprun functions NAME`.
    pub fn full_text(&self) -> String {
        self.doc
            .lines()
            .map(|line| line.strip_prefix(' ').unwrap_or(line))
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_string()
    }

    /// The ```rhai examples in the docs.
    pub fn examples(&self) -> Vec<String> {
        let mut examples = Vec::new();
        let mut current: Option<String> = None;
        for line in self.doc.lines() {
            let trimmed = line.trim();
            match &mut current {
                None if trimmed == "```rhai" => current = Some(String::new()),
                Some(_) if trimmed == "```" => examples.extend(current.take()),
                Some(text) => {
                    text.push_str(line.strip_prefix(' ').unwrap_or(line));
                    text.push('\n');
                }
                None => {}
            }
        }
        examples
    }
}

impl FunctionDoc {
    /// The docs as the REPL's `:help` shows them: an example that is one `step("...", || {
    /// ... })` shows its body, since steps do not run in the REPL and the body runs as typed.
    pub fn repl_text(&self) -> String {
        let mut out = Vec::new();
        let mut block: Option<Vec<String>> = None;
        for line in self.doc.lines() {
            let trimmed = line.trim();
            let text = line.strip_prefix(' ').unwrap_or(line).to_string();
            match &mut block {
                None if trimmed == "```rhai" => {
                    out.push(text);
                    block = Some(Vec::new());
                }
                Some(lines) if trimmed == "```" => {
                    let code = lines.join("\n");
                    out.extend(step_body(&code).unwrap_or(code).lines().map(str::to_string));
                    out.push(text);
                    block = None;
                }
                Some(lines) => lines.push(text),
                None => out.push(text),
            }
        }
        out.join("\n")
    }
}

/// The body of an example that is a single `step("...", || { BODY });`, dedented.
pub fn step_body(code: &str) -> Option<String> {
    let code = code.trim();
    if !code.starts_with("step(") || !code.ends_with("});") || code.matches("step(").count() != 1 {
        return None;
    }
    let open = code.find("|| {")? + "|| {".len();
    let body = code.get(open..code.len() - "});".len())?;
    // One line (`|| { call(); }`), or lines each indented at least as much as the least.
    let lines: Vec<&str> = body
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let indent = lines
        .iter()
        .map(|line| line.len() - line.trim_start().len())
        .min()
        .unwrap_or(0);
    let dedented: Vec<&str> = lines
        .iter()
        .map(|line| line.get(indent..).unwrap_or(line.trim_start()))
        .collect();
    Some(dedented.join("\n").trim().to_string())
}

/// A Rust type as scripts know it: `Result<Map, Box<EvalAltResult>>` is `map`.
fn script_type(rust: &str) -> String {
    let rust = rust.trim();
    // `crate::natives::options::RhaiResultOf<Secret>` and the like: the value a native returns.
    let unqualified = rust.rsplit("::").next().unwrap_or(rust);
    let rust = if rust.contains("ResultOf<") || rust.starts_with("NativeResult<") {
        rust.split_once('<')
            .map_or(unqualified, |(_, rest)| rest)
            .strip_suffix('>')
            .unwrap_or(rust)
    } else {
        rust
    };
    if let Some(inner) = rust
        .strip_prefix("NativeResult<")
        .and_then(|rest| rest.strip_suffix('>'))
    {
        return script_type(inner);
    }
    if let Some(inner) = rust
        .strip_prefix("Result<")
        .and_then(|rest| rest.strip_suffix(", Box<EvalAltResult>>"))
    {
        return script_type(inner);
    }
    let rust = rust.trim_start_matches("&mut ").trim_start_matches('&');
    match rust {
        "str" | "String" | "ImmutableString" => "string",
        "i64" | "INT" => "int",
        "f64" | "FLOAT" => "float",
        "bool" => "bool",
        "Map" | "rhai::Map" => "map",
        "Array" | "rhai::Array" => "array",
        "FnPtr" => "Fn",
        "Dynamic" => "?",
        "()" => "()",
        other => other.rsplit("::").next().unwrap_or(other),
    }
    .to_string()
}

/// The documented natives of an engine's metadata (`Engine::gen_fn_metadata_to_json`; operators,
/// display helpers and `hidden` left out), sorted by name.
pub fn from_metadata(json: &str, hidden: &[&str]) -> Vec<FunctionDoc> {
    let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let functions = value["functions"].as_array().cloned().unwrap_or_default();
    let mut docs: Vec<FunctionDoc> = functions
        .iter()
        .filter_map(|function| {
            let name = function["name"].as_str()?.to_string();
            let is_identifier = name.chars().all(|c| c.is_alphanumeric() || c == '_');
            let hidden = !is_identifier
                || name.starts_with("get$")
                || name.starts_with("set$")
                || matches!(name.as_str(), "to_string" | "to_debug")
                || hidden.contains(&name.as_str());
            if hidden {
                return None;
            }
            let doc = function["docComments"]
                .as_array()
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter_map(|block| block.as_str())
                        .flat_map(str::lines)
                        .map(|line| line.trim_start().trim_start_matches("///"))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            let params: Vec<String> = function["params"]
                .as_array()
                .map(|params| {
                    params
                        .iter()
                        .map(|param| {
                            let ty = script_type(param["type"].as_str().unwrap_or("?"));
                            match param["name"].as_str() {
                                Some(name) => format!("{name}: {ty}"),
                                None => ty,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let returns = script_type(function["returnType"].as_str().unwrap_or("()"));
            let signature = if returns == "()" {
                format!("{name}({})", params.join(", "))
            } else {
                format!("{name}({}) -> {returns}", params.join(", "))
            };
            Some(FunctionDoc {
                name,
                signature,
                doc,
            })
        })
        .collect();
    docs.sort_by(|a, b| a.name.cmp(&b.name).then(a.signature.cmp(&b.signature)));
    docs.dedup();
    docs
}

/// How many arguments a documented signature takes.
pub fn arity(signature: &str) -> usize {
    let inside = signature
        .split_once('(')
        .and_then(|(_, rest)| rest.rsplit_once(')'))
        .map(|(params, _)| params.trim())
        .unwrap_or("");
    if inside.is_empty() {
        0
    } else {
        inside.split(", ").count()
    }
}

/// Every signature of the native `name` (none when no native has that name).
pub fn signatures_of(docs: &[FunctionDoc], name: &str) -> Vec<String> {
    docs.iter()
        .filter(|doc| doc.name == name)
        .map(|doc| doc.signature.clone())
        .collect()
}

/// `1 argument`, `3 arguments`.
pub fn arguments(count: usize) -> String {
    if count == 1 {
        "1 argument".to_string()
    } else {
        format!("{count} arguments")
    }
}

/// `2 or 3 arguments`, from the signatures a native has.
pub fn argument_counts(signatures: &[String]) -> String {
    let mut counts: Vec<usize> = signatures
        .iter()
        .map(|signature| arity(signature))
        .collect();
    counts.sort();
    counts.dedup();
    let words: Vec<String> = counts.iter().map(usize::to_string).collect();
    let joined = match words.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    format!("{joined} argument{}", if counts == [1] { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_step_example_shows_its_body_in_the_repl() {
        assert_eq!(
            step_body(
                r#"step("Destroy", || { gitlab_delete_project("blueprint-apps/guestbook"); });"#
            )
            .as_deref(),
            Some(r#"gitlab_delete_project("blueprint-apps/guestbook");"#)
        );
        assert_eq!(
            step_body("step(\"Smoke\", || {\n    let started = go();\n    wait(started);\n});")
                .as_deref(),
            Some("let started = go();\nwait(started);")
        );
        assert_eq!(
            step_body("step(\"A\", || { a(); });\nstep(\"B\", || { b(); });"),
            None
        );
        assert_eq!(step_body("gitlab_projects(\"g\")"), None);
    }
}
