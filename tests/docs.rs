//! Cheap checks that the documentation keeps up with the binary: every long
//! flag `nodegate run --help` lists is documented (docs/configuration.md, or
//! docs/operations.md for the operational ones) and is a value of the Helm
//! chart (deploy/helm/nodegate/values.yaml names each flag next to its value),
//! and every document the README links to exists. No cluster needed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

/// The long flags of `nodegate SUBCOMMAND --help`, without --help/--version.
fn long_flags(subcommand: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args([subcommand, "--help"])
        .output()
        .expect("run nodegate --help");
    assert!(out.status.success(), "nodegate {subcommand} --help failed");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| {
            // Option lines start (after at most six spaces and an optional
            // short flag) with the long flag; wrapped descriptions are
            // indented further and may begin with a flag they mention.
            let indent = l.len() - l.trim_start().len();
            if indent > 6 {
                return None;
            }
            let l = l.trim_start();
            let l = l
                .strip_prefix('-')
                .filter(|rest| !rest.starts_with('-'))
                .and_then(|rest| rest.split_once(", "))
                .map_or(l, |(_, long)| long);
            let flag = l.strip_prefix("--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then(|| format!("--{name}"))
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// `--timeout` mentioned as a flag, not as the prefix of a longer one
/// (`--timeout` must not be satisfied by `--timeout-foo`).
fn mentions(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(i, _)| {
        !text[i + flag.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn run_flags_are_parsed_from_help() {
    let flags = long_flags("run");
    for expected in ["--taint", "--timeout", "--on-timeout", "--dry-run"] {
        assert!(
            flags.contains(expected),
            "{expected} missing from {flags:?}"
        );
    }
}

#[test]
fn every_run_flag_is_documented() {
    let docs = ["docs/configuration.md", "docs/operations.md"]
        .iter()
        .filter(|p| root().join(p).exists())
        .map(|p| read(p))
        .collect::<Vec<_>>()
        .join("\n");
    let missing: Vec<_> = long_flags("run")
        .into_iter()
        .filter(|f| !mentions(&docs, f))
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `nodegate run` documented in neither docs/configuration.md nor docs/operations.md: {missing:?}"
    );
}

#[test]
fn every_run_flag_is_a_helm_value() {
    let values = read("deploy/helm/nodegate/values.yaml");
    let missing: Vec<_> = long_flags("run")
        .into_iter()
        .filter(|f| !mentions(&values, f))
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `nodegate run` with no value in deploy/helm/nodegate/values.yaml: {missing:?}"
    );
}

#[test]
fn readme_links_to_documents_that_exist() {
    let readme = read("README.md");
    let mut broken = Vec::new();
    for (i, _) in readme.match_indices("](") {
        let target: String = readme[i + 2..].chars().take_while(|c| *c != ')').collect();
        let path = target.split('#').next().unwrap_or_default();
        if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
            continue;
        }
        if !root().join(path).exists() {
            broken.push(target);
        }
    }
    assert!(
        broken.is_empty(),
        "README.md links to missing files: {broken:?}"
    );
}
