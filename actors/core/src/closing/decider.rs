//! The closing decider: re-gating ([`Regater`], semantics.md §6.4) and the
//! condition rules' taints ([`RuleTainter`], §6.5) over one [`Ledger`] for
//! `--max-unavailable`.
//!
//! The ledger takes in the index's change first; after each method's turn
//! it takes in that method's writes out, so the other method, later in the
//! same step or in the next, counts them: the two never take the same last
//! place. An answer goes only to the method whose request it answers.

use super::condition_taints::decider::RuleTainter;
use super::ledger::Ledger;
use super::regating::decider::{RegateGauges, Regater};
use crate::deciders::{Context, Decider, Effect, Input, Origin};

/// Re-gating and the condition rules, with the ledger they share.
#[derive(Debug, Default)]
pub struct Closing {
    regater: Regater,
    rules: RuleTainter,
    ledger: Ledger,
}

impl Closing {
    /// Re-gating's memory (explain, the debug views).
    pub fn regater(&self) -> &Regater {
        &self.regater
    }

    /// The condition rules' memory (their gauges).
    pub fn rules(&self) -> &RuleTainter {
        &self.rules
    }

    /// Re-gating's gauges now.
    pub fn regate_gauges(&self, cx: &Context<'_>) -> RegateGauges {
        self.regater.gauges(cx, &self.ledger)
    }

    /// Re-gating's budget counts as the ledger keeps them from the change
    /// feed: (nodes in scope, of them carrying the re-gate taint as the
    /// index shows them); `None` before the first step.
    pub fn counted(&self) -> Option<(usize, usize)> {
        self.ledger
            .counts()
            .map(|c| (c.managed.len(), c.regated.len()))
    }

    /// The nodes in scope carrying the re-gate taint, by name, each with
    /// the seconds since its gate started (`gated-since`, else its
    /// creation).
    pub fn regated_ages(&self, cx: &Context<'_>) -> Vec<(String, f64)> {
        let now = cx.now.for_grace();
        let mut ages: Vec<(String, f64)> = self.ledger.with_counts(cx, |counts| {
            counts
                .regated
                .iter()
                .filter_map(|name| cx.view.node(name))
                .map(|n| {
                    let since = n.gated_since.unwrap_or(n.created);
                    let age = now.duration_since(since).as_secs_f64().max(0.0);
                    (n.name.clone(), age)
                })
                .collect()
        });
        ages.sort_by(|a, b| a.0.cmp(&b.0));
        ages
    }
}

impl Decider for Closing {
    /// The origin of the shell's own log lines (the catch-up after gaining
    /// the lease); each effect's line carries its method's.
    fn origin(&self) -> Origin {
        Origin::Regate
    }

    /// Both methods count budgets from the index.
    fn budgeted(&self) -> bool {
        true
    }

    fn decide(&mut self, input: Input, cx: &Context<'_>) -> Vec<Effect> {
        self.ledger.begin(&input, cx);
        let (regate, rules) = match &input {
            Input::Wrote { write, .. } => (
                write.origin == Origin::Regate,
                write.origin == Origin::Rules,
            ),
            Input::NodeRead { .. } => (true, false),
            _ => (true, true),
        };
        let mut out = Vec::new();
        if regate {
            let effects = self.regater.decide(input.clone(), cx, &self.ledger);
            self.ledger.report(Origin::Regate, self.regater.claims());
            out.extend(effects.into_iter().map(|e| labelled(e, Origin::Regate)));
        }
        if rules {
            let effects = self.rules.decide(input, cx, &self.ledger);
            self.ledger.report(Origin::Rules, self.rules.claims());
            out.extend(effects.into_iter().map(|e| labelled(e, Origin::Rules)));
        }
        out
    }
}

/// `effect`, its log line labelled with `origin`.
fn labelled(mut effect: Effect, origin: Origin) -> Effect {
    if let Effect::Log { origin: said, .. } = &mut effect {
        said.get_or_insert(origin);
    }
    effect
}

/// The shells `--max-unavailable` is counted in, as the binary starts them.
#[cfg(test)]
fn shells() -> Vec<Box<dyn Decider>> {
    vec![Box::new(Closing::default())]
}

#[cfg(test)]
mod tests;
