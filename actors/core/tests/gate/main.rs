//! The pure gate, one behaviour per test, with explicit time and no
//! sleeping: one test binary, one module per subject. The harness
//! (`gate_support`, shared with the actor tests) checks after every input
//! that replaying the journal gives the live state.
//!
//! Its transitions, by subject: `opening`, `expected_set`, `deadline`,
//! `min_ready_seconds`, `patch`, `reexamination`, `dry_run`,
//! `journal_trace`. Then `clock_skew`, `lost_answers` (a patch whose answer
//! was lost), `node_ready` (the node's own readiness), `switches`,
//! `conditions` (readiness beyond a pod's Ready), and `properties` (random
//! input sequences).

#[path = "../gate_support/mod.rs"]
mod gate_support;

mod canary_member;
mod clock_skew;
mod conditions;
mod deadline;
mod devices;
mod dry_run;
mod expected_set;
mod external;
mod journal_trace;
mod karpenter;
mod lost_answers;
mod min_ready_seconds;
mod node_ready;
mod on_timeout_replace;
mod opening;
mod patch;
mod properties;
mod reboot;
mod reexamination;
mod schedule_clock;
mod switches;
