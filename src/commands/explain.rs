//! `nodegate explain NODE`: one node's gate, explained to a person.
//!
//! This module owns the explain command. It reads the node, every DaemonSet
//! and the pods bound to (or aimed at) the node once, builds a [`Report`] with
//! the very placement and readiness functions the controller's gate uses, and
//! prints it as an aligned table or as one JSON object. It must never write to
//! the cluster, and it must never judge a member by rules of its own: every
//! "expected" and every "Ready" comes from `nodegate_core::placement` and
//! `nodegate_core::readiness`, so that explain and the gate cannot disagree.
//! Only [`main`] and [`gather`] do I/O or read the clock; building and
//! rendering the report are pure functions of their arguments.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde::Serialize;

use nodegate_core::gate;
use nodegate_core::model::{DaemonSetInfo, NodeInfo, PodInfo, Taint};
use nodegate_core::placement::{
    self, NODE_NAME_FIELD, NODE_OP_IN, NotExpectedReason, PlacementConfig, Verdict,
};
use nodegate_core::readiness::{self, CriticalPodEntry, MemberState, Waiting};

use crate::cluster::client::client;
use crate::cluster::project;
use crate::error::{EXIT_FAILURE, EXIT_USAGE};
use crate::settings::cli::{ExplainArgs, OutputFormat};
use crate::settings::config::{self, ConfigError, GateSettings};

/// The human table is laid out for a terminal this wide.
pub const TABLE_WIDTH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    #[error("{what}: {source:#}")]
    Cluster { what: String, source: anyhow::Error },
}

impl ExplainError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ExplainError::Config(_) => EXIT_USAGE,
            ExplainError::NodeNotFound(_) | ExplainError::Cluster { .. } => EXIT_FAILURE,
        }
    }
}

fn cluster_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ExplainError {
    let what = what.into();
    move |e| ExplainError::Cluster {
        what,
        source: e.into(),
    }
}

// ---------------------------------------------------------------------------
// The command

/// Runs `nodegate explain`: validates the settings (exit 2 before any cluster
/// access), reads the cluster, prints the report on stdout. Warnings about odd
/// objects and errors go to stderr.
pub async fn main(args: ExplainArgs) -> ExitCode {
    let text = match explain(&args).await {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // `nodegate explain n | head` is not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the report: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

async fn explain(args: &ExplainArgs) -> Result<String, ExplainError> {
    let mut file = config::load_file(&args.gate)?;
    let settings = config::gate_settings(&args.gate, &mut file)?;
    let client = client().await.map_err(|source| ExplainError::Cluster {
        what: "cannot connect to the cluster".into(),
        source: source.into(),
    })?;
    // API times have whole seconds; so does `now`, so that durations read
    // "Ready for 3s", not "Ready for 3.412s".
    let now = Timestamp::now();
    let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let view = gather(&client, &args.node, &settings, now).await?;
    for w in &view.warnings {
        eprintln!("warning: {w}");
    }
    let report = build_report(&view, &settings, now);
    match args.output {
        OutputFormat::Table => Ok(render_table(&report, TABLE_WIDTH)),
        OutputFormat::Json => serde_json::to_string_pretty(&report)
            .map(|s| s + "\n")
            .map_err(|e| ExplainError::Cluster {
                what: "cannot encode the report as JSON".into(),
                source: e.into(),
            }),
    }
}

// ---------------------------------------------------------------------------
// Reading the cluster

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

/// Reads the node, all DaemonSets and the pods on the node; and, only when
/// some expected DaemonSet has no pod here, the unscheduled pods the
/// DaemonSet controller aimed at the node.
pub async fn gather(
    client: &kube::Client,
    node_name: &str,
    settings: &GateSettings,
    now: Timestamp,
) -> Result<ClusterView, ExplainError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let raw_node = nodes
        .get_opt(node_name)
        .await
        .map_err(cluster_error(format!("cannot read node {node_name:?}")))?
        .ok_or_else(|| ExplainError::NodeNotFound(node_name.to_string()))?;
    let (node, oddities) = project::node(&raw_node);
    let mut warnings: Vec<String> = oddities
        .into_iter()
        .map(|o| format!("{}: {}", o.object, o.what))
        .collect();
    let node = node.ok_or_else(|| ExplainError::Cluster {
        what: format!("node {node_name:?}"),
        source: anyhow::anyhow!("the API server returned a node without a name"),
    })?;

    let daemonsets: Api<DaemonSet> = Api::all(client.clone());
    let mut dss: Vec<DaemonSetInfo> = Vec::new();
    for ds in daemonsets
        .list(&ListParams::default())
        .await
        .map_err(cluster_error("cannot list DaemonSets"))?
    {
        match project::daemonset(&ds) {
            Some(info) => dss.push(info),
            None => warnings.push("a DaemonSet without namespace or name was skipped".into()),
        }
    }

    let pods_api: Api<Pod> = Api::all(client.clone());
    let on_node = pods_api
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .map_err(cluster_error(format!(
            "cannot list the pods on node {node_name:?}"
        )))?;
    let mut details = BTreeMap::new();
    let mut pods = Vec::new();
    for p in &on_node {
        if let Some(info) = project::pod(p) {
            details.insert(info.key(), pod_detail(p));
            pods.push(info);
        }
    }

    let mut view = ClusterView {
        node,
        daemonsets: dss,
        pods,
        unscheduled: Vec::new(),
        details,
        warnings,
    };
    // A cluster can hold many pending pods; list them only when they can
    // explain something.
    if some_expected_daemonset_has_no_pod(&view, &settings.placement, now) {
        let pending = pods_api
            .list(&ListParams::default().fields("spec.nodeName=,status.phase=Pending"))
            .await
            .map_err(cluster_error("cannot list unscheduled pods"))?;
        for p in pending.iter().filter(|p| aimed_at(p, node_name)) {
            if let Some(info) = project::pod(p) {
                view.details.insert(info.key(), pod_detail(p));
                view.unscheduled.push(info);
            }
        }
    }
    Ok(view)
}

fn some_expected_daemonset_has_no_pod(
    view: &ClusterView,
    cfg: &PlacementConfig,
    now: Timestamp,
) -> bool {
    view.daemonsets.iter().any(|ds| {
        placement::evaluate(&view.node, ds, cfg).is_expected()
            && readiness::daemonset_member(ds, &view.pods, now)
                == MemberState::NotReady(Waiting::NoPod)
    })
}

/// Whether an unbound pod was made for `node`: the DaemonSet controller pins
/// each daemon pod with a required `matchFields` term on `metadata.name`.
pub fn aimed_at(pod: &Pod, node: &str) -> bool {
    let Some(terms) = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|sel| &sel.node_selector_terms)
    else {
        return false;
    };
    terms.iter().any(|t| {
        t.match_fields.iter().flatten().any(|r| {
            r.key == NODE_NAME_FIELD
                && r.operator == NODE_OP_IN
                && r.values.iter().flatten().any(|v| v == node)
        })
    })
}

