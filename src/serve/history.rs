//! [`History`]: the bounded list of finished gates that `/debug/nodes` and
//! `/debug/nodes/{name}` still show after their actors are gone.
//!
//! Each finished gate is kept as its journal and nothing else: the state is
//! the journal's replay, which equals the live state by construction (the
//! core's property test holds every step to it), and both are built only
//! when `/debug/nodes/NAME` asks. A gate that stops leaves a plain copy of
//! its journal, which shares the node, its pods and their strings with what
//! the gate held; every [`SETTLE`] the copies that were already kept at the
//! tick before are frozen into one block of bytes each ([`Frozen`]: the
//! node's versions and the checkpoint as JSON, only the snapshot's
//! DaemonSets still shared), so each copy still kept then is frozen about
//! [`FROZEN_WITHIN`] after its gate stopped. A copy kept for good would
//! hold, for each of its small blocks, a page of a burst's memory resident
//! after the burst's nodes had gone; freezing costs CPU (the JSON of every
//! node version), so only the copies that last are frozen: in a burst where
//! more gates stop within a tick or two than `--debug-history` keeps, most
//! are pushed out before their second tick and never written. (A node whose
//! gate stops again every few seconds keeps its latest journal as a copy
//! while it does: each stop replaces it under a new number.)
//! `--debug-history 0` keeps none.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use nodegate_actors::messages::GateView;
use nodegate_core::gate::journal::{Frozen, Journal, ThawError, replay};
use nodegate_core::gate::{GateState, OpenedBy, Phase, StopReason};
use serde_json::{Value, json};

use crate::serve::lock;

/// How often the journals kept as plain copies are frozen.
pub const SETTLE: Duration = Duration::from_secs(5);

/// About how long after its gate stopped a kept journal is frozen at the
/// latest: it waits for the next [`SETTLE`] tick and is frozen at the one
/// after, plus the time settling takes and any delay of its ticks.
pub const FROZEN_WITHIN: Duration = SETTLE.saturating_mul(2);

/// The last N gates that finished (opened, or ended because the node or its
/// taint went away), newest last.
pub struct History {
    capacity: usize,
    finished: Mutex<VecDeque<Finished>>,
    /// The number the next finished gate is kept under.
    next: AtomicU64,
    /// `next` at the last [`History::settle`]: the copies kept under a
    /// lower number were kept at that tick, and the next settle freezes
    /// them.
    lasted_below: AtomicU64,
}

/// One finished gate: what `/debug/nodes` lists of it, and its journal,
/// from which `/debug/nodes/NAME` rebuilds its whole [`GateView`].
struct Finished {
    /// Which stop of a gate this is, so that [`History::settle`] freezes
    /// the very copy it took, and only once it was kept at the tick before.
    id: u64,
    node: Box<str>,
    phase: Phase,
    opened: Option<(OpenedBy, Timestamp)>,
    stopped: Option<StopReason>,
    journal: Kept,
}

/// A finished gate's journal: as the gate left it until the second
/// [`History::settle`] after its stop (if still kept then), then frozen.
#[derive(Clone)]
enum Kept {
    Copy(Journal),
    Frozen(Frozen),
}

impl History {
    pub fn new(capacity: usize) -> Self {
        History {
            capacity,
            finished: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
            next: AtomicU64::new(0),
            lasted_below: AtomicU64::new(0),
        }
    }

    /// Keeps a finished gate; a gate stopped by shutdown, or one that never
    /// gated anything, is not worth a slot.
    pub fn gate_stopped(&self, node: &str, state: &GateState, journal: &Journal) {
        if self.capacity == 0 || !state.is_finished() || state.stopped == Some(StopReason::NotGated)
        {
            return;
        }
        let finished = Finished {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            node: node.into(),
            phase: state.phase,
            opened: state.opened.as_ref().map(|o| (o.opened_by, o.at)),
            stopped: state.stopped,
            journal: Kept::Copy(journal.clone()),
        };
        let mut kept = lock(&self.finished);
        kept.retain(|f| &*f.node != node);
        kept.push_back(finished);
        while kept.len() > self.capacity {
            kept.pop_front();
        }
    }

