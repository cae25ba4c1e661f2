//! What the benchmark puts into the cluster: the DaemonSets, the tainted
//! nodes that join at once, and the unrelated pods that only add weight.
//!
//! ## The 5 % of nodes where one DaemonSet never gets Ready
//! kwok's test controls live on the *pod* (label
//! `nodegate.test/hold-not-ready=true`, annotations `nodegate.test/ready-after`
//! / `-max`), and a DaemonSet's pods carry only its template's labels and
//! annotations: one DaemonSet cannot make its pod never-Ready on some nodes
//! and Ready on others. So DaemonSet 0 is split in two by a node label
//! (`nodegate.bench/stuck=true`, on a random 5 % of the nodes):
//! `bench-ds-0` (node affinity: label absent, Ready after a delay) and
//! `bench-ds-0-stuck` (nodeSelector: label present, template labelled
//! hold-not-ready). Every node therefore expects exactly D DaemonSets; on the
//! stuck nodes one of them never turns Ready and the gate must open at its
//! deadline, not before. The split needs no write from the benchmark during
//! the measurement (relabelling pods as they appear would race kwok's ready
//! stage and add API load), and no exclusion: both halves are ordinary
//! DaemonSets that tolerate the startup taint, as real infrastructure does.
//!
//! Every benchmark DaemonSet selects `nodegate.bench/node=true`, so none of
//! its pods lands on the filler nodes that carry the unrelated pods.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use serde_json::json;

pub const NAMESPACE: &str = "nodegate-bench";
pub const FILLER_NAMESPACE: &str = "nodegate-bench-filler";
pub const NODE_LABEL: &str = "nodegate.bench/node";
pub const STUCK_LABEL: &str = "nodegate.bench/stuck";
pub const DS_LABEL: &str = "nodegate.bench/ds";
pub const FILLER_LABEL: &str = "nodegate.bench/filler";
/// The never-Ready half of DaemonSet 0.
pub const STUCK_DS: &str = "bench-ds-0-stuck";

/// How the DaemonSets' pods become Ready.
#[derive(Debug, Clone)]
pub struct ReadyDelay {
    pub after: Duration,
    pub max: Duration,
}

pub fn ds_name(i: usize) -> String {
    format!("bench-ds-{i}")
}

pub fn node_name(i: usize) -> String {
    format!("bench-{i:05}")
}

/// The `stuck` nodes: `percent` of `n`, chosen at random (fixed seed, so a
/// rerun picks the same ones).
pub fn stuck_nodes(n: usize, percent: f64, seed: u64) -> BTreeSet<usize> {
    let count = ((n as f64) * percent / 100.0).round() as usize;
    let mut rng = StdRng::seed_from_u64(seed);
    sample(&mut rng, n, count.min(n)).into_iter().collect()
}

/// Which DaemonSets a node expects, by name.
pub fn expected_on(stuck: bool, daemonsets: usize) -> Vec<String> {
    (0..daemonsets)
        .map(|i| {
            if i == 0 && stuck {
                STUCK_DS.to_string()
            } else {
                ds_name(i)
            }
        })
        .collect()
}

fn daemonset(
    name: &str,
    taint_key: &str,
    delay: &ReadyDelay,
    stuck: Option<bool>,
) -> anyhow::Result<DaemonSet> {
    let mut labels = json!({"app": name, DS_LABEL: name});
    let mut annotations = json!({});
    let mut affinity = json!({});
    let mut node_selector = json!({NODE_LABEL: "true"});
    match stuck {
        Some(true) => {
            labels["nodegate.test/hold-not-ready"] = json!("true");
            node_selector[STUCK_LABEL] = json!("true");
        }
        other => {
            annotations["nodegate.test/ready-after"] =
                json!(humantime::format_duration(delay.after).to_string());
            annotations["nodegate.test/ready-after-max"] =
                json!(humantime::format_duration(delay.max).to_string());
            if other == Some(false) {
                affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": STUCK_LABEL, "operator": "DoesNotExist"}]}]}}});
            }
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "tolerations": [{"key": taint_key, "operator": "Exists"}],
                    "nodeSelector": node_selector,
                    "affinity": affinity,
                },
            },
        },
    }))
    .with_context(|| format!("daemonset {name} manifest"))
}

pub async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// Creates the D DaemonSets (DaemonSet 0 in its two halves when any node is
/// stuck).
pub async fn create_daemonsets(
    client: &Client,
    d: usize,
    taint_key: &str,
    delay: &ReadyDelay,
    with_stuck: bool,
) -> anyhow::Result<()> {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..d {
        let split = (i == 0 && with_stuck).then_some(false);
        let ds = daemonset(&ds_name(i), taint_key, delay, split)?;
        api.create(&PostParams::default(), &ds)
            .await
            .with_context(|| format!("creating daemonset {}", ds_name(i)))?;
    }
    if with_stuck && d > 0 {
        let ds = daemonset(STUCK_DS, taint_key, delay, Some(true))?;
        api.create(&PostParams::default(), &ds)
            .await
            .with_context(|| format!("creating daemonset {STUCK_DS}"))?;
    }
    Ok(())
}

fn node(
    name: &str,
    labels: &[(&str, &str)],
    taint: Option<(&str, &str)>,
    pods: u32,
) -> anyhow::Result<Node> {
    let mut all = json!({
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "type": "kwok",
    });
    for (k, v) in labels {
        all[*k] = json!(v);
    }
    let taints = match taint {
        Some((key, effect)) => json!([{"key": key, "effect": effect}]),
        None => json!([]),
    };
    let resources = json!({"cpu": "64", "memory": "256Gi", "pods": pods.to_string()});
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": taints},
        "status": {"allocatable": resources, "capacity": resources},
    }))
    .with_context(|| format!("node {name} manifest"))
}

