//! The one node writer: carries out the gates' and the deciders' effects
//! against the API server, and the one-off commands' node patches
//! (docs/architecture.md, The node writer). Every write takes one path,
//! [`Writer::send`]; only the lease, the webhook's Secret and the watches
//! have their own. Its port, the `EffectExecutor`, is `port`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::{Client, Resource};
use nodegate_core::gate::{EventType, NodeEvent, PatchOutcome, Reason};
use nodegate_core::net::entrance::BoundPod;
use serde_json::json;
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;

use crate::cluster::canary::Canaries;
use crate::cluster::leader::Leadership;
use crate::cluster::project;
use crate::cluster::term_read::TermRead;
use crate::serve::metrics::{Metrics, NodeWrite};

/// The controller's name in Events (`reportingController`).
pub const CONTROLLER_NAME: &str = nodegate_core::vocab::annotations::REPORTING_CONTROLLER;
pub use super::server_time::FIELD_MANAGER;

/// A token bucket: `qps` tokens a second, at most `burst` saved up, with
/// two priorities: [`acquire`](Self::acquire) for work on the critical path
/// and [`acquire_background`](Self::acquire_background) for the rest.
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    /// Tokens background requests leave in the bucket: half the burst, kept
    /// for the critical path's next burst.
    reserve: f64,
    state: Mutex<Bucket>,
    /// `acquire` callers sleeping for a token they already took; counted
    /// down when they stop waiting, also by being dropped mid-wait (a count
    /// left behind would hold every background request back for good).
    waiting: AtomicUsize,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One `acquire` caller's place in [`RateLimiter::waiting`].
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Bucket {
    fn refill(&mut self, qps: f64, burst: f64) {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * qps).min(burst);
        self.at = now;
    }
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps,
            burst,
            reserve: (burst / 2.0).floor(),
            state: Mutex::new(Bucket {
                tokens: burst,
                at: Instant::now(),
            }),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Waits until a request may go. Takes its token at once (the bucket may
    /// go negative), so callers are served in the order they came.
    pub async fn acquire(&self) {
        let waiting = {
            let mut b = self.state.lock().await;
            b.refill(self.qps, self.burst);
            b.tokens -= 1.0;
            if b.tokens >= 0.0 {
                None
            } else {
                // Counted under the bucket's lock, as background requests
                // read it; no await between here and the guard.
                self.waiting.fetch_add(1, Ordering::AcqRel);
                let wait = Duration::from_secs_f64(-b.tokens / self.qps);
                Some((Waiting(&self.waiting), wait))
            }
        };
        if let Some((_waiting, wait)) = waiting {
            tokio::time::sleep(wait).await;
        }
    }

    /// Waits until a whole token above the reserve is free and no
    /// [`acquire`](Self::acquire) caller is waiting, then takes it:
    /// background requests use only the capacity the critical path leaves
    /// over, and never its reserve. Without one, a steady stream of Events
    /// took every token as it came, so each burst of openings waited for
    /// tokens one by one (own share p99 14.6–71.7 ms at N = 5000, see
    /// docs/benchmarks.md); the same stream still gets every token the
    /// openings do not use.
    pub async fn acquire_background(&self) {
        loop {
            let wait = {
                let mut b = self.state.lock().await;
                b.refill(self.qps, self.burst);
                let waiting = self.waiting.load(Ordering::Acquire);
                if waiting == 0 && b.tokens >= 1.0 + self.reserve {
                    b.tokens -= 1.0;
                    return;
                }
                // Until the bucket holds a whole token over the reserve
                // again, at least one token's time.
                let short = 1.0 + self.reserve - b.tokens;
                Duration::from_secs_f64(short.max(1.0) / self.qps)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// The one node writer. The controller's holds leadership, metrics and the
/// canaries' settings ([`Writer::serving`]); a one-off command's
/// ([`Writer::for_command`]) always may write.
pub struct Writer {
    client: Client,
    slots: Semaphore,
    limiter: RateLimiter,
    /// `--kube-request-timeout`: the longest one request may go unanswered
    /// (a hung connection must not hold a patch slot, or a gate's write,
    /// past its deadline).
    request_timeout: Duration,
    /// `reportingInstance` of Events: this replica's identity.
    instance: String,
    /// Whether this replica may write. Without leader election, and for a
    /// one-off command, it always may.
    leader: Arc<Leadership>,
    /// Where the writes' counts and each node write's wait and request
    /// times go, if anywhere.
    metrics: Option<Arc<Metrics>>,
    /// The canary pods' requests (`canary`); `None`: off.
    canaries: Option<Canaries>,
    /// The fresh read of every node's version the budgeted deciders wait
    /// for after gaining the lease: one per leadership term, shared.
    fresh_versions: TermRead<Vec<(String, String)>>,
    /// Set once the API server refused a node read in protobuf: the node
    /// is read as JSON from then on.
    nodes_as_json: AtomicBool,
}

/// Why a request through [`Writer::send`] has no answer of its own.
#[derive(Debug, thiserror::Error)]
pub enum Unsent {
    /// Not sent: this replica may no longer write.
    #[error("this replica lost the lease")]
    NotLeader,
    /// Not sent: the slots are closed.
    #[error("writer is shutting down")]
    Closed,
    /// Sent, and not answered in time: it may have been applied.
    #[error("{0}")]
    NoAnswer(String),
}

impl Writer {
    pub fn new(
        client: Client,
        max_concurrent_patches: usize,
        qps: f64,
        burst: u32,
        request_timeout: Duration,
        instance: String,
    ) -> Self {
        Writer {
            client,
            slots: Semaphore::new(max_concurrent_patches),
            limiter: RateLimiter::new(qps, burst),
            request_timeout,
            instance,
            leader: Arc::new(Leadership::always()),
            metrics: None,
            canaries: None,
            fresh_versions: TermRead::default(),
            nodes_as_json: AtomicBool::new(false),
        }
    }

    /// The writer of `backfill` and `uninstall`, which write one node at a
    /// time and have no flags for slots or rate: no leader election, one
    /// slot, the controller's default rate (`--kube-qps 50`, `--kube-burst
    /// 100`: a command asks no more of the API server than the controller
    /// does), and `--request-timeout` (which the client applies too; none
    /// when not given or 0).
    pub fn for_command(client: Client, request_timeout: Option<Duration>) -> Self {
        let timeout = request_timeout.unwrap_or(Duration::MAX);
        Writer::new(client, 1, 50.0, 100, timeout, CONTROLLER_NAME.into())
    }

    /// The controller's writer: writes while `leader` admits them, counts
    /// into `metrics`, makes canaries with `canaries`.
    pub fn serving(
        self,
        leader: Arc<Leadership>,
        metrics: Arc<Metrics>,
        canaries: Option<Canaries>,
    ) -> Self {
        Writer {
            leader,
            metrics: Some(metrics),
            canaries,
            ..self
        }
    }

    /// The client this writer sends with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// The one path of every write: waits for a slot, then for a rate token
    /// (a `background` write only for what the critical path leaves over),
    /// asks `may_write` once more (the wait can be long enough for this
    /// replica to lose the lease), then awaits `request` for at most
    /// `timeout`. A node write (`kind`) reports its wait and request times.
    pub async fn send<T>(
        &self,
        (kind, background): (Option<NodeWrite>, bool),
        timeout: Duration,
        may_write: impl Fn() -> bool,
        request: impl Future<Output = T>,
    ) -> Result<T, Unsent> {
        let queued = Instant::now();
        let Ok(_slot) = self.slots.acquire().await else {
            return Err(Unsent::Closed);
        };
        if background {
            self.limiter.acquire_background().await;
        } else {
            self.limiter.acquire().await;
        }
        let sent = Instant::now();
        let observe = |request: Option<Duration>| {
            if let (Some(kind), Some(m)) = (kind, &self.metrics) {
                m.writes.observe(kind, sent.duration_since(queued), request);
            }
        };
        if !may_write() {
            observe(None);
            return Err(Unsent::NotLeader);
        }
        let answer = tokio::time::timeout(timeout, request).await;
        observe(Some(sent.elapsed()));
        answer.map_err(|_| Unsent::NoAnswer(no_answer(timeout)))
    }

    fn classify(answer: Result<Result<(), kube::Error>, Unsent>) -> PatchOutcome {
        match answer {
            Ok(answer) => outcome(answer),
            Err(Unsent::NotLeader) => PatchOutcome::NotLeader,
            Err(e @ Unsent::Closed) => PatchOutcome::Failed(e.to_string()),
            // Sent, and never answered: it may have been applied.
            Err(Unsent::NoAnswer(e)) => PatchOutcome::Ambiguous(e),
        }
    }

    /// One node write through [`Self::send`], sent as nodegate's field
    /// manager to the node itself or (`status`) to its `status`
    /// subresource; the API server's own answer, or why there is none.
    pub async fn patch_node_at<P: serde::Serialize + std::fmt::Debug>(
        &self,
        (kind, background): (NodeWrite, bool),
        node: &str,
        patch: &Patch<P>,
        may_write: impl Fn() -> bool,
        status: bool,
    ) -> Result<Result<(), kube::Error>, Unsent> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let nodes = Request::new(Node::url_path(&(), None));
        let request = async {
            let (request, verb) = if status {
                let request = nodes.patch_subresource("status", node, &params, patch);
                (request, "patch_status")
            } else {
                (nodes.patch(node, &params, patch), "patch")
            };
            self.outcome_of(request, verb).await
        };
        let lane = (Some(kind), background);
        self.send(lane, self.request_timeout, may_write, request)
            .await
    }

    /// Sends a write built as kube's `Api` builds it (`verb` names it in
    /// kube's request span) and reads the answer for its outcome only: a
    /// refusal is read as the API server's `Status`, and the object a
    /// success echoes back is not parsed at all (building a Node took about
    /// 200 allocations per write; even skipping it as JSON took 30,000
    /// instructions, a fiftieth of the controller's in a scale run).
    async fn outcome_of(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        verb: &'static str,
    ) -> Result<(), kube::Error> {
        let mut request = request.map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert(verb);
        self.client.request_text(request).await.map(|_| ())
    }

    /// [`Self::patch_node_at`] to the node itself, its answer classified.
    pub async fn patch_node<P: serde::Serialize + std::fmt::Debug>(
        &self,
        write: (NodeWrite, bool),
        node: &str,
        patch: &Patch<P>,
        may_write: impl Fn() -> bool,
    ) -> PatchOutcome {
        let answer = self.patch_node_at(write, node, patch, may_write, false);
        Self::classify(answer.await)
    }

    /// `--kube-request-timeout`.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// One read: a rate token, then `request` within the request timeout
    /// (`Err`: the error of one given up).
    async fn read<T>(&self, request: impl Future<Output = T>) -> Result<T, String> {
        self.limiter.acquire().await;
        let answer = tokio::time::timeout(self.request_timeout, request).await;
        answer.map_err(|_| no_answer(self.request_timeout))
    }

    /// Records an Event (events.k8s.io/v1) regarding a node, with a token
    /// nobody else waits for: a burst of openings is never held back by the
    /// Events that report them (the scale benchmark showed deadline openings
    /// of 950 nodes waiting ~20 s behind their own Events). Failures are
    /// logged, never retried: an Event is a courtesy, the journal is the record.
    ///
    /// Not kube-runtime's `events::Recorder`, although the object is the same:
    /// the Recorder keeps every Event it published for six minutes to merge
    /// repeats into a series (one full Event object per opened node: tens of
    /// MiB in a 10,000-node scale-up, for a merge that an opening, which
    /// happens once per node, never needs), and a merge is a `patch`, a verb
    /// nodegate's RBAC deliberately does not grant on Events.
    pub async fn record_event(&self, ev: &NodeEvent) {
        self.limiter.acquire_background().await;
        let now = jiff::Timestamp::now();
        let body = json!({
            // The same naming client-go's recorder uses: unique per node and
            // instant, and a valid object name (a generateName ending in '.'
            // is not).
            "metadata": {"name": format!("{}.{:x}", ev.node, now.as_nanosecond()), "namespace": "default"},
            "eventTime": MicroTime(now),
            "type": match ev.type_ { EventType::Normal => "Normal", EventType::Warning => "Warning" },
            "reason": ev.reason.as_str(),
            // Already within the API's 1024 bytes: the core cuts every note.
            "note": ev.note,
            "action": action_for(ev.reason),
            "reportingController": CONTROLLER_NAME,
            "reportingInstance": self.instance,
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": ev.node, "uid": ev.node_uid},
        });
        // Checked against the Event's type, then sent as that type writes it.
        let typed = serde_json::from_value::<KubeEvent>(body);
        let body = match typed.and_then(|event| serde_json::to_vec(&event)) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(node = %ev.node, reason = %ev.reason, error = %e, "cannot build event");
                return;
            }
        };
        let events = Request::new(KubeEvent::url_path(&(), Some("default")));
        let request = events.create(&PostParams::default(), body);
        let request = self.outcome_of(request, "create");
        let error = match tokio::time::timeout(self.request_timeout, request).await {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => no_answer(self.request_timeout),
        };
        tracing::warn!(node = %ev.node, reason = %ev.reason, %error, "cannot record event");
    }
}

fn no_answer(timeout: Duration) -> String {
    format!("no answer within {}", humantime::format_duration(timeout))
}

fn action_for(reason: Reason) -> &'static str {
    match reason {
        Reason::GateOpened | Reason::GateWouldOpen => "Open",
        Reason::GateTimedOut => "Timeout",
        Reason::LateTaint | Reason::LateTaintSkipped | Reason::ConditionTaintAdded => "Taint",
        Reason::NodeRegated | Reason::RegateBudgetExhausted => "Regate",
        Reason::ConditionTaintRemoved => "Untaint",
        Reason::GateReplaced | Reason::ReplaceBudgetExhausted | Reason::ReplaceSkipped => "Replace",
    }
}

