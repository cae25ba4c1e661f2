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
    assert_eq!(s.ends.len(), 9, "{:?}", s.ends);
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

/// An entry on its way into and out of the byte stream is 24 bytes: an
/// 8-byte time and a 16-byte slot (two-byte strings).
#[test]
fn a_stored_entry_is_24_bytes() {
    assert_eq!(std::mem::size_of::<Stored>(), 24);
}

/// Entries of every stored form, with times that stress the differences:
/// out of order, far apart, the extremes a slot holds, and whole entries
/// (no time difference of their own) between them.
fn mixed_entries() -> Vec<Entry> {
    let mut pod = crate::testutil::mk_pod("cilium-x7f2k", "node-1", "ds-uid");
    pod.labels.insert("app".into(), "cilium".into());
    pod.ready_since = Some(at(-1_000, 7)).into();
    pod.ready_annotation = true;
    pod.terminating = true;
    let times = [
        at(1_795_000_000, 123_456_789),
        at(1_795_000_000, 123_456_790),
        at(1_794_000_000, 0),
        time(i64::MAX),
        time(i64::MIN + 1),
        Timestamp::MAX,
        at(0, 0),
        at(1_795_000_001, 5),
    ];
    let events = [
        Event::PodUpdated { pod: Arc::new(pod) },
        Event::PodStatusChanged {
            pod: "cilium-x7f2k".into(),
            uid: "u-1".into(),
            phase: "Running".into(),
            ready: true,
            ready_since: Some(time(i64::MIN + 1)),
            terminating: true,
        },
        Event::RecheckFired { generation: 9 },
        Event::MemberWaiting {
            member: MemberId::Dra("gpu.example.com".into()),
            why: "no device".into(),
            available_at: Some(time(i64::MAX)),
        },
        Event::MemberReady {
            member: MemberId::Canary,
            pod: "canary-1".into(),
        },
        Event::MemberExpected {
            member: MemberId::Resource("example.com/fpga".into()),
        },
        Event::PodStatusChanged {
            pod: "cilium-x7f2k".into(),
            uid: "u-1".into(),
            phase: "Pending".into(),
            ready: false,
            ready_since: None,
            terminating: false,
        },
        Event::MemberWaiting {
            member: MemberId::Critical("dns".into()),
            why: String::new(),
            available_at: None,
        },
    ];
    let mut out = Vec::new();
    for round in 0..3 {
        for (i, event) in events.iter().enumerate() {
            out.push(Entry {
                at: times[(i + round) % times.len()],
                event: event.clone(),
            });
        }
    }
    out
}

#[test]
fn the_byte_stream_gives_back_every_entry_as_recorded_through_eviction() {
    let all = mixed_entries();
    for cap in [1, 2, 3, 5, 8, 13, all.len(), all.len() + 1] {
        let mut journal = crate::gate::journal::Journal::new(cap);
        for (n, e) in all.iter().enumerate() {
            journal.record(e.at, e.event.clone());
            let kept: Vec<Entry> = journal.entries().collect();
            let from = (n + 1).saturating_sub(cap);
            assert_eq!(kept, all[from..=n], "cap {cap}, after entry {n}");
        }
        assert_eq!(journal.dropped() as usize, all.len().saturating_sub(cap));
    }
}

#[test]
fn a_pushed_then_popped_stream_is_empty_and_takes_more() {
    let mut s = Strings::default();
    let mut entries = Entries::default();
    let all = mixed_entries();
    for e in &all {
        entries.push_back(s.encode(e.clone()));
    }
    for e in &all {
        let popped = entries.pop_front().map(|p| s.decode(&p));
        assert_eq!(popped.as_ref(), Some(e));
    }
    assert_eq!(entries.pop_front(), None);
    assert_eq!(entries.encoded_len(), 0);
    entries.push_back(s.encode(all[1].clone()));
    assert_eq!(
        entries.iter().map(|p| s.decode(&p)).collect::<Vec<_>>(),
        [all[1].clone()]
    );
}

