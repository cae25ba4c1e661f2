//! From a finished gate to the spans of its trace: a pure function of the
//! gate's state and journal ([`gate_trace`]), no clock, no I/O, no exporter.
//! Every time comes from state a restarted nodegate rebuilds from the cluster
//! (the node's creation or `gated-since`, the `opened-at` it wrote, each pod's
//! Ready `lastTransitionTime`), so a gate in progress at a restart is still
//! drawn right; only the old process's journal facts are lost.

use jiff::{SignedDuration, Timestamp};
use nodegate_core::gate::journal::Journal;
use nodegate_core::gate::{Event, GateState, OpenedRecord};
use nodegate_core::vocab::member::{MemberId, Readiness};

/// An attribute's value: OpenTelemetry's own.
pub use opentelemetry::Value;

pub type Attributes = Vec<(&'static str, Value)>;

/// A point in a span's life: one of the journal's facts.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub name: &'static str,
    pub at: Timestamp,
    pub attributes: Attributes,
}

/// One span, with its times fixed.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanPlan {
    pub name: String,
    pub start: Timestamp,
    pub end: Timestamp,
    pub attributes: Attributes,
    pub events: Vec<SpanEvent>,
    /// `Some(description)`: the span's status is an error.
    pub error: Option<String>,
}

impl SpanPlan {
    /// The value of attribute `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find_map(|(k, v)| (*k == key).then_some(v))
    }
}

/// The trace of one gate: a root span and one child per expected member.
#[derive(Debug, Clone, PartialEq)]
pub struct GateTrace {
    pub node: String,
    /// The node's uid: with the gate's start, it names the trace (`ids`).
    pub node_uid: String,
    pub root: SpanPlan,
    pub members: Vec<SpanPlan>,
}

impl GateTrace {
    /// How many spans the trace has.
    pub fn span_count(&self) -> usize {
        1 + self.members.len()
    }
}

/// The name of the root span.
pub const ROOT_SPAN: &str = "gate";

/// The trace of a gate that opened (by readiness, by timeout or by hand);
/// `None` for one that ended any other way (node deleted, not gated, taint
/// removed by another writer, dry-run), which has no opening to end at.
pub fn gate_trace(state: &GateState, journal: &Journal) -> Option<GateTrace> {
    let opened = state.opened.as_ref()?;
    let node = state.node.as_ref()?;
    let start = state.gate_start()?;
    let end = opened_at(journal, opened).unwrap_or(opened.at);
    let end = end.max(start);
    // A span for each expected member, within the gate's `start..end`, and
    // how many of them were Ready: a Ready member's span ends when its pod
    // became Ready; one not Ready when the gate timed out waited until the
    // deadline, one never Ready at a manual opening, until the opening.
    let deadline = state
        .timed_out
        .as_ref()
        .map(|t| t.deadline.clamp(start, end));
    let mut members = Vec::new();
    let mut ready = 0i64;
    for (id, member) in state.expected() {
        let (at, attribute, error) = match &member.readiness {
            Some(Readiness::Ready { pod }) => {
                ready += 1;
                let at = ready_at(state, journal, id, pod).clamp(start, end);
                (at, ("nodegate.member.pod", pod.to_string()), None)
            }
            other => {
                let why = match other {
                    Some(Readiness::Waiting { why, .. }) => why.to_string(),
                    _ => "not evaluated yet".to_string(),
                };
                let error = Some(format!("not Ready: {why}"));
                let at = deadline.unwrap_or(end);
                (at, ("nodegate.member.waiting_for", why), error)
            }
        };
        let kind = match id {
            MemberId::DaemonSet(_) => "daemonset",
            MemberId::Critical(_) => "critical_pod",
            MemberId::Condition(_) => "node_condition",
            MemberId::Resource(_) => "extended_resource",
            MemberId::Dra(_) => "dra_driver",
            MemberId::Canary => "canary",
        };
        let events = journal
            .entries()
            .filter_map(|e| match &e.event {
                Event::MemberWaiting { member, why, .. } if member == id => Some(SpanEvent {
                    name: "waiting",
                    at: e.at,
                    attributes: vec![text("why", why)],
                }),
                Event::MemberReady { member, pod } if member == id => Some(SpanEvent {
                    name: "ready",
                    at: e.at,
                    attributes: vec![text("pod", pod)],
                }),
                _ => None,
            })
            .collect();
        members.push(SpanPlan {
            name: id.to_string(),
            start,
            end: at.max(start),
            attributes: vec![
                text("nodegate.member", id),
                ("nodegate.member.kind", kind.into()),
                (attribute.0, attribute.1.into()),
            ],
            events,
            error,
        });
    }
    let mut attributes: Attributes = vec![
        text("k8s.node.name", &node.name),
        text("k8s.node.uid", &node.uid),
        text("nodegate.outcome", opened.opened_by),
        ("nodegate.members.expected", (members.len() as i64).into()),
        ("nodegate.members.ready", ready.into()),
        (
            "nodegate.gate.start",
            if node.gated_since.is_some() {
                "gated-since"
            } else {
                "creation"
            }
            .into(),
        ),
    ];
    if let Some(deadline) = state.timed_out.as_ref().map(|t| t.deadline) {
        attributes.push(text("nodegate.deadline", deadline));
    }
    if journal.dropped() > 0 {
        // The oldest facts were folded away: their events are missing.
        attributes.push((
            "nodegate.journal.dropped",
            (journal.dropped() as i64).into(),
        ));
    }
    let root = SpanPlan {
        name: ROOT_SPAN.to_string(),
        start,
        end,
        attributes,
        events: journal
            .entries()
            .filter_map(|e| gate_event(e.at, &e.event))
            .collect(),
        error: None,
    };
    Some(GateTrace {
        node: node.name.clone(),
        node_uid: node.uid.clone(),
        root,
        members,
    })
}