/// What a full Pod says about why it is not Ready, beyond the compact model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDetail {
    /// The `PodScheduled` condition is False: its reason and message.
    pub unschedulable: Option<String>,
    /// Containers (init containers first) that are not Ready and waiting,
    /// running, or terminated with a failure: "container NAME: Reason".
    pub containers: Vec<String>,
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

/// The scheduler's message is "0/4 nodes are available: 1 Insufficient cpu,
/// ..." followed by what preemption tried; the first sentence is the answer.
fn first_sentence(message: &str) -> &str {
    match message.find(". ") {
        Some(i) => &message[..=i],
        None => message,
    }
}

pub fn pod_detail(p: &Pod) -> PodDetail {
    let status = p.status.as_ref();
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .filter(|c| c.status == "False")
        .map(|c| {
            let reason = c.reason.as_deref().unwrap_or("").trim();
            let message = c.message.as_deref().unwrap_or("").trim();
            match (reason.is_empty(), message.is_empty()) {
                (_, false) => shorten(first_sentence(message)),
                (false, true) => reason.to_string(),
                (true, true) => "no reason given".to_string(),
            }
        });
    let mut containers = Vec::new();
    let all = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .filter(|c| !c.ready);
    for c in all {
        let state = c.state.as_ref();
        if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.as_deref().unwrap_or("waiting");
            match w.message.as_deref().filter(|m| !m.trim().is_empty()) {
                Some(m) => {
                    containers.push(format!("container {}: {reason}: {}", c.name, shorten(m)))
                }
                None => containers.push(format!("container {}: {reason}", c.name)),
            }
        } else if state.is_some_and(|s| s.running.is_some()) {
            // Names the container whose readiness probe holds the pod back.
            containers.push(format!("container {}: running but not Ready", c.name));
        } else if let Some(t) = state.and_then(|s| s.terminated.as_ref())
            && t.exit_code != 0
        {
            let reason = t.reason.as_deref().unwrap_or("Error");
            containers.push(format!(
                "container {}: {reason}, exit code {}",
                c.name, t.exit_code
            ));
        }
    }
    PodDetail {
        unschedulable,
        containers,
    }
}

// ---------------------------------------------------------------------------
// The report

/// One node's gate, as explain shows it. Its JSON form is the `-o json`
/// output; the fields below are a stable interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub node: String,
    /// The node carries at least one of nodegate's managed taints.
    pub gated: bool,
    /// Every expected member is Ready now, and so is the node itself, so a
    /// gated node would open. Also computed for a node that is not gated: it
    /// says whether it would open at once if it were.
    pub would_open: bool,
    /// Why the node itself keeps its gate closed (its Ready condition is not
    /// True, or it carries the not-ready or unreachable taint), in the gate's
    /// words; null when the node is Ready.
    pub node_not_ready: Option<String>,
    /// The gate's answer in one sentence.
    pub verdict: String,
    pub evaluated_at: Timestamp,
    pub created: Timestamp,
    /// Expected members (DaemonSets and critical pods) and how many of them
    /// are Ready.
    pub expected_members: usize,
    pub ready_members: usize,
    /// Sorted by namespace, then name.
    pub daemonsets: Vec<MemberRow>,
    /// In configuration order.
    pub critical_pods: Vec<MemberRow>,
    pub taints: TaintSplit,
}

/// One DaemonSet or critical-pod entry on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberRow {
    pub namespace: String,
    pub name: String,
    pub expected: bool,
    /// Why it is (or is not) expected here, in words.
    pub reason: String,
    /// `reason` as a stable name: "expected", or a placement reason code
    /// such as "node_selector" or "starts_after_gate".
    pub reason_code: String,
    /// Null when not expected.
    pub ready: Option<bool>,
    /// The pod that satisfies the member, or the one it waits on.
    pub pod: Option<String>,
    /// What it waits for; null when Ready or not expected.
    pub waiting: Option<String>,
    /// Each required node affinity term's result, in order (DaemonSets with
    /// a required node affinity only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<Vec<TermResult>>,
    /// The entry's pod selector (critical pods only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// How the member is named in the table and the verdict.
    #[serde(skip)]
    pub label: String,
    /// Further lines for the table's WHY column.
    #[serde(skip)]
    pub detail: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TermResult {
    /// 1-based: term 1 is `nodeSelectorTerms[0]`.
    pub term: usize,
    pub matches: bool,
    /// Why it does not match; null when it does.
    pub why: Option<String>,
}

/// The node's taints as nodegate sees them, each as `key[=value]:Effect`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaintSplit {
    /// nodegate's own: what the gate lifts.
    pub managed: Vec<String>,
    /// Lifted by some other agent during start-up; ignored for placement.
    pub transient: Vec<String>,
    pub other: Vec<String>,
}

pub fn split_taints(taints: &[Taint], cfg: &PlacementConfig) -> TaintSplit {
    let mut split = TaintSplit::default();
    for t in taints {
        let bucket = if cfg.is_managed(t) {
            &mut split.managed
        } else if cfg.is_transient(t) {
            &mut split.transient
        } else {
            &mut split.other
        };
        bucket.push(t.to_string());
    }
    split
}

/// Builds the report from what was read, with the gate's own rules, at `now`.
pub fn build_report(view: &ClusterView, settings: &GateSettings, now: Timestamp) -> Report {
    let node = &view.node;
    let cfg = &settings.placement;
    let mut dss: Vec<&DaemonSetInfo> = view.daemonsets.iter().collect();
    dss.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let daemonsets: Vec<MemberRow> = dss
        .into_iter()
        .map(|ds| daemonset_row(view, ds, cfg, now))
        .collect();
    let critical_pods: Vec<MemberRow> = settings
        .critical
        .iter()
        .map(|entry| critical_row(view, entry, now))
        .collect();

    let gated = node.taints.iter().any(|t| cfg.is_managed(t));
    let expected: Vec<&MemberRow> = daemonsets
        .iter()
        .chain(&critical_pods)
        .filter(|r| r.expected)
        .collect();
    let blockers: Vec<&MemberRow> = expected
        .iter()
        .copied()
        .filter(|r| r.ready != Some(true))
        .collect();
    // The gate's own rule and words (semantics.md §5).
    let node_not_ready = gate::node_wait_reason(node);
    let would_open = blockers.is_empty() && node_not_ready.is_none();
    Report {
        node: node.name.clone(),
        gated,
        would_open,
        verdict: verdict(gated, expected.len(), &blockers, node_not_ready.as_deref()),
        node_not_ready,
        evaluated_at: now,
        created: node.created,
        expected_members: expected.len(),
        ready_members: expected.len() - blockers.len(),
        taints: split_taints(&node.taints, cfg),
        daemonsets,
        critical_pods,
    }
}

