//! The configuration, [`Config`], one part per feature: on the floor, so that
//! every feature reads its settings without importing another.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rules::conditions::CriticalCondition;
use crate::rules::conditions::taints::ConditionTaintRule;
use crate::rules::devices::{CriticalResource, DraDriver};
use crate::rules::placement::{ManagedTaint, PlacementConfig};
use crate::rules::readiness::CriticalPodEntry;
use crate::rules::selector::LabelSelector;
use crate::rules::startup::StartupTaints;
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::model::{Fallback, Labels, NodeInfo};
use crate::vocab::words::word_enum;

word_enum! {
    /// What a gate does when its deadline passes with members still not Ready;
    /// its word is what `--on-timeout` and the config file's `onTimeout`
    /// take, its variants in the order the command line lists them.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum OnTimeout {
        /// Remove the taint anyway (the default): a broken DaemonSet must not keep
        /// a node closed for ever.
        #[default]
        Open = "open",
        /// Leave the taint and mark the node `nodegate.dev/timed-out`; the gate
        /// still opens if every member later becomes Ready.
        Keep = "keep",
        /// As `Keep`, and the leader asks the node's owner to replace it
        /// (semantics.md §5.8, [`crate::closing::replacing`]).
        Replace = "replace",
    }
    else "an action: use open, keep or replace"
}

impl OnTimeout {
    /// Whether the taint stays at the deadline (`keep`, `replace`).
    pub fn keeps(self) -> bool {
        matches!(self, OnTimeout::Keep | OnTimeout::Replace)
    }
}

/// Which nodes nodegate manages at all (`--node-selector`): every entrance and
/// the gate itself leave the others alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// `None`: every node.
    pub node_selector: Option<LabelSelector>,
}

impl Scope {
    pub fn includes(&self, labels: &Labels) -> bool {
        self.node_selector
            .as_ref()
            .is_none_or(|s| s.matches(labels))
    }
}

/// The default `--timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The settings every gate shares, built once from flags and the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `--node-selector`: a node outside it is never gated, whatever its taints.
    pub scope: Scope,
    pub placement: PlacementConfig,
    /// Which startup taint an entrance adds to a node (`--taint-for`,
    /// `--autoscaler`); every taint it can choose is among
    /// `placement.managed_taints`.
    pub startup: StartupTaints,
    pub critical: Vec<CriticalPodEntry>,
    /// `criticalConditions`: node conditions waited for like members
    /// (semantics.md §6.5).
    pub conditions: Vec<CriticalCondition>,
    /// `conditionTaints`: rules that put a taint on managed nodes matching
    /// conditions (semantics.md §6.5). Not read by the gates; carried here
    /// so that the rules are reloaded with the rest of the configuration.
    pub condition_taints: Vec<ConditionTaintRule>,
    /// `criticalResources`: extended resources the node must report
    /// allocatable, waited for like members (semantics.md §6.8).
    pub resources: Vec<CriticalResource>,
    /// `draDrivers`: DRA drivers whose ResourceSlice pools for the node
    /// must be complete, waited for like members (semantics.md §6.8).
    pub dra_drivers: Vec<DraDriver>,
    /// `None` means no deadline (`--timeout 0`).
    pub timeout: Option<Duration>,
    /// `--schedule-timeout`: the earlier deadline for members that never
    /// got a pod on the node (semantics.md §5.2); `None`: off.
    pub schedule_timeout: Option<Duration>,
    pub on_timeout: OnTimeout,
    pub dry_run: bool,
    /// `suspend: true` in the config file: every gate decides and journals
    /// but writes nothing (semantics.md §6.6).
    pub suspend: bool,
    /// `--regate-after` and friends; `None`: open nodes are never re-gated.
    pub regate: Option<RegateConfig>,
    /// `--max-unavailable`: the most managed nodes nodegate keeps closed at
    /// once on its own initiative ([`crate::deciders::closed_by_nodegate`]);
    /// `None`: no cap beyond each one's own budget.
    pub max_unavailable: Option<MaxUnavailable>,
    /// `--node-condition`: the leader writes the `nodegate.dev/Open` condition
    /// on each node it gates ([`crate::gate::open_condition`]).
    pub node_condition: bool,
    /// `--reboot-announcements` and friends: re-gating before an announced
    /// reboot (semantics.md §6.10). Off by default.
    pub reboots: AnnouncedReboots,
    /// `--replace-*`: the budget and fallback of `--on-timeout=replace`
    /// (semantics.md §5.8); read only with that action.
    pub replace: ReplaceConfig,
    /// `canary`: every gated node waits for a canary pod nodegate runs on
    /// it (semantics.md §6.9); `None`: off.
    pub canary: Option<CanaryConfig>,
}

impl Config {
    /// Whether `node` is gated: inside `--node-selector` and carrying at
    /// least one managed taint. The one definition every user shares.
    pub fn gates(&self, node: &NodeInfo) -> bool {
        self.scope.includes(&node.labels)
            && node.taints.iter().any(|t| self.placement.is_managed(t))
    }

    /// The deadline of `node`'s gate: for a node that carries only the
    /// re-gate taint (it was open and broke), `--regate-timeout` or, awaiting
    /// an announced reboot, `--reboot-timeout`; else `--timeout`.
    pub fn timeout_for(&self, node: &NodeInfo) -> Option<Duration> {
        match &self.regate {
            Some(rc) if self.regated(node, rc) => match self.reboots.timeout {
                Some(t) if node.awaiting_reboot.is_some() => Some(t),
                _ => rc.timeout,
            },
            _ => self.timeout,
        }
    }

