//! A series of runs (`--repeat`, `--compare`): per controller and metric,
//! every run's value in the order they ran and the median, side by side.
//!
//! One run on a shared 2-core machine moves by tens of percent with the load
//! around it; the median of a few runs, taken alternately for two
//! controllers, is what can be compared.

use serde::Serialize;

use crate::args::Contender;
use crate::report::{Result, round};

/// One metric: its name as printed and how to read it from a run.
struct Metric {
    name: &'static str,
    get: fn(&Result) -> Option<f64>,
}

fn count(n: usize) -> Option<f64> {
    Some(n as f64)
}

fn own(r: &Result) -> Option<&crate::metrics::BucketQuantiles> {
    r.controller_own.as_ref()?.event_to_patch_ms.as_ref()
}

fn cpu(r: &Result, process: &str) -> Option<f64> {
    r.control_plane.get(process).map(|u| u.cpu_s)
}

const METRICS: &[Metric] = &[
    Metric {
        name: "reaction p50 (ms)",
        get: |r| Some(r.reaction_ms.p50),
    },
    Metric {
        name: "reaction p99 (ms)",
        get: |r| Some(r.reaction_ms.p99),
    },
    Metric {
        name: "floor p50 (ms): probe PATCH + its delivery",
        get: |r| r.floor.as_ref().map(|f| f.floor_ms.p50),
    },
    Metric {
        name: "reaction over floor p50 (ms)",
        get: |r| r.floor.as_ref().map(|f| f.over_floor_ms.p50),
    },
    Metric {
        name: "reaction over floor p99 (ms)",
        get: |r| r.floor.as_ref().map(|f| f.over_floor_ms.p99),
    },
    Metric {
        name: "nodegate event→patch p50 (ms)",
        get: |r| own(r).map(|q| q.p50),
    },
    Metric {
        name: "nodegate event→patch p99 (ms)",
        get: |r| own(r).map(|q| q.p99),
    },
    Metric {
        name: "API server PATCH nodes p50 (ms)",
        get: |r| r.apiserver_node_patch_ms.as_ref().map(|q| q.p50),
    },
    Metric {
        name: "API server PATCH nodes p99 (ms)",
        get: |r| r.apiserver_node_patch_ms.as_ref().map(|q| q.p99),
    },
    Metric {
        name: "deadline error p50 (ms)",
        get: |r| Some(r.deadline_error_ms.p50),
    },
    Metric {
        name: "deadline error max (ms)",
        get: |r| Some(r.deadline_error_ms_max),
    },
    Metric {
        name: "opened by readiness",
        get: |r| count(r.opened_by_ready),
    },
    Metric {
        name: "opened at the deadline",
        get: |r| count(r.opened_at_deadline),
    },
    Metric {
        name: "  of them not stuck",
        get: |r| count(r.correctness.opened_at_deadline_not_stuck),
    },
    Metric {
        name: "premature opens",
        get: |r| count(r.premature_opens),
    },
    Metric {
        name: "never opened",
        get: |r| count(r.never_opened),
    },
    Metric {
        name: "node writes / node",
        get: |r| Some(r.node_writes_per_node),
    },
    Metric {
        name: "conflicts",
        get: |r| Some(r.conflicts as f64),
    },
    Metric {
        name: "controller peak RSS (MiB)",
        get: |r| Some(r.controller_peak_rss_mib),
    },
    Metric {
        name: "  of it anonymous, peak (MiB)",
        get: |r| r.controller.peak_rss_anon_mib.map(round),
    },
    Metric {
        name: "  of it file-backed, peak (MiB)",
        get: |r| r.controller.peak_rss_file_mib.map(round),
    },
    Metric {
        name: "controller CPU (s)",
        get: |r| Some(r.controller_cpu_s),
    },
    Metric {
        name: "controller CPU / node (ms)",
        get: |r| Some(r.controller_cpu_ms_per_node),
    },
    Metric {
        name: "join→pods Ready p50 (ms)",
        get: |r| Some(r.pods_ready_ms.p50),
    },
    Metric {
        name: "join→pods Ready p99 (ms)",
        get: |r| Some(r.pods_ready_ms.p99),
    },
    Metric {
        name: "kube-apiserver CPU (s)",
        get: |r| cpu(r, "kube-apiserver"),
    },
    Metric {
        name: "kube-controller-manager CPU (s)",
        get: |r| cpu(r, "kube-controller-manager"),
    },
    Metric {
        name: "kwok CPU (s)",
        get: |r| cpu(r, "kwok"),
    },
    Metric {
        name: "wall, first create→last open (s)",
        get: |r| Some(r.wall_s),
    },
];

/// The median of the values present; `None` when there is none. With an
/// even count, the mean of the two middle values.
pub fn median(values: &[Option<f64>]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub controller: String,
    /// One value per run, in the order the runs happened.
    pub values: Vec<Option<f64>>,
    pub median: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub metric: &'static str,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ContenderInfo {
    pub label: String,
    pub command: String,
    pub runs: usize,
    /// The machine's load average when each run started.
    pub loadavg_at_start: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub controllers: Vec<ContenderInfo>,
    pub metrics: Vec<Row>,
}

