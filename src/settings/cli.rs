//! Command-line interface: subcommands and their flags, parsed syntactically
//! only; `config` validates them, merged with the config file.

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use nodegate_core::vocab::config::OnTimeout;

pub use super::table::{GateFlags, RunFlags};

/// Keeps new Kubernetes nodes closed (tainted) until every DaemonSet that
/// belongs on them is Ready, then opens them.
#[derive(Debug, Parser)]
#[command(name = "nodegate", version = crate::LONG_VERSION, about, long_about = None)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// Where to reach the cluster, given before the subcommand (`nodegate
    /// --context prod status`) or after it, as kubectl takes them. A
    /// subcommand's own `--kubeconfig`/`--context`/`--request-timeout` win
    /// over these.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// The exit statuses every command shares, for `--help` (`crate::error`'s EXIT_*).
pub const EXIT_CODES_HELP: &str = "\
Exit status:
  0  done
  1  could not do it: the cluster unreachable, a read or a write failed,
     the output could not be written
  2  bad usage: a bad flag, value or config file (found before anything is
     sent to the cluster)
  3  checked and found problems (doctor, config check --cluster)";

const RUN_EXIT: &str = "\
Exit status:
  0  stopped by SIGTERM or Ctrl-C after a clean shutdown
  1  could not do it: no credentials, the API server not answering within
     30 s of start, the HTTP port taken, an actor that would not start
  2  bad usage: a bad flag, value or config file (found before anything is
     sent to the cluster)
  3  (doctor and config check --cluster only: checked, found problems)";

const EXPLAIN_EXIT: &str = "\
Exit status:
  0  the report was printed (whether or not the gate would open)
  1  could not do it: the node does not exist, the cluster could not be
     read
  2  bad usage: a bad flag, value or config file (found before anything is
     sent to the cluster)
  3  (doctor and config check --cluster only: checked, found problems)";

const BACKFILL_EXIT: &str = "\
Exit status:
  0  every node was tainted, would be (--dry-run) or was skipped
  1  could not do it: a node could not be tainted (its line says why), or
     the cluster could not be read
  2  bad usage: a bad flag, value or config file (found before anything is
     sent to the cluster)
  3  (doctor and config check --cluster only: checked, found problems)";

const UNINSTALL_EXIT: &str = "\
Exit status:
  0  every node is clean (or would be, with --dry-run)
  1  could not do it: refused because a replica holds the Lease, a node
     could not be changed (its line says why), or the cluster could not be
     read
  2  bad usage: a bad flag, value or config file, or neither --dry-run nor
     --yes (found before anything is sent to the cluster)
  3  (doctor and config check --cluster only: checked, found problems)";

const COMPLETION_EXIT: &str = "\
Exit status:
  0  the script was printed
  1  could not do it: stdout could not be written
  2  bad usage: an unknown shell
  3  (doctor and config check --cluster only: checked, found problems)";

/// Headings of `--help`: each command's own flags come first (clap's
/// "Options"), then these.
pub const OUTPUT: &str = "Output";
/// The `--help` heading of `--from-cluster` and where it looks.
pub const INSTALLED: &str = "The installed nodegate";
pub const CLUSTER: &str = "Cluster";
pub const CONFIG_FILE: &str = "Gate settings: the config file";

/// Where to reach the cluster, with kubectl's flags and meanings. Without
/// them: the in-cluster service account, else `KUBECONFIG` / `~/.kube/config`
/// and its current context.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file to use (instead of KUBECONFIG or
    /// ~/.kube/config).
    #[arg(long, value_name = "FILE", help_heading = CLUSTER)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (instead of its current-context).
    #[arg(long, value_name = "NAME", help_heading = CLUSTER)]
    pub context: Option<String>,

    /// How long to wait for each request to the API server before giving up
    /// (`10s`, `1m`; a bare number is seconds; 0 waits as long as it takes).
    #[arg(long, value_name = "DURATION", help_heading = CLUSTER)]
    pub request_timeout: Option<String>,
}

