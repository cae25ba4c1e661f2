//! The canary member in an explain report (semantics.md §6.9), read from
//! the gate's state like every member: expected on every gated node while
//! `canary` is configured, with the gate's words for what it waits for.

use crate::canary::{CANARY_LABEL, label_value, pod_name};
use crate::gate::GateState;
use crate::gate::report::rows::{EXPECTED, MemberRow, NOT_EVALUATED, empty_row, member_of};
use crate::vocab::config::CanaryConfig;
use crate::vocab::member::{MemberId, Readiness};

pub(crate) fn canary_row(state: &GateState, cfg: &CanaryConfig) -> MemberRow {
    let id = MemberId::Canary;
    let node = state.node.as_ref().map(|n| n.name.as_str()).unwrap_or("");
    let mut row = empty_row(&id, &cfg.namespace, &pod_name(node));
    row.selector = Some(format!("{CANARY_LABEL}={}", label_value(node)));
    row.expected = true;
    row.reason_code = EXPECTED.into();
    row.reason = "canary is configured: every gated node runs one".into();
    row.ready = Some(false);
    match &member_of(state, &id).readiness {
        Some(Readiness::Ready { pod }) => {
            row.ready = Some(true);
            row.pod = Some(pod.clone());
        }
        Some(Readiness::Waiting { why, .. }) => row.waiting = Some(why.clone()),
        None => row.waiting = Some(NOT_EVALUATED.into()),
    }
    row
}
