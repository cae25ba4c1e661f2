//! A node and a pod as the projections read them, borrowed from whichever
//! encoding delivered them: the generated types of a JSON answer
//! ([`NodeView::of`], [`PodView::of`]), or a protobuf message read in
//! place (`protobuf::messages`), so that the watches' hot path copies out
//! only what the projection keeps. One projection reads both.

use std::borrow::Cow;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{self as core, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Text as an object holds it: borrowed from a JSON-decoded object, or
/// protobuf bytes read as UTF-8 (lossily, as Go's JSON writes them).
pub type Text<'a> = Cow<'a, str>;

/// A `map<string, string>` as the object holds it: JSON's map, or
/// protobuf's entries, each text read when it is looked at.
#[derive(Clone, Copy)]
pub enum Pairs<'a> {
    Map(&'a BTreeMap<String, String>),
    Entries(&'a dyn Entries),
}

/// A protobuf map's entries as decoded (`protobuf::messages`), read in
/// place: keys and values may be any bytes.
pub trait Entries {
    /// The value of `key`; the last one if a key came twice.
    fn get(&self, key: &str) -> Option<Text<'_>>;
    fn contains_key(&self, key: &str) -> bool;
    fn for_each(&self, each: &mut dyn FnMut(&str, &str));
    /// How many entries there are.
    fn count(&self) -> usize;
}

impl std::fmt::Debug for Pairs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        self.for_each(|k, v| {
            map.entry(&k, &v);
        });
        map.finish()
    }
}

impl<'a> Pairs<'a> {
    /// The value of `key`; the last one if a key came twice, as a map
    /// built from the entries would keep it.
    pub fn get(&self, key: &str) -> Option<Text<'a>> {
        match self {
            Pairs::Map(m) => m.get(key).map(|v| borrowed(v)),
            Pairs::Entries(es) => es.get(key),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        match self {
            Pairs::Map(m) => m.contains_key(key),
            Pairs::Entries(es) => es.contains_key(key),
        }
    }

    /// Every key and value, in order (JSON's maps are sorted; Go writes
    /// protobuf's sorted too).
    pub fn for_each(&self, mut each: impl FnMut(&str, &str)) {
        match self {
            Pairs::Map(m) => m.iter().for_each(|(k, v)| each(k, v)),
            Pairs::Entries(es) => es.for_each(&mut each),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Pairs::Map(m) => m.len(),
            Pairs::Entries(es) => es.count(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A node or pod condition. A node's carries no reason or message (nothing
/// about a node's gate reads them, and they change every heartbeat).
#[derive(Debug, Default)]
pub struct ConditionView<'a> {
    pub type_: Text<'a>,
    pub status: Text<'a>,
    pub since: Option<Timestamp>,
    pub reason: Option<Text<'a>>,
    pub message: Option<Text<'a>>,
}

#[derive(Debug, Default)]
pub struct TaintView<'a> {
    pub key: Text<'a>,
    pub value: Option<Text<'a>>,
    pub effect: Text<'a>,
}

/// Everything the node projection reads.
#[derive(Debug, Default)]
pub struct NodeView<'a> {
    pub name: Option<Text<'a>>,
    pub uid: Option<Text<'a>>,
    pub resource_version: Option<Text<'a>>,
    pub created: Option<Timestamp>,
    pub labels: Option<Pairs<'a>>,
    /// `None` when the object has no annotations at all.
    pub annotations: Option<Pairs<'a>>,
    pub provider_id: Option<Text<'a>>,
    pub unschedulable: bool,
    pub taints: Vec<TaintView<'a>>,
    pub conditions: Vec<ConditionView<'a>>,
    pub boot_id: Option<Text<'a>>,
    /// Allocatable resources by name, each quantity as written (the
    /// projection keeps only the extended ones).
    pub allocatable: Vec<(Text<'a>, Text<'a>)>,
}

/// Why a container is not running: its waiting or terminated state's words.
#[derive(Debug, Default)]
pub struct Reasoned<'a> {
    pub reason: Option<Text<'a>>,
    pub message: Option<Text<'a>>,
}

#[derive(Debug, Default)]
pub struct ContainerView<'a> {
    pub waiting: Option<Reasoned<'a>>,
    pub terminated: Option<Reasoned<'a>>,
}

