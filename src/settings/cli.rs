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

    /// The nodes nodegate manages at all, a label selector (kubectl syntax):
    /// nodes outside it are never gated or tainted. Default: every node.
    #[arg(long, value_name = "SELECTOR")]
    pub node_selector: Option<String>,

    /// Re-gate an open node when a DaemonSet that belongs on it has had no
    /// Ready pod for this long (the grace a rolling update needs); 0 turns
    /// re-gating off. Default: 0.
    #[arg(long, value_name = "DURATION")]
    pub regate_after: Option<String>,

    /// The taint a re-gated node gets, KEY[:EFFECT]; never a startup taint.
    /// Default: nodegate.dev/degraded:NoSchedule.
    #[arg(long, value_name = "KEY[:EFFECT]")]
    pub regate_taint: Option<String>,

    /// A re-gated node's deadline, counted from its re-gating; 0 keeps it
    /// closed until its DaemonSets are Ready. Default: 0.
    #[arg(long, value_name = "DURATION")]
    pub regate_timeout: Option<String>,

    /// Most managed nodes that may carry the re-gate taint at once, a count
    /// or a percentage (rounded down, at least 1). Default: 10%.
    #[arg(long, value_name = "N|P%")]
    pub regate_max_unavailable: Option<String>,

    /// Also re-gate an open node at once when its boot id
    /// (status.nodeInfo.bootID) changes: it rebooted.
    #[arg(long)]
    pub regate_on_reboot: bool,

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

    /// How long one of nodegate's own API requests (patch, re-read, Event)
    /// may go unanswered before it is given up; a write given up may have
    /// been applied. Default: 10s.
    #[arg(long, value_name = "DURATION")]
    pub kube_request_timeout: Option<String>,

    /// Log format. Default: text.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Log filter, a tracing directive such as 'info' or 'nodegate=debug'.
    /// Default: info.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,

    /// Run as one of several replicas: only the holder of a
    /// coordination.k8s.io Lease writes; the others keep their watches and
    /// gates warm to take over.
    #[arg(long)]
    pub leader_elect: bool,

    /// Name of the leader-election Lease. Default: nodegate.
    #[arg(long, value_name = "NAME")]
    pub lease_name: Option<String>,

    /// Namespace of the leader-election Lease. Default: $POD_NAMESPACE, else
    /// the kubeconfig's namespace, else 'default'.
    #[arg(long, value_name = "NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// How long a follower waits, after last seeing the lease renewed, before
    /// taking it over; whole seconds. Default: 15s.
    #[arg(long, value_name = "DURATION")]
    pub lease_duration: Option<String>,

    /// How long the leader keeps writing without a successful renewal; must
    /// be shorter than --lease-duration. Default: 10s.
    #[arg(long, value_name = "DURATION")]
    pub renew_deadline: Option<String>,

    /// How often the leader renews and a follower tries to acquire; must be
    /// shorter than --renew-deadline. Default: 2s.
    #[arg(long, value_name = "DURATION")]
    pub retry_period: Option<String>,

    /// Address of the HTTP server (/healthz, /readyz, /metrics); port 0
    /// picks a free port. Default: 0.0.0.0:8080.
    #[arg(long, value_name = "HOST:PORT")]
    pub http_addr: Option<String>,

    /// Address of the debug listener (/debug/nodes, /debug/nodes/NAME: node
    /// labels, taints, pod names), kept apart from --http-addr; empty turns
    /// it off. Default: 127.0.0.1:8081.
    #[arg(long, value_name = "HOST:PORT")]
    pub debug_addr: Option<String>,

    /// How many recently finished gates /debug/nodes/NAME still shows.
    /// Default: 100.
    #[arg(long, value_name = "N")]
    pub debug_history: Option<usize>,

    /// Send each gate as an OpenTelemetry trace to this OTLP/HTTP collector,
    /// a base URL (spans go to URL/v1/traces), e.g.
    /// http://otel-collector:4318. Default: off, unless
    /// OTEL_EXPORTER_OTLP_ENDPOINT is set.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// Serve the mutating admission webhook that adds the startup taint at
    /// Node CREATE, over HTTPS on this address (path /mutate-node). Every
    /// replica serves it, followers too. Default: off.
    #[arg(long, value_name = "HOST:PORT")]
    pub webhook_addr: Option<String>,

    /// The webhook's serving certificate from a directory holding tls.crt
    /// and tls.key (e.g. a cert-manager Secret mounted there), re-read when
    /// the files change.
    #[arg(long, value_name = "DIR")]
    pub webhook_cert_dir: Option<String>,

    /// Let nodegate manage the webhook's certificate: a CA and a serving
    /// certificate kept in this Secret (created if absent, shared by every
    /// replica, rotated before it expires). Needs --webhook-configuration and
    /// --webhook-host.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub webhook_cert_secret: Option<String>,

    /// The MutatingWebhookConfiguration whose webhooks' caBundle nodegate
    /// keeps set to its CA (with --webhook-cert-secret).
    #[arg(long, value_name = "NAME")]
    pub webhook_configuration: Option<String>,

    /// A DNS name or IP address the serving certificate is valid for (with
    /// --webhook-cert-secret), e.g. the Service's
    /// nodegate-webhook.nodegate.svc. Repeatable.
    #[arg(long = "webhook-host", value_name = "HOST")]
    pub webhook_hosts: Vec<String>,

    /// How long a certificate nodegate issues is valid (with
    /// --webhook-cert-secret); it is renewed when a third of that remains.
    /// Default: 365d.
    #[arg(long, value_name = "DURATION")]
    pub webhook_cert_validity: Option<String>,

    /// The late-taint net: put the startup taint on a new node seen without
    /// one (created less than --new-node-window ago, no workload pod bound
    /// to it yet), for the nodes the webhook missed.
    #[arg(long)]
    pub taint_new_nodes: bool,

    /// How new a node must be for --taint-new-nodes to taint it, counted
    /// from its creation. Default: 2m.
    #[arg(long, value_name = "DURATION")]
    pub new_node_window: Option<String>,
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
    /// time left. Default: 120s.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,

    /// Keep the table on screen and refresh it in place.
    #[arg(short = 'w', long)]
    pub watch: bool,

    /// Time between refreshes with --watch.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub interval: String,
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
