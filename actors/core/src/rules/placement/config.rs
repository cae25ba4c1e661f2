//! nodegate's placement configuration, [`PlacementConfig`]: its managed
//! taints, the transient ones (semantics.md §2) and the exclusions.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::taints::{EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE};
use crate::rules::selector::{LabelSelector, check_label_key};
use crate::vocab::model::Taint;

/// nodegate's default startup taint key (effect `NoSchedule`).
pub const DEFAULT_MANAGED_TAINT_KEY: &str = "nodegate.dev/initializing";

/// Start-up taints that some other agent is known to lift (semantics.md §2).
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
    /// When set, the only namespaces whose DaemonSets are ever waited for
    /// (`--daemonset-namespaces`); `None` is every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemonset_namespaces: Option<BTreeSet<String>>,
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
            daemonset_namespaces: None,
        }
    }
}

impl PlacementConfig {
    /// Whether DaemonSets of `namespace` may be members at all.
    pub fn daemonset_allowed(&self, namespace: &str) -> bool {
        self.daemonset_namespaces
            .as_ref()
            .is_none_or(|allowed| allowed.contains(namespace))
    }

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
