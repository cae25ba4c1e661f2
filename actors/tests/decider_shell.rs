//! The change feed the router publishes, and a decider running in its shell
//! on it: what reaches a subscriber for each kind of index change, and the
//! late-taint net carrying a decision through the executor port.

#[path = "../core/tests/gate_support/mod.rs"]
mod gate_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gate_support::*;
use jiff::Timestamp;
use nodegate_actors::decider_shell;
use nodegate_actors::feed::Subscriber;
use nodegate_actors::router::Router;
use nodegate_actors::testing::{FakeClock, FakeExecutor};
use nodegate_core::deciders::{Change, Input, Origin, TaintChange, Tally};
use nodegate_core::net::decider::Net;
use nodegate_core::testutil::mk_node;
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::NodeInfo;

#[derive(Default)]
struct Heard(Mutex<Vec<Input>>);

impl Subscriber for Heard {
    fn deliver(&self, input: &Input) {
        self.0.lock().unwrap().push(input.clone());
    }
}

impl Heard {
    fn take(&self) -> Vec<Input> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn open_node(name: &str, version: &str) -> NodeInfo {
    NodeInfo {
        resource_version: version.into(),
        ..mk_node(name, &[], vec![])
    }
}

#[test]
fn every_index_change_is_published_once_with_the_node_before_and_after() {
    let router = Router::new(Arc::new(Config::default()));
    let heard = Arc::new(Heard::default());
    router.subscribe(heard.clone());

    router.node_upserted(open_node("n1", "1"));
    router.node_upserted(open_node("n1", "2"));
    router.node_deleted("n1");
    let versions: Vec<(Option<String>, Option<String>)> = heard
        .take()
        .into_iter()
        .map(|i| match i {
            Input::Changed(Change::Node {
                name,
                before,
                after,
            }) => {
                assert_eq!(name, "n1");
                (
                    before.map(|n| n.resource_version.clone()),
                    after.map(|n| n.resource_version.clone()),
                )
            }
            other => panic!("not a node change: {other:?}"),
        })
        .collect();
    assert_eq!(
        versions,
        [
            (None, Some("1".to_string())),
            (Some("1".to_string()), Some("2".to_string())),
            (Some("2".to_string()), None),
        ]
    );

    let ds = tolerant_ds("cilium");
    router.node_upserted(open_node(NODE, "1"));
    heard.take();
    router.pod_upserted(ready_pod("cilium-1", &ds));
    assert_eq!(
        heard.take(),
        [Input::Changed(Change::Pods { node: NODE.into() })]
    );
    router.daemonset_upserted(ds.clone());
    // The same projection again (a status update): nothing to tell.
    router.daemonset_upserted(ds);
    router.mark_synced();
    router.leadership_gained();
    assert_eq!(
        heard.take(),
        [
            Input::Changed(Change::DaemonSet {
                uid: "uid-kube-system-cilium".into()
            }),
            Input::Changed(Change::Everything),
            Input::MayWrite,
        ]
    );
}

#[test]
fn the_net_runs_in_its_shell_and_writes_through_the_executor() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let router = Arc::new(Router::new(Arc::new(Config::default())));
        let executor = Arc::new(FakeExecutor::recording());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let shell = decider_shell::start(
            Net::new(Duration::from_secs(60)),
            &router,
            Arc::clone(&executor),
            Arc::new(FakeClock::default()),
            None,
            stopped,
        );
        let young = NodeInfo {
            created: Timestamp::now(),
            ..open_node("young", "7")
        };
        router.node_upserted(young);
        router.mark_synced();

        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while executor.taint_writes().is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the net wrote nothing within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop.send(true);
        let net = shell.await.expect("the shell ran to its end");

