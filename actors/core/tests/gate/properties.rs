//! Properties of the pure gate over random input sequences: the journal
//! replays to the live state (also when bounded), writes are only ever the
//! managed taints at their exact index and only when the gate may open,
//! dry-run never writes, one write at a time, and observing the same thing
//! twice changes nothing; a kept timeout is marked and reported once, and
//! not over a mark another replica wrote.

use std::time::Duration;

use crate::gate_support::*;
use jiff::Timestamp;
use nodegate_core::gate::journal::{Journal, replay};
use nodegate_core::gate::{
    Effect, GateState, Input, OpenedBy, PatchOutcome, Phase, StopReason, TimerKind, WriteStatus,
    annotation_time, decide, step,
};
use nodegate_core::rules::conditions::CriticalCondition;
use nodegate_core::rules::devices::CriticalResource;
use nodegate_core::rules::readiness::CriticalPodEntry;
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::testutil::{mk_pod, taint, ts};
use nodegate_core::vocab::config::OnTimeout;
use nodegate_core::vocab::model::{
    DaemonSetInfo, NodeCondition, NodeInfo, NodeReady, OpenedByMark, PodInfo,
};
use proptest::prelude::*;

fn daemonsets() -> Vec<DaemonSetInfo> {
    let mut slow = tolerant_ds("slow");
    slow.min_ready_seconds = 10;
    vec![
        tolerant_ds("cilium"),
        gpu_ds("nvidia"),
        intolerant_ds("web"),
        slow,
    ]
}

fn node_variant(labels: u8, taints: u8, version: u8) -> NodeInfo {
    let mut n = node(match taints % 4 {
        0 => vec![managed()],
        1 => vec![taint("example.com/foreign", "NoSchedule"), managed()],
        2 => vec![
            managed(),
            taint("node.kubernetes.io/not-ready", "NoSchedule"),
        ],
        _ => vec![],
    });
    if labels % 2 == 1 {
        n.labels.insert("role".into(), "gpu".into());
    }
    // Some versions without the taint carry an `opened-at`: one the gate
    // did not write, or (`LOST_PATCH`, filled in by `as_left_by_lost_patch`)
    // the one its latest unanswered patch wrote (semantics.md §5.5).
    if taints % 4 == 3 {
        n.opened_at = match version % 4 {
            0 => None,
            // The one the opening at 1s left, before the taint came back.
            1 => Some(ts(1)),
            2 => Some(ts(i64::from(version))),
            _ => Some(LOST_PATCH),
        };
    } else if version % 5 == 4 {
        // Gated again after an opening at 1s (the taint came back).
        n.opened_at = Some(ts(1));
    }
    // An `opened-by` of nodegate's with some: another replica's untaint
    // when its `opened-at` is new to the gate, else an old opening's; an
    // `external` mark with a few (someone else's removal a gate recorded).
    if n.opened_at.is_some() {
        n.opened_by = match version % 8 {
            4.. => Some(OpenedByMark::Nodegate(OpenedBy::Ready)),
            3 => Some(OpenedByMark::External),
            _ => None,
        };
    }
    // Some versions are of a node that is not Ready (semantics.md §5.1).
    match (labels / 2) % 8 {
        6 => n.ready = NodeReady::Unknown,
        7 => n.ready = NodeReady::False,
        _ => {}
    }
    // What the node reports of itself varies with the version too: the
    // condition and resource members ([`node_member_entries`]) read it, the
    // DaemonSets and critical entries do not.
    match version % 3 {
        0 => {}
        v => {
            let status = if v == 1 { "True" } else { "False" };
            n.conditions.insert(
                "NetworkReady".into(),
                NodeCondition {
                    status: status.into(),
                    since: None,
                },
            );
        }
    }
    if (version / 3) % 2 == 1 {
        n.extended_allocatable
            .insert("example.com/gpu".into(), "1".into());
    }
    // Some versions carry a timeout mark: one of another deadline, or
    // (`THIS_MARK`, filled in by `as_left_by_lost_patch`) the gate's own
    // deadline's, as another replica or this one before a restart wrote it.
    n.replace.timed_out = match version % 7 {
        5 => Some(ts(3)),
        6 => Some(THIS_MARK),
        _ => None,
    };
    n.resource_version = version.to_string();
    n
}

