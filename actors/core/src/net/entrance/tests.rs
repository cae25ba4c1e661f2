use super::*;
use crate::rules::selector::LabelSelector;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string().into(), v.to_string().into()))
        .collect()
}

fn managed() -> Vec<ManagedTaint> {
    vec![
        ManagedTaint::new("nodegate.dev/initializing", "NoSchedule"),
        ManagedTaint::new("example.com/startup", "NoExecute"),
    ]
}

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// One node for the tables: its labels, taints and annotations.
struct Node {
    labels: Labels,
    taints: Vec<Taint>,
    ignored: bool,
    opened: Option<Timestamp>,
    created: Option<Timestamp>,
}

impl Node {
    fn new() -> Node {
        Node {
            labels: labels(&[("pool", "gpu")]),
            taints: Vec::new(),
            ignored: false,
            opened: None,
            created: Some(ts("2026-01-01T00:00:00Z")),
        }
    }
    fn view(&self) -> NodeView<'_> {
        NodeView {
            labels: &self.labels,
            taints: &self.taints,
            ignored: self.ignored,
            opened_before: self.opened,
            created: self.created,
        }
    }
}

/// How a table row changes the default node.
type Change = Box<dyn Fn(&mut Node)>;

fn gpu_only() -> Scope {
    Scope {
        node_selector: Some(LabelSelector::parse("pool=gpu").expect("selector")),
    }
}

#[test]
fn admission_table() {
    let startup = Taint::new("nodegate.dev/initializing", "", "NoSchedule");
    let foreign = Taint::new("example.com/other", "x", "NoSchedule");
    let cases: Vec<(&str, Change, bool, Scope, Admission)> = vec![
        (
            "no spec.taints at all: the list is created",
            Box::new(|_| {}),
            false,
            Scope::default(),
            Admission::AddTaint {
                taint: startup.clone(),
                create_list: true,
            },
        ),
        (
            "an empty spec.taints: the taint is appended",
            Box::new(|_| {}),
            true,
            Scope::default(),
            Admission::AddTaint {
                taint: startup.clone(),
                create_list: false,
            },
        ),
        (
            "a foreign taint only: appended after it",
            {
                let f = foreign.clone();
                Box::new(move |n: &mut Node| n.taints.push(f.clone()))
            },
            true,
            gpu_only(),
            Admission::AddTaint {
                taint: startup.clone(),
                create_list: false,
            },
        ),
        (
            "already carries the second managed taint (any value)",
            Box::new(|n: &mut Node| {
                n.taints
                    .push(Taint::new("example.com/startup", "v", "NoExecute"))
            }),
            true,
            Scope::default(),
            Admission::Unchanged(Skip::AlreadyGated(Taint::new(
                "example.com/startup",
                "v",
                "NoExecute",
            ))),
        ),
        (
            "same key, other effect: not a managed taint, so one is added",
            Box::new(|n: &mut Node| {
                n.taints
                    .push(Taint::new("nodegate.dev/initializing", "", "NoExecute"))
            }),
            true,
            Scope::default(),
            Admission::AddTaint {
                taint: startup.clone(),
                create_list: false,
            },
        ),
        (
            "outside the node selector",
            Box::new(|n: &mut Node| n.labels = labels(&[("pool", "cpu")])),
            false,
            gpu_only(),
            Admission::Unchanged(Skip::OutOfScope),
        ),
        (
            "annotated ignore",
            Box::new(|n: &mut Node| n.ignored = true),
            false,
            Scope::default(),
            Admission::Unchanged(Skip::Ignored),
        ),
    ];
    for (name, change, present, scope, want) in cases {
        let mut node = Node::new();
        change(&mut node);
        assert_eq!(
            admit(
                &node.view(),
                present,
                &scope,
                &managed(),
                &StartupTaints::default()
            ),
            want,
            "{name}"
        );
    }
}

/// The taint added is the one chosen for the node's labels; every taint a
/// rule can choose is managed, so a node carrying any of them is gated
/// already and gets no second one.
#[test]
fn admission_adds_the_taint_chosen_for_the_labels() {
    use crate::rules::startup::{Autoscaler, StartupRule};
    let first = ManagedTaint::new("nodegate.dev/initializing", "NoSchedule");
    let startup = StartupTaints::new(
        vec![StartupRule::parse("pool=gpu=example.com/gpu-init").expect("rule")],
        &[Autoscaler::Auto],
        first.clone(),
    );
    let managed = startup.managed(&[first]);
    let cases = [
        (
            vec![("pool", "gpu"), ("karpenter.sh/nodepool", "a")],
            "example.com/gpu-init",
        ),
        (
            vec![("karpenter.sh/nodepool", "a")],
            "readiness.k8s.io/nodegate",
        ),
        (
            vec![("cloud.google.com/gke-nodepool", "p")],
            "startup-taint.cluster-autoscaler.kubernetes.io/nodegate",
        ),
        (vec![("pool", "cpu")], "nodegate.dev/initializing"),
    ];
    for (pairs, key) in cases {
        let mut node = Node::new();
        node.labels = labels(&pairs);
        assert_eq!(
            admit(&node.view(), false, &Scope::default(), &managed, &startup),
            Admission::AddTaint {
                taint: Taint::new(key, "", "NoSchedule"),
                create_list: true,
            },
            "{pairs:?}"
        );
        // A node registered with any managed taint is left as it is.
        for m in &managed {
            node.taints = vec![m.to_taint()];
            assert_eq!(
                admit(&node.view(), true, &Scope::default(), &managed, &startup),
                Admission::Unchanged(Skip::AlreadyGated(m.to_taint())),
                "{pairs:?} carrying {m}"
            );
        }
    }
}

