//! Announced reboots in re-gating (`--reboot-announcements`, semantics.md
//! §6.10): an open node whose reboot is announced is due for a re-gate (the
//! write records its boot id in `nodegate.dev/awaiting-reboot`), and that
//! record is removed once no announcement stands and the node is open or
//! did not reboot — a withdrawal, after which its gate opens by readiness.

use super::*;
use crate::config::Source;
use crate::reboot::{self, BeforeReboot};

impl Regater {
    /// The announced reboot `node` is due for, if any; removes the record of
    /// one that no longer stands.
    pub(super) fn announcement(
        &mut self,
        node: &NodeInfo,
        daemonsets: &[Arc<DaemonSetInfo>],
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) -> Option<Trigger> {
        let cfg = cx.config;
        if cfg.reboots.sources.is_empty() && node.awaiting_reboot.is_none() {
            return None;
        }
        let now = cx.now.for_grace();
        self.warn_unreadable_lock(daemonsets, cx, node, out);
        let announced = reboot::announced(node, &cfg.reboots, daemonsets, now);
        match reboot::before_reboot(node, cfg, announced) {
            BeforeReboot::Regate(a) => Some(Trigger::Announced(a)),
            BeforeReboot::Forget => {
                self.forget_awaiting(node, cx, out);
                None
            }
            BeforeReboot::Nothing => None,
        }
    }

    /// A kured lock that is not kured's JSON announces nothing: said once
    /// per value.
    fn warn_unreadable_lock(
        &mut self,
        daemonsets: &[Arc<DaemonSetInfo>],
        cx: &Context<'_>,
        node: &NodeInfo,
        out: &mut Vec<Effect>,
    ) {
        let cfg = &cx.config.reboots;
        if !cfg.listens_to(Source::KuredLock) {
            return;
        }
        let now = cx.now.for_grace();
        if let Some(Err(e)) = reboot::kured_lock_of(cfg, daemonsets, now)
            && self.lock_warned.as_ref() != Some(&e)
        {
            let message = format!("kured's lock on {}: {e}", cfg.kured_daemonset);
            out.push(Effect::log(Level::Warn, &node.name, message));
            self.lock_warned = Some(e);
        }
    }

    /// Removes `nodegate.dev/awaiting-reboot` from `node` as the index shows
    /// it, unless a removal tested against this version is out or applied.
    fn forget_awaiting(&mut self, node: &NodeInfo, cx: &Context<'_>, out: &mut Vec<Effect>) {
        let name = node.name.as_str();
        match self.forgetting.get(name) {
            Some(tested) if *tested == node.resource_version => return,
            Some(_) => {
                self.forgetting.remove(name);
            }
            None => {}
        }
        let cfg = cx.config;
        if cfg.dry_run || cfg.suspend || node.suspended {
            return;
        }
        if !cx.may_write {
            self.forget_later.insert(name.to_string());
            return;
        }
        self.forgetting
            .insert(name.to_string(), node.resource_version.clone());
        out.push(Effect::Write(TaintWrite {
            origin: Origin::Regate,
            node: name.to_string(),
            uid: node.uid.clone(),
            resource_version: node.resource_version.clone(),
            change: TaintChange::Annotate {
                annotations: vec![(annotations::AWAITING_REBOOT, None)],
            },
            tag: None,
        }));
    }

    /// The answer to a removal of `nodegate.dev/awaiting-reboot`.
    pub(super) fn forgot(
        &mut self,
        write: &TaintWrite,
        outcome: PatchOutcome,
        cx: &Context<'_>,
    ) -> Vec<Effect> {
        let name = write.node.as_str();
        let now = cx.now.for_grace();
        match outcome {
            PatchOutcome::Applied => {
                let message = "no reboot announcement stands any more: removed \
                               nodegate.dev/awaiting-reboot (its gate, if any, opens by readiness)";
                vec![Effect::log(Level::Info, name, message)]
            }
            // The node changed since: decided again on the index's next
            // version of it (the entry holds back the version tested).
            PatchOutcome::Conflict => Vec::new(),
            PatchOutcome::NotFound => {
                self.forget(name);
                Vec::new()
            }
            PatchOutcome::NotLeader | PatchOutcome::Withdrawn => {
                self.forgetting.remove(name);
                self.forget_later.insert(name.to_string());
                Vec::new()
            }
            PatchOutcome::Failed(e) | PatchOutcome::Ambiguous(e) => {
                self.forgetting.remove(name);
                self.look_at.insert(name.to_string(), retry_after(now));
                let message =
                    format!("removing nodegate.dev/awaiting-reboot failed; trying again: {e}");
                vec![Effect::log(Level::Warn, name, message)]
            }
        }
    }
}
