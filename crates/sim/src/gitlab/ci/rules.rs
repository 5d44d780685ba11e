//! Which jobs a pipeline gets: `rules:` (`if`, `changes`, `exists`, `when`), `only`/`except`,
//! and GitLab's CI/CD variable expressions they test.

use serde_json::Value;

use super::Context;

/// `rules:` (of a job or of `workflow`): the first rule whose `if`, `changes` and `exists` all
/// hold decides; its `when` (else the job's, else `on_success`, `always` for workflow).
/// `None`: no rule matched (the job is not added).
pub(super) fn evaluate_rules(
    rules: &Value,
    variables: &[(String, String)],
    context: &Context,
    job_when: Option<&str>,
    location: &str,
) -> Result<Option<String>, String> {
    let Value::Array(rules) = rules else {
        return Err(format!("{location} config should be an array of hashes"));
    };
    for rule in rules {
        let Value::Object(rule) = rule else {
            return Err(format!("{location}:rule config should be a hash"));
        };
        if let Some(condition) = rule.get("if") {
            let text = condition.as_str().unwrap_or_default();
            let holds = expression::evaluate(text, variables)
                .map_err(|_| format!("{location}:rule if invalid expression syntax"))?;
            if !holds {
                continue;
            }
        }
        if let Some(changes) = rule.get("changes")
            && let Some(changed) = &context.changed
            && !globs(changes)
                .iter()
                .any(|glob| changed.iter().any(|file| glob_match(glob, file)))
        {
            continue;
        }
        if let Some(exists) = rule.get("exists")
            && !globs(exists)
                .iter()
                .any(|glob| context.files.iter().any(|file| glob_match(glob, file)))
        {
            continue;
        }
        let when = rule
            .get("when")
            .and_then(Value::as_str)
            .or(job_when)
            .unwrap_or("on_success");
        return Ok(Some(when.to_string()));
    }
    Ok(None)
}

/// The patterns of `changes:`/`exists:` (a list, or `paths:` in a hash).
fn globs(value: &Value) -> Vec<String> {
    let list = match value {
        Value::Object(map) => map.get("paths").cloned().unwrap_or(Value::Null),
        other => other.clone(),
    };
    match list {
        Value::Array(items) => items
            .iter()
            .filter_map(|item| {
                item.as_str()
                    .map(|s| s.trim_start_matches("./").to_string())
            })
            .collect(),
        Value::String(one) => vec![one],
        _ => Vec::new(),
    }
}

/// Ruby's `File.fnmatch?` with `File::FNM_PATHNAME | File::FNM_DOTMATCH | File::FNM_EXTGLOB`,
/// enough of it: `*` within a segment, `**/` across segments, `?`, `{a,b}`.
pub(super) fn glob_match(pattern: &str, path: &str) -> bool {
    if let Some(open) = pattern.find('{')
        && let Some(close) = pattern[open..].find('}')
    {
        let close = open + close;
        return pattern[open + 1..close].split(',').any(|choice| {
            glob_match(
                &format!("{}{choice}{}", &pattern[..open], &pattern[close + 1..]),
                path,
            )
        });
    }
    let mut regex = String::from("^");
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                if chars.peek() == Some(&'/') {
                    chars.next();
                    regex.push_str("(?:.*/)?");
                } else {
                    regex.push_str(".*");
                }
            }
            '*' => regex.push_str("[^/]*"),
            '?' => regex.push_str("[^/]"),
            other => regex.push_str(&regex::escape(&other.to_string())),
        }
    }
    regex.push('$');
    regex::Regex::new(&regex).is_ok_and(|re| re.is_match(path))
}

