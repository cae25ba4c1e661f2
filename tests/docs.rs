//! Cheap checks that the documentation keeps up with the binary: every long
//! flag `nodegate run --help` lists is documented (docs/configuration.md, or
//! docs/operations.md for the operational ones) and is a value of the Helm
//! chart (deploy/helm/nodegate/values.yaml names each flag next to its value),
//! and every document the README links to exists, and every citation of a
//! numbered section (or subsection) of docs/semantics.md names a section
//! that is there. From the settings table (src/settings/table.rs), the one
//! definition of each setting: every flag has its row (flag, config key,
//! default) in the docs, its Helm value, and its key in its class's row of
//! the reload table. No cluster needed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// This clone, read when the test runs (the build cache is shared between
/// clones, so the compile-time path may be another one).
fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
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

/// kubectl's connection flags, which `run` takes like every other command
/// (in a pod the service account is used: no Helm value).
const KUBECTL_FLAGS: [&str; 3] = ["--kubeconfig", "--context", "--request-timeout"];

#[test]
fn every_run_flag_is_a_helm_value() {
    let values = read("deploy/helm/nodegate/values.yaml");
    let missing: Vec<_> = long_flags("run")
        .into_iter()
        .filter(|f| !KUBECTL_FLAGS.contains(&f.as_str()))
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

/// The numbers of the `## N. Title` and `### N.M Title` headings of
/// docs/semantics.md: `"5"`, `"5.3"`.
fn semantics_sections() -> BTreeSet<String> {
    read("docs/semantics.md")
        .lines()
        .filter_map(|l| {
            if let Some(rest) = l.strip_prefix("## ") {
                let (number, _) = rest.split_once(". ")?;
                number.parse::<u32>().ok().map(|n| n.to_string())
            } else {
                let (number, _) = l.strip_prefix("### ")?.split_once(' ')?;
                let (major, minor) = number.split_once('.')?;
                let (major, minor) = (major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?);
                Some(format!("{major}.{minor}"))
            }
        })
        .collect()
}

/// A section number: a section (`5`) or a subsection (`5.3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Section(u32, Option<u32>);

impl std::fmt::Display for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(minor) => write!(f, "{}.{minor}", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Reads digits at the start of `s`; returns them and the rest.
fn digits(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// Reads a section number (`5`, or `5.3` — a dot followed by a digit; a dot
/// that ends a sentence is not part of it) at the start of `s` (after
/// spaces); returns it and the rest.
fn leading_number(s: &str) -> Option<(Section, &str)> {
    let (major, rest) = digits(s.trim_start())?;
    match rest.strip_prefix('.').and_then(digits) {
        Some((minor, rest)) => Some((Section(major, Some(minor)), rest)),
        None => Some((Section(major, None), rest)),
    }
}

/// The sections a citation names, given the text right after a mention of
/// semantics.md: `§N` or `§N.M`, `section N`, `sections N and M`, `sections
/// N to M` (also across a line break inside a `//` comment, and after a
/// Markdown link's target). `None` when the mention cites no section;
/// `Some` of an empty list when it starts like a citation but names no
/// number.
fn cited_sections(after: &str) -> Option<Vec<Section>> {
    let mut s = after;
    // A Markdown link's target (`](…)`) or an anchor after the file name.
    if let Some(rest) = s.strip_prefix("](") {
        s = rest.split_once(')').map_or("", |(_, r)| r);
    }
    if s.starts_with('#') {
        let end = s.find([')', ' ', '\n']).unwrap_or(s.len());
        s = &s[end..];
    }
    s = s.strip_prefix(')').unwrap_or(s);
    // A citation wrapped onto the next comment line.
    s = s.trim_start().trim_start_matches(['/', '!']).trim_start();
    if let Some(rest) = s.strip_prefix('§') {
        return Some(
            leading_number(rest)
                .map(|(n, _)| vec![n])
                .unwrap_or_default(),
        );
    }
    if let Some(rest) = s.strip_prefix("sections") {
        let (first, mut rest) = leading_number(rest)?;
        let mut cited = vec![first];
        loop {
            let t = rest.trim_start();
            let (range, after_word) = if let Some(r) = t.strip_prefix("to ") {
                (true, r)
            } else if let Some(r) = t.strip_prefix("and ").or_else(|| t.strip_prefix(',')) {
                (false, r)
            } else {
                break;
            };
            let Some((n, r)) = leading_number(after_word) else {
                break;
            };
            match (range, cited.last().copied()) {
                // `sections 1 to 3`, `sections 5.1 to 5.3`: every one between.
                (true, Some(Section(from, None))) if n.1.is_none() => {
                    cited.extend((from + 1..=n.0).map(|m| Section(m, None)))
                }
                (true, Some(Section(major, Some(from)))) if n.0 == major && n.1.is_some() => {
                    let to = n.1.unwrap_or(from);
                    cited.extend((from + 1..=to).map(|m| Section(major, Some(m))))
                }
                _ => cited.push(n),
            }
            rest = r;
        }
        return Some(cited);
    }
    if let Some(rest) = s.strip_prefix("section") {
        return leading_number(rest).map(|(n, _)| vec![n]);
    }
    None
}

#[test]
fn semantics_citations_name_sections_that_exist() {
    let sections = semantics_sections();
    assert!(
        !sections.is_empty(),
        "docs/semantics.md has no `## N. Title` headings"
    );
    assert!(
        sections.iter().any(|s| s.contains('.')),
        "docs/semantics.md has no `### N.M Title` headings"
    );
    let out = Command::new("git")
        .args(["ls-files", "-z", "--", "*.rs", "*.md"])
        .current_dir(root())
        .output()
        .expect("run git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    let files = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut citations = 0;
    let mut broken = Vec::new();
    for path in files.split('\0').filter(|p| !p.is_empty()) {
        let text = read(path);
        for (i, mention) in text.match_indices("semantics.md") {
            let Some(cited) = cited_sections(&text[i + mention.len()..]) else {
                continue;
            };
            let line = text[..i].matches('\n').count() + 1;
            if cited.is_empty() {
                broken.push(format!("{path}:{line}: a citation with no section number"));
            }
            for n in cited {
                citations += 1;
                if !sections.contains(&n.to_string()) {
                    broken.push(format!("{path}:{line}: cites section {n}"));
                }
            }
        }
    }
    assert!(
        citations > 0,
        "found no citation of semantics.md sections in the tracked files"
    );
    assert!(
        broken.is_empty(),
        "citations of sections docs/semantics.md does not have (it has {sections:?}): {broken:#?}"
    );
}

#[test]
fn semantics_citations_are_read_as_written() {
    let n = |major| Section(major, None);
    let sub = |major, minor| Section(major, Some(minor));
    assert_eq!(cited_sections(" §5): test"), Some(vec![n(5)]));
    assert_eq!(cited_sections(" §5.3): test"), Some(vec![sub(5, 3)]));
    assert_eq!(cited_sections(" §5.3."), Some(vec![sub(5, 3)]));
    assert_eq!(cited_sections(" §5. The"), Some(vec![n(5)]));
    assert_eq!(cited_sections(" section 4 (a pod)"), Some(vec![n(4)]));
    assert_eq!(
        cited_sections(" section 6.6 (a switch)"),
        Some(vec![sub(6, 6)])
    );
    assert_eq!(
        cited_sections(" sections 2 and 3), and"),
        Some(vec![n(2), n(3)])
    );
    assert_eq!(
        cited_sections(" sections 5.4 and 5.5), and"),
        Some(vec![sub(5, 4), sub(5, 5)])
    );
    assert_eq!(
        cited_sections(" sections 1 to 3: the"),
        Some(vec![n(1), n(2), n(3)])
    );
    assert_eq!(
        cited_sections(" sections 5.1 to 5.3: the"),
        Some(vec![sub(5, 1), sub(5, 2), sub(5, 3)])
    );
    assert_eq!(cited_sections("\n//! §2."), Some(vec![n(2)]));
    assert_eq!(cited_sections("](other.md#x) §6 has"), Some(vec![n(6)]));
    assert_eq!(cited_sections(") §6 has"), Some(vec![n(6)]));
    assert_eq!(cited_sections(" §"), Some(vec![]));
    assert_eq!(cited_sections("), so"), None);
    assert_eq!(cited_sections(" sections are numbered"), None);
    assert_eq!(cited_sections("\")"), None);
}

#[test]
fn semantics_subsections_are_read_from_their_headings() {
    let sections = semantics_sections();
    for number in ["5", "5.1", "5.3", "5.7", "6", "6.1"] {
        assert!(
            sections.contains(number),
            "docs/semantics.md has no section {number}: {sections:?}"
        );
    }
}

// The settings table (src/settings/table.rs) is the one definition of each
// setting; the checks below derive from it, so a new setting fails here
// until its documentation row, its Helm value and its reload class are
// written down.

use nodegate::settings::define::{Reload, Setting};
use nodegate::settings::table::definitions;

/// The cells of a Markdown table row (`\|` inside a cell kept).
fn cells(row: &str) -> Option<Vec<String>> {
    let inner = row.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(
        inner
            .replace("\\|", "\u{0}")
            .split('|')
            .map(|c| c.trim().replace('\u{0}', "\\|"))
            .collect(),
    )
}

/// The rows of the `| flag | config key | default | meaning |` tables of
/// configuration.md and operations.md whose first cell is the flag `--FLAG`
/// (with or without its value name).
/// `first` and every page of docs/, as paths from the repository's root.
fn markdown_docs(first: &[&str]) -> Vec<String> {
    let mut docs: Vec<String> = first.iter().map(|d| d.to_string()).collect();
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs
}

fn flag_rows(docs: &str, flag: &str) -> Vec<Vec<String>> {
    let spelled = format!("`--{flag}");
    docs.lines()
        .filter_map(cells)
        .filter(|c| c.len() == 4)
        .filter(|c| {
            c.first()
                .and_then(|first| first.strip_prefix(&spelled))
                .is_some_and(|rest| rest.starts_with([' ', '`']))
        })
        .collect()
}

fn flag_docs() -> String {
    ["docs/configuration.md", "docs/operations.md"]
        .iter()
        .filter(|p| root().join(p).exists())
        .map(|p| read(p))
        .collect::<Vec<_>>()
        .join("\n")
}

fn flagged() -> Vec<(&'static str, Setting)> {
    definitions()
        .into_iter()
        .filter_map(|s| Some((s.flag?, s)))
        .collect()
}

#[test]
fn every_run_flag_is_defined_once_in_the_settings_table() {
    let defined: BTreeSet<String> = flagged().iter().map(|(f, _)| format!("--{f}")).collect();
    let mut listed = long_flags("run");
    listed.remove("--config");
    // Where to reach the cluster: kubectl's flags, as every command takes
    // them; no setting of the controller.
    for kubectl in KUBECTL_FLAGS {
        assert!(listed.remove(kubectl), "run --help lacks {kubectl}");
    }
    assert_eq!(
        listed, defined,
        "`nodegate run --help` and src/settings/table.rs disagree"
    );
}

#[test]
fn every_defined_flag_has_its_row_in_the_docs() {
    let docs = flag_docs();
    let mut wrong = Vec::new();
    for (flag, s) in flagged() {
        let rows = flag_rows(&docs, flag);
        if rows.is_empty() {
            wrong.push(format!(
                "--{flag}: no row `| --{flag} … | {} | {} | … |`",
                s.key, s.docs_default
            ));
        }
        for row in rows {
            let key = row
                .get(1)
                .is_some_and(|c| c.starts_with(&format!("`{}`", s.key)));
            let default = row.get(2).is_some_and(|c| *c == s.docs_default);
            if !(key && default) {
                wrong.push(format!(
                    "--{flag}: row {row:?} should have key `{}` and default {}",
                    s.key, s.docs_default
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "flag tables out of date: {wrong:#?}");
}

/// The value at a dotted path of a YAML document.
fn at<'v>(doc: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    path.split('.').try_fold(doc, |v, k| v.get(k))
}

#[test]
fn every_defined_helm_value_is_in_the_chart() {
    let values: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/helm/nodegate/values.yaml")).expect("values.yaml");
    let text = read("deploy/helm/nodegate/values.yaml");
    let mut missing = Vec::new();
    for s in definitions() {
        if let Some(helm) = s.helm
            && at(&values, helm).is_none()
        {
            missing.push(format!("{}: no value {helm}", s.key));
        }
        if let Some(flag) = s.flag
            && !mentions(&text, &format!("--{flag}"))
        {
            missing.push(format!("{}: --{flag} named nowhere", s.key));
        }
    }
    assert!(
        missing.is_empty(),
        "deploy/helm/nodegate/values.yaml lacks: {missing:#?}"
    );
}

/// Whether the reload table's cell lists `key`, by name or by a `prefix*`.
fn lists_key(cell: &str, key: &str) -> bool {
    cell.split(", ").any(|k| {
        let k = k.trim().trim_matches('`');
        k == key || k.strip_suffix('*').is_some_and(|p| key.starts_with(p))
    })
}

#[test]
fn the_reload_table_lists_every_key_in_its_class() {
    let docs = read("docs/configuration.md");
    let rows: Vec<Vec<String>> = docs
        .lines()
        .filter_map(cells)
        .filter(|c| c.len() == 2)
        .collect();
    let row_of = |class: Reload| {
        let says = match class {
            Reload::Live => "applied at once",
            Reload::Restart => "need a restart",
            Reload::Refuse => "refused",
        };
        rows.iter()
            .find(|r| r[1].contains(says))
            .map(|r| r[0].clone())
            .unwrap_or_default()
    };
    let wrong: Vec<String> = definitions()
        .into_iter()
        .filter(|s| !lists_key(&row_of(s.reload), s.key))
        .map(|s| format!("{} ({:?})", s.key, s.reload))
        .collect();
    assert!(
        wrong.is_empty(),
        "keys missing from their row of docs/configuration.md's reload table: {wrong:?}"
    );
}

// The reference tables of docs/operations.md (Events, metrics) and
// docs/configuration.md (annotations), checked against the code in both
// directions where the code has a complete list: a row nobody can produce
// is as misleading as a missing one.

/// The rows of the table whose header's first cell is `first` in the section
/// `## heading` of `doc`: each row's cells.
fn table_rows(doc: &str, heading: &str, first: &str) -> Vec<Vec<String>> {
    let section: String = doc
        .split("\n## ")
        .find(|s| s.starts_with(heading) && s[heading.len()..].starts_with('\n'))
        .unwrap_or_else(|| panic!("no section `## {heading}`"))
        .to_owned();
    let mut rows = section
        .lines()
        .skip_while(|l| cells(l).is_none_or(|c| c.first().map(String::as_str) != Some(first)))
        .map_while(cells)
        .skip(2) // the header and its `| --- |` line
        .peekable();
    assert!(
        rows.peek().is_some(),
        "`## {heading}` has no table headed `| {first} | … |`"
    );
    rows.collect()
}

/// The `code` spans of a cell: `` `a` or `b` `` gives `["a", "b"]`.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Whether the set of names in a doc's table and in the code agree; the
/// message names what is missing on each side.
fn differences(
    table: &str,
    documented: &BTreeSet<String>,
    in_code: &BTreeSet<String>,
) -> Option<String> {
    let undocumented: Vec<_> = in_code.difference(documented).collect();
    let unknown: Vec<_> = documented.difference(in_code).collect();
    (!undocumented.is_empty() || !unknown.is_empty()).then(|| {
        format!(
            "{table}: in the code but no row: {undocumented:?}; a row but not in the code: {unknown:?}"
        )
    })
}

/// Event reasons: `nodegate_core::gate::Reason::ALL` is every reason the
/// writer can send (the Event's reason is a `Reason`; see
/// src/cluster/writer.rs), and the table's first column names them.
fn events_table_disagreement(operations: &str) -> Option<String> {
    use nodegate_core::gate::Reason;
    let documented: BTreeSet<String> = table_rows(operations, "Events", "reason")
        .iter()
        .flat_map(|row| code_spans(&row[0]))
        .collect();
    let in_code: BTreeSet<String> = Reason::ALL.iter().map(|r| r.as_str().to_owned()).collect();
    differences("docs/operations.md, Events", &documented, &in_code)
}

#[test]
fn the_events_table_lists_every_reason_the_code_records() {
    let operations = read("docs/operations.md");
    if let Some(wrong) = events_table_disagreement(&operations) {
        panic!("{wrong}");
    }
}

/// The metric families nodegate registers, `nodegate_` and the name each
/// registering call under src/serve/metrics* gives (the registry
/// is `Registry::with_prefix("nodegate")`). Read from the source because
/// prometheus-client neither lists a registry's families nor writes a family
/// without series (a gauge per node, a counter per rule) into a scrape;
/// [`scraped_kinds`] checks this reading against what a scrape does show.
fn registered_metrics() -> BTreeSet<String> {
    let dir = root().join("src/serve/metrics");
    let mut files = vec![root().join("src/serve/metrics.rs")];
    files.extend(
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .filter(|p| !p.ends_with("tests.rs")),
    );
    let mut names = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        // `.register("NAME", …)`, or `reg(r, "NAME", …)` and `reg_with(r,
        // "NAME", …)`, the helpers of src/serve/metrics.rs.
        let calls = [".register(", "reg(", "reg_with("]
            .into_iter()
            .flat_map(|call| text.match_indices(call));
        for (i, call) in calls {
            let after = &text[i + call.len()..];
            let after = after.trim_start().strip_prefix("r,").unwrap_or(after);
            let name = after
                .split_once('"')
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(name, _)| name)
                .unwrap_or_else(|| panic!("{}: a .register( without a name", file.display()));
            names.insert(format!("nodegate_{name}"));
        }
    }
    names
}

/// The kind (`counter`, `gauge`, `histogram`) of each family a fresh
/// registry writes into a scrape, from its `# TYPE NAME KIND` lines.
fn scraped_kinds() -> std::collections::BTreeMap<String, String> {
    use nodegate::cluster::leader::Leadership;
    use nodegate::serve::metrics::Metrics;
    let scrape = Metrics::new(std::sync::Arc::new(Leadership::always()))
        .encode()
        .expect("encode the metrics registry");
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.trim().to_owned()))
        .collect()
}

/// A row names a family as a scrape's samples do: a counter with `_total`;
/// and one row a family (two rows drift apart: one of them gets the new
/// label value, the other not).
fn metrics_table_disagreement(operations: &str) -> Option<String> {
    let rows: Vec<String> = table_rows(operations, "Metrics", "metric")
        .iter()
        .flat_map(|row| code_spans(&row[0]))
        .collect();
    let mut seen = BTreeSet::new();
    let repeated: Vec<&String> = rows.iter().filter(|r| !seen.insert(*r)).collect();
    if !repeated.is_empty() {
        return Some(format!(
            "docs/operations.md, Metrics: more than one row for {repeated:?}"
        ));
    }
    let registered = registered_metrics();
    let family = |row: &str| match row.strip_suffix("_total") {
        Some(base) if !registered.contains(row) => base.to_owned(),
        _ => row.to_owned(),
    };
    let documented: BTreeSet<String> = rows.iter().map(|r| family(r)).collect();
    let kinds = scraped_kinds();
    let misspelled: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let kind = kinds.get(&family(row))?;
            ((kind == "counter") != row.ends_with("_total")).then(|| format!("{row} is a {kind}"))
        })
        .collect();
    let wrong = differences("docs/operations.md, Metrics", &documented, &registered);
    match (wrong, misspelled.is_empty()) {
        (None, true) => None,
        (wrong, _) => Some(format!(
            "{}; counters end in _total, others do not: {misspelled:?}",
            wrong.unwrap_or_default()
        )),
    }
}

#[test]
fn the_metrics_table_lists_every_registered_family() {
    let registered = registered_metrics();
    let scraped = scraped_kinds();
    assert!(
        scraped.len() > 20,
        "a fresh registry wrote few families: {scraped:?}"
    );
    let unread: Vec<_> = scraped
        .keys()
        .filter(|name| !registered.contains(*name))
        .collect();
    assert!(
        unread.is_empty(),
        "families in a scrape that the reading of src/serve/metrics* missed: {unread:?}"
    );
    let operations = read("docs/operations.md");
    if let Some(wrong) = metrics_table_disagreement(&operations) {
        panic!("{wrong}");
    }
}

/// The annotation keys defined in actors/core/src/vocab/annotations.rs. The
/// module has constants, not a list, so this reads its source: every line
/// `pub const NAME: &str = "nodegate.dev/…";`, less `PREFIX` (the prefix
/// alone) and `REPORTING_CONTROLLER` (an Event field, not an annotation).
/// Two keys share one spelling (`ignore`, on a Node and on a DaemonSet).
/// The constants checked below by name keep this reading honest.
fn annotation_keys() -> BTreeSet<String> {
    read("actors/core/src/vocab/annotations.rs")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": &str = \""))
        .filter(|(name, _)| !matches!(*name, "PREFIX" | "REPORTING_CONTROLLER"))
        .filter_map(|(_, value)| value.strip_suffix("\";"))
        .map(str::to_owned)
        .collect()
}

