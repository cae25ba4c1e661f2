//! explain's unit tests: the report of one small cluster with a member of
//! every kind (`report`), the table (`table`) and what is read from full
//! objects (`gather`). The fixtures live here.

mod gather;
mod report;
mod table;

use super::*;
use nodegate_core::rules::placement::PlacementConfig;
use nodegate_core::rules::readiness::CriticalPodEntry;
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::testutil::{
    ds_pod, mk_ds, mk_node, mk_pod, req, taint, taint_v, template_with_affinity,
    template_with_tolerations, term, toleration, ts,
};
use nodegate_core::vocab::model::{PodPlacement, Toleration};
use serde_json::json;

const GATE: &str = "nodegate.dev/initializing";
const NOW: i64 = 1_000_000;

fn settings() -> GateSettings {
    GateSettings {
        scope: Default::default(),
        suspend: false,
        placement: PlacementConfig::default(),
        startup: Default::default(),
        critical: Vec::new(),
        regate: None,
        conditions: Vec::new(),
        condition_taints: Vec::new(),
        resources: Vec::new(),
        dra_drivers: Vec::new(),
        max_unavailable: None,
        reboots: Default::default(),
        canary: None,
    }
}

fn tolerate_gate() -> Toleration {
    toleration(GATE, "Exists", "", "")
}

fn tolerate_all() -> PodPlacement {
    template_with_tolerations(vec![toleration("", "Exists", "", "")])
}

fn view(node: NodeInfo, daemonsets: Vec<DaemonSetInfo>, pods: Vec<PodInfo>) -> ClusterView {
    ClusterView {
        node,
        daemonsets,
        pods,
        unscheduled: Vec::new(),
        details: BTreeMap::new(),
        warnings: Vec::new(),
    }
}

fn pod_of(ds: &DaemonSetInfo, name: &str, node: &str) -> PodInfo {
    let mut p = ds_pod(name, node, ds);
    p.namespace = ds.namespace.clone().into();
    p
}

fn gated_arm_node() -> NodeInfo {
    mk_node(
        "arm-1",
        &[
            ("kubernetes.io/arch", "arm64"),
            ("topology.kubernetes.io/zone", "b"),
        ],
        vec![
            taint(GATE, "NoSchedule"),
            taint("node.kubernetes.io/not-ready", "NoSchedule"),
            taint_v("dedicated", "infra", "PreferNoSchedule"),
        ],
    )
}

fn row<'a>(r: &'a Report, name: &str) -> &'a MemberRow {
    r.daemonsets
        .iter()
        .chain(&r.critical_pods)
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no row {name} in {r:#?}"))
}

/// A small cluster with one DaemonSet for each way a member can stand.
fn sample() -> (ClusterView, GateSettings) {
    let node = gated_arm_node();
    let everywhere = mk_ds("kube-system", "everywhere", tolerate_all());
    let mut amd = mk_ds("kube-system", "amd-only", tolerate_all());
    amd.template
        .node_selector
        .insert("kubernetes.io/arch".into(), "amd64".into());
    let mut zone = mk_ds(
        "infra",
        "zone-a",
        template_with_affinity(vec![
            term(vec![req("topology.kubernetes.io/zone", "In", &["a"])]),
            term(vec![req("gpu", "Exists", &[])]),
        ]),
    );
    zone.template.tolerations.push(tolerate_gate());
    let after_gate = mk_ds("infra", "after-gate", PodPlacement::default());
    let mut ignored = mk_ds("infra", "ignored", tolerate_all());
    ignored
        .annotations
        .insert("nodegate.dev/ignore".into(), "true".into());
    let mut slow = mk_ds("infra", "slow", tolerate_all());
    slow.min_ready_seconds = 10;
    let held = mk_ds(
        "infra",
        "held",
        template_with_tolerations(vec![tolerate_gate()]),
    );
    let pending = mk_ds("infra", "pending", tolerate_all());
    let missing = mk_ds("infra", "missing", tolerate_all());
    let unbound = mk_ds("infra", "unbound", tolerate_all());
    let going = mk_ds("infra", "going", tolerate_all());

    let mut slow_pod = pod_of(&slow, "slow-x", "arm-1");
    slow_pod.ready_since = Some(ts(NOW - 3)).into();
    let mut held_pod = pod_of(&held, "held-x", "arm-1");
    held_pod.ready = false;
    let mut pending_pod = pod_of(&pending, "pending-x", "arm-1");
    pending_pod.phase = "Pending".into();
    pending_pod.ready = false;
    let mut going_pod = pod_of(&going, "going-x", "arm-1");
    going_pod.terminating = true;
    let mut unbound_pod = pod_of(&unbound, "unbound-x", "");
    unbound_pod.phase = "Pending".into();
    unbound_pod.ready = false;

    let mut v = view(
        node,
        vec![
            zone,
            everywhere.clone(),
            amd,
            after_gate,
            ignored,
            slow.clone(),
            held.clone(),
            pending.clone(),
            missing,
            unbound,
            going,
        ],
        vec![
            pod_of(&everywhere, "everywhere-x", "arm-1"),
            slow_pod,
            held_pod,
            pending_pod,
            going_pod,
        ],
    );
    v.unscheduled.push(unbound_pod);
    v.details.insert(
        "infra/pending-x".into(),
        PodDetail {
            unschedulable: None,
            containers: vec!["container agent: ContainerCreating".into()],
        },
    );
    v.details.insert(
        "infra/unbound-x".into(),
        PodDetail {
            unschedulable: Some("0/3 nodes are available: 1 Insufficient cpu.".into()),
            containers: Vec::new(),
        },
    );
    v.details.insert(
        "infra/held-x".into(),
        PodDetail {
            unschedulable: None,
            containers: vec!["container agent: CrashLoopBackOff".into()],
        },
    );
    let mut s = settings();
    s.critical = vec![
        CriticalPodEntry {
            name: "proxy".into(),
            namespace: "kube-system".into(),
            selector: LabelSelector::parse("k8s-app=kube-proxy").unwrap(),
            node_selector: None,
        },
        CriticalPodEntry {
            name: "gpu-driver".into(),
            namespace: "kube-system".into(),
            selector: LabelSelector::parse("app=driver").unwrap(),
            node_selector: Some(LabelSelector::parse("gpu=true").unwrap()),
        },
    ];
    (v, s)
}

fn sample_report() -> Report {
    let (v, s) = sample();
    build_report(&v, &s, ts(NOW))
}
