//! nodegate's actor system: one `NodeActor` per gated node, fed by shared
//! watchers through the `router`, spawned and restarted by the `supervisor`.
//!
//! The reasoning lives in the pure core (`nodegate_core`); this crate only
//! runs it: it delivers inputs to each node's gate, keeps its journal, arms
//! its timers, and hands the effects it returns to the executors behind the
//! `ports` the binary implements. It never talks to the API server itself.
//!
//! Modules, each using only those listed before it: `live` (the gate
//! configuration in force, swapped whole on a config reload), `ports` (clock,
//! executor, withdrawal, the retry backoff policy) and `observe` (the
//! observer hook) reach the outside; `messages` is what the actors say to
//! each other; `pending` is the set of changed pods a gate takes when woken;
//! `feed` is the change feed and `index` holds what the watchers delivered,
//! publishing each change on the feed; `router` writes to the index and
//! routes hints to the gates; `latest` writes a gate's
//! condition one write at a time, latest wins; `wheel` is the one timer task the gates'
//! timers wait in; `node_actor` runs one gate; `supervisor`
//! spawns and restarts the node actors at the router's request;
//! `decider_shell` runs each of the deciders beside the gates (the
//! late-taint net, the closing decider, replace, the canary) on the feed, through
//! the same ports as the gates. `testing` (cargo feature `testing`, for
//! tests only) holds the fake executor and clock that stand in for the
//! binary's.

pub mod decider_shell;
pub mod feed;
pub mod index;
pub mod latest;
pub mod live;
pub mod messages;
pub mod node_actor;
pub mod observe;
pub mod pending;
pub mod ports;
pub mod router;
pub mod supervisor;
#[cfg(feature = "testing")]
#[path = "tests/testing.rs"]
pub mod testing;
pub mod wheel;
