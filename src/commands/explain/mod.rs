//! `nodegate explain NODE`: one node's gate, explained to a person. It must
//! never write to the cluster, and it judges and words nothing itself: the
//! report is `nodegate_core::gate::report`'s, from what was read run through
//! the controller's own gate, so that explain and the gate cannot disagree
//! (docs/architecture.md, "explain and status"). Only [`main`] and
//! [`gather`] do I/O or read the clock.

mod table;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::process::ExitCode;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use nodegate_core::gate::report::{self, ReadFacts};
pub use nodegate_core::gate::report::{MemberRow, PodDetail, Report, TaintSplit, TermResult};
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

use crate::cluster::{project, snapshot};
use crate::commands::doctor::source;
use crate::commands::output;
use crate::error::{Error, Result};
use crate::settings::cli::{ExplainArgs, OutputFormat};
use crate::settings::config::{self, GateSettings};

pub use table::{human_age, render_table, wrap};

/// The human table is laid out for a terminal this wide.
pub const TABLE_WIDTH: usize = 100;
/// `-o wide`: wide enough that no reason is wrapped in practice.
pub const WIDE_WIDTH: usize = 1000;

/// Runs `nodegate explain`: the settings are checked before any cluster
/// access (exit 2); warnings about odd objects go to stderr.
pub async fn main(args: ExplainArgs) -> Result<ExitCode> {
    source::refuse_gate_flags_with_from_cluster(&args.installed, &args.gate, &[])?;
    let given = match args.installed.from_cluster {
        true => None,
        false => {
            let mut file = config::load_file(&args.gate)?;
            Some(config::gate_settings(&args.gate, &mut file)?)
        }
    };
    let client = output::connect(&output::connection(&args.cluster)?).await?;
    let settings = match given {
        Some(s) => s,
        None => {
            source::installed_settings(&client, &args.installed)
                .await?
                .gate
        }
    };
    // API times have whole seconds; so does `now`, so that durations read
    // "Ready for 3s", not "Ready for 3.412s".
    let now = Timestamp::now();
    let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let view = gather(&client, &args.node, &settings, now).await?;
    for w in &view.warnings {
        eprintln!("warning: {w}");
    }
    let report = build_report(&view, &settings, now);
    let width = match args.output {
        OutputFormat::Wide => WIDE_WIDTH,
        _ => TABLE_WIDTH,
    };
    let text = output::encode(&report, args.output, "the report")?;
    let text = text.unwrap_or_else(|| render_table(&report, width));
    output::print(text.as_bytes(), "cannot write the report")?;
    Ok(ExitCode::SUCCESS)
}

/// Everything the report is built from, already projected.
#[derive(Debug, Clone)]
pub struct ClusterView {
    pub node: NodeInfo,
    pub daemonsets: Vec<DaemonSetInfo>,
    /// Pods bound to the node.
    pub pods: Vec<PodInfo>,
    /// DaemonSet pods created for the node but not bound to it yet: they
    /// never satisfy a member, but they say why a member has no pod here.
    pub unscheduled: Vec<PodInfo>,
    /// What the full Pod objects say beyond the compact model, by
    /// `namespace/name`.
    pub details: BTreeMap<String, PodDetail>,
    /// Odd objects the projections had to work around.
    pub warnings: Vec<String>,
}

/// The gate configuration the controller builds from the same settings, in
/// dry-run and without a deadline: explain shows what the gate waits for,
/// never asks for a write, and has no gate start to count a deadline from.
/// The one place explain turns settings into a `Config`.
pub fn gate_config(settings: &GateSettings) -> Config {
    settings.gate_config(
        config::Timeouts::default(),
        nodegate_core::vocab::config::OnTimeout::Open,
        true,
    )
}

/// Builds the report from what was read, through the gate, at `now`.
pub fn build_report(view: &ClusterView, settings: &GateSettings, now: Timestamp) -> Report {
    let facts = ReadFacts {
        unscheduled: view.unscheduled.clone(),
        details: view.details.clone(),
    };
    report::explain(
        &view.node,
        &view.daemonsets,
        &view.pods,
        &facts,
        &gate_config(settings),
        now,
    )
}

