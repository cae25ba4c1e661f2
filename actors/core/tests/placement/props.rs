//! Properties of placement over generated nodes, templates and configs.

use std::collections::BTreeSet;

use nodegate_core::rules::placement::{
    DaemonTolerations, ManagedTaint, NotExpectedReason, PlacementConfig, TransientTaint, Verdict,
    evaluate, match_term, node_matches_terms, should_run, tolerates, with_default_tolerations,
};
use nodegate_core::testutil::{mk_ds, mk_node};
use nodegate_core::vocab::model::{
    DaemonSetInfo, Labels, NodeInfo, NodeSelectorRequirement, NodeSelectorTerm, PodPlacement,
    Taint, Toleration,
};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

const KEYS: &[&str] = &[
    "zone",
    "disk",
    "gpu",
    "cpu",
    "dedicated",
    "example.com/role",
    "nodegate.dev/initializing",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.kubernetes.io/unschedulable",
    "readiness.k8s.io/net",
    "karpenter.sh/unregistered",
    "",
    "bad key",
];
const VALUES: &[&str] = &["", "a", "b", "4", "8", "-3", "08", "x y", "true"];
const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute", ""];
const TOL_OPS: &[&str] = &["Exists", "Equal", "", "Lt", "Gt", "Bogus"];
const NODE_OPS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"];

fn pick(items: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(items).prop_map(str::to_string)
}

