//! A node's journal: the bounded, timestamped list of its gate's events,
//! which [`replay`] folds into a [`GateState`] that must equal the live one.
//!
//! Evicted entries are folded into a checkpoint state (`base`), not dropped,
//! and replay starts from it: one more `GateState` per node, small next to a
//! journal, keeps replay exact however long a gate lives (a pinned first
//! event would not: the evicted events after it matter as much). In memory
//! the entries are kept compactly ([`compact`]).

mod compact;

use std::sync::Arc;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::gate::{Event, GateState, apply};
use crate::vocab::model::DaemonSetInfo;

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

/// A finished gate's journal as one block of bytes that shares nothing with
/// the nodes and pods the router held: what `/debug/nodes` keeps of the
/// gates that finished lately. A journal's whole entries hold the router's
/// very nodes and pods, whose strings the watches share; kept after the
/// gate ends, each of those small blocks would hold on to a page that a
/// burst of nodes had otherwise given back. The DaemonSets of a snapshot
/// stay shared: they are the cluster's few, not the burst's, and encoding
/// them would cost the most. [`Frozen::thaw`] gives the journal back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frozen {
    /// The capacity and the evicted count, the checkpoint as JSON, the
    /// strings, the entry count and two times, the entries' bytes, the
    /// whole entries' count, then each whole entry: how many of the
    /// DaemonSets it showed, and its JSON.
    bytes: Box<[u8]>,
    /// The snapshots' DaemonSets, in the order of the snapshots.
    daemonsets: Box<[Arc<DaemonSetInfo>]>,
}

/// Why a [`Frozen`] journal did not read back. It reads back only what
/// [`Journal::freeze`] wrote, so either is a bug (here or in a model
/// type's JSON).
#[derive(Debug, thiserror::Error)]
pub enum ThawError {
    #[error("cannot read {0} of a frozen journal")]
    Unreadable(&'static str),
    #[error("an entry or the checkpoint of a frozen journal did not read back: {0}")]
    Json(#[from] serde_json::Error),
}

impl Journal {
    /// The journal in one block ([`Frozen`]). Fails only if an entry or the
    /// checkpoint cannot be written as JSON, as `/debug/nodes` could not
    /// show it either.
    pub fn freeze(&self) -> Result<Frozen, serde_json::Error> {
        let mut out = Vec::new();
        let mut daemonsets = Vec::new();
        compact::var(&mut out, self.cap as u64);
        compact::var(&mut out, self.dropped);
        match &self.base {
            None => out.push(0),
            Some(base) => {
                out.push(1);
                compact::json_into(&mut out, base)?;
            }
        }
        self.strings.freeze_into(&mut out);
        self.entries.freeze_into(&mut out, &mut daemonsets)?;
        Ok(Frozen {
            bytes: out.into_boxed_slice(),
            daemonsets: daemonsets.into_boxed_slice(),
        })
    }
}

impl Frozen {
    /// The journal that was frozen: the same capacity, evicted count,
    /// checkpoint and entries.
    pub fn thaw(&self) -> Result<Journal, ThawError> {
        let mut t = compact::Thaw::new(&self.bytes);
        let cap = t.count("the capacity")?.max(1);
        let dropped = t.var("the evicted count")?;
        let base = match t.take(1, "the checkpoint")? {
            [0] => None,
            _ => Some(Box::new(t.json("the checkpoint")?)),
        };
        let strings = compact::Strings::thaw(&mut t)?;
        let entries = compact::Entries::thaw(&mut t, &mut self.daemonsets.iter())?;
        t.end()?;
        Ok(Journal {
            base,
            entries,
            strings,
            cap,
            dropped,
        })
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