fn annotations_table_disagreement(configuration: &str) -> Option<String> {
    let documented: BTreeSet<String> = table_rows(configuration, "Annotations", "annotation")
        .iter()
        .flat_map(|row| code_spans(&row[0]))
        // `nodegate.dev/ignore: "true"`: the key, without its value.
        .map(|span| span.split(':').next().unwrap_or_default().to_owned())
        .collect();
    differences(
        "docs/configuration.md, Annotations",
        &documented,
        &annotation_keys(),
    )
}

#[test]
fn the_annotations_table_lists_every_annotation_constant() {
    use nodegate_core::vocab::annotations as a;
    let keys = annotation_keys();
    for constant in [
        a::OPENED_AT,
        a::OPENED_BY,
        a::TIMED_OUT,
        a::GATED_SINCE,
        a::REGATED_FOR,
        a::CONDITION_TAINTS,
        a::SUSPEND,
        a::OPEN,
        a::NODE_IGNORE,
        a::DAEMONSET_IGNORE,
        a::CSI_DRIVER,
        a::POD_READY,
    ] {
        assert!(
            keys.contains(constant),
            "{constant} not read from actors/core/src/vocab/annotations.rs: {keys:?}"
        );
    }
    assert!(keys.iter().all(|k| k.starts_with(a::PREFIX)), "{keys:?}");
    let configuration = read("docs/configuration.md");
    if let Some(wrong) = annotations_table_disagreement(&configuration) {
        panic!("{wrong}");
    }
}

