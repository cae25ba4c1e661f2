//! The admission policy's parameters (`--admission-params`), kept by the
//! replica that leads (docs/operations.md, While nodegate is down). The
//! policy taints nothing while they are absent, so they exist only while
//! someone is there to open the nodes it taints: the leader writes them once
//! its watches are synced; they are owned by the leader's Pod, so the garbage
//! collector deletes them with it; a container that starts in a Pod that
//! already owns them deletes them first, so a crash loop leaves none behind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use nodegate_actors::live::LiveConfig;
use nodegate_actors::router::Router;
use nodegate_core::vocab::config::Config;
use tokio::sync::watch;

use crate::cluster::leader::Leadership;
use crate::settings::config::AdmissionParamsRef;

/// How often the leader checks that the parameters are still there and
/// still its own.
pub const CHECK_EVERY: Duration = Duration::from_secs(10);

/// The Pod this process runs in, from the downward API; `None` outside a
/// Pod (or when the manifests do not pass `$POD_UID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnPod {
    pub name: String,
    pub uid: String,
}

impl OwnPod {
    /// `$POD_NAME` and `$POD_UID`, both non-empty.
    pub fn from_env() -> Option<OwnPod> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Some(OwnPod {
            name: var("POD_NAME")?,
            uid: var("POD_UID")?,
        })
    }

    fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "v1".to_string(),
            kind: "Pod".to_string(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }
}

/// The parameters for this gate configuration, as the policy's CEL reads
/// them: `startupRules` (one `SELECTOR=KEY:EFFECT` a line, the `--taint-for`
/// rules then the presets'), `startupTaint` (the first `--taint`) and
/// `managedTaints` (every startup taint, comma-separated). Read from the
/// configuration in force, so a reloaded config file's taints reach the
/// policy within [`CHECK_EVERY`]. Under `--dry-run` nodegate writes none (a
/// trial writes nothing, and a node the policy tainted would never be
/// opened).
pub fn params_data(config: &Config) -> BTreeMap<String, String> {
    let regate = config.regate.as_ref().map(|r| &r.taint);
    let taints = config.placement.managed_taints.iter();
    let startup = taints.filter(|t| Some(*t) != regate);
    let managed: Vec<String> = startup.map(ToString::to_string).collect();
    let data = [
        ("startupRules", config.startup.admission_rules()),
        ("startupTaint", config.startup.fallback().to_string()),
        ("managedTaints", managed.join(",")),
    ];
    data.map(|(k, v)| (k.to_string(), v)).into()
}

/// Whether `cm` was written by an earlier run of this process's Pod: one of
/// its owners is the Pod with this uid.
pub fn written_by_this_pod(cm: &ConfigMap, pod_uid: &str) -> bool {
    let mut owners = cm.metadata.owner_references.iter().flatten();
    owners.any(|o| o.kind == "Pod" && o.uid == pod_uid)
}

/// What the leader must do to `current` so that it holds `data` and is
/// owned by `owner` (and by no one else); `None`: nothing.
pub fn wanted(
    current: Option<&ConfigMap>,
    data: &BTreeMap<String, String>,
    owner: Option<&OwnPod>,
) -> Option<Write> {
    let Some(cm) = current else {
        return Some(Write::Create);
    };
    let same_data = cm.data.as_ref() == Some(data);
    let owners = cm.metadata.owner_references.as_ref();
    let same_owner = owner.is_none_or(|p| owners == Some(&vec![p.owner_reference()]));
    (!same_data || !same_owner).then_some(Write::Replace)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Create,
    Replace,
}

/// The parameter ConfigMap of one `--admission-params`.
#[derive(Clone)]
pub struct AdmissionParams {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
    owner: Option<OwnPod>,
}

impl AdmissionParams {
    /// `default_namespace`: the Pod's namespace, used when the flag names
    /// none.
    pub fn new(
        client: kube::Client,
        at: &AdmissionParamsRef,
        default_namespace: &str,
        owner: Option<OwnPod>,
    ) -> Self {
        let namespace = at.namespace.as_deref().unwrap_or(default_namespace);
        AdmissionParams {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: at.name.clone(),
            owner,
        }
    }

    fn at(&self) -> String {
        format!("ConfigMap {}/{}", self.namespace, self.name)
    }

    async fn read(&self) -> Result<Option<ConfigMap>, String> {
        let read = self.api.get_opt(&self.name).await;
        read.map_err(|e| format!("reading {}: {e}", self.at()))
    }

