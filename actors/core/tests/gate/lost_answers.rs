//! An untaint patch the API server applied but whose answer never came back
//! (a timeout, a connection lost mid-request, a 5xx from a proxy): the
//! managed taints are gone and the node carries the `nodegate.dev/opened-at`
//! this gate sent. The gate must end as opened — a `GateOpened` Event,
//! `opened_by` as sent — not as "removed by another writer" (semantics.md §5.5).

use crate::gate_support::*;
use jiff::{SignedDuration, Timestamp};
use nodegate_core::gate::{
    Effect, Event, EventType, Input, MAX_UNANSWERED, OpenedBy, PatchOutcome, Phase, StopReason,
    TimerKind,
};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::model::NodeInfo;

/// The node as the patch left it: no managed taint, nodegate's annotation.
fn opened_node(version: &str, opened_at: Option<Timestamp>) -> NodeInfo {
    let mut n = node(vec![]);
    n.resource_version = version.into();
    n.opened_at = opened_at;
    n
}

fn lost() -> Input {
    Input::PatchResult(PatchOutcome::Ambiguous("no answer within 10s".to_string()))
}

#[test]
fn a_lost_answer_re_reads_the_node_and_finds_the_gate_opened() {
    let (mut g, _, step) = ready_cilium_gate();
    assert_eq!(patches(&step)[0].opened_at, ts(1));

    let step = g.at(11).feed(lost());
    assert_eq!(
        step.effects,
        vec![Effect::RefreshNode],
        "the patch may have been applied: look before retrying"
    );

    let step = g.at(12).feed(Input::NodeRefreshed(Ok(Some(opened_node(
        "2",
        Some(ts(1)),
    )))));
    assert_eq!(
        g.state.phase,
        Phase::Opened,
        "stopped: {:?}",
        g.state.stopped
    );
    let opened = g.state.opened.as_ref().expect("an opened record");
    assert_eq!(opened.opened_by, OpenedBy::Ready);
    assert_eq!(opened.resource_version, "1", "the version the patch tested");
    assert_event(&step, EventType::Normal, "GateOpened", &[]);
    assert!(stops(&step));
    assert_eq!(writes(&step), 0);
}

#[test]
fn a_lost_answer_whose_result_shows_in_the_watch_first_ends_opened() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    g.at(11).feed(lost());
    let step = g
        .at(11)
        .feed(Input::NodeChanged(opened_node("2", Some(ts(1))).into()));
    assert_eq!(
        g.state.phase,
        Phase::Opened,
        "stopped: {:?}",
        g.state.stopped
    );
    assert_eq!(recorded(&step)[0].reason, "GateOpened");
    assert!(recorded(&step)[0].own_write, "its own lost untaint, found");
    // The re-read that was asked for finds a finished gate.
    let late = g.at(12).feed(Input::NodeRefreshed(Ok(Some(opened_node(
        "2",
        Some(ts(1)),
    )))));
    assert!(late.events.is_empty());
}

#[test]
fn a_lost_answer_to_an_opening_by_timeout_ends_opened_by_timeout() {
    let b = tolerant_ds("broken");
    let mut g = Gate::new(cfg());
    g.at(10).start(gated_node(), vec![b], vec![]);
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(patches(&step)[0].opened_by, OpenedBy::Timeout);
    g.at(130).feed(lost());
    let step = g.at(131).feed(Input::NodeRefreshed(Ok(Some(opened_node(
        "2",
        Some(ts(120)),
    )))));
    assert_eq!(
        g.state.opened.as_ref().map(|o| o.opened_by),
        Some(OpenedBy::Timeout),
        "stopped: {:?}",
        g.state.stopped
    );
    assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &["kube-system/broken"],
    );
}

#[test]
fn an_earlier_attempt_applied_is_recognised_after_a_later_one_conflicts() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    g.at(11).feed(lost());
    // The re-read fails too: retry after the backoff, all the same.
    let step = g
        .at(12)
        .feed(Input::NodeRefreshed(Err("connection refused".into())));
    assert_eq!(step.effects, vec![Effect::ScheduleRetry { attempt: 2 }]);
    let step = g.at(13).feed(Input::TimerFired {
        kind: TimerKind::Retry,
        generation: 2,
    });
    assert_eq!(patches(&step)[0].opened_at, ts(13));
    // Attempt 1 had been applied: attempt 2's resourceVersion test fails.
    g.at(14).feed(Input::PatchResult(PatchOutcome::Conflict));
    let step = g.at(15).feed(Input::NodeRefreshed(Ok(Some(opened_node(
        "2",
        Some(ts(1)),
    )))));
    assert_eq!(
        g.state.phase,
        Phase::Opened,
        "stopped: {:?}",
        g.state.stopped
    );
    assert_eq!(recorded(&step)[0].reason, "GateOpened");
}