/// A DaemonSet pod's usual life in a gate's journal (pending, running, Ready,
/// flipped NotReady and Ready again, a member event after each) takes at most
/// 12 bytes an entry: the figure behind the journal's share of a gate in
/// docs/benchmarks.md. The 24-byte slots took twice that and more.
#[test]
fn a_pods_usual_life_takes_at_most_twelve_bytes_an_entry() {
    let mut s = Strings::default();
    let mut entries = Entries::default();
    let member = MemberId::DaemonSet("kube-system/cilium".into());
    let mut t = 1_795_000_000_000_000_000_i64;
    let mut n = 0;
    for (phase, ready, why) in [
        ("Pending", false, Some("pod cilium-x7f2k is Pending")),
        ("Running", false, Some("pod cilium-x7f2k is not Ready")),
        ("Running", true, None),
        ("Running", false, Some("pod cilium-x7f2k is not Ready")),
        ("Running", true, None),
    ] {
        t += 1_500_000_000;
        let status = Event::PodStatusChanged {
            pod: "cilium-x7f2k".into(),
            uid: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into(),
            phase: phase.into(),
            ready,
            ready_since: ready.then(|| time(t - 1_000_000_000)),
            terminating: false,
        };
        let follow = match why {
            Some(why) => Event::MemberWaiting {
                member: member.clone(),
                why: why.into(),
                available_at: None,
            },
            None => Event::MemberReady {
                member: member.clone(),
                pod: "cilium-x7f2k".into(),
            },
        };
        for event in [status, follow] {
            entries.push_back(s.encode(Entry { at: time(t), event }));
            t += 3_000_000;
            n += 1;
        }
    }
    assert!(
        entries.encoded_len() <= 12 * n,
        "{} bytes for {n} entries",
        entries.encoded_len()
    );
}

/// Eviction folds a small slot through `apply`'s own `fold` without decoding
/// it. For every stored form and every member kind, from a state without the
/// pod and members the entries name and from one with them, that must give
/// the state `apply` gives the decoded entry.
#[test]
fn folding_a_stored_entry_equals_applying_it_decoded() {
    use crate::gate::{GateState, apply};

    let members = [
        MemberId::DaemonSet("kube-system/cilium".into()),
        MemberId::Critical("dns".into()),
        MemberId::Condition("NetworkReady".into()),
        MemberId::Resource("example.com/fpga".into()),
        MemberId::Dra("gpu.example.com".into()),
        MemberId::Canary,
    ];
    let mut pod = crate::testutil::mk_pod("cilium-x7f2k", "node-1", "ds-uid");
    pod.phase = "Pending".into();
    pod.ready = false;
    let uid = pod.uid.to_string();
    let mut events = vec![Event::PodUpdated {
        pod: Arc::new(pod.clone()),
    }];
    for (phase, ready, terminating) in [("Running", true, false), ("Pending", false, true)] {
        events.push(Event::PodStatusChanged {
            pod: "cilium-x7f2k".into(),
            uid: uid.as_str().into(),
            phase: phase.into(),
            ready,
            ready_since: ready.then(|| at(1_795_000_000, 1)),
            terminating,
        });
    }
    for member in &members {
        events.push(Event::MemberExpected {
            member: member.clone(),
        });
        events.push(Event::MemberReady {
            member: member.clone(),
            pod: "cilium-x7f2k".into(),
        });
        for available_at in [None, Some(at(1_795_000_002, 0))] {
            events.push(Event::MemberWaiting {
                member: member.clone(),
                why: "pod cilium-x7f2k is not Ready".into(),
                available_at,
            });
        }
    }
    let mut entries: Vec<Entry> = (events.into_iter())
        .map(|event| Entry {
            at: at(1_795_000_000, 7),
            event,
        })
        .collect();
    entries.extend(mixed_entries());

    // The same events set up the second state: the pod and every member
    // known, so that each fold has something to change.
    let empty = GateState::default();
    let mut known = GateState::default();
    apply(&mut known, &Event::PodUpdated { pod: Arc::new(pod) });
    for member in members {
        apply(&mut known, &Event::MemberExpected { member });
    }

    let mut s = Strings::default();
    let mut kinds = std::collections::BTreeSet::new();
    let mut changed = 0;
    for entry in entries {
        let stored = s.encode(entry.clone());
        kinds.insert(match stored.slot {
            Slot::Small { kind, .. } => kind & SLOT_BITS,
            Slot::Pod(_) => POD,
            Slot::Whole(_) => WHOLE,
        });
        for base in [&empty, &known] {
            let mut folded = base.clone();
            s.fold(&stored, &mut folded);
            let mut applied = base.clone();
            apply(&mut applied, &s.decode(&stored).event);
            assert_eq!(folded, applied, "{entry:?} from {base:?}");
            changed += usize::from(folded != *base);
        }
    }
    let every = [
        POD_STATUS,
        MEMBER_EXPECTED,
        MEMBER_READY,
        MEMBER_WAITING,
        POD,
        WHOLE,
    ];
    assert_eq!(
        kinds,
        every.into_iter().collect(),
        "a slot kind went untested"
    );
    assert!(changed > 20, "only {changed} folds changed their state");
}

/// Whole entries that hold a node, a DaemonSet and pods (the router's own
/// copies, behind `Arc`s), among the mixed entries.
fn entries_with_a_node(node: &Arc<crate::vocab::model::NodeInfo>) -> Vec<Entry> {
    let ds = crate::testutil::mk_ds(
        "kube-system",
        "cilium",
        crate::testutil::template_with_tolerations(vec![]),
    );
    let pod = crate::testutil::ds_pod("cilium-x7f2k", "node-1", &ds);
    let mut all = vec![Entry {
        at: at(1_795_000_000, 1),
        event: Event::Snapshot {
            node: Arc::clone(node),
            daemonsets: vec![Arc::new(ds)],
            pods: vec![Arc::new(pod)],
        },
    }];
    all.extend(mixed_entries());
    all.push(Entry {
        at: Timestamp::MAX,
        event: Event::NodeUpdated {
            node: Arc::clone(node),
        },
    });
    all
}

