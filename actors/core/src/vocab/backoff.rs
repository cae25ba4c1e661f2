//! nodegate's one backoff policy; each user keeps its own `first` and `most`.
//! The core draws no random number: the caller passes the draw in, and
//! [`Backoffs`] spreads a decider's waits by a hash of the key instead.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;

/// Waits from `first`, doubling per failure in a row, at most `most`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub first: Duration,
    /// The longest wait.
    pub most: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, most: Duration) -> Self {
        Backoff { first, most }
    }

    /// The wait after `times` failures in a row (1 for the first; 0 counts
    /// as 1): `first * 2^(times-1)`, at most `most`.
    pub fn ceiling(&self, times: u32) -> Duration {
        let doublings = times.saturating_sub(1).min(31);
        self.first
            .checked_mul(1u32 << doublings)
            .map_or(self.most, |d| d.min(self.most))
    }

    /// [`jitter`] of [`Self::ceiling`]: a point in [ceiling/2, ceiling]
    /// chosen by `draw`.
    pub fn jittered(&self, times: u32, draw: impl FnOnce(u64) -> u64) -> Duration {
        jitter(self.ceiling(times), draw)
    }
}

/// A point in [ceiling/2, ceiling], so that many retries that failed
/// together do not retry together: `ceiling/2` plus `draw(spread)`
/// microseconds, where `spread` is the width of that range in microseconds
/// and `draw` is the caller's uniform draw from `0..=spread` (a larger
/// answer counts as `spread`).
pub fn jitter(ceiling: Duration, draw: impl FnOnce(u64) -> u64) -> Duration {
    let half = ceiling / 2;
    let spread = ceiling.saturating_sub(half).as_micros() as u64;
    half + Duration::from_micros(draw(spread).min(spread))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refused {
    /// Refusals in a row.
    times: u32,
    /// No write of the key before this.
    until: Timestamp,
}

/// Per key (a rule's name; for replace, a node's), the refusals in a row
/// and the wait they earned by a [`Backoff`]. After a refusal the key's
/// writes wait; when the wait is over one write of the key goes out alone,
/// and only its success lets the others follow.
#[derive(Debug)]
pub struct Backoffs {
    refused: HashMap<String, Refused>,
    policy: Backoff,
    spread: bool,
}

/// What a key's next write may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum May {
    Write,
    /// Not before this time.
    WaitUntil(Timestamp),
    /// The wait is over and one write of the key is out to try: the others
    /// wait for its answer.
    WaitForProbe,
}

/// A [`jitter`] drawn from a hash of `key` and `times` at millisecond
/// steps: the jitter a pure decider can have (it draws no random numbers),
/// spreading keys refused together.
fn spread_by(key: &str, times: u32, policy: Backoff) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (key, times).hash(&mut h);
    let hash = h.finish();
    policy.jittered(times, |spread| {
        let millis = spread / 1000;
        (hash % millis.saturating_add(1)) * 1000
    })
}

impl Backoffs {
    /// Waits by `policy`, not spread.
    pub fn new(policy: Backoff) -> Self {
        Backoffs {
            refused: HashMap::new(),
            policy,
            spread: false,
        }
    }

    /// Waits by `policy`, each spread over its second half by the key.
    pub fn spread(policy: Backoff) -> Self {
        Backoffs {
            spread: true,
            ..Backoffs::new(policy)
        }
    }

    /// Whether a write of `key` may go out at `now`, with `out` writes of
    /// the key already out.
    pub fn may(&self, key: &str, now: Timestamp, out: usize) -> May {
        match self.refused.get(key) {
            None => May::Write,
            Some(r) if now < r.until => May::WaitUntil(r.until),
            Some(_) if out > 0 => May::WaitForProbe,
            Some(_) => May::Write,
        }
    }

    /// The API server refused a write of `key` at `now`: the key waits
    /// (longer than before, unless the refusal belongs to writes sent before
    /// the wait it already earned). Returns the end of the wait.
    pub fn refused(&mut self, key: &str, now: Timestamp) -> Timestamp {
        let r = self.refused.entry(key.to_string()).or_insert(Refused {
            times: 0,
            until: now,
        });
        if now >= r.until {
            r.times = r.times.saturating_add(1);
            let wait = if self.spread {
                spread_by(key, r.times, self.policy)
            } else {
                self.policy.ceiling(r.times)
            };
            r.until = now.checked_add(wait).unwrap_or(now);
        }
        r.until
    }

    /// A write of `key` was applied: the key writes at its pace again.
    pub fn applied(&mut self, key: &str) {
        self.refused.remove(key);
    }

    /// Keeps only the keys `known` says are still in force.
    pub fn retain(&mut self, known: impl Fn(&str) -> bool) {
        self.refused.retain(|r, _| known(r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_ceiling_doubles_from_first_up_to_most() {
        let b = Backoff::new(50 * MS, Duration::from_secs(10));
        assert_eq!(b.ceiling(0), 50 * MS);
        assert_eq!(b.ceiling(1), 50 * MS);
        assert_eq!(b.ceiling(2), 100 * MS);
        assert_eq!(b.ceiling(3), 200 * MS);
        assert_eq!(b.ceiling(39), b.most);
        assert_eq!(b.ceiling(u32::MAX), b.most);
    }

    #[test]
    fn jitter_spans_half_to_full_ceiling() {
        let ceiling = Duration::from_millis(400);
        assert_eq!(jitter(ceiling, |_| 0), ceiling / 2);
        assert_eq!(jitter(ceiling, |spread| spread), ceiling);
        assert_eq!(jitter(ceiling, |_| u64::MAX), ceiling);
    }

    #[test]
    fn a_spread_wait_is_whole_milliseconds_in_its_second_half() {
        let b = Backoff::new(Duration::from_secs(20), Duration::from_secs(300));
        for times in 1..8 {
            let w = spread_by("n1", times, b);
            let c = b.ceiling(times);
            assert!(w >= c / 2 && w <= c, "{times}: {w:?} of {c:?}");
            assert_eq!(w.subsec_nanos() % 1_000_000, 0);
            assert_eq!(w, spread_by("n1", times, b), "the same key, the same wait");
        }
    }
}
