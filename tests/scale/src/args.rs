//! The driver's command line, and what it makes of it before any cluster
//! starts: the controllers to run (one, or two to compare), their command
//! lines with the placeholders filled in, and the order of the runs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Parser;

/// The controller command when --controller is not given: its debug
/// listener on a port of its own, so that runs side by side never contend
/// for the default one.
pub const DEFAULT_CONTROLLER: &str = "{nodegate} run --timeout {timeout} --taint {taint} --http-addr {http_addr} --debug-addr 127.0.0.1:0";

/// Scale benchmark: N tainted nodes join a fresh deploy/local cluster at once;
/// measures, by watching the API server, how fast and how correctly the
/// controller under test opens them, what it costs the API server, and its
/// memory and CPU. With --repeat and --compare: several runs, each on a fresh
/// cluster, summarised per controller (per-run values and the median).
#[derive(Debug, Clone, Parser)]
#[command(name = "tests/scale/run")]
pub struct Args {
    /// Tainted nodes that join at once.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// DaemonSets every node expects (DaemonSet 0 is split in a Ready and a
    /// never-Ready half, see --stuck-percent).
    #[arg(long, default_value_t = 6)]
    pub daemonsets: usize,
    /// The controller under test, run with `bash -c 'exec CMD'` and
    /// KUBECONFIG set. Placeholders: {kubeconfig}, {timeout} (e.g. 120s),
    /// {taint} (KEY:EFFECT), {nodegate} (the nodegate binary), {nodegate_b}
    /// (the binary of --nodegate-b), {http_addr} (a free loopback address;
    /// the driver reads nodegate's own histograms from /metrics there).
    /// Default: '{nodegate} run --timeout {timeout} --taint {taint} --http-addr {http_addr}
    /// --debug-addr 127.0.0.1:0'.
    #[arg(long, value_name = "CMD")]
    pub controller: Option<String>,
    /// A second controller (same placeholders) to compare with the first:
    /// the runs alternate A, B, A, B, … (--repeat of each), every run on a
    /// fresh cluster, and the summary puts the two side by side.
    #[arg(long, value_name = "CMD")]
    pub compare: Option<String>,
    /// A second nodegate binary, for {nodegate_b}. Without --compare it also
    /// makes B the default command on this binary, so one flag compares two
    /// builds of nodegate.
    #[arg(long, value_name = "PATH")]
    pub nodegate_b: Option<PathBuf>,
    /// Do not probe the floor (a PATCH and a pod write by the driver for each
    /// opening, see docs/benchmarks.md "The floor").
    #[arg(long)]
    pub no_floor: bool,
    /// Churn mode: instead of one join, CYCLES nodes are created and deleted
    /// in waves of --batch, and the controller's RSS, metric series and map
    /// sizes are read before, after every wave and at the end.
    #[arg(long, value_name = "CYCLES")]
    pub churn: Option<usize>,
    /// Nodes per churn wave.
    #[arg(long, value_name = "B", default_value_t = 500)]
    pub batch: usize,
    /// Runs of each controller, each on a fresh cluster.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub repeat: usize,
    /// The startup taint the nodes join with and the controller removes.
    #[arg(
        long,
        value_name = "KEY:EFFECT",
        default_value = "nodegate.dev/initializing:NoSchedule"
    )]
    pub taint: String,
    /// The controller's deadline, counted from each node's creation; passed
    /// to the controller as {timeout}.
    #[arg(long, value_name = "DURATION", default_value = "240s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Where to write the JSON result (controllers' logs go next to it).
    #[arg(long, value_name = "FILE.json")]
    pub out: Option<PathBuf>,
    /// Share of the nodes on which one DaemonSet never turns Ready.
    #[arg(long, default_value_t = 5.0, value_name = "PERCENT")]
    pub stuck_percent: f64,
    /// Pods that belong to no DaemonSet, created (and run by kwok) on
    /// untainted filler nodes before the controller starts.
    #[arg(long, default_value_t = 0)]
    pub unrelated_pods: usize,
    /// DaemonSet pods turn Ready a random time in [--ready-after,
    /// --ready-after-max] after kwok first sees them on their node.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub ready_after: Duration,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub ready_after_max: Duration,
    /// Pause after creating the DaemonSets, so the controller has synced
    /// before the nodes join.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// How long after the last deadline, and after the last node that
    /// opened, a node may still open before it counts as never opened.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// The nodegate binary for {nodegate}.
    #[arg(long, env = "NODEGATE_BIN", value_name = "PATH")]
    pub nodegate: Option<PathBuf>,
    /// State directory for deploy/local (default: a fresh one under $TMPDIR;
    /// with several runs, one subdirectory per run).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Leave the cluster running afterwards (prints how to stop it; one run only).
    #[arg(long)]
    pub keep_cluster: bool,
    /// Node creates in flight at once.
    #[arg(long, default_value_t = 64)]
    pub create_concurrency: usize,
    /// Workers kwok (the simulated kubelets) uses for pod stages, node stages
    /// and leases; 0 keeps deploy/local's kwok and kube-controller-manager as
    /// they are (no bench tuning at all). See cluster::tune.
    #[arg(long, default_value_t = 16)]
    pub kwok_parallelism: u32,
    /// How often kwok sends each node's status heartbeat (up to a quarter
    /// more, at random); kube-controller-manager's node grace period is raised
    /// to match. Not with --deploy-local-stages (kwok's own: 20-45 s).
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub kwok_heartbeat: Duration,
    /// Keep deploy/local's three status patches per pod (create, start,
    /// release) instead of the benchmark's one (tests/scale/kwok-stages.yaml).
    #[arg(long)]
    pub deploy_local_stages: bool,
    /// Seed for choosing the stuck nodes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One controller under test, as run.
