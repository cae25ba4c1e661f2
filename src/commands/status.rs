//! `nodegate status [--watch]`: the gated nodes of a cluster, as a table.
//! Each node runs through the very gate the controller runs, on a snapshot,
//! so the table cannot disagree with the controller about what is expected,
//! what is Ready and when the deadline falls (docs/architecture.md,
//! "explain and status"). It must never write to the cluster. Only [`main`],
//! `table_now` and [`gather`] read the cluster or the clock.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use nodegate_core::gate::{self, GateState, Input};
use nodegate_core::vocab::backoff::Backoff;
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::member::Readiness;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

use crate::cluster::{project, snapshot};
use crate::commands::doctor::source;
use crate::commands::output;
use crate::error::{Error, Result};
use crate::settings::cli::{OutputFormat, StatusArgs};
use crate::settings::config::{self, StatusSettings};

/// Blockers named in the table before "+N more".
const MAX_BLOCKERS_SHOWN: usize = 3;

/// What the cluster shows, projected.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Nodes carrying a managed taint.
    pub nodes: Vec<NodeInfo>,
    pub daemonsets: Vec<DaemonSetInfo>,
    /// Pods bound to each gated node.
    pub pods: BTreeMap<String, Vec<PodInfo>>,
}

/// One line of the table (and one element of `-o json|yaml`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Row {
    pub node: String,
    /// `start-up`, or `re-gated: MEMBERS|reboot` for an open node nodegate
    /// closed again.
    pub gate: String,
    pub age: String,
    pub ready: String,
    pub blocked_by: String,
    pub deadline: String,
    /// Expected members that are Ready, and expected members.
    pub members_ready: usize,
    pub members_expected: usize,
    /// Every blocker (`blocked_by` shows the first few): what `-o wide`
    /// shows.
    pub blockers: Vec<String>,
}

