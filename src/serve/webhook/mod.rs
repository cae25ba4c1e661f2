//! The admission webhook of `nodegate run` (semantics §6.1): HTTPS on
//! `--webhook-addr`, path `/mutate-node`, served by every replica whatever
//! its leadership. The webhook is an entrance and gating is the core, so
//! nothing about its certificate holds the rest of `nodegate run` back.

pub mod cert_controller;
pub mod certdir;
pub mod certs;
pub mod review;
pub mod server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nodegate_actors::live::LiveConfig;
use nodegate_core::vocab::backoff::Backoff;
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::server_time::ServerTime;
use crate::serve::health::{ProcessHealth, WebhookState};
use crate::serve::metrics::{CertProblem, Metrics};
use crate::settings::config::{WebhookCerts, WebhookSettings};
use certdir::Pair;
use server::{CertSlot, Handler};

/// The wait between two attempts at the first certificate (or the bind):
/// 1 s after the first failure, doubling per failure up to 30 s.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
/// How long the first attempt waits for evidence of the API server's clock.
const CLOCK_WAIT: Duration = Duration::from_secs(10);

/// The running webhook: its task (certificate, listener, renewal).
pub struct Webhook {
    task: JoinHandle<()>,
}

impl Webhook {
    /// Waits up to `grace` for the task to end (it ends when the shutdown
    /// channel it was given changes).
    pub async fn stopped(self, grace: Duration) {
        let _ = tokio::time::timeout(grace, self.task).await;
    }
}

/// What `start` needs besides the settings.
pub struct Context {
    pub client: kube::Client,
    /// Scope and managed taints, read for every review (a config reload
    /// reaches the webhook at once).
    pub live: Arc<LiveConfig>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<ProcessHealth>,
    pub server_time: Arc<ServerTime>,
}

/// Where the certificate comes from, with what serving keeps current after
/// the first one: the pair last read from the directory, or the `tls.crt`
/// served.
enum Source {
    Dir(PathBuf, Pair),
    Managed(Box<cert_controller::Managed>, String),
}

/// Starts the webhook in the background and returns at once: the task gets
/// the first certificate (retrying), binds the address, serves, and keeps
/// the certificate current until `shutdown` changes.
pub fn start(settings: &WebhookSettings, cx: Context, shutdown: watch::Receiver<bool>) -> Webhook {
    let mut source = match &settings.certs {
        WebhookCerts::Dir(dir) => Source::Dir(dir.clone(), Pair::default()),
        WebhookCerts::Managed {
            secret_namespace,
            secret_name,
            configuration,
            hosts,
            validity,
        } => Source::Managed(
            Box::new(cert_controller::Managed {
                secrets: kube::Api::namespaced(cx.client.clone(), secret_namespace),
                configs: kube::Api::all(cx.client.clone()),
                namespace: secret_namespace.clone(),
                name: secret_name.clone(),
                configuration: configuration.clone(),
                hosts: hosts.clone(),
                validity: *validity,
                metrics: Arc::clone(&cx.metrics),
                server_time: Arc::clone(&cx.server_time),
            }),
            String::new(),
        ),
    };
    let addr = settings.addr;
    let task = tokio::spawn(async move {
        let status = Status {
            metrics: Arc::clone(&cx.metrics),
            health: Arc::clone(&cx.health),
        };
        status.set(false, "not serving: no certificate yet".into());
        let mut stop = shutdown.clone();
        let problem = match &source {
            Source::Dir(..) => CertProblem::Reload,
            Source::Managed(m, _) => {
                clock_evidence(&m.server_time, &mut stop).await;
                CertProblem::Secret
            }
        };
        let mut failures = 0u32;
        let (key, not_after) = loop {
            match source.first().await {
                Ok(got) => break got,
                Err(why) => {
                    status.metrics.entrances.certificate_error(problem);
                    let context = "not serving yet: ";
                    if !status.failed(&mut failures, context, &why, &mut stop).await {
                        return;
                    }
                }
            }
        };
        status.metrics.entrances.cert_expiry.set(not_after);
        let slot = Arc::new(CertSlot::new(key));
        let handler = Arc::new(Handler::new(cx.live, Arc::clone(&cx.metrics)));
        let (mut failures, mut stop) = (0u32, shutdown.clone());
        let server = loop {
            let (slot, handler) = (Arc::clone(&slot), Arc::clone(&handler));
            match server::serve(addr, slot, handler, shutdown.clone()).await {
                Ok((bound, task)) => {
                    status.set(true, format!("serving on {bound}"));
                    break task;
                }
                Err(e) => {
                    let why = e.report().to_string();
                    if !status.failed(&mut failures, "", &why, &mut stop).await {
                        return;
                    }
                }
            }
        };
        let keeper = match source {
            Source::Dir(dir, seen) => certdir::spawn_reload(dir, slot, cx.metrics, seen, shutdown),
            Source::Managed(m, served) => (*m).spawn(slot, served, shutdown),
        };
        let _ = keeper.await;
        let _ = server.await;
    });
    Webhook { task }
}

