//! Settings: the command line merged over an optional YAML file, validated
//! before anything touches the cluster, and turned into the core's
//! [`Config`] in one place ([`GateSettings::gate_config`]). Every error
//! ([`ConfigError`]) names the bad value and where it came from.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use nodegate_core::rules::conditions::CriticalCondition;
use nodegate_core::rules::conditions::taints::ConditionTaintRule;
use nodegate_core::rules::placement::{
    EFFECT_NO_SCHEDULE, ManagedTaint, PlacementConfig, TransientTaint, default_transient_taints,
};
use nodegate_core::rules::readiness::{CriticalPodEntry, is_dns1123_label};
use nodegate_core::rules::selector::check_label_key;
use nodegate_core::rules::startup::StartupTaints;
use nodegate_core::vocab::budget::MaxUnavailable;
use nodegate_core::vocab::config::{Config, OnTimeout, RegateConfig, Scope};
use serde::Deserialize;

use crate::settings::cli::{GateArgs, RunArgs, StatusArgs};
pub use crate::settings::table::FileConfig;
use crate::settings::table::{GateGiven, RunGiven};

pub use error::ConfigError;

/// A bad value: `source_` names it (a flag, a key), `message` says why.
pub fn invalid(source_: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        source_: source_.into(),
        message: message.into(),
    }
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = load::read_capped(path)?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<FileConfig, ConfigError> {
        if text.trim().is_empty() {
            return Ok(FileConfig::default());
        }
        // YAML 1.2 booleans only (`yes` is a string, as it always was here).
        let options = serde_saphyr::options! {
            strict_booleans: true,
            with_snippet: false,
        };
        serde_saphyr::from_str_with_options(text, options).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            err: yaml_error(text, &e),
        })
    }
}

/// The parser's message (which has the position), and the line it points
/// at, so that the message names the key and the value whatever it says.
fn yaml_error(text: &str, e: &serde_saphyr::Error) -> String {
    // The parser's hint at its own options means nothing to a person.
    let message = e
        .without_snippet()
        .to_string()
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "");
    let message = load::explain_unknown_key(&message, text).unwrap_or(message);
    let line = e
        .location()
        .and_then(|l| usize::try_from(l.line()).ok())
        .and_then(|n| text.lines().nth(n.checked_sub(1)?))
        .map(str::trim)
        .filter(|l| !l.is_empty());
    match line {
        Some(line) if !message.contains(line) => format!("{message} (at `{line}`)"),
        _ => message,
    }
}

/// What placement needs, shared by every command that takes [`GateArgs`].
#[derive(Debug, Clone)]
pub struct GateSettings {
    /// `--node-selector`: the nodes nodegate manages at all.
    pub scope: Scope,
    /// `suspend: true` (config file only): decide, write nothing.
    pub suspend: bool,
    pub placement: PlacementConfig,
    /// `--taint-for` and `--autoscaler`: the taint an entrance adds to each
    /// node; every taint it can choose is among `placement`'s managed ones.
    pub startup: StartupTaints,
    pub critical: Vec<CriticalPodEntry>,
    /// `--regate-*`; `None` when re-gating is off. Its taint is also among
    /// `placement`'s managed taints (last, so never the one an entrance adds).
    pub regate: Option<RegateConfig>,
    /// `criticalConditions` (semantics.md §6.5).
    pub conditions: Vec<CriticalCondition>,
    /// `conditionTaints` (semantics.md §6.5).
    pub condition_taints: Vec<ConditionTaintRule>,
    /// `criticalResources` (semantics.md §6.8).
    pub resources: Vec<nodegate_core::rules::devices::CriticalResource>,
    /// `draDrivers` (semantics.md §6.8).
    pub dra_drivers: Vec<nodegate_core::rules::devices::DraDriver>,
    /// `--max-unavailable`: the cap on the nodes re-gating and the rules
    /// keep closed together; `None` at 100%.
    pub max_unavailable: Option<MaxUnavailable>,
    /// `--reboot-announcements` and friends (semantics.md §6.10).
    pub reboots: nodegate_core::vocab::config::AnnouncedReboots,
    /// `canary` (semantics.md §6.9); `None`: off.
    pub canary: Option<CanarySettings>,
}

