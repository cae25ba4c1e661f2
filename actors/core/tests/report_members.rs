//! `report` against the gate: every row of an explain report says what the
//! gate's member says — expected or not and why (word for word, with the same
//! code), Ready or not, the pod — and the counts and the verdict agree with
//! the state. First on one node with every kind of member, then on random
//! nodes, pods and configurations, and finally against a live gate driven
//! through random inputs (what the controller holds) compared with a report
//! made from one fresh read of the same world (what explain does).

use std::collections::BTreeSet;

use jiff::Timestamp;
use nodegate_core::gate::report::{self, MemberRow, PodDetail, ReadFacts, Report};
use nodegate_core::gate::{self, GateState, Input};
use nodegate_core::rules::placement::PlacementConfig;
use nodegate_core::rules::readiness::CriticalPodEntry;
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::testutil::{
    mk_ds, mk_node, mk_pod, req, taint, template_with_affinity, template_with_tolerations, term,
    toleration, ts,
};
use nodegate_core::vocab::config::{Config, OnTimeout};
use nodegate_core::vocab::member::{Expectation, Member, MemberId, Readiness};
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo, PodPlacement};
use proptest::prelude::*;

const GATE: &str = "nodegate.dev/initializing";
const NODE: &str = "n1";
const NOW: i64 = 1_000;

fn cfg(excluded: &[&str], critical: Vec<CriticalPodEntry>) -> Config {
    let placement = PlacementConfig {
        excluded: excluded
            .iter()
            .map(|k| {
                let (ns, name) = k.split_once('/').unwrap_or(("", k));
                (ns.to_string(), name.to_string())
            })
            .collect(),
        ..PlacementConfig::default()
    };
    Config {
        scope: Default::default(),
        placement,
        critical,
        timeout: None,
        on_timeout: OnTimeout::Open,
        dry_run: true,
        suspend: false,
        ..Config::default()
    }
}

fn entry(name: &str, app: &str, node_selector: Option<&str>) -> CriticalPodEntry {
    CriticalPodEntry {
        name: name.into(),
        namespace: "infra".into(),
        selector: LabelSelector::parse(&format!("app={app}")).unwrap(),
        node_selector: node_selector.map(|s| LabelSelector::parse(s).unwrap()),
    }
}

fn tolerant(name: &str) -> DaemonSetInfo {
    mk_ds(
        "infra",
        name,
        template_with_tolerations(vec![toleration("", "Exists", "", "")]),
    )
}

fn pod_of(ds: &DaemonSetInfo, name: &str) -> PodInfo {
    let mut p = mk_pod(name, NODE, &ds.uid);
    p.namespace = ds.namespace.as_str().into();
    p.labels.insert("app".into(), ds.name.clone().into());
    p
}

/// The member a row stands for.
fn id_of(row: &MemberRow) -> MemberId {
    row.label.parse().unwrap_or_else(|never| match never {})
}

/// Every row against the state's member, and the totals against the state.
fn check_report(report: &Report, state: &GateState, cfg: &Config) {
    let rows: Vec<&MemberRow> = report
        .daemonsets
        .iter()
        .chain(&report.critical_pods)
        .collect();
    let ids: BTreeSet<MemberId> = rows.iter().map(|r| id_of(r)).collect();
    let members: BTreeSet<MemberId> = state.members.keys().cloned().collect();
    assert_eq!(ids, members, "one row per member");
    for row in &rows {
        let id = id_of(row);
        let member: &Member = &state.members[&id];
        let waited = gate::waited_pod(&id, state, cfg, report.evaluated_at);
        check_row(row, member, waited.as_ref(), report.evaluated_at);
    }
    assert_eq!(report.expected_members, state.expected().count());
    let ready = rows.iter().filter(|r| r.ready == Some(true)).count();
    assert_eq!(report.ready_members, ready);
    assert_eq!(report.would_open, state.may_open_by_ready());
    assert_eq!(report.node_not_ready, state.node_wait_reason());
    assert_eq!(report.gated, report::is_gated(state));
    let blockers = state.blockers();
    if !blockers.is_empty() {
        let head = format!("waiting for {} of ", blockers.len());
        assert!(report.verdict.contains(&head), "{}", report.verdict);
        for b in &blockers {
            assert!(
                report.verdict.contains(&format!("{} (", b.member)),
                "{} not named in {}",
                b.member,
                report.verdict
            );
        }
    }
}

