//! The actor system end to end, in process: router, supervisor and node
//! actors on tokio, with a recording executor standing in for the binary's
//! kube adapters (no API server, real or fake) and the real clock.

#[path = "../core/tests/gate_support/mod.rs"]
mod gate_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gate_support::*;
use jiff::Timestamp;
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::router::Router;
use nodegate_actors::supervisor::{self, SupervisorMsg};
use nodegate_actors::testing::{FakeClock, FakeExecutor, eventually};
use nodegate_core::gate::{EventType, OpenedBy, PatchOutcome, Phase};
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::NodeInfo;
use ractor::ActorRef;

struct System {
    router: Arc<Router>,
    exec: Arc<FakeExecutor>,
    clock: Arc<FakeClock>,
    supervisor: ActorRef<SupervisorMsg>,
}

impl System {
    async fn start(config: Config) -> Self {
        let config = Arc::new(config);
        let router = Arc::new(Router::new(Arc::clone(&config)));
        let exec = Arc::new(FakeExecutor::recording());
        let clock = Arc::new(FakeClock::default());
        let ctx = Arc::new(GateContext {
            router: Arc::clone(&router),
            executor: Arc::clone(&exec),
            clock: Arc::clone(&clock),
            journal_capacity: 256,
        });
        let (supervisor, _) = supervisor::start(ctx).await.expect("supervisor starts");
        System {
            router,
            exec,
            clock,
            supervisor,
        }
    }
}

impl Drop for System {
    fn drop(&mut self) {
        self.supervisor.stop(None);
    }
}

/// A gated node created just now, so the default deadline is far away.
fn fresh_node() -> NodeInfo {
    NodeInfo {
        created: Timestamp::now(),
        ..gated_node()
    }
}

