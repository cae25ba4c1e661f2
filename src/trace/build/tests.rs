//! The trace plan of gates driven through the real core, step by step as the
//! node actor drives them, journal and all.

use std::time::Duration;

use jiff::Timestamp;
use nodegate_core::gate::journal::Journal;
use nodegate_core::gate::{self, Input, PatchOutcome, TimerKind};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo};

use crate::test_gates::{DrivenGate, NODE, gated, pod, tolerant};

use super::*;

/// One gate and its journal, fed as the node actor feeds them.
struct Gate {
    gate: DrivenGate,
    journal: Journal,
}

impl Gate {
    fn new(cfg: Config) -> Gate {
        Gate {
            gate: DrivenGate::new(cfg),
            journal: Journal::default(),
        }
    }

    fn feed_at(&mut self, at: Timestamp, input: Input) {
        for event in self.gate.step(at, &input) {
            self.journal.record(at, event);
        }
    }

    fn feed(&mut self, secs: i64, input: Input) {
        self.feed_at(ts(secs), input);
    }

    fn trace(&self) -> GateTrace {
        gate_trace(&self.gate.state, &self.journal).expect("an opened gate has a trace")
    }
}

impl std::ops::Deref for Gate {
    type Target = DrivenGate;
    fn deref(&self) -> &DrivenGate {
        &self.gate
    }
}

fn member<'a>(t: &'a GateTrace, name: &str) -> &'a SpanPlan {
    t.members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no span {name} in {t:#?}"))
}

fn str_attr<'a>(span: &'a SpanPlan, key: &str) -> &'a str {
    match span.attribute(key) {
        Some(Value::String(s)) => s.as_str(),
        other => panic!("{key} is {other:?} on {span:#?}"),
    }
}

fn int_attr(span: &SpanPlan, key: &str) -> i64 {
    match span.attribute(key) {
        Some(Value::I64(n)) => *n,
        other => panic!("{key} is {other:?} on {span:#?}"),
    }
}

#[test]
fn a_gate_opened_by_readiness_spans_creation_to_opened_at_with_a_child_per_member() {
    let cni = tolerant("cni");
    let csi = tolerant("csi");
    let mut g = Gate::new(Config::default());
    g.feed(
        1,
        Input::snapshot(
            gated(0),
            vec![cni.clone(), csi.clone()],
            vec![pod("cni-1", &cni, Some(1)), pod("csi-1", &csi, None)],
        ),
    );
    // csi turns Ready at 9 (cluster time), the gate sees it at 10 and
    // sends the untaint; the first one conflicts, the retry applies.
    g.feed(10, Input::pod_upserted(pod("csi-1", &csi, Some(9))));
    g.feed(10, Input::PatchResult(PatchOutcome::Conflict));
    g.feed(11, Input::NodeRefreshed(Ok(Some(gated(0)))));
    g.feed(
        11,
        Input::TimerFired {
            kind: TimerKind::Retry,
            generation: 2,
        },
    );
    let sent_at = g
        .journal
        .entries()
        .filter_map(|e| match &e.event {
            gate::Event::UntaintSent { at, .. } => Some(*at),
            _ => None,
        })
        .last()
        .expect("an untaint was sent");
    g.feed(12, Input::PatchResult(PatchOutcome::Applied));

    let t = g.trace();
    assert_eq!(t.root.name, ROOT_SPAN);
    assert_eq!(
        t.root.start,
        ts(0),
        "the gate starts at the node's creation"
    );
    assert_eq!(t.root.end, sent_at, "it ends at the opened-at it wrote");
    assert_eq!(str_attr(&t.root, "nodegate.outcome"), "ready");
    assert_eq!(str_attr(&t.root, "k8s.node.name"), NODE);
    assert_eq!(int_attr(&t.root, "nodegate.members.expected"), 2);
    assert_eq!(int_attr(&t.root, "nodegate.members.ready"), 2);
    assert_eq!(t.span_count(), 3);

    let cni_span = member(&t, "infra/cni");
    assert_eq!((cni_span.start, cni_span.end), (ts(0), ts(1)));
    let csi_span = member(&t, "infra/csi");
    assert_eq!(
        (csi_span.start, csi_span.end),
        (ts(0), ts(9)),
        "a member ends when its pod became Ready, not when the gate saw it"
    );
    assert_eq!(str_attr(csi_span, "nodegate.member.pod"), "csi-1");
    assert_eq!(csi_span.error, None);
    assert!(
        csi_span
            .events
            .iter()
            .any(|e| e.name == "ready" && e.at == ts(10)),
        "{csi_span:#?}"
    );

    let names: Vec<&str> = t.root.events.iter().map(|e| e.name).collect();
    assert!(names.contains(&"conflict"), "{names:?}");
    assert!(names.contains(&"retry"), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| **n == "untaint sent").count(),
        2,
        "{names:?}"
    );
    assert_eq!(names.last(), Some(&"opened"), "{names:?}");
}

