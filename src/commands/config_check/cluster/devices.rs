//! `config check --cluster` for the device members (semantics.md §6.8):
//! how many of the managed nodes each `criticalResources` and `draDrivers`
//! entry applies to already satisfy it, and whether the API server serves
//! the ResourceSlices that `draDrivers` watches at all.

use k8s_openapi::api::core::v1::Node;
use nodegate_core::vocab::model::NodeInfo;

use super::{Finding, is_not_found, note, problem};
use crate::cluster::{project, snapshot};
use crate::error::{Error, Result};
use crate::settings::config::RunSettings;

/// What the API server answers when the kind is not served (Kubernetes
/// before 1.34, or resource.k8s.io/v1 turned off).
const NOT_SERVED: &str = "the API server does not serve ResourceSlices in resource.k8s.io/v1 \
     (Kubernetes 1.34 or later): nodegate's ResourceSlice watch would never complete its \
     first list, and nodegate would start no gate at all; remove draDrivers";

pub(super) async fn devices(
    client: &kube::Client,
    s: &RunSettings,
    managed: &[&Node],
    out: &mut Vec<Finding>,
) -> Result<()> {
    let mut nodes: Vec<NodeInfo> = managed.iter().filter_map(|n| project::node(n).0).collect();
    for r in &s.gate.resources {
        let (applies, ready) = counts(&nodes, |n| r.applies(n), |n| r.judge(n).is_ok());
        out.push(note(
            format!("criticalResources ({})", r.resource),
            format!(
                "{ready} of the {applies} managed nodes it applies to report allocatable {} above 0 now",
                r.resource
            ),
        ));
    }
    if s.gate.dra_drivers.is_empty() {
        return Ok(());
    }
    let slices = match snapshot::all_slices(client).await {
        Ok(slices) => slices,
        Err(e) if is_not_found(&e) => {
            out.push(problem("draDrivers", NOT_SERVED));
            return Ok(());
        }
        Err(e) => return Err(Error::kube("listing ResourceSlices")(e)),
    };
    for n in &mut nodes {
        n.resource_slices = slices.get(&n.name).cloned().unwrap_or_default();
    }
    for d in &s.gate.dra_drivers {
        let (applies, ready) = counts(&nodes, |n| d.applies(n), |n| d.judge(n).is_ok());
        out.push(note(
            format!("draDrivers ({})", d.driver),
            format!(
                "{ready} of the {applies} managed nodes it applies to have every pool of {} \
                 complete now",
                d.driver
            ),
        ));
    }
    Ok(())
}

/// How many of `nodes` an entry applies to, and how many of those it is
/// satisfied on.
fn counts(
    nodes: &[NodeInfo],
    applies: impl Fn(&NodeInfo) -> bool,
    ready: impl Fn(&NodeInfo) -> bool,
) -> (usize, usize) {
    let mine: Vec<&NodeInfo> = nodes.iter().filter(|n| applies(n)).collect();
    let ready = mine.iter().filter(|n| ready(n)).count();
    (mine.len(), ready)
}