/// Gives the actors time to do something they must not do.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_opens_once_when_its_pods_become_ready_and_then_stops() {
    let sys = System::start(cfg()).await;
    let cilium = tolerant_ds("cilium");
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.node_upserted(fresh_node());
    sys.router.pod_upserted(unready_pod("cilium-1", &cilium));
    sys.router.mark_synced();

    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;
    settle().await;
    assert!(
        sys.exec.patches().is_empty(),
        "opened before cilium was Ready"
    );

    sys.router.pod_upserted(ready_pod("cilium-1", &cilium));
    eventually("the untaint patch", || sys.exec.patches().len() == 1).await;
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
    let patch = &sys.exec.patches()[0];
    assert_eq!(
        (patch.node.as_str(), patch.resource_version.as_str()),
        (NODE, "1")
    );
    assert_eq!(patch.opened_by, OpenedBy::Ready);
    eventually("the GateOpened event", || {
        sys.exec.events().iter().any(|e| e.reason == "GateOpened")
    })
    .await;

    // The watch may still show the node as it was when we opened it; that
    // stale sighting must not start a second gate.
    sys.router.node_upserted(fresh_node());
    settle().await;
    assert!(sys.router.gate(NODE).is_none());
    assert_eq!(sys.exec.patches().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_gate_starts_before_the_indexes_are_synced() {
    let sys = System::start(cfg()).await;
    sys.router.node_upserted(fresh_node());
    settle().await;
    assert!(sys.router.gate(NODE).is_none());

    // The DaemonSet arrives after the node, as separate watches allow.
    sys.router.daemonset_upserted(tolerant_ds("cilium"));
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;
    settle().await;
    assert!(sys.exec.patches().is_empty(), "cilium has no pod yet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_panics_is_restarted_from_the_indexes() {
    let sys = System::start(cfg()).await;
    let cilium = tolerant_ds("cilium");
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;
    let first = sys.router.gate(NODE).map(|g| g.get_id());

    sys.clock.panic_once.store(true, Ordering::SeqCst);
    sys.router.pod_upserted(pending_pod("cilium-1", &cilium));
    eventually("a replacement gate", || {
        sys.router
            .gate(NODE)
            .is_some_and(|g| Some(g.get_id()) != first)
    })
    .await;
    // The replacement saw the pod that arrived with the crash.
    let view = sys.router.view(NODE).await.expect("view");
    assert!(view.state.pods.contains_key("uid-cilium-1"));
    assert!(sys.exec.patches().is_empty());

    sys.router.pod_upserted(ready_pod("cilium-1", &cilium));
    eventually("the untaint patch", || sys.exec.patches().len() == 1).await;
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_shows_the_expected_set_and_the_journal() {
    let sys = System::start(cfg()).await;
    sys.router.daemonset_upserted(tolerant_ds("cilium"));
    sys.router.daemonset_upserted(intolerant_ds("web"));
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;

    let view = sys.router.view(NODE).await.expect("a live gate answers");
    assert_eq!(view.state.phase, Phase::Waiting);
    let expected: Vec<String> = view
        .state
        .expected()
        .map(|(id, _)| id.to_string())
        .collect();
    assert_eq!(expected, vec!["kube-system/cilium".to_string()]);
    let json = serde_json::to_value(&view).unwrap();
    assert!(
        json["journal"][0]["event"]["snapshot"].is_object(),
        "{json}"
    );
    assert!(sys.router.view("no-such-node").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_fires_on_time_and_opens_by_timeout() {
    let mut config = cfg();
    config.timeout = Some(Duration::from_millis(400));
    let sys = System::start(config).await;
    sys.router.daemonset_upserted(tolerant_ds("broken"));
    let started = Instant::now();
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();

    eventually("the timeout patch", || sys.exec.patches().len() == 1).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(350),
        "opened early: {elapsed:?}"
    );
    assert_eq!(sys.exec.patches()[0].opened_by, OpenedBy::Timeout);
    eventually("the GateTimedOut warning", || {
        sys.exec
            .events()
            .iter()
            .any(|e| e.type_ == EventType::Warning && e.note.contains("kube-system/broken"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_clock_ahead_of_the_servers_does_not_open_new_nodes_at_once() {
    let mut config = cfg();
    // The gate allows the evidence 2 s of slack (SERVER_TIME_SLACK): it
    // opens about 500 ms after the node's creation by the server's clock.
    config.timeout = Some(Duration::from_millis(2500));
    let sys = System::start(config).await;
    // Our clock is ten minutes ahead: the server created the node "now" by
    // its clock, ten minutes ago by ours.
    let skew = Duration::from_secs(600);
    sys.clock.set_server_behind(Some(skew));
    sys.router.daemonset_upserted(tolerant_ds("broken"));
    let started = Instant::now();
    sys.router.node_upserted(NodeInfo {
        created: Timestamp::now() - skew,
        ..gated_node()
    });
    sys.router.mark_synced();

    eventually("the timeout patch", || sys.exec.patches().len() == 1).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(450),
        "opened by the local clock alone: {elapsed:?}"
    );
    assert_eq!(sys.exec.patches()[0].opened_by, OpenedBy::Timeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_re_read_and_retried_against_the_new_version() {
    let sys = System::start(cfg()).await;
    sys.exec.script(vec![PatchOutcome::Conflict]);
    *sys.exec.node_on_refresh.lock().unwrap() = Some(NodeInfo {
        resource_version: "2".into(),
        ..fresh_node()
    });
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();

    eventually("the retried patch", || sys.exec.patches().len() == 2).await;
    let versions: Vec<String> = sys
        .exec
        .patches()
        .iter()
        .map(|p| p.resource_version.clone())
        .collect();
    assert_eq!(versions, vec!["1".to_string(), "2".to_string()]);
    assert_eq!(sys.exec.refreshes.load(Ordering::SeqCst), 1);
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untaint_not_yet_sent_is_withdrawn_when_a_member_stops_being_ready() {
    let sys = System::start(cfg()).await;
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    *sys.exec.hold.lock().unwrap() = Some(Arc::clone(&hold));
    let cilium = tolerant_ds("cilium");
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.node_upserted(fresh_node());
    sys.router.pod_upserted(ready_pod("cilium-1", &cilium));
    sys.router.mark_synced();

    // The untaint is decided and handed over, but waits (for a "rate
    // token") while cilium's pod turns NotReady.
    eventually("the untaint to be handed over", || {
        sys.exec.handed.load(Ordering::SeqCst) == 1
    })
    .await;
    sys.router.pod_upserted(unready_pod("cilium-1", &cilium));
    let withdrawn = async {
        loop {
            let view = sys.router.view(NODE).await.expect("the gate is live");
            if view.state.write.as_ref().is_some_and(|w| w.withdrawing) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), withdrawn)
        .await
        .expect("the gate asks to withdraw its untaint");
    hold.add_permits(1);
    settle().await;
    assert!(
        sys.exec.patches().is_empty(),
        "a withdrawn untaint was sent"
    );
    let view = sys.router.view(NODE).await.expect("the gate stays live");
    assert_eq!(view.state.phase, Phase::Waiting);
    assert!(view.state.write.is_none());

    // Ready again: a fresh untaint goes out and the node opens.
    hold.add_permits(1);
    sys.router.pod_upserted(ready_pod("cilium-1", &cilium));
    eventually("the second untaint", || sys.exec.patches().len() == 1).await;
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_writes_once_it_gains_leadership() {
    let sys = System::start(cfg()).await;
    sys.exec.script(vec![PatchOutcome::NotLeader]);
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();
    eventually("the refused patch", || sys.exec.patches().len() == 1).await;
    settle().await;
    assert_eq!(sys.exec.patches().len(), 1, "no retry without the lease");
    sys.router.leadership_gained();
    eventually("the patch as leader", || sys.exec.patches().len() == 2).await;
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_added_mid_wait_reaches_the_live_gate() {
    let sys = System::start(cfg()).await;
    let (cilium, csi) = (tolerant_ds("cilium"), tolerant_ds("csi"));
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.pod_upserted(unready_pod("cilium-1", &cilium));
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;

    sys.router.daemonset_upserted(csi.clone());
    sys.router.pod_upserted(ready_pod("cilium-1", &cilium));
    settle().await;
    assert!(sys.exec.patches().is_empty(), "csi has no pod yet");
    sys.router.pod_upserted(ready_pod("csi-1", &csi));
    eventually("the untaint patch", || sys.exec.patches().len() == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_deleted_mid_wait_stops_its_gate() {
    let sys = System::start(cfg()).await;
    sys.router.daemonset_upserted(tolerant_ds("broken"));
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;
    sys.router.node_deleted(NODE);
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
    assert!(sys.exec.patches().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_nodes_open_independently() {
    let sys = System::start(cfg()).await;
    let cilium = tolerant_ds("cilium");
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.mark_synced();
    let names: Vec<String> = (0..50).map(|i| format!("node-{i}")).collect();
    for name in &names {
        sys.router.node_upserted(NodeInfo {
            name: name.clone(),
            uid: format!("uid-{name}"),
            ..fresh_node()
        });
    }
    eventually("50 gates", || sys.router.gate_count() == 50).await;
    for name in &names {
        let mut pod = ready_pod(&format!("cilium-{name}"), &cilium);
        pod.node_name = name.clone().into();
        sys.router.pod_upserted(pod);
    }
    eventually("50 patches", || sys.exec.patches().len() == 50).await;
    eventually("every gate to stop", || sys.router.gate_count() == 0).await;
    let mut patched: Vec<String> = sys.exec.patches().iter().map(|p| p.node.clone()).collect();
    patched.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(patched, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_whose_hint_was_lost_opens_on_its_periodic_reexamination() {
    let sys = System::start(cfg()).await;
    sys.exec.reexamine_ms.store(200, Ordering::SeqCst);
    let cilium = tolerant_ds("cilium");
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.node_upserted(fresh_node());
    sys.router.pod_upserted(unready_pod("cilium-1", &cilium));
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;

    // The pod turns Ready in the index, but the hint is lost on the way.
    sys.router.lose_hints(true);
    sys.router.pod_upserted(ready_pod("cilium-1", &cilium));
    eventually("the untaint patch", || sys.exec.patches().len() == 1).await;
    assert_eq!(sys.exec.patches()[0].opened_by, OpenedBy::Ready);
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_for_leadership_is_re_sent_though_leadership_gained_never_comes() {
    let sys = System::start(cfg()).await;
    sys.exec.reexamine_ms.store(200, Ordering::SeqCst);
    sys.exec.script(vec![PatchOutcome::NotLeader]);
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();
    eventually("the refused patch", || sys.exec.patches().len() == 1).await;
    // The elector's renewal came back late; the gates were never told.
    eventually("the patch re-sent", || sys.exec.patches().len() == 2).await;
    eventually("the gate to stop", || sys.router.gate(NODE).is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconfigure_changes_the_expected_set_of_live_gates() {
    let sys = System::start(cfg()).await;
    let (cilium, agent) = (tolerant_ds("cilium"), tolerant_ds("agent"));
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.daemonset_upserted(agent.clone());
    sys.router.node_upserted(fresh_node());
    sys.router.pod_upserted(ready_pod("cilium-1", &cilium));
    sys.router.pod_upserted(unready_pod("agent-1", &agent));
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;
    settle().await;
    assert!(sys.exec.patches().is_empty(), "agent is not Ready");

    // No message about the node or its pods: only the new configuration.
    let mut config = (*sys.router.config()).clone();
    config
        .placement
        .excluded
        .insert(("kube-system".into(), "agent".into()));
    assert_eq!(sys.router.reconfigure(Arc::new(config)), 1);
    eventually("the untaint patch", || sys.exec.patches().len() == 1).await;
    assert_eq!(sys.exec.patches()[0].opened_by, OpenedBy::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconfigure_gates_nodes_the_new_taints_manage() {
    let sys = System::start(cfg()).await;
    sys.router.daemonset_upserted(intolerant_ds("web"));
    let mut node = fresh_node();
    node.taints = vec![nodegate_core::testutil::taint(
        "example.com/boot",
        "NoSchedule",
    )];
    sys.router.node_upserted(node);
    sys.router.mark_synced();
    settle().await;
    assert!(sys.router.gate(NODE).is_none(), "not a managed taint yet");

    let mut config = (*sys.router.config()).clone();
    config.placement.managed_taints = vec![nodegate_core::rules::placement::ManagedTaint::new(
        "example.com/boot",
        "NoSchedule",
    )];
    assert_eq!(sys.router.reconfigure(Arc::new(config)), 0);
    // A gate starts and, with nothing it waits for (web cannot start before
    // the gate opens), opens.
    eventually("the untaint patch", || sys.exec.patches().len() == 1).await;
    assert_eq!(
        sys.exec.patches()[0].taints[0].taint.key,
        "example.com/boot"
    );
}

/// A pod change on a node with a live gate goes to that gate alone — except
/// a canary's (`canary`): the canary decider must see its own pods change
/// (a canary that failed, or is gone so its slot is free) at once, not at
/// its next LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canarys_changes_reach_the_feed_although_a_gate_takes_them() {
    use nodegate_actors::feed::Subscriber;
    use nodegate_core::deciders::{Change, Input as Feed};
    use nodegate_core::vocab::config::CanaryConfig;

    #[derive(Default)]
    struct Heard(std::sync::Mutex<Vec<Feed>>);
    impl Subscriber for Heard {
        fn deliver(&self, input: &Feed) {
            self.0.lock().unwrap().push(input.clone());
        }
    }
    let pods_changed = |h: &Heard| {
        h.0.lock()
            .unwrap()
            .iter()
            .filter(|i| matches!(i, Feed::Changed(Change::Pods { .. })))
            .count()
    };

    let mut config = cfg();
    config.canary = Some(CanaryConfig {
        namespace: "nodegate".into(),
        probe: false,
        max_in_flight: 10,
    });
    let sys = System::start(config).await;
    let heard = Arc::new(Heard::default());
    sys.router.subscribe(heard.clone());
    let cilium = tolerant_ds("cilium");
    sys.router.daemonset_upserted(cilium.clone());
    sys.router.node_upserted(fresh_node());
    sys.router.mark_synced();
    eventually("the gate to start", || sys.router.gate(NODE).is_some()).await;

    // A DaemonSet's pod goes to the gate only.
    sys.router.pod_upserted(unready_pod("cilium-1", &cilium));
    assert_eq!(pods_changed(&heard), 0);
    // The canary goes to the gate and to the feed, created and deleted.
    let mut canary = nodegate_core::testutil::mk_pod("nodegate-canary-x", NODE, "node-uid");
    canary.namespace = "nodegate".into();
    sys.router.pod_upserted(canary.clone());
    assert_eq!(pods_changed(&heard), 1);
    sys.router.pod_deleted(NODE, &canary.uid);
    assert_eq!(pods_changed(&heard), 2);
}
