//! Churn mode (`--churn CYCLES --batch B`): nodes come and go in waves, and
//! the controller must give back what each node cost it.
//!
//! On a fresh cluster with the D DaemonSets, the driver creates B tainted
//! nodes (5 % of them stuck, so their gates are still closed when they go),
//! waits until every other one opened, reads the controller's state, deletes
//! the nodes and their pods (as the pod garbage collector would, without its
//! delay), waits until the DaemonSet pods are gone, and reads it again —
//! until CYCLES nodes have come and gone. Each reading is the controller's
//! RSS (from /proc), the number of series on its `/metrics` page, and, for
//! nodegate, `nodegate_map_entries` (every map that grows with the nodes)
//! and its per-node series. The baseline is read before the first wave, the
//! end after the last one; the result is their ratio per figure (target:
//! back within ±5 %), and every wave's reading, for the plot.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use serde::Serialize;

use crate::args::{Args, expand, parse_taint};
use crate::run::{Controller, RunSpec};
use crate::workload::{self, DS_LABEL, NAMESPACE, ReadyDelay};
use crate::{client_for, cluster, floor, lock, log, machine_facts, observe, procstat, proxy};

/// One reading of the controller.
#[derive(Debug, Clone, Serialize)]
pub struct Reading {
    /// `baseline`, `wave N: joined` (its nodes in, before they go),
    /// `wave N: gone`, `end`.
    pub at: String,
    pub seconds: f64,
    pub rss_mib: f64,
    /// Of it anonymous (the heap) and file-backed (the binary's code).
    pub anon_mib: f64,
    pub file_mib: f64,
    /// What its `/metrics` page said (flattened into the JSON).
    #[serde(flatten)]
    pub page: Page,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChurnResult {
    pub controller: String,
    pub cycles: usize,
    pub batch: usize,
    pub daemonsets: usize,
    pub machine: BTreeMap<String, String>,
    pub readings: Vec<Reading>,
    /// end / baseline.
    pub rss_ratio: f64,
    pub series_ratio: f64,
    /// Maps whose end count differs from the baseline: (map, baseline, end).
    pub maps_not_back: Vec<(String, f64, f64)>,
    pub wall_s: f64,
}

/// The figures of one `/metrics` page.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Page {
    /// Sample lines (every series, histogram buckets included).
    pub series: usize,
    /// Series with a `node` label.
    pub node_series: usize,
    /// Untaints answered `conflict` or `error` so far
    /// (`nodegate_patch_attempts_total`). A conflict, and among the errors
    /// a 5xx or an answer that never came, make the gate re-read its node
    /// (a path with code of its own); another error (a 403, a 429) does not.
    pub rejected_untaints: f64,
    /// `nodegate_map_entries` by map.
    pub maps: BTreeMap<String, f64>,
}

pub fn read_page(page: &str) -> Page {
    let samples: Vec<&str> = page
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    let mut read = Page {
        series: samples.len(),
        node_series: samples.iter().filter(|l| l.contains("node=\"")).count(),
        ..Page::default()
    };
    for l in &samples {
        let Some((name, value)) = l.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if let Some(map) = name.strip_prefix("nodegate_map_entries{map=\"") {
            read.maps
                .insert(map.trim_end_matches("\"}").to_string(), value);
        } else if let Some(labels) = name.strip_prefix("nodegate_patch_attempts_total{")
            && labels.contains("kind=\"untaint\"")
            && (labels.contains("result=\"conflict\"") || labels.contains("result=\"error\""))
        {
            read.rejected_untaints += value;
        }
    }
    read
}

async fn read(at: &str, started: Instant, pid: u32, http_addr: &str) -> Reading {
    // The page is made at most once a second; let the last change reach it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let page = read_page(&floor::scrape(http_addr).await.unwrap_or_default());
    // A process that is gone reads as 0; the caller checks that it still
    // runs before the baseline, after each wave and after the end reading.
    let mib = |kib: u64| kib as f64 / 1024.0;
    let resident = procstat::resident_kib(pid);
    let r = Reading {
        at: at.to_string(),
        seconds: started.elapsed().as_secs_f64(),
        rss_mib: resident.map_or(0.0, |m| mib(m.total)),
        anon_mib: resident.map_or(0.0, |m| mib(m.anon)),
        file_mib: resident.map_or(0.0, |m| mib(m.file)),
        page,
    };
    let p = &r.page;
    log(format!(
        "{at}: RSS {:.1} MiB ({:.1} anonymous, {:.1} file-backed), {} series ({} per node), {} untaints rejected, maps {:?}",
        r.rss_mib, r.anon_mib, r.file_mib, p.series, p.node_series, p.rejected_untaints, p.maps
    ));
    r
}