/// `only`/`except` (refs, variables, changes): `only` needs every key it has to match (refs
/// default to `branches` and `tags`); `except` excludes when any of its keys matches.
pub(super) fn only_except(
    job: &serde_json::Map<String, Value>,
    variables: &[(String, String)],
    context: &Context,
) -> bool {
    let parts = |value: Option<&Value>| -> Option<(Vec<String>, Vec<String>, Option<Value>)> {
        match value? {
            Value::Array(refs) => Some((
                refs.iter()
                    .filter_map(|r| r.as_str().map(str::to_string))
                    .collect(),
                Vec::new(),
                None,
            )),
            Value::String(one) => Some((vec![one.clone()], Vec::new(), None)),
            Value::Object(map) => Some((
                match map.get("refs") {
                    Some(Value::Array(refs)) => refs
                        .iter()
                        .filter_map(|r| r.as_str().map(str::to_string))
                        .collect(),
                    _ => Vec::new(),
                },
                match map.get("variables") {
                    Some(Value::Array(list)) => list
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect(),
                    _ => Vec::new(),
                },
                map.get("changes").cloned(),
            )),
            _ => None,
        }
    };
    let ref_matches = |entry: &str| -> bool {
        match entry {
            "branches" => true,
            "tags" | "external_pull_requests" => false,
            "api" => context.source == "api",
            "pushes" => context.source == "push",
            "web" => context.source == "web",
            "schedules" => context.source == "schedule",
            "triggers" => context.source == "trigger",
            "pipelines" => context.source == "pipeline",
            "merge_requests" => context.source == "merge_request_event",
            "chat" => context.source == "chat",
            pattern if pattern.len() > 1 && pattern.starts_with('/') => {
                expression::regex_of(pattern).is_some_and(|re| re.is_match(context.reference))
            }
            name => name == context.reference,
        }
    };
    let variables_match = |list: &[String]| {
        list.iter()
            .any(|text| expression::evaluate(text, variables).unwrap_or(false))
    };
    let changes_match = |changes: &Value| match &context.changed {
        None => true,
        Some(changed) => globs(changes)
            .iter()
            .any(|glob| changed.iter().any(|file| glob_match(glob, file))),
    };
    let included = match parts(job.get("only")) {
        None => true,
        Some((refs, vars, changes)) => {
            (refs.is_empty() && (!vars.is_empty() || changes.is_some())
                || refs.iter().any(|r| ref_matches(r)))
                && (vars.is_empty() || variables_match(&vars))
                && changes.as_ref().is_none_or(changes_match)
        }
    };
    let excluded = match parts(job.get("except")) {
        None => false,
        Some((refs, vars, changes)) => {
            refs.iter().any(|r| ref_matches(r))
                || (!vars.is_empty() && variables_match(&vars))
                || changes.as_ref().is_some_and(changes_match)
        }
    };
    included && !excluded
}

/// GitLab's CI/CD variable expressions (`rules:if`, `only:variables`): `$VAR`, `"string"`,
/// `'string'`, `/regex/flags`, `null`, `==`, `!=`, `=~`, `!~`, `&&`, `||`, parentheses.
mod expression {
    #[derive(Debug, Clone, PartialEq)]
    enum Token {
        Variable(String),
        Text(String),
        Pattern(String),
        Null,
        Op(&'static str),
        Open,
        Close,
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Operand {
        Value(Option<String>),
        Pattern(String),
    }

    pub fn regex_of(pattern: &str) -> Option<regex::Regex> {
        let body = pattern.strip_prefix('/')?;
        let end = body.rfind('/')?;
        let (expression, flags) = (&body[..end], &body[end + 1..]);
        let prefix = if flags.contains('i') { "(?i)" } else { "" };
        regex::Regex::new(&format!("{prefix}{expression}")).ok()
    }

    fn tokens(text: &str) -> Result<Vec<Token>, ()> {
        let chars: Vec<char> = text.chars().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            match c {
                ' ' | '\t' | '\n' => i += 1,
                '(' => {
                    out.push(Token::Open);
                    i += 1;
                }
                ')' => {
                    out.push(Token::Close);
                    i += 1;
                }
                '$' => {
                    i += 1;
                    let braced = chars.get(i) == Some(&'{');
                    if braced {
                        i += 1;
                    }
                    let start = i;
                    while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                    if start == i {
                        return Err(());
                    }
                    out.push(Token::Variable(chars[start..i].iter().collect()));
                    if braced {
                        if chars.get(i) != Some(&'}') {
                            return Err(());
                        }
                        i += 1;
                    }
                }
                '"' | '\'' => {
                    let start = i + 1;
                    let end = chars[start..].iter().position(|x| *x == c).ok_or(())? + start;
                    out.push(Token::Text(chars[start..end].iter().collect()));
                    i = end + 1;
                }
                '/' => {
                    let mut j = i + 1;
                    while j < chars.len() && chars[j] != '/' {
                        if chars[j] == '\\' {
                            j += 1;
                        }
                        j += 1;
                    }
                    if j >= chars.len() {
                        return Err(());
                    }
                    j += 1;
                    while j < chars.len() && chars[j].is_ascii_alphabetic() {
                        j += 1;
                    }
                    out.push(Token::Pattern(chars[i..j].iter().collect()));
                    i = j;
                }
                _ => {
                    let rest: String = chars[i..].iter().collect();
                    let op = ["==", "!=", "=~", "!~", "&&", "||"]
                        .into_iter()
                        .find(|op| rest.starts_with(op));
                    if let Some(op) = op {
                        out.push(Token::Op(op));
                        i += 2;
                    } else if rest.starts_with("null") {
                        out.push(Token::Null);
                        i += 4;
                    } else {
                        return Err(());
                    }
                }
            }
        }
        Ok(out)
    }

