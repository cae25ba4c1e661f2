//! `nodegate doctor`: reads the cluster around nodegate and says, for each
//! problem, what to change. Everything is read first ([`fetch`]), then
//! judged by pure [`checks`]. Exit 0 when no check found a problem, 3 when
//! one did, 1 when the cluster could not be read, 2 for a bad flag or value.
//! It never writes to the cluster.

pub mod checks;
pub mod fetch;
pub mod keys;
pub mod report;
pub mod source;

use std::process::ExitCode;

use jiff::Timestamp;
use kube::Client;

use crate::commands::output;
use crate::error::{EXIT_PROBLEMS, Result};
use crate::settings::cli::DoctorArgs;
use crate::settings::config::{self, RunSettings};
use checks::{admission, autoscaler, karpenter, leader, nodes, rbac};
use nodegate_core::vocab::model::{KARPENTER_NODEPOOL_LABEL, Labels};
use report::{Check, Report};

pub async fn main(args: DoctorArgs) -> Result<ExitCode> {
    // Every flag and value checked before anything is sent (exit 2).
    let conn = output::connection(&args.run.cluster)?;
    source::refuse_settings_with_from_cluster(&args)?;
    let given = (!args.from_cluster)
        .then(|| config::run_settings(&args.run))
        .transpose()?;
    let client = output::connect(&conn).await?;
    let ns = args.namespace.as_str();
    let deployment = fetch::deployment(&client, ns, &args.deployment).await?;
    let (label, settings) = match given {
        Some(s) => ("flags".to_string(), s),
        None => {
            let d = source::found(&deployment, ns, &args.deployment, "nodegate's flags")?;
            let s = source::from_deployment(&client, ns, d).await?;
            (format!("deployment {ns}/{}", args.deployment), s)
        }
    };
    // The ServiceAccount of the Deployment's pods.
    let account = match &deployment {
        Ok(Some(d)) => {
            let spec = d.spec.as_ref().and_then(|s| s.template.spec.as_ref());
            let name = spec.and_then(|p| p.service_account_name.as_deref());
            name.filter(|n| !n.is_empty()).unwrap_or("default")
        }
        _ => "nodegate",
    };
    let account = (ns.to_string(), account.to_string());
    let checks = gather(&client, &settings, ns, &account).await?;
    let report = Report::new(label, checks);
    let text = output::encode(&report, args.output, "the doctor's report")?;
    let text = text.unwrap_or_else(|| report.text());
    output::print(text.as_bytes(), "cannot write to stdout")?;
    Ok(output::exit(report.problems > 0, EXIT_PROBLEMS))
}

/// Reads the cluster and runs every check, in the report's order.
async fn gather(
    client: &Client,
    s: &RunSettings,
    namespace: &str,
    account: &(String, String),
) -> Result<Vec<Check>> {
    let now = Timestamp::now();
    let seen_nodes = fetch::nodes(client).await?;
    let mut out = Vec::new();
    let deployments = fetch::deployments(client).await?;
    let version = deployments.as_deref().ok().and_then(karpenter::version);
    match fetch::nodepools(client).await? {
        Ok(pools) => out.extend(karpenter::check(
            &s.gate,
            pools.as_deref(),
            version.as_ref(),
        )),
        Err(why) => out.push(karpenter::CHECK.skipped("NodePools", why)),
    }
    // cluster-autoscaler sees every node that is not Karpenter's.
    let ca_labels = seen_nodes
        .iter()
        .filter(|n| !n.labels.contains_key(KARPENTER_NODEPOOL_LABEL))
        .map(|n| &n.labels);
    let ca_taints = keys::added_to_any(&s.gate, ca_labels);
    match &deployments {
        Ok(d) => out.extend(autoscaler::check(s, &ca_taints, &autoscaler::found(d))),
        Err(why) => out.push(autoscaler::CHECK.skipped("Deployments", why)),
    }
    // Labels for the admission probe's Node inside `--node-selector`: none
    // when that takes every node, else those of a node it takes (without its
    // hostname); `None` when no node is inside it.
    let scope = &s.gate.scope;
    let probe_labels = match scope.includes(&Labels::new()) {
        true => Some(Labels::new()),
        false => seen_nodes
            .iter()
            .find(|n| scope.includes(&n.labels))
            .map(|n| {
                let mut labels = n.labels.clone();
                labels.remove("kubernetes.io/hostname");
                labels
            }),
    };
    match fetch::admission(client, probe_labels.as_ref()).await? {
        Ok(a) => out.extend(admission::check(s, &a)),
        Err(why) => out.push(admission::CHECK.skipped("Node CREATE", why)),
    }
    let le = &s.leader_election;
    let lease_ns = le.lease_namespace.as_deref().unwrap_or(namespace);
    let (line, live) = match fetch::lease(client, lease_ns, &le.lease_name).await? {
        Ok(lease) => leader::check(le, lease_ns, lease.as_ref(), now),
        Err(why) => (
            leader::CHECK.skipped(format!("Lease {lease_ns}/{}", le.lease_name), why),
            None,
        ),
    };
    out.push(line);
    let answers = fetch::access(client, account, rbac::required(s, lease_ns)).await?;
    out.extend(rbac::check(
        &format!("{}/{}", account.0, account.1),
        answers.as_deref(),
    ));
    out.extend(nodes::check(s, &seen_nodes, live, now));
    Ok(out)
}

#[cfg(test)]
mod tests;