#[derive(Debug, Clone, PartialEq)]
pub struct Contender {
    /// "A" or "B".
    pub label: String,
    /// The command line before the per-run placeholders ({kubeconfig},
    /// {timeout}, {taint}) are filled in.
    pub template: String,
}

/// One run of the plan: which contender, and its how-manyeth run (from 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub contender: usize,
    pub round: usize,
}

/// What the command line asks for, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    pub contenders: Vec<Contender>,
    pub slots: Vec<Slot>,
}

impl Plan {
    /// More than one run: results are summarised.
    pub fn is_series(&self) -> bool {
        self.slots.len() > 1
    }
}

pub fn parse_taint(s: &str) -> anyhow::Result<(String, String)> {
    match s.rsplit_once(':') {
        Some((k, e)) if !k.is_empty() && matches!(e, "NoSchedule" | "NoExecute") => {
            Ok((k.to_string(), e.to_string()))
        }
        _ => bail!(
            "--taint wants KEY:EFFECT with EFFECT NoSchedule or NoExecute (a PreferNoSchedule taint holds nothing back), got {s:?}"
        ),
    }
}

pub fn expand(template: &str, vars: &[(&str, String)]) -> String {
    vars.iter().fold(template.to_string(), |s, (k, v)| {
        s.replace(&format!("{{{k}}}"), v)
    })
}

/// Runs in the order they happen: with two contenders A, B, A, B, … so that
/// a drift of the machine over time (another build starting, the page cache
/// warming) falls on both alike.
pub fn schedule(contenders: usize, repeat: usize) -> Vec<Slot> {
    (1..=repeat)
        .flat_map(|round| (0..contenders).map(move |contender| Slot { contender, round }))
        .collect()
}

