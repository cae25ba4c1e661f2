//! The core's module graph, read from its source (as `graph` reads it: a
//! module per file, an edge per item named through `crate::`, `super::` or
//! `self::`, test code left out, `testutil` with it): no import circles,
//! and a floor (the vocabulary and the rules it is written in) that imports
//! nothing above it.

mod graph;

use graph::{Crate, ModPath, circles, load, path, read_file, show};
use std::collections::BTreeSet;

/// The vocabulary every feature shares: the node's model with its marks,
/// the annotation keys, a budget, the configuration with every feature's
/// settings, and members.
const FLOOR: &[&str] = &["vocab"];

/// The rules the vocabulary is written in: placement, selectors and
/// readiness as upstream has them, and the settings of startup taints, node
/// conditions and devices with their checks. With the floor they import
/// nothing above them: no controller, no gate.
const RULES: &[&str] = &["rules"];

/// The plain words at the very bottom: they import nothing but each other.
const WORDS: &[&str] = &[
    "vocab::annotations",
    "vocab::backoff",
    "vocab::budget",
    "vocab::model",
    "vocab::vec_map",
    "vocab::words",
    "vocab::write",
];

fn core() -> Crate {
    load(&graph::manifest_dir().join("src"))
}

#[test]
fn the_core_has_no_import_circles() {
    let edges = core().edges();
    // A reader that lost its way would find no edges and so no circles.
    let replace = edges
        .get(&path("closing::replacing::decider"))
        .expect("closing::replacing::decider is read");
    assert!(
        replace.contains(&path("deciders")),
        "the reader misses closing::replacing::decider -> deciders"
    );
    let found = circles(&edges);
    let described: Vec<String> = found
        .iter()
        .map(|c| {
            let members: BTreeSet<&ModPath> = c.iter().collect();
            let inner: Vec<String> = c
                .iter()
                .map(|m| {
                    let to: Vec<String> = edges[m]
                        .iter()
                        .filter(|t| members.contains(t))
                        .map(|t| show(t))
                        .collect();
                    format!("    {} -> {}", show(m), to.join(", "))
                })
                .collect();
            format!("  a circle of {} modules:\n{}", c.len(), inner.join("\n"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "{} import circle(s) in nodegate-core (sizes {:?}):\n{}",
        found.len(),
        found.iter().map(Vec::len).collect::<Vec<_>>(),
        described.join("\n")
    );
}

/// The edges from modules under `from` to modules not under `allowed`, each
/// set given as module paths (`vocab`, `vocab::model`).
fn leaving(from: &[&str], allowed: &[&str]) -> Vec<String> {
    let krate = core();
    let under = |set: &[&str], m: &ModPath| set.iter().any(|s| m.starts_with(&path(s)));
    let missing: Vec<&&str> = from
        .iter()
        .chain(allowed)
        .filter(|f| !krate.modules.contains_key(&path(f)))
        .collect();
    assert!(missing.is_empty(), "no such modules: {missing:?}");
    krate
        .edges()
        .iter()
        .filter(|(m, _)| under(from, m))
        .flat_map(|(m, ts)| {
            ts.iter()
                .filter(|t| !under(allowed, t))
                .map(move |t| format!("{} -> {}", show(m), show(t)))
        })
        .collect()
}

#[test]
fn the_floor_imports_nothing_above_it() {
    let ground: Vec<&str> = FLOOR.iter().chain(RULES).copied().collect();
    let upward = leaving(&ground, &ground);
    assert!(
        upward.is_empty(),
        "the floor imports from above it:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_plain_words_import_nothing_else() {
    let upward = leaving(WORDS, WORDS);
    assert!(
        upward.is_empty(),
        "the plain words import:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_reader_sees_through_re_exports_and_skips_tests() {
    let (facts, tests) = read_file(
        "pub use inner::{Thing as Other, self};\nuse crate::a::{b::C, d};\n\
         // use crate::nope;\nconst S: &str = \"crate::nope\";\n\
         #[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline { use crate::nope; }\n\
         fn f() { super::x::y(); let c = 'a'; }\nmod inner;\n\
         #[arg(add = crate::attr::f)]\nstruct A;\n",
    );
    assert_eq!(tests, vec!["tests".to_string()]);
    assert_eq!(facts.children, vec!["inner".to_string()]);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        facts.reexports,
        vec![
            ("Other".to_string(), s(&["inner", "Thing"])),
            ("inner".to_string(), s(&["inner"]))
        ]
    );
    assert_eq!(
        facts.uses,
        vec![
            s(&["crate", "a", "b", "C"]),
            s(&["crate", "a", "d"]),
            s(&["super", "x", "y"]),
            s(&["crate", "attr", "f"])
        ]
    );
}