impl GateSettings {
    /// The core's gate configuration, with the command's deadlines and write
    /// policy: the one place a [`Config`] is assembled from settings, so that
    /// a new field is a compile error here and nowhere else.
    pub fn gate_config(&self, timeouts: Timeouts, on_timeout: OnTimeout, dry_run: bool) -> Config {
        Config {
            scope: self.scope.clone(),
            placement: self.placement.clone(),
            startup: self.startup.clone(),
            critical: self.critical.clone(),
            conditions: self.conditions.clone(),
            condition_taints: self.condition_taints.clone(),
            resources: self.resources.clone(),
            dra_drivers: self.dra_drivers.clone(),
            timeout: timeouts.ready,
            schedule_timeout: timeouts.schedule,
            on_timeout,
            dry_run,
            suspend: self.suspend,
            regate: self.regate.clone(),
            max_unavailable: self.max_unavailable,
            node_condition: false,
            reboots: self.reboots.clone(),
            replace: Default::default(),
            canary: self.canary.as_ref().map(|c| c.core.clone()),
        }
    }
}

/// The gate's two deadlines (semantics.md §5.2); `None`: off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// `--timeout`.
    pub ready: Option<Duration>,
    /// `--schedule-timeout`.
    pub schedule: Option<Duration>,
}

/// `nodegate run`: the gate exactly as configured.
impl From<&RunSettings> for Config {
    fn from(s: &RunSettings) -> Config {
        let timeouts = Timeouts {
            ready: s.timeout,
            schedule: s.schedule_timeout,
        };
        Config {
            node_condition: s.given.node_condition,
            replace: s.replace.clone(),
            ..s.gate
                .gate_config(timeouts, s.given.on_timeout, s.given.dry_run)
        }
    }
}

/// `nodegate status`: the gate in dry-run, opening on timeout, whatever the
/// file says about `onTimeout` or `dryRun` (status has neither flag): the
/// table shows what the gate would decide and never asks for a write.
impl From<&StatusSettings> for Config {
    fn from(s: &StatusSettings) -> Config {
        let timeouts = Timeouts {
            ready: s.timeout,
            schedule: None,
        };
        s.gate.gate_config(timeouts, OnTimeout::Open, true)
    }
}

