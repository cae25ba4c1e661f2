//! A member's row in an explain report, filled the same way for every kind
//! of member.

use serde::Serialize;

use crate::gate::GateState;
use crate::gate::derive::NodeMember;
pub(crate) use crate::gate::state::{NOT_EVALUATED, UNEVALUATED};
use crate::rules::selector::LabelSelector;
use crate::vocab::member::{Expectation, Member, MemberId, Readiness};

/// The reason code of an expected member.
pub const EXPECTED: &str = "expected";

/// One member of the node's gate, of any kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemberRow {
    pub namespace: String,
    pub name: String,
    pub expected: bool,
    /// Why it is (or is not) expected here, in words.
    pub reason: String,
    /// `reason` as a stable name: "expected", or a placement reason code
    /// such as "node_selector" or "starts_after_gate".
    pub reason_code: String,
    /// Null when not expected.
    pub ready: Option<bool>,
    /// The pod that satisfies the member, or the one it waits on.
    pub pod: Option<String>,
    /// What it waits for; null when Ready or not expected.
    pub waiting: Option<String>,
    /// Each required node affinity term's result, in order (DaemonSets with
    /// a required node affinity only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<Vec<TermResult>>,
    /// A critical-pod entry's pod selector, or a condition's `TYPE=STATUS`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// How the member is named in the table and the verdict: its gate
    /// member id (`namespace/name`, `critical:NAME`).
    #[serde(skip)]
    pub label: String,
    /// Further lines for the table's WHY column.
    #[serde(skip)]
    pub detail: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TermResult {
    /// 1-based: term 1 is `nodeSelectorTerms[0]`.
    pub term: usize,
    pub matches: bool,
    /// Why it does not match; null when it does.
    pub why: Option<String>,
}

pub(crate) fn empty_row(id: &MemberId, namespace: &str, name: &str) -> MemberRow {
    MemberRow {
        namespace: namespace.to_string(),
        name: name.to_string(),
        label: id.to_string(),
        ..MemberRow::default()
    }
}

/// A member the state does not hold (never after a snapshot) reads as the
/// gate reads a member with no readiness: expected, not evaluated yet.
pub(crate) fn member_of<'a>(state: &'a GateState, id: &MemberId) -> &'a Member {
    state.members.get(id).unwrap_or(&UNEVALUATED)
}

/// The row of a member judged from the node alone (a condition, resource or
/// DRA driver), read from the gate's state like every member.
pub(crate) fn node_member_row(state: &GateState, m: &dyn NodeMember) -> MemberRow {
    let id = m.id();
    let mut row = empty_row(&id, "", m.name());
    row.selector = m.row_selector();
    let member = member_of(state, &id);
    if judged_by_selector(&mut row, member, m.what(), m.node_selector()) {
        row.ready = Some(false);
        match &member.readiness {
            Some(Readiness::Ready { pod }) => {
                row.ready = Some(true);
                // A condition's selector already says what is Ready.
                if row.selector.is_none() {
                    row.detail.push(pod.clone());
                }
            }
            Some(Readiness::Waiting { why, .. }) => row.waiting = Some(why.clone()),
            None => row.waiting = Some(NOT_EVALUATED.into()),
        }
    }
    row
}

/// A row's expectation, for a member placed by a node selector alone: the
/// gate's reason when it is not expected, the selector that matches when it
/// is. True when it is expected.
pub(crate) fn judged_by_selector(
    row: &mut MemberRow,
    member: &Member,
    what: &str,
    selector: Option<&LabelSelector>,
) -> bool {
    match &member.expectation {
        Expectation::NotExpected { reason, code } => {
            row.reason = reason.clone();
            row.reason_code = code.to_string();
            false
        }
        Expectation::Expected => {
            row.expected = true;
            row.reason_code = EXPECTED.into();
            row.reason = match selector.map(ToString::to_string).filter(|s| !s.is_empty()) {
                Some(s) => format!("the node matches the {what}'s node selector {s:?}"),
                None => format!("the {what} has no node selector, so it applies to every node"),
            };
            true
        }
    }
}
