//! Everything that closes an open node, each with its rules, its decider
//! and its part of the explain report. Re-gating and the condition rules run
//! as two methods of one decider, [`decider::Closing`], over one
//! [`ledger::Ledger`] that counts `--max-unavailable` once, with the writes
//! the watch does not show yet (semantics.md §6.5):
//!
//! - `regating`: re-gating a node whose member stays broken, that rebooted,
//!   or whose reboot is announced (semantics.md §6.4, §6.10);
//! - `condition_taints`: a `conditionTaints` rule's taint on a node that
//!   matches it (semantics.md §6.5; what a rule is, with its check, is in
//!   `rules::conditions::taints`, since the configuration holds the rules);
//! - `replacing`: `--on-timeout=replace`, asking a timed-out node's owner to
//!   replace it (semantics.md §5.8).
//!
//! The wait after the API server refuses a write, which the condition-taint
//! and replace deciders share, is the vocabulary's
//! [`Backoffs`](crate::vocab::backoff::Backoffs).

pub mod condition_taints;
pub mod decider;
pub mod ledger;
pub mod regating;
pub mod replacing;