/// What `/debug/nodes` keeps of a finished gate reads back as the journal
/// it was, evicted entries, checkpoint and all, at every capacity.
#[test]
fn a_frozen_journal_thaws_to_the_journal_it_was_through_eviction() {
    let node = Arc::new(crate::testutil::mk_node(
        "node-1",
        &[("kubernetes.io/hostname", "node-1"), ("pool", "gpu")],
        vec![],
    ));
    let all = entries_with_a_node(&node);
    for cap in [1, 2, 3, 5, 8, all.len(), all.len() + 1] {
        let mut journal = crate::gate::journal::Journal::new(cap);
        for e in &all {
            journal.record(e.at, e.event.clone());
        }
        let frozen = journal.freeze().expect("every entry writes as JSON");
        let thawed = frozen.thaw().expect("a frozen journal reads back");
        let kept: Vec<Entry> = journal.entries().collect();
        assert!(!kept.is_empty());
        assert_eq!(thawed.entries().collect::<Vec<_>>(), kept, "cap {cap}");
        assert_eq!(thawed.dropped(), journal.dropped(), "cap {cap}");
        assert_eq!(thawed.base(), journal.base(), "cap {cap}");
        assert_eq!(
            crate::gate::journal::replay(&thawed),
            crate::gate::journal::replay(&journal)
        );
        // It records on as the original would.
        let (mut a, mut b) = (journal.clone(), thawed);
        for e in &all[..3] {
            a.record(e.at, e.event.clone());
            b.record(e.at, e.event.clone());
        }
        assert_eq!(
            b.entries().collect::<Vec<_>>(),
            a.entries().collect::<Vec<_>>()
        );
    }
}

/// A frozen journal holds no reference to the node its entries showed, nor
/// its checkpoint: once the gate's journal is gone, the node is the
/// router's alone again.
#[test]
fn a_frozen_journal_shares_nothing_with_the_gate() {
    for cap in [2, 64] {
        let node = Arc::new(crate::testutil::mk_node(
            "node-1",
            &[("pool", "gpu")],
            vec![],
        ));
        let mut journal = crate::gate::journal::Journal::new(cap);
        for e in entries_with_a_node(&node) {
            journal.record(e.at, e.event);
        }
        assert_eq!(
            journal.dropped() > 0,
            cap == 2,
            "cap {cap}: a checkpoint or not"
        );
        assert!(Arc::strong_count(&node) > 1, "the journal holds the node");
        let frozen = journal.freeze().expect("every entry writes as JSON");
        drop(journal);
        assert_eq!(
            Arc::strong_count(&node),
            1,
            "cap {cap}: the frozen copy holds it"
        );
        let thawed = frozen.thaw().expect("a frozen journal reads back");
        let shown = thawed.entries().find_map(|e| match e.event {
            Event::NodeUpdated { node } => Some(node),
            _ => None,
        });
        assert_eq!(shown.as_deref(), Some(&*node));
        if cap == 2 {
            assert_eq!(thawed.base().node.as_deref(), Some(&*node));
        }
    }
}

/// Bytes cut short, altered or extended are said, never read as another
/// journal; and no damage makes reading the entries panic.
#[test]
fn a_damaged_frozen_journal_is_an_error() {
    let node = Arc::new(crate::testutil::mk_node("node-1", &[], vec![]));
    let mut journal = crate::gate::journal::Journal::new(4);
    for e in entries_with_a_node(&node) {
        journal.record(e.at, e.event);
    }
    let frozen = journal.freeze().expect("every entry writes as JSON");
    let damaged = |bytes: Vec<u8>| crate::gate::journal::Frozen {
        bytes: bytes.into(),
        daemonsets: frozen.daemonsets.clone(),
    };
    let bytes = frozen.bytes.to_vec();
    for cut in 0..bytes.len() {
        let short = damaged(bytes[..cut].to_vec());
        assert!(short.thaw().is_err(), "cut at {cut} of {}", bytes.len());
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(damaged(longer).thaw().is_err(), "a byte left over");
    let mut altered = bytes.clone();
    if let Some(last) = altered.last_mut() {
        *last = b'!';
    }
    let err = damaged(altered).thaw().err().map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("did not read back")),
        "{err:?}"
    );
    // Every single byte flipped: an error, or a journal that reads and
    // replays without a panic.
    for i in 0..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[i] ^= 0xff;
        if let Ok(j) = damaged(flipped).thaw() {
            let _ = crate::gate::journal::replay(&j);
        }
    }
}
