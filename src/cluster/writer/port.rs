//! The writer's port: the `EffectExecutor` the gates and the deciders
//! write through. Leadership is enforced here, right before each write: a
//! replica that does not lead answers `NotLeader` and writes nothing, so its
//! gates stay warm and re-send when it becomes leader. Only the random draw
//! of the delays is made here; their policy is `nodegate_actors::ports`'.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::Patch;
use nodegate_actors::ports::{self, EffectExecutor, REEXAMINE_PERIOD, Sending, retry_ceiling};
use nodegate_core::deciders::{Origin, Tally};
use nodegate_core::gate::{NodeEvent, PatchOutcome, UntaintPatch, annotation_time};
use nodegate_core::net::entrance::BoundPod;
use nodegate_core::vocab::model::{Interner, NodeInfo, PodInfo};
use nodegate_core::vocab::write::{Outcome, Write};
use rand::Rng;

use crate::cluster::protobuf::{self, Failed, WireNode};
use crate::cluster::writer::{Writer, pods_on};
use crate::cluster::{patch, project, replace};
use crate::serve::metrics::NodeWrite;

impl Writer {
    /// `nodegate_patch_attempts_total`, for a gate's write that was sent.
    fn count(&self, kind: NodeWrite, outcome: &PatchOutcome) {
        if let Some(m) = &self.metrics {
            m.patch_attempt(kind, outcome);
        }
    }

    async fn untaint(&self, p: UntaintPatch, sending: Sending) -> PatchOutcome {
        let Sending { withdrawal, seen } = sending;
        // Asked right before the request, after any wait for a patch slot or
        // a rate token: the gate may have seen a member stop being Ready
        // meanwhile, and an untaint not yet sent can still be called back.
        // A yes is the moment the untaint goes out: the end of nodegate's
        // own share of a reaction that a pod event started.
        let body = Patch::Json::<()>(patch::untaint(&p));
        let lane = (NodeWrite::Untaint, false);
        let outcome = self
            .patch_node(lane, &p.node, &body, || {
                let send = !withdrawal.is_requested() && self.leader.admits_write();
                if send && let (Some(seen), Some(m)) = (seen, &self.metrics) {
                    m.writes.event_to_patch(seen.elapsed());
                }
                send
            })
            .await;
        let outcome = match outcome {
            PatchOutcome::NotLeader if withdrawal.is_requested() => PatchOutcome::Withdrawn,
            other => other,
        };
        self.count(NodeWrite::Untaint, &outcome);
        outcome
    }

    /// A canary pod's create or delete (`request`; `None`: canaries off).
    async fn canary(
        &self,
        request: Option<impl Future<Output = Result<(), kube::Error>>>,
    ) -> PatchOutcome {
        let Some(request) = request else {
            return PatchOutcome::Failed("canary is not configured".into());
        };
        let may_write = || self.leader.admits_write();
        let answer = self.send((None, false), self.request_timeout, may_write, request);
        Self::classify(answer.await)
    }

    /// A node read for the executor's `get_node`: in protobuf, as the node
    /// watch reads it (only what the projection keeps is decoded, not the
    /// whole Node with its managed fields and images); as JSON once the API
    /// server refuses protobuf.
    async fn read_node(&self, name: &str) -> Result<Option<NodeInfo>, String> {
        if !self.nodes_as_json.load(Ordering::Relaxed) {
            let path = Node::url_path(&(), None);
            match self
                .read(protobuf::get::<WireNode>(&self.client, &path, name))
                .await?
            {
                Ok(node) => {
                    let mut interner = Interner::default();
                    return Ok(node.and_then(|n| project::node_in(&n.view(), &mut interner).0));
                }
                Err(Failed::Refused(answer)) => {
                    // Said once, by the first read refused.
                    if !self.nodes_as_json.swap(true, Ordering::Relaxed) {
                        tracing::info!(%answer, "the API server refused protobuf; reading nodes as JSON");
                    }
                }
                Err(Failed::Error(e)) => return Err(e.to_string()),
            }
        }
        let node = self.read(self.nodes().get_opt(name)).await?;
        Ok(node
            .map_err(|e| e.to_string())?
            .and_then(|n| project::node(&n).0))
    }
}