    /// Freezes every journal still kept as a copy that was kept already at
    /// the settle before: the copies are copied again under the lock (their
    /// entries' bytes and strings; the nodes and pods they hold are
    /// shared), frozen outside it, and each put in place of its copy unless
    /// a newer gate of the node replaced it or it was pushed out meanwhile.
    /// A journal that does not write as JSON (a bug) is said and its gate
    /// dropped. Returns how many it froze.
    pub fn settle(&self) -> usize {
        let now = self.next.load(Ordering::Relaxed);
        // One task settles; should two, the mark never moves back.
        let lasted_below = self.lasted_below.fetch_max(now, Ordering::Relaxed).min(now);
        let frozen = Self::freeze(self.copies(lasted_below));
        self.put(frozen)
    }

    /// The journals still kept as copies whose number is below
    /// `lasted_below`, by that number.
    fn copies(&self, lasted_below: u64) -> Vec<(u64, Box<str>, Journal)> {
        (lock(&self.finished).iter())
            .filter_map(|f| match &f.journal {
                Kept::Copy(j) if f.id < lasted_below => Some((f.id, f.node.clone(), j.clone())),
                _ => None,
            })
            .collect()
    }

    fn freeze(copies: Vec<(u64, Box<str>, Journal)>) -> HashMap<u64, Option<Frozen>> {
        (copies.into_iter())
            .map(|(id, node, journal)| match journal.freeze() {
                Ok(frozen) => (id, Some(frozen)),
                Err(e) => {
                    tracing::warn!(node = &*node, error = %e, "not keeping the finished gate for /debug/nodes: its journal does not write as JSON");
                    (id, None)
                }
            })
            .collect()
    }

    /// Puts the frozen journals in place, in one pass; the copies they
    /// replace are dropped after the lock is let go.
    fn put(&self, mut frozen: HashMap<u64, Option<Frozen>>) -> usize {
        let failed: Vec<u64> = (frozen.iter())
            .filter_map(|(id, f)| f.is_none().then_some(*id))
            .collect();
        let mut replaced = Vec::with_capacity(frozen.len());
        {
            let mut kept = lock(&self.finished);
            for f in kept.iter_mut() {
                if let Some(Some(frozen)) = frozen.remove(&f.id) {
                    replaced.push(std::mem::replace(&mut f.journal, Kept::Frozen(frozen)));
                }
            }
            if !failed.is_empty() {
                kept.retain(|f| !failed.contains(&f.id));
            }
        }
        replaced.len()
    }

    /// Settles the history every [`SETTLE`], for as long as the process
    /// runs (spawned once by `nodegate run` when it keeps any). The JSON is
    /// written on tokio's blocking pool: a burst's 100 journals take
    /// milliseconds that the runtime's one worker owes the watches.
    pub async fn settle_every(history: Arc<History>, every: Duration) {
        if history.capacity == 0 {
            return;
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let history = Arc::clone(&history);
            if let Err(e) = tokio::task::spawn_blocking(move || history.settle()).await {
                tracing::warn!(error = %e, "settling the /debug/nodes history failed");
            }
        }
    }

    /// The finished gate's whole view, replayed from its journal: a copy of
    /// the kept journal is taken under the lock, and the thawing, replay
    /// and decoding happen outside it, so a slow reader never holds up a
    /// gate that is stopping. `Some(Err)` only if the journal does not read
    /// back (a bug).
    pub fn get(&self, node: &str) -> Option<Result<GateView, ThawError>> {
        let journal = {
            let kept = lock(&self.finished);
            let finished = kept.iter().rev().find(|f| &*f.node == node)?;
            finished.journal.clone()
        };
        let journal = match journal {
            Kept::Copy(j) => Ok(j),
            Kept::Frozen(f) => f.thaw(),
        };
        Some(journal.map(|journal| GateView {
            node: node.to_string(),
            state: replay(&journal),
            journal: journal.entries().collect(),
            journal_dropped: journal.dropped(),
        }))
    }

