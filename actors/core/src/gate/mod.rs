//! The gate of one node: a pure, event-sourced state machine. [`decide`]
//! turns an [`Input`] into [`Event`]s (facts), [`apply`](fn@apply) folds one
//! into the [`GateState`], and [`effects`](fn@effects) says what the shell
//! must do because of it. Events carry everything `apply` needs (it never
//! reads the configuration, the clock or the input), so folding a node's
//! journal from [`GateState::default`] rebuilds its live state exactly. See
//! docs/architecture.md, "The gate and its journal".

mod apply;
mod condition;
mod derive;
mod effect;
mod event;
mod event_effects;
mod handle;
mod input;
mod notes;
mod state;

pub mod journal;
pub mod report;

use jiff::Timestamp;

pub use apply::apply;
pub use condition::{
    ConditionReason, ConditionWrite, OPEN_CONDITION, OpenCondition, condition_change,
    condition_write, open_condition,
};
pub(crate) use derive::{derive_all, derive_member};
pub use derive::{derive_members, waited_pod};
pub use effect::{Effect, Ending, ExternalOpening, TimeoutMark, UntaintPatch, annotation_time};
pub use event::{Event, IndexedTaint};
pub use event_effects::effects;
pub use input::{Input, PatchOutcome, TimerKind};
pub use notes::{EventType, NodeEvent, Reason};
pub use state::{
    GateState, GateWriteKind, GatedSinceClamp, MAX_UNANSWERED, NODE_NOT_READY, OpenedBy,
    OpenedRecord, Phase, SERVER_TIME_SLACK, StopReason, TimeoutRecord, Timers, UnansweredUntaint,
    Write, WriteStatus, node_wait_reason,
};

use handle::decide_in_place;

use crate::vocab::config::Config;

/// Turns an input into the facts it establishes, given the state before it.
/// Returns no events when the input changes nothing (duplicates, stale timers,
/// results for a write that is no longer outstanding).
pub fn decide(state: &GateState, input: &Input, cfg: &Config, now: Timestamp) -> Vec<Event> {
    let mut scratch = state.clone();
    decide_in_place(&mut scratch, input, cfg, now)
}

/// The result of one input: the events (already applied) and the effects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
}

/// `decide`, then `apply` each event, then `effects` — what the actor runs per
/// input.
pub fn step(state: &mut GateState, input: &Input, cfg: &Config, now: Timestamp) -> Step {
    let events = decide_in_place(state, input, cfg, now);
    let mut effects: Vec<Effect> = events
        .iter()
        .flat_map(|ev| effects(state, ev, cfg))
        .collect();
    // Stop must come last so the shell runs every other effect first.
    effects.sort_by_key(|e| matches!(e, Effect::Stop(_)));
    Step { events, effects }
}
