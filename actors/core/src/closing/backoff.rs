//! A rule the API server refuses: a policy that
//! forbids its taint key (403), a taint the API server finds invalid (422
//! naming the field). Such a write fails the same way on every node and
//! every second; retried at the tainter's usual pace it would spend the
//! shared request rate on nothing. After a refusal the rule's writes wait,
//! twice as long after each refusal in a row (from [`FIRST`] up to
//! [`MOST`]); when the wait is over one write of the rule goes out alone,
//! and only its success lets the others follow.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

/// The wait after a rule's first refusal.
pub const FIRST: SignedDuration = SignedDuration::from_secs(2);
/// The longest wait.
pub const MOST: SignedDuration = SignedDuration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refused {
    /// Refusals in a row.
    times: u32,
    /// No write of the rule before this.
    until: Timestamp,
}

/// Per key (a rule's name; for replace, a node's), the refusals in a row
/// and the wait they earned.
#[derive(Debug)]
pub(crate) struct Backoffs {
    refused: HashMap<String, Refused>,
    first: SignedDuration,
    most: SignedDuration,
    /// Whether each wait is spread over its second half by the key, so
    /// that keys refused together do not come back together.
    spread: bool,
}

impl Default for Backoffs {
    /// A rule's: from [`FIRST`] up to [`MOST`], not spread.
    fn default() -> Self {
        Backoffs {
            refused: HashMap::new(),
            first: FIRST,
            most: MOST,
            spread: false,
        }
    }
}

/// What a rule's next write may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum May {
    Write,
    /// Not before this time.
    WaitUntil(Timestamp),
    /// The wait is over and one write of the rule is out to try: the others
    /// wait for its answer.
    WaitForProbe,
}

/// The wait after `times` refusals in a row.
pub fn wait_after(times: u32) -> SignedDuration {
    doubled(times, FIRST, MOST)
}

/// `first` doubled for each refusal in a row after the first, at most
/// `most`.
fn doubled(times: u32, first: SignedDuration, most: SignedDuration) -> SignedDuration {
    let doublings = times.saturating_sub(1).min(16);
    let wait = first.checked_mul(1i32 << doublings).unwrap_or(most);
    wait.min(most)
}

/// A point of `wait`'s second half, [wait/2, wait], chosen by a hash of
/// `key` and `times`: the jitter a pure decider can have (it draws no
/// random numbers), spreading keys refused together.
fn spread_by(key: &str, times: u32, wait: SignedDuration) -> SignedDuration {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (key, times).hash(&mut h);
    let half = wait / 2;
    let span = u64::try_from(half.as_millis()).unwrap_or(0);
    let pick = h.finish() % span.saturating_add(1);
    half + SignedDuration::from_millis(i64::try_from(pick).unwrap_or(0))
}

impl Backoffs {
    /// Waits from `first` doubling up to `most`, each spread over its second
    /// half by the key.
    pub(crate) fn spread(first: SignedDuration, most: SignedDuration) -> Self {
        Backoffs {
            first,
            most,
            spread: true,
            ..Backoffs::default()
        }
    }

    /// Whether a write of `rule` may go out at `now`, with `out` writes of
    /// the rule already out.
    pub(crate) fn may(&self, rule: &str, now: Timestamp, out: usize) -> May {
        match self.refused.get(rule) {
            None => May::Write,
            Some(r) if now < r.until => May::WaitUntil(r.until),
            Some(_) if out > 0 => May::WaitForProbe,
            Some(_) => May::Write,
        }
    }

    /// The API server refused a write of `rule` at `now`: the rule waits
    /// (longer than before, unless the refusal belongs to writes sent before
    /// the wait it already earned). Returns the end of the wait.
    pub(crate) fn refused(&mut self, rule: &str, now: Timestamp) -> Timestamp {
        let r = self.refused.entry(rule.to_string()).or_insert(Refused {
            times: 0,
            until: now,
        });
        if now >= r.until {
            r.times = r.times.saturating_add(1);
            let mut wait = doubled(r.times, self.first, self.most);
            if self.spread {
                wait = spread_by(rule, r.times, wait);
            }
            r.until = now.checked_add(wait).unwrap_or(now);
        }
        r.until
    }

    /// A write of `rule` was applied: the rule writes at its pace again.
    pub(crate) fn applied(&mut self, rule: &str) {
        self.refused.remove(rule);
    }

    /// Keeps only the rules `known` says are still in force.
    pub(crate) fn retain(&mut self, known: impl Fn(&str) -> bool) {
        self.refused.retain(|r, _| known(r));
    }
}