#[derive(Debug, Clone)]
pub struct RunSettings {
    pub gate: GateSettings,
    /// `None`: no deadline.
    pub timeout: Option<Duration>,
    /// `--schedule-timeout`; `None`: off.
    pub schedule_timeout: Option<Duration>,
    /// `--replace-*` (semantics.md §5.8).
    pub replace: nodegate_core::vocab::config::ReplaceConfig,
    /// The longest nodegate waits for the answer to one of its own requests.
    pub kube_request_timeout: Duration,
    pub log_level: String,
    pub leader_election: LeaderElection,
    pub http_addr: SocketAddr,
    /// `None`: no debug listener (`--debug-addr ""`).
    pub debug_addr: Option<SocketAddr>,
    /// `--otlp-endpoint`: the collector's base URL, checked; `None`: the
    /// `OTEL_*` variables decide (`crate::trace::config`).
    pub otlp_endpoint: Option<String>,
    /// The admission webhook (`--webhook-*`); `None`: off.
    pub webhook: Option<WebhookSettings>,
    /// `--admission-params`: the admission policy's parameter ConfigMap
    /// nodegate keeps while it leads; `None`: off.
    pub admission_params: Option<AdmissionParamsRef>,
    /// The late-taint net (`--taint-new-nodes`, `--new-node-window`).
    pub net: NetSettings,
    /// Every `run` setting as given (flag over file over default): a reload
    /// compares these to name the keys that only a restart applies.
    pub given: RunGiven,
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

pub fn load_file(args: &GateArgs) -> Result<FileConfig, ConfigError> {
    let file = args.config.as_deref().map(FileConfig::load).transpose()?;
    Ok(file.unwrap_or_default())
}

pub fn gate_settings(args: &GateArgs, file: &mut FileConfig) -> Result<GateSettings, ConfigError> {
    let given = GateGiven::merge(&args.flags, file);
    let taints = managed_taints(&given.taints)?;
    let first = taints
        .first()
        .ok_or_else(|| invalid("taints", "at least one managed taint is needed"))?;
    let startup = startup::startup_taints(&given.autoscalers, &given.taint_for, first)?;
    let mut managed = startup.managed(&taints);
    let transient = transient_taints(&given.transient_taints, &managed)?;
    let excluded = given
        .excludes
        .iter()
        .map(|e| parse_exclude(e))
        .collect::<Result<BTreeSet<_>, _>>()?;
    let exclude_selector =
        FileSelector::nodes(given.exclude_selector.as_ref(), "--exclude-selector")?;
    let daemonset_namespaces = daemonset_namespaces(&given.daemonset_namespaces)?;
    let critical = members::critical_pods(file.critical_pods.take().unwrap_or_default())?;
    let node_selector = FileSelector::nodes(given.node_selector.as_ref(), "--node-selector")?;

    let regate = regate::regate_settings(&given, &managed)?;
    let reboots = regate::reboot_settings(&given, regate.as_ref())?;
    if let Some(rc) = &regate {
        managed.push(rc.taint.clone());
    }
    let conditions = conditions::critical_conditions(file.critical_conditions.take())?;
    let condition_taints = conditions::condition_taints(file.condition_taints.take(), &managed)?;
    let cap = budget(
        "--max-unavailable",
        &given.max_unavailable,
        "100% to leave only re-gating's and each rule's own budget",
    )?;
    let resources = devices::critical_resources(file.critical_resources.take())?;
    let dra_drivers = devices::dra_drivers(file.dra_drivers.take())?;
    let canary = canary::canary_settings(
        file.canary.take(),
        std::env::var("POD_NAMESPACE").ok().as_deref(),
    )?;

    Ok(GateSettings {
        resources,
        dra_drivers,
        scope: Scope { node_selector },
        startup,
        regate,
        conditions,
        condition_taints,
        max_unavailable: (cap != MaxUnavailable::Percent(100)).then_some(cap),
        reboots,
        canary,
        suspend: file.suspend.unwrap_or(false),
        placement: PlacementConfig {
            managed_taints: managed,
            transient_taints: transient,
            excluded,
            exclude_selector,
            daemonset_namespaces,
        },
        critical,
    })
}

/// `--daemonset-namespaces`: entries may also be comma-separated; each a
/// namespace name (DNS-1123 label). None given is every namespace.
fn daemonset_namespaces(given: &[String]) -> Result<Option<BTreeSet<String>>, ConfigError> {
    let names: BTreeSet<String> = entries(given).map(str::to_string).collect();
    if let Some(bad) = names.iter().find(|n| !is_dns1123_label(n)) {
        return Err(invalid(
            format!("--daemonset-namespaces {bad:?}"),
            "not a namespace name (lower-case letters, digits and '-', at most 63)".to_string(),
        ));
    }
    Ok((!names.is_empty()).then_some(names))
}

/// `--taint`: each valid (that there is one, [`gate_settings`] checks).
fn managed_taints(taints: &[String]) -> Result<Vec<ManagedTaint>, ConfigError> {
    taints.iter().map(|t| parse_managed_taint(t)).collect()
}

/// `--transient-taint`, after the built-in list; never a managed taint.
fn transient_taints(
    given: &[String],
    managed: &[ManagedTaint],
) -> Result<Vec<TransientTaint>, ConfigError> {
    let mut transient = default_transient_taints();
    for t in given {
        let parsed = parse_transient(t)?;
        if managed.iter().any(|m| parsed.matches(&m.key)) {
            return Err(invalid(
                format!("--transient-taint {t:?}"),
                "it matches a managed taint; nodegate's own taint cannot also be transient",
            ));
        }
        transient.push(parsed);
    }
    Ok(transient)
}

pub fn run_settings(args: &RunArgs) -> Result<RunSettings, ConfigError> {
    run_settings_from(args, load_file(&args.gate)?)
}

/// [`run_settings`] over a config file already read and parsed (a reload
/// reads the file once, to compare and to parse the same bytes).
pub fn run_settings_from(args: &RunArgs, mut file: FileConfig) -> Result<RunSettings, ConfigError> {
    let gate = gate_settings(&args.gate, &mut file)?;
    run_part(args, gate, file)
}

/// The `run` group's settings over the gate's: what [`run_settings_from`]
/// checks once the gate settings are in.
fn run_part(
    args: &RunArgs,
    gate: GateSettings,
    mut file: FileConfig,
) -> Result<RunSettings, ConfigError> {
    let given = RunGiven::merge(&args.flags, &mut file);

    // 0 means no deadline.
    let timeout = optional_duration("--timeout", &given.timeout)?;
    // 0 means off; shorter than --timeout when both are set.
    let schedule_timeout = optional_duration("--schedule-timeout", &given.schedule_timeout)?;
    if let Some(d) = schedule_timeout
        && timeout.is_some_and(|t| d >= t)
    {
        return Err(invalid(
            format!("--schedule-timeout {:?}", given.schedule_timeout),
            format!(
                "must be shorter than --timeout {:?}: shorten --schedule-timeout \
                 (scheduleTimeout) or lengthen --timeout (timeout)",
                given.timeout
            ),
        ));
    }
    worker_threads(&given)?;
    let kube_request_timeout = client_settings(&given)?;
    let log_level = log_level(&given.log_level)?;
    let leader_election = leader::leader_election(&given)?;
    let (http_addr, debug_addr) = listeners(&given)?;
    let otlp_endpoint = given.otlp_endpoint.clone().filter(|u| !u.trim().is_empty());
    if let Some(url) = &otlp_endpoint {
        crate::trace::config::check_endpoint("--otlp-endpoint", url)?;
    }
    let webhook = entrances::webhook_settings(&given)?;
    if let Some(w) = &webhook
        && [Some(http_addr), debug_addr]
            .into_iter()
            .flatten()
            .any(|a| a.port() != 0 && a == w.addr)
    {
        return Err(invalid(
            format!("--webhook-addr {:?}", w.addr.to_string()),
            "must differ from --http-addr and --debug-addr",
        ));
    }
    // The rest checked in this order.
    Ok(RunSettings {
        net: NetSettings {
            enabled: given.taint_new_nodes,
            window: positive_duration("--new-node-window", &given.new_node_window)?,
        },
        replace: replace::replace_settings(&given)?,
        admission_params: given
            .admission_params
            .as_deref()
            .map(admission_params_ref)
            .transpose()?,
        webhook,
        leader_election,
        http_addr,
        debug_addr,
        otlp_endpoint,
        gate,
        timeout,
        schedule_timeout,
        kube_request_timeout,
        log_level,
        given,
    })
}

/// `--admission-params [NAMESPACE/]NAME`: where the admission policy's
/// parameters live (the binding's `paramRef`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionParamsRef {
    /// `None`: the Pod's namespace (`$POD_NAMESPACE`, else the client's).
    pub namespace: Option<String>,
    pub name: String,
}

