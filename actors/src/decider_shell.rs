//! The shell every decider runs in: one task per decider, fed by the
//! router's change feed. For each input it builds the decider's
//! [`Context`], runs [`Decider::decide`], and carries the effects out in
//! order through the one [`EffectExecutor`], feeding each answer back (a pod
//! LIST's later, through the inbox). See docs/development.md, "The decider
//! shell"; a budgeted decider's wait after a lease gain is [`CatchUp`]'s.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use nodegate_core::deciders::{Context, Decider, Effect, Input, Level, Now};
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::write::{Outcome, Write};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;

use crate::feed::Subscriber;
use crate::ports::{Clock, EffectExecutor, Sending};
use crate::router::Router;

mod catch_up;
pub use catch_up::{CATCH_UP_MAX, CatchUp, Caught};

/// The shell yields to the runtime after this many inputs of a batch, so a
/// burst never holds a worker from the watches, the gates and the lease.
pub const YIELD_EVERY: usize = 64;
/// Pod LISTs out at once (the late-taint net's candidates), their answers
/// coming back through the inbox: a slow API server holds neither the next
/// candidate nor the next decision (nor do Events, sent in the background).
pub const LISTS_IN_FLIGHT: usize = 16;
/// Events being sent at once; the shell waits for a slot beyond that.
pub const EVENTS_IN_FLIGHT: usize = 64;

/// The longest the shell sleeps: how often gauges are published.
const WAKE: Duration = Duration::from_secs(1);

/// At most this many queued inputs are handled as one batch.
const BATCH: usize = 4096;