fn verdict(
    gated: bool,
    expected: usize,
    blockers: &[&MemberRow],
    node_not_ready: Option<&str>,
) -> String {
    let waiting = || {
        let list: Vec<String> = blockers
            .iter()
            .map(|r| {
                format!(
                    "{} ({})",
                    r.label,
                    r.waiting.as_deref().unwrap_or("not Ready")
                )
            })
            .collect();
        let members = format!(
            "waiting for {} of {expected}: {}",
            blockers.len(),
            list.join(", ")
        );
        match node_not_ready {
            Some(node) => format!("{members}; {node}"),
            None => members,
        }
    };
    let all_ready = || match expected {
        0 => "nothing here to wait for".to_string(),
        1 => "its one expected member is Ready".to_string(),
        n => format!("all {n} expected members are Ready"),
    };
    match (gated, blockers.is_empty()) {
        (true, true) => match node_not_ready {
            None => format!("would open now: {}", all_ready()),
            Some(node) => format!("closed: {node}; {}", all_ready()),
        },
        (true, false) => format!("closed: {}", waiting()),
        (false, true) => match node_not_ready {
            None => format!(
                "not gated: the node carries no managed taint; were it gated, it would open now ({})",
                all_ready()
            ),
            Some(node) => format!(
                "not gated: the node carries no managed taint; were it gated, it would stay closed: {node}; {}",
                all_ready()
            ),
        },
        (false, false) => format!(
            "not gated: the node carries no managed taint; were it gated, it would be {}",
            waiting()
        ),
    }
}

fn daemonset_row(
    view: &ClusterView,
    ds: &DaemonSetInfo,
    cfg: &PlacementConfig,
    now: Timestamp,
) -> MemberRow {
    let node = &view.node;
    let terms = ds.template.required_node_affinity.as_ref().map(|terms| {
        placement::explain_terms(terms, &node.name, &node.labels)
            .into_iter()
            .enumerate()
            .map(|(i, r)| TermResult {
                term: i + 1,
                matches: r.is_ok(),
                why: r.err().map(|f| f.to_string()),
            })
            .collect::<Vec<_>>()
    });
    let mut row = MemberRow {
        namespace: ds.namespace.clone(),
        name: ds.name.clone(),
        expected: false,
        reason: String::new(),
        reason_code: String::new(),
        ready: None,
        pod: None,
        waiting: None,
        node_affinity: terms,
        selector: None,
        label: ds.key(),
        detail: Vec::new(),
    };
    match placement::evaluate(node, ds, cfg) {
        Verdict::NotExpected(reason) => {
            row.reason = reason.to_string();
            row.reason_code = reason.code().to_string();
            if let (NotExpectedReason::NodeAffinityNoTermMatched { .. }, Some(terms)) =
                (&reason, &row.node_affinity)
                && !terms.is_empty()
            {
                // One line per term reads better than the one-sentence form.
                row.detail
                    .push("no term of its required node affinity matches:".into());
                row.detail.extend(terms.iter().map(|t| {
                    let why = t.why.as_deref().unwrap_or("matches");
                    format!("  term {}: {why}", t.term)
                }));
            }
        }
        Verdict::Expected => {
            row.expected = true;
            row.reason = expected_reason(node, ds, cfg, row.node_affinity.as_deref());
            row.reason_code = "expected".into();
            let state = readiness::daemonset_member(ds, &view.pods, now);
            fill_state(
                &mut row,
                &ds.namespace,
                state,
                view,
                |pending| pending.controller_uid.as_deref() == Some(ds.uid.as_str()),
                Waiting::NoPod.to_string(),
            );
        }
    }
    row
}

fn critical_row(view: &ClusterView, entry: &CriticalPodEntry, now: Timestamp) -> MemberRow {
    let node_selector = entry
        .node_selector
        .as_ref()
        .map(|s| s.to_string())
        .filter(|s| !s.is_empty());
    let mut row = MemberRow {
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        expected: false,
        reason: String::new(),
        reason_code: String::new(),
        ready: None,
        pod: None,
        waiting: None,
        node_affinity: None,
        selector: Some(entry.selector.to_string()),
        label: format!("critical:{}", entry.name),
        detail: Vec::new(),
    };
    if !readiness::critical_applies(entry, &view.node) {
        row.reason = format!(
            "the node does not match the entry's node selector {:?}",
            node_selector.unwrap_or_default()
        );
        row.reason_code = "node_selector".into();
        return row;
    }
    row.expected = true;
    row.reason_code = "expected".into();
    row.reason = match node_selector {
        Some(s) => format!("the node matches the entry's node selector {s:?}"),
        None => "the entry has no node selector, so it applies to every node".into(),
    };
    let state = readiness::critical_member(entry, &view.pods, now);
    // Critical pods are static or mirror pods, never created unbound, so
    // there is no pending pod to look for.
    let no_pod = format!(
        "no pod matching {} in namespace {} on the node yet",
        entry.selector, entry.namespace
    );
    fill_state(&mut row, &entry.namespace, state, view, |_| false, no_pod);
    row
}

/// Ready/pod/waiting of an expected member. For "no pod yet", an unbound pod
/// made for this node (`owns` picks the member's) tells the real story:
/// usually the scheduler's reason for not placing it.
fn fill_state(
    row: &mut MemberRow,
    namespace: &str,
    state: MemberState,
    view: &ClusterView,
    owns: impl Fn(&PodInfo) -> bool,
    no_pod: String,
) {
    match state {
        MemberState::Ready { pod } => {
            row.ready = Some(true);
            row.pod = Some(pod);
        }
        MemberState::NotReady(Waiting::NoPod) => {
            row.ready = Some(false);
            let pending = view
                .unscheduled
                .iter()
                .filter(|p| owns(p))
                .min_by(|a, b| a.name.cmp(&b.name));
            match pending {
                Some(p) => {
                    let key = p.key();
                    let why = match view
                        .details
                        .get(&key)
                        .and_then(|d| d.unschedulable.as_deref())
                    {
                        Some(msg) => format!("pod {} is Pending, not scheduled: {msg}", p.name),
                        None => format!("pod {} is Pending, not scheduled yet", p.name),
                    };
                    row.pod = Some(p.name.clone());
                    row.waiting = Some(why);
                }
                None => row.waiting = Some(no_pod),
            }
        }
        MemberState::NotReady(w) => {
            row.ready = Some(false);
            row.pod = w.pod().map(str::to_string);
            let detail = w
                .pod()
                .and_then(|p| view.details.get(&format!("{namespace}/{p}")));
            row.waiting = Some(describe_waiting(&w, detail));
        }
    }
}