/// Checks the flags that do not depend on the machine and makes the plan.
pub fn plan(args: &Args) -> anyhow::Result<Plan> {
    parse_taint(&args.taint)?;
    if args.nodes == 0 || args.daemonsets == 0 {
        bail!("--nodes and --daemonsets must be at least 1");
    }
    if args.ready_after_max < args.ready_after {
        bail!("--ready-after-max must not be below --ready-after");
    }
    if args.repeat == 0 {
        bail!("--repeat wants at least 1 run");
    }
    if args.kwok_heartbeat < Duration::from_secs(1) {
        bail!(
            "--kwok-heartbeat must be at least 1s, got {}",
            humantime::format_duration(args.kwok_heartbeat)
        );
    }
    let a = args
        .controller
        .clone()
        .unwrap_or_else(|| DEFAULT_CONTROLLER.to_string());
    let b = match (&args.compare, &args.nodegate_b) {
        (Some(cmd), _) => Some(cmd.clone()),
        (None, Some(_)) => Some(DEFAULT_CONTROLLER.replace("{nodegate}", "{nodegate_b}")),
        (None, None) => None,
    };
    let mut contenders = vec![Contender {
        label: "A".into(),
        template: a,
    }];
    if let Some(b) = b {
        contenders.push(Contender {
            label: "B".into(),
            template: b,
        });
    }
    if contenders.len() > 1 && contenders[0].template == contenders[1].template {
        bail!(
            "--compare runs the same command as the first controller ({:?}); give a different one",
            contenders[0].template
        );
    }
    let uses_b = contenders
        .iter()
        .any(|c| c.template.contains("{nodegate_b}"));
    if uses_b && args.nodegate_b.is_none() {
        bail!("a controller command uses {{nodegate_b}} but --nodegate-b PATH is not given");
    }
    let slots = schedule(contenders.len(), args.repeat);
    if args.keep_cluster && slots.len() > 1 {
        bail!("--keep-cluster keeps one run's cluster; it cannot go with --repeat or --compare");
    }
    Ok(Plan { contenders, slots })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("nodegate-scale").chain(argv.iter().copied()))
            .expect("arguments parse")
    }

    #[test]
    fn placeholders_are_substituted() {
        let s = expand(
            "{nodegate} run --timeout {timeout} --kubeconfig {kubeconfig} --taint {taint}",
            &[
                ("kubeconfig", "/k".into()),
                ("timeout", "120s".into()),
                ("taint", "a:NoSchedule".into()),
                ("nodegate", "/bin/ng".into()),
            ],
        );
        assert_eq!(
            s,
            "/bin/ng run --timeout 120s --kubeconfig /k --taint a:NoSchedule"
        );
    }

    #[test]
    fn taints_need_a_key_and_a_holding_effect() {
        assert_eq!(
            parse_taint("nodegate.dev/initializing:NoSchedule").unwrap(),
            (
                "nodegate.dev/initializing".to_string(),
                "NoSchedule".to_string()
            )
        );
        assert!(parse_taint("x:PreferNoSchedule").is_err());
        assert!(parse_taint("nokey").is_err());
    }

    #[test]
    fn two_contenders_alternate() {
        let order: Vec<(usize, usize)> = schedule(2, 3)
            .into_iter()
            .map(|s| (s.contender, s.round))
            .collect();
        assert_eq!(order, vec![(0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]);
        assert_eq!(schedule(1, 2).len(), 2);
    }

    #[test]
    fn one_run_by_default() {
        let p = plan(&parse(&[])).unwrap();
        assert_eq!(p.contenders.len(), 1);
        assert_eq!(p.contenders[0].template, DEFAULT_CONTROLLER);
        assert!(!p.is_series());
    }

    #[test]
    fn nodegate_b_alone_compares_two_builds() {
        let p = plan(&parse(&["--repeat", "2", "--nodegate-b", "/old/nodegate"])).unwrap();
        assert_eq!(p.contenders.len(), 2);
        assert!(p.contenders[1].template.starts_with("{nodegate_b} run"));
        assert_eq!(p.slots.len(), 4);
        assert!(p.is_series());
    }

    #[test]
    fn compare_takes_any_command() {
        let p = plan(&parse(&["--compare", "peer --kubeconfig {kubeconfig}"])).unwrap();
        assert_eq!(p.contenders[1].label, "B");
        assert_eq!(p.contenders[1].template, "peer --kubeconfig {kubeconfig}");
        assert_eq!(p.slots.len(), 2);
    }

    #[test]
    fn bad_plans_are_refused() {
        assert!(plan(&parse(&["--repeat", "0"])).is_err());
        assert!(plan(&parse(&["--compare", DEFAULT_CONTROLLER])).is_err());
        assert!(plan(&parse(&["--compare", "{nodegate_b} run"])).is_err());
        assert!(plan(&parse(&["--repeat", "2", "--keep-cluster"])).is_err());
        assert!(plan(&parse(&["--ready-after", "5s", "--ready-after-max", "1s"])).is_err());
        assert!(Args::try_parse_from(["x", "--repeat", "many"]).is_err());
    }
}
