//! Whether the index has caught up with the cluster since this replica
//! gained the lease, for a budgeted decider: it counts its budget from the
//! index, so it must not write before the node watch shows the taints the
//! old leader wrote last. The shell reads every node's resourceVersion
//! afresh (a quorum read) and the decider may write once the index shows
//! each at that version or newer, or after [`CATCH_UP_MAX`]. Pure: the
//! shell does the read and hands in the index and the time.

use std::time::{Duration, Instant};

/// The longest a budgeted decider waits for the node watch after gaining
/// the lease: past it, a watch that still lags is logged and the writes go
/// out (the budget then counts from what the index shows, as before).
pub const CATCH_UP_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Not leading (or not budgeted: nothing to wait for).
    Idle,
    /// Leading; the fresh read is still to be made (or failed).
    Reading {
        since: Instant,
    },
    /// Leading; these nodes (name, resourceVersion) the index does not yet
    /// show at that version or newer.
    Waiting {
        lagging: Vec<(String, u64)>,
        since: Instant,
    },
    CaughtUp,
}

/// How the wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caught {
    InTime,
    /// After [`CATCH_UP_MAX`], with this many nodes still lagging.
    GaveUp(usize),
}

#[derive(Debug)]
pub struct CatchUp {
    budgeted: bool,
    state: State,
}

impl CatchUp {
    pub fn new(budgeted: bool) -> Self {
        CatchUp {
            budgeted,
            state: State::Idle,
        }
    }

    /// Whether the decider may write as far as the catch-up goes.
    pub fn allows(&self) -> bool {
        !self.budgeted || self.state == State::CaughtUp
    }

    /// Whether the shell is waiting (it then looks more often).
    pub fn waiting(&self) -> bool {
        matches!(self.state, State::Reading { .. } | State::Waiting { .. })
    }

    /// Follows `leading`; true when the fresh read is due now.
    pub fn needs_read(&mut self, leading: bool) -> bool {
        if !self.budgeted {
            return false;
        }
        if !leading {
            self.state = State::Idle;
            return false;
        }
        if self.state == State::Idle {
            let since = Instant::now();
            self.state = State::Reading { since };
        }
        matches!(self.state, State::Reading { .. })
    }

    /// The fresh read's answer: every node's name and resourceVersion. A
    /// version that is not a number cannot be compared and is not waited
    /// for (the API server's are etcd revisions).
    pub fn read(&mut self, versions: Vec<(String, String)>) {
        let State::Reading { since } = self.state else {
            return;
        };
        let lagging = versions
            .into_iter()
            .filter_map(|(name, v)| v.parse().ok().map(|v| (name, v)))
            .collect();
        self.state = State::Waiting { lagging, since };
    }

    /// Drops the nodes the index shows caught up: at the version read or
    /// newer (`indexed`: a node's resourceVersion in the index), or the
    /// watch is past that version anyway (`seen`: the newest node version
    /// indexed; a node deleted since the read never shows again). `Some`
    /// once, when the wait ends.
    pub fn check(
        &mut self,
        leading: bool,
        indexed: impl Fn(&str) -> Option<String>,
        seen: u64,
        now: Instant,
    ) -> Option<Caught> {
        if !self.budgeted || !leading {
            return None;
        }
        let caught = match &mut self.state {
            State::Waiting { lagging, since } => {
                lagging.retain(|(name, want)| {
                    seen < *want
                        && indexed(name)
                            .and_then(|v| v.parse::<u64>().ok())
                            .is_none_or(|seen| seen < *want)
                });
                if lagging.is_empty() {
                    Caught::InTime
                } else if now.duration_since(*since) >= CATCH_UP_MAX {
                    Caught::GaveUp(lagging.len())
                } else {
                    return None;
                }
            }
            State::Reading { since } if now.duration_since(*since) >= CATCH_UP_MAX => {
                Caught::GaveUp(0)
            }
            _ => return None,
        };
        self.state = State::CaughtUp;
        Some(caught)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_new_leader_waits_until_the_index_shows_the_fresh_versions() {
        let mut c = CatchUp::new(true);
        let t0 = Instant::now();
        assert!(!c.allows());
        assert!(c.needs_read(true));
        c.read(versions(&[("a", "10"), ("b", "12")]));
        assert!(!c.needs_read(true));
        // The index shows a at 10, b still at 11 (the old leader's taint on
        // b, version 12, has not arrived yet).
        let index = |v: &'static str| move |n: &str| Some(if n == "a" { "10" } else { v }.into());
        assert_eq!(c.check(true, index("11"), 11, t0), None);
        assert!(!c.allows() && c.waiting());
        assert_eq!(c.check(true, index("13"), 13, t0), Some(Caught::InTime));
        assert!(c.allows());
        // Once.
        assert_eq!(c.check(true, index("13"), 13, t0), None);
    }

    #[test]
    fn a_node_missing_from_the_index_is_waited_for_until_the_cap() {
        let mut c = CatchUp::new(true);
        let t0 = Instant::now();
        c.needs_read(true);
        c.read(versions(&[("new", "5")]));
        assert_eq!(c.check(true, |_| None, 4, t0), None);
        let late = t0 + CATCH_UP_MAX + Duration::from_secs(1);
        assert_eq!(c.check(true, |_| None, 4, late), Some(Caught::GaveUp(1)));
        assert!(c.allows());
    }

    #[test]
    fn a_node_deleted_since_the_read_is_not_waited_for_once_the_watch_is_past_it() {
        let mut c = CatchUp::new(true);
        c.needs_read(true);
        c.read(versions(&[("gone", "5"), ("kept", "6")]));
        let index = |n: &str| (n == "kept").then(|| "6".to_string());
        assert_eq!(
            c.check(true, index, 6, Instant::now()),
            Some(Caught::InTime)
        );
    }

    #[test]
    fn losing_the_lease_starts_over_and_unbudgeted_deciders_never_wait() {
        let mut c = CatchUp::new(true);
        c.needs_read(true);
        c.read(Vec::new());
        assert_eq!(
            c.check(true, |_| None, 0, Instant::now()),
            Some(Caught::InTime)
        );
        assert!(!c.needs_read(false));
        assert!(!c.allows());
        assert!(c.needs_read(true));

        let mut net = CatchUp::new(false);
        assert!(net.allows());
        assert!(!net.needs_read(true));
        assert_eq!(net.check(true, |_| None, 0, Instant::now()), None);
    }
}
