//! The one reader of the cluster for the one-off commands
//! (docs/architecture.md, explain and status): GETs and LISTs only, each
//! object projected as the controller projects it.
//!
//! A read fails with the API's `kube::Error`, which the command words
//! itself; only [`node`], which also fails when the node is not there,
//! words its own errors. What a read had to work around (an odd object
//! skipped, a CSINode that cannot be read) goes to the caller's `warnings`.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;
use kube::api::ListParams;
use nodegate_core::rules::{placement::NODE_NAME_FIELD, selector::OP_IN};
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, SliceInfo};

use crate::cluster::project;
use crate::error::{Error, Result};

/// Pod lists in flight at once, one per node ([`pods_on_each`]).
const LIST_CONCURRENCY: usize = 8;

/// Every node, as listed (one LIST): `doctor` and `config check` read what
/// the model leaves out, so the objects are the caller's to project.
pub async fn nodes(client: &kube::Client) -> Result<Vec<Node>, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    Ok(api.list(&ListParams::default()).await?.items)
}

/// Node `name`, projected, with its CSI drivers and, when `with_slices`,
/// its ResourceSlices. What the projection worked around, a CSINode that
/// cannot be read and ResourceSlices that cannot be listed go to
/// `warnings`: the node is shown as the controller would see it before
/// those watches answer.
pub async fn node(
    client: &kube::Client,
    name: &str,
    with_slices: bool,
    warnings: &mut Vec<String>,
) -> Result<NodeInfo> {
    let raw = Api::<Node>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("cannot read node {name:?}")))?
        .ok_or_else(|| Error::NodeNotFound(name.to_string()))?;
    let (node, oddities) = project::node(&raw);
    for o in oddities {
        warnings.push(format!("{}: {}", o.object, o.what));
    }
    let mut node = node.ok_or_else(|| Error::Invalid {
        what: format!("node {name:?}"),
        why: "the API server returned a node without a name".into(),
    })?;
    match drivers_of(client, name).await {
        Ok(drivers) => node.csi_drivers = drivers,
        Err(e) => warnings.push(format!(
            "cannot read the node's CSINode ({e}); CSI drivers are shown as not registered"
        )),
    }
    if with_slices {
        match slices_of(client, name).await {
            Ok(slices) => node.resource_slices = slices,
            Err(e) => warnings.push(format!(
                "cannot list the node's ResourceSlices ({e}); DRA drivers are shown as having \
                 published none"
            )),
        }
    }
    Ok(node)
}

/// Gives each of `nodes` its CSI drivers and, when `with_slices`, its
/// ResourceSlices, from one LIST of each kind. A list that fails leaves
/// every node without (as the controller's watch before its first list).
pub async fn add_devices(client: &kube::Client, nodes: &mut [NodeInfo], with_slices: bool) {
    let csi = all_drivers(client).await.unwrap_or_default();
    let slices = match with_slices {
        true => Some(all_slices(client).await.unwrap_or_default()),
        false => None,
    };
    fill_devices(nodes, &csi, slices.as_ref());
}

/// [`add_devices`]'s assignment: each node's drivers and (when read) slices
/// by its name; a node missing from a map has none.
fn fill_devices(
    nodes: &mut [NodeInfo],
    csi: &HashMap<String, Vec<String>>,
    slices: Option<&HashMap<String, Vec<SliceInfo>>>,
) {
    for n in nodes {
        n.csi_drivers = csi.get(&n.name).cloned();
        if let Some(slices) = slices {
            n.resource_slices = slices.get(&n.name).cloned().unwrap_or_default();
        }
    }
}

/// The drivers node `name`'s CSINode lists; `Ok(None)` when it has none.
async fn drivers_of(client: &kube::Client, name: &str) -> Result<Option<Vec<String>>, kube::Error> {
    let api: Api<CSINode> = Api::all(client.clone());
    let csinode = api.get_opt(name).await?;
    Ok(csinode.as_ref().and_then(project::csinode).map(|(_, d)| d))
}

async fn all_drivers(client: &kube::Client) -> Result<HashMap<String, Vec<String>>, kube::Error> {
    let api: Api<CSINode> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await?;
    Ok(list.items.iter().filter_map(project::csinode).collect())
}

/// The ResourceSlices local to node `name` (`spec.nodeName`, a field
/// selector the API server supports for ResourceSlices), sorted by name.
/// Read only while `draDrivers` is configured, as the controller watches.
async fn slices_of(client: &kube::Client, name: &str) -> Result<Vec<SliceInfo>, kube::Error> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={name}"));
    let list = api.list(&params).await?;
    let projected = list.items.iter().filter_map(project::resource_slice);
    let mut slices: Vec<SliceInfo> = projected.map(|(_, s)| s).collect();
    slices.sort();
    Ok(slices)
}

/// Every node-local ResourceSlice, by node name, each node's sorted by name
/// (`config check` tells a kind the API server does not serve from the
/// error).
pub async fn all_slices(
    client: &kube::Client,
) -> Result<HashMap<String, Vec<SliceInfo>>, kube::Error> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await?;
    let mut by_node: HashMap<String, Vec<SliceInfo>> = HashMap::new();
    for (node, slice) in list.items.iter().filter_map(project::resource_slice) {
        by_node.entry(node).or_default().push(slice);
    }
    by_node.values_mut().for_each(|slices| slices.sort());
    Ok(by_node)
}

