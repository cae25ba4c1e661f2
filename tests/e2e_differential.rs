//! Differential test: nodegate's placement verdicts against the real DaemonSet
//! controller, on randomly generated DaemonSets and nodes.
//!
//! For each seed: a few dozen fake nodes with random labels and taints (none
//! transient, none managed) and a few dozen DaemonSets with random
//! nodeSelectors, required node affinities (every operator, several terms,
//! matchFields) and tolerations. Once the controller has settled, for every
//! (node, DaemonSet) pair nodegate's verdict must equal whether the controller
//! created a pod there. The seed is printed on failure; set
//! NODEGATE_DIFF_SEED to replay one.

use nodegate_e2e as support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use nodegate_core::rules::placement::{PlacementConfig, evaluate};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::{TestCluster, fake_node, wait_for};

const NODES: usize = 40;
const DAEMONSETS: usize = 40;
const NS: &str = "diff";

const KEYS: &[&str] = &[
    "zone",
    "tier",
    "disk",
    "team",
    "example.com/rack",
    "size",
    "gen",
];
const VALUES: &[&str] = &["a", "b", "c", "x", "1", "5", "10"];
const NUMERIC_KEYS: &[&str] = &["size", "gen"];
const NUMBERS: &[&str] = &["1", "5", "10", "3", "07"];
const TAINT_KEYS: &[&str] = &["dedicated", "gpu", "example.com/spot"];
const TAINT_VALUES: &[&str] = &["", "x", "y"];
const EFFECTS: &[&str] = &["NoSchedule", "NoExecute", "PreferNoSchedule"];

fn gen_labels(rng: &mut StdRng) -> Vec<(String, String)> {
    let mut labels = BTreeMap::new();
    for key in KEYS {
        if rng.random_bool(0.5) {
            let v = if NUMERIC_KEYS.contains(key) && rng.random_bool(0.8) {
                NUMBERS.choose(rng)
            } else {
                VALUES.choose(rng)
            };
            labels.insert(key.to_string(), v.copied().unwrap_or("a").to_string());
        }
    }
    labels.into_iter().collect()
}

fn gen_taints(rng: &mut StdRng) -> Vec<(String, String, String)> {
    let n = [0, 0, 0, 1, 1, 2].choose(rng).copied().unwrap_or(0);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for _ in 0..n {
        let key = TAINT_KEYS.choose(rng).copied().unwrap_or("gpu");
        let effect = EFFECTS.choose(rng).copied().unwrap_or("NoSchedule");
        // The API server rejects two taints with the same key and effect.
        if seen.insert((key, effect)) {
            let value = TAINT_VALUES.choose(rng).copied().unwrap_or("");
            out.push((key.to_string(), value.to_string(), effect.to_string()));
        }
    }
    out
}

fn gen_requirement(rng: &mut StdRng) -> Value {
    let key = KEYS.choose(rng).copied().unwrap_or("zone");
    let pick_values = |rng: &mut StdRng| -> Vec<&str> {
        let n = rng.random_range(1..=3);
        let mut vs: Vec<&str> = (0..n).filter_map(|_| VALUES.choose(rng).copied()).collect();
        vs.sort();
        vs.dedup();
        vs
    };
    match rng.random_range(0..6) {
        0 => json!({"key": key, "operator": "In", "values": pick_values(rng)}),
        1 => json!({"key": key, "operator": "NotIn", "values": pick_values(rng)}),
        2 => json!({"key": key, "operator": "Exists"}),
        3 => json!({"key": key, "operator": "DoesNotExist"}),
        op => {
            let key = NUMERIC_KEYS.choose(rng).copied().unwrap_or("size");
            let n = rng.random_range(0..12).to_string();
            json!({"key": key, "operator": if op == 4 { "Gt" } else { "Lt" }, "values": [n]})
        }
    }
}

