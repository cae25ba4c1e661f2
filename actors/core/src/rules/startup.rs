//! Which startup taint an entrance adds to a node: the rules, the presets and
//! their order of semantics.md §6.0. Every entrance chooses with
//! [`StartupTaints::for_node`] (the admission policy's CEL, from
//! [`StartupTaints::admission_rules`]).

use std::fmt;

use crate::rules::placement::{DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE, ManagedTaint};
use crate::rules::selector::{LabelSelector, LabelSelectorRequirement, OP_EXISTS};
use crate::vocab::model::{KARPENTER_NODEPOOL_LABEL, Labels, NodeInfo};
use crate::vocab::words::word_enum;

/// GKE's node-pool label.
pub const GKE_NODEPOOL_LABEL: &str = "cloud.google.com/gke-nodepool";
/// AKS's agent-pool label.
pub const AKS_AGENTPOOL_LABEL: &str = "kubernetes.azure.com/agentpool";
/// EKS managed node groups' label.
pub const EKS_NODEGROUP_LABEL: &str = "eks.amazonaws.com/nodegroup";

/// Karpenter sets this label to `true` once it has registered the node: its
/// registration sync, which puts a NodePool's taints and `startupTaints` on
/// the node, is done.
pub const KARPENTER_REGISTERED_LABEL: &str = "karpenter.sh/registered";
/// `true`: Karpenter never syncs taints onto this node.
pub const KARPENTER_DO_NOT_SYNC_TAINTS_LABEL: &str = "karpenter.sh/do-not-sync-taints";

/// Why a gate waits for Karpenter before it opens, in words.
pub const KARPENTER_REGISTRATION: &str = "karpenter registration";

/// Whether Karpenter may still put taints back on this node (not yet
/// registered, nor `do-not-sync-taints`): a gate that opened it would see a
/// NodePool's `startupTaints` key put back by the registration
/// (karpenter#1772), so it waits (semantics.md §6.0).
pub fn karpenter_registering(labels: &Labels) -> bool {
    let is = |key: &str| labels.get(key).is_some_and(|v| v == "true");
    labels.contains_key(KARPENTER_NODEPOOL_LABEL)
        && !is(KARPENTER_REGISTERED_LABEL)
        && !is(KARPENTER_DO_NOT_SYNC_TAINTS_LABEL)
}

/// A gate on a Karpenter node that nodegate opened before and did not
/// re-gate: the managed taint came back with Karpenter's registration sync
/// after an opening before registration (by the deadline or by hand). It opens
/// again as usual, with the same deadline, but records no second Event.
pub fn karpenter_reopening(node: &NodeInfo) -> bool {
    node.labels.contains_key(KARPENTER_NODEPOOL_LABEL)
        && (node.opened_at.is_some() || node.opened_before)
        && node.gated_since.is_none()
}

/// Karpenter (v1.13 and later) ignores a `readiness.k8s.io/` taint while a
/// node initializes and waits for it to go before calling it Initialized.
pub const KARPENTER_TAINT_KEY: &str = "readiness.k8s.io/nodegate";
/// cluster-autoscaler treats every key under this prefix as a startup taint
/// with no flag at all: the one kind managed autoscalers (GKE, AKS) accept.
pub const CLUSTER_AUTOSCALER_TAINT_KEY: &str =
    "startup-taint.cluster-autoscaler.kubernetes.io/nodegate";

word_enum! {
    /// A preset of `--autoscaler`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Autoscaler {
        Auto = "auto",
        Karpenter = "karpenter",
        ClusterAutoscaler = "cluster-autoscaler",
        Gke = "gke",
        Aks = "aks",
        Eks = "eks",
        None = "none",
    }
}

/// `--autoscaler`'s default.
pub const DEFAULT_AUTOSCALERS: &[Autoscaler] = &[Autoscaler::Auto];

/// A name that is no preset, with the nearest one when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not an autoscaler preset{}; use one of {}", suggestion(.nearest), Autoscaler::names())]
pub struct UnknownAutoscaler {
    pub name: String,
    pub nearest: Option<&'static str>,
}

fn suggestion(nearest: &Option<&'static str>) -> String {
    nearest
        .map(|n| format!(" (did you mean {n:?}?)"))
        .unwrap_or_default()
}

impl Autoscaler {
    /// Every name, comma-separated, for errors and help.
    pub fn names() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }

    /// Reads one name (case and surrounding space ignored).
    pub fn parse(s: &str) -> Result<Autoscaler, UnknownAutoscaler> {
        let wanted = s.trim().to_ascii_lowercase();
        Self::from_word(&wanted).ok_or_else(|| UnknownAutoscaler {
            name: s.to_string(),
            nearest: nearest(&wanted),
        })
    }

    /// The presets this one stands for (`auto` is four).
    fn expand(self) -> Vec<Autoscaler> {
        match self {
            Self::Auto => vec![Self::Karpenter, Self::Gke, Self::Aks, Self::Eks],
            Self::None => Vec::new(),
            preset => vec![preset],
        }
    }

    /// The one rule of a concrete preset (`None` for `auto` and `none`).
    fn rule(self) -> Option<StartupRule> {
        let (label, key) = match self {
            Self::Karpenter => (Some(KARPENTER_NODEPOOL_LABEL), KARPENTER_TAINT_KEY),
            Self::Gke => (Some(GKE_NODEPOOL_LABEL), CLUSTER_AUTOSCALER_TAINT_KEY),
            Self::Aks => (Some(AKS_AGENTPOOL_LABEL), CLUSTER_AUTOSCALER_TAINT_KEY),
            Self::Eks => (Some(EKS_NODEGROUP_LABEL), CLUSTER_AUTOSCALER_TAINT_KEY),
            Self::ClusterAutoscaler => (None, CLUSTER_AUTOSCALER_TAINT_KEY),
            Self::Auto | Self::None => return None,
        };
        let selector = LabelSelector {
            match_expressions: label
                .map(|l| LabelSelectorRequirement::new(l, OP_EXISTS, Vec::<String>::new()))
                .into_iter()
                .collect(),
            ..LabelSelector::default()
        };
        Some(StartupRule {
            selector,
            taint: ManagedTaint::new(key, EFFECT_NO_SCHEDULE),
            source: RuleSource::Preset(self),
        })
    }
}