/// Reads `--admission-params`: a ConfigMap name (a DNS-1123 subdomain),
/// optionally after its namespace and a slash.
pub fn admission_params_ref(s: &str) -> Result<AdmissionParamsRef, ConfigError> {
    let bad = |why: &str| invalid(format!("--admission-params {s:?}"), why.to_string());
    let (namespace, name) = match s.trim().split_once('/') {
        Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
        None => (None, s.trim().to_string()),
    };
    if let Some(ns) = &namespace
        && !is_dns1123_label(ns)
    {
        return Err(bad(
            "the namespace must be a DNS-1123 label, e.g. nodegate-system/nodegate-admission",
        ));
    }
    if check_dns_subdomain(&name).is_err() {
        return Err(bad(
            "expected a ConfigMap name (lower-case letters, digits, '-' and '.'), e.g. nodegate-admission",
        ));
    }
    Ok(AdmissionParamsRef { namespace, name })
}

/// The levels `--log-level` takes, alone or after `TARGET=`.
const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// `--log-level`: comma-separated directives, each a level (`warning` is
/// `warn`) or `TARGET=LEVEL`; normalized (aliases resolved, lower case).
/// A bare word that is no level is refused: the tracing filter would read
/// it as a target's name and log nothing else (`--log-level warning` once
/// silenced every line, fatal errors included).
pub fn log_level(s: &str) -> Result<String, ConfigError> {
    let bad = |why: String| invalid(format!("--log-level {s:?}"), why);
    let level = |word: &str| {
        // `warning` is `warn` (no other word becomes a level this way).
        let w = word.trim().to_ascii_lowercase().replace("warning", "warn");
        LEVELS.contains(&w.as_str()).then_some(w)
    };
    let mut out = Vec::new();
    for directive in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let normalized = match directive.rsplit_once('=') {
            Some((target, lvl)) => match level(lvl) {
                Some(l) if !target.trim().is_empty() => format!("{}={l}", target.trim()),
                _ => {
                    return Err(bad(format!(
                        "{directive:?} is not TARGET=LEVEL; LEVEL is one of {}",
                        LEVELS.join(", ")
                    )));
                }
            },
            None => level(directive).ok_or_else(|| {
                let what = if directive == s.trim() {
                    "not a level".to_string()
                } else {
                    format!("{directive:?} is not a level")
                };
                bad(format!(
                    "{what}; use one of {} (warning is warn), or TARGET=LEVEL such as nodegate=debug",
                    LEVELS.join(", ")
                ))
            })?,
        };
        out.push(normalized);
    }
    if out.is_empty() {
        return Err(bad(format!("give a level: one of {}", LEVELS.join(", "))));
    }
    let joined = out.join(",");
    tracing_subscriber::EnvFilter::try_new(&joined).map_err(|e| bad(e.to_string()))?;
    Ok(joined)
}

