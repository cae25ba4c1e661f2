//! Builders and a replay-checking harness shared by the gate and actor tests.
#![allow(dead_code)] // each test crate uses a different part

use std::time::Duration;

use jiff::Timestamp;
use nodegate_core::gate::journal::{Journal, replay};
use nodegate_core::gate::{
    Effect, Event, EventType, GateState, Input, NodeEvent, Step, UntaintPatch, derive_members, step,
};
use nodegate_core::rules::placement::PlacementConfig;
use nodegate_core::testutil::{
    mk_ds, mk_node, mk_pod, taint, template_with_tolerations, toleration, ts,
};
use nodegate_core::vocab::config::{Config, OnTimeout};
use nodegate_core::vocab::member::MemberId;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo, PodPlacement, Taint};

pub const NODE: &str = "node-a";
pub const MANAGED_KEY: &str = "nodegate.dev/initializing";

pub fn managed() -> Taint {
    taint(MANAGED_KEY, "NoSchedule")
}

/// Defaults as the binary ships them: 120 s, open on timeout.
pub fn cfg() -> Config {
    let c = Config::default();
    assert_eq!(c.timeout, Some(Duration::from_secs(120)));
    assert_eq!((c.on_timeout, c.dry_run), (OnTimeout::Open, false));
    assert_eq!(c.placement, PlacementConfig::default());
    c
}

/// `node-a`, created at the epoch, labelled zone=a, with these taints.
pub fn node(taints: Vec<Taint>) -> NodeInfo {
    mk_node(NODE, &[("zone", "a")], taints)
}

pub fn gated_node() -> NodeInfo {
    node(vec![managed()])
}

/// The member id of the DaemonSet `kube-system/NAME`.
pub fn ds_member(name: &str) -> MemberId {
    MemberId::DaemonSet(format!("kube-system/{name}"))
}

/// A DaemonSet that tolerates everything (as CNI agents do).
pub fn tolerant_ds(name: &str) -> DaemonSetInfo {
    mk_ds(
        "kube-system",
        name,
        template_with_tolerations(vec![toleration("", "Exists", "", "")]),
    )
}

/// A DaemonSet with no tolerations: it cannot start until the gate opens.
pub fn intolerant_ds(name: &str) -> DaemonSetInfo {
    mk_ds("kube-system", name, PodPlacement::default())
}

/// A tolerant DaemonSet that only runs on nodes labelled role=gpu.
pub fn gpu_ds(name: &str) -> DaemonSetInfo {
    let mut ds = tolerant_ds(name);
    ds.template
        .node_selector
        .insert("role".to_string().into(), "gpu".to_string().into());
    ds
}

pub fn ready_pod(name: &str, ds: &DaemonSetInfo) -> PodInfo {
    mk_pod(name, NODE, &ds.uid)
}

pub fn unready_pod(name: &str, ds: &DaemonSetInfo) -> PodInfo {
    PodInfo {
        ready: false,
        ready_since: Default::default(),
        ..mk_pod(name, NODE, &ds.uid)
    }
}

pub fn pending_pod(name: &str, ds: &DaemonSetInfo) -> PodInfo {
    PodInfo {
        phase: "Pending".into(),
        ready: false,
        ready_since: Default::default(),
        ..mk_pod(name, NODE, &ds.uid)
    }
}

/// A gate (defaults: [`cfg`]) on [`gated_node`], started at 1 s with one
/// member, the tolerant DaemonSet `cilium`, whose pod `cilium-1` is Ready;
/// with that DaemonSet and the first step (which decides to open).
pub fn ready_cilium_gate() -> (Gate, DaemonSetInfo, Step) {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    (g, a, step)
}

/// One gate driven by hand: every step is journalled and the journal's
/// replay is checked against the live state after every input.
pub struct Gate {
    pub state: GateState,
    pub cfg: Config,
    pub journal: Journal,
    pub now: Timestamp,
}

impl Gate {
    pub fn new(cfg: Config) -> Self {
        Gate {
            state: GateState::default(),
            cfg,
            journal: Journal::new(10_000),
            now: ts(0),
        }
    }

    pub fn with_journal(mut self, journal: Journal) -> Self {
        self.journal = journal;
        self
    }

    /// Moves the clock to `secs` after the epoch.
    pub fn at(&mut self, secs: i64) -> &mut Self {
        self.now = ts(secs);
        self
    }

    pub fn feed(&mut self, input: Input) -> Step {
        let step = step(&mut self.state, &input, &self.cfg, self.now);
        for ev in &step.events {
            self.journal.record(self.now, ev.clone());
        }
        assert_eq!(
            replay(&self.journal),
            self.state,
            "journal replay diverged after {input:?}"
        );
        assert_members_derived(&self.state, &input, &self.cfg, self.now);
        step
    }

    pub fn start(
        &mut self,
        node: NodeInfo,
        daemonsets: Vec<DaemonSetInfo>,
        pods: Vec<PodInfo>,
    ) -> Step {
        self.feed(Input::snapshot(node, daemonsets, pods))
    }
}

pub fn patches(step: &Step) -> Vec<&UntaintPatch> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::RemoveTaints(p) => Some(p),
            _ => None,
        })
        .collect()
}

pub fn recorded(step: &Step) -> Vec<&NodeEvent> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::RecordEvent(ev) => Some(ev),
            _ => None,
        })
        .collect()
}

/// Asserts that `step` records exactly one Kubernetes Event, of this type
/// and reason, whose note contains every one of `fragments`; returns it.
pub fn assert_event<'a>(
    step: &'a Step,
    type_: EventType,
    reason: &str,
    fragments: &[&str],
) -> &'a NodeEvent {
    let ev = recorded(step);
    assert_eq!(ev.len(), 1, "{ev:#?}");
    assert_eq!((ev[0].type_, ev[0].reason.as_str()), (type_, reason));
    for fragment in fragments {
        assert!(
            ev[0].note.contains(fragment),
            "{fragment:?} not in {}",
            ev[0].note
        );
    }
    ev[0]
}

pub fn writes(step: &Step) -> usize {
    step.effects
        .iter()
        .filter(|e| matches!(e, Effect::RemoveTaints(_) | Effect::MarkTimedOut(_)))
        .count()
}

pub fn has_event(step: &Step, pred: impl Fn(&Event) -> bool) -> bool {
    step.events.iter().any(pred)
}

pub fn stops(step: &Step) -> bool {
    step.effects.iter().any(|e| matches!(e, Effect::Stop(_)))
}

/// An input that reports what the cluster looks like (as opposed to a
/// timer, a write's result or the leadership).
pub fn is_observation(input: &Input) -> bool {
    matches!(
        input,
        Input::Snapshot { .. }
            | Input::NodeChanged(_)
            | Input::DaemonSetUpserted(_)
            | Input::DaemonSetDeleted { .. }
            | Input::PodUpserted(_)
            | Input::PodDeleted { .. }
            | Input::Reexamine { .. }
    )
}

/// After an observation the gate re-derives only the members the input can
/// have changed; the result must be what deriving every member from scratch
/// gives. (Once the gate is finished, or while its taint is gone, it stops
/// deriving members, so there is nothing to compare.)
pub fn assert_members_derived(state: &GateState, input: &Input, cfg: &Config, now: Timestamp) {
    let observation = is_observation(input);
    let gated = state
        .node
        .as_ref()
        .is_some_and(|n| n.taints.iter().any(|t| cfg.placement.is_managed(t)));
    if observation && gated && !state.is_finished() {
        assert_eq!(
            state.members,
            derive_members(state, cfg, now),
            "members differ from a full derivation after {input:?}"
        );
    }
}
