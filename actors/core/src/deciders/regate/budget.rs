//! The budget's answers: one more re-gate allowed, held for the reads and
//! writes out, or refused (counted, announced now and then, and looked at
//! again later).

use super::*;

impl Regater {
    /// [`Regater::budget`] for `trigger`: an announcement from an
    /// orchestrator that bounds its own disruption (kured's lock) goes
    /// around both budgets (semantics.md §6.10).
    pub(super) fn budget_for(
        &mut self,
        trigger: &Trigger,
        rc: &RegateConfig,
        cx: &Context<'_>,
    ) -> Budget {
        if trigger.bypasses_budget() {
            return Budget::Allows;
        }
        self.budget(rc, cx)
    }

    /// Whether one more node may be re-gated: counted from the nodes in
    /// scope the index shows with the re-gate taint, plus this replica's
    /// own re-gates the index does not show yet; the reads and writes out
    /// hold a node the budget would refuse if they all ended in a re-gate.
    pub(super) fn budget(&mut self, rc: &RegateConfig, cx: &Context<'_>) -> Budget {
        let out = self.reading.len() + self.writing.len();
        self.counts(cx);
        let Some(counts) = self.counts.as_ref() else {
            return Budget::Allows;
        };
        let managed = counts.managed.len();
        let in_use = counts.regated.len() + self.unseen(counts);
        if let Err(exhausted) = regate::budget_allows(rc, managed, in_use) {
            return Budget::Refused(exhausted);
        }
        // The cap on every node nodegate keeps closed (re-gated, or
        // carrying a rule's taint), with this replica's re-gates the index
        // does not show yet.
        let unseen = self
            .pending
            .keys()
            .filter(|n| !counts.closed.contains(&counts::fingerprint(n)))
            .count();
        let closed = counts.closed.len() + unseen;
        if let Err(exhausted) = crate::deciders::total_allows(cx.config, managed, closed) {
            return Budget::Refused(exhausted);
        }
        let held = |total| regate::budget_allows(rc, managed, in_use + out).is_err() || total;
        if out > 0 && held(crate::deciders::total_allows(cx.config, managed, closed + out).is_err())
        {
            return Budget::Held;
        }
        Budget::Allows
    }

    pub(super) fn refused(
        &mut self,
        name: &str,
        trigger: &Trigger,
        exhausted: Exhausted,
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        let now = cx.now.for_grace();
        out.push(Effect::Count(Tally::RegateBudgetExhausted));
        let again = now.checked_add(BUDGET_RETRY).unwrap_or(now);
        self.look_at.insert(name.to_string(), again);
        self.refused.insert(name.to_string());
        let announce = self
            .budget_event
            .get(name)
            .is_none_or(|last| now.duration_since(*last) >= BUDGET_EVENT_EVERY);
        if !announce {
            return;
        }
        self.budget_event.insert(name.to_string(), now);
        let why = words(trigger, now);
        out.push(Effect::log(
            Level::Warn,
            name,
            format!("not re-gated: the budget is used up ({exhausted}); {why}"),
        ));
        if let Some(node) = cx.view.node(name) {
            let note = format!("Not re-gated although {why}: {exhausted}");
            let reason = Reason::RegateBudgetExhausted;
            let event = NodeEvent::new(name, &node.uid, EventType::Warning, reason, note);
            out.push(Effect::RecordEvent(event));
        }
    }
}