impl ClusterArgs {
    /// These flags, each one given here winning over `outer`'s.
    pub fn or(&self, outer: &ClusterArgs) -> ClusterArgs {
        ClusterArgs {
            kubeconfig: self.kubeconfig.clone().or_else(|| outer.kubeconfig.clone()),
            context: self.context.clone().or_else(|| outer.context.clone()),
            request_timeout: self
                .request_timeout
                .clone()
                .or_else(|| outer.request_timeout.clone()),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller: hold nodes that carry a managed taint until their
    /// DaemonSets are Ready, then remove the taint.
    #[command(after_help = RUN_EXIT)]
    Run(Box<RunArgs>),
    /// Show, for one node, which DaemonSets must be Ready there and why, what
    /// each is waiting for, and whether the gate would open now.
    #[command(after_help = EXPLAIN_EXIT)]
    Explain(ExplainArgs),
    /// Put the startup taint on existing nodes that never had it and have no
    /// workload yet (once, at install), and print what was done to each.
    #[command(after_help = BACKFILL_EXIT)]
    Backfill(BackfillArgs),
    /// Show every gated node as the cluster has it now: age, how many of its
    /// expected members are Ready, what blocks it and the time to its
    /// deadline.
    #[command(after_help = EXIT_CODES_HELP)]
    Status(StatusArgs),
    /// Remove nodegate's taints and nodegate.dev/ annotations from the nodes
    /// it manages, before or after removing nodegate itself; keeps every
    /// other taint.
    #[command(after_help = UNINSTALL_EXIT)]
    Uninstall(UninstallArgs),
    /// Print this binary's version and, with a reachable cluster, the
    /// version of the controller holding nodegate's Lease.
    #[command(after_help = EXIT_CODES_HELP)]
    Version(VersionArgs),
    /// Print a completion script for a shell on stdout (e.g. `nodegate
    /// completion bash > /etc/bash_completion.d/nodegate`). For node names
    /// too, use `source <(COMPLETE=bash nodegate)` instead (zsh, fish
    /// alike); `kubectl nodegate` completes through a
    /// `kubectl_complete-nodegate` link to this binary.
    #[command(after_help = COMPLETION_EXIT)]
    Completion(CompletionArgs),
    /// Work with nodegate's config file without running the controller.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check the cluster around nodegate and say, for each problem, what to
    /// change: the autoscalers (Karpenter NodePools, cluster-autoscaler
    /// flags) against nodegate's taints and deadline, the admission policy
    /// or webhook, the Lease, nodegate's RBAC and nodes left gated. Read only.
    #[command(after_help = DOCTOR_EXIT)]
    Doctor(Box<DoctorArgs>),
    /// The container's liveness and readiness probe: GET PATH from the
    /// controller's own HTTP listener over loopback and exit 0 on 200. For
    /// an `exec` probe, so that no client in the cluster can starve the
    /// probes by holding connections to the listener.
    #[command(after_help = PROBE_EXIT)]
    Probe(ProbeArgs),
}

const PROBE_EXIT: &str = "\
Exit status:
  0  PATH answered 200
  1  could not do it: no answer within 2s (said on stderr)
  2  bad usage
  3  checked and found problems: PATH answered another status (its text on
     stderr)
The kubelet counts any status but 0 as a failed probe.";

/// `nodegate probe`.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// The path to ask: /healthz (liveness) or /readyz (readiness).
    #[arg(default_value = "/healthz", value_parser = ["/healthz", "/readyz", "/readyz?verbose", "/healthz?verbose"])]
    pub path: String,

    /// Where the controller's --http-addr listens, seen from inside its
    /// container (the shipped manifests set NODEGATE_PROBE_ADDR to the port
    /// they give --http-addr).
    #[arg(
        long,
        env = "NODEGATE_PROBE_ADDR",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub addr: std::net::SocketAddr,
}

const DOCTOR_EXIT: &str = "\
Exit status:
  0  no check found a problem (checks that could not be made, shown as -,
     do not count)
  1  could not do it: the cluster could not be read
  2  bad usage: a bad flag, value or config file (found before anything is
     sent to the cluster)
  3  checked and found problems: a check found one (each says what to
     change)";

/// `nodegate doctor`.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Read nodegate's settings from the container args of its Deployment
    /// (and the config file they name, from its ConfigMap) in --namespace,
    /// instead of from the flags given here.
    #[arg(long)]
    pub from_cluster: bool,

