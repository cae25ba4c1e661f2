//! The commands a user runs: `nodegate run` (the controller), `nodegate
//! explain NODE`, `nodegate status` and `nodegate backfill`. Each reasons
//! through the gate core; none has rules of its own. `nodegate uninstall`
//! takes nodegate's marks off the nodes; `nodegate version` prints the
//! client's and the running controller's versions; `nodegate completion
//! SHELL` only prints a script; `nodegate config check FILE` validates a
//! config file offline (and, with `--cluster`, reads what it names); `nodegate
//! doctor` checks the cluster around nodegate (autoscalers, admission,
//! Lease, RBAC, stuck nodes) and names the fix for each problem; `nodegate
//! probe` is the container's own liveness and readiness probe. Each returns its exit status, or an
//! [`Error`](crate::Error) that `main` prints and exits with.

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
