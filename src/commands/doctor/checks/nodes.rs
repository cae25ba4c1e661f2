//! Nodes that carry one of nodegate's taints with no live gate behind it:
//! outside `--node-selector` (nodegate never opens them), gated while no
//! replica holds the Lease, gated longer than their deadline plus a margin
//! (a running gate would have acted), or kept closed at their deadline by
//! `--on-timeout=keep`.

use std::time::Duration;

use jiff::Timestamp;
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::vocab::model::{Labels, Taint};

use crate::commands::doctor::report::{Check, Name};
use crate::settings::config::RunSettings;

pub const CHECK: Name = Name("nodes");

/// How long past its deadline a gated node may still be, before the doctor
/// says no gate holds it (the gate acts within seconds of its deadline).
pub const MARGIN: Duration = Duration::from_secs(60);

/// Problem lines before the rest are counted in one.
pub const MAX_NAMED: usize = 20;

/// What the doctor reads of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSeen {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub created: Option<Timestamp>,
    /// `nodegate.dev/gated-since`.
    pub gated_since: Option<Timestamp>,
    /// `nodegate.dev/timed-out` is there.
    pub timed_out: bool,
    /// `nodegate.dev/suspend: "true"`.
    pub suspended: bool,
}

/// Every node carrying a managed taint; `leader`: whether a live leader
/// holds the Lease (`None`: no leader election to judge by).
pub fn check(
    s: &RunSettings,
    nodes: &[NodeSeen],
    leader: Option<bool>,
    now: Timestamp,
) -> Vec<Check> {
    let managed = &s.gate.placement.managed_taints;
    let gated: Vec<(&NodeSeen, &ManagedTaint)> = nodes
        .iter()
        .filter_map(|n| {
            let t = managed
                .iter()
                .find(|m| n.taints.iter().any(|t| m.matches(t)))?;
            Some((n, t))
        })
        .collect();
    let problems = gated.iter().filter_map(|(n, t)| node(s, n, t, leader, now));
    let mut problems: Vec<Check> = problems.collect();
    if problems.is_empty() {
        return vec![CHECK.ok(
            "gated nodes",
            format!(
                "{} node(s) carry a managed taint, each with a live gate",
                gated.len()
            ),
        )];
    }
    if problems.len() > MAX_NAMED {
        let rest = problems.len() - MAX_NAMED;
        problems.truncate(MAX_NAMED);
        problems.push(CHECK.problem(
            format!("{rest} more node(s)"),
            "as above",
            "nodegate doctor -o json lists every one",
        ));
    }
    problems
}

/// A problem with this gated node, if any.
fn node(
    s: &RunSettings,
    n: &NodeSeen,
    t: &ManagedTaint,
    leader: Option<bool>,
    now: Timestamp,
) -> Option<Check> {
    let subject = format!("node {}", n.name);
    let explain = format!("kubectl nodegate explain {}", n.name);
    if !s.gate.scope.includes(&n.labels) {
        return Some(CHECK.problem(
            subject,
            format!("carries {t} but is outside --node-selector: nodegate never opens it"),
            format!(
                "remove the taint (kubectl taint node {} {}:{}-), or widen --node-selector to \
                 include it",
                n.name, t.key, t.effect
            ),
        ));
    }
    if n.suspended {
        return None;
    }
    if leader == Some(false) {
        return Some(CHECK.problem(
            subject,
            format!("carries {t} while no replica holds the Lease: nothing opens it"),
            "bring a nodegate replica back (see the leader check)",
        ));
    }
    if n.timed_out {
        return Some(CHECK.problem(
            subject,
            format!("kept closed at its deadline (--on-timeout=keep): carries {t}"),
            format!(
                "{explain} says what it waits for; open it by hand with kubectl annotate node {} \
                 nodegate.dev/open=true",
                n.name
            ),
        ));
    }
    // The deadline of a node carrying `t`: `--regate-timeout` for the re-gate
    // taint (counted from gated-since), else `--timeout`.
    let timeout = match s.gate.regate.as_ref().filter(|r| r.taint == *t) {
        Some(r) => r.timeout?,
        None => s.timeout?,
    };
    let since = n.gated_since.or(n.created)?;
    let age = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    (age > timeout + MARGIN).then(|| {
        CHECK.problem(
            subject,
            format!(
                "gated for {} with {t}, past its {} deadline: no live gate holds it",
                humantime::format_duration(Duration::from_secs(age.as_secs())),
                humantime::format_duration(timeout)
            ),
            format!(
                "check that nodegate runs and manages this node (its --taint and \
                 --node-selector), and its logs; {explain}"
            ),
        )
    })
}
