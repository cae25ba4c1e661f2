//! nodegate's binary crate as a library: the CLI, settings and the adapters
//! between the cluster and the gate core (`nodegate_actors`). `main.rs` only
//! parses the command line and calls in here; the end-to-end tests use the
//! projections to compare nodegate's verdicts with the real cluster.

pub mod cli;
pub mod config;
pub mod executor;
pub mod explain;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod patch;
pub mod project;
pub mod run;
pub mod status;
pub mod watch;
pub mod writer;
