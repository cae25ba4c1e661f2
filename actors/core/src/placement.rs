//! Would this DaemonSet place a pod on this node, once start-up is over?
//!
//! This module owns the placement rules of semantics.md sections 1 to 3: the
//! DaemonSet controller's own predicate (`should_run`: default tolerations,
//! `nodeName`, `nodeSelector`, required node affinity, NoSchedule/NoExecute
//! taints), the steady-state view of a node's taints (transient start-up
//! taints removed, nodegate's managed taints kept), and the configured
//! exclusions (`evaluate`). Upstream Kubernetes 1.36 is the authority, down to
//! its quirks; every "no" comes with a reason an operator can act on. It is
//! pure: it never does I/O, never reads a clock and never panics on cluster
//! data, however malformed.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{
    DaemonSetInfo, Labels, NodeInfo, NodeSelectorRequirement, NodeSelectorTerm, PodPlacement,
    Taint, Toleration,
};
use crate::selector::{LabelSelector, check_label_key, check_label_value};

/// A DaemonSet annotated `nodegate.dev/ignore: "true"` is never waited for.
pub const IGNORE_ANNOTATION: &str = "nodegate.dev/ignore";
/// nodegate's default startup taint key (effect `NoSchedule`).
pub const DEFAULT_MANAGED_TAINT_KEY: &str = "nodegate.dev/initializing";

pub const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
pub const EFFECT_PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
pub const EFFECT_NO_EXECUTE: &str = "NoExecute";

pub const TOLERATION_OP_EXISTS: &str = "Exists";
pub const TOLERATION_OP_EQUAL: &str = "Equal";
pub const TOLERATION_OP_LT: &str = "Lt";
pub const TOLERATION_OP_GT: &str = "Gt";

pub const NODE_OP_IN: &str = "In";
pub const NODE_OP_NOT_IN: &str = "NotIn";
pub const NODE_OP_EXISTS: &str = "Exists";
pub const NODE_OP_DOES_NOT_EXIST: &str = "DoesNotExist";
pub const NODE_OP_GT: &str = "Gt";
pub const NODE_OP_LT: &str = "Lt";

/// The only field `matchFields` can select on; every other field reads as "".
pub const NODE_NAME_FIELD: &str = "metadata.name";

/// Start-up taints that some other agent is known to lift (semantics.md §2).
/// A trailing `*` makes an entry a key prefix.
pub const DEFAULT_TRANSIENT_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    "karpenter.sh/unregistered",
    "node.cilium.io/agent-not-ready",
    "ebs.csi.aws.com/agent-not-ready",
    "efs.csi.aws.com/agent-not-ready",
    "cni.istio.io/not-ready",
    "startup-taint.cluster-autoscaler.kubernetes.io/*",
    "readiness.k8s.io/*",
];

// ---------------------------------------------------------------------------
// Configuration

/// One of nodegate's own taints. A node taint is this taint when key and
/// effect are equal; its value does not matter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ManagedTaint {
    pub key: String,
    pub effect: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("managed taint {input:?}: {problem}")]
pub struct ManagedTaintError {
    pub input: String,
    pub problem: String,
}

impl ManagedTaint {
    pub fn new(key: impl Into<String>, effect: impl Into<String>) -> Self {
        ManagedTaint {
            key: key.into(),
            effect: effect.into(),
        }
    }

    pub fn matches(&self, taint: &Taint) -> bool {
        taint.key == self.key && taint.effect == self.effect
    }

    /// The taint to put on a node (empty value).
    pub fn to_taint(&self) -> Taint {
        Taint::new(self.key.clone(), "", self.effect.clone())
    }

    /// Reads `key:Effect`, e.g. `nodegate.dev/initializing:NoSchedule`.
    /// Only `NoSchedule` and `NoExecute` keep pods off a node, so only they
    /// can gate one.
    pub fn parse(s: &str) -> Result<ManagedTaint, ManagedTaintError> {
        let err = |problem: String| ManagedTaintError {
            input: s.to_string(),
            problem,
        };
        let Some((key, effect)) = s.trim().rsplit_once(':') else {
            return Err(err(
                "expected key:Effect, e.g. nodegate.dev/initializing:NoSchedule".into(),
            ));
        };
        check_label_key(key).map_err(err)?;
        if effect != EFFECT_NO_SCHEDULE && effect != EFFECT_NO_EXECUTE {
            return Err(err(format!(
                "effect {effect:?} cannot gate a node; use NoSchedule or NoExecute"
            )));
        }
        Ok(ManagedTaint::new(key, effect))
    }
}

