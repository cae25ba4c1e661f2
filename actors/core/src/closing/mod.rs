//! Closing an open node on nodegate's own initiative: re-gating,
//! condition-rule taints and replace, each with its decider and its part of
//! the explain report (docs/architecture.md, "The core's folders").

pub mod condition_taints;
pub mod decider;
pub mod ledger;
pub mod regating;
pub mod replacing;
