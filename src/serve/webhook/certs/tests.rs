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

/// Hardening: a replica whose clock ran ahead issued the
/// stored pair. By the API server's clock the serving certificate is not
/// valid yet, so it is replaced at once (from the same CA); within the
/// slack it is kept.
#[test]
fn a_serving_certificate_dated_ahead_of_the_server_is_reissued() {
    let v = Duration::from_secs(DAY);
    let h = host_set(&hosts());
    let good = fresh(NOW, v);
    // Serving certificate issued at NOW + 2 h: notBefore NOW + 1 h.
    let ahead = carry_out(
        &Decision::Reissue("t".into()),
        Some(&good),
        &hosts(),
        NOW + 2 * 3600,
        v,
    )
    .expect("issue")
    .expect("material");
    let d = decide(Some(&stored(&ahead)), NOW, v, &h);
    assert!(
        matches!(&d, Decision::Reissue(why) if why.contains("not valid for another 3600s")),
        "{d:?}"
    );
    let replaced = carry_out(&d, Some(&ahead), &hosts(), NOW, v)
        .expect("reissue")
        .expect("material");
    assert_eq!(replaced.ca_crt, good.ca_crt, "same CA");
    let s = stored(&replaced);
    assert_eq!(
        s.serving.as_ref().map(|c| c.not_before),
        Some(NOW - BACKDATE)
    );
    assert_eq!(decide(Some(&s), NOW, v, &h), Decision::Keep);
    // notBefore a few seconds ahead (the evidence lags the server): kept.
    let just = stored(&ahead);
    let at = NOW + 3600 - NOT_BEFORE_SLACK;
    assert_eq!(decide(Some(&just), at, v, &h), Decision::Keep);
}

/// §14 (a), the CA: a CA dated ahead is unusable (the API server refuses
/// the chain), so the Secret starts afresh, and the bundle does not keep a
/// CA that is not valid yet.
#[test]
fn a_ca_dated_ahead_of_the_server_means_fresh() {
    let v = Duration::from_secs(DAY);
    let h = host_set(&hosts());
    let ahead = fresh(NOW + 2 * 3600, v);
    let d = decide(Some(&stored(&ahead)), NOW, v, &h);
    assert!(
        matches!(&d, Decision::Fresh(why) if why.contains("the CA is not valid")),
        "{d:?}"
    );
    let m = carry_out(&d, Some(&ahead), &hosts(), NOW, v)
        .expect("fresh")
        .expect("material");
    let s = stored(&m);
    assert_eq!(s.cas.len(), 1, "the CA dated ahead is not kept");
    assert_eq!(decide(Some(&s), NOW, v, &h), Decision::Keep);
}

/// §14 (b): a corrupted ca.key means a new CA, but the old CA, still valid,
/// stays in ca.crt behind it, so the certificate other replicas still serve
/// (signed by the old CA) stays trusted by the caBundle.
#[test]
fn a_fresh_ca_keeps_the_old_valid_ca_in_the_bundle() {
    let v = Duration::from_secs(DAY);
    let h = host_set(&hosts());
    let m = fresh(NOW, v);
    let other = fresh(NOW, v);
    let broken = Material {
        ca_key: other.ca_key.clone(),
        ..m.clone()
    };
    let d = decide(Some(&stored(&broken)), NOW + 60, v, &h);
    assert!(matches!(d, Decision::Fresh(_)), "{d:?}");
    let renewed = carry_out(&d, Some(&broken), &hosts(), NOW + 60, v)
        .expect("fresh")
        .expect("material");
    let s = stored(&renewed);
    assert_eq!(s.cas.len(), 2, "new CA in front, old CA kept");
    assert!(renewed.ca_crt.ends_with(&m.ca_crt));
    let old_serving = stored(&m).serving.expect("old serving certificate");
    assert!(
        s.cas.iter().any(|c| c.subject == old_serving.issuer),
        "the old serving certificate's CA is still trusted"
    );
    assert_eq!(
        s.serving.as_ref().map(|c| &c.issuer),
        Some(&s.cas[0].subject)
    );
    // The bundle does not grow without bound.
    let mut many = renewed.clone();
    for i in 0..(MAX_OLD_CAS + 3) {
        let again = Material {
            ca_key: other.ca_key.clone(),
            ..many.clone()
        };
        many = carry_out(
            &Decision::Fresh("t".into()),
            Some(&again),
            &hosts(),
            NOW + 120 + i as i64,
            v,
        )
        .expect("fresh")
        .expect("material");
    }
    assert_eq!(stored(&many).cas.len(), MAX_OLD_CAS + 1);
}

/// New certificates are dated an hour back, so an API server clock a
/// little ahead of the evidence still accepts them.
#[test]
fn new_certificates_are_backdated_an_hour() {
    let v = Duration::from_secs(DAY);
    let s = stored(&fresh(NOW, v));
    assert_eq!(s.cas[0].not_before, NOW - 3600);
    assert_eq!(s.serving.map(|c| c.not_before), Some(NOW - 3600));
}

/// L3: a validity whose tenfold (the CA's lifetime) overflows i64 does not
/// panic the decision.
#[test]
fn a_huge_validity_does_not_overflow() {
    let v = Duration::from_secs(1 << 62);
    let h = host_set(&hosts());
    let s = stored(&fresh(NOW, Duration::from_secs(DAY)));
    let d = decide(Some(&s), NOW, v, &h);
    assert!(matches!(d, Decision::RotateCa(_)), "{d:?}");
}