/// The readiness module's words, plus what the full pod adds.
pub fn describe_waiting(w: &Waiting, detail: Option<&PodDetail>) -> String {
    let base = w.to_string();
    let Some(d) = detail else { return base };
    match w {
        Waiting::NotRunning { .. } => match &d.unschedulable {
            Some(msg) => format!("{base}, not scheduled: {msg}"),
            None if !d.containers.is_empty() => format!("{base}, {}", d.containers.join("; ")),
            None => base,
        },
        Waiting::NotReady { .. } if !d.containers.is_empty() => {
            format!("{base}, {}", d.containers.join("; "))
        }
        _ => base,
    }
}

/// Why an expected DaemonSet belongs here: what matched, which taints it
/// tolerates, and which transient taints were set aside.
fn expected_reason(
    node: &NodeInfo,
    ds: &DaemonSetInfo,
    cfg: &PlacementConfig,
    terms: Option<&[TermResult]>,
) -> String {
    let t = &ds.template;
    let mut parts = Vec::new();
    if !t.node_name.is_empty() {
        parts.push("its pod template's spec.nodeName names this node".to_string());
    }
    if !t.node_selector.is_empty() {
        let pairs: Vec<String> = t
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        parts.push(format!("its nodeSelector {} matches", pairs.join(",")));
    }
    if let Some(m) = terms.and_then(|ts| ts.iter().find(|r| r.matches)) {
        parts.push(format!("its node affinity term {} matches", m.term));
    }
    let tolerations = placement::with_default_tolerations(&t.tolerations, t.host_network);
    let tolerated = |taint: &Taint| {
        tolerations
            .iter()
            .any(|tol| placement::tolerates(tol, taint))
    };
    let blocking: Vec<&Taint> = node
        .taints
        .iter()
        .filter(|taint| placement::taint_blocks_scheduling(taint))
        .collect();
    let kept: Vec<String> = blocking
        .iter()
        .filter(|taint| !cfg.is_transient(taint))
        .map(|taint| taint.to_string())
        .collect();
    let set_aside: Vec<String> = blocking
        .iter()
        .filter(|taint| cfg.is_transient(taint) && !tolerated(taint))
        .map(|taint| taint.to_string())
        .collect();
    if !kept.is_empty() {
        parts.push(format!("it tolerates {}", kept.join(", ")));
    }
    if !set_aside.is_empty() {
        parts.push(format!(
            "the transient {} {} lifted by another agent during start-up",
            if set_aside.len() == 1 {
                "taint"
            } else {
                "taints"
            },
            set_aside.join(", ") + if set_aside.len() == 1 { " is" } else { " are" }
        ));
    }
    if parts.is_empty() {
        return "nothing keeps it off this node".into();
    }
    parts.join("; ")
}

// ---------------------------------------------------------------------------
// The table

const GAP: &str = "  ";
const MIN_WHY_WIDTH: usize = 30;
/// Longer member names go on a line of their own so the columns stay narrow.
const MAX_NAME_WIDTH: usize = 40;

/// The human form: a header about the node, the DaemonSet table (and the
/// critical-pod table when any are configured), the taints and the verdict,
/// laid out for a terminal `width` columns wide.
pub fn render_table(report: &Report, width: usize) -> String {
    let mut out = String::new();
    let gate = if report.gated {
        format!("gated by {}", report.taints.managed.join(", "))
    } else {
        "not gated (no managed taint)".to_string()
    };
    let age = report
        .evaluated_at
        .duration_since(report.created)
        .as_secs()
        .max(0);
    let header = format!(
        "Node {}, created {} ({} ago): {gate}",
        report.node,
        report.created,
        human_age(age),
    );
    push_wrapped(&mut out, "", "", &header, width);
    let counts = format!(
        "{} of {} DaemonSets and critical pods expected here, {} of them Ready",
        report.expected_members,
        report.daemonsets.len() + report.critical_pods.len(),
        report.ready_members,
    );
    push_wrapped(&mut out, "", "", &counts, width);
    out.push('\n');

    let name_width = report
        .daemonsets
        .iter()
        .chain(&report.critical_pods)
        .map(|r| r.label.chars().count())
        .chain(["DAEMONSET".len(), "CRITICAL POD".len()])
        .filter(|w| *w <= MAX_NAME_WIDTH)
        .max()
        .unwrap_or(0);
    member_table(&mut out, "DAEMONSET", &report.daemonsets, name_width, width);
    if report.daemonsets.is_empty() {
        out.push_str("(no DaemonSets in the cluster)\n");
    }
    if !report.critical_pods.is_empty() {
        out.push('\n');
        member_table(
            &mut out,
            "CRITICAL POD",
            &report.critical_pods,
            name_width,
            width,
        );
    }

    out.push_str("\nTAINTS\n");
    for (kind, list) in [
        ("managed", &report.taints.managed),
        ("transient", &report.taints.transient),
        ("other", &report.taints.other),
    ] {
        let text = if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        };
        let first = format!("  {kind:<11}");
        let rest = " ".repeat(first.len());
        push_wrapped(&mut out, &first, &rest, &text, width);
    }

    out.push('\n');
    push_wrapped(&mut out, "GATE  ", "      ", &report.verdict, width);
    out
}