fn gen_daemonset(rng: &mut StdRng, i: usize, node_names: &[String]) -> DaemonSet {
    let name = format!("ds-{i}");
    let mut spec = serde_json::Map::new();
    spec.insert(
        "containers".into(),
        json!([{"name": "c", "image": "registry.invalid/x:1"}]),
    );
    if rng.random_bool(0.3) {
        let labels: BTreeMap<String, String> = gen_labels(rng).into_iter().take(2).collect();
        spec.insert("nodeSelector".into(), json!(labels));
    }
    if rng.random_bool(0.6) {
        let terms: Vec<Value> = (0..rng.random_range(1..=3))
            .map(|_| {
                let mut term = serde_json::Map::new();
                let n_expr = rng.random_range(0..=3);
                let exprs: Vec<Value> = (0..n_expr).map(|_| gen_requirement(rng)).collect();
                if !exprs.is_empty() {
                    term.insert("matchExpressions".into(), json!(exprs));
                }
                if n_expr == 0 || rng.random_bool(0.2) {
                    let node = node_names.choose(rng).cloned().unwrap_or_default();
                    let op = if rng.random_bool(0.5) { "In" } else { "NotIn" };
                    term.insert(
                        "matchFields".into(),
                        json!([{"key": "metadata.name", "operator": op, "values": [node]}]),
                    );
                }
                Value::Object(term)
            })
            .collect();
        spec.insert(
            "affinity".into(),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}),
        );
    }
    let n_tol = [0, 0, 1, 1, 2, 3].choose(rng).copied().unwrap_or(0);
    let tolerations: Vec<Value> = (0..n_tol)
        .map(|_| {
            let effect = ["", "NoSchedule", "NoExecute", "PreferNoSchedule"]
                .choose(rng)
                .copied()
                .unwrap_or("");
            let mut t = serde_json::Map::new();
            if rng.random_bool(0.1) {
                t.insert("operator".into(), json!("Exists"));
            } else {
                t.insert(
                    "key".into(),
                    json!(TAINT_KEYS.choose(rng).copied().unwrap_or("gpu")),
                );
                if rng.random_bool(0.5) {
                    t.insert("operator".into(), json!("Exists"));
                } else {
                    if rng.random_bool(0.5) {
                        t.insert("operator".into(), json!("Equal"));
                    }
                    let v = TAINT_VALUES.choose(rng).copied().unwrap_or("");
                    if !v.is_empty() {
                        t.insert("value".into(), json!(v));
                    }
                }
            }
            if !effect.is_empty() {
                t.insert("effect".into(), json!(effect));
            }
            Value::Object(t)
        })
        .collect();
    if !tolerations.is_empty() {
        spec.insert("tolerations".into(), json!(tolerations));
    }
    if rng.random_bool(0.1) {
        spec.insert("hostNetwork".into(), json!(true));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"ds": name}},
            "template": {"metadata": {"labels": {"ds": name}}, "spec": Value::Object(spec)},
        },
    }))
    .expect("generated daemonset is a valid manifest")
}

/// The node a DaemonSet pod was created for: the controller pins each pod with
/// a `matchFields metadata.name In [node]` term (and the scheduler later sets
/// spec.nodeName).
fn pod_target(p: &Pod) -> Option<String> {
    let spec = p.spec.as_ref()?;
    if let Some(n) = &spec.node_name {
        return Some(n.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields
            .as_ref()?
            .iter()
            .find(|f| f.key == "metadata.name")
            .and_then(|f| f.values.as_ref()?.first().cloned())
    })
}

