//! Every member kind through every form a member id takes: its text
//! (`Display` and `FromStr`: explain, Events, traces, the journal's JSON),
//! its JSON, and the journal's compact store. Each kind has its own tests
//! elsewhere; this one is where a new kind is caught when one of those
//! forms was forgotten (the journal's decoder and the text's parser fall
//! back to a DaemonSet for what they do not know).

use nodegate_core::gate::Event;
use nodegate_core::gate::journal::Journal;
use nodegate_core::vocab::member::MemberId;

/// One id of each kind. The `match` below has no wildcard on purpose: a new
/// kind stops compiling here, where it must be added to the list.
fn one_of_each() -> Vec<MemberId> {
    let all = vec![
        MemberId::DaemonSet("kube-system/cilium".into()),
        MemberId::Critical("dns".into()),
        MemberId::Condition("NetworkReady".into()),
        MemberId::Resource("nvidia.com/gpu".into()),
        MemberId::Dra("gpu.example.com".into()),
        MemberId::Canary,
    ];
    let mut kinds = std::collections::BTreeSet::new();
    for id in &all {
        let kind = match id {
            MemberId::DaemonSet(_) => 0,
            MemberId::Critical(_) => 1,
            MemberId::Condition(_) => 2,
            MemberId::Resource(_) => 3,
            MemberId::Dra(_) => 4,
            MemberId::Canary => 5,
        };
        kinds.insert(kind);
    }
    assert_eq!(kinds.len(), all.len(), "one id of each kind: {all:?}");
    all
}

#[test]
fn every_kind_reads_back_from_its_text() {
    for id in one_of_each() {
        let text = id.to_string();
        assert_eq!(text.parse::<MemberId>(), Ok(id.clone()), "{text}");
    }
}

#[test]
fn every_kind_reads_back_from_its_json() {
    for id in one_of_each() {
        let json = serde_json::to_string(&id).expect("a member id serializes");
        let back: MemberId = serde_json::from_str(&json).expect("and reads back");
        assert_eq!(back, id, "{json}");
    }
}

#[test]
fn every_kind_reads_back_from_the_journal() {
    let all = one_of_each();
    let mut journal = Journal::new(64);
    let at = jiff::Timestamp::UNIX_EPOCH;
    for id in &all {
        journal.record(at, Event::MemberExpected { member: id.clone() });
        journal.record(
            at,
            Event::MemberReady {
                member: id.clone(),
                pod: "p".into(),
            },
        );
    }
    let back: Vec<MemberId> = journal
        .entries()
        .filter_map(|e| match e.event {
            Event::MemberExpected { member } | Event::MemberReady { member, .. } => Some(member),
            _ => None,
        })
        .collect();
    let want: Vec<MemberId> = all.iter().flat_map(|id| [id.clone(), id.clone()]).collect();
    assert_eq!(back, want);
}
