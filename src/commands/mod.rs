//! The subcommands, one module each. Those that reason about a node do so
//! through the gate core; none has rules of its own. Each returns its exit
//! status, or an [`Error`](crate::Error) that `main` prints and exits with.

pub mod backfill;
pub mod completion;
pub mod config_check;
pub mod doctor;
pub mod explain;
pub mod output;
pub mod probe;
pub mod run;
pub mod status;
pub mod uninstall;
pub mod version;
