//! The device parts of an explain report (semantics.md §6.8): each
//! `criticalResources` and `draDrivers` member, read from the gate's state
//! like every member.

use super::{EXPECTED, MemberRow, NOT_EVALUATED, empty_row, member_of, selector_match};
use crate::gate::GateState;
use crate::rules::selector::LabelSelector;
use crate::vocab::config::Config;
use crate::vocab::member::{Expectation, MemberId, Readiness};

/// The rows of the device members, resources first, each list in
/// configuration order.
pub(super) fn device_rows(state: &GateState, cfg: &Config) -> Vec<MemberRow> {
    let resources = cfg.resources.iter().map(|r| {
        let id = MemberId::Resource(r.resource.clone());
        row(
            state,
            &id,
            &r.resource,
            "resource",
            r.node_selector.as_ref(),
        )
    });
    let drivers = cfg.dra_drivers.iter().map(|d| {
        let id = MemberId::Dra(d.driver.clone());
        row(
            state,
            &id,
            &d.driver,
            "DRA driver",
            d.node_selector.as_ref(),
        )
    });
    resources.chain(drivers).collect()
}

fn row(
    state: &GateState,
    id: &MemberId,
    name: &str,
    what: &str,
    node_selector: Option<&LabelSelector>,
) -> MemberRow {
    let mut row = empty_row(id, "", name);
    let member = member_of(state, id);
    match &member.expectation {
        Expectation::NotExpected { reason, code } => {
            row.reason = reason.clone();
            row.reason_code = code.to_string();
        }
        Expectation::Expected => {
            row.expected = true;
            row.reason_code = EXPECTED.into();
            row.reason = selector_match(what, node_selector);
            row.ready = Some(false);
            match &member.readiness {
                Some(Readiness::Ready { pod }) => {
                    row.ready = Some(true);
                    row.detail.push(pod.clone());
                }
                Some(Readiness::Waiting { why, .. }) => row.waiting = Some(why.clone()),
                None => row.waiting = Some(NOT_EVALUATED.into()),
            }
        }
    }
    row
}