fn check_row(row: &MemberRow, member: &Member, pod: Option<&String>, now: Timestamp) {
    let ctx = format!("{row:#?}\n{member:#?}");
    assert_eq!(row.expected, member.is_expected(), "{ctx}");
    assert!(!row.reason.is_empty(), "{ctx}");
    match (&member.expectation, &member.readiness) {
        (Expectation::NotExpected { reason, code }, _) => {
            assert_eq!(&row.reason, reason, "{ctx}");
            assert_eq!(row.reason_code, code.as_str(), "{ctx}");
            assert!(!row.reason_code.is_empty(), "{ctx}");
            assert_eq!(
                (&row.ready, &row.pod, &row.waiting),
                (&None, &None, &None),
                "{ctx}"
            );
        }
        (Expectation::Expected, Some(Readiness::Ready { pod })) => {
            assert_eq!(row.reason_code, report::EXPECTED, "{ctx}");
            assert_eq!(row.ready, Some(true), "{ctx}");
            assert_eq!(row.pod.as_ref(), Some(pod), "{ctx}");
            assert_eq!(row.waiting, None, "{ctx}");
        }
        (Expectation::Expected, Some(Readiness::Waiting { why, available_at })) => {
            assert_eq!(row.reason_code, report::EXPECTED, "{ctx}");
            assert_eq!(row.ready, Some(false), "{ctx}");
            let waiting = row.waiting.as_deref().unwrap_or_default();
            match (pod, available_at) {
                (Some(p), Some(at)) => {
                    assert_eq!(row.pod.as_ref(), Some(p), "{ctx}");
                    assert!(waiting.starts_with(&format!("pod {p} Ready for ")), "{ctx}");
                    assert!(waiting.ends_with(&format!(", available at {at}")), "{ctx}");
                    assert!(*at > now, "{ctx}");
                }
                // The gate's words, and at most what the full pod adds.
                (Some(p), None) => {
                    assert_eq!(row.pod.as_ref(), Some(p), "{ctx}");
                    assert!(waiting.starts_with(why.as_str()), "{ctx}");
                }
                // No unbound pods were read here: the gate's words alone.
                (None, _) => {
                    assert_eq!(row.pod, None, "{ctx}");
                    assert_eq!(waiting, why, "{ctx}");
                }
            }
        }
        (Expectation::Expected, None) => panic!("a member not evaluated: {ctx}"),
    }
}

/// (label, expected, ready, code, waiting)
type Want = (
    &'static str,
    bool,
    Option<bool>,
    &'static str,
    Option<&'static str>,
);

