//! The watches' handling of a re-list, fed events as the watcher sends them.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::Event;
use nodegate_actors::router::Router;
use nodegate_core::deciders::ClusterView;
use nodegate_core::vocab::config::Config;
use serde_json::json;

use super::{daemonset_pod_feed, node_feed};
use crate::cluster::lean::Lean;
use crate::cluster::server_time::ServerTime;

fn node(name: &str, rv: u32) -> Lean<Node> {
    serde_json::from_value(json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": rv.to_string(),
                     "creationTimestamp": "2026-01-02T03:04:05Z"},
    }))
    .expect("a node")
}

fn pod(uid: &str, node: &str, ready: bool) -> Lean<Pod> {
    serde_json::from_value(json!({
        "metadata": {"name": format!("agent-{uid}"), "namespace": "kube-system", "uid": uid,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                          "uid": "ds-1", "controller": true}]},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .expect("a pod")
}

fn router() -> (Arc<Router>, Arc<ServerTime>) {
    (
        Arc::new(Router::new(Arc::new(Config::default()))),
        Arc::new(ServerTime::new()),
    )
}

fn indexed_pods(router: &Router, nodes: &[&str]) -> BTreeSet<String> {
    nodes
        .iter()
        .flat_map(|n| router.index().pods_on(n))
        .map(|p| p.uid.to_string())
        .collect()
}

/// A re-list after a watch gap removes exactly what was deleted during the
/// gap and keeps the rest, changed or not: a sweep that removes nothing,
/// too much, or the wrong epoch fails here.
#[test]
fn a_streamed_relist_sweeps_what_vanished_in_the_gap_and_keeps_the_rest() {
    let (router, time) = router();
    let mut pods = daemonset_pod_feed(Arc::clone(&router), Arc::clone(&time), Arc::default(), None);
    let mut nodes = node_feed(Arc::clone(&router), time);

    nodes.handle(Event::Init);
    for n in ["n1", "n2", "n3"] {
        nodes.handle(Event::InitApply(node(n, 1)));
    }
    assert!(nodes.handle(Event::InitDone));
    pods.handle(Event::Init);
    pods.handle(Event::InitApply(pod("a", "n1", true)));
    pods.handle(Event::InitApply(pod("b", "n1", true)));
    pods.handle(Event::InitDone);
    // Live, before the gap: c arrives.
    pods.handle(Event::Apply(pod("c", "n2", false)));
    assert_eq!(indexed_pods(&router, &["n1", "n2"]).len(), 3);

    // The gap: n3 and pod a are deleted, c turns Ready, d appears; n1 and
    // b do not change. Then the watch re-lists.
    nodes.handle(Event::Init);
    nodes.handle(Event::InitApply(node("n1", 1)));
    nodes.handle(Event::InitApply(node("n2", 2)));
    nodes.handle(Event::InitDone);
    pods.handle(Event::Init);
    pods.handle(Event::InitApply(pod("b", "n1", true)));
    pods.handle(Event::InitApply(pod("c", "n2", true)));
    pods.handle(Event::InitApply(pod("d", "n2", false)));
    assert_eq!(pods.held(), 1, "c, now Ready, waits for the sweep");
    assert!(
        router.index().pod("n1", &"a".into()).is_some(),
        "nothing is swept before the list is complete"
    );
    pods.handle(Event::InitDone);

    let names: BTreeSet<String> = router
        .index()
        .nodes()
        .iter()
        .map(|n| n.name.clone())
        .collect();
    assert_eq!(names, BTreeSet::from(["n1".into(), "n2".into()]));
    assert_eq!(
        router
            .index()
            .node("n2")
            .map(|n| n.resource_version.clone())
            .as_deref(),
        Some("2")
    );
    assert_eq!(
        indexed_pods(&router, &["n1", "n2", "n3"]),
        BTreeSet::from(["b".into(), "c".into(), "d".into()])
    );
    assert!(
        router
            .index()
            .pod("n2", &"c".into())
            .is_some_and(|p| p.ready)
    );
    assert_eq!((nodes.known(), pods.known(), pods.held()), (2, 3, 0));

    // A second gap: the next re-list sweeps by its own epoch.
    pods.handle(Event::Init);
    pods.handle(Event::InitApply(pod("d", "n2", false)));
    pods.handle(Event::InitDone);
    assert_eq!(
        indexed_pods(&router, &["n1", "n2"]),
        BTreeSet::from(["d".into()])
    );
    // A live delete of a swept pod changes nothing; of a known one, deletes.
    pods.handle(Event::Delete(pod("b", "n1", true)));
    pods.handle(Event::Delete(pod("d", "n2", false)));
    assert!(indexed_pods(&router, &["n1", "n2"]).is_empty());
}
