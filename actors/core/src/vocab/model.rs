//! Compact projections of the cluster objects the gate reasons about, so the
//! core never holds a whole Kubernetes object. Fields follow the Kubernetes
//! API: an empty string is an unset optional string, as upstream helpers read it.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// `==` between a string-like type and `str`, `&str`, `String`, both ways
/// round: by `as_str`, or (`reversed`) only the texts' side, for a type that
/// compares with them already.
macro_rules! text_eq {
    (reversed $t:ty: $($text:ty),+) => {
        $(impl PartialEq<$t> for $text {
            fn eq(&self, other: &$t) -> bool {
                other == self
            }
        })+
    };
    ($t:ty: $($text:ty),+) => {
        $(impl PartialEq<$text> for $t {
            fn eq(&self, other: &$text) -> bool {
                self.as_str() == AsRef::<str>::as_ref(other)
            }
        })+
        text_eq!(reversed $t: $($text),+);
    };
}

mod shared;
mod time;
mod uid;
use crate::vocab::words::word_enum;
pub use compact_str::CompactString;
pub use shared::{Interner, Shared};
pub use time::OptTime;
pub use uid::{Uid, UidText};

/// Labels (and annotations) by key, as a sorted vector: a node's 25
/// labels take 800 bytes instead of a B-tree's 1.6 KiB. Keys and values
/// are [`Shared`]: the watches intern them, so the label keys and most
/// values of 65,000 nodes are held once (docs/benchmarks.md, "65,000 open
/// nodes").
pub type Labels = crate::vocab::vec_map::VecMap<Shared, Shared>;

/// A node taint. `effect` is one of `NoSchedule`, `PreferNoSchedule`,
/// `NoExecute` on a valid object; kept as a string so the rules can mirror
/// upstream's string comparisons.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

impl Taint {
    pub fn new(
        key: impl Into<String>,
        value: impl Into<String>,
        effect: impl Into<String>,
    ) -> Self {
        Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// A pod toleration; an empty string is unset, read as upstream reads it
/// ([`tolerates`](crate::rules::placement::tolerates)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Toleration {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub effect: String,
}

/// One requirement of a node selector term (`matchExpressions` or
/// `matchFields`). The operator is kept as written so that an invalid one can
/// be reported by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

/// Operators a [`NodeSelectorRequirement`] may name besides the label
/// selector's (`rules::selector::OP_*`), as upstream spells them.
pub const NODE_OP_GT: &str = "Gt";
pub const NODE_OP_LT: &str = "Lt";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSelectorTerm {
    #[serde(default)]
    pub match_expressions: Vec<NodeSelectorRequirement>,
    #[serde(default)]
    pub match_fields: Vec<NodeSelectorRequirement>,
}

/// The placement-relevant part of a pod template (or of a pod).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodPlacement {
    #[serde(default)]
    pub node_selector: Labels,
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    /// .nodeSelectorTerms`; `None` when the required node affinity is unset.
    #[serde(default)]
    pub required_node_affinity: Option<Vec<NodeSelectorTerm>>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// `spec.nodeName`; empty when unset.
    #[serde(default)]
    pub node_name: String,
    #[serde(default)]
    pub host_network: bool,
}

word_enum! {
    /// The status of a node's `Ready` condition, as the kubelet and the node
    /// lifecycle controller set it; upstream reads no condition as `Unknown`.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum NodeReady {
        True = "True",
        False = "False",
        /// `Unknown`, any other value, or no `Ready` condition at all.
        #[default]
        Unknown = "Unknown",
    }
}

impl NodeReady {
    /// The condition's `status` as the API writes it.
    pub fn from_status(status: &str) -> Self {
        NodeReady::from_word(status).unwrap_or_default()
    }
}

word_enum! {
    /// Why nodegate opened a node; its word is the value of the
    /// `nodegate.dev/opened-by` annotation.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum OpenedBy {
        Ready = "ready",
        Timeout = "timeout",
        /// The node was annotated `nodegate.dev/open: "true"`.
        Manual = "manual",
    }
}

/// `nodegate.dev/opened-by` as a node carries it (semantics.md §5.5): one
/// of nodegate's own openings, or `external`. Serialized as its word; the
/// node's projection reads any other value as none, deserializing refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenedByMark {
    /// `ready`, `timeout` or `manual`: a nodegate replica opened the node.
    Nodegate(OpenedBy),
    /// `external`: someone else removed the managed taints while the node
    /// was gated, and a gate recorded it. The net, `backfill` and re-gating
    /// leave such a node alone.
    External,
}

impl OpenedByMark {
    const EXTERNAL: &str = "external";

