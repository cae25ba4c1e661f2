//! The floor under a reaction, measured in the same run.
//!
//! A reaction as the driver sees it (last expected pod Ready → node without
//! the taint, both as its own watches deliver them) holds what no controller
//! can avoid: its untaint PATCH going through the proxy to the API server and
//! back, and a watch delivering a change. So for each opening, the moment the
//! driver sees it, a probe does the same things itself, under the same load:
//!
//! - **the PATCH**: a conditional JSON patch of the opened node, the shape of
//!   nodegate's untaint (a `test` of the resourceVersion and an annotation
//!   `add`), sent through a second instance of the counting proxy (the same
//!   code and loopback hop as the controller's, kept apart so that the
//!   controller's counts stay its own); `patch_ms` is send → answer;
//! - **the watch delivery of the pod update that completed the node**: a
//!   metadata write (annotation `nodegate.bench/probe`) on that very pod,
//!   through the same proxy; `pod_delivery_ms` is the write's answer → the
//!   driver's pod watch delivering that resourceVersion (`pod_patch_ms`:
//!   send → answer of that write);
//! - and, to check the two against each other, `node_delivery_ms`: the node
//!   write's answer → the driver's node watch delivering it.
//!
//! The floor of one opening is `patch_ms + node_delivery_ms`: a PATCH like
//! the controller's, sent when the driver sees the opening, until the
//! driver's node watch delivers it — exactly the span of a reaction after a
//! controller with no cost of its own received the pod event. The pod
//! update's delivery is not added: the driver's reaction starts when its own
//! pod watch delivers that update, so its lag is already behind the start
//! (measured in the first run: at load, the pod watch lagged hundreds of
//! milliseconds, and adding it made the floor exceed nodegate's reactions).
//! The report subtracts the floor from that opening's reaction: what is left
//! over is the controller's own share plus whatever of the API server's
//! variance fell on it rather than on the probe.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde_json::json;

use crate::observe::{Record, Sighting};
use crate::workload::{NAMESPACE, expected_on};

/// One opening's probe.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub node: String,
    pub patch_ms: f64,
    pub node_delivery_ms: Option<f64>,
    pub pod_patch_ms: Option<f64>,
    pub pod_delivery_ms: Option<f64>,
}

impl Sample {
    /// The PATCH's answer plus its own change's delivery on the node watch:
    /// send → the driver seeing the write, as it sees a controller's
    /// untaint.
    pub fn floor_ms(&self) -> Option<f64> {
        Some(self.patch_ms + self.node_delivery_ms?)
    }
}

/// The probes so far, and those that failed (a 409/422 because the node
/// moved on between the sighting and the probe, or an error).
#[derive(Debug, Default)]
pub struct Samples {
    pub ok: Vec<Sample>,
    pub failed: u64,
}

/// Probes each opening as the record shows it, at most `parallel` at a time,
/// until the task is aborted.
pub fn start(
    client: kube::Client,
    record: Arc<Mutex<Record>>,
    daemonsets: usize,
    samples: Arc<Mutex<Samples>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let slots = Arc::new(tokio::sync::Semaphore::new(16));
        let mut probed: HashSet<String> = HashSet::new();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let due = due(&record, &mut probed, daemonsets);
            for (node, rv, pod) in due {
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                let (client, record, samples) =
                    (client.clone(), Arc::clone(&record), Arc::clone(&samples));
                tokio::spawn(async move {
                    let s = probe(&client, &record, &node, rv, pod).await;
                    let mut out = crate::lock(&samples);
                    match s {
                        Some(s) => out.ok.push(s),
                        None => out.failed += 1,
                    }
                    drop(permit);
                });
            }
        }
    })
}

/// Nodes that opened since the last look: (name, resourceVersion of the
/// open, the pod that completed it as (uid, name)).
type Due = (String, u64, Option<(String, String)>);

