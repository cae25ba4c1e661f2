//! The certificates nodegate issues, and when it renews them.

use super::*;

const DAY: u64 = 24 * 3600;
const NOW: i64 = 1_800_000_000;

fn hosts() -> Vec<String> {
    vec!["nodegate-webhook.nodegate.svc".into(), "127.0.0.1".into()]
}

fn stored(m: &Material) -> Stored {
    read(
        m.ca_crt.as_bytes(),
        m.ca_key.as_bytes(),
        m.tls_crt.as_bytes(),
        m.tls_key.as_bytes(),
    )
    .expect("what nodegate wrote reads back")
}

fn fresh(now: i64, validity: Duration) -> Material {
    carry_out(
        &Decision::Fresh("test".into()),
        None,
        &hosts(),
        now,
        validity,
    )
    .expect("issue")
    .expect("material")
}

#[test]
fn a_fresh_pair_covers_the_hosts_for_the_validity() {
    let v = Duration::from_secs(30 * DAY);
    let m = fresh(NOW, v);
    let s = stored(&m);
    assert!(s.ca_key_matches && s.serving_key_matches);
    let serving = s.serving.as_ref().expect("serving");
    assert_eq!(serving.sans, host_set(&hosts()));
    assert_eq!(serving.not_after, NOW + 30 * DAY as i64);
    assert_eq!(serving.not_before, NOW - BACKDATE);
    assert_eq!(s.cas.len(), 1);
    assert_eq!(s.cas[0].not_after, NOW + 300 * DAY as i64);
    assert_eq!(serving.issuer, s.cas[0].subject);
    // And rustls accepts the pair.
    let key =
        crate::serve::webhook::server::certified_key(m.tls_crt.as_bytes(), m.tls_key.as_bytes())
            .expect("rustls reads the pair");
    assert_eq!(key.1, NOW + 30 * DAY as i64);
    assert_eq!(
        decide(Some(&s), NOW, v, &host_set(&hosts())),
        Decision::Keep
    );
}

#[test]
fn nothing_or_garbage_stored_means_fresh() {
    let v = Duration::from_secs(DAY);
    let h = host_set(&hosts());
    assert!(matches!(decide(None, NOW, v, &h), Decision::Fresh(_)));
    assert!(read(b"", b"", b"", b"").is_none());
    assert!(read(b"junk", b"junk", b"junk", b"junk").is_none());
    let m = fresh(NOW, v);
    let other = fresh(NOW, v);
    // A CA key that is not the CA's.
    let s = read(
        m.ca_crt.as_bytes(),
        other.ca_key.as_bytes(),
        m.tls_crt.as_bytes(),
        m.tls_key.as_bytes(),
    )
    .expect("parses");
    assert!(matches!(decide(Some(&s), NOW, v, &h), Decision::Fresh(_)));
    // A serving key that is not the certificate's: reissue from the CA.
    let s = read(
        m.ca_crt.as_bytes(),
        m.ca_key.as_bytes(),
        m.tls_crt.as_bytes(),
        other.tls_key.as_bytes(),
    )
    .expect("parses");
    assert!(matches!(decide(Some(&s), NOW, v, &h), Decision::Reissue(_)));
}

#[test]
fn the_serving_certificate_is_renewed_with_a_third_left() {
    let v = Duration::from_secs(90);
    let h = host_set(&hosts());
    let m = fresh(NOW, v);
    let s = stored(&m);
    assert_eq!(decide(Some(&s), NOW + 59, v, &h), Decision::Keep);
    let d = decide(Some(&s), NOW + 61, v, &h);
    assert!(matches!(d, Decision::Reissue(_)), "{d:?}");
    let renewed = carry_out(&d, Some(&m), &hosts(), NOW + 61, v)
        .expect("renew")
        .expect("material");
    assert_eq!(renewed.ca_crt, m.ca_crt, "same CA");
    assert_eq!(renewed.ca_key, m.ca_key);
    assert_ne!(renewed.tls_crt, m.tls_crt);
    let s = stored(&renewed);
    assert_eq!(s.serving.as_ref().map(|c| c.not_after), Some(NOW + 61 + 90));
    assert_eq!(decide(Some(&s), NOW + 61, v, &h), Decision::Keep);
}

#[test]
fn changed_hosts_mean_a_new_serving_certificate() {
    let v = Duration::from_secs(DAY);
    let s = stored(&fresh(NOW, v));
    let other = host_set(&["other.example".to_string()]);
    assert!(matches!(
        decide(Some(&s), NOW, v, &other),
        Decision::Reissue(_)
    ));
}

#[test]
fn a_ca_rotation_keeps_the_old_ca_until_the_new_one_has_settled() {
    let v = Duration::from_secs(DAY);
    let h = host_set(&hosts());
    let m = fresh(NOW, v);
    // The CA lives 10 days; with less than a third left it is renewed.
    let late = NOW + 7 * DAY as i64;
    let d = decide(Some(&stored(&m)), late, v, &h);
    assert!(matches!(d, Decision::RotateCa(_)), "{d:?}");
    let rotated = carry_out(&d, Some(&m), &hosts(), late, v)
        .expect("rotate")
        .expect("material");
    let s = stored(&rotated);
    assert_eq!(s.cas.len(), 2, "new CA in front of the old one");
    assert!(rotated.ca_crt.ends_with(&m.ca_crt));
    assert_eq!(rotated.tls_crt, m.tls_crt, "the serving certificate stays");
    // The serving certificate (signed by the old CA) has long expired by
    // then: it must be reissued, but only once the new CA has settled.
    let expired = decide(Some(&s), late, v, &h);
    assert!(matches!(expired, Decision::Reissue(_)), "{expired:?}");
    // A serving certificate due but still valid waits for the new CA to
    // settle (1 day / 6 = 4 h, capped to 1 h).
    let mut due = s.clone();
    if let Some(serving) = due.serving.as_mut() {
        serving.not_after = late + 4 * 3600;
    }
    assert_eq!(decide(Some(&due), late + 10, v, &h), Decision::Wait);
    assert!(matches!(
        decide(Some(&due), late + 3600, v, &h),
        Decision::Reissue(_)
    ));
    // Once the old CA expires it leaves the bundle.
    let reissued = carry_out(
        &Decision::Reissue("t".into()),
        Some(&rotated),
        &hosts(),
        NOW + 11 * DAY as i64,
        v,
    )
    .expect("reissue")
    .expect("material");
    assert_eq!(stored(&reissued).cas.len(), 1);
}

#[test]
fn settle_is_a_sixth_of_the_validity_within_bounds() {
    assert_eq!(settle(Duration::from_secs(60)), Duration::from_secs(10));
    assert_eq!(settle(Duration::from_secs(90)), Duration::from_secs(15));
    assert_eq!(
        settle(Duration::from_secs(365 * DAY)),
        Duration::from_secs(3600)
    );
}
