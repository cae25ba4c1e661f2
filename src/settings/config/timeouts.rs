//! `--timeout` and `--schedule-timeout`: the gate's two deadlines
//! (semantics.md §5.2).

use std::time::Duration;

use super::{ConfigError, invalid, parse_duration};

/// The gate's two deadlines (semantics.md §5.2); `None`: off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// `--timeout`.
    pub ready: Option<Duration>,
    /// `--schedule-timeout`.
    pub schedule: Option<Duration>,
}

/// `--timeout`: 0 means no deadline.
pub(super) fn timeout_setting(s: &str) -> Result<Option<Duration>, ConfigError> {
    let d = parse_duration("--timeout", s)?;
    Ok(if d.is_zero() { None } else { Some(d) })
}

/// `--schedule-timeout`: 0 means off; it must be shorter than `--timeout`
/// when both are set (`timeout_given` is `--timeout` as given, for the error).
pub(super) fn schedule_timeout_setting(
    s: &str,
    timeout_given: &str,
    timeout: Option<Duration>,
) -> Result<Option<Duration>, ConfigError> {
    let d = parse_duration("--schedule-timeout", s)?;
    if d.is_zero() {
        return Ok(None);
    }
    if timeout.is_some_and(|t| d >= t) {
        return Err(invalid(
            format!("--schedule-timeout {s:?}"),
            format!(
                "must be shorter than --timeout {timeout_given:?}: shorten --schedule-timeout \
                 (scheduleTimeout) or lengthen --timeout (timeout)"
            ),
        ));
    }
    Ok(Some(d))
}
