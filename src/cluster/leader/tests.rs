//! leader election's unit tests: who may take the lease, the next record,
//! when leadership ends, when the gates are told they may write again, and
//! the replica's identity.

use super::*;

fn record(holder: &str, seconds: i32) -> LeaseRecord {
    LeaseRecord {
        holder: holder.to_string(),
        duration_seconds: seconds,
        transitions: 3,
        acquire_time: Some(Timestamp::UNIX_EPOCH),
    }
}

#[test]
fn who_may_take_the_lease() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let fallback = s(15);
    // (record, seconds since observed, may take)
    let cases: &[(LeaseRecord, u64, bool, &str)] = &[
        (record("me", 4), 0, true, "own lease: renew"),
        (record("me", 4), 100, true, "own lease, however old"),
        (record("", 1), 0, true, "released lease: at once"),
        (record("other", 4), 0, false, "fresh lease of another"),
        (record("other", 4), 3, false, "not yet expired"),
        (
            record("other", 4),
            4,
            true,
            "expired after its own duration",
        ),
        (
            record("other", 0),
            10,
            false,
            "no duration: ours (15s) counts",
        ),
        (
            record("other", 0),
            15,
            true,
            "no duration: expired after ours",
        ),
    ];
    for (r, after, want, why) in cases {
        assert_eq!(
            may_take(r, "me", t0, fallback, t0 + s(*after)),
            *want,
            "{why}"
        );
    }
}

#[test]
fn renewing_keeps_acquire_time_and_taking_over_counts_a_transition() {
    let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
    let d = Duration::from_secs(4);

    let renewed = next_record(Some(&record("me", 4)), "me", d, now);
    assert_eq!(renewed.lease_transitions, Some(3));
    assert_eq!(
        renewed.acquire_time.map(|t| t.0),
        Some(Timestamp::UNIX_EPOCH)
    );
    assert_eq!(renewed.renew_time.map(|t| t.0), Some(now));
    assert_eq!(renewed.lease_duration_seconds, Some(4));

    let taken = next_record(Some(&record("other", 4)), "me", d, now);
    assert_eq!(taken.holder_identity.as_deref(), Some("me"));
    assert_eq!(taken.lease_transitions, Some(4));
    assert_eq!(taken.acquire_time.map(|t| t.0), Some(now));

    let created = next_record(None, "me", d, now);
    assert_eq!(created.lease_transitions, Some(0));
}

#[test]
fn leadership_ends_at_the_renew_deadline_and_on_step_down() {
    let l = Leadership::follower();
    assert!(!l.is_leader());
    let t0 = Instant::now();
    l.lead_until(t0 + Duration::from_secs(10));
    assert!(l.is_leader_at(t0));
    assert!(l.is_leader_at(t0 + Duration::from_secs(9)));
    assert!(
        !l.is_leader_at(t0 + Duration::from_secs(10)),
        "no writes once the renew deadline passed without a renewal"
    );
    l.step_down();
    assert!(!l.is_leader_at(t0));
    assert!(Leadership::always().is_leader());
}

#[test]
fn a_renewal_answered_after_the_renew_deadline_tells_the_gates() {
    // Lease requests take 9 s: the renewal begun at t0+2, while still
    // leading, answers at t0+11, a second after leadership lapsed.
    let s = Duration::from_secs;
    let l = Leadership::follower();
    let t0 = Instant::now();
    assert!(l.renewed(t0, t0, t0 + s(10)), "became leader");
    assert!(
        l.renewed(t0 + s(2), t0 + s(11), t0 + s(12)),
        "writes were refused between t0+10 and t0+11: the gates must hear"
    );
    // The next renewal, quick and in time, owes the gates nothing.
    let ms = Duration::from_millis;
    assert!(!l.renewed(t0 + ms(11_500), t0 + ms(11_600), t0 + ms(21_500)));
}

#[test]
fn leading_again_after_a_refused_write_tells_the_gates_twice() {
    let s = Duration::from_secs;
    let l = Leadership::follower();
    let t0 = Instant::now();
    l.renewed(t0, t0, t0 + s(10));
    assert!(l.admits_write_at(t0 + s(9)));
    // The renewal begun at t0+9 is slow; a write is refused at t0+10.
    assert!(!l.admits_write_at(t0 + s(10)));
    assert!(
        l.renewed(t0 + s(9), t0 + s(10), t0 + s(19)),
        "a write was refused: the gates must hear"
    );
    // The refusal's answer may reach its gate after that announcement:
    // the next renewal, begun after the refusal, announces once more...
    assert!(l.renewed(t0 + s(12), t0 + s(12), t0 + s(22)));
    // ...and after that nothing is owed.
    assert!(!l.renewed(t0 + s(14), t0 + s(14), t0 + s(24)));
}

#[test]
fn timely_renewals_tell_nobody() {
    let s = Duration::from_secs;
    let l = Leadership::follower();
    let t0 = Instant::now();
    l.renewed(t0, t0, t0 + s(10));
    for k in 1..5 {
        let at = t0 + s(2 * k);
        assert!(l.admits_write_at(at));
        assert!(!l.renewed(at, at + s(1), at + s(10)), "renewal {k}");
    }
}

#[test]
fn identities_differ_between_processes_on_one_host() {
    assert_ne!(identity("host"), identity("host"));
    assert!(identity("host").starts_with("host_"));
}

#[test]
fn the_term_changes_only_when_leading_begins_again() {
    let s = Duration::from_secs;
    let l = Leadership::follower();
    let t0 = Instant::now();
    let first = l.term();
    l.renewed(t0, t0, t0 + s(10));
    let leading = l.term();
    assert_ne!(leading, first, "became leader");
    l.renewed(t0 + s(2), t0 + s(3), t0 + s(12));
    assert_eq!(l.term(), leading, "a renewal in time is the same term");
    // The renew deadline passed before the next renewal answered: another
    // replica may have led in between.
    l.renewed(t0 + s(11), t0 + s(13), t0 + s(21));
    let after_lapse = l.term();
    assert_ne!(after_lapse, leading);
    l.step_down();
    l.renewed(t0 + s(30), t0 + s(30), t0 + s(40));
    assert_ne!(l.term(), after_lapse, "lost and taken again");
}

#[test]
fn a_refused_renewal_reads_unless_the_server_is_overloaded_or_did_not_answer() {
    use kube::core::Status;
    let api =
        |code: u16| kube::Error::Api(Status::failure("refused", "Reason").with_code(code).boxed());
    for (code, reads) in [
        (409, true),
        (404, true),
        (403, true),
        (422, true),
        (429, false),
        (500, false),
        (503, false),
        (504, false),
    ] {
        assert_eq!(read_after(&api(code)), reads, "HTTP {code}");
    }
    let no_answer = kube::Error::ReadEvents(std::io::Error::other("connection reset"));
    assert!(!read_after(&no_answer), "no answer: keep the written Lease");
}
