//! Karpenter: does each NodePool recognise the taint nodegate adds to its
//! nodes? Karpenter (1.13 and later) treats a `readiness.k8s.io/` taint, and
//! the taints listed in the NodePool's `spec.template.spec.startupTaints`,
//! as temporary while a node initializes. Any other taint on a new node
//! makes it look unable to take the pending pods (more NodeClaims are
//! launched) and lets the node count as initialized once Ready (a gated,
//! empty node becomes a consolidation candidate).

use k8s_openapi::api::apps::v1::Deployment;
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::vocab::model::{KARPENTER_NODEPOOL_LABEL, Labels};

use crate::commands::doctor::keys::added_taints;
use crate::commands::doctor::report::{Check, Name};
use crate::commands::output::joined;
use crate::settings::config::GateSettings;

pub const CHECK: Name = Name("karpenter");

/// The key prefix Karpenter ignores while a node initializes.
pub const READINESS_PREFIX: &str = "readiness.k8s.io/";

/// What the doctor reads of a `karpenter.sh/v1` NodePool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePool {
    pub name: String,
    /// `spec.template.metadata.labels`, plus `karpenter.sh/nodepool`: the
    /// labels its nodes are known to get.
    pub labels: Labels,
    /// `spec.template.spec.startupTaints`, as (key, effect).
    pub startup_taints: Vec<(String, String)>,
}

impl NodePool {
    /// The NodePool from its JSON (a dynamic object).
    pub fn from_json(name: &str, obj: &serde_json::Value) -> NodePool {
        let template = &obj["spec"]["template"];
        let labels = template["metadata"]["labels"].as_object().into_iter();
        let mut labels: Labels = labels
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
            .collect();
        labels.insert(
            KARPENTER_NODEPOOL_LABEL.to_string().into(),
            name.to_string().into(),
        );
        let taints = template["spec"]["startupTaints"].as_array().into_iter();
        let startup_taints = taints
            .flatten()
            .filter_map(|t| {
                let effect = t["effect"].as_str().unwrap_or_default().to_string();
                Some((t["key"].as_str()?.to_string(), effect))
            })
            .collect();
        NodePool {
            name: name.to_string(),
            labels,
            startup_taints,
        }
    }

    fn lists(&self, t: &ManagedTaint) -> bool {
        self.startup_taints
            .iter()
            .any(|(k, e)| *k == t.key && *e == t.effect)
    }
}

/// The first Karpenter release that ignores `readiness.k8s.io/` taints
/// while a node initializes.
pub const READINESS_SINCE: (u64, u64) = (1, 13);

/// Karpenter's (major, minor) version and the image it was read from.
pub type Version = ((u64, u64), String);

/// Karpenter's version, read from the tag of the controller image of a
/// Deployment (`…/karpenter/controller:1.14.3`, the project's own image,
/// whose version is the core's); `None` when no such Deployment is seen
/// (a managed Karpenter, another provider's image).
pub fn version(deployments: &[Deployment]) -> Option<Version> {
    deployments
        .iter()
        .filter_map(|d| d.spec.as_ref()?.template.spec.as_ref())
        .flat_map(|p| p.containers.iter())
        .filter_map(|c| c.image.as_deref())
        .find_map(|image| {
            let image = image.split('@').next()?;
            let (repo, tag) = image.rsplit_once(':')?;
            if !repo.ends_with("karpenter/controller") || tag.contains('/') {
                return None;
            }
            let mut parts = tag.trim_start_matches('v').split('.');
            let major = parts.next()?.parse().ok()?;
            let minor = parts.next()?.parse().ok()?;
            Some(((major, minor), image.to_string()))
        })
}

/// The NodePools found (`None`: the NodePool CRD is not installed), and
/// Karpenter's version when known.
pub fn check(
    gate: &GateSettings,
    pools: Option<&[NodePool]>,
    version: Option<&Version>,
) -> Vec<Check> {
    let Some(pools) = pools else {
        return vec![CHECK.skipped(
            "NodePools",
            "Karpenter not installed (no karpenter.sh/v1 NodePool API)",
        )];
    };
    if pools.is_empty() {
        return vec![CHECK.skipped("NodePools", "no NodePool")];
    }
    pools.iter().map(|p| nodepool(gate, p, version)).collect()
}

/// One NodePool against the taints nodegate adds to its nodes.
pub fn nodepool(gate: &GateSettings, pool: &NodePool, version: Option<&Version>) -> Check {
    let subject = format!("NodePool {}", pool.name);
    let added = added_taints(gate, &pool.labels);
    if added.is_empty() {
        return CHECK.ok(
            subject,
            "nodegate adds no taint to its nodes (outside --node-selector)",
        );
    }
    let unknown: Vec<&ManagedTaint> = added
        .iter()
        .filter(|t| !t.key.starts_with(READINESS_PREFIX) && !pool.lists(t))
        .collect();
    if let Some(first) = unknown.first() {
        let names = joined(&unknown, ", ");
        return CHECK.problem(
            subject,
            format!(
                "nodegate adds {names} to its nodes, which Karpenter neither ignores (the key is \
                 not under {READINESS_PREFIX}) nor finds in spec.template.spec.startupTaints: \
                 Karpenter will launch extra NodeClaims and may consolidate gated nodes"
            ),
            format!(
                "add {{key: {}, effect: {}}} to NodePool {}'s spec.template.spec.startupTaints, \
                 or have nodegate add a {READINESS_PREFIX} key to Karpenter's nodes (e.g. \
                 --taint={READINESS_PREFIX}nodegate:NoSchedule; Karpenter 1.13 or later)",
                first.key, first.effect, pool.name
            ),
        );
    }
    // Karpenter known to be older than 1.13 and a taint nodegate adds not
    // listed: it can then only be a `readiness.k8s.io/` one, which such a
    // Karpenter does not ignore.
    let old = version.filter(|(v, _)| *v < READINESS_SINCE);
    let unlisted = added.iter().find(|t| !pool.lists(t));
    if let Some((((major, minor), image), first)) = old.zip(unlisted) {
        return CHECK.problem(
            subject,
            format!(
                "nodegate adds {first} to its nodes, and Karpenter {major}.{minor} ({image}) \
                 ignores {READINESS_PREFIX} taints only from 1.13 on: it will launch extra \
                 NodeClaims and may consolidate gated nodes"
            ),
            format!(
                "upgrade Karpenter to 1.13 or later, or add {{key: {}, effect: {}}} to NodePool \
                 {}'s spec.template.spec.startupTaints",
                first.key, first.effect, pool.name
            ),
        );
    }
    // Every taint nodegate adds is recognised: what is worth knowing about how.
    let listed = joined(added.iter().filter(|t| pool.lists(t)), ", ");
    let keys = joined(&added, ", ");
    let ok = CHECK.ok(
        subject,
        format!("Karpenter treats {keys} as a startup taint of its nodes"),
    );
    if listed.is_empty() {
        ok.with_note(match version {
            Some(((major, minor), _)) => format!(
                "Karpenter {major}.{minor} ignores {READINESS_PREFIX} taints while a node \
                 initializes"
            ),
            None => format!(
                "Karpenter ignores {READINESS_PREFIX} taints while a node initializes from \
                 version 1.13 on (its version was not seen: check it)"
            ),
        })
    } else {
        ok.with_note(format!(
            "{listed} listed in spec.template.spec.startupTaints: Karpenter puts it back until the \
             node is registered, so opening must wait for karpenter.sh/registered=true (an \
             opening before it is undone)"
        ))
    }
}
