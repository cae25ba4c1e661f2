//! The ResourceSlices local to each node, read once for the one-off
//! commands (`explain`, `status`), so that they judge `draDrivers` members
//! as the controller does from its ResourceSlice watch (semantics.md §6.8).
//! Read only while `draDrivers` is configured, as the controller watches.

use std::collections::HashMap;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::ListParams;
use nodegate_core::vocab::model::SliceInfo;

use crate::cluster::project;

/// The ResourceSlices local to node `name` (`spec.nodeName`, a field
/// selector the API server supports for ResourceSlices), sorted by name.
pub async fn slices_of(client: &kube::Client, name: &str) -> Result<Vec<SliceInfo>, kube::Error> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={name}"));
    let mut slices: Vec<SliceInfo> = api
        .list(&params)
        .await?
        .items
        .iter()
        .filter_map(project::resource_slice)
        .map(|(_, s)| s)
        .collect();
    slices.sort();
    Ok(slices)
}

/// Every node-local ResourceSlice, by node name, each node's sorted by name.
pub async fn all_slices(
    client: &kube::Client,
) -> Result<HashMap<String, Vec<SliceInfo>>, kube::Error> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let mut by_node: HashMap<String, Vec<SliceInfo>> = HashMap::new();
    for (node, slice) in api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(project::resource_slice)
    {
        by_node.entry(node).or_default().push(slice);
    }
    for slices in by_node.values_mut() {
        slices.sort();
    }
    Ok(by_node)
}
