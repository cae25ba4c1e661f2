//! Scenario 4: a cluster-wide agent breakage.

use super::*;
use support::gate::taint_keys;
use support::{http_get, metric};

/// How many open nodes the scenario breaks: `NODEGATE_CHAOS_AGENT_NODES`,
/// 1,000 by default. The suite's size: on two cores the control plane takes
/// minutes of both to make 3,000 agents Ready (most of the chaos binary's
/// time), while the assertions judge the same thing at 1,000. The 3,000-node
/// run is the measurement (`NODEGATE_CHAOS_AGENT_NODES=3000
/// NODEGATE_CHAOS_TARGETS=1`, docs/development.md).
fn node_count() -> usize {
    match std::env::var("NODEGATE_CHAOS_AGENT_NODES") {
        Err(_) => 1000,
        Ok(v) => v.parse().unwrap_or_else(|_| {
            panic!("NODEGATE_CHAOS_AGENT_NODES={v:?}: give a number of nodes, such as 3000")
        }),
    }
}

/// Parallel writers for the set-up's creates and patches.
const WRITERS: usize = 32;
/// How long the breakage is watched.
const WATCHED: Duration = Duration::from_secs(60);
/// nodegate's `--timeout`: far beyond the scenario, so that the probe opens
/// by its agent's readiness however slow the machine (by this deadline only
/// when nodegate failed to), and the node re-gated in the watched minute
/// stays re-gated.
const TIMEOUT: Duration = Duration::from_secs(600);

/// The agent: on every node, tolerating every taint (a re-gate needs a
/// DaemonSet that tolerates the re-gate taint).
fn agent() -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
    }))
    .expect("daemonset manifest")
}

