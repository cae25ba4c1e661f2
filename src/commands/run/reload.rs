//! The config reload of `nodegate run`: the `--config` file is read again
//! every [`POLL`] (its contents compared, so a ConfigMap volume's symlink
//! swap is seen) and at once on SIGHUP; what [`decide`] accepts is put in
//! force through the router, and what it refuses is logged, counted and
//! shown on `/readyz?verbose` while the configuration in force stays.

use std::path::PathBuf;
use std::sync::Arc;

use jiff::Timestamp;
use nodegate_actors::router::Router;
use tokio::sync::watch;

use crate::serve::health::ProcessHealth;
use crate::serve::metrics::Metrics;
use crate::settings::cli::RunArgs;
use crate::settings::config::RunSettings;
use crate::settings::reload::{FilePoller, Look, POLL, decide};

/// What a reload reads and where it puts its outcome.
pub struct Reloader {
    pub args: RunArgs,
    pub started: RunSettings,
    pub router: Arc<Router>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<ProcessHealth>,
}

impl Reloader {
    /// The file may have changed between its read at start and the poller's
    /// first read (start-up takes seconds: the client, the listeners, the
    /// webhook's certificate): decides that first read too, unless it would
    /// put in force what already is.
    pub fn catch_up(&self, poller: &FilePoller, origin: &str) {
        let Some(text) = poller.text() else { return };
        let current = self.router.config();
        let decided = decide(&self.args, text, origin, &self.started, &current);
        if !matches!(decided, Ok(r) if r.config == *current) {
            self.handle(Look::Changed(text.to_string()), origin);
        }
    }

    /// Carries out what a look at the file found; true when a new
    /// configuration was put in force.
    pub fn handle(&self, look: Look, origin: &str) -> bool {
        let now = Timestamp::now();
        let outcome = match look {
            Look::Unchanged => return false,
            Look::Unreadable(why) => Err(why),
            Look::Changed(text) => decide(
                &self.args,
                &text,
                origin,
                &self.started,
                &self.router.config(),
            ),
        };
        match outcome {
            Ok(reloaded) => {
                // Counted and marked healthy before the gates hear of it: a
                // gate may act on the new settings at once, and whoever sees
                // that act must find the reload already on /readyz and on
                // the next /metrics page (scrapes within a second share one).
                self.metrics.config.reload_applied(now.as_second());
                self.health
                    .config_applied(now, reloaded.needs_restart.clone());
                let gates = self.router.reconfigure(Arc::new(reloaded.config));
                tracing::info!(
                    file = origin,
                    live_gates = gates,
                    "config reloaded: the new settings are in force; live gates re-examined"
                );
                if !reloaded.retired.is_empty() {
                    tracing::warn!(
                        file = origin,
                        taints = %reloaded.retired.join(", "),
                        "config reload: these taints are no longer configured; nodegate still removes them from nodes (never adds them) until it restarts"
                    );
                }
                if !reloaded.needs_restart.is_empty() {
                    tracing::warn!(
                        file = origin,
                        keys = %reloaded.needs_restart.join(", "),
                        "config reload: these keys changed but only a restart applies them; their start values stay in force"
                    );
                }
                true
            }
            Err(why) => {
                self.metrics.config.reload_refused();
                tracing::error!(
                    file = origin,
                    "config reload refused, the settings in force stay: {why}"
                );
                self.health.config_refused(now, why);
                false
            }
        }
    }
}

/// Polls `path` and listens for SIGHUP until `shutdown` changes. Without a
/// `--config` file, SIGHUP is only logged (the flags cannot change).
pub fn spawn(
    reloader: Reloader,
    path: Option<PathBuf>,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut poller = path.as_deref().map(FilePoller::new);
        let origin = path.as_ref().map(|p| p.display().to_string());
        let origin = origin.unwrap_or_default();
        if let Some(p) = &poller {
            reloader.catch_up(p, &origin);
        }
        let mut hangup = hangups();
        loop {
            let force = tokio::select! {
                _ = tokio::time::sleep(POLL), if poller.is_some() => false,
                _ = next_hangup(&mut hangup) => true,
                _ = shutdown.changed() => return,
            };
            match poller.as_mut() {
                Some(p) => {
                    if force {
                        tracing::info!(file = origin, "SIGHUP: reading the config file again");
                    }
                    reloader.handle(p.look(force), &origin);
                }
                None => tracing::info!("SIGHUP: no --config file to read again; nothing changes"),
            }
        }
    })
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = Option<()>;