/// The core's top-level modules: the `pub mod NAME;` lines of
/// actors/core/src/lib.rs, less `testutil` (builders for tests only).
fn core_modules() -> BTreeSet<String> {
    read("actors/core/src/lib.rs")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .filter_map(|l| l.strip_suffix(';'))
        .filter(|m| *m != "testutil")
        .map(str::to_owned)
        .collect()
}

/// docs/architecture.md's folder table (its first column, `` `vocab` ``)
/// against the core's top-level modules, `testutil` left out on both sides.
fn folders_table_disagreement(architecture: &str) -> Option<String> {
    let documented: BTreeSet<String> = table_rows(architecture, "The core's folders", "module")
        .iter()
        .flat_map(|row| code_spans(&row[0]))
        .map(|m| m.trim_end_matches('/').to_owned())
        .filter(|m| m != "testutil")
        .collect();
    differences(
        "docs/architecture.md, The core's folders (against actors/core/src/lib.rs)",
        &documented,
        &core_modules(),
    )
}

/// Issue 35: the folder table a new maintainer reads is the core as it is.
#[test]
fn the_architecture_names_every_core_module() {
    let modules = core_modules();
    assert!(
        modules.contains("gate"),
        "`pub mod` lines not read from actors/core/src/lib.rs: {modules:?}"
    );
    if let Some(wrong) = folders_table_disagreement(&read("docs/architecture.md")) {
        panic!("{wrong}");
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            files.push(path);
        }
    }
    files
}

