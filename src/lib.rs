//! nodegate's binary crate as a library, grouped by room:
//!
//! - `commands`: what a user runs (`run`, `explain`, `status`, `backfill`,
//!   `completion`), each returning its exit status or its error to `main`;
//! - `cluster`: the adapters between the Kubernetes API and the gate core —
//!   the client, projections of cluster objects, the shared watches, leader
//!   election, and the one write path (patch, writer, executor);
//! - `serve`: the HTTP side (routing, health, the finished gates' debug
//!   journals, metrics) and the admission webhook;
//! - `trace`: each gate as an OpenTelemetry trace, exported over OTLP;
//! - `settings`: the command line and the config file, turned into the core's
//!   configuration once;
//! - `error`: the one error type, and the exit status each kind of error
//!   ends the process with;
//! - `test_gates` (tests only): a gate driven by hand, shared by the unit
//!   tests of `serve` and `trace`.
//!
//! `main.rs` only parses the command line and calls in here; the end-to-end
//! tests use the projections to compare nodegate's verdicts with the real
//! cluster.

pub mod cluster;
pub mod commands;
pub mod error;
pub mod serve;
pub mod settings;
#[cfg(test)]
#[path = "tests/gates.rs"]
pub(crate) mod test_gates;
pub mod trace;

pub use error::{Error, Result};

/// What `nodegate --version` prints after the name: `0.1.0 (<commit>)`, the
/// commit this binary was built from (build.rs: `NODEGATE_REVISION`; else,
/// in a release build, `git rev-parse HEAD` or `unknown`; `dev` in a debug
/// build, so that a commit does not recompile the test binaries).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("NODEGATE_BUILD_REVISION"),
    ")"
);
