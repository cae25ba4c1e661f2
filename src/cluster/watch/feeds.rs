//! Each watch's handling: which sink indexes its objects, with its own
//! re-list bookkeeping (`Listing`) and clock evidence.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::CSINode;
use nodegate_actors::router::Router;
use nodegate_core::vocab::model::Interner;

use super::*;

/// The node watch's handling.
pub fn node_feed(router: Arc<Router>, server_time: Arc<ServerTime>) -> WatchFeed<Lean<Node>> {
    WatchFeed(Box::new(Indexing {
        sink: NodeSink {
            router,
            interner: Interner::default(),
        },
        listing: Listing::default(),
        server_time,
        id_of_deleted: Box::new(|n: &Lean<Node>| delete_id(n, true)),
    }))
}

/// The DaemonSet watch's handling.
pub fn daemonset_feed(router: Arc<Router>, server_time: Arc<ServerTime>) -> WatchFeed<DaemonSet> {
    WatchFeed(Box::new(Indexing {
        sink: DaemonSetSink { router },
        listing: Listing::default(),
        server_time,
        id_of_deleted: Box::new(|d: &DaemonSet| delete_id(d, false)),
    }))
}

/// The DaemonSet pod watch's handling (pods outside `critical_namespaces`
/// lose their labels; only pods in `canary_namespace` keep their sandbox
/// condition).
pub fn daemonset_pod_feed(
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
    critical_namespaces: Arc<HashSet<String>>,
    canary_namespace: Option<Arc<str>>,
) -> WatchFeed<Lean<Pod>> {
    pod_feed(
        router,
        server_time,
        Some(critical_namespaces),
        canary_namespace,
    )
}

pub(super) fn pod_feed(
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
    keep_labels_in: Option<Arc<HashSet<String>>>,
    canary_namespace: Option<Arc<str>>,
) -> WatchFeed<Lean<Pod>> {
    WatchFeed(Box::new(Indexing {
        sink: PodSink {
            router,
            keep_labels_in,
            interner: Interner::default(),
            canary_namespace,
        },
        listing: Listing::default(),
        server_time,
        id_of_deleted: Box::new(pod_id),
    }))
}

pub(super) fn csinode_feed(
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
) -> WatchFeed<CSINode> {
    WatchFeed(Box::new(Indexing {
        sink: CsiNodeSink { router },
        listing: Listing::default(),
        server_time,
        id_of_deleted: Box::new(|c: &CSINode| delete_id(c, true)),
    }))
}

pub(super) fn resource_slice_feed(
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
) -> WatchFeed<ResourceSlice> {
    WatchFeed(Box::new(Indexing {
        sink: ResourceSliceSink { router },
        listing: Listing::default(),
        server_time,
        id_of_deleted: Box::new(slice_id),
    }))
}