/// A condition every node waits for, and a resource only GPU nodes do.
fn node_member_entries() -> (Vec<CriticalCondition>, Vec<CriticalResource>) {
    let gpu = LabelSelector {
        match_labels: [("role".to_string(), "gpu".to_string())].into(),
        ..Default::default()
    };
    (
        vec![CriticalCondition {
            type_: "NetworkReady".into(),
            status: "True".into(),
            node_selector: None,
        }],
        vec![CriticalResource {
            resource: "example.com/gpu".into(),
            node_selector: Some(gpu),
        }],
    )
}

/// Stands for "the `opened-at` of the gate's latest unanswered patch" in a
/// generated node; see [`as_left_by_lost_patch`].
const LOST_PATCH: Timestamp = Timestamp::MIN;

/// Stands for "the timeout mark of the gate's deadline" in a generated
/// node; see [`as_left_by_lost_patch`].
const THIS_MARK: Timestamp = Timestamp::MAX;

/// `input` with a node carrying [`LOST_PATCH`] given the `opened-at` the
/// gate's latest unanswered patch wrote (none if it has none): the node as
/// that patch left it, had the API server applied it.
fn as_left_by_lost_patch(input: Input, state: &GateState) -> Input {
    let fill = |mut n: NodeInfo| {
        if n.opened_at == Some(LOST_PATCH) {
            n.opened_at = state.unanswered.last().map(|u| u.opened_at);
        }
        if n.replace.timed_out == Some(THIS_MARK) {
            n.replace.timed_out = state
                .timed_out
                .as_ref()
                .map(|t| annotation_time(t.deadline));
        }
        n
    };
    match input {
        Input::NodeChanged(n) => {
            Input::NodeChanged(fill(std::sync::Arc::unwrap_or_clone(n)).into())
        }
        Input::NodeRefreshed(Ok(Some(n))) => Input::NodeRefreshed(Ok(Some(fill(n)))),
        other => other,
    }
}

fn pod_variant(ds: &DaemonSetInfo, which: u8, state: u8, ready_since: u8) -> PodInfo {
    let mut p = mk_pod(&format!("{}-{}", ds.name, which % 2), NODE, &ds.uid);
    // Some versions carry the label a critical-pod entry selects, and some
    // have lost their controller (an orphaned pod): the member it counted
    // for must be re-derived too.
    if which % 4 >= 2 {
        p.labels.insert("k8s-app".into(), "kube-proxy".into());
    }
    if which % 8 >= 6 {
        p.controller_uid = None;
    }
    match state % 4 {
        0 => p.ready_since = Some(ts(i64::from(ready_since))).into(),
        1 => {
            p.ready = false;
            p.ready_since = Default::default();
        }
        2 => {
            p.phase = "Pending".into();
            p.ready = false;
        }
        _ => p.terminating = true,
    }
    p
}

/// One entry every node expects, one only GPU nodes do.
fn critical_entries() -> Vec<CriticalPodEntry> {
    let selector = |k: &str, v: &str| LabelSelector {
        match_labels: [(k.to_string(), v.to_string())].into(),
        ..Default::default()
    };
    vec![
        CriticalPodEntry {
            name: "kube-proxy".into(),
            namespace: "kube-system".into(),
            selector: selector("k8s-app", "kube-proxy"),
            node_selector: None,
        },
        CriticalPodEntry {
            name: "gpu-proxy".into(),
            namespace: "kube-system".into(),
            selector: selector("k8s-app", "kube-proxy"),
            node_selector: Some(selector("role", "gpu")),
        },
    ]
}