/// Creates the N tainted benchmark nodes, `concurrency` requests at a time.
pub async fn create_nodes(
    client: &Client,
    n: usize,
    stuck: &BTreeSet<usize>,
    taint: (&str, &str),
    concurrency: usize,
) -> anyhow::Result<()> {
    let names: Vec<(String, bool)> = (0..n).map(|i| (node_name(i), stuck.contains(&i))).collect();
    create_named_nodes(client, &names, taint, concurrency).await
}

/// Creates tainted benchmark nodes by name, each stuck or not,
/// `concurrency` requests at a time.
pub async fn create_named_nodes(
    client: &Client,
    names: &[(String, bool)],
    taint: (&str, &str),
    concurrency: usize,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let manifests: Vec<Node> = names
        .iter()
        .map(|(name, stuck)| {
            let mut labels = vec![(NODE_LABEL, "true")];
            if *stuck {
                labels.push((STUCK_LABEL, "true"));
            }
            node(name, &labels, Some(taint), 110)
        })
        .collect::<anyhow::Result<_>>()?;
    futures::stream::iter(manifests)
        .map(|m| {
            let api = api.clone();
            async move {
                let name = m.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &m)
                    .await
                    .map(|_| ())
                    .with_context(|| format!("creating node {name}"))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Pods that have nothing to do with any DaemonSet: bare pods bound straight
/// to untainted filler nodes (no scheduler work; hostNetwork so they take no
/// pod IP from kwok's range). They exist only to weigh on a controller that
/// lists or caches every pod.
pub async fn create_unrelated_pods(
    client: &Client,
    count: usize,
    per_node: usize,
    concurrency: usize,
) -> anyhow::Result<usize> {
    if count == 0 {
        return Ok(0);
    }
    create_namespace(client, FILLER_NAMESPACE).await?;
    let fillers = count.div_ceil(per_node.max(1));
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..fillers {
        let m = node(
            &format!("filler-{i:03}"),
            &[(FILLER_LABEL, "true")],
            None,
            u32::try_from(per_node + 10).unwrap_or(u32::MAX),
        )?;
        nodes
            .create(&PostParams::default(), &m)
            .await
            .with_context(|| format!("creating filler node {i}"))?;
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), FILLER_NAMESPACE);
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("unrelated-{i:05}"), "labels": {"app": "unrelated", "shard": (i % 50).to_string()}},
                    "spec": {
                        "nodeName": format!("filler-{:03}", i % fillers),
                        "hostNetwork": true,
                        "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                        "env": [{"name": "INDEX", "value": i.to_string()}]}],
                    },
                }))?;
                api.create(&PostParams::default(), &pod)
                    .await
                    .map(|_| ())
                    .with_context(|| format!("creating unrelated pod {i}"))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(fillers)
}

/// Waits until kwok has run every unrelated pod (none is Pending any more),
/// so that their status writes are over before the measurement starts.
pub async fn wait_unrelated_running(client: &Client, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), FILLER_NAMESPACE);
    let start = std::time::Instant::now();
    loop {
        let pending = api
            .list_metadata(
                &ListParams::default()
                    .fields("status.phase=Pending")
                    .limit(1),
            )
            .await
            .context("listing pending unrelated pods")?;
        if pending.items.is_empty() {
            return Ok(());
        }
        if start.elapsed() > timeout {
            anyhow::bail!(
                "unrelated pods still Pending after {timeout:?}: is kwok running? (see its log in the state dir)"
            );
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_percent_of_a_thousand_is_fifty_distinct_nodes() {
        let s = stuck_nodes(1000, 5.0, 7);
        assert_eq!(s.len(), 50);
        assert!(s.iter().all(|i| *i < 1000));
        assert_eq!(s, stuck_nodes(1000, 5.0, 7), "same seed, same nodes");
    }

    #[test]
    fn stuck_nodes_expect_the_stuck_half_of_daemonset_zero() {
        assert_eq!(
            expected_on(true, 3),
            vec![STUCK_DS, "bench-ds-1", "bench-ds-2"]
        );
        assert_eq!(
            expected_on(false, 2),
            vec!["bench-ds-0".to_string(), "bench-ds-1".to_string()]
        );
    }

    #[test]
    fn daemonset_halves_split_on_the_stuck_label() {
        let delay = ReadyDelay {
            after: Duration::from_secs(1),
            max: Duration::from_secs(5),
        };
        let ok = serde_json::to_value(daemonset("a", "t", &delay, Some(false)).unwrap()).unwrap();
        let tpl = &ok["spec"]["template"];
        assert_eq!(
            tpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"],
            "DoesNotExist"
        );
        assert_eq!(
            tpl["metadata"]["annotations"]["nodegate.test/ready-after"],
            "1s"
        );
        let stuck = serde_json::to_value(daemonset("b", "t", &delay, Some(true)).unwrap()).unwrap();
        let tpl = &stuck["spec"]["template"];
        assert_eq!(
            tpl["metadata"]["labels"]["nodegate.test/hold-not-ready"],
            "true"
        );
        assert_eq!(tpl["spec"]["nodeSelector"][STUCK_LABEL], "true");
    }
}
