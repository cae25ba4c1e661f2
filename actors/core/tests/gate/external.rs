//! A gate whose managed taints someone else removed: the gate ends and
//! asks the shell to record `opened-by: external` on the node, so that no
//! entrance puts the taint back — except in a dry run or while writes are
//! suspended, when it writes nothing.

use crate::gate_support::*;
use nodegate_core::gate::{Effect, ExternalOpening, Input, Step, StopReason};

fn external(step: &Step) -> Vec<&ExternalOpening> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::MarkOpenedExternally(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn removed_by_hand(cfg: nodegate_core::vocab::config::Config) -> (Gate, Step) {
    let mut g = Gate::new(cfg);
    g.at(1)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g
        .at(10)
        .feed(Input::NodeChanged(std::sync::Arc::new(node(vec![]))));
    assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    (g, step)
}

#[test]
fn a_taint_removed_by_someone_else_is_recorded_as_an_external_opening() {
    let (_, step) = removed_by_hand(cfg());
    assert_eq!(
        external(&step),
        [&ExternalOpening {
            node: "node-a".into(),
            cordoned: false,
        }]
    );
    // Recorded before the gate ends; no untaint of its own.
    let mark = step
        .effects
        .iter()
        .position(|e| matches!(e, Effect::MarkOpenedExternally(_)));
    let stop = step
        .effects
        .iter()
        .position(|e| matches!(e, Effect::Stop(_)));
    assert!(mark < stop, "{:?}", step.effects);
    assert_eq!(writes(&step), 0);
}

#[test]
fn a_dry_run_or_a_suspended_gate_records_nothing() {
    let (_, step) = removed_by_hand(nodegate_core::vocab::config::Config {
        dry_run: true,
        ..cfg()
    });
    assert!(external(&step).is_empty(), "{:?}", step.effects);
    assert!(stops(&step));
    let (_, step) = removed_by_hand(nodegate_core::vocab::config::Config {
        suspend: true,
        ..cfg()
    });
    assert!(external(&step).is_empty(), "{:?}", step.effects);
}
