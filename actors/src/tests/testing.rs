//! Test support, behind the cargo feature `testing`: the one fake
//! [`EffectExecutor`] and the one [`Clock`] that this crate's tests, benches
//! and examples drive the actor system with, instead of
//! the binary's kube adapters and system clock; and a [`GateObserver`] that
//! counts gate steps.
//!
//! Only dev-dependencies turn the feature on (this crate's own, through a
//! dev-dependency on itself): no release build contains this module.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use nodegate_core::deciders::{TaintWrite, Tally};
use nodegate_core::gate::{self, GateState, NodeEvent, UntaintPatch};
use nodegate_core::net::entrance::BoundPod;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};
use nodegate_core::vocab::write::{Outcome, Write};
use ractor::ActorRef;
use tokio::sync::Semaphore;

use crate::node_actor::GateContext;
use crate::observe::GateObserver;
use crate::ports::{Clock, EffectExecutor, REEXAMINE_PERIOD, Sending};
use crate::supervisor::{self, SupervisorMsg};

/// Stands in for the binary's kube adapters. Every node write applies
/// unless outcomes were scripted for the untaints
/// ([`FakeExecutor::script`]); a replace or a canary's write is refused. A
/// node re-read answers [`FakeExecutor::node_on_refresh`] (404 by default).
/// A recording executor ([`FakeExecutor::recording`]) keeps every [`Write`]
/// it sends and every Event it is handed; a silent one
/// ([`FakeExecutor::silent`]) keeps nothing, so that a bench or a memory
/// measurement pays for no record.
pub struct FakeExecutor {
    /// Whether writes and Events are kept.
    record: bool,
    /// What [`EffectExecutor::retry_delay`] answers, whatever the attempt.
    retry_delay: Duration,
    /// Every write sent, in order (an untaint withdrawn before it was sent
    /// is not). An untaint answers [`FakeExecutor::outcomes`]; the other
    /// node writes apply; a replace or a canary's is refused (`Failed`) and
    /// not kept.
    pub writes: Mutex<Vec<Write>>,
    /// What a LIST of a node's pods answers (none by default).
    pub pods: Mutex<Vec<BoundPod>>,
    /// The counters the deciders moved.
    pub tallies: Mutex<Vec<Tally>>,
    pub events: Mutex<Vec<NodeEvent>>,
    /// The answers to the next untaints, in order; then `Applied`.
    pub outcomes: Mutex<VecDeque<Outcome>>,
    /// What a re-read of the node answers (`None`: 404).
    pub node_on_refresh: Mutex<Option<NodeInfo>>,
    /// How many re-reads of the node were asked for.
    pub refreshes: AtomicUsize,
    /// When set, an untaint waits for a permit before it is "sent", the way
    /// the binary's writer waits for a patch slot and a rate token.
    pub hold: Mutex<Option<Arc<Semaphore>>>,
    /// Untaints handed over (whether or not they were then sent).
    pub handed: AtomicUsize,
    /// The period of the gates' re-examination in milliseconds, for gates
    /// started after it is set; 0: the default ([`REEXAMINE_PERIOD`], 30 s,
    /// longer than any test).
    pub reexamine_ms: AtomicU64,
    /// What [`EffectExecutor::may_write`] answers (true by default).
    pub leading: AtomicBool,
    /// What a fresh read of the nodes' versions answers (`None`: nothing
    /// to wait for).
    pub fresh_versions: Mutex<Option<Vec<(String, String)>>>,
    /// When set, a pod LIST waits for a permit before it answers.
    pub list_hold: Mutex<Option<Arc<Semaphore>>>,
    /// Pod LISTs answering now, and the most there ever were at once.
    pub lists_in_flight: AtomicUsize,
    pub lists_peak: AtomicUsize,
}

impl FakeExecutor {
    /// Keeps every effect it is handed; retries after 20 ms.
    pub fn recording() -> Self {
        Self::new(true)
    }

    /// Keeps nothing; retries after 20 ms.
    pub fn silent() -> Self {
        Self::new(false)
    }

    fn new(record: bool) -> Self {
        FakeExecutor {
            record,
            retry_delay: Duration::from_millis(20),
            writes: Mutex::default(),
            pods: Mutex::default(),
            tallies: Mutex::default(),
            events: Mutex::default(),
            outcomes: Mutex::default(),
            node_on_refresh: Mutex::default(),
            refreshes: AtomicUsize::new(0),
            hold: Mutex::default(),
            handed: AtomicUsize::new(0),
            reexamine_ms: AtomicU64::new(0),
            leading: AtomicBool::new(true),
            fresh_versions: Mutex::default(),
            list_hold: Mutex::default(),
            lists_in_flight: AtomicUsize::new(0),
            lists_peak: AtomicUsize::new(0),
        }
    }

