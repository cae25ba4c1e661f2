//! Chaos end to end: real faults injected into the real processes of a local
//! control plane (deploy/local) while `nodegate run` gates nodes, each
//! scenario on a cluster of its own. The faults and checks are in
//! `support/chaos.rs`. The checks read only the API (nodes and pods at exact
//! revisions, Events) and promise nothing beyond what nodegate promises: a
//! node opens by its deadline, or by the end of the fault when that is later,
//! plus a grace of 2 s; it opens `by ready` only at a revision where every
//! expected member had a Ready pod on it.

use nodegate_e2e as support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::chaos::{
    ELECTION, Faults, GRACE, Replica, Stopwatch, Verdicts, await_openings, daemonset_uids,
    deadline_of, gate_events, instant_of, opening_revision, pod_ready, rv_of,
    sent_before_the_change, taint_list, unready_members_at,
};
use support::gate::{Env, NS, TAINT, annotation, gated_node, has_gate_taint};
use support::{fake_node, wait_for};

const HOLD_LABEL: &str = "nodegate.test/hold-not-ready";
const FOREIGN_TAINT: &str = "example.com/foreign";
const FOREIGN_ANNOTATION: &str = "example.com/owner";

/// A DaemonSet on every node that tolerates the gate's taint and the foreign
/// one; `hold`: its pods are Running but not Ready until released.
/// `OnDelete`: a change of the template reaches only pods created later.
fn daemonset(name: &str, hold: bool) -> DaemonSet {
    let mut labels = json!({"app": name});
    if hold {
        labels[HOLD_LABEL] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "tolerations": [
                        {"key": TAINT, "operator": "Exists"},
                        {"key": FOREIGN_TAINT, "operator": "Exists"},
                    ],
                },
            },
        },
    }))
    .expect("daemonset manifest")
}

async fn create_daemonsets(env: &Env, specs: &[(&str, bool)]) {
    for (name, hold) in specs {
        env.daemonsets
            .create(&PostParams::default(), &daemonset(name, *hold))
            .await
            .expect("create daemonset");
    }
}

/// A node as created: its name, creationTimestamp, resourceVersion and uid.
#[derive(Clone)]
struct Created {
    name: String,
    at: Timestamp,
    rv: u64,
    uid: String,
}

async fn create(env: &Env, node: &Node) -> Created {
    let n = env.cluster.create_node(node).await;
    Created {
        name: n.metadata.name.clone().expect("name"),
        at: n
            .metadata
            .creation_timestamp
            .clone()
            .expect("creationTimestamp")
            .0,
        rv: rv_of(&n),
        uid: n.metadata.uid.clone().expect("uid"),
    }
}

/// Waits until every node has its pod of each `(app, ready)` in that state.
async fn wait_pods(env: &Env, nodes: &[Created], apps: &[(&str, bool)]) {
    for n in nodes {
        for (app, ready) in apps {
            env.wait_pod(app, &n.name, *ready).await;
        }
    }
}

/// The pod of `app` on `node`, through `pods` (which may be a side door).
async fn pod_of(pods: &Api<Pod>, app: &str, node: &str) -> Pod {
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .unwrap_or_else(|| panic!("no {app} pod on {node}"))
}

/// Sets the pod's Ready condition as a kubelet would, and (un)holds it so
/// that kwok leaves it so.
async fn set_ready(pods: &Api<Pod>, pod: &str, ready: bool) {
    let hold = if ready { json!(null) } else { json!("true") };
    pods.patch(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {HOLD_LABEL: hold}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("label pod {pod}: {e}"));
    let status = if ready { "True" } else { "False" };
    let now = Timestamp::now().to_string();
    pods.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": "Ready", "status": status, "lastTransitionTime": now, "reason": "Chaos"},
            {"type": "ContainersReady", "status": status, "lastTransitionTime": now, "reason": "Chaos"},
        ]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("set {pod} ready={ready}: {e}"));
}

