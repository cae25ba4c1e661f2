//! The admission webhook of `nodegate run` (semantics §6.1): HTTPS on
//! `--webhook-addr`, path `/mutate-node`, served by every replica whatever
//! its leadership.
//!
//! - `review`: the answer to one AdmissionReview, a pure function.
//! - `server`: TLS (rustls, ring) with a swappable certificate, and HTTP.
//! - `certdir`: the certificate from `--webhook-cert-dir`, re-read on change.
//! - `certs`: the certificates nodegate issues itself, and when to renew.
//! - `cert_controller`: the controller that keeps them in the Secret
//!   (`--webhook-cert-secret`) and the caBundle of
//!   `--webhook-configuration` equal to their CA.

pub mod cert_controller;
pub mod certdir;
pub mod certs;
pub mod review;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nodegate_actors::live::LiveConfig;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::serve::metrics::Metrics;
use crate::settings::config::{WebhookCerts, WebhookSettings};
use server::{CertSlot, Handler};

/// How many times the first convergence of the Secret is tried at startup
/// before nodegate gives up (and exits, to be restarted).
const STARTUP_ATTEMPTS: u32 = 5;

/// Starts the task that keeps the certificate in the slot current.
type Keeper = Box<dyn FnOnce(Arc<CertSlot>) -> JoinHandle<()>>;

/// The running webhook: its address and its tasks.
pub struct Webhook {
    pub addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Webhook {
    /// Waits up to `grace` for the tasks to end (they end when the shutdown
    /// channel they were given changes).
    pub async fn stopped(self, grace: Duration) {
        for task in self.tasks {
            let _ = tokio::time::timeout(grace, task).await;
        }
    }
}

/// Loads the certificate (from the directory, or by converging the Secret),
/// binds the address and starts serving; then keeps the certificate current
/// until `shutdown` changes. Scope and managed taints are read from `live`
/// for every review, so a config reload reaches the webhook at once.
pub async fn start(
    settings: &WebhookSettings,
    client: &kube::Client,
    live: Arc<LiveConfig>,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) -> Result<Webhook> {
    let handler = Arc::new(Handler {
        live,
        metrics: Arc::clone(&metrics),
    });
    let (slot, keeper): (Arc<CertSlot>, Keeper) = match &settings.certs {
        WebhookCerts::Dir(dir) => {
            let (key, not_after, seen) = certdir::load(dir)?;
            metrics.webhook_certificate_expiry(not_after);
            let (dir, metrics, stop) = (dir.clone(), Arc::clone(&metrics), shutdown.clone());
            (
                Arc::new(CertSlot::new(key)),
                Box::new(move |slot| certdir::spawn_reload(dir, slot, metrics, seen, stop)),
            )
        }
        WebhookCerts::Managed {
            secret_namespace,
            secret_name,
            configuration,
            hosts,
            validity,
        } => {
            let m = cert_controller::Managed {
                secrets: kube::Api::namespaced(client.clone(), secret_namespace),
                configs: kube::Api::all(client.clone()),
                namespace: secret_namespace.clone(),
                name: secret_name.clone(),
                configuration: configuration.clone(),
                hosts: hosts.clone(),
                validity: *validity,
                metrics: Arc::clone(&metrics),
            };
            let what = format!(
                "the webhook Secret {secret_namespace}/{secret_name} (--webhook-cert-secret)"
            );
            managed_slot(m, what, &metrics, &shutdown).await?
        }
    };
    let (addr, server) = server::serve(settings.addr, Arc::clone(&slot), handler, shutdown).await?;
    let keeper = keeper(slot);
    Ok(Webhook {
        addr,
        tasks: vec![server, keeper],
    })
}

/// Converges the Secret at start (a few attempts, then the error), loads
/// its certificate into a new slot, and returns the slot with the task that
/// keeps the Secret and the caBundle current (its first round sets the
/// caBundle at once).
async fn managed_slot(
    m: cert_controller::Managed,
    what: String,
    metrics: &Metrics,
    shutdown: &watch::Receiver<bool>,
) -> Result<(Arc<CertSlot>, Keeper)> {
    let mut attempt = 1;
    let material = loop {
        match m.converge().await {
            Ok(material) => break material,
            Err(why) if attempt >= STARTUP_ATTEMPTS => {
                return Err(Error::Invalid { what, why });
            }
            Err(why) => {
                tracing::warn!("webhook: {what}: {why}; retrying");
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    let (key, not_after) =
        server::certified_key(material.tls_crt.as_bytes(), material.tls_key.as_bytes()).map_err(
            |why| Error::Invalid {
                what: what.clone(),
                why,
            },
        )?;
    metrics.webhook_certificate_expiry(not_after);
    let slot = Arc::new(CertSlot::new(key));
    // The caBundle is set by the first round, right away.
    let first = Arc::clone(&slot);
    let served = material.tls_crt.clone();
    let stop = shutdown.clone();
    Ok((
        slot,
        Box::new(move |slot| {
            tokio::spawn(async move {
                let served = m.round(&first, &served).await;
                let _ = m.spawn(slot, served, stop).await;
            })
        }),
    ))
}
