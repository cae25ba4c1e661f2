//! `nodegate run`: wires the HTTP server, metrics, leader election,
//! watchers, router, supervisor and executor together, then waits for
//! SIGTERM / SIGINT and shuts down in order (lease released first). The
//! config file is reloaded without a restart by [`reload`].
//! Wiring only: no behaviour of its own. What fails before the watches start
//! (credentials, the HTTP port, the supervisor) is returned as a
//! [`crate::Error`] for `main` to log and exit on.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use nodegate_actors::live::LiveConfig;
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::observe::{GateObserver, RouterEvent};
use nodegate_actors::router::Router;
use nodegate_actors::supervisor;
use nodegate_core::gate::{Event, GateConfig, GateState};
use nodegate_core::journal::{self, Journal};
use tokio::sync::watch as signal;

use crate::cluster::client::client;
use crate::cluster::executor::{KubeExecutor, SystemClock};
use crate::cluster::leader::{self, Elector, Leadership};
use crate::cluster::server_time::ServerTime;
use crate::cluster::watch::{self, WatchStats};
use crate::cluster::writer::Writer;
use crate::error::{Error, Result};
use crate::serve::health::ProcessHealth;
use crate::serve::history::History;
use crate::serve::http::{self, AppState, DebugState};
use crate::serve::metrics::Metrics;
use crate::settings::cli::RunArgs;
use crate::settings::config::RunSettings;
use crate::trace::{self, TraceSink};

pub mod deciders;
pub mod reload;

/// The identity this replica reports in Events (`reportingInstance`); its
/// Lease identity is this plus a random suffix (`leader::identity`).
pub fn instance_name() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("nodegate-{}", std::process::id()))
}

/// Feeds what the router and the gates report to the metrics and to the
/// debug history.
struct Observers {
    metrics: Arc<Metrics>,
    history: Arc<History>,
    /// `None` unless traces are exported (`--otlp-endpoint`).
    traces: Option<TraceSink>,
}

impl GateObserver for Observers {
    fn router_event(&self, event: RouterEvent, routed: bool) {
        self.metrics.router_event(event, routed);
    }
    fn gate_started(&self, node: &str, generation: u64) {
        self.metrics.gate_started(node, generation);
    }
    fn gate_step(&self, node: &str, at: Timestamp, events: &[Event], state: &GateState) {
        self.metrics.gate_step(node, at, events, state);
    }
    fn gate_stopped(&self, node: &str, generation: u64, state: &GateState, journal: &Journal) {
        self.metrics.gate_stopped(node, generation);
        self.history.gate_stopped(node, state, journal);
        if let Some(traces) = &self.traces {
            traces.gate_stopped(state, journal);
        }
    }
}

/// The Lease's namespace: the flag, else the pod's own namespace (downward
/// API), else the kubeconfig's (or in-cluster service account's) namespace.
pub fn lease_namespace(
    flag: Option<&str>,
    pod_namespace: Option<&str>,
    client_default: &str,
) -> String {
    flag.or(pod_namespace.filter(|ns| !ns.is_empty()))
        .unwrap_or(client_default)
        .to_string()
}

