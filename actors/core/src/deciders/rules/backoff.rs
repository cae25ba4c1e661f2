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

/// Per rule name, the refusals in a row and the wait they earned.
#[derive(Debug, Default)]
pub(super) struct Backoffs {
    refused: HashMap<String, Refused>,
}

/// What a rule's next write may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum May {
    Write,
    /// Not before this time.
    WaitUntil(Timestamp),
    /// The wait is over and one write of the rule is out to try: the others
    /// wait for its answer.
    WaitForProbe,
}

/// The wait after `times` refusals in a row.
pub fn wait_after(times: u32) -> SignedDuration {
    let doublings = times.saturating_sub(1).min(16);
    let wait = FIRST.checked_mul(1i32 << doublings).unwrap_or(MOST);
    wait.min(MOST)
}

impl Backoffs {
    /// Whether a write of `rule` may go out at `now`, with `out` writes of
    /// the rule already out.
    pub(super) fn may(&self, rule: &str, now: Timestamp, out: usize) -> May {
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
    pub(super) fn refused(&mut self, rule: &str, now: Timestamp) -> Timestamp {
        let r = self.refused.entry(rule.to_string()).or_insert(Refused {
            times: 0,
            until: now,
        });
        if now >= r.until {
            r.times = r.times.saturating_add(1);
            r.until = now.checked_add(wait_after(r.times)).unwrap_or(now);
        }
        r.until
    }

    /// A write of `rule` was applied: the rule writes at its pace again.
    pub(super) fn applied(&mut self, rule: &str) {
        self.refused.remove(rule);
    }

    /// Keeps only the rules `known` says are still in force.
    pub(super) fn retain(&mut self, known: impl Fn(&str) -> bool) {
        self.refused.retain(|r, _| known(r));
    }
}