#[test]
fn an_opening_abandoned_after_its_answer_was_lost_is_still_recognised() {
    let (mut g, a, _) = ready_cilium_gate();
    g.at(11).feed(lost());
    // The pod goes NotReady while the re-read is out: the opening no longer
    // stands and is dropped — but it may have been applied already.
    let step = g
        .at(12)
        .feed(Input::pod_upserted(unready_pod("cilium-1", &a)));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WriteAbandoned { .. }
    )));
    let step = g.at(13).feed(Input::NodeRefreshed(Ok(Some(opened_node(
        "2",
        Some(ts(1)),
    )))));
    assert_eq!(
        g.state.phase,
        Phase::Opened,
        "stopped: {:?}",
        g.state.stopped
    );
    assert_eq!(recorded(&step)[0].reason, "GateOpened");
}

#[test]
fn the_annotation_is_matched_at_the_millisecond_the_patch_wrote() {
    let mut g = Gate::new(cfg());
    // Decided at a time finer than the annotation's milliseconds.
    g.now = ts(1)
        .checked_add(SignedDuration::from_micros(123_456))
        .unwrap();
    g.start(gated_node(), vec![], vec![]);
    g.at(11).feed(lost());
    let written: Timestamp = "1970-01-01T00:00:01.123Z".parse().unwrap();
    g.at(12).feed(Input::NodeRefreshed(Ok(Some(opened_node(
        "2",
        Some(written),
    )))));
    assert_eq!(
        g.state.phase,
        Phase::Opened,
        "stopped: {:?}",
        g.state.stopped
    );
}

#[test]
fn taints_removed_by_someone_else_after_a_lost_answer_are_still_someone_elses() {
    // No annotation, or one this gate did not write (an earlier opening of a
    // re-gated node): another writer removed the taints.
    for opened_at in [None, Some(ts(-600)), Some(ts(5))] {
        let mut g = Gate::new(cfg());
        g.at(1).start(gated_node(), vec![], vec![]);
        g.at(11).feed(lost());
        let step = g
            .at(12)
            .feed(Input::NodeRefreshed(Ok(Some(opened_node("2", opened_at)))));
        assert_eq!(
            g.state.stopped,
            Some(StopReason::TaintRemovedElsewhere),
            "opened-at {opened_at:?}"
        );
        assert!(recorded(&step).is_empty());
        assert!(stops(&step));
    }
}

#[test]
fn a_refused_write_is_not_ambiguous_and_retries_without_a_re_read() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let step = g.at(2).feed(Input::PatchResult(PatchOutcome::Failed(
        "403 forbidden".into(),
    )));
    assert_eq!(step.effects, vec![Effect::ScheduleRetry { attempt: 2 }]);
}

#[test]
fn only_the_latest_unanswered_patches_are_remembered() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let mut sent = vec![ts(1)];
    let mut now = 1;
    for attempt in 2..=u32::try_from(MAX_UNANSWERED).unwrap() + 1 {
        now += 10;
        g.at(now).feed(lost());
        g.at(now)
            .feed(Input::NodeRefreshed(Err("connection refused".into())));
        now += 1;
        let step = g.at(now).feed(Input::TimerFired {
            kind: TimerKind::Retry,
            generation: u64::from(attempt),
        });
        sent.push(patches(&step)[0].opened_at);
    }
    g.at(now + 10).feed(lost());
    assert_eq!(g.state.unanswered.len(), MAX_UNANSWERED);
    assert_eq!(
        g.state.unanswered.first().map(|u| u.opened_at),
        Some(sent[1]),
        "the oldest is forgotten"
    );
    // The first patch's opened-at is no longer recognised; a later one is.
    let mut forgotten = g.state.clone();
    let mut gate = Gate::new(cfg());
    std::mem::swap(&mut gate.state, &mut forgotten);
    gate.journal = g.journal.clone();
    gate.at(now + 11)
        .feed(Input::NodeRefreshed(Ok(Some(opened_node(
            "2",
            Some(sent[0]),
        )))));
    assert_eq!(gate.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    g.at(now + 11)
        .feed(Input::NodeRefreshed(Ok(Some(opened_node(
            "2",
            Some(sent[1]),
        )))));
    assert_eq!(g.state.phase, Phase::Opened);
}
