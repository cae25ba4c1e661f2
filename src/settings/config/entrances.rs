//! The entrances' settings: the admission webhook and its certificates, and
//! the late-taint net. Each error names the flag and the value.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::values::{check_dns_label, check_dns_subdomain, parse_addr, parse_duration};
use super::{ConfigError, FileConfig, invalid, pick};
use crate::settings::cli::RunArgs;

/// The default `--new-node-window`.
pub const DEFAULT_NEW_NODE_WINDOW: Duration = Duration::from_secs(120);
/// The default `--webhook-cert-validity`: a year.
pub const DEFAULT_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// `--webhook-addr` and where its certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    pub addr: SocketAddr,
    pub certs: WebhookCerts,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookCerts {
    /// `--webhook-cert-dir`: `tls.crt` and `tls.key` there, re-read when they
    /// change.
    Dir(PathBuf),
    /// `--webhook-cert-secret` and friends: nodegate issues and rotates them.
    Managed {
        secret_namespace: String,
        secret_name: String,
        /// The MutatingWebhookConfiguration whose caBundle nodegate sets.
        configuration: String,
        /// DNS names and IP addresses the serving certificate covers.
        hosts: Vec<String>,
        validity: Duration,
    },
}

/// `--taint-new-nodes` and `--new-node-window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetSettings {
    pub enabled: bool,
    pub window: Duration,
}

pub(super) fn webhook_settings(
    args: &RunArgs,
    file: &mut FileConfig,
) -> Result<Option<WebhookSettings>, ConfigError> {
    let addr =
        pick(args.webhook_addr.clone(), file.webhook_addr.take()).filter(|a| !a.trim().is_empty());
    let dir = pick(args.webhook_cert_dir.clone(), file.webhook_cert_dir.take());
    let secret = pick(
        args.webhook_cert_secret.clone(),
        file.webhook_cert_secret.take(),
    );
    let configuration = pick(
        args.webhook_configuration.clone(),
        file.webhook_configuration.take(),
    );
    let hosts = if args.webhook_hosts.is_empty() {
        file.webhook_hosts.take().unwrap_or_default()
    } else {
        args.webhook_hosts.clone()
    };
    let validity = pick(
        args.webhook_cert_validity.clone(),
        file.webhook_cert_validity.take(),
    );

    let Some(addr) = addr else {
        let given: Vec<&str> = [
            dir.as_ref().map(|_| "--webhook-cert-dir"),
            secret.as_ref().map(|_| "--webhook-cert-secret"),
            configuration.as_ref().map(|_| "--webhook-configuration"),
            (!hosts.is_empty()).then_some("--webhook-host"),
            validity.as_ref().map(|_| "--webhook-cert-validity"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let Some(first) = given.first() {
            return Err(invalid(
                *first,
                "configures the admission webhook, which is off: set --webhook-addr too",
            ));
        }
        return Ok(None);
    };
    let addr = parse_addr("--webhook-addr", &addr)?;

    let certs = match (dir, secret) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "--webhook-cert-dir and --webhook-cert-secret",
                "choose one: certificates from a directory, or managed by nodegate in a Secret",
            ));
        }
        (None, None) => {
            return Err(invalid(
                format!("--webhook-addr {:?}", addr.to_string()),
                "the webhook needs a certificate: set --webhook-cert-dir DIR, or \
                 --webhook-cert-secret NAMESPACE/NAME with --webhook-configuration and \
                 --webhook-host",
            ));
        }
        (Some(dir), None) => {
            for (flag, given) in [
                ("--webhook-configuration", configuration.is_some()),
                ("--webhook-host", !hosts.is_empty()),
                ("--webhook-cert-validity", validity.is_some()),
            ] {
                if given {
                    return Err(invalid(
                        flag,
                        "only applies with --webhook-cert-secret (nodegate's own certificates)",
                    ));
                }
            }
            if dir.trim().is_empty() {
                return Err(invalid("--webhook-cert-dir \"\"", "needs a directory"));
            }
            WebhookCerts::Dir(PathBuf::from(dir))
        }
        (None, Some(secret)) => {
            let (ns, name) = secret.split_once('/').ok_or_else(|| {
                invalid(
                    format!("--webhook-cert-secret {secret:?}"),
                    "must be NAMESPACE/NAME",
                )
            })?;
            check_dns_label(ns).map_err(|m| {
                invalid(
                    format!("--webhook-cert-secret {secret:?}"),
                    format!("namespace: {m}"),
                )
            })?;
            check_dns_subdomain(name).map_err(|m| {
                invalid(
                    format!("--webhook-cert-secret {secret:?}"),
                    format!("name: {m}"),
                )
            })?;
            let configuration = configuration.ok_or_else(|| {
                invalid(
                    "--webhook-cert-secret",
                    "needs --webhook-configuration NAME: the MutatingWebhookConfiguration \
                     whose caBundle nodegate keeps current",
                )
            })?;
            check_dns_subdomain(&configuration)
                .map_err(|m| invalid(format!("--webhook-configuration {configuration:?}"), m))?;
            if hosts.is_empty() {
                return Err(invalid(
                    "--webhook-cert-secret",
                    "needs at least one --webhook-host (the Service's DNS name, or an IP)",
                ));
            }
            for h in &hosts {
                if h.parse::<IpAddr>().is_err() {
                    check_dns_subdomain(h).map_err(|m| {
                        invalid(
                            format!("--webhook-host {h:?}"),
                            format!("neither an IP address nor a DNS name: {m}"),
                        )
                    })?;
                }
            }
            let validity = match validity {
                Some(v) => {
                    let d = parse_duration("--webhook-cert-validity", &v)?;
                    if d < Duration::from_secs(60) {
                        return Err(invalid(
                            format!("--webhook-cert-validity {v:?}"),
                            "must be at least 1m",
                        ));
                    }
                    d
                }
                None => DEFAULT_CERT_VALIDITY,
            };
            WebhookCerts::Managed {
                secret_namespace: ns.to_string(),
                secret_name: name.to_string(),
                configuration,
                hosts,
                validity,
            }
        }
    };
    Ok(Some(WebhookSettings { addr, certs }))
}

pub(super) fn net_settings(
    args: &RunArgs,
    file: &mut FileConfig,
) -> Result<NetSettings, ConfigError> {
    let window = match pick(args.new_node_window.clone(), file.new_node_window.take()) {
        Some(s) => {
            let d = parse_duration("--new-node-window", &s)?;
            if d.is_zero() {
                return Err(invalid(
                    format!("--new-node-window {s:?}"),
                    "must be more than 0",
                ));
            }
            d
        }
        None => DEFAULT_NEW_NODE_WINDOW,
    };
    Ok(NetSettings {
        enabled: args.taint_new_nodes || file.taint_new_nodes.unwrap_or(false),
        window,
    })
}