/// How a node opened: its `opened-by`, and the expected members that had no
/// Ready pod on it at the revision its taint went.
struct Opening {
    by: String,
    unready: Vec<String>,
}

/// Checks every node that opened `by ready`: at the revision its taint went,
/// every expected member (every DaemonSet of the test namespace here) had a
/// Ready pod on it — unless a replica's journal shows that the untaint was
/// already sent when the gate learned that those members had stopped being
/// Ready (a patch already sent cannot be called back, semantics.md §5.4).
/// Returns how each open node opened.
async fn check_ready_openings(
    env: &Env,
    replicas: &[&Replica],
    faults: &Faults,
    nodes: &[Created],
    opened: &BTreeMap<String, Result<Instant, String>>,
    verdicts: &mut Verdicts,
) -> BTreeMap<String, Opening> {
    let members = daemonset_uids(&env.cluster.client).await;
    let mut by = BTreeMap::new();
    for n in nodes {
        if !matches!(opened.get(&n.name), Some(Ok(_))) {
            continue;
        }
        let (rev, at) = match opening_revision(&env.nodes, &n.name, n.rv).await {
            Ok(x) => x,
            Err(e) => {
                verdicts.fail(&n.name, format!("cannot find its opening revision: {e}"));
                continue;
            }
        };
        let opened_by = annotation(&at, "nodegate.dev/opened-by").unwrap_or_default();
        let unready = match unready_members_at(&env.pods, &n.name, rev, &members).await {
            Ok(u) => u,
            Err(e) => {
                verdicts.fail(&n.name, e);
                continue;
            }
        };
        let described: Vec<String> = unready.iter().map(|(_, d)| d.clone()).collect();
        if opened_by == "ready" && !unready.is_empty() {
            let names: Vec<&str> = unready.iter().map(|(m, _)| m.as_str()).collect();
            let mut why = Vec::new();
            let mut excused = None;
            for r in replicas {
                match r.journal_entries(&n.name).await {
                    Ok(journal) => match sent_before_the_change(&journal, &names) {
                        Ok(times) => {
                            excused = Some((r.name.clone(), times));
                            break;
                        }
                        Err(e) => why.push(format!("{}: {e}", r.name)),
                    },
                    Err(e) => why.push(e),
                }
            }
            match excused {
                Some((replica, (sent, withdrawn))) => faults.note(format!(
                    "{} opened at revision {rev} with {} no longer Ready: {replica} sent the \
                     untaint at {sent} and learned of the change at {withdrawn}",
                    n.name,
                    names.join(", ")
                )),
                None => verdicts.fail(
                    &n.name,
                    format!(
                        "opened by ready at revision {rev} while these expected members had no \
                         Ready pod on it: {} (and no journal shows the untaint sent before the \
                         change: {})",
                        described.join("; "),
                        why.join("; ")
                    ),
                ),
            }
        }
        by.insert(
            n.name.clone(),
            Opening {
                by: opened_by,
                unready: described,
            },
        );
    }
    by
}

fn opened_by(openings: &BTreeMap<String, Opening>) -> BTreeMap<&str, &str> {
    openings
        .iter()
        .map(|(n, o)| (n.as_str(), o.by.as_str()))
        .collect()
}

/// Moves the deadline of `node` to `deadline` (nodegate's deadline is
/// `nodegate.dev/gated-since` plus `--timeout`, and a new value of the
/// annotation is judged afresh: semantics.md §5.2).
async fn set_deadline(nodes: &Api<Node>, node: &str, deadline: Timestamp, timeout: Duration) {
    let since = deadline - jiff::SignedDuration::try_from(timeout).expect("timeout fits");
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"nodegate.dev/gated-since": since.to_string()}}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("set the gated-since of {node}: {e}"));
}

