//! The printed table of one run: latencies, correctness, the controller's
//! API cost, and the CPU and memory of every process — the controller's next
//! to the control plane's, so a reader sees whose cost is whose.

use crate::procstat::Usage;
use crate::report::{Percentiles, Result};

/// The order the processes are printed in; any other follows.
const PROCESSES: [&str; 5] = [
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

fn peak(u: &Usage) -> f64 {
    u.vm_hwm_mib.unwrap_or(0.0).max(u.peak_rss_mib)
}

fn pct_row(name: &str, p: &Percentiles) -> String {
    format!(
        "{name:<28} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7}",
        p.p50, p.p90, p.p99, p.max, p.count
    )
}

/// The human-readable summary.
pub fn table(r: &Result) -> String {
    let mut s = String::new();
    let c = &r.config;
    s += &format!(
        "nodegate scale benchmark: N={} D={} stuck={} unrelated pods={} timeout={}s\ncontroller: {}\n",
        c.nodes, c.daemonsets, c.stuck_nodes, c.unrelated_pods, c.timeout_s, c.controller
    );
    s += &format!(
        "kwok: stages {}, {} workers, node heartbeat {}; load average at start {}\n\n",
        c.kwok_stages,
        c.kwok_parallelism,
        c.kwok_heartbeat_s
            .map_or_else(|| "kwok's own".to_string(), |h| format!("{h}s")),
        r.machine
            .get("loadavg_at_start")
            .map_or("?", String::as_str)
    );
    s += &format!(
        "{:<28} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
        "ms", "p50", "p90", "p99", "max", "n"
    );
    s += &pct_row("reaction (last Ready→open)", &r.reaction_ms);
    s += "\n";
    s += &pct_row("gate (join→open), all", &r.gate_ms);
    s += "\n";
    s += &pct_row("gate, opened by Ready", &r.gate_ready_ms);
    s += "\n";
    s += &pct_row("join→pods created", &r.pods_created_ms);
    s += "\n";
    s += &pct_row("join→pods Ready", &r.pods_ready_ms);
    s += "\n";
    s += &pct_row("deadline error", &r.deadline_error_ms);
    s += "\n";
    if let Some(q) = &r.apiserver_node_patch_ms {
        s += &format!(
            "{:<28} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>7}\n",
            "API server: PATCH nodes", q.p50, q.p90, q.p99, "", q.count
        );
    }
    if let Some(f) = &r.floor {
        s += &pct_row("floor: probe PATCH", &f.patch_ms);
        s += "\n";
        s += &pct_row("floor: pod watch delivery", &f.pod_delivery_ms);
        s += "\n";
        s += &pct_row("floor: node watch delivery", &f.node_delivery_ms);
        s += "\n";
        s += &pct_row("floor (PATCH + its delivery)", &f.floor_ms);
        s += "\n";
        s += &pct_row("reaction over the floor", &f.over_floor_ms);
        s += "\n";
    }
    if let Some(q) = r
        .controller_own
        .as_ref()
        .and_then(|o| o.event_to_patch_ms.as_ref())
    {
        s += &format!(
            "{:<28} {:>9.2} {:>9.2} {:>9.2} {:>9} {:>7}\n",
            "nodegate: event→patch sent", q.p50, q.p90, q.p99, "", q.count
        );
    }
    s += "\n";
    let k = &r.correctness;
    s += &format!(
        "opened by readiness {}   at the deadline {} (of them not stuck {})\n",
        r.opened_by_ready, r.opened_at_deadline, k.opened_at_deadline_not_stuck
    );
    s += &format!(
        "premature opens {} ({} after all were Ready once)   never opened {}   opened at deadline (not stuck) {}   re-tainted {}   watch-order inversions {}\n",
        k.premature_opens,
        k.premature_after_all_ready,
        k.never_opened,
        k.opened_at_deadline_not_stuck,
        k.retainted,
        k.watch_order_inversions
    );
    if k.opened_at_deadline_not_stuck > 0 {
        s += &format!(
            "warning: {} nodes that are not stuck opened at their deadline with pods not Ready: \
             the control plane was too slow for --timeout {}s, and this run measures it more than \
             the controller; compare runs with a longer --timeout\n",
            k.opened_at_deadline_not_stuck, c.timeout_s
        );
    }
    s += &format!(
        "node writes/node {:.3}   node GETs {}   conflicts {}   controller requests/node (non-watch) {:.3}\n",
        r.node_writes_per_node, r.node_gets, r.conflicts, r.controller_requests_per_node
    );
    s += &format!(
        "controller: peak RSS {:.1} MiB, CPU {:.2} s     wall (first create→last open) {:.1} s, node creation {:.1} s\n\n",
        r.controller_peak_rss_mib, r.controller_cpu_s, r.wall_s, r.create_s
    );
    s += "controller requests (via the counting proxy)\n";
    for row in &r.controller_requests {
        let sub = if row.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", row.subresource)
        };
        s += &format!(
            "  {:<8} {:<32} {:>8} {:>9.3}/node  {:?}\n",
            row.verb,
            format!("{}{}", row.resource, sub),
            row.total,
            row.per_node,
            row.codes
        );
    }
    s += &costs(r);
    s
}

/// CPU and peak RSS of every process: the control plane's over the
/// measurement (first node create to the end), the controller's over its
/// whole life.
fn costs(r: &Result) -> String {
    let mut s = String::from("\nprocess                       peak RSS MiB   CPU s\n");
    let row = |name: &str, rss: f64, cpu: f64| format!("  {name:<28} {rss:>11.1} {cpu:>7.2}\n");
    let mut names: Vec<&String> = r.control_plane.keys().collect();
    names.sort_by_key(|n| {
        PROCESSES
            .iter()
            .position(|p| p == n)
            .unwrap_or(PROCESSES.len())
    });
    let mut plane_cpu = 0.0;
    for name in names {
        let u = &r.control_plane[name];
        plane_cpu += u.cpu_s;
        s += &row(name, peak(u), u.cpu_s);
    }
    s += &row("control plane, together", f64::NAN, plane_cpu).replace("NaN", "   ");
    if let Some(u) = &r.driver {
        s += &row("benchmark driver", peak(u), u.cpu_s);
    }
    s += &row("controller", r.controller_peak_rss_mib, r.controller_cpu_s);
    if let (Some(anon), Some(file)) = (
        r.controller.peak_rss_anon_mib,
        r.controller.peak_rss_file_mib,
    ) {
        s += &format!(
            "  of the controller's RSS, peaks: anonymous {anon:.1} MiB, file-backed {file:.1} MiB\n"
        );
    }
    s += &format!(
        "controller CPU per gated node: {:.2} ms ({:.2} s / {} nodes)\n",
        r.controller_cpu_ms_per_node, r.controller_cpu_s, r.config.nodes
    );
    s
}
