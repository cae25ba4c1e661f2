//! `nodegate config check --cluster`: what the cluster says about a valid
//! config file. Every request is a GET or a LIST, except the taint checks:
//! a server-side dry-run patch (`dryRun=All`, nothing is stored), sent as
//! nodegate's own ServiceAccount (found from the ClusterRoleBindings its
//! admission policy reads), so the API server answers as it would nodegate.

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::vocab::model::Taint;
use serde::Serialize;

use crate::cluster::client::{Connection, client_impersonating};
use crate::cluster::snapshot;
use crate::error::{Error, Result};
use crate::settings::config::RunSettings;

mod devices;

/// The label on the ClusterRoleBindings that grant nodegate's writes (the
/// admission policy's parameters).
const POLICY_SUBJECT_LABEL: &str = "nodegate.dev/policy-subject=true";

/// One thing the cluster showed: a problem (exit 3) or a note.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub problem: bool,
    /// The config key it is about.
    pub key: String,
    pub message: String,
}

fn problem(key: impl Into<String>, message: impl Into<String>) -> Finding {
    Finding {
        problem: true,
        ..note(key, message)
    }
}

fn note(key: impl Into<String>, message: impl Into<String>) -> Finding {
    Finding {
        problem: false,
        key: key.into(),
        message: message.into(),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Every check against the cluster `client` reaches (through `conn`).
pub async fn check(
    client: &kube::Client,
    conn: &Connection,
    s: &RunSettings,
) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    let nodes = snapshot::nodes(client)
        .await
        .map_err(Error::kube("listing nodes"))?;
    let managed: Vec<&Node> = nodes
        .iter()
        .filter(|n| selects(s.gate.scope.node_selector.as_ref(), n))
        .collect();
    let scope = match &s.gate.scope.node_selector {
        Some(sel) => format!("nodeSelector {{{sel}}} matches"),
        None => "no nodeSelector: nodegate manages".to_string(),
    };
    let (m, n) = (managed.len(), nodes.len());
    out.push(note(
        "nodeSelector",
        format!("{scope} {m} of the cluster's {n} nodes"),
    ));
    namespaces(client, s, &mut out).await?;
    excluded(client, s, &mut out).await?;
    critical_pods(client, s, &mut out).await?;
    devices::devices(client, s, &managed, &mut out).await?;
    taints(client, conn, s, &managed, &mut out).await?;
    Ok(out)
}

fn selects(sel: Option<&LabelSelector>, node: &Node) -> bool {
    let labels = crate::cluster::project::labels(node.metadata.labels.as_ref());
    sel.is_none_or(|s| s.matches(&labels))
}

async fn namespaces(client: &kube::Client, s: &RunSettings, out: &mut Vec<Finding>) -> Result<()> {
    for ns in s.gate.placement.daemonset_namespaces.iter().flatten() {
        if !namespace_exists(client, ns).await? {
            out.push(problem(
                "daemonsetNamespaces",
                format!("namespace {ns:?} does not exist: no DaemonSet there can be waited for (a typo?)"),
            ));
        }
    }
    Ok(())
}

async fn namespace_exists(client: &kube::Client, ns: &str) -> Result<bool> {
    let found = Api::<Namespace>::all(client.clone()).get_opt(ns).await;
    let found = found.map_err(Error::kube(format!("reading namespace {ns}")))?;
    Ok(found.is_some())
}

async fn excluded(client: &kube::Client, s: &RunSettings, out: &mut Vec<Finding>) -> Result<()> {
    for (ns, name) in &s.gate.placement.excluded {
        match snapshot::daemonset_exists(client, ns, name).await {
            Ok(true) => {}
            Ok(false) => out.push(problem(
                "exclude",
                format!(
                    "DaemonSet {ns}/{name} does not exist: excluding it does nothing (a typo?)"
                ),
            )),
            Err(e) => return Err(Error::kube(format!("reading DaemonSet {ns}/{name}"))(e)),
        }
    }
    Ok(())
}

async fn critical_pods(
    client: &kube::Client,
    s: &RunSettings,
    out: &mut Vec<Finding>,
) -> Result<()> {
    for c in &s.gate.critical {
        let key = format!("criticalPods ({})", c.name);
        if !namespace_exists(client, &c.namespace).await? {
            out.push(problem(
                key,
                format!(
                    "namespace {:?} does not exist: gated nodes would wait for this pod until their deadline",
                    c.namespace
                ),
            ));
            continue;
        }
        let lp = ListParams::default().labels(&c.selector.to_string());
        let pods = Api::<Pod>::namespaced(client.clone(), &c.namespace)
            .list(&lp)
            .await
            .map_err(Error::kube(format!("listing pods in {}", c.namespace)))?;
        let n = pods.items.len();
        let said = format!(
            "{n} pod(s) in {} match selector {:?}",
            c.namespace,
            c.selector.to_string()
        );
        out.push(if n == 0 {
            problem(key, format!("{said}: gated nodes would wait for one until their deadline (a typo in the selector?)"))
        } else {
            note(key, said)
        });
    }
    Ok(())
}

/// Every taint nodegate would add, dry-run onto a node it would add it to,
/// as nodegate's ServiceAccount.
async fn taints(
    client: &kube::Client,
    conn: &Connection,
    s: &RunSettings,
    managed: &[&Node],
    out: &mut Vec<Finding>,
) -> Result<()> {
    // The ServiceAccounts the admission policy treats as nodegate's.
    let bindings = Api::<ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default().labels(POLICY_SUBJECT_LABEL))
        .await
        .map_err(Error::kube("listing ClusterRoleBindings"))?;
    let mut users: Vec<String> = bindings
        .items
        .iter()
        .flat_map(|b| b.subjects.iter().flatten())
        .filter(|s| s.kind == "ServiceAccount")
        .filter_map(|s| {
            Some(format!(
                "system:serviceaccount:{}:{}",
                s.namespace.as_deref()?,
                s.name
            ))
        })
        .collect();
    users.dedup();
    let Some(user) = users.first() else {
        out.push(note(
            "taints",
            format!(
                "no ClusterRoleBinding labelled {POLICY_SUBJECT_LABEL}: nodegate's admission policy \
                 is not installed here, so its taints were not checked against it"
            ),
        ));
        return Ok(());
    };
    let as_nodegate = client_impersonating(conn, Some(user)).await?;
    let taints = s.gate.placement.managed_taints.iter();
    let taints = taints.map(|t| ("taints".to_string(), t.to_taint(), None));
    let regate = s.gate.regate.iter();
    let regate = regate.map(|r| ("regateTaint".to_string(), r.taint.to_taint(), None));
    let rules = s.gate.condition_taints.iter().map(|r| {
        let key = format!("conditionTaints ({})", r.name);
        (key, r.taint.clone(), r.node_selector.as_ref())
    });
    for (key, taint, sel) in taints.chain(regate).chain(rules) {
        let carries = |n: &Node| {
            let taints = n.spec.as_ref().and_then(|s| s.taints.as_ref());
            taints.is_some_and(|t| t.iter().any(|t| t.key == taint.key))
        };
        let Some(node) = managed.iter().find(|n| selects(sel, n) && !carries(n)) else {
            out.push(note(
                key,
                format!("no node to try taint {taint} on (none matches, or all carry it)"),
            ));
            continue;
        };
        out.push(try_taint(&as_nodegate, user, node, &key, &taint).await?);
    }
    Ok(())
}