#[test]
fn a_member_not_ready_at_the_deadline_ends_there_as_an_error() {
    let cni = tolerant("cni");
    let broken = tolerant("broken");
    let mut g = Gate::new(Config {
        timeout: Some(Duration::from_secs(5)),
        ..Config::default()
    });
    g.feed(
        1,
        Input::snapshot(
            gated(0),
            vec![cni.clone(), broken.clone()],
            vec![pod("cni-1", &cni, Some(1)), pod("broken-1", &broken, None)],
        ),
    );
    let generation = g.state.timers.deadline_generation;
    g.feed(
        5,
        Input::TimerFired {
            kind: TimerKind::Deadline,
            generation,
        },
    );
    g.feed(5, Input::PatchResult(PatchOutcome::Applied));

    let t = g.trace();
    assert_eq!(str_attr(&t.root, "nodegate.outcome"), "timeout");
    assert_eq!(int_attr(&t.root, "nodegate.members.expected"), 2);
    assert_eq!(int_attr(&t.root, "nodegate.members.ready"), 1);
    let b = member(&t, "infra/broken");
    assert_eq!(b.end, ts(5), "it waited until the deadline");
    let why = b.error.as_deref().expect("marked as an error");
    assert!(why.starts_with("not Ready: "), "{why}");
    let waiting_for = str_attr(b, "nodegate.member.waiting_for");
    assert!(
        why.ends_with(waiting_for) && !waiting_for.is_empty(),
        "{why}"
    );
    assert!(t.root.events.iter().any(|e| e.name == "timed out"));
    assert_eq!(member(&t, "infra/cni").error, None);
}

#[test]
fn a_restarted_nodegate_draws_a_gate_in_progress_from_the_cluster_times() {
    // The first incarnation's journal is gone: the new one starts at 50 and
    // finds both pods Ready since 3 and 7.
    let cni = tolerant("cni");
    let csi = tolerant("csi");
    let mut g = Gate::new(Config::default());
    g.feed(
        50,
        Input::snapshot(
            gated(0),
            vec![cni.clone(), csi.clone()],
            vec![pod("cni-1", &cni, Some(3)), pod("csi-1", &csi, Some(7))],
        ),
    );
    g.feed(50, Input::PatchResult(PatchOutcome::Applied));
    let t = g.trace();
    assert_eq!(t.root.start, ts(0));
    assert_eq!(member(&t, "infra/cni").end, ts(3));
    assert_eq!(member(&t, "infra/csi").end, ts(7));
}

