//! How a journal keeps its entries in memory: small slots whose strings live
//! once per journal, written one after another into one byte buffer.
//!
//! A gate's journal is mostly the same few facts about the same few pods and
//! members: a pod's status changed, a member is waiting (and why), a member is
//! Ready. As [`Entry`] values each of those takes 104 bytes plus two or three
//! string allocations, and a gate records dozens of them. Here the frequent
//! kinds are a [`Slot`] whose strings are numbers into the journal's
//! [`Strings`], one buffer holding each distinct string once; every other
//! kind, and any entry that does not fit the slot (a time outside ±292 years
//! of 1970, a journal that has met too many distinct strings), is stored
//! whole, boxed. The slots are kept as variable-length integers in one byte
//! buffer ([`stream`]): 8–12 bytes an entry where a fixed slot took 24.
//!
//! Decoding gives back exactly the entry recorded: `decode(encode(e)) == e`
//! for every entry (tested below and by every replay test), so the journal's
//! JSON and its replay do not know this module exists.

mod stream;

use std::sync::Arc;

use jiff::Timestamp;
pub(super) use stream::Entries;

use super::Entry;
use crate::gate::Event;
use crate::vocab::member::MemberId;
use crate::vocab::model::PodInfo;

/// At most this many distinct strings per journal; past it, entries that
/// would add one are stored whole. A gate meets a few dozen.
const MAX_STRINGS: usize = 1024;

/// A string of the journal's [`Strings`]. Two bytes: a journal meets at
/// most [`MAX_STRINGS`], and with two-byte strings the slots below fit 16
/// bytes, a stored entry 24 (checked below).
type Sym = u16;

const _: () = assert!(
    MAX_STRINGS < Sym::MAX as usize,
    "Sym::MAX marks an absent string"
);

/// Every distinct string a journal's slots name, each once, in one buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Strings {
    text: String,
    /// Where each string ends in `text`; each starts where the one before
    /// it ends (4 bytes a string where a (start, end) pair took 8).
    ends: Vec<u32>,
}

impl Strings {
    fn get(&self, sym: Sym) -> &str {
        let i = sym as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start as usize..self.ends[i] as usize]
    }

    /// The number of `s`, added if new; `None` when the table is full.
    fn intern(&mut self, s: &str) -> Option<Sym> {
        if let Some(i) = (0..self.ends.len()).find(|&i| self.get(i as Sym) == s) {
            return Some(i as Sym);
        }
        let end = u32::try_from(self.text.len() + s.len()).ok()?;
        if self.ends.len() >= MAX_STRINGS {
            return None;
        }
        // Both grown a little at a time: most journals meet a few dozen
        // strings, a few hundred bytes.
        self.text.reserve_exact(s.len() + 16);
        self.text.push_str(s);
        if self.ends.len() == self.ends.capacity() {
            self.ends.reserve_exact(8);
        }
        self.ends.push(end);
        Some(self.ends.len() as Sym - 1)
    }
}

/// A member by kind and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    kind: MemberKind,
    name: Sym,
}

/// Its number is its bits in a member slot's kind byte (`stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum MemberKind {
    DaemonSet = 0,
    Critical = 1,
    Condition = 2,
    Resource = 3,
    Dra = 4,
    Canary = 5,
}

/// A time as nanoseconds since the Unix epoch; `NONE` for an absent one.
type Nanos = i64;
const NONE: Nanos = i64::MIN;

/// [`Slot::PodStatus`]'s `ready`.
const READY: u8 = 1;
/// [`Slot::PodStatus`]'s `terminating`.
const TERMINATING: u8 = 2;

/// One stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored {
    at: Nanos,
    slot: Slot,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    PodStatus {
        pod: Sym,
        uid: Sym,
        phase: Sym,
        ready_since: Nanos,
        /// [`READY`] and [`TERMINATING`]: one byte, so the slot fits 16.
        flags: u8,
    },
    MemberExpected {
        member: Member,
    },
    MemberReady {
        member: Member,
        pod: Sym,
    },
    MemberWaiting {
        member: Member,
        why: Sym,
        available_at: Nanos,
    },
    /// A pod seen for the first time: its strings interned rather than the
    /// version itself kept alive (the router and the gate hold the newest).
    Pod(Box<Pod>),
    Whole(Box<Entry>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    namespace: Sym,
    name: Sym,
    uid: Sym,
    node_name: Sym,
    /// `None` is written as `Sym::MAX`.
    controller_uid: Sym,
    phase: Sym,
    ready_since: Nanos,
    ready: bool,
    terminating: bool,
    ready_annotation: bool,
    sandbox_ready: bool,
    /// `None` is written as `Sym::MAX`.
    status_note: Sym,
    labels: Box<[(Sym, Sym)]>,
}

fn nanos(t: Timestamp) -> Option<Nanos> {
    i64::try_from(t.as_nanosecond()).ok().filter(|&n| n != NONE)
}

fn nanos_opt(t: Option<Timestamp>) -> Option<Nanos> {
    t.map_or(Some(NONE), nanos)
}

