//! `--replace-*`: the budget and the fallback of `--on-timeout=replace`
//! (semantics.md §5.8).

use nodegate_core::vocab::config::ReplaceConfig;

use super::{ConfigError, RunGiven, budget, invalid, parse_duration};

pub(super) fn replace_settings(given: &RunGiven) -> Result<ReplaceConfig, ConfigError> {
    let interval = parse_duration("--replace-interval", &given.replace_interval)?;
    if interval.is_zero() {
        return Err(invalid(
            format!("--replace-interval {:?}", given.replace_interval),
            "must be longer than 0: the budget counts requests within it (e.g. 10m)",
        ));
    }
    let fallback = given.replace_fallback.parse().map_err(|e| {
        invalid(
            format!("--replace-fallback {:?}", given.replace_fallback),
            format!("{e}"),
        )
    })?;
    let breakage = budget(
        "--replace-breakage",
        &given.replace_breakage,
        "write 1 to call any member failing on two nodes broken",
    )?;
    Ok(ReplaceConfig {
        budget: given.replace_budget,
        interval,
        in_flight: given.replace_in_flight,
        fallback,
        breakage,
    })
}
