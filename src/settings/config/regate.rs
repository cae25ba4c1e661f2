//! Re-gating's settings (`--regate-*`, semantics.md §6.4). Part of the gate
//! configuration: `run` acts on them, `explain` and `status` need them to
//! know the re-gate taint and a re-gated node's deadline, and a config
//! reload changes them live. Each error names the flag and the value.

use std::time::Duration;

use nodegate_core::budget::MaxUnavailable;
use nodegate_core::placement::{EFFECT_NO_SCHEDULE, ManagedTaint};
use nodegate_core::regate::{DEFAULT_REGATE_TAINT_KEY, RegateConfig};

use super::values::parse_duration;
use super::{ConfigError, FileConfig, invalid, pick};
use crate::settings::cli::GateArgs;

/// `None` when `--regate-after` is 0 (the default): then no other
/// `--regate-*` setting may be given, since it would silently do nothing.
/// The re-gate taint must not be one of the startup taints.
pub(super) fn regate_settings(
    args: &GateArgs,
    file: &mut FileConfig,
    startup: &[ManagedTaint],
) -> Result<Option<RegateConfig>, ConfigError> {
    let after = pick(args.regate_after.clone(), file.regate_after.take());
    let taint = pick(args.regate_taint.clone(), file.regate_taint.take());
    let timeout = pick(args.regate_timeout.clone(), file.regate_timeout.take());
    let budget = pick(
        args.regate_max_unavailable.clone(),
        file.regate_max_unavailable.take(),
    );
    let on_reboot = args.regate_on_reboot || file.regate_on_reboot.take().unwrap_or(false);

    let after = match &after {
        Some(s) => parse_duration("--regate-after", s)?,
        None => Duration::ZERO,
    };
    if after.is_zero() {
        let given: Vec<&str> = [
            taint.as_ref().map(|_| "--regate-taint"),
            timeout.as_ref().map(|_| "--regate-timeout"),
            budget.as_ref().map(|_| "--regate-max-unavailable"),
            on_reboot.then_some("--regate-on-reboot"),
        ]
        .into_iter()
        .flatten()
        .collect();
        return match given.first() {
            None => Ok(None),
            Some(_) => Err(invalid(
                given.join(", "),
                "re-gating is off: set --regate-after (regateAfter) to a grace such as 2m to turn it on",
            )),
        };
    }

    let taint = match taint {
        None => ManagedTaint::new(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE),
        Some(s) => {
            let at = || format!("--regate-taint {s:?}");
            let spelled = if s.contains(':') {
                s.clone()
            } else {
                format!("{s}:{EFFECT_NO_SCHEDULE}")
            };
            ManagedTaint::parse(&spelled).map_err(|e| invalid(at(), e.problem))?
        }
    };
    if let Some(t) = startup.iter().find(|t| t.key == taint.key) {
        return Err(invalid(
            format!("--regate-taint {:?}", taint.to_taint().to_string()),
            format!(
                "it is the startup taint {}; a re-gated node needs a taint of its own \
                 (autoscalers treat a startup taint that comes back as permanent)",
                t.to_taint()
            ),
        ));
    }
    let timeout = match timeout {
        None => None,
        Some(s) => Some(parse_duration("--regate-timeout", &s)?).filter(|d| !d.is_zero()),
    };
    let max_unavailable = match budget {
        None => MaxUnavailable::default(),
        Some(s) => s
            .parse()
            .map_err(|e| invalid(format!("--regate-max-unavailable {s:?}"), format!("{e}")))?,
    };
    Ok(Some(RegateConfig {
        after,
        taint,
        timeout,
        on_reboot,
        max_unavailable,
    }))
}
