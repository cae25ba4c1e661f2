//! `nodegate-scale`: the scale benchmark driver behind `tests/scale/run`.
//!
//! One run: start a fresh deploy/local control plane, optionally fill it with
//! unrelated pods, start the controller under test (any command line; it
//! talks to the API server through the counting proxy), create the
//! DaemonSets, join N tainted nodes at once, and watch — from outside, on the
//! API server — until every node opened or its deadline plus a grace period
//! passed. Then print the table, write the JSON result and tear everything
//! down. It measures; it never judges a controller by its logs or internals.
//!
//! With `--repeat K` and `--compare CMD` (or `--nodegate-b PATH`) it does K
//! runs of each controller, alternating A, B, A, B, …, each on a fresh
//! cluster, and summarises them side by side (`summary`).

mod args;
mod churn;
mod cluster;
mod floor;
mod metrics;
mod observe;
mod procstat;
mod proxy;
mod report;
mod run;
mod summary;
mod table;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context as _, bail};
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::args::{Args, Plan};

pub async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read kubeconfig {}", kubeconfig.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("bad kubeconfig {}", kubeconfig.display()))?;
    // Measure what was asked, not what a retry layer made of it.
    config.default_retry = false;
    config.read_timeout = None;
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

pub fn machine_facts() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    if let Some(model) = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
    {
        m.insert("cpu".into(), model.1.trim().to_string());
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    m.insert("cores".into(), cores.to_string());
    if let Some(mem) = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
    {
        let kib: f64 = mem
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap_or(0.0);
        m.insert("memory_gib".into(), format!("{:.1}", kib / 1_048_576.0));
    }
    m.insert(
        "kernel".into(),
        read("/proc/sys/kernel/osrelease").trim().to_string(),
    );
    m.insert(
        "loadavg_at_start".into(),
        read("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    );
    m
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        tokio::select! {
            r = run(args) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    // Dropping the runtime here (after `run`'s guards ran) stops the proxy
    // and the sampler.
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

pub fn log(msg: impl AsRef<str>) {
    let now = jiff::Timestamp::now();
    eprintln!("[scale {}] {}", now.strftime("%H:%M:%S%.3f"), msg.as_ref());
}

/// A binary a controller command names, checked before any cluster starts.
fn binary(path: &Path, flag: &str) -> anyhow::Result<String> {
    if !path.is_file() {
        bail!(
            "no nodegate binary at {} (build it with `cargo build --release -p nodegate`, or pass {flag} PATH)",
            path.display()
        );
    }
    Ok(path.display().to_string())
}

/// Where run `tag` writes the controller's log: next to --out, or in $TMPDIR.
fn log_path(out: Option<&Path>, tag: &str) -> PathBuf {
    let suffix = if tag.is_empty() {
        "controller.log".to_string()
    } else {
        format!("{tag}.controller.log")
    };
    match out {
        Some(p) => p.with_extension(suffix),
        None => {
            std::env::temp_dir().join(format!("nodegate-scale-{}.{suffix}", std::process::id()))
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let plan = args::plan(&args)?;
    let series = plan.is_series();
    let Plan { contenders, slots } = plan;
    let repo = cluster::repo_root();
    let nodegate = args.nodegate.clone().unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("target"))
            .join("release/nodegate")
    });
    // Fill in the binaries once, so that a missing one stops the plan before
    // the first cluster starts.
    let mut templates = Vec::new();
    for c in &contenders {
        let mut vars = Vec::new();
        if c.template.contains("{nodegate}") {
            vars.push(("nodegate", binary(&nodegate, "--nodegate")?));
        }
        if let Some(b) = &args.nodegate_b
            && c.template.contains("{nodegate_b}")
        {
            vars.push(("nodegate_b", binary(b, "--nodegate-b")?));
        }
        templates.push(args::expand(&c.template, &vars));
    }
    let base_state = args.state_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir()
            .join("nodegate-scale")
            .join(format!("run-{}", std::process::id()))
    });
    if args.churn.is_some() {
        let spec = run::RunSpec {
            template: &templates[0],
            state_dir: base_state.clone(),
            log_path: log_path(args.out.as_deref(), ""),
            repo: &repo,
        };
        let result = churn::run(&args, spec).await?;
        if let Some(path) = &args.out {
            churn::write(path, &result)?;
            log(format!("result written to {} (and .csv)", path.display()));
        }
        return Ok(());
    }
    let mut results: Vec<(usize, usize, report::Result)> = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let c = &contenders[slot.contender];
        let tag = if series {
            format!("{}{}", c.label, slot.round)
        } else {
            String::new()
        };
        if series {
            log(format!(
                "run {} of {}: controller {} (round {})",
                i + 1,
                slots.len(),
                c.label,
                slot.round
            ));
        }
        let spec = run::RunSpec {
            template: &templates[slot.contender],
            state_dir: if series {
                base_state.join(&tag)
            } else {
                base_state.clone()
            },
            log_path: log_path(args.out.as_deref(), &tag),
            repo: &repo,
        };
        let result = run::run_once(&args, spec).await?;
        results.push((slot.contender, slot.round, result));
        // A series' summary so far, so that an interrupted series leaves
        // what it measured.
        if series {
            write_series(&args, &contenders, &templates, &results)?;
        }
    }
    if series {
        let s = summary::summarise(&contenders, &templates, &results);
        println!("{}", summary::table(&s));
    } else if let (Some(path), Some((_, _, r))) = (&args.out, results.first()) {
        let json = serde_json::to_string_pretty(r)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        log(format!("result written to {}", path.display()));
    }
    Ok(())
}

fn write_series(
    args: &Args,
    contenders: &[args::Contender],
    templates: &[String],
    results: &[(usize, usize, report::Result)],
) -> anyhow::Result<()> {
    let Some(path) = &args.out else {
        return Ok(());
    };
    let s = summary::summarise(contenders, templates, results);
    let runs: Vec<serde_json::Value> = results
        .iter()
        .map(|(c, round, r)| {
            serde_json::json!({
                "controller": contenders[*c].label,
                "round": round,
                "result": r,
            })
        })
        .collect();
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "summary": s,
        "runs": runs,
    }))?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    log(format!(
        "{} run(s) written to {}",
        results.len(),
        path.display()
    ));
    Ok(())
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