impl fmt::Display for ManagedTaint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.effect)
    }
}

/// A taint key that counts as transient: exactly, or by prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum TransientTaint {
    Exact(String),
    Prefix(String),
}

impl TransientTaint {
    /// A trailing `*` makes a prefix (`readiness.k8s.io/*`); anything else is
    /// an exact key. Surrounding whitespace is ignored.
    pub fn parse(s: &str) -> TransientTaint {
        let s = s.trim();
        match s.strip_suffix('*') {
            Some(prefix) => TransientTaint::Prefix(prefix.to_string()),
            None => TransientTaint::Exact(s.to_string()),
        }
    }

    pub fn matches(&self, key: &str) -> bool {
        match self {
            TransientTaint::Exact(k) => key == k,
            TransientTaint::Prefix(p) => key.starts_with(p.as_str()),
        }
    }
}

impl fmt::Display for TransientTaint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransientTaint::Exact(k) => f.write_str(k),
            TransientTaint::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

impl From<String> for TransientTaint {
    fn from(s: String) -> Self {
        TransientTaint::parse(&s)
    }
}

impl From<TransientTaint> for String {
    fn from(t: TransientTaint) -> Self {
        t.to_string()
    }
}

pub fn default_transient_taints() -> Vec<TransientTaint> {
    DEFAULT_TRANSIENT_TAINTS
        .iter()
        .map(|s| TransientTaint::parse(s))
        .collect()
}

/// Everything placement needs besides the node and the DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementConfig {
    pub managed_taints: Vec<ManagedTaint>,
    pub transient_taints: Vec<TransientTaint>,
    /// (namespace, name) of DaemonSets never waited for.
    pub excluded: BTreeSet<(String, String)>,
    /// DaemonSets whose own labels match are never waited for. An empty
    /// selector is treated as unset (see `exclusion_reason`).
    pub exclude_selector: Option<LabelSelector>,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            managed_taints: vec![ManagedTaint::new(
                DEFAULT_MANAGED_TAINT_KEY,
                EFFECT_NO_SCHEDULE,
            )],
            transient_taints: default_transient_taints(),
            excluded: BTreeSet::new(),
            exclude_selector: None,
        }
    }
}

impl PlacementConfig {
    pub fn is_managed(&self, taint: &Taint) -> bool {
        self.managed_taints.iter().any(|m| m.matches(taint))
    }

    /// Transient taints are removed before the taint check. A managed taint is
    /// never transient, even when a configured pattern covers its key: it is
    /// ours to lift, and pretending it is gone would wait on DaemonSets that
    /// cannot start until we lift it.
    pub fn is_transient(&self, taint: &Taint) -> bool {
        !self.is_managed(taint) && self.transient_taints.iter().any(|t| t.matches(&taint.key))
    }

    /// The node's taints as they will be once start-up is over.
    pub fn steady_state_taints(&self, taints: &[Taint]) -> Vec<Taint> {
        taints
            .iter()
            .filter(|t| !self.is_transient(t))
            .cloned()
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Verdicts and reasons

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

/// Why a DaemonSet is not waited for on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum NotExpectedReason {
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

/// Why a member is not expected, as a stable name (metrics labels, logs,
/// explain's `reasonCode`). One byte, so a gate's members and journal carry
/// it for free; serialized as its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    ExcludedByName,
    ExcludedBySelector,
    IgnoreAnnotation,
    NodeName,
    /// A DaemonSet's nodeSelector, or a critical-pod entry's node selector.
    NodeSelector,
    NodeAffinity,
    UntoleratedTaint,
    StartsAfterGate,
}

impl ReasonCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::ExcludedByName => "excluded_by_name",
            ReasonCode::ExcludedBySelector => "excluded_by_selector",
            ReasonCode::IgnoreAnnotation => "ignore_annotation",
            ReasonCode::NodeName => "node_name",
            ReasonCode::NodeSelector => "node_selector",
            ReasonCode::NodeAffinity => "node_affinity",
            ReasonCode::UntoleratedTaint => "untolerated_taint",
            ReasonCode::StartsAfterGate => "starts_after_gate",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl NotExpectedReason {
    /// A short, stable name for metrics labels and logs.
    pub fn code(&self) -> &'static str {
        self.kind().as_str()
    }

