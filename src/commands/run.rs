//! `nodegate run`: wiring only, in named phases and one shutdown order
//! (`Running::stop`); the config file is reloaded without a restart by
//! [`reload`]. What fails before the watches start (credentials, the HTTP
//! port, the supervisor) is a [`crate::Error`] for `main` to log and exit on.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use nodegate_actors::live::LiveConfig;
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::observe::{GateObserver, RouterEvent};
use nodegate_actors::router::Router;
use nodegate_actors::supervisor;
use nodegate_core::gate::journal::{self, Journal};
use nodegate_core::gate::{Event, GateState};
use nodegate_core::vocab::config::Config;
use ractor::ActorRef;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

use crate::cluster::admission_params::{AdmissionParams, OwnPod};
use crate::cluster::canary::Canaries;
use crate::cluster::client::client;
use crate::cluster::leader::{self, Elector, Leadership};
use crate::cluster::server_time::{ServerTime, SystemClock};
use crate::cluster::watch::{self, WatchStats};
use crate::cluster::writer::Writer;
use crate::commands::output;
use crate::error::{Error, Result};
use crate::serve::health::ProcessHealth;
use crate::serve::history::History;
use crate::serve::http::{self, AppState, DebugState};
use crate::serve::metrics::Metrics;
use crate::serve::webhook::Webhook;
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

/// Feeds what the router and the gates report to the metrics, the debug
/// history and the traces.
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

/// How long `run` waits, at start, for the API server to answer before it
/// exits 1 (its help and docs/operations.md say so): a cluster that is
/// down or named wrongly is said in a minute rather than retried for ever,
/// and a pod restarts with the kubelet's backoff.
pub const START_WAIT: Duration = Duration::from_secs(30);

