//! Node conditions (semantics.md §6.5): as gate members
//! ([`CriticalCondition`], `criticalConditions` in the config) and as taints
//! ([`taints`], `conditionTaints`).

pub mod taints;

use serde::{Deserialize, Serialize};

use crate::rules::selector::{LabelSelector, SelectorError};
use crate::vocab::model::NodeInfo;

/// The status a condition the node does not report reads as, as upstream.
pub const ABSENT_STATUS: &str = "Unknown";

/// The status of condition `type_` on `node`; [`ABSENT_STATUS`] when the node
/// does not report it.
pub fn status_of<'n>(node: &'n NodeInfo, type_: &str) -> &'n str {
    node.conditions
        .get(type_)
        .map_or(ABSENT_STATUS, |c| c.status.as_str())
}

/// A node condition the gate waits for, like a member: the node opens only
/// once it reports condition `type_` with status `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CriticalCondition {
    /// The condition type, e.g. `NetworkReady`; also the member's name
    /// (`condition:NetworkReady`).
    #[serde(rename = "type")]
    pub type_: String,
    /// The status to wait for, matched exactly (`True`, `False`, ...).
    pub status: String,
    /// Which nodes wait for it; every gated node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CriticalConditionError {
    #[error("critical condition #{index}: type must not be empty")]
    NoType { index: usize },
    #[error("critical condition {type_:?}: status must not be empty")]
    NoStatus { type_: String },
    #[error("critical condition {type_:?} is listed twice; list each condition type once")]
    Duplicate { type_: String },
    #[error("critical condition {type_:?}: nodeSelector: {source}")]
    NodeSelector {
        type_: String,
        source: SelectorError,
    },
}

impl CriticalCondition {
    /// `None` when the node reports the wanted status; else why not, in
    /// words for the journal, `explain` and `status`.
    pub fn waiting(&self, node: &NodeInfo) -> Option<String> {
        let now = status_of(node, &self.type_);
        if now == self.status {
            return None;
        }
        let (type_, wanted) = (&self.type_, &self.status);
        let is = if node.conditions.contains_key(type_.as_str()) {
            format!("condition {type_} is {now}")
        } else {
            format!("the node does not report condition {type_} (read as {ABSENT_STATUS})")
        };
        Some(format!("{is}, waiting for {wanted}"))
    }
}

/// The rules a list of critical conditions must meet.
pub fn validate_critical(list: &[CriticalCondition]) -> Result<(), CriticalConditionError> {
    let mut seen = std::collections::BTreeSet::new();
    for (index, c) in list.iter().enumerate() {
        let type_ = || c.type_.clone();
        if c.type_.is_empty() {
            return Err(CriticalConditionError::NoType { index });
        }
        if c.status.is_empty() {
            return Err(CriticalConditionError::NoStatus { type_: type_() });
        }
        if !seen.insert(c.type_.as_str()) {
            return Err(CriticalConditionError::Duplicate { type_: type_() });
        }
        if let Some(sel) = &c.node_selector {
            sel.validate()
                .map_err(|source| CriticalConditionError::NodeSelector {
                    type_: type_(),
                    source,
                })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
