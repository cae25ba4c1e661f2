//! From the run's record to the result: latency percentiles, correctness
//! counts, API cost and resource use, as JSON and as a printed table.
//!
//! Definitions (docs/benchmarks.md repeats them for readers):
//! - *reaction*: for a node that opened with every expected DaemonSet Ready,
//!   the time between receiving the watch event of the last expected pod
//!   turning Ready and receiving the node event without the taint;
//! - *gate*: first sighting of the node → sighting without the taint;
//! - *premature*: the taint was gone at a revision where some expected pod was
//!   not Ready, before the node's deadline (creationTimestamp + timeout);
//! - *deadline error*: for nodes that opened without every pod Ready, the
//!   sighting of the open minus the deadline.
//!
//! The printed table is in `table`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::observe::{NodeRecord, Record, Sighting};
use crate::procstat::Usage;
use crate::proxy::RequestKey;
use crate::workload::expected_on;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentiles of `values` (milliseconds).
pub fn percentiles(values: &[f64]) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    };
    Percentiles {
        count: v.len(),
        p50: round(at(50.0)),
        p90: round(at(90.0)),
        p99: round(at(99.0)),
        max: round(v[v.len() - 1]),
    }
}

pub fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn signed_ms(d: SignedDuration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub nodes: usize,
    pub daemonsets: usize,
    pub stuck_nodes: usize,
    pub unrelated_pods: usize,
    pub controller: String,
    pub taint: String,
    pub timeout_s: f64,
    pub ready_after: String,
    pub ready_after_max: String,
    pub kwok_parallelism: u32,
    /// "bench" (tests/scale/kwok-stages.yaml: one status patch per pod) or
    /// "deploy/local" (its three per pod).
    pub kwok_stages: String,
    /// kwok's node heartbeat with the benchmark's stages, and the node grace
    /// period kube-controller-manager was given to match (seconds).
    pub kwok_heartbeat_s: Option<f64>,
    pub node_monitor_grace_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApiRow {
    pub verb: String,
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    pub codes: BTreeMap<u16, u64>,
    pub total: u64,
    pub per_node: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Correctness {
    pub premature_opens: usize,
    pub never_opened: usize,
    /// Nodes (not among the stuck ones) that opened at their deadline because
    /// their pods were not all Ready in time: the control plane was too slow
    /// for the timeout, not a controller error.
    pub opened_at_deadline_not_stuck: usize,
    /// Stuck nodes that opened with every expected pod Ready (cannot happen
    /// unless the hold label failed).
    pub stuck_opened_ready: usize,
    pub retainted: usize,
    /// Of the premature opens, those where every expected DaemonSet had been
    /// Ready at some revision before the open and one stopped being Ready
    /// while the controller's write was on its way (a race no watch-based
    /// controller can close: the conditional patch can only test the node).
    pub premature_after_all_ready: usize,
    /// The node event without the taint arrived before the pod event that
    /// made it openable (separate watch streams); reaction counted as 0.
    pub watch_order_inversions: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Result {
    pub config: RunConfig,
    pub machine: BTreeMap<String, String>,
    pub reaction_ms: Percentiles,
    pub gate_ms: Percentiles,
    /// Gate duration of the nodes that opened because everything was Ready.
    pub gate_ready_ms: Percentiles,
    /// Join → a pod of every expected DaemonSet exists on the node (the
    /// DaemonSet controller's part).
    pub pods_created_ms: Percentiles,
    /// Join → every expected pod Ready (the rest of the control plane and
    /// kwok's ready delay), for nodes that opened by Ready.
    pub pods_ready_ms: Percentiles,
    /// Deadline accuracy: open sighting − (creationTimestamp + timeout).
    pub deadline_error_ms: Percentiles,
    pub deadline_error_ms_min: f64,
    pub deadline_error_ms_max: f64,
    pub premature_opens: usize,
    pub never_opened: usize,
    /// Nodes that opened with every expected DaemonSet Ready, and nodes that
    /// opened at their deadline (the stuck ones, plus any the control plane
    /// did not make Ready in time: `correctness.opened_at_deadline_not_stuck`).
    pub opened_by_ready: usize,
    pub opened_at_deadline: usize,
    pub correctness: Correctness,
    pub premature: Vec<Premature>,
    /// Writes (create, update, patch; any subresource) the controller sent
    /// to nodes, per benchmark node.
    pub node_writes_per_node: f64,
    pub node_writes: u64,
    /// Single-node GETs by the controller.
    pub node_gets: u64,
    /// 409 and 422 answers to the controller's writes.
    pub conflicts: u64,
    pub controller_requests: Vec<ApiRow>,
    pub controller_user_agents: BTreeMap<String, u64>,
    /// Non-watch requests by the controller per benchmark node.
    pub controller_requests_per_node: f64,
    pub controller_peak_rss_mib: f64,
    pub controller_cpu_s: f64,
    /// Controller CPU over its life per benchmark node, in milliseconds.
    pub controller_cpu_ms_per_node: f64,
    pub controller: Usage,
    pub control_plane: BTreeMap<String, Usage>,
    pub driver: Option<Usage>,
    /// Every client's requests during the measurement, from
    /// apiserver_request_total (top rows).
    pub apiserver_requests: Vec<(crate::metrics::Key, f64)>,
    pub apiserver_request_total_labels: Vec<String>,
    /// How long kube-apiserver took to serve node PATCHes during the
    /// measurement, every client's (the controller's untaint patches among
    /// them): the floor under any reaction time.
    pub apiserver_node_patch_ms: Option<crate::metrics::BucketQuantiles>,
    /// The floor under the reaction, probed in the same run (`floor`), and
    /// each opening's reaction over it.
    pub floor: Option<crate::floor::Summary>,
    /// The controller's own histograms, when it serves nodegate's metrics
    /// at `{http_addr}`.
    pub controller_own: Option<crate::floor::OwnShare>,
    /// Seconds from the first node create to the last open sighting.
    pub wall_s: f64,
    pub create_s: f64,
    pub pod_events: u64,
    pub node_events: u64,
    pub watch_errors: u64,
}

/// Readiness of one pod as of revision `rv`: the last transition at or
/// before it, with the sighting that brought it.
fn pod_ready_as_of(seq: &[(Sighting, bool)], rv: u64) -> Option<Sighting> {
    let (s, ready) = seq
        .iter()
        .filter(|(s, _)| s.rv <= rv)
        .max_by_key(|(s, _)| s.rv)?;
    ready.then_some(*s)
}

/// Whether a DaemonSet had a Ready pod on the node as of revision `rv`, and
/// since when (the earliest sighting among its pods Ready then).
fn ready_as_of(pods: Option<&HashMap<String, Vec<(Sighting, bool)>>>, rv: u64) -> Option<Sighting> {
    pods?
        .values()
        .filter_map(|seq| pod_ready_as_of(seq, rv))
        .min_by_key(|s| s.rv)
}

/// What the record says about a node that opened too early, for diagnosis.
#[derive(Debug, Clone, Serialize)]
pub struct Premature {
    pub node: String,
    pub open_rv: u64,
    pub opened_by: Option<String>,
    pub deadline: Option<Timestamp>,
    pub opened_at: Timestamp,
    /// DaemonSet → pod uid → [(rv, ready)].
    pub pods: BTreeMap<String, BTreeMap<String, Vec<(u64, bool)>>>,
    /// For each expected DaemonSet without a Ready pod at the open: how long
    /// before the open sighting its last pod stopped being Ready (or was
    /// first seen not Ready). A few milliseconds means a pod flapped while the
    /// controller's write was on its way (something else — kube-controller-
    /// manager marking pods NotReady on a node it thinks is unreachable —
    /// changed it); seconds mean the controller decided on a wrong view.
    pub not_ready_for_ms: BTreeMap<String, Option<f64>>,
}

pub struct Inputs<'a> {
    pub config: RunConfig,
    pub machine: BTreeMap<String, String>,
    pub record: &'a Record,
    pub timeout: Duration,
    pub proxy: (BTreeMap<RequestKey, u64>, BTreeMap<String, u64>),
    pub controller: Usage,
    pub control_plane: BTreeMap<String, Usage>,
    pub driver: Option<Usage>,
    pub apiserver: BTreeMap<crate::metrics::Key, f64>,
    pub apiserver_labels: Vec<String>,
    pub apiserver_node_patch: Option<crate::metrics::BucketQuantiles>,
    pub create_started: std::time::Instant,
    pub create_s: f64,
    pub floor: Option<&'a crate::floor::Samples>,
    pub controller_own: Option<crate::floor::OwnShare>,
}

pub fn compute(i: Inputs<'_>) -> Result {
    let d = i.config.daemonsets;
    let timeout = SignedDuration::try_from(i.timeout).unwrap_or(SignedDuration::MAX);
    let mut reaction = Vec::new();
    let mut reaction_by_node = HashMap::new();
    let mut gate = Vec::new();
    let mut gate_ready = Vec::new();
    let mut deadline_err = Vec::new();
    let mut pods_created = Vec::new();
    let mut pods_ready = Vec::new();
    let mut c = Correctness {
        premature_opens: 0,
        never_opened: 0,
        opened_at_deadline_not_stuck: 0,
        stuck_opened_ready: 0,
        retainted: 0,
        watch_order_inversions: 0,
        premature_after_all_ready: 0,
    };
    let mut last_open = i.create_started;
    let bench: Vec<(&String, &NodeRecord)> = i
        .record
        .nodes
        .iter()
        .filter(|(name, n)| name.starts_with("bench-") && n.added.is_some())
        .collect();
    let mut premature = Vec::new();
    for (name, n) in &bench {
        if n.retainted {
            c.retainted += 1;
        }
        let (Some(open), Some(added)) = (n.opened, n.added) else {
            if !n.deleted {
                c.never_opened += 1;
            }
            continue;
        };
        last_open = last_open.max(open.at);
        gate.push(ms(open.at.saturating_duration_since(added.at)));
        let expected = expected_on(n.stuck, d);
        let created: Option<Vec<_>> = expected.iter().map(|ds| n.ds_created.get(ds)).collect();
        if let Some(last) = created.and_then(|c| c.into_iter().max()) {
            pods_created.push(ms(last.saturating_duration_since(added.at)));
        }
        let readies: Vec<Option<Sighting>> = expected
            .iter()
            .map(|ds| ready_as_of(n.ds.get(ds), open.rv))
            .collect();
        let deadline = n
            .created
            .and_then(|t| t.checked_add(timeout).ok())
            .unwrap_or(Timestamp::MAX);
        if readies.iter().all(Option::is_some) {
            if n.stuck {
                c.stuck_opened_ready += 1;
            }
            let last = readies.iter().flatten().map(|s| s.at).max();
            if let Some(last) = last {
                pods_ready.push(ms(last.saturating_duration_since(added.at)));
                if open.at < last {
                    c.watch_order_inversions += 1;
                    reaction.push(0.0);
                    reaction_by_node.insert((*name).clone(), 0.0);
                } else {
                    reaction.push(ms(open.at - last));
                    reaction_by_node.insert((*name).clone(), ms(open.at - last));
                }
            }
            gate_ready.push(ms(open.at.saturating_duration_since(added.at)));
        } else if open.wall < deadline {
            c.premature_opens += 1;
            let all_ready_once = expected
                .iter()
                .filter_map(|ds| n.ds.get(ds))
                .flat_map(|pods| pods.values().flatten())
                .filter(|(s, ready)| *ready && s.rv <= open.rv)
                .any(|(s, _)| {
                    expected
                        .iter()
                        .all(|ds| ready_as_of(n.ds.get(ds), s.rv).is_some())
                });
            if all_ready_once {
                c.premature_after_all_ready += 1;
            }
            let not_ready_for_ms = expected
                .iter()
                .zip(&readies)
                .filter(|(_, r)| r.is_none())
                .map(|(ds, _)| {
                    let since = n.ds.get(ds).and_then(|pods| {
                        pods.values()
                            .filter_map(|seq| {
                                seq.iter()
                                    .filter(|(s, _)| s.rv <= open.rv)
                                    .max_by_key(|(s, _)| s.rv)
                                    .map(|(s, _)| s.at)
                            })
                            .max()
                    });
                    (
                        ds.clone(),
                        since.map(|t| ms(open.at.saturating_duration_since(t))),
                    )
                })
                .collect();
            premature.push(Premature {
                not_ready_for_ms,
                node: (*name).clone(),
                open_rv: open.rv,
                opened_by: n.opened_by.clone(),
                deadline: n.created.and_then(|t| t.checked_add(timeout).ok()),
                opened_at: open.wall,
                pods: n
                    .ds
                    .iter()
                    .map(|(ds, pods)| {
                        let pods = pods
                            .iter()
                            .map(|(uid, seq)| {
                                (uid.clone(), seq.iter().map(|(s, r)| (s.rv, *r)).collect())
                            })
                            .collect();
                        (ds.clone(), pods)
                    })
                    .collect(),
            });
        } else {
            if !n.stuck {
                c.opened_at_deadline_not_stuck += 1;
            }
            deadline_err.push(signed_ms(open.wall.duration_since(deadline)));
        }
    }

    let (requests, agents) = i.proxy;
    let n = i.config.nodes.max(1) as f64;
    let mut rows: BTreeMap<(String, String, String), ApiRow> = BTreeMap::new();
    for (k, v) in &requests {
        let row = rows
            .entry((k.verb.clone(), k.resource.clone(), k.subresource.clone()))
            .or_insert_with(|| ApiRow {
                verb: k.verb.clone(),
                resource: k.resource.clone(),
                subresource: k.subresource.clone(),
                codes: BTreeMap::new(),
                total: 0,
                per_node: 0.0,
            });
        *row.codes.entry(k.code).or_insert(0) += v;
        row.total += v;
    }
    let mut rows: Vec<ApiRow> = rows
        .into_values()
        .map(|mut r| {
            r.per_node = (r.total as f64 / n * 1000.0).round() / 1000.0;
            r
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.total));
    let is_write = |v: &str| matches!(v, "create" | "update" | "patch");
    let node_writes: u64 = requests
        .iter()
        .filter(|(k, _)| k.resource == "nodes" && is_write(&k.verb))
        .map(|(_, v)| v)
        .sum();
    let node_gets: u64 = requests
        .iter()
        .filter(|(k, _)| k.resource == "nodes" && k.verb == "get")
        .map(|(_, v)| v)
        .sum();
    let conflicts: u64 = requests
        .iter()
        .filter(|(k, _)| is_write(&k.verb) && (k.code == 409 || k.code == 422))
        .map(|(_, v)| v)
        .sum();
    let non_watch: u64 = requests
        .iter()
        .filter(|(k, _)| k.verb != "watch")
        .map(|(_, v)| v)
        .sum();

    let mut apiserver: Vec<(crate::metrics::Key, f64)> = i.apiserver.into_iter().collect();
    apiserver.sort_by(|a, b| b.1.total_cmp(&a.1));
    apiserver.truncate(25);

    let errs = deadline_err;
    let controller_cpu_s = i.controller.cpu_s;
    Result {
        floor: i
            .floor
            .map(|f| crate::floor::summarise(f, &reaction_by_node)),
        controller_own: i.controller_own,
        opened_by_ready: gate_ready.len(),
        opened_at_deadline: errs.len(),
        controller_cpu_ms_per_node: round(controller_cpu_s * 1000.0 / n),
        reaction_ms: percentiles(&reaction),
        gate_ms: percentiles(&gate),
        gate_ready_ms: percentiles(&gate_ready),
        pods_created_ms: percentiles(&pods_created),
        pods_ready_ms: percentiles(&pods_ready),
        deadline_error_ms: percentiles(&errs),
        deadline_error_ms_min: errs.iter().copied().reduce(f64::min).map_or(0.0, round),
        deadline_error_ms_max: errs.iter().copied().reduce(f64::max).map_or(0.0, round),
        premature_opens: c.premature_opens,
        never_opened: c.never_opened,
        node_writes_per_node: (node_writes as f64 / n * 1000.0).round() / 1000.0,
        node_writes,
        node_gets,
        conflicts,
        controller_requests: rows,
        controller_user_agents: agents,
        controller_requests_per_node: (non_watch as f64 / n * 1000.0).round() / 1000.0,
        controller_peak_rss_mib: round(
            i.controller
                .vm_hwm_mib
                .unwrap_or(0.0)
                .max(i.controller.peak_rss_mib),
        ),
        controller_cpu_s: (i.controller.cpu_s * 100.0).round() / 100.0,
        controller: i.controller,
        control_plane: i.control_plane,
        driver: i.driver,
        apiserver_requests: apiserver,
        apiserver_request_total_labels: i.apiserver_labels,
        apiserver_node_patch_ms: i.apiserver_node_patch,
        wall_s: round(last_open.duration_since(i.create_started).as_secs_f64()),
        create_s: round(i.create_s),
        pod_events: i.record.pod_events,
        node_events: i.record.node_events,
        watch_errors: i.record.watch_errors,
        correctness: c,
        premature,
        config: i.config,
        machine: i.machine,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = percentiles(&v);
        assert_eq!(
            (p.p50, p.p90, p.p99, p.max, p.count),
            (50.0, 90.0, 99.0, 100.0, 100)
        );
        let one = percentiles(&[7.0]);
        assert_eq!((one.p50, one.p99, one.max), (7.0, 7.0, 7.0));
        assert_eq!(percentiles(&[]).count, 0);
    }

    #[test]
    fn readiness_is_judged_at_the_revision_of_the_open() {
        let s = |rv| Sighting {
            at: std::time::Instant::now(),
            wall: Timestamp::UNIX_EPOCH,
            rv,
        };
        let seq = vec![(s(10), false), (s(20), true), (s(30), false), (s(40), true)];
        assert!(pod_ready_as_of(&seq, 15).is_none());
        assert_eq!(pod_ready_as_of(&seq, 25).map(|x| x.rv), Some(20));
        assert!(pod_ready_as_of(&seq, 35).is_none());
        assert_eq!(pod_ready_as_of(&seq, 99).map(|x| x.rv), Some(40));
        assert!(ready_as_of(None, 99).is_none());
    }

    #[test]
    fn a_daemonset_is_ready_while_any_of_its_pods_is() {
        let s = |rv| Sighting {
            at: std::time::Instant::now(),
            wall: Timestamp::UNIX_EPOCH,
            rv,
        };
        // Pod a turns Ready at 20; a duplicate b appears not Ready at 25 and
        // is deleted at 40.
        let pods = HashMap::from([
            ("a".to_string(), vec![(s(10), false), (s(20), true)]),
            ("b".to_string(), vec![(s(25), false)]),
        ]);
        assert!(ready_as_of(Some(&pods), 15).is_none());
        assert_eq!(ready_as_of(Some(&pods), 30).map(|x| x.rv), Some(20));
    }
}
