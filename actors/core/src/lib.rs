//! nodegate's pure core: every decision nodegate makes, as plain functions
//! over plain data, and nothing that does I/O, awaits or reads the clock
//! (time is always an argument; the Cargo.toml keeps async runtimes, actor
//! frameworks and Kubernetes clients out). It is built in floors, one folder
//! each:
//!
//! - `vocab`: the words every feature shares: the node's `model` with its
//!   marks, the `annotations`, the `config` with each feature's settings,
//!   `member`s, a `budget`, `vec_map`.
//! - `rules`: the rules that vocabulary is written in: `placement`,
//!   `selector`, `readiness` (pinned to upstream), `startup`, `conditions`,
//!   `devices`. With `vocab` it is the floor: it imports nothing above it.
//! - `gate`: each node's gate, its `journal`, and its `report` (what
//!   `nodegate explain` prints).
//! - `deciders`: what every decider shares: the change feed, the index as
//!   a decider reads it, inputs and effects, "now".
//! - One folder per controller beside the gate, each with its rules, its
//!   decider and its part of the report: `net` (the entrances and the
//!   late-taint net), `closing` (what closes an open node: re-gating,
//!   condition-rule taints, replace) and `canary`.
//!
//! `tests/module_graph.rs` checks that the floor imports nothing above it
//! and that no modules import each other in a circle. `testutil`, builders
//! for tests, exists only in tests and under the cargo feature `testing`,
//! which only dev-dependencies turn on.

pub mod canary;
pub mod closing;
pub mod deciders;
pub mod gate;
pub mod net;
pub mod rules;
#[cfg(any(test, feature = "testing"))]
#[path = "tests/testutil.rs"]
pub mod testutil;
pub mod vocab;
