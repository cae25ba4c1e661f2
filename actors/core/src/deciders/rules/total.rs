//! `--max-unavailable`, the cap on every node nodegate keeps closed on its
//! own initiative (security review §2): re-gated, or carrying a condition
//! rule's taint. Counted here from the same looks as the rules' own counts,
//! with this tainter's adds the index does not show yet; the re-gating
//! decider counts it alike from its side.

use super::{Expect, RuleTainter};
use crate::deciders::Context;
use crate::deciders::closed_by_nodegate;
use crate::model::NodeInfo;
use crate::regate::Exhausted;

impl RuleTainter {
    /// Records whether `node` (managed) counts as closed now; true when it
    /// stopped counting (a place may have freed up).
    pub(super) fn count_closed(&mut self, node: &NodeInfo, cx: &Context<'_>) -> bool {
        let ours = self
            .unseen
            .iter()
            .any(|((_, n), u)| *n == node.name && u.expect == Expect::On);
        let closed = ours || closed_by_nodegate(node, cx.config);
        if closed {
            if !self.closed.contains(&node.name) {
                self.closed.insert(node.name.clone());
            }
            false
        } else {
            self.closed.remove(&node.name)
        }
    }

    /// Why adding a taint to `node` would exceed the cap, if it would: a
    /// node already closed by nodegate closes no further node.
    pub(super) fn total_refuses(&self, node: &str, cx: &Context<'_>) -> Option<Exhausted> {
        if self.closed.contains(node) {
            return None;
        }
        crate::deciders::total_allows(cx.config, self.seen.len(), self.closed.len()).err()
    }
}
