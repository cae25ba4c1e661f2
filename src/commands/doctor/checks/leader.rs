//! The Lease: does a replica hold it, renewed within its duration? With
//! `--leader-elect`, only the holder writes: no holder, no node opens.

use std::time::Duration;

use jiff::Timestamp;

use crate::commands::doctor::report::{Check, Name};
use crate::settings::config::LeaderElection;

pub const CHECK: Name = Name("leader");

/// What the doctor reads of the Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseSeen {
    pub holder: String,
    pub renewed: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Option<Duration>,
}

/// Whether a live leader holds it: `Some(true|false)`, or `None` when
/// nodegate runs without leader election (no Lease to judge by).
pub fn check(
    le: &LeaderElection,
    namespace: &str,
    lease: Option<&LeaseSeen>,
    now: Timestamp,
) -> (Check, Option<bool>) {
    let subject = format!("Lease {namespace}/{}", le.lease_name);
    if !le.enabled {
        return (
            CHECK.skipped(
                subject,
                "--leader-elect is off: nodegate runs without a Lease",
            ),
            None,
        );
    }
    let fix = format!(
        "check nodegate's pods and their logs (kubectl -n {namespace} get pods; kubectl -n \
         {namespace} logs deploy/nodegate), and that --lease-name/--lease-namespace here are the \
         controller's (or pass --from-cluster)"
    );
    let lease = match lease {
        Some(l) if !l.holder.is_empty() => l,
        gone => {
            let why = if gone.is_none() {
                "not found"
            } else {
                "released (no holder)"
            };
            let message = format!("{why}: no replica leads, so no gated node opens");
            return (CHECK.problem(subject, message, fix), Some(false));
        }
    };
    let duration = lease.duration.unwrap_or(le.lease_duration);
    let age = lease
        .renewed
        .map(|r| Duration::try_from(now.duration_since(r)).unwrap_or(Duration::ZERO));
    let holder = &lease.holder;
    match age {
        Some(age) if age > duration => (
            CHECK.problem(
                subject,
                format!(
                    "held by {holder:?} but last renewed {}s ago, longer than its {}s duration: \
                     the holder is gone and no other replica took over",
                    age.as_secs(),
                    duration.as_secs()
                ),
                fix,
            ),
            Some(false),
        ),
        Some(age) => (
            CHECK.ok(
                subject,
                format!("held by {holder:?}, renewed {}s ago", age.as_secs()),
            ),
            Some(true),
        ),
        None => (
            CHECK.ok(subject, format!("held by {holder:?} (no renewTime)")),
            Some(true),
        ),
    }
}
