//! Re-gating's words (semantics.md §6.4): what is remembered of an open node
//! ([`Watched`]), why it is re-gated ([`Trigger`]), how it is doing
//! ([`Health`]) and its budget ([`budget_allows`]). Pure: time is an argument.

use jiff::{SignedDuration, Timestamp};

use crate::vocab::budget::MaxUnavailable;
use crate::vocab::config::RegateConfig;
use crate::vocab::model::NodeInfo;

/// The default `--regate-taint`: a managed taint, but never the startup
/// taint (autoscalers treat a startup taint that comes back as permanent).
pub const DEFAULT_REGATE_TAINT_KEY: &str = "nodegate.dev/degraded";

/// What is remembered about one open node between looks; empty for a
/// healthy node, which is then not remembered at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watched {
    /// The boot id it was first seen with (`--regate-on-reboot`).
    pub boot_id: Option<Box<str>>,
    /// (member, first seen broken) of broken members with no Ready condition
    /// to count from, sorted by member.
    pub missing_since: Vec<(Box<str>, Timestamp)>,
    /// A reboot seen and not yet acted on, (from, to): it stays due until
    /// the re-gate write is applied (the write may be refused by the budget,
    /// a conflict or leadership, and must be tried again).
    pub reboot: Option<(Box<str>, Box<str>)>,
    /// The opening (`opened-at`) whose broken members are excused, and those
    /// members: a node opened by its deadline or by hand was opened with
    /// them broken on purpose, and re-gating it for them would undo that.
    pub excused: Option<(Timestamp, Vec<Box<str>>)>,
}

impl Watched {
    pub fn is_empty(&self) -> bool {
        *self == Watched::default()
    }
}

/// Where the broken-since time of a member comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// The `lastTransitionTime` of its pod's Ready condition (cluster time:
    /// a restart of nodegate does not reset it).
    PodCondition,
    /// When nodegate first saw the member without a Ready pod (no pod, or a
    /// pod without a Ready condition to count from).
    FirstSeen,
}

/// An expected member without a Ready pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The DaemonSet, `namespace/name`.
    pub member: String,
    pub since: Timestamp,
    pub source: Since,
    /// What it waits for, in the gate's words.
    pub waiting: String,
}

impl Broken {
    pub fn broken_for(&self, now: Timestamp) -> SignedDuration {
        now.duration_since(self.since)
    }
}

/// Why a node is re-gated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// These members have had no Ready pod for the grace or longer.
    Members(Vec<Broken>),
    /// `status.nodeInfo.bootID` changed (`--regate-on-reboot`).
    Reboot { from: String, to: String },
    /// A reboot is announced and has not happened yet
    /// (`--reboot-announcements`, semantics.md §6.10).
    Announced(reboot::Announcement),
}

impl Trigger {
    /// The `nodegate.dev/regated-for` annotation: the members, comma
    /// separated, or `reboot`.
    pub fn annotation(&self) -> String {
        match self {
            Trigger::Members(m) => {
                let members: Vec<&str> = m.iter().map(|b| b.member.as_str()).collect();
                members.join(",")
            }
            Trigger::Reboot { .. } => "reboot".to_string(),
            Trigger::Announced(a) => format!("{}{}", reboot::REGATED_FOR_PREFIX, a.source),
        }
    }

    /// The metric label: `members`, `reboot` or `announced`.
    pub fn kind(&self) -> &'static str {
        match self {
            Trigger::Members(_) => "members",
            Trigger::Reboot { .. } => "reboot",
            Trigger::Announced(_) => "announced",
        }
    }

    /// Whether acting on it goes around the budgets: only an announcement
    /// from an orchestrator that bounds its own disruption.
    pub fn bypasses_budget(&self) -> bool {
        matches!(self, Trigger::Announced(a) if a.source.bypasses_budget())
    }
}

/// Why an open node is not watched at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotWatched {
    /// `--regate-after` is 0.
    Off,
    /// Outside `--node-selector`.
    OutOfScope,
    /// Annotated `nodegate.dev/ignore: "true"`.
    Ignored,
    /// It carries a managed taint: its gate is in charge.
    Gated,
    /// Its own Ready condition is not True: the node lifecycle controller
    /// taints such a node itself.
    NodeNotReady,
}

/// [`examine`](crate::closing::regating::health::examine)'s verdict for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    NotWatched(NotWatched),
    /// Every expected member that tolerates the re-gate taint is Ready.
    Healthy,
    /// Some are broken, none for the whole grace yet; look again at
    /// `regate_at`.
    Broken {
        members: Vec<Broken>,
        regate_at: Timestamp,
    },
    /// Re-gate the node now (if the budget allows).
    Regate(Trigger),
}

/// Whether `node` carries the re-gate taint.
pub fn carries(node: &NodeInfo, rc: &RegateConfig) -> bool {
    node.taints.iter().any(|t| rc.taint.matches(t))
}

/// The budget: whether one more node may carry the re-gate taint, with
/// `in_use` of the `managed` nodes already carrying it.
pub fn budget_allows(rc: &RegateConfig, managed: usize, in_use: usize) -> Result<(), Exhausted> {
    if rc.max_unavailable.room(managed, in_use) > 0 {
        Ok(())
    } else {
        Err(Exhausted {
            allowed: rc.max_unavailable.allowed(managed),
            in_use,
            managed,
            max_unavailable: rc.max_unavailable,
            total: false,
        })
    }
}

/// The budget is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub allowed: usize,
    pub in_use: usize,
    pub managed: usize,
    pub max_unavailable: MaxUnavailable,
    /// The cap on all nodes nodegate keeps closed (`--max-unavailable`),
    /// rather than re-gating's own budget.
    pub total: bool,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.total {
            return write!(
                f,
                "{} of the {} nodes --max-unavailable {} lets nodegate keep closed ({} managed nodes) are already re-gated or carry a condition rule's taint",
                self.in_use, self.allowed, self.max_unavailable, self.managed
            );
        }
        write!(
            f,
            "{} of the {} re-gated nodes --regate-max-unavailable {} allows ({} managed nodes) are already re-gated",
            self.in_use, self.allowed, self.max_unavailable, self.managed
        )
    }
}

/// Words for an Event and the log: each member, what it waits for and how
/// long it has been broken.
pub fn describe(members: &[Broken], now: Timestamp) -> String {
    members
        .iter()
        .map(|b| {
            let (member, waiting) = (&b.member, &b.waiting);
            format!(
                "{member} ({waiting}; for {}s)",
                b.broken_for(now).as_secs().max(0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub mod decider;
pub mod health;
pub mod reboot;
pub mod report;

#[cfg(test)]
mod tests;
