//! Kubernetes label selectors as configuration uses them (the
//! `metav1.LabelSelector` shape and its kubectl string form), and the label
//! key and value rules placement also uses, as upstream apimachinery has them.
//! Every mistake comes back as a `SelectorError` naming the part that is wrong.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::vocab::model::{Labels, Shared};

/// A requirement's operators, as upstream spells them (node affinity's too).
pub const OP_IN: &str = "In";
pub const OP_NOT_IN: &str = "NotIn";
pub const OP_EXISTS: &str = "Exists";
pub const OP_DOES_NOT_EXIST: &str = "DoesNotExist";

const LABEL_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;
const DNS_SUBDOMAIN_MAX: usize = 253;

/// A `metav1.LabelSelector`. All of `match_labels` and all of
/// `match_expressions` must hold; an empty selector matches every object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry. The operator is kept as written so that a
/// wrong one can be reported by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// What is wrong with a selector, said so a person can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The string form could not be read, or names an invalid key or value.
    #[error("label selector {input:?}: {problem}")]
    Parse { input: String, problem: String },
    /// A structured selector (from YAML) breaks a rule; `at` names the entry,
    /// e.g. `matchExpressions[1] (key "tier")`.
    #[error("label selector: {at}: {problem}")]
    Invalid { at: String, problem: String },
}

impl LabelSelectorRequirement {
    pub fn new(
        key: impl Into<String>,
        operator: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether `labels` satisfy this requirement. A requirement that
    /// `validate` would reject matches nothing.
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(self.key.as_str());
        self.problem().is_none() && set_op_holds(&self.operator, value, &self.values) == Some(true)
    }

    /// The first rule this requirement breaks, if any.
    fn problem(&self) -> Option<String> {
        let op = self.operator.as_str();
        if let Err(problem) = check_label_key(&self.key) {
            return Some(problem);
        }
        if !SET_OPS.contains(&op) {
            return Some(format!(
                "operator {op:?} is not one of In, NotIn, Exists, DoesNotExist"
            ));
        }
        values_problem(op, &self.values)
    }
}

/// The operators of a label selector, which node affinity takes too.
pub(crate) const SET_OPS: [&str; 4] = [OP_IN, OP_NOT_IN, OP_EXISTS, OP_DOES_NOT_EXIST];

/// What is wrong with `values` under `op`, if anything.
pub(crate) fn values_problem(op: &str, values: &[String]) -> Option<String> {
    match op {
        OP_IN | OP_NOT_IN if values.is_empty() => {
            Some(format!("{op} needs at least one value, got none"))
        }
        OP_EXISTS | OP_DOES_NOT_EXIST if !values.is_empty() => {
            Some(format!("{op} takes no values, got {values:?}"))
        }
        _ => values.iter().find_map(|v| check_label_value(v).err()),
    }
}

/// Whether a label's `value` (`None`: absent) meets `op` over `values`, as
/// apimachinery's `labels.Requirement` and node affinity both read In,
/// NotIn, Exists and DoesNotExist; `None` for any other operator.
pub(crate) fn set_op_holds(op: &str, value: Option<&Shared>, values: &[String]) -> Option<bool> {
    let listed = |v: &Shared| values.iter().any(|x| *x == **v);
    Some(match op {
        OP_IN => value.is_some_and(listed),
        OP_NOT_IN => value.is_none_or(|v| !listed(v)),
        OP_EXISTS => value.is_some(),
        OP_DOES_NOT_EXIST => value.is_none(),
        _ => return None,
    })
}

