//! The CSI drivers each node registered (its CSINode), read once for the
//! one-off commands (`explain`, `status`), so that they judge a DaemonSet
//! annotated `nodegate.dev/csi-driver` as the controller does from its
//! CSINode watch (semantics.md §6.7).

use std::collections::HashMap;

use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;
use kube::api::ListParams;

use crate::cluster::project;

/// The drivers node `name`'s CSINode lists; `Ok(None)` when it has none.
pub async fn drivers_of(
    client: &kube::Client,
    name: &str,
) -> Result<Option<Vec<String>>, kube::Error> {
    let api: Api<CSINode> = Api::all(client.clone());
    Ok(api
        .get_opt(name)
        .await?
        .as_ref()
        .and_then(project::csinode)
        .map(|(_, drivers)| drivers))
}

/// Every CSINode's drivers, by node name.
pub async fn all_drivers(
    client: &kube::Client,
) -> Result<HashMap<String, Vec<String>>, kube::Error> {
    let api: Api<CSINode> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(project::csinode)
        .collect())
}