/// Deletes the nodes, then their pods (grace 0, as the pod garbage collector
/// does for pods of a node that is gone), and waits until no DaemonSet pod
/// is left.
async fn remove(
    admin: &kube::Client,
    names: &[(String, bool)],
    concurrency: usize,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    futures::stream::iter(names.iter().map(|(n, _)| n.clone()))
        .map(|name| {
            let nodes = nodes.clone();
            async move {
                match nodes.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    Err(e) => Err(e).with_context(|| format!("deleting node {name}")),
                }
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    let give_up = Instant::now() + Duration::from_secs(300);
    loop {
        let left = pods
            .list_metadata(&ListParams::default().labels(DS_LABEL))
            .await
            .context("listing DaemonSet pods")?;
        if left.items.is_empty() {
            return Ok(());
        }
        if Instant::now() > give_up {
            bail!(
                "{} DaemonSet pods still there 300s after their nodes went",
                left.items.len()
            );
        }
        futures::stream::iter(left.items.into_iter().filter_map(|p| p.metadata.name))
            .map(|name| {
                let pods = pods.clone();
                async move {
                    let _ = pods
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                }
            })
            .buffer_unordered(concurrency)
            .collect::<Vec<()>>()
            .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Waits until every node of `names` that is not stuck opened (or `limit`).
async fn wait_open(record: &Mutex<observe::Record>, names: &[(String, bool)], limit: Duration) {
    let give_up = Instant::now() + limit;
    loop {
        let open = {
            let r = lock(record);
            names
                .iter()
                .filter(|(n, stuck)| !stuck && r.nodes.get(n).is_some_and(|n| n.opened.is_none()))
                .count()
                == 0
        };
        if open || Instant::now() > give_up {
            if !open {
                log("some nodes of the wave did not open in time; deleting them anyway");
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn wave_names(wave: usize, batch: usize, stuck_percent: f64, seed: u64) -> Vec<(String, bool)> {
    let stuck = workload::stuck_nodes(batch, stuck_percent, seed.wrapping_add(wave as u64));
    (0..batch)
        .map(|i| (format!("churn-{wave:03}-{i:05}"), stuck.contains(&i)))
        .collect()
}

pub async fn run(args: &Args, spec: RunSpec<'_>) -> anyhow::Result<ChurnResult> {
    let cycles = args.churn.unwrap_or(0);
    if cycles == 0 || args.batch == 0 {
        bail!("--churn CYCLES and --batch B must be above 0");
    }
    let taint = parse_taint(&args.taint)?;
    let machine = machine_facts();
    let cluster = cluster::Cluster::up(spec.repo, &spec.state_dir, args.keep_cluster)?;
    if args.kwok_parallelism > 0 {
        cluster.tune(&cluster::Tuning {
            parallelism: args.kwok_parallelism,
            heartbeat: args.kwok_heartbeat,
            deploy_local_stages: args.deploy_local_stages,
        })?;
    }
    let admin = client_for(&cluster.kubeconfig).await?;
    workload::create_namespace(&admin, NAMESPACE).await?;
    let proxy = proxy::Proxy::start(client_for(&cluster.kubeconfig).await?).await?;
    let kubeconfig = spec.state_dir.join("controller.kubeconfig");
    std::fs::write(
        &kubeconfig,
        proxy.kubeconfig(proxy::cluster_ca(&cluster.kubeconfig)?.as_deref()),
    )?;
    let observer = observe::start(cluster.kubeconfig.clone(), taint.clone())?;
    let http_addr = floor::free_addr()?;
    let command = expand(
        spec.template,
        &[
            ("kubeconfig", kubeconfig.display().to_string()),
            ("timeout", format!("{}s", args.timeout.as_secs_f64())),
            ("taint", args.taint.clone()),
            ("http_addr", http_addr.clone()),
        ],
    );
    log(format!(
        "controller: {command}  (log: {})",
        spec.log_path.display()
    ));
    let log_file = std::fs::File::create(&spec.log_path)?;
    let mut controller = Controller::spawn(
        Command::new("bash")
            .arg("-c")
            .arg(format!("exec {command}"))
            .env("KUBECONFIG", &kubeconfig)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file),
    )
    .context("cannot start the controller")?;
    let pid = controller.pid();
    let delay = ReadyDelay {
        after: args.ready_after,
        max: args.ready_after_max,
    };
    workload::create_daemonsets(
        &admin,
        args.daemonsets,
        &taint.0,
        &delay,
        args.stuck_percent > 0.0,
    )
    .await?;
    tokio::time::sleep(args.settle).await;
    if !controller.running() {
        bail!(
            "the controller exited before the first wave; its log is {}",
            spec.log_path.display()
        );
    }
    let started = Instant::now();
    let mut readings = vec![read("baseline", started, pid, &http_addr).await];
    let waves = cycles.div_ceil(args.batch);
    for wave in 0..waves {
        let batch = args.batch.min(cycles - wave * args.batch);
        let names = wave_names(wave, batch, args.stuck_percent, args.seed);
        workload::create_named_nodes(
            &admin,
            &names,
            (&taint.0, &taint.1),
            args.create_concurrency,
        )
        .await?;
        wait_open(&observer.record, &names, args.timeout).await;
        readings.push(
            read(
                &format!("wave {}: joined", wave + 1),
                started,
                pid,
                &http_addr,
            )
            .await,
        );
        remove(&admin, &names, args.create_concurrency).await?;
        readings.push(
            read(
                &format!("wave {}: gone", wave + 1),
                started,
                pid,
                &http_addr,
            )
            .await,
        );
        if !controller.running() {
            bail!(
                "the controller exited during wave {}; its log is {}",
                wave + 1,
                spec.log_path.display()
            );
        }
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    readings.push(read("end", started, pid, &http_addr).await);
    if !controller.running() {
        bail!(
            "the controller exited after the last wave, so the end reading is not its own; its log is {}",
            spec.log_path.display()
        );
    }
    controller.stop(Duration::from_secs(5));
    let (base, end) = (&readings[0], &readings[readings.len() - 1]);
    let maps_not_back = base
        .page
        .maps
        .iter()
        .filter_map(|(m, b)| {
            let e = end.page.maps.get(m).copied().unwrap_or(0.0);
            (e != *b).then(|| (m.clone(), *b, e))
        })
        .collect();
    let result = ChurnResult {
        controller: command,
        cycles,
        batch: args.batch,
        daemonsets: args.daemonsets,
        machine,
        rss_ratio: ratio(end.rss_mib, base.rss_mib),
        series_ratio: ratio(end.page.series as f64, base.page.series as f64),
        maps_not_back,
        wall_s: started.elapsed().as_secs_f64(),
        readings,
    };
    println!("{}", table(&result));
    drop(observer);
    drop(cluster);
    Ok(result)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        (a / b * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

/// The readings as a table (also the CSV of docs/benchmarks-churn.csv).
pub fn table(r: &ChurnResult) -> String {
    let names: Vec<&String> = r
        .readings
        .iter()
        .flat_map(|x| x.page.maps.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut s =
        "at,seconds,rss_mib,anon_mib,file_mib,series,node_series,rejected_untaints".to_string();
    for n in &names {
        s += &format!(",{n}");
    }
    s += "\n";
    for x in &r.readings {
        s += &format!(
            "{},{:.0},{:.1},{:.1},{:.1},{},{},{}",
            x.at,
            x.seconds,
            x.rss_mib,
            x.anon_mib,
            x.file_mib,
            x.page.series,
            x.page.node_series,
            x.page.rejected_untaints
        );
        for n in &names {
            s += &format!(",{}", x.page.maps.get(*n).copied().unwrap_or(0.0));
        }
        s += "\n";
    }
    // A part the baseline could not read (0) has no ratio.
    let part = |end: f64, base: f64| {
        if base > 0.0 {
            format!("{:.3}", ratio(end, base))
        } else {
            "n/a".to_string()
        }
    };
    let parts = match (r.readings.first(), r.readings.last()) {
        (Some(b), Some(e)) => format!(
            " (anonymous {}, file-backed {})",
            part(e.anon_mib, b.anon_mib),
            part(e.file_mib, b.file_mib)
        ),
        _ => String::new(),
    };
    s += &format!(
        "\nend / baseline: RSS {:.3}{parts}, series {:.3}; maps not back to their baseline: {:?}\n",
        r.rss_ratio, r.series_ratio, r.maps_not_back
    );
    s
}

/// Writes the result (JSON) and the readings (CSV next to it).
pub fn write(path: &Path, r: &ChurnResult) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(r)? + "\n")?;
    let csv = table(r);
    let csv = csv.split("\n\n").next().unwrap_or("");
    std::fs::write(path.with_extension("csv"), csv.to_string() + "\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{ChurnResult, Page, Reading, read_page, table};

    fn reading(at: &str, rss: f64, anon: f64, file: f64, gates: f64) -> Reading {
        Reading {
            at: at.to_string(),
            seconds: 1.0,
            rss_mib: rss,
            anon_mib: anon,
            file_mib: file,
            page: Page {
                series: 10,
                node_series: 0,
                rejected_untaints: 0.0,
                maps: BTreeMap::from([("router_gates".to_string(), gates)]),
            },
        }
    }

    #[test]
    fn a_reading_s_page_is_flat_in_the_json() {
        let json = serde_json::to_value(reading("end", 8.0, 5.0, 3.0, 1.0)).expect("JSON");
        assert_eq!(json["series"], 10);
        assert_eq!(json["rejected_untaints"], 0.0);
        assert_eq!(json["maps"]["router_gates"], 1.0);
        assert!(json.get("page").is_none(), "{json}");
    }

    #[test]
    fn the_table_splits_resident_memory_and_says_how_each_part_ended() {
        let result = ChurnResult {
            controller: "c".into(),
            cycles: 2,
            batch: 1,
            daemonsets: 1,
            machine: BTreeMap::new(),
            readings: vec![
                reading("baseline", 8.0, 5.0, 3.0, 0.0),
                reading("wave 1: joined", 20.0, 12.0, 8.0, 1.0),
                reading("end", 18.0, 11.0, 6.0, 0.0),
            ],
            rss_ratio: 2.25,
            series_ratio: 1.0,
            maps_not_back: vec![],
            wall_s: 3.0,
        };
        let t = table(&result);
        let mut lines = t.lines();
        assert_eq!(
            lines.next(),
            Some(
                "at,seconds,rss_mib,anon_mib,file_mib,series,node_series,rejected_untaints,router_gates"
            )
        );
        assert_eq!(lines.next(), Some("baseline,1,8.0,5.0,3.0,10,0,0,0"));
        assert_eq!(
            lines.next(),
            Some("wave 1: joined,1,20.0,12.0,8.0,10,0,0,1")
        );
        assert!(
            t.contains(
                "end / baseline: RSS 2.250 (anonymous 2.200, file-backed 2.000), series 1.000"
            ),
            "{t}"
        );
        // A part the baseline could not read has no ratio, not 0.
        let mut unread = result.clone();
        unread.readings[0].file_mib = 0.0;
        unread.readings[2].anon_mib = 12.5;
        let t = table(&unread);
        assert!(t.contains("(anonymous 2.500, file-backed n/a)"), "{t}");
    }

    #[test]
    fn a_page_is_counted_by_series_node_series_maps_and_rejected_untaints() {
        let page = "# HELP x y\n# TYPE x gauge\nnodegate_gate_age_seconds{node=\"a\"} 3\n\
nodegate_map_entries{map=\"router_gates\"} 2\nnodegate_map_entries{map=\"index_pods\"} 12\n\
nodegate_patch_attempts_total{kind=\"untaint\",result=\"ok\"} 40\n\
nodegate_patch_attempts_total{kind=\"untaint\",result=\"conflict\"} 2\n\
nodegate_patch_attempts_total{kind=\"untaint\",result=\"error\"} 1\n\
nodegate_patch_attempts_total{kind=\"mark_timed_out\",result=\"conflict\"} 5\n\
nodegate_live_actors 2\n# EOF\n";
        let read = read_page(page);
        assert_eq!(read.series, 8);
        assert_eq!(read.node_series, 1);
        assert_eq!(read.maps.get("router_gates"), Some(&2.0));
        assert_eq!(read.maps.get("index_pods"), Some(&12.0));
        assert_eq!(read.maps.len(), 2);
        assert_eq!(read.rejected_untaints, 3.0);
    }
}
