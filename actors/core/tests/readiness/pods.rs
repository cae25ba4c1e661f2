//! A DaemonSet's pod on the node: Ready, Running, not being deleted, owned
//! by the DaemonSet, available for its `minReadySeconds`; and what it waits
//! for when it is not.

use super::*;

#[test]
fn a_running_ready_owned_pod_satisfies_the_daemonset() {
    let pods = [owned("agent-x")];
    assert_eq!(
        daemonset_member(&ds_with_min_ready(0), &pods, ts(NOW)),
        ready("agent-x")
    );
}

#[test]
fn no_pods_means_no_pod_yet() {
    let state = daemonset_member(&ds_with_min_ready(0), &[], ts(NOW));
    assert_eq!(state, MemberState::NotReady(Waiting::NoPod));
    assert_eq!(state.to_string(), "no pod yet");
}

#[test]
fn only_pods_whose_controller_is_the_daemonset_count() {
    let ds = ds_with_min_ready(0);
    let mut other_owner = owned("other");
    other_owner.controller_uid = Some("uid-kube-system-other".into());
    let mut no_controller = owned("orphan");
    // An owner reference without `controller: true` is projected as None.
    no_controller.controller_uid = None;
    let mut same_name_other_uid = owned("agent-x");
    same_name_other_uid.controller_uid = Some("uid-of-a-deleted-agent".into());
    let pods = [other_owner, no_controller, same_name_other_uid];
    assert_eq!(
        daemonset_member(&ds, &pods, ts(NOW)),
        MemberState::NotReady(Waiting::NoPod)
    );
}

#[test]
fn single_pod_states() {
    struct Case {
        name: &'static str,
        edit: fn(&mut PodInfo),
        want: Waiting,
        text: &'static str,
    }
    let p = || "agent-x".to_string();
    let cases = vec![
        Case {
            name: "terminating_ready_pod",
            edit: |p| p.terminating = true,
            want: Waiting::Terminating { pod: p() },
            text: "pod agent-x is terminating",
        },
        Case {
            name: "pending_pod",
            edit: |p| {
                p.phase = "Pending".into();
                p.ready = false;
            },
            want: Waiting::NotRunning {
                pod: p(),
                phase: "Pending".into(),
            },
            text: "pod agent-x is Pending",
        },
        Case {
            name: "succeeded_pod",
            edit: |p| p.phase = "Succeeded".into(),
            want: Waiting::NotRunning {
                pod: p(),
                phase: "Succeeded".into(),
            },
            text: "pod agent-x is Succeeded",
        },
        Case {
            name: "failed_pod",
            edit: |p| p.phase = "Failed".into(),
            want: Waiting::NotRunning {
                pod: p(),
                phase: "Failed".into(),
            },
            text: "pod agent-x is Failed",
        },
        Case {
            name: "unknown_phase",
            edit: |p| p.phase = "Unknown".into(),
            want: Waiting::NotRunning {
                pod: p(),
                phase: "Unknown".into(),
            },
            text: "pod agent-x is Unknown",
        },
        Case {
            name: "no_phase_yet",
            edit: |p| p.phase = Default::default(),
            want: Waiting::NotRunning {
                pod: p(),
                phase: String::new(),
            },
            text: "pod agent-x has no phase yet",
        },
        Case {
            name: "ready_condition_but_not_running",
            edit: |p| p.phase = "Pending".into(),
            want: Waiting::NotRunning {
                pod: p(),
                phase: "Pending".into(),
            },
            text: "pod agent-x is Pending",
        },
        Case {
            name: "running_not_ready",
            edit: |p| p.ready = false,
            want: Waiting::NotReady { pod: p() },
            text: "pod agent-x is not Ready",
        },
        Case {
            name: "terminating_wins_over_not_running",
            edit: |p| {
                p.terminating = true;
                p.phase = "Pending".into();
            },
            want: Waiting::Terminating { pod: p() },
            text: "pod agent-x is terminating",
        },
    ];
    for c in cases {
        let mut pod = owned("agent-x");
        (c.edit)(&mut pod);
        let got = waiting(daemonset_member(&ds_with_min_ready(0), [&pod], ts(NOW)));
        assert_eq!(got, c.want, "{}", c.name);
        assert_eq!(got.to_string(), c.text, "{}", c.name);
    }
}

