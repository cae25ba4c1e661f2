//! Replacing a node whose gate timed out (`--on-timeout=replace`,
//! semantics.md §5.8): the rules the replace decider applies, as plain
//! functions.

use std::fmt;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::vocab::budget::MaxUnavailable;
use crate::vocab::config::ReplaceConfig;
use crate::vocab::model::{DaemonSetInfo, Fallback, NodeInfo, Owner, PodInfo};

/// When this node's gate started: `gated-since`, or the node's creation.
pub fn gate_start(node: &NodeInfo) -> Timestamp {
    node.gated_since.unwrap_or(node.created)
}

/// The fallback recorded on the node for its current gate, if any (one
/// from an earlier gate, before a re-gate, does not count).
pub fn fallback(node: &NodeInfo) -> Option<Fallback> {
    node.replace
        .fallback
        .filter(|(_, at)| *at >= gate_start(node))
        .map(|(f, _)| f)
}

/// How a member fares across the cluster: on how many nodes it is judged
/// (a DaemonSet: where it has a pod or is expected; any other member: the
/// gated nodes that expect it), on how many of those it is not Ready, and
/// on how many due nodes (timed out, nothing recorded yet) it is what they
/// wait for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spread {
    pub failing: usize,
    pub nodes: usize,
    pub due: usize,
}

impl Spread {
    /// Counts one node's pods of `ds` (pods being deleted left out): no
    /// pod, nothing; a pod, one node; none Ready, a failing one.
    pub fn count<'a>(&mut self, ds: &DaemonSetInfo, pods: impl IntoIterator<Item = &'a PodInfo>) {
        let mut ours = pods
            .into_iter()
            .filter(|p| p.controlled_by(ds) && !p.terminating)
            .peekable();
        if ours.peek().is_some() {
            self.nodes += 1;
            self.failing += usize::from(!ours.any(|p| p.ready));
        }
    }

    /// One node where the DaemonSet is expected but has no pod: failing.
    pub fn missing(&mut self) {
        self.nodes += 1;
        self.failing += 1;
    }

    /// Broken cluster-wide: failing on at least two nodes, and on more than
    /// `threshold` of the nodes it is judged on, or what at least two due
    /// nodes wait for (replacing them one by one would only churn). A
    /// threshold that allows every node (`100%`) judges nothing broken.
    /// Replacing a node cannot fix a member that fails everywhere.
    pub fn broken(self, threshold: MaxUnavailable) -> bool {
        let allowed = threshold.allowed(self.nodes);
        self.failing >= 2 && (self.failing > allowed || (self.due >= 2 && allowed < self.nodes))
    }
}

impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not Ready on {} of the {} nodes it has a pod on or is expected on",
            self.failing, self.nodes
        )?;
        if self.due >= 2 {
            write!(f, "; {} nodes past their deadline wait for it", self.due)?;
        }
        Ok(())
    }
}

/// The budget used: requests in the interval, and requested nodes still
/// there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    pub recent: usize,
    pub in_flight: usize,
}

/// Why the budget refuses one more request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// `--replace-budget` requests already in the last `--replace-interval`.
    Rate {
        recent: usize,
        budget: u32,
        interval: Duration,
    },
    /// `--replace-in-flight` requested nodes still exist.
    InFlight { in_flight: usize, limit: u32 },
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exhausted::Rate {
                recent,
                budget,
                interval,
            } => write!(
                f,
                "{recent} replacements requested in the last {} (--replace-budget {budget} per --replace-interval)",
                humantime(*interval)
            ),
            Exhausted::InFlight { in_flight, limit } => write!(
                f,
                "{in_flight} nodes asked to be replaced still exist (--replace-in-flight {limit})"
            ),
        }
    }
}

fn humantime(d: Duration) -> String {
    SignedDuration::try_from(d).map_or_else(|_| format!("{d:?}"), |s| format!("{s:#}"))
}

/// Whether one more request fits the budget.
pub fn budget_allows(rc: &ReplaceConfig, used: Used) -> Result<(), Exhausted> {
    if used.in_flight >= rc.in_flight as usize {
        return Err(Exhausted::InFlight {
            in_flight: used.in_flight,
            limit: rc.in_flight,
        });
    }
    if used.recent >= rc.budget as usize {
        return Err(Exhausted::Rate {
            recent: used.recent,
            budget: rc.budget,
            interval: rc.interval,
        });
    }
    Ok(())
}

/// The `nodegate.dev/replace-reason` of a request: the owner and what the
/// node waits for.
pub fn reason(owner: &Owner, waiting: &[String]) -> String {
    let what: String = match owner {
        Owner::None => "no owner known: cordoned for the cluster-autoscaler or a person".into(),
        Owner::NodeClaim => "its Karpenter NodeClaim deleted".into(),
        Owner::Machine { namespace, name } => {
            format!("its Cluster API Machine {namespace}/{name} deleted")
        }
    };
    if waiting.is_empty() {
        format!("deadline passed with the node itself not Ready; {what}")
    } else {
        format!("deadline passed waiting for {}; {what}", waiting.join(", "))
    }
}

pub mod decider;
pub mod report;

#[cfg(test)]
mod tests;
