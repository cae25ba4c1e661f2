//! A disruption budget, `N` or `P%` of the managed nodes: how many nodegate
//! may close at once on its own initiative. It always allows at least one
//! ([`MaxUnavailable::allowed`]), so a small cluster can still re-gate its one
//! broken node.

use std::fmt;
use std::str::FromStr;

/// `--regate-max-unavailable` and friends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    Count(u32),
    /// Percent of the managed nodes, 0–100.
    Percent(u32),
}

impl Default for MaxUnavailable {
    fn default() -> Self {
        MaxUnavailable::Percent(10)
    }
}

/// A budget that cannot be read, worded for the person who wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{value}' is not a budget: {why} (write a count such as 3, or a percentage such as 10%)")]
pub struct BudgetError {
    pub value: String,
    pub why: &'static str,
}

impl FromStr for MaxUnavailable {
    type Err = BudgetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| BudgetError {
            value: s.to_string(),
            why,
        };
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let n: u32 = p
                .trim()
                .parse()
                .map_err(|_| err("the percentage is not a whole number"))?;
            if n > 100 {
                return Err(err("a percentage is at most 100%"));
            }
            Ok(MaxUnavailable::Percent(n))
        } else {
            let n: u32 = t.parse().map_err(|_| err("not a whole number"))?;
            Ok(MaxUnavailable::Count(n))
        }
    }
}

impl fmt::Display for MaxUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxUnavailable::Count(n) => write!(f, "{n}"),
            MaxUnavailable::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl MaxUnavailable {
    /// How many of `managed` nodes may be closed at once: a share rounded
    /// down, never less than 1 (nor more than `managed`, unless there are no
    /// managed nodes at all, when the answer is still 1).
    pub fn allowed(self, managed: usize) -> usize {
        let n = match self {
            MaxUnavailable::Count(n) => n as usize,
            MaxUnavailable::Percent(p) => managed.saturating_mul(p as usize) / 100,
        };
        n.clamp(1, managed.max(1))
    }

    /// How many more nodes may be closed now, with `in_use` already closed.
    pub fn room(self, managed: usize, in_use: usize) -> usize {
        self.allowed(managed).saturating_sub(in_use)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_and_percentages() {
        assert_eq!("3".parse(), Ok(MaxUnavailable::Count(3)));
        assert_eq!(" 25% ".parse(), Ok(MaxUnavailable::Percent(25)));
        assert_eq!("0".parse(), Ok(MaxUnavailable::Count(0)));
        for bad in ["", "%", "-1", "1.5", "ten", "101%", "10 percent"] {
            let e = bad.parse::<MaxUnavailable>().unwrap_err();
            assert_eq!(e.value, bad, "{bad}");
            assert!(e.to_string().contains("10%"), "{e}");
        }
    }

    #[test]
    fn percent_rounds_down_and_allows_at_least_one() {
        let ten = MaxUnavailable::Percent(10);
        assert_eq!(ten.allowed(0), 1);
        assert_eq!(ten.allowed(1), 1);
        assert_eq!(ten.allowed(9), 1);
        assert_eq!(ten.allowed(19), 1);
        assert_eq!(ten.allowed(20), 2);
        assert_eq!(ten.allowed(1000), 100);
        assert_eq!(MaxUnavailable::Percent(0).allowed(50), 1);
        assert_eq!(MaxUnavailable::Percent(100).allowed(7), 7);
        assert_eq!(MaxUnavailable::Percent(33).allowed(10), 3);
    }

    #[test]
    fn count_is_at_least_one_and_at_most_the_managed_nodes() {
        assert_eq!(MaxUnavailable::Count(0).allowed(10), 1);
        assert_eq!(MaxUnavailable::Count(3).allowed(20), 3);
        assert_eq!(MaxUnavailable::Count(30).allowed(20), 20);
        assert_eq!(MaxUnavailable::Count(3).allowed(0), 1);
    }

    #[test]
    fn room_is_what_is_left() {
        let three = MaxUnavailable::Count(3);
        assert_eq!(three.room(20, 0), 3);
        assert_eq!(three.room(20, 2), 1);
        assert_eq!(three.room(20, 3), 0);
        assert_eq!(three.room(20, 5), 0);
    }
}
