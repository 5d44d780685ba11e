//! Label and field selectors as the API server parses them (`app=web,tier!=db`, `env in (a,b)`,
//! `!legacy`, `metadata.name=x`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once("==") {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once('=') {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, values)) = part.split_once(" notin ") {
                let values = set_values(values)
                    .ok_or_else(|| format!("unable to parse requirement: {part}"))?;
                Requirement::NotIn(key.trim().into(), values)
            } else if let Some((key, values)) = part.split_once(" in ") {
                let values = set_values(values)
                    .ok_or_else(|| format!("unable to parse requirement: {part}"))?;
                Requirement::In(key.trim().into(), values)
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(part.clone())
            } else {
                return Err(format!("unable to parse requirement: {part}"));
            };
            requirements.push(requirement);
        }
        Ok(LabelSelector { requirements })
    }

    /// A selector from a `matchLabels` / `selector` map.
    pub fn from_map(labels: &Value) -> LabelSelector {
        let requirements = labels
            .as_object()
            .map(|map| {
                map.iter()
                    .map(|(k, v)| Requirement::Equals(k.clone(), v.as_str().unwrap_or("").into()))
                    .collect()
            })
            .unwrap_or_default();
        LabelSelector { requirements }
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &Value) -> bool {
        let get = |key: &str| labels.get(key).and_then(Value::as_str);
        self.requirements
            .iter()
            .all(|requirement| match requirement {
                Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
                Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
                Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
                Requirement::NotIn(k, vs) => !get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
                Requirement::Exists(k) => get(k).is_some(),
                Requirement::NotExists(k) => get(k).is_none(),
            })
    }
}

/// A parsed field selector (`metadata.name=x,status.phase!=Failed`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    requirements: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub fn parse(text: &str) -> Result<FieldSelector, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let (path, equal, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector: '{part}'"));
            };
            requirements.push((path.trim().to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector { requirements })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|(path, equal, value)| {
            let mut current = object;
            for part in path.split('.') {
                current = &current[part];
            }
            let actual = match current {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_cover_every_operator() {
        let labels = json!({"app": "web", "tier": "front"});
        let matches = |text: &str| LabelSelector::parse(text).expect(text).matches(&labels);
        assert!(matches("app=web"));
        assert!(matches("app==web,tier!=db"));
        assert!(matches("tier in (front, back)"));
        assert!(!matches("tier notin (front)"));
        assert!(matches("app,!legacy"));
        assert!(!matches("app=db"));
        assert!(matches(""));
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selectors_walk_paths() {
        let pod = json!({"metadata": {"name": "p1"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("metadata.name=p1")
                .expect("valid")
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse("status.phase!=Failed")
                .expect("valid")
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("metadata.name=p2")
                .expect("valid")
                .matches(&pod)
        );
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
