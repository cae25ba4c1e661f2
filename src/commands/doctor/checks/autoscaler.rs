//! cluster-autoscaler: does it treat nodegate's taints as startup taints,
//! and does nodegate's deadline end before the autoscaler gives up on a
//! starting node? By its documented rules, a taint is a startup taint when
//! its key is named by `--startup-taint` (or the older `--ignore-taint`),
//! starts with a `--startup-taint-prefix` (1.36 and later), or starts with
//! `startup-taint.cluster-autoscaler.kubernetes.io/` or
//! `ignore-taint.cluster-autoscaler.kubernetes.io/`. Any other taint on a
//! new node makes it ready-but-full: the autoscaler scales up again. A node
//! still unready after `--max-node-startup-time` (15m by default) counts as
//! unready, which can halt the autoscaler.

use std::time::Duration;

use humantime::format_duration as human;
use k8s_openapi::api::apps::v1::Deployment;
use nodegate_core::rules::placement::ManagedTaint;

use crate::commands::doctor::report::{Check, Name};
use crate::commands::output::joined;
use crate::settings::config::RunSettings;

pub const CHECK: Name = Name("cluster-autoscaler");

/// The key prefixes the autoscaler always treats as startup taints.
pub const STARTUP_PREFIXES: [&str; 2] = [
    "startup-taint.cluster-autoscaler.kubernetes.io/",
    "ignore-taint.cluster-autoscaler.kubernetes.io/",
];

/// The autoscaler's `--max-node-startup-time` when not given.
pub const DEFAULT_MAX_NODE_STARTUP: Duration = Duration::from_secs(15 * 60);

/// A Deployment running cluster-autoscaler, as the doctor reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Autoscaler {
    pub namespace: String,
    pub name: String,
    pub replicas: Option<i32>,
    /// The autoscaler container's command and args, split into words.
    pub words: Vec<String>,
}

impl Autoscaler {
    /// `Some` when one of these words (a container's command and args) runs
    /// the `cluster-autoscaler` program, with every word split at spaces
    /// (`sh -c "./cluster-autoscaler --x"`).
    pub fn from_container(
        namespace: &str,
        name: &str,
        replicas: Option<i32>,
        command_and_args: &[String],
    ) -> Option<Autoscaler> {
        let words = command_and_args.iter().flat_map(|w| w.split_whitespace());
        let words: Vec<String> = words.map(str::to_string).collect();
        let runs = words
            .iter()
            .any(|w| !w.starts_with('-') && w.rsplit('/').next() == Some("cluster-autoscaler"));
        runs.then(|| Autoscaler {
            namespace: namespace.to_string(),
            name: name.to_string(),
            replicas,
            words,
        })
    }

    fn subject(&self) -> String {
        format!("Deployment {}/{}", self.namespace, self.name)
    }
}

/// The Deployments among these whose container runs cluster-autoscaler.
pub fn found(deployments: &[Deployment]) -> Vec<Autoscaler> {
    deployments
        .iter()
        .filter_map(|d| {
            let ns = d.metadata.namespace.as_deref().unwrap_or_default();
            let name = d.metadata.name.as_deref().unwrap_or_default();
            let spec = d.spec.as_ref()?;
            let pod = spec.template.spec.as_ref()?;
            pod.containers.iter().find_map(|c| {
                let words = crate::commands::doctor::source::command_line(c);
                Autoscaler::from_container(ns, name, spec.replicas, &words)
            })
        })
        .collect()
}

/// The flags of the autoscaler's that the doctor reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--startup-taint` and `--ignore-taint` values: taint keys.
    pub startup_taints: Vec<String>,
    /// `--startup-taint-prefix` values.
    pub prefixes: Vec<String>,
    /// `--max-node-startup-time`, as written.
    pub max_node_startup_time: Option<String>,
}

/// The flags, read as the autoscaler reads them (`--flag=value` or `--flag
/// value`; one leading dash also taken); each value once per flag given.
pub fn flags(words: &[String]) -> Flags {
    let mut f = Flags::default();
    let mut words = words.iter().peekable();
    while let Some(w) = words.next() {
        let Some(flag) = w.strip_prefix("--").or_else(|| w.strip_prefix('-')) else {
            continue;
        };
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        if !matches!(
            name,
            "startup-taint" | "ignore-taint" | "startup-taint-prefix" | "max-node-startup-time"
        ) {
            continue;
        }
        let Some(value) = value.or_else(|| words.next_if(|w| !w.starts_with('-')).cloned()) else {
            continue;
        };
        match name {
            "startup-taint-prefix" => f.prefixes.push(value),
            "max-node-startup-time" => f.max_node_startup_time = Some(value),
            _ => f.startup_taints.push(value),
        }
    }
    f
}