/// Each `pub enum NAME` the core defines, as (its file from
/// actors/core/src/, its variants' names). rustfmt puts a variant at the
/// start of a line indented once (four spaces), its fields and doc comments
/// elsewhere or behind `///` and `#[`, so a line indented once that begins
/// with a capital begins a variant.
fn core_enums(name: &str) -> Vec<(String, Vec<String>)> {
    let src = root().join("actors/core/src");
    let opening = format!("pub enum {name} {{");
    let mut found = Vec::new();
    for path in rust_files(&src) {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut lines = text.lines();
        while lines.by_ref().any(|l| l == opening) {
            let variants = lines
                .by_ref()
                .take_while(|l| *l != "}")
                .filter_map(|l| l.strip_prefix("    "))
                .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
                .map(|l| {
                    l.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect()
                })
                .collect();
            let file = path.strip_prefix(&src).unwrap_or(&path);
            found.push((file.display().to_string(), variants));
        }
    }
    found
}

/// The gate's effects that write nothing: timers, a re-read, the withdrawal
/// of an untaint, the end.
const GATE_NOT_WRITES: [&str; 5] = [
    "ScheduleTimer",
    "ScheduleRetry",
    "RefreshNode",
    "WithdrawWrite",
    "Stop",
];

/// The deciders' effects that write nothing: reads, a timer, a log line, a
/// count.
const DECIDER_NOT_WRITES: [&str; 6] = [
    "ListPods",
    "ReadNode",
    "ListCanaries",
    "LookAgainAt",
    "Log",
    "Count",
];

