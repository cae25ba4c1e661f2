//! Settings: the command line merged over an optional YAML file, validated
//! before anything touches the cluster.
//!
//! Every error names the bad value and where it came from, and the process
//! exits with status 2 on any of them. Nothing here talks to the cluster.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use nodegate_actors::placement::{
    ManagedTaint, PlacementConfig, TransientTaint, default_transient_taints,
};
use nodegate_actors::readiness::CriticalPodEntry;
use nodegate_actors::selector::{LabelSelector, check_label_key};
use serde::Deserialize;

use crate::cli::{GateArgs, LogFormat, OnTimeout, RunArgs};

pub const DEFAULT_TAINT: &str = "nodegate.dev/initializing:NoSchedule";
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
pub const DEFAULT_MAX_CONCURRENT_PATCHES: usize = 16;
pub const DEFAULT_KUBE_QPS: f64 = 50.0;
pub const DEFAULT_KUBE_BURST: u32 = 100;

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
    pub critical_pods: Option<Vec<CriticalPodEntry>>,
    pub timeout: Option<String>,
    pub on_timeout: Option<OnTimeout>,
    pub dry_run: Option<bool>,
    pub max_concurrent_patches: Option<usize>,
    pub kube_qps: Option<f64>,
    pub kube_burst: Option<u32>,
    pub log_format: Option<LogFormat>,
    pub log_level: Option<String>,
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

/// What placement needs, shared by `run` and `explain`.
#[derive(Debug, Clone)]
pub struct GateSettings {
    pub placement: PlacementConfig,
    pub critical: Vec<CriticalPodEntry>,
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
    pub log_format: LogFormat,
    pub log_level: String,
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
        if c.namespace.is_empty() {
            return Err(invalid(at, "needs a namespace"));
        }
        if c.selector.is_empty() {
            return Err(invalid(
                at,
                "needs a non-empty selector (an empty one would match every pod)",
            ));
        }
        c.selector
            .validate()
            .map_err(|e| invalid(format!("{at}.selector"), e.to_string()))?;
        if let Some(ns) = &c.node_selector {
            ns.validate()
                .map_err(|e| invalid(format!("{at}.nodeSelector"), e.to_string()))?;
        }
    }

    Ok(GateSettings {
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
    let mut file = load_file(&args.gate)?;
    let gate = gate_settings(&args.gate, &mut file)?;

    let timeout = match pick(args.timeout.clone(), file.timeout.take()) {
        None => Some(DEFAULT_TIMEOUT),
        Some(s) => {
            let d = parse_duration("--timeout", &s)?;
            if d.is_zero() { None } else { Some(d) }
        }
    };
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
    let log_level =
        pick(args.log_level.clone(), file.log_level.take()).unwrap_or_else(|| "info".into());
    tracing_subscriber::EnvFilter::try_new(&log_level)
        .map_err(|e| invalid(format!("--log-level {log_level:?}"), e.to_string()))?;

    Ok(RunSettings {
        gate,
        timeout,
        on_timeout: pick(args.on_timeout, file.on_timeout).unwrap_or(OnTimeout::Open),
        dry_run: args.dry_run || file.dry_run.unwrap_or(false),
        max_concurrent_patches,
        kube_qps,
        kube_burst,
        log_format: pick(args.log_format, file.log_format).unwrap_or(LogFormat::Text),
        log_level,
    })
}

const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

pub fn parse_managed_taint(s: &str) -> Result<ManagedTaint, ConfigError> {
    let at = || format!("--taint {s:?}");
    let (key, effect) = match s.rsplit_once(':') {
        Some((k, e)) => (k, e),
        None => (s, "NoSchedule"),
    };
    if key.contains('=') {
        return Err(invalid(
            at(),
            "a managed taint is matched by key and effect; drop the '=VALUE'",
        ));
    }
    check_label_key(key).map_err(|m| invalid(at(), m))?;
    if !EFFECTS.contains(&effect) {
        return Err(invalid(
            at(),
            format!("unknown effect {effect:?}; use NoSchedule, PreferNoSchedule or NoExecute"),
        ));
    }
    Ok(ManagedTaint {
        key: key.to_string(),
        effect: effect.to_string(),
    })
}

pub fn parse_transient(s: &str) -> Result<TransientTaint, ConfigError> {
    let at = || format!("--transient-taint {s:?}");
    let key = s.strip_suffix('*').unwrap_or(s);
    if key.is_empty() {
        return Err(invalid(at(), "needs a key or a key prefix"));
    }
    if key.contains('*') {
        return Err(invalid(
            at(),
            "'*' is only allowed at the end, to mark a prefix",
        ));
    }
    if !s.ends_with('*') {
        check_label_key(key).map_err(|m| invalid(at(), m))?;
    }
    Ok(TransientTaint::parse(s))
}

pub fn parse_exclude(s: &str) -> Result<(String, String), ConfigError> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(invalid(
            format!("--exclude {s:?}"),
            "expected NAMESPACE/NAME, e.g. kube-system/cilium",
        )),
    }
}