/// Asks the API server its version until it answers (any answer, even a
/// refusal, is an answer: what the credentials may do is the watches'
/// business), at most [`START_WAIT`]; the first failure is logged once,
/// and the last one is returned.
async fn wait_for_api_server(client: &kube::Client) -> Result<()> {
    let deadline = tokio::time::Instant::now() + START_WAIT;
    let mut said = false;
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(10), client.apiserver_version());
        let failure = match attempt.await {
            Ok(Ok(_)) | Ok(Err(kube::Error::Api(_))) => return Ok(()),
            Ok(Err(e)) => Error::kube("asking the API server its version")(e),
            Err(_) => Error::invalid("the API server", "did not answer within 10 s"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::context(format!(
                "no answer within {} s of start",
                START_WAIT.as_secs()
            ))(failure));
        }
        if !said {
            tracing::warn!(
                "{}; retrying for up to {} s",
                failure.report(),
                START_WAIT.as_secs()
            );
            said = true;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// What every part of a running controller shares, built before anything
/// starts.
struct Shared {
    client: kube::Client,
    /// The gate configuration in force, replaced whole by a config reload.
    live: Arc<LiveConfig>,
    router: Arc<Router>,
    leadership: Arc<Leadership>,
    metrics: Arc<Metrics>,
    history: Arc<History>,
    health: Arc<ProcessHealth>,
    /// Evidence of the API server's clock, which every deadline is read by.
    server_time: Arc<ServerTime>,
    stats: Arc<WatchStats>,
    stop: signal::Receiver<bool>,
}

/// How long the webhook keeps serving after SIGTERM, while the Service
/// still sends calls here (kube-proxy's endpoint update takes about a
/// second; the Pod's grace period is 30 s).
const WEBHOOK_DRAIN: Duration = Duration::from_secs(5);

/// Every task `run` started, stopped in [`Running::stop`]'s order.
struct Running {
    elector: Option<JoinHandle<()>>,
    admission_params: Option<JoinHandle<()>>,
    supervisor: ActorRef<supervisor::SupervisorMsg>,
    supervisor_task: JoinHandle<()>,
    http: JoinHandle<()>,
    debug: Option<JoinHandle<()>>,
    reload: JoinHandle<()>,
    deciders: Vec<deciders::Task>,
    webhook: Option<Webhook>,
    traces: Option<JoinHandle<()>>,
}

/// `args` are kept to re-read the config file under the same flags.
pub async fn run(args: RunArgs, settings: RunSettings) -> Result<()> {
    // The OTEL_* variables are checked before anything else starts.
    let trace_config =
        trace::config::from_settings(settings.otlp_endpoint.as_deref(), &instance_name())?;
    let (shutdown, stop) = signal::channel(false);
    // The webhook's own: it stops last, [`WEBHOOK_DRAIN`] after the signal.
    let (webhook_shutdown, webhook_stop) = signal::channel(false);
    let shared = Shared::new(&settings, args.gate.config.as_deref(), stop).await?;
    let history = Arc::clone(&shared.history);
    tokio::spawn(History::settle_every(
        history,
        crate::serve::history::SETTLE,
    ));
    // Before anything may lead: what an earlier run of this Pod wrote goes.
    let params = admission_params_of(&shared, &settings).await;
    let traces = observe(&shared, trace_config);
    // The HTTP server comes first, so that probes answer (and say "not
    // ready") while the initial lists load.
    let (http, webhook, debug) = serve(&shared, &settings, webhook_stop).await?;
    let (supervisor, supervisor_task, deciders) = start_writers(&shared, &settings).await?;
    let elector = start_elector(&shared, &settings);
    // A trial writes nothing: no parameters, so the policy taints nothing.
    let admission_params = params.filter(|_| !settings.given.dry_run).map(|p| {
        p.spawn(
            Arc::clone(&shared.live),
            Arc::clone(&shared.leadership),
            Arc::clone(&shared.router),
            shared.stop.clone(),
        )
    });
    let duration = |d: Option<Duration>| {
        d.map_or("off".to_string(), |d| {
            humantime::format_duration(d).to_string()
        })
    };
    tracing::info!(
        taints = %output::joined(settings.gate.placement.managed_taints.iter().map(|t| format!("{}:{}", t.key, t.effect)), ","),
        timeout = %duration(settings.timeout),
        on_timeout = %settings.given.on_timeout,
        dry_run = settings.given.dry_run,
        leader_elect = settings.leader_election.enabled,
        webhook = %settings.webhook.as_ref().map_or("off".to_string(), |w| w.addr.to_string()),
        taint_new_nodes = settings.net.enabled,
        regate_after = %duration(settings.gate.regate.as_ref().map(|r| r.after)),
        workers = tokio::runtime::Handle::current().metrics().num_workers(),
        "nodegate starting"
    );
    let reload = reload::spawn(
        reload::Reloader {
            args: args.clone(),
            started: settings.clone(),
            router: Arc::clone(&shared.router),
            metrics: Arc::clone(&shared.metrics),
            health: Arc::clone(&shared.health),
        },
        args.gate.config.clone(),
        shared.stop.clone(),
    );
    let running = Running {
        elector,
        admission_params,
        supervisor,
        supervisor_task,
        http,
        debug,
        reload,
        deciders,
        webhook,
        traces,
    };
    if watch_until_synced(&shared, &settings).await {
        shutdown_signal().await;
    }
    tracing::info!("shutting down");
    let _ = shutdown.send(true);
    running.stop(&settings, webhook_shutdown).await;
    Ok(())
}

impl Shared {
    async fn new(
        settings: &RunSettings,
        config_file: Option<&std::path::Path>,
        stop: signal::Receiver<bool>,
    ) -> Result<Self> {
        let client = client().await?;
        wait_for_api_server(&client).await?;
        let live = Arc::new(LiveConfig::new(Arc::new(Config::from(settings))));
        let leadership = Arc::new(if settings.leader_election.enabled {
            Leadership::follower()
        } else {
            Leadership::always()
        });
        let metrics = Arc::new(Metrics::new(Arc::clone(&leadership)));
        if settings.given.drop_node_metrics {
            metrics.drop_node_series();
        }
        let health = Arc::new(ProcessHealth::default());
        health.config_started(
            config_file.map(|p| p.display().to_string()),
            Timestamp::now(),
        );
        metrics.config.applied_at.set(Timestamp::now().as_second());
        let server_time = Arc::new(ServerTime::counting(metrics.server_time_refused.clone()));
        Ok(Shared {
            client,
            router: Arc::new(Router::with_live(Arc::clone(&live))),
            live,
            leadership,
            metrics,
            history: Arc::new(History::new(settings.given.debug_history)),
            health,
            server_time,
            stats: Arc::new(WatchStats::default()),
            stop,
        })
    }
}

/// Sets the router's observer; the trace export's task, when one is named.
fn observe(
    shared: &Shared,
    trace_config: Option<trace::config::TraceConfig>,
) -> Option<JoinHandle<()>> {
    let (traces, task) = trace_config
        .map(|config| {
            tracing::info!(url = %config.url, "exporting each gate as an OpenTelemetry trace");
            trace::export::start(config, shared.metrics.traces.clone(), shared.stop.clone())
        })
        .unzip();
    shared.router.set_observer(Arc::new(Observers {
        metrics: Arc::clone(&shared.metrics),
        history: Arc::clone(&shared.history),
        traces,
    }));
    task
}

/// The HTTP server (probes, metrics), the admission webhook (every replica,
/// leader or not; in the background, where its certificate is retried, so
/// it never fails or holds up the start) and the debug listener.
async fn serve(
    shared: &Shared,
    settings: &RunSettings,
    webhook_stop: signal::Receiver<bool>,
) -> Result<(JoinHandle<()>, Option<Webhook>, Option<JoinHandle<()>>)> {
    let state = AppState {
        router: Arc::clone(&shared.router),
        metrics: Arc::clone(&shared.metrics),
        watch_stats: Arc::clone(&shared.stats),
        health: Arc::clone(&shared.health),
    };
    let (_, http) = http::serve(settings.http_addr, state, shared.stop.clone()).await?;
    let webhook = settings.webhook.as_ref().map(|w| {
        let cx = crate::serve::webhook::Context {
            client: shared.client.clone(),
            live: Arc::clone(&shared.live),
            metrics: Arc::clone(&shared.metrics),
            health: Arc::clone(&shared.health),
            server_time: Arc::clone(&shared.server_time),
        };
        crate::serve::webhook::start(w, cx, webhook_stop)
    });
    let state = DebugState::new(Arc::clone(&shared.router), Arc::clone(&shared.history));
    let debug = match settings.debug_addr {
        Some(addr) => Some(http::serve_debug(addr, state, shared.stop.clone()).await?.1),
        None => None,
    };
    Ok((http, webhook, debug))
}

/// The one node writer, the deciders and the supervisor of the gates.
async fn start_writers(
    shared: &Shared,
    settings: &RunSettings,
) -> Result<(
    ActorRef<supervisor::SupervisorMsg>,
    JoinHandle<()>,
    Vec<deciders::Task>,
)> {
    let canaries = settings.gate.canary.as_ref().map(|c| Canaries {
        namespace: c.core.namespace.clone(),
        pod: c.pod.clone(),
        tolerate: settings.gate.placement.managed_taints.clone(),
    });
    let writer = Writer::new(
        shared.client.clone(),
        settings.given.max_concurrent_patches,
        settings.given.kube_qps,
        settings.given.kube_burst,
        settings.kube_request_timeout,
        instance_name(),
    )
    .serving(
        Arc::clone(&shared.leadership),
        Arc::clone(&shared.metrics),
        canaries,
    );
    let executor = Arc::new(writer);
    let clock = Arc::new(SystemClock {
        server_time: Arc::clone(&shared.server_time),
    });
    let deciders = deciders::start(
        settings,
        &shared.router,
        &executor,
        &clock,
        &shared.metrics,
        &shared.stop,
    );
    let ctx = Arc::new(GateContext {
        router: Arc::clone(&shared.router),
        executor,
        clock,
        journal_capacity: journal::DEFAULT_CAPACITY,
    });
    let (supervisor, done) = supervisor::start(ctx).await.map_err(Error::Supervisor)?;
    let health = Arc::clone(&shared.health);
    let task = tokio::spawn(async move {
        let _ = done.await;
        health.supervisor_stopped();
    });
    Ok((supervisor, task, deciders))
}

/// `--admission-params`: the parameters this replica keeps while it leads,
/// after deleting what an earlier run of its Pod left (a crash loop must
/// not keep the policy tainting nodes no one opens).
async fn admission_params_of(shared: &Shared, settings: &RunSettings) -> Option<AdmissionParams> {
    let at = settings.admission_params.as_ref()?;
    let namespace = pod_namespace_or(None, shared.client.default_namespace());
    let params = AdmissionParams::new(shared.client.clone(), at, &namespace, OwnPod::from_env());
    // Bounded, its outcome logged.
    match tokio::time::timeout(Duration::from_secs(10), params.forget_earlier_run()).await {
        Ok(Ok(true)) => tracing::warn!(
            "deleted the admission policy parameters an earlier run of this pod wrote (it exited or was killed); \
             new nodes are not tainted at creation until a replica leads again"
        ),
        Ok(Ok(false)) => {}
        Ok(Err(error)) => {
            tracing::warn!(%error, "cannot check the admission policy parameters an earlier run may have left")
        }
        Err(_) => tracing::warn!(
            "no answer within 10 s checking the admission policy parameters an earlier run may have left"
        ),
    }
    Some(params)
}

/// `flag`, else the Pod's own namespace, else the kubeconfig's (or service
/// account's): the Lease's, and `--admission-params`' when it names none.
fn pod_namespace_or(flag: Option<&str>, client_default: &str) -> String {
    let pod = std::env::var("POD_NAMESPACE").ok();
    lease_namespace(flag, pod.as_deref(), client_default)
}

/// For a `run` whose settings were refused (the pod will crash-loop): the
/// parameters its Pod wrote in an earlier run are deleted all the same,
/// when `--admission-params` itself reads.
pub async fn forget_on_refusal(args: &RunArgs) {
    let given = args.flags.admission_params.as_deref();
    let at = given.map(crate::settings::config::admission_params_ref);
    let (Some(Ok(at)), Some(owner)) = (at, OwnPod::from_env()) else {
        return;
    };
    let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(10), client()).await else {
        return;
    };
    let namespace = pod_namespace_or(None, client.default_namespace());
    let params = AdmissionParams::new(client, &at, &namespace, Some(owner));
    if let Ok(Ok(true)) =
        tokio::time::timeout(Duration::from_secs(10), params.forget_earlier_run()).await
    {
        eprintln!(
            "nodegate: deleted the admission policy parameters an earlier run of this pod wrote: \
             new nodes are not tainted at creation until a replica leads again"
        );
    }
}