fn outcome() -> impl Strategy<Value = PatchOutcome> {
    prop_oneof![
        3 => Just(PatchOutcome::Applied),
        3 => Just(PatchOutcome::Conflict),
        1 => Just(PatchOutcome::NotFound),
        2 => Just(PatchOutcome::Failed("boom".into())),
        2 => Just(PatchOutcome::Ambiguous("no answer".into())),
        2 => Just(PatchOutcome::NotLeader),
        1 => Just(PatchOutcome::Withdrawn),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    let dss = daemonsets();
    let ds_index = 0..dss.len();
    prop_oneof![
        2 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(l, t, v)| Input::NodeChanged(node_variant(l, t, v).into())),
        6 => (ds_index.clone(), any::<u8>(), any::<u8>(), any::<u8>()).prop_map(move |(d, w, s, r)| {
            Input::pod_upserted(pod_variant(&daemonsets()[d], w, s, r))
        }),
        2 => (ds_index.clone(), any::<u8>()).prop_map(move |(d, w)| {
            Input::PodDeleted { uid: format!("uid-{}-{}", daemonsets()[d].name, w % 2) }
        }),
        1 => ds_index.clone().prop_map(move |d| Input::daemonset_upserted(daemonsets()[d].clone())),
        1 => ds_index.prop_map(move |d| Input::DaemonSetDeleted { uid: daemonsets()[d].uid.clone() }),
        3 => (prop_oneof![Just(TimerKind::Deadline), Just(TimerKind::Recheck), Just(TimerKind::Retry)], 0u64..4)
            .prop_map(|(kind, generation)| Input::TimerFired { kind, generation }),
        3 => outcome().prop_map(Input::PatchResult),
        1 => outcome().prop_map(Input::MarkResult),
        2 => prop_oneof![
            (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(l, t, v)| Ok(Some(node_variant(l, t, v)))),
            Just(Ok(None)),
            Just(Err("timeout".to_string())),
        ]
        .prop_map(Input::NodeRefreshed),
        1 => Just(Input::LeadershipGained),
        1 => (0i64..400).prop_map(|s| Input::ServerTime(ts(s))),
        1 => (any::<u8>(), any::<u8>(), any::<u8>(), prop::collection::vec((0usize..4, any::<u8>(), any::<u8>(), any::<u8>()), 0..4))
            .prop_map(|(l, t, v, pods)| {
                let dss = daemonsets();
                let pods = pods.iter().map(|(d, w, s, r)| pod_variant(&dss[*d], *w, *s, *r)).collect();
                Input::reexamine(node_variant(l, t, v), dss, pods)
            }),
        1 => Just(Input::NodeDeleted),
    ]
}

#[derive(Debug, Clone)]
struct Scenario {
    dry_run: bool,
    /// Whether a condition and a resource member are configured.
    node_members: bool,
    keep: bool,
    timeout: Option<u64>,
    journal_cap: usize,
    start_labels: u8,
    start_pods: Vec<(usize, u8, u8, u8)>,
    inputs: Vec<(u8, Input)>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(None), (1u64..200).prop_map(Some)],
        1usize..40,
        any::<u8>(),
        prop::collection::vec((0usize..4, any::<u8>(), any::<u8>(), any::<u8>()), 0..5),
        prop::collection::vec((0u8..30, input()), 1..60),
        any::<bool>(),
    )
        .prop_map(
            |(
                dry_run,
                keep,
                timeout,
                journal_cap,
                start_labels,
                start_pods,
                inputs,
                node_members,
            )| Scenario {
                dry_run,
                node_members,
                keep,
                timeout,
                journal_cap,
                start_labels,
                start_pods,
                inputs,
            },
        )
}

