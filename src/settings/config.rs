//! Settings: the command line merged over an optional YAML file, validated
//! before anything touches the cluster, and turned into the core's
//! [`GateConfig`] in one place ([`GateSettings::gate_config`]).
//!
//! Every error ([`ConfigError`]) names the bad value and where it came from,
//! and the process exits with status 2 on any of them (see `crate::error`).
//! Nothing here talks to the cluster.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use nodegate_core::conditions::CriticalCondition;
use nodegate_core::conditions::rules::ConditionTaintRule;
use nodegate_core::entrance::Scope;
use nodegate_core::gate::{self, GateConfig};
use nodegate_core::placement::{
    ManagedTaint, PlacementConfig, TransientTaint, default_transient_taints,
};
use nodegate_core::readiness::{CriticalPodEntry, CriticalPodEntryError};
use nodegate_core::regate::RegateConfig;
use nodegate_core::selector::{LabelSelector, check_label_key};
use serde::Deserialize;

use crate::settings::cli::{GateArgs, LogFormat, OnTimeout, RunArgs, StatusArgs};

pub const DEFAULT_TAINT: &str = "nodegate.dev/initializing:NoSchedule";
/// The default `--timeout`, the core's own.
pub use nodegate_core::gate::DEFAULT_TIMEOUT;
pub const DEFAULT_MAX_CONCURRENT_PATCHES: usize = 16;
pub const DEFAULT_KUBE_QPS: f64 = 50.0;
pub const DEFAULT_KUBE_BURST: u32 = 100;
pub const DEFAULT_KUBE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Leader-election defaults: kube-controller-manager's, which operators know.
pub const DEFAULT_LEASE_NAME: &str = "nodegate";
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
pub const DEFAULT_HTTP_ADDR: &str = "0.0.0.0:8080";
/// Loopback only: the debug endpoints show node labels, taints and pod names.
pub const DEFAULT_DEBUG_ADDR: &str = "127.0.0.1:8081";
pub const DEFAULT_DEBUG_HISTORY: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{source_}: {message}")]
    Invalid { source_: String, message: String },
    #[error("cannot read config file {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("config file {path}: {err}")]
    Parse { path: String, err: String },
}

fn invalid(source_: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        source_: source_.into(),
        message: message.into(),
    }
}

/// The config file. Keys mirror the flags, in camelCase; an unknown key is an
/// error so that a typo never silently falls back to a default.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    pub taints: Option<Vec<String>>,
    pub transient_taints: Option<Vec<String>>,
    pub exclude: Option<Vec<String>>,
    pub exclude_selector: Option<String>,
    pub node_selector: Option<String>,
    pub suspend: Option<bool>,
    pub critical_pods: Option<Vec<CriticalPodEntry>>,
    pub critical_conditions: Option<Vec<CriticalCondition>>,
    pub condition_taints: Option<Vec<conditions::RawRule>>,
    pub timeout: Option<String>,
    pub on_timeout: Option<OnTimeout>,
    pub dry_run: Option<bool>,
    pub max_concurrent_patches: Option<usize>,
    pub kube_qps: Option<f64>,
    pub kube_burst: Option<u32>,
    pub kube_request_timeout: Option<String>,
    pub log_format: Option<LogFormat>,
    pub log_level: Option<String>,
    pub leader_elect: Option<bool>,
    pub lease_name: Option<String>,
    pub lease_namespace: Option<String>,
    pub lease_duration: Option<String>,
    pub renew_deadline: Option<String>,
    pub retry_period: Option<String>,
    pub http_addr: Option<String>,
    pub debug_addr: Option<String>,
    pub debug_history: Option<usize>,
    pub otlp_endpoint: Option<String>,
    pub webhook_addr: Option<String>,
    pub webhook_cert_dir: Option<String>,
    pub webhook_cert_secret: Option<String>,
    pub webhook_configuration: Option<String>,
    pub webhook_hosts: Option<Vec<String>>,
    pub webhook_cert_validity: Option<String>,
    pub taint_new_nodes: Option<bool>,
    pub new_node_window: Option<String>,
    pub regate_after: Option<String>,
    pub regate_taint: Option<String>,
    pub regate_timeout: Option<String>,
    pub regate_max_unavailable: Option<String>,
    pub regate_on_reboot: Option<bool>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.display().to_string(),
            err,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<FileConfig, ConfigError> {
        if text.trim().is_empty() {
            return Ok(FileConfig::default());
        }
        serde_yaml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            err: e.to_string(),
        })
    }
}

