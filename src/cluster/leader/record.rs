//! The Lease as the election reads and writes it ([`LeaseRecord`]), and the
//! two pure decisions on it: whether another replica's record lets this one
//! take the Lease ([`may_take`]), and the record to write ([`next_record`]).
//! No I/O; times are arguments.

use super::*;

/// This replica's identity in the Lease: the pod (or host) name plus a random
/// suffix, because two processes on one host must never share an identity.
pub fn identity(instance: &str) -> String {
    let suffix: u32 = rand::rng().random();
    format!("{instance}_{suffix:08x}")
}

/// What the Lease says, as far as the election cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: String,
    /// `leaseDurationSeconds` as written by the holder; 0 when unset.
    pub duration_seconds: i32,
    pub transitions: i32,
    pub acquire_time: Option<Timestamp>,
}

impl LeaseRecord {
    pub(super) fn from_lease(lease: &Lease) -> LeaseRecord {
        let spec = lease.spec.as_ref();
        let holder = spec.and_then(|s| s.holder_identity.clone());
        LeaseRecord {
            holder: holder.unwrap_or_default(),
            duration_seconds: spec.and_then(|s| s.lease_duration_seconds).unwrap_or(0),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
            acquire_time: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0),
        }
    }
}

/// Whether `me` may write `record` now: it is ours, free (no holder, as a
/// released lease is), or nobody has changed it for its whole duration.
/// Expiry is judged by *this* process's clock since it last saw the record
/// change (`observed_at`), never by the holder's timestamps, so clock skew
/// between replicas does not matter — client-go's rule.
pub fn may_take(
    record: &LeaseRecord,
    me: &str,
    observed_at: Instant,
    fallback_duration: Duration,
    now: Instant,
) -> bool {
    if record.holder.is_empty() || record.holder == me {
        return true;
    }
    now >= observed_at + record_duration(record, fallback_duration)
}

pub(super) fn record_duration(record: &LeaseRecord, fallback: Duration) -> Duration {
    match u64::try_from(record.duration_seconds) {
        Ok(s) if s > 0 => Duration::from_secs(s),
        _ => fallback,
    }
}

/// The lease after `me` acquires or renews it at `now`.
pub fn next_record(
    old: Option<&LeaseRecord>,
    me: &str,
    duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    let (acquire_time, transitions) = match old {
        Some(r) if r.holder == me => (r.acquire_time.unwrap_or(now), r.transitions),
        // Taking over from someone (or from a released lease) is a
        // transition; creating the lease is not.
        Some(r) => (now, r.transitions.saturating_add(1)),
        None => (now, 0),
    };
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(MicroTime(acquire_time)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}
