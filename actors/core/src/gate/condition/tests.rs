use std::sync::Arc;

use super::*;
use crate::gate::state::{OpenedRecord, StopReason, TimeoutRecord};
use crate::testutil::{mk_node, taint, ts};
use crate::vocab::config::OnTimeout;
use crate::vocab::member::{Expectation, Member, MemberId, Readiness};

fn gated(members: &[(&str, Option<&str>)]) -> GateState {
    let mut state = GateState {
        node: Some(Arc::new(mk_node(
            "n1",
            &[],
            vec![taint("nodegate.dev/not-ready", "NoSchedule")],
        ))),
        ..GateState::default()
    };
    for (ds, waiting) in members {
        let readiness = match waiting {
            Some(why) => Readiness::Waiting {
                why: why.to_string(),
                available_at: None,
            },
            None => Readiness::Ready {
                pod: format!("{ds}-pod"),
            },
        };
        state.members.insert(
            MemberId::DaemonSet(ds.to_string()),
            Member {
                expectation: Expectation::Expected,
                readiness: Some(readiness),
            },
        );
    }
    state
}

#[test]
fn a_closed_gate_says_false_and_names_what_it_waits_for() {
    let state = gated(&[
        ("kube-system/cni", Some("no pod on the node yet")),
        ("kube-system/csi", None),
    ]);
    let c = open_condition(&state).expect("a gated node has a condition");
    assert_eq!(c.status(), "False");
    assert_eq!(c.reason.as_str(), "Waiting");
    assert_eq!(
        c.message,
        "waiting for 1 of 2: kube-system/cni (no pod on the node yet)"
    );
}

#[test]
fn a_kept_timed_out_gate_says_timed_out() {
    let mut state = gated(&[("kube-system/cni", Some("pod not Ready"))]);
    state.phase = Phase::TimedOutKept;
    state.timed_out = Some(TimeoutRecord {
        deadline: ts(600),
        action: OnTimeout::Keep,
        expected: 1,
        not_ready: vec![],
        node_not_ready: None,
        by_schedule: false,
    });
    let c = open_condition(&state).expect("condition");
    assert_eq!((c.status(), c.reason.as_str()), ("False", "TimedOut"));
    assert!(
        c.message
            .starts_with("the deadline passed at 1970-01-01T00:10:00Z; ")
    );
    assert!(c.message.ends_with("kube-system/cni (pod not Ready)"));
}

#[test]
fn an_opened_gate_says_true_and_how_it_opened() {
    for (by, reason) in [
        (OpenedBy::Ready, "OpenedByReady"),
        (OpenedBy::Timeout, "OpenedByTimeout"),
        (OpenedBy::Manual, "OpenedByManual"),
    ] {
        let mut state = gated(&[("kube-system/cni", None)]);
        state.phase = Phase::Opened;
        state.opened = Some(OpenedRecord {
            opened_by: by,
            at: ts(5),
            resource_version: "2".into(),
        });
        let c = open_condition(&state).expect("condition");
        assert_eq!((c.status(), c.reason.as_str()), ("True", reason));
    }
}

#[test]
fn nothing_changed_means_no_write_and_a_change_means_one() {
    let mut state = gated(&[("kube-system/cni", Some("no pod on the node yet"))]);
    let first = condition_change(None, &state).expect("first sighting writes");
    assert_eq!(condition_change(Some(&first), &state), None);
    state.members.insert(
        MemberId::DaemonSet("kube-system/cni".into()),
        Member {
            expectation: Expectation::Expected,
            readiness: Some(Readiness::Waiting {
                why: "pod not Ready".into(),
                available_at: None,
            }),
        },
    );
    let second = condition_change(Some(&first), &state).expect("a new reason to wait writes");
    assert!(second.message.contains("pod not Ready"));
}

#[test]
fn dry_run_unsnapshotted_and_ended_gates_say_nothing() {
    assert_eq!(open_condition(&GateState::default()), None);
    for phase in [Phase::WouldOpen, Phase::Gone] {
        let mut state = gated(&[]);
        state.phase = phase;
        assert_eq!(open_condition(&state), None);
    }
}

#[test]
fn a_node_opened_by_another_writer_says_true_externally() {
    let mut state = gated(&[("kube-system/cni", Some("pod not Ready"))]);
    state.phase = Phase::Gone;
    state.stopped = Some(StopReason::TaintRemovedElsewhere);
    let c = open_condition(&state).expect("condition");
    assert_eq!(
        (c.status(), c.reason.as_str()),
        ("True", "OpenedExternally")
    );
}

#[test]
fn a_long_message_is_cut_on_a_char_boundary() {
    let why = "é".repeat(2000);
    let state = gated(&[("kube-system/cni", Some(why.as_str()))]);
    let c = open_condition(&state).expect("condition");
    assert!(c.message.len() <= MAX_MESSAGE_BYTES);
    assert!(c.message.ends_with('…'));
}

#[test]
fn the_write_is_off_without_the_flag_and_marks_status_transitions() {
    let state = gated(&[("kube-system/cni", Some("no pod on the node yet"))]);
    let off = crate::vocab::config::Config::default();
    assert_eq!(condition_write(None, &state, &off), None);
    let on = crate::vocab::config::Config {
        node_condition: true,
        ..off.clone()
    };
    let dry = crate::vocab::config::Config {
        dry_run: true,
        ..on.clone()
    };
    assert_eq!(condition_write(None, &state, &dry), None);
    let first = condition_write(None, &state, &on).expect("first write");
    assert!(first.transition);
    assert_eq!(first.node, "n1");
    assert_eq!(condition_write(Some(&first.condition), &state, &on), None);
    let mut other = first.condition.clone();
    other.message = "something else".into();
    let same_status = condition_write(Some(&other), &state, &on).expect("message changed");
    assert!(!same_status.transition);
}

#[test]
fn a_first_write_after_a_restart_keeps_the_nodes_transition_time() {
    let on = crate::vocab::config::Config {
        node_condition: true,
        ..crate::vocab::config::Config::default()
    };
    let mut state = gated(&[("kube-system/cni", Some("no pod on the node yet"))]);
    let with_status = |state: &GateState, status: &str| {
        let mut node = (**state.node.as_ref().expect("node")).clone();
        node.conditions.insert(
            OPEN_CONDITION.into(),
            crate::vocab::model::NodeCondition {
                status: status.into(),
                since: Some(ts(100)),
            },
        );
        Arc::new(node)
    };
    // A previous process wrote False; this gate still says False.
    state.node = Some(with_status(&state, "False"));
    let write = condition_write(None, &state, &on).expect("first write of this gate");
    assert_eq!(write.condition.status(), "False");
    assert!(!write.transition, "the node already said False");
    // It said True (an earlier gate opened it; the node was re-gated).
    state.node = Some(with_status(&state, "True"));
    assert!(
        condition_write(None, &state, &on)
            .expect("write")
            .transition
    );
}
