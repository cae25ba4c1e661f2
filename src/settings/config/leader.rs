//! Leader election's settings: the Lease's name, namespace and timings, in
//! the order client-go requires. Each error names the flag and the value.

use super::*;

pub(super) fn leader_election(given: &RunGiven) -> Result<LeaderElection, ConfigError> {
    let lease_duration = parse_duration("--lease-duration", &given.lease_duration)?;
    let renew_deadline = parse_duration("--renew-deadline", &given.renew_deadline)?;
    let retry_period = parse_duration("--retry-period", &given.retry_period)?;
    check_lease_timings(lease_duration, renew_deadline, retry_period)?;

    let lease_name = given.lease_name.clone();
    check_dns_subdomain(&lease_name)
        .map_err(|m| invalid(format!("--lease-name {lease_name:?}"), m))?;
    let lease_namespace = given.lease_namespace.clone();
    if let Some(ns) = &lease_namespace {
        check_dns_label(ns).map_err(|m| invalid(format!("--lease-namespace {ns:?}"), m))?;
    }
    Ok(LeaderElection {
        enabled: given.leader_elect,
        lease_name,
        lease_namespace,
        lease_duration,
        renew_deadline,
        retry_period,
    })
}

/// The order client-go requires, for the same reasons: the leader must give
/// up writing (renew deadline) before a follower may take the lease over
/// (lease duration), and must get more than one try (retry period) at
/// renewing before that.
pub fn check_lease_timings(
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
) -> Result<(), ConfigError> {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let all = format!(
        "--lease-duration {} --renew-deadline {} --retry-period {}",
        show(lease_duration),
        show(renew_deadline),
        show(retry_period)
    );
    if retry_period.is_zero() {
        return Err(invalid(all, "--retry-period must be longer than 0"));
    }
    if lease_duration.subsec_nanos() != 0 || lease_duration < Duration::from_secs(1) {
        return Err(invalid(
            all,
            format!(
                "--lease-duration {} must be a whole number of seconds, at least 1s (the Lease stores seconds)",
                show(lease_duration)
            ),
        ));
    }
    if lease_duration <= renew_deadline {
        return Err(invalid(
            all,
            format!(
                "--lease-duration {} must be longer than --renew-deadline {}",
                show(lease_duration),
                show(renew_deadline)
            ),
        ));
    }
    if renew_deadline <= retry_period {
        return Err(invalid(
            all,
            format!(
                "--renew-deadline {} must be longer than --retry-period {}",
                show(renew_deadline),
                show(retry_period)
            ),
        ));
    }
    Ok(())
}
