//! The observer hook: what the router and the gates report to an installed
//! `GateObserver`, in process with a recording executor (no API server).

#[path = "../core/tests/gate_support/mod.rs"]
mod gate_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gate_support::*;
use jiff::Timestamp;
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::observe::{GateObserver, RouterEvent};
use nodegate_actors::router::Router;
use nodegate_actors::supervisor;
use nodegate_actors::testing::{FakeClock, FakeExecutor, eventually, start_one_gate};
use nodegate_core::gate::journal::Journal;
use nodegate_core::gate::{Event, GateState, Phase};
use nodegate_core::vocab::model::NodeInfo;

/// Every write applies; nothing is kept (the observer records what counts).
fn applying() -> FakeExecutor {
    FakeExecutor::silent().with_retry_delay(Duration::from_millis(10))
}

#[derive(Default)]
struct Seen {
    router: Mutex<Vec<(RouterEvent, bool)>>,
    started: Mutex<Vec<(String, u64)>>,
    steps: Mutex<Vec<Event>>,
    stopped: Mutex<Vec<(String, u64, Phase, usize)>>,
}

impl GateObserver for Seen {
    fn router_event(&self, event: RouterEvent, routed: bool) {
        self.router.lock().unwrap().push((event, routed));
    }
    fn gate_started(&self, node: &str, generation: u64) {
        self.started
            .lock()
            .unwrap()
            .push((node.to_string(), generation));
    }
    fn gate_step(&self, _: &str, _: Timestamp, events: &[Event], _: &GateState) {
        self.steps.lock().unwrap().extend(events.iter().cloned());
    }
    fn gate_stopped(&self, node: &str, generation: u64, state: &GateState, journal: &Journal) {
        self.stopped.lock().unwrap().push((
            node.to_string(),
            generation,
            state.phase,
            journal.len(),
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_sees_router_events_and_a_gate_from_start_to_stop() {
    let config = Arc::new(cfg());
    let router = Arc::new(Router::new(Arc::clone(&config)));
    let seen = Arc::new(Seen::default());
    assert!(router.set_observer(seen.clone()));
    assert!(
        !router.set_observer(Arc::new(Seen::default())),
        "only the first observer counts"
    );
    let ctx = GateContext {
        router: Arc::clone(&router),
        executor: Arc::new(applying()),
        clock: Arc::new(FakeClock::default()),
        journal_capacity: 64,
    };
    let cilium = tolerant_ds("cilium");
    let node = NodeInfo {
        created: Timestamp::now(),
        ..gated_node()
    };
    let sup = start_one_gate(ctx, cilium.clone(), node, unready_pod("cilium-1", &cilium)).await;
    // Now the pod event is routed to the live gate.
    router.pod_upserted(ready_pod("cilium-1", &cilium));
    eventually("the gate to stop", || {
        !seen.stopped.lock().unwrap().is_empty()
    })
    .await;

    let events = seen.router.lock().unwrap().clone();
    assert_eq!(
        &events[..3],
        &[
            (RouterEvent::DaemonSetUpserted, false),
            (RouterEvent::NodeUpserted, false),
            (RouterEvent::PodUpserted, false),
        ],
        "nothing is routed before a gate exists"
    );
    assert_eq!(events[3], (RouterEvent::PodUpserted, true));

    let started = seen.started.lock().unwrap().clone();
    let stopped = seen.stopped.lock().unwrap().clone();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].0, NODE);
    assert_eq!(stopped.len(), 1);
    let (node, generation, phase, journal_len) = stopped[0].clone();
    assert_eq!(
        (node.as_str(), generation),
        (NODE, started[0].1),
        "start and stop name the same incarnation"
    );
    assert_eq!(phase, Phase::Opened);
    let steps = seen.steps.lock().unwrap().clone();
    assert_eq!(
        steps.len(),
        journal_len,
        "every journal event is observed once"
    );
    assert!(steps.iter().any(|e| matches!(e, Event::Opened { .. })));
    sup.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_seen_again_unchanged_is_not_fanned_out_to_the_gates() {
    // DaemonSet status updates (every pod's progress changes the counts)
    // project to the same placement-relevant fields: no gate needs them.
    let config = Arc::new(cfg());
    let router = Arc::new(Router::new(Arc::clone(&config)));
    let seen = Arc::new(Seen::default());
    assert!(router.set_observer(seen.clone()));
    let ctx = Arc::new(GateContext {
        router: Arc::clone(&router),
        executor: Arc::new(applying()),
        clock: Arc::new(FakeClock::default()),
        journal_capacity: 64,
    });
    let (sup, _) = supervisor::start(ctx).await.expect("supervisor starts");
    let cilium = tolerant_ds("cilium");
    router.daemonset_upserted(cilium.clone());
    router.node_upserted(NodeInfo {
        created: Timestamp::now(),
        ..gated_node()
    });
    router.mark_synced();
    eventually("the gate to start", || router.gate(NODE).is_some()).await;

    router.daemonset_upserted(cilium.clone());
    let mut changed = cilium.clone();
    changed.min_ready_seconds = 5;
    router.daemonset_upserted(changed);

    let events = seen.router.lock().unwrap().clone();
    assert_eq!(
        &events[events.len() - 2..],
        &[
            (RouterEvent::DaemonSetUpserted, false),
            (RouterEvent::DaemonSetUpserted, true),
        ],
        "only the changed DaemonSet reaches the gate"
    );
    sup.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_outside_the_allowed_namespaces_is_not_fanned_out() {
    // Hardening: with --daemonset-namespaces, a tenant's DaemonSet
    // is no member anywhere, so toggling its labels reaches no gate.
    let mut c = cfg();
    c.placement.daemonset_namespaces = Some(["kube-system".to_string()].into());
    let router = Arc::new(Router::new(Arc::new(c)));
    let seen = Arc::new(Seen::default());
    assert!(router.set_observer(seen.clone()));
    let ctx = Arc::new(GateContext {
        router: Arc::clone(&router),
        executor: Arc::new(applying()),
        clock: Arc::new(FakeClock::default()),
        journal_capacity: 64,
    });
    let (sup, _) = supervisor::start(ctx).await.expect("supervisor starts");
    let mut system = tolerant_ds("cni");
    system.namespace = "kube-system".to_string();
    let mut tenant = tolerant_ds("tenant-agent");
    tenant.namespace = "tenant".to_string();
    router.daemonset_upserted(system.clone());
    router.daemonset_upserted(tenant.clone());
    router.node_upserted(NodeInfo {
        created: Timestamp::now(),
        ..gated_node()
    });
    router.mark_synced();
    eventually("the gate to start", || router.gate(NODE).is_some()).await;

    let mut tenant_changed = tenant.clone();
    tenant_changed.min_ready_seconds = 5;
    router.daemonset_upserted(tenant_changed);
    let mut system_changed = system.clone();
    system_changed.min_ready_seconds = 5;
    router.daemonset_upserted(system_changed);

    let events = seen.router.lock().unwrap().clone();
    assert_eq!(
        &events[events.len() - 2..],
        &[
            (RouterEvent::DaemonSetUpserted, false),
            (RouterEvent::DaemonSetUpserted, true),
        ],
        "only the allowed namespace's DaemonSet reaches the gate"
    );
    assert!(
        router.daemonset(&tenant.uid).is_some(),
        "the tenant's DaemonSet is still indexed"
    );
    sup.stop(None);
}
