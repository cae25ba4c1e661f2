//! The expected set: which members a gate waits for, and how it changes
//! while the gate waits (DaemonSets added, deleted or changed, the node
//! relabelled, critical-pod entries).
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::gate_support::*;
use nodegate_core::gate::{Event, Input};
use nodegate_core::rules::readiness::CriticalPodEntry;
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::testutil::{labels, taint};
use nodegate_core::vocab::member::{Expectation, MemberId, Readiness};

#[test]
fn daemonset_added_mid_wait_must_now_be_waited_for() {
    let a = tolerant_ds("cilium");
    let b = tolerant_ds("ebs-csi");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    );

    let step = g.at(2).feed(Input::daemonset_upserted(b.clone()));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberExpected { member } if *member == ds_member("ebs-csi"))
    ));

    let step = g.at(3).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert!(patches(&step).is_empty(), "ebs-csi has no pod yet");

    let step = g
        .at(4)
        .feed(Input::pod_upserted(ready_pod("ebs-csi-1", &b)));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn pod_seen_before_its_daemonset_counts_once_the_daemonset_arrives() {
    let a = tolerant_ds("cilium");
    let b = tolerant_ds("ebs-csi");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a), ready_pod("ebs-csi-1", &b)],
    );
    g.at(2).feed(Input::daemonset_upserted(b.clone()));
    assert_eq!(
        g.state.members[&ds_member("ebs-csi")].readiness,
        Some(Readiness::Ready {
            pod: "ebs-csi-1".into()
        })
    );
}

#[test]
fn daemonset_deleted_mid_wait_opens_if_it_was_the_last_blocker() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("broken"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert_eq!(g.state.blockers().len(), 1);

    let step = g.at(2).feed(Input::DaemonSetDeleted { uid: b.uid.clone() });
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberRemoved { member } if *member == ds_member("broken"))
    ));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn daemonset_deleted_with_an_unknown_uid_changes_nothing() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![a.clone()], vec![]);
    // The old object of a recreated DaemonSet: same name, another uid.
    let step = g.at(2).feed(Input::DaemonSetDeleted {
        uid: "uid-of-an-older-cilium".into(),
    });
    assert!(step.events.is_empty());
}

#[test]
fn daemonset_changed_to_select_other_nodes_stops_being_waited_for() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("agent"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    let mut b2 = b.clone();
    b2.template
        .node_selector
        .insert("role".into(), "gpu".into());
    let step = g.at(2).feed(Input::daemonset_upserted(b2));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberNotExpected { member, .. } if *member == ds_member("agent"))
    ));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn node_relabelled_so_a_daemonset_starts_being_expected() {
    let (a, gpu) = (tolerant_ds("cilium"), gpu_ds("nvidia"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), gpu.clone()],
        vec![unready_pod("cilium-1", &a)],
    );
    assert!(!g.state.members[&ds_member("nvidia")].is_expected());

    let mut relabelled = gated_node();
    relabelled.resource_version = "2".into();
    relabelled.labels.insert("role".into(), "gpu".into());
    let step = g.at(2).feed(Input::NodeChanged(relabelled.into()));
    assert!(has_event(&step, |e| matches!(e, Event::NodeUpdated { .. })));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberExpected { member } if *member == ds_member("nvidia"))
    ));

    let step = g.at(3).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert!(
        patches(&step).is_empty(),
        "nvidia is now expected and has no pod"
    );
    let step = g
        .at(4)
        .feed(Input::pod_upserted(ready_pod("nvidia-1", &gpu)));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].resource_version, "2");
}

#[test]
fn node_relabelled_so_a_daemonset_stops_being_expected_opens_the_gate() {
    let (a, gpu) = (tolerant_ds("cilium"), gpu_ds("nvidia"));
    let mut n = gated_node();
    n.labels.insert("role".into(), "gpu".into());
    let mut g = Gate::new(cfg());
    g.at(1).start(
        n.clone(),
        vec![a.clone(), gpu.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert_eq!(g.state.blockers()[0].member, ds_member("nvidia"));

    n.labels.remove("role");
    n.resource_version = "2".into();
    let step = g.at(2).feed(Input::NodeChanged(n.into()));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberNotExpected { member, .. } if *member == ds_member("nvidia"))
    ));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn daemonset_not_tolerating_the_managed_taint_is_not_waited_for() {
    let (a, late) = (tolerant_ds("cilium"), intolerant_ds("web-agent"));
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone(), late],
        vec![ready_pod("cilium-1", &a)],
    );
    let member = &g.state.members[&ds_member("web-agent")];
    match &member.expectation {
        Expectation::NotExpected { reason, .. } => {
            assert!(reason.contains(MANAGED_KEY), "{reason}")
        }
        other => panic!("expected not expected, got {other:?}"),
    }
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn a_transient_taint_does_not_keep_a_daemonset_from_being_expected() {
    let plain = intolerant_ds("needs-plain-node");
    let mut g = Gate::new(cfg());
    // Only the managed taint blocks it; not-ready is lifted by someone else.
    let n = node(vec![
        taint("node.kubernetes.io/not-ready", "NoSchedule"),
        taint("example.com/dedicated", "NoSchedule"),
    ]);
    let mut n = n;
    n.taints.push(managed());
    g.at(1).start(n, vec![plain], vec![]);
    match &g.state.members[&ds_member("needs-plain-node")].expectation {
        Expectation::NotExpected { reason, .. } => {
            assert!(reason.contains("example.com/dedicated"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn critical_pod_entry_is_waited_for_on_matching_nodes() {
    let mut c = cfg();
    c.critical.push(CriticalPodEntry {
        name: "kube-proxy".into(),
        namespace: "kube-system".into(),
        selector: LabelSelector {
            match_labels: labels(&[("k8s-app", "kube-proxy")])
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..Default::default()
        },
        node_selector: None,
    });
    c.critical.push(CriticalPodEntry {
        name: "gpu-only".into(),
        namespace: "kube-system".into(),
        selector: LabelSelector {
            match_labels: labels(&[("app", "x")])
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..Default::default()
        },
        node_selector: Some(LabelSelector {
            match_labels: labels(&[("role", "gpu")])
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..Default::default()
        }),
    });
    let mut g = Gate::new(c);
    let step = g.at(1).start(gated_node(), vec![], vec![]);
    assert!(patches(&step).is_empty());
    assert_eq!(
        g.state.blockers()[0].member,
        MemberId::Critical("kube-proxy".into())
    );
    assert!(!g.state.members[&MemberId::Critical("gpu-only".into())].is_expected());

    let mut proxy = nodegate_core::testutil::mk_pod("kube-proxy-abc", NODE, "uid-node-a");
    proxy.labels = labels(&[("k8s-app", "kube-proxy")]);
    let step = g.at(2).feed(Input::pod_upserted(proxy));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn pods_on_other_nodes_are_ignored() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let elsewhere = nodegate_core::testutil::mk_pod("cilium-other", "node-b", &a.uid);
    g.at(1)
        .start(gated_node(), vec![a.clone()], vec![elsewhere.clone()]);
    assert!(g.state.pods.is_empty());
    let step = g.at(2).feed(Input::pod_upserted(elsewhere));
    assert!(step.events.is_empty());
}
