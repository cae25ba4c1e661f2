//! What this replica last saw of the Lease's holder: state `Leadership`
//! keeps and `known` judges, in a leaf both import.

use std::time::{Duration, Instant};

/// What this replica last saw of the Lease's holder, whoever it is.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    /// When a holder was last seen renewing (this replica, or the Lease
    /// changing under another holder); the start, until then.
    pub(super) alive_at: Instant,
    /// `LEADER_LOST_AFTER × --lease-duration`, set by the elector; `None`
    /// until it runs.
    pub(super) bound: Option<Duration>,
    /// The lease's name, for the reason.
    pub(super) lease: String,
    /// The last thing that went wrong (a refused read or write, a holder
    /// that does not renew).
    pub(super) trouble: Option<String>,
}

impl Seen {
    pub(super) fn new() -> Seen {
        Seen {
            alive_at: Instant::now(),
            bound: None,
            lease: String::new(),
            trouble: None,
        }
    }
}
