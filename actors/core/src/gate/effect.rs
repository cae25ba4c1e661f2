//! What the shell must do: the writes, Kubernetes Events, timers and re-reads
//! a gate asks for, as values.

use std::fmt;

use jiff::{Timestamp, Unit};
use serde::{Deserialize, Serialize};

use super::condition::ConditionWrite;
use super::input::TimerKind;
use super::notes::NodeEvent;
use super::state::{OpenedBy, StopReason};

/// A time as nodegate writes it into an annotation: RFC 3339 at millisecond
/// precision. The untaint patch's `opened-at` is this, so that the gate can
/// recognise the annotation it reads back (semantics.md §5.5).
pub fn annotation_time(t: Timestamp) -> Timestamp {
    t.round(Unit::Millisecond).unwrap_or(t)
}

pub use crate::vocab::write::{ExternalOpening, TimeoutMark, UntaintPatch};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    RemoveTaints(UntaintPatch),
    RecordEvent(NodeEvent),
    MarkTimedOut(TimeoutMark),
    /// See [`ExternalOpening`].
    MarkOpenedExternally(ExternalOpening),
    /// Deliver `TimerFired { kind, generation }` at `at` (or at once if past).
    ScheduleTimer {
        kind: TimerKind,
        at: Timestamp,
        generation: u64,
    },
    /// Deliver `TimerFired { kind: Retry, generation: attempt }` after a
    /// jittered exponential backoff for `attempt`; the shell picks the delay.
    ScheduleRetry {
        attempt: u32,
    },
    /// Re-read the node and deliver `NodeRefreshed`.
    RefreshNode,
    /// Do not send the in-flight untaint if it is still waiting for a patch
    /// slot or a rate token; its result then is `PatchOutcome::Withdrawn`.
    WithdrawWrite,
    /// Write the `nodegate.dev/Open` Node condition (`--node-condition`).
    WriteCondition(ConditionWrite),
    /// The gate is over, and how; always the last effect of its step.
    Stop(Ending),
}

/// How a gate ended, as [`Effect::Stop`] tells the shell. Shown — and
/// serialized — in the words the shell logs (`opened`, `opened by timeout`,
/// or the [`StopReason`]'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// nodegate removed the managed taints.
    Opened(OpenedBy),
    /// The gate ended without opening.
    Stopped(StopReason),
}

impl Ending {
    fn all() -> impl Iterator<Item = Ending> {
        let opened = OpenedBy::ALL.into_iter().map(Ending::Opened);
        opened.chain(StopReason::ALL.into_iter().map(Ending::Stopped))
    }
}

impl From<StopReason> for Ending {
    fn from(reason: StopReason) -> Self {
        Ending::Stopped(reason)
    }
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::Opened(OpenedBy::Ready) => f.write_str("opened"),
            Ending::Opened(OpenedBy::Timeout) => f.write_str("opened by timeout"),
            Ending::Opened(OpenedBy::Manual) => f.write_str("opened manually"),
            Ending::Stopped(reason) => reason.fmt(f),
        }
    }
}

impl Serialize for Ending {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ending {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ending::all()
            .find(|e| e.to_string() == s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown gate ending `{s}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ending_reads_as_the_words_the_shell_logs() {
        let words: Vec<String> = Ending::all().map(|e| e.to_string()).collect();
        assert_eq!(
            words,
            [
                "opened",
                "opened by timeout",
                "opened manually",
                "node deleted",
                "node not found",
                "managed taint removed by another writer",
                "node carries no managed taint",
                "opened by another nodegate replica",
            ]
        );
        for e in Ending::all() {
            let json = serde_json::to_string(&Effect::Stop(e)).unwrap();
            assert_eq!(json, format!(r#"{{"stop":"{e}"}}"#));
            assert_eq!(
                serde_json::from_str::<Effect>(&json).unwrap(),
                Effect::Stop(e)
            );
        }
    }
}
