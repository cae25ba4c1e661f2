//! Why a DaemonSet is not expected on a node, in words an operator can act on
//! and as a stable [`ReasonCode`]; it words reasons, it never decides one.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::rules::selector::{OP_DOES_NOT_EXIST, OP_IN, OP_NOT_IN};
use crate::vocab::annotations::DAEMONSET_IGNORE;
use crate::vocab::model::{NODE_OP_GT, NODE_OP_LT, NodeSelectorRequirement, Taint};
use crate::vocab::words::word_enum;

/// Why a DaemonSet is not waited for on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum NotExpectedReason {
    /// In a namespace outside `--daemonset-namespaces`.
    OutsideDaemonSetNamespaces,
    /// Listed by namespace/name in the configured exclusions.
    ExcludedByName,
    /// Its labels match the configured exclude selector (shown in kubectl form).
    ExcludedBySelector { selector: String },
    /// Carries `nodegate.dev/ignore: "true"`.
    IgnoreAnnotation,
    /// The template's `spec.nodeName` names another node.
    #[serde(rename_all = "camelCase")]
    NodeNameMismatch { wanted: String, node: String },
    /// A `nodeSelector` label is absent from the node.
    #[serde(rename_all = "camelCase")]
    NodeSelectorKeyMissing { key: String, wanted: String },
    /// A `nodeSelector` label has another value on the node.
    #[serde(rename_all = "camelCase")]
    NodeSelectorValueDiffers {
        key: String,
        wanted: String,
        actual: String,
    },
    /// No term of the required node affinity matches; one entry per term, in
    /// order (empty when the affinity has no terms at all).
    NodeAffinityNoTermMatched { terms: Vec<TermMismatch> },
    /// The node has a NoSchedule/NoExecute taint the pod does not tolerate,
    /// and it is not one nodegate will lift.
    UntoleratedTaint { taint: Taint },
    /// The only untolerated taint is nodegate's own: the pod can start only
    /// after the gate opens, so waiting for it would deadlock.
    StartsAfterGate { taint: Taint },
}

word_enum! {
    /// Why a member is not expected, as a stable name (the journal's
    /// `member_not_expected` events, explain's `reason_code`). One byte, so a
    /// gate's members and journal carry it for free.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum ReasonCode {
        OutsideDaemonSetNamespaces = "outside_daemonset_namespaces",
        ExcludedByName = "excluded_by_name",
        ExcludedBySelector = "excluded_by_selector",
        IgnoreAnnotation = "ignore_annotation",
        NodeName = "node_name",
        /// A DaemonSet's nodeSelector, or a critical-pod entry's node selector.
        NodeSelector = "node_selector",
        NodeAffinity = "node_affinity",
        UntoleratedTaint = "untolerated_taint",
        StartsAfterGate = "starts_after_gate",
    }
}

impl NotExpectedReason {
    /// A short, stable name: [`Self::kind`] as text.
    pub fn code(&self) -> &'static str {
        self.kind().as_str()
    }

    /// [`Self::code`] as a value.
    pub fn kind(&self) -> ReasonCode {
        match self {
            NotExpectedReason::OutsideDaemonSetNamespaces => ReasonCode::OutsideDaemonSetNamespaces,
            NotExpectedReason::ExcludedByName => ReasonCode::ExcludedByName,
            NotExpectedReason::ExcludedBySelector { .. } => ReasonCode::ExcludedBySelector,
            NotExpectedReason::IgnoreAnnotation => ReasonCode::IgnoreAnnotation,
            NotExpectedReason::NodeNameMismatch { .. } => ReasonCode::NodeName,
            NotExpectedReason::NodeSelectorKeyMissing { .. }
            | NotExpectedReason::NodeSelectorValueDiffers { .. } => ReasonCode::NodeSelector,
            NotExpectedReason::NodeAffinityNoTermMatched { .. } => ReasonCode::NodeAffinity,
            NotExpectedReason::UntoleratedTaint { .. } => ReasonCode::UntoleratedTaint,
            NotExpectedReason::StartsAfterGate { .. } => ReasonCode::StartsAfterGate,
        }
    }

    /// Reasons that come from nodegate's configuration or the DaemonSet's
    /// opt-out, not from where the DaemonSet controller would place a pod.
    pub fn is_exclusion(&self) -> bool {
        matches!(
            self,
            NotExpectedReason::OutsideDaemonSetNamespaces
                | NotExpectedReason::ExcludedByName
                | NotExpectedReason::ExcludedBySelector { .. }
                | NotExpectedReason::IgnoreAnnotation
        )
    }
}