    struct Parser<'a> {
        tokens: Vec<Token>,
        at: usize,
        variables: &'a [(String, String)],
    }

    impl Parser<'_> {
        fn peek(&self) -> Option<&Token> {
            self.tokens.get(self.at)
        }

        fn or(&mut self) -> Result<bool, ()> {
            let mut value = self.and()?;
            while self.peek() == Some(&Token::Op("||")) {
                self.at += 1;
                let right = self.and()?;
                value = value || right;
            }
            Ok(value)
        }

        fn and(&mut self) -> Result<bool, ()> {
            let mut value = self.comparison()?;
            while self.peek() == Some(&Token::Op("&&")) {
                self.at += 1;
                let right = self.comparison()?;
                value = value && right;
            }
            Ok(value)
        }

        fn comparison(&mut self) -> Result<bool, ()> {
            if self.peek() == Some(&Token::Open) {
                self.at += 1;
                let value = self.or()?;
                if self.peek() != Some(&Token::Close) {
                    return Err(());
                }
                self.at += 1;
                return Ok(value);
            }
            let left = self.operand()?;
            let op = match self.peek() {
                Some(Token::Op(op @ ("==" | "!=" | "=~" | "!~"))) => *op,
                _ => {
                    return Ok(match left {
                        Operand::Value(value) => value.is_some_and(|v| !v.is_empty()),
                        Operand::Pattern(_) => true,
                    });
                }
            };
            self.at += 1;
            let right = self.operand()?;
            let text = |operand: &Operand| match operand {
                Operand::Value(value) => value.clone(),
                Operand::Pattern(pattern) => Some(pattern.clone()),
            };
            Ok(match op {
                "==" => text(&left) == text(&right),
                "!=" => text(&left) != text(&right),
                _ => {
                    let pattern = match &right {
                        Operand::Pattern(pattern) => pattern.clone(),
                        Operand::Value(Some(value)) => value.clone(),
                        Operand::Value(None) => return Ok(op == "!~"),
                    };
                    let regex = regex_of(&pattern).ok_or(())?;
                    let matched = text(&left).is_some_and(|value| regex.is_match(&value));
                    if op == "=~" { matched } else { !matched }
                }
            })
        }

        fn operand(&mut self) -> Result<Operand, ()> {
            let token = self.tokens.get(self.at).cloned().ok_or(())?;
            self.at += 1;
            Ok(match token {
                Token::Variable(name) => Operand::Value(
                    self.variables
                        .iter()
                        .rev()
                        .find(|(key, _)| *key == name)
                        .map(|(_, value)| value.clone()),
                ),
                Token::Text(text) => Operand::Value(Some(text)),
                Token::Pattern(pattern) => Operand::Pattern(pattern),
                Token::Null => Operand::Value(None),
                _ => return Err(()),
            })
        }
    }

    /// Evaluates an expression; `Err` for invalid syntax.
    pub fn evaluate(text: &str, variables: &[(String, String)]) -> Result<bool, ()> {
        let mut parser = Parser {
            tokens: tokens(text)?,
            at: 0,
            variables,
        };
        let value = parser.or()?;
        if parser.at != parser.tokens.len() {
            return Err(());
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_as_gitlab_does() {
        assert!(glob_match("docs/**/*.md", "docs/a.md"));
        assert!(glob_match("docs/**/*.md", "docs/x/y/a.md"));
        assert!(!glob_match("*.md", "docs/a.md"));
        assert!(glob_match("**/*.{yml,yaml}", "ci/a.yaml"));
        assert!(glob_match("Dockerfile", "Dockerfile"));
    }
}
