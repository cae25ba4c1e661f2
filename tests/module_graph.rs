//! The binary crate's module graph, read from its source by the core's
//! reader (`actors/core/tests/graph`: a module per file, an edge per item
//! named through `crate::`, `super::` or `self::`, in attributes too, test
//! code left out): the small circles issue 35 names are cut, and no new one
//! appears.

#[path = "../actors/core/tests/graph/mod.rs"]
mod graph;

use graph::{ModPath, circles, load, path, show};
use std::collections::{BTreeMap, BTreeSet};

/// The circle left, as its modules: the settings table's macro (its text
/// in `define`, expanded in `table`, naming both, and `cli`'s types shown
/// and parsed by both). A circle not listed here fails: the leader's
/// `known` and `leadership` share `seen`, a leaf, and the writer lists a
/// node's pods itself (`writer::pods_on`) while `entrance` keeps only
/// backfill's taint.
const KNOWN: &[&[&str]] = &[&["settings::cli", "settings::define", "settings::table"]];

fn edges() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    load(&graph::manifest_dir().join("src")).edges()
}

fn described(c: &[ModPath]) -> String {
    c.iter().map(|m| show(m)).collect::<Vec<_>>().join(", ")
}

#[test]
fn no_import_circles_but_the_known_ones() {
    let edges = edges();
    // A reader that lost its way would find no edges and so no circles.
    let completion = edges
        .get(&path("commands::completion"))
        .expect("commands::completion is read");
    assert!(
        completion.contains(&path("settings::cli")),
        "the reader misses commands::completion -> settings::cli"
    );
    let known: Vec<BTreeSet<ModPath>> = KNOWN
        .iter()
        .map(|c| c.iter().map(|m| path(m)).collect())
        .collect();
    let new: Vec<String> = circles(&edges)
        .into_iter()
        .filter(|c| !known.contains(&c.iter().cloned().collect()))
        .map(|c| format!("  {}", described(&c)))
        .collect();
    assert!(
        new.is_empty(),
        "import circles in nodegate:\n{}",
        new.join("\n")
    );
}

#[test]
fn the_config_error_is_a_leaf_and_the_cli_imports_no_command() {
    let edges = edges();
    let error = &edges[&path("settings::config::error")];
    assert!(
        error.is_empty(),
        "settings::config::error imports {:?}",
        error.iter().map(|m| show(m)).collect::<Vec<_>>()
    );
    // The trace exporter's configuration reaches ConfigError through the
    // re-export, so the edge is to the leaf.
    assert!(edges[&path("trace::config")].contains(&path("settings::config::error")));
    let cli_commands: Vec<String> = edges[&path("settings::cli")]
        .iter()
        .filter(|m| m.starts_with(&path("commands")))
        .map(|m| show(m))
        .collect();
    assert!(
        cli_commands.is_empty(),
        "settings::cli imports commands (main attaches completion candidates): {cli_commands:?}"
    );
}
