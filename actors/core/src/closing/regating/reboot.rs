//! Re-gating before an announced reboot (`--reboot-announcements`,
//! semantics.md §6.10): who announces one, and when the gate of a node
//! re-gated for one may open. Plain functions of the node, the DaemonSets
//! (kured's lock is an annotation on its own DaemonSet), the pods and the
//! time.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;

use crate::vocab::annotations;
use crate::vocab::config::{AnnouncedReboots, Source};
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

/// On kured's own DaemonSet: kured's reboot lock, JSON naming the node
/// that holds it (`{"nodeID": ..., "created": ..., "TTL": ...}`, or with
/// kured's `--concurrency` above 1 `{"maxOwners": N, "locks": [...]}`).
/// Written by kured (kubereboot/kured), read by nodegate.
pub const KURED_NODE_LOCK: &str = "weave.works/kured-node-lock";

/// On a Node, with kured's `--annotate-nodes`: the node needs a reboot and
/// kured works towards it (set before kured waits for its lock, removed
/// after the reboot).
pub const KURED_REBOOT_IN_PROGRESS: &str = "weave.works/kured-reboot-in-progress";

/// How `nodegate.dev/regated-for` begins on a node re-gated before an
/// announced reboot (then the source: `announced-reboot:kured-lock`).
pub const REGATED_FOR_PREFIX: &str = "announced-reboot:";

/// A reboot announced for a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub source: Source,
    /// In words, for Events and logs.
    pub detail: String,
}

/// The first announcement that stands for `node` at `now` among the sources
/// listened to, if any. A kured lock that cannot be read announces nothing
/// (the caller reports it with [`kured_lock_of`]).
pub fn announced<'a>(
    node: &NodeInfo,
    cfg: &AnnouncedReboots,
    daemonsets: impl IntoIterator<Item = &'a Arc<DaemonSetInfo>>,
    now: Timestamp,
) -> Option<Announcement> {
    announced_given(node, cfg, kured_lock_of(cfg, daemonsets, now).as_ref())
}

/// [`announced`] with kured's lock already read ([`kured_lock_of`]; `None`
/// when it is not listened to or there is none), so that one look reads it
/// once.
pub fn announced_given(
    node: &NodeInfo,
    cfg: &AnnouncedReboots,
    lock: Option<&Result<Vec<String>, String>>,
) -> Option<Announcement> {
    if cfg.listens_to(Source::KuredLock)
        && let Some(Ok(holders)) = lock
        && holders.contains(&node.name)
    {
        return Some(Announcement {
            source: Source::KuredLock,
            detail: format!(
                "kured's lock ({KURED_NODE_LOCK} on {}) names the node",
                cfg.kured_daemonset
            ),
        });
    }
    if cfg.listens_to(Source::Annotation)
        && let Some(why) = node.reboot_pending.as_deref()
    {
        let why = Some(why)
            .filter(|w| !w.is_empty())
            .unwrap_or("no reason given");
        return Some(Announcement {
            source: Source::Annotation,
            detail: format!("{} ({why})", annotations::REBOOT_PENDING),
        });
    }
    if cfg.listens_to(Source::KuredAnnotation) && node.kured_rebooting {
        return Some(Announcement {
            source: Source::KuredAnnotation,
            detail: format!("kured's {KURED_REBOOT_IN_PROGRESS}"),
        });
    }
    None
}

/// The nodes kured's lock names at `now` (expired entries left out), read
/// from kured's DaemonSet among `daemonsets`; `None` when the lock is not
/// listened to, the DaemonSet is not there or holds no lock, `Err` when the
/// lock is not kured's JSON.
pub fn kured_lock_of<'a>(
    cfg: &AnnouncedReboots,
    daemonsets: impl IntoIterator<Item = &'a Arc<DaemonSetInfo>>,
    now: Timestamp,
) -> Option<Result<Vec<String>, String>> {
    cfg.listens_to(Source::KuredLock).then_some(())?;
    let ds = daemonsets
        .into_iter()
        .find(|ds| ds.key() == cfg.kured_daemonset)?;
    let raw = ds.annotations.get(KURED_NODE_LOCK)?;
    Some(kured_lock_holders(raw, now, cfg.kured_max_holders))
}

/// One entry of kured's lock, as kured writes it (Go's JSON of its
/// `LockAnnotationValue`): `TTL` is a Go duration, in nanoseconds.
#[derive(Debug, Deserialize)]
struct LockEntry {
    #[serde(rename = "nodeID")]
    node_id: String,
    #[serde(default)]
    created: Option<String>,
    #[serde(rename = "TTL", default)]
    ttl: i64,
}