/// The tracing filter `--log-level` (normalized by [`log_level`]) becomes:
/// the directives given, then two of nodegate's own unless they name the
/// target themselves.
/// - `kube_client::client::builder=off`: kube's client logs every failed
///   request at ERROR itself, and nodegate says the same failure in its own
///   words.
/// - `ractor=warn`: ractor opens an INFO span for each actor's life, one per
///   gate, which held a slot of the subscriber's from the gate's start to
///   its end; a gate's lines are in its own `gate` span.
pub fn log_filter(level: &str) -> String {
    let mut filter = level.to_string();
    if !level.contains("kube") {
        filter.push_str(",kube_client::client::builder=off");
    }
    if !level.contains("ractor") {
        filter.push_str(",ractor=warn");
    }
    filter
}

/// The most `--worker-threads` accepted (0 is one per CPU).
pub const MAX_WORKER_THREADS: usize = 256;

/// The slowest `--kube-qps` accepted.
pub const MIN_KUBE_QPS: f64 = 0.001;

/// `--worker-threads`, checked (the runtime is built from it in main).
fn worker_threads(given: &RunGiven) -> Result<(), ConfigError> {
    if given.worker_threads > MAX_WORKER_THREADS {
        return Err(invalid(
            format!("--worker-threads {}", given.worker_threads),
            format!("must be from 0 (one per CPU nodegate may use) to {MAX_WORKER_THREADS}"),
        ));
    }
    Ok(())
}

/// nodegate's own API client: its write slots and rate, checked; its
/// request timeout.
fn client_settings(given: &RunGiven) -> Result<Duration, ConfigError> {
    if given.max_concurrent_patches == 0 {
        return Err(invalid("--max-concurrent-patches 0", "must be at least 1"));
    }
    let kube_qps = given.kube_qps;
    // Below MIN_KUBE_QPS one request's interval no longer fits a Duration.
    if !(kube_qps.is_finite() && kube_qps >= MIN_KUBE_QPS) {
        return Err(invalid(
            format!("--kube-qps {kube_qps}"),
            format!("must be a number of at least {MIN_KUBE_QPS} (one request per 1000 s)"),
        ));
    }
    if given.kube_burst == 0 {
        return Err(invalid("--kube-burst 0", "must be at least 1"));
    }
    positive_duration("--kube-request-timeout", &given.kube_request_timeout)
}

/// `--http-addr` and `--debug-addr` (empty: no debug listener), apart.
fn listeners(given: &RunGiven) -> Result<(SocketAddr, Option<SocketAddr>), ConfigError> {
    let http_addr = parse_addr("--http-addr", &given.http_addr)?;
    let debug_addr = match given.debug_addr.as_str() {
        s if s.trim().is_empty() => None,
        s => Some(parse_addr("--debug-addr", s)?),
    };
    if let Some(d) = debug_addr
        && d.port() != 0
        && d == http_addr
    {
        return Err(invalid(
            format!("--debug-addr {:?}", d.to_string()),
            "must differ from --http-addr",
        ));
    }
    Ok((http_addr, debug_addr))
}

fn positive_duration(flag: &str, s: &str) -> Result<Duration, ConfigError> {
    let d = parse_duration(flag, s)?;
    if d.is_zero() {
        return Err(invalid(format!("{flag} {s:?}"), "must be more than 0"));
    }
    Ok(d)
}

pub fn status_settings(args: &StatusArgs) -> Result<StatusSettings, ConfigError> {
    let mut file = load_file(&args.gate)?;
    let gate = gate_settings(&args.gate, &mut file)?;
    let timeout = args.timeout.clone().or(file.timeout.take());
    let timeout = timeout.unwrap_or_else(|| RunGiven::defaults().timeout);
    let timeout = optional_duration("--timeout", &timeout)?;
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

mod canary;
pub use canary::{CanaryPod, CanarySettings, RawCanary};
mod conditions;
pub use conditions::RawRule;
mod devices;
mod error;
pub use devices::{RawCriticalResource, RawDraDriver};
pub mod check;
pub mod load;
mod members;
pub use members::{FileSelector, RawCriticalCondition, RawCriticalPod};
mod entrances;
pub use entrances::{NetSettings, WebhookCerts, WebhookSettings};
mod leader;
mod regate;
mod replace;
mod startup;
pub use startup::{TaintFor, TaintForRule};
mod values;
use values::{budget, check_dns_label, check_dns_subdomain, optional_duration, parse_addr};
pub use values::{entries, parse_duration, parse_exclude, parse_managed_taint, parse_transient};

#[cfg(test)]
mod tests;