    /// The namespace nodegate runs in: its Deployment (--deployment), its
    /// ServiceAccount and, unless --lease-namespace says otherwise, its Lease.
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        default_value = "nodegate-system"
    )]
    pub namespace: String,

    /// The name of nodegate's Deployment in --namespace (Helm names it after
    /// the release).
    #[arg(long, value_name = "NAME", default_value = "nodegate")]
    pub deployment: String,

    /// Output format: table (one line per check, the fix under each
    /// problem; wide is the same), json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table", help_heading = OUTPUT)]
    pub output: OutputFormat,

    /// nodegate's settings, as given to `nodegate run` (flags and
    /// --config), and where to reach the cluster; the settings are ignored
    /// with --from-cluster.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `nodegate config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a config file the way `nodegate run --config FILE` reads it, and
    /// print the settings it yields. Offline: nothing is sent to any cluster,
    /// unless --cluster asks for the read-only checks against one.
    #[command(after_help = CONFIG_CHECK_EXIT)]
    Check(ConfigCheckArgs),
}

const CONFIG_CHECK_EXIT: &str = "\
Exit status:
  0  the file is valid (and, with --cluster, no check against the cluster
     found a problem; notes do not count)
  1  could not do it: with --cluster, the cluster could not be read; or the
     output could not be written
  2  bad usage: the file is refused (every problem found is named, as
     FILE:LINE: key: what is wrong)
  3  checked and found problems: with --cluster, a check against the
     cluster found one";

/// `nodegate config check FILE`.
#[derive(Debug, Clone, Args)]
pub struct ConfigCheckArgs {
    /// The config file, as `nodegate run --config FILE` would read it.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Also read the cluster (never write to it): the namespaces and
    /// DaemonSets the file names, the nodes its selectors match, and whether
    /// the API server would let its taints be written (a server-side dry run).
    #[arg(long = "cluster")]
    pub against_cluster: bool,

