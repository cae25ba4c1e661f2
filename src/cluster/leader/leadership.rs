//! [`Leadership`]: whether this replica may write now, and the term it
//! leads in. The elector (`leader`) sets it; everything else only asks.

use std::sync::Mutex;
use std::time::Instant;

use super::seen::Seen;

/// Whether this replica may write now. Shared by the elector (which sets
/// it), the executor (which checks it before each write) and the metrics.
#[derive(Debug)]
pub struct Leadership {
    pub(super) elected: bool,
    held: Mutex<Held>,
    pub(super) seen: Mutex<Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    leader: bool,
    /// The leader stops writing at this instant unless a renewal moves it.
    /// `None`: no expiry (leader election disabled).
    until: Option<Instant>,
    /// The latest node write refused since the gates were last told they may
    /// write (see [`Leadership::renewed`]).
    refused_at: Option<Instant>,
    /// How many times this replica began to lead after not leading (see
    /// [`Leadership::term`]).
    term: u64,
}

impl Leadership {
    /// Without `--leader-elect`: this replica always writes.
    pub fn always() -> Self {
        Self::new(false)
    }

    /// With `--leader-elect`: a follower until the elector says otherwise.
    pub fn follower() -> Self {
        Self::new(true)
    }

    fn new(elected: bool) -> Self {
        Leadership {
            elected,
            held: Mutex::new(Held {
                leader: !elected,
                until: None,
                refused_at: None,
                term: 0,
            }),
            seen: Mutex::new(Seen::new()),
        }
    }

    /// Whether leader election is on.
    pub fn is_elected(&self) -> bool {
        self.elected
    }

    /// True while this replica holds the lease and its last renewal is
    /// recent enough. Asked before an Event is recorded, by the metrics and
    /// by the elector; node writes ask [`admits_write`](Self::admits_write).
    pub fn is_leader(&self) -> bool {
        self.is_leader_at(Instant::now())
    }

    pub(super) fn is_leader_at(&self, now: Instant) -> bool {
        self.held().leads_at(now)
    }

    fn held(&self) -> Held {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        match self.held.lock() {
            Ok(h) => h,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether a write may go out now: checked by the executor right
    /// before each node write, which it refuses (`NotLeader`) otherwise. A
    /// refusal is remembered, so that the gates are told when this replica
    /// may write again ([`renewed`](Self::renewed)).
    pub fn admits_write(&self) -> bool {
        self.admits_write_at(Instant::now())
    }

    /// The leadership term: a number that changes each time this replica
    /// begins to lead after not leading (a lapse of the renew deadline
    /// included), and only then. Whatever was read in one term says
    /// nothing of the writes another leader made before the next.
    pub fn term(&self) -> u64 {
        self.held().term
    }

    pub(super) fn admits_write_at(&self, now: Instant) -> bool {
        let mut held = self.lock();
        let admits = held.leads_at(now);
        if !admits {
            held.refused_at = Some(now);
        }
        admits
    }

    /// Leads until `until`.
    #[cfg(test)]
    pub(super) fn lead_until(&self, until: Instant) {
        let mut held = self.lock();
        held.leader = true;
        held.until = Some(until);
    }

    /// Records a successful renewal (or acquisition) of the lease, begun at
    /// `started` and answered at `answered`: this replica leads until
    /// `until`. Returns whether the gates must be told they may write again
    /// (`LeadershipGained`): when this replica did not lead at the moment
    /// the answer came (a follower, or a renewal so slow that the renew
    /// deadline passed while it was on its way), or when a write was
    /// refused since the gates were last told. A refusal made after the
    /// renewal began is owed once more, at the next renewal: its `NotLeader`
    /// may reach the gate only after this announcement.
    pub(super) fn renewed(&self, started: Instant, answered: Instant, until: Instant) -> bool {
        let mut held = self.lock();
        let lapsed = !held.leads_at(answered);
        if lapsed {
            held.term += 1;
        }
        let refused = held.refused_at;
        if refused.is_some_and(|at| at < started) {
            held.refused_at = None;
        }
        held.leader = true;
        held.until = Some(until);
        drop(held);
        self.saw_holder_alive_at(answered);
        lapsed || refused.is_some()
    }

    pub(super) fn step_down(&self) {
        let mut held = self.lock();
        held.leader = false;
        held.until = None;
    }
}

impl Held {
    fn leads_at(&self, now: Instant) -> bool {
        self.leader && self.until.is_none_or(|until| now < until)
    }
}