/// Every DaemonSet, projected; one without namespace or name is skipped
/// with a warning.
pub async fn daemonsets(
    client: &kube::Client,
    warnings: &mut Vec<String>,
) -> Result<Vec<DaemonSetInfo>, kube::Error> {
    let api: Api<DaemonSet> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await?;
    let mut out = Vec::new();
    for ds in &list {
        match project::daemonset(ds) {
            Some(info) => out.push(info),
            None => warnings.push("a DaemonSet without namespace or name was skipped".into()),
        }
    }
    Ok(out)
}

/// Whether DaemonSet `ns/name` is there (one GET; a 404 is `false`).
pub async fn daemonset_exists(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<bool, kube::Error> {
    let api = Api::<DaemonSet>::namespaced(client.clone(), ns);
    match api.get(name).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The pods bound to `node` (one LIST, every namespace), each as `keep`
/// projects it; those it gives `None` for are left out.
pub async fn pods_on<T>(
    client: &kube::Client,
    node: &str,
    keep: impl Fn(&Pod) -> Option<T>,
) -> Result<Vec<T>, kube::Error> {
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let list = Api::<Pod>::all(client.clone()).list(&params).await?;
    Ok(list.items.iter().filter_map(keep).collect())
}

/// A pod LIST of [`pods_on_each`] that failed, and the node it was for.
#[derive(Debug)]
pub struct PodsOnFailed {
    pub node: String,
    pub source: kube::Error,
}

/// The pods bound to each of `nodes`, by node name: one LIST per node,
/// `LIST_CONCURRENCY` at a time, never every pod of the cluster.
pub async fn pods_on_each<T>(
    client: &kube::Client,
    nodes: impl IntoIterator<Item = String>,
    keep: impl Fn(&Pod) -> Option<T> + Copy,
) -> Result<BTreeMap<String, Vec<T>>, PodsOnFailed> {
    futures::stream::iter(nodes)
        .map(|node| async move {
            match pods_on(client, &node, keep).await {
                Ok(pods) => Ok((node, pods)),
                Err(source) => Err(PodsOnFailed { node, source }),
            }
        })
        .buffer_unordered(LIST_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// The unscheduled pending pods the DaemonSet controller made for `node`
/// (one LIST of every unbound pending pod), each as `keep` projects it. A
/// cluster can hold many; explain asks only when they can explain
/// something.
pub async fn unscheduled_for<T>(
    client: &kube::Client,
    node: &str,
    keep: impl Fn(&Pod) -> Option<T>,
) -> Result<Vec<T>, kube::Error> {
    let params = ListParams::default().fields("spec.nodeName=,status.phase=Pending");
    let pending = Api::<Pod>::all(client.clone()).list(&params).await?;
    let aimed = pending.items.iter().filter(|p| aimed_at(p, node));
    Ok(aimed.filter_map(keep).collect())
}

/// Whether an unbound pod was made for `node`: the DaemonSet controller pins
/// each daemon pod with a required `matchFields` term on `metadata.name`.
fn aimed_at(pod: &Pod, node: &str) -> bool {
    let placement = pod.spec.as_ref().map(project::placement);
    let terms = placement.and_then(|p| p.required_node_affinity);
    let mut pins = terms.iter().flatten().flat_map(|t| &t.match_fields);
    pins.any(|r| {
        r.key == NODE_NAME_FIELD && r.operator == OP_IN && r.values.iter().any(|v| v == node)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_core::testutil::mk_node;
    use serde_json::json;

    #[test]
    fn aimed_at_reads_the_daemonset_controllers_node_pin() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}},
        }))
        .unwrap();
        assert!(aimed_at(&p, "n1"));
        assert!(!aimed_at(&p, "n2"));
        let plain: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert!(!aimed_at(&plain, "n1"));
        // A label-selecting term is not the DaemonSet controller's pin.
        let by_label: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}},
        }))
        .unwrap();
        assert!(!aimed_at(&by_label, "n1"));
    }

    fn slice(name: &str, pool: &str) -> SliceInfo {
        SliceInfo {
            name: name.into(),
            driver: "gpu.example.com".into(),
            pool: pool.into(),
            generation: 1,
            slice_count: 1,
            owner_uid: String::new(),
        }
    }

    #[test]
    fn devices_are_given_by_node_name_and_a_node_missing_has_none() {
        let mut nodes = vec![mk_node("a", &[], vec![]), mk_node("b", &[], vec![])];
        nodes[1].resource_slices = vec![slice("stale", "b")];
        let csi = HashMap::from([("a".to_string(), vec!["csi.example.com".to_string()])]);
        let slices = HashMap::from([("a".to_string(), vec![slice("s1", "a")])]);
        fill_devices(&mut nodes, &csi, Some(&slices));
        assert_eq!(
            nodes[0].csi_drivers,
            Some(vec!["csi.example.com".to_string()])
        );
        assert_eq!(nodes[0].resource_slices, vec![slice("s1", "a")]);
        assert_eq!(nodes[1].csi_drivers, None);
        assert!(nodes[1].resource_slices.is_empty());
    }

    #[test]
    fn slices_not_read_are_left_as_they_were() {
        let mut nodes = vec![mk_node("a", &[], vec![])];
        nodes[0].resource_slices = vec![slice("kept", "a")];
        fill_devices(&mut nodes, &HashMap::new(), None);
        assert_eq!(nodes[0].resource_slices, vec![slice("kept", "a")]);
        assert_eq!(nodes[0].csi_drivers, None);
    }
}
