//! `nodegate uninstall --dry-run | --yes`: takes nodegate's marks ([`plan`])
//! off every node in scope, one conditional patch a node through the
//! writer, as the controller changes nodes; a node that changed between the
//! read and the patch is read and planned again. It refuses (with `--yes`)
//! while a replica renewed nodegate's Lease within `--lease-fresh`: a
//! running controller would put the taints back on new nodes and re-gate
//! old ones.

use std::process::ExitCode;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::Patch;
use nodegate_core::gate::{OPEN_CONDITION, PatchOutcome};
use nodegate_core::vocab::config::Scope;

use crate::cluster::writer::Writer;
use crate::cluster::{project, snapshot};
use crate::commands::output;
use crate::error::{EXIT_FAILURE, Error, Result};
use crate::serve::metrics::NodeWrite;
use crate::settings::cli::UninstallArgs;
use crate::settings::config::{self, ConfigError};

pub mod plan;
use plan::{Cleanup, Owned};

/// Reads and patches of one node before uninstall gives up on it (each
/// retry follows a change by someone else).
const ATTEMPTS: usize = 3;

/// Nodes between two progress lines on stderr.
const PROGRESS_EVERY: usize = 100;

struct Settings {
    scope: Scope,
    owned: Owned,
    dry_run: bool,
    ignore_leader: bool,
    fresh: Duration,
}

fn settings(args: &UninstallArgs) -> Result<Settings, ConfigError> {
    let mut file = config::load_file(&args.gate)?;
    let gate = config::gate_settings(&args.gate, &mut file)?;
    let fresh = config::parse_duration("--lease-fresh", &args.lease_fresh)?;
    let foreign = plan::foreign_keys(&gate.placement.managed_taints);
    if !foreign.is_empty() && !args.remove_foreign_keys {
        return Err(config::invalid(
            format!("managed taint {}", foreign.join(", ")),
            "outside nodegate.dev/: uninstall would take it off every node in scope, also where \
             its own owner put it on (a node whose agent is not ready). Pass \
             --remove-foreign-keys to remove it anyway, or leave it out of the settings given to \
             uninstall",
        ));
    }
    Ok(Settings {
        scope: gate.scope,
        owned: Owned {
            managed: gate.placement.managed_taints,
            // With --keep-rule-taints, no rule's taint is nodegate's to take off.
            rule_taints: gate
                .condition_taints
                .into_iter()
                .filter(|_| !args.keep_rule_taints)
                .map(|r| (r.name.to_string(), r.taint))
                .collect(),
        },
        dry_run: args.dry_run,
        ignore_leader: args.ignore_leader,
        fresh,
    })
}

pub async fn main(args: UninstallArgs) -> Result<ExitCode> {
    let s = settings(&args)?;
    let connection = output::connection(&args.cluster)?;
    let client = output::connect(&connection).await?;
    let lease = &args.lease;
    if let Some(why) = lease_held(&client, &lease.namespace, &lease.lease_name, s.fresh).await? {
        if !s.dry_run && !s.ignore_leader {
            return Err(Error::invalid(
                "refusing to uninstall",
                format!(
                    "{why}: a running controller would put its taints back. Stop it first \
                     (helm uninstall, or scale the Deployment to 0), wait until the lease is \
                     older than --lease-fresh, or pass --ignore-leader"
                ),
            ));
        }
        eprintln!("warning: {why}");
    }
    let writer = Writer::for_command(client, connection.request_timeout);
    // Cleans every node in scope, printing a line per node changed (or to be
    // changed) as it goes, and a summary.
    let nodes: Api<Node> = Api::all(writer.client().clone());
    let list = snapshot::nodes(writer.client())
        .await
        .map_err(Error::kube("listing nodes"))?;
    let total = list.len();
    let (mut changed, mut failed) = (0usize, 0usize);
    let mut out = std::io::stdout().lock();
    for (i, n) in list.iter().enumerate() {
        if i > 0 && i % PROGRESS_EVERY == 0 {
            eprintln!("checked {i}/{total} nodes");
        }
        let Some((action, detail)) = clean_one(&writer, &nodes, n, &s).await else {
            continue;
        };
        match action {
            "failed" => failed += 1,
            _ => changed += 1,
        }
        let name = n.metadata.name.as_deref().unwrap_or("?");
        let text = format_args!("{name}  {action}  {detail}");
        output::line(&mut out, text, "writing to stdout")?;
    }
    let verb = if s.dry_run { "would change" } else { "changed" };
    let text = format_args!("{total} nodes checked, {changed} {verb}, {failed} failed");
    output::line(&mut out, text, "writing to stdout")?;
    Ok(output::exit(failed > 0, EXIT_FAILURE))
}

