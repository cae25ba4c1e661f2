//! Re-list bookkeeping for one watch: which objects it has indexed, and how a
//! re-list is swapped in.
//!
//! A watch re-lists after a 410 Gone, an API server restart or an etcd
//! compaction: kube-runtime's watcher then sends `Init`, one `InitApply` per
//! object that exists now, and `InitDone`. Applying those objects as they
//! arrive, and deleting the vanished ones only at the end, lets a gate decide
//! on a state that never existed: a deleted Ready pod would still count while
//! newly listed pods arrive. So a re-list is buffered here (as compact
//! projections, never whole objects) and handed back at `InitDone` as one
//! batch of operations, ordered so that every state a gate can see while the
//! batch is applied is *more closed* than the listed one: it removes before it
//! adds where removing can only close a gate (pods), and adds before it
//! removes where adding can only close a gate (DaemonSets, each of which may
//! add an expected member). A gate may therefore wait a moment longer during a
//! re-list, but never opens on a half-applied one.
//!
//! Only what changed is held: a listed object the index already shows as it
//! is (the watch says so, [`Listing::listed_unchanged`]) keeps just its
//! identity, since upserting it again would change nothing. A re-list after
//! an API server restart, where nearly everything is unchanged, so holds
//! the identities and the few changed projections, not a second copy of the
//! index (security review §17); the order of the operations, and so the
//! guarantee above, is the same.
//!
//! Pure bookkeeping: no I/O, no clock; the watch loop in `watch` applies the
//! operations this returns.

use std::collections::HashSet;
use std::hash::Hash;

/// In what order a re-list's operations are applied (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Deletions of vanished objects first, then the listed objects, lowest
    /// rank first: for kinds where fewer objects can only keep a gate closed.
    DeletesFirst,
    /// The listed objects first, then deletions: for kinds where more
    /// objects can only keep a gate closed.
    UpsertsFirst,
}

/// One operation on the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op<I, T> {
    Upsert(T),
    Delete(I),
}

/// The identities a watch has indexed, and the re-list in progress.
#[derive(Debug)]
pub struct Listing<I, T> {
    known: HashSet<I>,
    relist: Option<Vec<(I, T)>>,
    /// Listed in the re-list in progress, unchanged: identities only.
    unchanged: Vec<I>,
}

impl<I, T> Default for Listing<I, T> {
    fn default() -> Self {
        Listing {
            known: HashSet::new(),
            relist: None,
            unchanged: Vec::new(),
        }
    }
}

impl<I: Clone + Eq + Hash, T> Listing<I, T> {
    /// A live `Apply` was indexed under `id`.
    pub fn applied(&mut self, id: I) {
        self.known.insert(id);
    }

    /// A live `Delete`: whether `id` was indexed (and so must be deleted).
    pub fn deleted(&mut self, id: &I) -> bool {
        self.known.remove(id)
    }

    /// `Init`: a re-list starts; what it lists is held until [`Self::done`].
    pub fn begin(&mut self) {
        self.relist = Some(Vec::new());
        self.unchanged.clear();
    }

    /// `InitApply` of an object the index already shows exactly so: only
    /// its identity is kept (it is listed, so not deleted at the end).
    pub fn listed_unchanged(&mut self, id: I) {
        match self.relist {
            Some(_) => self.unchanged.push(id),
            None => {
                self.known.insert(id);
            }
        }
    }

    /// How many projections the re-list in progress holds.
    pub fn held(&self) -> usize {
        self.relist.as_ref().map_or(0, Vec::len)
    }

    /// `InitApply`. Outside a re-list (which the watcher never does) the
    /// object is returned to be applied at once.
    pub fn listed(&mut self, id: I, item: T) -> Option<T> {
        match self.relist.as_mut() {
            Some(batch) => {
                batch.push((id, item));
                None
            }
            None => {
                self.known.insert(id);
                Some(item)
            }
        }
    }