    /// The annotation's value.
    pub fn as_str(self) -> &'static str {
        match self {
            OpenedByMark::Nodegate(by) => by.as_str(),
            OpenedByMark::External => Self::EXTERNAL,
        }
    }

    /// The mark `word` stands for, if any (the words are case-sensitive).
    pub fn from_word(word: &str) -> Option<Self> {
        match word {
            Self::EXTERNAL => Some(OpenedByMark::External),
            _ => OpenedBy::from_word(word).map(OpenedByMark::Nodegate),
        }
    }

    /// The node was opened with members not Ready, on purpose: at the
    /// deadline, by request, or by someone else.
    pub fn unready(self) -> bool {
        self != OpenedByMark::Nodegate(OpenedBy::Ready)
    }
}

impl std::fmt::Display for OpenedByMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for OpenedByMark {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OpenedByMark {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let word = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        OpenedByMark::from_word(&word).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "opened-by {word:?} is none of ready, timeout, manual, external"
            ))
        })
    }
}

/// What the gate needs of a Node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    pub uid: String,
    /// The resourceVersion the conditional untaint patch tests against.
    pub resource_version: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub created: Timestamp,
    /// `nodegate.dev/gated-since`: the deadline counts from here instead of
    /// from `created`; an unparsable annotation is reported and read as absent.
    pub gated_since: Option<Timestamp>,
    /// The status of the node's `Ready` condition (semantics.md §5.1: a node
    /// opens by readiness only while it is `True`).
    #[serde(default)]
    pub ready: NodeReady,
    /// `nodegate.dev/opened-at` (semantics.md §5.5): how a gate recognises its
    /// own patch whose answer was lost; an unparsable one reads as absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<Timestamp>,
    /// `nodegate.dev/opened-at` is there at all, readable or not: nodegate
    /// opened this node before, and no entrance puts the startup taint back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub opened_before: bool,
    /// Whether the object has `metadata.annotations` at all (for the patches).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub annotations_present: bool,
    /// `nodegate.dev/suspend: "true"`: the gate decides and journals, but
    /// writes nothing for this node until it is lifted (semantics.md §6.6).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// `nodegate.dev/open: "true"`: open now, whatever the members
    /// (`opened-by: manual`); the untaint removes the annotation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open_requested: bool,
    /// Annotated `nodegate.dev/ignore: "true"`: no entrance taints it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// `status.nodeInfo.bootID`: changes when the node reboots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<Box<str>>,
    /// `nodegate.dev/regated-for`: why nodegate last re-gated this node (the
    /// members, or `reboot`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regated_for: Option<Box<str>>,
    /// `nodegate.dev/condition-taints`: the rules whose taint nodegate put
    /// on this node, comma separated (see [`NodeInfo::rule_added`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_taints: Option<Box<str>>,
    /// `nodegate.dev/opened-by`: who last opened the node, and why; `None`
    /// when absent or not one of the words (see [`NodeInfo::opened_by_nodegate`]
    /// and [`NodeInfo::opened_unready`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_by: Option<OpenedByMark>,
    /// The node's conditions by type (`Ready` included), as the kubelet,
    /// node-problem-detector or a readiness reporter write them: what
    /// `criticalConditions` and `conditionTaints` read (semantics.md §6.5).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub conditions: BTreeMap<Shared, NodeCondition>,
    /// The CSI drivers the node's CSINode lists; `None` while nodegate has
    /// seen no CSINode for it (semantics.md §6.7, `nodegate.dev/csi-driver`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_drivers: Option<Vec<String>>,
    /// The node's allocatable extended resources (names with a domain
    /// prefix, such as `nvidia.com/gpu`), each quantity as written: what
    /// `criticalResources` reads (semantics.md §6.8).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended_allocatable: BTreeMap<String, String>,
    /// The ResourceSlices local to this node (`spec.nodeName`), by name: what
    /// `draDrivers` reads (semantics.md §6.8), watched only while it is set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_slices: Vec<SliceInfo>,
    /// `nodegate.dev/reboot-pending`, as written: a person announced a
    /// reboot (semantics.md §6.10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_pending: Option<Box<str>>,
    /// kured's `weave.works/kured-reboot-in-progress` is there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kured_rebooting: bool,
    /// `nodegate.dev/awaiting-reboot`: the boot id nodegate re-gated the
    /// node in, before an announced reboot (semantics.md §6.10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_reboot: Option<Box<str>>,
    /// Its owner and nodegate's replace marks (`--on-timeout=replace`,
    /// semantics.md §5.8).
    #[serde(default, skip_serializing_if = "is_default")]
    pub replace: Replacement,
}

