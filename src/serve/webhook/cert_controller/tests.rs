//! The Secret's contents and the caBundle patch, without a cluster.

use super::*;
use crate::serve::webhook::certs::Decision;

fn issued() -> Material {
    certs::carry_out(
        &Decision::Fresh("test".into()),
        None,
        &["127.0.0.1".to_string()],
        1_800_000_000,
        Duration::from_secs(3600),
    )
    .expect("issue")
    .expect("material")
}

#[test]
fn the_empty_shipped_secret_has_no_material_and_is_filled_in_place() {
    let shipped: Secret = serde_json::from_value(json!({
        "metadata": {"name": "nodegate-webhook", "namespace": "nodegate", "resourceVersion": "7"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "", "tls.key": ""},
    }))
    .expect("secret");
    assert_eq!(material(&shipped), None);
    let m = issued();
    let filled = with_material(Some(shipped), "nodegate", "nodegate-webhook", &m);
    assert_eq!(
        filled.metadata.resource_version.as_deref(),
        Some("7"),
        "the update is conditional on what was read"
    );
    assert_eq!(filled.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(material(&filled), Some(m.clone()));
    let created = with_material(None, "nodegate", "nodegate-webhook", &m);
    assert_eq!(created.metadata.namespace.as_deref(), Some("nodegate"));
    assert_eq!(created.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(created.metadata.resource_version, None);
}

#[test]
fn the_bundle_patch_fills_every_blank_or_stale_webhook_and_nothing_else() {
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "nodegate", "resourceVersion": "12"},
        "webhooks": [
            {"name": "a.nodegate.dev", "clientConfig": {"url": "https://x/mutate-node"},
             "sideEffects": "None", "admissionReviewVersions": ["v1"]},
            {"name": "b.nodegate.dev", "clientConfig": {"url": "https://x/mutate-node", "caBundle": "QlVORExF"},
             "sideEffects": "None", "admissionReviewVersions": ["v1"]},
            {"name": "c.nodegate.dev", "clientConfig": {"url": "https://x/mutate-node", "caBundle": "b2xk"},
             "sideEffects": "None", "admissionReviewVersions": ["v1"]},
        ],
    }))
    .expect("config");
    let patch = bundle_patch(&config, b"BUNDLE").expect("two to fix");
    assert_eq!(
        patch,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "12"},
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "QlVORExF"},
            {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": "QlVORExF"},
        ])
    );
    assert_eq!(
        bundle_patch(&config, b"old").map(|p| p.as_array().map(Vec::len)),
        Some(Some(3))
    );
    let mut done = config.clone();
    for w in done.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(ByteString(b"BUNDLE".to_vec()));
    }
    assert_eq!(bundle_patch(&done, b"BUNDLE"), None);
}

#[test]
fn the_period_follows_the_validity() {
    assert_eq!(period(Duration::from_secs(90)), Duration::from_millis(4500));
    assert_eq!(
        period(Duration::from_secs(3600 * 24)),
        Duration::from_secs(15)
    );
    assert_eq!(period(Duration::from_secs(20)), Duration::from_secs(2));
}

/// Hardening: the caBundle is written only from the Secret as it
/// is now: a replica whose view is older (another replica rewrote the
/// Secret since) or unknown does not write.
#[test]
fn the_bundle_is_written_only_from_the_secret_version_it_came_from() {
    assert!(may_write_bundle(Some("41"), Some("41")));
    assert!(!may_write_bundle(Some("41"), Some("42")));
    assert!(!may_write_bundle(None, Some("42")));
    assert!(!may_write_bundle(Some("41"), None));
}

/// Hardening: the caBundle first, then the serving certificate.
/// A new certificate is swapped in only once every webhook has trusted its
/// CA for a whole period (found in place in the round before too): not in
/// the round this replica wrote the bundle, nor while a write was lost to a
/// change; a failed sync does not hold it back.
#[test]
fn the_serving_certificate_is_swapped_only_after_the_bundle_is_in_place() {
    assert!(may_swap(&Ok(BundleSync::Equal), true));
    assert!(!may_swap(&Ok(BundleSync::Equal), false));
    assert!(!may_swap(&Ok(BundleSync::Written), true));
    assert!(!may_swap(&Ok(BundleSync::Lost), true));
    assert!(may_swap(&Err("forbidden".into()), false));
}