/// A server-side dry-run patch adding `taint` to `node`: what the API
/// server (RBAC, admission policies, validation) says, nothing stored.
///
/// The patch carries the whole taint list and the node's resourceVersion,
/// so a node changed since it was read (the node lifecycle controller
/// adding or lifting its own taints) is a conflict, not a patch that seems
/// to change another taint: the node is read again and the patch retried.
async fn try_taint(
    client: &kube::Client,
    user: &str,
    node: &Node,
    key: &str,
    taint: &Taint,
) -> Result<Finding> {
    const ATTEMPTS: usize = 5;
    let name = node.metadata.name.clone().unwrap_or_default();
    let nodes = Api::<Node>::all(client.clone());
    let mut node = node.clone();
    // Each attempt but the last retried on a conflict; the last one's answer stands.
    for _ in 1..ATTEMPTS {
        match dry_run_taint(&nodes, user, &node, &name, key, taint).await {
            Err(Error::Kube {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 409 => {
                node = nodes
                    .get(&name)
                    .await
                    .map_err(Error::kube(format!("reading node {name} again")))?;
            }
            other => return other,
        }
    }
    dry_run_taint(&nodes, user, &node, &name, key, taint).await
}

async fn dry_run_taint(
    nodes: &Api<Node>,
    user: &str,
    node: &Node,
    name: &str,
    key: &str,
    taint: &Taint,
) -> Result<Finding> {
    let mut list: Vec<serde_json::Value> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    let mut added = serde_json::json!({"key": taint.key, "effect": taint.effect});
    if !taint.value.is_empty() {
        added["value"] = taint.value.clone().into();
    }
    list.push(added);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": list},
    });
    let dry_run = PatchParams::default().dry_run();
    match nodes.patch(name, &dry_run, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(note(
            key,
            format!("the API server lets {user} add taint {taint} (dry run on node {name})"),
        )),
        Err(kube::Error::Api(e)) if e.message.contains("impersonate") => Ok(note(
            key,
            format!(
                "taint {taint} not checked: these credentials may not act as {user} ({})",
                e.message
            ),
        )),
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => Ok(problem(
            key,
            format!(
                "the API server refuses {user} adding taint {taint} (dry run on node {name}): {}; \
                 nodegate could not write it (change the key, or the admission policy)",
                e.message
            ),
        )),
        Err(e) => Err(Error::kube(format!("dry-run patching node {name}"))(e)),
    }
}