/// Everything the pod projection reads.
#[derive(Debug, Default)]
pub struct PodView<'a> {
    pub namespace: Option<Text<'a>>,
    pub name: Option<Text<'a>>,
    pub uid: Option<Text<'a>>,
    /// The uid of the owner reference with `controller: true`.
    pub controller_uid: Option<Text<'a>>,
    pub node_name: Option<Text<'a>>,
    pub labels: Option<Pairs<'a>>,
    pub annotations: Option<Pairs<'a>>,
    pub deleting: bool,
    pub phase: Option<Text<'a>>,
    /// The pod's own reason and message (a rejected or evicted pod).
    pub reason: Reasoned<'a>,
    pub conditions: Vec<ConditionView<'a>>,
    pub containers: Vec<ContainerView<'a>>,
}

fn borrowed(s: &str) -> Text<'_> {
    Cow::Borrowed(s)
}

fn opt(s: &Option<String>) -> Option<Text<'_>> {
    s.as_deref().map(borrowed)
}

fn time(t: &Option<Time>) -> Option<Timestamp> {
    t.as_ref().map(|t| t.0)
}

impl<'a> NodeView<'a> {
    pub fn of(n: &'a Node) -> Self {
        let meta = &n.metadata;
        let spec = n.spec.as_ref();
        let status = n.status.as_ref();
        let taint = |t: &'a core::Taint| TaintView {
            key: borrowed(&t.key),
            value: opt(&t.value),
            effect: borrowed(&t.effect),
        };
        let condition = |c: &'a core::NodeCondition| ConditionView {
            type_: borrowed(&c.type_),
            status: borrowed(&c.status),
            since: time(&c.last_transition_time),
            ..Default::default()
        };
        let allocatable = status.and_then(|s| s.allocatable.as_ref()).into_iter();
        NodeView {
            name: opt(&meta.name),
            uid: opt(&meta.uid),
            resource_version: opt(&meta.resource_version),
            created: time(&meta.creation_timestamp),
            labels: meta.labels.as_ref().map(Pairs::Map),
            annotations: meta.annotations.as_ref().map(Pairs::Map),
            provider_id: spec.and_then(|s| opt(&s.provider_id)),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec
                .iter()
                .flat_map(|s| s.taints.iter().flatten())
                .map(taint)
                .collect(),
            conditions: status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .map(condition)
                .collect(),
            boot_id: status
                .and_then(|s| s.node_info.as_ref())
                .map(|i| borrowed(&i.boot_id)),
            allocatable: allocatable
                .flatten()
                .map(|(name, q)| (borrowed(name), borrowed(&q.0)))
                .collect(),
        }
    }
}

impl<'a> PodView<'a> {
    pub fn of(p: &'a Pod) -> Self {
        let meta = &p.metadata;
        let status = p.status.as_ref();
        let mut owners = meta.owner_references.iter().flatten();
        let controller = owners.find(|r| r.controller == Some(true));
        let reasoned = |reason: &'a Option<String>, message: &'a Option<String>| Reasoned {
            reason: opt(reason),
            message: opt(message),
        };
        let condition = |c: &'a core::PodCondition| ConditionView {
            type_: borrowed(&c.type_),
            status: borrowed(&c.status),
            since: time(&c.last_transition_time),
            reason: opt(&c.reason),
            message: opt(&c.message),
        };
        let container = |c: &'a core::ContainerStatus| {
            let state = c.state.as_ref();
            ContainerView {
                waiting: state
                    .and_then(|s| s.waiting.as_ref())
                    .map(|w| reasoned(&w.reason, &w.message)),
                terminated: state
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| reasoned(&t.reason, &t.message)),
            }
        };
        PodView {
            namespace: opt(&meta.namespace),
            name: opt(&meta.name),
            uid: opt(&meta.uid),
            controller_uid: controller.map(|r| borrowed(&r.uid)),
            node_name: p.spec.as_ref().and_then(|s| opt(&s.node_name)),
            labels: meta.labels.as_ref().map(Pairs::Map),
            annotations: meta.annotations.as_ref().map(Pairs::Map),
            deleting: meta.deletion_timestamp.is_some(),
            phase: status.and_then(|s| opt(&s.phase)),
            reason: status.map_or_else(Reasoned::default, |s| reasoned(&s.reason, &s.message)),
            conditions: status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .map(condition)
                .collect(),
            containers: status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .map(container)
                .collect(),
        }
    }
}
