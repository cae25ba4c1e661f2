use jiff::Timestamp;

use super::*;
use crate::gate::Event;

fn at(secs: i64, nanos: i32) -> Timestamp {
    Timestamp::new(secs, nanos).expect("a valid time")
}

fn round_trip(strings: &mut Strings, entry: Entry) -> Stored {
    let stored = strings.encode(entry.clone());
    assert_eq!(strings.decode(&stored), entry, "decoded differently");
    stored
}

fn is_slot(stored: &Stored) -> bool {
    !matches!(stored.slot, Slot::Whole(_))
}

#[test]
fn the_frequent_kinds_take_a_slot_and_decode_to_what_was_recorded() {
    let mut s = Strings::default();
    let t = at(1_795_000_000, 123_456_789);
    let entries = [
        Event::PodStatusChanged {
            pod: "cilium-x7f2k".into(),
            uid: "u-1".into(),
            phase: "Running".into(),
            ready: true,
            ready_since: Some(at(1_795_000_000, 0)),
            terminating: false,
        },
        Event::PodStatusChanged {
            pod: "cilium-x7f2k".into(),
            uid: "u-1".into(),
            phase: "Pending".into(),
            ready: false,
            ready_since: Default::default(),
            terminating: true,
        },
        Event::MemberExpected {
            member: MemberId::Critical("dns".into()),
        },
        Event::MemberReady {
            member: MemberId::DaemonSet("kube-system/cilium".into()),
            pod: "cilium-x7f2k".into(),
        },
        Event::MemberWaiting {
            member: MemberId::Condition("NetworkReady".into()),
            why: "condition NetworkReady is False".into(),
            available_at: Some(at(-5, 1)),
        },
        Event::MemberWaiting {
            member: MemberId::DaemonSet("kube-system/cilium".into()),
            why: String::new(),
            available_at: None,
        },
    ];
    for event in entries {
        let stored = round_trip(&mut s, Entry { at: t, event });
        assert!(is_slot(&stored), "{stored:?} was stored whole");
    }
    // Repeated strings are kept once.
    assert_eq!(s.spans.len(), 9, "{:?}", s.spans);
}

#[test]
fn other_kinds_and_times_out_of_range_are_kept_whole() {
    let mut s = Strings::default();
    let stored = round_trip(
        &mut s,
        Entry {
            at: at(10, 0),
            event: Event::RecheckFired { generation: 3 },
        },
    );
    assert!(!is_slot(&stored));
    // Year 9999 does not fit in i64 nanoseconds; neither does the sentinel.
    for t in [Timestamp::MAX, Timestamp::MIN, time(i64::MIN + 1)] {
        let e = Entry {
            at: t,
            event: Event::MemberExpected {
                member: MemberId::DaemonSet("a/b".into()),
            },
        };
        let stored = round_trip(&mut s, e);
        assert_eq!(is_slot(&stored), t == time(i64::MIN + 1), "at {t}");
    }
}

#[test]
fn a_full_string_table_stores_new_strings_whole() {
    let mut s = Strings::default();
    for i in 0..MAX_STRINGS {
        assert!(s.intern(&format!("s{i}")).is_some());
    }
    let stored = round_trip(
        &mut s,
        Entry {
            at: at(10, 0),
            event: Event::MemberExpected {
                member: MemberId::DaemonSet("new/one".into()),
            },
        },
    );
    assert!(!is_slot(&stored));
    // A string already known still takes a slot.
    let stored = round_trip(
        &mut s,
        Entry {
            at: at(10, 0),
            event: Event::MemberExpected {
                member: MemberId::DaemonSet("s7".into()),
            },
        },
    );
    assert!(is_slot(&stored));
}

#[test]
fn a_new_pod_is_kept_by_its_strings_and_decodes_whole() {
    let mut s = Strings::default();
    let mut pod = crate::testutil::mk_pod("cilium-x7f2k", "node-1", "ds-uid");
    pod.labels.insert("app".into(), "cilium".into());
    pod.ready_since = Some(at(1_795_000_000, 5)).into();
    pod.ready_annotation = true;
    let mut bare = pod.clone();
    bare.controller_uid = None;
    bare.labels.clear();
    for p in [pod, bare] {
        let stored = round_trip(
            &mut s,
            Entry {
                at: at(10, 0),
                event: Event::PodUpdated { pod: Arc::new(p) },
            },
        );
        assert!(matches!(stored.slot, Slot::Pod(_)), "{stored:?}");
    }
}

/// A stored entry is 24 bytes: an 8-byte time and a 16-byte slot (two-byte
/// strings). At 32 it was a quarter of a gate's journal more.
#[test]
fn a_stored_entry_is_24_bytes() {
    assert_eq!(std::mem::size_of::<Stored>(), 24);
}