    /// `InitDone`: the whole re-list as operations, in `order`; upserts of
    /// lower `rank` come first. Afterwards exactly the listed objects are
    /// known.
    pub fn done(&mut self, order: Order, rank: impl Fn(&T) -> u8) -> Vec<Op<I, T>> {
        let Some(mut batch) = self.relist.take() else {
            return Vec::new();
        };
        batch.sort_by_key(|(_, item)| rank(item));
        let listed: HashSet<I> = batch
            .iter()
            .map(|(id, _)| id.clone())
            .chain(std::mem::take(&mut self.unchanged))
            .collect();
        let deletes = self
            .known
            .iter()
            .filter(|id| !listed.contains(*id))
            .cloned()
            .map(Op::Delete);
        let deletes: Vec<Op<I, T>> = deletes.collect();
        let upserts = batch.into_iter().map(|(_, item)| Op::Upsert(item));
        self.known = listed;
        match order {
            Order::DeletesFirst => deletes.into_iter().chain(upserts).collect(),
            Order::UpsertsFirst => upserts.chain(deletes).collect(),
        }
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

    fn by_readiness(p: &Pod) -> u8 {
        u8::from(p.1)
    }

    #[test]
    fn a_relist_is_held_until_it_is_done() {
        let mut l = listing(&["a"]);
        l.begin();
        assert_eq!(l.listed("b", ("b", true)), None);
        assert_eq!(l.listed("c", ("c", false)), None);
        let ops = l.done(Order::DeletesFirst, by_readiness);
        assert_eq!(
            ops,
            vec![
                Op::Delete("a"),
                Op::Upsert(("c", false)),
                Op::Upsert(("b", true)),
            ]
        );
    }

    #[test]
    fn pods_are_deleted_before_ready_pods_arrive() {
        // The hazard: a Ready pod deleted while the watch was down must not
        // count while the newly listed Ready pods arrive.
        let mut l = listing(&["old-ready", "stays"]);
        l.begin();
        l.listed("stays", ("stays", false));
        l.listed("new-ready", ("new-ready", true));
        let ops = l.done(Order::DeletesFirst, by_readiness);
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
        l.listed("new-uid", "cilium");
        let ops = l.done(Order::UpsertsFirst, |_| 0);
        assert_eq!(ops, vec![Op::Upsert("cilium"), Op::Delete("old-uid")]);
    }

    #[test]
    fn after_a_relist_only_listed_objects_are_known() {
        let mut l = listing(&["a", "b"]);
        l.begin();
        l.listed("b", ("b", true));
        l.done(Order::DeletesFirst, by_readiness);
        assert!(!l.deleted(&"a"), "a vanished in the re-list");
        assert!(l.deleted(&"b"));
    }

    #[test]
    fn an_unchanged_relist_deletes_nothing() {
        let mut l = listing(&["a"]);
        l.begin();
        l.listed("a", ("a", true));
        assert_eq!(
            l.done(Order::DeletesFirst, by_readiness),
            vec![Op::Upsert(("a", true))]
        );
    }

    #[test]
    fn done_without_begin_does_nothing() {
        let mut l = listing(&["a"]);
        assert!(l.done(Order::DeletesFirst, by_readiness).is_empty());
        assert!(l.deleted(&"a"));
    }

    #[test]
    fn listed_outside_a_relist_applies_at_once() {
        let mut l: Listing<&str, &str> = Listing::default();
        assert_eq!(l.listed("a", "item"), Some("item"));
        assert!(l.deleted(&"a"));
    }

    #[test]
    fn an_unchanged_object_is_not_held_and_not_deleted() {
        let mut l = listing(&["same", "gone"]);
        l.begin();
        l.listed_unchanged("same");
        assert_eq!(l.listed("new", ("new", true)), None);
        assert_eq!(l.held(), 1, "only the changed projection is held");
        let ops = l.done(Order::DeletesFirst, by_readiness);
        assert_eq!(ops, vec![Op::Delete("gone"), Op::Upsert(("new", true))]);
        // "same" is still known: a later live delete deletes it.
        assert!(l.deleted(&"same"));
    }
}
