//! Whether any replica leads, as far as this one can tell
//! ([`Leadership::leader_known`]): a holder must have renewed the Lease
//! within [`LEADER_LOST_AFTER`] lease durations. A replica that cannot
//! read or take the Lease (RBAC, a wrong `--lease-namespace`) and a holder
//! that stopped renewing both end in "no leader known", with the reason.

use std::time::{Duration, Instant};

use super::Leadership;
use super::seen::Seen;

/// How many lease durations may pass without any replica renewing the
/// Lease before the leader is taken as unknown ([`Leadership::leader_known`]).
pub const LEADER_LOST_AFTER: u32 = 2;

impl Leadership {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The elector runs for `lease` (`namespace/name`): from now on a
    /// leader is known only while some holder renewed within
    /// `LEADER_LOST_AFTER × lease_duration`.
    pub(super) fn watching(&self, lease: String, lease_duration: Duration) {
        let mut seen = self.seen();
        seen.lease = lease;
        seen.bound = Some(lease_duration * LEADER_LOST_AFTER);
    }

    /// A holder renewed the Lease just now (this replica, or another one
    /// whose renewal changed the Lease).
    pub(super) fn saw_holder_alive(&self) {
        self.saw_holder_alive_at(Instant::now());
    }

    pub(super) fn saw_holder_alive_at(&self, now: Instant) {
        let mut seen = self.seen();
        seen.alive_at = now;
        seen.trouble = None;
    }

    /// What kept this replica from leading, for the reason given once no
    /// leader is known.
    pub(super) fn saw_trouble(&self, why: String) {
        self.seen().trouble = Some(why);
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
        let seen = self.seen().clone();
        let Some(bound) = seen.bound else {
            return Ok(());
        };
        let quiet = now.saturating_duration_since(seen.alive_at);
        if quiet <= bound {
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