pub fn parse_duration(flag: &str, s: &str) -> Result<Duration, ConfigError> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(invalid(
            format!("{flag} {s:?}"),
            "a duration cannot be negative",
        ));
    }
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(t).map_err(|e| {
        invalid(
            format!("{flag} {s:?}"),
            format!("not a duration ({e}); use e.g. 90s, 2m, 1h30m"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["nodegate", "run"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv)
            .expect("flags parse")
            .command
        {
            crate::cli::Command::Run(r) => *r,
            other => panic!("not run: {other:?}"),
        }
    }

    fn err_of(extra: &[&str]) -> String {
        run_settings(&run_args(extra))
            .expect_err("must be rejected")
            .to_string()
    }

    #[test]
    fn defaults_match_the_documentation() {
        let s = run_settings(&run_args(&[])).unwrap();
        assert_eq!(s.timeout, Some(Duration::from_secs(120)));
        assert_eq!(s.on_timeout, OnTimeout::Open);
        assert!(!s.dry_run);
        assert_eq!(s.gate.placement.managed_taints.len(), 1);
        assert_eq!(
            s.gate.placement.managed_taints[0].key,
            "nodegate.dev/initializing"
        );
        assert_eq!(s.gate.placement.managed_taints[0].effect, "NoSchedule");
        assert_eq!(s.max_concurrent_patches, DEFAULT_MAX_CONCURRENT_PATCHES);
    }

    #[test]
    fn zero_timeout_means_no_deadline() {
        assert_eq!(
            run_settings(&run_args(&["--timeout", "0"]))
                .unwrap()
                .timeout,
            None
        );
        assert_eq!(
            run_settings(&run_args(&["--timeout", "0s"]))
                .unwrap()
                .timeout,
            None
        );
    }

    #[test]
    fn bad_values_are_named_in_the_error() {
        let cases: &[(&[&str], &str)] = &[
            (&["--timeout", "-5s"], "-5s"),
            (&["--timeout", "soon"], "soon"),
            (&["--taint", "x:Sometimes"], "Sometimes"),
            (&["--taint", "bad key:NoSchedule"], "bad key"),
            (&["--taint", "k=v:NoSchedule"], "k=v:NoSchedule"),
            (&["--exclude", "just-a-name"], "just-a-name"),
            (&["--transient-taint", "a*b"], "a*b"),
            (&["--transient-taint", "nodegate.dev/*"], "nodegate.dev/*"),
            (
                &["--max-concurrent-patches", "0"],
                "--max-concurrent-patches",
            ),
            (&["--kube-qps", "-1"], "--kube-qps"),
        ];
        for (flags, needle) in cases {
            let e = err_of(flags);
            assert!(
                e.contains(needle),
                "error for {flags:?} should name {needle:?}: {e}"
            );
        }
    }

    #[test]
    fn flags_override_the_file_and_unknown_keys_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "timeout: 30s\nonTimeout: keep\nexclude: [kube-system/a]\ncriticalPods:\n- name: proxy\n  namespace: kube-system\n  selector:\n    matchLabels: {k8s-app: kube-proxy}\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let s = run_settings(&run_args(&["--config", p, "--timeout", "45s"])).unwrap();
        assert_eq!(s.timeout, Some(Duration::from_secs(45)));
        assert_eq!(s.on_timeout, OnTimeout::Keep);
        assert!(
            s.gate
                .placement
                .excluded
                .contains(&("kube-system".to_string(), "a".to_string()))
        );
        assert_eq!(s.gate.critical.len(), 1);

        std::fs::write(&path, "timeotu: 30s\n").unwrap();
        let e = err_of(&["--config", p]);
        assert!(e.contains("timeotu"), "{e}");
    }

    #[test]
    fn critical_pod_entries_need_a_selector() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "criticalPods:\n- name: x\n  namespace: kube-system\n  selector: {}\n",
        )
        .unwrap();
        let e = err_of(&["--config", path.to_str().unwrap()]);
        assert!(e.contains("criticalPods[0] (x)"), "{e}");
    }
}
