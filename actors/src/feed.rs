//! The index's change feed: every change of the router's indexes, published
//! once to whoever subscribed (the decider shells). A subscriber is called
//! on the watchers' hot path, so it must only queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use nodegate_core::deciders::Input;

/// Receives every published change.
pub trait Subscriber: Send + Sync + 'static {
    /// Must not block or await: queue and return.
    fn deliver(&self, input: &Input);
}

/// The subscribers, read lock-free on every change.
#[derive(Default)]
pub struct Feed {
    subscribers: ArcSwap<Vec<Arc<dyn Subscriber>>>,
    /// Whether anyone subscribed: asked on every pod event, so a plain
    /// flag rather than a load of the list.
    heard: AtomicBool,
}

impl Feed {
    /// Adds `s`; it receives every change published from now on.
    pub fn subscribe(&self, s: Arc<dyn Subscriber>) {
        self.subscribers.rcu(|current| {
            let mut next = Vec::clone(current);
            next.push(Arc::clone(&s));
            next
        });
        self.heard.store(true, Ordering::Release);
    }

    /// Whether anyone listens (saves building a change nobody reads).
    pub fn is_heard(&self) -> bool {
        self.heard.load(Ordering::Acquire)
    }

    pub fn publish(&self, input: Input) {
        for s in self.subscribers.load().iter() {
            s.deliver(&input);
        }
    }
}
