//! The Kubernetes client every command uses: credentials from the pod's
//! service account or the user's kubeconfig, and nodegate's own User-Agent.
//!
//! This module owns how the client is built, and nothing else; it sends no
//! request (building a client does not contact the API server).

use crate::error::{Error, Result};

/// A client for the cluster the environment points at (in-cluster service
/// account, else `KUBECONFIG` / `~/.kube/config`), sending
/// `User-Agent: nodegate/VERSION`.
pub async fn client() -> Result<kube::Client> {
    let mut config = kube::Config::infer().await.map_err(Error::Credentials)?;
    let agent = format!("nodegate/{}", env!("CARGO_PKG_VERSION"));
    if let Ok(v) = ::http::HeaderValue::from_str(&agent) {
        config.headers.push((::http::header::USER_AGENT, v));
    }
    kube::Client::try_from(config).map_err(Error::Client)
}