#[cfg(unix)]
fn hangups() -> Hangups {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; the config file is still polled");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Hangups {
    None
}

/// The next SIGHUP; never, without a listener.
#[cfg(unix)]
async fn next_hangup(h: &mut Hangups) {
    match h {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangups) {
    std::future::pending::<()>().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::leader::Leadership;
    use crate::settings::cli::{Cli, Command};
    use crate::settings::config::run_settings;
    use clap::Parser;
    use nodegate_core::vocab::config::Config;

    fn reloader() -> Reloader {
        let args = match Cli::try_parse_from(["nodegate", "run"]).map(|c| c.command) {
            Ok(Command::Run(r)) => *r,
            other => panic!("not run: {other:?}"),
        };
        let started = run_settings(&args).expect("defaults are valid");
        Reloader {
            router: Arc::new(Router::new(Arc::new(Config::from(&started)))),
            metrics: Arc::new(Metrics::new(Arc::new(Leadership::always()))),
            health: Arc::new(ProcessHealth::default()),
            args,
            started,
        }
    }

    fn series(r: &Reloader, name: &str) -> Option<String> {
        let text = r.metrics.encode().expect("encode");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_string))
    }

    #[test]
    fn a_refused_reload_is_counted_and_shown_and_changes_nothing() {
        let r = reloader();
        let before = r.router.config();
        assert!(!r.handle(Look::Changed("timeout: soon\n".into()), "c.yaml"));
        assert_eq!(r.router.config(), before, "the settings in force stay");
        assert_eq!(
            series(&r, "nodegate_config_reload_failures_total").as_deref(),
            Some("1")
        );
        assert_eq!(
            series(&r, "nodegate_config_last_reload_successful").as_deref(),
            Some("0")
        );
        let shown: Vec<String> = r
            .health
            .config_checks()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(shown.iter().any(|l| l.contains("\"soon\"")), "{shown:?}");
        // Unreadable: refused too.
        assert!(!r.handle(Look::Unreadable("cannot read c.yaml".into()), "c.yaml"));
        assert_eq!(
            series(&r, "nodegate_config_reload_failures_total").as_deref(),
            Some("2")
        );
    }

    #[test]
    fn an_applied_reload_is_in_force_counted_and_clears_the_error() {
        let r = reloader();
        assert!(!r.handle(Look::Changed("suspend: maybe\n".into()), "c.yaml"));
        assert!(r.handle(Look::Changed("suspend: true\n".into()), "c.yaml"));
        assert!(r.router.config().suspend);
        assert_eq!(
            series(&r, "nodegate_config_reloads_total").as_deref(),
            Some("1")
        );
        assert_eq!(
            series(&r, "nodegate_config_last_reload_successful").as_deref(),
            Some("1")
        );
        assert_eq!(r.health.config_checks().len(), 1, "the error is cleared");
        assert!(!r.handle(Look::Unchanged, "c.yaml"), "nothing to do");
    }

    #[test]
    fn catching_up_applies_only_a_file_that_changed_since_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.yaml");
        let r = reloader();
        // As at start (the defaults): nothing is counted.
        std::fs::write(&path, "timeout: 120s\n").expect("write");
        r.catch_up(&FilePoller::new(&path), "c.yaml");
        assert_eq!(
            series(&r, "nodegate_config_reloads_total").as_deref(),
            Some("0")
        );
        // Changed meanwhile: applied.
        std::fs::write(&path, "suspend: true\n").expect("write");
        r.catch_up(&FilePoller::new(&path), "c.yaml");
        assert!(r.router.config().suspend);
        // Broken meanwhile: refused and shown.
        std::fs::write(&path, "suspend: maybe\n").expect("write");
        r.catch_up(&FilePoller::new(&path), "c.yaml");
        assert_eq!(
            series(&r, "nodegate_config_reload_failures_total").as_deref(),
            Some("1")
        );
    }
}
