//! Everything that talks to the Kubernetes API, as adapters only (no
//! controller state lives here); the node writer is `writer`
//! (docs/architecture.md, The node writer).

pub mod admission_params;
pub mod canary;
pub mod client;
pub mod entrance;
pub mod leader;
pub mod lean;
pub mod patch;
pub mod project;
pub mod protobuf;
pub mod relist;
pub mod replace;
pub mod server_time;
pub mod snapshot;
pub mod term_read;
pub mod watch;
pub mod writer;
