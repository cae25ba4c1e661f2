//! Leader election's settings: the Lease's name, namespace and timings, in
//! the order client-go requires. Each error names the flag and the value.

use super::*;

pub(super) fn leader_election(given: &RunGiven) -> Result<LeaderElection, ConfigError> {
    let lease_duration = parse_duration("--lease-duration", &given.lease_duration)?;
    let renew_deadline = parse_duration("--renew-deadline", &given.renew_deadline)?;
    let retry_period = parse_duration("--retry-period", &given.retry_period)?;
    // The order client-go requires, for the same reasons: the leader must
    // give up writing (renew deadline) before a follower may take the lease
    // over (lease duration), and must get more than one try (retry period)
    // at renewing before that.
    let [lease, renew, retry] = [lease_duration, renew_deadline, retry_period]
        .map(|d| humantime::format_duration(d).to_string());
    let problem = if retry_period.is_zero() {
        "--retry-period must be longer than 0".to_string()
    } else if lease_duration.subsec_nanos() != 0 || lease_duration < Duration::from_secs(1) {
        format!(
            "--lease-duration {lease} must be a whole number of seconds, at least 1s (the Lease stores seconds)"
        )
    } else if lease_duration <= renew_deadline {
        format!("--lease-duration {lease} must be longer than --renew-deadline {renew}")
    } else if renew_deadline <= retry_period {
        format!("--renew-deadline {renew} must be longer than --retry-period {retry}")
    } else {
        String::new()
    };
    if !problem.is_empty() {
        let all =
            format!("--lease-duration {lease} --renew-deadline {renew} --retry-period {retry}");
        return Err(invalid(all, problem));
    }

    check_dns_subdomain(&given.lease_name)
        .map_err(|m| invalid(format!("--lease-name {:?}", given.lease_name), m))?;
    if let Some(ns) = &given.lease_namespace {
        check_dns_label(ns).map_err(|m| invalid(format!("--lease-namespace {ns:?}"), m))?;
    }
    Ok(LeaderElection {
        enabled: given.leader_elect,
        lease_name: given.lease_name.clone(),
        lease_namespace: given.lease_namespace.clone(),
        lease_duration,
        renew_deadline,
        retry_period,
    })
}