/// The preset nearest to a misspelt name: one a single edit away, or one
/// that starts with what was typed.
fn nearest(wanted: &str) -> Option<&'static str> {
    let names = Autoscaler::ALL.map(Autoscaler::as_str);
    let close = |n: &&str| strsim::levenshtein(n, wanted) <= 2;
    let prefix = |n: &&str| !wanted.is_empty() && (n.starts_with(wanted) || wanted.starts_with(n));
    let by_prefix = || names.into_iter().find(prefix);
    names.into_iter().find(close).or_else(by_prefix)
}

/// Where a rule came from, for explain and the docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleSource {
    /// `--taint-for` / `taintFor`.
    Explicit,
    Preset(Autoscaler),
}

/// One rule: nodes whose labels match `selector` get `taint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupRule {
    pub selector: LabelSelector,
    pub taint: ManagedTaint,
    pub source: RuleSource,
}

/// What is wrong with a `--taint-for` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--taint-for {input:?}: {problem}")]
pub struct StartupRuleError {
    pub input: String,
    pub problem: String,
}

impl StartupRule {
    /// Reads `SELECTOR=KEY[:EFFECT]` (EFFECT defaults to NoSchedule; an
    /// empty selector is every node): the taint follows the last `=`, since
    /// a taint has none and a selector may. The config file's `taintFor`
    /// entries are written in this form too.
    pub fn parse(s: &str) -> Result<StartupRule, StartupRuleError> {
        let err = |problem: String| StartupRuleError {
            input: s.to_string(),
            problem,
        };
        let Some((selector, taint)) = s.trim().rsplit_once('=') else {
            return Err(err(
                "expected SELECTOR=KEY[:EFFECT], e.g. 'pool=gpu=example.com/gpu-init:NoSchedule'"
                    .into(),
            ));
        };
        let selector = LabelSelector::parse(selector).map_err(|e| err(e.to_string()))?;
        let taint = taint.trim();
        let spelled = if taint.contains(':') {
            taint.to_string()
        } else {
            format!("{taint}:{EFFECT_NO_SCHEDULE}")
        };
        let taint = ManagedTaint::parse(&spelled).map_err(|e| err(e.to_string()))?;
        Ok(StartupRule {
            selector,
            taint,
            source: RuleSource::Explicit,
        })
    }
}

/// The line of the admission policy's parameters for this rule:
/// `SELECTOR=KEY:EFFECT`, the selector in kubectl syntax.
impl fmt::Display for StartupRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.selector, self.taint)
    }
}

/// The rules in force and the taint for a node no rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupTaints {
    rules: Vec<StartupRule>,
    fallback: ManagedTaint,
}

impl Default for StartupTaints {
    /// No rule: every node gets nodegate's default taint (`--autoscaler
    /// none`). The binary's default is `auto`, built by the settings.
    fn default() -> Self {
        let fallback = ManagedTaint::new(DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE);
        StartupTaints::new(Vec::new(), &[], fallback)
    }
}

impl StartupTaints {
    /// The explicit rules first, in order, then each preset's rule once, in
    /// the order named (`auto` expanded where it stands); `fallback` is the
    /// first `--taint`.
    pub fn new(
        explicit: Vec<StartupRule>,
        presets: &[Autoscaler],
        fallback: ManagedTaint,
    ) -> StartupTaints {
        let mut rules = explicit;
        for p in presets.iter().flat_map(|p| p.expand()) {
            if !rules.iter().any(|r| r.source == RuleSource::Preset(p)) {
                rules.extend(p.rule());
            }
        }
        // The catch-all goes last whatever its place among the names: a
        // preset named after it would otherwise never match.
        rules.sort_by_key(|r| r.source == RuleSource::Preset(Autoscaler::ClusterAutoscaler));
        StartupTaints { rules, fallback }
    }

    /// The taint an entrance adds to a node with these labels: the first
    /// matching rule's, else the fallback.
    pub fn for_node(&self, labels: &Labels) -> &ManagedTaint {
        let rule = self.rules.iter().find(|r| r.selector.matches(labels));
        rule.map_or(&self.fallback, |r| &r.taint)
    }

    pub fn rules(&self) -> &[StartupRule] {
        &self.rules
    }

    /// The taint of a node no rule matches (the first `--taint`).
    pub fn fallback(&self) -> &ManagedTaint {
        &self.fallback
    }

    /// The managed startup taints: every `--taint` (`taints`), then every
    /// rule's taint not among them, each once.
    pub fn managed(&self, taints: &[ManagedTaint]) -> Vec<ManagedTaint> {
        let mut out = taints.to_vec();
        for r in &self.rules {
            if !out.contains(&r.taint) {
                out.push(r.taint.clone());
            }
        }
        out
    }

    /// The admission policy's `startupRules` parameter: one rule a line,
    /// `SELECTOR=KEY:EFFECT`, in order (the policy's CEL reads it).
    pub fn admission_rules(&self) -> String {
        self.rules.iter().map(|r| format!("{r}\n")).collect()
    }
}

#[cfg(test)]
mod tests;
