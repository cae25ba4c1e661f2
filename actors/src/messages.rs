//! The messages the actors exchange, in one module below all of them, so
//! that the router can address a node actor and the supervisor without
//! importing either, and imports run one way only: `router` uses `messages`
//! and `observe`; `node_actor` adds `router` and `ports`; `supervisor` adds
//! `node_actor`.
//!
//! - [`NodeMsg`]: a node actor's mailbox — inputs, the index's changes, and
//!   the `View` request, answered with a [`GateView`].
//! - [`SpawnRequest`]: the router asking for a gate. The supervisor's mailbox
//!   accepts it (its message type converts from it), and the router holds
//!   only a sender of `SpawnRequest`s.
//!
//! Plain data only: nothing here acts, decides or does I/O.

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

pub enum NodeMsg {
    /// Anything the gate should know, as is (effect results, timers, tests).
    /// Boxed so the frequent small hints do not pay for a snapshot's size.
    Input(Box<Input>),
    /// A change of the index that concerns this gate: its node, a
    /// DaemonSet, its pods, or everything (a reload). The gate reads what
    /// changed back from the index (absent = deleted), so a late change
    /// never shows an older version. For `Pods` it takes the uids from its
    /// pending set: one message however many pod events came.
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