/// The `nodegate.dev/opened-at` of the untaint that opened the gate. A gate
/// found open by an earlier untaint whose answer was lost records that
/// untaint's time as its opening; one whose patch was answered records when
/// the answer came, and its `opened-at` is the last untaint sent.
fn opened_at(journal: &Journal, opened: &OpenedRecord) -> Option<Timestamp> {
    let sent = || {
        journal.entries().filter_map(|e| match &e.event {
            Event::UntaintSent { opened_by, at, .. } if *opened_by == opened.opened_by => Some(*at),
            _ => None,
        })
    };
    sent().find(|at| *at == opened.at).or_else(|| sent().last())
}

/// When member `id` became Ready through `pod`: the pod's Ready transition
/// (plus `minReadySeconds` for a DaemonSet's pod), else when the gate saw it
/// Ready, else when the journal begins (it was Ready before).
fn ready_at(state: &GateState, journal: &Journal, id: &MemberId, pod: &str) -> Timestamp {
    let min_ready = match id {
        MemberId::DaemonSet(key) => state
            .daemonsets
            .get(key)
            .map_or(0, |ds| i64::from(ds.min_ready_seconds.max(0))),
        MemberId::Critical(_)
        | MemberId::Condition(_)
        | MemberId::Resource(_)
        | MemberId::Dra(_)
        | MemberId::Canary => 0,
    };
    let from_pod = state
        .pods
        .values()
        .find(|p| *p.name == *pod)
        .and_then(|p| p.ready_since.get())
        .and_then(|t| t.checked_add(SignedDuration::from_secs(min_ready)).ok());
    let seen = || {
        journal
            .entries()
            .filter_map(|e| match &e.event {
                Event::MemberReady { member, .. } if member == id => Some(e.at),
                _ => None,
            })
            .last()
    };
    let first = || journal.entries().next().map(|e| e.at);
    from_pod
        .or_else(seen)
        .or_else(first)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The journal's facts that the root span shows as events; the others
/// (observations, timers) are in the spans' times already.
fn gate_event(at: Timestamp, event: &Event) -> Option<SpanEvent> {
    let attempt = |n: &u32| ("attempt", Value::I64(i64::from(*n)));
    let (name, attributes): (&'static str, Attributes) = match event {
        Event::GatedSinceClamped { gated_since, to } => (
            "gated-since clamped",
            vec![text("gated_since", gated_since), text("to", to)],
        ),
        Event::DeadlineHeld {
            deadline,
            server_time,
            reason,
            ..
        } => (
            "deadline held",
            vec![
                text("deadline", deadline),
                text("server_time", server_time),
                text("reason", reason),
            ],
        ),
        Event::TimedOut {
            deadline,
            action,
            not_ready,
            ..
        } => (
            "timed out",
            vec![
                text("deadline", deadline),
                text("action", format!("{action:?}").to_lowercase()),
                ("not_ready", (not_ready.len() as i64).into()),
            ],
        ),
        Event::WritesSuspended { by, .. } => ("writes suspended", vec![text("by", by)]),
        Event::WritesResumed => ("writes resumed", vec![]),
        Event::UntaintSent {
            attempt: n,
            opened_by,
            ..
        } => (
            "untaint sent",
            vec![attempt(n), text("opened_by", opened_by)],
        ),
        Event::WriteConflict { attempt: n } => ("conflict", vec![attempt(n)]),
        Event::WriteFailed { attempt: n, error } => {
            ("write failed", vec![attempt(n), text("error", error)])
        }
        Event::WriteUnanswered { attempt: n, error }
        | Event::MarkUnanswered { attempt: n, error } => {
            ("write unanswered", vec![attempt(n), text("error", error)])
        }
        Event::WriteDeferred { attempt: n } => ("leadership lost", vec![attempt(n)]),
        Event::WithdrawRequested { attempt: n, reason } => {
            ("withdrawal", vec![attempt(n), text("reason", reason)])
        }
        Event::RetryScheduled { attempt: n } => ("retry", vec![attempt(n)]),
        Event::WriteAbandoned { reason } => ("write abandoned", vec![text("reason", reason)]),
        Event::Opened { opened_by, .. } => ("opened", vec![text("opened_by", opened_by)]),
        _ => return None,
    };
    Some(SpanEvent {
        name,
        at,
        attributes,
    })
}

fn text(key: &'static str, value: impl std::fmt::Display) -> (&'static str, Value) {
    (key, value.to_string().into())
}

#[cfg(test)]
mod tests;
