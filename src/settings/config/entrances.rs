//! The entrances' settings: the admission webhook and its certificates, and
//! the late-taint net. Each error names the flag and the value.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::values::{check_dns_label, check_dns_subdomain, parse_addr, parse_duration};
use super::{ConfigError, invalid};
use crate::settings::table::RunGiven;

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

pub(super) fn webhook_settings(given: &RunGiven) -> Result<Option<WebhookSettings>, ConfigError> {
    // The managed certificates' settings, each with whether it was given.
    let managed = [
        (given.set.webhook_configuration, "--webhook-configuration"),
        (!given.webhook_hosts.is_empty(), "--webhook-host"),
        (given.set.webhook_cert_validity, "--webhook-cert-validity"),
    ];
    let addr = given.webhook_addr.as_deref();
    let Some(addr) = addr.filter(|a| !a.trim().is_empty()) else {
        let named = [
            (given.webhook_cert_dir.is_some(), "--webhook-cert-dir"),
            (given.webhook_cert_secret.is_some(), "--webhook-cert-secret"),
        ];
        if let Some((_, first)) = named.into_iter().chain(managed).find(|(set, _)| *set) {
            return Err(invalid(
                first,
                "configures the admission webhook, which is off: set --webhook-addr too",
            ));
        }
        return Ok(None);
    };
    let addr = parse_addr("--webhook-addr", addr)?;
    let certs = match (&given.webhook_cert_dir, &given.webhook_cert_secret) {
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
        (Some(dir), None) => cert_dir(dir, &managed)?,
        (None, Some(secret)) => managed_certs(secret, given)?,
    };
    Ok(Some(WebhookSettings { addr, certs }))
}

/// `--webhook-cert-dir`: none of the managed certificates' settings given.
fn cert_dir(dir: &str, managed: &[(bool, &str)]) -> Result<WebhookCerts, ConfigError> {
    if let Some(&(_, flag)) = managed.iter().find(|(set, _)| *set) {
        let why = "only applies with --webhook-cert-secret (nodegate's own certificates)";
        return Err(invalid(flag, why));
    }
    if dir.trim().is_empty() {
        return Err(invalid("--webhook-cert-dir \"\"", "needs a directory"));
    }
    Ok(WebhookCerts::Dir(PathBuf::from(dir)))
}

/// The longest `--webhook-cert-validity`: ten years (the CA lives a hundred).
const MAX_CERT_VALIDITY: Duration = Duration::from_secs(3650 * 24 * 3600);

/// `--webhook-cert-secret` with its configuration, hosts and validity.
fn managed_certs(secret: &str, given: &RunGiven) -> Result<WebhookCerts, ConfigError> {
    let at = || format!("--webhook-cert-secret {secret:?}");
    let (ns, name) = secret
        .split_once('/')
        .ok_or_else(|| invalid(at(), "must be NAMESPACE/NAME"))?;
    check_dns_label(ns).map_err(|m| invalid(at(), format!("namespace: {m}")))?;
    check_dns_subdomain(name).map_err(|m| invalid(at(), format!("name: {m}")))?;
    let configuration = given.webhook_configuration.as_deref().ok_or_else(|| {
        invalid(
            "--webhook-cert-secret",
            "needs --webhook-configuration NAME: the MutatingWebhookConfiguration \
             whose caBundle nodegate keeps current",
        )
    })?;
    check_dns_subdomain(configuration)
        .map_err(|m| invalid(format!("--webhook-configuration {configuration:?}"), m))?;
    let hosts = &given.webhook_hosts;
    if hosts.is_empty() {
        return Err(invalid(
            "--webhook-cert-secret",
            "needs at least one --webhook-host (the Service's DNS name, or an IP)",
        ));
    }
    for h in hosts.iter().filter(|h| h.parse::<IpAddr>().is_err()) {
        check_dns_subdomain(h).map_err(|m| {
            invalid(
                format!("--webhook-host {h:?}"),
                format!("neither an IP address nor a DNS name: {m}"),
            )
        })?;
    }
    let validity = &given.webhook_cert_validity;
    let validity_d = parse_duration("--webhook-cert-validity", validity)?;
    if validity_d < Duration::from_secs(60) || validity_d > MAX_CERT_VALIDITY {
        return Err(invalid(
            format!("--webhook-cert-validity {validity:?}"),
            "must be between 1m and 3650d (the CA nodegate issues lives ten times as long)",
        ));
    }
    Ok(WebhookCerts::Managed {
        secret_namespace: ns.to_string(),
        secret_name: name.to_string(),
        configuration: configuration.to_string(),
        hosts: hosts.clone(),
        validity: validity_d,
    })
}
