//! The supervisor: starts, links and restarts the per-node gate actors. Its
//! mailbox is installed in the router only while it runs, so a
//! [`SpawnRequest`] made before it started or after it stopped is dropped;
//! requests are handled one at a time in arrival order, its own delayed
//! restarts included. A [`NodeActor`] that panicked or failed restarts from
//! the indexes after a backoff. ractor's default supervision would stop the
//! supervisor when any child ends; that is overridden here.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};

use crate::messages::SpawnRequest;
use crate::node_actor::{GateContext, NodeActor};
use crate::ports::{Clock, EffectExecutor};
use crate::wheel::Wheel;

pub enum SupervisorMsg {
    /// From the router, or the supervisor's own delayed restart of a failed
    /// gate.
    Spawn(SpawnRequest),
}

impl From<SpawnRequest> for SupervisorMsg {
    fn from(request: SpawnRequest) -> Self {
        SupervisorMsg::Spawn(request)
    }
}

/// How a request the router sent comes back to it when the mailbox is
/// closed (ractor's `DerivedActorRef` needs the way back). Total while
/// `Spawn` is the only message; a second variant would make this a `TryFrom`.
impl From<SupervisorMsg> for SpawnRequest {
    fn from(msg: SupervisorMsg) -> Self {
        let SupervisorMsg::Spawn(request) = msg;
        request
    }
}

pub struct Supervisor<E, C> {
    ctx: Arc<GateContext<E, C>>,
}

pub struct SupervisorState {
    children: HashMap<ActorId, String>,
    /// The timer task every gate's timers wait in.
    wheel: Arc<Wheel>,
    /// Failures per node since its gate last ended cleanly.
    failures: HashMap<String, u32>,
}

/// Starts the gate actor system. Feed the router in `ctx` from the watchers
/// and call `Router::mark_synced` once their initial lists are in; stop the
/// returned actor to stop every gate.
pub async fn start<E: EffectExecutor, C: Clock>(
    ctx: Arc<GateContext<E, C>>,
) -> Result<(ActorRef<SupervisorMsg>, JoinHandle<()>), SpawnErr> {
    Actor::spawn(None, Supervisor { ctx }, ()).await
}

impl<E: EffectExecutor, C: Clock> Actor for Supervisor<E, C> {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        _: (),
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let requests = myself.get_derived();
        self.ctx.router.set_spawn_requests(Some(requests));
        Ok(SupervisorState {
            children: HashMap::new(),
            wheel: Wheel::start(),
            failures: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisorMsg::Spawn(SpawnRequest { node }) = msg;
        let router = &self.ctx.router;
        if router.gate(&node).is_some() || !router.needs_gate(&node) {
            return Ok(());
        }
        let (ctx, wheel) = (Arc::clone(&self.ctx), Arc::clone(&state.wheel));
        let actor = NodeActor { ctx, wheel };
        match Actor::spawn_linked(None, actor, node.clone(), myself.get_cell()).await {
            Ok((gate, _)) => {
                tracing::debug!(%node, "gate started");
                state.children.insert(gate.get_id(), node);
            }
            Err(error) => tracing::error!(%node, %error, "could not start a gate"),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(node) = state.children.remove(&cell.get_id()) {
                    self.ctx.router.unregister(&node, cell.get_id());
                    state.failures.remove(&node);
                    tracing::debug!(%node, reason = reason.as_deref().unwrap_or(""), "gate ended");
                }
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                if let Some(node) = state.children.remove(&cell.get_id()) {
                    self.ctx.router.unregister(&node, cell.get_id());
                    let failures = state.failures.entry(node.clone()).or_insert(0);
                    *failures = failures.saturating_add(1);
                    // Failure n waits like write attempt n+1: the first
                    // restart is quick, a crash loop backs off.
                    let delay = self.ctx.executor.retry_delay(failures.saturating_add(1));
                    tracing::error!(%node, %error, failures = *failures, ?delay, "gate failed; restarting from the indexes");
                    myself.send_after(delay, move || SpawnRequest { node }.into());
                }
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<SupervisorMsg>,
        _: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        self.ctx.router.set_spawn_requests(None);
        myself.stop_children(Some("shutting down".to_string()));
        Ok(())
    }
}
