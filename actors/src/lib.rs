//! nodegate's actor system: the shells that run the pure core
//! (`nodegate_core`) through the `ports` the binary implements; it never
//! talks to the API server itself. See docs/architecture.md, "From a watch
//! to a gate" and "The change feed and the decider shells".
//!
//! Each module uses only those before it in this order: `live`, `ports`,
//! `observe`, `messages`, `pending`, `feed`, `index`, `router`, `latest`,
//! `wheel`, `node_actor`, `supervisor`, `decider_shell`. `testing` holds
//! the fake executor and clock (for tests only).

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
