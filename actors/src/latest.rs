//! One writer at a time, the latest value wins: how a gate hands its
//! `nodegate.dev/Open` condition to the executor.
//!
//! A gate may want two condition writes within milliseconds (`Opening` when
//! its untaint goes out, `True` once it applied). Each on its own spawned
//! task, the two raced: the older one, held a moment longer for a patch slot
//! or a rate token, could land last and leave the node saying `Opening` for
//! good. Here a value handed over while a write is in flight waits in one
//! slot, a newer one replaces it, and the single writer task takes the slot
//! only after its write returned; so the API server sees the writes in the
//! order they were wanted and the last one wanted is the last one written.
//! The writer task lives only while there is something to write, so an idle
//! gate pays for one slot, not for a task.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::Instrument;

/// A value that may take the place of an older one not yet written: what
/// of the older one must still reach the API server goes into the newer.
pub trait Supersede {
    fn supersede(self, older: Self) -> Self;
}

/// The slot and whether a writer task is running, under one lock.
struct Inner<T> {
    next: Option<T>,
    writing: bool,
}

/// Hands values to `write`, one call at a time, in order, skipping any value
/// a newer one replaced before its turn came.
pub struct LatestWriter<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

impl<T> Default for LatestWriter<T> {
    fn default() -> Self {
        LatestWriter {
            inner: Arc::new(Mutex::new(Inner {
                next: None,
                writing: false,
            })),
        }
    }
}

impl<T: Supersede + Send + 'static> LatestWriter<T> {
    /// Queue `value` (superseding any value still waiting), and start the
    /// writer task on `write` unless one is running. The task runs in
    /// `span` and outlives this handle, so the last value is written even
    /// when the gate has ended meanwhile.
    pub fn send<W, F>(&self, value: T, write: W, span: tracing::Span)
    where
        W: Fn(T) -> F + Send + 'static,
        F: Future<Output = ()> + Send,
    {
        {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            inner.next = Some(match inner.next.take() {
                Some(older) => value.supersede(older),
                None => value,
            });
            if std::mem::replace(&mut inner.writing, true) {
                return;
            }
        }
        let slot = Arc::clone(&self.inner);
        tokio::spawn(
            async move {
                // The slot's value, if any; the task ends (under the same
                // lock) when there is none.
                let next = || {
                    let mut inner = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    let next = inner.next.take();
                    inner.writing = next.is_some();
                    next
                };
                while let Some(value) = next() {
                    write(value).await;
                }
            }
            .instrument(span),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_core::gate::{ConditionReason, ConditionWrite, OpenCondition};
    use std::pin::Pin;
    use tokio::sync::{Semaphore, mpsc};

    impl Supersede for u32 {
        fn supersede(self, _older: u32) -> u32 {
            self
        }
    }

    fn condition(open: bool, message: &str, transition: bool) -> ConditionWrite {
        ConditionWrite {
            node: "n1".into(),
            condition: OpenCondition {
                open,
                reason: ConditionReason::Waiting,
                message: message.into(),
            },
            transition,
        }
    }

    type Write<T> = Box<dyn Fn(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

    /// A write that reports each value on `started`, waits for a permit of
    /// `gate` (none at first: the first write is held), then reports it on
    /// `written`.
    struct Held<T> {
        gate: Arc<Semaphore>,
        started: mpsc::UnboundedReceiver<T>,
        written: mpsc::UnboundedReceiver<T>,
        write: Arc<Write<T>>,
    }

    impl<T: Clone + Send + 'static> Held<T> {
        fn new() -> Self {
            let gate = Arc::new(Semaphore::new(0));
            let (started_tx, started) = mpsc::unbounded_channel();
            let (written_tx, written) = mpsc::unbounded_channel();
            let permits = Arc::clone(&gate);
            let write: Write<T> = Box::new(move |v: T| {
                let gate = Arc::clone(&permits);
                let started = started_tx.clone();
                let written = written_tx.clone();
                Box::pin(async move {
                    started.send(v.clone()).expect("receiver alive");
                    let permit = gate.acquire().await.expect("semaphore open");
                    permit.forget();
                    written.send(v).expect("receiver alive");
                })
            });
            Held {
                gate,
                started,
                written,
                write: Arc::new(write),
            }
        }

        /// Hands `value` to `writer`, to be written by this fixture.
        fn send(&self, writer: &LatestWriter<T>, value: T)
        where
            T: Supersede,
        {
            let write = Arc::clone(&self.write);
            writer.send(value, move |v| write(v), tracing::Span::none());
        }
    }

    /// A gate's first condition (a transition: the node has none) waits
    /// behind a held write and is superseded by a new message before its
    /// turn: the write that goes out still sets `lastTransitionTime`
    /// (before the fix the node got a condition without one).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_superseded_transition_is_still_written_as_one() {
        let writer = LatestWriter::default();
        let mut held = Held::new();
        held.send(&writer, condition(false, "held", false));
        assert_eq!(
            held.started.recv().await,
            Some(condition(false, "held", false))
        );
        held.send(&writer, condition(false, "pending", true));
        held.send(&writer, condition(false, "not ready", false));
        held.gate.add_permits(10);
        assert_eq!(
            held.written.recv().await,
            Some(condition(false, "held", false))
        );
        assert_eq!(
            held.written.recv().await,
            Some(condition(false, "not ready", true)),
            "the transition survives its message being replaced"
        );
    }

    /// The first write is held; two more are handed over meanwhile. The
    /// second is replaced by the third before its turn, and nothing is
    /// written out of order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_write_is_followed_only_by_the_latest_value() {
        let writer = LatestWriter::default();
        let mut held = Held::new();
        held.send(&writer, 1);
        assert_eq!(held.started.recv().await, Some(1));
        held.send(&writer, 2);
        held.send(&writer, 3);
        held.gate.add_permits(10);
        assert_eq!(held.written.recv().await, Some(1));
        assert_eq!(held.written.recv().await, Some(3));
        assert_eq!(held.started.recv().await, Some(3), "2 was never started");
        // A value handed over later is written too.
        held.send(&writer, 4);
        assert_eq!(held.written.recv().await, Some(4));
        drop(writer);
        let Held {
            mut started,
            mut written,
            write,
            ..
        } = held;
        drop(write);
        assert_eq!(written.recv().await, None, "no write beyond the latest");
        assert_eq!(started.recv().await, Some(4));
        assert_eq!(started.recv().await, None);
    }
}
