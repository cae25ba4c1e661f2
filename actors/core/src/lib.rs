//! nodegate's pure gate core.
//!
//! Everything here is a plain function over plain data: the placement rules
//! (`placement`, `selector`), when a member is Ready (`readiness`, and
//! `conditions` for node conditions), the node state machine (`gate`) and
//! its journal (`journal`), over the compact projections of cluster objects
//! in `model`, whose `nodegate.dev/*` annotations `annotations` names; the
//! entrances' rules (`entrance`, `regate`, `budget`) and the deciders that
//! run them beside the gates (`deciders`: the late-taint net, re-gating,
//! condition-rule taints); and `report`, the gate's state explained to a
//! person, as `nodegate explain` prints it. Nothing here does
//! I/O, awaits, or reads the clock — time is always an argument — and this
//! crate's Cargo.toml has no async runtime, actor framework or Kubernetes
//! client in it, so the compiler keeps it that way. The actor system
//! (`nodegate-actors`) and the binary carry out the effects the gate returns.
//! `testutil`, builders for tests, exists only in tests and under the cargo
//! feature `testing`, which only dev-dependencies turn on.

pub mod annotations;
pub mod budget;
pub mod canary;
pub mod conditions;
pub mod config;
pub mod deciders;
pub mod devices;
pub mod entrance;
pub mod gate;
pub mod journal;
pub mod member;
pub mod model;
pub mod placement;
pub mod readiness;
pub mod reboot;
pub mod regate;
pub mod replace;
pub mod report;
pub mod selector;
pub mod startup;
#[cfg(any(test, feature = "testing"))]
pub mod testutil;
pub mod vec_map;
