//! Where a pod template may go by the node itself: `spec.nodeName`,
//! `nodeSelector` and required node affinity, validated and matched as upstream.

use super::reason::{NotExpectedReason, RequirementRef, TermFailure, TermList, TermMismatch};
use crate::rules::selector::{
    OP_IN, OP_NOT_IN, SET_OPS, check_label_key, set_op_holds, values_problem,
};
use crate::vocab::model::{
    Labels, NODE_OP_GT, NODE_OP_LT, NodeSelectorRequirement, NodeSelectorTerm, PodPlacement,
};

/// The only field `matchFields` can select on; every other field reads as "".
pub const NODE_NAME_FIELD: &str = "metadata.name";

pub(super) fn check_node_name(
    template: &PodPlacement,
    node_name: &str,
) -> Result<(), NotExpectedReason> {
    if template.node_name.is_empty() || template.node_name == node_name {
        Ok(())
    } else {
        Err(NotExpectedReason::NodeNameMismatch {
            wanted: template.node_name.clone(),
            node: node_name.to_string(),
        })
    }
}

/// Every `nodeSelector` entry must be on the node with exactly that value.
/// The map is ordered, so the reported key is stable.
pub fn check_node_selector(
    node_selector: &Labels,
    labels: &Labels,
) -> Result<(), NotExpectedReason> {
    for (key, wanted) in node_selector {
        match labels.get(key) {
            None => {
                return Err(NotExpectedReason::NodeSelectorKeyMissing {
                    key: key.to_string(),
                    wanted: wanted.to_string(),
                });
            }
            Some(actual) if actual != wanted => {
                return Err(NotExpectedReason::NodeSelectorValueDiffers {
                    key: key.to_string(),
                    wanted: wanted.to_string(),
                    actual: actual.to_string(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What makes a `matchExpressions` requirement invalid, in upstream's order:
/// an unknown operator (checked alone), then the key, the value count for
/// the operator, and each value as a label value.
fn expression_problem(r: &NodeSelectorRequirement) -> Option<String> {
    let (op, values) = (r.operator.as_str(), &r.values);
    let gt_lt = op == NODE_OP_GT || op == NODE_OP_LT;
    if !gt_lt && !SET_OPS.contains(&op) {
        return Some(format!(
            "operator {op:?} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
        ));
    }
    if let Err(problem) = check_label_key(&r.key) {
        return Some(problem);
    }
    if gt_lt && (values.len() != 1 || values[0].parse::<i64>().is_err()) {
        return Some(format!(
            "{op} needs exactly one integer value, got {values:?}"
        ));
    }
    // For Gt/Lt this also refuses a signed integer such as "-5": upstream
    // checks every value as a label value, and a label value cannot
    // start with a sign.
    values_problem(op, values)
}

fn expression_holds(r: &NodeSelectorRequirement, labels: &Labels) -> bool {
    let value = labels.get(r.key.as_str());
    if let Some(holds) = set_op_holds(&r.operator, value, &r.values) {
        return holds;
    }
    // Gt and Lt. Go's ParseInt and Rust's i64 parser accept the same
    // base-10 forms (optional sign, leading zeros); an unparsable node value
    // is simply false.
    let node = value.and_then(|v| v.parse::<i64>().ok());
    let wanted = r.values.first().and_then(|v| v.parse::<i64>().ok());
    match (r.operator.as_str(), node, wanted) {
        (NODE_OP_GT, Some(n), Some(w)) => n > w,
        (NODE_OP_LT, Some(n), Some(w)) => n < w,
        _ => false,
    }
}

fn field_problem(r: &NodeSelectorRequirement) -> Option<String> {
    let op = r.operator.as_str();
    if op != OP_IN && op != OP_NOT_IN {
        return Some(format!(
            "matchFields supports only In and NotIn, got {op:?}"
        ));
    }
    if r.values.len() != 1 {
        return Some(format!(
            "matchFields {op} needs exactly one value, got {:?}",
            r.values
        ));
    }
    None
}

/// The node's value of a field: only `metadata.name` exists; any other field
/// reads as "" (upstream's `fields.Set.Get`).
fn field_value<'a>(key: &str, node_name: &'a str) -> &'a str {
    if key == NODE_NAME_FIELD {
        node_name
    } else {
        ""
    }
}

fn field_holds(r: &NodeSelectorRequirement, node_name: &str) -> bool {
    let actual = field_value(&r.key, node_name);
    let wanted = r.values.first().map(String::as_str).unwrap_or("");
    match r.operator.as_str() {
        OP_IN => actual == wanted,
        OP_NOT_IN => actual != wanted,
        _ => false,
    }
}

/// Whether one node selector term matches a node with this name and these
/// labels, and if not, the first reason why. Invalid requirements anywhere in
/// the term win over unmet ones, as upstream parses the term before matching.
pub fn match_term(
    term: &NodeSelectorTerm,
    node_name: &str,
    labels: &Labels,
) -> Result<(), TermFailure> {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return Err(TermFailure::Empty);
    }
    let lists = [
        (TermList::MatchExpressions, &term.match_expressions),
        (TermList::MatchFields, &term.match_fields),
    ];
    let requirements = lists
        .into_iter()
        .flat_map(|(list, reqs)| reqs.iter().enumerate().map(move |(i, r)| (list, i, r)));
    for (list, i, r) in requirements.clone() {
        let problem = match list {
            TermList::MatchExpressions => expression_problem(r),
            TermList::MatchFields => field_problem(r),
        };
        if let Some(problem) = problem {
            return Err(TermFailure::Invalid {
                requirement: RequirementRef::new(list, i, r),
                problem,
            });
        }
    }
    for (list, i, r) in requirements {
        let node_value = match list {
            TermList::MatchExpressions if expression_holds(r, labels) => continue,
            TermList::MatchExpressions => labels.get(r.key.as_str()).map(|v| v.to_string()),
            // Upstream skips field requirements for a node without a name
            // (its field set is empty); a real node always has one.
            TermList::MatchFields if node_name.is_empty() || field_holds(r, node_name) => continue,
            TermList::MatchFields => Some(field_value(&r.key, node_name).to_string()),
        };
        return Err(TermFailure::Unmet {
            requirement: RequirementRef::new(list, i, r),
            node_value,
        });
    }
    Ok(())
}

/// Every term's result, in order — what `nodegate explain` shows.
pub fn explain_terms(
    terms: &[NodeSelectorTerm],
    node_name: &str,
    labels: &Labels,
) -> Vec<Result<(), TermFailure>> {
    terms
        .iter()
        .map(|t| match_term(t, node_name, labels))
        .collect()
}

/// Terms are ORed: `Ok` with the 0-based index of the first matching term,
/// or every term's failure (empty when there are no terms, which matches no
/// node).
pub fn node_matches_terms(
    terms: &[NodeSelectorTerm],
    node_name: &str,
    labels: &Labels,
) -> Result<usize, Vec<TermMismatch>> {
    let mut failures = Vec::with_capacity(terms.len());
    for (i, term) in terms.iter().enumerate() {
        match match_term(term, node_name, labels) {
            Ok(()) => return Ok(i),
            Err(failure) => failures.push(TermMismatch {
                term: i + 1,
                failure,
            }),
        }
    }
    Err(failures)
}

/// `nodeSelector` and required node affinity together (upstream
/// `RequiredNodeAffinity.Match`).
pub fn check_node_affinity(
    template: &PodPlacement,
    node_name: &str,
    labels: &Labels,
) -> Result<(), NotExpectedReason> {
    check_node_selector(&template.node_selector, labels)?;
    if let Some(terms) = &template.required_node_affinity {
        node_matches_terms(terms, node_name, labels)
            .map_err(|terms| NotExpectedReason::NodeAffinityNoTermMatched { terms })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_value_reads_only_the_node_name() {
        assert_eq!(field_value("metadata.name", "n1"), "n1");
        assert_eq!(field_value("metadata.uid", "n1"), "");
        assert_eq!(field_value("", "n1"), "");
    }
}