/// Checks what must hold of one step; `before` is the state it started from.
fn check_step(
    before: &GateState,
    after: &GateState,
    input: &Input,
    effects: &[Effect],
    dry_run: bool,
    now: Timestamp,
    closed_opened_at: Option<Timestamp>,
) {
    let cfg = cfg();
    let stops = effects
        .iter()
        .filter(|e| matches!(e, Effect::Stop(_)))
        .count();
    assert!(stops <= 1);
    if stops == 1 {
        assert!(
            matches!(effects.last(), Some(Effect::Stop(_))),
            "Stop must be last: {effects:?}"
        );
    }
    // A new write may start only when none is in flight, or in the step that
    // takes the in-flight one's result.
    let in_flight_before = before
        .write
        .as_ref()
        .is_some_and(|w| w.status == WriteStatus::InFlight)
        && !matches!(input, Input::PatchResult(_) | Input::MarkResult(_));
    for effect in effects {
        match effect {
            Effect::RemoveTaints(patch) => {
                assert!(!dry_run, "dry-run wrote: {input:?}");
                assert!(!in_flight_before, "second write while one is in flight");
                let node = after.node.as_ref().expect("a patch needs a node");
                assert_eq!(patch.resource_version, node.resource_version);
                assert!(!patch.taints.is_empty());
                for t in &patch.taints {
                    assert!(
                        cfg.placement.is_managed(&t.taint),
                        "foreign taint in patch: {}",
                        t.taint
                    );
                    assert_eq!(
                        node.taints.get(t.index),
                        Some(&t.taint),
                        "index does not point at the taint"
                    );
                }
                let managed = node
                    .taints
                    .iter()
                    .filter(|t| cfg.placement.is_managed(t))
                    .count();
                assert_eq!(
                    patch.taints.len(),
                    managed,
                    "every managed taint goes in the one patch"
                );
                assert!(patch.taints.windows(2).all(|w| w[0].index > w[1].index));
                match patch.opened_by {
                    OpenedBy::Ready => {
                        assert!(after.all_ready(), "opened with members not Ready");
                        assert!(
                            after.may_open_by_ready(),
                            "opened by readiness a node that is not Ready"
                        );
                    }
                    OpenedBy::Timeout => {
                        let t = after
                            .timed_out
                            .as_ref()
                            .expect("timeout opening without a timeout");
                        assert_eq!(t.action, OnTimeout::Open);
                        assert!(now >= t.deadline, "opened before the deadline");
                    }
                    OpenedBy::Manual => {
                        assert!(
                            after.node.as_ref().is_some_and(|n| n.open_requested),
                            "opened manually a node nobody asked to open"
                        );
                    }
                }
            }
            Effect::MarkTimedOut(_) => {
                assert!(!dry_run);
                assert!(!in_flight_before, "second write while one is in flight");
            }
            _ => {}
        }
    }
    if before.is_finished() {
        assert_eq!(before, after, "a finished gate moved");
    }
    // Taints gone in an untaint not of this gate's: another replica's (an
    // `opened-at` other than `closed_opened_at` and an `opened-by` of
    // nodegate's), never marked, or another writer's, marked unless writes
    // are off.
    if after.stopped != before.stopped
        && let Some(reason) = after.stopped
        && matches!(
            reason,
            StopReason::OpenedByAnotherReplica | StopReason::TaintRemovedElsewhere
        )
    {
        let node = after.node.as_ref().expect("a gate that saw its taints go");
        assert!(!node.taints.iter().any(|t| cfg.placement.is_managed(t)));
        let by_replica = matches!(node.opened_by, Some(OpenedByMark::Nodegate(_)))
            && node.opened_at.is_some()
            && node.opened_at != closed_opened_at;
        assert_eq!(
            reason == StopReason::OpenedByAnotherReplica,
            by_replica,
            "{reason} after {input:?}"
        );
        assert!(
            !after
                .unanswered
                .iter()
                .any(|u| Some(u.opened_at) == node.opened_at),
            "its own lost patch taken for another's: {input:?}"
        );
    }
    let marks = effects
        .iter()
        .filter(|e| matches!(e, Effect::MarkOpenedExternally(_)))
        .count();
    if marks > 0 {
        assert_eq!(after.stopped, Some(StopReason::TaintRemovedElsewhere));
        assert!(!dry_run, "dry-run wrote: {input:?}");
    }
    // Opened without the answer of a patch: only by finding on the node the
    // `opened-at` of one whose answer was lost, its taints gone.
    if after.phase == Phase::Opened
        && before.phase != Phase::Opened
        && !matches!(input, Input::PatchResult(PatchOutcome::Applied))
    {
        let node = after.node.as_ref().expect("an opened gate has a node");
        assert!(!node.taints.iter().any(|t| cfg.placement.is_managed(t)));
        let opened = after.opened.as_ref().expect("an opened record");
        assert!(
            after
                .unanswered
                .iter()
                .any(|u| Some(u.opened_at) == node.opened_at
                    && u.opened_at == opened.at
                    && u.opened_by == opened.opened_by),
            "opened by {input:?} without a patch of its own on the node"
        );
    }
}

