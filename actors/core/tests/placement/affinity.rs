//! Node name, nodeSelector and required node affinity, case by case against
//! upstream `nodeaffinity` (k8s.io/component-helpers, Kubernetes 1.36):
//! `operators`, one node-affinity operator at a time and the rules for valid
//! keys and values; `terms`, how terms and requirements combine, `matchFields`,
//! how a failed match is explained, `nodeSelector` and `nodeName`.

use nodegate_core::rules::placement::{
    NotExpectedReason, TermFailure, TermList, check_node_selector, explain_terms, match_term,
    node_matches_terms, should_run,
};
use nodegate_core::testutil::{field_term, labels, req, template_with_affinity, term};
use nodegate_core::vocab::model::{NodeSelectorTerm, PodPlacement};

mod operators;
mod terms;

const NODE: &str = "node-1";

type Pairs = &'static [(&'static str, &'static str)];
const LONG_63: &str = "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123";
const LONG_64: &str = "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234";

struct Case {
    name: &'static str,
    node_labels: Pairs,
    terms: Vec<NodeSelectorTerm>,
    want: bool,
}

fn case(name: &'static str, node_labels: Pairs, terms: Vec<NodeSelectorTerm>, want: bool) -> Case {
    Case {
        name,
        node_labels,
        terms,
        want,
    }
}

fn run(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in cases {
        let got = node_matches_terms(&c.terms, NODE, &labels(c.node_labels));
        if got.is_ok() != c.want {
            failures.push(format!("{}: want match={}, got {:?}", c.name, c.want, got));
        }
        // The same answer through the DaemonSet predicate.
        let via_should_run = should_run(
            NODE,
            &labels(c.node_labels),
            &[],
            &template_with_affinity(c.terms.clone()),
        );
        if via_should_run.is_ok() != c.want {
            failures.push(format!(
                "{} (should_run): want {}, got {:?}",
                c.name, c.want, via_should_run
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