/// The variants of the two `Effect`s, read from the source so that the
/// check follows the enums wherever they live: the gate's (the one under
/// `gate/`) and the deciders' (the other), whose `Write` is spelled once
/// per kind of `TaintChange`: `Write(Add)`, `Write(Remove)`, ….
fn effect_variants() -> (BTreeSet<String>, BTreeSet<String>) {
    let effects = core_enums("Effect");
    let names: Vec<String> = effects.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(
        effects.len(),
        2,
        "expected the gate's and the deciders' `pub enum Effect`, found: {names:?}"
    );
    let (gate, deciders): (Vec<_>, Vec<_>) = effects
        .into_iter()
        .partition(|(f, _)| f.starts_with("gate/") || f.starts_with("gate\\"));
    let (Some((_, gate)), Some((_, deciders))) = (gate.first(), deciders.first()) else {
        panic!("no `pub enum Effect` under actors/core/src/gate/ and one elsewhere: {names:?}");
    };
    let kinds = core_enums("TaintChange");
    let [(_, kinds)] = kinds.as_slice() else {
        panic!("expected one `pub enum TaintChange` in actors/core/src: {kinds:?}");
    };
    let deciders = deciders
        .iter()
        .flat_map(|v| match v.as_str() {
            "Write" => kinds.iter().map(|k| format!("Write({k})")).collect(),
            _ => vec![v.clone()],
        })
        .collect();
    (gate.iter().cloned().collect(), deciders)
}

/// Whether a table of writes and the code agree: every variant is a row
/// (a write) or listed as not a write, never both, and each row and each
/// listed name is a variant. The message names every variant out of place.
fn write_classification(
    table: &str,
    documented: &BTreeSet<String>,
    in_code: &BTreeSet<String>,
    not_writes: &[&str],
) -> Option<String> {
    let not_writes: BTreeSet<String> = not_writes.iter().map(|s| s.to_string()).collect();
    let unclassified: Vec<_> = in_code
        .iter()
        .filter(|v| !documented.contains(*v) && !not_writes.contains(*v))
        .collect();
    let unknown: Vec<_> = documented.difference(in_code).collect();
    let stale: Vec<_> = not_writes.difference(in_code).collect();
    let both: Vec<_> = documented.intersection(&not_writes).collect();
    (!unclassified.is_empty() || !unknown.is_empty() || !stale.is_empty() || !both.is_empty())
        .then(|| {
            format!(
                "{table}: variants neither a row (a write) nor listed in tests/docs.rs as not a write: \
                 {unclassified:?}; rows that are no variant: {unknown:?}; listed as not a write \
                 but no variant: {stale:?}; both a row and listed as not a write: {both:?}"
            )
        })
}

