//! Properties of readiness over random pods.

use super::*;

fn any_pod() -> impl Strategy<Value = PodInfo> {
    (
        proptest::sample::select(&["a", "b", "c", "d"][..]),
        proptest::option::of(proptest::sample::select(
            &["uid-kube-system-agent", "uid-other"][..],
        )),
        any::<bool>(),
        proptest::sample::select(&["Running", "Pending", "Succeeded", ""][..]),
        any::<bool>(),
        proptest::option::of(NOW - 20..NOW + 5),
    )
        .prop_map(|(name, owner, terminating, phase, is_ready, since)| {
            let mut p = owned(name);
            p.controller_uid = owner.map(Into::into);
            p.terminating = terminating;
            p.phase = phase.into();
            p.ready = is_ready;
            p.ready_since = since.map(ts).into();
            p
        })
}

fn qualifies(p: &PodInfo, min_ready: i32, now: Timestamp) -> bool {
    p.controller_uid.as_deref() == Some("uid-kube-system-agent")
        && !p.terminating
        && p.phase == "Running"
        && p.ready
        && (min_ready <= 0
            || p.ready_since
                .get()
                .is_some_and(|s| s + SignedDuration::from_secs(i64::from(min_ready)) <= now))
}

proptest! {
    #[test]
    fn ready_exactly_when_some_pod_qualifies(
        pods in proptest::collection::vec(any_pod(), 0..6), min_ready in -1i32..15
    ) {
        let ds = ds_with_min_ready(min_ready);
        let now = ts(NOW);
        let state = daemonset_member(&ds, &pods, now);
        prop_assert_eq!(state.is_ready(), pods.iter().any(|p| qualifies(p, min_ready, now)));
        if let MemberState::Ready { pod } = &state {
            prop_assert!(pods.iter().any(|p| *p.name == **pod && qualifies(p, min_ready, now)));
        }
    }

    #[test]
    fn pod_order_never_changes_the_answer(
        pods in proptest::collection::vec(any_pod(), 0..6), min_ready in 0i32..15
    ) {
        let ds = ds_with_min_ready(min_ready);
        let mut reversed = pods.clone();
        reversed.reverse();
        prop_assert_eq!(daemonset_member(&ds, &pods, ts(NOW)), daemonset_member(&ds, &reversed, ts(NOW)));
    }

    #[test]
    fn a_not_yet_available_member_is_ready_at_its_recheck_time(
        pods in proptest::collection::vec(any_pod(), 1..6), min_ready in 1i32..15
    ) {
        let ds = ds_with_min_ready(min_ready);
        if let Some(at) = daemonset_member(&ds, &pods, ts(NOW)).recheck_at() {
            prop_assert!(at > ts(NOW));
            prop_assert!(daemonset_member(&ds, &pods, at).is_ready());
        }
    }
}
