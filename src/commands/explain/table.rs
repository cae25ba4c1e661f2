//! The human form of an explain report, for a terminal. Pure: it lays out
//! the report's words and adds none of its own about the gate.

use std::fmt::Write as _;

use nodegate_core::gate::report::{MemberRow, Report};

const GAP: &str = "  ";
const MIN_WHY_WIDTH: usize = 30;
/// Longer member names go on a line of their own so the columns stay narrow.
const MAX_NAME_WIDTH: usize = 40;

/// The report laid out for a terminal `width` columns wide.
pub fn render_table(report: &Report, width: usize) -> String {
    let mut out = String::new();
    let gate = if report.gated {
        format!("gated by {}", report.taints.managed.join(", "))
    } else {
        "not gated (no managed taint)".to_string()
    };
    let age = report.evaluated_at.duration_since(report.created);
    let age = age.as_secs().max(0);
    let header = format!(
        "Node {}, created {} ({} ago): {gate}",
        report.node,
        report.created,
        human_age(age),
    );
    push_wrapped(&mut out, "", "", &header, width);
    let counts = format!(
        "{} of {} {} expected here, {} of them Ready",
        report.expected_members,
        report.daemonsets.len()
            + other_members(report)
                .iter()
                .map(|(.., rows)| rows.len())
                .sum::<usize>(),
        member_kinds(report),
        report.ready_members,
    );
    push_wrapped(&mut out, "", "", &counts, width);
    out.push('\n');
    // Every member table, all with one name column as wide as the longest
    // name that fits in [`MAX_NAME_WIDTH`].
    let name_width = report
        .daemonsets
        .iter()
        .chain(
            other_members(report)
                .into_iter()
                .flat_map(|(.., rows)| rows),
        )
        .map(|r| r.label.chars().count())
        .chain(["DAEMONSET".len(), "CRITICAL POD".len()])
        .filter(|w| *w <= MAX_NAME_WIDTH)
        .max()
        .unwrap_or(0);
    member_table(&mut out, "DAEMONSET", &report.daemonsets, name_width, width);
    if report.daemonsets.is_empty() {
        out.push_str("(no DaemonSets in the cluster)\n");
    }
    for (title, _, rows) in other_members(report) {
        if !rows.is_empty() {
            out.push('\n');
            member_table(&mut out, title, rows, name_width, width);
        }
    }
    if !report.condition_taints.is_empty() {
        out.push_str("\nCONDITION TAINT RULES\n");
    }
    for r in &report.condition_taints {
        let state = match (r.matches, r.tainted, r.action) {
            (_, _, Some(a)) => format!("matches={}, would {a} the taint", r.matches),
            (true, true, None) => "matches, taint on".to_string(),
            (false, false, None) => "does not match, no taint".to_string(),
            (false, true, None) => "does not match, taint kept (remove: never)".to_string(),
            (true, false, None) => "matches".to_string(),
        };
        let first = format!("  {} ({}): {state}", r.rule, r.taint);
        push_wrapped(&mut out, "", "    ", &first, width);
        push_wrapped(&mut out, "    ", "    ", &r.why, width);
    }
    out.push_str("\nTAINTS\n");
    for (kind, list) in [
        ("managed", &report.taints.managed),
        ("transient", &report.taints.transient),
        ("other", &report.taints.other),
    ] {
        let text = if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        };
        let first = format!("  {kind:<11}");
        let rest = " ".repeat(first.len());
        push_wrapped(&mut out, &first, &rest, &text, width);
    }
    out.push('\n');
    push_wrapped(&mut out, "GATE  ", "      ", &report.verdict, width);
    if let Some(r) = &report.regate {
        push_wrapped(&mut out, "REGATE  ", "        ", &r.verdict, width);
        for b in &r.broken {
            let counted = match b.counted_from {
                "pod_ready_condition" => "since its pod's Ready condition changed",
                _ => "counted from now: no pod to count from",
            };
            let line = format!(
                "{} broken for {} ({counted}): {}",
                b.member,
                human_age(b.broken_for_seconds),
                b.waiting
            );
            push_wrapped(&mut out, "  ", "    ", &line, width);
        }
    }
    if let Some(r) = &report.replace {
        let line = format!("owner {}: {}", r.owner, r.verdict);
        push_wrapped(&mut out, "REPLACE  ", "         ", &line, width);
    }
    out
}

