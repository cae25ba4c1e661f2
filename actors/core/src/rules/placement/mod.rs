//! Would this DaemonSet place a pod on this node, once start-up is over
//! (semantics.md sections 1 to 3)? Upstream Kubernetes 1.36 is the authority,
//! down to its quirks; every "no" comes with a reason an operator can act on,
//! and no cluster data, however malformed, makes it panic.

mod affinity;
mod config;
mod exclusions;
mod reason;
mod taints;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::vocab::model::{DaemonSetInfo, Labels, NodeInfo, PodPlacement, Taint};

use affinity::check_node_name;
pub use affinity::{
    NODE_NAME_FIELD, check_node_affinity, check_node_selector, explain_terms, match_term,
    node_matches_terms,
};
pub use config::{
    DEFAULT_MANAGED_TAINT_KEY, DEFAULT_TRANSIENT_TAINTS, ManagedTaint, ManagedTaintError,
    PlacementConfig, TransientTaint, default_transient_taints,
};
pub use exclusions::exclusion_reason;
pub use reason::{
    NotExpectedReason, ReasonCode, RequirementRef, TermFailure, TermList, TermMismatch,
};
pub use taints::{
    DaemonTolerations, EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE, TOLERATION_OP_EQUAL,
    TOLERATION_OP_EXISTS, TOLERATION_OP_GT, TOLERATION_OP_LT, default_daemon_tolerations,
    first_untolerated_taint, taint_blocks_scheduling, tolerates, with_default_tolerations,
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    Expected,
    NotExpected(NotExpectedReason),
}

impl Verdict {
    pub fn is_expected(&self) -> bool {
        matches!(self, Verdict::Expected)
    }

    pub fn reason(&self) -> Option<&NotExpectedReason> {
        match self {
            Verdict::Expected => None,
            Verdict::NotExpected(r) => Some(r),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Expected => f.write_str("expected"),
            Verdict::NotExpected(r) => write!(f, "not expected: {r}"),
        }
    }
}

/// The DaemonSet controller's own predicate (`NodeShouldRunDaemonPod`'s
/// "should run") for the node exactly as given: no steady-state view and no
/// exclusions. The differential tests hold us to it.
pub fn should_run(
    node_name: &str,
    labels: &Labels,
    taints: &[Taint],
    template: &PodPlacement,
) -> Result<(), NotExpectedReason> {
    check_node_name(template, node_name)?;
    check_node_affinity(template, node_name, labels)?;
    let tolerations = DaemonTolerations::new(&template.tolerations, template.host_network);
    match first_untolerated_taint(taints, tolerations) {
        Some(taint) => Err(NotExpectedReason::UntoleratedTaint {
            taint: taint.clone(),
        }),
        None => Ok(()),
    }
}

/// Must the gate on `node` wait for `ds`? The exclusions, then the
/// controller's predicate against the node in steady state. Other untolerated
/// taints are checked before managed ones, so a DaemonSet that will never run
/// here is reported as such rather than as "starts after the gate opens".
pub fn evaluate(node: &NodeInfo, ds: &DaemonSetInfo, cfg: &PlacementConfig) -> Verdict {
    placement_problem(node, ds, cfg).map_or_else(Verdict::NotExpected, |()| Verdict::Expected)
}

fn placement_problem(
    node: &NodeInfo,
    ds: &DaemonSetInfo,
    cfg: &PlacementConfig,
) -> Result<(), NotExpectedReason> {
    if let Some(reason) = exclusion_reason(ds, cfg) {
        return Err(reason);
    }
    let template = &ds.template;
    check_node_name(template, &node.name)?;
    check_node_affinity(template, &node.name, &node.labels)?;
    let tolerations = DaemonTolerations::new(&template.tolerations, template.host_network);
    // The node's lasting taints, the managed ones or the others.
    let lasting = |managed: bool| {
        let taints = node.taints.iter().filter(|t| !cfg.is_transient(t));
        taints.filter(move |t| cfg.is_managed(t) == managed)
    };
    if let Some(taint) = first_untolerated_taint(lasting(false), tolerations) {
        return Err(NotExpectedReason::UntoleratedTaint {
            taint: taint.clone(),
        });
    }
    match first_untolerated_taint(lasting(true), tolerations) {
        Some(taint) => Err(NotExpectedReason::StartsAfterGate {
            taint: taint.clone(),
        }),
        None => Ok(()),
    }
}
