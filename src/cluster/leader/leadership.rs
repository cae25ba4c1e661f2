//! [`Leadership`]: whether this replica may write now, the term it leads in,
//! and whether any replica leads as far as this one can tell
//! ([`Leadership::leader_known`]). The elector (`leader`) sets it; everything
//! else only asks.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cluster::server_time::lock;

/// How many lease durations may pass without any replica renewing the
/// Lease before the leader is taken as unknown ([`Leadership::leader_known`]).
pub const LEADER_LOST_AFTER: u32 = 2;

/// Whether this replica may write now.
#[derive(Debug)]
pub struct Leadership {
    elected: bool,
    held: Mutex<Held>,
    seen: Mutex<Seen>,
}

#[derive(Debug, Clone, Copy, Default)]
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

/// What this replica last saw of the Lease's holder, whoever it is.
#[derive(Debug, Clone)]
struct Seen {
    /// When a holder was last seen renewing (this replica, or the Lease
    /// changing under another holder); the start, until then.
    alive_at: Instant,
    /// `LEADER_LOST_AFTER × --lease-duration`, set by the elector; `None`
    /// until it runs.
    bound: Option<Duration>,
    /// The lease's name, for the reason.
    lease: String,
    /// The last thing that went wrong (a refused read or write of the Lease:
    /// RBAC, a wrong `--lease-namespace`; a holder that does not renew).
    trouble: Option<String>,
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
                ..Held::default()
            }),
            seen: Mutex::new(Seen {
                alive_at: Instant::now(),
                bound: None,
                lease: String::new(),
                trouble: None,
            }),
        }
    }

    /// Whether leader election is on.
    pub fn is_elected(&self) -> bool {
        self.elected
    }

    /// True while this replica holds the lease and its last renewal is
    /// recent enough; node writes ask [`admits_write`](Self::admits_write).
    pub fn is_leader(&self) -> bool {
        self.is_leader_at(Instant::now())
    }

    pub(super) fn is_leader_at(&self, now: Instant) -> bool {
        lock(&self.held).leads_at(now)
    }

    /// Whether a node write may go out now. A refusal is remembered, so
    /// that the gates are told when this replica may write again
    /// ([`renewed`](Self::renewed)).
    pub fn admits_write(&self) -> bool {
        self.admits_write_at(Instant::now())
    }

    /// The leadership term: a number that changes each time this replica
    /// begins to lead after not leading (a lapse of the renew deadline
    /// included), and only then. Whatever was read in one term says
    /// nothing of the writes another leader made before the next.
    pub fn term(&self) -> u64 {
        lock(&self.held).term
    }

    pub(super) fn admits_write_at(&self, now: Instant) -> bool {
        let mut held = lock(&self.held);
        let admits = held.leads_at(now);
        if !admits {
            held.refused_at = Some(now);
        }
        admits
    }

    #[cfg(test)]
    pub(super) fn lead_until(&self, until: Instant) {
        let mut held = lock(&self.held);
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
        let mut held = lock(&self.held);
        let lapsed = !held.leads_at(answered);
        held.term += u64::from(lapsed);
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
        let mut held = lock(&self.held);
        held.leader = false;
        held.until = None;
    }

    /// The elector runs for `lease` (`namespace/name`): from now on a
    /// leader is known only while some holder renewed within
    /// `LEADER_LOST_AFTER × lease_duration`.
    pub(super) fn watching(&self, lease: String, lease_duration: Duration) {
        let mut seen = lock(&self.seen);
        seen.lease = lease;
        seen.bound = Some(lease_duration * LEADER_LOST_AFTER);
    }

    /// A holder renewed the Lease just now (this replica, or another one
    /// whose renewal changed the Lease).
    pub(super) fn saw_holder_alive(&self) {
        self.saw_holder_alive_at(Instant::now());
    }

    pub(super) fn saw_holder_alive_at(&self, now: Instant) {
        let mut seen = lock(&self.seen);
        seen.alive_at = now;
        seen.trouble = None;
    }

    /// What kept this replica from leading, for the reason given once no
    /// leader is known.
    pub(super) fn saw_trouble(&self, why: String) {
        lock(&self.seen).trouble = Some(why);
    }

    /// `Ok` while some replica leads, as far as this one can tell: this one
    /// leads, leader election is off, or a holder renewed the Lease within
    /// [`LEADER_LOST_AFTER`] lease durations. Otherwise why not, for a
    /// person: then the webhook admits new nodes unchanged (nothing would
    /// open them) and `/readyz?verbose` says so.
    pub fn leader_known(&self) -> Result<(), String> {
        self.leader_known_at(Instant::now())
    }

    pub(super) fn leader_known_at(&self, now: Instant) -> Result<(), String> {
        if !self.elected || self.is_leader_at(now) {
            return Ok(());
        }
        let seen = lock(&self.seen).clone();
        let quiet = now.saturating_duration_since(seen.alive_at);
        if seen.bound.is_none_or(|bound| quiet <= bound) {
            return Ok(());
        }
        let trouble = seen.trouble.map(|t| format!(": {t}")).unwrap_or_default();
        Err(format!(
            "no replica has renewed {} for {}s (over {LEADER_LOST_AFTER} × --lease-duration){trouble}",
            seen.lease,
            quiet.as_secs()
        ))
    }
}

impl Held {
    fn leads_at(&self, now: Instant) -> bool {
        self.leader && self.until.is_none_or(|until| now < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_is_known_until_no_holder_renewed_for_the_bound() {
        let l = Leadership::follower();
        let start = Instant::now();
        // Before the elector runs, and without election, nothing is judged.
        assert!(l.leader_known_at(start + Duration::from_secs(3600)).is_ok());
        assert!(Leadership::always().leader_known().is_ok());
        l.watching("lease ns/x".into(), Duration::from_secs(10));
        l.saw_holder_alive_at(start);
        l.saw_trouble("this replica cannot acquire it: 403".into());
        assert!(l.leader_known_at(start + Duration::from_secs(20)).is_ok());
        let why = l
            .leader_known_at(start + Duration::from_secs(21))
            .expect_err("no renewal for 21s, bound 20s");
        assert!(why.contains("lease ns/x") && why.contains("403"), "{why}");
        // A renewal seen puts it right.
        l.saw_holder_alive_at(start + Duration::from_secs(30));
        assert!(l.leader_known_at(start + Duration::from_secs(31)).is_ok());
        // This replica leading is a known leader.
        l.lead_until(start + Duration::from_secs(200));
        assert!(l.leader_known_at(start + Duration::from_secs(100)).is_ok());
    }
}
