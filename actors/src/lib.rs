//! nodegate's gate core and the actor system around it.
//!
//! The pure modules (`model`, `selector`, `placement`, `readiness`, `gate`,
//! `journal`) take time as an argument and never do I/O; everything that
//! touches the cluster lives in the `nodegate` binary and reaches this crate
//! through compact projections (`model`) and effects.

pub mod gate;
pub mod journal;
pub mod model;
pub mod node_actor;
pub mod observe;
pub mod placement;
pub mod readiness;
pub mod router;
pub mod selector;
pub mod supervisor;
pub mod testutil;
