//! The journal's stored entries as one byte buffer.
//!
//! A [`Stored`] is 24 bytes, and most of it is zeros: a time that differs
//! from the one before by a few milliseconds, string numbers below 100, a
//! flag or two. Written one after another as variable-length integers
//! (LEB128; times as the zigzag difference from the entry before, other times
//! as their difference from the entry's own), a typical entry takes 8–12
//! bytes. Entries with no slot form ([`Slot::Whole`]) are boxed as before, in
//! a queue of their own, and leave only their kind byte in the buffer.
//!
//! The buffer is read front to back only: [`Entries::iter`] decodes as it
//! goes, and [`Entries::pop_front`] decodes the oldest entry to fold it into
//! the checkpoint. Differences are taken with wrapping arithmetic, so every
//! `i64` time round-trips exactly, the absent-time sentinel included.

use std::collections::VecDeque;

use integer_encoding::VarInt;

use super::{Member, MemberKind, Nanos, Pod, Slot, Stored, Sym};
use crate::gate::journal::Entry;

/// Bytes the buffer grows by when full: a gate's journal is a few hundred
/// bytes, so doubling would leave most of a thousand journals empty.
const CHUNK: usize = 128;

// The kind byte: the slot in the low three bits, the rest per slot.
const POD_STATUS: u8 = 0;
const MEMBER_EXPECTED: u8 = 1;
const MEMBER_READY: u8 = 2;
const MEMBER_WAITING: u8 = 3;
const POD: u8 = 4;
const WHOLE: u8 = 5;
const SLOT_BITS: u8 = 0b111;
/// A member's kind, in bits 3–5 of a member slot's kind byte.
const MEMBER_SHIFT: u8 = 3;
/// The slot's optional time (`ready_since`, `available_at`) is present.
const HAS_TIME: u8 = 1 << 6;
/// [`Slot::PodStatus`]'s flags, in bits 3–4 of its kind byte.
const FLAGS_SHIFT: u8 = 3;

/// A journal's retained entries, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::gate::journal) struct Entries {
    bytes: Vec<u8>,
    /// Where the oldest retained entry starts in `bytes`.
    start: usize,
    /// The time the oldest retained entry's difference is taken from: that
    /// of the last evicted entry with a slot (0 before any).
    base: Nanos,
    /// The time of the newest entry with a slot, for the next difference.
    last: Nanos,
    whole: VecDeque<Box<Entry>>,
    len: usize,
}

impl Entries {
    pub(in crate::gate::journal) fn len(&self) -> usize {
        self.len
    }

    pub(in crate::gate::journal) fn push_back(&mut self, stored: Stored) {
        let need = max_len(&stored.slot);
        if self.bytes.capacity() - self.bytes.len() < need {
            // Reclaim what eviction left at the front before growing.
            if self.start > 0 {
                self.bytes.drain(..self.start);
                self.start = 0;
            }
            if self.bytes.capacity() - self.bytes.len() < need {
                self.bytes.reserve_exact(need.max(CHUNK));
            }
        }
        let mut w = Writer {
            out: &mut self.bytes,
        };
        match stored.slot {
            Slot::Whole(entry) => {
                w.byte(WHOLE);
                self.whole.push_back(entry);
            }
            slot => {
                w.write(&slot, stored.at, self.last);
                self.last = stored.at;
            }
        }
        self.len += 1;
    }

    /// Removes and gives back the oldest entry.
    pub(in crate::gate::journal) fn pop_front(&mut self) -> Option<Stored> {
        if self.len == 0 {
            return None;
        }
        let mut r = Reader {
            bytes: &self.bytes[self.start..],
            pos: 0,
            prev: self.base,
        };
        let stored = r.read(&mut || self.whole.pop_front());
        self.start += r.pos;
        self.base = r.prev;
        self.len -= 1;
        if self.len == 0 {
            self.bytes.clear();
            self.start = 0;
        }
        Some(stored)
    }

