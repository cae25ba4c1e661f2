//! Everything that closes an open node, each a decider with its rules and
//! its part of the explain report:
//!
//! - `regating`: re-gating a node whose member stays broken, that rebooted,
//!   or whose reboot is announced (semantics.md §6.4, §6.10);
//! - `condition_taints`: a `conditionTaints` rule's taint on a node that
//!   matches it (semantics.md §6.5; what a rule is, with its check, is in
//!   `rules::conditions::taints`, since the configuration holds the rules);
//! - `replacing`: `--on-timeout=replace`, asking a timed-out node's owner to
//!   replace it (semantics.md §5.8);
//! - `backoff`: the wait after the API server refuses a write, which the
//!   condition-taint and replace deciders share.

pub mod backoff;
pub mod condition_taints;
pub mod regating;
pub mod replacing;
