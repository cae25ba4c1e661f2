//! The controller of the self-managed certificates: it writes their home,
//! the Secret of `--webhook-cert-secret`, and the caBundle of
//! `--webhook-configuration`. Every replica converges the one Secret, serves
//! what it holds, and keeps the caBundle equal to its CA bundle.
//!
//! **Converging.** A replica reads the Secret; if it is absent it creates
//! it (AlreadyExists: another replica was first, read again); if it is
//! present but empty, unreadable or due for renewal (`certs::decide`) it
//! replaces it with an update that carries the resourceVersion it read
//! (Conflict: another replica wrote first, read again and use that). So two
//! replicas starting at once end with one Secret, and only one of them
//! issues each certificate. The deploy manifests ship the Secret empty, so
//! nodegate needs no `create` on Secrets in a real install: get and update
//! on that one name are enough.
//!
//! **Serving.** Every replica re-reads the Secret every [`period`] and
//! swaps its serving certificate when `tls.crt` changed.
//!
//! **caBundle.** Every replica, leader or not, compares each webhook's
//! caBundle in the configuration with the Secret's `ca.crt` as it just read
//! it, and patches those that differ (a blanked caBundle after a `helm
//! upgrade` is repaired within one period). The writes are idempotent and
//! conditional on the resourceVersion, so replicas agreeing on the Secret
//! write the same bytes and a replica with an older view loses the race or
//! is corrected in the next period. Leaving it to every replica keeps the
//! repair working while no leader is elected.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::certs::{self, CA_CRT, CA_KEY, Decision, Material, TLS_CRT, TLS_KEY};
use super::server::{CertSlot, certified_key};
use crate::cluster::writer::FIELD_MANAGER;
use crate::serve::metrics::{CertProblem, Metrics};

/// How many conflicting writes one round tolerates before it gives up
/// until the next period.
const ATTEMPTS: usize = 5;

/// How often every replica re-reads the Secret and checks the caBundle: a
/// twentieth of the validity, 2 to 15 seconds.
pub fn period(validity: Duration) -> Duration {
    (validity / 20).clamp(Duration::from_secs(2), Duration::from_secs(15))
}

/// The four PEM texts in a Secret's data; `None` when one is missing or not
/// UTF-8.
pub fn material(secret: &Secret) -> Option<Material> {
    let data = secret.data.as_ref()?;
    let text = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .filter(|s| !s.trim().is_empty())
    };
    Some(Material {
        ca_crt: text(CA_CRT)?,
        ca_key: text(CA_KEY)?,
        tls_crt: text(TLS_CRT)?,
        tls_key: text(TLS_KEY)?,
    })
}

/// `old` (or a new Secret of type kubernetes.io/tls) holding `m`; the
/// resourceVersion read stays, so the update is conditional.
pub fn with_material(old: Option<Secret>, namespace: &str, name: &str, m: &Material) -> Secret {
    let mut s = old.unwrap_or_else(|| Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        ..Secret::default()
    });
    let data = s.data.get_or_insert_with(Default::default);
    for (k, v) in [
        (CA_CRT, &m.ca_crt),
        (CA_KEY, &m.ca_key),
        (TLS_CRT, &m.tls_crt),
        (TLS_KEY, &m.tls_key),
    ] {
        data.insert(k.into(), ByteString(v.as_bytes().to_vec()));
    }
    s.string_data = None;
    s
}

/// The JSON patch that sets every webhook's caBundle to `bundle`, testing
/// the resourceVersion; `None` when all are set already.
pub fn bundle_patch(config: &MutatingWebhookConfiguration, bundle: &[u8]) -> Option<Value> {
    let mut ops = vec![json!({
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": config.metadata.resource_version.clone().unwrap_or_default(),
    })];
    for (i, w) in config.webhooks.iter().flatten().enumerate() {
        if w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle) {
            ops.push(json!({
                "op": "add",
                "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                "value": ByteString(bundle.to_vec()),
            }));
        }
    }
    (ops.len() > 1).then_some(Value::Array(ops))
}

/// The self-managed certificates of one replica.
pub struct Managed {
    pub secrets: Api<Secret>,
    pub configs: Api<MutatingWebhookConfiguration>,
    pub namespace: String,
    pub name: String,
    pub configuration: String,
    pub hosts: Vec<String>,
    pub validity: Duration,
    pub metrics: Arc<Metrics>,
}

fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn explain(e: &kube::Error, verbs: &str) -> String {
    if is_code(e, 403) {
        format!("{e}: nodegate's ServiceAccount needs {verbs} on it")
    } else {
        e.to_string()
    }
}