#[test]
fn min_ready_seconds_waits_for_availability() {
    let ds = ds_with_min_ready(10);
    let mut pod = owned("agent-x");
    pod.ready_since = Some(ts(NOW - 3)).into();
    let got = waiting(daemonset_member(&ds, [&pod], ts(NOW)));
    assert_eq!(
        got,
        Waiting::NotAvailableYet {
            pod: "agent-x".into(),
            ready_for: Duration::from_secs(3),
            min_ready: Duration::from_secs(10),
            available_at: ts(NOW + 7),
        }
    );
    assert_eq!(
        got.to_string(),
        "pod agent-x Ready for 3s of minReadySeconds 10s"
    );
    assert_eq!(got.available_at(), Some(ts(NOW + 7)));
}

#[test]
fn min_ready_seconds_boundary_exactly_equal_is_available() {
    let ds = ds_with_min_ready(10);
    let mut pod = owned("agent-x");
    pod.ready_since = Some(ts(NOW - 10)).into();
    assert_eq!(daemonset_member(&ds, [&pod], ts(NOW)), ready("agent-x"));
}

#[test]
fn min_ready_seconds_one_nanosecond_short_is_not_available() {
    let ds = ds_with_min_ready(10);
    let mut pod = owned("agent-x");
    pod.ready_since = Some(ts(NOW - 10)).into();
    let just_before = ts(NOW).checked_sub(SignedDuration::from_nanos(1)).unwrap();
    let got = waiting(daemonset_member(&ds, [&pod], just_before));
    assert_eq!(got.available_at(), Some(ts(NOW)));
    match got {
        Waiting::NotAvailableYet { ready_for, .. } => {
            assert_eq!(ready_for, Duration::from_secs(10) - Duration::from_nanos(1))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn min_ready_seconds_long_past_is_available() {
    let ds = ds_with_min_ready(10);
    let mut pod = owned("agent-x");
    pod.ready_since = Some(ts(NOW - 3600)).into();
    assert_eq!(daemonset_member(&ds, [&pod], ts(NOW)), ready("agent-x"));
}

#[test]
fn a_ready_time_in_the_future_reads_as_ready_for_zero() {
    let ds = ds_with_min_ready(10);
    let mut pod = owned("agent-x");
    pod.ready_since = Some(ts(NOW + 5)).into();
    match waiting(daemonset_member(&ds, [&pod], ts(NOW))) {
        Waiting::NotAvailableYet {
            ready_for,
            available_at,
            ..
        } => {
            assert_eq!(ready_for, Duration::ZERO);
            assert_eq!(available_at, ts(NOW + 15));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_missing_ready_time_is_never_available_with_min_ready_seconds() {
    let ds = ds_with_min_ready(10);
    let mut pod = owned("agent-x");
    pod.ready_since = Default::default();
    let got = waiting(daemonset_member(&ds, [&pod], ts(NOW)));
    assert_eq!(
        got,
        Waiting::ReadySinceUnknown {
            pod: "agent-x".into(),
            min_ready: Duration::from_secs(10)
        }
    );
    assert_eq!(
        got.to_string(),
        "pod agent-x is Ready but its Ready condition has no lastTransitionTime, so minReadySeconds 10s cannot be counted"
    );
    assert_eq!(got.available_at(), None);
    // Much later it is still not available.
    assert!(!daemonset_member(&ds, [&pod], ts(NOW + 86_400)).is_ready());
}

#[test]
fn a_missing_ready_time_does_not_matter_without_min_ready_seconds() {
    let mut pod = owned("agent-x");
    pod.ready_since = Default::default();
    assert_eq!(
        daemonset_member(&ds_with_min_ready(0), [&pod], ts(NOW)),
        ready("agent-x")
    );
}

#[test]
fn a_negative_min_ready_seconds_counts_as_zero() {
    let mut pod = owned("agent-x");
    pod.ready_since = Some(ts(NOW)).into();
    assert_eq!(
        daemonset_member(&ds_with_min_ready(-5), [&pod], ts(NOW)),
        ready("agent-x")
    );
}

#[test]
fn any_one_qualifying_pod_suffices_in_any_order() {
    let mut old = owned("agent-old");
    old.terminating = true;
    let new = owned("agent-new");
    let ds = ds_with_min_ready(0);
    assert_eq!(
        daemonset_member(&ds, [&old, &new], ts(NOW)),
        ready("agent-new")
    );
    assert_eq!(
        daemonset_member(&ds, [&new, &old], ts(NOW)),
        ready("agent-new")
    );
}

#[test]
fn of_two_ready_pods_the_smaller_name_is_reported() {
    let (a, b) = (owned("agent-a"), owned("agent-b"));
    let ds = ds_with_min_ready(0);
    assert_eq!(daemonset_member(&ds, [&b, &a], ts(NOW)), ready("agent-a"));
    assert_eq!(daemonset_member(&ds, [&a, &b], ts(NOW)), ready("agent-a"));
}

#[test]
fn the_most_promising_waiting_reason_is_reported() {
    let mut terminating = owned("p-terminating");
    terminating.terminating = true;
    let mut pending = owned("p-pending");
    pending.phase = "Pending".into();
    pending.ready = false;
    let mut unready = owned("p-unready");
    unready.ready = false;
    let mut no_time = owned("p-no-time");
    no_time.ready_since = Default::default();
    let mut warming = owned("p-warming");
    warming.ready_since = Some(ts(NOW - 2)).into();
    let ds = ds_with_min_ready(10);
    let order = [&warming, &no_time, &unready, &pending, &terminating];
    // Each pod beats every pod after it, whatever the order they come in.
    for i in 0..order.len() {
        let mut pods: Vec<&PodInfo> = order[i..].to_vec();
        pods.reverse();
        let got = waiting(daemonset_member(&ds, pods.iter().copied(), ts(NOW)));
        assert_eq!(
            got.pod(),
            Some(&*order[i].name),
            "candidates from {}",
            order[i].name
        );
    }
}

#[test]
fn of_two_pods_not_yet_available_the_earlier_one_is_reported() {
    let mut early = owned("z-early");
    early.ready_since = Some(ts(NOW - 8)).into();
    let mut late = owned("a-late");
    late.ready_since = Some(ts(NOW - 1)).into();
    let ds = ds_with_min_ready(10);
    let got = waiting(daemonset_member(&ds, [&late, &early], ts(NOW)));
    assert_eq!(got.pod(), Some("z-early"));
    assert_eq!(got.available_at(), Some(ts(NOW + 2)));
    assert_eq!(MemberState::NotReady(got).recheck_at(), Some(ts(NOW + 2)));
}

#[test]
fn a_member_that_stops_qualifying_is_not_ready_again() {
    let ds = ds_with_min_ready(0);
    let mut pod = owned("agent-x");
    assert!(daemonset_member(&ds, [&pod], ts(NOW)).is_ready());
    pod.ready = false;
    assert_eq!(
        daemonset_member(&ds, [&pod], ts(NOW + 1)),
        MemberState::NotReady(Waiting::NotReady {
            pod: "agent-x".into()
        })
    );
    pod.ready = true;
    pod.ready_since = Some(ts(NOW + 2)).into();
    assert!(daemonset_member(&ds, [&pod], ts(NOW + 2)).is_ready());
}

#[test]
fn availability_is_measured_from_the_latest_ready_transition() {
    let ds = ds_with_min_ready(30);
    let mut pod = owned("agent-x");
    pod.ready_since = Some(ts(NOW - 100)).into();
    assert!(daemonset_member(&ds, [&pod], ts(NOW)).is_ready());
    // Flapped: Ready again since a moment ago.
    pod.ready_since = Some(ts(NOW - 1)).into();
    assert!(!daemonset_member(&ds, [&pod], ts(NOW)).is_ready());
}

#[test]
fn member_state_helpers_and_display() {
    assert!(ready("x").is_ready());
    assert_eq!(ready("x").to_string(), "pod x is Ready");
    assert_eq!(ready("x").recheck_at(), None);
    assert_eq!(MemberState::NotReady(Waiting::NoPod).recheck_at(), None);
    assert_eq!(Waiting::NoPod.pod(), None);
    let fractional = Waiting::NotAvailableYet {
        pod: "p".into(),
        ready_for: Duration::from_millis(2500),
        min_ready: Duration::from_secs(5),
        available_at: ts(0),
    };
    assert_eq!(
        fractional.to_string(),
        "pod p Ready for 2.5s of minReadySeconds 5s"
    );
}

#[test]
fn member_states_serialize_to_json_and_back() {
    let states = [
        ready("p"),
        MemberState::NotReady(Waiting::NoPod),
        MemberState::NotReady(Waiting::NotRunning {
            pod: "p".into(),
            phase: "Pending".into(),
        }),
        MemberState::NotReady(Waiting::NotAvailableYet {
            pod: "p".into(),
            ready_for: Duration::from_secs(3),
            min_ready: Duration::from_secs(10),
            available_at: ts(NOW),
        }),
        MemberState::NotReady(Waiting::ReadySinceUnknown {
            pod: "p".into(),
            min_ready: Duration::from_secs(1),
        }),
    ];
    for s in states {
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            serde_json::from_str::<MemberState>(&json).unwrap(),
            s,
            "{json}"
        );
    }
    let json =
        serde_json::to_value(MemberState::NotReady(Waiting::NotReady { pod: "p".into() })).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"NotReady": {"waiting": "notReady", "pod": "p"}})
    );
}