/// The deadline the gate of `node` holds, by the `/debug/nodes/NAME` of the
/// replica whose debug listener is `debug_addr`, if it has one.
async fn gate_deadline(debug_addr: &str, node: &str) -> Option<Timestamp> {
    let (_, body) = support::http_get(debug_addr, &format!("/debug/nodes/{node}"))
        .await
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["deadline"].as_str()?.parse().ok()
}

fn judge_openings(opened: &BTreeMap<String, Result<Instant, String>>, verdicts: &mut Verdicts) {
    for (node, r) in opened {
        if let Err(e) = r {
            verdicts.fail(node, e);
        }
    }
}

// Scenario 1 (its own file: this one is long enough).
#[path = "e2e_chaos/relist.rs"]
mod relist;

// Scenario 2 (its own file too).
#[path = "e2e_chaos/recreated.rs"]
mod recreated;

// Scenario 4: a leader change in the middle of a re-gate burst.
#[path = "e2e_chaos/regate.rs"]
mod regate;

// Scenario 5, the cluster-wide agent breakage (its own file).
#[path = "e2e_chaos/breakage.rs"]
mod breakage;

// Scenario 6: the replace budget under a burst of stuck nodes.
#[path = "e2e_chaos/replace.rs"]
mod replace;
// Scenario 7: a canary pod never leaks across a leader change.
#[path = "e2e_chaos/canary.rs"]
mod canary;

// Scenario 8: replace's owners when every lookup 404s, and across a leader
// kill after a person opened a marked node.
#[path = "e2e_chaos/owners.rs"]
mod owners;