impl LabelSelector {
    /// A selector that matches every object.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// True when the selector has no constraints (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` satisfy every constraint. A selector `validate` rejects
    /// (configuration loading refuses it) matches nothing: this errs that way.
    pub fn matches(&self, labels: &Labels) -> bool {
        if self.validate().is_err() {
            return false;
        }
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k.as_str()).is_some_and(|l| *l == *v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// Checks every key, value and operator against the Kubernetes rules.
    pub fn validate(&self) -> Result<(), SelectorError> {
        for (key, value) in &self.match_labels {
            let problem = check_label_key(key)
                .err()
                .or_else(|| check_label_value(value).err());
            if let Some(problem) = problem {
                return Err(SelectorError::Invalid {
                    at: format!("matchLabels[{key:?}]"),
                    problem,
                });
            }
        }
        for (i, req) in self.match_expressions.iter().enumerate() {
            if let Some(problem) = req.problem() {
                return Err(SelectorError::Invalid {
                    at: format!("matchExpressions[{i}] (key {:?})", req.key),
                    problem,
                });
            }
        }
        Ok(())
    }

    /// Reads the kubectl form: comma-separated requirements, each one of
    /// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k` or `!k`. As
    /// upstream, `k in ()` means the one empty value, and an empty string is
    /// the empty selector.
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        Parser::parse(s).map_err(|problem| SelectorError::Parse {
            input: s.to_string(),
            problem,
        })
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

/// The kubectl form; `parse` reads back exactly what this writes for any
/// valid selector.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let labels = self.match_labels.iter().map(|(k, v)| format!("{k}={v}"));
        let expressions = self.match_expressions.iter().map(ToString::to_string);
        f.write_str(&labels.chain(expressions).collect::<Vec<_>>().join(","))
    }
}

impl fmt::Display for LabelSelectorRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator.as_str() {
            OP_EXISTS => write!(f, "{}", self.key),
            OP_DOES_NOT_EXIST => write!(f, "!{}", self.key),
            OP_IN => write!(f, "{} in ({})", self.key, self.values.join(",")),
            OP_NOT_IN => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            other => write!(f, "{} {other} ({})", self.key, self.values.join(",")),
        }
    }
}

/// What a label name and a label value must consist of.
const TOKEN_RULE: &str =
    "letters, digits, '-', '_' or '.', and start and end with a letter or digit";

/// Checks a label key (a "qualified name": an optional DNS-subdomain prefix
/// and a `/`, then a name); the error says which part is wrong.
pub fn check_label_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("key must not be empty".to_string());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let problem = if name.contains('/') {
        "a key has at most one \"/\"".to_string()
    } else if prefix == Some("") {
        "the prefix before \"/\" must not be empty".to_string()
    } else if let Some(prefix) = prefix.filter(|p| p.len() > DNS_SUBDOMAIN_MAX) {
        format!("the prefix {}", at_most(DNS_SUBDOMAIN_MAX, prefix.len()))
    } else if let Some(prefix) = prefix.filter(|p| !is_dns_subdomain(p)) {
        format!(
            "the prefix {prefix:?} must be a DNS subdomain (lowercase letters, digits, '-' \
             and '.', each part starting and ending with a letter or digit)"
        )
    } else if name.is_empty() {
        "the name after \"/\" must not be empty".to_string()
    } else if name.len() > LABEL_NAME_MAX {
        format!("the name part {}", at_most(LABEL_NAME_MAX, name.len()))
    } else if !is_label_token(name) {
        format!("the name part must consist of {TOKEN_RULE}")
    } else {
        return Ok(());
    };
    Err(format!("invalid key {key:?}: {problem}"))
}

/// Checks a label value: empty, or a name part's characters, at most 63.
pub fn check_label_value(value: &str) -> Result<(), String> {
    let problem = if value.len() > LABEL_VALUE_MAX {
        at_most(LABEL_VALUE_MAX, value.len())
    } else if !value.is_empty() && !is_label_token(value) {
        format!("must consist of {TOKEN_RULE}")
    } else {
        return Ok(());
    };
    Err(format!("invalid value {value:?}: a label value {problem}"))
}

fn at_most(max: usize, len: usize) -> String {
    format!("must be at most {max} characters, got {len}")
}

fn is_label_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// RFC 1123 subdomain as upstream checks it: dot-separated lowercase labels,
/// each starting and ending with a letter or digit (upstream checks only the
/// total length, not each label's).
fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(is_lower_token)
}

/// A DNS-1123 label without its length limit.
pub(crate) fn is_lower_token(s: &str) -> bool {
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = s.as_bytes();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

mod parse;
use parse::Parser;