/// The leader election, with `--leader-elect`: leadership first (inside the
/// elector), then the gates and the deciders are told, so that a write
/// re-sent at once finds the executor willing.
fn start_elector(shared: &Shared, settings: &RunSettings) -> Option<JoinHandle<()>> {
    let election = &settings.leader_election;
    if !election.enabled {
        return None;
    }
    let flag = election.lease_namespace.as_deref();
    let namespace = pod_namespace_or(flag, shared.client.default_namespace());
    let elector = Elector::new(
        shared.client.clone(),
        &namespace,
        election,
        leader::identity(&instance_name()),
        Arc::clone(&shared.server_time),
    );
    let gained = Arc::clone(&shared.router);
    let health = Arc::clone(&shared.health);
    let leadership = Arc::clone(&shared.leadership);
    let stop = shared.stop.clone();
    Some(tokio::spawn(async move {
        elector
            .run(leadership, move || gained.leadership_gained(), stop)
            .await;
        health.elector_stopped();
    }))
}

/// Starts the watches and waits for every initial list, then lets the
/// router start gating. False when a shutdown signal came first.
async fn watch_until_synced(shared: &Shared, settings: &RunSettings) -> bool {
    let critical = &settings.gate.critical;
    let canary = settings.gate.canary.as_ref().map(|c| &c.core);
    let mut synced = watch::start(
        shared.client.clone(),
        Arc::clone(&shared.router),
        (critical, canary),
        !settings.gate.dra_drivers.is_empty(),
        Arc::clone(&shared.stats),
        Arc::clone(&shared.server_time),
    )
    .await;
    let watches = watch::watch_count(critical, !settings.gate.dra_drivers.is_empty(), canary);
    let sync = async {
        for _ in 0..watches {
            // Each watch logs its own initial list. If every watch ended
            // before its first list: never report synced (no gate may
            // start on a partial view); /healthz names the stopped watches.
            if synced.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = sync => {
            shared.router.mark_synced();
            tracing::info!(gates = shared.router.gate_count(), "watches synced; gating");
            true
        }
        _ = shutdown_signal() => false,
    }
}

impl Running {
    /// The one shutdown order: the elector steps down and releases the
    /// lease before anything else stops, so a follower takes over while this
    /// replica winds down; then the gates, the listeners, the reloader and
    /// the deciders; the trace export last, when the traces of the gates
    /// that stopped are queued.
    ///
    /// The webhook alone keeps serving until [`WEBHOOK_DRAIN`] after the
    /// signal: the API server's calls reach a Pod being deleted until its
    /// Service stops routing to it, and a call refused then admits the node
    /// untainted (under `failurePolicy: Ignore`).
    async fn stop(self, settings: &RunSettings, webhook_shutdown: signal::Sender<bool>) {
        let drained = tokio::time::Instant::now() + WEBHOOK_DRAIN;
        let (short, long) = (Duration::from_secs(2), Duration::from_secs(5));
        let renewal = settings.leader_election.renew_deadline + Duration::from_secs(1);
        wait(renewal, self.elector).await;
        wait(long, self.admission_params).await;
        self.supervisor.stop(Some("shutdown".into()));
        wait(long, Some(self.supervisor_task)).await;
        wait(short, Some(self.http)).await;
        wait(short, self.debug).await;
        wait(short, Some(self.reload)).await;
        for task in self.deciders {
            wait(short, Some(task)).await;
        }
        if let Some(w) = self.webhook {
            tokio::time::sleep_until(drained).await;
            let _ = webhook_shutdown.send(true);
            w.stopped(short).await;
        }
        wait(long, self.traces).await;
    }
}

async fn wait(within: Duration, task: Option<impl std::future::Future>) {
    if let Some(task) = task {
        let _ = tokio::time::timeout(within, task).await;
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
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
        _ = tokio::signal::ctrl_c() => {}
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
