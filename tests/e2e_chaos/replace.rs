//! Scenario 6: the replace budget held under a burst of stuck nodes while
//! the leader is killed and another replica takes over (semantics.md §5.8).

use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use kube::runtime::watcher;

use super::*;

const REQUESTED: &str = "nodegate.dev/replace-requested";
/// Requests per interval.
const BUDGET: usize = 3;
const INTERVAL_S: i64 = 20;
/// Requested nodes still there, at most: none of these nodes goes (no
/// owner: cordoned and marked), so requests stop here.
const IN_FLIGHT: usize = 5;

/// Every `nodegate.dev/replace-requested` the watch saw, per node (the
/// first value), and every node whose value later changed (asked twice).
#[derive(Default)]
struct Requests {
    first: BTreeMap<String, Timestamp>,
    changed: Vec<String>,
}

fn watch_requests(nodes: Api<Node>) -> Arc<Mutex<Requests>> {
    let seen = Arc::new(Mutex::new(Requests::default()));
    let out = Arc::clone(&seen);
    tokio::spawn(async move {
        let cfg = watcher::Config::default().labels("role=burst");
        let mut events = watcher::watcher(nodes, cfg).boxed();
        while let Ok(Some(ev)) = events.try_next().await {
            let (watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev else {
                continue;
            };
            let (Some(name), Some(value)) = (n.metadata.name.clone(), annotation(&n, REQUESTED))
            else {
                continue;
            };
            let Ok(at) = value.parse::<Timestamp>() else {
                continue;
            };
            if let Ok(mut r) = seen.lock() {
                match r.first.get(&name).copied() {
                    None => {
                        r.first.insert(name, at);
                    }
                    Some(t) if t != at => r.changed.push(format!("{name}: {t} then {at}")),
                    Some(_) => {}
                }
            }
        }
    });
    out
}

/// The requests of any `INTERVAL_S` window, at most: for each request, the
/// requests in the window that ends at it.
fn most_in_a_window(times: &[Timestamp]) -> (usize, Vec<Timestamp>) {
    let window = jiff::SignedDuration::from_secs(INTERVAL_S);
    let mut worst = (0, Vec::new());
    for end in times {
        let inside: Vec<Timestamp> = times
            .iter()
            .copied()
            .filter(|t| *t <= *end && end.duration_since(*t) < window)
            .collect();
        if inside.len() > worst.0 {
            worst = (inside.len(), inside);
        }
    }
    worst
}

/// 6. Two replicas with `--on-timeout replace` (budget 3 per 20 s, 5 in
/// flight); twelve nodes whose agent never turns Ready reach their deadline
/// together. The leader is SIGKILLed as soon as its first request lands, a
/// third replica starts, the follower takes over. Judged from the nodes
/// alone (a watch on them): every request is a `replace-requested` time on
/// a node, no node's time ever changes (no node asked twice), no 20 s
/// window holds more than 3, never more than 5 in all; and in the end
/// exactly 5, with the others refused (`ReplaceBudgetExhausted`). No node
/// is reported timed out twice (the new leader's gates find the marks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_budget_held_under_a_burst_of_stuck_nodes() {
    const N: usize = 12;
    let _took = Stopwatch::start("replace_budget_held_under_a_burst_of_stuck_nodes");
    let env = Env::new("chaos-replace").await;
    let faults = Faults::new(&env.cluster);
    create_daemonsets(&env, &[("agent", true)]).await;
    let requests = watch_requests(env.nodes.clone());
    let (budget, interval, in_flight) = (
        BUDGET.to_string(),
        format!("{INTERVAL_S}s"),
        IN_FLIGHT.to_string(),
    );
    let args: Vec<&str> = ELECTION
        .iter()
        .copied()
        .chain([
            "--timeout",
            "8s",
            "--on-timeout",
            "replace",
            "--replace-budget",
            &budget,
            "--replace-interval",
            &interval,
            "--replace-in-flight",
            &in_flight,
            // Every node fails the same agent here: not judged a
            // cluster-wide breakage, so that the budget is what holds.
            "--replace-breakage",
            "100%",
        ])
        .collect();
    let mut a = Replica::start(&env.cluster, "nodegate-a", &args).await;
    a.wait_leader(Duration::from_secs(30)).await;
    let b = Replica::start(&env.cluster, "nodegate-b", &args).await;
    let names: Vec<String> = (1..=N).map(|i| format!("burst-{i:02}")).collect();
    for n in &names {
        create(&env, &gated_node(n, &[("role", "burst")])).await;
    }
    faults.note("nodegate-a leads, nodegate-b follows; 12 gated nodes, agent held");

    wait_for("the first request", Duration::from_secs(60), || async {
        match requests.lock().map(|r| r.first.len()) {
            Ok(n) if n >= 1 => Ok(()),
            other => Err(format!("{other:?}\n{}", a.ng.logs())),
        }
    })
    .await;
    faults.kill(&mut a);
    faults.note("nodegate-a killed after its first request landed");
    let c = Replica::start(&env.cluster, "nodegate-c", &args).await;
    faults.note("nodegate-c started");
    b.wait_leader(Duration::from_secs(30)).await;
    faults.note("nodegate-b leads");

    wait_for(
        "the in-flight limit reached and the other nodes refused",
        Duration::from_secs(120),
        || async {
            let now = requests.lock().map(|r| r.first.len()).unwrap_or(0);
            let mut refused = 0;
            for n in &names {
                if env
                    .events_for(n)
                    .await
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("ReplaceBudgetExhausted"))
                {
                    refused += 1;
                }
            }
            if now == IN_FLIGHT && refused >= N - IN_FLIGHT {
                Ok(())
            } else {
                Err(format!("{now} requested, {refused} refused"))
            }
        },
    )
    .await;
    // A window past the next interval: nothing more may come.
    tokio::time::sleep(Duration::from_secs(INTERVAL_S as u64 + 2)).await;

    let (first, changed) = requests
        .lock()
        .map(|r| (r.first.clone(), r.changed.clone()))
        .unwrap_or_default();
    let mut times: Vec<Timestamp> = first.values().copied().collect();
    times.sort();
    let (most, window) = most_in_a_window(&times);
    let report = || {
        format!(
            "requests {first:?}\n{}\nnodegate-b:\n{}\nnodegate-c:\n{}",
            faults.timeline(),
            b.ng.logs(),
            c.ng.logs()
        )
    };
    assert!(changed.is_empty(), "asked twice: {changed:?}\n{}", report());
    assert!(
        most <= BUDGET,
        "{most} requests within {INTERVAL_S}s (budget {BUDGET}): {window:?}\n{}",
        report()
    );
    assert_eq!(first.len(), IN_FLIGHT, "{}", report());
    // Every replica's gate owes each node its timeout mark; the one the
    // killed leader wrote is not written (nor reported) again by the next.
    // None of these nodes opens: their gate Events are GateTimedOut only.
    for name in &names {
        let reported = gate_events(&env.cluster.client, name, None).await;
        assert!(
            reported.len() <= 1,
            "{name} has {} gate Events (GateTimedOut, GateOpened): {reported:?}\n{}",
            reported.len(),
            report()
        );
    }
    for name in first.keys() {
        let n = env.node(name).await;
        assert!(has_gate_taint(&n), "{name} keeps its taint");
        assert_eq!(
            n.spec.as_ref().and_then(|s| s.unschedulable),
            Some(true),
            "{name} is cordoned"
        );
    }
    faults.note(format!(
        "{} requests, at most {most} in {INTERVAL_S}s",
        first.len()
    ));
}