    /// [`Self::code`] as a value.
    pub fn kind(&self) -> ReasonCode {
        match self {
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
            NotExpectedReason::ExcludedByName
                | NotExpectedReason::ExcludedBySelector { .. }
                | NotExpectedReason::IgnoreAnnotation
        )
    }
}

impl fmt::Display for NotExpectedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotExpectedReason::ExcludedByName => {
                f.write_str("excluded by name in nodegate's configuration")
            }
            NotExpectedReason::ExcludedBySelector { selector } => write!(
                f,
                "excluded because its labels match nodegate's exclude selector {selector:?}"
            ),
            NotExpectedReason::IgnoreAnnotation => {
                write!(
                    f,
                    "excluded by its annotation {IGNORE_ANNOTATION}: \"true\""
                )
            }
            NotExpectedReason::NodeNameMismatch { wanted, node } => write!(
                f,
                "its pod template sets spec.nodeName {wanted:?}, so it never runs on node {node:?}"
            ),
            NotExpectedReason::NodeSelectorKeyMissing { key, wanted } => write!(
                f,
                "its nodeSelector needs label {key}={wanted}, and the node has no label {key}"
            ),
            NotExpectedReason::NodeSelectorValueDiffers {
                key,
                wanted,
                actual,
            } => write!(
                f,
                "its nodeSelector needs label {key}={wanted}, and the node has {key}={actual}"
            ),
            NotExpectedReason::NodeAffinityNoTermMatched { terms } if terms.is_empty() => f
                .write_str(
                    "its required node affinity has no nodeSelectorTerms, which matches no node",
                ),
            NotExpectedReason::NodeAffinityNoTermMatched { terms } => {
                f.write_str("no term of its required node affinity matches the node: ")?;
                for (i, t) in terms.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{t}")?;
                }
                Ok(())
            }
            NotExpectedReason::UntoleratedTaint { taint } => {
                write!(f, "it does not tolerate the node's taint {taint}")
            }
            NotExpectedReason::StartsAfterGate { taint } => write!(
                f,
                "starts after the gate opens: it does not tolerate nodegate's own taint {taint}, \
                 so its pod cannot start until nodegate removes it"
            ),
        }
    }
}

/// Which list of a node selector term a requirement sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TermList {
    MatchExpressions,
    MatchFields,
}

