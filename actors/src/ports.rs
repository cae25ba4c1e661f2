//! The ports through which the gates and the deciders reach the outside: a
//! [`Clock`] and an [`EffectExecutor`], which the binary implements (tests
//! and benches pass their own), and the gate's retry and re-examination
//! timing. The random numbers are drawn by whoever implements the executor
//! and passed in: this crate never picks one, so every actor stays
//! deterministic given its inputs and its executor.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use nodegate_core::deciders::Tally;
use nodegate_core::gate::NodeEvent;
use nodegate_core::net::entrance::BoundPod;
use nodegate_core::vocab::model::{NodeInfo, PodInfo};
use nodegate_core::vocab::write::{Outcome, Write};

/// Where time comes from. The binary passes the system clock; tests pass
/// whatever they need.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
    /// Evidence of the API server's clock: a time the server's clock has
    /// certainly reached (semantics.md §5.3), or `None` when there is none.
    /// The binary's answer is the newest time the API server itself stamped,
    /// carried forward on the monotonic clock (src/cluster/server_time.rs).
    fn server_now(&self) -> Option<Timestamp> {
        None
    }
}

/// Carries out the gates' and the deciders' writes and reads against the
/// cluster. Implemented by the binary with kube; it also enforces
/// leadership (answering [`Outcome::NotLeader`], and dropping an Event
/// when this replica does not hold the lease unless it tells of this
/// replica's own applied write, [`NodeEvent::own_write`]) and the
/// concurrency and QPS limits.
pub trait EffectExecutor: Send + Sync + 'static {
    /// Every write nodegate makes (the gates' and the deciders' alike, through
    /// the same slots, rate and leadership check), each answered by one
    /// [`Outcome`]. For a [`Write::Untaint`], right before sending (after
    /// any wait for a patch slot or rate token) the executor checks
    /// `sending.withdrawal`, and answers [`Outcome::Withdrawn`] without
    /// writing if the gate asked for it.
    fn write(&self, write: Write, sending: Sending) -> impl Future<Output = Outcome> + Send;
    /// Best effort: a lost Event is logged, never retried by the gate.
    fn record_event(&self, event: NodeEvent) -> impl Future<Output = ()> + Send;
    /// A fresh read of the node; `Ok(None)` for 404.
    fn get_node(&self, name: &str)
    -> impl Future<Output = Result<Option<NodeInfo>, String>> + Send;
    /// The delay before write attempt `attempt` (2, 3, ...), or before a
    /// failed gate's restart (see `supervisor`). The binary answers with this
    /// module's policy, `jitter(retry_ceiling(attempt), ..)` over its own
    /// random numbers; tests may answer anything.
    fn retry_delay(&self, attempt: u32) -> Duration;
    /// The wait before a gate's next periodic re-examination. The binary
    /// answers `reexamine_jitter(REEXAMINE_PERIOD, ..)` over its own random
    /// numbers; the default is the bare period.
    fn reexamine_delay(&self) -> Duration {
        REEXAMINE_PERIOD
    }
    /// One LIST of the pods bound to `node` (the late-taint net's "is there
    /// a workload yet").
    fn list_pods(&self, node: &str) -> impl Future<Output = Result<Vec<BoundPod>, String>> + Send {
        let error = format!("this executor lists no pods (asked for node {node})");
        std::future::ready(Err(error))
    }
    /// Lists every canary pod in nodegate's namespace.
    fn list_canaries(&self) -> impl Future<Output = Result<Vec<PodInfo>, String>> + Send {
        async { Err("this executor lists no canaries".to_string()) }
    }
    /// Whether a node write would go out now (this replica leads). Only a
    /// hint for the deciders: every write is checked again right before it
    /// is sent.
    fn may_write(&self) -> bool {
        true
    }
    /// A decider moved a counter.
    fn tally(&self, _tally: &Tally) {}
    /// A fresh quorum read of every node's name and resourceVersion (a
    /// paginated metadata LIST): what the node watch must have caught up
    /// with before a budgeted decider writes after this replica gained the
    /// lease. `Ok(None)`: this executor has no
    /// cluster to read, and nothing to wait for.
    fn fresh_node_versions(
        &self,
    ) -> impl Future<Output = Result<Option<Vec<(String, String)>>, String>> + Send {
        async { Ok(None) }
    }
}