/// Tells the readiness line and the metric what the webhook is doing.
struct Status {
    metrics: Arc<Metrics>,
    health: Arc<ProcessHealth>,
}

impl Status {
    /// Serving (on `detail`'s address) or not (`detail` says why).
    fn set(&self, serving: bool, detail: String) {
        self.metrics.entrances.serving.set(i64::from(serving));
        self.health.webhook(WebhookState { serving, detail });
    }

    /// One more failure (`why`, logged after `context`), told, then the
    /// wait ([`RETRY`]) before the next attempt; false when `shutdown`
    /// changed first.
    async fn failed(
        &self,
        failures: &mut u32,
        context: &str,
        why: &str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        *failures = failures.saturating_add(1);
        let wait = RETRY.ceiling(*failures);
        tracing::warn!("webhook: {context}{why}; retrying in {wait:?}");
        self.set(false, format!("not serving: {why}"));
        back_off(wait, shutdown).await
    }
}

/// Sleeps `wait`; false when `shutdown` changed first.
async fn back_off(wait: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = shutdown.changed() => false,
    }
}

impl Source {
    /// One attempt at the first certificate: the key and its notAfter, and
    /// what was read kept in `self`.
    async fn first(&mut self) -> Result<(CertifiedKey, i64), String> {
        match self {
            Source::Dir(dir, seen) => {
                let (key, not_after, pair) =
                    certdir::load(dir).map_err(|e| e.report().to_string())?;
                *seen = pair;
                Ok((key, not_after))
            }
            Source::Managed(m, served) => {
                let what = format!(
                    "the webhook Secret {}/{} (--webhook-cert-secret)",
                    m.namespace, m.name
                );
                let c = m.converge().await.map_err(|why| format!("{what}: {why}"))?;
                // Whatever the sync finds, nothing is served yet to hold back.
                let _ = m.bundle(&c).await;
                let (crt, key) = (c.material.tls_crt, c.material.tls_key);
                let (key, not_after) = server::certified_key(crt.as_bytes(), key.as_bytes())
                    .map_err(|why| format!("{what}: tls.crt and tls.key: {why}"))?;
                *served = crt;
                Ok((key, not_after))
            }
        }
    }
}

/// Waits (up to [`CLOCK_WAIT`]) for the first evidence of the API server's
/// clock, which the watches' probe brings right after start: the first
/// attempt then needs no retry, and counts no error.
async fn clock_evidence(server_time: &ServerTime, shutdown: &mut watch::Receiver<bool>) {
    let deadline = tokio::time::Instant::now() + CLOCK_WAIT;
    while server_time.now().is_none() && tokio::time::Instant::now() < deadline {
        if !back_off(Duration::from_millis(100), shutdown).await {
            return;
        }
    }
}