impl EffectExecutor for Writer {
    async fn write(&self, write: Write, sending: Sending) -> Outcome {
        // Refused before it is queued; the writer asks again before it sends.
        if !self.leader.admits_write() {
            return Outcome::NotLeader;
        }
        let may_write = || self.leader.admits_write();
        let canaries = self.canaries.as_ref();
        match write {
            Write::Untaint(patch) => self.untaint(patch, sending).await,
            Write::MarkTimedOut(mark) => {
                let body = Patch::Merge(patch::mark_timed_out(&mark));
                let lane = (NodeWrite::MarkTimedOut, false);
                let outcome = self.patch_node(lane, &mark.node, &body, may_write).await;
                self.count(NodeWrite::MarkTimedOut, &outcome);
                outcome
            }
            Write::MarkOpenedExternally(m) => {
                // Someone else opened the node (semantics.md §5.5).
                let at = annotation_time(Timestamp::now());
                let body = Patch::Merge(patch::opened_externally(at, m.cordoned));
                let outcome = self.patch_node((NodeWrite::Patch, true), &m.node, &body, may_write);
                let failed = "could not record opened-by: external on the node (the late-taint net still leaves it alone while this process runs)";
                logged(outcome.await, &m.node, failed)
            }
            Write::Condition(w) => {
                // `--node-condition`, to the `status` subresource.
                let body = Patch::Strategic(patch::open_condition(&w, Timestamp::now()));
                let lane = (NodeWrite::Patch, true);
                let outcome = self.patch_node_at(lane, &w.node, &body, may_write, true);
                let failed = "could not write the nodegate.dev/Open condition on the node";
                logged(Self::classify(outcome.await), &w.node, failed)
            }
            Write::Taint(write) => {
                // A decider's taint write (semantics.md §6). A condition
                // rule's write takes only the rate the gates' untaints leave
                // over (a rule the API server keeps refusing must not slow
                // openings down); the metrics label it `patch`, the net's and
                // re-gating's `add_taint`.
                let lane = match write.origin {
                    Origin::Rules => (NodeWrite::Patch, true),
                    // The canary decider writes no taints; were it to, as the net.
                    Origin::Net | Origin::Regate | Origin::Replace | Origin::Canary => {
                        (NodeWrite::AddTaint, false)
                    }
                };
                let body = Patch::Json::<()>(patch::taint_write(&write));
                self.patch_node(lane, &write.node, &body, may_write).await
            }
            Write::Replace(write) => replace::carry_out(self, &write, may_write).await,
            Write::CreateCanary(c) => {
                self.canary(canaries.map(|k| k.create(&self.client, &c)))
                    .await
            }
            Write::DeleteCanary(d) => {
                self.canary(canaries.map(|k| k.delete(&self.client, &d)))
                    .await
            }
        }
    }

    async fn record_event(&self, event: NodeEvent) {
        // Followers stay silent about decisions (in a dry run every replica
        // reaches the same ones; a held budget, a skipped late taint are
        // the leader's own), and the leader records them. An
        // Event that tells of this replica's own applied write (an opening,
        // a mark, a taint) has no other replica to record it, so it is
        // recorded even when the lease lapsed since, as it can for a moment
        // under load (a chaos run lost three openings' Events that way).
        if self.leader.is_leader() || event.own_write {
            Writer::record_event(self, &event).await;
        }
    }

    async fn get_node(&self, name: &str) -> Result<Option<NodeInfo>, String> {
        let read = self.read_node(name).await;
        read.map_err(|e| format!("reading node {name}: {e}"))
    }

    async fn list_pods(&self, node: &str) -> Result<Vec<BoundPod>, String> {
        let pods = self.read(pods_on(&self.client, node)).await?;
        pods.map_err(|e| e.to_string())
    }

    async fn list_canaries(&self) -> Result<Vec<PodInfo>, String> {
        let Some(canaries) = &self.canaries else {
            return Err("canary is not configured".into());
        };
        self.read(canaries.list(&self.client)).await?
    }

    fn may_write(&self) -> bool {
        self.leader.is_leader()
    }

