//! The table's own checks: each definition is complete and consistent, and
//! the defaults it writes are the core's.

use std::collections::BTreeSet;
use std::time::Duration;

use nodegate_core::closing::regating::DEFAULT_REGATE_TAINT_KEY;
use nodegate_core::rules::placement::{DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE};
use nodegate_core::vocab::budget::MaxUnavailable;

use super::*;
use crate::settings::config::{parse_duration, parse_managed_taint};
use crate::settings::define::Reload;

#[test]
fn flags_and_keys_are_each_defined_once() {
    let all = definitions();
    let flags: BTreeSet<_> = all.iter().filter_map(|s| s.flag).collect();
    let keys: BTreeSet<_> = all.iter().map(|s| s.key).collect();
    assert_eq!(flags.len(), all.iter().filter(|s| s.flag.is_some()).count());
    assert_eq!(keys.len(), all.len());
    for s in &all {
        assert!(!s.help.is_empty(), "{} has no help line", s.key);
        assert!(
            s.flag.is_none() || s.helm.is_some(),
            "--{:?} has no Helm value",
            s.flag
        );
    }
}

/// A reload puts the gate configuration in force: every setting of the
/// gate group must be live (a restart-only one would be applied anyway).
#[test]
fn every_gate_setting_is_live() {
    for s in GateGiven::definitions() {
        assert_eq!(s.reload, Reload::Live, "{}", s.key);
    }
}

/// The defaults the core keeps for itself are the ones the table writes.
#[test]
fn the_core_defaults_are_the_table_defaults() {
    let run = RunGiven::defaults();
    assert_eq!(
        parse_duration("--timeout", &run.timeout).ok(),
        Some(nodegate_core::vocab::config::DEFAULT_TIMEOUT)
    );
    assert_eq!(
        run.on_timeout,
        nodegate_core::vocab::config::OnTimeout::default()
    );
    let gate = GateGiven::defaults();
    let [taint] = &gate.taints[..] else {
        panic!("one default taint: {:?}", gate.taints);
    };
    let taint = parse_managed_taint(taint).expect("the default taint is valid");
    assert_eq!(
        (taint.key.as_str(), taint.effect.as_str()),
        (DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE)
    );
    let regate = parse_managed_taint(&gate.regate_taint).expect("valid");
    assert_eq!(
        (regate.key.as_str(), regate.effect.as_str()),
        (DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE)
    );
    assert_eq!(
        gate.regate_max_unavailable.parse::<MaxUnavailable>(),
        Ok(MaxUnavailable::default())
    );
}

#[test]
fn the_help_line_ends_with_the_default_as_written() {
    let timeout = definition("timeout").expect("defined");
    assert_eq!(timeout.default.as_deref(), Some("120s"));
    assert!(timeout.help.ends_with("0 means no deadline. Default: 120s"));
    assert_eq!(timeout.docs_default, "`120s`");
    let qps = definition("kubeQps").expect("defined");
    assert_eq!(qps.default.as_deref(), Some("50"));
    let window = definition("newNodeWindow").expect("defined");
    let d = parse_duration("--new-node-window", window.default.as_deref().unwrap_or(""));
    assert_eq!(d.ok(), Some(Duration::from_secs(120)));
}
