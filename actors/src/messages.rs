//! The messages the actors exchange, in one module below all of them, so
//! that the router can address a node actor and the supervisor without
//! importing either. Plain data only.

use nodegate_core::deciders::Change;
use nodegate_core::gate::journal::Entry;
use nodegate_core::gate::{GateState, Input};
use ractor::RpcReplyPort;
use serde::{Deserialize, Serialize};

/// A gate's live state and journal, as `/debug/nodes/NAME` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateView {
    pub node: String,
    pub state: GateState,
    pub journal: Vec<Entry>,
    pub journal_dropped: u64,
}

/// A node actor's mailbox.
pub enum NodeMsg {
    /// Anything the gate should know, as is (effect results, timers, tests).
    /// Boxed so the frequent small hints do not pay for a snapshot's size.
    Input(Box<Input>),
    /// A change of the index that concerns this gate, read back from the
    /// index (absent = deleted; see [`crate::router`]). For `Pods` the uids
    /// are in its pending set ([`crate::pending`]).
    Changed(Change),
    View(RpcReplyPort<GateView>),
    /// The periodic re-examination is due: re-read everything from the
    /// index (the node absent = deleted). The actor sends it to itself.
    Reexamine,
}

impl NodeMsg {
    pub fn input(input: Input) -> Self {
        NodeMsg::Input(Box::new(input))
    }
}

/// Start a gate for `node` if the indexes say it needs one and it has none
/// (duplicates are harmless: the supervisor checks both when it handles one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub node: String,
}
