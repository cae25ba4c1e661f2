//! The `criticalConditions` members in an explain report (semantics.md
//! §6.5), read from the gate's state like every member.

use super::{EXPECTED, MemberRow, NOT_EVALUATED, empty_row, member_of, selector_match};
use crate::gate::GateState;
use crate::rules::conditions::CriticalCondition;
use crate::vocab::member::{Expectation, MemberId, Readiness};

pub(super) fn condition_row(state: &GateState, cond: &CriticalCondition) -> MemberRow {
    let id = MemberId::Condition(cond.type_.clone());
    let mut row = empty_row(&id, "", &cond.type_);
    row.selector = Some(format!("{}={}", cond.type_, cond.status));
    let member = member_of(state, &id);
    match &member.expectation {
        Expectation::NotExpected { reason, code } => {
            row.reason = reason.clone();
            row.reason_code = code.to_string();
        }
        Expectation::Expected => {
            row.expected = true;
            row.reason_code = EXPECTED.into();
            row.reason = selector_match("condition", cond.node_selector.as_ref());
            row.ready = Some(false);
            match &member.readiness {
                Some(Readiness::Ready { .. }) => row.ready = Some(true),
                Some(Readiness::Waiting { why, .. }) => row.waiting = Some(why.clone()),
                None => row.waiting = Some(NOT_EVALUATED.into()),
            }
        }
    }
    row
}
