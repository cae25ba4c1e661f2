//! The controller of the self-managed certificates. Every replica, leader or
//! not (so that repairs go on while no leader is elected), converges the one
//! Secret of `--webhook-cert-secret`, serves what it holds, and keeps the
//! caBundle of `--webhook-configuration` equal to its `ca.crt`.
//!
//! A replica creates the Secret when it is absent, and replaces it when it is
//! empty, unreadable or due (`certs::decide`) with an update that carries the
//! resourceVersion it read; on AlreadyExists or Conflict another replica was
//! first, and it reads again and uses that. So replicas starting at once end
//! with one Secret, and only one of them issues each certificate. The deploy
//! manifests ship the Secret empty, so nodegate needs no `create` on Secrets
//! in a real install: get and update on that one name are enough.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::certs::{self, CA_CRT, CA_KEY, Decision, Material, TLS_CRT, TLS_KEY};
use super::server::{CertSlot, certified_key};
use crate::cluster::patch::version_test;
use crate::cluster::server_time::ServerTime;
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
    let version = config.metadata.resource_version.as_deref();
    let mut ops = vec![version_test(version.unwrap_or_default())];
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
    /// Evidence of the API server's clock: every decision's now.
    pub server_time: Arc<ServerTime>,
}

/// The Secret as one round left it: its material and the resourceVersion
/// it has (as read, or as written).
#[derive(Debug, Clone)]
pub struct Converged {
    pub material: Material,
    pub version: Option<String>,
}

/// What syncing the caBundle found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleSync {
    /// Every webhook already had the bundle.
    Equal,
    /// This replica wrote it just now.
    Written,
    /// Not written: the configuration or the Secret changed meanwhile (next
    /// period).
    Lost,
}

/// Whether a bundle derived from the Secret at version `derived` may be
/// written, the Secret being at `current` now.
pub fn may_write_bundle(derived: Option<&str>, current: Option<&str>) -> bool {
    matches!((derived, current), (Some(d), Some(c)) if d == c)
}

