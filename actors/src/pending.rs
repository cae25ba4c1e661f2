//! The pods that changed for one gate since it last looked: the router adds
//! a uid for every pod event on the gate's node and wakes the gate only when
//! the set was empty; the gate takes the whole set when it wakes. However
//! many versions of its pods a burst brings, a gate's mailbox holds at most
//! one such wake, and the gate reads each pod once, as the index has it then.
//!
//! The set also remembers when the first of its pods was added, for the
//! metric of nodegate's own share of a pod event's reaction
//! (`nodegate_event_to_patch_seconds`), never for a decision.

use std::sync::Arc;
use std::time::Instant;

use ractor::ActorRef;

use crate::messages::NodeMsg;

/// A live gate as the router addresses it: its actor and its pending set.
pub(crate) struct Gate {
    pub(crate) actor: ActorRef<NodeMsg>,
    pub(crate) pods: Arc<PendingPods>,
}

/// The uids of the pods that changed for one gate since it last looked, and
/// when the first of them was added.
#[derive(Default)]
pub struct PendingPods(std::sync::Mutex<(Vec<String>, Option<Instant>)>);

impl PendingPods {
    /// Adds `uid`; true when the set was empty (the gate must be woken).
    pub(crate) fn add(&self, uid: &str) -> bool {
        let mut pending = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (pods, since) = &mut *pending;
        let was_empty = pods.is_empty();
        if was_empty {
            *since = Some(Instant::now());
        }
        if !pods.iter().any(|u| u == uid) {
            pods.push(uid.to_string());
        }
        was_empty
    }

    /// Every uid added since the last take, emptying the set, and when the
    /// first of them was added.
    pub fn take(&self) -> (Vec<String>, Option<Instant>) {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::PendingPods;

    #[test]
    fn only_the_first_uid_after_a_take_wakes_the_gate() {
        let p = PendingPods::default();
        assert!(p.add("a"), "an empty set wakes");
        assert!(!p.add("b"), "a wake is already on its way");
        assert!(!p.add("a"), "a uid already pending is not added twice");
        let (uids, since) = p.take();
        assert_eq!(uids, vec!["a".to_string(), "b".to_string()]);
        assert!(since.is_some(), "the wake's start is kept");
        assert_eq!(p.take(), (Vec::new(), None), "a take empties the set");
        assert!(p.add("b"), "the first uid after a take wakes again");
    }
}
