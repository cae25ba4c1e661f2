//! Re-list bookkeeping for one watch: which objects it has indexed, and how a
//! re-list is streamed into the index. Pure: the watch loop in `watch`
//! applies the operations this returns.
//!
//! A watch re-lists after a 410 Gone, an API server restart or an etcd
//! compaction: kube-runtime's watcher then sends `Init`, one `InitApply` per
//! object that exists now (page by page), and `InitDone`. Only at `InitDone`
//! is it known which indexed objects vanished meanwhile. Applying every
//! listed object as it arrives and deleting the vanished ones only at the
//! end could let a gate decide on a state that never existed: a deleted
//! Ready pod would still count while newly listed Ready pods arrive.
//!
//! So a re-list is streamed by *mark and sweep*, never as a second copy of
//! the index: every indexed identity carries the epoch of the last list (or
//! live event) that showed it; `Init` starts a new epoch, and `InitDone`
//! sweeps every identity still marked with an older one. Every state a gate
//! can see meanwhile is *more closed* than the listed one: a listed object
//! that may open a gate is held as its compact projection until the sweep
//! (each kind's rule: `watch`'s `Sink::may_open`); one the index already
//! shows as it is is only marked, so a re-list after an API server restart
//! holds next to nothing.

use std::collections::HashMap;
use std::hash::Hash;

/// One operation on the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op<I, T> {
    Upsert(T),
    Delete(I),
}

/// The identities a watch has indexed, each with its epoch, and the upserts
/// a re-list in progress holds back until its sweep.
#[derive(Debug)]
pub struct Listing<I, T> {
    /// Hashed with foldhash, seeded per process (as the router's maps):
    /// every watch event looks its identity up here.
    known: HashMap<I, u32, foldhash::fast::RandomState>,
    /// The current epoch; a re-list starts the next one.
    epoch: u32,
    /// Whether a re-list is in progress (between `Init` and `InitDone`).
    relisting: bool,
    /// Listed objects that may open a gate, applied after the sweep.
    held: Vec<T>,
}

impl<I, T> Default for Listing<I, T> {
    fn default() -> Self {
        Listing {
            known: HashMap::default(),
            epoch: 0,
            relisting: false,
            held: Vec::new(),
        }
    }
}

impl<I: Clone + Eq + Hash, T> Listing<I, T> {
    /// A live `Apply` was indexed under `id`.
    pub fn applied(&mut self, id: I) {
        self.known.insert(id, self.epoch);
    }

    /// A live `Delete`: whether `id` was indexed (and so must be deleted).
    pub fn deleted(&mut self, id: &I) -> bool {
        self.known.remove(id).is_some()
    }

    /// `Init`: a re-list starts; every identity it does not list before
    /// [`Self::done`] is swept then.
    pub fn begin(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.relisting = true;
        self.held.clear();
    }

    /// `InitApply` of an object the index already shows exactly so: it is
    /// marked as listed, nothing else.
    pub fn listed_unchanged(&mut self, id: I) {
        self.known.insert(id, self.epoch);
    }

    /// How many projections the re-list in progress holds back.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// How many identities the watch has indexed.
    pub fn known(&self) -> usize {
        self.known.len()
    }

    /// `InitApply` of a changed object: marked as listed, and returned to be
    /// applied at once — unless a re-list is in progress and it `may_open` a
    /// gate, in which case it is held until [`Self::done`].
    pub fn listed(&mut self, id: I, item: T, may_open: bool) -> Option<T> {
        self.known.insert(id, self.epoch);
        if self.relisting && may_open {
            self.held.push(item);
            None
        } else {
            Some(item)
        }
    }

