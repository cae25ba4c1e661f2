//! What the process knows about itself for `/healthz` and `/readyz?verbose`.
//! Every method takes an atomic or one short lock and never waits.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use jiff::Timestamp;

use crate::serve::lock;

/// What `/healthz` checks: the loops that must run for the process to be of
/// any use; and the config file's story, which `/readyz?verbose` tells.
#[derive(Debug, Default)]
pub struct ProcessHealth {
    supervisor_stopped: AtomicBool,
    elector_stopped: AtomicBool,
    config: Mutex<ConfigRecord>,
    /// The admission webhook, when configured: serving or why not.
    webhook: Mutex<Option<WebhookState>>,
}

/// The webhook's `/readyz?verbose` line: serving (`[+]`), or not serving
/// yet and why (`[-]`: the replica is not ready, so the Service sends the
/// API server's calls to the replicas that answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookState {
    pub serving: bool,
    pub detail: String,
}

/// The configuration in force and the last reload's trouble.
#[derive(Debug, Default)]
struct ConfigRecord {
    /// `--config`, if any.
    file: Option<String>,
    /// When the configuration in force was applied (start or a reload).
    applied_at: Option<Timestamp>,
    /// The last reload refused, when it was and why; cleared by one applied.
    refused: Option<(Timestamp, String)>,
    /// Keys the last reload applied changed that only a restart applies.
    needs_restart: Vec<&'static str>,
}

/// One line of `/readyz?verbose`: `[+]` for a check that passes, `[!]` for a
/// warning that does not make the replica unready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    pub name: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = if self.ok { '+' } else { '!' };
        write!(f, "[{mark}]{} {}", self.name, self.detail)
    }
}

impl ProcessHealth {
    pub fn supervisor_stopped(&self) {
        self.supervisor_stopped.store(true, Ordering::SeqCst);
    }
    pub fn elector_stopped(&self) {
        self.elector_stopped.store(true, Ordering::SeqCst);
    }

    /// The webhook's state now (see `serve::webhook`).
    pub fn webhook(&self, state: WebhookState) {
        *lock(&self.webhook) = Some(state);
    }

    /// The webhook's line of `/readyz?verbose`; `None` without a webhook.
    pub fn webhook_state(&self) -> Option<WebhookState> {
        lock(&self.webhook).clone()
    }

    /// The configuration read at start is in force (from `file`, if any).
    pub fn config_started(&self, file: Option<String>, at: Timestamp) {
        let mut c = lock(&self.config);
        c.file = file;
        c.applied_at = Some(at);
    }

    /// A reload put a new configuration in force.
    pub fn config_applied(&self, at: Timestamp, needs_restart: Vec<&'static str>) {
        let mut c = lock(&self.config);
        c.applied_at = Some(at);
        c.refused = None;
        c.needs_restart = needs_restart;
    }

    /// A reload was refused; the configuration in force stays.
    pub fn config_refused(&self, at: Timestamp, why: String) {
        lock(&self.config).refused = Some((at, why));
    }

    /// The config file's lines of `/readyz?verbose`. A refused reload or a
    /// key waiting for a restart is a warning, not unreadiness: the
    /// configuration in force still works, and the admission webhook (served
    /// to the API server through the readiness of these pods) must stay up.
    pub fn config_checks(&self) -> Vec<Check> {
        let c = lock(&self.config);
        let from = c.file.as_deref().map_or_else(
            || " (flags only, no --config)".to_string(),
            |f| format!(" from {f}"),
        );
        let applied = c
            .applied_at
            .map_or_else(|| "not yet".to_string(), |t| t.to_string());
        let mut checks = vec![Check {
            ok: true,
            name: "config",
            detail: format!("in force since {applied}{from}"),
        }];
        if let Some((at, why)) = &c.refused {
            checks.push(Check {
                ok: false,
                name: "config-reload",
                detail: format!(
                    "the reload at {at} was refused, the configuration applied at {applied} stays in force: {why}"
                ),
            });
        }
        if !c.needs_restart.is_empty() {
            checks.push(Check {
                ok: false,
                name: "config-restart",
                detail: format!(
                    "the file changes keys that only a restart applies (their start values stay in force): {}",
                    c.needs_restart.join(", ")
                ),
            });
        }
        checks
    }

    /// What is wrong, one phrase per stopped loop; empty when healthy.
    pub fn problems(&self) -> Vec<&'static str> {
        let mut p = Vec::new();
        if self.supervisor_stopped.load(Ordering::SeqCst) {
            p.push("the gate supervisor has stopped");
        }
        if self.elector_stopped.load(Ordering::SeqCst) {
            p.push("the leader-election loop has stopped");
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_core::testutil::ts;

    #[test]
    fn a_refused_reload_is_a_warning_until_one_is_applied() {
        let h = ProcessHealth::default();
        h.config_started(Some("/etc/nodegate/config.yaml".into()), ts(1));
        let lines = |h: &ProcessHealth| {
            h.config_checks()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lines(&h),
            ["[+]config in force since 1970-01-01T00:00:01Z from /etc/nodegate/config.yaml"]
        );
        h.config_refused(ts(5), "timeout: bad".into());
        let l = lines(&h);
        assert_eq!(l.len(), 2);
        assert!(
            l[1].starts_with("[!]config-reload ") && l[1].ends_with("timeout: bad"),
            "{l:?}"
        );
        h.config_applied(ts(9), vec!["httpAddr"]);
        let l = lines(&h);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[0].contains("since 1970-01-01T00:00:09Z"), "{l:?}");
        assert!(
            l[1].starts_with("[!]config-restart ") && l[1].ends_with("httpAddr"),
            "{l:?}"
        );
    }
}
