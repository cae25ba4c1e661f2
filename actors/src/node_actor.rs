//! The NodeActor: the shell around one node's pure gate. It owns the node's
//! [`GateState`] and [`Journal`], runs [`gate::step`] on each input and
//! carries out the effects. Writes, Events and re-reads go to the
//! [`EffectExecutor`] on spawned tasks whose results come back as inputs,
//! so the mailbox keeps flowing while a patch is in flight; timers, one per
//! [`TimerKind`], wait in the process's one [`Wheel`] rather than in a task
//! each. A periodic re-examination ([`NodeMsg::Reexamine`]) makes sure no
//! lost message holds the node closed.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::Instrument;

use crate::latest::{LatestWriter, Supersede};
use crate::messages::{GateView, NodeMsg};
use crate::pending::PendingPods;
use crate::ports::{Clock, EffectExecutor, Sending, Withdrawal};
use crate::router::Router;
use crate::wheel::{Due, TimerKey, Wheel};
use nodegate_core::deciders::Change;
use nodegate_core::gate::journal::Journal;
use nodegate_core::gate::{self, Effect, Event, GateState, Input, Phase, TimerKind};
use nodegate_core::vocab::write::Write;

/// The handles every gate shares (kube-rs controller style `Context`); not
/// the gate configuration, read afresh from [`Router::live`] at every step so
/// that a config reload reaches every gate.
pub struct GateContext<E, C> {
    pub router: Arc<Router>,
    pub executor: Arc<E>,
    pub clock: Arc<C>,
    /// Entries each gate's journal keeps; the binary passes
    /// `nodegate_core::gate::journal::DEFAULT_CAPACITY`.
    pub journal_capacity: usize,
}

pub struct NodeActor<E, C> {
    pub(crate) ctx: Arc<GateContext<E, C>>,
    /// Where this gate's timers wait (one for every gate of the process).
    pub(crate) wheel: Arc<Wheel>,
}

/// A condition superseded before it was written may have been the one to
/// set `lastTransitionTime` (the node had none, or another status): the
/// newer one sets it then. If the two statuses differ the node may already
/// say the newer one, and its time moves to now: the safe side, as a
/// condition with no `lastTransitionTime` is what the API server would
/// otherwise keep.
impl Supersede for gate::ConditionWrite {
    fn supersede(mut self, older: Self) -> Self {
        self.transition |= older.transition;
        self
    }
}

pub struct NodeActorState {
    name: String,
    gate: GateState,
    /// The `nodegate.dev/Open` condition this gate last handed over
    /// (`--node-condition`): an unchanged one is not written again.
    condition: Option<gate::OpenCondition>,
    /// Where those conditions go out, one write at a time, in order
    /// (made at the first write: without the flag a gate pays nothing).
    condition_out: Option<LatestWriter<gate::ConditionWrite>>,
    journal: Journal,
    /// The pending timer of each kind armed (a few at most).
    timers: Vec<(TimerKind, TimerKey)>,
    /// The next periodic re-examination ([`NodeMsg::Reexamine`]).
    reexamine: Option<TimerKey>,
    /// The withdrawal handle of the untaint last handed to the executor.
    withdrawal: Withdrawal,
    /// The pods the router saw change since this gate last looked.
    pods: Arc<PendingPods>,
    generation: u64,
}

impl NodeActorState {
    /// This gate's log context (the node and the gate's incarnation), made
    /// where a write starts or a line is written rather than kept: a span
    /// held by every live gate took a slot of the log subscriber's each,
    /// pooled at the most gates ever live and left scattered over the heap
    /// after they stopped (docs/benchmarks.md, "Churn").
    fn span(&self) -> tracing::Span {
        gate_span(&self.name, self.generation)
    }
}

fn gate_span(node: &str, generation: u64) -> tracing::Span {
    tracing::info_span!("gate", node = %node, generation)
}

/// A gate's span made at the first line written in it: most steps write
/// none at the default level.
struct LazySpan<'a> {
    node: &'a str,
    generation: u64,
    span: std::cell::OnceCell<tracing::Span>,
}

impl LazySpan<'_> {
    fn get(&self) -> &tracing::Span {
        self.span
            .get_or_init(|| gate_span(self.node, self.generation))
    }
}

/// Gate incarnations started by this process. A number, not a node-keyed
/// map, so that nothing grows with the nodes ever seen; it still tells a
/// restarted or re-gated node's log lines and observations from the old ones.
static GATES_STARTED: AtomicU64 = AtomicU64::new(0);