impl Managed {
    /// One round: the Secret as it is once good (written by this replica or
    /// another), or why not.
    pub async fn converge(&self) -> Result<Material, String> {
        let hosts = certs::host_set(&self.hosts);
        for _ in 0..ATTEMPTS {
            let secret = self
                .secrets
                .get_opt(&self.name)
                .await
                .map_err(|e| format!("reading it: {}", explain(&e, "get")))?;
            let old = secret.as_ref().and_then(material);
            let stored = old.as_ref().and_then(|m| {
                certs::read(
                    m.ca_crt.as_bytes(),
                    m.ca_key.as_bytes(),
                    m.tls_crt.as_bytes(),
                    m.tls_key.as_bytes(),
                )
            });
            let now = Timestamp::now().as_second();
            let decision = certs::decide(stored.as_ref(), now, self.validity, &hosts);
            let Some(new) =
                certs::carry_out(&decision, old.as_ref(), &self.hosts, now, self.validity)?
            else {
                // Keep and Wait come only with a readable Secret.
                return old.ok_or_else(|| "nothing stored and nothing issued".into());
            };
            let exists = secret.is_some();
            let body = with_material(secret, &self.namespace, &self.name, &new);
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            let written = if exists {
                self.secrets.replace(&self.name, &params, &body).await
            } else {
                self.secrets.create(&params, &body).await
            };
            match written {
                Ok(_) => {
                    if let Decision::Fresh(why) | Decision::RotateCa(why) | Decision::Reissue(why) =
                        &decision
                    {
                        tracing::info!(secret = %self.name, "webhook: wrote new certificates to the Secret: {why}");
                    }
                    return Ok(new);
                }
                // Another replica wrote first: read what it wrote.
                Err(e) if is_code(&e, 409) => {
                    tracing::info!(secret = %self.name, "webhook: another replica wrote the Secret first; reading it again");
                }
                Err(e) => {
                    let verbs = if exists {
                        "update"
                    } else {
                        "create (or ship the Secret empty)"
                    };
                    return Err(format!("writing it: {}", explain(&e, verbs)));
                }
            }
        }
        Err(format!("{ATTEMPTS} conflicting writes in a row"))
    }

    /// Sets every webhook's caBundle in the configuration to `bundle`;
    /// whether it wrote.
    pub async fn sync_bundle(&self, bundle: &str) -> Result<bool, String> {
        let config = self
            .configs
            .get_opt(&self.configuration)
            .await
            .map_err(|e| format!("reading it: {}", explain(&e, "get")))?
            .ok_or("it does not exist (create it, nodegate only fills its caBundle)")?;
        let Some(patch) = bundle_patch(&config, bundle.as_bytes()) else {
            return Ok(false);
        };
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(|e| format!("building the patch: {e}"))?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match self
            .configs
            .patch(&self.configuration, &params, &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => Ok(true),
            // Changed meanwhile (another replica, an upgrade): next period.
            Err(e) if is_code(&e, 422) || is_code(&e, 409) => Ok(false),
            Err(e) => Err(format!("patching its caBundle: {}", explain(&e, "patch"))),
        }
    }

    /// One round of the loop: converge, swap the serving certificate if it
    /// changed, repair the caBundle. Returns the `tls.crt` now served.
    pub async fn round(&self, slot: &CertSlot, served: &str) -> String {
        let m = match self.converge().await {
            Ok(m) => m,
            Err(why) => {
                tracing::warn!(
                    "webhook: the Secret {}/{} (--webhook-cert-secret): {why}",
                    self.namespace,
                    self.name
                );
                self.metrics.webhook_certificate_error(CertProblem::Secret);
                return served.to_string();
            }
        };
        let mut now_served = served.to_string();
        if m.tls_crt != served {
            match certified_key(m.tls_crt.as_bytes(), m.tls_key.as_bytes()) {
                Ok((key, not_after)) => {
                    slot.set(key);
                    self.metrics.webhook_certificate_expiry(not_after);
                    tracing::info!(
                        not_after,
                        "webhook: serving the certificate from the Secret"
                    );
                    now_served = m.tls_crt.clone();
                }
                Err(why) => {
                    tracing::warn!(
                        "webhook: the Secret's tls.crt cannot be served ({why}); keeping the one served"
                    );
                    self.metrics.webhook_certificate_error(CertProblem::Secret);
                }
            }
        }
        match self.sync_bundle(&m.ca_crt).await {
            Ok(true) => {
                tracing::info!(configuration = %self.configuration, "webhook: caBundle set");
                self.metrics.webhook_ca_bundle_repaired();
            }
            Ok(false) => {}
            Err(why) => {
                tracing::warn!(
                    "webhook: the MutatingWebhookConfiguration {} (--webhook-configuration): {why}",
                    self.configuration
                );
                self.metrics
                    .webhook_certificate_error(CertProblem::CaBundle);
            }
        }
        now_served
    }

    /// Runs [`Self::round`] every [`period`] until `shutdown`.
    pub fn spawn(
        self,
        slot: Arc<CertSlot>,
        mut served: String,
        mut shutdown: watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let every = period(self.validity);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = shutdown.changed() => return,
                }
                served = self.round(&slot, &served).await;
            }
        })
    }
}

#[cfg(test)]
mod tests;