/// docs/architecture.md's two write tables against the variants of the
/// gate's and the deciders' `Effect`.
fn write_tables_disagreement(architecture: &str) -> Option<String> {
    let (gate, deciders) = effect_variants();
    let documented = |first: &str| -> BTreeSet<String> {
        table_rows(architecture, "Who writes what", first)
            .iter()
            .flat_map(|row| code_spans(&row[0]))
            .collect()
    };
    let wrong: Vec<String> = [
        write_classification(
            "docs/architecture.md, the gate's effects",
            &documented("gate effect"),
            &gate,
            &GATE_NOT_WRITES,
        ),
        write_classification(
            "docs/architecture.md, the deciders' effects",
            &documented("decider effect"),
            &deciders,
            &DECIDER_NOT_WRITES,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!wrong.is_empty()).then(|| wrong.join("\n"))
}

/// Issue 35: every effect that writes has its row in the architecture's
/// "Who writes what", and every other effect is named here as not a write,
/// so a new variant must be classed one way or the other.
#[test]
fn the_write_tables_name_every_write() {
    let (gate, deciders) = effect_variants();
    for (variants, known) in [(&gate, "RemoveTaints"), (&deciders, "Write(Add)")] {
        assert!(
            variants.contains(known),
            "{known} not read from the core's `Effect`s: {variants:?}"
        );
    }
    if let Some(wrong) = write_tables_disagreement(&read("docs/architecture.md")) {
        panic!("{wrong}");
    }
}

/// The variants of the core's one `Write` (`vocab/write.rs`), read from the
/// source.
fn write_variants() -> BTreeSet<String> {
    let writes = core_enums("Write");
    let [(_, variants)] = writes.as_slice() else {
        panic!("expected one `pub enum Write` in actors/core/src: {writes:?}");
    };
    variants.iter().cloned().collect()
}

/// docs/architecture.md's table of the port's writes (in "The node
/// writer", first column `write`) against the variants of `Write`.
fn port_writes_disagreement(architecture: &str) -> Option<String> {
    let documented: BTreeSet<String> = table_rows(architecture, "The node writer", "write")
        .iter()
        .flat_map(|row| code_spans(&row[0]))
        .collect();
    differences(
        "docs/architecture.md, The node writer (against `Write` in actors/core/src/vocab/write.rs)",
        &documented,
        &write_variants(),
    )
}

/// Issue 35: every write goes through the port as one `Write`, and the
/// architecture names each of its variants, no more and no fewer.
#[test]
fn the_architecture_names_every_port_write() {
    let variants = write_variants();
    assert!(
        variants.contains("Untaint") && variants.contains("DeleteCanary"),
        "`Write` variants not read from actors/core/src/vocab/write.rs: {variants:?}"
    );
    if let Some(wrong) = port_writes_disagreement(&read("docs/architecture.md")) {
        panic!("{wrong}");
    }
}

/// Drops the table row of `doc` whose first cell holds `` `name` ``.
fn without_row(doc: &str, name: &str) -> String {
    let spelled = format!("`{name}");
    let mut dropped = 0;
    let kept: Vec<&str> = doc
        .lines()
        .filter(|l| {
            let hit = cells(l).is_some_and(|c| c[0].starts_with(&spelled));
            dropped += usize::from(hit);
            !hit
        })
        .collect();
    assert!(dropped > 0, "no row for {name}");
    kept.join("\n")
}

/// Each check bites: with one row taken out of the real document, it names
/// what is missing.
#[test]
fn each_table_check_fails_without_a_row() {
    let operations = read("docs/operations.md");
    let configuration = read("docs/configuration.md");
    let architecture = read("docs/architecture.md");
    let cases = [
        (
            events_table_disagreement(&without_row(&operations, "RegateBudgetExhausted")),
            "RegateBudgetExhausted",
        ),
        (
            metrics_table_disagreement(&without_row(&operations, "nodegate_regated_nodes")),
            "nodegate_regated_nodes",
        ),
        (
            annotations_table_disagreement(&without_row(&configuration, "nodegate.dev/suspend")),
            "nodegate.dev/suspend",
        ),
        (
            folders_table_disagreement(&without_row(&architecture, "canary")),
            "\"canary\"",
        ),
        (
            write_tables_disagreement(&without_row(&architecture, "MarkOpenedExternally")),
            "\"MarkOpenedExternally\"",
        ),
        (
            write_tables_disagreement(&without_row(&architecture, "Write(Remove)")),
            "\"Write(Remove)\"",
        ),
        (
            port_writes_disagreement(&without_row(&architecture, "Untaint")),
            "\"Untaint\"",
        ),
    ];
    for (wrong, name) in cases {
        let wrong = wrong.unwrap_or_else(|| panic!("a missing {name} row went unnoticed"));
        assert!(wrong.contains(name), "{wrong}");
    }
    // And a row for something the code does not have.
    let renamed = [
        (
            events_table_disagreement(&operations.replace("`GateWouldOpen`", "`GateMightOpen`")),
            "GateMightOpen",
        ),
        (
            metrics_table_disagreement(
                &operations.replace("`nodegate_live_actors`", "`nodegate_live_actors_total`"),
            ),
            "nodegate_live_actors_total is a gauge",
        ),
        (
            metrics_table_disagreement(&operations.replace(
                "| `nodegate_live_actors` |",
                "| `nodegate_live_actors` | gauge | | A | again |\n| `nodegate_live_actors` |",
            )),
            "more than one row for [\"nodegate_live_actors\"]",
        ),
        (
            annotations_table_disagreement(
                &configuration.replace("`nodegate.dev/timed-out`", "`nodegate.dev/timedout`"),
            ),
            "nodegate.dev/timedout",
        ),
        (
            folders_table_disagreement(&architecture.replace("| `canary` |", "| `canaries` |")),
            "\"canaries\"",
        ),
        (
            write_tables_disagreement(&architecture.replace("`DeleteCanary`", "`RemoveCanary`")),
            "\"RemoveCanary\"",
        ),
        (
            port_writes_disagreement(&architecture.replace("| `Condition` |", "| `Conditions` |")),
            "\"Conditions\"",
        ),
    ];
    for (wrong, name) in renamed {
        let wrong = wrong.unwrap_or_else(|| panic!("a row for {name} went unnoticed"));
        assert!(wrong.contains(name), "{wrong}");
    }
    // And an effect nobody classed as a write or not.
    let (gate, _) = effect_variants();
    let writes: BTreeSet<String> = gate
        .iter()
        .filter(|v| !GATE_NOT_WRITES.contains(&v.as_str()))
        .cloned()
        .collect();
    assert_eq!(
        write_classification("gate", &writes, &gate, &GATE_NOT_WRITES),
        None
    );
    let mut grown = gate.clone();
    grown.insert("PaintNode".to_string());
    let wrong = write_classification("gate", &writes, &grown, &GATE_NOT_WRITES)
        .unwrap_or_else(|| panic!("an unclassified effect went unnoticed"));
    assert!(wrong.contains("\"PaintNode\""), "{wrong}");
}

/// The LICENSE file is the license Cargo.toml and the image's label declare.
#[test]
fn the_license_file_is_the_declared_license() {
    let cargo = read("Cargo.toml");
    let dockerfile = read("Dockerfile");
    assert!(
        cargo.contains("license = \"Apache-2.0\""),
        "Cargo.toml declares another license; update LICENSE with it"
    );
    assert!(
        dockerfile.contains("org.opencontainers.image.licenses=\"Apache-2.0\""),
        "the Dockerfile's image label declares another license than Cargo.toml"
    );
    let license = read("LICENSE");
    let head: Vec<&str> = license.lines().take(2).map(str::trim).collect();
    assert_eq!(
        head,
        ["Apache License", "Version 2.0, January 2004"],
        "LICENSE is not the Apache License 2.0 text"
    );
    assert!(license.contains("END OF TERMS AND CONDITIONS"));
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, every character
/// other than a letter, a digit, `-` or `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown file offers: its headings' slugs (outside code
/// blocks) and its `<a id="…">` tags.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if let Some(heading) = line.strip_prefix('#') {
            found.insert(slug(heading.trim_start_matches('#')));
        }
        for (i, tag) in line.match_indices("<a id=\"") {
            let rest = &line[i + tag.len()..];
            if let Some((id, _)) = rest.split_once('"') {
                found.insert(id.to_owned());
            }
        }
    }
    found
}

/// Every `[…](FILE.md#anchor)` and `[…](#anchor)` in the tracked Markdown
/// files names a heading (or an `<a id>`) the target has, so that moving or
/// renaming a section cannot silently break a link into it.
#[test]
fn markdown_links_name_anchors_that_exist() {
    let out = Command::new("git")
        .args(["ls-files", "-z", "--", "*.md"])
        .current_dir(root())
        .output()
        .expect("run git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    let files = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut checked = 0;
    let mut broken = Vec::new();
    for path in files.split('\0').filter(|p| !p.is_empty()) {
        let text = read(path);
        let dir = std::path::Path::new(path)
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default();
        for (i, _) in text.match_indices("](") {
            let target: String = text[i + 2..].chars().take_while(|c| *c != ')').collect();
            let Some((file, anchor)) = target.split_once('#') else {
                continue;
            };
            if file.contains("://") || !(file.is_empty() || file.ends_with(".md")) {
                continue;
            }
            let target_path = if file.is_empty() {
                PathBuf::from(path)
            } else {
                dir.join(file)
            };
            let Ok(target_text) = std::fs::read_to_string(root().join(&target_path)) else {
                broken.push(format!("{path}: {target} (no such file)"));
                continue;
            };
            checked += 1;
            if !anchors(&target_text).contains(anchor) {
                broken.push(format!("{path}: {target}"));
            }
        }
    }
    assert!(checked > 0, "no link with an anchor found");
    assert!(
        broken.is_empty(),
        "links to anchors that do not exist: {broken:#?}"
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug("A tainted node outside `--node-selector`"),
        "a-tainted-node-outside---node-selector"
    );
    assert_eq!(
        slug("6.1 At creation: the admission policy or the admission webhook"),
        "61-at-creation-the-admission-policy-or-the-admission-webhook"
    );
    assert_eq!(
        slug("A re-gated node (`nodegate.dev/degraded`)"),
        "a-re-gated-node-nodegatedevdegraded"
    );
}

/// Every long flag of `nodegate status --help` is named in its section of
/// docs/operations.md (the run flags are checked above, row by row).
#[test]
fn every_status_flag_is_in_its_section_of_operations() {
    let operations = read("docs/operations.md");
    let section = operations
        .split("\n## ")
        .find(|s| s.starts_with("`nodegate status`"))
        .expect("docs/operations.md has a `## nodegate status` section");
    let missing: Vec<_> = long_flags("status")
        .into_iter()
        .filter(|f| !mentions(section, f))
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `nodegate status` not in docs/operations.md's `nodegate status` section: {missing:?}"
    );
}

