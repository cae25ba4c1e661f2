//! nodegate's binary crate as a library: `main.rs` parses the command line
//! and calls in here; the end-to-end tests use the projections
//! (`cluster::project`) to compare nodegate's verdicts with the real cluster.
//! Its modules: docs/architecture.md, The crates.

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