/// `args` are kept to re-read the config file under the same flags.
pub async fn run(args: RunArgs, settings: RunSettings) -> Result<()> {
    // The OTEL_* variables are checked before anything else starts.
    let trace_config =
        trace::config::from_settings(settings.otlp_endpoint.as_deref(), &instance_name())?;
    let client = client().await?;
    // The gate configuration in force: read by the router, every gate and
    // the entrances; replaced whole by a config reload.
    let live = Arc::new(LiveConfig::new(Arc::new(GateConfig::from(&settings))));
    let router = Arc::new(Router::with_live(Arc::clone(&live)));
    let election = &settings.leader_election;
    let leadership = Arc::new(if election.enabled {
        Leadership::follower()
    } else {
        Leadership::always()
    });
    let metrics = Arc::new(Metrics::new(Arc::clone(&leadership)));
    let history = Arc::new(History::new(settings.debug_history));
    // Evidence of the API server's clock, gathered by the watches, the
    // election and a probe, read by every gate's deadline and every decider.
    let server_time = Arc::new(ServerTime::new());
    let (shutdown, shutdown_rx) = signal::channel(false);
    // Each opened gate as a trace, when a collector is named.
    let (traces, trace_task) = match trace_config {
        Some(config) => {
            tracing::info!(url = %config.url, "exporting each gate as an OpenTelemetry trace");
            let (sink, task) =
                trace::export::start(config, metrics.traces.clone(), shutdown_rx.clone());
            (Some(sink), Some(task))
        }
        None => (None, None),
    };
    router.set_observer(Arc::new(Observers {
        metrics: Arc::clone(&metrics),
        history: Arc::clone(&history),
        traces,
    }));
    let health = Arc::new(ProcessHealth::default());
    let config_file = args.gate.config.clone();
    health.config_started(
        config_file.as_ref().map(|p| p.display().to_string()),
        Timestamp::now(),
    );
    metrics.config.started(Timestamp::now().as_second());
    let stats = Arc::new(WatchStats::default());

    // The HTTP server comes first, so that probes answer (and say "not
    // ready") while the initial lists load.
    let (_, http_task) = http::serve(
        settings.http_addr,
        AppState {
            router: Arc::clone(&router),
            metrics: Arc::clone(&metrics),
            watch_stats: Arc::clone(&stats),
            health: Arc::clone(&health),
        },
        shutdown_rx.clone(),
    )
    .await?;
    // The admission webhook answers from here on, leader or not.
    let webhook = match &settings.webhook {
        Some(w) => Some(
            crate::serve::webhook::start(
                w,
                &client,
                Arc::clone(&live),
                Arc::clone(&metrics),
                shutdown_rx.clone(),
            )
            .await?,
        ),
        None => None,
    };
    let debug_task = match settings.debug_addr {
        Some(addr) => Some(
            http::serve_debug(
                addr,
                DebugState::new(Arc::clone(&router), history),
                shutdown_rx.clone(),
            )
            .await?
            .1,
        ),
        None => None,
    };

    let writer = Writer::new(
        client.clone(),
        settings.max_concurrent_patches,
        settings.kube_qps,
        settings.kube_burst,
        settings.kube_request_timeout,
        instance_name(),
    )
    .with_timings(Arc::clone(&metrics.writes));
    let executor = Arc::new(KubeExecutor {
        writer,
        leader: Arc::clone(&leadership),
        metrics: Arc::clone(&metrics),
    });
    let clock = Arc::new(SystemClock {
        server_time: Arc::clone(&server_time),
    });
    // The deciders beside the gates, each on the router's change feed,
    // writing through the same executor (slots, rate, leadership).
    let decider_tasks = deciders::start(
        &settings,
        &router,
        &executor,
        &clock,
        &metrics,
        &shutdown_rx,
    );
    let ctx = Arc::new(GateContext {
        router: Arc::clone(&router),
        executor,
        clock,
        journal_capacity: journal::DEFAULT_CAPACITY,
    });
    let (supervisor, supervisor_done) = supervisor::start(ctx).await.map_err(Error::Supervisor)?;
    let supervisor_task = {
        let health = Arc::clone(&health);
        tokio::spawn(async move {
            let _ = supervisor_done.await;
            health.supervisor_stopped();
        })
    };

    let elector_task = if election.enabled {
        let namespace = lease_namespace(
            election.lease_namespace.as_deref(),
            std::env::var("POD_NAMESPACE").ok().as_deref(),
            client.default_namespace(),
        );
        let elector = Elector::new(
            client.clone(),
            &namespace,
            election,
            leader::identity(&instance_name()),
            Arc::clone(&server_time),
        );
        let gained = Arc::clone(&router);
        let health = Arc::clone(&health);
        let leadership = Arc::clone(&leadership);
        let stop = shutdown_rx.clone();
        Some(tokio::spawn(async move {
            // Leadership first (inside `run`), then the gates are told:
            // a gate that re-sends at once must find the executor willing.
            elector
                .run(leadership, move || gained.leadership_gained(), stop)
                .await;
            health.elector_stopped();
        }))
    } else {
        None
    };

    tracing::info!(
        taints = ?settings.gate.placement.managed_taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>(),
        timeout = ?settings.timeout,
        on_timeout = ?settings.on_timeout,
        dry_run = settings.dry_run,
        leader_elect = election.enabled,
        webhook = settings.webhook.as_ref().map(|w| w.addr.to_string()),
        taint_new_nodes = settings.net.enabled,
        regate_after = ?settings.gate.regate.as_ref().map(|r| r.after),
        "nodegate starting"
    );

    let reload_task = reload::spawn(
        reload::Reloader {
            args,
            started: settings.clone(),
            router: Arc::clone(&router),
            metrics,
            health: Arc::clone(&health),
        },
        config_file,
        shutdown_rx.clone(),
    );

    let mut synced = watch::start(
        client,
        Arc::clone(&router),
        &settings.gate.critical,
        stats,
        server_time,
    )
    .await;
    let watches = watch::watch_count(&settings.gate.critical);
    let sync = async {
        for _ in 0..watches {
            match synced.recv().await {
                Some(kind) => tracing::debug!(kind, "initial list complete"),
                // Every watch ended before its first list: never report
                // synced (no gate may start on a partial view); /healthz
                // names the stopped watches.
                None => std::future::pending::<()>().await,
            }
        }
    };
    let stopped_early = tokio::select! {
        _ = sync => {
            router.mark_synced();
            tracing::info!(gates = router.gate_count(), "watches synced; gating");
            false
        }
        _ = shutdown_signal() => true,
    };
    if !stopped_early {
        shutdown_signal().await;
    }
    tracing::info!("shutting down");

    // The elector steps down and releases the lease before anything else
    // stops, so a follower takes over while this replica winds down.
    let _ = shutdown.send(true);
    if let Some(task) = elector_task {
        let wait = election.renew_deadline + Duration::from_secs(1);
        let _ = tokio::time::timeout(wait, task).await;
    }
    supervisor.stop(Some("shutdown".into()));
    let _ = tokio::time::timeout(Duration::from_secs(5), supervisor_task).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), http_task).await;
    if let Some(task) = debug_task {
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), reload_task).await;
    for task in decider_tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    if let Some(w) = webhook {
        w.stopped(Duration::from_secs(2)).await;
    }
    // After the gates: the traces of those that stopped are queued by now.
    if let Some(task) = trace_task {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_namespace_prefers_the_flag_then_the_pod_then_the_client() {
        assert_eq!(lease_namespace(Some("ops"), Some("ng"), "default"), "ops");
        assert_eq!(lease_namespace(None, Some("ng"), "default"), "ng");
        assert_eq!(lease_namespace(None, Some(""), "team"), "team");
        assert_eq!(lease_namespace(None, None, "team"), "team");
    }
}