/// 3. Two replicas; twenty nodes wait for a held DaemonSet, some carrying a
/// foreign taint and annotation. Their pods are released one after another
/// and the leader is SIGKILLed mid-burst. Every node opens by ready, with
/// one gate Event (none only for a node opened just before the kill), and
/// the foreign taint and annotation stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_mid_burst_opens_every_node_once() {
    /// Far beyond the scenario: every node opens by ready, and one that
    /// waits for its deadline fails the check (it does not decide the test's
    /// time, however slow the set-up).
    const TIMEOUT: Duration = Duration::from_secs(600);
    const N: usize = 20;
    let _took = Stopwatch::start("leader_killed_mid_burst_opens_every_node_once");
    let env = Env::new("chaos-leader").await;
    let faults = Faults::new(&env.cluster);
    create_daemonsets(&env, &[("cni", false), ("agent", true)]).await;
    let args: Vec<&str> = ELECTION
        .iter()
        .copied()
        .chain(["--timeout", "600s"])
        .collect();
    let mut a = Replica::start(&env.cluster, "nodegate-a", &args).await;
    a.wait_leader(Duration::from_secs(30)).await;
    let b = Replica::start(&env.cluster, "nodegate-b", &args).await;
    faults.note("nodegate-a leads, nodegate-b follows");

    // Every other node carries a foreign taint (before or after the gate's)
    // and annotation.
    let mut nodes = Vec::new();
    let mut foreign: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 1..=N {
        let name = format!("burst-{i:02}");
        let gate = (TAINT, "", "NoSchedule");
        let other = (FOREIGN_TAINT, "x", "NoSchedule");
        let soft = (FOREIGN_TAINT, "", "PreferNoSchedule");
        let taints: Vec<(&str, &str, &str)> = match i % 4 {
            1 => vec![other, gate],
            3 => vec![gate, soft, other],
            _ => vec![gate],
        };
        let mut node = fake_node(&name, &[], &taints);
        if i % 2 == 1 {
            node.metadata
                .annotations
                .get_or_insert_default()
                .insert(FOREIGN_ANNOTATION.into(), "chaos-test".into());
        }
        foreign.insert(
            name.clone(),
            taint_list(&node)
                .into_iter()
                .filter(|t| !t.starts_with(TAINT))
                .collect(),
        );
        nodes.push(create(&env, &node).await);
    }
    faults.note(format!("{N} gated nodes created"));
    wait_pods(&env, &nodes, &[("cni", true), ("agent", false)]).await;
    faults.note("cni Ready and agent held on every node");

    // The burst: agent released on one node after another.
    let releases = {
        let pods = env.pods.clone();
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        tokio::spawn(async move {
            for n in names {
                let pod = pod_of(&pods, "agent", &n).await;
                pods.patch(
                    &pod.metadata.name.expect("pod name"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {HOLD_LABEL: null}}})),
                )
                .await
                .expect("release agent");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    faults.note("burst: releasing agent on each node, 100 ms apart");
    let open_count = || async {
        env.nodes
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| {
                        n.metadata
                            .name
                            .as_deref()
                            .is_some_and(|x| x.starts_with("burst-"))
                            && !has_gate_taint(n)
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let waiting_since = Instant::now();
    let mut open = 0;
    while open < N / 4 && waiting_since.elapsed() < Duration::from_secs(10) {
        open = open_count().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        a.is_leader().await,
        Some(true),
        "nodegate-a no longer leads"
    );
    let killed_at = faults.at(Instant::now());
    faults.kill(&mut a);
    faults.note(format!("{open}/{N} nodes open at the kill"));
    releases.await.expect("releases");
    faults.note("every agent released");

    let promised = nodes
        .iter()
        .map(|n| (n.name.clone(), deadline_of(n.at, TIMEOUT) + GRACE))
        .collect();
    let opened = await_openings(&faults, &env.nodes, &promised).await;
    faults.note("every node open, or late");
    let mut verdicts = Verdicts::default();
    judge_openings(&opened, &mut verdicts);
    let openings =
        check_ready_openings(&env, &[&a, &b], &faults, &nodes, &opened, &mut verdicts).await;
    for (node, o) in &openings {
        if o.by != "ready" {
            verdicts.fail(
                node,
                format!(
                    "opened by {:?}: every member was Ready long before the deadline",
                    o.by
                ),
            );
        }
    }
    for n in &nodes {
        let now = env.node(&n.name).await;
        let kept: Vec<String> = taint_list(&now)
            .into_iter()
            .filter(|t| !t.starts_with(TAINT))
            .collect();
        if kept != foreign[&n.name] {
            verdicts.fail(
                &n.name,
                format!("foreign taints were {:?}, now {kept:?}", foreign[&n.name]),
            );
        }
        let i: usize = n.name["burst-".len()..].parse().expect("number");
        if i % 2 == 1 && annotation(&now, FOREIGN_ANNOTATION).as_deref() != Some("chaos-test") {
            verdicts.fail(&n.name, format!("annotation {FOREIGN_ANNOTATION} lost"));
        }
    }

    // Events: one per node, never two. The one exception the semantics
    // allow (docs/semantics.md §5.6): a node nodegate-a opened just
    // before it was killed, whose Event it did not get to record — its
    // opened-at (nodegate's clock) precedes the kill. Wait for the first
    // Event of each node nodegate-b opened (nodegate-a's lost ones never
    // come; no deadline here but the suite's), then a moment for any second
    // one.
    let opened_before_kill = |node: &Node| {
        annotation(node, "nodegate.dev/opened-at")
            .and_then(|t| t.parse::<Timestamp>().ok())
            .is_some_and(|t| faults.wall(t) <= killed_at)
    };
    let settle = Instant::now();
    loop {
        let mut missing = Vec::new();
        for n in &nodes {
            if gate_events(&env.cluster.client, &n.name, None)
                .await
                .is_empty()
                && !opened_before_kill(&env.node(&n.name).await)
            {
                missing.push(n.name.as_str());
            }
        }
        // A bound only so that a lost Event fails with the verdicts below
        // rather than by the binary's timeout.
        if missing.is_empty() || settle.elapsed() > Duration::from_secs(120) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut unrecorded = Vec::new();
    for n in &nodes {
        let events = gate_events(&env.cluster.client, &n.name, None).await;
        if events.is_empty() && opened_before_kill(&env.node(&n.name).await) {
            unrecorded.push(n.name.clone());
            continue;
        }
        if events.len() != 1 {
            verdicts.fail(
                &n.name,
                format!(
                    "{} gate Events, not 1: {:?}",
                    events.len(),
                    events
                        .iter()
                        .map(|e| format!(
                            "{} by {} at {:?}",
                            e.reason.as_deref().unwrap_or("?"),
                            e.reporting_instance.as_deref().unwrap_or("?"),
                            e.event_time.as_ref().map(|t| t.0)
                        ))
                        .collect::<Vec<_>>()
                ),
            );
        }
    }
    // Only a write in flight at the kill can lose its Event: with the
    // releases 100 ms apart, that is one node, two at most.
    if unrecorded.len() > 2 {
        for node in &unrecorded {
            verdicts.fail(
                node,
                format!(
                    "no gate Event; {} nodes opened before the kill lack one, more than \
                     the writes that can be in flight",
                    unrecorded.len()
                ),
            );
        }
    } else if !unrecorded.is_empty() {
        faults.note(format!(
            "no Event for {unrecorded:?}: opened by nodegate-a just before the kill"
        ));
    }
    verdicts.conclude(&[&a, &b], &faults).await;
}

/// 4. Two replicas; kube-apiserver is stopped eight times for 1.5 s
/// (SIGSTOP/SIGCONT), 0.8 s apart. The leader renews every retry period (1 s)
/// after its last renewal answered, so from the second stall on each renewal
/// starts 0.2 s into a stall and is answered at its end: the renew deadline
/// (3 s from the renewal's start) passes in the last ~0.6 s of the next
/// stall, and the renewal after lands in time again. Three nodes per stall
/// wait for a held DaemonSet with deadlines (set by
/// `nodegate.dev/gated-since`) in that last 0.6 s: their openings by timeout
/// are decided exactly while this replica does not lead. Two more nodes are
/// released between stalls and must open by ready. Every node is open by its
/// deadline, or by the end of the last stall when that is later, + 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_stalls_do_not_hold_nodes_past_their_deadline() {
    /// Every node's deadline is set by its `gated-since` once the plan is
    /// made; until then it is this far from its creation, out of reach.
    const TIMEOUT: Duration = Duration::from_secs(600);
    const STALLS: u32 = 8;
    const STALL: Duration = Duration::from_millis(1500);
    const PERIOD: Duration = Duration::from_millis(2300);
    /// Where, before a stall's end, the deadlines of its nodes fall.
    const BEFORE_END: [i64; 3] = [100, 250, 400];
    let _took = Stopwatch::start("apiserver_stalls_do_not_hold_nodes_past_their_deadline");
    let env = Env::new("chaos-stalls").await;
    let faults = Faults::new(&env.cluster);
    create_daemonsets(&env, &[("cni", false), ("agent", true)]).await;
    let args: Vec<&str> = ELECTION
        .iter()
        .copied()
        .chain(["--timeout", "600s"])
        .collect();
    let a = Replica::start(&env.cluster, "nodegate-a", &args).await;
    a.wait_leader(Duration::from_secs(30)).await;
    let b = Replica::start(&env.cluster, "nodegate-b", &args).await;
    faults.note("nodegate-a leads, nodegate-b follows");

    // The nodes first, with deadlines out of reach; then the plan, in
    // wall-clock time (stall j runs [start_j, start_j + STALL)), with each
    // node's deadline in it set by its gated-since. The plan starts as far
    // ahead as setting it took, measured: the nodes' creation says how long
    // a write takes here, and a plan whose first stall came before
    // nodegate-a held every planned deadline is made again further ahead.
    let mut names: Vec<String> = Vec::new();
    for j in 0..STALLS {
        for c in ['a', 'b', 'c'] {
            names.push(format!("stall-{}{c}", j + 1));
        }
    }
    names.extend(["ready-1".to_string(), "ready-2".to_string()]);
    let creating = Instant::now();
    let mut nodes = Vec::new();
    for name in &names {
        nodes.push(create(&env, &gated_node(name, &[])).await);
    }
    let writes = creating.elapsed();
    let ready_nodes: Vec<Created> = nodes
        .iter()
        .filter(|n| n.name.starts_with("ready-"))
        .cloned()
        .collect();
    wait_pods(&env, &ready_nodes, &[("cni", true), ("agent", false)]).await;
    faults.note(format!(
        "{} gated nodes created in {:.2}s, deadlines out of reach",
        nodes.len(),
        writes.as_secs_f64()
    ));
    let plan_for = |first_stall: Timestamp| {
        let stall_start =
            |j: u32| first_stall + jiff::SignedDuration::try_from(PERIOD * j).expect("fits");
        let stall_end =
            |j: u32| stall_start(j) + jiff::SignedDuration::try_from(STALL).expect("fits");
        let last_end = stall_end(STALLS - 1);
        // (name, exact deadline)
        let mut plan: Vec<(String, Timestamp)> = Vec::new();
        for j in 0..STALLS {
            for (k, ms) in BEFORE_END.iter().enumerate() {
                plan.push((
                    format!("stall-{}{}", j + 1, ['a', 'b', 'c'][k]),
                    stall_end(j) - jiff::SignedDuration::from_millis(*ms),
                ));
            }
        }
        for r in ["ready-1", "ready-2"] {
            plan.push((r.to_string(), last_end + jiff::SignedDuration::from_secs(4)));
        }
        plan
    };
    let debug_a = a.ng.debug_addr(Duration::from_secs(30));
    let mut lead = Duration::from_secs(1) + writes;
    let mut tries = 0;
    let (plan, first_stall) = loop {
        tries += 1;
        let first_stall = Timestamp::now() + jiff::SignedDuration::try_from(lead).expect("fits");
        let plan = plan_for(first_stall);
        let planning = Instant::now();
        for (name, deadline) in &plan {
            set_deadline(&env.nodes, name, *deadline, TIMEOUT).await;
        }
        // Until nodegate-a's gates hold the planned deadlines (its
        // /debug/nodes), or the first stall is due.
        let mut held = 0;
        while Timestamp::now() < first_stall {
            held = 0;
            for (name, deadline) in &plan {
                if gate_deadline(&debug_a, name).await.is_some_and(|d| {
                    d.duration_since(*deadline).abs() < jiff::SignedDuration::from_secs(1)
                }) {
                    held += 1;
                }
            }
            if held == plan.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if held == plan.len() && Timestamp::now() < first_stall {
            faults.note(format!(
                "planned {:.2}s ahead; nodegate-a holds every planned deadline",
                lead.as_secs_f64()
            ));
            break (plan, first_stall);
        }
        faults.note(format!(
            "planned {:.2}s ahead, too near: nodegate-a held {held} of {} planned deadlines \
             when the first stall was due; planning again, further ahead",
            lead.as_secs_f64(),
            plan.len()
        ));
        assert!(
            tries < 6,
            "nodegate-a never held the planned deadlines before the first stall, planned up \
             to {lead:?} ahead\n{}\n{}",
            faults.timeline(),
            a.ng.logs()
        );
        lead = lead * 2 + planning.elapsed() * 2;
    };
    let stall_start =
        |j: u32| first_stall + jiff::SignedDuration::try_from(PERIOD * j).expect("fits");
    let stall_end = |j: u32| stall_start(j) + jiff::SignedDuration::try_from(STALL).expect("fits");

    for j in 0..STALLS {
        tokio::time::sleep_until(instant_of(stall_start(j)).into()).await;
        let frozen = faults.freeze("kube-apiserver");
        tokio::time::sleep_until(instant_of(stall_end(j)).into()).await;
        frozen.thaw();
        if j == 2 {
            for n in ["ready-1", "ready-2"] {
                env.release("agent", n).await;
                faults.note(format!("agent released on {n}"));
            }
        }
    }
    let last_end = Instant::now();
    faults.note("last stall over");

    let promised = plan
        .iter()
        .map(|(n, deadline)| (n.clone(), instant_of(*deadline).max(last_end) + GRACE))
        .collect();
    let opened = await_openings(&faults, &env.nodes, &promised).await;
    faults.note("every node open, or late");
    let mut verdicts = Verdicts::default();
    judge_openings(&opened, &mut verdicts);
    let openings =
        check_ready_openings(&env, &[&a, &b], &faults, &nodes, &opened, &mut verdicts).await;
    for n in ["ready-1", "ready-2"] {
        if let Some(o) = openings.get(n)
            && o.by != "ready"
        {
            verdicts.fail(
                n,
                format!(
                    "every member was Ready from the fourth stall on, before the deadline, yet \
                     it opened by {:?}",
                    o.by
                ),
            );
        }
    }
    eprintln!("opened-by: {:?}", opened_by(&openings));
    for r in [&a, &b] {
        eprintln!("{} leadership:\n{}", r.name, r.leadership_lines(30));
    }
    verdicts.conclude(&[&a, &b], &faults).await;
}

/// The excuse `check_ready_openings` accepts, read from journals shaped as
/// `/debug/nodes/NAME` serves them: only an untaint by ready that was sent
/// before the gate saw the member stop being Ready, and asked back.
#[test]
fn an_opening_is_excused_only_when_the_change_came_after_the_send() {
    let entry = |at: u32, event: serde_json::Value| json!({"at": format!("t{at}"), "event": event});
    let sent = |at, by: &str, attempt: u32| {
        entry(
            at,
            json!({"untaint_sent": {"attempt": attempt, "opened_by": by,
            "resource_version": "7", "taints": [], "at": "t"}}),
        )
    };
    let waiting = |at, m: &str| {
        entry(
            at,
            json!({"member_waiting": {"member": m, "why": "not Ready"}}),
        )
    };
    let withdraw = |at, attempt: u32| {
        entry(
            at,
            json!({"withdraw_requested": {"attempt": attempt, "reason": "x"}}),
        )
    };
    let opened = |at, by: &str| {
        entry(
            at,
            json!({"opened": {"opened_by": by, "at": "t", "resource_version": "8"}}),
        )
    };
    let m = ["ns/cni"];

    let raced = [
        sent(1, "ready", 1),
        waiting(2, "ns/cni"),
        withdraw(3, 1),
        opened(4, "ready"),
    ];
    assert_eq!(
        sent_before_the_change(&raced, &m),
        Ok(("t1".to_string(), "t3".to_string()))
    );
    // The gate knew before it sent: the change is journalled before the send.
    let knew = [
        waiting(1, "ns/cni"),
        sent(2, "ready", 1),
        opened(3, "ready"),
    ];
    assert!(sent_before_the_change(&knew, &m).is_err());
    // A withdrawal of an earlier attempt does not excuse a later send.
    let earlier = [
        sent(1, "ready", 1),
        waiting(2, "ns/cni"),
        withdraw(3, 1),
        sent(4, "ready", 2),
        opened(5, "ready"),
    ];
    assert!(sent_before_the_change(&earlier, &m).is_err());
    // Another member's change does not excuse this one.
    let other = [
        sent(1, "ready", 1),
        waiting(2, "ns/csi"),
        withdraw(3, 1),
        opened(4, "ready"),
    ];
    assert!(sent_before_the_change(&other, &m).is_err());
    // An opening by timeout is not an opening by ready.
    let timeout = [
        sent(1, "timeout", 1),
        waiting(2, "ns/cni"),
        withdraw(3, 1),
        opened(4, "timeout"),
    ];
    assert!(sent_before_the_change(&timeout, &m).is_err());
}
