//! The chaos tests' checks, by what the API shows: when each node opened,
//! the revision at which its gate's taint went and which members were not
//! Ready then, and nodegate's Events (re-exported by `chaos`).

use super::super::gate;
use super::*;

/// The wall-clock deadline of a node created at `created` (its
/// creationTimestamp, cut to the second, so the true deadline lies up to a
/// second later), as an `Instant`: the latest moment the deadline can be.
pub fn deadline_of(created: Timestamp, timeout: Duration) -> Instant {
    instant_of(
        created
            + jiff::SignedDuration::try_from(timeout + Duration::from_secs(1))
                .expect("timeout fits"),
    )
}

/// A wall-clock time as an `Instant` of this process.
pub fn instant_of(t: Timestamp) -> Instant {
    let ahead = t.duration_since(Timestamp::now());
    if ahead.is_negative() {
        Instant::now() - Duration::try_from(ahead.abs()).unwrap_or_default()
    } else {
        Instant::now() + Duration::try_from(ahead).unwrap_or_default()
    }
}

/// Polls the nodes until each named node is open (no gate taint), or the
/// instant promised for it has passed. A node counts as late only when a
/// list *sent* after its promise still shows the taint (a list that hangs
/// across the promise, e.g. while the API server is stopped, proves
/// nothing), and sent later than the promise by more than the round trip
/// of the list before it: nodegate's own write takes a round trip of the
/// same API server, which a loaded machine makes slower, so the promise
/// stretches by what the API server's answers measure, not by a guess.
/// Returns, per node, when it was first seen open or what the late list
/// showed.
pub async fn await_openings(
    faults: &Faults,
    nodes: &Api<Node>,
    promised: &BTreeMap<String, Instant>,
) -> BTreeMap<String, Result<Instant, String>> {
    let mut seen: BTreeMap<String, Result<Instant, String>> = BTreeMap::new();
    let mut round_trip = Duration::ZERO;
    while seen.len() < promised.len() {
        let sent = Instant::now();
        let listed =
            tokio::time::timeout(Duration::from_secs(5), nodes.list(&ListParams::default())).await;
        let took = sent.elapsed();
        let slack = round_trip;
        if let Ok(Ok(list)) = listed {
            round_trip = took;
            let by_name: BTreeMap<&str, &Node> = list
                .items
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
                .collect();
            for (name, by) in promised {
                if seen.contains_key(name) {
                    continue;
                }
                match by_name.get(name.as_str()) {
                    Some(n) if !has_gate_taint(n) => {
                        let opened_at = gate::annotation(n, "nodegate.dev/opened-at")
                            .and_then(|t| t.parse::<Timestamp>().ok())
                            .map_or("?".to_string(), |t| format!("{:.2}s", faults.wall(t)));
                        faults.note(format!(
                            "{name} seen open: by {}, opened-at {opened_at} by nodegate's \
                             clock; promised by {:.2}s",
                            gate::annotation(n, "nodegate.dev/opened-by").unwrap_or_default(),
                            faults.at(*by)
                        ));
                        seen.insert(name.clone(), Ok(Instant::now()));
                    }
                    state if sent > *by + slack => {
                        let late = sent.duration_since(*by);
                        faults.note(format!(
                            "{name} still closed in a list sent after {:.2}s, the instant \
                             promised for it (+{:.2}s, the last list's round trip)",
                            faults.at(*by),
                            slack.as_secs_f64()
                        ));
                        seen.insert(
                            name.clone(),
                            Err(format!(
                                "still closed in a list sent {:.1}s after the instant \
                                 promised for it: {}",
                                late.as_secs_f64(),
                                state.map_or("the node is gone".to_string(), |n| {
                                    format!("taints {:?}", taint_list(n))
                                })
                            )),
                        );
                    }
                    _ => {}
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

pub fn taint_list(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    format!(
                        "{}{}:{}",
                        t.key,
                        t.value
                            .as_ref()
                            .map(|v| format!("={v}"))
                            .unwrap_or_default(),
                        t.effect
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn rv_of(n: &Node) -> u64 {
    n.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("node without a numeric resourceVersion: {:?}", n.metadata))
}

/// The node as it was at revision `rv` (a list at that exact
/// resourceVersion), `None` if it did not exist then.
pub async fn node_at(nodes: &Api<Node>, name: &str, rv: u64) -> Result<Option<Node>, String> {
    let lp = ListParams::default()
        .fields(&format!("metadata.name={name}"))
        .at(&rv.to_string())
        .matching(VersionMatch::Exact);
    nodes
        .list(&lp)
        .await
        .map(|l| l.items.into_iter().next())
        .map_err(|e| format!("list node {name} at revision {rv}: {e}"))
}

/// The revision at which the gate's taint left the node `name` (the first
/// revision after `from` at which the node has none), and the node then.
/// Bisects over exact-revision lists, so it needs no watch that saw it.
pub async fn opening_revision(
    nodes: &Api<Node>,
    name: &str,
    from: u64,
) -> Result<(u64, Node), String> {
    let now = nodes
        .get(name)
        .await
        .map_err(|e| format!("get node {name}: {e}"))?;
    if has_gate_taint(&now) {
        return Err(format!("{name} still carries {TAINT}"));
    }
    let (mut lo, mut hi, mut at_hi) = (from, rv_of(&now), now);
    // Invariant: closed (or absent) at lo, open at hi.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match node_at(nodes, name, mid).await? {
            Some(n) if !has_gate_taint(&n) => {
                hi = mid;
                at_hi = n;
            }
            _ => lo = mid,
        }
    }
    Ok((hi, at_hi))
}

/// The DaemonSets of the test namespace: (namespace/name, uid).
pub async fn daemonset_uids(client: &Client) -> Vec<(String, String)> {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .expect("list daemonsets")
        .items
        .into_iter()
        .map(|d| {
            (
                format!("{NS}/{}", d.metadata.name.unwrap_or_default()),
                d.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}

/// At revision `rv`, the members (`(name, DaemonSet uid)`) that had no pod
/// on `node` Ready by semantics.md §4 (controller owner with the
/// DaemonSet's uid, not terminating, Running, Ready; no minReadySeconds in
/// these tests), each with what its pods were.
pub async fn unready_members_at(
    pods: &Api<Pod>,
    node: &str,
    rv: u64,
    members: &[(String, String)],
) -> Result<Vec<(String, String)>, String> {
    let lp = ListParams::default()
        .fields(&format!("spec.nodeName={node}"))
        .at(&rv.to_string())
        .matching(VersionMatch::Exact);
    let listed = pods
        .list(&lp)
        .await
        .map_err(|e| format!("list pods on {node} at revision {rv}: {e}"))?;
    let mut unready = Vec::new();
    for (member, uid) in members {
        let mine: Vec<&Pod> = listed
            .items
            .iter()
            .filter(|p| {
                p.metadata.owner_references.as_ref().is_some_and(|os| {
                    os.iter()
                        .any(|o| o.controller == Some(true) && &o.uid == uid)
                })
            })
            .collect();
        if !mine.iter().any(|p| pod_ready(p)) {
            let states: Vec<String> = mine.iter().map(|p| pod_state(p)).collect();
            unready.push((member.clone(), format!("{member} (pods: {states:?})")));
        }
    }
    Ok(unready)
}

/// Whether a gate's journal (the entries of `/debug/nodes/NAME`) shows an
/// opening by readiness that was already sent when the gate learned that
/// `members` had stopped being Ready: between the last `untaint_sent` by
/// `ready` and the `opened` that followed it, a `member_waiting` for each of
/// `members` and a `withdraw_requested` of the same attempt. A patch already
/// sent cannot be called back (docs/semantics.md §5.4: "a patch not yet sent
/// is dropped or withdrawn"), so the node opened on what was true when the
/// gate sent it. Returns when the untaint was sent and when the withdrawal
/// was asked, or why the journal does not show that.
pub fn sent_before_the_change(
    journal: &[Value],
    members: &[&str],
) -> Result<(String, String), String> {
    let kind = |e: &Value, k: &str| e["event"].get(k).cloned();
    let opened = journal
        .iter()
        .rposition(|e| kind(e, "opened").is_some_and(|o| o["opened_by"] == "ready"))
        .ok_or("the journal shows no opening by ready")?;
    let sent = journal[..opened]
        .iter()
        .rposition(|e| kind(e, "untaint_sent").is_some())
        .ok_or("the journal shows no untaint sent before the opening")?;
    let untaint = kind(&journal[sent], "untaint_sent").unwrap_or_default();
    if untaint["opened_by"] != "ready" {
        return Err(format!(
            "the last untaint sent was by {}",
            untaint["opened_by"]
        ));
    }
    let after = &journal[sent + 1..opened];
    let withdrawn = after
        .iter()
        .find(|e| kind(e, "withdraw_requested").is_some_and(|w| w["attempt"] == untaint["attempt"]))
        .ok_or("no withdrawal of the sent untaint: the gate opened on what it knew")?;
    for m in members {
        let waited = after
            .iter()
            .any(|e| kind(e, "member_waiting").is_some_and(|w| w["member"].as_str() == Some(m)));
        if !waited {
            return Err(format!(
                "{m} was not seen waiting after the untaint was sent"
            ));
        }
    }
    let at = |e: &Value| e["at"].as_str().unwrap_or("?").to_string();
    Ok((at(&journal[sent]), at(withdrawn)))
}

pub fn pod_ready(p: &Pod) -> bool {
    let status = p.status.as_ref();
    p.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_state(p: &Pod) -> String {
    let status = p.status.as_ref();
    format!(
        "{} phase={} ready={}{}",
        p.metadata.name.as_deref().unwrap_or("?"),
        status.and_then(|s| s.phase.as_deref()).unwrap_or("-"),
        pod_ready(p),
        if p.metadata.deletion_timestamp.is_some() {
            " terminating"
        } else {
            ""
        }
    )
}

/// nodegate's gate Events (GateOpened, GateTimedOut) regarding `node`, in
/// `default`; with `uid`, only those about that incarnation of the node.
pub async fn gate_events(client: &Client, node: &str, uid: Option<&str>) -> Vec<KubeEvent> {
    let api: Api<KubeEvent> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| {
                    let r = e.regarding.as_ref();
                    r.and_then(|r| r.name.as_deref()) == Some(node)
                        && uid.is_none_or(|u| r.and_then(|r| r.uid.as_deref()) == Some(u))
                        && matches!(e.reason.as_deref(), Some("GateOpened" | "GateTimedOut"))
                })
                .collect()
        })
        .unwrap_or_default()
}
