//! `nodegate run`: wires watchers, router, supervisor and executor together,
//! then waits for SIGTERM / SIGINT.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context as _;
use dashmap::DashMap;
use nodegate_actors::gate::{self, GateConfig};
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::router::Router;
use nodegate_actors::supervisor;

use crate::cli::OnTimeout;
use crate::config::RunSettings;
use crate::executor::{KubeExecutor, SystemClock};
use crate::watch::{self, WatchStats};
use crate::writer::Writer;

/// Entries kept per gate journal; enough for a long gate's every event on a
/// node with dozens of DaemonSets.
pub const JOURNAL_CAPACITY: usize = 512;

pub fn gate_config(s: &RunSettings) -> GateConfig {
    GateConfig {
        placement: s.gate.placement.clone(),
        critical: s.gate.critical.clone(),
        timeout: s.timeout,
        on_timeout: match s.on_timeout {
            OnTimeout::Open => gate::OnTimeout::Open,
            OnTimeout::Keep => gate::OnTimeout::Keep,
        },
        dry_run: s.dry_run,
    }
}

/// The identity this replica reports in Events and, later, the lease.
pub fn instance_name() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("nodegate-{}", std::process::id()))
}

pub async fn client() -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer()
        .await
        .context("cannot find cluster credentials (in-cluster service account or KUBECONFIG)")?;
    let agent = format!("nodegate/{}", env!("CARGO_PKG_VERSION"));
    if let Ok(v) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, v));
    }
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

pub async fn run(settings: RunSettings) -> anyhow::Result<()> {
    let client = client().await?;
    let config = Arc::new(gate_config(&settings));
    let router = Arc::new(Router::new(Arc::clone(&config)));
    let annotations = Arc::new(DashMap::new());
    let writer = Writer::new(
        client.clone(),
        settings.max_concurrent_patches,
        settings.kube_qps,
        settings.kube_burst,
        Arc::clone(&annotations),
        instance_name(),
    );
    let executor = Arc::new(KubeExecutor {
        writer,
        leader: Arc::new(AtomicBool::new(true)),
    });
    let ctx = Arc::new(GateContext {
        config: Arc::clone(&config),
        router: Arc::clone(&router),
        executor,
        clock: Arc::new(SystemClock),
        journal_capacity: JOURNAL_CAPACITY,
    });
    let (supervisor, supervisor_done) = supervisor::start(ctx)
        .await
        .context("cannot start the gate supervisor")?;

    tracing::info!(
        taints = ?settings.gate.placement.managed_taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>(),
        timeout = ?settings.timeout,
        on_timeout = ?settings.on_timeout,
        dry_run = settings.dry_run,
        "nodegate starting"
    );

    let stats = Arc::new(WatchStats::default());
    let mut synced = watch::start(
        client,
        Arc::clone(&router),
        annotations,
        &settings.gate.critical,
        stats,
    )
    .await;
    let watches = 3 + settings.gate.critical.len();
    let sync = async {
        for _ in 0..watches {
            if let Some(kind) = synced.recv().await {
                tracing::debug!(kind, "initial list complete");
            }
        }
    };
    tokio::select! {
        _ = sync => {
            router.mark_synced();
            tracing::info!(gates = router.gate_count(), "watches synced; gating");
        }
        _ = shutdown_signal() => {
            supervisor.stop(Some("shutdown before sync".into()));
            return Ok(());
        }
    }

    shutdown_signal().await;
    tracing::info!("shutting down");
    supervisor.stop(Some("shutdown".into()));
    let _ = tokio::time::timeout(Duration::from_secs(5), supervisor_done).await;
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