#[test]
fn min_ready_seconds_counts_in_a_members_ready_time() {
    let slow = DaemonSetInfo {
        min_ready_seconds: 4,
        ..tolerant("slow")
    };
    let mut g = Gate::new(Config::default());
    g.feed(
        20,
        Input::snapshot(
            gated(0),
            vec![slow.clone()],
            vec![pod("slow-1", &slow, Some(2))],
        ),
    );
    g.feed(20, Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(member(&g.trace(), "infra/slow").end, ts(6));
}

#[test]
fn a_gate_that_did_not_open_has_no_trace() {
    let cni = tolerant("cni");
    let mut g = Gate::new(Config::default());
    g.feed(
        1,
        Input::snapshot(gated(0), vec![cni.clone()], vec![pod("cni-1", &cni, None)]),
    );
    assert_eq!(gate_trace(&g.state, &g.journal), None, "still closed");
    g.feed(2, Input::NodeDeleted);
    assert_eq!(gate_trace(&g.state, &g.journal), None, "node deleted");
}

#[test]
fn spans_are_otel_spans_of_one_trace_under_the_root() {
    let cni = tolerant("cni");
    let mut g = Gate::new(Config::default());
    g.feed(
        3,
        Input::snapshot(
            gated(0),
            vec![cni.clone()],
            vec![pod("cni-1", &cni, Some(2))],
        ),
    );
    g.feed(3, Input::PatchResult(PatchOutcome::Applied));
    let spans = crate::trace::spans::span_data(&g.trace(), &crate::trace::spans::scope());
    assert_eq!(spans.len(), 2);
    let (root, child) = (&spans[0], &spans[1]);
    assert_eq!(root.span_context.trace_id(), child.span_context.trace_id());
    assert_eq!(child.parent_span_id, root.span_context.span_id());
    assert_eq!(root.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    assert_eq!(
        child.end_time,
        std::time::SystemTime::from(ts(2)),
        "times pass through unchanged"
    );
}

#[test]
fn a_gate_opened_by_an_untaint_whose_answer_was_lost_ends_at_that_untaints_opened_at() {
    let cni = tolerant("cni");
    let mut g = Gate::new(Config::default());
    g.feed(
        1,
        Input::snapshot(
            gated(0),
            vec![cni.clone()],
            vec![pod("cni-1", &cni, Some(1))],
        ),
    );
    // The first untaint (opened-at 1) gets no answer; the node, re-read,
    // still shows the taint, so a second one goes out at 5 and is lost too.
    g.feed(
        2,
        Input::PatchResult(PatchOutcome::Ambiguous("timeout".into())),
    );
    g.feed(3, Input::NodeRefreshed(Ok(Some(gated(0)))));
    g.feed(
        5,
        Input::TimerFired {
            kind: TimerKind::Retry,
            generation: 2,
        },
    );
    g.feed(
        6,
        Input::PatchResult(PatchOutcome::Ambiguous("timeout".into())),
    );
    // Then the node shows the first one applied after all.
    let opened = NodeInfo {
        taints: vec![],
        opened_at: Some(ts(1)),
        ..gated(0)
    };
    g.feed(7, Input::NodeRefreshed(Ok(Some(opened))));
    let sent: Vec<Timestamp> = g
        .journal
        .entries()
        .filter_map(|e| match &e.event {
            gate::Event::UntaintSent { at, .. } => Some(*at),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [ts(1), ts(5)], "{:#?}", g.journal);
    assert_eq!(g.trace().root.end, ts(1), "the opened-at the node shows");
}

#[test]
fn device_members_are_spans_of_their_own_kind() {
    use nodegate_core::rules::devices::CriticalResource;
    let mut g = Gate::new(Config {
        resources: vec![CriticalResource {
            resource: "nvidia.com/gpu".into(),
            node_selector: None,
        }],
        ..Config::default()
    });
    g.feed(1, Input::snapshot(gated(0), vec![], vec![]));
    let mut node: NodeInfo = gated(0);
    node.extended_allocatable
        .insert("nvidia.com/gpu".into(), "8".into());
    node.resource_version = "2".into();
    g.feed(4, Input::NodeChanged(node.into()));
    g.feed(4, Input::PatchResult(PatchOutcome::Applied));

    let t = g.trace();
    let span = member(&t, "resource:nvidia.com/gpu");
    assert_eq!(str_attr(span, "nodegate.member.kind"), "extended_resource");
    assert_eq!(span.end, ts(4), "Ready when the gate saw it");
    assert_eq!(span.error, None);
}