    /// Every retained entry, oldest first, decoded as it is read.
    pub(in crate::gate::journal) fn iter(&self) -> impl ExactSizeIterator<Item = Stored> + '_ {
        let mut r = Reader {
            bytes: &self.bytes[self.start..],
            pos: 0,
            prev: self.base,
        };
        let mut whole = self.whole.iter();
        (0..self.len).map(move |_| r.read(&mut || whole.next().cloned()))
    }

    /// Bytes the buffer holds (retained entries only), for tests.
    #[cfg(test)]
    pub(in crate::gate::journal) fn encoded_len(&self) -> usize {
        self.bytes.len() - self.start
    }
}

/// The most bytes `slot` can take: room made before writing, so that the
/// buffer grows by [`CHUNK`]s rather than doubling.
fn max_len(slot: &Slot) -> usize {
    // A kind byte, the time and an optional time, up to three strings.
    const SMALL: usize = 1 + 10 + 10 + 3 * 3;
    match slot {
        Slot::Pod(p) => SMALL + 7 * 3 + 1 + 10 + p.labels.len() * 2 * 3,
        _ => SMALL,
    }
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn byte(&mut self, b: u8) {
        self.out.push(b);
    }

    fn var(&mut self, v: impl VarInt) {
        let mut buf = [0u8; 10];
        let n = v.encode_var(&mut buf);
        self.out.extend_from_slice(&buf[..n]);
    }

    fn sym(&mut self, s: Sym) {
        self.var(u64::from(s));
    }

    /// `t` as its difference from `from`; `NONE` cannot occur here (the
    /// caller sets [`HAS_TIME`] only for a present time).
    fn time(&mut self, t: Nanos, from: Nanos) {
        self.var(t.wrapping_sub(from));
    }

    fn member(&mut self, slot: u8, m: Member, extra: u8) {
        self.byte(slot | ((m.kind as u8) << MEMBER_SHIFT) | extra);
    }

    fn write(&mut self, slot: &Slot, at: Nanos, prev: Nanos) {
        match slot {
            Slot::PodStatus {
                pod,
                uid,
                phase,
                ready_since,
                flags,
            } => {
                let has = has_time(*ready_since);
                self.byte(POD_STATUS | (flags << FLAGS_SHIFT) | has);
                self.time(at, prev);
                self.sym(*pod);
                self.sym(*uid);
                self.sym(*phase);
                if has != 0 {
                    self.time(*ready_since, at);
                }
            }
            Slot::MemberExpected { member } => {
                self.member(MEMBER_EXPECTED, *member, 0);
                self.time(at, prev);
                self.sym(member.name);
            }
            Slot::MemberReady { member, pod } => {
                self.member(MEMBER_READY, *member, 0);
                self.time(at, prev);
                self.sym(member.name);
                self.sym(*pod);
            }
            Slot::MemberWaiting {
                member,
                why,
                available_at,
            } => {
                let has = has_time(*available_at);
                self.member(MEMBER_WAITING, *member, has);
                self.time(at, prev);
                self.sym(member.name);
                self.sym(*why);
                if has != 0 {
                    self.time(*available_at, at);
                }
            }
            Slot::Pod(p) => {
                let has = has_time(p.ready_since);
                self.byte(POD | has);
                self.time(at, prev);
                for s in [
                    p.namespace,
                    p.name,
                    p.uid,
                    p.node_name,
                    p.controller_uid,
                    p.phase,
                    p.status_note,
                ] {
                    self.sym(s);
                }
                if has != 0 {
                    self.time(p.ready_since, at);
                }
                self.byte(
                    u8::from(p.ready)
                        | u8::from(p.terminating) << 1
                        | u8::from(p.ready_annotation) << 2
                        | u8::from(p.sandbox_ready) << 3,
                );
                self.var(p.labels.len() as u64);
                for &(k, v) in p.labels.iter() {
                    self.sym(k);
                    self.sym(v);
                }
            }
            // Stored by the caller in the queue of whole entries.
            Slot::Whole(_) => self.byte(WHOLE),
        }
    }
}