    /// The finished gates, newest first, one line each, as `/debug/nodes`
    /// lists them under `recently_finished`.
    pub fn recent(&self) -> Vec<Value> {
        lock(&self.finished)
            .iter()
            .rev()
            .map(|f| {
                json!({
                    "node": &*f.node,
                    "phase": f.phase,
                    "opened_by": f.opened.map(|(by, _)| by),
                    "opened_at": f.opened.map(|(_, at)| at),
                    "stopped": f.stopped.map(|s| s.to_string()),
                })
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nodegate_core::gate::{self, Input, PatchOutcome};
    use nodegate_core::testutil::{
        ds_pod, mk_ds, mk_node, taint, template_with_tolerations, toleration, ts,
    };
    use nodegate_core::vocab::config::Config;

    /// A gate that opened (its one DaemonSet Ready, the untaint applied),
    /// with its journal; shared with the HTTP tests.
    pub(crate) fn opened_gate(node: &str) -> (GateState, Journal) {
        opened_gate_keeping(node, 64)
    }

    /// [`opened_gate`] with a journal of `capacity` entries.
    fn opened_gate_keeping(node: &str, capacity: usize) -> (GateState, Journal) {
        let cfg = Config::default();
        let ds = mk_ds(
            "infra",
            "cni",
            template_with_tolerations(vec![toleration("", "Exists", "", "")]),
        );
        let mut state = GateState::default();
        let mut journal = Journal::new(capacity);
        let inputs = [
            Input::snapshot(
                mk_node(
                    node,
                    &[],
                    vec![taint("nodegate.dev/initializing", "NoSchedule")],
                ),
                vec![ds.clone()],
                vec![ds_pod("cni-1", node, &ds)],
            ),
            Input::PatchResult(PatchOutcome::Applied),
        ];
        for (i, input) in inputs.iter().enumerate() {
            let at = ts(i64::try_from(i).unwrap_or(0) + 1);
            for e in gate::step(&mut state, input, &cfg, at).events {
                journal.record(at, e);
            }
        }
        (state, journal)
    }

    #[test]
    fn history_keeps_the_last_n_finished_gates() {
        let h = History::new(2);
        for n in ["a", "b", "c"] {
            let (state, journal) = opened_gate(n);
            h.gate_stopped(n, &state, &journal);
        }
        assert!(h.get("a").is_none(), "the oldest is evicted");
        assert!(h.get("b").is_some() && h.get("c").is_some());
        // Kept again, a node's newer gate replaces its older one.
        let (state, journal) = opened_gate("b");
        h.gate_stopped("b", &state, &journal);
        assert!(h.get("c").is_some(), "one slot for b's two gates");
        // Shutdown stops unfinished gates: not kept.
        h.gate_stopped("d", &GateState::default(), &Journal::new(4));
        assert!(h.get("d").is_none());
        assert!(History::new(0).get("a").is_none());
    }

    /// What is kept is what was given: the view read back equals the gate's
    /// state and journal, and the list shows the same phase and opening.
    #[test]
    fn a_finished_gate_reads_back_whole() {
        let h = History::new(4);
        let (state, journal) = opened_gate("n1");
        h.gate_stopped("n1", &state, &journal);
        let view = h.get("n1").expect("kept").expect("reads back");
        let wanted = GateView {
            node: "n1".into(),
            state: state.clone(),
            journal: journal.entries().collect(),
            journal_dropped: journal.dropped(),
        };
        assert_eq!(view, wanted);
        assert_eq!(h.settle(), 0, "kept since the last settle: not yet");
        assert_eq!(h.settle(), 1, "the copy is frozen once it lasted a tick");
        assert_eq!(h.settle(), 0, "once");
        let view = h.get("n1").expect("kept").expect("reads back");
        assert_eq!(view, wanted, "frozen, it reads back the same");
        assert!(!view.journal.is_empty() && !view.state.members.is_empty());
        let opened = state.opened.as_ref().expect("the gate opened");
        assert_eq!(
            h.recent(),
            vec![json!({
                "node": "n1",
                "phase": state.phase,
                "opened_by": opened.opened_by,
                "opened_at": opened.at,
                "stopped": state.stopped.map(|s| s.to_string()),
            })]
        );
    }

    /// A journal that evicted entries still reads back the gate's state:
    /// the replay starts from its checkpoint.
    #[test]
    fn a_finished_gate_whose_journal_evicted_reads_back_its_state() {
        let h = History::new(4);
        let (state, journal) = opened_gate_keeping("n2", 2);
        assert!(journal.dropped() > 0, "the journal must have evicted");
        h.gate_stopped("n2", &state, &journal);
        assert_eq!((h.settle(), h.settle()), (0, 1));
        let view = h.get("n2").expect("kept").expect("reads back");
        assert_eq!(view.state, state);
        assert_eq!(view.journal, journal.entries().collect::<Vec<_>>());
        assert_eq!(view.journal_dropped, journal.dropped());
    }

    /// Until it settles, the history holds the node the gate held; frozen,
    /// it holds none of it. A newer gate of the node that stops meanwhile
    /// is not replaced by the older one's frozen journal.
    #[test]
    fn settling_lets_go_of_the_node_the_gate_held() {
        let h = History::new(4);
        let (state, journal) = opened_gate("n3");
        let node = journal
            .entries()
            .find_map(|e| match e.event {
                gate::Event::Snapshot { node, .. } => Some(node),
                _ => None,
            })
            .expect("the journal starts with a snapshot");
        h.gate_stopped("n3", &state, &journal);
        let entries: Vec<_> = journal.entries().collect();
        drop((state, journal));
        let held = Arc::strong_count(&node);
        assert_eq!(h.settle(), 0);
        assert_eq!(
            Arc::strong_count(&node),
            held,
            "a copy until it lasted a tick"
        );
        assert_eq!(h.settle(), 1);
        assert_eq!(Arc::strong_count(&node), held - 1, "the copy let go of it");
        let view = h.get("n3").expect("kept").expect("reads back");
        assert_eq!(view.journal, entries);
        // A newer gate of n3, kept after the older one was settled: a copy.
        let (state, journal) = opened_gate("n3");
        h.gate_stopped("n3", &state, &journal);
        assert_eq!(lock(&h.finished).len(), 1, "one slot a node");
        assert_eq!((h.settle(), h.settle()), (0, 1));
    }

    /// Gates that stop while the copies are being frozen win: a newer gate
    /// of the node keeps its own journal, and a gate pushed out is not
    /// brought back.
    #[test]
    fn a_gate_that_stops_during_settling_is_not_overwritten() {
        let h = History::new(2);
        for n in ["a", "b"] {
            let (state, journal) = opened_gate(n);
            h.gate_stopped(n, &state, &journal);
        }
        let frozen = History::freeze(h.copies(u64::MAX));
        assert_eq!(frozen.len(), 2);
        // Meanwhile: a's newer gate (a longer journal), and c pushes b out.
        let (state, newer) = opened_gate_keeping("a", 64);
        let mut newer = newer;
        newer.record(ts(9), gate::Event::RecheckFired { generation: 7 });
        h.gate_stopped("a", &state, &newer);
        let (state, journal) = opened_gate("c");
        h.gate_stopped("c", &state, &journal);
        assert_eq!(h.put(frozen), 0, "neither kept copy is the one frozen");
        assert!(h.get("b").is_none(), "b stays pushed out");
        let a = h.get("a").expect("kept").expect("reads back");
        assert_eq!(a.journal, newer.entries().collect::<Vec<_>>());
        assert_eq!(h.settle(), 0, "none was kept at a settle before");
        assert_eq!(h.settle(), 2, "a's and c's copies");
    }

    /// Only the copies that lasted a whole tick are frozen: one kept since
    /// the last settle waits for the next, and the copies a burst pushes
    /// out before then are never written at all.
    #[test]
    fn only_the_copies_that_last_a_tick_are_frozen() {
        let h = History::new(2);
        let (state, journal) = opened_gate("a");
        h.gate_stopped("a", &state, &journal);
        assert_eq!(h.settle(), 0, "a was kept after the last settle");
        // A burst before the next tick: b and c push a out.
        for n in ["b", "c"] {
            let (state, journal) = opened_gate(n);
            h.gate_stopped(n, &state, &journal);
        }
        assert!(h.get("a").is_none());
        assert_eq!(h.settle(), 0, "a is gone, b and c are new");
        // d pushes b out before b's second tick: only c lasted.
        let (state, journal) = opened_gate("d");
        h.gate_stopped("d", &state, &journal);
        assert_eq!(h.settle(), 1, "c");
        assert_eq!(frozen_or_copy(&h, "c"), Some(true));
        assert_eq!(frozen_or_copy(&h, "d"), Some(false));
        assert_eq!(h.settle(), 1, "d, a tick later");
        assert_eq!(frozen_or_copy(&h, "d"), Some(true));
    }

    /// Whether the history keeps `node`'s journal frozen (`Some(true)`) or
    /// as a copy (`Some(false)`).
    fn frozen_or_copy(h: &History, node: &str) -> Option<bool> {
        (lock(&h.finished).iter())
            .find(|f| &*f.node == node)
            .map(|f| matches!(f.journal, Kept::Frozen(_)))
    }
}