        let writes = executor.taint_writes();
        assert_eq!(writes.len(), 1, "{writes:?}");
        let w = &writes[0];
        assert_eq!((w.origin, w.node.as_str()), (Origin::Net, "young"));
        assert_eq!(w.resource_version, "7");
        assert!(
            matches!(&w.change, TaintChange::Add { taint, .. } if taint.key == "nodegate.dev/initializing"),
            "{w:?}"
        );
        assert_eq!(
            *executor.tallies.lock().unwrap(),
            [Tally::LateTaint("tainted")]
        );
        let reasons: Vec<String> = executor
            .events()
            .iter()
            .map(|e| format!("{:?}", e.reason))
            .collect();
        assert_eq!(reasons, ["LateTaint"]);
        assert!(net.candidates().is_empty());
    });
}

/// A budgeted decider that only notes whether it was told it may write.
struct Probe(Arc<Mutex<Vec<bool>>>);

impl nodegate_core::deciders::Decider for Probe {
    fn origin(&self) -> Origin {
        Origin::Regate
    }
    fn budgeted(&self) -> bool {
        true
    }
    fn decide(
        &mut self,
        input: Input,
        cx: &nodegate_core::deciders::Context<'_>,
    ) -> Vec<nodegate_core::deciders::Effect> {
        if matches!(input, Input::MayWrite) {
            self.0.lock().unwrap().push(cx.may_write);
        }
        Vec::new()
    }
}

/// Hardening: after gaining the lease, a budgeted decider may
/// write only once the index shows every node at the version a fresh read
/// gave (the old leader's last taint included); it is then told so.
#[test]
fn a_budgeted_decider_may_write_only_once_the_index_caught_up() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let router = Arc::new(Router::new(Arc::new(Config::default())));
        router.node_upserted(open_node("n1", "5"));
        router.mark_synced();
        let executor = Arc::new(FakeExecutor::recording());
        executor
            .leading
            .store(false, std::sync::atomic::Ordering::SeqCst);
        *executor.fresh_versions.lock().unwrap() = Some(vec![("n1".into(), "9".into())]);
        let told = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let shell = decider_shell::start(
            Probe(Arc::clone(&told)),
            &router,
            Arc::clone(&executor),
            Arc::new(FakeClock::default()),
            None,
            stopped,
        );
        executor
            .leading
            .store(true, std::sync::atomic::Ordering::SeqCst);
        router.leadership_gained();
        // The router's MayWrite reaches the decider at once; the index
        // still shows n1 at 5, so it is told it may not write yet.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while told.lock().unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "no MayWrite");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(*told.lock().unwrap(), [false]);
        // The watch delivers the old leader's write (version 9).
        router.node_upserted(open_node("n1", "9"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !told.lock().unwrap().contains(&true) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never told it may write: {:?}",
                told.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop.send(true);
        shell.await.expect("the shell ran to its end");
    });
}

/// Hardening: the net's pod LISTs run side by side, at most
/// `LISTS_IN_FLIGHT` at once (before, one candidate at a time: a slow LIST
/// held every other new node past its window).
#[test]
fn the_nets_pod_lists_run_concurrently_and_bounded() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let router = Arc::new(Router::new(Arc::new(Config::default())));
        let executor = Arc::new(FakeExecutor::recording());
        let hold = Arc::new(tokio::sync::Semaphore::new(0));
        *executor.list_hold.lock().unwrap() = Some(Arc::clone(&hold));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let shell = decider_shell::start(
            Net::new(Duration::from_secs(60)),
            &router,
            Arc::clone(&executor),
            Arc::new(FakeClock::default()),
            None,
            stopped,
        );
        let count = decider_shell::LISTS_IN_FLIGHT + 4;
        for i in 0..count {
            router.node_upserted(NodeInfo {
                created: Timestamp::now(),
                ..open_node(&format!("young-{i}"), "7")
            });
        }
        router.mark_synced();
        let in_flight = || {
            executor
                .lists_in_flight
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while in_flight() < decider_shell::LISTS_IN_FLIGHT {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} LISTs out at once",
                in_flight()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        hold.add_permits(count);
        while executor.taint_writes().len() < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} of {count} tainted",
                executor.taint_writes().len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            executor
                .lists_peak
                .load(std::sync::atomic::Ordering::SeqCst),
            decider_shell::LISTS_IN_FLIGHT
        );
        let _ = stop.send(true);
        shell.await.expect("the shell ran to its end");
    });
}
