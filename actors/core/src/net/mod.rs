//! Putting the startup taint on a node that does not carry one
//! (semantics.md §6.1–6.3): the `entrance` rules the admission webhook, the
//! late-taint net and backfill share, and the net as a `decider`.

pub mod decider;
pub mod entrance;