/// One node with every kind of member.
#[test]
fn every_kind_of_member_reads_as_the_gate_has_it() {
    let node = mk_node(
        NODE,
        &[("kubernetes.io/arch", "arm64"), ("zone", "b")],
        vec![
            taint(GATE, "NoSchedule"),
            taint("dedicated", "NoExecute"),
            taint("node.kubernetes.io/not-ready", "NoSchedule"),
        ],
    );
    let ready = tolerant("ready");
    let held = tolerant("held");
    let missing = tolerant("missing");
    let mut slow = tolerant("slow");
    slow.min_ready_seconds = 10;
    let mut amd = tolerant("amd");
    amd.template
        .node_selector
        .insert("kubernetes.io/arch".into(), "amd64".into());
    let mut zone_a = mk_ds(
        "infra",
        "zone-a",
        template_with_affinity(vec![term(vec![req("zone", "In", &["a"])])]),
    );
    zone_a.template.tolerations = tolerant("x").template.tolerations;
    let plain = mk_ds(
        "infra",
        "plain",
        template_with_tolerations(vec![toleration(GATE, "Exists", "", "")]),
    );
    let after = mk_ds(
        "infra",
        "after",
        template_with_tolerations(vec![toleration("dedicated", "Exists", "", "")]),
    );
    let excluded = tolerant("excluded");
    let mut ignored = tolerant("ignored");
    ignored
        .annotations
        .insert("nodegate.dev/ignore".into(), "true".into());
    let dss = vec![
        ready.clone(),
        held.clone(),
        missing,
        slow.clone(),
        amd,
        zone_a,
        plain,
        after,
        excluded,
        ignored,
    ];
    let mut held_pod = pod_of(&held, "held-x");
    held_pod.ready = false;
    let mut slow_pod = pod_of(&slow, "slow-x");
    slow_pod.ready_since = Some(ts(NOW - 4)).into();
    let proxy = PodInfo {
        controller_uid: None,
        ..pod_of(&tolerant("proxy"), "proxy-x")
    };
    let pods = vec![pod_of(&ready, "ready-x"), held_pod, slow_pod, proxy];
    let cfg = cfg(
        &["infra/excluded"],
        vec![
            entry("proxy", "proxy", None),
            entry("firmware", "firmware", Some("kubernetes.io/arch=arm64")),
            entry("gpu", "driver", Some("gpu=true")),
        ],
    );
    let state = report::gate_state(&node, &dss, &pods, &cfg, ts(NOW));
    let r = report::build(&state, &cfg, &ReadFacts::default(), ts(NOW)).expect("a report");
    check_report(&r, &state, &cfg);

    let want: &[Want] = &[
        ("infra/after", false, None, "starts_after_gate", None),
        ("infra/amd", false, None, "node_selector", None),
        ("infra/excluded", false, None, "excluded_by_name", None),
        (
            "infra/held",
            true,
            Some(false),
            "expected",
            Some("pod held-x is not Ready"),
        ),
        ("infra/ignored", false, None, "ignore_annotation", None),
        (
            "infra/missing",
            true,
            Some(false),
            "expected",
            Some("no pod yet"),
        ),
        ("infra/plain", false, None, "untolerated_taint", None),
        ("infra/ready", true, Some(true), "expected", None),
        (
            "infra/slow",
            true,
            Some(false),
            "expected",
            Some(
                "pod slow-x Ready for 4s of minReadySeconds 10s, available at 1970-01-01T00:16:46Z",
            ),
        ),
        ("infra/zone-a", false, None, "node_affinity", None),
        ("critical:proxy", true, Some(true), "expected", None),
        (
            "critical:firmware",
            true,
            Some(false),
            "expected",
            Some("no pod matching app=firmware in namespace infra on the node yet"),
        ),
        ("critical:gpu", false, None, "node_selector", None),
    ];
    let rows: Vec<&MemberRow> = r.daemonsets.iter().chain(&r.critical_pods).collect();
    let got: Vec<_> = rows
        .iter()
        .map(|m| {
            (
                m.label.as_str(),
                m.expected,
                m.ready,
                m.reason_code.as_str(),
                m.waiting.as_deref(),
            )
        })
        .collect();
    assert_eq!(got, want.to_vec());
    let gpu = rows.iter().find(|m| m.name == "gpu").unwrap();
    assert_eq!(
        gpu.reason,
        "the node does not match the entry's node selector \"gpu=true\""
    );
    // The gate itself words minReadySeconds without a duration that grows
    // with the clock.
    let slow_member = &state.members[&MemberId::DaemonSet("infra/slow".into())];
    assert!(matches!(
        &slow_member.readiness,
        Some(Readiness::Waiting { why, .. })
            if why == "pod slow-x Ready for less than minReadySeconds 10s, available at 1970-01-01T00:16:46Z"
    ));
}