/// What a DRA driver's pool completeness needs of one ResourceSlice local
/// to a node (resource.k8s.io/v1): its name, driver and `spec.pool`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SliceInfo {
    pub name: String,
    pub driver: String,
    /// `spec.pool.name`.
    pub pool: String,
    /// `spec.pool.generation`.
    pub generation: i64,
    /// `spec.pool.resourceSliceCount`: how many slices the pool has at
    /// this generation.
    pub slice_count: i64,
    /// The UID of the Node the slice's ownerReference names (kind Node, the
    /// name in `spec.nodeName`), as a DRA driver's kubelet plugin sets it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner_uid: String,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl NodeInfo {
    /// The opening `opened-by` names when it is one of nodegate's own
    /// (`ready`, `timeout`, `manual`); `None` for `external`, anything else
    /// or none.
    pub fn opened_by_nodegate(&self) -> Option<OpenedBy> {
        match self.opened_by? {
            OpenedByMark::Nodegate(by) => Some(by),
            OpenedByMark::External => None,
        }
    }

    /// `opened-by` is `timeout`, `manual` or `external`: the node was last
    /// opened with members not Ready, on purpose.
    pub fn opened_unready(&self) -> bool {
        self.opened_by.is_some_and(OpenedByMark::unready)
    }

    /// Whether nodegate recorded putting rule `rule`'s taint on this node
    /// (`nodegate.dev/condition-taints`).
    pub fn rule_added(&self, rule: &str) -> bool {
        self.rule_taints
            .as_deref()
            .is_some_and(|list| list.split(',').any(|r| r.trim() == rule))
    }
}

/// One node condition: its status as written (`True`, `False`, `Unknown`
/// or anything else a reporter chose) and since when it holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCondition {
    pub status: Shared,
    /// `lastTransitionTime`, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
}

/// What the gate needs of a DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonSetInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: Labels,
    /// Only the `nodegate.dev/*` annotations are kept, and kured's reboot
    /// lock (`weave.works/kured-node-lock`, semantics.md §6.10).
    pub annotations: Labels,
    pub template: PodPlacement,
    pub min_ready_seconds: i32,
}

impl DaemonSetInfo {
    /// `namespace/name`, the way people name a DaemonSet.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What the gate needs of a Pod. Every replica holds one per DaemonSet pod, so
/// its size is a budget (docs/benchmarks.md, "65,000 open nodes"): shared
/// values are [`Shared`], the uid a [`Uid`]; each field serializes as the
/// plain string (or time) it stands for.
#[derive(Debug, Clone, Eq, Serialize, Deserialize)]
pub struct PodInfo {
    pub namespace: Shared,
    /// Held inline up to 24 bytes (a DaemonSet pod's name is its
    /// DaemonSet's and five characters): no allocation of its own.
    pub name: CompactString,
    pub uid: Uid,
    /// `spec.nodeName`; empty while the pod is not bound.
    pub node_name: Shared,
    pub labels: Labels,
    /// UID of the owner reference with `controller: true`, if any.
    pub controller_uid: Option<Shared>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// `status.phase` as written (`Pending`, `Running`, ...).
    pub phase: Shared,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `lastTransitionTime` of the `Ready` condition, when present.
    #[serde(default)]
    pub ready_since: OptTime,
    /// `nodegate.dev/ready: "true"`: the pod declares itself done (an init
    /// or warm-up pod without a probe; semantics.md §6.7).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready_annotation: bool,
    /// The `PodReadyToStartContainers` condition is `True`: the kubelet
    /// made the pod's sandbox and its network (the canary member's proof,
    /// semantics.md §6.9).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandbox_ready: bool,
    /// Why the pod is not running, in the kubelet's words: `status.reason`
    /// and `message`, else a container's waiting or terminated reason.
    /// Kept for the canary member's explanation; `None` when there is none
    /// (or the watch dropped it, as it does outside the namespaces whose
    /// pods are members by label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_note: Option<Shared>,
}

impl PodInfo {
    /// Whether `ds` is this pod's controller: the controller owner
    /// reference names its UID, and the pod is in its namespace. Owner
    /// references are namespace-local in Kubernetes, so a pod in another
    /// namespace naming the DaemonSet's UID is a forgery, not its pod.
    pub fn controlled_by(&self, ds: &DaemonSetInfo) -> bool {
        self.controller_uid.as_deref() == Some(ds.uid.as_str()) && self.namespace == ds.namespace
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Field by field like a derived `==`, but the fields a pod's updates change
/// (its status) first: most comparisons are of two versions of one pod.
/// Every field is named, so a new one is a compile error here.
impl PartialEq for PodInfo {
    fn eq(&self, other: &Self) -> bool {
        let PodInfo {
            namespace,
            name,
            uid,
            node_name,
            labels,
            controller_uid,
            terminating,
            phase,
            ready,
            ready_since,
            ready_annotation,
            sandbox_ready,
            status_note,
        } = self;
        *ready == other.ready
            && *sandbox_ready == other.sandbox_ready
            && *status_note == other.status_note
            && *terminating == other.terminating
            && *ready_since == other.ready_since
            && *ready_annotation == other.ready_annotation
            && *phase == other.phase
            && *uid == other.uid
            && *node_name == other.node_name
            && *controller_uid == other.controller_uid
            && *name == other.name
            && *namespace == other.namespace
            && *labels == other.labels
    }
}

/// Who can replace a node, as its labels and annotations tell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// No owner known (cluster-autoscaler, or unmanaged): cordon and mark.
    #[default]
    None,
    /// Karpenter (label `karpenter.sh/nodepool`): the NodeClaim whose
    /// `status.nodeName` is the node, or whose `status.providerID` is the
    /// node's `spec.providerID`.
    NodeClaim,
    /// Cluster API (annotations `cluster.x-k8s.io/machine` and
    /// `cluster.x-k8s.io/cluster-namespace`): that Machine.
    Machine { namespace: String, name: String },
}

impl Owner {
    /// The metric label and the word the Events use: `nodeclaim`,
    /// `machine` or `none`.
    pub fn kind(&self) -> &'static str {
        match self {
            Owner::None => "none",
            Owner::NodeClaim => "nodeclaim",
            Owner::Machine { .. } => "machine",
        }
    }

