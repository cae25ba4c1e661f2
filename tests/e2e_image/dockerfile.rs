//! A small Dockerfile reader: enough of the syntax the project's Dockerfile
//! uses (comments, line continuations, ARG, FROM, LABEL, USER, ENTRYPOINT,
//! CMD, COPY, RUN) to say what image it describes.

use std::collections::BTreeMap;

/// One instruction: its keyword (upper case) and the rest of its line(s).
#[derive(Debug, Clone)]
pub struct Instruction {
    pub keyword: String,
    pub args: String,
}

/// The instructions of a Dockerfile: comment lines dropped, continued lines
/// joined.
pub fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, args) = current
                    .split_once(char::is_whitespace)
                    .unwrap_or((&current, ""));
                out.push(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    args: args.trim().to_string(),
                });
                current.clear();
            }
        }
    }
    out
}

/// The instructions of the last stage (after the last FROM).
pub fn final_stage(all: &[Instruction]) -> &[Instruction] {
    let from = all
        .iter()
        .rposition(|i| i.keyword == "FROM")
        .expect("a FROM");
    &all[from + 1..]
}

/// The stage named `name` (`FROM … AS name`) up to the next FROM.
pub fn stage<'a>(all: &'a [Instruction], name: &str) -> &'a [Instruction] {
    let start = all
        .iter()
        .position(|i| {
            i.keyword == "FROM"
                && i.args
                    .to_ascii_lowercase()
                    .ends_with(&format!(" as {name}"))
        })
        .unwrap_or_else(|| panic!("no stage {name}"));
    let end = all[start + 1..]
        .iter()
        .position(|i| i.keyword == "FROM")
        .map_or(all.len(), |n| start + 1 + n);
    &all[start + 1..end]
}

/// The one instruction `keyword` of a stage, if there is exactly one.
pub fn only<'a>(stage: &'a [Instruction], keyword: &str) -> &'a str {
    let found: Vec<_> = stage.iter().filter(|i| i.keyword == keyword).collect();
    assert_eq!(found.len(), 1, "one {keyword} in the stage: {found:?}");
    &found[0].args
}

/// `ARG NAME=default` of a stage.
pub fn arg_defaults(stage: &[Instruction]) -> BTreeMap<String, String> {
    stage
        .iter()
        .filter(|i| i.keyword == "ARG")
        .filter_map(|i| i.args.split_once('='))
        .map(|(k, v)| (k.to_string(), unquote(v).to_string()))
        .collect()
}

fn unquote(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
}

/// The `key="value"` pairs of a stage's LABEL instructions.
pub fn labels(stage: &[Instruction]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for i in stage.iter().filter(|i| i.keyword == "LABEL") {
        let mut rest = i.args.as_str();
        while let Some((key, after)) = rest.trim_start().split_once('=') {
            let (value, tail) = match after.strip_prefix('"') {
                Some(quoted) => quoted.split_once('"').expect("a closing quote in LABEL"),
                None => after.split_once(' ').unwrap_or((after, "")),
            };
            out.insert(key.trim().to_string(), value.to_string());
            rest = tail;
        }
    }
    out
}

/// `${NAME}` in a value, when the whole value is one build argument.
pub fn build_arg(value: &str) -> Option<&str> {
    value.strip_prefix("${").and_then(|v| v.strip_suffix('}'))
}