/// One LIST of the pods bound to `node` (every namespace), metadata only:
/// the executor's `list_pods` sends it within the rate and the timeout, backfill
/// as it is.
pub async fn pods_on(client: &kube::Client, node: &str) -> Result<Vec<BoundPod>, kube::Error> {
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods.list_metadata(&params).await?;
    let pods = list.items.iter().map(|p| project::bound_pod(&p.metadata));
    Ok(pods.collect())
}

/// 409 (resourceVersion moved) and a 422 whose JSON patch did not apply (a
/// `test` op failed, a path is gone) both mean "the node changed since the
/// gate looked"; the gate re-reads and re-decides. A 422 that names invalid
/// fields (`details.causes`) is the API server refusing the object the
/// patch would make: trying again cannot help, so it is a failure.
/// A 5xx, or an error of the connection once the request may have gone out,
/// leaves open whether it was applied: ambiguous, and the gate re-reads
/// before it retries (semantics.md §5.5). Any other answer (a 4xx), and a
/// request that could not be built or authenticated, wrote nothing.
pub fn outcome(r: Result<(), kube::Error>) -> PatchOutcome {
    match r {
        Ok(()) => PatchOutcome::Applied,
        Err(kube::Error::Api(e)) if e.code == 409 => PatchOutcome::Conflict,
        Err(kube::Error::Api(e)) if e.code == 422 && !names_invalid_fields(&e) => {
            PatchOutcome::Conflict
        }
        Err(kube::Error::Api(e)) if e.code == 404 => PatchOutcome::NotFound,
        Err(kube::Error::Api(e)) if e.code >= 500 => {
            PatchOutcome::Ambiguous(kube::Error::Api(e).to_string())
        }
        Err(
            e @ (kube::Error::Api(_)
            | kube::Error::BuildRequest(_)
            | kube::Error::HttpError(_)
            | kube::Error::Auth(_)
            | kube::Error::TlsRequired
            | kube::Error::InferConfig(_)
            | kube::Error::InferKubeconfig(_)
            | kube::Error::ProxyProtocolUnsupported { .. }
            | kube::Error::ProxyProtocolDisabled { .. }),
        ) => PatchOutcome::Failed(e.to_string()),
        Err(e) => PatchOutcome::Ambiguous(e.to_string()),
    }
}

/// Whether a refusal says which fields of the object are invalid, as the
/// API server's validation does (`FieldValueInvalid`, `FieldValueRequired`,
/// ..., each with its field). A JSON patch that does not apply is answered
/// with one cause of type `UnexpectedServerResponse` and no field.
fn names_invalid_fields(status: &kube::core::Status) -> bool {
    status.details.as_ref().is_some_and(|d| {
        d.causes
            .iter()
            .any(|c| !c.field.is_empty() || c.reason.starts_with("FieldValue"))
    })
}

mod port;

#[cfg(test)]
mod tests;