/// What placement needs, shared by `run`, `explain` and `status`.
#[derive(Debug, Clone)]
pub struct GateSettings {
    /// `--node-selector`: the nodes nodegate manages at all.
    pub scope: Scope,
    /// `suspend: true` (config file only): decide, write nothing.
    pub suspend: bool,
    pub placement: PlacementConfig,
    pub critical: Vec<CriticalPodEntry>,
    /// `--regate-*`; `None` when re-gating is off. Its taint is also among
    /// `placement`'s managed taints (last, so never the one an entrance adds).
    pub regate: Option<RegateConfig>,
    /// `criticalConditions` (semantics.md §6.5).
    pub conditions: Vec<CriticalCondition>,
    /// `conditionTaints` (semantics.md §6.5).
    pub condition_taints: Vec<ConditionTaintRule>,
}

impl GateSettings {
    /// The core's gate configuration: these settings' placement and critical
    /// pods, with the deadline and the write policy the command runs with.
    /// The one place a [`GateConfig`] is assembled from settings, so that a
    /// new field is a compile error here and nowhere else.
    pub fn gate_config(
        &self,
        timeout: Option<Duration>,
        on_timeout: OnTimeout,
        dry_run: bool,
    ) -> GateConfig {
        GateConfig {
            scope: self.scope.clone(),
            placement: self.placement.clone(),
            critical: self.critical.clone(),
            conditions: self.conditions.clone(),
            condition_taints: self.condition_taints.clone(),
            timeout,
            on_timeout: on_timeout.into(),
            dry_run,
            suspend: self.suspend,
            regate: self.regate.clone(),
        }
    }
}

impl From<OnTimeout> for gate::OnTimeout {
    fn from(o: OnTimeout) -> gate::OnTimeout {
        match o {
            OnTimeout::Open => gate::OnTimeout::Open,
            OnTimeout::Keep => gate::OnTimeout::Keep,
        }
    }
}

/// `nodegate run`: the gate exactly as configured.
impl From<&RunSettings> for GateConfig {
    fn from(s: &RunSettings) -> GateConfig {
        s.gate.gate_config(s.timeout, s.on_timeout, s.dry_run)
    }
}

/// `nodegate status`: the gate in dry-run, opening on timeout, whatever the
/// file says about `onTimeout` or `dryRun` (status has neither flag): the
/// table shows what the gate would decide and never asks for a write.
impl From<&StatusSettings> for GateConfig {
    fn from(s: &StatusSettings) -> GateConfig {
        s.gate.gate_config(s.timeout, OnTimeout::Open, true)
    }
}

#[derive(Debug, Clone)]
pub struct RunSettings {
    pub gate: GateSettings,
    /// `None`: no deadline.
    pub timeout: Option<Duration>,
    pub on_timeout: OnTimeout,
    pub dry_run: bool,
    pub max_concurrent_patches: usize,
    pub kube_qps: f64,
    pub kube_burst: u32,
    /// The longest nodegate waits for the answer to one of its own requests.
    pub kube_request_timeout: Duration,
    pub log_format: LogFormat,
    pub log_level: String,
    pub leader_election: LeaderElection,
    pub http_addr: SocketAddr,
    /// `None`: no debug listener (`--debug-addr ""`).
    pub debug_addr: Option<SocketAddr>,
    /// Finished gates kept for /debug/nodes/NAME.
    pub debug_history: usize,
    /// `--otlp-endpoint`: the collector's base URL, checked; `None`: the
    /// `OTEL_*` variables decide (`crate::trace::config`).
    pub otlp_endpoint: Option<String>,
    /// The admission webhook (`--webhook-*`); `None`: off.
    pub webhook: Option<WebhookSettings>,
    /// The late-taint net (`--taint-new-nodes`, `--new-node-window`).
    pub net: NetSettings,
}

/// `--leader-elect` and its timings, with client-go's meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    pub enabled: bool,
    pub lease_name: String,
    /// `None`: $POD_NAMESPACE, else the kubeconfig's namespace (resolved when
    /// the client exists).
    pub lease_namespace: Option<String>,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// What `nodegate status` needs.
#[derive(Debug, Clone)]
pub struct StatusSettings {
    pub gate: GateSettings,
    pub timeout: Option<Duration>,
    pub watch: bool,
    pub interval: Duration,
}

/// Flags win over the file; a list given on the command line replaces the
/// file's list rather than adding to it.
fn pick<T>(flag: Option<T>, file: Option<T>) -> Option<T> {
    flag.or(file)
}

fn pick_list(flag: &[String], file: Option<Vec<String>>) -> Option<Vec<String>> {
    if flag.is_empty() {
        file
    } else {
        Some(flag.to_vec())
    }
}

pub fn load_file(args: &GateArgs) -> Result<FileConfig, ConfigError> {
    match &args.config {
        Some(path) => FileConfig::load(path),
        None => Ok(FileConfig::default()),
    }
}