#[test]
fn detail_from_a_full_read_adds_to_the_gates_words_and_never_replaces_them() {
    let node = mk_node(NODE, &[], vec![taint(GATE, "NoSchedule")]);
    let (held, going, pending, unbound) = (
        tolerant("held"),
        tolerant("going"),
        tolerant("pending"),
        tolerant("unbound"),
    );
    let mut held_pod = pod_of(&held, "held-x");
    held_pod.ready = false;
    let mut going_pod = pod_of(&going, "going-x");
    going_pod.terminating = true;
    let mut pending_pod = pod_of(&pending, "pending-x");
    pending_pod.phase = "Pending".into();
    pending_pod.ready = false;
    let mut unbound_pod = pod_of(&unbound, "unbound-x");
    unbound_pod.node_name = Default::default();
    let busy = |c: &str| PodDetail {
        unschedulable: None,
        containers: vec![format!("container agent: {c}")],
    };
    let facts = ReadFacts {
        unscheduled: vec![unbound_pod],
        details: [
            ("infra/held-x".to_string(), busy("CrashLoopBackOff")),
            ("infra/going-x".to_string(), busy("Error")),
            (
                "infra/pending-x".to_string(),
                PodDetail {
                    unschedulable: Some("no room".into()),
                    containers: vec![],
                },
            ),
            (
                "infra/unbound-x".to_string(),
                PodDetail {
                    unschedulable: Some("0/3 nodes are available.".into()),
                    containers: vec![],
                },
            ),
        ]
        .into(),
    };
    let cfg = cfg(&[], vec![]);
    let r = report::explain(
        &node,
        &[held, going, pending, unbound],
        &[held_pod, going_pod, pending_pod],
        &facts,
        &cfg,
        ts(NOW),
    );
    let waiting: Vec<(&str, Option<&str>, Option<&str>)> = r
        .daemonsets
        .iter()
        .map(|m| (m.name.as_str(), m.pod.as_deref(), m.waiting.as_deref()))
        .collect();
    assert_eq!(
        waiting,
        vec![
            ("going", Some("going-x"), Some("pod going-x is terminating")),
            (
                "held",
                Some("held-x"),
                Some("pod held-x is not Ready, container agent: CrashLoopBackOff")
            ),
            (
                "pending",
                Some("pending-x"),
                Some("pod pending-x is Pending, not scheduled: no room")
            ),
            (
                "unbound",
                Some("unbound-x"),
                Some("pod unbound-x is Pending, not scheduled: 0/3 nodes are available.")
            ),
        ]
    );
}

// ---------------------------------------------------------------------------
// Random worlds

fn world_daemonsets() -> Vec<DaemonSetInfo> {
    let mut slow = tolerant("slow");
    slow.min_ready_seconds = 10;
    let mut gpu = tolerant("gpu");
    gpu.template
        .node_selector
        .insert("role".into(), "gpu".into());
    let mut zone = tolerant("zone");
    zone.template.required_node_affinity = Some(vec![term(vec![req("zone", "In", &["a"])])]);
    vec![
        tolerant("cni"),
        slow,
        gpu,
        zone,
        mk_ds("infra", "plain", PodPlacement::default()),
        mk_ds(
            "infra",
            "gate-only",
            template_with_tolerations(vec![toleration(GATE, "Exists", "", "")]),
        ),
    ]
}

fn world_node(bits: u8) -> NodeInfo {
    let mut labels = vec![];
    if bits & 1 != 0 {
        labels.push(("role", "gpu"));
    }
    labels.push(("zone", if bits & 2 != 0 { "a" } else { "b" }));
    let mut taints = vec![];
    if bits & 4 != 0 {
        taints.push(taint(GATE, "NoSchedule"));
    }
    if bits & 8 != 0 {
        taints.push(taint("example.com/foreign", "NoSchedule"));
    }
    if bits & 16 != 0 {
        taints.push(taint("node.kubernetes.io/not-ready", "NoSchedule"));
    }
    mk_node(NODE, &labels, taints)
}

fn world_pod(ds: &DaemonSetInfo, which: u8, kind: u8, since: u8) -> PodInfo {
    let mut p = pod_of(ds, &format!("{}-{}", ds.name, which % 2));
    p.uid = format!("uid-{}", p.name).into();
    match kind % 5 {
        0 => p.ready_since = Some(ts(NOW - i64::from(since % 16))).into(),
        1 => p.ready = false,
        2 => {
            p.phase = "Pending".into();
            p.ready = false;
        }
        3 => p.terminating = true,
        _ => p.ready_since = Default::default(),
    }
    p
}

fn world_cfg(bits: u8) -> Config {
    let excluded: &[&str] = if bits & 1 != 0 { &["infra/cni"] } else { &[] };
    let mut critical = vec![entry("proxy", "cni", None)];
    if bits & 2 != 0 {
        critical.push(entry("gpu-driver", "gpu", Some("role=gpu")));
    }
    cfg(excluded, critical)
}

type PodSpec = (usize, u8, u8, u8);