fn due(record: &Mutex<Record>, probed: &mut HashSet<String>, daemonsets: usize) -> Vec<Due> {
    let r = crate::lock(record);
    let mut out = Vec::new();
    for (name, n) in &r.nodes {
        let Some(open) = n.opened else { continue };
        if n.deleted || !probed.insert(name.clone()) {
            continue;
        }
        // The pod whose Ready sighting came last among the expected ones.
        let last = expected_on(n.stuck, daemonsets)
            .iter()
            .filter_map(|ds| n.ds.get(ds))
            .flat_map(|pods| pods.iter())
            .filter_map(|(uid, seq)| {
                let (s, ready) = seq
                    .iter()
                    .filter(|(s, _)| s.rv <= open.rv)
                    .max_by_key(|(s, _)| s.rv)?;
                ready.then_some((s.at, uid))
            })
            .max_by_key(|(at, _)| *at)
            .and_then(|(_, uid)| Some((uid.clone(), r.pod_names.get(uid)?.clone())));
        out.push((name.clone(), n.last.map_or(open.rv, |l| l.rv), last));
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn probe(
    client: &kube::Client,
    record: &Mutex<Record>,
    node: &str,
    rv: u64,
    pod: Option<(String, String)>,
) -> Option<Sample> {
    let nodes: Api<Node> = Api::all(client.clone());
    let ops = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv.to_string()},
        {"op": "add", "path": "/metadata/annotations/nodegate.bench~1probe", "value": "1"},
    ]);
    let ops: json_patch::Patch = serde_json::from_value(ops).ok()?;
    let sent = Instant::now();
    let answer = nodes
        .patch(node, &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .ok()?;
    let answered = Instant::now();
    let node_rv = rv_of(&answer.metadata);
    let node_seen = arrival(|| {
        crate::lock(record)
            .nodes
            .get(node)
            .and_then(|n| n.last)
            .filter(|s| s.rv >= node_rv)
    })
    .await;
    let (mut pod_patch_ms, mut pod_delivery_ms) = (None, None);
    if let Some((uid, name)) = pod {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        let body = json!({"metadata": {"annotations": {"nodegate.bench/probe": "1"}}});
        let pod_sent = Instant::now();
        if let Ok(p) = pods
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            let pod_answered = Instant::now();
            pod_patch_ms = Some(ms(pod_answered - pod_sent));
            let pod_rv = rv_of(&p.metadata);
            let seen = arrival(|| {
                crate::lock(record)
                    .pod_last
                    .get(&uid)
                    .copied()
                    .filter(|s| s.rv >= pod_rv)
            })
            .await;
            pod_delivery_ms = seen.map(|s| ms(s.at.saturating_duration_since(pod_answered)));
        }
    }
    Some(Sample {
        node: node.to_string(),
        patch_ms: ms(answered - sent),
        node_delivery_ms: node_seen.map(|s| ms(s.at.saturating_duration_since(answered))),
        pod_patch_ms,
        pod_delivery_ms,
    })
}

/// Polls `seen` (every 2 ms, up to 30 s) until the watch delivered the write.
async fn arrival(seen: impl Fn() -> Option<Sighting>) -> Option<Sighting> {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = seen() {
            return Some(s);
        }
        if Instant::now() > give_up {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The probes of a run, and each opening's reaction over its floor.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub probes: usize,
    pub probes_failed: u64,
    pub patch_ms: Percentiles,
    pub pod_patch_ms: Percentiles,
    pub pod_delivery_ms: Percentiles,
    pub node_delivery_ms: Percentiles,
    /// patch + node delivery, per opening.
    pub floor_ms: Percentiles,
    /// The opening's reaction − its floor, for the openings by readiness
    /// that were probed.
    pub over_floor_ms: Percentiles,
}

use crate::report::{Percentiles, percentiles};

pub fn summarise(
    s: &Samples,
    reaction_by_node: &std::collections::HashMap<String, f64>,
) -> Summary {
    let of = |f: fn(&Sample) -> Option<f64>| -> Vec<f64> { s.ok.iter().filter_map(f).collect() };
    let over: Vec<f64> =
        s.ok.iter()
            .filter_map(|p| Some(reaction_by_node.get(&p.node)? - p.floor_ms()?))
            .collect();
    Summary {
        probes: s.ok.len(),
        probes_failed: s.failed,
        patch_ms: percentiles(&of(|p| Some(p.patch_ms))),
        pod_patch_ms: percentiles(&of(|p| p.pod_patch_ms)),
        pod_delivery_ms: percentiles(&of(|p| p.pod_delivery_ms)),
        node_delivery_ms: percentiles(&of(|p| p.node_delivery_ms)),
        floor_ms: percentiles(&of(Sample::floor_ms)),
        over_floor_ms: percentiles(&over),
    }
}

/// nodegate's own histograms, read from its `/metrics` at the end of a run
/// (when the controller serves them at `{http_addr}`): its own share
/// (`nodegate_event_to_patch_seconds`), its view of the reaction, and its
/// untaint's wait and request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OwnShare {
    pub event_to_patch_ms: Option<crate::metrics::BucketQuantiles>,
    pub reaction_ms: Option<crate::metrics::BucketQuantiles>,
    pub write_wait_ms: Option<crate::metrics::BucketQuantiles>,
    pub write_request_ms: Option<crate::metrics::BucketQuantiles>,
}

pub fn own_share(page: &str) -> OwnShare {
    use crate::metrics::{buckets, quantiles_between};
    let q = |family: &str, having: &[(&str, &str)]| {
        quantiles_between(&[], &buckets(page, family, having))
    };
    let untaint = [("kind", "untaint")];
    OwnShare {
        event_to_patch_ms: q("nodegate_event_to_patch_seconds", &[]),
        reaction_ms: q("nodegate_reaction_seconds", &[]),
        write_wait_ms: q("nodegate_write_wait_seconds", &untaint),
        write_request_ms: q("nodegate_write_request_seconds", &untaint),
    }
}

/// GET `http://addr/metrics` (plain HTTP, no client library needed);
/// the body, or `None` when nothing answers there (a controller that serves
/// no metrics at that address).
pub async fn scrape(addr: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let go = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.").then(|| body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(10), go)
        .await
        .ok()?
}

/// A free loopback address for the controller's HTTP server (`{http_addr}`).
pub fn free_addr() -> anyhow::Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.to_string())
}