impl fmt::Display for NotExpectedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutsideDaemonSetNamespaces => {
                f.write_str("its namespace is not in nodegate's --daemonset-namespaces")
            }
            Self::ExcludedByName => f.write_str("excluded by name in nodegate's configuration"),
            Self::ExcludedBySelector { selector } => write!(
                f,
                "excluded because its labels match nodegate's exclude selector {selector:?}"
            ),
            Self::IgnoreAnnotation => {
                write!(f, "excluded by its annotation {DAEMONSET_IGNORE}: \"true\"")
            }
            Self::NodeNameMismatch { wanted, node } => write!(
                f,
                "its pod template sets spec.nodeName {wanted:?}, so it never runs on node {node:?}"
            ),
            Self::NodeSelectorKeyMissing { key, wanted } => write!(
                f,
                "its nodeSelector needs label {key}={wanted}, and the node has no label {key}"
            ),
            Self::NodeSelectorValueDiffers {
                key,
                wanted,
                actual,
            } => write!(
                f,
                "its nodeSelector needs label {key}={wanted}, and the node has {key}={actual}"
            ),
            Self::NodeAffinityNoTermMatched { terms } if terms.is_empty() => f.write_str(
                "its required node affinity has no nodeSelectorTerms, which matches no node",
            ),
            Self::NodeAffinityNoTermMatched { terms } => {
                let terms: Vec<String> = terms.iter().map(ToString::to_string).collect();
                let terms = terms.join("; ");
                write!(
                    f,
                    "no term of its required node affinity matches the node: {terms}"
                )
            }
            Self::UntoleratedTaint { taint } => {
                write!(f, "it does not tolerate the node's taint {taint}")
            }
            Self::StartsAfterGate { taint } => write!(
                f,
                "starts after the gate opens: it does not tolerate nodegate's own taint {taint}, \
                 so its pod cannot start until nodegate removes it"
            ),
        }
    }
}

word_enum! {
    /// Which list of a node selector term a requirement sits in.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum TermList {
        MatchExpressions = "matchExpressions",
        MatchFields = "matchFields",
    }
}

/// A requirement of a term, with where it sits, for explanations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementRef {
    pub list: TermList,
    /// 0-based, as in the API path `matchExpressions[index]`.
    pub index: usize,
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

impl RequirementRef {
    pub(super) fn new(list: TermList, index: usize, r: &NodeSelectorRequirement) -> Self {
        RequirementRef {
            list,
            index,
            key: r.key.clone(),
            operator: r.operator.clone(),
            values: r.values.clone(),
        }
    }
}

/// Why one node selector term does not match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TermFailure {
    /// Neither `matchExpressions` nor `matchFields`: matches no node.
    Empty,
    /// A requirement breaks the API rules, so the whole term matches nothing.
    Invalid {
        requirement: RequirementRef,
        problem: String,
    },
    /// A valid requirement the node does not meet. `node_value` is the
    /// node's label value (absent when the label is missing) or, for
    /// `matchFields`, the field's value.
    #[serde(rename_all = "camelCase")]
    Unmet {
        requirement: RequirementRef,
        node_value: Option<String>,
    },
}

impl fmt::Display for TermFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => {
                f.write_str("has neither matchExpressions nor matchFields, which matches no node")
            }
            Self::Invalid {
                requirement: r,
                problem,
            } => write!(
                f,
                "{problem} ({}[{}], key {:?}; an invalid requirement makes its term match nothing)",
                r.list, r.index, r.key
            ),
            Self::Unmet {
                requirement: r,
                node_value,
            } => {
                let (key, op, values) = (&r.key, r.operator.as_str(), &r.values);
                if r.list == TermList::MatchFields {
                    let actual = node_value.as_deref().unwrap_or("");
                    return match op {
                        OP_NOT_IN => {
                            write!(
                                f,
                                "field {key} is {actual:?}, which NotIn {values:?} excludes"
                            )
                        }
                        _ => write!(f, "field {key} is {actual:?}, not In {values:?}"),
                    };
                }
                match (op, node_value) {
                    (_, None) => write!(f, "label {key} is missing ({op} {values:?})"),
                    (OP_IN, Some(v)) => write!(f, "label {key}={v} is not In {values:?}"),
                    (OP_NOT_IN, Some(v)) => {
                        write!(f, "label {key}={v} is excluded by NotIn {values:?}")
                    }
                    (OP_DOES_NOT_EXIST, Some(v)) => {
                        write!(f, "label {key}={v} is present (DoesNotExist)")
                    }
                    (NODE_OP_GT | NODE_OP_LT, Some(v)) if v.parse::<i64>().is_err() => {
                        write!(f, "label {key}={v:?} is not an integer ({op} {values:?})")
                    }
                    (_, Some(v)) => write!(f, "label {key}={v} is not {op} {values:?}"),
                }
            }
        }
    }
}

/// The failure of one term, numbered for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermMismatch {
    /// 1-based: "term 1" is `nodeSelectorTerms[0]`.
    pub term: usize,
    pub failure: TermFailure,
}

impl fmt::Display for TermMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "term {}: {}", self.term, self.failure)
    }
}
