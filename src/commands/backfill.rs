//! `nodegate backfill`: at install, put the startup taint on the nodes that
//! never had it and have no workload yet (semantics.md §6.3), with
//! `nodegate.dev/gated-since` = now so their deadline counts from the
//! backfill. The decisions are the core's (`entrance::backfill`,
//! `workload_pods`); a node that changed between the read and the patch is
//! read again and decided again.

use std::process::ExitCode;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use nodegate_core::net::entrance::{self, Skip};
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::rules::startup::StartupTaints;
use nodegate_core::vocab::config::Scope;
use nodegate_core::vocab::model::NodeInfo;
use serde::Serialize;

use crate::cluster::entrance::{gated_since, put_taint};
use crate::cluster::writer::{Writer, pods_on};
use crate::cluster::{project, snapshot};
use crate::commands::output;
use crate::error::{EXIT_FAILURE, Error, Result};
use crate::settings::cli::BackfillArgs;
use crate::settings::config::{self, ConfigError};
use nodegate_core::gate::PatchOutcome;

/// Reads and patches of one node before backfill gives up on it (each retry
/// follows a change by someone else).
const ATTEMPTS: usize = 3;

/// One node's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    pub node: String,
    /// `tainted`, `would-taint` (dry run), `skipped` or `failed`.
    pub action: &'static str,
    /// What was put on, or why not.
    pub detail: String,
}

struct Backfill {
    scope: Scope,
    /// `--selector`, within the scope.
    selector: Option<LabelSelector>,
    managed: Vec<ManagedTaint>,
    /// Which taint each node gets (`--taint-for`, `--autoscaler`).
    startup: StartupTaints,
    dry_run: bool,
}

fn settings(args: &BackfillArgs) -> Result<Backfill, ConfigError> {
    let mut file = config::load_file(&args.gate)?;
    let gate = config::gate_settings(&args.gate, &mut file)?;
    let selector = args.selector.as_deref().map(|s| {
        LabelSelector::parse(s)
            .map_err(|e| config::invalid(format!("--selector {s:?}"), e.to_string()))
    });
    Ok(Backfill {
        scope: gate.scope,
        selector: selector.transpose()?,
        managed: gate.placement.managed_taints,
        startup: gate.startup,
        dry_run: args.dry_run,
    })
}

/// Runs `nodegate backfill`. A node it could not taint is a line, not an
/// error: the run goes on, and ends with [`EXIT_FAILURE`] once all are
/// printed.
pub async fn main(args: BackfillArgs) -> Result<ExitCode> {
    let b = settings(&args)?;
    let connection = output::connection(&args.cluster)?;
    let client = output::connect(&connection).await?;
    let writer = Writer::for_command(client, connection.request_timeout);
    let nodes: Api<Node> = Api::all(writer.client().clone());
    let list = snapshot::nodes(writer.client())
        .await
        .map_err(Error::kube("listing nodes"))?;
    let mut lines = Vec::new();
    // A Node without a name cannot be patched: there is nothing to backfill.
    for n in list.iter().filter_map(|n| project::node(n).0) {
        lines.push(one(&writer, &nodes, &b, n).await);
    }
    lines.sort_by(|a, b| a.node.cmp(&b.node));
    let text = output::encode(&lines, args.output, "the output")?.unwrap_or_else(|| table(&lines));
    output::print(text.as_bytes(), "writing to stdout")?;
    let failed = lines.iter().any(|l| l.action == "failed");
    Ok(output::exit(failed, EXIT_FAILURE))
}

async fn one(writer: &Writer, nodes: &Api<Node>, b: &Backfill, first: NodeInfo) -> Line {
    let name = first.name.clone();
    let line = |action, detail: String| Line {
        node: name.clone(),
        action,
        detail,
    };
    if b.selector
        .as_ref()
        .is_some_and(|s| !s.matches(&first.labels))
    {
        return line("skipped", "excluded by --selector".into());
    }
    let mut node = first;
    for _ in 0..ATTEMPTS {
        if let Err(skip) = entrance::backfill(&entrance::view(&node), &b.scope, &b.managed) {
            return line("skipped", skip.to_string());
        }
        let pods = match pods_on(writer.client(), &node.name).await {
            Ok(p) => p,
            Err(e) => return line("failed", format!("listing its pods: {e}")),
        };
        let workload = entrance::workload_pods(&pods);
        if !workload.is_empty() {
            return line("skipped", Skip::HasWorkload(workload).to_string());
        }
        let taint = b.startup.for_node(&node.labels).to_taint();
        if b.dry_run {
            return line("would-taint", taint.to_string());
        }
        match put_taint(writer, &node, &taint, &[gated_since(Timestamp::now())]).await {
            PatchOutcome::Applied => return line("tainted", taint.to_string()),
            PatchOutcome::Conflict => match nodes.get_opt(&node.name).await {
                Ok(Some(n)) => match project::node(&n).0 {
                    Some(read) => node = read,
                    None => return line("failed", "read again without a name".into()),
                },
                Ok(None) => return line("skipped", "deleted meanwhile".into()),
                Err(e) => return line("failed", format!("reading it again: {e}")),
            },
            PatchOutcome::NotFound => return line("skipped", "deleted meanwhile".into()),
            failed => return line("failed", output::patch_failure(failed)),
        }
    }
    line(
        "failed",
        format!("it changed under each of {ATTEMPTS} attempts; run backfill again"),
    )
}

/// The table: one line per node, aligned.
pub fn table(lines: &[Line]) -> String {
    if lines.is_empty() {
        return "no nodes\n".into();
    }
    let row = |l: &Line| vec![l.node.clone(), l.action.into(), l.detail.clone()];
    let mut rows: Vec<Vec<String>> = vec![["NODE", "ACTION", "DETAIL"].map(String::from).into()];
    rows.extend(lines.iter().map(row));
    output::aligned(&rows, "  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_aligns_its_columns() {
        let lines = vec![
            Line {
                node: "a".into(),
                action: "tainted",
                detail: "nodegate.dev/initializing:NoSchedule".into(),
            },
            Line {
                node: "worker-long".into(),
                action: "skipped",
                detail: "has workload pods: web/api".into(),
            },
        ];
        assert_eq!(
            table(&lines),
            "NODE         ACTION   DETAIL\n\
             a            tainted  nodegate.dev/initializing:NoSchedule\n\
             worker-long  skipped  has workload pods: web/api\n"
        );
        assert_eq!(table(&[]), "no nodes\n");
    }
}