/// Publishes a decider's gauges, at most once a [`WAKE`].
pub type Publish<D> = Box<dyn Fn(&D, &Context<'_>) + Send + Sync>;

/// The feed's side of a shell, its inbox: queues and returns.
impl Subscriber for mpsc::UnboundedSender<Input> {
    fn deliver(&self, input: &Input) {
        // A closed inbox means the shell stopped: nothing left to tell.
        let _ = self.send(input.clone());
    }
}

/// Runs `decider` until `stop` turns true, subscribed to `router`'s feed;
/// the task ends with the decider as it was then.
pub fn start<D, E, C>(
    decider: D,
    router: &Arc<Router>,
    executor: Arc<E>,
    clock: Arc<C>,
    publish: Option<Publish<D>>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<D>
where
    D: Decider,
    E: EffectExecutor,
    C: Clock,
{
    let (tx, rx) = mpsc::unbounded_channel();
    router.subscribe(Arc::new(tx.clone()));
    let shell = Shell {
        catch_up: CatchUp::new(decider.budgeted()),
        inbox: tx,
        lists: Arc::new(Semaphore::new(LISTS_IN_FLIGHT)),
        events: Arc::new(Semaphore::new(EVENTS_IN_FLIGHT)),
        decider,
        router: Arc::clone(router),
        executor,
        clock,
        publish,
        next: None,
        published: None,
    };
    tokio::spawn(shell.run(rx, stop))
}

struct Shell<D, E, C> {
    decider: D,
    router: Arc<Router>,
    executor: Arc<E>,
    clock: Arc<C>,
    publish: Option<Publish<D>>,
    /// The earliest time the decider asked to be looked at again, on this
    /// machine's clock.
    next: Option<Timestamp>,
    published: Option<std::time::Instant>,
    catch_up: CatchUp,
    /// The shell's own inbox, for the answers of the LISTs it spawned.
    inbox: mpsc::UnboundedSender<Input>,
    lists: Arc<Semaphore>,
    events: Arc<Semaphore>,
}

impl<D: Decider, E: EffectExecutor, C: Clock> Shell<D, E, C> {
    fn context<'a>(&self, router: &'a Router, config: &'a Config) -> Context<'a> {
        let (local, server) = (self.clock.now(), self.clock.server_now());
        Context {
            view: router.index(),
            config,
            now: Now { local, server },
            may_write: self.executor.may_write() && self.catch_up.allows(),
        }
    }

    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Input>,
        mut stop: watch::Receiver<bool>,
    ) -> D {
        loop {
            let sleep = self.until_next();
            let first = tokio::select! {
                biased;
                _ = stop.changed() => return self.decider,
                input = rx.recv() => match input {
                    Some(input) => Some(input),
                    None => return self.decider,
                },
                _ = tokio::time::sleep(sleep) => None,
            };
            let mut batch: Vec<Input> = first.into_iter().collect();
            while batch.len() < BATCH
                && let Ok(input) = rx.try_recv()
            {
                batch.push(input);
            }
            if !self.router.is_synced() {
                continue;
            }
            if self.catch_up_step().await {
                batch.push(Input::MayWrite);
            }
            if self.due() {
                self.next = None;
                batch.push(Input::Tick);
            }
            for (n, input) in batch.into_iter().enumerate() {
                if n > 0 && n % YIELD_EVERY == 0 {
                    tokio::task::yield_now().await;
                }
                self.step(input).await;
            }
            self.publish_gauges();
        }
    }

    /// Follows leadership and, for a budgeted decider, the catch-up after
    /// gaining it; true when the decider may write from now on.
    async fn catch_up_step(&mut self) -> bool {
        let leading = self.executor.may_write();
        if self.catch_up.needs_read(leading) {
            match self.executor.fresh_node_versions().await {
                Ok(versions) => self.catch_up.read(versions.unwrap_or_default()),
                Err(error) => tracing::warn!(
                    origin = ?self.decider.origin(),
                    %error,
                    "cannot read the nodes' versions after gaining the lease; no budgeted write until it can (trying again shortly)"
                ),
            }
        }
        let index = self.router.index();
        let indexed = |name: &str| index.node(name).map(|n| n.resource_version.clone());
        let (seen, now) = (index.node_version_seen(), std::time::Instant::now());
        let caught = self.catch_up.check(leading, indexed, seen, now);
        let origin = self.decider.origin();
        match caught {
            None => return false,
            Some(Caught::InTime) => tracing::info!(
                ?origin,
                "the node watch caught up after gaining the lease; budgeted writes may go out"
            ),
            Some(Caught::GaveUp(lagging)) => tracing::warn!(
                ?origin,
                lagging,
                "the node watch still lags {CATCH_UP_MAX:?} after gaining the lease; budgeted writes go out all the same"
            ),
        }
        true
    }

    /// How long to sleep: until the look asked for, at most [`WAKE`] (a
    /// tenth of it while waiting for the index to catch up).
    fn until_next(&self) -> Duration {
        let wake = WAKE / if self.catch_up.waiting() { 10 } else { 1 };
        let Some(at) = self.next else {
            return wake;
        };
        let left = Duration::try_from(at.duration_since(self.clock.now()));
        left.unwrap_or(Duration::ZERO).min(wake)
    }

    fn due(&self) -> bool {
        self.next.is_some_and(|at| self.clock.now() >= at)
    }

    async fn step(&mut self, input: Input) {
        let mut effects: VecDeque<Effect> = self.decide(input).into();
        while let Some(effect) = effects.pop_front() {
            if let Some(answer) = self.carry_out(effect).await {
                effects.extend(self.decide(answer));
            }
        }
    }

    fn decide(&mut self, input: Input) -> Vec<Effect> {
        let (router, config) = (Arc::clone(&self.router), self.router.config());
        let cx = self.context(&router, &config);
        // A pass over every node (a look, everything changed, leadership)
        // can take long on a large cluster: on a multi-threaded runtime the
        // worker hands its other tasks (the lease, the watches, the probes)
        // to another thread meanwhile.
        let whole_pass = match &input {
            Input::Tick | Input::MayWrite => true,
            Input::Changed(change) => change.reaches_every_node(),
            _ => false,
        };
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if whole_pass && multi_thread {
            tokio::task::block_in_place(|| self.decider.decide(input, &cx))
        } else {
            self.decider.decide(input, &cx)
        }
    }

    /// Carries out one effect; the answer to give the decider, if any.
    async fn carry_out(&mut self, effect: Effect) -> Option<Input> {
        match effect {
            Effect::Write(write) => {
                let outcome = send(&*self.executor, Write::Taint(write.clone())).await;
                Some(Input::Wrote { write, outcome })
            }
            Effect::ListPods { node } => {
                // The semaphore is never closed; a closed one would only
                // mean no limit.
                let permit = Arc::clone(&self.lists).acquire_owned().await.ok();
                let executor = Arc::clone(&self.executor);
                let inbox = self.inbox.clone();
                tokio::spawn(async move {
                    let pods = executor.list_pods(&node).await;
                    drop(permit);
                    // A closed inbox: the shell stopped.
                    let _ = inbox.send(Input::PodsListed { node, pods });
                });
                None
            }
            Effect::Replace(write) => {
                let outcome = send(&*self.executor, Write::Replace(write.clone())).await;
                Some(Input::Replaced { write, outcome })
            }
            Effect::ReadNode { node } => {
                let read = self.executor.get_node(&node).await;
                Some(Input::NodeRead {
                    node,
                    read: read.map(|n| n.map(Box::new)),
                })
            }
            Effect::CreateCanary(create) => {
                let outcome = send(&*self.executor, Write::CreateCanary(create.clone())).await;
                Some(Input::CanaryCreated { create, outcome })
            }
            Effect::DeleteCanary(delete) => {
                let outcome = send(&*self.executor, Write::DeleteCanary(delete.clone())).await;
                Some(Input::CanaryDeleted { delete, outcome })
            }
            Effect::ListCanaries => {
                Some(Input::CanariesListed(self.executor.list_canaries().await))
            }
            Effect::RecordEvent(event) => {
                let permit = Arc::clone(&self.events).acquire_owned().await.ok();
                let executor = Arc::clone(&self.executor);
                tokio::spawn(async move {
                    executor.record_event(event).await;
                    drop(permit);
                });
                None
            }
            Effect::LookAgainAt(at) => {
                self.next = Some(self.next.map_or(at, |n| n.min(at)));
                None
            }
            Effect::Log {
                level,
                node,
                message,
                origin,
            } => {
                let origin = origin.unwrap_or_else(|| self.decider.origin());
                match level {
                    Level::Debug => tracing::debug!(%node, ?origin, "{message}"),
                    Level::Info => tracing::info!(%node, ?origin, "{message}"),
                    Level::Warn => tracing::warn!(%node, ?origin, "{message}"),
                }
                None
            }
            Effect::Count(tally) => {
                self.executor.tally(&tally);
                None
            }
        }
    }

    fn publish_gauges(&mut self) {
        let Some(publish) = &self.publish else {
            return;
        };
        let now = std::time::Instant::now();
        let recent = |at: std::time::Instant| now.duration_since(at) < WAKE;
        if self.published.is_some_and(recent) {
            return;
        }
        self.published = Some(now);
        let config = self.router.config();
        publish(&self.decider, &self.context(&self.router, &config));
    }
}

/// A decider's write: none of them travels with an untaint's handles.
async fn send<E: EffectExecutor>(executor: &E, write: Write) -> Outcome {
    executor.write(write, Sending::default()).await
}