#[test]
fn late_taint_table() {
    let now = ts("2026-01-01T00:01:00Z");
    let window = SignedDuration::from_secs(120);
    let cases: Vec<(&str, Change, Result<(), Skip>)> = vec![
        ("new, untainted, in scope", Box::new(|_| {}), Ok(())),
        (
            "created exactly the window ago",
            Box::new(|n: &mut Node| n.created = Some(ts("2025-12-31T23:59:00Z"))),
            Err(Skip::TooOld {
                age: SignedDuration::from_secs(120),
            }),
        ),
        (
            "created a second inside the window",
            Box::new(|n: &mut Node| n.created = Some(ts("2025-12-31T23:59:01Z"))),
            Ok(()),
        ),
        (
            "opened by nodegate before",
            Box::new(|n: &mut Node| n.opened = Some(ts("2026-01-01T00:00:30Z"))),
            Err(Skip::OpenedBefore(ts("2026-01-01T00:00:30Z"))),
        ),
        (
            "ignored",
            Box::new(|n: &mut Node| n.ignored = true),
            Err(Skip::Ignored),
        ),
        (
            "out of scope",
            Box::new(|n: &mut Node| n.labels.clear()),
            Err(Skip::OutOfScope),
        ),
        (
            "already tainted",
            Box::new(|n: &mut Node| {
                n.taints
                    .push(Taint::new("nodegate.dev/initializing", "", "NoSchedule"))
            }),
            Err(Skip::AlreadyGated(Taint::new(
                "nodegate.dev/initializing",
                "",
                "NoSchedule",
            ))),
        ),
    ];
    for (name, change, want) in cases {
        let mut node = Node::new();
        change(&mut node);
        assert_eq!(
            late_taint(&node.view(), &gpu_only(), &managed(), now, window),
            want,
            "{name}"
        );
    }
}

#[test]
fn backfill_has_no_window_but_the_same_other_rules() {
    let mut node = Node::new();
    node.created = Some(ts("2020-01-01T00:00:00Z"));
    assert_eq!(backfill(&node.view(), &gpu_only(), &managed()), Ok(()));
    node.opened = Some(ts("2020-01-01T00:05:00Z"));
    assert_eq!(
        backfill(&node.view(), &gpu_only(), &managed()),
        Err(Skip::OpenedBefore(ts("2020-01-01T00:05:00Z")))
    );
}

#[test]
fn only_daemonset_and_mirror_pods_are_not_workloads() {
    let pod = |ns: &str, name: &str, kind: Option<&str>, mirror: bool| BoundPod {
        namespace: ns.into(),
        name: name.into(),
        controller_kind: kind.map(String::from),
        mirror,
    };
    let pods = vec![
        pod("kube-system", "cni-x", Some("DaemonSet"), false),
        pod("kube-system", "etcd-node", Some("Node"), true),
        pod("web", "api-7f", Some("ReplicaSet"), false),
        pod("batch", "once", None, false),
        pod("ops", "looks-like-ds", Some("Daemonset"), false),
    ];
    assert_eq!(
        workload_pods(&pods),
        vec!["web/api-7f", "batch/once", "ops/looks-like-ds"]
    );
    assert!(workload_pods(&pods[..2]).is_empty());
}

#[test]
fn skips_read_as_reasons() {
    let cases = [
        (Skip::OutOfScope, "excluded by the node selector"),
        (Skip::Ignored, "annotated nodegate.dev/ignore=true"),
        (
            Skip::AlreadyGated(Taint::new("k", "", "NoSchedule")),
            "already carries k:NoSchedule",
        ),
        (
            Skip::OpenedBefore(ts("2026-01-01T00:00:30.5Z")),
            "opened before, at 2026-01-01T00:00:30Z",
        ),
        (
            Skip::TooOld {
                age: SignedDuration::from_secs(300),
            },
            "created 300s ago, outside the new-node window",
        ),
        (
            Skip::HasWorkload(vec!["a/1".into(), "a/2".into(), "b/3".into(), "c/4".into()]),
            "has workload pods: a/1, a/2, b/3 and 1 more",
        ),
    ];
    for (skip, want) in cases {
        assert_eq!(skip.to_string(), want);
    }
}
