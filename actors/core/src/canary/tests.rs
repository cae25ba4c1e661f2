use std::time::Duration;

use super::*;
use crate::testutil::mk_pod;

fn cfg(probe: bool) -> CanaryConfig {
    CanaryConfig {
        namespace: "nodegate".into(),
        probe,
        max_in_flight: 3,
    }
}

/// The canary of `node` as the leader makes it, its sandbox up.
fn canary(node: &str) -> PodInfo {
    let mut pod = mk_pod(&pod_name(node), node, "node-uid");
    pod.namespace = "nodegate".into();
    pod.labels
        .insert(CANARY_LABEL.into(), label_value(node).into());
    pod.phase = "Running".into();
    pod.ready = false;
    pod.sandbox_ready = true;
    pod
}

#[test]
fn names_and_labels_fit_the_api_limits_and_stay_apart() {
    assert_eq!(pod_name("n1"), "nodegate-canary-n1");
    assert_eq!(label_value("n1"), "n1");
    let long = format!("{}.example.com", "a".repeat(250 - 12));
    let other = format!("{}.example.org", "a".repeat(250 - 12));
    assert!(pod_name(&long).len() <= 253);
    assert!(label_value(&long).len() <= 63);
    assert_ne!(pod_name(&long), pod_name(&other));
    assert_ne!(label_value(&long), label_value(&other));
    // Stable: the same node always gets the same name.
    assert_eq!(pod_name(&long), pod_name(&long.clone()));
    let label = label_value(&long);
    assert!(label.starts_with('a') && label.chars().last().is_some_and(|c| c.is_ascii_hexdigit()));
}

#[test]
fn only_a_pod_in_nodegates_namespace_labelled_for_the_node_is_its_canary() {
    let c = cfg(false);
    assert!(is_canary_of(&canary("n1"), &c, "n1"));
    // A tenant's forgery in its own namespace, with the right label.
    let mut forged = canary("n1");
    forged.namespace = "tenant".into();
    assert!(!is_canary_of(&forged, &c, "n1"));
    // The label of another node.
    let mut other = canary("n1");
    other.labels.insert(CANARY_LABEL.into(), "n2".into());
    assert!(!is_canary_of(&other, &c, "n1"));
    // No label at all.
    let mut bare = canary("n1");
    bare.labels.clear();
    assert!(!is_canary_of(&bare, &c, "n1"));
    // Bound elsewhere.
    assert!(!is_canary_of(&canary("n2"), &c, "n1"));
}

#[test]
fn ready_once_the_sandbox_is_up_and_the_probe_passes_where_configured() {
    struct Case {
        name: &'static str,
        probe: bool,
        pod: Option<PodInfo>,
        ready: bool,
        says: &'static str,
    }
    let with = |f: fn(&mut PodInfo)| {
        let mut p = canary("n1");
        f(&mut p);
        Some(p)
    };
    let cases = [
        Case {
            name: "no pod",
            probe: false,
            pod: None,
            ready: false,
            says: "no canary pod on the node yet (the leader creates one per gated node, at most 3 at once)",
        },
        Case {
            name: "sandbox up, no probe",
            probe: false,
            pod: with(|_| {}),
            ready: true,
            says: "",
        },
        Case {
            name: "sandbox not up, with the kubelet's words",
            probe: false,
            pod: with(|p| {
                p.sandbox_ready = false;
                p.phase = "Pending".into();
                p.status_note = Some("ContainerCreating".into());
            }),
            ready: false,
            says: "canary pod nodegate-canary-n1 has no sandbox yet (PodReadyToStartContainers is not True): ContainerCreating",
        },
        Case {
            name: "sandbox up, probe configured, not Ready",
            probe: true,
            pod: with(|_| {}),
            ready: false,
            says: "canary pod nodegate-canary-n1 has its sandbox, but its readiness probe does not pass yet",
        },
        Case {
            name: "sandbox up, probe passes",
            probe: true,
            pod: with(|p| p.ready = true),
            ready: true,
            says: "",
        },
        Case {
            name: "Ready without a sandbox does not count",
            probe: true,
            pod: with(|p| {
                p.ready = true;
                p.sandbox_ready = false;
            }),
            ready: false,
            says: "canary pod nodegate-canary-n1 has no sandbox yet (PodReadyToStartContainers is not True)",
        },
        Case {
            name: "failed, with its reason",
            probe: false,
            pod: with(|p| {
                p.phase = "Failed".into();
                p.status_note = Some("OutOfpods: Node didn't have enough resource: pods".into());
            }),
            ready: false,
            says: "canary pod nodegate-canary-n1 failed: OutOfpods: Node didn't have enough resource: pods; nodegate replaces it after a backoff",
        },
        Case {
            name: "being deleted",
            probe: false,
            pod: with(|p| p.terminating = true),
            ready: false,
            says: "canary pod nodegate-canary-n1 is being deleted; a new one follows",
        },
        Case {
            name: "a forged canary in another namespace counts for nothing",
            probe: false,
            pod: with(|p| p.namespace = "tenant".into()),
            ready: false,
            says: "no canary pod on the node yet (the leader creates one per gated node, at most 3 at once)",
        },
    ];
    for case in cases {
        let r = readiness(case.pod.iter(), &cfg(case.probe), "n1");
        assert_eq!(r.is_ready(), case.ready, "{}: {r:?}", case.name);
        if let Readiness::Waiting { why, .. } = &r {
            assert_eq!(why, case.says, "{}", case.name);
        }
    }
}

#[test]
fn the_backoff_doubles_from_five_seconds_to_five_minutes() {
    let secs: Vec<u64> = (1..=9).map(|n| BACKOFF.ceiling(n).as_secs()).collect();
    assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
    assert_eq!(BACKOFF.ceiling(0), Duration::from_secs(5));
    assert_eq!(BACKOFF.ceiling(u32::MAX), BACKOFF.most);
}