proptest! {
    // Failures are turned into named tests in the other modules of this
    // binary rather than persisted next to the sources.
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_histories_keep_every_invariant(s in scenario()) {
        let mut c = cfg();
        c.critical = critical_entries();
        if s.node_members {
            (c.conditions, c.resources) = node_member_entries();
        }
        c.dry_run = s.dry_run;
        c.on_timeout = if s.keep { OnTimeout::Keep } else { OnTimeout::Open };
        c.timeout = s.timeout.map(Duration::from_secs);
        let mut state = GateState::default();
        let mut journal = Journal::new(s.journal_cap);
        let mut now = ts(0);

        let dss = daemonsets();
        let pods = s.start_pods.iter().map(|(d, w, st, r)| pod_variant(&dss[*d], *w, *st, *r)).collect();
        // A third of the gates start on a node opened before (version 4).
        let start_version = if s.start_labels.is_multiple_of(3) { 4 } else { 1 };
        let first = Input::snapshot(node_variant(s.start_labels, 0, start_version), dss.clone(), pods);
        let inputs = std::iter::once((0u8, first)).chain(s.inputs.iter().cloned());

        // The `opened-at` the gate was last shown with a managed taint on,
        // read from the inputs, apart from the gate's own record of it.
        let mut closed_opened_at = None;
        for (advance, input) in inputs {
            now = now.checked_add(jiff::SignedDuration::from_secs(i64::from(advance))).unwrap();
            let input = as_left_by_lost_patch(input, &state);
            let before = state.clone();
            let st = step(&mut state, &input, &c, now);
            for ev in &st.events {
                journal.record(now, ev.clone());
            }
            prop_assert_eq!(&replay(&journal), &state, "replay diverged after {:?}", input);
            check_step(&before, &state, &input, &st.effects, s.dry_run, now, closed_opened_at);
            assert_members_derived(&state, &input, &c, now);
            if !before.is_finished()
                && let Some(n) = node_of(&input).filter(|n| n.taints.iter().any(|t| c.placement.is_managed(t)))
            {
                closed_opened_at = n.opened_at;
            }
            if is_observation(&input) {
                let again = decide(&state, &input, &c, now);
                prop_assert!(again.is_empty(), "repeating {:?} gave {:?}", input, again);
            }
        }
        // What `/debug/nodes` keeps of the finished gate reads back whole.
        let thawed = journal.freeze().map_err(|e| e.to_string()).and_then(|f| f.thaw().map_err(|e| e.to_string()));
        prop_assert!(thawed.is_ok(), "the journal did not freeze and thaw: {:?}", thawed.err());
        if let Ok(thawed) = thawed {
            prop_assert_eq!(thawed.entries().collect::<Vec<_>>(), journal.entries().collect::<Vec<_>>());
            prop_assert_eq!(thawed.dropped(), journal.dropped());
            prop_assert_eq!(&replay(&thawed), &state);
        }
    }
}

/// The node an input shows the gate, if any (every generated node is the
/// gate's: one name).
fn node_of(input: &Input) -> Option<&NodeInfo> {
    match input {
        Input::NodeChanged(n) => Some(n),
        Input::NodeRefreshed(Ok(Some(n))) => Some(n),
        Input::Snapshot { node, .. } | Input::Reexamine { node, .. } => Some(node),
        _ => None,
    }
}

