//! A crate's module graph, read from its source: the reader behind
//! `module_graph.rs` here and in the binary crate (`tests/module_graph.rs`).
//!
//! Nodes are the crate's modules, one per file (`gate`, `gate::derive`, …).
//! An edge runs from a module to every module whose items it names through
//! `crate::`, `super::` or `self::` paths, in `use` declarations or inline;
//! a name re-exported by a `pub use` is followed to the module that defines
//! it, so that `crate::gate::Reason` counts as a use of `gate::notes`,
//! not of `gate`. Test code (`#[cfg(test)]` items and the modules they
//! declare) is left out: tests may reach anywhere. A module and its own
//! ancestors are not an edge (a child naming `super::` items and a parent
//! calling into its child is how one module is split into files), so a
//! circle is always between modules that are not nested in each other.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

pub type ModPath = Vec<String>;

pub fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

// ---- lexing -----------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The source with comments, strings and character literals blanked out.
pub fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if ch == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_ident_char(c[i - 1]))
            && raw_string_len(&c[i..]).is_some()
        {
            i += raw_string_len(&c[i..]).unwrap_or(1);
            out.push_str("\"\"");
        } else if ch == 'b' && next == Some('"') && (i == 0 || !is_ident_char(c[i - 1])) {
            i += 1;
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if ch == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

fn raw_string_len(c: &[char]) -> Option<usize> {
    // c[0] == 'r'
    let mut i = 1;
    let mut hashes = 0;
    while c.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    if c.get(i) != Some(&'"') {
        return None;
    }
    i += 1;
    while i < c.len() {
        if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    None
}

fn is_ident_char(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

fn tokens(src: &str) -> Vec<Tok> {
    let c: Vec<char> = strip(src).chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if is_ident_char(ch) {
            let start = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            out.push(Tok::Ident(word.trim_start_matches("r#").to_string()));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

// ---- one file ---------------------------------------------------------------

/// What one file says about the graph.
#[derive(Default)]
pub struct FileFacts {
    /// `mod x;` declared for production code.
    pub children: Vec<String>,
    /// Paths this module's code names (private `use`s and inline paths).
    pub uses: Vec<Vec<String>>,
    /// `pub use` leaves: the name it is known by here, and its path.
    pub reexports: Vec<(String, Vec<String>)>,
}

/// Index just past the item starting at `i` (its `;` or its closing `}`).
fn skip_item(t: &[Tok], mut i: usize) -> usize {
    let is_use = ident(t.get(i)) == Some("use")
        || (ident(t.get(i)) == Some("pub")
            && t[i..].iter().take(6).any(|x| ident(Some(x)) == Some("use")));
    let mut depth = 0i32;
    while i < t.len() {
        match &t[i] {
            Tok::Punct('{') | Tok::Punct('(') | Tok::Punct('[') => depth += 1,
            Tok::Punct('}') | Tok::Punct(')') | Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 && !is_use && t[i] == Tok::Punct('}') {
                    return i + 1;
                }
            }
            Tok::Punct(';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Index just past the attribute `#[...]` starting at `i`, and whether it
/// keeps the item to tests.
fn attribute(t: &[Tok], i: usize) -> (usize, bool) {
    let mut j = i + 1;
    if t.get(j) == Some(&Tok::Punct('!')) {
        j += 1;
    }
    let start = j;
    let mut depth = 0;
    while j < t.len() {
        match t[j] {
            Tok::Punct('[') | Tok::Punct('(') => depth += 1,
            Tok::Punct(']') | Tok::Punct(')') => {
                depth -= 1;
                if depth == 0 {
                    j += 1;
                    break;
                }
            }
            _ => {}
        }
        j += 1;
    }
    let words: Vec<&str> = t[start..j].iter().filter_map(|x| ident(Some(x))).collect();
    let test_only =
        words.first() == Some(&"cfg") && words.contains(&"test") && !words.contains(&"not");
    (j, test_only)
}

/// Parses a use tree starting at `i`; pushes each leaf (its full path and
/// the name it binds) to `out`. Returns the index after the tree.
fn use_tree(
    t: &[Tok],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String)>,
) -> usize {
    let mut path = prefix.to_vec();
    if t.get(i) == Some(&Tok::PathSep) {
        // `::std::…`: an outside crate.
        path.push("::".to_string());
        i += 1;
    }
    loop {
        match t.get(i) {
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
                if t.get(i) == Some(&Tok::PathSep) {
                    i += 1;
                    continue;
                }
                let mut name = s.clone();
                if ident(t.get(i)) == Some("as") {
                    name = ident(t.get(i + 1)).unwrap_or("_").to_string();
                    i += 2;
                }
                if name == "self" {
                    path.pop();
                    name = path.last().cloned().unwrap_or_default();
                }
                out.push((path, name));
                return i;
            }
            Some(Tok::Punct('*')) => {
                out.push((path, "*".to_string()));
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match t.get(i) {
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        None => return i,
                        _ => i = use_tree(t, i, &path, out),
                    }
                }
            }
            _ => return i + 1,
        }
    }
}

/// The inline path (`crate::a::b`, `super::x`, `self::y`) starting at `i`,
/// and the index after it.
fn inline_path(t: &[Tok], i: usize) -> Option<(Vec<String>, usize)> {
    let w = ident(t.get(i)).filter(|w| matches!(*w, "crate" | "super" | "self"))?;
    if t.get(i + 1) != Some(&Tok::PathSep) {
        return None;
    }
    let mut path = vec![w.to_string()];
    let mut j = i + 1;
    while t.get(j) == Some(&Tok::PathSep) {
        match ident(t.get(j + 1)) {
            Some(s) => path.push(s.to_string()),
            None => break,
        }
        j += 2;
    }
    Some((path, j))
}

pub fn read_file(src: &str) -> (FileFacts, Vec<String>) {
    let t = tokens(src);
    let mut facts = FileFacts::default();
    let mut test_children = Vec::new();
    let mut i = 0;
    let mut pending_test = false;
    while i < t.len() {
        if t[i] == Tok::Punct('#')
            && t.get(i + 1)
                .is_some_and(|x| *x == Tok::Punct('[') || *x == Tok::Punct('!'))
        {
            let (j, test_only) = attribute(&t, i);
            pending_test |= test_only;
            if !test_only {
                // Paths an attribute names (`#[arg(add = crate::…)]`) are
                // the item's uses too.
                let mut k = i;
                while k < j {
                    match inline_path(&t[..j], k) {
                        Some((path, next)) => {
                            facts.uses.push(path);
                            k = next;
                        }
                        None => k += 1,
                    }
                }
            }
            i = j;
            continue;
        }
        if pending_test {
            pending_test = false;
            let mut k = i;
            while matches!(ident(t.get(k)), Some("pub")) {
                k += 1;
                if t.get(k) == Some(&Tok::Punct('(')) {
                    while k < t.len() && t[k] != Tok::Punct(')') {
                        k += 1;
                    }
                    k += 1;
                }
            }
            if ident(t.get(k)) == Some("mod")
                && t.get(k + 2) == Some(&Tok::Punct(';'))
                && let Some(name) = ident(t.get(k + 1))
            {
                test_children.push(name.to_string());
            }
            i = skip_item(&t, i);
            continue;
        }
        match ident(t.get(i)) {
            Some("mod") if t.get(i + 2) == Some(&Tok::Punct(';')) => {
                if let Some(name) = ident(t.get(i + 1)) {
                    facts.children.push(name.to_string());
                }
                i += 3;
            }
            Some("use") if t.get(i + 1) != Some(&Tok::Punct('<')) => {
                // Public if `pub` or `pub(…)` stands right before it.
                let public = i >= 1
                    && (ident(t.get(i - 1)) == Some("pub")
                        || (t[i - 1] == Tok::Punct(')')
                            && t[..i]
                                .iter()
                                .rev()
                                .take(6)
                                .any(|x| ident(Some(x)) == Some("pub"))));
                let mut leaves = Vec::new();
                let j = use_tree(&t, i + 1, &[], &mut leaves);
                for (path, name) in leaves {
                    if public && name != "*" {
                        facts.reexports.push((name, path));
                    } else {
                        facts.uses.push(path);
                    }
                }
                i = j;
            }
            _ => match inline_path(&t, i) {
                Some((path, j)) => {
                    facts.uses.push(path);
                    i = j;
                }
                None => i += 1,
            },
        }
    }
    (facts, test_children)
}

// ---- the crate ------------------------------------------------------------

pub struct Crate {
    pub modules: BTreeMap<ModPath, FileFacts>,
}

/// The package under test (the one whose test includes this module), read
/// when the test runs (cargo and tests/lanes.py set it): the build cache is
/// shared between clones, so the compile-time path may name another clone.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn load(src_dir: &Path) -> Crate {
    let mut modules = BTreeMap::new();
    // (module, its file, the directory its children live in)
    let mut todo = vec![(
        Vec::<String>::new(),
        src_dir.join("lib.rs"),
        src_dir.to_path_buf(),
    )];
    while let Some((m, file, dir)) = todo.pop() {
        let src = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (facts, _tests) = read_file(&src);
        for child in &facts.children {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(child).join("mod.rs");
            let (cfile, cdir): (PathBuf, PathBuf) = if flat.exists() {
                (flat, dir.join(child))
            } else if nested.exists() {
                (nested, dir.join(child))
            } else {
                panic!("{}: mod {child}: no file", file.display());
            };
            let mut cm = m.clone();
            cm.push(child.clone());
            todo.push((cm, cfile, cdir));
        }
        modules.insert(m, facts);
    }
    Crate { modules }
}

impl Crate {
    /// The module whose item `path`, named from `from`, is: the longest
    /// module prefix, following `pub use`s. `None` for outside crates.
    fn resolve(
        &self,
        from: &[String],
        path: &[String],
        seen: &mut BTreeSet<(ModPath, String)>,
    ) -> Option<ModPath> {
        let mut segs = path.iter();
        let mut cur: ModPath = match segs.next().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("self") => from.to_vec(),
            Some("super") => from[..from.len().saturating_sub(1)].to_vec(),
            Some(first) => {
                let mut child = from.to_vec();
                child.push(first.to_string());
                if self.modules.contains_key(&child) {
                    child
                } else {
                    return None;
                }
            }
            None => return None,
        };
        let mut rest: Vec<&String> = segs.collect();
        while rest.first().is_some_and(|s| *s == "super") {
            cur.pop();
            rest.remove(0);
        }
        for s in rest {
            let mut next = cur.clone();
            next.push(s.clone());
            if self.modules.contains_key(&next) {
                cur = next;
                continue;
            }
            let facts = &self.modules[&cur];
            if let Some((_, target)) = facts.reexports.iter().find(|(n, _)| n == s) {
                if !seen.insert((cur.clone(), s.clone())) {
                    return Some(cur);
                }
                return self.resolve(&cur, target, seen).or(Some(cur));
            }
            return Some(cur);
        }
        Some(cur)
    }

    pub fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (m, facts) in &self.modules {
            let set = out.entry(m.clone()).or_default();
            for p in &facts.uses {
                let Some(target) = self.resolve(m, p, &mut BTreeSet::new()) else {
                    continue;
                };
                let nested = target.starts_with(m) || m.starts_with(&target);
                if !nested {
                    set.insert(target);
                }
            }
        }
        out
    }
}

/// Strongly connected components with more than one module (Tarjan).
pub fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct T<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        next: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let edges = t.edges;
        for w in edges.get(v).into_iter().flatten() {
            let Some((w, _)) = edges.get_key_value(w) else {
                continue;
            };
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out.sort_by_key(|c| std::cmp::Reverse(c.len()));
    t.out
}

pub fn path(s: &str) -> ModPath {
    s.split("::").map(str::to_string).collect()
}
