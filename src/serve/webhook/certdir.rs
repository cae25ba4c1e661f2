//! Certificates from a directory (`--webhook-cert-dir`): `tls.crt` and
//! `tls.key`, e.g. a cert-manager Secret mounted as a volume.
//!
//! The contents are polled, not watched with inotify: Kubernetes updates a
//! mounted Secret by swapping a `..data` symlink, which file watches on
//! `tls.crt` itself miss, and two reads a few seconds apart cost nothing. A
//! new pair that does not load (half written, key and certificate not
//! matching) leaves the old one in service.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::server::{CertSlot, certified_key};
use crate::error::{Error, Result};
use crate::serve::metrics::{CertProblem, Metrics};

/// The bytes of `tls.crt` and `tls.key` as last read.
pub type Pair = (Vec<u8>, Vec<u8>);

/// How often the files are read again.
pub const POLL: Duration = Duration::from_secs(5);

fn files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("tls.crt"), dir.join("tls.key"))
}

fn read(dir: &Path) -> Result<Pair> {
    let (crt, key) = files(dir);
    let file = |path: &Path, what: &str| {
        let what = format!(
            "cannot read the webhook {what} {} (--webhook-cert-dir)",
            path.display()
        );
        std::fs::read(path).map_err(Error::io(what))
    };
    Ok((file(&crt, "certificate")?, file(&key, "key")?))
}

/// Loads the pair at startup: the error names the files and what is wrong.
pub fn load(dir: &Path) -> Result<(CertifiedKey, i64, Pair)> {
    let (c, k) = read(dir)?;
    let (key, not_after) = certified_key(&c, &k).map_err(|why| Error::Invalid {
        what: format!(
            "the webhook certificate {} with its key {} (--webhook-cert-dir)",
            files(dir).0.display(),
            files(dir).1.display()
        ),
        why,
    })?;
    Ok((key, not_after, (c, k)))
}

/// Re-reads the files every [`POLL`] until `shutdown`, swapping a good new
/// pair into `slot`.
pub fn spawn_reload(
    dir: PathBuf,
    slot: Arc<CertSlot>,
    metrics: Arc<Metrics>,
    mut seen: Pair,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while super::back_off(POLL, &mut shutdown).await {
            let now = match read(&dir) {
                Ok(pair) => pair,
                Err(e) => {
                    if !seen.0.is_empty() {
                        tracing::warn!(
                            "webhook: {}; serving the certificate loaded before",
                            e.report()
                        );
                        metrics.entrances.certificate_error(CertProblem::Reload);
                        seen = (Vec::new(), Vec::new());
                    }
                    continue;
                }
            };
            if now == seen {
                continue;
            }
            match certified_key(&now.0, &now.1) {
                Ok((key, not_after)) => {
                    slot.set(key);
                    metrics.entrances.cert_expiry.set(not_after);
                    tracing::info!(dir = %dir.display(), not_after, "webhook: new certificate loaded");
                }
                Err(why) => {
                    tracing::warn!(dir = %dir.display(), "webhook: the new certificate cannot be used ({why}); serving the one loaded before");
                    metrics.entrances.certificate_error(CertProblem::Reload);
                }
            }
            seen = now;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::leader::Leadership;
    use crate::serve::webhook::certs::{Decision, carry_out};

    fn pair() -> (String, String) {
        let m = carry_out(
            &Decision::Fresh("test".into()),
            None,
            &["127.0.0.1".to_string()],
            1_800_000_000,
            Duration::from_secs(3600),
        )
        .expect("issue")
        .expect("material");
        (m.tls_crt, m.tls_key)
    }

    #[test]
    fn startup_errors_name_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = load(dir.path()).expect_err("no files").report().to_string();
        assert!(
            e.contains("tls.crt") && e.contains("--webhook-cert-dir"),
            "{e}"
        );
        let (c, _) = pair();
        let (_, other_key) = pair();
        std::fs::write(dir.path().join("tls.crt"), &c).expect("write");
        let e = load(dir.path()).expect_err("no key").report().to_string();
        assert!(e.contains("tls.key"), "{e}");
        std::fs::write(dir.path().join("tls.key"), &other_key).expect("write");
        let e = load(dir.path()).expect_err("mismatch").report().to_string();
        assert!(e.contains("does not belong"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_pair_is_swapped_in_and_a_bad_one_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (c, k) = pair();
        std::fs::write(dir.path().join("tls.crt"), &c).expect("write");
        std::fs::write(dir.path().join("tls.key"), &k).expect("write");
        let (key, _, seen) = load(dir.path()).expect("loads");
        let slot = Arc::new(CertSlot::new(key));
        let metrics = Arc::new(Metrics::new(Arc::new(Leadership::always())));
        let (_stop, stop_rx) = watch::channel(false);
        let current = || slot_cert(&slot);
        let first = current();
        let _task = spawn_reload(
            dir.path().into(),
            Arc::clone(&slot),
            Arc::clone(&metrics),
            seen,
            stop_rx,
        );
        // A bad pair: the old one stays.
        std::fs::write(dir.path().join("tls.crt"), b"garbage").expect("write");
        tokio::time::sleep(POLL * 2).await;
        assert_eq!(current(), first);
        assert!(
            metrics
                .encode()
                .expect("encode")
                .contains("nodegate_webhook_certificate_errors_total{problem=\"reload\"} 1")
        );
        // A good new pair: swapped in.
        let (c2, k2) = pair();
        std::fs::write(dir.path().join("tls.key"), &k2).expect("write");
        std::fs::write(dir.path().join("tls.crt"), &c2).expect("write");
        tokio::time::sleep(POLL * 2).await;
        assert_ne!(current(), first);
    }

    fn slot_cert(slot: &CertSlot) -> Vec<u8> {
        slot.current().cert[0].to_vec()
    }
}
