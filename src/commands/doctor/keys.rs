//! Which taints nodegate may add to a node: the one question every
//! autoscaler check asks, answered in one place.

use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::vocab::model::Labels;

use crate::settings::config::GateSettings;

/// The taints nodegate may add to a node with these labels (at Node CREATE
/// through the admission policy or webhook, the late-taint net, backfill):
/// none for a node outside `--node-selector`, else the one every entrance
/// chooses for those labels (the first `--taint-for` rule or `--autoscaler`
/// preset that matches, else the first `--taint`). Every check asks this.
pub fn added_taints(gate: &GateSettings, labels: &Labels) -> Vec<ManagedTaint> {
    if !gate.scope.includes(labels) {
        return Vec::new();
    }
    vec![gate.startup.for_node(labels).clone()]
}

/// The taints nodegate may add to any of these nodes (by their labels), or
/// to a node with none of these labels: what an autoscaler that sees every
/// node must recognise. Each taint once, in the order first met.
pub fn added_to_any<'a>(
    gate: &GateSettings,
    labels: impl IntoIterator<Item = &'a Labels>,
) -> Vec<ManagedTaint> {
    let mut out = added_taints(gate, &Labels::new());
    for t in labels.into_iter().flat_map(|l| added_taints(gate, l)) {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}