    pub const KINDS: [&'static str; 3] = ["nodeclaim", "machine", "none"];
}

/// The label Karpenter puts on every node it launches.
pub const KARPENTER_NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// The annotation Cluster API puts on a node: its Machine's name.
pub const CAPI_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/machine";
/// The annotation Cluster API puts on a node: its Machine's namespace.
pub const CAPI_NAMESPACE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-namespace";

/// What a node carries about its replacement: its owner and nodegate's marks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replacement {
    #[serde(default)]
    pub owner: Owner,
    /// `spec.providerID`, to find a NodeClaim that has no nodeName yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<Box<str>>,
    /// `nodegate.dev/timed-out`: the deadline the gate passed, kept closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<Timestamp>,
    /// `nodegate.dev/replace-requested`: when nodegate asked for the
    /// replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<Timestamp>,
    /// `nodegate.dev/replace-fallback` (`open` or `keep`) and
    /// `nodegate.dev/replace-fallback-at`: nodegate refused to replace the
    /// node, and what it did instead, when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<(Fallback, Timestamp)>,
    /// `spec.unschedulable`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,
}

word_enum! {
    /// What a node due for replacement gets when its members are broken
    /// cluster-wide (`--replace-fallback`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Fallback {
        /// Open it, as `--on-timeout=open` would.
        Open = "open",
        /// Keep it closed, as `--on-timeout=keep` would (the default).
        #[default]
        Keep = "keep",
    }
    else "a replace fallback: use open or keep"
}

#[cfg(test)]
mod tests {
    /// Every replica holds one `PodInfo` per DaemonSet pod (390,000 at
    /// 65,000 nodes, docs/benchmarks.md): its size is a budget.
    #[test]
    fn a_pod_info_stays_within_its_budget() {
        let size = std::mem::size_of::<super::PodInfo>();
        assert!(size <= 136, "PodInfo is {size} bytes, more than 136");
    }

    /// `opened-by` is read and written as the annotation's word; the
    /// words are case-sensitive, and only `ready` is an opening with every
    /// member Ready.
    #[test]
    fn opened_by_marks_are_their_words() {
        use super::{OpenedBy, OpenedByMark};
        let all = OpenedBy::ALL
            .map(OpenedByMark::Nodegate)
            .into_iter()
            .chain([OpenedByMark::External]);
        for mark in all {
            let word = mark.as_str();
            assert_eq!(OpenedByMark::from_word(word), Some(mark), "{word}");
            let json = serde_json::to_string(&mark).unwrap();
            assert_eq!(json, format!("{word:?}"));
            assert_eq!(serde_json::from_str::<OpenedByMark>(&json).unwrap(), mark);
            assert_eq!(mark.unready(), word != "ready", "{word}");
        }
        for word in ["External", "READY", "", " ready", "opened"] {
            assert_eq!(OpenedByMark::from_word(word), None, "{word:?}");
        }
        let err = serde_json::from_str::<OpenedByMark>("\"later\"").unwrap_err();
        assert!(err.to_string().contains("\"later\""), "{err}");
        // In a node (the journal's and `/debug/nodes`' JSON): the word, and
        // nothing without a mark.
        let mut node = super::NodeInfo {
            opened_by: Some(OpenedByMark::External),
            ..Default::default()
        };
        let json = serde_json::to_value(&node).unwrap();
        assert_eq!(json["opened_by"], "external");
        assert_eq!(
            serde_json::from_value::<super::NodeInfo>(json).unwrap(),
            node
        );
        node.opened_by = None;
        let json = serde_json::to_value(&node).unwrap();
        assert!(json.get("opened_by").is_none(), "{json}");
    }
}
