//! One timer task for every gate: the [`Wheel`]. Each gate's timers are
//! still its own, armed and cancelled by the gate alone and delivered to its
//! mailbox; only the waiting is shared: a timer task per gate and per timer
//! (ractor's `send_after` spawns one) cost about 400 bytes each, at ten
//! thousand gates two of them each; here a pending timer is one entry of an
//! ordered map.
//!
//! A [`TimerKey`] is never reused (it carries a sequence number), so a gate
//! cancelling a timer that already fired removes nothing of anyone else's.
//! The wheel runs on tokio's clock, like the `send_after` it replaces (a
//! paused test clock pauses it too), and its task ends when the last handle
//! to it is dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodegate_core::gate::{Input, TimerKind};
use ractor::ActorRef;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::messages::NodeMsg;

/// What a gate asked to be sent when its timer is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// [`NodeMsg::Reexamine`].
    Reexamine,
    /// [`Input::TimerFired`] of this kind and generation.
    Timer { kind: TimerKind, generation: u64 },
}

/// One pending timer: when, and a number no other timer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimerKey {
    at: Instant,
    seq: u64,
}

#[derive(Default)]
struct Queue {
    pending: BTreeMap<TimerKey, (ActorRef<NodeMsg>, Due)>,
    next_seq: u64,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// An earlier timer than the task waits for was added.
    earlier: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves the map consistent (every
        // operation on it is one call), so a poisoned lock is still usable.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The shared timer task; see the [module](self).
pub struct Wheel {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Wheel {
    /// Starts the wheel's task on the current tokio runtime.
    pub fn start() -> Arc<Wheel> {
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(run(Arc::clone(&shared)));
        Arc::new(Wheel { shared, task })
    }

    /// Sends `due` to `to` after `delay`; the key cancels it.
    pub fn schedule(&self, delay: Duration, to: ActorRef<NodeMsg>, due: Due) -> TimerKey {
        let at = Instant::now() + delay;
        let mut queue = self.shared.lock();
        let seq = queue.next_seq;
        let key = TimerKey { at, seq };
        queue.next_seq += 1;
        let first = queue.pending.keys().next().is_none_or(|k| key < *k);
        queue.pending.insert(key, (to, due));
        drop(queue);
        if first {
            self.shared.earlier.notify_one();
        }
        key
    }

    /// Forgets a timer; nothing if it already fired or was cancelled.
    pub fn cancel(&self, key: TimerKey) {
        self.shared.lock().pending.remove(&key);
    }

    /// Timers pending (for tests and measurements).
    pub fn len(&self) -> usize {
        self.shared.lock().pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Wheel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends every due timer's message, then waits for the next one or for an
/// earlier one to be added.
async fn run(shared: Arc<Shared>) {
    let mut fired = Vec::new();
    loop {
        let next = {
            let mut queue = shared.lock();
            let now = Instant::now();
            while let Some(entry) = queue.pending.first_entry() {
                if entry.key().at > now {
                    break;
                }
                fired.push(entry.remove());
            }
            queue.pending.first_key_value().map(|(k, _)| k.at)
        };
        // Outside the lock: a gate that is gone just does not get it.
        for (to, due) in fired.drain(..) {
            let _ = to.cast(match due {
                Due::Reexamine => NodeMsg::Reexamine,
                Due::Timer { kind, generation } => {
                    NodeMsg::input(Input::TimerFired { kind, generation })
                }
            });
        }
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = shared.earlier.notified() => {}
                }
            }
            None => shared.earlier.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nodegate_core::gate::{Input, TimerKind};
    use ractor::{Actor, ActorProcessingErr, ActorRef};
    use tokio::sync::mpsc;

    use super::{Due, Wheel};
    use crate::messages::NodeMsg;

    /// Passes on what its timers send, as the `Due` it was.
    struct Probe;

    impl Actor for Probe {
        type Msg = NodeMsg;
        type State = mpsc::UnboundedSender<Due>;
        type Arguments = mpsc::UnboundedSender<Due>;

        async fn pre_start(
            &self,
            _: ActorRef<NodeMsg>,
            out: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(out)
        }

        async fn handle(
            &self,
            _: ActorRef<NodeMsg>,
            msg: NodeMsg,
            out: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            let due = match msg {
                NodeMsg::Reexamine => Due::Reexamine,
                NodeMsg::Input(input) => match *input {
                    Input::TimerFired { kind, generation } => Due::Timer { kind, generation },
                    _ => return Ok(()),
                },
                _ => return Ok(()),
            };
            let _ = out.send(due);
            Ok(())
        }
    }

    fn timer(generation: u64) -> Due {
        Due::Timer {
            kind: TimerKind::Deadline,
            generation,
        }
    }

    /// Timers arrive in the order they are due, whatever the order they were
    /// armed in; a cancelled one never arrives, and a cancel of one that
    /// already fired touches nothing else.
    #[tokio::test]
    async fn timers_fire_in_time_order_and_a_cancelled_one_never_fires() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (probe, handle) = Actor::spawn(None, Probe, tx).await.unwrap();
        let wheel = Wheel::start();
        let ms = Duration::from_millis;
        wheel.schedule(ms(60), probe.clone(), timer(3));
        let early = wheel.schedule(ms(1), probe.clone(), Due::Reexamine);
        let cancelled = wheel.schedule(ms(30), probe.clone(), timer(2));
        wheel.schedule(ms(20), probe.clone(), timer(1));
        wheel.cancel(cancelled);
        assert_eq!(rx.recv().await, Some(Due::Reexamine));
        // Already fired: cancelling it again removes nobody else's timer.
        wheel.cancel(early);
        assert_eq!(rx.recv().await, Some(timer(1)));
        assert_eq!(rx.recv().await, Some(timer(3)));
        assert!(wheel.is_empty(), "nothing is left pending");
        probe.stop(None);
        handle.await.unwrap();
        assert!(rx.recv().await.is_none(), "the cancelled timer never came");
    }
}
