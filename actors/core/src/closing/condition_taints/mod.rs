//! Condition-rule taints (`conditionTaints`, semantics.md §6.5): the
//! decider that puts a rule's taint on and takes it off, and the rule rows of
//! the explain report. What a rule is and how a node is judged against it
//! is `rules::conditions::taints`.

pub mod decider;
pub mod report;