fn time(n: Nanos) -> Timestamp {
    // Only values made by `nanos` are stored, so this cannot fail.
    Timestamp::from_nanosecond(i128::from(n)).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn time_opt(n: Nanos) -> Option<Timestamp> {
    (n != NONE).then(|| time(n))
}

impl Strings {
    fn member(&mut self, m: &MemberId) -> Option<Member> {
        let (kind, name) = match m {
            MemberId::DaemonSet(n) => (MemberKind::DaemonSet, n),
            MemberId::Critical(n) => (MemberKind::Critical, n),
            MemberId::Condition(n) => (MemberKind::Condition, n),
            MemberId::Resource(n) => (MemberKind::Resource, n),
            MemberId::Dra(n) => (MemberKind::Dra, n),
            MemberId::Canary => (MemberKind::Canary, &String::new()),
        };
        Some(Member {
            kind,
            name: self.intern(name)?,
        })
    }

    fn member_id(&self, m: Member) -> MemberId {
        let name = self.get(m.name).to_string();
        match m.kind {
            MemberKind::DaemonSet => MemberId::DaemonSet(name),
            MemberKind::Critical => MemberId::Critical(name),
            MemberKind::Condition => MemberId::Condition(name),
            MemberKind::Resource => MemberId::Resource(name),
            MemberKind::Dra => MemberId::Dra(name),
            MemberKind::Canary => MemberId::Canary,
        }
    }

    fn pod(&mut self, p: &PodInfo) -> Option<Pod> {
        let mut labels = Vec::with_capacity(p.labels.len());
        for (k, v) in &p.labels {
            labels.push((self.intern(k)?, self.intern(v)?));
        }
        Some(Pod {
            namespace: self.intern(&p.namespace)?,
            name: self.intern(&p.name)?,
            uid: self.intern(&p.uid.text())?,
            node_name: self.intern(&p.node_name)?,
            controller_uid: self.intern_opt(p.controller_uid.as_deref())?,
            phase: self.intern(&p.phase)?,
            ready_since: nanos_opt(p.ready_since.get())?,
            ready: p.ready,
            terminating: p.terminating,
            ready_annotation: p.ready_annotation,
            sandbox_ready: p.sandbox_ready,
            status_note: self.intern_opt(p.status_note.as_deref())?,
            labels: labels.into_boxed_slice(),
        })
    }

    /// [`intern`](Self::intern) for an optional string; `None` is `Sym::MAX`.
    fn intern_opt(&mut self, s: Option<&str>) -> Option<Sym> {
        s.map_or(Some(Sym::MAX), |s| self.intern(s))
    }

    fn pod_info(&self, p: &Pod) -> PodInfo {
        PodInfo {
            namespace: self.get(p.namespace).into(),
            name: self.get(p.name).into(),
            uid: self.get(p.uid).into(),
            node_name: self.get(p.node_name).into(),
            labels: p
                .labels
                .iter()
                .map(|&(k, v)| (self.get(k).into(), self.get(v).into()))
                .collect(),
            controller_uid: (p.controller_uid != Sym::MAX)
                .then(|| self.get(p.controller_uid).into()),
            terminating: p.terminating,
            phase: self.get(p.phase).into(),
            ready: p.ready,
            ready_since: time_opt(p.ready_since).into(),
            ready_annotation: p.ready_annotation,
            sandbox_ready: p.sandbox_ready,
            status_note: (p.status_note != Sym::MAX).then(|| self.get(p.status_note).into()),
        }
    }

    /// `entry` as a slot, or `None` when it has no slot form or does not fit
    /// one. Strings interned before a later part fails stay in the table
    /// (harmless: a few bytes, and counted against the limit).
    fn slot(&mut self, entry: &Entry) -> Option<Slot> {
        Some(match &entry.event {
            Event::PodStatusChanged {
                pod,
                uid,
                phase,
                ready,
                ready_since,
                terminating,
            } => Slot::PodStatus {
                pod: self.intern(pod)?,
                uid: self.intern(uid)?,
                phase: self.intern(phase)?,
                ready_since: nanos_opt(*ready_since)?,
                flags: if *ready { READY } else { 0 } | if *terminating { TERMINATING } else { 0 },
            },
            Event::PodUpdated { pod } => Slot::Pod(Box::new(self.pod(pod)?)),
            Event::MemberExpected { member } => Slot::MemberExpected {
                member: self.member(member)?,
            },
            Event::MemberReady { member, pod } => Slot::MemberReady {
                member: self.member(member)?,
                pod: self.intern(pod)?,
            },
            Event::MemberWaiting {
                member,
                why,
                available_at,
            } => Slot::MemberWaiting {
                member: self.member(member)?,
                why: self.intern(why)?,
                available_at: nanos_opt(*available_at)?,
            },
            _ => return None,
        })
    }

    pub(super) fn encode(&mut self, entry: Entry) -> Stored {
        match (nanos(entry.at), self.slot(&entry)) {
            (Some(at), Some(slot)) => Stored { at, slot },
            _ => Stored {
                at: NONE,
                slot: Slot::Whole(Box::new(entry)),
            },
        }
    }

    pub(super) fn decode(&self, stored: &Stored) -> Entry {
        let event = match &stored.slot {
            Slot::Whole(entry) => return (**entry).clone(),
            Slot::Pod(pod) => Event::PodUpdated {
                pod: Arc::new(self.pod_info(pod)),
            },
            Slot::PodStatus {
                pod,
                uid,
                phase,
                ready_since,
                flags,
            } => Event::PodStatusChanged {
                pod: self.get(*pod).into(),
                uid: self.get(*uid).into(),
                phase: self.get(*phase).into(),
                ready: flags & READY != 0,
                ready_since: time_opt(*ready_since),
                terminating: flags & TERMINATING != 0,
            },
            Slot::MemberExpected { member } => Event::MemberExpected {
                member: self.member_id(*member),
            },
            Slot::MemberReady { member, pod } => Event::MemberReady {
                member: self.member_id(*member),
                pod: self.get(*pod).to_string(),
            },
            Slot::MemberWaiting {
                member,
                why,
                available_at,
            } => Event::MemberWaiting {
                member: self.member_id(*member),
                why: self.get(*why).to_string(),
                available_at: time_opt(*available_at),
            },
        };
        Entry {
            at: time(stored.at),
            event,
        }
    }
}

#[cfg(test)]
mod tests;