/// What travels with a [`Write`] besides the write itself: the shell's
/// handles on an untaint, which are not part of what is written (and so
/// not of the core's [`Write`], plain data that reads no clock). Every
/// other write is handed the default, and the executor ignores it there.
#[derive(Debug, Clone, Default)]
pub struct Sending {
    /// The gate's way to call the untaint back while it waits for a patch
    /// slot or a rate token.
    pub withdrawal: Withdrawal,
    /// When the pod events that led to this untaint reached the router
    /// (`None` for any other cause), for the executor's measure of
    /// nodegate's own share of a reaction; never for a decision.
    pub seen: Option<std::time::Instant>,
}

/// The gate's way to call back an untaint it handed to the executor, for as
/// long as the executor has not sent it
/// ([`Effect::WithdrawWrite`](nodegate_core::gate::Effect::WithdrawWrite)).
#[derive(Debug, Clone, Default)]
pub struct Withdrawal(Arc<AtomicBool>);

impl Withdrawal {
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub fn request(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// First retry after a conflict waits around this long; each further one
/// doubles it, up to [`RETRY_MAX`].
pub const RETRY_BASE: Duration = Duration::from_millis(50);
/// The longest a retry (or a failed gate's restart) waits.
pub const RETRY_MAX: Duration = Duration::from_secs(10);
/// The gate's write retry and restart: the core's one [`Backoff`] policy
/// between [`RETRY_BASE`] and [`RETRY_MAX`].
pub const RETRY: Backoff = Backoff::new(RETRY_BASE, RETRY_MAX);

pub use nodegate_core::vocab::backoff::{Backoff, jitter};

/// nodegate's retry ceiling for `attempt`, un-jittered: `RETRY_BASE *
/// 2^(attempt-2)` for the first retry onwards, capped at [`RETRY_MAX`], that
/// is [`RETRY`] after `attempt - 1` failures.
pub fn retry_ceiling(attempt: u32) -> Duration {
    RETRY.ceiling(attempt.saturating_sub(1))
}

/// How often, on average, a live gate re-examines itself from the router's
/// indexes even if no message came: the bound on how long a lost message
/// (a hint, a leadership change) can hold a node closed.
pub const REEXAMINE_PERIOD: Duration = Duration::from_secs(30);

/// A point in [3/4 period, 5/4 period], so that gates started together
/// drift apart: `3/4 period` plus `pick(spread)` microseconds, where
/// `spread` is half the period in microseconds and `pick` is the caller's
/// uniform random draw from `0..=spread`.
pub fn reexamine_jitter(period: Duration, pick: impl FnOnce(u64) -> u64) -> Duration {
    let low = period.mul_f64(0.75);
    let spread = (period / 2).as_micros() as u64;
    low + Duration::from_micros(pick(spread).min(spread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_from_the_base_up_to_the_max() {
        assert_eq!(retry_ceiling(2), RETRY_BASE);
        assert_eq!(retry_ceiling(3), RETRY_BASE * 2);
        assert_eq!(retry_ceiling(4), RETRY_BASE * 4);
        assert_eq!(retry_ceiling(40), RETRY_MAX);
        assert_eq!(retry_ceiling(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn reexamination_jitter_spans_three_quarters_to_five_quarters_of_the_period() {
        let period = Duration::from_secs(30);
        assert_eq!(
            reexamine_jitter(period, |_| 0),
            Duration::from_millis(22_500)
        );
        assert_eq!(
            reexamine_jitter(period, |spread| spread),
            Duration::from_millis(37_500)
        );
        assert_eq!(
            reexamine_jitter(period, |_| u64::MAX),
            Duration::from_millis(37_500)
        );
    }
}