/// kured's lock: one holder, or with `--concurrency` above 1 a list (which
/// always carries `maxOwners`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Lock {
    Multi {
        #[serde(rename = "maxOwners")]
        max_owners: i64,
        #[serde(default)]
        locks: Option<Vec<LockEntry>>,
    },
    Single(LockEntry),
}

/// The nodes a kured lock value names at `now`, the first of them only: at
/// most the lock's own `maxOwners` (1 for a single holder) and at most
/// `max_holders` (`--kured-max-holders`, at least 1). Whoever may write the
/// annotation could otherwise name every node and so re-gate them all
/// outside the re-gating budget. An entry with a TTL whose time has run
/// out is expired, as kured judges it (a TTL of 0 never expires); one whose
/// `created` cannot be read is kept.
pub fn kured_lock_holders(
    raw: &str,
    now: Timestamp,
    max_holders: u32,
) -> Result<Vec<String>, String> {
    let lock: Lock = serde_json::from_str(raw).map_err(|e| {
        format!("{KURED_NODE_LOCK} {raw:?} is not kured's lock JSON ({e}); the lock is ignored")
    })?;
    let (entries, max_owners) = match lock {
        Lock::Multi { locks, max_owners } => (locks.unwrap_or_default(), max_owners),
        Lock::Single(entry) => (vec![entry], 1),
    };
    let cap = usize::try_from(max_owners.max(1))
        .unwrap_or(usize::MAX)
        .min(max_holders.max(1) as usize);
    Ok(entries
        .into_iter()
        .filter(|e| !expired(e, now))
        .map(|e| e.node_id)
        .filter(|n| !n.is_empty())
        .take(cap)
        .collect())
}

fn expired(e: &LockEntry, now: Timestamp) -> bool {
    let created = e
        .created
        .as_deref()
        .and_then(|c| c.parse::<Timestamp>().ok());
    let ttl = SignedDuration::from_nanos(e.ttl);
    e.ttl > 0 && created.is_some_and(|created| now.duration_since(created) >= ttl)
}

/// The node's boot id as the record writes it: empty when it reports none.
pub fn boot_of(node: &NodeInfo) -> &str {
    node.boot_id.as_deref().unwrap_or("")
}

/// Why the gate of `node` must not open by readiness yet because of an
/// announced reboot, if it must not (only for a node whose last re-gate
/// was for one): the node still reports the boot id it was re-gated in, or
/// a member's Ready pods all turned Ready before the taint went on
/// (`gated-since`) — their status is from before the reboot until the
/// restarted kubelet writes it again. `members` are the expected DaemonSets
/// whose readiness the gate counts as Ready.
///
/// Only positive evidence holds a member: every Ready condition of its
/// pods with a `lastTransitionTime` no later than the taint. The kubelet
/// writes whole seconds, so a transition in the taint's own second cannot
/// be told from one before it, and holds.
pub fn reboot_wait<'a>(
    node: &NodeInfo,
    members: impl IntoIterator<Item = &'a DaemonSetInfo>,
    pods: impl IntoIterator<Item = &'a Arc<PodInfo>> + Clone,
) -> Option<String> {
    let awaited = node.awaiting_reboot.as_deref()?;
    // A record left from an earlier announcement while the node was
    // re-gated since for something else (its members, a reboot seen after
    // the fact): not this gate's business.
    let regated_for = node.regated_for.as_deref().unwrap_or("");
    if !regated_for.starts_with(REGATED_FOR_PREFIX) {
        return None;
    }
    if boot_of(node) == awaited {
        let shown = if awaited.is_empty() { "none" } else { awaited };
        return Some(format!(
            "waiting for the announced reboot (the node still reports boot id {shown})"
        ));
    }
    let taint_at = node.gated_since?;
    let floor = Timestamp::from_second(taint_at.as_second()).unwrap_or(taint_at);
    let stale: Vec<String> = members
        .into_iter()
        .filter(|ds| {
            let mut ready = pods
                .clone()
                .into_iter()
                .filter(|p| p.controlled_by(ds) && !p.terminating && p.ready)
                .filter_map(|p| p.ready_since.get())
                .peekable();
            ready.peek().is_some() && ready.all(|since| since <= floor)
        })
        .map(|ds| ds.key())
        .collect();
    if stale.is_empty() {
        return None;
    }
    Some(format!(
        "the node rebooted; waiting for {} to be Ready again (Ready since before the reboot)",
        stale.join(", ")
    ))
}

#[cfg(test)]
mod tests;
