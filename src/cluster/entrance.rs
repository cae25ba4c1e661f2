//! Backfill's taint, sent with the same patch as every decider's
//! (`patch::add_taint`); the decisions are `nodegate_core::net::entrance`'s.

use jiff::Timestamp;
use kube::api::Patch;
use nodegate_core::vocab::model::{NodeInfo, Taint};

use crate::cluster::patch::{self, rfc3339};
use nodegate_core::gate::PatchOutcome;
use nodegate_core::vocab::annotations::GATED_SINCE as GATED_SINCE_ANNOTATION;

use crate::cluster::writer::Writer;
use crate::serve::metrics::NodeWrite;

/// `nodegate.dev/gated-since` at `at`, as [`put_taint`] takes it.
pub fn gated_since(at: Timestamp) -> (&'static str, String) {
    (GATED_SINCE_ANNOTATION, rfc3339(at))
}

/// Puts `taint` on the node as it was read, with `annotations`, through
/// `writer` (an entrance's write: slot, rate and timeout as the net's).
pub async fn put_taint(
    writer: &Writer,
    node: &NodeInfo,
    taint: &Taint,
    annotations: &[(&'static str, String)],
) -> PatchOutcome {
    let patch = patch::add_taint(
        &node.resource_version,
        taint,
        node.taints.len(),
        annotations,
        node.annotations_present,
        Timestamp::now(),
    );
    let write = (NodeWrite::AddTaint, false);
    let patch = Patch::Json::<()>(patch);
    writer.patch_node(write, &node.name, &patch, || true).await
}