impl fmt::Display for TermList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TermList::MatchExpressions => "matchExpressions",
            TermList::MatchFields => "matchFields",
        })
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
    fn new(list: TermList, index: usize, r: &NodeSelectorRequirement) -> Self {
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
            TermFailure::Empty => {
                f.write_str("has neither matchExpressions nor matchFields, which matches no node")
            }
            TermFailure::Invalid {
                requirement: r,
                problem,
            } => write!(
                f,
                "{problem} ({}[{}], key {:?}; an invalid requirement makes its term match nothing)",
                r.list, r.index, r.key
            ),
            TermFailure::Unmet {
                requirement: r,
                node_value,
            } => {
                let (key, op, values) = (&r.key, r.operator.as_str(), &r.values);
                if r.list == TermList::MatchFields {
                    let actual = node_value.as_deref().unwrap_or("");
                    return match op {
                        NODE_OP_NOT_IN => {
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
                    (NODE_OP_IN, Some(v)) => {
                        write!(f, "label {key}={v} is not In {values:?}")
                    }
                    (NODE_OP_NOT_IN, Some(v)) => {
                        write!(f, "label {key}={v} is excluded by NotIn {values:?}")
                    }
                    (NODE_OP_DOES_NOT_EXIST, Some(v)) => {
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

// ---------------------------------------------------------------------------
// Tolerations

/// Whether toleration `t` tolerates `taint` (k8s.io/api `ToleratesTaint`).
/// An empty effect matches every effect and an empty key every key; an empty
/// operator means `Equal`, and a missing value is "". `Lt`/`Gt` (alpha in
/// 1.35, gate TaintTolerationComparisonOperators) compare both values as
/// canonical decimal int64s; an API server only accepts them with the gate
/// on, so when we see them we judge them as the gated controller does.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if !t.effect.is_empty() && t.effect != taint.effect {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator.as_str() {
        "" | TOLERATION_OP_EQUAL => t.value == taint.value,
        TOLERATION_OP_EXISTS => true,
        TOLERATION_OP_LT | TOLERATION_OP_GT => {
            match (canonical_int(&t.value), canonical_int(&taint.value)) {
                (Some(tol), Some(val)) if t.operator == TOLERATION_OP_LT => val < tol,
                (Some(tol), Some(val)) => val > tol,
                _ => false,
            }
        }
        _ => false,
    }
}

/// Upstream's `IsDecimalInteger`: no sign but `-`, no leading zeros, no
/// `-0`; then it must fit in an i64.
fn canonical_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let first = *digits.as_bytes().first()?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if first == b'0' && (digits.len() > 1 || digits.len() != s.len()) {
        return None;
    }
    s.parse().ok()
}

/// The tolerations the DaemonSet controller adds to every daemon pod.
pub fn default_daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let exists = |key: &str, effect: &str| Toleration {
        key: key.to_string(),
        operator: TOLERATION_OP_EXISTS.to_string(),
        value: String::new(),
        effect: effect.to_string(),
    };
    let mut out = vec![
        exists("node.kubernetes.io/not-ready", EFFECT_NO_EXECUTE),
        exists("node.kubernetes.io/unreachable", EFFECT_NO_EXECUTE),
        exists("node.kubernetes.io/disk-pressure", EFFECT_NO_SCHEDULE),
        exists("node.kubernetes.io/memory-pressure", EFFECT_NO_SCHEDULE),
        exists("node.kubernetes.io/pid-pressure", EFFECT_NO_SCHEDULE),
        exists("node.kubernetes.io/unschedulable", EFFECT_NO_SCHEDULE),
    ];
    if host_network {
        out.push(exists(
            "node.kubernetes.io/network-unavailable",
            EFFECT_NO_SCHEDULE,
        ));
    }
    out
}

/// The template's tolerations plus the DaemonSet controller's defaults, as
/// `AddOrUpdateDaemonPodTolerations` builds them: a default replaces every
/// toleration with the same key, effect, operator and value (in place), and
/// is appended when there is none.
pub fn with_default_tolerations(tolerations: &[Toleration], host_network: bool) -> Vec<Toleration> {
    let mut out = tolerations.to_vec();
    for default in default_daemon_tolerations(host_network) {
        let same = |t: &Toleration| {
            t.key == default.key
                && t.effect == default.effect
                && t.operator == default.operator
                && t.value == default.value
        };
        let mut replaced = false;
        for t in out.iter_mut().filter(|t| same(t)) {
            // Upstream swaps in the default, dropping e.g. tolerationSeconds;
            // our projection has nothing else to drop.
            *t = default.clone();
            replaced = true;
        }
        if !replaced {
            out.push(default);
        }
    }
    out
}

/// Effects that keep a pod off a node; `PreferNoSchedule` never does.
pub fn taint_blocks_scheduling(taint: &Taint) -> bool {
    taint.effect == EFFECT_NO_SCHEDULE || taint.effect == EFFECT_NO_EXECUTE
}

/// The first NoSchedule/NoExecute taint no toleration tolerates.
pub fn first_untolerated_taint<'a>(
    taints: impl IntoIterator<Item = &'a Taint>,
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .into_iter()
        .filter(|t| taint_blocks_scheduling(t))
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

// ---------------------------------------------------------------------------
// Node name, nodeSelector, node affinity

fn check_node_name(template: &PodPlacement, node_name: &str) -> Result<(), NotExpectedReason> {
    if template.node_name.is_empty() || template.node_name == node_name {
        Ok(())
    } else {
        Err(NotExpectedReason::NodeNameMismatch {
            wanted: template.node_name.clone(),
            node: node_name.to_string(),
        })
    }
}

/// Every `nodeSelector` entry must be on the node with exactly that value.
/// The map is ordered, so the reported key is stable.
pub fn check_node_selector(
    node_selector: &Labels,
    labels: &Labels,
) -> Result<(), NotExpectedReason> {
    for (key, wanted) in node_selector {
        match labels.get(key) {
            None => {
                return Err(NotExpectedReason::NodeSelectorKeyMissing {
                    key: key.clone(),
                    wanted: wanted.clone(),
                });
            }
            Some(actual) if actual != wanted => {
                return Err(NotExpectedReason::NodeSelectorValueDiffers {
                    key: key.clone(),
                    wanted: wanted.clone(),
                    actual: actual.clone(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What makes a `matchExpressions` requirement invalid, in upstream's order:
/// an unknown operator (checked alone), then the key, the value count for
/// the operator, and each value as a label value.
fn expression_problem(r: &NodeSelectorRequirement) -> Option<String> {
    let op = r.operator.as_str();
    if !matches!(
        op,
        NODE_OP_IN
            | NODE_OP_NOT_IN
            | NODE_OP_EXISTS
            | NODE_OP_DOES_NOT_EXIST
            | NODE_OP_GT
            | NODE_OP_LT
    ) {
        return Some(format!(
            "operator {op:?} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
        ));
    }
    if let Err(problem) = check_label_key(&r.key) {
        return Some(problem);
    }
    let values = &r.values;
    match op {
        NODE_OP_IN | NODE_OP_NOT_IN if values.is_empty() => {
            return Some(format!("{op} needs at least one value, got none"));
        }
        NODE_OP_EXISTS | NODE_OP_DOES_NOT_EXIST if !values.is_empty() => {
            return Some(format!("{op} takes no values, got {values:?}"));
        }
        NODE_OP_GT | NODE_OP_LT if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            return Some(format!(
                "{op} needs exactly one integer value, got {values:?}"
            ));
        }
        _ => {}
    }
    // For Gt/Lt this also refuses a signed integer such as "-5": upstream
    // checks every value as a label value, and a label value cannot start
    // with a sign.
    values.iter().find_map(|v| check_label_value(v).err())
}

fn expression_holds(r: &NodeSelectorRequirement, labels: &Labels) -> bool {
    let value = labels.get(&r.key);
    match r.operator.as_str() {
        NODE_OP_IN => value.is_some_and(|v| r.values.contains(v)),
        NODE_OP_NOT_IN => value.is_none_or(|v| !r.values.contains(v)),
        NODE_OP_EXISTS => value.is_some(),
        NODE_OP_DOES_NOT_EXIST => value.is_none(),
        op @ (NODE_OP_GT | NODE_OP_LT) => {
            // Go's ParseInt and Rust's i64 parser accept the same base-10
            // forms (optional sign, leading zeros); an unparsable node value
            // is simply false.
            let node = value.and_then(|v| v.parse::<i64>().ok());
            let wanted = r.values.first().and_then(|v| v.parse::<i64>().ok());
            match (node, wanted) {
                (Some(n), Some(w)) if op == NODE_OP_GT => n > w,
                (Some(n), Some(w)) => n < w,
                _ => false,
            }
        }
        _ => false,
    }
}

fn field_problem(r: &NodeSelectorRequirement) -> Option<String> {
    let op = r.operator.as_str();
    if op != NODE_OP_IN && op != NODE_OP_NOT_IN {
        return Some(format!(
            "matchFields supports only In and NotIn, got {op:?}"
        ));
    }
    if r.values.len() != 1 {
        return Some(format!(
            "matchFields {op} needs exactly one value, got {:?}",
            r.values
        ));
    }
    None
}

/// The node's value of a field: only `metadata.name` exists; any other field
/// reads as "" (upstream's `fields.Set.Get`).
fn field_value<'a>(key: &str, node_name: &'a str) -> &'a str {
    if key == NODE_NAME_FIELD {
        node_name
    } else {
        ""
    }
}

fn field_holds(r: &NodeSelectorRequirement, node_name: &str) -> bool {
    let actual = field_value(&r.key, node_name);
    let wanted = r.values.first().map(String::as_str).unwrap_or("");
    match r.operator.as_str() {
        NODE_OP_IN => actual == wanted,
        NODE_OP_NOT_IN => actual != wanted,
        _ => false,
    }
}

/// Whether one node selector term matches a node with this name and these
/// labels, and if not, the first reason why. Invalid requirements anywhere in
/// the term win over unmet ones, as upstream parses the term before matching.
pub fn match_term(
    term: &NodeSelectorTerm,
    node_name: &str,
    labels: &Labels,
) -> Result<(), TermFailure> {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return Err(TermFailure::Empty);
    }
    let expressions = term
        .match_expressions
        .iter()
        .enumerate()
        .map(|(i, r)| (TermList::MatchExpressions, i, r));
    let fields = term
        .match_fields
        .iter()
        .enumerate()
        .map(|(i, r)| (TermList::MatchFields, i, r));
    for (list, i, r) in expressions.clone().chain(fields.clone()) {
        let problem = match list {
            TermList::MatchExpressions => expression_problem(r),
            TermList::MatchFields => field_problem(r),
        };
        if let Some(problem) = problem {
            return Err(TermFailure::Invalid {
                requirement: RequirementRef::new(list, i, r),
                problem,
            });
        }
    }
    for (list, i, r) in expressions {
        if !expression_holds(r, labels) {
            return Err(TermFailure::Unmet {
                requirement: RequirementRef::new(list, i, r),
                node_value: labels.get(&r.key).cloned(),
            });
        }
    }
    // Upstream skips field requirements for a node without a name (its field
    // set is empty); a real node always has one.
    if node_name.is_empty() {
        return Ok(());
    }
    for (list, i, r) in fields {
        if !field_holds(r, node_name) {
            return Err(TermFailure::Unmet {
                requirement: RequirementRef::new(list, i, r),
                node_value: Some(field_value(&r.key, node_name).to_string()),
            });
        }
    }
    Ok(())
}

/// Every term's result, in order — what `nodegate explain` shows.
pub fn explain_terms(
    terms: &[NodeSelectorTerm],
    node_name: &str,
    labels: &Labels,
) -> Vec<Result<(), TermFailure>> {
    terms
        .iter()
        .map(|t| match_term(t, node_name, labels))
        .collect()
}

/// Terms are ORed: `Ok` with the 0-based index of the first matching term,
/// or every term's failure (empty when there are no terms, which matches no
/// node).
pub fn node_matches_terms(
    terms: &[NodeSelectorTerm],
    node_name: &str,
    labels: &Labels,
) -> Result<usize, Vec<TermMismatch>> {
    let mut failures = Vec::with_capacity(terms.len());
    for (i, term) in terms.iter().enumerate() {
        match match_term(term, node_name, labels) {
            Ok(()) => return Ok(i),
            Err(failure) => failures.push(TermMismatch {
                term: i + 1,
                failure,
            }),
        }
    }
    Err(failures)
}

/// `nodeSelector` and required node affinity together (upstream
/// `RequiredNodeAffinity.Match`).
pub fn check_node_affinity(
    template: &PodPlacement,
    node_name: &str,
    labels: &Labels,
) -> Result<(), NotExpectedReason> {
    check_node_selector(&template.node_selector, labels)?;
    if let Some(terms) = &template.required_node_affinity {
        node_matches_terms(terms, node_name, labels)
            .map_err(|terms| NotExpectedReason::NodeAffinityNoTermMatched { terms })?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The two questions

/// The DaemonSet controller's own predicate (`NodeShouldRunDaemonPod`'s
/// "should run"): with the default daemon tolerations added, the node name,
/// `nodeSelector`, required node affinity and every NoSchedule/NoExecute
/// taint. No steady-state view and no exclusions: this is what the real
/// controller decides for the node exactly as given, and the differential
/// tests hold us to it.
pub fn should_run(
    node_name: &str,
    labels: &Labels,
    taints: &[Taint],
    template: &PodPlacement,
) -> Result<(), NotExpectedReason> {
    check_node_name(template, node_name)?;
    check_node_affinity(template, node_name, labels)?;
    let tolerations = with_default_tolerations(&template.tolerations, template.host_network);
    match first_untolerated_taint(taints, &tolerations) {
        Some(taint) => Err(NotExpectedReason::UntoleratedTaint {
            taint: taint.clone(),
        }),
        None => Ok(()),
    }
}

/// Why a DaemonSet is left out whatever the node: named in the exclusions,
/// matched by the exclude selector, or annotated `nodegate.dev/ignore:
/// "true"` (exactly "true", as Kubernetes reads boolean annotations).
///
/// An empty exclude selector would match every DaemonSet and so open every
/// gate at once; no one configures that on purpose, so it counts as unset.
pub fn exclusion_reason(ds: &DaemonSetInfo, cfg: &PlacementConfig) -> Option<NotExpectedReason> {
    if cfg
        .excluded
        .contains(&(ds.namespace.clone(), ds.name.clone()))
    {
        return Some(NotExpectedReason::ExcludedByName);
    }
    if let Some(selector) = cfg.exclude_selector.as_ref().filter(|s| !s.is_empty())
        && selector.matches(&ds.labels)
    {
        return Some(NotExpectedReason::ExcludedBySelector {
            selector: selector.to_string(),
        });
    }
    if ds.annotations.get(IGNORE_ANNOTATION).map(String::as_str) == Some("true") {
        return Some(NotExpectedReason::IgnoreAnnotation);
    }
    None
}

/// Must the gate on `node` wait for `ds`? Exclusions first; then the
/// controller's predicate against the node in steady state: transient taints
/// removed, nodegate's managed taints kept. Other untolerated taints are
/// checked before managed ones, so a DaemonSet that will never run here is
/// reported as such rather than as "starts after the gate opens".
pub fn evaluate(node: &NodeInfo, ds: &DaemonSetInfo, cfg: &PlacementConfig) -> Verdict {
    match placement_problem(node, ds, cfg) {
        None => Verdict::Expected,
        Some(reason) => Verdict::NotExpected(reason),
    }
}

fn placement_problem(
    node: &NodeInfo,
    ds: &DaemonSetInfo,
    cfg: &PlacementConfig,
) -> Option<NotExpectedReason> {
    if let Some(reason) = exclusion_reason(ds, cfg) {
        return Some(reason);
    }
    let template = &ds.template;
    if let Err(reason) = check_node_name(template, &node.name) {
        return Some(reason);
    }
    if let Err(reason) = check_node_affinity(template, &node.name, &node.labels) {
        return Some(reason);
    }
    let tolerations = with_default_tolerations(&template.tolerations, template.host_network);
    let (managed, others): (Vec<&Taint>, Vec<&Taint>) = node
        .taints
        .iter()
        .filter(|t| !cfg.is_transient(t))
        .partition(|t| cfg.is_managed(t));
    if let Some(taint) = first_untolerated_taint(others, &tolerations) {
        return Some(NotExpectedReason::UntoleratedTaint {
            taint: taint.clone(),
        });
    }
    if let Some(taint) = first_untolerated_taint(managed, &tolerations) {
        return Some(NotExpectedReason::StartsAfterGate {
            taint: taint.clone(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_int_follows_is_decimal_integer() {
        let cases: &[(&str, Option<i64>)] = &[
            ("0", Some(0)),
            ("5", Some(5)),
            ("-5", Some(-5)),
            ("950", Some(950)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-0", None),
            ("007", None),
            ("+5", None),
            ("", None),
            ("-", None),
            ("5.0", None),
            (" 5", None),
        ];
        for (input, want) in cases {
            assert_eq!(canonical_int(input), *want, "{input:?}");
        }
    }

    #[test]
    fn field_value_reads_only_the_node_name() {
        assert_eq!(field_value("metadata.name", "n1"), "n1");
        assert_eq!(field_value("metadata.uid", "n1"), "");
        assert_eq!(field_value("", "n1"), "");
    }
}
