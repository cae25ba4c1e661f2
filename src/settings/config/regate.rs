//! Re-gating's settings (`--regate-*`, semantics.md §6.4) and the announced
//! reboots' that lean on them. Each error names the flag and the value.

use nodegate_core::rules::placement::{EFFECT_NO_EXECUTE, ManagedTaint};
use nodegate_core::vocab::budget::MaxUnavailable;
use nodegate_core::vocab::config::{AnnouncedReboots, RegateConfig, Source};

use super::values::{optional_duration, parse_duration};
use super::{ConfigError, invalid};
use crate::settings::table::GateGiven;

/// `None` when `--regate-after` is 0 (the default): then no other
/// `--regate-*` setting may be given, since it would silently do nothing.
/// The re-gate taint must not be one of the startup taints.
pub(super) fn regate_settings(
    given: &GateGiven,
    startup: &[ManagedTaint],
) -> Result<Option<RegateConfig>, ConfigError> {
    let after = parse_duration("--regate-after", &given.regate_after)?;
    if after.is_zero() {
        let set = &given.set;
        let named = [
            (set.regate_taint, "--regate-taint"),
            (set.regate_timeout, "--regate-timeout"),
            (set.regate_max_unavailable, "--regate-max-unavailable"),
            (set.regate_on_reboot, "--regate-on-reboot"),
            (set.regate_allow_no_execute, "--regate-allow-no-execute"),
        ];
        let why = "re-gating is off: set --regate-after (regateAfter) to a grace such as 2m to turn it on";
        return refuse_given(&named, why).map(|()| None);
    }

    let taint = regate_taint(&given.regate_taint, startup)?;
    if taint.effect == EFFECT_NO_EXECUTE && !given.regate_allow_no_execute {
        return Err(invalid(
            format!("--regate-taint {:?}", taint.to_taint().to_string()),
            "a NoExecute re-gate taint evicts the workloads of every node re-gated \
             (a bad agent rollout re-gates up to the budget at once); use NoSchedule, \
             or set --regate-allow-no-execute (regateAllowNoExecute) if that is meant",
        ));
    }
    let timeout = optional_duration("--regate-timeout", &given.regate_timeout)?;
    let max_unavailable: MaxUnavailable = super::values::budget(
        "--regate-max-unavailable",
        &given.regate_max_unavailable,
        "turn re-gating off (--regate-after 0)",
    )?;
    Ok(Some(RegateConfig {
        after,
        taint,
        timeout,
        on_reboot: given.regate_on_reboot,
        max_unavailable,
    }))
}

/// `--regate-taint` (EFFECT defaults to NoSchedule), never a startup taint.
fn regate_taint(s: &str, startup: &[ManagedTaint]) -> Result<ManagedTaint, ConfigError> {
    let taint = ManagedTaint::parse(&super::values::with_effect(s))
        .map_err(|e| invalid(format!("--regate-taint {s:?}"), e.problem))?;
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
    Ok(taint)
}

/// Refuses the flags of `named` that were given (each with whether it was),
/// naming them all, with `why`: without what they need they do nothing.
fn refuse_given(named: &[(bool, &str)], why: &str) -> Result<(), ConfigError> {
    let given: Vec<&str> = named.iter().filter(|n| n.0).map(|n| n.1).collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(invalid(given.join(", "), why))
}

/// `--reboot-announcements`, `--kured-daemonset`, `--kured-max-holders`,
/// `--reboot-timeout` (semantics.md §6.10): off (no source) by default. A
/// source needs re-gating on (its taint and budget); the other settings
/// only matter with a source, and the kured ones only with `kured-lock`.
pub(super) fn reboot_settings(
    given: &GateGiven,
    regate: Option<&RegateConfig>,
) -> Result<AnnouncedReboots, ConfigError> {
    let mut sources = super::entries(&given.reboot_announcements)
        .map(|s| {
            s.parse::<Source>()
                .map_err(|e| invalid(format!("--reboot-announcements {s:?}"), e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    sources.sort_unstable();
    sources.dedup();
    let set = &given.set;
    if sources.is_empty() {
        let named = [
            (set.kured_daemonset, "--kured-daemonset"),
            (set.kured_max_holders, "--kured-max-holders"),
            (set.reboot_timeout, "--reboot-timeout"),
        ];
        let why = "no reboot announcement is listened to: set --reboot-announcements \
                   (rebootAnnouncements), e.g. kured-lock";
        return refuse_given(&named, why).map(|()| AnnouncedReboots::default());
    }
    if regate.is_none() {
        return Err(invalid(
            "--reboot-announcements",
            "re-gating is off, and a node is re-gated before its reboot with the re-gate \
             taint: set --regate-after (regateAfter), e.g. 2m",
        ));
    }
    let kured_daemonset = given.kured_daemonset.trim().to_string();
    // NAMESPACE/NAME, as `--exclude` takes a DaemonSet.
    if super::parse_exclude(&kured_daemonset).is_err() {
        return Err(invalid(
            format!("--kured-daemonset {kured_daemonset:?}"),
            "write kured's DaemonSet as NAMESPACE/NAME, e.g. kube-system/kured \
             (kured's --ds-namespace and --ds-name)",
        ));
    }
    if given.kured_max_holders == 0 {
        return Err(invalid(
            "--kured-max-holders 0",
            "kured's lock would announce nothing: give at least 1 (kured's --concurrency), \
             or leave kured-lock out of --reboot-announcements",
        ));
    }
    let timeout = optional_duration("--reboot-timeout", &given.reboot_timeout)?;
    Ok(AnnouncedReboots {
        sources,
        kured_daemonset,
        kured_max_holders: given.kured_max_holders,
        timeout,
    })
}
