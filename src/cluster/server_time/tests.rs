use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

use super::{ServerTime, http_date};

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

#[test]
fn no_evidence_no_server_time() {
    assert_eq!(ServerTime::new().now(), None);
}

#[test]
fn evidence_is_carried_forward_on_the_monotonic_clock() {
    let st = ServerTime::new();
    let t0 = Instant::now();
    st.saw_at(ts(1000), t0);
    assert_eq!(st.now_at(t0 + Duration::from_secs(30)), Some(ts(1030)));
}

#[test]
fn older_evidence_does_not_replace_newer() {
    let st = ServerTime::new();
    let t0 = Instant::now();
    st.saw_at(ts(1000), t0);
    // An old object listed 10 s later: the carried bound (1010) is newer.
    st.saw_at(ts(500), t0 + Duration::from_secs(10));
    assert_eq!(st.now_at(t0 + Duration::from_secs(10)), Some(ts(1010)));
    // Fresher evidence does.
    st.saw_at(ts(1020), t0 + Duration::from_secs(10));
    assert_eq!(st.now_at(t0 + Duration::from_secs(11)), Some(ts(1021)));
}

fn entry(manager: &str, secs: i64) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.to_string()),
        time: Some(Time(ts(secs))),
        ..Default::default()
    }
}

fn meta(created: i64, entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
    ObjectMeta {
        creation_timestamp: Some(Time(ts(created))),
        managed_fields: Some(entries),
        ..Default::default()
    }
}

fn about(st: &ServerTime, secs: i64) {
    let now = st.now().unwrap();
    assert!(
        now >= ts(secs) && now < ts(secs + 2),
        "{now} is not about {secs}"
    );
}

#[test]
fn a_watched_object_gives_only_its_creation_timestamp() {
    // A tenant's pod with a managedFields entry dated 2099: the server keeps
    // client-supplied entries, so they are no evidence.
    let st = ServerTime::new();
    st.saw_object(&meta(
        100,
        vec![entry("tenant", 4_070_908_800), entry("kubelet", 300)],
    ));
    about(&st, 100);
}

#[test]
fn an_own_write_gives_its_own_managers_entry_only() {
    let st = ServerTime::new();
    st.saw_own_write(&meta(
        100,
        vec![entry("nodegate", 300), entry("tenant", 4_070_908_800)],
    ));
    about(&st, 300);
}

#[test]
fn a_stamp_far_ahead_of_the_date_header_is_refused_and_counted() {
    let st = ServerTime::new();
    let t0 = Instant::now();
    st.saw_date_at(ts(1000), t0);
    let later = t0 + Duration::from_secs(60);
    // Just inside the bound (Date carried to 1060, plus 5 min).
    assert!(st.offer_at(ts(1060 + 300), later, "test"));
    assert_eq!(st.refused(), 0);
    // Past it: refused, counted, and "now" unchanged.
    assert!(!st.offer_at(ts(1060 + 301), later, "test"));
    assert_eq!(st.refused(), 1);
    assert_eq!(st.now_at(later), Some(ts(1360)));
}

#[test]
fn the_bound_follows_the_newest_date_reading() {
    let st = ServerTime::new();
    let t0 = Instant::now();
    st.saw_date_at(ts(1000), t0);
    // An older Date reading (a slow answer) does not lower the bound.
    st.saw_date_at(ts(900), t0);
    assert!(st.offer_at(ts(1300), t0, "test"));
    assert!(!st.offer_at(ts(1301), t0, "test"));
}

#[test]
fn an_http_date_is_read() {
    assert_eq!(
        http_date("Tue, 24 Nov 2026 01:44:41 GMT"),
        Some("2026-11-24T01:44:41Z".parse().unwrap())
    );
    assert_eq!(http_date("yesterday"), None);
}
