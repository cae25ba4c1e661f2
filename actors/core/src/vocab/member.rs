//! Who a gate may wait for ([`MemberId`]), whether it waits for each
//! ([`Expectation`]) and where each stands ([`Readiness`]).

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::rules::placement::ReasonCode;
use crate::rules::readiness::{CriticalPodEntry, MemberState, Waiting};
use crate::vocab::model::DaemonSetInfo;

/// Who a gate may wait for. DaemonSets are named `namespace/name` (a name is
/// held by one live object at a time; a recreated DaemonSet replaces the old
/// one under the same name), the other kinds `KIND:NAME`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberId {
    DaemonSet(String),
    Critical(String),
    /// A `criticalConditions` entry, by condition type (`condition:TYPE`).
    Condition(String),
    /// A `criticalResources` entry, by resource name
    /// (`resource:nvidia.com/gpu`).
    Resource(String),
    /// A `draDrivers` entry, by driver name (`dra:gpu.nvidia.com`).
    Dra(String),
    /// The canary pod nodegate runs on the node (`canary`): a name with
    /// neither a slash nor a colon, so it clashes with no other member.
    Canary,
}

/// How the canary member is named in explain, status, traces and Events.
pub const CANARY_MEMBER: &str = "canary";

impl MemberId {
    pub fn daemonset(ds: &DaemonSetInfo) -> Self {
        MemberId::DaemonSet(ds.key())
    }
}

/// The kinds whose id is a prefix and a name. A colon appears in neither a
/// namespace nor a DaemonSet name, so no DaemonSet key has these prefixes.
type MakeMember = fn(String) -> MemberId;
const PREFIXED: [(&str, MakeMember); 4] = [
    ("critical:", MemberId::Critical),
    ("condition:", MemberId::Condition),
    ("resource:", MemberId::Resource),
    ("dra:", MemberId::Dra),
];

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (prefix, name) = match self {
            MemberId::DaemonSet(key) => ("", key),
            MemberId::Critical(name) => ("critical:", name),
            MemberId::Condition(type_) => ("condition:", type_),
            MemberId::Resource(name) => ("resource:", name),
            MemberId::Dra(driver) => ("dra:", driver),
            MemberId::Canary => return f.write_str(CANARY_MEMBER),
        };
        write!(f, "{prefix}{name}")
    }
}

impl std::str::FromStr for MemberId {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let prefixed = PREFIXED
            .iter()
            .find_map(|(prefix, kind)| Some(kind(s.strip_prefix(prefix)?.to_string())));
        Ok(prefixed.unwrap_or_else(|| match s {
            CANARY_MEMBER => MemberId::Canary,
            _ => MemberId::DaemonSet(s.to_string()),
        }))
    }
}

// A string form keeps journal lines short ("member":"kube-system/cilium") and
// lets members be JSON map keys.
impl Serialize for MemberId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MemberId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Ok(id) = String::deserialize(d)?.parse::<MemberId>();
        Ok(id)
    }
}

/// Whether the gate waits for a member, and if not, why not: in words and as
/// a stable code (`NotExpectedReason::kind` for DaemonSets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expectation {
    Expected,
    NotExpected { reason: String, code: ReasonCode },
}

/// Where an expected member stands on this node. Kept as text plus the one
/// time that matters, so that it compares equal across inputs while nothing
/// changes (the readiness module's own `Waiting` renders `ready_for`, which
/// grows with `now`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    Ready {
        pod: String,
    },
    Waiting {
        why: String,
        /// When a Ready pod becomes available (minReadySeconds): the gate
        /// re-checks at that time instead of polling.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        available_at: Option<Timestamp>,
    },
}

impl Readiness {
    pub(crate) fn from_member_state(state: MemberState) -> Self {
        match state {
            MemberState::Ready { pod } => Readiness::Ready { pod },
            MemberState::NotReady(Waiting::NotAvailableYet {
                pod,
                min_ready,
                available_at,
                ..
            }) => Readiness::Waiting {
                why: Readiness::not_available_text(&pod, min_ready, available_at, None),
                available_at: Some(available_at),
            },
            MemberState::NotReady(waiting) => Readiness::waiting(waiting.to_string()),
        }
    }

    /// The one wording for a pod that is Ready but not yet available
    /// (`minReadySeconds`). The gate's own text must stay equal while
    /// nothing changes, so without `now` it says "less than"; a report made
    /// at one moment (`now`) says how long, in the readiness module's words.
    pub fn not_available_text(
        pod: &str,
        min_ready: Duration,
        available_at: Timestamp,
        now: Option<Timestamp>,
    ) -> String {
        let head = match now {
            Some(now) => {
                let left =
                    Duration::try_from(available_at.duration_since(now)).unwrap_or(Duration::ZERO);
                Waiting::NotAvailableYet {
                    pod: pod.to_string(),
                    ready_for: min_ready.saturating_sub(left),
                    min_ready,
                    available_at,
                }
                .to_string()
            }
            None => format!(
                "pod {pod} Ready for less than minReadySeconds {}s",
                min_ready.as_secs()
            ),
        };
        format!("{head}, available at {available_at}")
    }

    /// A critical-pod entry's readiness: "no pod yet" names what it looks
    /// for, since nothing owns the pod it waits on.
    pub(crate) fn of_critical(entry: &CriticalPodEntry, state: MemberState) -> Self {
        match state {
            MemberState::NotReady(Waiting::NoPod) => Readiness::waiting(format!(
                "no pod matching {} in namespace {} on the node yet",
                entry.selector, entry.namespace
            )),
            state => Readiness::from_member_state(state),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready { .. })
    }

    /// Waiting for `why`, with no moment to look again.
    pub fn waiting(why: String) -> Self {
        Readiness::Waiting {
            why,
            available_at: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub expectation: Expectation,
    /// Tracked for expected members only; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
}

impl Member {
    /// An expected member, standing as `readiness` says.
    pub fn expected(readiness: Readiness) -> Self {
        Member {
            expectation: Expectation::Expected,
            readiness: Some(readiness),
        }
    }

    /// A member the gate does not wait for, and why.
    pub fn not_expected(reason: String, code: ReasonCode) -> Self {
        Member {
            expectation: Expectation::NotExpected { reason, code },
            readiness: None,
        }
    }

    pub fn is_expected(&self) -> bool {
        self.expectation == Expectation::Expected
    }
}

/// An expected member that was not Ready, and why — what a Warning names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    pub member: MemberId,
    pub why: String,
}
