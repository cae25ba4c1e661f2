//! The commands a user runs: `nodegate run` (the controller), `nodegate
//! explain NODE`, `nodegate status` and `nodegate backfill`. Each reasons
//! through the gate core; none has rules of its own. `nodegate completion
//! SHELL` only prints a script. Each returns its exit status, or an
//! [`Error`](crate::Error) that `main` prints and exits with.

pub mod backfill;
pub mod completion;
pub mod explain;
pub mod run;
pub mod status;
