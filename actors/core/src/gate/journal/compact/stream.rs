//! The journal's stored entries as one byte buffer.
//!
//! A [`Stored`] is 24 bytes, and most of it is zeros: a time that differs
//! from the one before by a few milliseconds, string numbers below 100, a
//! flag or two. Written one after another as variable-length integers
//! (LEB128; times as the zigzag difference from the entry before, other times
//! as their difference from the entry's own), a typical entry takes 8–12
//! bytes. Entries with no slot form ([`Slot::Whole`]) are boxed in a queue
//! of their own, and leave only their kind byte in the buffer.
//!
//! The buffer is read front to back only: [`Entries::iter`] decodes as it
//! goes, and [`Entries::pop_front`] decodes the oldest entry to fold it into
//! the checkpoint. Differences are taken with wrapping arithmetic, so every
//! `i64` time round-trips exactly, the absent-time sentinel included.

use std::collections::VecDeque;

use integer_encoding::VarInt;

use super::{HAS_TIME, NONE, Nanos, POD, Pod, SLOT_BITS, SYMS, Slot, Stored, Sym, WHOLE};
use crate::gate::journal::Entry;

/// Bytes the buffer grows by when full: a gate's journal is a few hundred
/// bytes, so doubling would leave most of a thousand journals empty.
const CHUNK: usize = 128;

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
        // The most bytes the slot can take, room made before writing so that
        // the buffer grows by [`CHUNK`]s rather than doubling: a kind byte,
        // the time and an optional time, up to three strings.
        const SMALL: usize = 1 + 10 + 10 + 3 * 3;
        let need = match &stored.slot {
            Slot::Pod(p) => SMALL + 7 * 3 + 1 + 10 + p.labels.len() * 2 * 3,
            _ => SMALL,
        };
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
        write(&mut self.bytes, &stored.slot, stored.at, self.last);
        match stored.slot {
            Slot::Whole(entry) => self.whole.push_back(entry),
            _ => self.last = stored.at,
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

/// `v` as `integer_encoding` writes it (LEB128; its reader reads it back),
/// byte by byte: every record writes four or five of these, and going
/// through its 10-byte buffer cost a `memcpy` call each.
fn var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A time difference as `integer_encoding` writes an `i64`: zigzagged, so
/// that a small negative one stays short, then as [`var`].
fn var_signed(out: &mut Vec<u8>, v: i64) {
    var(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Writes the kind byte, the time as its difference from `prev`, the
/// strings, the optional time as its difference from the entry's own; then
/// a pod's flags and labels.
fn write(out: &mut Vec<u8>, slot: &Slot, at: Nanos, prev: Nanos) {
    let (kind, syms, time): (u8, &[Sym], Nanos) = match slot {
        Slot::Small { kind, syms, time } => {
            let n = SYMS[usize::from(kind & SLOT_BITS)];
            (*kind, &syms[..n], *time)
        }
        Slot::Pod(p) => (POD, &p.syms, p.ready_since),
        // Stored by the caller in the queue of whole entries.
        Slot::Whole(_) => return out.push(WHOLE),
    };
    let has = time != NONE;
    out.push(kind | if has { HAS_TIME } else { 0 });
    var_signed(out, at.wrapping_sub(prev));
    for &s in syms {
        var(out, u64::from(s));
    }
    if has {
        var_signed(out, time.wrapping_sub(at));
    }
    if let Slot::Pod(p) = slot {
        out.push(p.bits);
        var(out, p.labels.len() as u64);
        for &(k, v) in p.labels.iter() {
            var(out, u64::from(k));
            var(out, u64::from(v));
        }
    }
}

/// Reads what [`write`] wrote. The bytes are the journal's own, written
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

    fn read(&mut self, whole: &mut dyn FnMut() -> Option<Box<Entry>>) -> Stored {
        let kind = self.byte();
        let Some(&n) = SYMS.get(usize::from(kind & SLOT_BITS)) else {
            let entry = whole().unwrap_or_else(|| {
                // Cannot happen: every WHOLE byte has its entry queued.
                Box::new(Entry {
                    at: jiff::Timestamp::UNIX_EPOCH,
                    event: crate::gate::Event::WritesResumed,
                })
            });
            return Stored {
                at: NONE,
                slot: Slot::Whole(entry),
            };
        };
        let at = self.prev.wrapping_add(self.var::<i64>());
        self.prev = at;
        let mut syms = [0; 7];
        for s in &mut syms[..n] {
            *s = self.sym();
        }
        let time = if kind & HAS_TIME != 0 {
            at.wrapping_add(self.var::<i64>())
        } else {
            NONE
        };
        let slot = if kind & SLOT_BITS == POD {
            let bits = self.byte();
            let count = self.var::<u64>();
            let labels = (0..count).map(|_| (self.sym(), self.sym())).collect();
            Slot::Pod(Box::new(Pod {
                syms,
                ready_since: time,
                bits,
                labels,
            }))
        } else {
            let [a, b, c, ..] = syms;
            Slot::Small {
                kind: kind & !HAS_TIME,
                syms: [a, b, c],
                time,
            }
        };
        Stored { at, slot }
    }
}

#[cfg(test)]
mod tests {
    use integer_encoding::VarInt;

    /// The writer is the journal's own, the reader `integer_encoding`'s: the
    /// bytes must be that crate's, at every length a value can take.
    #[test]
    fn var_writes_what_integer_encoding_writes() {
        let mut values = vec![0, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX];
        values.extend((0..64).flat_map(|b| [1u64 << b, (1u64 << b) - 1]));
        for v in values {
            let mut out = Vec::new();
            super::var(&mut out, v);
            assert_eq!(out, v.encode_var_vec(), "{v}");
            for s in [v as i64, (v as i64).wrapping_neg()] {
                let mut out = Vec::new();
                super::var_signed(&mut out, s);
                assert_eq!(out, s.encode_var_vec(), "{s}");
            }
        }
    }
}
