//! The configured opt-outs, which never look at the node.

use super::config::PlacementConfig;
use super::reason::NotExpectedReason;
use crate::vocab::annotations::DAEMONSET_IGNORE;
use crate::vocab::model::DaemonSetInfo;
use crate::vocab::model::Shared;

/// Why a DaemonSet is left out whatever the node, if it is. Its ignore
/// annotation counts only as exactly "true", as Kubernetes reads booleans.
///
/// An empty exclude selector would match every DaemonSet and so open every
/// gate at once; no one configures that on purpose, so it counts as unset.
pub fn exclusion_reason(ds: &DaemonSetInfo, cfg: &PlacementConfig) -> Option<NotExpectedReason> {
    if !cfg.daemonset_allowed(&ds.namespace) {
        return Some(NotExpectedReason::OutsideDaemonSetNamespaces);
    }
    // A walk, not a lookup: the set's keys are owned pairs, and a lookup
    // would copy both names for every DaemonSet on every re-derivation.
    let named =
        |(namespace, name): &(String, String)| *namespace == ds.namespace && *name == ds.name;
    if cfg.excluded.iter().any(named) {
        return Some(NotExpectedReason::ExcludedByName);
    }
    if let Some(selector) = cfg.exclude_selector.as_ref().filter(|s| !s.is_empty())
        && selector.matches(&ds.labels)
    {
        return Some(NotExpectedReason::ExcludedBySelector {
            selector: selector.to_string(),
        });
    }
    if ds.annotations.get(DAEMONSET_IGNORE).map(Shared::as_str) == Some("true") {
        return Some(NotExpectedReason::IgnoreAnnotation);
    }
    None
}
