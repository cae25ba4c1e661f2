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
//! buffer ([`stream`]).
//!
//! Decoding gives back exactly the entry recorded: `decode(encode(e)) == e`
//! for every entry (tested below and by every replay test), so the journal's
//! JSON and its replay do not know this module exists.

mod stream;

use std::borrow::Cow;
use std::sync::Arc;

use jiff::Timestamp;
pub(super) use stream::{Entries, Thaw, json_into, var};

use super::Entry;
use crate::gate::apply::{Fold, Status, fold};
use crate::gate::{Event, GateState, apply};
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

/// A time as nanoseconds since the Unix epoch; `NONE` for an absent one.
type Nanos = i64;
const NONE: Nanos = i64::MIN;

// The kind byte, as the stream writes it: the slot in the low three bits,
// the rest per slot. Its number is also the slot's row in [`SYMS`].
const POD_STATUS: u8 = 0;
const MEMBER_EXPECTED: u8 = 1;
const MEMBER_READY: u8 = 2;
const MEMBER_WAITING: u8 = 3;
const POD: u8 = 4;
const WHOLE: u8 = 5;
const SLOT_BITS: u8 = 0b111;
/// A member's kind ([`MEMBER_KINDS`], then the canary), in bits 3–5 of a
/// member slot's kind byte.
const MEMBER_SHIFT: u8 = 3;
/// [`Slot::Small`]'s `ready` and `terminating` of a pod status, in bits 3–4.
const READY: u8 = 1 << 3;
const TERMINATING: u8 = 2 << 3;
/// The slot's optional time (`ready_since`, `available_at`) is present; set
/// by the stream only.
const HAS_TIME: u8 = 1 << 6;

/// How many strings each kind of slot names, by its kind.
const SYMS: [usize; 5] = [3, 1, 2, 2, 7];

/// The member kinds by their number; the canary is the one after them.
const MEMBER_KINDS: [fn(String) -> MemberId; 5] = [
    MemberId::DaemonSet,
    MemberId::Critical,
    MemberId::Condition,
    MemberId::Resource,
    MemberId::Dra,
];