/// What the header counts, in words: "DaemonSets", then each other kind of
/// member the node has ("DaemonSets, critical pods and node conditions").
fn member_kinds(report: &Report) -> String {
    let mut kinds = vec!["DaemonSets"];
    let others = other_members(report).into_iter();
    kinds.extend(others.filter_map(|(_, kind, rows)| (!rows.is_empty()).then_some(kind)));
    match kinds.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => kinds.join(""),
    }
}

/// The members other than DaemonSets, by kind: the table's title, the
/// header's word for them, the rows.
fn other_members(report: &Report) -> [(&'static str, &'static str, &[MemberRow]); 4] {
    [
        ("CRITICAL POD", "critical pods", &report.critical_pods),
        ("CONDITION", "node conditions", &report.conditions),
        ("DEVICE", "devices", &report.devices),
        ("CANARY", "the canary", &report.canary),
    ]
}

fn member_table(
    out: &mut String,
    title: &str,
    rows: &[MemberRow],
    name_width: usize,
    width: usize,
) {
    let lead = |name: &str, expected: &str, ready: &str| {
        format!("{name:<name_width$}{GAP}{expected:<8}{GAP}{ready:<5}{GAP}")
    };
    let header = lead(title, "EXPECTED", "READY");
    let indent = " ".repeat(header.chars().count());
    let why_width = width.saturating_sub(indent.len()).max(MIN_WHY_WIDTH);
    let _ = writeln!(out, "{header}WHY");
    for row in rows {
        let name = if row.label.chars().count() > name_width {
            let _ = writeln!(out, "{}", row.label);
            ""
        } else {
            row.label.as_str()
        };
        let expected = if row.expected { "yes" } else { "no" };
        let ready = match row.ready {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let first = lead(name, expected, ready);
        let mut prefix = first.as_str();
        for text in why_lines(row) {
            // An indented line (an affinity term) wraps with a hanging
            // indent so the next term stands out; plain text wraps flush.
            let extra = text.len() - text.trim_start().len();
            let hang = if extra > 0 { extra + 2 } else { 0 };
            let avail = why_width.saturating_sub(hang).max(MIN_WHY_WIDTH / 2);
            for (j, l) in wrap(text.trim_start(), avail).into_iter().enumerate() {
                let pad = " ".repeat(if j == 0 { extra } else { hang });
                let _ = writeln!(out, "{}", format!("{prefix}{pad}{l}").trim_end());
                prefix = indent.as_str();
            }
        }
    }
}

fn why_lines(row: &MemberRow) -> Vec<String> {
    match (&row.ready, &row.pod, &row.waiting) {
        _ if !row.expected && row.detail.is_empty() => vec![row.reason.clone()],
        _ if !row.expected => row.detail.clone(),
        (Some(true), Some(pod), _) => vec![format!("pod {pod} is Ready")],
        (_, _, Some(w)) => vec![w.clone()],
        _ => vec![String::new()],
    }
}

/// `first` before the first line, `rest` before the others.
fn push_wrapped(out: &mut String, first: &str, rest: &str, text: &str, width: usize) {
    let avail = width
        .saturating_sub(first.chars().count())
        .max(MIN_WHY_WIDTH);
    for (i, line) in wrap(text, avail).into_iter().enumerate() {
        let prefix = if i == 0 { first } else { rest };
        let _ = writeln!(out, "{prefix}{line}");
    }
}

/// Greedy word wrap. A word longer than `width` gets a line of its own
/// rather than being cut, so names and taints stay copyable.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// "45s", "3m12s", "2h5m", "3d4h": the two largest units are enough.
pub fn human_age(secs: i64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    }
}
