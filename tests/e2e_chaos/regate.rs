//! Scenario 4: a leader change in the middle of a re-gate burst.

use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use kube::runtime::watcher;

use super::*;

const DEGRADED: &str = "nodegate.dev/degraded";
const BUDGET: usize = 2;

/// An agent on the `role=fleet` nodes that tolerates every taint (as node
/// agents do), rolled out to all of them at once (a bad rollout reaches
/// every node); `revision` and `hold` in its pod template.
fn agent(revision: &str, hold: bool) -> DaemonSet {
    let mut labels = json!({"app": "agent", "nodegate.test/revision": revision});
    if hold {
        labels[HOLD_LABEL] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"role": "fleet"},
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
    }))
    .expect("daemonset manifest")
}

fn carries_degraded(n: &Node) -> bool {
    taint_list(n).iter().any(|t| t.starts_with(DEGRADED))
}

/// How many of the fleet's nodes carry the re-gate taint after each
/// revision the watch delivers (one event is one revision of one node, in
/// order), and the most at once, with the names then.
#[derive(Default)]
struct Count {
    carrying: BTreeMap<String, bool>,
    most: usize,
    at_most: Vec<String>,
}

impl Count {
    fn now(&self) -> usize {
        self.carrying.values().filter(|c| **c).count()
    }
}

fn watch_count(nodes: Api<Node>) -> Arc<Mutex<Count>> {
    let count = Arc::new(Mutex::new(Count::default()));
    let out = Arc::clone(&count);
    tokio::spawn(async move {
        let cfg = watcher::Config::default().labels("role=fleet");
        let mut events = watcher::watcher(nodes, cfg).boxed();
        while let Ok(Some(ev)) = events.try_next().await {
            let (watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev else {
                continue;
            };
            let Some(name) = n.metadata.name.clone() else {
                continue;
            };
            if let Ok(mut c) = count.lock() {
                c.carrying.insert(name, carries_degraded(&n));
                let now = c.now();
                if now > c.most {
                    c.most = now;
                    c.at_most = c
                        .carrying
                        .iter()
                        .filter(|(_, on)| **on)
                        .map(|(n, _)| n.clone())
                        .collect();
                }
            }
        }
    });
    out
}

/// 4. Two replicas with re-gating (budget 2); a bad rollout breaks the agent
/// on twenty open nodes at once, and the leader is SIGKILLed as soon as its
/// first re-gate lands. The follower takes over and goes on re-gating. A
/// watch on the nodes counts those carrying the re-gate taint at every
/// revision: never more than the budget, and in the end exactly the budget,
/// the others refused (`RegateBudgetExhausted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_mid_regate_burst_keeps_the_budget() {
    const N: usize = 20;
    let _took = Stopwatch::start("leader_killed_mid_regate_burst_keeps_the_budget");
    let env = Env::new("chaos-regate").await;
    let faults = Faults::new(&env.cluster);
    env.daemonsets
        .create(&PostParams::default(), &agent("good", false))
        .await
        .expect("create agent");
    let names: Vec<String> = (1..=N).map(|i| format!("fleet-{i:02}")).collect();
    for n in &names {
        create(&env, &fake_node(n, &[("role", "fleet")], &[])).await;
    }
    for n in &names {
        env.wait_pod("agent", n, true).await;
    }
    let count = watch_count(env.nodes.clone());
    let budget = BUDGET.to_string();
    let args: Vec<&str> = ELECTION
        .iter()
        .copied()
        .chain(["--regate-after", "6s", "--regate-max-unavailable", &budget])
        .collect();
    let mut a = Replica::start(&env.cluster, "nodegate-a", &args).await;
    a.wait_leader(Duration::from_secs(30)).await;
    let b = Replica::start(&env.cluster, "nodegate-b", &args).await;
    faults.note("nodegate-a leads, nodegate-b follows; 20 open nodes, agent Ready");

    env.daemonsets
        .replace("agent", &PostParams::default(), &{
            let mut ds = agent("bad", true);
            let current = env.daemonsets.get("agent").await.expect("agent");
            ds.metadata.resource_version = current.metadata.resource_version;
            ds
        })
        .await
        .expect("roll the agent");
    faults.note("bad rollout: the agent held not Ready on every node");

    wait_for("the first re-gate", Duration::from_secs(60), || async {
        match count.lock().map(|c| c.now()) {
            Ok(n) if n >= 1 => Ok(()),
            other => Err(format!("{other:?}\n{}", a.ng.logs())),
        }
    })
    .await;
    assert_eq!(
        a.is_leader().await,
        Some(true),
        "nodegate-a no longer leads"
    );
    faults.kill(&mut a);
    faults.note("nodegate-a killed after its first re-gate landed");
    b.wait_leader(Duration::from_secs(30)).await;
    faults.note("nodegate-b leads");

    // Until the budget is full and every other node refused.
    wait_for(
        "the budget full and every other node refused",
        Duration::from_secs(90),
        || async {
            let now = count.lock().map(|c| c.now()).unwrap_or(0);
            let mut refused = 0;
            for n in &names {
                let events = env.events_for(n).await;
                if events
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("RegateBudgetExhausted"))
                {
                    refused += 1;
                }
            }
            if now == BUDGET && refused >= N - BUDGET {
                Ok(())
            } else {
                Err(format!("{now} re-gated, {refused} refused"))
            }
        },
    )
    .await;
    let (most, at_most) = count
        .lock()
        .map(|c| (c.most, c.at_most.clone()))
        .unwrap_or_default();
    assert!(
        most <= BUDGET,
        "{most} nodes carried the re-gate taint at once (budget {BUDGET}): {at_most:?}\n{}\n{}",
        faults.timeline(),
        b.ng.logs()
    );
    faults.note(format!("at most {most} re-gated at once"));
}
