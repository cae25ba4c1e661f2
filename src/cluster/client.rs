//! The Kubernetes client every command uses: credentials from the pod's
//! service account or the user's kubeconfig (kubectl's `--kubeconfig`,
//! `--context` and `--request-timeout` when given), and nodegate's own
//! User-Agent. Building a client sends no request.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::{Error, KubeconfigSource, Result, Target, set_target};
use crate::settings::config::ConfigError;

/// Where to reach the cluster: kubectl's flags, already checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// `None`: the client's own defaults.
    pub request_timeout: Option<Duration>,
}

impl Connection {
    /// The flags as given; a bad `--request-timeout` names its value
    /// (exit 2, before any request).
    pub fn from_flags(
        kubeconfig: Option<PathBuf>,
        context: Option<String>,
        request_timeout: Option<&str>,
    ) -> Result<Connection, ConfigError> {
        let request_timeout = request_timeout.map(parse_request_timeout).transpose()?;
        Ok(Connection {
            kubeconfig,
            context,
            request_timeout: request_timeout.flatten(),
        })
    }
}

/// kubectl's `--request-timeout`: a duration (`10s`, `1m`), or a bare
/// number of seconds; 0 means no timeout (`None`).
pub fn parse_request_timeout(s: &str) -> Result<Option<Duration>, ConfigError> {
    let t = s.trim();
    let d = match t.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(t).map_err(|e| ConfigError::Invalid {
            source_: format!("--request-timeout {s:?}"),
            message: format!("{e}; give a duration such as 10s or 1m, or 0 for none"),
        })?,
    };
    Ok((!d.is_zero()).then_some(d))
}

/// The connection `main` set for this process: `run`'s connection flags, or
/// those given before the subcommand.
static PROCESS_CONNECTION: OnceLock<Connection> = OnceLock::new();

/// Sets the connection [`client`] uses; only the first call counts.
pub fn set_process_connection(c: Connection) {
    let _ = PROCESS_CONNECTION.set(c);
}

/// A client for the cluster the process was pointed at
/// ([`set_process_connection`]; else as [`client_for`] infers it).
pub async fn client() -> Result<kube::Client> {
    let default = Connection::default();
    client_for(PROCESS_CONNECTION.get().unwrap_or(&default)).await
}

/// A client for `c`, sending `User-Agent: nodegate/VERSION`. Without
/// `--kubeconfig` or `--context`: the in-cluster service account, else
/// `KUBECONFIG` / `~/.kube/config` (kube's inference, as kubectl's).
pub async fn client_for(c: &Connection) -> Result<kube::Client> {
    client_impersonating(c, None).await
}

/// [`client_for`], acting as `user` (kubectl's `--as`) when given: the API
/// server judges each request as that user's, admission policies included.
/// The credentials must be allowed to impersonate.
pub async fn client_impersonating(c: &Connection, user: Option<&str>) -> Result<kube::Client> {
    let mut config = config_for(c).await?;
    if let Some(user) = user {
        config.auth_info.impersonate = Some(user.to_string());
    }
    let agent = ::http::HeaderValue::from_static(concat!("nodegate/", env!("CARGO_PKG_VERSION")));
    config.headers.push((::http::header::USER_AGENT, agent));
    if let Some(t) = c.request_timeout {
        config.connect_timeout = Some(t);
        config.read_timeout = Some(t);
        config.write_timeout = Some(t);
    }
    kube::Client::try_from(config).map_err(Error::Client)
}

async fn config_for(c: &Connection) -> Result<kube::Config> {
    let options = KubeConfigOptions {
        context: c.context.clone(),
        ..Default::default()
    };
    let kubeconfig_error = |source: kube::config::KubeconfigError, from| Error::Kubeconfig {
        source,
        from,
        context: c.context.clone(),
    };
    let (config, context) = match (&c.kubeconfig, &c.context) {
        (None, None) => {
            let config = kube::Config::infer().await.map_err(Error::Credentials)?;
            // The context infer() used, if it used a kubeconfig at all.
            let context = Kubeconfig::read().ok().and_then(|k| k.current_context);
            (config, context)
        }
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| kubeconfig_error(e, KubeconfigSource::Flag))?;
            let context = c.context.clone().or(file.current_context.clone());
            let config = kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| kubeconfig_error(e, KubeconfigSource::Flag))?;
            (config, context)
        }
        (None, Some(ctx)) => {
            let config = kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| kubeconfig_error(e, KubeconfigSource::Environment))?;
            (config, Some(ctx.clone()))
        }
    };
    let url = config.cluster_url.to_string();
    let server = url.trim_end_matches('/').to_string();
    set_target(Target { server, context });
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeout_reads_as_kubectl_does() {
        assert_eq!(
            parse_request_timeout("10").ok(),
            Some(Some(Duration::from_secs(10)))
        );
        assert_eq!(
            parse_request_timeout("1m").ok(),
            Some(Some(Duration::from_secs(60)))
        );
        assert_eq!(parse_request_timeout("0").ok(), Some(None));
        let e = parse_request_timeout("soon").err().map(|e| e.to_string());
        assert!(e.is_some_and(|m| m.contains("soon")));
    }
}