impl Flags {
    /// Whether the autoscaler treats a taint with this key as a startup
    /// taint.
    pub fn covers(&self, key: &str) -> bool {
        self.startup_taints.iter().any(|k| k == key)
            || self.prefixes.iter().any(|p| key.starts_with(p.as_str()))
            || STARTUP_PREFIXES.iter().any(|p| key.starts_with(p))
    }
}

/// Every autoscaler found, against `taints` (what nodegate may add to the
/// nodes it sees) and nodegate's deadlines.
pub fn check(s: &RunSettings, taints: &[ManagedTaint], found: &[Autoscaler]) -> Vec<Check> {
    if found.is_empty() {
        return vec![CHECK.skipped(
            "Deployments",
            "no Deployment runs cluster-autoscaler (in the namespaces these credentials can list)",
        )];
    }
    found
        .iter()
        .flat_map(|a| {
            let f = flags(&a.words);
            let mut startup = startup_taints(a, &f, taints);
            if a.replicas == Some(0) {
                let note = "replicas 0: not running now; judged by the flags it would run with";
                startup = startup.with_note(note);
            }
            [startup, deadline(s, a, &f)]
        })
        .collect()
}

/// Whether every taint nodegate adds is a startup taint to this autoscaler.
pub fn startup_taints(a: &Autoscaler, f: &Flags, taints: &[ManagedTaint]) -> Check {
    let subject = a.subject();
    let missing: Vec<&ManagedTaint> = taints.iter().filter(|t| !f.covers(&t.key)).collect();
    let Some(first) = missing.first() else {
        let keys = joined(taints.iter().map(|t| &t.key), ", ");
        return match keys.is_empty() {
            true => CHECK.ok(subject, "nodegate adds no taint to these nodes"),
            false => CHECK.ok(
                subject,
                format!("treats {keys} as a startup taint: gated nodes count as starting"),
            ),
        };
    };
    let keys = joined(missing.iter().map(|t| &t.key), ", ");
    let flags = joined(
        missing.iter().map(|t| format!("--startup-taint={}", t.key)),
        " ",
    );
    let mut listed = f.startup_taints.iter();
    let with_effect = listed.find(|k| k.split_once(':').is_some_and(|(key, _)| key == first.key));
    let mut fix = format!("add {flags} to its container args");
    if let Some(bad) = with_effect {
        fix.push_str(&format!(
            " (--startup-taint takes a key: {bad:?} names a key that no taint has)"
        ));
    }
    fix.push_str(&format!(
        "; or have nodegate add a key under {} (e.g. --taint={}nodegate:NoSchedule)",
        STARTUP_PREFIXES[0], STARTUP_PREFIXES[0]
    ));
    CHECK.problem(
        subject,
        format!(
            "does not treat {keys} as a startup taint: it counts gated nodes as ready but full, \
             scales up again while they are gated, and may take a gated node as its node group's \
             template"
        ),
        fix,
    )
}

/// Whether nodegate's deadlines end before `--max-node-startup-time`.
pub fn deadline(s: &RunSettings, a: &Autoscaler, f: &Flags) -> Check {
    let subject = format!("{} --max-node-startup-time", a.subject());
    let max = match &f.max_node_startup_time {
        None => DEFAULT_MAX_NODE_STARTUP,
        Some(v) => match humantime::parse_duration(v) {
            Ok(d) => d,
            Err(e) => {
                return CHECK.skipped(
                    subject,
                    format!("cannot read --max-node-startup-time={v}: {e}; deadline not checked"),
                );
            }
        },
    };
    let shown = human(max).to_string();
    let mut late = Vec::new();
    match s.timeout {
        None => late.push("--timeout is 0 (no deadline)".to_string()),
        Some(t) if t >= max => late.push(format!("--timeout {} is not below it", human(t))),
        Some(_) => {}
    }
    if let Some(t) = s.gate.regate.as_ref().and_then(|r| r.timeout)
        && t >= max
    {
        late.push(format!("--regate-timeout {} is not below it", human(t)));
    }
    if late.is_empty() {
        let ours = s.timeout.map(|t| human(t).to_string()).unwrap_or_default();
        return CHECK.ok(
            subject,
            format!("is {shown}: nodegate's deadline (--timeout {ours}) ends before it"),
        );
    }
    CHECK.problem(
        subject,
        format!(
            "is {shown}, and nodegate's {}: a node still gated then counts as unready, which \
             can halt the autoscaler",
            late.join(", ")
        ),
        format!(
            "set nodegate's --timeout (and --regate-timeout) below {shown}, or raise the \
             autoscaler's --max-node-startup-time above nodegate's deadline"
        ),
    )
}