fn any_taint() -> impl Strategy<Value = Taint> {
    (
        pick(KEYS),
        pick(VALUES),
        pick(&["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    )
        .prop_map(|(k, v, e)| Taint::new(k, v, e))
}

fn any_toleration() -> impl Strategy<Value = Toleration> {
    (pick(KEYS), pick(TOL_OPS), pick(VALUES), pick(EFFECTS)).prop_map(
        |(key, operator, value, effect)| Toleration {
            key,
            operator,
            value,
            effect,
        },
    )
}

fn any_labels() -> impl Strategy<Value = Labels> {
    btree_map(
        pick(&["zone", "disk", "gpu", "cpu", "example.com/role"]),
        pick(VALUES),
        0..5,
    )
    .prop_map(|m| m.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
}

fn any_requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    (pick(KEYS), pick(NODE_OPS), vec(pick(VALUES), 0..3)).prop_map(|(key, operator, values)| {
        NodeSelectorRequirement {
            key,
            operator,
            values,
        }
    })
}

fn any_field_requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    (
        pick(&["metadata.name", "metadata.uid"]),
        pick(&["In", "NotIn", "Exists"]),
        vec(pick(&["node-1", "node-2", ""]), 0..3),
    )
        .prop_map(|(key, operator, values)| NodeSelectorRequirement {
            key,
            operator,
            values,
        })
}

fn any_term() -> impl Strategy<Value = NodeSelectorTerm> {
    (
        vec(any_requirement(), 0..3),
        vec(any_field_requirement(), 0..2),
    )
        .prop_map(|(match_expressions, match_fields)| NodeSelectorTerm {
            match_expressions,
            match_fields,
        })
}

fn any_template() -> impl Strategy<Value = PodPlacement> {
    (
        btree_map(pick(&["zone", "disk"]), pick(&["a", "b", ""]), 0..2),
        proptest::option::weighted(0.5, vec(any_term(), 0..3)),
        vec(any_toleration(), 0..4),
        pick(&["", "", "", "node-1", "node-2"]),
        any::<bool>(),
    )
        .prop_map(
            |(node_selector, required_node_affinity, tolerations, node_name, host_network)| {
                PodPlacement {
                    node_selector: node_selector
                        .into_iter()
                        .map(|(k, v)| (k.into(), v.into()))
                        .collect(),
                    required_node_affinity,
                    tolerations,
                    node_name,
                    host_network,
                }
            },
        )
}

fn any_node() -> impl Strategy<Value = NodeInfo> {
    (any_labels(), vec(any_taint(), 0..5)).prop_map(|(labels, taints)| {
        let mut n = mk_node("node-1", &[], taints);
        n.labels = labels;
        n
    })
}

fn any_ds() -> impl Strategy<Value = DaemonSetInfo> {
    any_template().prop_map(|t| mk_ds("kube-system", "ds", t))
}

fn any_config() -> impl Strategy<Value = PlacementConfig> {
    (
        any::<bool>(),
        vec(pick(&["dedicated", "example.com/*", "gpu", "*"]), 0..2),
    )
        .prop_map(|(two_managed, extra)| {
            let mut cfg = PlacementConfig::default();
            if two_managed {
                cfg.managed_taints
                    .push(ManagedTaint::new("dedicated", "NoExecute"));
            }
            cfg.transient_taints
                .extend(extra.iter().map(|s| TransientTaint::parse(s)));
            cfg
        })
}

fn steady(node: &NodeInfo, cfg: &PlacementConfig) -> Vec<Taint> {
    cfg.steady_state_taints(&node.taints)
}

proptest! {
    #[test]
    fn an_empty_key_exists_toleration_with_no_effect_tolerates_every_taint(
        key in ".*", value in ".*", effect in ".*"
    ) {
        let wildcard = Toleration { key: String::new(), operator: "Exists".into(), value: String::new(), effect: String::new() };
        prop_assert!(tolerates(&wildcard, &Taint::new(key, value, effect)));
    }

    #[test]
    fn a_toleration_with_another_non_empty_effect_never_tolerates(
        t in any_toleration(), taint in any_taint()
    ) {
        prop_assume!(!t.effect.is_empty() && t.effect != taint.effect);
        prop_assert!(!tolerates(&t, &taint));
    }

    #[test]
    fn adding_a_label_with_a_new_key_never_unmatches_an_in_or_exists_term(
        labels in any_labels(),
        reqs in vec((pick(&["zone", "disk", "gpu"]), vec(pick(&["a", "b", "", "4"]), 1..3), any::<bool>()), 1..4),
        new_key in "[a-z]{1,8}", new_value in "[a-z0-9]{0,5}",
    ) {
        let term = NodeSelectorTerm {
            match_expressions: reqs.into_iter().map(|(key, values, exists)| {
                if exists {
                    NodeSelectorRequirement { key, operator: "Exists".into(), values: vec![] }
                } else {
                    NodeSelectorRequirement { key, operator: "In".into(), values }
                }
            }).collect(),
            match_fields: vec![],
        };
        prop_assume!(!labels.contains_key(new_key.as_str()));
        if match_term(&term, "node-1", &labels).is_ok() {
            let mut more = labels.clone();
            more.insert(new_key.into(), new_value.into());
            prop_assert!(match_term(&term, "node-1", &more).is_ok());
        }
    }

    #[test]
    fn a_term_with_an_invalid_requirement_never_matches(
        labels in any_labels(), mut term in any_term(),
        bad in prop_oneof![
            Just(NodeSelectorRequirement { key: String::new(), operator: "Exists".into(), values: vec![] }),
            Just(NodeSelectorRequirement { key: "zone".into(), operator: "NotIn".into(), values: vec![] }),
            Just(NodeSelectorRequirement { key: "cpu".into(), operator: "Gt".into(), values: vec!["x".into()] }),
            Just(NodeSelectorRequirement { key: "zone".into(), operator: "Exists".into(), values: vec!["a".into()] }),
        ],
        at in any::<prop::sample::Index>(),
    ) {
        let i = at.index(term.match_expressions.len() + 1);
        term.match_expressions.insert(i, bad);
        prop_assert!(match_term(&term, "node-1", &labels).is_err());
    }

    #[test]
    fn terms_are_ored(labels in any_labels(), terms in vec(any_term(), 0..4)) {
        let any_matches = terms.iter().any(|t| match_term(t, "node-1", &labels).is_ok());
        prop_assert_eq!(node_matches_terms(&terms, "node-1", &labels).is_ok(), any_matches);
    }

    #[test]
    fn not_in_is_the_negation_of_in_for_valid_values(
        labels in any_labels(), key in pick(&["zone", "disk"]), values in vec(pick(&["a", "b", ""]), 1..3)
    ) {
        let mk = |op: &str| NodeSelectorTerm {
            match_expressions: vec![NodeSelectorRequirement { key: key.clone(), operator: op.into(), values: values.clone() }],
            match_fields: vec![],
        };
        prop_assert_ne!(
            match_term(&mk("In"), "node-1", &labels).is_ok(),
            match_term(&mk("NotIn"), "node-1", &labels).is_ok()
        );
    }

    #[test]
    fn default_tolerations_are_idempotent_and_keep_the_templates_own(
        tols in vec(any_toleration(), 0..5), host in any::<bool>()
    ) {
        let once = with_default_tolerations(&tols, host);
        prop_assert_eq!(with_default_tolerations(&once, host), once.clone());
        for t in &tols {
            prop_assert!(once.contains(t));
        }
        prop_assert!(once.len() >= tols.len());
    }

    #[test]
    fn daemon_tolerations_judge_a_taint_as_the_listed_defaults_do(
        tols in vec(any_toleration(), 0..5), host in any::<bool>(), taint in any_taint()
    ) {
        let listed = with_default_tolerations(&tols, host);
        prop_assert_eq!(
            DaemonTolerations::new(&tols, host).tolerate(&taint),
            listed.iter().any(|t| tolerates(t, &taint))
        );
    }

    #[test]
    fn evaluate_never_expects_what_should_run_rejects_in_steady_state(
        node in any_node(), ds in any_ds(), cfg in any_config()
    ) {
        let predicate = should_run(&node.name, &node.labels, &steady(&node, &cfg), &ds.template);
        if predicate.is_err() {
            prop_assert!(!evaluate(&node, &ds, &cfg).is_expected());
        }
    }

    #[test]
    fn without_exclusions_evaluate_is_should_run_on_the_steady_state(
        node in any_node(), ds in any_ds(), cfg in any_config()
    ) {
        let predicate = should_run(&node.name, &node.labels, &steady(&node, &cfg), &ds.template);
        let verdict = evaluate(&node, &ds, &cfg);
        prop_assert_eq!(verdict.is_expected(), predicate.is_ok());
        // The only reason evaluate adds is StartsAfterGate, and only for a
        // managed taint.
        if let Verdict::NotExpected(NotExpectedReason::StartsAfterGate { taint }) = &verdict {
            prop_assert!(cfg.is_managed(taint));
        }
    }

    #[test]
    fn a_node_without_transient_or_managed_taints_gets_exactly_the_controllers_set(
        node in any_node(), ds in any_ds(), cfg in any_config()
    ) {
        let mut node = node;
        node.taints.retain(|t| !cfg.is_transient(t) && !cfg.is_managed(t));
        prop_assert_eq!(
            evaluate(&node, &ds, &cfg).is_expected(),
            should_run(&node.name, &node.labels, &node.taints, &ds.template).is_ok()
        );
    }

    #[test]
    fn prefer_no_schedule_taints_never_change_the_verdict(
        node in any_node(), ds in any_ds(), cfg in any_config(), key in pick(KEYS), value in pick(VALUES)
    ) {
        let mut more = node.clone();
        more.taints.push(Taint::new(key, value, "PreferNoSchedule"));
        prop_assert_eq!(evaluate(&more, &ds, &cfg), evaluate(&node, &ds, &cfg));
        prop_assert_eq!(
            should_run(&more.name, &more.labels, &more.taints, &ds.template),
            should_run(&node.name, &node.labels, &node.taints, &ds.template)
        );
    }

    #[test]
    fn transient_taints_never_change_the_verdict(
        node in any_node(), ds in any_ds(), cfg in any_config(),
        key in pick(&["node.kubernetes.io/not-ready", "readiness.k8s.io/x", "karpenter.sh/unregistered"]),
        effect in pick(&["NoSchedule", "NoExecute"]),
    ) {
        let mut more = node.clone();
        more.taints.insert(0, Taint::new(key, "", effect));
        prop_assert_eq!(evaluate(&more, &ds, &cfg), evaluate(&node, &ds, &cfg));
    }

    #[test]
    fn tolerating_every_taint_leaves_only_name_and_affinity(
        node in any_node(), ds in any_ds(), cfg in any_config()
    ) {
        let mut ds = ds;
        ds.template.tolerations.push(Toleration { operator: "Exists".into(), ..Toleration::default() });
        let verdict = evaluate(&node, &ds, &cfg);
        let affinity_only = should_run(&node.name, &node.labels, &[], &ds.template);
        prop_assert_eq!(verdict.is_expected(), affinity_only.is_ok());
    }

    #[test]
    fn excluded_daemonsets_are_never_expected(
        node in any_node(), ds in any_ds(), cfg in any_config()
    ) {
        let mut cfg = cfg;
        cfg.excluded = BTreeSet::from([(ds.namespace.clone(), ds.name.clone())]);
        prop_assert_eq!(evaluate(&node, &ds, &cfg), Verdict::NotExpected(NotExpectedReason::ExcludedByName));
    }
}