fn pods_of(specs: &[PodSpec]) -> Vec<PodInfo> {
    let dss = world_daemonsets();
    specs
        .iter()
        .map(|(d, w, k, s)| world_pod(&dss[d % dss.len()], *w, *k, *s))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the node, pods and configuration: each row is its member.
    #[test]
    fn each_row_is_the_gates_member(
        node_bits in any::<u8>(),
        cfg_bits in any::<u8>(),
        pods in prop::collection::vec((0usize..6, any::<u8>(), any::<u8>(), any::<u8>()), 0..10),
    ) {
        let cfg = world_cfg(cfg_bits);
        let state = report::gate_state(
            &world_node(node_bits), &world_daemonsets(), &pods_of(&pods), &cfg, ts(NOW),
        );
        let r = report::build(&state, &cfg, &ReadFacts::default(), ts(NOW)).expect("a report");
        check_report(&r, &state, &cfg);
    }

    /// A live gate fed one change at a time, as the controller's is, and a
    /// report made from one read of the world it ends up seeing, as explain
    /// makes it, agree member for member.
    #[test]
    fn a_live_gate_and_a_fresh_read_agree(
        node_bits in any::<u8>(),
        cfg_bits in any::<u8>(),
        start in prop::collection::vec((0usize..6, any::<u8>(), any::<u8>(), any::<u8>()), 0..6),
        changes in prop::collection::vec(
            (0u8..4, any::<u8>(), (0usize..6, any::<u8>(), any::<u8>(), any::<u8>())), 1..20),
    ) {
        let cfg = world_cfg(cfg_bits);
        let mut live = GateState::default();
        let snapshot = Input::snapshot(
            world_node(node_bits | 4), world_daemonsets(), pods_of(&start));
        gate::step(&mut live, &snapshot, &cfg, ts(1));
        let mut now = ts(1);
        for (i, (kind, bits, pod)) in changes.iter().enumerate() {
            now = ts(NOW - 40 + i64::try_from(i).unwrap_or(0));
            let input = match kind {
                0 => Input::NodeChanged(world_node(bits | 4).into()),
                1 => Input::PodDeleted { uid: pods_of(&[*pod])[0].uid.to_string() },
                _ => Input::pod_upserted(pods_of(&[*pod])[0].clone()),
            };
            gate::step(&mut live, &input, &cfg, now);
        }
        prop_assume!(report::is_gated(&live) && live.phase == gate::Phase::Waiting);
        let node = live.node.clone().expect("seen");
        let dss: Vec<DaemonSetInfo> = live.daemonsets.values().map(|d| (**d).clone()).collect();
        let pods: Vec<PodInfo> = live.pods.values().map(|p| (**p).clone()).collect();
        let fresh = report::explain(&node, &dss, &pods, &ReadFacts::default(), &cfg, now);
        let from_live = report::build(&live, &cfg, &ReadFacts::default(), now).expect("a report");
        check_report(&from_live, &live, &cfg);
        let key = |r: &Report| -> Vec<_> {
            r.daemonsets.iter().chain(&r.critical_pods)
                .map(|m| (m.label.clone(), m.expected, m.ready, m.reason_code.clone(),
                          m.reason.clone(), m.pod.clone()))
                .collect()
        };
        prop_assert_eq!(key(&fresh), key(&from_live));
        prop_assert_eq!(
            (fresh.expected_members, fresh.ready_members, fresh.would_open),
            (from_live.expected_members, from_live.ready_members, from_live.would_open)
        );
    }
}

#[test]
fn a_node_without_a_managed_taint_still_shows_what_the_gate_would_wait_for() {
    let node = mk_node(NODE, &[], vec![]);
    let cni = tolerant("cni");
    let cfg = cfg(&[], vec![]);
    let state = report::gate_state(&node, &[cni], &[], &cfg, ts(NOW));
    assert!(!report::is_gated(&state));
    assert_eq!(state.members, gate::derive_members(&state, &cfg, ts(NOW)));
    let r = report::build(&state, &cfg, &ReadFacts::default(), ts(NOW)).expect("a report");
    check_report(&r, &state, &cfg);
    assert!(!r.gated && !r.would_open);
    assert!(report::some_daemonset_has_no_pod(&state, &cfg, ts(NOW)));
}
