//! The replace part of an explain report (semantics.md §5.8). Read from the
//! node's marks only: the budget's state lives in the leader, whose
//! `ReplaceBudgetExhausted` Events say it.

use serde::Serialize;

use crate::closing::replacing::{self};
use crate::vocab::config::{Config, OnTimeout};
use crate::vocab::model::{NodeInfo, Owner};

/// The replace view of the node. Absent from the report unless
/// `--on-timeout=replace` is in force or the node carries a replace mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplaceReport {
    /// `nodeclaim`, `machine NAMESPACE/NAME` or `none`.
    pub owner: String,
    /// Where the node stands, in one sentence.
    pub verdict: String,
}

pub(crate) fn replace_report(node: &NodeInfo, cfg: &Config) -> Option<ReplaceReport> {
    let r = &node.replace;
    let marked = r.requested.is_some() || r.fallback.is_some();
    if cfg.on_timeout != OnTimeout::Replace && !marked {
        return None;
    }
    let owner = match &r.owner {
        Owner::Machine { namespace, name } => format!("machine {namespace}/{name}"),
        o => o.kind().to_string(),
    };
    let asks = match &r.owner {
        Owner::None => "cordons it and marks it for the cluster-autoscaler or a person",
        Owner::NodeClaim => "deletes its Karpenter NodeClaim",
        Owner::Machine { .. } => "deletes its Cluster API Machine",
    };
    let verdict = if let Some(at) = r.requested {
        format!(
            "replacement requested at {at} (nodegate.dev/replace-requested); in flight until the node opens (which removes the mark) or goes{}",
            if r.unschedulable { "; cordoned" } else { "" }
        )
    } else if let Some(f) = replacing::fallback(node) {
        format!(
            "not replaced: a member it waits for is broken cluster-wide; --replace-fallback={f} (see its ReplaceSkipped Event)"
        )
    } else if crate::closing::replacing::decider::due(node, cfg) {
        format!(
            "due: its deadline passed; the leader {asks} as soon as --replace-budget and --replace-in-flight allow, unless a member it waits for is broken cluster-wide"
        )
    } else if cfg.on_timeout == OnTimeout::Replace {
        format!("not due: if its deadline passes with members not Ready, the leader {asks}")
    } else {
        "--on-timeout is not replace: the marks are of an earlier configuration".to_string()
    };
    Some(ReplaceReport { owner, verdict })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{mk_node, taint, ts};
    use crate::vocab::model::Fallback;

    fn verdict(node: &NodeInfo, cfg: &Config) -> Option<String> {
        replace_report(node, cfg).map(|r| format!("{}: {}", r.owner, r.verdict))
    }

    #[test]
    fn explain_says_where_a_node_stands_with_replace() {
        let mut cfg = Config::default();
        let mut n = mk_node(
            "n",
            &[],
            vec![taint("nodegate.dev/initializing", "NoSchedule")],
        );
        assert_eq!(verdict(&n, &cfg), None, "not replace, no marks");
        cfg.on_timeout = OnTimeout::Replace;
        let v = verdict(&n, &cfg).unwrap();
        assert!(
            v.starts_with("none: not due") && v.contains("cordons"),
            "{v}"
        );
        n.replace.timed_out = Some(ts(120));
        n.replace.owner = Owner::NodeClaim;
        let v = verdict(&n, &cfg).unwrap();
        assert!(
            v.starts_with("nodeclaim: due") && v.contains("NodeClaim"),
            "{v}"
        );
        n.replace.fallback = Some((Fallback::Open, ts(130)));
        let v = verdict(&n, &cfg).unwrap();
        assert!(
            v.contains("broken cluster-wide; --replace-fallback=open"),
            "{v}"
        );
        n.replace.requested = Some(ts(140));
        n.replace.unschedulable = true;
        let v = verdict(&n, &cfg).unwrap();
        assert!(
            v.contains("replacement requested at") && v.contains("cordoned"),
            "{v}"
        );
    }
}