fn member_table(
    out: &mut String,
    title: &str,
    rows: &[MemberRow],
    name_width: usize,
    width: usize,
) {
    const EXPECTED: &str = "EXPECTED";
    const READY: &str = "READY";
    let lead = |name: &str, expected: &str, ready: &str| {
        format!("{name:<name_width$}{GAP}{expected:<8}{GAP}{ready:<5}{GAP}")
    };
    let header = lead(title, EXPECTED, READY);
    let indent = " ".repeat(header.chars().count());
    let why_width = width.saturating_sub(indent.len()).max(MIN_WHY_WIDTH);
    let _ = writeln!(out, "{header}WHY");
    for row in rows {
        let name = if row.label.chars().count() > name_width {
            let _ = writeln!(out, "{}", row.label);
            ""
        } else {
            row.label.as_str()
        };
        let expected = if row.expected { "yes" } else { "no" };
        let ready = match row.ready {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let first = lead(name, expected, ready);
        let mut lines: Vec<(String, bool)> = Vec::new();
        for (i, text) in why_lines(row).iter().enumerate() {
            // An indented line (an affinity term) wraps with a hanging
            // indent so the next term stands out; plain text wraps flush.
            let extra = text.len() - text.trim_start().len();
            let hang = if extra > 0 { extra + 2 } else { 0 };
            let avail = why_width.saturating_sub(hang).max(MIN_WHY_WIDTH / 2);
            for (j, l) in wrap(text.trim_start(), avail).into_iter().enumerate() {
                let pad = if j == 0 { extra } else { hang };
                lines.push((format!("{}{l}", " ".repeat(pad)), i == 0 && j == 0));
            }
        }
        for (line, is_first) in lines {
            let prefix = if is_first {
                first.as_str()
            } else {
                indent.as_str()
            };
            let _ = writeln!(out, "{}", format!("{prefix}{line}").trim_end());
        }
    }
}

fn why_lines(row: &MemberRow) -> Vec<String> {
    if !row.expected {
        if row.detail.is_empty() {
            return vec![row.reason.clone()];
        }
        return row.detail.clone();
    }
    match (&row.ready, &row.pod, &row.waiting) {
        (Some(true), Some(pod), _) => vec![format!("pod {pod} is Ready")],
        (_, _, Some(w)) => vec![w.clone()],
        _ => vec![String::new()],
    }
}

/// `first` before the first line, `rest` before the others.
fn push_wrapped(out: &mut String, first: &str, rest: &str, text: &str, width: usize) {
    let avail = width
        .saturating_sub(first.chars().count())
        .max(MIN_WHY_WIDTH);
    for (i, line) in wrap(text, avail).into_iter().enumerate() {
        let prefix = if i == 0 { first } else { rest };
        let _ = writeln!(out, "{prefix}{line}");
    }
}

/// Greedy word wrap. A word longer than `width` gets a line of its own
/// rather than being cut, so names and taints stay copyable.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let needed = if line.is_empty() {
            word.chars().count()
        } else {
            line.chars().count() + 1 + word.chars().count()
        };
        if needed > width && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// "45s", "3m12s", "2h5m", "3d4h": the two largest units are enough.
