//! Leader election's settings: the Lease's name, namespace and timings, in
//! the order client-go requires. Each error names the flag and the value.

use super::*;

pub(super) fn leader_election(
    args: &RunArgs,
    file: &mut FileConfig,
) -> Result<LeaderElection, ConfigError> {
    let duration = |flag: &str, given: Option<String>, default: Duration| match given {
        Some(s) => parse_duration(flag, &s),
        None => Ok(default),
    };
    let lease_duration = duration(
        "--lease-duration",
        pick(args.lease_duration.clone(), file.lease_duration.take()),
        DEFAULT_LEASE_DURATION,
    )?;
    let renew_deadline = duration(
        "--renew-deadline",
        pick(args.renew_deadline.clone(), file.renew_deadline.take()),
        DEFAULT_RENEW_DEADLINE,
    )?;
    let retry_period = duration(
        "--retry-period",
        pick(args.retry_period.clone(), file.retry_period.take()),
        DEFAULT_RETRY_PERIOD,
    )?;
    check_lease_timings(lease_duration, renew_deadline, retry_period)?;

    let lease_name = pick(args.lease_name.clone(), file.lease_name.take())
        .unwrap_or_else(|| DEFAULT_LEASE_NAME.to_string());
    check_dns_subdomain(&lease_name)
        .map_err(|m| invalid(format!("--lease-name {lease_name:?}"), m))?;
    let lease_namespace = pick(args.lease_namespace.clone(), file.lease_namespace.take());
    if let Some(ns) = &lease_namespace {
        check_dns_label(ns).map_err(|m| invalid(format!("--lease-namespace {ns:?}"), m))?;
    }
    Ok(LeaderElection {
        enabled: args.leader_elect || file.leader_elect.unwrap_or(false),
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
