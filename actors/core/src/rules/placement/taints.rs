//! Taints and tolerations as the DaemonSet controller sees them; which taints
//! are managed or transient is `config`'s business.

use crate::vocab::model::{Taint, Toleration};

pub const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
pub const EFFECT_NO_EXECUTE: &str = "NoExecute";

pub const TOLERATION_OP_EXISTS: &str = "Exists";
pub const TOLERATION_OP_EQUAL: &str = "Equal";
pub const TOLERATION_OP_LT: &str = "Lt";
pub const TOLERATION_OP_GT: &str = "Gt";

/// Whether toleration `t` tolerates `taint` (k8s.io/api `ToleratesTaint`).
/// An empty effect matches every effect and an empty key every key; an empty
/// operator means `Equal`, and a missing value is "". `Lt`/`Gt` (alpha in
/// 1.35, gate TaintTolerationComparisonOperators) compare both values as
/// canonical decimal int64s; an API server only accepts them with the gate
/// on, so when we see them we judge them as the gated controller does.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if !t.effect.is_empty() && t.effect != taint.effect {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator.as_str() {
        "" | TOLERATION_OP_EQUAL => t.value == taint.value,
        TOLERATION_OP_EXISTS => true,
        TOLERATION_OP_LT | TOLERATION_OP_GT => {
            match (canonical_int(&t.value), canonical_int(&taint.value)) {
                (Some(tol), Some(val)) if t.operator == TOLERATION_OP_LT => val < tol,
                (Some(tol), Some(val)) => val > tol,
                _ => false,
            }
        }
        _ => false,
    }
}

/// Upstream's `IsDecimalInteger`: no sign but `-`, no leading zeros, no
/// `-0`; then it must fit in an i64.
fn canonical_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let first = *digits.as_bytes().first()?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if first == b'0' && (digits.len() > 1 || digits.len() != s.len()) {
        return None;
    }
    s.parse().ok()
}

/// The tolerations the DaemonSet controller adds to every daemon pod, each
/// `Exists` for a key and an effect; the last only to a pod on the host
/// network.
const DEFAULT_DAEMON_TOLERATIONS: [(&str, &str); 7] = [
    ("node.kubernetes.io/not-ready", EFFECT_NO_EXECUTE),
    ("node.kubernetes.io/unreachable", EFFECT_NO_EXECUTE),
    ("node.kubernetes.io/disk-pressure", EFFECT_NO_SCHEDULE),
    ("node.kubernetes.io/memory-pressure", EFFECT_NO_SCHEDULE),
    ("node.kubernetes.io/pid-pressure", EFFECT_NO_SCHEDULE),
    ("node.kubernetes.io/unschedulable", EFFECT_NO_SCHEDULE),
    ("node.kubernetes.io/network-unavailable", EFFECT_NO_SCHEDULE),
];

/// The defaults a daemon pod gets: all but the last without the host
/// network.
fn defaults(host_network: bool) -> &'static [(&'static str, &'static str)] {
    let n = DEFAULT_DAEMON_TOLERATIONS.len() - usize::from(!host_network);
    &DEFAULT_DAEMON_TOLERATIONS[..n]
}

/// The tolerations the DaemonSet controller adds to every daemon pod (the
/// last only to a pod on the host network).
pub fn default_daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let exists = |&(key, effect): &(&str, &str)| Toleration {
        key: key.to_string(),
        operator: TOLERATION_OP_EXISTS.to_string(),
        value: String::new(),
        effect: effect.to_string(),
    };
    defaults(host_network).iter().map(exists).collect()
}

/// The template's tolerations plus the DaemonSet controller's defaults, as
/// `AddOrUpdateDaemonPodTolerations` builds them: a default replaces every
/// toleration with the same key, effect, operator and value (in place), and
/// is appended when there is none. Upstream's replacement drops e.g.
/// `tolerationSeconds`; our projection has nothing else to drop, so a
/// replaced toleration stays as it is. What a report shows; to judge a
/// taint, [`DaemonTolerations`] gives the same answer without building it.
pub fn with_default_tolerations(tolerations: &[Toleration], host_network: bool) -> Vec<Toleration> {
    let mut out = tolerations.to_vec();
    for default in default_daemon_tolerations(host_network) {
        if !out.contains(&default) {
            out.push(default);
        }
    }
    out
}

/// A daemon pod's tolerations as [`with_default_tolerations`] lists them
/// (the template's own and the defaults), judged in place: placement asks
/// this for every DaemonSet on every node event, and building the list
/// each time was a fifth of the controller's allocations.
#[derive(Debug, Clone, Copy)]
pub struct DaemonTolerations<'a> {
    own: &'a [Toleration],
    host_network: bool,
}

impl<'a> DaemonTolerations<'a> {
    pub fn new(own: &'a [Toleration], host_network: bool) -> Self {
        Self { own, host_network }
    }

    /// Whether any of them tolerates `taint` ([`tolerates`]). A default,
    /// `Exists` with a key and an effect, tolerates exactly the taints
    /// with that key and effect.
    pub fn tolerate(&self, taint: &Taint) -> bool {
        self.own.iter().any(|t| tolerates(t, taint))
            || defaults(self.host_network)
                .iter()
                .any(|&(key, effect)| taint.key == key && taint.effect == effect)
    }
}

/// Effects that keep a pod off a node; `PreferNoSchedule` never does.
pub fn taint_blocks_scheduling(taint: &Taint) -> bool {
    taint.effect == EFFECT_NO_SCHEDULE || taint.effect == EFFECT_NO_EXECUTE
}

/// The first NoSchedule/NoExecute taint no toleration tolerates.
pub fn first_untolerated_taint<'a>(
    taints: impl IntoIterator<Item = &'a Taint>,
    tolerations: DaemonTolerations<'_>,
) -> Option<&'a Taint> {
    taints
        .into_iter()
        .filter(|t| taint_blocks_scheduling(t))
        .find(|taint| !tolerations.tolerate(taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_int_follows_is_decimal_integer() {
        let cases: &[(&str, Option<i64>)] = &[
            ("0", Some(0)),
            ("5", Some(5)),
            ("-5", Some(-5)),
            ("950", Some(950)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-0", None),
            ("007", None),
            ("+5", None),
            ("", None),
            ("-", None),
            ("5.0", None),
            (" 5", None),
        ];
        for (input, want) in cases {
            assert_eq!(canonical_int(input), *want, "{input:?}");
        }
    }
}