impl<E: EffectExecutor, C: Clock> Actor for NodeActor<E, C> {
    type Msg = NodeMsg;
    type State = NodeActorState;
    /// The node's name.
    type Arguments = String;

    async fn pre_start(
        &self,
        myself: ActorRef<NodeMsg>,
        name: String,
    ) -> Result<NodeActorState, ActorProcessingErr> {
        // Registered before the snapshot is read (post_start), so every change
        // indexed after that read also reaches this actor as a hint.
        let pods = self.ctx.router.register(&name, myself);
        let generation = GATES_STARTED.fetch_add(1, Ordering::Relaxed) + 1;
        self.ctx.router.observer().gate_started(&name, generation);
        Ok(NodeActorState {
            journal: Journal::new(self.ctx.journal_capacity),
            gate: GateState::default(),
            condition: None,
            condition_out: None,
            timers: Vec::new(),
            reexamine: None,
            withdrawal: Withdrawal::default(),
            pods,
            name,
            generation,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<NodeMsg>,
        state: &mut NodeActorState,
    ) -> Result<(), ActorProcessingErr> {
        let Some(snapshot) = self.ctx.router.snapshot(&state.name) else {
            tracing::debug!(parent: &state.span(), "node left the index before its gate started");
            self.ctx.router.unregister(&state.name, myself.get_id());
            myself.stop(Some("node not in the index".to_string()));
            return Ok(());
        };
        self.process(&myself, state, snapshot, None);
        self.arm_reexamine(&myself, state);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<NodeMsg>,
        msg: NodeMsg,
        state: &mut NodeActorState,
    ) -> Result<(), ActorProcessingErr> {
        let router = &self.ctx.router;
        let input = match msg {
            NodeMsg::Input(input) => *input,
            NodeMsg::Changed(Change::Node { .. }) => match router.node(&state.name) {
                Some(node) => Input::NodeChanged(node),
                None => Input::NodeDeleted,
            },
            NodeMsg::Changed(Change::DaemonSet { uid }) => match router.daemonset(&uid) {
                Some(ds) => Input::DaemonSetUpserted(ds),
                None => Input::DaemonSetDeleted { uid },
            },
            // Not a gate's: the router sends neither.
            NodeMsg::Changed(Change::GateStopped { .. }) => return Ok(()),
            NodeMsg::Changed(Change::Pods { .. }) => {
                let (uids, seen) = state.pods.take();
                for uid in uids {
                    let input = match router.pod(&state.name, &uid.as_str().into()) {
                        Some(pod) => Input::PodUpserted(pod),
                        None => Input::PodDeleted { uid },
                    };
                    self.process(&myself, state, input, seen);
                }
                return Ok(());
            }
            NodeMsg::Reexamine | NodeMsg::Changed(Change::Everything) => {
                let input = router.reexamination(&state.name);
                self.process(&myself, state, input.unwrap_or(Input::NodeDeleted), None);
                self.arm_reexamine(&myself, state);
                return Ok(());
            }
            NodeMsg::View(reply) => {
                // The caller may have given up waiting; nothing to do then.
                let _ = reply.send(GateView {
                    node: state.name.clone(),
                    state: state.gate.clone(),
                    journal: state.journal.entries().collect(),
                    journal_dropped: state.journal.dropped(),
                });
                return Ok(());
            }
        };
        self.process(&myself, state, input, None);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<NodeMsg>,
        state: &mut NodeActorState,
    ) -> Result<(), ActorProcessingErr> {
        let timers = state.timers.drain(..).map(|(_, timer)| timer);
        for timer in timers.chain(state.reexamine.take()) {
            self.wheel.cancel(timer);
        }
        self.ctx.router.unregister(&state.name, myself.get_id());
        self.ctx.router.gate_stopped(&state.name);
        let observer = self.ctx.router.observer();
        observer.gate_stopped(&state.name, state.generation, &state.gate, &state.journal);
        Ok(())
    }
}

impl<E: EffectExecutor, C: Clock> NodeActor<E, C> {
    /// Runs one input through the gate. A snapshot, a re-examination and the
    /// deadline timer — the inputs that may decide the deadline by time —
    /// are preceded by the newest evidence of the API server's clock, if
    /// any (semantics.md §5.3). `seen`: when the pod events behind `input`
    /// reached the router (for the metrics only; see [`PendingPods`]).
    fn process(
        &self,
        myself: &ActorRef<NodeMsg>,
        state: &mut NodeActorState,
        input: Input,
        seen: Option<Instant>,
    ) {
        let judges_time = matches!(
            input,
            Input::Snapshot { .. }
                | Input::Reexamine { .. }
                | Input::TimerFired {
                    kind: TimerKind::Deadline | TimerKind::ScheduleDeadline,
                    ..
                }
        );
        let server = judges_time.then(|| self.ctx.clock.server_now()).flatten();
        let server = server.map(|at| (Input::ServerTime(at), None));
        for (input, seen) in server.into_iter().chain([(input, seen)]) {
            let now = self.ctx.clock.now();
            let config = self.ctx.router.live().load();
            let step = gate::step(&mut state.gate, &input, &config, now);
            if !step.events.is_empty() {
                let observer = self.ctx.router.observer();
                observer.gate_step(&state.name, now, &step.events, &state.gate);
            }
            let span = LazySpan {
                node: &state.name,
                generation: state.generation,
                span: std::cell::OnceCell::new(),
            };
            for event in step.events {
                log_event(&span, &event, &state.gate);
                state.journal.record(now, event);
            }
            // Before the step's effects, so that an opening's True goes out
            // before its Stop ends the gate.
            let condition = gate::condition_write(state.condition.as_ref(), &state.gate, &config);
            if let Some(write) = condition
                && self.ctx.executor.may_write()
            {
                state.condition = Some(write.condition.clone());
                self.run(myself, state, Effect::WriteCondition(write), now, None);
            }
            for effect in step.effects {
                self.run(myself, state, effect, now, seen);
            }
        }
    }

    fn run(
        &self,
        myself: &ActorRef<NodeMsg>,
        state: &mut NodeActorState,
        effect: Effect,
        now: Timestamp,
        seen: Option<Instant>,
    ) {
        let executor = Arc::clone(&self.ctx.executor);
        let me = myself.clone();
        match effect {
            Effect::RemoveTaints(patch) => {
                let withdrawal = Withdrawal::default();
                state.withdrawal = withdrawal.clone();
                spawn_in(state.span(), async move {
                    let sending = Sending { withdrawal, seen };
                    let outcome = executor.write(Write::Untaint(patch), sending).await;
                    let _ = me.cast(NodeMsg::input(Input::PatchResult(outcome)));
                });
            }
            Effect::MarkTimedOut(mark) => {
                spawn_in(state.span(), async move {
                    let write = Write::MarkTimedOut(mark);
                    let outcome = executor.write(write, Sending::default()).await;
                    let _ = me.cast(NodeMsg::input(Input::MarkResult(outcome)));
                });
            }
            Effect::MarkOpenedExternally(mark) => {
                spawn_in(state.span(), async move {
                    // Best effort: the executor logs a failure.
                    let write = Write::MarkOpenedExternally(mark);
                    executor.write(write, Sending::default()).await;
                });
            }
            Effect::WriteCondition(write) => {
                let span = state.span();
                state.condition_out.get_or_insert_default().send(
                    write,
                    move |w| {
                        let executor = Arc::clone(&executor);
                        async move {
                            // Best effort: the executor logs a failure.
                            executor
                                .write(Write::Condition(w), Sending::default())
                                .await;
                        }
                    },
                    span,
                );
            }
            Effect::RecordEvent(event) => {
                spawn_in(
                    state.span(),
                    async move { executor.record_event(event).await },
                );
            }
            Effect::WithdrawWrite => state.withdrawal.request(),
            Effect::RefreshNode => {
                let name = state.name.clone();
                spawn_in(state.span(), async move {
                    let result = executor.get_node(&name).await;
                    let _ = me.cast(NodeMsg::input(Input::NodeRefreshed(result)));
                });
            }
            Effect::ScheduleTimer {
                kind,
                at,
                generation,
            } => {
                // A timer due in the past fires at once.
                let delay = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
                self.arm(myself, state, kind, delay, generation);
            }
            Effect::ScheduleRetry { attempt } => {
                let delay = self.ctx.executor.retry_delay(attempt);
                self.arm(myself, state, TimerKind::Retry, delay, u64::from(attempt));
            }
            Effect::Stop(reason) => {
                let router = &self.ctx.router;
                if state.gate.phase == Phase::Opened
                    && let Some(opened) = &state.gate.opened
                {
                    router.remember_opened(&state.name, &opened.resource_version);
                }
                // Unregister now, not in post_stop, so no hint is routed to a
                // gate that is on its way out.
                router.unregister(&state.name, myself.get_id());
                myself.stop(Some(reason.to_string()));
            }
        }
    }

    /// Schedules the next periodic re-examination, after a delay the
    /// executor picks (jittered there, never here), while the gate lives.
    fn arm_reexamine(&self, myself: &ActorRef<NodeMsg>, state: &mut NodeActorState) {
        if state.gate.is_finished() {
            return;
        }
        let delay = self.ctx.executor.reexamine_delay();
        let key = self.wheel.schedule(delay, myself.clone(), Due::Reexamine);
        if let Some(previous) = state.reexamine.replace(key) {
            self.wheel.cancel(previous);
        }
    }

    fn arm(
        &self,
        myself: &ActorRef<NodeMsg>,
        state: &mut NodeActorState,
        kind: TimerKind,
        delay: Duration,
        generation: u64,
    ) {
        let due = Due::Timer { kind, generation };
        let key = self.wheel.schedule(delay, myself.clone(), due);
        match state.timers.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, slot)) => self.wheel.cancel(std::mem::replace(slot, key)),
            None => {
                state.timers.reserve_exact(1);
                state.timers.push((kind, key));
            }
        }
    }
}

