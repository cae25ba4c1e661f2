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

#[test]
fn an_object_gives_its_newest_server_stamp() {
    let st = ServerTime::new();
    let entry = |secs| ManagedFieldsEntry {
        time: Some(Time(ts(secs))),
        ..Default::default()
    };
    st.saw_object(&ObjectMeta {
        creation_timestamp: Some(Time(ts(100))),
        managed_fields: Some(vec![entry(300), entry(200)]),
        ..Default::default()
    });
    let now = st.now().unwrap();
    assert!(now >= ts(300) && now < ts(301), "{now}");
}

#[test]
fn an_http_date_is_read() {
    assert_eq!(
        http_date("Tue, 24 Nov 2026 01:44:41 GMT"),
        Some("2026-11-24T01:44:41Z".parse().unwrap())
    );
    assert_eq!(http_date("yesterday"), None);
}
