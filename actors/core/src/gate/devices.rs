//! The device members (semantics.md §6.8): each `criticalResources` entry
//! (`resource:NAME`) and each `draDrivers` entry (`dra:DRIVER`), derived
//! from the node alone, like node conditions.

use super::config::GateConfig;
use super::derive::selector_mismatch;
use super::member::{Expectation, Member, MemberId, Readiness};
use crate::devices::{CriticalResource, DraDriver};
use crate::model::NodeInfo;

/// A device member by id, derived from scratch; `None` when the
/// configuration no longer lists it (or `id` is not a device member).
pub(super) fn member(id: &MemberId, node: &NodeInfo, cfg: &GateConfig) -> Option<Member> {
    match id {
        MemberId::Resource(name) => cfg
            .resources
            .iter()
            .find(|r| r.resource == *name)
            .map(|r| resource_member(node, r)),
        MemberId::Dra(driver) => cfg
            .dra_drivers
            .iter()
            .find(|d| d.driver == *driver)
            .map(|d| dra_member(node, d)),
        _ => None,
    }
}

/// Expected where its node selector matches; Ready once the node reports
/// more than zero of the resource allocatable.
pub(super) fn resource_member(node: &NodeInfo, r: &CriticalResource) -> Member {
    if r.applies(node) {
        expected(r.judge(node))
    } else {
        selector_mismatch("resource", r.node_selector.as_ref())
    }
}

/// Expected where its node selector matches; Ready once every pool the
/// driver publishes for the node is complete (and there is one).
pub(super) fn dra_member(node: &NodeInfo, d: &DraDriver) -> Member {
    if d.applies(node) {
        expected(d.judge(node))
    } else {
        selector_mismatch("DRA driver", d.node_selector.as_ref())
    }
}

fn expected(verdict: Result<String, String>) -> Member {
    Member {
        expectation: Expectation::Expected,
        readiness: Some(match verdict {
            Ok(what) => Readiness::Ready { pod: what },
            Err(why) => Readiness::Waiting {
                why,
                available_at: None,
            },
        }),
    }
}