    /// Deletes the parameters if this Pod owns them: what an earlier run of
    /// this container wrote is no promise that anyone will open the nodes
    /// the policy taints. Returns whether it deleted them.
    pub async fn forget_earlier_run(&self) -> Result<bool, String> {
        let Some(pod) = &self.owner else {
            return Ok(false);
        };
        let current = self.read().await?;
        let Some(cm) = current.filter(|cm| written_by_this_pod(cm, &pod.uid)) else {
            return Ok(false);
        };
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: cm.metadata.uid.clone(),
                resource_version: cm.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&self.name, &dp).await {
            Ok(_) => Ok(true),
            // Gone, or changed meanwhile (another replica leads now and made
            // them its own).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
            Err(e) => Err(format!("deleting {}: {e}", self.at())),
        }
    }

    /// One check: creates or replaces the parameters when they differ from
    /// `data` and this Pod as their one owner. Returns the write made.
    pub async fn ensure(&self, data: &BTreeMap<String, String>) -> Result<Option<Write>, String> {
        let current = self.read().await?;
        let Some(write) = wanted(current.as_ref(), data, self.owner.as_ref()) else {
            return Ok(None);
        };
        let managed_by = ("app.kubernetes.io/managed-by".into(), "nodegate".into());
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([managed_by])),
                owner_references: self.owner.as_ref().map(|p| vec![p.owner_reference()]),
                ..ObjectMeta::default()
            },
            data: Some(data.clone()),
            ..ConfigMap::default()
        };
        let pp = PostParams::default();
        let sent = match (write, current) {
            (Write::Replace, Some(old)) => {
                // Conditional on what was just read.
                cm.metadata.resource_version = old.metadata.resource_version;
                if self.owner.is_none() {
                    cm.metadata.owner_references = old.metadata.owner_references;
                }
                self.api.replace(&self.name, &pp, &cm).await
            }
            _ => self.api.create(&pp, &cm).await,
        };
        sent.map(|_| Some(write))
            .map_err(|e| format!("writing {}: {e}", self.at()))
    }

    /// Deletes the parameters whoever wrote them (when a leader outside a
    /// Pod stops).
    async fn delete(&self) -> Result<(), String> {
        match self.api.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(format!("deleting {}: {e}", self.at())),
        }
    }

    /// Keeps the parameters while this replica leads and its watches are
    /// synced, until `stop` changes; then, outside a Pod, deletes them if
    /// it wrote them.
    pub fn spawn(
        self,
        live: Arc<LiveConfig>,
        leadership: Arc<Leadership>,
        router: Arc<Router>,
        mut stop: watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut wrote = false;
            let mut said_error = false;
            loop {
                let mut wait = Duration::from_millis(500);
                if leadership.is_leader() && router.is_synced() {
                    wait = CHECK_EVERY;
                    let data = params_data(&live.current());
                    match self.ensure(&data).await {
                        Ok(written) => {
                            wrote = true;
                            said_error = false;
                            if let Some(write) = written {
                                tracing::info!(
                                    params = %self.at(),
                                    ?write,
                                    "admission policy parameters written: the policy taints new nodes while this replica leads"
                                );
                            }
                        }
                        Err(error) => {
                            wait = Duration::from_secs(2);
                            if !std::mem::replace(&mut said_error, true) {
                                tracing::warn!(%error, "cannot write the admission policy's parameters; retrying");
                            }
                        }
                    }
                }
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            if wrote && self.owner.is_none() {
                let gone = tokio::time::timeout(Duration::from_secs(3), self.delete()).await;
                match gone {
                    Ok(Ok(())) => {
                        tracing::info!(params = %self.at(), "admission policy parameters deleted")
                    }
                    Ok(Err(error)) => tracing::warn!(%error, "admission policy parameters left"),
                    Err(_) => {
                        tracing::warn!(params = %self.at(), "no answer deleting the admission policy parameters")
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> BTreeMap<String, String> {
        BTreeMap::from([("startupTaint".to_string(), "a/b:NoSchedule".to_string())])
    }

    fn pod(uid: &str) -> OwnPod {
        OwnPod {
            name: format!("nodegate-{uid}"),
            uid: uid.to_string(),
        }
    }

    fn cm(data: BTreeMap<String, String>, owner: Option<&OwnPod>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                owner_references: owner.map(|p| vec![p.owner_reference()]),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn an_earlier_run_of_the_same_pod_is_recognised_by_its_uid() {
        let mine = cm(data(), Some(&pod("u1")));
        assert!(written_by_this_pod(&mine, "u1"));
        assert!(!written_by_this_pod(&mine, "u2"));
        assert!(!written_by_this_pod(&cm(data(), None), "u1"));
    }

    #[test]
    fn the_leader_writes_what_is_missing_different_or_owned_by_another_pod() {
        let me = pod("u1");
        assert_eq!(wanted(None, &data(), Some(&me)), Some(Write::Create));
        assert_eq!(
            wanted(Some(&cm(data(), Some(&me))), &data(), Some(&me)),
            None
        );
        assert_eq!(
            wanted(Some(&cm(data(), Some(&pod("u0")))), &data(), Some(&me)),
            Some(Write::Replace),
            "the old leader's parameters become the new leader's"
        );
        assert_eq!(
            wanted(Some(&cm(BTreeMap::new(), Some(&me))), &data(), Some(&me)),
            Some(Write::Replace)
        );
        // Outside a Pod the owners are left as they are.
        assert_eq!(wanted(Some(&cm(data(), Some(&me))), &data(), None), None);
    }
}