/// docs/troubleshooting.md's `nodegate doctor` section names every flag of
/// the doctor's own (those `nodegate run` has not), every check and every
/// field of its JSON report.
#[test]
fn every_doctor_flag_check_and_json_field_is_in_its_section() {
    use nodegate::commands::doctor::checks::{
        admission, autoscaler, karpenter, leader, nodes, rbac,
    };
    use nodegate::commands::doctor::report::{Name, Report};

    let docs = read("docs/troubleshooting.md");
    let section = docs
        .split("\n## ")
        .find(|s| s.starts_with("`nodegate doctor`"))
        .expect("docs/troubleshooting.md has a `## nodegate doctor` section");
    let run = long_flags("run");
    let own: Vec<String> = long_flags("doctor")
        .into_iter()
        .filter(|f| !run.contains(f))
        .collect();
    assert!(own.contains(&"--from-cluster".to_string()), "{own:?}");
    let checks = [
        karpenter::CHECK,
        autoscaler::CHECK,
        admission::CHECK,
        leader::CHECK,
        rbac::CHECK,
        nodes::CHECK,
    ];
    // Every field, from a report whose one check has every optional field.
    let full = Name("karpenter").problem("s", "m", "f").with_note("n");
    let report = serde_json::to_value(Report::new("flags".into(), vec![full])).expect("json");
    let mut fields: Vec<String> = Vec::new();
    for (k, v) in report.as_object().into_iter().flatten() {
        fields.push(k.clone());
        for c in v.as_array().into_iter().flatten() {
            for k2 in c.as_object().into_iter().flatten().map(|(k2, _)| k2) {
                fields.push(format!("{k}[].{k2}"));
            }
        }
    }
    let missing: Vec<String> = own
        .iter()
        .cloned()
        .chain(checks.iter().map(|c| format!("`{}`", c.0)))
        .chain(fields.iter().map(|f| format!("`{f}`")))
        .filter(|w| !mentions(section, w))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/troubleshooting.md's `nodegate doctor` section: {missing:?}"
    );
}

/// The subcommands `nodegate --help` lists (`config` as `config check`).
fn commands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg("--help")
        .output()
        .expect("run nodegate --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let listed = help
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_default()
        .lines()
        // A command's line; its description's further lines are indented
        // deeper.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(|c| match c {
            "config" => "config check".to_string(),
            c => c.to_string(),
        })
        .collect::<Vec<_>>();
    assert!(listed.len() >= 9, "commands not read from --help:\n{help}");
    listed
}

/// Issue 38: the README, read in five minutes, still names every command
/// and every `--on-timeout` value (its length: `the_docs_keep_their_word_budget`).
#[test]
fn the_readme_names_every_command_and_on_timeout_value() {
    let readme = read("README.md");
    let missing: Vec<String> = commands()
        .into_iter()
        .filter(|c| !readme.contains(&format!("`nodegate {c}")))
        .collect();
    assert!(missing.is_empty(), "README.md does not name: {missing:?}");
    for value in nodegate_core::vocab::config::OnTimeout::ALL {
        let v = format!("`{}`", value.as_str());
        assert!(
            readme.contains(&v),
            "README.md does not name --on-timeout {v}"
        );
    }
}

/// Issue 38: README.md and docs/*.md together at most this many words.
const WORD_BUDGET: usize = 55_000;
/// Issue 38: a README read in five minutes.
const README_MAX_LINES: usize = 200;

/// Words as `wc -w` counts them: runs of characters between whitespace.
fn words(text: &str) -> usize {
    text.split_ascii_whitespace().count()
}

/// Each document's word count, largest first.
fn word_counts(docs: &[String]) -> Vec<(usize, String)> {
    let mut counts: Vec<(usize, String)> =
        docs.iter().map(|d| (words(&read(d)), d.clone())).collect();
    counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    counts
}

#[test]
fn words_are_counted_as_wc_counts_them() {
    assert_eq!(words(""), 0);
    assert_eq!(words("  one\ttwo\n\nthree  "), 3);
    assert_eq!(words("`--flag` | a|b | §5.3"), 5);
}

/// Issue 38: the README and the docs stay within their budget, so that they
/// can be read; a failure lists every page's count, largest first, to say
/// where to cut. The README stays within 200 lines.
#[test]
fn the_docs_keep_their_word_budget() {
    let docs = markdown_docs(&["README.md"]);
    assert!(
        docs.len() > 1,
        "found no page in docs/ beside the README: {docs:?}"
    );
    let counts = word_counts(&docs);
    let total: usize = counts.iter().map(|(n, _)| n).sum();
    let listing: String = counts
        .iter()
        .map(|(n, d)| format!("\n{n:>8}  {d}"))
        .collect();
    assert!(
        total <= WORD_BUDGET,
        "README.md and docs/*.md have {total} words; the budget is {WORD_BUDGET} \
         (docs/development.md, \"The documentation\"). By page:{listing}"
    );
    let lines = read("README.md").lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; the limit is {README_MAX_LINES}"
    );
}

