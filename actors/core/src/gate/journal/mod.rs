//! A node's journal: the bounded, timestamped list of its gate's events,
//! which [`replay`] folds into a [`GateState`] that must equal the live one.
//!
//! Evicted entries are folded into a checkpoint state (`base`), not dropped,
//! and replay starts from it: one more `GateState` per node, small next to a
//! journal, keeps replay exact however long a gate lives (a pinned first
//! event would not: the evicted events after it matter as much). In memory
//! the entries are kept compactly ([`compact`]).

mod compact;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::gate::{Event, GateState, apply};

/// How many events a node keeps unless told otherwise: a gate's whole life is
/// typically a few dozen events.
pub const DEFAULT_CAPACITY: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub at: Timestamp,
    pub event: Event,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    /// The fold of every evicted entry; `None` until the first eviction (most
    /// gates never evict, and a state is a few hundred bytes).
    base: Option<Box<GateState>>,
    entries: compact::Entries,
    strings: compact::Strings,
    cap: usize,
    dropped: u64,
}

impl Default for Journal {
    fn default() -> Self {
        Journal::new(DEFAULT_CAPACITY)
    }
}

impl Journal {
    /// A journal keeping at most `cap` entries (at least one).
    pub fn new(cap: usize) -> Self {
        Journal {
            base: None,
            entries: compact::Entries::default(),
            strings: compact::Strings::default(),
            cap: cap.max(1),
            dropped: 0,
        }
    }

    pub fn record(&mut self, at: Timestamp, event: Event) {
        let stored = self.strings.encode(Entry { at, event });
        self.entries.push_back(stored);
        while self.entries.len() > self.cap
            && let Some(old) = self.entries.pop_front()
        {
            self.strings.fold(&old, self.base.get_or_insert_default());
            self.dropped += 1;
        }
    }

    /// The retained entries, oldest first, each decoded as it is read.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = Entry> + '_ {
        self.entries.iter().map(|e| self.strings.decode(&e))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// How many entries were evicted (and folded into the checkpoint).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The state before the first retained entry.
    pub fn base(&self) -> GateState {
        self.base.as_deref().cloned().unwrap_or_default()
    }
}

/// The state the journal describes: the checkpoint with every retained entry
/// folded in.
pub fn replay(journal: &Journal) -> GateState {
    let mut state = journal.base();
    for entry in journal.entries() {
        apply(&mut state, &entry.event);
    }
    state
}
