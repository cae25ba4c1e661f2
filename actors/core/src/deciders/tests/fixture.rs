//! What the deciders' unit tests share: an index held in plain maps, and a
//! way to run one input the way the shell would.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;

use super::{Change, ClusterView, Context, Decider, Effect, Input, Now};
use crate::vocab::config::Config;
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

/// The index, as a test builds it.
#[derive(Debug, Default, Clone)]
pub struct Index {
    pub nodes: BTreeMap<String, Arc<NodeInfo>>,
    pub pods: Vec<Arc<PodInfo>>,
    pub daemonsets: Vec<Arc<DaemonSetInfo>>,
}

impl ClusterView for Index {
    fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.nodes.get(name).cloned()
    }
    fn pods_on(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.pods
            .iter()
            .filter(|p| p.node_name == node)
            .cloned()
            .collect()
    }
    fn daemonsets(&self) -> Vec<Arc<DaemonSetInfo>> {
        self.daemonsets.clone()
    }
    fn nodes(&self) -> Vec<Arc<NodeInfo>> {
        self.nodes.values().cloned().collect()
    }
}

impl Index {
    /// Puts `node` in the index and returns the change the feed would
    /// publish.
    pub fn upsert(&mut self, node: NodeInfo) -> Input {
        let name = node.name.clone();
        let after = Arc::new(node);
        let before = self.nodes.insert(name.clone(), Arc::clone(&after));
        Input::Changed(Change::Node {
            name,
            before,
            after: Some(after),
        })
    }

    /// Removes `name` and returns the change the feed would publish.
    pub fn delete(&mut self, name: &str) -> Input {
        let before = self.nodes.remove(name);
        Input::Changed(Change::Node {
            name: name.to_string(),
            before,
            after: None,
        })
    }
}

/// One decision as the shell makes it.
pub struct Run {
    pub index: Index,
    pub config: Config,
    pub now: Timestamp,
    pub may_write: bool,
}

impl Run {
    pub fn new(config: Config, now: Timestamp) -> Self {
        Run {
            index: Index::default(),
            config,
            now,
            may_write: true,
        }
    }

    pub fn step(&self, decider: &mut impl Decider, input: Input) -> Vec<Effect> {
        let cx = Context {
            view: &self.index,
            config: &self.config,
            now: Now::local(self.now),
            may_write: self.may_write,
        };
        decider.decide(input, &cx)
    }
}

/// The writes among `effects`.
pub fn writes(effects: &[Effect]) -> Vec<&super::TaintWrite> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Write(w) => Some(w),
            _ => None,
        })
        .collect()
}

/// The Event reasons among `effects`, in order.
pub fn reasons(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RecordEvent(ev) if ev.own_write => Some(format!("{:?} (own write)", ev.reason)),
            Effect::RecordEvent(ev) => Some(format!("{:?}", ev.reason)),
            _ => None,
        })
        .collect()
}

/// The log lines of `level` among `effects`.
pub fn logs(effects: &[Effect], level: super::Level) -> Vec<&str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Log {
                level: l, message, ..
            } if *l == level => Some(message.as_str()),
            _ => None,
        })
        .collect()
}

/// The times asked for with [`Effect::LookAgainAt`] among `effects`.
pub fn asked(effects: &[Effect]) -> Vec<Timestamp> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::LookAgainAt(at) => Some(*at),
            _ => None,
        })
        .collect()
}