/// Runs `job(i)` for every i < count, `WRITERS` at a time.
async fn for_each<F, Fut>(count: usize, job: F)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let job = job.clone();
        writers.spawn(async move {
            for i in (w..count).step_by(WRITERS) {
                job(i).await;
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.expect("writer");
    }
}

/// The agent pods, Ready or not, by node.
async fn agents(env: &Env) -> BTreeMap<String, Pod> {
    env.pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .expect("list agent pods")
        .items
        .into_iter()
        .filter_map(|p| Some((p.spec.as_ref()?.node_name.clone()?, p)))
        .collect()
}

/// What the sampler saw of nodegate while the agent was broken.
#[derive(Default)]
struct Samples {
    /// /healthz latencies.
    health: Vec<Duration>,
    /// /healthz answers that were not 200, or no answer.
    health_failed: Vec<String>,
    /// `nodegate_leader` readings that were not 1.
    not_leader: Vec<String>,
    leader_readings: usize,
}

/// Samples /healthz every 100 ms and `nodegate_leader` every second until
/// `stop`.
async fn sample(addr: String, stop: tokio::sync::watch::Receiver<bool>) -> Samples {
    let mut s = Samples::default();
    let mut n = 0u64;
    while !*stop.borrow() {
        let t = Instant::now();
        match http_get(&addr, "/healthz").await {
            Ok((200, _)) => s.health.push(t.elapsed()),
            other => s.health_failed.push(format!("{other:?}")),
        }
        if n.is_multiple_of(10) {
            s.leader_readings += 1;
            match http_get(&addr, "/metrics").await {
                Ok((200, text)) if metric(&text, "nodegate_leader") == Some(1.0) => {}
                Ok((status, text)) => s.not_leader.push(format!(
                    "{status}: nodegate_leader {:?}",
                    metric(&text, "nodegate_leader")
                )),
                Err(e) => s.not_leader.push(e),
            }
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s
}

/// `count` open kwok nodes, each with a Ready agent pod.
async fn open_nodes_with_agent(env: &Env, faults: &Faults, count: usize) {
    env.daemonsets
        .create(&PostParams::default(), &agent())
        .await
        .expect("create agent");
    let nodes = env.nodes.clone();
    for_each(count, move |i| {
        let nodes = nodes.clone();
        async move {
            let node = fake_node(&format!("open-{i:05}"), &[("pool", "open")], &[]);
            nodes
                .create(&PostParams::default(), &node)
                .await
                .unwrap_or_else(|e| panic!("create node {i}: {e}"));
        }
    })
    .await;
    faults.note(format!("{count} open nodes created"));
    // kwok makes the pods Ready at the pace of the machine (about 5 minutes
    // for 3,000 on an idle two-core one, more than 10 on a cold CI machine
    // that builds beside it): no deadline on the whole, only on progress.
    // The set-up fails when kwok made no further pod Ready for STALLED —
    // stuck, not slow.
    const STALLED: Duration = Duration::from_secs(180);
    let started = Instant::now();
    let (mut last, mut progressed) = (0, Instant::now());
    loop {
        let ready = agents(env).await.values().filter(|p| pod_ready(p)).count();
        if ready >= count {
            break;
        }
        if ready > last {
            (last, progressed) = (ready, Instant::now());
        }
        assert!(
            progressed.elapsed() < STALLED,
            "kwok made no agent pod Ready for {STALLED:?}: {ready} of {count} Ready after {:.0}s\n{}",
            started.elapsed().as_secs_f64(),
            faults.timeline()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    faults.note(format!(
        "every agent pod Ready ({:.0}s after the nodes were created)",
        started.elapsed().as_secs_f64()
    ));
}

/// Makes every agent pod not Ready (held so, so kwok leaves it).
async fn break_agent(env: &Env, faults: &Faults) {
    let names: Vec<String> = agents(env)
        .await
        .into_values()
        .filter_map(|p| p.metadata.name)
        .collect();
    let names = std::sync::Arc::new(names);
    let pods = env.pods.clone();
    let broken = names.len();
    for_each(broken, move |i| {
        let pods = pods.clone();
        let names = std::sync::Arc::clone(&names);
        async move { set_ready(&pods, &names[i], false).await }
    })
    .await;
    faults.note(format!("agent not Ready on all {broken} nodes"));
}

/// A new gated node whose agent pod (the template is not held) is Ready at
/// once: how long after its pod's Ready second it opened, by the API's
/// times (the node's `opened-at`, the pod's Ready `lastTransitionTime`).
async fn probe_opening(env: &Env, faults: &Faults) -> jiff::SignedDuration {
    let probe = create(env, &gated_node("probe", &[("pool", "probe")])).await;
    // Until it opens, by its agent's readiness or, failing that, by its
    // deadline (`TIMEOUT`, which fails the check below): however slowly
    // kwok makes the agent Ready, the verdict is by what opened it.
    let opened = wait_for("probe open", TIMEOUT + Duration::from_secs(30), || async {
        let n = env.node("probe").await;
        match (
            annotation(&n, "nodegate.dev/opened-at"),
            annotation(&n, "nodegate.dev/opened-by"),
        ) {
            (Some(at), Some(by)) if !has_gate_taint(&n) => {
                // By its members' readiness, not by a deadline.
                assert_eq!(by, "ready", "the probe opened by {by}");
                Ok(at)
            }
            _ => Err(format!("{:?}", n.spec.and_then(|s| s.taints))),
        }
    })
    .await;
    faults.note("probe opened");
    let opened: Timestamp = opened.parse().expect("opened-at is RFC 3339");
    let pod = env
        .pod_on("agent", &probe.name)
        .await
        .expect("probe's agent");
    let ready_at = pod
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .map(|t| t.0)
        .expect("the probe's agent has a Ready time");
    opened.duration_since(ready_at)
}

/// The 99th percentile of the /healthz latencies.
fn p99(samples: &Samples) -> Duration {
    let mut health = samples.health.clone();
    health.sort();
    health
        .get((health.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(Duration::MAX)
}

/// Open nodes carrying the re-gate taint.
async fn regated(env: &Env) -> usize {
    env.nodes
        .list(&ListParams::default().labels("pool=open"))
        .await
        .expect("list nodes")
        .items
        .iter()
        .filter(|n| taint_keys(n).iter().any(|k| k == "nodegate.dev/degraded"))
        .count()
}

/// 4. `N` open nodes (1,000 by default) with a Ready agent; nodegate leads
/// with `--regate-after 5s --regate-max-unavailable 1`. The agent breaks on
/// every node at once (not Ready), so every node is due for re-gating and
/// all but one are refused by the budget, over and over. While the agent
/// breaks and for 60 s after it is broken everywhere:
/// `/healthz` always answers; nodegate keeps the lease (`nodegate_leader`
/// 1); a new gated node whose agent is Ready opens by readiness; the budget
/// holds. Its speed — `/healthz` p99 under 500 ms, the probe open within 2 s
/// of its agent's Ready (by the API's own times: the pod's Ready
/// `lastTransitionTime`, whole seconds, and the node's `opened-at`) — is
/// printed, and asserted with `NODEGATE_CHAOS_TARGETS=1` on an idle machine.
/// No step has a deadline that a slow machine misses: the set-up waits as
/// long as kwok makes progress, and the probe until it opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_wide_agent_breakage_keeps_nodegate_responsive() {
    let _took = Stopwatch::start("a_cluster_wide_agent_breakage_keeps_nodegate_responsive");
    let count = node_count();
    let env = Env::new("chaos-breakage").await;
    let faults = Faults::new(&env.cluster);
    open_nodes_with_agent(&env, &faults, count).await;
    // The shipped lease timings (15 s / 10 s / 2 s), not the chaos suite's
    // short ones (4 s / 3 s), which exist to fit a failover in a test: the
    // question is whether nodegate keeps the lease it is deployed with.
    let mut args: Vec<&str> = vec![
        "--leader-elect",
        "--lease-name",
        "nodegate-chaos",
        "--lease-namespace",
        "default",
    ];
    args.extend(["--timeout", "600s", "--regate-after", "5s"]);
    args.extend(["--regate-max-unavailable", "1"]);
    let ng = Replica::start(&env.cluster, "nodegate", &args).await;
    ng.wait_leader(Duration::from_secs(30)).await;
    faults.note("nodegate leads");

    // Sampled from the first broken pod on; watched for 60 s once every
    // pod is broken.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(sample(ng.addr.clone(), stopped));
    break_agent(&env, &faults).await;
    let broken_from = Instant::now();
    let waited = probe_opening(&env, &faults).await;
    tokio::time::sleep(WATCHED.saturating_sub(broken_from.elapsed())).await;
    let _ = stop.send(true);
    let samples = sampler.await.expect("sampler");
    faults.note("60 s of breakage watched");

    let (p99, regated) = (p99(&samples), regated(&env).await);
    eprintln!(
        "[chaos] breakage of {count} nodes: /healthz p99 {p99:?} over {} answers ({} failed), \
         {} leader readings, probe opened {waited:#} after its agent's Ready second, \
         {regated} node(s) re-gated\n{}",
        samples.health.len(),
        samples.health_failed.len(),
        samples.leader_readings,
        faults.timeline()
    );
    let failed = &samples.health_failed;
    assert!(failed.is_empty(), "/healthz failed: {failed:?}");
    assert!(
        samples.not_leader.is_empty() && samples.leader_readings > 0,
        "nodegate lost the lease: {:?}\n{}",
        samples.not_leader,
        ng.ng.logs()
    );
    // The speed targets (/healthz p99 under 500 ms, the probe open within
    // 2 s of its agent's Ready) are a measurement, not a pass/fail of the
    // suite, whose other lane shares the two cores: they are asserted when
    // the scenario runs alone with NODEGATE_CHAOS_TARGETS=1
    // (docs/development.md), and printed above either way.
    if std::env::var_os("NODEGATE_CHAOS_TARGETS").is_some() {
        assert!(p99 < Duration::from_millis(500), "/healthz p99 {p99:?}");
        // The Ready time is whole seconds (cut, not rounded): up to 1 s more.
        assert!(
            waited < jiff::SignedDuration::from_secs(3),
            "the probe opened {waited:#} after its agent's Ready second\n{}",
            ng.journal("probe").await
        );
    }
    assert!(regated <= 1, "{regated} nodes re-gated, budget 1");
}