/// The chart's values the schema keeps only to refuse them (description
/// `retired: …`), as dotted paths.
fn retired_helm_values(at: &str, schema: &serde_json::Value, out: &mut Vec<String>) {
    let Some(props) = schema["properties"].as_object() else {
        return;
    };
    for (k, s) in props {
        let path = format!("{at}{k}");
        if s["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("retired"))
        {
            out.push(path.clone());
        }
        retired_helm_values(&format!("{path}."), s, out);
    }
}

/// Issue 38: no page of the documentation (the README and docs/) names a
/// Helm value the chart retired, as if it still worked.
#[test]
fn no_doc_names_a_retired_helm_value() {
    let mut retired = Vec::new();
    retired_helm_values(
        "",
        &nodegate::settings::schema::values_schema(),
        &mut retired,
    );
    assert!(!retired.is_empty(), "the schema lists no retired value");
    let docs = markdown_docs(&["README.md"]);
    let mut named = Vec::new();
    for doc in &docs {
        let text = read(doc);
        for value in &retired {
            if text.contains(&format!("`{value}`")) || text.contains(&format!("{value}=")) {
                named.push(format!("{doc}: {value}"));
            }
        }
    }
    assert!(named.is_empty(), "retired Helm values named: {named:?}");
}

/// Every source file of the repository (Rust, shell, Python, YAML), by its
/// path from the repository's root.
fn source_files() -> Vec<PathBuf> {
    let root = root();
    let out = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(&root)
        .output()
        .expect("run git ls-files");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|f| {
            [".rs", ".sh", ".py", ".yaml", ".md", ".tpl", ".toml"]
                .iter()
                .any(|ext| f.ends_with(ext))
                || f.starts_with("deploy/local/")
                || f.starts_with(".ci/")
        })
        .map(|f| root.join(f))
        .filter(|p| p.is_file())
        .collect()
}

/// Comments and docs cite the repository's own documents: none names a
/// review or design brief kept outside it.
#[test]
fn nothing_cites_a_document_outside_the_repository() {
    let files = source_files();
    assert!(
        files.len() > 100,
        "source files not listed: {}",
        files.len()
    );
    let mut cited = Vec::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            // Spelled in pieces, so that this file does not match itself.
            let needles = [
                concat!("security review ", "§"),
                // The same split over a line break.
                concat!("review ", "§"),
                concat!("../", "shared/"),
                concat!("shared", "/reviews"),
                concat!("shared", "/design"),
            ];
            if needles.iter().any(|n| lower.contains(n)) {
                cited.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        cited.is_empty(),
        "cites outside the repository:\n{}",
        cited.join("\n")
    );
}

/// Every `--flag` a doc (README, docs/, the chart's README) passes to a
/// `nodegate` command, in a code span or a code block line, is a flag that
/// command takes today: no doc shows a retired or misspelt flag.
#[test]
fn no_doc_passes_a_flag_nodegate_does_not_take() {
    use clap::CommandFactory as _;
    let cli = nodegate::settings::cli::Cli::command();
    let docs = markdown_docs(&["README.md", "deploy/helm/nodegate/README.md"]);
    let mut wrong = Vec::new();
    for doc in &docs {
        let text = read(doc);
        let spans = text.split('`').skip(1).step_by(2).map(str::to_string);
        let lines = text
            .lines()
            .map(|l| l.trim().trim_start_matches("$ ").to_string());
        for cmd in spans.chain(lines) {
            let cmd = cmd.trim();
            let rest = cmd
                .strip_prefix("kubectl nodegate ")
                .or_else(|| cmd.strip_prefix("nodegate "));
            let Some(rest) = rest else { continue };
            let rest = rest.split('#').next().unwrap_or_default();
            let words: Vec<&str> = rest.split_whitespace().collect();
            let mut at = &cli;
            let mut flags: BTreeSet<String> = at
                .get_arguments()
                .filter_map(|a| a.get_long().map(str::to_string))
                .collect();
            for w in &words {
                if let Some(sub) = at.find_subcommand(w) {
                    at = sub;
                    flags.extend(
                        at.get_arguments()
                            .filter_map(|a| a.get_long().map(str::to_string)),
                    );
                    continue;
                }
                // `--dry-run|--yes`: either of two flags.
                for alt in w.replace('\\', "").split('|') {
                    let Some(flag) = alt.strip_prefix("--") else {
                        continue;
                    };
                    let flag = flag.split('=').next().unwrap_or_default();
                    let flag = flag.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
                    if flag.is_empty() || flag == "help" || flag == "version" {
                        continue;
                    }
                    if !flags.contains(flag) {
                        wrong.push(format!("{doc}: `{cmd}`: --{flag}"));
                    }
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "flags nodegate does not take: {wrong:#?}");
}

/// Every YAML block of the docs that is a nodegate config file (its first
/// key is a config key, and it is no Kubernetes object or Helm values file)
/// is read by nodegate's own config parser without a refusal: no doc shows
/// a retired or misspelt config key.
#[test]
fn every_config_file_a_doc_shows_is_accepted() {
    let keys: BTreeSet<String> = definitions()
        .into_iter()
        .map(|s| s.key.to_string())
        .collect();
    let docs = markdown_docs(&["README.md"]);
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in &docs {
        let text = read(doc);
        for (i, block) in text.split("```yaml\n").skip(1).enumerate() {
            let block = block.split("\n```").next().unwrap_or_default();
            let first = block
                .lines()
                .map(str::trim_end)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .unwrap_or_default();
            let Some((key, _)) = first.split_once(':') else {
                continue;
            };
            if first.starts_with(' ') || !keys.contains(key) || block.contains("apiVersion:") {
                continue;
            }
            checked += 1;
            if let Err(e) =
                nodegate::settings::config::FileConfig::parse(block, &format!("{doc} block {i}"))
            {
                wrong.push(e.to_string());
            }
        }
    }
    assert!(checked > 0, "no config file found in the docs");
    assert!(
        wrong.is_empty(),
        "config files in the docs nodegate refuses: {wrong:#?}"
    );
}

/// link/code-order.txt, which build.rs hands the linker as its symbol
/// ordering file: written by link/code-order.py, one symbol name a line
/// (a hand edit that leaves a space or a repeat makes the linker read a
/// different list than the one recorded), and named by build.rs.
#[test]
fn the_code_order_lists_one_symbol_a_line() {
    let text = read("link/code-order.txt");
    let names: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert!(
        names.len() >= 500,
        "link/code-order.txt lists {} functions; a recorded run lists thousands \
         (link/code-order.py record)",
        names.len()
    );
    let mut seen = BTreeSet::new();
    for name in &names {
        let symbol = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_$.".contains(c));
        assert!(
            symbol,
            "link/code-order.txt: {name:?} is not one symbol name"
        );
        assert!(seen.insert(*name), "link/code-order.txt lists {name} twice");
    }
    assert!(
        read("build.rs").contains("link/code-order.txt"),
        "build.rs no longer hands link/code-order.txt to the linker"
    );
}