    /// Output format: table (readable text), json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table", help_heading = OUTPUT)]
    pub output: OutputFormat,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `--on-timeout`: the core's [`OnTimeout`], each value with what it does.
pub fn on_timeout_parser() -> impl TypedValueParser<Value = OnTimeout> {
    let help = |o: OnTimeout| match o {
        OnTimeout::Open => "Remove the taint anyway and record a Warning naming what was not Ready",
        OnTimeout::Keep => {
            "Keep the taint, record the Warning and annotate the node nodegate.dev/timed-out"
        }
        OnTimeout::Replace => {
            "As keep, and ask the node's owner to replace it: delete its Karpenter NodeClaim or Cluster API Machine, or cordon it (--replace-*)"
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

    /// YAML file with the same settings (camelCase keys) plus the keys that
    /// have no flag (criticalPods, criticalConditions, conditionTaints,
    /// criticalResources, draDrivers, canary, suspend). A flag given on the
    /// command line overrides the file's value.
    #[arg(long = "config", value_name = "FILE", help_heading = CONFIG_FILE)]
    pub config: Option<PathBuf>,
}

/// `nodegate run`: the shared settings, the `run` group of the settings
/// table, and where to reach the cluster (as every command takes it).
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub flags: RunFlags,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// As `--log-format` takes it.
impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.to_possible_value();
        f.write_str(value.as_ref().map_or("", |v| v.get_name()))
    }
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The node to explain (completed to the cluster's node names).
    pub node: String,

    /// Output format: table (wrapped to 100 columns), wide (the table
    /// unwrapped), json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table", help_heading = OUTPUT)]
    pub output: OutputFormat,

    #[command(flatten)]
    pub installed: InstalledArgs,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `--from-cluster` on `explain` and `status`: the gate settings of the
/// installed nodegate, read from its Deployment as `doctor --from-cluster`
/// reads them.
#[derive(Debug, Clone, Default, Args)]
pub struct InstalledArgs {
    /// Read the gate settings from nodegate's Deployment (its container args
    /// and the config file they name, from its ConfigMap) in --namespace,
    /// instead of from the flags given here: what the installed controller
    /// runs with.
    #[arg(long, help_heading = INSTALLED)]
    pub from_cluster: bool,

    /// With --from-cluster: the namespace of nodegate's Deployment.
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        default_value = "nodegate-system",
        help_heading = INSTALLED
    )]
    pub namespace: String,

    /// With --from-cluster: the name of nodegate's Deployment (Helm names it
    /// after the release).
    #[arg(long, value_name = "NAME", default_value = "nodegate", help_heading = INSTALLED)]
    pub deployment: String,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[arg(long, value_name = "DURATION", help = status_timeout_help())]
    pub timeout: Option<String>,

    /// Keep the table on screen and refresh it in place. While the cluster
    /// does not answer, it says so once and tries less often (up to every
    /// 30 s).
    #[arg(short = 'w', long)]
    pub watch: bool,

    /// Time between refreshes with --watch.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub interval: String,

    /// Output format: table, wide (every blocker, not the first few), json
    /// or yaml (one document per refresh with --watch).
    #[arg(short = 'o', long = "output", value_enum, default_value = "table", help_heading = OUTPUT)]
    pub output: OutputFormat,

    #[command(flatten)]
    pub installed: InstalledArgs,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,
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
    /// Only nodes matching this label selector (kubectl syntax), within
    /// --node-selector.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,

    /// Report what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Output format: table, wide (the same columns: no detail is cut),
    /// json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table", help_heading = OUTPUT)]
    pub output: OutputFormat,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Wide,
    Json,
    Yaml,
}

/// The namespace nodegate runs in and keeps its Lease in, for the commands
/// that read the Lease (`version`, `uninstall`).
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    /// The namespace of nodegate's Lease (where nodegate runs). Unlike
    /// kubectl, not the context's namespace: the shipped manifests install
    /// into nodegate-system.
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        default_value = "nodegate-system"
    )]
    pub namespace: String,

    /// The Lease's name (as `run --lease-name`).
    #[arg(long, value_name = "NAME", default_value = "nodegate")]
    pub lease_name: String,
}

#[derive(Debug, Clone, Args)]
pub struct VersionArgs {
    /// Print only this binary's version; do not contact the cluster.
    #[arg(long)]
    pub client: bool,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Output format: table (text), json or yaml (wide is the table).
    #[arg(short = 'o', long = "output", value_enum, default_value = "table", help_heading = OUTPUT)]
    pub output: OutputFormat,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["dry_run", "yes"]))]
pub struct UninstallArgs {
    /// Print what would be removed from each node; change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Remove them.
    #[arg(long)]
    pub yes: bool,

    /// Leave the condition rules' taints (conditionTaints in --config) on
    /// the nodes. Without it a rule's taint goes where the node records
    /// that the rule put it on (nodegate.dev/condition-taints); the same
    /// taint put on by someone else always stays.
    #[arg(long)]
    pub keep_rule_taints: bool,

    /// Also remove the managed taints whose key is outside nodegate.dev/
    /// (another vendor's, e.g. a CNI's agent-not-ready from --taint or
    /// --taint-for), from every node in scope, also where their owner put
    /// them on. Without it uninstall refuses to start while one is
    /// configured.
    #[arg(long)]
    pub remove_foreign_keys: bool,

    /// Go on even though a replica renewed the Lease within the last
    /// --lease-fresh (it would put the taints back on new nodes).
    #[arg(long)]
    pub ignore_leader: bool,

    /// A Lease renewed within this long counts as held by a running
    /// replica.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub lease_fresh: String,

    #[command(flatten)]
    pub lease: LeaseArgs,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,
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
