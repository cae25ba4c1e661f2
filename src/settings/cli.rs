//! Command-line interface: subcommands and their flags, nothing else.
//!
//! Parsing here is syntactic; `config` turns these raw values (merged with an
//! optional config file) into validated settings and names any bad value.

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use nodegate_core::gate::OnTimeout;

pub use super::table::{GateFlags, RunFlags};

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
    /// Put the startup taint on existing nodes that never had it and have no
    /// workload yet (once, at install), and print what was done to each.
    Backfill(BackfillArgs),
    /// Show every gated node as the cluster has it now: age, how many of its
    /// expected members are Ready, what blocks it and the time to its
    /// deadline.
    Status(StatusArgs),
    /// Print a completion script for a shell on stdout (e.g. `nodegate
    /// completion bash > /etc/bash_completion.d/nodegate`).
    Completion(CompletionArgs),
}

/// `--on-timeout`: the core's [`OnTimeout`], each value with what it does.
pub fn on_timeout_parser() -> impl TypedValueParser<Value = OnTimeout> {
    let help = |o: OnTimeout| match o {
        OnTimeout::Open => "Remove the taint anyway and record a Warning naming what was not Ready",
        OnTimeout::Keep => {
            "Keep the taint, record the Warning and annotate the node nodegate.dev/timed-out"
        }
    };
    PossibleValuesParser::new(OnTimeout::ALL.map(|o| PossibleValue::new(o.as_str()).help(help(o))))
        .try_map(|s| s.parse::<OnTimeout>())
}

/// Settings shared by the commands that reason about placement: the `gate`
/// group of the settings table, and the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct GateArgs {
    #[command(flatten)]
    pub flags: GateFlags,

    /// YAML file with the same settings (camelCase keys) plus criticalPods.
    /// A flag given on the command line overrides the file's value.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `nodegate run`: the shared settings and the `run` group of the settings
/// table.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub flags: RunFlags,
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

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub gate: GateArgs,

    /// The deadline nodegate runs with (as for `nodegate run`), to show the
    /// time left.
    #[arg(long, value_name = "DURATION", help = status_timeout_help())]
    pub timeout: Option<String>,

    /// Keep the table on screen and refresh it in place.
    #[arg(short = 'w', long)]
    pub watch: bool,

    /// Time between refreshes with --watch.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub interval: String,
}

/// `status --timeout`'s help: `run --timeout`'s default.
fn status_timeout_help() -> String {
    let default = super::table::RunGiven::defaults().timeout;
    super::define::help(
        &["The deadline nodegate runs with (as for `nodegate run`), to show the time left."],
        Some(&default),
    )
}

#[derive(Debug, Clone, Args)]
pub struct BackfillArgs {
    #[command(flatten)]
    pub gate: GateArgs,

    /// Only nodes matching this label selector (kubectl syntax), within
    /// --node-selector.
    #[arg(long, value_name = "SELECTOR")]
    pub selector: Option<String>,

    /// Report what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: CompletionShell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}
