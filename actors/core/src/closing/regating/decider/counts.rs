//! Re-gating's gauges; the counts they read are the closing ledger's
//! ([`crate::closing::ledger::Counts`]).

/// Re-gating's gauges, for the shell to publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegateGauges {
    /// Managed nodes carrying the re-gate taint, with this replica's
    /// re-gates the index does not show yet.
    pub regated: usize,
    /// How many the budget allows at once.
    pub budget_allowed: usize,
    /// Open nodes to be looked at again at a set time: a member broken but
    /// still inside the grace, or due but put off (budget, leadership,
    /// suspension, a failed request).
    pub broken: usize,
    /// Managed nodes whose writes are suspended (annotation or config).
    pub suspended: usize,
}