/// One input of a kept timeout's life: the mark's answer, the node showing
/// a mark (`Some(true)`: the gate's deadline's, `Some(false)`: another's)
/// or none and suspended or not, the lease, a retry, the member's pod.
fn mark_input() -> impl Strategy<Value = (Option<bool>, Input)> {
    let b = tolerant_ds("broken");
    prop_oneof![
        3 => outcome().prop_map(|o| (None, Input::MarkResult(o))),
        3 => (prop_oneof![Just(None), Just(Some(true)), Just(Some(false))], any::<bool>())
            .prop_map(|(mark, suspended)| {
                let mut n = gated_node();
                n.suspended = suspended;
                (mark, Input::NodeChanged(n.into()))
            }),
        1 => Just((None, Input::LeadershipGained)),
        2 => (0u64..4).prop_map(|generation| (None, Input::TimerFired { kind: TimerKind::Retry, generation })),
        1 => any::<bool>().prop_map(move |ready| {
            let pod = if ready { ready_pod("broken-1", &b) } else { unready_pod("broken-1", &b) };
            (None, Input::pod_upserted(pod))
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// With `--on-timeout keep`, whatever the answers, the lease and the
    /// marks other replicas write: the journal replays to the state, no
    /// mark is sent while the node shows the gate's own deadline's, and the
    /// gate reports the timeout at most once, and only if a mark of its own
    /// applied or went unanswered (it may have applied): a mark only
    /// another replica wrote is that replica's to report.
    #[test]
    fn a_kept_timeout_is_marked_and_reported_once(
        inputs in prop::collection::vec((0u8..5, mark_input()), 1..40)
    ) {
        let mut c = cfg();
        c.on_timeout = OnTimeout::Keep;
        let mut state = GateState::default();
        let mut journal = Journal::new(64);
        let mut now = ts(200);
        let first = Input::snapshot(gated_node(), vec![tolerant_ds("broken")], vec![]);
        let (mut reported, mut version) = (0usize, 1u32);
        // A mark of the gate's own was answered as applied, or went
        // unanswered (it may have applied).
        let mut own = false;
        let inputs = std::iter::once((0u8, (None, first))).chain(inputs);
        for (advance, (mark, input)) in inputs {
            now = now.checked_add(jiff::SignedDuration::from_secs(i64::from(advance))).unwrap();
            // A node version: this gate's deadline's mark filled in, and
            // another deadline's an hour before it.
            let input = match input {
                Input::NodeChanged(n) => {
                    let mut n = std::sync::Arc::unwrap_or_clone(n);
                    let deadline = state.timed_out.as_ref().map(|t| annotation_time(t.deadline));
                    n.replace.timed_out = match mark {
                        Some(true) => deadline,
                        Some(false) => Some(ts(-3600)),
                        None => None,
                    };
                    version += 1;
                    n.resource_version = version.to_string();
                    Input::NodeChanged(n.into())
                }
                other => other,
            };
            let st = step(&mut state, &input, &c, now);
            for ev in &st.events {
                journal.record(now, ev.clone());
            }
            prop_assert_eq!(&replay(&journal), &state, "replay diverged after {:?}", input);
            let shown = match (&state.node, &state.timed_out) {
                (Some(n), Some(t)) => n.replace.timed_out == Some(annotation_time(t.deadline)),
                _ => false,
            };
            let marks = st.effects.iter().filter(|e| matches!(e, Effect::MarkTimedOut(_))).count();
            prop_assert!(!(shown && marks > 0), "a mark sent while the node shows it, after {:?}", input);
            own |= matches!(input, Input::MarkResult(PatchOutcome::Applied | PatchOutcome::Ambiguous(_)));
            reported += recorded(&st).iter().filter(|e| e.reason == "GateTimedOut").count();
            prop_assert!(reported <= 1, "reported {} times, after {:?}", reported, input);
            prop_assert!(
                reported == 0 || own,
                "reported a mark no answer said was its own (another replica's), after {:?}", input
            );
        }
    }
}