/// Summarises `results` (contender index, round, result), in run order.
pub fn summarise(
    contenders: &[Contender],
    commands: &[String],
    results: &[(usize, usize, Result)],
) -> Summary {
    let runs_of = |c: usize| results.iter().filter(move |(i, _, _)| *i == c);
    let controllers = contenders
        .iter()
        .enumerate()
        .map(|(c, k)| ContenderInfo {
            label: k.label.clone(),
            command: commands.get(c).cloned().unwrap_or_default(),
            runs: runs_of(c).count(),
            loadavg_at_start: runs_of(c)
                .map(|(_, _, r)| {
                    r.machine
                        .get("loadavg_at_start")
                        .cloned()
                        .unwrap_or_default()
                })
                .collect(),
        })
        .collect();
    let metrics = METRICS
        .iter()
        .map(|m| Row {
            metric: m.name,
            series: contenders
                .iter()
                .enumerate()
                .map(|(c, k)| {
                    let values: Vec<Option<f64>> =
                        runs_of(c).map(|(_, _, r)| (m.get)(r).map(round)).collect();
                    Series {
                        controller: k.label.clone(),
                        median: median(&values).map(round),
                        values,
                    }
                })
                .collect(),
        })
        .collect();
    Summary {
        controllers,
        metrics,
    }
}

fn show(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x}"))
}

/// The side-by-side table: per metric and controller, the median and, in
/// brackets, every run's value in run order.
pub fn table(s: &Summary) -> String {
    let mut out = String::from("series summary: median [per run, in run order]\n");
    for c in &s.controllers {
        out += &format!(
            "  {}: {} run(s), load average at start {:?}\n    {}\n",
            c.label, c.runs, c.loadavg_at_start, c.command
        );
    }
    out += &format!("\n{:<36}", "metric");
    for c in &s.controllers {
        out += &format!(" {:<40}", c.label);
    }
    out += "\n";
    for row in &s.metrics {
        out += &format!("{:<36}", row.metric);
        for series in &row.series {
            let runs: Vec<String> = series.values.iter().map(|v| show(*v)).collect();
            let cell = format!("{} [{}]", show(series.median), runs.join(", "));
            out += &format!(" {cell:<40}");
        }
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[Some(3.0), Some(1.0), Some(2.0)]), Some(2.0));
        assert_eq!(
            median(&[Some(4.0), Some(1.0), Some(3.0), Some(2.0)]),
            Some(2.5)
        );
        assert_eq!(median(&[Some(7.0)]), Some(7.0));
    }

    #[test]
    fn median_skips_missing_values() {
        assert_eq!(median(&[None, Some(5.0), None]), Some(5.0));
        assert_eq!(median(&[None, None]), None);
        assert_eq!(median(&[]), None);
    }

    fn run(reaction_p50: f64, load: &str) -> Result {
        use std::collections::BTreeMap;
        let record = crate::observe::Record::default();
        let usage = crate::procstat::Usage {
            peak_rss_mib: 10.0,
            vm_hwm_mib: None,
            peak_rss_anon_mib: None,
            peak_rss_file_mib: None,
            cpu_s: 2.0,
            samples: 1,
        };
        let mut r = crate::report::compute(crate::report::Inputs {
            config: crate::report::RunConfig {
                nodes: 1000,
                daemonsets: 6,
                stuck_nodes: 50,
                unrelated_pods: 0,
                controller: "c".into(),
                taint: "t:NoSchedule".into(),
                timeout_s: 1.0,
                ready_after: "1s".into(),
                ready_after_max: "2s".into(),
                kwok_parallelism: 16,
                kwok_stages: "bench".into(),
                kwok_heartbeat_s: None,
                node_monitor_grace_s: None,
            },
            machine: BTreeMap::from([("loadavg_at_start".to_string(), load.to_string())]),
            record: &record,
            timeout: std::time::Duration::from_secs(1),
            proxy: Default::default(),
            controller: usage,
            control_plane: BTreeMap::new(),
            driver: None,
            apiserver: BTreeMap::new(),
            apiserver_labels: Vec::new(),
            apiserver_node_patch: None,
            create_started: std::time::Instant::now(),
            create_s: 0.0,
            floor: None,
            controller_own: None,
        });
        r.reaction_ms.p50 = reaction_p50;
        r
    }

    #[test]
    fn runs_are_summarised_per_controller_in_run_order() {
        let contenders = vec![
            Contender {
                label: "A".into(),
                template: "a".into(),
            },
            Contender {
                label: "B".into(),
                template: "b".into(),
            },
        ];
        let results = vec![
            (0, 1, run(10.0, "1")),
            (1, 1, run(100.0, "2")),
            (0, 2, run(30.0, "3")),
            (1, 2, run(300.0, "4")),
            (0, 3, run(20.0, "5")),
        ];
        let s = summarise(&contenders, &["cmd a".into(), "cmd b".into()], &results);
        assert_eq!(s.controllers[0].runs, 3);
        assert_eq!(s.controllers[1].loadavg_at_start, vec!["2", "4"]);
        let reaction = &s.metrics[0];
        assert_eq!(reaction.metric, "reaction p50 (ms)");
        assert_eq!(
            reaction.series[0].values,
            vec![Some(10.0), Some(30.0), Some(20.0)]
        );
        assert_eq!(reaction.series[0].median, Some(20.0));
        assert_eq!(reaction.series[1].median, Some(200.0));
        let per_node = s
            .metrics
            .iter()
            .find(|m| m.metric == "controller CPU / node (ms)")
            .unwrap();
        assert_eq!(per_node.series[1].median, Some(2.0));
        let patch = s
            .metrics
            .iter()
            .find(|m| m.metric.starts_with("API server PATCH nodes p50"))
            .unwrap();
        assert_eq!(patch.series[0].median, None, "no histogram, no median");
        assert!(table(&s).contains("20 [10, 30, 20]"));
    }

    #[test]
    fn every_metric_has_a_distinct_name() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
