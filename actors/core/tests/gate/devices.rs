//! The gate with device members (semantics.md §6.8): an extended resource
//! the node must report allocatable (`criticalResources`) and a DRA driver
//! whose ResourceSlice pools for the node must be complete (`draDrivers`).
//! Every step is replay-checked.

use crate::gate_support::*;
use nodegate_core::gate::{EventType, Input, PatchOutcome, TimerKind};
use nodegate_core::rules::devices::{CriticalResource, DraDriver};
use nodegate_core::rules::placement::ReasonCode;
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::vocab::member::{Expectation, MemberId, Readiness};
use nodegate_core::vocab::model::{NodeInfo, SliceInfo};

fn gpu() -> CriticalResource {
    CriticalResource {
        resource: "nvidia.com/gpu".into(),
        node_selector: None,
    }
}

fn driver() -> DraDriver {
    DraDriver {
        driver: "gpu.nvidia.com".into(),
        node_selector: None,
    }
}

fn with_gpus(amount: &str, rv: &str) -> NodeInfo {
    let mut n = gated_node();
    n.extended_allocatable
        .insert("nvidia.com/gpu".into(), amount.into());
    n.resource_version = rv.into();
    n
}

fn waiting(g: &Gate, id: &MemberId) -> String {
    match &g.state.members[id].readiness {
        Some(Readiness::Waiting { why, .. }) => why.clone(),
        other => panic!("{id} is {other:?}"),
    }
}

#[test]
fn a_node_waits_for_its_extended_resource_and_opens_when_allocatable() {
    let mut cfg = cfg();
    cfg.resources = vec![gpu()];
    let mut g = Gate::new(cfg);
    let s = g.start(gated_node(), vec![], vec![]);
    assert!(patches(&s).is_empty(), "no GPUs reported yet");
    let id = MemberId::Resource("nvidia.com/gpu".into());
    assert_eq!(id.to_string(), "resource:nvidia.com/gpu");
    assert_eq!(
        "resource:nvidia.com/gpu".parse::<MemberId>(),
        Ok(id.clone())
    );
    assert!(waiting(&g, &id).contains("no allocatable nvidia.com/gpu"));
    let s = g.at(1).feed(Input::NodeChanged(with_gpus("0", "2").into()));
    assert!(patches(&s).is_empty(), "0 is not more than 0");
    let s = g
        .at(2)
        .feed(Input::NodeChanged(with_gpus("8x", "3").into()));
    assert!(patches(&s).is_empty(), "not a quantity");
    assert!(waiting(&g, &id).contains("not a quantity"));
    let s = g.at(3).feed(Input::NodeChanged(with_gpus("8", "4").into()));
    assert_eq!(patches(&s).len(), 1, "{s:?}");
}

#[test]
fn a_device_member_outside_its_node_selector_is_not_waited_for() {
    let mut cfg = cfg();
    let zone_b = Some(LabelSelector::parse("zone=b").unwrap());
    cfg.resources = vec![CriticalResource {
        node_selector: zone_b.clone(),
        ..gpu()
    }];
    cfg.dra_drivers = vec![DraDriver {
        node_selector: zone_b,
        ..driver()
    }];
    let mut g = Gate::new(cfg);
    let s = g.start(gated_node(), vec![], vec![]);
    assert_eq!(patches(&s).len(), 1, "node-a is in zone a");
    for id in [
        MemberId::Resource("nvidia.com/gpu".into()),
        MemberId::Dra("gpu.nvidia.com".into()),
    ] {
        let Expectation::NotExpected { code, reason } = &g.state.members[&id].expectation else {
            panic!("{id} expected");
        };
        assert_eq!(*code, ReasonCode::NodeSelector);
        assert!(reason.contains("zone=b"), "{reason}");
    }
}

fn slice(name: &str, generation: i64, count: i64) -> SliceInfo {
    SliceInfo {
        name: name.into(),
        driver: "gpu.nvidia.com".into(),
        pool: "node-a".into(),
        generation,
        slice_count: count,
        owner_uid: gated_node().uid,
    }
}

fn with_slices(slices: Vec<SliceInfo>, rv: &str) -> NodeInfo {
    let mut n = gated_node();
    n.resource_slices = slices;
    n.resource_version = rv.into();
    n
}

#[test]
fn a_node_waits_for_its_dra_driver_until_its_pool_is_complete() {
    let mut cfg = cfg();
    cfg.dra_drivers = vec![driver()];
    let mut g = Gate::new(cfg);
    let s = g.start(gated_node(), vec![], vec![]);
    assert!(patches(&s).is_empty(), "no slices yet");
    let id = MemberId::Dra("gpu.nvidia.com".into());
    assert_eq!("dra:gpu.nvidia.com".parse::<MemberId>(), Ok(id.clone()));
    assert!(waiting(&g, &id).contains("published no ResourceSlice"));
    let s = g.at(1).feed(Input::NodeChanged(
        with_slices(vec![slice("s1", 1, 2)], "2").into(),
    ));
    assert!(patches(&s).is_empty(), "one slice of two");
    assert!(waiting(&g, &id).contains("1 of 2 ResourceSlices"));
    let both = vec![slice("s1", 1, 2), slice("s2", 1, 2)];
    let s = g
        .at(2)
        .feed(Input::NodeChanged(with_slices(both, "3").into()));
    assert_eq!(patches(&s).len(), 1, "{s:?}");
}

#[test]
fn the_deadline_warning_names_each_device_member_and_why() {
    let mut cfg = cfg();
    cfg.resources = vec![gpu()];
    cfg.dra_drivers = vec![driver()];
    let mut g = Gate::new(cfg);
    g.at(10)
        .start(with_slices(vec![slice("s1", 3, 2)], "1"), vec![], vec![]);
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(patches(&step).len(), 1, "opens at the deadline");
    let step = g.at(121).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &[
            "resource:nvidia.com/gpu (the node reports no allocatable nvidia.com/gpu yet)",
            "dra:gpu.nvidia.com (DRA driver gpu.nvidia.com: pool node-a incomplete: \
             1 of 2 ResourceSlices at generation 3 (1 missing))",
        ],
    );
}