/// Reads the node, all DaemonSets and the pods on the node; and, only when
/// some expected DaemonSet has no pod here, the unscheduled pods the
/// DaemonSet controller aimed at the node.
pub async fn gather(
    client: &kube::Client,
    node_name: &str,
    settings: &GateSettings,
    now: Timestamp,
) -> Result<ClusterView> {
    let mut warnings = Vec::new();
    let with_slices = !settings.dra_drivers.is_empty();
    let node = snapshot::node(client, node_name, with_slices, &mut warnings).await?;
    let daemonsets = snapshot::daemonsets(client, &mut warnings)
        .await
        .map_err(Error::kube("cannot list DaemonSets"))?;
    let on_node = snapshot::pods_on(client, node_name, with_detail)
        .await
        .map_err(Error::kube(format!(
            "cannot list the pods on node {node_name:?}"
        )))?;
    let mut details = BTreeMap::new();
    let pods = keep_details(on_node, &mut details);
    let mut view = ClusterView {
        node,
        daemonsets,
        pods,
        unscheduled: Vec::new(),
        details,
        warnings,
    };
    // A cluster can hold many pending pods; list them only when they can
    // explain something.
    let cfg = gate_config(settings);
    let state = report::gate_state(&view.node, &view.daemonsets, &view.pods, &cfg, now);
    if report::some_daemonset_has_no_pod(&state, &cfg, now) {
        let aimed = snapshot::unscheduled_for(client, node_name, with_detail)
            .await
            .map_err(Error::kube("cannot list unscheduled pods"))?;
        view.unscheduled = keep_details(aimed, &mut view.details);
    }
    Ok(view)
}

fn with_detail(p: &Pod) -> Option<(PodInfo, PodDetail)> {
    project::pod(p).map(|info| (info, pod_detail(p)))
}

fn keep_details(
    read: Vec<(PodInfo, PodDetail)>,
    details: &mut BTreeMap<String, PodDetail>,
) -> Vec<PodInfo> {
    read.into_iter()
        .map(|(info, detail)| {
            details.insert(info.key(), detail);
            info
        })
        .collect()
}

/// Long kubelet messages (image pull errors, say) would drown the table.
const MESSAGE_LIMIT: usize = 160;

fn shorten(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(MESSAGE_LIMIT) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// What a full Pod adds to the compact model: plain data for the report.
pub fn pod_detail(p: &Pod) -> PodDetail {
    let status = p.status.as_ref();
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .filter(|c| c.status == "False")
        .map(|c| {
            let reason = c.reason.as_deref().unwrap_or("").trim();
            let message = c.message.as_deref().unwrap_or("").trim();
            // The scheduler's message is "0/4 nodes are available: 1 Insufficient
            // cpu, ..." followed by what preemption tried; the first sentence is
            // the answer.
            let first_sentence = message.find(". ").map_or(message, |i| &message[..=i]);
            match (reason.is_empty(), message.is_empty()) {
                (_, false) => shorten(first_sentence),
                (false, true) => reason.to_string(),
                (true, true) => "no reason given".to_string(),
            }
        });
    let containers = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .filter(|c| !c.ready)
        .filter_map(|c| {
            let state = c.state.as_ref()?;
            let what = if let Some(w) = &state.waiting {
                let reason = w.reason.as_deref().unwrap_or("waiting");
                match w.message.as_deref().filter(|m| !m.trim().is_empty()) {
                    Some(m) => format!("{reason}: {}", shorten(m)),
                    None => reason.to_string(),
                }
            } else if state.running.is_some() {
                // Names the container whose readiness probe holds the pod back.
                "running but not Ready".to_string()
            } else {
                let t = state.terminated.as_ref().filter(|t| t.exit_code != 0)?;
                let reason = t.reason.as_deref().unwrap_or("Error");
                format!("{reason}, exit code {}", t.exit_code)
            };
            Some(format!("container {}: {what}", c.name))
        })
        .collect();
    PodDetail {
        unschedulable,
        containers,
    }
}