/// One stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored {
    at: Nanos,
    slot: Slot,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// A pod's status changed, or a member is expected, Ready or waiting:
    /// its kind byte (without [`HAS_TIME`]), the first [`SYMS`] of `syms`
    /// (the rest 0), and its optional time. One byte of kind, so the slot
    /// fits 16.
    Small {
        kind: u8,
        syms: [Sym; 3],
        time: Nanos,
    },
    /// A pod seen for the first time: its strings interned rather than the
    /// version itself kept alive (the router and the gate hold the newest).
    Pod(Box<Pod>),
    Whole(Box<Entry>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    /// Namespace, name, uid, node name, controller uid, phase and status
    /// note, in the order the stream writes them; an absent one is `Sym::MAX`.
    syms: [Sym; 7],
    ready_since: Nanos,
    /// Ready, terminating, the ready annotation, sandbox ready: bits 0–3.
    bits: u8,
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
    /// Appends the strings to `out` as [`Journal::freeze`] keeps them:
    /// their count, where each ends, then the text (as long as the last end).
    ///
    /// [`Journal::freeze`]: super::Journal::freeze
    pub(super) fn freeze_into(&self, out: &mut Vec<u8>) {
        stream::var(out, self.ends.len() as u64);
        for &end in &self.ends {
            stream::var(out, u64::from(end));
        }
        out.extend_from_slice(self.text.as_bytes());
    }

    /// Reads back what [`Strings::freeze_into`] wrote: each string must end
    /// where the one before it ends or later, on a character's boundary.
    pub(super) fn thaw(t: &mut Thaw<'_>) -> Result<Strings, super::ThawError> {
        let bad = || super::ThawError::Unreadable("the strings");
        let n = t.count("the strings' count")?;
        if n > MAX_STRINGS {
            return Err(bad());
        }
        let mut ends = Vec::with_capacity(n);
        for _ in 0..n {
            ends.push(t.var::<u32>("where a string ends")?);
        }
        let len = ends.last().map_or(0, |&e| e as usize);
        let text = std::str::from_utf8(t.take(len, "the strings")?).map_err(|_| bad())?;
        let ordered = ends.windows(2).all(|w| w[0] <= w[1]);
        if !ordered || !ends.iter().all(|&e| text.is_char_boundary(e as usize)) {
            return Err(bad());
        }
        Ok(Strings {
            text: text.to_owned(),
            ends,
        })
    }

    /// The string `sym`; "" for a number the table does not have (which
    /// only damaged thawed bytes could hold: [`Strings::thaw`]).
    fn get(&self, sym: Sym) -> &str {
        let i = usize::from(sym);
        let start = match i {
            0 => Some(0),
            _ => self.ends.get(i - 1).copied(),
        };
        let range = start.zip(self.ends.get(i).copied());
        range
            .and_then(|(start, end)| self.text.get(start as usize..end as usize))
            .unwrap_or_default()
    }

    /// The number of `s`, added if new; `None` when the table is full.
    fn intern(&mut self, s: &str) -> Option<Sym> {
        // Every record looks its strings up here, so the scan compares
        // lengths (from the ends alone) before bytes: most strings differ in
        // length and are passed over without reading them.
        let mut start = 0;
        for (i, &end) in self.ends.iter().enumerate() {
            if (end - start) as usize == s.len()
                && self.text.as_bytes().get(start as usize..end as usize) == Some(s.as_bytes())
            {
                return Some(i as Sym);
            }
            start = end;
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

    /// A member's kind bits and name.
    fn member(&mut self, m: &MemberId) -> Option<(u8, Sym)> {
        let (kind, name) = match m {
            MemberId::DaemonSet(n) => (0, n.as_str()),
            MemberId::Critical(n) => (1, n.as_str()),
            MemberId::Condition(n) => (2, n.as_str()),
            MemberId::Resource(n) => (3, n.as_str()),
            MemberId::Dra(n) => (4, n.as_str()),
            MemberId::Canary => (5, ""),
        };
        Some((kind << MEMBER_SHIFT, self.intern(name)?))
    }

    fn member_id(&self, kind: u8, name: Sym) -> MemberId {
        let make = MEMBER_KINDS.get(usize::from((kind >> MEMBER_SHIFT) & 0b111));
        make.map_or(MemberId::Canary, |make| make(self.get(name).into()))
    }

    fn pod(&mut self, p: &PodInfo) -> Option<Pod> {
        let labels = (p.labels.iter())
            .map(|(k, v)| Some((self.intern(k)?, self.intern(v)?)))
            .collect::<Option<Box<[_]>>>()?;
        let uid = p.uid.text();
        let texts = [
            Some(&*p.namespace),
            Some(p.name.as_str()),
            Some(&*uid),
            Some(&*p.node_name),
            p.controller_uid.as_deref(),
            Some(&*p.phase),
        ];
        let mut syms = [Sym::MAX; 7];
        for (sym, text) in syms.iter_mut().zip(texts) {
            *sym = self.intern_opt(text)?;
        }
        // The time before the status note, as the strings were always met.
        let ready_since = nanos_opt(p.ready_since.get())?;
        syms[6] = self.intern_opt(p.status_note.as_deref())?;
        Some(Pod {
            syms,
            ready_since,
            bits: u8::from(p.ready)
                | u8::from(p.terminating) << 1
                | u8::from(p.ready_annotation) << 2
                | u8::from(p.sandbox_ready) << 3,
            labels,
        })
    }

    /// [`intern`](Self::intern) for an optional string; `None` is `Sym::MAX`.
    fn intern_opt(&mut self, s: Option<&str>) -> Option<Sym> {
        s.map_or(Some(Sym::MAX), |s| self.intern(s))
    }

    /// The string `s` names, `None` for `Sym::MAX`.
    fn get_opt(&self, s: Sym) -> Option<&str> {
        (s != Sym::MAX).then(|| self.get(s))
    }

    fn pod_info(&self, p: &Pod) -> PodInfo {
        let [ns, name, uid, node, owner, phase, note] = p.syms;
        PodInfo {
            namespace: self.get(ns).into(),
            name: self.get(name).into(),
            uid: self.get(uid).into(),
            node_name: self.get(node).into(),
            labels: p
                .labels
                .iter()
                .map(|&(k, v)| (self.get(k).into(), self.get(v).into()))
                .collect(),
            controller_uid: self.get_opt(owner).map(Into::into),
            terminating: p.bits & 2 != 0,
            phase: self.get(phase).into(),
            ready: p.bits & 1 != 0,
            ready_since: time_opt(p.ready_since).into(),
            ready_annotation: p.bits & 4 != 0,
            sandbox_ready: p.bits & 8 != 0,
            status_note: self.get_opt(note).map(Into::into),
        }
    }

    /// `entry` as a slot, or `None` when it has no slot form or does not fit
    /// one. Strings interned before a later part fails stay in the table
    /// (harmless: a few bytes, and counted against the limit).
    fn slot(&mut self, entry: &Entry) -> Option<Slot> {
        let (kind, syms, time) = match &entry.event {
            Event::PodUpdated { pod } => return Some(Slot::Pod(Box::new(self.pod(pod)?))),
            Event::PodStatusChanged {
                pod,
                uid,
                phase,
                ready,
                ready_since,
                terminating,
            } => (
                POD_STATUS
                    | if *ready { READY } else { 0 }
                    | if *terminating { TERMINATING } else { 0 },
                [self.intern(pod)?, self.intern(uid)?, self.intern(phase)?],
                *ready_since,
            ),
            Event::MemberExpected { member } => {
                let (kind, name) = self.member(member)?;
                (MEMBER_EXPECTED | kind, [name, 0, 0], None)
            }
            Event::MemberReady { member, pod } => {
                let (kind, name) = self.member(member)?;
                (MEMBER_READY | kind, [name, self.intern(pod)?, 0], None)
            }
            Event::MemberWaiting {
                member,
                why,
                available_at,
            } => {
                let (kind, name) = self.member(member)?;
                (
                    MEMBER_WAITING | kind,
                    [name, self.intern(why)?, 0],
                    *available_at,
                )
            }
            _ => return None,
        };
        let time = nanos_opt(time)?;
        Some(Slot::Small { kind, syms, time })
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
        let event = match stored.slot {
            Slot::Whole(ref entry) => return (**entry).clone(),
            Slot::Pod(ref pod) => Event::PodUpdated {
                pod: Arc::new(self.pod_info(pod)),
            },
            Slot::Small { kind, syms, time } => self.small(kind, syms, time).into_event(),
        };
        Entry {
            at: time(stored.at),
            event,
        }
    }

    /// Folds `stored` into `state` as [`apply`] folds its decoded entry. A
    /// small slot, the kind a journal evicts on nearly every record once it
    /// is full, goes to `apply`'s own [`fold`] with its strings borrowed from
    /// the table: decoding it would build each string only to drop it.
    pub(super) fn fold(&self, stored: &Stored, state: &mut GateState) {
        match stored.slot {
            Slot::Small { kind, syms, time } => fold(state, self.small(kind, syms, time)),
            _ => apply(state, &self.decode(stored).event),
        }
    }

    /// The event a small slot holds, its strings borrowed from the table;
    /// the one reading of a small slot, for [`decode`](Self::decode) and
    /// [`fold`](Self::fold) alike.
    fn small(&self, kind: u8, [a, b, c]: [Sym; 3], time: Nanos) -> Fold<'_> {
        if kind & SLOT_BITS == POD_STATUS {
            return Fold::PodStatus {
                pod: self.get(a),
                uid: self.get(b),
                status: Status {
                    phase: self.get(c),
                    ready: kind & READY != 0,
                    ready_since: time_opt(time),
                    terminating: kind & TERMINATING != 0,
                },
            };
        }
        let member = Cow::Owned(self.member_id(kind, a));
        match kind & SLOT_BITS {
            MEMBER_EXPECTED => Fold::MemberExpected { member },
            MEMBER_READY => Fold::MemberReady {
                member,
                pod: self.get(b),
            },
            _ => Fold::MemberWaiting {
                member,
                why: self.get(b),
                available_at: time_opt(time),
            },
        }
    }
}

#[cfg(test)]
mod tests;
