//! Command-line interface: subcommands and their flags, nothing else.
//!
//! Parsing here is syntactic; `config` turns these raw values (merged with an
//! optional config file) into validated settings and names any bad value.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Keeps new Kubernetes nodes closed (tainted) until every DaemonSet that
/// belongs on them is Ready, then opens them.
#[derive(Debug, Parser)]
#[command(name = "nodegate", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller: hold nodes that carry a managed taint until their
    /// DaemonSets are Ready, then remove the taint.
    Run(Box<RunArgs>),
    /// Show, for one node, which DaemonSets must be Ready there and why, what
    /// each is waiting for, and whether the gate would open now.
    Explain(ExplainArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    /// Remove the taint anyway and record a Warning naming what was not Ready.
    Open,
    /// Keep the taint, record the Warning and annotate the node
    /// nodegate.dev/timed-out.
    Keep,
}

/// Settings shared by the commands that reason about placement.
#[derive(Debug, Clone, Default, Args)]
pub struct GateArgs {
    /// A managed startup taint, KEY[:EFFECT] (EFFECT defaults to NoSchedule).
    /// Repeatable. Default: nodegate.dev/initializing:NoSchedule.
    #[arg(long = "taint", value_name = "KEY[:EFFECT]")]
    pub taints: Vec<String>,

    /// A taint some other agent lifts during start-up, ignored when deciding
    /// which DaemonSets belong on a node: an exact key, or a key prefix ending
    /// in '*'. Repeatable; adds to the built-in list.
    #[arg(long = "transient-taint", value_name = "KEY|PREFIX*")]
    pub transient_taints: Vec<String>,

    /// Never wait for this DaemonSet. Repeatable.
    #[arg(long = "exclude", value_name = "NAMESPACE/NAME")]
    pub excludes: Vec<String>,

    /// Never wait for DaemonSets whose labels match this label selector
    /// (kubectl syntax, e.g. 'team=observability,tier notin (debug)').
    #[arg(long, value_name = "SELECTOR")]
    pub exclude_selector: Option<String>,

    /// YAML file with the same settings (camelCase keys) plus criticalPods.
    /// A flag given on the command line overrides the file's value.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub gate: GateArgs,

    /// How long a node may stay closed, counted from its creation (or from
    /// nodegate.dev/gated-since); 0 means no deadline. Default: 120s.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,

    /// What to do when the deadline passes. Default: open.
    #[arg(long, value_enum, value_name = "ACTION")]
    pub on_timeout: Option<OnTimeout>,

    /// Decide and record everything, write nothing to nodes.
    #[arg(long)]
    pub dry_run: bool,

    /// Most untaint patches in flight at once. Default: 16.
    #[arg(long, value_name = "N")]
    pub max_concurrent_patches: Option<usize>,

    /// Steady rate of nodegate's own API requests (patches, events, reads),
    /// per second. Default: 50.
    #[arg(long, value_name = "QPS")]
    pub kube_qps: Option<f64>,

    /// Burst above --kube-qps. Default: 100.
    #[arg(long, value_name = "N")]
    pub kube_burst: Option<u32>,

    /// Log format. Default: text.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Log filter, a tracing directive such as 'info' or 'nodegate=debug'.
    /// Default: info.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The node to explain.
    pub node: String,

    #[command(flatten)]
    pub gate: GateArgs,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}