pub fn gate_settings(args: &GateArgs, file: &mut FileConfig) -> Result<GateSettings, ConfigError> {
    let mut managed = Vec::new();
    let taints = pick_list(&args.taints, file.taints.take())
        .unwrap_or_else(|| vec![DEFAULT_TAINT.to_string()]);
    if taints.is_empty() {
        return Err(invalid("taints", "at least one managed taint is needed"));
    }
    for t in &taints {
        managed.push(parse_managed_taint(t)?);
    }

    let mut transient = default_transient_taints();
    for t in pick_list(&args.transient_taints, file.transient_taints.take()).unwrap_or_default() {
        let parsed = parse_transient(&t)?;
        if managed.iter().any(|m| parsed.matches(&m.key)) {
            return Err(invalid(
                format!("--transient-taint {t:?}"),
                "it matches a managed taint; nodegate's own taint cannot also be transient",
            ));
        }
        transient.push(parsed);
    }

    let mut excluded = BTreeSet::new();
    for e in pick_list(&args.excludes, file.exclude.take()).unwrap_or_default() {
        excluded.insert(parse_exclude(&e)?);
    }

    let exclude_selector = match pick(args.exclude_selector.clone(), file.exclude_selector.take()) {
        Some(s) => Some(
            LabelSelector::parse(&s)
                .map_err(|e| invalid(format!("--exclude-selector {s:?}"), e.to_string()))?,
        ),
        None => None,
    };

    let critical = file.critical_pods.take().unwrap_or_default();
    let mut names = BTreeSet::new();
    for (i, c) in critical.iter().enumerate() {
        let at = format!("criticalPods[{i}] ({})", c.name);
        if c.name.is_empty() {
            return Err(invalid(format!("criticalPods[{i}]"), "needs a name"));
        }
        if !names.insert(c.name.clone()) {
            return Err(invalid(at, "the name is used twice"));
        }
        c.validate().map_err(|e| match e {
            CriticalPodEntryError::NoNamespace { .. } => invalid(at, "needs a namespace"),
            CriticalPodEntryError::EmptySelector { .. } => invalid(
                at,
                "needs a non-empty selector (an empty one would match every pod)",
            ),
            CriticalPodEntryError::Selector { source, .. } => {
                invalid(format!("{at}.selector"), source.to_string())
            }
            CriticalPodEntryError::NodeSelector { source, .. } => {
                invalid(format!("{at}.nodeSelector"), source.to_string())
            }
        })?;
    }

    let scope = Scope {
        node_selector: match pick(args.node_selector.clone(), file.node_selector.take()) {
            Some(s) if s.trim().is_empty() => None,
            Some(s) => Some(
                LabelSelector::parse(&s)
                    .map_err(|e| invalid(format!("--node-selector {s:?}"), e.to_string()))?,
            ),
            None => None,
        },
    };

    let regate = regate_settings(args, file, &managed)?;
    if let Some(rc) = &regate {
        managed.push(rc.taint.clone());
    }
    let conditions = conditions::critical_conditions(file.critical_conditions.take())?;
    let condition_taints = conditions::condition_taints(file.condition_taints.take(), &managed)?;

    Ok(GateSettings {
        scope,
        regate,
        conditions,
        condition_taints,
        suspend: file.suspend.unwrap_or(false),
        placement: PlacementConfig {
            managed_taints: managed,
            transient_taints: transient,
            excluded,
            exclude_selector,
        },
        critical,
    })
}

pub fn run_settings(args: &RunArgs) -> Result<RunSettings, ConfigError> {
    run_settings_from(args, load_file(&args.gate)?)
}