fn spawn_in(span: tracing::Span, task: impl Future<Output = ()> + Send + 'static) {
    tokio::spawn(task.instrument(span));
}

/// Every journal event is one debug line (the journal, as it is written);
/// the two moments an operator watches for get a line of their own at a
/// higher level: an opening at info, a deadline at warn. A failed write is a
/// warning too: it is an API error someone may need to act on.
fn log_event(span: &LazySpan<'_>, event: &Event, state: &GateState) {
    // Rendered only if a debug subscriber asks: serializing every event up
    // front (a snapshot carries every DaemonSet and pod) was a measurable share
    // of the gate's CPU at scale with debug logging off.
    tracing::debug!(parent: span.get(), event = %AsJson(event), "gate");
    match event {
        Event::Opened { opened_by, at, .. } | Event::WouldOpen { opened_by, at, .. } => {
            let start = state.gate_start();
            let after = start.map_or(0.0, |s| at.duration_since(s).as_secs_f64());
            tracing::info!(
                parent: span.get(),
                opened_by = %opened_by,
                after_seconds = format_args!("{after:.1}"),
                expected = state.expected().count(),
                "{}",
                match event {
                    Event::Opened { .. } => "gate opened",
                    _ => "dry-run: gate would open",
                }
            )
        }
        Event::TimedOut {
            deadline,
            by_schedule,
            action,
            expected,
            not_ready,
            node_not_ready,
        } => {
            // The node first, when it was not Ready itself.
            let members = not_ready
                .iter()
                .map(|b| format!("{} ({})", b.member, b.why));
            let blocked_by: Vec<String> = node_not_ready.iter().cloned().chain(members).collect();
            tracing::warn!(
                parent: span.get(),
                %deadline,
                clock = if *by_schedule { "schedule" } else { "ready" },
                action = ?action,
                expected,
                not_ready = not_ready.len(),
                blocked_by = %blocked_by.join("; "),
                "{}",
                if *by_schedule {
                    "gate schedule deadline passed with members never scheduled"
                } else {
                    "gate deadline passed"
                }
            );
        }
        Event::DeadlineHeld {
            deadline,
            server_time,
            until,
            reason,
            ..
        } => tracing::warn!(
            parent: span.get(),
            %deadline,
            %server_time,
            %until,
            "gate deadline held: {reason}"
        ),
        Event::GatedSinceClamped { gated_since, to } => tracing::warn!(
            parent: span.get(),
            %gated_since,
            %to,
            "{} is later than the API server's clock; counting from its now",
            nodegate_core::vocab::annotations::GATED_SINCE
        ),
        // A mark's lost answer too: the line operations.md lists.
        Event::WriteFailed { attempt, error } | Event::MarkUnanswered { attempt, error } => {
            tracing::warn!(parent: span.get(), attempt, %error, "gate write failed; retrying")
        }
        _ => {}
    }
}

/// An event as one line of JSON, formatted only when displayed.
struct AsJson<'a>(&'a Event);

impl std::fmt::Display for AsJson<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_string(self.0) {
            Ok(json) => f.write_str(&json),
            Err(e) => write!(f, "<unserializable event: {e}>"),
        }
    }
}
