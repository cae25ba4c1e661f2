//! The kubectl string form of a label selector (`tier=infra,zone in (a,b),!spot`):
//! a lexer and a recursive-descent parser.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A key, a value, or the words `in` / `notin` (which are operators only
    /// where an operator may stand, as upstream).
    Word(String),
    /// One of [`PUNCTUATION`].
    Punct(&'static str),
    End,
}

/// The punctuation, each two-character mark before the mark it starts with.
const PUNCTUATION: [&str; 9] = ["!=", "!", "==", "=", ">", "<", "(", ")", ","];

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Word(w) => format!("{w:?}"),
            Token::Punct(p) => format!("{p:?}"),
            Token::End => "the end".into(),
        }
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn lex(s: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut rest = s.trim_start_matches(is_space);
    while !rest.is_empty() {
        let (token, len) = match PUNCTUATION.into_iter().find(|p| rest.starts_with(p)) {
            Some(p) => (Token::Punct(p), p.len()),
            // A word runs to the next space or punctuation.
            None => {
                let len = rest
                    .find(|n| is_space(n) || "=!(),<>".contains(n))
                    .unwrap_or(rest.len());
                (Token::Word(rest[..len].to_string()), len)
            }
        };
        tokens.push(token);
        rest = rest[len..].trim_start_matches(is_space);
    }
    tokens.push(Token::End);
    tokens
}

enum Parsed {
    Equals(String, String),
    Set(String, &'static str, Vec<String>),
}

pub(super) struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        self.tokens.get(self.pos).unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    pub(super) fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut p = Parser {
            tokens: lex(s),
            pos: 0,
        };
        let mut selector = LabelSelector::default();
        if *p.peek() == Token::End {
            return Ok(selector);
        }
        loop {
            let expr = match p.requirement()? {
                Parsed::Equals(key, value) => match selector.match_labels.get(&key) {
                    None => {
                        selector.match_labels.insert(key, value);
                        None
                    }
                    Some(existing) if *existing == value => None,
                    // `a=x,a=y` must keep both constraints (and so match nothing),
                    // which a map cannot hold.
                    Some(_) => Some(LabelSelectorRequirement::new(key, OP_IN, [value])),
                },
                Parsed::Set(key, op, values) => {
                    Some(LabelSelectorRequirement::new(key, op, values))
                }
            };
            selector.match_expressions.extend(expr);
            match p.next() {
                Token::End => return Ok(selector),
                Token::Punct(",") => {
                    if *p.peek() == Token::End {
                        return Err("expected a requirement after the last \",\"".to_string());
                    }
                }
                other => {
                    return Err(format!(
                        "expected \",\" or the end after a requirement, found {}",
                        other.describe()
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Parsed, String> {
        let negated = *self.peek() == Token::Punct("!");
        if negated {
            self.next();
        }
        let key = match self.next() {
            Token::Word(w) => w,
            other => {
                let after = if negated { " after \"!\"" } else { "" };
                let found = other.describe();
                return Err(format!("expected a label key{after}, found {found}"));
            }
        };
        check_label_key(&key)?;
        if negated {
            return match self.peek() {
                Token::Punct(",") | Token::End => {
                    Ok(Parsed::Set(key, OP_DOES_NOT_EXIST, Vec::new()))
                }
                other => Err(format!(
                    "\"!{key}\" means the label is absent and takes no operator or value, found {}",
                    other.describe()
                )),
            };
        }
        if matches!(self.peek(), Token::Punct(",") | Token::End) {
            return Ok(Parsed::Set(key, OP_EXISTS, Vec::new()));
        }
        match self.next() {
            Token::Punct("=" | "==") => {
                let value = self.exact_value(&key, "=")?;
                Ok(Parsed::Equals(key, value))
            }
            Token::Punct("!=") => {
                let value = self.exact_value(&key, "!=")?;
                Ok(Parsed::Set(key, OP_NOT_IN, vec![value]))
            }
            Token::Word(w) if w == "in" || w == "notin" => {
                let op = if w == "in" { OP_IN } else { OP_NOT_IN };
                let values = self.values(&key, &w)?;
                Ok(Parsed::Set(key, op, values))
            }
            Token::Punct(">" | "<") => Err(format!(
                "\"{key}\": > and < (Gt, Lt) are not supported in a label selector; \
                 use =, ==, !=, in, notin, a bare key or !key"
            )),
            other => Err(format!(
                "expected an operator (=, ==, !=, in, notin), \",\" or the end after \"{key}\", found {}",
                other.describe()
            )),
        }
    }

    fn exact_value(&mut self, key: &str, op: &str) -> Result<String, String> {
        let value = match self.peek() {
            // `k=` is the empty value, as upstream.
            Token::Punct(",") | Token::End => String::new(),
            Token::Word(w) => {
                let w = w.clone();
                self.next();
                w
            }
            other => {
                return Err(format!(
                    "expected a value after \"{key}{op}\", found {}",
                    other.describe()
                ));
            }
        };
        check_label_value(&value).map_err(|p| format!("{p} (the value of {key:?})"))?;
        Ok(value)
    }

    fn values(&mut self, key: &str, op: &str) -> Result<Vec<String>, String> {
        let open = self.next();
        if open != Token::Punct("(") {
            let found = open.describe();
            return Err(format!(
                "expected \"(\" after \"{key} {op}\", found {found}"
            ));
        }
        // Upstream reads `()` as the single empty value and lets empty items
        // stand between commas (`(a,,b)`, `(,a)`, `(a,)`); so do we. `item`
        // is the value since "(" or the last ",".
        let (mut values, mut item) = (Vec::<String>::new(), None);
        loop {
            match (self.next(), item.is_some()) {
                (Token::Word(w), false) => item = Some(w),
                (end @ Token::Punct("," | ")"), _) => {
                    let v = item.take().unwrap_or_default();
                    if !values.contains(&v) {
                        values.push(v);
                    }
                    if end == Token::Punct(")") {
                        break;
                    }
                }
                (Token::End, _) => {
                    return Err(format!("missing \")\" after the values of {key:?}"));
                }
                (other, has_item) => {
                    let expected = match has_item {
                        false => "a value, \",\" or \")\" in",
                        true => "\",\" or \")\" between",
                    };
                    let found = other.describe();
                    return Err(format!(
                        "expected {expected} the values of {key:?}, found {found}"
                    ));
                }
            }
        }
        for v in &values {
            check_label_value(v).map_err(|p| format!("{p} (a value of {key:?})"))?;
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests;