pub fn human_age(secs: i64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_core::model::{PodPlacement, Toleration};
    use nodegate_core::selector::LabelSelector;
    use nodegate_core::testutil::{
        mk_ds, mk_node, mk_pod, req, taint, taint_v, template_with_affinity,
        template_with_tolerations, term, toleration, ts,
    };
    use serde_json::json;

    const GATE: &str = "nodegate.dev/initializing";
    const NOW: i64 = 1_000_000;

    fn settings() -> GateSettings {
        GateSettings {
            placement: PlacementConfig::default(),
            critical: Vec::new(),
        }
    }

    fn tolerate_gate() -> Toleration {
        toleration(GATE, "Exists", "", "")
    }

    fn tolerate_all() -> PodPlacement {
        template_with_tolerations(vec![toleration("", "Exists", "", "")])
    }

    fn view(node: NodeInfo, daemonsets: Vec<DaemonSetInfo>, pods: Vec<PodInfo>) -> ClusterView {
        ClusterView {
            node,
            daemonsets,
            pods,
            unscheduled: Vec::new(),
            details: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }

    fn pod_of(ds: &DaemonSetInfo, name: &str, node: &str) -> PodInfo {
        let mut p = mk_pod(name, node, &ds.uid);
        p.namespace = ds.namespace.clone();
        p
    }

    fn gated_arm_node() -> NodeInfo {
        mk_node(
            "arm-1",
            &[
                ("kubernetes.io/arch", "arm64"),
                ("topology.kubernetes.io/zone", "b"),
            ],
            vec![
                taint(GATE, "NoSchedule"),
                taint("node.kubernetes.io/not-ready", "NoSchedule"),
                taint_v("dedicated", "infra", "PreferNoSchedule"),
            ],
        )
    }

    fn row<'a>(r: &'a Report, name: &str) -> &'a MemberRow {
        r.daemonsets
            .iter()
            .chain(&r.critical_pods)
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no row {name} in {r:#?}"))
    }

    /// A small cluster with one DaemonSet for each way a member can stand.
    fn sample() -> (ClusterView, GateSettings) {
        let node = gated_arm_node();
        let everywhere = mk_ds("kube-system", "everywhere", tolerate_all());
        let mut amd = mk_ds("kube-system", "amd-only", tolerate_all());
        amd.template
            .node_selector
            .insert("kubernetes.io/arch".into(), "amd64".into());
        let mut zone = mk_ds(
            "infra",
            "zone-a",
            template_with_affinity(vec![
                term(vec![req("topology.kubernetes.io/zone", "In", &["a"])]),
                term(vec![req("gpu", "Exists", &[])]),
            ]),
        );
        zone.template.tolerations.push(tolerate_gate());
        let after_gate = mk_ds("infra", "after-gate", PodPlacement::default());
        let mut ignored = mk_ds("infra", "ignored", tolerate_all());
        ignored
            .annotations
            .insert("nodegate.dev/ignore".into(), "true".into());
        let mut slow = mk_ds("infra", "slow", tolerate_all());
        slow.min_ready_seconds = 10;
        let held = mk_ds(
            "infra",
            "held",
            template_with_tolerations(vec![tolerate_gate()]),
        );
        let pending = mk_ds("infra", "pending", tolerate_all());
        let missing = mk_ds("infra", "missing", tolerate_all());
        let unbound = mk_ds("infra", "unbound", tolerate_all());
        let going = mk_ds("infra", "going", tolerate_all());

        let mut slow_pod = pod_of(&slow, "slow-x", "arm-1");
        slow_pod.ready_since = Some(ts(NOW - 3));
        let mut held_pod = pod_of(&held, "held-x", "arm-1");
        held_pod.ready = false;
        let mut pending_pod = pod_of(&pending, "pending-x", "arm-1");
        pending_pod.phase = "Pending".into();
        pending_pod.ready = false;
        let mut going_pod = pod_of(&going, "going-x", "arm-1");
        going_pod.terminating = true;
        let mut unbound_pod = pod_of(&unbound, "unbound-x", "");
        unbound_pod.phase = "Pending".into();
        unbound_pod.ready = false;

        let mut v = view(
            node,
            vec![
                zone,
                everywhere.clone(),
                amd,
                after_gate,
                ignored,
                slow.clone(),
                held.clone(),
                pending.clone(),
                missing,
                unbound,
                going,
            ],
            vec![
                pod_of(&everywhere, "everywhere-x", "arm-1"),
                slow_pod,
                held_pod,
                pending_pod,
                going_pod,
            ],
        );
        v.unscheduled.push(unbound_pod);
        v.details.insert(
            "infra/pending-x".into(),
            PodDetail {
                unschedulable: None,
                containers: vec!["container agent: ContainerCreating".into()],
            },
        );
        v.details.insert(
            "infra/unbound-x".into(),
            PodDetail {
                unschedulable: Some("0/3 nodes are available: 1 Insufficient cpu.".into()),
                containers: Vec::new(),
            },
        );
        v.details.insert(
            "infra/held-x".into(),
            PodDetail {
                unschedulable: None,
                containers: vec!["container agent: CrashLoopBackOff".into()],
            },
        );
        let mut s = settings();
        s.critical = vec![
            CriticalPodEntry {
                name: "proxy".into(),
                namespace: "kube-system".into(),
                selector: LabelSelector::parse("k8s-app=kube-proxy").unwrap(),
                node_selector: None,
            },
            CriticalPodEntry {
                name: "gpu-driver".into(),
                namespace: "kube-system".into(),
                selector: LabelSelector::parse("app=driver").unwrap(),
                node_selector: Some(LabelSelector::parse("gpu=true").unwrap()),
            },
        ];
        (v, s)
    }

    fn sample_report() -> Report {
        let (v, s) = sample();
        build_report(&v, &s, ts(NOW))
    }

    #[test]
    fn daemonsets_are_sorted_by_namespace_then_name() {
        let r = sample_report();
        let names: Vec<String> = r.daemonsets.iter().map(|m| m.label.clone()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names[0], "infra/after-gate");
    }

    /// (name, expected, ready, reason_code, waiting contains, pod)
    type Case = (
        &'static str,
        bool,
        Option<bool>,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
    );

    #[test]
    fn each_member_reports_its_placement_and_readiness() {
        let r = sample_report();
        let cases: &[Case] = &[
            (
                "everywhere",
                true,
                Some(true),
                "expected",
                None,
                Some("everywhere-x"),
            ),
            ("amd-only", false, None, "node_selector", None, None),
            ("zone-a", false, None, "node_affinity", None, None),
            ("after-gate", false, None, "starts_after_gate", None, None),
            ("ignored", false, None, "ignore_annotation", None, None),
            (
                "slow",
                true,
                Some(false),
                "expected",
                Some("pod slow-x Ready for 3s of minReadySeconds 10s"),
                Some("slow-x"),
            ),
            (
                "held",
                true,
                Some(false),
                "expected",
                Some("pod held-x is not Ready, container agent: CrashLoopBackOff"),
                Some("held-x"),
            ),
            (
                "pending",
                true,
                Some(false),
                "expected",
                Some("pod pending-x is Pending, container agent: ContainerCreating"),
                Some("pending-x"),
            ),
            (
                "missing",
                true,
                Some(false),
                "expected",
                Some("no pod yet"),
                None,
            ),
            (
                "unbound",
                true,
                Some(false),
                "expected",
                Some("pod unbound-x is Pending, not scheduled: 0/3 nodes are available"),
                Some("unbound-x"),
            ),
            (
                "going",
                true,
                Some(false),
                "expected",
                Some("pod going-x is terminating"),
                Some("going-x"),
            ),
            (
                "proxy",
                true,
                Some(false),
                "expected",
                Some("no pod matching k8s-app=kube-proxy in namespace kube-system"),
                None,
            ),
            ("gpu-driver", false, None, "node_selector", None, None),
        ];
        for (name, expected, ready, code, waiting, pod) in cases {
            let m = row(&r, name);
            assert_eq!(m.expected, *expected, "{name}: {m:#?}");
            assert_eq!(m.ready, *ready, "{name}: {m:#?}");
            assert_eq!(m.reason_code, *code, "{name}: {m:#?}");
            assert_eq!(m.pod.as_deref(), *pod, "{name}: {m:#?}");
            match waiting {
                Some(w) => assert!(
                    m.waiting.as_deref().is_some_and(|got| got.contains(w)),
                    "{name}: want waiting containing {w:?}, got {:?}",
                    m.waiting
                ),
                None => assert_eq!(m.waiting, None, "{name}"),
            }
            assert!(!m.reason.is_empty(), "{name} has no reason");
        }
    }

    #[test]
    fn reasons_name_the_label_the_term_and_the_taint() {
        let r = sample_report();
        assert!(
            row(&r, "amd-only")
                .reason
                .contains("kubernetes.io/arch=arm64")
        );
        assert!(
            row(&r, "after-gate")
                .reason
                .starts_with("starts after the gate opens")
        );
        let zone = row(&r, "zone-a");
        let terms = zone.node_affinity.as_ref().expect("per-term results");
        assert_eq!(terms.len(), 2);
        assert!(!terms[0].matches && !terms[1].matches);
        assert!(
            terms[0]
                .why
                .as_deref()
                .is_some_and(|w| w.contains("topology.kubernetes.io/zone=b")),
            "{terms:?}"
        );
        assert!(
            terms[1]
                .why
                .as_deref()
                .is_some_and(|w| w.contains("label gpu is missing")),
            "{terms:?}"
        );
        assert_eq!(zone.detail.len(), 3, "{:?}", zone.detail);
        assert!(zone.detail[1].contains("term 1:"));
    }

    #[test]
    fn expected_reason_names_tolerated_and_set_aside_taints() {
        let r = sample_report();
        let reason = &row(&r, "everywhere").reason;
        assert_eq!(reason, "it tolerates nodegate.dev/initializing:NoSchedule");
        let held = &row(&r, "held").reason;
        assert!(
            held.contains("the transient taint node.kubernetes.io/not-ready:NoSchedule is lifted"),
            "{held}"
        );
        // PreferNoSchedule never keeps a pod off, so it is not worth naming.
        assert!(!held.contains("dedicated"), "{held}");
    }

    #[test]
    fn matching_affinity_term_is_named_for_an_expected_daemonset() {
        let node = mk_node("n", &[("zone", "a")], vec![]);
        let ds = mk_ds(
            "ns",
            "d",
            template_with_affinity(vec![
                term(vec![req("zone", "In", &["b"])]),
                term(vec![req("zone", "In", &["a"])]),
            ]),
        );
        let r = build_report(&view(node, vec![ds], vec![]), &settings(), ts(NOW));
        let m = &r.daemonsets[0];
        assert!(m.expected);
        assert!(
            m.reason.contains("its node affinity term 2 matches"),
            "{}",
            m.reason
        );
        let terms = m.node_affinity.as_ref().unwrap();
        assert_eq!(
            terms.iter().map(|t| t.matches).collect::<Vec<_>>(),
            vec![false, true]
        );
        assert_eq!(terms[1].why, None);
    }

    #[test]
    fn verdict_says_closed_with_every_blocker() {
        let r = sample_report();
        assert!(r.gated);
        assert!(!r.would_open);
        // everywhere, slow, held, pending, missing, unbound, going + proxy.
        assert_eq!(r.expected_members, 8);
        assert_eq!(r.ready_members, 1);
        assert!(
            r.verdict.starts_with(
                "closed: waiting for 7 of 8: infra/going (pod going-x is terminating), "
            ),
            "{}",
            r.verdict
        );
        assert!(
            r.verdict.contains("critical:proxy (no pod matching"),
            "{}",
            r.verdict
        );
    }

    #[test]
    fn verdict_would_open_when_every_expected_member_is_ready() {
        let node = mk_node("n", &[], vec![taint(GATE, "NoSchedule")]);
        let ds = mk_ds("kube-system", "cni", tolerate_all());
        let pod = pod_of(&ds, "cni-x", "n");
        let r = build_report(
            &view(node.clone(), vec![ds], vec![pod]),
            &settings(),
            ts(NOW),
        );
        assert!(r.gated && r.would_open);
        assert_eq!(
            r.verdict,
            "would open now: its one expected member is Ready"
        );

        let empty = build_report(&view(node, vec![], vec![]), &settings(), ts(NOW));
        assert!(empty.would_open);
        assert_eq!(empty.verdict, "would open now: nothing here to wait for");
    }

    #[test]
    fn verdict_says_closed_when_the_node_itself_is_not_ready() {
        let mut node = mk_node("n", &[], vec![taint(GATE, "NoSchedule")]);
        node.ready = nodegate_core::model::NodeReady::Unknown;
        let ds = mk_ds("kube-system", "cni", tolerate_all());
        let pod = pod_of(&ds, "cni-x", "n");
        let r = build_report(
            &view(node.clone(), vec![ds.clone()], vec![pod]),
            &settings(),
            ts(NOW),
        );
        assert!(r.gated && !r.would_open);
        assert_eq!(r.ready_members, 1);
        assert_eq!(
            r.node_not_ready.as_deref(),
            Some("the node is not Ready (its Ready condition is Unknown)")
        );
        assert_eq!(
            r.verdict,
            "closed: the node is not Ready (its Ready condition is Unknown); its one expected member is Ready"
        );
        // With a member not Ready either, the node comes after the members.
        let r = build_report(&view(node, vec![ds], vec![]), &settings(), ts(NOW));
        assert!(
            r.verdict.starts_with(
                "closed: waiting for 1 of 1: kube-system/cni (no pod yet); the node is not Ready"
            ),
            "{}",
            r.verdict
        );
        let json = serde_json::to_value(&r).unwrap();
        assert!(
            json["node_not_ready"]
                .as_str()
                .unwrap()
                .starts_with("the node is not Ready")
        );
    }

    #[test]
    fn verdict_for_a_node_without_managed_taint_says_not_gated() {
        let node = mk_node(
            "n",
            &[],
            vec![taint("node.kubernetes.io/unschedulable", "NoSchedule")],
        );
        let ds = mk_ds("kube-system", "cni", PodPlacement::default());
        let r = build_report(&view(node, vec![ds], vec![]), &settings(), ts(NOW));
        assert!(!r.gated);
        assert!(!r.would_open);
        assert!(
            r.verdict
                .starts_with("not gated: the node carries no managed taint"),
            "{}",
            r.verdict
        );
        assert!(
            r.verdict
                .contains("waiting for 1 of 1: kube-system/cni (no pod yet)"),
            "{}",
            r.verdict
        );
        // A cordon is tolerated by every DaemonSet pod.
        assert!(r.daemonsets[0].expected);
        assert_eq!(
            r.taints.other,
            vec!["node.kubernetes.io/unschedulable:NoSchedule"]
        );
    }

    #[test]
    fn taints_split_into_managed_transient_and_other() {
        let split = split_taints(&gated_arm_node().taints, &PlacementConfig::default());
        assert_eq!(split.managed, vec!["nodegate.dev/initializing:NoSchedule"]);
        assert_eq!(
            split.transient,
            vec!["node.kubernetes.io/not-ready:NoSchedule"]
        );
        assert_eq!(split.other, vec!["dedicated=infra:PreferNoSchedule"]);
    }

    #[test]
    fn json_has_the_documented_fields_and_nulls_for_members_not_expected() {
        let v = serde_json::to_value(sample_report()).unwrap();
        assert_eq!(v["node"], "arm-1");
        assert_eq!(v["gated"], true);
        assert_eq!(v["would_open"], false);
        assert_eq!(v["expected_members"], 8);
        assert_eq!(v["ready_members"], 1);
        assert!(v["verdict"].as_str().unwrap().starts_with("closed: "));
        let ds = v["daemonsets"].as_array().unwrap();
        let amd = ds.iter().find(|d| d["name"] == "amd-only").unwrap();
        assert_eq!(amd["namespace"], "kube-system");
        assert_eq!(amd["expected"], false);
        assert_eq!(amd["ready"], json!(null));
        assert_eq!(amd["pod"], json!(null));
        assert_eq!(amd["waiting"], json!(null));
        assert!(amd["reason"].as_str().unwrap().contains("nodeSelector"));
        assert!(amd.get("label").is_none() && amd.get("detail").is_none());
        let every = ds.iter().find(|d| d["name"] == "everywhere").unwrap();
        assert_eq!(every["ready"], true);
        assert_eq!(every["pod"], "everywhere-x");
        let zone = ds.iter().find(|d| d["name"] == "zone-a").unwrap();
        assert_eq!(zone["node_affinity"][0]["term"], 1);
        assert_eq!(zone["node_affinity"][0]["matches"], false);
        let crit = v["critical_pods"].as_array().unwrap();
        assert_eq!(crit[0]["name"], "proxy");
        assert_eq!(crit[0]["selector"], "k8s-app=kube-proxy");
        assert_eq!(crit[1]["ready"], json!(null));
        assert_eq!(
            v["taints"]["managed"][0],
            "nodegate.dev/initializing:NoSchedule"
        );
        assert!(v["taints"]["transient"].is_array() && v["taints"]["other"].is_array());
    }

    #[test]
    fn table_is_aligned_and_fits_a_100_column_terminal() {
        let text = render_table(&sample_report(), 100);
        eprintln!("{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Node arm-1, created 1970-01-01T00:00:00Z (11d13h ago): gated by nodegate.dev/initializing:NoSchedule"
        );
        assert_eq!(
            lines[1],
            "8 of 13 DaemonSets and critical pods expected here, 1 of them Ready"
        );
        for l in &lines {
            assert!(l.chars().count() <= 100, "too wide: {l:?}");
        }
        let header = lines
            .iter()
            .find(|l| l.starts_with("DAEMONSET"))
            .expect("table header");
        let why_col = header.find("WHY").unwrap();
        assert_eq!(
            header.find("EXPECTED"),
            Some(header.find("DAEMONSET").unwrap() + "kube-system/everywhere".len() + 2)
        );
        let everywhere = lines
            .iter()
            .find(|l| l.starts_with("kube-system/everywhere "))
            .unwrap();
        assert_eq!(everywhere.find("pod everywhere-x is Ready"), Some(why_col));
        assert!(everywhere.contains(" yes "));
        // A wrapped reason continues under WHY.
        let after = lines
            .iter()
            .position(|l| l.starts_with("infra/after-gate "))
            .unwrap();
        assert!(
            lines[after + 1].starts_with(&" ".repeat(why_col)),
            "{:?}",
            lines[after + 1]
        );
        assert!(
            lines[after + 1]
                .chars()
                .nth(why_col)
                .is_some_and(|c| c != ' ')
        );
        // Affinity terms get a line each.
        assert!(
            text.contains("no term of its required node affinity matches:\n"),
            "{text}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.trim_start().starts_with("term 2: label gpu is missing")),
            "{text}"
        );
        // The critical table shares the name column.
        let crit = lines
            .iter()
            .find(|l| l.starts_with("CRITICAL POD"))
            .unwrap();
        assert_eq!(crit.find("WHY"), Some(why_col));
        assert!(text.contains("\nTAINTS\n  managed    nodegate.dev/initializing:NoSchedule\n  transient  node.kubernetes.io/not-ready:NoSchedule\n  other      dedicated=infra:PreferNoSchedule\n"), "{text}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("GATE  closed: waiting for 7 of 8: infra/going")),
            "{text}"
        );
    }

    #[test]
    fn a_long_name_gets_its_own_line_and_the_columns_stay_put() {
        let node = mk_node("n", &[], vec![]);
        let long = "a-very-long-namespace-name/an-even-longer-daemonset-name";
        let (ns, name) = long.split_once('/').unwrap();
        let r = build_report(
            &view(
                node,
                vec![
                    mk_ds(ns, name, PodPlacement::default()),
                    mk_ds("a", "b", PodPlacement::default()),
                ],
                vec![],
            ),
            &settings(),
            ts(NOW),
        );
        let text = render_table(&r, 100);
        let lines: Vec<&str> = text.lines().collect();
        let header = lines.iter().find(|l| l.starts_with("DAEMONSET")).unwrap();
        assert_eq!(header.find("EXPECTED"), Some("CRITICAL POD".len() + 2));
        let i = lines
            .iter()
            .position(|l| *l == long)
            .expect("name on its own line");
        assert!(
            lines[i + 1].starts_with(&" ".repeat("CRITICAL POD".len())),
            "{text}"
        );
        assert!(lines[i + 1].contains("no pod yet"), "{text}");
    }

    #[test]
    fn an_empty_cluster_says_so() {
        let r = build_report(
            &view(mk_node("n", &[], vec![]), vec![], vec![]),
            &settings(),
            ts(NOW),
        );
        let text = render_table(&r, 100);
        assert!(text.contains("(no DaemonSets in the cluster)"), "{text}");
        assert!(text.contains("managed    none"), "{text}");
    }

    #[test]
    fn wrap_breaks_between_words_and_keeps_long_words_whole() {
        assert_eq!(wrap("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("short", 100), vec!["short"]);
        assert_eq!(wrap("", 10), vec![""]);
        assert_eq!(
            wrap("x averyveryverylongword y", 5),
            vec!["x", "averyveryverylongword", "y"]
        );
    }

    #[test]
    fn human_age_shows_the_two_largest_units() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (192, "3m12s"),
            (7500, "2h5m"),
            (273_600, "3d4h"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_age(secs), want);
        }
    }

    #[test]
    fn pod_detail_reads_the_scheduler_message_and_container_reasons() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                "message": "0/3 nodes are available: 1 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found."}],
                "initContainerStatuses": [{"name": "init", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                                           "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
                "containerStatuses": [
                    {"name": "a", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}},
                    {"name": "b", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                     "state": {"running": {}}},
                    {"name": "c", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                     "state": {"running": {}}}],
            },
        }))
        .unwrap();
        let d = pod_detail(&p);
        assert_eq!(
            d.unschedulable.as_deref(),
            Some("0/3 nodes are available: 1 Insufficient cpu.")
        );
        assert_eq!(
            d.containers,
            vec![
                "container init: Error, exit code 1".to_string(),
                "container a: ImagePullBackOff: Back-off pulling image \"x\"".to_string(),
                "container c: running but not Ready".to_string(),
            ]
        );
        let scheduled: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]},
        }))
        .unwrap();
        assert_eq!(pod_detail(&scheduled), PodDetail::default());
    }

    #[test]
    fn describe_waiting_adds_what_the_pod_says() {
        let w = Waiting::NotRunning {
            pod: "p".into(),
            phase: "Pending".into(),
        };
        let unsched = PodDetail {
            unschedulable: Some("no room".into()),
            containers: vec![],
        };
        assert_eq!(
            describe_waiting(&w, Some(&unsched)),
            "pod p is Pending, not scheduled: no room"
        );
        assert_eq!(describe_waiting(&w, None), "pod p is Pending");
        let t = Waiting::Terminating { pod: "p".into() };
        let busy = PodDetail {
            unschedulable: None,
            containers: vec!["container c: Error".into()],
        };
        assert_eq!(describe_waiting(&t, Some(&busy)), "pod p is terminating");
    }

    #[test]
    fn aimed_at_reads_the_daemonset_controllers_node_pin() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}},
        }))
        .unwrap();
        assert!(aimed_at(&p, "n1"));
        assert!(!aimed_at(&p, "n2"));
        let plain: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert!(!aimed_at(&plain, "n1"));
    }

    #[test]
    fn long_kubelet_messages_are_shortened() {
        let long = "x".repeat(500);
        let s = shorten(&long);
        assert_eq!(s.chars().count(), MESSAGE_LIMIT + 3);
        assert!(s.ends_with("..."));
        assert_eq!(shorten(" short "), "short");
    }
}