/// [`run_settings`] over a config file already read and parsed (a reload
/// reads the file once, to compare and to parse the same bytes).
pub fn run_settings_from(args: &RunArgs, mut file: FileConfig) -> Result<RunSettings, ConfigError> {
    let gate = gate_settings(&args.gate, &mut file)?;

    let timeout = timeout_setting(args.timeout.clone(), file.timeout.take())?;
    let max_concurrent_patches = pick(args.max_concurrent_patches, file.max_concurrent_patches)
        .unwrap_or(DEFAULT_MAX_CONCURRENT_PATCHES);
    if max_concurrent_patches == 0 {
        return Err(invalid("--max-concurrent-patches 0", "must be at least 1"));
    }
    let kube_qps = pick(args.kube_qps, file.kube_qps).unwrap_or(DEFAULT_KUBE_QPS);
    if !(kube_qps.is_finite() && kube_qps > 0.0) {
        return Err(invalid(
            format!("--kube-qps {kube_qps}"),
            "must be a positive number",
        ));
    }
    let kube_burst = pick(args.kube_burst, file.kube_burst).unwrap_or(DEFAULT_KUBE_BURST);
    if kube_burst == 0 {
        return Err(invalid("--kube-burst 0", "must be at least 1"));
    }
    let kube_request_timeout = match pick(
        args.kube_request_timeout.clone(),
        file.kube_request_timeout.take(),
    ) {
        Some(s) => {
            let d = parse_duration("--kube-request-timeout", &s)?;
            if d.is_zero() {
                return Err(invalid(
                    format!("--kube-request-timeout {s:?}"),
                    "must be more than 0",
                ));
            }
            d
        }
        None => DEFAULT_KUBE_REQUEST_TIMEOUT,
    };
    let log_level =
        pick(args.log_level.clone(), file.log_level.take()).unwrap_or_else(|| "info".into());
    tracing_subscriber::EnvFilter::try_new(&log_level)
        .map_err(|e| invalid(format!("--log-level {log_level:?}"), e.to_string()))?;

    let leader_election = leader_election(args, &mut file)?;
    let http_addr = parse_http_addr(
        &pick(args.http_addr.clone(), file.http_addr.take())
            .unwrap_or_else(|| DEFAULT_HTTP_ADDR.to_string()),
    )?;
    let debug_addr = match pick(args.debug_addr.clone(), file.debug_addr.take())
        .unwrap_or_else(|| DEFAULT_DEBUG_ADDR.to_string())
    {
        s if s.trim().is_empty() => None,
        s => Some(parse_addr("--debug-addr", &s)?),
    };
    if debug_addr.is_some_and(|d| d.port() != 0 && d == http_addr) {
        return Err(invalid(
            format!(
                "--debug-addr {:?}",
                debug_addr.map(|d| d.to_string()).unwrap_or_default()
            ),
            "must differ from --http-addr",
        ));
    }
    let debug_history =
        pick(args.debug_history, file.debug_history).unwrap_or(DEFAULT_DEBUG_HISTORY);
    let otlp_endpoint = pick(args.otlp_endpoint.clone(), file.otlp_endpoint.take())
        .filter(|u| !u.trim().is_empty());
    if let Some(url) = &otlp_endpoint {
        crate::trace::config::check_endpoint("--otlp-endpoint", url)?;
    }
    let webhook = webhook_settings(args, &mut file)?;
    if let Some(w) = &webhook {
        let clash = [Some(http_addr), debug_addr]
            .into_iter()
            .flatten()
            .any(|a| a.port() != 0 && a == w.addr);
        if clash {
            return Err(invalid(
                format!("--webhook-addr {:?}", w.addr.to_string()),
                "must differ from --http-addr and --debug-addr",
            ));
        }
    }
    let net = net_settings(args, &mut file)?;

    Ok(RunSettings {
        webhook,
        net,
        leader_election,
        http_addr,
        debug_addr,
        debug_history,
        otlp_endpoint,
        gate,
        timeout,
        on_timeout: pick(args.on_timeout, file.on_timeout).unwrap_or(OnTimeout::Open),
        dry_run: args.dry_run || file.dry_run.unwrap_or(false),
        max_concurrent_patches,
        kube_qps,
        kube_burst,
        kube_request_timeout,
        log_format: pick(args.log_format, file.log_format).unwrap_or(LogFormat::Text),
        log_level,
    })
}

fn timeout_setting(
    flag: Option<String>,
    file: Option<String>,
) -> Result<Option<Duration>, ConfigError> {
    match pick(flag, file) {
        None => Ok(Some(DEFAULT_TIMEOUT)),
        Some(s) => {
            let d = parse_duration("--timeout", &s)?;
            Ok(if d.is_zero() { None } else { Some(d) })
        }
    }
}

pub fn status_settings(args: &StatusArgs) -> Result<StatusSettings, ConfigError> {
    let mut file = load_file(&args.gate)?;
    let gate = gate_settings(&args.gate, &mut file)?;
    let timeout = timeout_setting(args.timeout.clone(), file.timeout.take())?;
    let interval = parse_duration("--interval", &args.interval)?;
    if interval < Duration::from_millis(100) {
        return Err(invalid(
            format!("--interval {:?}", args.interval),
            "must be at least 100ms",
        ));
    }
    Ok(StatusSettings {
        gate,
        timeout,
        watch: args.watch,
        interval,
    })
}

mod conditions;
mod entrances;
pub use entrances::{
    DEFAULT_CERT_VALIDITY, DEFAULT_NEW_NODE_WINDOW, NetSettings, WebhookCerts, WebhookSettings,
};
use entrances::{net_settings, webhook_settings};
mod leader;
pub use leader::check_lease_timings;
use leader::leader_election;
mod regate;
use regate::regate_settings;
mod values;
use values::{check_dns_label, check_dns_subdomain, parse_addr};
pub use values::{
    parse_duration, parse_exclude, parse_http_addr, parse_managed_taint, parse_transient,
};

#[cfg(test)]
mod tests;
