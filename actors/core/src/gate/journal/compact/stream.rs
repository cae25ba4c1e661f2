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
use std::sync::Arc;

use integer_encoding::VarInt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{HAS_TIME, NONE, Nanos, POD, Pod, SLOT_BITS, SYMS, Slot, Stored, Sym, WHOLE};
use crate::gate::Event;
use crate::gate::journal::{Entry, ThawError};
use crate::vocab::model::DaemonSetInfo;

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

    /// Appends the retained entries to `out` as [`Journal::freeze`] keeps
    /// them: the count and the two times, the retained bytes, then each whole
    /// entry as JSON, so that nothing is shared with the nodes and pods the
    /// router held. A snapshot's DaemonSets go to `daemonsets` instead, each
    /// snapshot's count before its JSON.
    ///
    /// [`Journal::freeze`]: crate::gate::journal::Journal::freeze
    pub(in crate::gate::journal) fn freeze_into(
        &self,
        out: &mut Vec<u8>,
        daemonsets: &mut Vec<Arc<DaemonSetInfo>>,
    ) -> Result<(), serde_json::Error> {
        let bytes = &self.bytes[self.start..];
        var(out, self.len as u64);
        var_signed(out, self.base);
        var_signed(out, self.last);
        var(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
        var(out, self.whole.len() as u64);
        for entry in &self.whole {
            let Event::Snapshot {
                node,
                daemonsets: shown,
                pods,
            } = &entry.event
            else {
                var(out, 0);
                json_into(out, entry)?;
                continue;
            };
            var(out, shown.len() as u64);
            daemonsets.extend(shown.iter().cloned());
            let without = Entry {
                at: entry.at,
                event: Event::Snapshot {
                    node: Arc::clone(node),
                    daemonsets: Vec::new(),
                    pods: pods.clone(),
                },
            };
            json_into(out, &without)?;
        }
        Ok(())
    }

    /// Reads back what [`Entries::freeze_into`] wrote, taking the snapshots'
    /// DaemonSets from `daemonsets`.
    pub(in crate::gate::journal) fn thaw<'d>(
        t: &mut Thaw<'_>,
        daemonsets: &mut impl Iterator<Item = &'d Arc<DaemonSetInfo>>,
    ) -> Result<Entries, ThawError> {
        let len = t.count("the entry count")?;
        let base = t.var("the first time")?;
        let last = t.var("the last time")?;
        let n = t.count("the entries' length")?;
        let bytes = t.take(n, "the entries")?.to_vec();
        let wholes = t.count("the whole entries' count")?;
        // Each whole entry takes at least five bytes.
        let mut whole = VecDeque::with_capacity(wholes.min(t.left() / 5));
        for _ in 0..wholes {
            let shown = t.count("a snapshot's DaemonSet count")?;
            let mut entry: Entry = t.json("a whole entry")?;
            if shown > 0 {
                let Event::Snapshot { daemonsets: d, .. } = &mut entry.event else {
                    return Err(ThawError::Unreadable("a snapshot's DaemonSets"));
                };
                for _ in 0..shown {
                    let ds = daemonsets.next();
                    d.push(Arc::clone(
                        ds.ok_or(ThawError::Unreadable("a snapshot's DaemonSets"))?,
                    ));
                }
            }
            whole.push_back(Box::new(entry));
        }
        let entries = Entries {
            bytes,
            start: 0,
            base,
            last,
            whole,
            len,
        };
        entries.check()?;
        Ok(entries)
    }

    /// Whether the bytes hold exactly `len` entries, as many of them whole
    /// as are queued: thawed bytes are read as the journal's own afterwards.
    fn check(&self) -> Result<(), ThawError> {
        let mut r = Reader {
            bytes: &self.bytes[self.start..],
            pos: 0,
            prev: self.base,
        };
        let mut wholes = 0;
        for _ in 0..self.len {
            if r.pos >= r.bytes.len() {
                return Err(ThawError::Unreadable("the entries (too few)"));
            }
            let stored = r.read(&mut || None);
            wholes += usize::from(matches!(stored.slot, Slot::Whole(_)));
        }
        if r.pos != r.bytes.len() || wholes != self.whole.len() {
            return Err(ThawError::Unreadable(
                "the entries (a count does not match)",
            ));
        }
        Ok(())
    }

    /// Bytes the buffer holds (retained entries only), for tests.
    #[cfg(test)]
    pub(in crate::gate::journal) fn encoded_len(&self) -> usize {
        self.bytes.len() - self.start
    }
}

/// A reader of a frozen journal's bytes ([`Entries::thaw`]): unlike
/// [`Reader`], which reads bytes the journal has just written, it says
/// what it could not read.
pub(in crate::gate::journal) struct Thaw<'a> {
    bytes: &'a [u8],
}

impl<'a> Thaw<'a> {
    pub(in crate::gate::journal) fn new(bytes: &'a [u8]) -> Self {
        Thaw { bytes }
    }

    pub(in crate::gate::journal) fn left(&self) -> usize {
        self.bytes.len()
    }

    pub(in crate::gate::journal) fn take(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [u8], ThawError> {
        if n > self.bytes.len() {
            return Err(ThawError::Unreadable(what));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(in crate::gate::journal) fn var<T: VarInt>(
        &mut self,
        what: &'static str,
    ) -> Result<T, ThawError> {
        let (v, n) = T::decode_var(self.bytes).ok_or(ThawError::Unreadable(what))?;
        self.take(n, what)?;
        Ok(v)
    }

    pub(in crate::gate::journal) fn count(
        &mut self,
        what: &'static str,
    ) -> Result<usize, ThawError> {
        usize::try_from(self.var::<u64>(what)?).map_err(|_| ThawError::Unreadable(what))
    }

    /// A value [`json_into`] wrote.
    pub(in crate::gate::journal) fn json<T: DeserializeOwned>(
        &mut self,
        what: &'static str,
    ) -> Result<T, ThawError> {
        let len = self.take(4, what)?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
        let len = usize::try_from(len).map_err(|_| ThawError::Unreadable(what))?;
        Ok(serde_json::from_slice(self.take(len, what)?)?)
    }

    /// Nothing may be left over.
    pub(in crate::gate::journal) fn end(&self) -> Result<(), ThawError> {
        match self.bytes.len() {
            0 => Ok(()),
            _ => Err(ThawError::Unreadable("its end (bytes left over)")),
        }
    }
}

/// Appends `value` as JSON, its length first (four bytes): what
/// [`Thaw::json`] reads.
pub(in crate::gate::journal) fn json_into(
    out: &mut Vec<u8>,
    value: &impl Serialize,
) -> Result<(), serde_json::Error> {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut *out, value)?;
    let len = u32::try_from(out.len() - at - 4).map_err(serde::ser::Error::custom)?;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// `v` as `integer_encoding` writes it (LEB128; its reader reads it back),
/// byte by byte: every record writes four or five of these, and going
/// through its 10-byte buffer cost a `memcpy` call each.
pub(in crate::gate::journal) fn var(out: &mut Vec<u8>, mut v: u64) {
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
/// above, or thawed ones that [`Entries::check`] read through it first; a
/// short read gives zeros rather than panicking.
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
            // Two bytes a label at least: a damaged count (thawed bytes,
            // `Entries::check`) cannot make it allocate more.
            let left = self.bytes.len().saturating_sub(self.pos) / 2;
            let count = self.var::<u64>().min(left as u64);
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