async fn differential(seed: u64) {
    let cluster = TestCluster::start(&format!("differential-{seed}")).await;
    cluster.namespace(NS).await;
    let mut rng = StdRng::seed_from_u64(seed);

    let node_names: Vec<String> = (0..NODES).map(|i| format!("n{i}")).collect();
    for name in &node_names {
        let labels = gen_labels(&mut rng);
        let taints = gen_taints(&mut rng);
        let l: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let t: Vec<(&str, &str, &str)> = taints
            .iter()
            .map(|(k, v, e)| (k.as_str(), v.as_str(), e.as_str()))
            .collect();
        cluster.create_node(&fake_node(name, &l, &t)).await;
    }
    // Let the node lifecycle controller and kwok settle the nodes first, so no
    // transient not-ready taint is left when the DaemonSets arrive.
    let nodes_api: Api<Node> = Api::all(cluster.client.clone());
    wait_for(
        "nodes Ready without node.kubernetes.io taints",
        Duration::from_secs(60),
        || async {
            let nodes = nodes_api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let unsettled: Vec<String> = nodes
                .items
                .iter()
                .filter(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|ts| {
                            ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/"))
                        })
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            if unsettled.is_empty() {
                Ok(())
            } else {
                Err(format!("{unsettled:?}"))
            }
        },
    )
    .await;

    let ds_api: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), NS);
    let generated: Vec<DaemonSet> = (0..DAEMONSETS)
        .map(|i| gen_daemonset(&mut rng, i, &node_names))
        .collect();
    for ds in &generated {
        ds_api
            .create(&PostParams::default(), ds)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "seed {seed}: the API server rejected a generated DaemonSet: {e}\n{}",
                    serde_json::to_string(ds).unwrap_or_default()
                )
            });
    }

    // Settled: every DaemonSet observed at its generation, with exactly as
    // many pods as it wants; then the same placement again a little later.
    let pods_api: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let first = wait_for(
        "the DaemonSet controller to settle",
        Duration::from_secs(180),
        || async {
            let (placement, dss) = placement(&ds_api, &pods_api).await?;
            for ds in &dss {
                let name = ds.metadata.name.clone().unwrap_or_default();
                let status = ds.status.as_ref().ok_or(format!("{name}: no status yet"))?;
                if status.observed_generation != ds.metadata.generation {
                    return Err(format!("{name}: generation not observed yet"));
                }
                let have = placement.get(&name).map_or(0, BTreeSet::len) as i32;
                if have != status.desired_number_scheduled {
                    return Err(format!(
                        "{name}: {have} pods of {} desired",
                        status.desired_number_scheduled
                    ));
                }
            }
            Ok(placement)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (second, live) = placement(&ds_api, &pods_api).await.expect("list placement");
    assert_eq!(
        first, second,
        "seed {seed}: the controller was still changing its placement"
    );

    // Compare every pair with nodegate's verdict.
    let config = PlacementConfig::default();
    let nodes = nodes_api
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    let mut disagreements = Vec::new();
    let mut expected_pairs = 0;
    for n in &nodes.items {
        let (Some(node), _) = nodegate::cluster::project::node(n) else {
            continue;
        };
        for ds in &live {
            let info = nodegate::cluster::project::daemonset(ds).expect("daemonset projects");
            let ours = evaluate(&node, &info, &config);
            let theirs = second
                .get(&info.name)
                .is_some_and(|s| s.contains(&node.name));
            if ours.is_expected() {
                expected_pairs += 1;
            }
            if ours.is_expected() != theirs {
                disagreements.push(format!(
                    "  node {} (labels {:?}, taints {:?}) x {}: nodegate {:?}, controller created a pod: {theirs}\n    template: {}",
                    node.name,
                    node.labels,
                    node.taints.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    info.key(),
                    ours,
                    serde_json::to_string(&info.template).unwrap_or_default(),
                ));
            }
        }
    }
    eprintln!(
        "seed {seed}: {} nodes x {} daemonsets, {expected_pairs} pods expected, {} disagreements",
        nodes.items.len(),
        live.len(),
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "seed {seed}: {} disagreements with the DaemonSet controller (replay with NODEGATE_DIFF_SEED={seed}):\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    assert!(nodes.items.len() >= NODES && live.len() >= DAEMONSETS);
}

type Placement = BTreeMap<String, BTreeSet<String>>;

/// Which nodes each DaemonSet has pods for, and the DaemonSets as they are.
async fn placement(
    ds_api: &Api<DaemonSet>,
    pods_api: &Api<Pod>,
) -> Result<(Placement, Vec<DaemonSet>), String> {
    let dss = ds_api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let pods = pods_api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut per_ds: Placement = BTreeMap::new();
    for p in &pods.items {
        let ds = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("ds"))
            .cloned()
            .unwrap_or_default();
        if let Some(node) = pod_target(p) {
            per_ds.entry(ds).or_default().insert(node);
        }
    }
    Ok((per_ds, dss.items))
}

fn seed_override() -> Option<u64> {
    std::env::var("NODEGATE_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
}

macro_rules! seeds {
    ($($name:ident = $seed:expr),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            differential(seed_override().unwrap_or($seed)).await;
        }
    )*};
}

seeds! {
    agrees_with_the_daemonset_controller_seed_1 = 1,
    agrees_with_the_daemonset_controller_seed_2 = 2,
    agrees_with_the_daemonset_controller_seed_3 = 3,
    agrees_with_the_daemonset_controller_seed_4 = 4,
    agrees_with_the_daemonset_controller_seed_5 = 5,
}