pub async fn main(args: StatusArgs) -> Result<ExitCode> {
    source::refuse_gate_flags_with_from_cluster(
        &args.installed,
        &args.gate,
        &[("--timeout", args.timeout.is_some())],
    )?;
    let mut settings = config::status_settings(&args)?;
    let format = args.output;
    let client = output::connect(&output::connection(&args.cluster)?).await?;
    if args.installed.from_cluster {
        let run = source::installed_settings(&client, &args.installed).await?;
        settings.gate = run.gate;
        settings.timeout = run.timeout;
    }
    if !settings.watch {
        output::print(
            table_now(&client, &settings, format).await?.as_bytes(),
            "cannot write the table",
        )?;
        return Ok(ExitCode::SUCCESS);
    }

    // Redrawn in place only as a table for a person; json and yaml follow
    // one another, as kubectl's `-w -o json`.
    let tty = std::io::stdout().is_terminal()
        && matches!(format, OutputFormat::Table | OutputFormat::Wide);
    let mut drawn_lines = 0usize;
    // While the cluster does not answer: said once, then asked less and
    // less often (doubling up to WATCH_BACKOFF_MAX), never a line a try.
    let mut failures = 0u32;
    let backoff = Backoff::new(
        settings.interval.saturating_mul(2),
        WATCH_BACKOFF_MAX.max(settings.interval),
    );
    loop {
        match table_now(&client, &settings, format).await {
            Ok(mut text) => {
                if failures > 0 {
                    eprintln!("the cluster answers again");
                }
                failures = 0;
                if tty {
                    text.push_str(&format!(
                        "refreshed {} UTC every {} (Ctrl-C to stop)\n",
                        Timestamp::now().strftime("%H:%M:%S"),
                        humantime::format_duration(settings.interval)
                    ));
                    // Back to the first line of the previous table, then
                    // clear to the end of the screen: an update in place,
                    // scrollback intact.
                    if drawn_lines > 0 {
                        text.insert_str(0, &format!("\x1b[{drawn_lines}F\x1b[J"));
                    }
                    drawn_lines = text.lines().count();
                } else if format == OutputFormat::Yaml {
                    text.insert_str(0, "---\n");
                } else {
                    text.push('\n');
                }
                output::print(text.as_bytes(), "cannot write the table")?;
            }
            Err(e) => {
                if failures == 0 {
                    eprintln!(
                        "error: {}; still trying, less often while it fails (Ctrl-C to stop)",
                        e.report()
                    );
                    // The next table is drawn below the message.
                    drawn_lines = 0;
                }
                failures = failures.saturating_add(1);
            }
        }
        let delay = match failures {
            0 => settings.interval,
            n => backoff.ceiling(n),
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// The longest `status --watch` waits between two tries while the cluster
/// does not answer (or --interval, if longer).
const WATCH_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// The table, now. The gate runs in dry-run (`Config::from` a
/// `StatusSettings`): the table shows what the gate would decide and never
/// asks for a write.
async fn table_now(
    client: &kube::Client,
    settings: &StatusSettings,
    format: OutputFormat,
) -> Result<String> {
    let snapshot = gather(client, settings).await?;
    let now = Timestamp::now();
    let rows = rows(&snapshot, &Config::from(settings), now);
    let wide = format == OutputFormat::Wide;
    Ok(output::encode(&rows, format, "the status")?.unwrap_or_else(|| render(&rows, wide)))
}

/// Reads what the table needs: every node (to find the gated ones), every
/// DaemonSet, and the pods bound to each gated node (never every pod).
pub async fn gather(client: &kube::Client, settings: &StatusSettings) -> Result<Snapshot> {
    let nodes = snapshot::nodes(client)
        .await
        .map_err(Error::kube("listing nodes"))?;
    let config = Config::from(settings);
    let mut gated = gated(&nodes, &config);
    if gated.is_empty() {
        return Ok(Snapshot::default());
    }
    // As the controller sees them (its CSINode watch, and its ResourceSlice
    // watch, which runs only with draDrivers); unreadable, none.
    snapshot::add_devices(client, &mut gated, !config.dra_drivers.is_empty()).await;
    // status shows no warnings: a DaemonSet it cannot project is left out.
    let daemonsets = snapshot::daemonsets(client, &mut Vec::new())
        .await
        .map_err(Error::kube("listing DaemonSets"))?;
    let names = gated.iter().map(|n| n.name.clone());
    let pods = snapshot::pods_on_each(client, names, project::pod)
        .await
        .map_err(|failed| Error::Kube {
            what: format!("listing the pods on node {}", failed.node),
            source: failed.source,
        })?;
    Ok(Snapshot {
        nodes: gated,
        daemonsets,
        pods,
    })
}

/// The nodes `cfg` gates (those carrying a managed taint), projected; a
/// node the projection cannot name is left out.
pub fn gated(nodes: &[Node], cfg: &Config) -> Vec<NodeInfo> {
    let named = nodes.iter().filter_map(|n| project::node(n).0);
    named.filter(|n| cfg.gates(n)).collect()
}

/// Runs each gated node through the gate, on the snapshot, at `now`.
pub fn rows(snapshot: &Snapshot, cfg: &Config, now: Timestamp) -> Vec<Row> {
    let mut rows: Vec<Row> = snapshot
        .nodes
        .iter()
        .map(|node| {
            let mut state = GateState::default();
            let input = Input::snapshot(
                node.clone(),
                snapshot.daemonsets.clone(),
                snapshot.pods.get(&node.name).cloned().unwrap_or_default(),
            );
            gate::step(&mut state, &input, cfg, now);
            row(node, &state, cfg, now)
        })
        .collect();
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    rows
}

fn row(node: &NodeInfo, state: &GateState, cfg: &Config, now: Timestamp) -> Row {
    let expected = state.expected().count();
    let ready = state
        .expected()
        .filter(|(_, m)| m.readiness.as_ref().is_some_and(Readiness::is_ready))
        .count();
    let blockers = state.blockers();
    // The node itself first, when it keeps the gate closed (semantics.md §5.1).
    let node_blocks = state
        .node_wait_reason()
        .map(|_| gate::NODE_NOT_READY.to_string());
    let all: Vec<String> = node_blocks
        .iter()
        .cloned()
        .chain(blockers.iter().map(|b| b.member.to_string()))
        .collect();
    let shown = MAX_BLOCKERS_SHOWN + usize::from(node_blocks.is_some());
    let mut blocked: Vec<String> = all.iter().take(shown).cloned().collect();
    if blockers.len() > MAX_BLOCKERS_SHOWN {
        blocked.push(format!("+{} more", blockers.len() - MAX_BLOCKERS_SHOWN));
    }
    let start = state.gate_start().unwrap_or(node.created);
    let deadline = match state.timers.deadline {
        None => "none".to_string(),
        Some(at) if at > now => short_duration(at.duration_since(now)),
        Some(at) => format!("passed {} ago", short_duration(now.duration_since(at))),
    };
    // Why the node is closed: a new node's start-up, or a re-gate (and what
    // for, as `nodegate.dev/regated-for` says).
    let regate = cfg.regate.as_ref();
    let regated = regate.is_some_and(|rc| node.taints.iter().any(|t| rc.taint.matches(t)));
    let gate = match (regated, node.regated_for.as_deref()) {
        (true, Some(why)) => format!("re-gated: {why}"),
        (true, None) => "re-gated".to_string(),
        (false, _) => "start-up".to_string(),
    };
    Row {
        node: node.name.clone(),
        gate,
        age: short_duration(now.duration_since(start)),
        ready: format!("{ready}/{expected} ready"),
        blocked_by: if blocked.is_empty() {
            "-".to_string()
        } else {
            blocked.join(", ")
        },
        deadline,
        members_ready: ready,
        members_expected: expected,
        blockers: all,
    }
}

/// kubectl-style: `45s`, `2m05s`, `3h12m`, `2d4h`.
pub fn short_duration(d: jiff::SignedDuration) -> String {
    let s = d.as_secs().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

/// The table; `wide` (`-o wide`) lists every blocker, not the first few.
pub fn render(rows: &[Row], wide: bool) -> String {
    if rows.is_empty() {
        return "No gated nodes.\n".to_string();
    }
    let header = ["NODE", "GATE", "AGE", "READY", "BLOCKED BY", "DEADLINE"].map(String::from);
    let cells = rows.iter().map(|r| {
        let blocked = match wide && !r.blockers.is_empty() {
            true => r.blockers.join(", "),
            false => r.blocked_by.clone(),
        };
        let r = r.clone();
        vec![r.node, r.gate, r.age, r.ready, blocked, r.deadline]
    });
    let lines: Vec<Vec<String>> = std::iter::once(header.into()).chain(cells).collect();
    output::aligned(&lines, "   ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use nodegate_core::testutil::{
        ds_pod, mk_ds, mk_node, taint, template_with_tolerations, toleration, ts,
    };
    use nodegate_core::vocab::model::PodInfo;

    const TAINT: &str = "nodegate.dev/initializing";

    fn tolerant(name: &str) -> DaemonSetInfo {
        mk_ds(
            "infra",
            name,
            template_with_tolerations(vec![toleration("", "Exists", "", "")]),
        )
    }

    fn cfg(timeout: Option<u64>) -> Config {
        Config {
            scope: Default::default(),
            timeout: timeout.map(Duration::from_secs),
            dry_run: true,
            ..Config::default()
        }
    }

    #[test]
    fn rows_count_ready_members_name_blockers_and_the_time_left() {
        let dss: Vec<_> = ["a", "b", "c", "d", "e"].map(tolerant).into();
        let node = mk_node("n1", &[], vec![taint(TAINT, "NoSchedule")]);
        let mut pods: Vec<PodInfo> = vec![ds_pod("a-1", "n1", &dss[0])];
        pods.push(PodInfo {
            ready: false,
            ..ds_pod("b-1", "n1", &dss[1])
        });
        let snap = Snapshot {
            nodes: vec![node],
            daemonsets: dss,
            pods: BTreeMap::from([("n1".to_string(), pods)]),
        };
        let rows = rows(&snap, &cfg(Some(120)), ts(55));
        assert_eq!(
            rows,
            vec![Row {
                node: "n1".into(),
                gate: "start-up".into(),
                age: "55s".into(),
                ready: "1/5 ready".into(),
                blocked_by: "infra/b, infra/c, infra/d, +1 more".into(),
                deadline: "1m05s".into(),
                members_ready: 1,
                members_expected: 5,
                blockers: ["infra/b", "infra/c", "infra/d", "infra/e"]
                    .map(String::from)
                    .to_vec(),
            }]
        );
        let late = super::rows(&snap, &cfg(Some(30)), ts(55));
        assert_eq!(late[0].deadline, "passed 25s ago");
        let none = super::rows(&snap, &cfg(None), ts(55));
        assert_eq!(none[0].deadline, "none");
    }

    #[test]
    fn device_members_are_counted_and_named_like_the_others() {
        use nodegate_core::rules::devices::{CriticalResource, DraDriver};
        let mut node = mk_node("n1", &[], vec![taint(TAINT, "NoSchedule")]);
        node.extended_allocatable
            .insert("nvidia.com/gpu".into(), "4".into());
        node.resource_slices = vec![nodegate_core::vocab::model::SliceInfo {
            name: "s1".into(),
            driver: "gpu.nvidia.com".into(),
            pool: "n1".into(),
            generation: 1,
            slice_count: 2,
            owner_uid: node.uid.clone(),
        }];
        let mut c = cfg(Some(120));
        c.resources = vec![CriticalResource {
            resource: "nvidia.com/gpu".into(),
            node_selector: None,
        }];
        c.dra_drivers = vec![DraDriver {
            driver: "gpu.nvidia.com".into(),
            node_selector: None,
        }];
        let snap = Snapshot {
            nodes: vec![node],
            pods: BTreeMap::new(),
            daemonsets: Vec::new(),
        };
        let rows = rows(&snap, &c, ts(55));
        assert_eq!(rows[0].ready, "1/2 ready");
        assert_eq!(rows[0].blocked_by, "dra:gpu.nvidia.com");
    }

    #[test]
    fn a_node_that_is_not_ready_is_named_as_its_own_blocker() {
        let dss = vec![tolerant("a")];
        let mut node = mk_node("n1", &[], vec![taint(TAINT, "NoSchedule")]);
        node.ready = nodegate_core::vocab::model::NodeReady::Unknown;
        let snap = Snapshot {
            nodes: vec![node],
            pods: BTreeMap::from([("n1".to_string(), vec![ds_pod("a-1", "n1", &dss[0])])]),
            daemonsets: dss,
        };
        let rows = rows(&snap, &cfg(Some(120)), ts(55));
        assert_eq!(rows[0].ready, "1/1 ready");
        assert_eq!(rows[0].blocked_by, "the node is not Ready");
    }

    #[test]
    fn a_regated_node_says_what_for_and_takes_the_regate_deadline() {
        use nodegate_core::rules::placement::ManagedTaint;
        use nodegate_core::vocab::config::RegateConfig;
        let degraded = ManagedTaint::new("nodegate.dev/degraded", "NoSchedule");
        let mut c = cfg(Some(120));
        c.placement.managed_taints.push(degraded.clone());
        c.regate = Some(RegateConfig {
            after: Duration::from_secs(60),
            taint: degraded,
            timeout: None,
            on_reboot: false,
            max_unavailable: Default::default(),
        });
        let dss = vec![tolerant("agent")];
        let mut node = mk_node(
            "n1",
            &[],
            vec![taint("nodegate.dev/degraded", "NoSchedule")],
        );
        node.regated_for = Some("infra/agent".into());
        node.gated_since = Some(ts(50));
        let snap = Snapshot {
            nodes: vec![node],
            pods: BTreeMap::new(),
            daemonsets: dss,
        };
        let rows = rows(&snap, &c, ts(500));
        assert_eq!(rows[0].gate, "re-gated: infra/agent");
        assert_eq!(rows[0].age, "7m30s");
        assert_eq!(rows[0].blocked_by, "infra/agent");
        assert_eq!(rows[0].deadline, "none", "--regate-timeout 0: no deadline");
    }

    #[test]
    fn gated_picks_the_nodes_with_a_managed_taint_inside_the_scope() {
        use nodegate_core::rules::placement::ManagedTaint;
        use nodegate_core::rules::selector::LabelSelector;
        let node = |name: Option<&str>, labels: serde_json::Value, taint: Option<&str>| -> Node {
            let taints: Vec<serde_json::Value> = taint
                .map(|k| serde_json::json!({"key": k, "effect": "NoSchedule"}))
                .into_iter()
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": labels,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"taints": taints},
            }))
            .unwrap()
        };
        let pool = serde_json::json!({"pool": "gpu"});
        let nodes = vec![
            node(Some("gated"), pool.clone(), Some(TAINT)),
            node(Some("open"), pool.clone(), None),
            node(Some("other-taint"), pool.clone(), Some("example.com/other")),
            node(
                Some("outside"),
                serde_json::json!({"pool": "cpu"}),
                Some(TAINT),
            ),
            node(None, pool, Some(TAINT)),
        ];
        let mut c = cfg(None);
        c.placement
            .managed_taints
            .push(ManagedTaint::new(TAINT, "NoSchedule"));
        c.scope.node_selector = Some(LabelSelector::parse("pool=gpu").unwrap());
        let names: Vec<String> = gated(&nodes, &c).into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["gated"]);
        c.scope.node_selector = None;
        let names: Vec<String> = gated(&nodes, &c).into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["gated", "outside"]);
    }

    #[test]
    fn the_table_is_aligned_and_says_so_when_empty() {
        assert_eq!(render(&[], false), "No gated nodes.\n");
        let t = render(
            &[
                Row {
                    node: "node-long-name".into(),
                    gate: "start-up".into(),
                    age: "5s".into(),
                    ready: "0/1 ready".into(),
                    blocked_by: "infra/csi".into(),
                    deadline: "1m55s".into(),
                    members_ready: 0,
                    members_expected: 1,
                    blockers: vec!["infra/csi".into()],
                },
                Row {
                    node: "n2".into(),
                    gate: "re-gated: infra/csi".into(),
                    age: "2m05s".into(),
                    ready: "3/3 ready".into(),
                    blocked_by: "-".into(),
                    deadline: "none".into(),
                    members_ready: 3,
                    members_expected: 3,
                    blockers: vec![],
                },
            ],
            false,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        let col = |l: &str, word: &str| l.find(word).expect(word);
        assert_eq!(col(lines[0], "AGE"), col(lines[1], "5s"));
        assert_eq!(col(lines[0], "DEADLINE"), col(lines[2], "none"));
        assert_eq!(col(lines[0], "BLOCKED BY"), col(lines[1], "infra/csi"));
    }

    #[test]
    fn short_durations_read_like_kubectl() {
        let s = jiff::SignedDuration::from_secs;
        for (secs, want) in [
            (0, "0s"),
            (59, "59s"),
            (65, "1m05s"),
            (3600, "1h00m"),
            (90061, "1d1h"),
            (-5, "0s"),
        ] {
            assert_eq!(short_duration(s(secs)), want);
        }
    }
}