    /// Whether the node carries the re-gate taint and no other managed taint.
    fn regated(&self, node: &NodeInfo, rc: &RegateConfig) -> bool {
        let managed = node.taints.iter().filter(|t| self.placement.is_managed(t));
        let mut managed = managed.peekable();
        managed.peek().is_some() && managed.all(|t| rc.taint.matches(t))
    }
}

impl Default for Config {
    /// The defaults `nodegate run` documents.
    fn default() -> Self {
        Config {
            scope: Scope::default(),
            placement: PlacementConfig::default(),
            startup: StartupTaints::default(),
            critical: Vec::new(),
            conditions: Vec::new(),
            condition_taints: Vec::new(),
            resources: Vec::new(),
            dra_drivers: Vec::new(),
            timeout: Some(DEFAULT_TIMEOUT),
            schedule_timeout: None,
            on_timeout: OnTimeout::Open,
            dry_run: false,
            suspend: false,
            regate: None,
            max_unavailable: None,
            node_condition: false,
            reboots: AnnouncedReboots::default(),
            replace: ReplaceConfig::default(),
            canary: None,
        }
    }
}

/// `--regate-*`, present only when `--regate-after` is not zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegateConfig {
    /// The grace: how long a member may have no Ready pod before the node is
    /// re-gated. Never zero.
    pub after: Duration,
    pub taint: ManagedTaint,
    /// A re-gated node's deadline; `None`: it stays closed until its members
    /// are Ready.
    pub timeout: Option<Duration>,
    pub on_reboot: bool,
    pub max_unavailable: MaxUnavailable,
}

word_enum! {
    /// Where an announcement comes from; its word is the name
    /// `--reboot-announcements` takes, its variants in the order they are
    /// looked at.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Source {
        /// kured's reboot lock names the node (`weave.works/kured-node-lock` on
        /// kured's DaemonSet). kured holds it from before the drain until the
        /// node is back, and lets at most `--concurrency` nodes (1 by default)
        /// hold it: kured bounds the disruption, so this source is not counted
        /// against `--regate-max-unavailable`.
        KuredLock = "kured-lock",
        /// `nodegate.dev/reboot-pending` on the node, set by a person or a
        /// script: within the budget.
        Annotation = "annotation",
        /// kured's `weave.works/kured-reboot-in-progress` on the node
        /// (`--annotate-nodes`). kured sets it before it waits for its lock, so
        /// every node needing a reboot may carry it at once: within the budget.
        KuredAnnotation = "kured-annotation",
    }
    else "a reboot announcement source: use annotation, kured-lock or kured-annotation"
}

impl Source {
    /// Whether a re-gate for this source goes around `--regate-max-unavailable`
    /// and `--max-unavailable`: only where the orchestrator itself bounds how
    /// many nodes reboot at once.
    pub fn bypasses_budget(self) -> bool {
        matches!(self, Source::KuredLock)
    }
}

/// `--reboot-announcements` and friends. Off (no source) by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnnouncedReboots {
    /// The sources listened to, sorted, without duplicates.
    pub sources: Vec<Source>,
    /// kured's DaemonSet, `namespace/name` (`--kured-daemonset`), where its
    /// lock is read with [`Source::KuredLock`].
    pub kured_daemonset: String,
    /// `--kured-max-holders`: most holders of kured's lock believed at once
    /// (at least 1), whatever the lock itself says; the lock's own
    /// `maxOwners` caps them too.
    pub kured_max_holders: u32,
    /// The deadline of a gate waiting for an announced reboot, from the
    /// taint (`--reboot-timeout`); `None`: `--regate-timeout`'s.
    pub timeout: Option<Duration>,
}

/// The default `--kured-daemonset`: kured's own default `--ds-namespace`
/// and `--ds-name`.
pub const DEFAULT_KURED_DAEMONSET: &str = "kube-system/kured";

/// The default `--reboot-timeout`: a drain, a reboot and the node agents
/// starting again fit in it.
pub const DEFAULT_REBOOT_TIMEOUT: Duration = Duration::from_secs(3600);

impl AnnouncedReboots {
    pub fn listens_to(&self, source: Source) -> bool {
        self.sources.contains(&source)
    }
}

/// `--replace-*`: the budget and the fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaceConfig {
    /// At most this many requests per [`interval`](Self::interval),
    /// cluster-wide (`--replace-budget`).
    pub budget: u32,
    pub interval: Duration,
    /// At most this many requested nodes still existing
    /// (`--replace-in-flight`).
    pub in_flight: u32,
    pub fallback: Fallback,
    /// A member failing on more than this of the nodes it is judged on is
    /// broken cluster-wide (`--replace-breakage`; see
    /// [`crate::closing::replacing::Spread::broken`]).
    pub breakage: MaxUnavailable,
}

impl Default for ReplaceConfig {
    fn default() -> Self {
        ReplaceConfig {
            budget: 2,
            interval: Duration::from_secs(600),
            in_flight: 2,
            fallback: Fallback::Keep,
            breakage: MaxUnavailable::Percent(20),
        }
    }
}

/// The default cap on canaries in flight cluster-wide.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 50;

/// The `canary` key, as the gates and the canary decider need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryConfig {
    /// nodegate's own namespace: the only one whose pods can be canaries.
    pub namespace: String,
    /// A readiness probe is configured: the pod must also be Ready.
    pub probe: bool,
    /// The most canary pods that exist at once, cluster-wide.
    pub max_in_flight: usize,
}