/// `Some(why)` when a replica holds the Lease and renewed it within
/// `fresh`; `None` when it is absent, released or stale.
async fn lease_held(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    fresh: Duration,
) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("reading lease {namespace}/{name}")))?;
    let Some(spec) = lease.and_then(|l| l.spec) else {
        return Ok(None);
    };
    let holder = spec.holder_identity.unwrap_or_default();
    let renewed = spec.renew_time.map(|t| t.0);
    Ok(held(&holder, renewed, Timestamp::now(), fresh).then(|| {
        let ago = renewed.map_or(0, |r| Timestamp::now().duration_since(r).as_secs());
        format!("lease {namespace}/{name} is held by {holder:?}, renewed {ago}s ago")
    }))
}

/// Whether a Lease with this holder, renewed at `renewed`, counts as held
/// at `now`. A holder with no renewTime counts as held: nothing says it
/// stopped.
pub fn held(holder: &str, renewed: Option<Timestamp>, now: Timestamp, fresh: Duration) -> bool {
    if holder.is_empty() {
        return false;
    }
    let fresh = jiff::SignedDuration::try_from(fresh).unwrap_or(jiff::SignedDuration::MAX);
    renewed.is_none_or(|r| now.duration_since(r) < fresh)
}

/// One node: `None` when nothing of nodegate's is on it (or it is outside
/// the scope), else the action (`removed`, `would-remove`, `failed`) and
/// what.
async fn clean_one(
    writer: &Writer,
    nodes: &Api<Node>,
    first: &Node,
    s: &Settings,
) -> Option<(&'static str, String)> {
    let mut node = first.clone();
    for _ in 0..ATTEMPTS {
        let info = project::node(&node).0?;
        if !s.scope.includes(&info.labels) {
            return None;
        }
        let keys = node.metadata.annotations.iter().flat_map(|a| a.keys());
        let conditions = node.status.as_ref().and_then(|st| st.conditions.as_ref());
        let open = conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == OPEN_CONDITION));
        let cleanup = plan::plan(&info, keys, open, &s.owned);
        if cleanup.is_empty() {
            return None;
        }
        if s.dry_run {
            return Some(("would-remove", cleanup.describe()));
        }
        match send(writer, &cleanup).await {
            PatchOutcome::Applied => return Some(("removed", cleanup.describe())),
            PatchOutcome::Conflict => match nodes.get_opt(&cleanup.node).await {
                Ok(Some(n)) => node = n,
                Ok(None) => return None,
                Err(e) => return Some(("failed", format!("reading it again: {e}"))),
            },
            PatchOutcome::NotFound => return None,
            failed => return Some(("failed", output::patch_failure(failed))),
        }
    }
    Some((
        "failed",
        format!("it changed under each of {ATTEMPTS} attempts; run uninstall again"),
    ))
}

/// The cleanup through the writer (as nodegate's field manager).
async fn send(writer: &Writer, cleanup: &Cleanup) -> PatchOutcome {
    let patch = match plan::patch(cleanup) {
        Ok(p) => p,
        Err(e) => return PatchOutcome::Failed(format!("cannot build the patch: {e}")),
    };
    let write = (NodeWrite::Patch, false);
    let patch = Patch::Json::<()>(patch);
    let sent = writer
        .patch_node(write, &cleanup.node, &patch, || true)
        .await;
    if sent != PatchOutcome::Applied || !cleanup.open_condition {
        return sent;
    }
    // The condition through the status subresource: node conditions merge
    // by type, so this deletes that one and keeps every other.
    let delete = serde_json::json!({"status": {"conditions": [
        {"type": OPEN_CONDITION, "$patch": "delete"},
    ]}});
    let delete = Patch::Strategic(delete);
    let e = match writer
        .patch_node_at(write, &cleanup.node, &delete, || true, true)
        .await
    {
        Ok(Ok(())) => return PatchOutcome::Applied,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    PatchOutcome::Failed(format!(
        "removed the rest, but not the condition {OPEN_CONDITION}: {e}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_counts_as_held_while_freshly_renewed() {
        let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let at = |s: i64| Timestamp::from_second(s).ok();
        let fresh = Duration::from_secs(60);
        assert!(held("a_1", at(990), now, fresh));
        assert!(!held("a_1", at(900), now, fresh), "stale");
        assert!(!held("", at(999), now, fresh), "released");
        assert!(held("a_1", None, now, fresh), "no renewTime");
    }
}