    async fn fresh_node_versions(&self) -> Result<Option<Vec<(String, String)>>, String> {
        self.fresh_versions
            .get(self.leader.term(), || fresh_node_versions(self.client()))
            .await
            .map(Some)
    }

    fn tally(&self, tally: &Tally) {
        let Some(m) = &self.metrics else {
            return;
        };
        match tally {
            Tally::LateTaint(result) => m.late_taint(result),
            Tally::Regated(kind) => m.regate.regated(kind),
            Tally::RegateBudgetExhausted => m.regate.budget_exhausted(),
            Tally::RuleAdded(rule) => m.conditions.added(rule),
            Tally::RuleRemoved(rule) => m.conditions.removed(rule),
            Tally::RuleBudgetBlocked(rule) => m.conditions.budget_blocked(rule),
            Tally::Replaced { owner, outcome } => m.replace.replaced(owner, outcome),
            Tally::ReplaceBudgetExhausted => m.replace.budget_exhausted(),
            Tally::ReplaceSkipped(fallback) => m.replace.skipped(fallback),
            Tally::CanaryCreated => m.canary.created(),
            Tally::CanaryDeleted(why) => m.canary.deleted(why),
            Tally::CanaryFailed => m.canary.failed(),
        }
    }

    fn retry_delay(&self, attempt: u32) -> Duration {
        jittered(retry_ceiling(attempt), &mut rand::rng())
    }

    fn reexamine_delay(&self) -> Duration {
        let mut rng = rand::rng();
        ports::reexamine_jitter(REEXAMINE_PERIOD, |spread| rng.random_range(0..=spread))
    }
}

/// A best-effort write's `outcome`, logged as `failed` unless it was applied
/// or there was nothing to do.
fn logged(outcome: PatchOutcome, node: &str, failed: &str) -> PatchOutcome {
    match &outcome {
        PatchOutcome::Applied
        | PatchOutcome::NotFound
        | PatchOutcome::NotLeader
        | PatchOutcome::Withdrawn => {}
        other => tracing::warn!(node = %node, "{failed}: {other:?}"),
    }
    outcome
}

const VERSIONS_PAGE: u32 = 500;
const VERSIONS_PAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Every node's name and resourceVersion, by a paginated metadata LIST
/// served from etcd (a quorum read: no `resourceVersion` parameter), for a
/// budgeted decider's catch-up after gaining the lease.
async fn fresh_node_versions(client: &kube::Client) -> Result<Vec<(String, String)>, String> {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, ListParams};
    let api: Api<Node> = Api::all(client.clone());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(VERSIONS_PAGE);
    loop {
        let page = tokio::time::timeout(VERSIONS_PAGE_TIMEOUT, api.list_metadata(&params))
            .await
            .map_err(|_| format!("no answer to a node LIST within {VERSIONS_PAGE_TIMEOUT:?}"))?
            .map_err(|e| format!("node LIST: {e}"))?;
        out.extend(page.items.into_iter().filter_map(|n| {
            let meta = n.metadata;
            Some((meta.name?, meta.resource_version?))
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// `ports::jitter` of `ceiling`, drawn from `rng`: in [ceiling/2, ceiling].
pub fn jittered(ceiling: Duration, rng: &mut impl Rng) -> Duration {
    ports::jitter(ceiling, |spread| rng.random_range(0..=spread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_actors::ports::retry_ceiling;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn jitter_stays_within_half_to_full_ceiling() {
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 2..12 {
            let ceiling = retry_ceiling(attempt);
            for _ in 0..100 {
                let d = jittered(ceiling, &mut rng);
                assert!(
                    d >= ceiling / 2 && d <= ceiling,
                    "attempt {attempt}: {d:?} not in [{:?}, {ceiling:?}]",
                    ceiling / 2
                );
            }
        }
    }

    #[test]
    fn jitter_spreads_retries() {
        let mut rng = StdRng::seed_from_u64(1);
        let ceiling = Duration::from_millis(400);
        let distinct: std::collections::BTreeSet<_> =
            (0..50).map(|_| jittered(ceiling, &mut rng)).collect();
        assert!(
            distinct.len() > 40,
            "jitter must spread retries, got {} distinct delays of 50",
            distinct.len()
        );
    }
}