/// Whether a new serving certificate may be swapped in after the caBundle
/// sync found `sync`, `settled` telling whether the same bundle was found
/// in place in the round before too: every webhook must have trusted its CA
/// for a whole period (the API server reloads the configuration a moment
/// after it changes, and another replica may have written it just now). A
/// sync that failed outright does not hold the swap back: nodegate cannot
/// do better, and the served certificate must not run out.
pub fn may_swap(sync: &Result<BundleSync, String>, settled: bool) -> bool {
    match sync {
        Ok(BundleSync::Equal) => settled,
        Ok(BundleSync::Written | BundleSync::Lost) => false,
        Err(_) => true,
    }
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
    pub async fn converge(&self) -> Result<Converged, String> {
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
            let now = self
                .server_time
                .now()
                .map(|t| t.as_second())
                .ok_or("waiting for evidence of the API server's clock (GET /version)")?;
            let decision = certs::decide(stored.as_ref(), now, self.validity, &hosts);
            let Some(new) =
                certs::carry_out(&decision, old.as_ref(), &self.hosts, now, self.validity)?
            else {
                // Keep and Wait come only with a readable Secret.
                let version = secret.and_then(|s| s.metadata.resource_version);
                return old
                    .map(|material| Converged { material, version })
                    .ok_or_else(|| "nothing stored and nothing issued".into());
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
                Ok(written) => {
                    if let Decision::Fresh(why) | Decision::RotateCa(why) | Decision::Reissue(why) =
                        &decision
                    {
                        tracing::info!(secret = %self.name, "webhook: wrote new certificates to the Secret: {why}");
                    }
                    return Ok(Converged {
                        material: new,
                        version: written.metadata.resource_version,
                    });
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

    /// One round: converge, sync the caBundle, swap the serving certificate
    /// if [`may_swap`]; returns the `tls.crt` now served. `in_place`: the
    /// `ca.crt` every webhook's caBundle held in the round before.
    pub async fn round(
        &self,
        slot: &CertSlot,
        served: &str,
        in_place: &mut Option<String>,
    ) -> String {
        let entrances = &self.metrics.entrances;
        let c = match self.converge().await {
            Ok(c) => c,
            Err(why) => {
                tracing::warn!(
                    "webhook: the Secret {}/{} (--webhook-cert-secret): {why}",
                    self.namespace,
                    self.name
                );
                entrances.certificate_error(CertProblem::Secret);
                return served.to_string();
            }
        };
        let sync = self.bundle(&c).await;
        let m = c.material;
        let settled = in_place.as_deref() == Some(m.ca_crt.as_str());
        *in_place = matches!(sync, Ok(BundleSync::Equal)).then(|| m.ca_crt.clone());
        if m.tls_crt == served {
            return served.to_string();
        }
        if !may_swap(&sync, settled) {
            tracing::info!(
                "webhook: a new serving certificate is in the Secret; serving it once the caBundle has been in place for a period"
            );
            return served.to_string();
        }
        match certified_key(m.tls_crt.as_bytes(), m.tls_key.as_bytes()) {
            Ok((key, not_after)) => {
                slot.set(key);
                entrances.cert_expiry.set(not_after);
                tracing::info!(
                    not_after,
                    "webhook: serving the certificate from the Secret"
                );
                m.tls_crt
            }
            Err(why) => {
                tracing::warn!(
                    "webhook: the Secret's tls.crt cannot be served ({why}); keeping the one served"
                );
                entrances.certificate_error(CertProblem::Secret);
                served.to_string()
            }
        }
    }

    /// Sets every webhook's caBundle to the `ca.crt` `c` holds, while the
    /// Secret is still at `c`'s resourceVersion.
    pub async fn bundle(&self, c: &Converged) -> Result<BundleSync, String> {
        let sync = async {
            let config = self
                .configs
                .get_opt(&self.configuration)
                .await
                .map_err(|e| format!("reading it: {}", explain(&e, "get")))?
                .ok_or("it does not exist (create it, nodegate only fills its caBundle)")?;
            let Some(patch) = bundle_patch(&config, c.material.ca_crt.as_bytes()) else {
                return Ok(BundleSync::Equal);
            };
            // Only from the Secret as it is now: a replica that read it before
            // another one rewrote it must not put the older bundle back.
            let current = self
                .secrets
                .get_opt(&self.name)
                .await
                .map_err(|e| format!("reading the Secret again: {}", explain(&e, "get")))?
                .and_then(|s| s.metadata.resource_version);
            if !may_write_bundle(c.version.as_deref(), current.as_deref()) {
                return Ok(BundleSync::Lost);
            }
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
                Ok(_) => Ok(BundleSync::Written),
                // Changed meanwhile (another replica, an upgrade): next period.
                Err(e) if is_code(&e, 422) || is_code(&e, 409) => Ok(BundleSync::Lost),
                Err(e) => Err(format!("patching its caBundle: {}", explain(&e, "patch"))),
            }
        }
        .await;
        match &sync {
            Ok(BundleSync::Written) => {
                tracing::info!(configuration = %self.configuration, "webhook: caBundle set");
                self.metrics.entrances.ca_bundle_repairs.inc();
            }
            Ok(BundleSync::Equal | BundleSync::Lost) => {}
            Err(why) => {
                tracing::warn!(
                    "webhook: the MutatingWebhookConfiguration {} (--webhook-configuration): {why}",
                    self.configuration
                );
                self.metrics
                    .entrances
                    .certificate_error(CertProblem::CaBundle);
            }
        }
        sync
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
            let mut in_place = None;
            while super::back_off(every, &mut shutdown).await {
                served = self.round(&slot, &served, &mut in_place).await;
            }
        })
    }
}

#[cfg(test)]
mod tests;