    /// Answers `delay` to every [`EffectExecutor::retry_delay`].
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The untaint patches sent so far (a recording executor's).
    pub fn patches(&self) -> Vec<UntaintPatch> {
        let writes = self.writes.lock().unwrap();
        writes
            .iter()
            .filter_map(|w| match w {
                Write::Untaint(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// The deciders' taint writes sent so far (a recording executor's).
    pub fn taint_writes(&self) -> Vec<TaintWrite> {
        let writes = self.writes.lock().unwrap();
        writes
            .iter()
            .filter_map(|w| match w {
                Write::Taint(t) => Some(t.clone()),
                _ => None,
            })
            .collect()
    }

    /// The Events recorded so far (a recording executor's).
    pub fn events(&self) -> Vec<NodeEvent> {
        self.events.lock().unwrap().clone()
    }

    /// Answers the next untaints with these outcomes, in order.
    pub fn script(&self, outcomes: Vec<Outcome>) {
        self.outcomes.lock().unwrap().extend(outcomes);
    }
}

impl Default for FakeExecutor {
    fn default() -> Self {
        Self::recording()
    }
}

impl EffectExecutor for FakeExecutor {
    async fn write(&self, write: Write, sending: Sending) -> Outcome {
        // As before the one port: this executor makes no replace or canary
        // writes.
        let refused = match &write {
            Write::Replace(w) => Some(format!(
                "this executor replaces no nodes (asked for node {})",
                w.node
            )),
            Write::CreateCanary(c) => Some(format!(
                "this executor creates no canaries (asked for node {})",
                c.node
            )),
            Write::DeleteCanary(d) => Some(format!(
                "this executor deletes no canaries (asked for {})",
                d.name
            )),
            _ => None,
        };
        if let Some(why) = refused {
            return Outcome::Failed(why);
        }
        let untaint = matches!(write, Write::Untaint(_));
        if untaint {
            self.handed.fetch_add(1, Ordering::SeqCst);
            let hold = self.hold.lock().unwrap().clone();
            if let Some(hold) = hold {
                hold.acquire().await.expect("hold semaphore open").forget();
            }
            if sending.withdrawal.is_requested() {
                return Outcome::Withdrawn;
            }
        }
        if self.record {
            self.writes.lock().unwrap().push(write);
        }
        if !untaint {
            return Outcome::Applied;
        }
        self.outcomes
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Outcome::Applied)
    }

    async fn record_event(&self, event: NodeEvent) {
        if self.record {
            self.events.lock().unwrap().push(event);
        }
    }

    async fn get_node(&self, _name: &str) -> Result<Option<NodeInfo>, String> {
        self.refreshes.fetch_add(1, Ordering::SeqCst);
        Ok(self.node_on_refresh.lock().unwrap().clone())
    }

    fn retry_delay(&self, _attempt: u32) -> Duration {
        self.retry_delay
    }

    async fn list_pods(&self, _node: &str) -> Result<Vec<BoundPod>, String> {
        let now = self.lists_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.lists_peak.fetch_max(now, Ordering::SeqCst);
        let hold = self.list_hold.lock().unwrap().clone();
        if let Some(hold) = hold {
            hold.acquire().await.expect("hold semaphore open").forget();
        }
        self.lists_in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(self.pods.lock().unwrap().clone())
    }

    fn may_write(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    async fn fresh_node_versions(&self) -> Result<Option<Vec<(String, String)>>, String> {
        Ok(self.fresh_versions.lock().unwrap().clone())
    }

    fn tally(&self, tally: &Tally) {
        if self.record {
            self.tallies.lock().unwrap().push(tally.clone());
        }
    }

    fn reexamine_delay(&self) -> Duration {
        match self.reexamine_ms.load(Ordering::SeqCst) {
            0 => REEXAMINE_PERIOD,
            ms => Duration::from_millis(ms),
        }
    }
}

/// The real clock, which can be told to panic once (to crash a gate) and to
/// show the API server's clock behind it.
#[derive(Default)]
pub struct FakeClock {
    /// When set, the next [`Clock::now`] panics (and clears it).
    pub panic_once: AtomicBool,
    /// How far the API server's clock is behind ours, in nanoseconds, plus
    /// one; 0: no evidence of the API server's clock at all.
    server_behind: AtomicU64,
}

impl FakeClock {
    /// From now on, [`Clock::server_now`] answers our clock less `behind`
    /// (`None`: no evidence, as the trait's default answers).
    pub fn set_server_behind(&self, behind: Option<Duration>) {
        let encoded = behind.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1) + 1
        });
        self.server_behind.store(encoded, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        if self.panic_once.load(Ordering::Relaxed) && self.panic_once.swap(false, Ordering::SeqCst)
        {
            panic!("injected clock failure");
        }
        Timestamp::now()
    }

    fn server_now(&self) -> Option<Timestamp> {
        match self.server_behind.load(Ordering::SeqCst) {
            0 => None,
            encoded => Some(Timestamp::now() - Duration::from_nanos(encoded - 1)),
        }
    }
}

/// Counts gate steps: a barrier that tells a bench every event it sent has
/// been decided.
#[derive(Default)]
pub struct StepCounter(pub AtomicU64);

impl StepCounter {
    pub fn steps(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl GateObserver for StepCounter {
    fn gate_step(&self, _: &str, _: Timestamp, _: &[gate::Event], _: &GateState) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waits up to 3 s, in 10 ms steps, for `check` to hold; panics naming
/// `what` if it never does. For tests that watch the actors from outside.
pub async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..300 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A supervisor over `ctx.router` and one live gate: `ds`, `node` and
/// `pod` (the DaemonSet's pod on the node) go into the router in that
/// order, the router is marked synced, and this returns once the gate of
/// `node` runs. For tests that watch one gate from outside (its logs, its
/// observer); stop the supervisor returned when done.
pub async fn start_one_gate<E: EffectExecutor, C: Clock>(
    ctx: GateContext<E, C>,
    ds: DaemonSetInfo,
    node: NodeInfo,
    pod: PodInfo,
) -> ActorRef<SupervisorMsg> {
    let router = Arc::clone(&ctx.router);
    let (sup, _) = supervisor::start(Arc::new(ctx))
        .await
        .expect("supervisor starts");
    let name = node.name.clone();
    router.daemonset_upserted(ds);
    router.node_upserted(node);
    router.pod_upserted(pod);
    router.mark_synced();
    eventually("the gate to start", || router.gate(&name).is_some()).await;
    sup
}
