//! When an expected member is Ready on a node (semantics.md section 4) and
//! what it waits for when it is not (`pods`); critical-pod entries (section 3,
//! `critical_pods`); and properties over random pods (`properties`).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use nodegate_core::rules::readiness::{
    CriticalPodEntry, MemberState, Waiting, critical_applies, critical_member, daemonset_member,
};
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::testutil::{labels, mk_ds, mk_node, mk_pod, ts};
use nodegate_core::vocab::model::{DaemonSetInfo, PodInfo, PodPlacement};
use proptest::prelude::*;

mod critical_pods;
mod csi;
mod pods;
mod properties;

const NOW: i64 = 1_000;

fn ds_with_min_ready(secs: i32) -> DaemonSetInfo {
    let mut ds = mk_ds("kube-system", "agent", PodPlacement::default());
    ds.min_ready_seconds = secs;
    ds
}

fn owned(name: &str) -> PodInfo {
    mk_pod(name, "node-1", "uid-kube-system-agent")
}

fn waiting(state: MemberState) -> Waiting {
    match state {
        MemberState::NotReady(w) => w,
        MemberState::Ready { pod } => panic!("want NotReady, got Ready via {pod}"),
    }
}

fn ready(pod: &str) -> MemberState {
    MemberState::Ready {
        pod: pod.to_string(),
    }
}
