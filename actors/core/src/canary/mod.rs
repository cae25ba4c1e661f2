//! The canary member (semantics.md §6.9): a tiny pod nodegate runs on each
//! gated node, counted Ready once the kubelet made its sandbox and network
//! (`PodReadyToStartContainers`) and, where a readiness probe is configured,
//! the pod is Ready — the proof that a pod can really start there. Here:
//! what identifies a canary, when one counts as Ready, and the backoff of a
//! failed one; which canaries to create and delete is [`decider`]'s.

use std::time::Duration;

use crate::vocab::backoff::Backoff;
use crate::vocab::config::CanaryConfig;
use crate::vocab::member::Readiness;
use crate::vocab::model::PodInfo;

/// The label on every canary, naming its node ([`label_value`]): what the
/// leader lists and the gate recognises, together with the namespace.
pub const CANARY_LABEL: &str = "nodegate.dev/canary";

/// The prefix of every canary's name ([`pod_name`]).
pub const NAME_PREFIX: &str = "nodegate-canary-";

/// The longest a DNS label (a label value) may be.
const LABEL_MAX: usize = 63;
/// The longest a pod name (a DNS subdomain) may be.
const NAME_MAX: usize = 253;

/// The value of [`CANARY_LABEL`] for `node`: the node's name when it is a
/// valid label value (63 characters at most), else its first 46 characters,
/// `-` and a hash of the whole name — node names are DNS subdomains, so the
/// rest is valid as it is.
pub fn label_value(node: &str) -> String {
    shorten(node, LABEL_MAX)
}

/// The canary's name on `node`: one name per node, so a second create is
/// refused by the API server rather than making a second canary.
pub fn pod_name(node: &str) -> String {
    shorten(&format!("{NAME_PREFIX}{node}"), NAME_MAX)
}

fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let hash = format!("{:016x}", fnv1a(s));
    let keep = max - hash.len() - 1;
    let head = s[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// FNV-1a, 64 bits: a stable hash of a name (no crate in the lock file
/// offers one the core may use; it need not resist anyone, only be stable).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether `pod` is the canary nodegate made for `node`: in nodegate's own
/// namespace, bound to the node, labelled for it. A pod elsewhere carrying
/// the label is someone else's and never counts (tenants cannot create
/// pods in nodegate's namespace).
pub fn is_canary_of(pod: &PodInfo, cfg: &CanaryConfig, node: &str) -> bool {
    pod.namespace == cfg.namespace
        && pod.node_name == node
        && pod.labels.get(CANARY_LABEL).map(|v| v.as_str()) == Some(label_value(node).as_str())
}

/// Whether the pod ended (`Failed` or `Succeeded`): the kubelet will not
/// start it again, so nodegate replaces it.
pub fn has_ended(pod: &PodInfo) -> bool {
    matches!(pod.phase.as_str(), "Failed" | "Succeeded")
}

/// Where the canary member of `node` stands, from the pods bound to it.
pub fn readiness<'a>(
    pods: impl Iterator<Item = &'a PodInfo>,
    cfg: &CanaryConfig,
    node: &str,
) -> Readiness {
    let mut live = None;
    let mut terminating = None;
    for pod in pods.filter(|p| is_canary_of(p, cfg, node)) {
        if pod.terminating {
            terminating = Some(pod);
        } else {
            live = Some(pod);
        }
    }
    let waiting = |why: String| Readiness::Waiting {
        why,
        available_at: None,
    };
    let Some(pod) = live else {
        return waiting(match terminating {
            Some(p) => format!("canary pod {} is being deleted; a new one follows", p.name),
            None => format!(
                "no canary pod on the node yet (the leader creates one per gated node, at most {} at once)",
                cfg.max_in_flight
            ),
        });
    };
    let note = pod
        .status_note
        .as_deref()
        .map(|n| format!(": {n}"))
        .unwrap_or_default();
    if has_ended(pod) {
        return waiting(format!(
            "canary pod {} {}{note}; nodegate replaces it after a backoff",
            pod.name,
            pod.phase.to_lowercase()
        ));
    }
    if !pod.sandbox_ready {
        return waiting(format!(
            "canary pod {} has no sandbox yet (PodReadyToStartContainers is not True){note}",
            pod.name
        ));
    }
    if cfg.probe && !pod.ready {
        return waiting(format!(
            "canary pod {} has its sandbox, but its readiness probe does not pass yet{note}",
            pod.name
        ));
    }
    Readiness::Ready {
        pod: pod.name.to_string(),
    }
}

/// How long to wait before replacing the `failures`-th failed canary of a
/// node (`BACKOFF.ceiling(failures)`, 1 for the first).
pub const BACKOFF: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));

pub mod decider;
pub(crate) mod report;

#[cfg(test)]
mod tests;
