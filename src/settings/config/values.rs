//! The parsers of single values from flags and the config file: addresses,
//! DNS names, taints, exclusions, durations. Each error names the flag and
//! the value.

use super::*;

/// The entries of a list given as repeated or comma-separated values,
/// each trimmed, empty ones left out.
pub fn entries(given: &[String]) -> impl Iterator<Item = &str> {
    let each = given.iter().flat_map(|e| e.split(','));
    each.map(str::trim).filter(|e| !e.is_empty())
}

/// `HOST:PORT` with an IP host, or `:PORT` for every interface, for `flag`.
pub(super) fn parse_addr(flag: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    let full = match s.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => s.to_string(),
    };
    full.parse().map_err(|_| {
        invalid(
            format!("{flag} {s:?}"),
            "expected IP:PORT, e.g. 0.0.0.0:8080, 127.0.0.1:0 or :8080",
        )
    })
}

pub(super) fn check_dns_label(s: &str) -> Result<(), &'static str> {
    is_dns1123_label(s).then_some(()).ok_or(
        "must be a DNS label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    )
}

pub(super) fn check_dns_subdomain(s: &str) -> Result<(), &'static str> {
    let ok = !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label);
    ok.then_some(()).ok_or(
        "must be a DNS subdomain: lowercase letters, digits, '-' and '.', at most 253 characters",
    )
}

pub fn parse_managed_taint(s: &str) -> Result<ManagedTaint, ConfigError> {
    let at = || format!("--taint {s:?}");
    if s.rsplit_once(':').map_or(s, |(k, _)| k).contains('=') {
        return Err(invalid(
            at(),
            "a managed taint is matched by key and effect; drop the '=VALUE'",
        ));
    }
    // The placement rules own what a valid managed taint is
    // (PreferNoSchedule, for one, keeps nothing off a node and so cannot
    // gate it).
    ManagedTaint::parse(&with_effect(s)).map_err(|e| invalid(at(), e.problem))
}

/// `KEY[:EFFECT]` as a taint: EFFECT is optional on the command line,
/// NoSchedule when left out.
pub(super) fn with_effect(s: &str) -> String {
    if s.contains(':') {
        s.to_string()
    } else {
        format!("{s}:{EFFECT_NO_SCHEDULE}")
    }
}

pub fn parse_transient(s: &str) -> Result<TransientTaint, ConfigError> {
    let at = || format!("--transient-taint {s:?}");
    let key = s.strip_suffix('*').unwrap_or(s);
    if key.is_empty() {
        return Err(invalid(at(), "needs a key or a key prefix"));
    }
    if key.contains('*') {
        return Err(invalid(
            at(),
            "'*' is only allowed at the end, to mark a prefix",
        ));
    }
    if !s.ends_with('*') {
        check_label_key(key).map_err(|m| invalid(at(), m))?;
    }
    Ok(TransientTaint::parse(s))
}

pub fn parse_exclude(s: &str) -> Result<(String, String), ConfigError> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(invalid(
            format!("--exclude {s:?}"),
            "expected NAMESPACE/NAME, e.g. kube-system/cilium",
        )),
    }
}

pub fn parse_duration(flag: &str, s: &str) -> Result<Duration, ConfigError> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(invalid(
            format!("{flag} {s:?}"),
            "a duration cannot be negative",
        ));
    }
    // One rule for every duration, kubectl's --request-timeout's: a bare
    // number is seconds.
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(t).map_err(|_| {
        invalid(
            format!("{flag} {s:?}"),
            "not a duration; write e.g. 90s, 2m or 1h30m (a bare number is seconds)",
        )
    })
}

/// A duration where 0 means none (no deadline, off).
pub(super) fn optional_duration(flag: &str, s: &str) -> Result<Option<Duration>, ConfigError> {
    Ok(Some(parse_duration(flag, s)?).filter(|d| !d.is_zero()))
}

/// A budget (`N` or `P%`) where 0 is refused: every budget lets at least
/// one node through, so 0 (or 0%) would silently mean 1. `instead` says
/// what to do when "none" is what a person meant.
pub fn budget(at: &str, s: &str, instead: &str) -> Result<MaxUnavailable, ConfigError> {
    let cap: MaxUnavailable = s
        .parse()
        .map_err(|e| invalid(format!("{at} {s:?}"), format!("{e}")))?;
    if matches!(cap, MaxUnavailable::Count(0) | MaxUnavailable::Percent(0)) {
        return Err(invalid(
            format!("{at} {s:?}"),
            format!(
                "0 cannot be kept: at least one node is always let through, so 0 would \
                 mean 1; write 1 for one node at a time, or {instead}"
            ),
        ));
    }
    Ok(cap)
}