/// Reads what [`Writer`] wrote. The bytes are the journal's own, written
/// above, so every read succeeds; a short read gives zeros rather than
/// panicking.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The time of the last entry with a slot read (or the base).
    prev: Nanos,
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn var<T: VarInt + Default>(&mut self) -> T {
        match T::decode_var(self.bytes.get(self.pos..).unwrap_or(&[])) {
            Some((v, n)) => {
                self.pos += n;
                v
            }
            None => T::default(),
        }
    }

    fn sym(&mut self) -> Sym {
        Sym::try_from(self.var::<u64>()).unwrap_or(Sym::MAX)
    }

    fn time(&mut self, from: Nanos) -> Nanos {
        from.wrapping_add(self.var::<i64>())
    }

    fn optional_time(&mut self, kind: u8, from: Nanos) -> Nanos {
        if kind & HAS_TIME != 0 {
            self.time(from)
        } else {
            super::NONE
        }
    }

    fn at(&mut self) -> Nanos {
        let at = self.time(self.prev);
        self.prev = at;
        at
    }

    fn member(&mut self, kind: u8) -> Member {
        Member {
            kind: member_kind((kind >> MEMBER_SHIFT) & 0b111),
            name: self.sym(),
        }
    }

    fn read(&mut self, whole: &mut dyn FnMut() -> Option<Box<Entry>>) -> Stored {
        let kind = self.byte();
        let (at, slot) = match kind & SLOT_BITS {
            POD_STATUS => {
                let at = self.at();
                let (pod, uid, phase) = (self.sym(), self.sym(), self.sym());
                let ready_since = self.optional_time(kind, at);
                let flags = (kind >> FLAGS_SHIFT) & 0b11;
                (
                    at,
                    Slot::PodStatus {
                        pod,
                        uid,
                        phase,
                        ready_since,
                        flags,
                    },
                )
            }
            MEMBER_EXPECTED => {
                let at = self.at();
                let member = self.member(kind);
                (at, Slot::MemberExpected { member })
            }
            MEMBER_READY => {
                let at = self.at();
                let member = self.member(kind);
                let pod = self.sym();
                (at, Slot::MemberReady { member, pod })
            }
            MEMBER_WAITING => {
                let at = self.at();
                let member = self.member(kind);
                let why = self.sym();
                let available_at = self.optional_time(kind, at);
                (
                    at,
                    Slot::MemberWaiting {
                        member,
                        why,
                        available_at,
                    },
                )
            }
            POD => {
                let at = self.at();
                let [
                    namespace,
                    name,
                    uid,
                    node_name,
                    controller_uid,
                    phase,
                    status_note,
                ] = std::array::from_fn(|_| self.sym());
                let ready_since = self.optional_time(kind, at);
                let bits = self.byte();
                let count = self.var::<u64>();
                let labels = (0..count).map(|_| (self.sym(), self.sym())).collect();
                let pod = Pod {
                    namespace,
                    name,
                    uid,
                    node_name,
                    controller_uid,
                    phase,
                    ready_since,
                    ready: bits & 1 != 0,
                    terminating: bits & 2 != 0,
                    ready_annotation: bits & 4 != 0,
                    sandbox_ready: bits & 8 != 0,
                    status_note,
                    labels,
                };
                (at, Slot::Pod(Box::new(pod)))
            }
            _ => {
                let entry = whole().unwrap_or_else(|| {
                    // Cannot happen: every WHOLE byte has its entry queued.
                    Box::new(Entry {
                        at: jiff::Timestamp::UNIX_EPOCH,
                        event: crate::gate::Event::WritesResumed,
                    })
                });
                (super::NONE, Slot::Whole(entry))
            }
        };
        Stored { at, slot }
    }
}

/// [`HAS_TIME`] when the optional time `t` is present.
fn has_time(t: Nanos) -> u8 {
    if t != super::NONE { HAS_TIME } else { 0 }
}

/// The member kind whose number is `bits` (its `repr(u8)`).
fn member_kind(bits: u8) -> MemberKind {
    use MemberKind::*;
    let kinds = [DaemonSet, Critical, Condition, Resource, Dra, Canary];
    kinds.get(usize::from(bits)).copied().unwrap_or(DaemonSet)
}
