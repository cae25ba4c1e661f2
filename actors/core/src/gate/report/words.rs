//! The sentences of explain's report: the verdict, why an expected
//! DaemonSet belongs on the node, and what a full pod adds to the gate's.

use super::*;
use crate::rules::readiness::PHASE_RUNNING;

/// The gate's answer in one sentence, naming each blocker and what it waits
/// for.
pub fn verdict(
    gated: bool,
    expected: usize,
    blockers: &[&MemberRow],
    node_not_ready: Option<&str>,
) -> String {
    let waiting = || {
        let list: Vec<String> = blockers
            .iter()
            .map(|r| {
                let why = r.waiting.as_deref().unwrap_or("not Ready");
                format!("{} ({why})", r.label)
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
    const NOT_GATED: &str = "not gated: the node carries no managed taint; were it gated, it would";
    match (gated, blockers.is_empty(), node_not_ready) {
        (true, true, None) => format!("would open now: {}", all_ready()),
        (true, true, Some(node)) => format!("closed: {node}; {}", all_ready()),
        (true, false, _) => format!("closed: {}", waiting()),
        (false, true, None) => format!("{NOT_GATED} open now ({})", all_ready()),
        (false, true, Some(node)) => format!("{NOT_GATED} stay closed: {node}; {}", all_ready()),
        (false, false, _) => format!("{NOT_GATED} be {}", waiting()),
    }
}

/// The gate's words for what a member waits on, plus what the full pod
/// adds: the scheduler's message or the containers that hold it back. A
/// terminating pod's containers are going away anyway, and a pod that is
/// Ready has none to name.
pub fn describe_waiting(why: &str, pod: Option<&PodInfo>, detail: Option<&PodDetail>) -> String {
    let base = why.to_string();
    let (Some(p), Some(d)) = (pod.filter(|p| !p.terminating), detail) else {
        return base;
    };
    let running = p.phase == PHASE_RUNNING;
    if let (false, Some(msg)) = (running, &d.unschedulable) {
        format!("{base}, not scheduled: {msg}")
    } else if (!running || !p.ready) && !d.containers.is_empty() {
        format!("{base}, {}", d.containers.join("; "))
    } else {
        base
    }
}

/// Why an expected DaemonSet belongs here: what matched, which taints it
/// tolerates, and which transient taints were set aside.
pub fn expected_reason(
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
    let selector = &t.node_selector;
    if !selector.is_empty() {
        let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.push(format!("its nodeSelector {} matches", pairs.join(",")));
    }
    if let Some(m) = terms.and_then(|ts| ts.iter().find(|r| r.matches)) {
        parts.push(format!("its node affinity term {} matches", m.term));
    }
    let tolerations = placement::DaemonTolerations::new(&t.tolerations, t.host_network);
    let (mut kept, mut set_aside) = (Vec::new(), Vec::new());
    for taint in node
        .taints
        .iter()
        .filter(|t| placement::taint_blocks_scheduling(t))
    {
        if !cfg.is_transient(taint) {
            kept.push(taint.to_string());
        } else if !tolerations.tolerate(taint) {
            set_aside.push(taint.to_string());
        }
    }
    if !kept.is_empty() {
        parts.push(format!("it tolerates {}", kept.join(", ")));
    }
    if !set_aside.is_empty() {
        let (noun, verb) = match set_aside.len() {
            1 => ("taint", "is"),
            _ => ("taints", "are"),
        };
        parts.push(format!(
            "the transient {noun} {} {verb} lifted by another agent during start-up",
            set_aside.join(", ")
        ));
    }
    if parts.is_empty() {
        return "nothing keeps it off this node".into();
    }
    parts.join("; ")
}