    /// `InitDone`: the sweep (every identity the re-list did not show is
    /// deleted), then the held upserts. Afterwards exactly the listed
    /// objects are known.
    pub fn done(&mut self) -> Vec<Op<I, T>> {
        if !self.relisting {
            return Vec::new();
        }
        self.relisting = false;
        let epoch = self.epoch;
        let swept = self.known.extract_if(|_, seen| *seen != epoch);
        let mut ops: Vec<_> = swept.map(|(id, _)| Op::Delete(id)).collect();
        ops.extend(std::mem::take(&mut self.held).into_iter().map(Op::Upsert));
        self.held.shrink_to_fit();
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod as far as these tests care: its id and whether it is Ready.
    type Pod = (&'static str, bool);

    fn listing(known: &[&'static str]) -> Listing<&'static str, Pod> {
        let mut l = Listing::default();
        for id in known {
            l.applied(*id);
        }
        l
    }

    /// Lists `pod` the way the pod watch does: a Ready one may open a gate.
    fn list(l: &mut Listing<&'static str, Pod>, pod: Pod) -> Option<Pod> {
        l.listed(pod.0, pod, pod.1)
    }

    #[test]
    fn closing_objects_stream_and_opening_ones_wait_for_the_sweep() {
        let mut l = listing(&["a"]);
        l.begin();
        assert_eq!(list(&mut l, ("b", true)), None, "Ready: held");
        assert_eq!(
            list(&mut l, ("c", false)),
            Some(("c", false)),
            "not Ready: applied at once"
        );
        assert_eq!(l.held(), 1);
        assert_eq!(l.done(), vec![Op::Delete("a"), Op::Upsert(("b", true))]);
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn pods_are_deleted_before_ready_pods_arrive() {
        // The hazard: a Ready pod deleted while the watch was down must not
        // count while the newly listed Ready pods arrive.
        let mut l = listing(&["old-ready", "stays"]);
        l.begin();
        let mut ops: Vec<Op<&str, Pod>> = Vec::new();
        for pod in [("new-ready", true), ("stays", false)] {
            ops.extend(list(&mut l, pod).map(Op::Upsert));
        }
        ops.extend(l.done());
        let first_ready = ops
            .iter()
            .position(|op| matches!(op, Op::Upsert((_, true))))
            .expect("a Ready pod is listed");
        let last_removal = ops
            .iter()
            .rposition(|op| matches!(op, Op::Delete(_) | Op::Upsert((_, false))))
            .expect("something stops being Ready");
        assert!(
            last_removal < first_ready,
            "every loss of readiness must come before any gain: {ops:?}"
        );
    }

    #[test]
    fn daemonsets_arrive_before_vanished_ones_are_deleted() {
        let mut l: Listing<&str, &str> = Listing::default();
        l.applied("old-uid");
        l.begin();
        assert_eq!(l.listed("new-uid", "cilium", false), Some("cilium"));
        assert_eq!(l.done(), vec![Op::Delete("old-uid")]);
    }

    #[test]
    fn after_a_relist_only_listed_objects_are_known() {
        let mut l = listing(&["a", "b"]);
        l.begin();
        list(&mut l, ("b", true));
        l.done();
        assert_eq!(l.known(), 1);
        assert!(!l.deleted(&"a"), "a vanished in the re-list");
        assert!(l.deleted(&"b"));
    }

    #[test]
    fn a_second_relist_sweeps_what_the_first_listed_and_the_second_did_not() {
        let mut l = listing(&["a", "b", "c"]);
        l.begin();
        l.listed_unchanged("a");
        l.listed_unchanged("b");
        assert_eq!(l.done(), vec![Op::Delete("c")]);
        l.applied("d");
        l.begin();
        l.listed_unchanged("b");
        l.listed_unchanged("d");
        assert_eq!(l.done(), vec![Op::Delete("a")]);
        assert_eq!(l.known(), 2);
    }

    #[test]
    fn an_unchanged_relist_deletes_nothing() {
        let mut l = listing(&["a"]);
        l.begin();
        list(&mut l, ("a", true));
        assert_eq!(l.done(), vec![Op::Upsert(("a", true))]);
    }

    #[test]
    fn done_without_begin_does_nothing() {
        let mut l = listing(&["a"]);
        assert!(l.done().is_empty());
        assert!(l.deleted(&"a"));
    }

    #[test]
    fn listed_outside_a_relist_applies_at_once() {
        let mut l: Listing<&str, &str> = Listing::default();
        assert_eq!(l.listed("a", "item", true), Some("item"));
        assert!(l.deleted(&"a"));
    }

    #[test]
    fn an_unchanged_object_is_not_held_and_not_deleted() {
        let mut l = listing(&["same", "gone"]);
        l.begin();
        l.listed_unchanged("same");
        assert_eq!(list(&mut l, ("new", true)), None);
        assert_eq!(l.held(), 1, "only the changed projection is held");
        assert_eq!(
            l.done(),
            vec![Op::Delete("gone"), Op::Upsert(("new", true))]
        );
        // "same" is still known: a later live delete deletes it.
        assert!(l.deleted(&"same"));
    }
}
