//! The trace's and spans' ids, derived from what names the gate — the
//! node's uid and the gate's start — so that the same gate always gets the
//! same ids: exported twice (a restart, a second replica), it is one trace
//! in the backend, not two. FNV-1a, which is fixed and needs no crate; the
//! ids need to be unique, not secret.

use jiff::Timestamp;

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = OFFSET ^ seed;
    for part in parts {
        for b in part.iter().copied() {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The trace of the gate of node `uid` that started at `start`.
pub fn trace_id(uid: &str, start: Timestamp) -> u128 {
    let start = start.as_nanosecond().to_be_bytes();
    let hi = fnv(1, &[uid.as_bytes(), &start]);
    let lo = fnv(2, &[uid.as_bytes(), &start]);
    // Never zero: an all-zero id is invalid in OTLP.
    (u128::from(hi) << 64) | u128::from(lo.max(1))
}

/// A span of trace `trace`: the root is `span_id(trace, "")`, a member's
/// span is named by the member.
pub fn span_id(trace: u128, name: &str) -> u64 {
    fnv(3, &[&trace.to_be_bytes(), name.as_bytes()]).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_tell_gates_and_spans_apart() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:00:01Z".parse().unwrap();
        assert_eq!(trace_id("uid-a", t0), trace_id("uid-a", t0));
        assert_ne!(trace_id("uid-a", t0), trace_id("uid-b", t0));
        assert_ne!(trace_id("uid-a", t0), trace_id("uid-a", t1));
        let t = trace_id("uid-a", t0);
        assert_ne!(span_id(t, ""), span_id(t, "kube-system/cilium"));
        assert_ne!(span_id(t, "ab"), span_id(t, "a"));
        assert_ne!(t, 0);
        assert_ne!(span_id(t, ""), 0);
    }
}
