//! Prometheus metrics: every series nodegate exports (docs/operations.md,
//! Metrics), and the per-gate records their durations need. Outcome metrics
//! are recorded by the leader only, so that summing them over replicas counts
//! every node once. Gate steps feed them: every hook takes short locks and
//! does arithmetic, never waits, and never talks to the cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use jiff::Timestamp;
use nodegate_actors::observe::RouterEvent;
use nodegate_actors::router::Router;
use nodegate_core::gate::{Event, GateState, OpenedBy, PatchOutcome, Phase};
use nodegate_core::vocab::config::OnTimeout;
use nodegate_core::vocab::member::MemberId;
use nodegate_core::word_enum;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use crate::cluster::leader::Leadership;
use crate::serve::lock;

mod entrances;
mod features;
mod writes;
pub use entrances::{AdmissionResult, CertProblem, EntranceMetrics, LateTaint};
pub use features::{CanaryMetrics, ConditionMetrics, RegateGauges, RegateMetrics, ReplaceMetrics};
use writes::PATCH_RESULTS;
pub use writes::{NodeWrite, WriteTimings, patch_result};

/// The Content-Type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Creation → open: seconds to many minutes.
const GATE_BUCKETS: [f64; 15] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1200.0,
];
/// Last member Ready → taint removed: milliseconds, unless a failover or a
/// conflict storm is in the way.
const REACTION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The labels of a family with one label: `[(NAME, value)]`.
type Label<V = &'static str> = [(&'static str, V); 1];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DaemonSetLabels {
    namespace: String,
    name: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlockerLabels {
    /// The member's kind: `daemonset`, `critical` (a critical-pod entry),
    /// `condition`, `resource`, `dra_driver` or `canary`.
    kind: &'static str,
    namespace: String,
    name: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PatchLabels {
    kind: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouterLabels {
    kind: &'static str,
    routed: &'static str,
}

/// What the metrics remember of one live gate.
#[derive(Debug, Default)]
struct GateTrack {
    generation: u64,
    start: Option<Timestamp>,
    phase: Phase,
    /// A re-gated node (`nodegate.dev/gated-since`): its DaemonSets were
    /// running long before, so they say nothing about time-to-Ready.
    regated: bool,
    /// Since when every expected member, and the node itself, has been Ready,
    /// as the gate saw it: since when it may open by readiness.
    all_ready_since: Option<Timestamp>,
    /// DaemonSets whose time-to-Ready was recorded for this node.
    ready_recorded: HashSet<String>,
}

pub struct Metrics {
    registry: Registry,
    /// The leadership this replica's metrics report.
    pub leadership: Arc<Leadership>,

    gated_nodes: Gauge,
    live_actors: Gauge,
    gate_age: Family<Label<String>, Gauge<f64, AtomicU64>>,
    gate_duration: Family<Label, Histogram>,
    reaction: Histogram,
    daemonset_ready: Family<DaemonSetLabels, Histogram>,
    timeout_blockers: Family<BlockerLabels, Counter>,
    gates_timed_out: Family<Label, Counter>,
    patch_attempts: Family<PatchLabels, Counter>,
    /// `router_events`' twelve series (the registry holds the family),
    /// looked up once: the router counts every watch event, and the family's
    /// lookup hashes its labels each time. Indexed by [`RouterEvent::ALL`]'s
    /// order, then routed.
    router_counters: [[Counter; 2]; RouterEvent::ALL.len()],
    leader: Gauge,
    leader_known: Gauge,
    /// Evidence of the API server's clock refused as implausible; counted
    /// by `cluster::server_time::ServerTime`.
    pub server_time_refused: Counter,
    watch_restarts: Counter,
    /// Entries in each map that grows with the nodes, set at each refresh: a
    /// map that keeps entries of nodes that are gone shows as a count that
    /// does not come back down (the scale benchmark's churn mode reads it).
    map_entries: Family<Label, Gauge>,
    /// The watchers' own restart count at the last refresh.
    watch_restarts_seen: AtomicU64,

    /// Per live gate; sharded, because every gate step touches it. Hashed
    /// with foldhash, seeded per process, as the router's maps are.
    gates: DashMap<String, GateTrack, foldhash::fast::RandomState>,
    /// `namespace/name` → uid of every DaemonSet with a labelled series, so
    /// that a refresh can drop the series of one that is gone.
    daemonset_series: Mutex<BTreeMap<String, String>>,
    /// Nodes that have a `gate_age` series.
    age_series: Mutex<HashSet<String>>,
    pub entrances: EntranceMetrics,
    pub config: ConfigMetrics,
    pub regate: RegateMetrics,
    pub replace: ReplaceMetrics,
    pub traces: TraceMetrics,
    pub conditions: ConditionMetrics,
    pub canary: CanaryMetrics,
    pub writes: Arc<WriteTimings>,
    /// The last `/metrics` page and when it was made ([`Self::page`]).
    scrape: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
}

/// How long one `/metrics` page serves every scrape.
pub const SCRAPE_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// Registers a new `M` as `nodegate_NAME` and returns it. Every call names
/// its family with a literal, which tests/docs.rs reads (so the two helpers
/// call `Registry::register` by its path: a method call of theirs would
/// look to that reading like one more family).
fn reg<M: Metric + Clone + Default>(r: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    Registry::register(r, name, help, metric.clone());
    metric
}

/// Registers `metric` as `nodegate_NAME` and returns it, like [`reg`].
fn reg_with<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, metric: M) -> M {
    Registry::register(r, name, help, metric.clone());
    metric
}

/// A count as a gauge's value.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// Registers every family, in the order they are exported: the other
    /// types' families first, then `Metrics`'s own, then `build_info`.
    pub fn new(leadership: Arc<Leadership>) -> Metrics {
        let mut registry = Registry::with_prefix("nodegate");
        let r = &mut registry;
        // Every router series exists from the start, and the router counts
        // into the family's own counters (a `Counter` clone shares its value).
        let router_events: Family<RouterLabels, Counter> = reg(
            r,
            "router_events",
            "Watch events handled by the router, by kind and whether they went on to a live gate",
        );
        let router_counters = RouterEvent::ALL.map(|event| {
            ["false", "true"].map(|routed| {
                router_events.get_or_create_owned(&RouterLabels {
                    kind: event.as_str(),
                    routed,
                })
            })
        });
        let m = Metrics {
            map_entries: reg(
                r,
                "map_entries",
                "Entries in each of nodegate's maps that grow with the nodes, by map (router_gates, router_opened_at_version, index_nodes, index_daemonsets, index_pod_nodes, index_pods, index_csi_drivers, index_resource_slice_nodes, metrics_gates, metrics_gate_age_series, metrics_daemonset_series, metrics_regated_age_series)",
            ),
            entrances: EntranceMetrics::register(r),
            config: ConfigMetrics::register(r),
            regate: RegateMetrics::register(r),
            replace: ReplaceMetrics::register(r),
            traces: TraceMetrics::register(r),
            conditions: ConditionMetrics::register(r),
            canary: CanaryMetrics::register(r),
            writes: Arc::new(WriteTimings::register(r)),
            gated_nodes: reg(
                r,
                "gated_nodes",
                "Nodes whose gate is closed now (waiting, opening, or kept closed after a timeout)",
            ),
            live_actors: reg(
                r,
                "live_actors",
                "Gate actors running now (one per gated node)",
            ),
            gate_age: reg(
                r,
                "gate_age_seconds",
                "Seconds since the gate of each closed node started (creation or nodegate.dev/gated-since)",
            ),
            gate_duration: reg_with(
                r,
                "gate_duration_seconds",
                "Gate start (node creation or gated-since) to taint removed, by outcome (ready | timeout | manual); leader only",
                Family::new_with_constructor(|| Histogram::new(GATE_BUCKETS)),
            ),
            reaction: reg_with(
                r,
                "reaction_seconds",
                "Every expected member and the node Ready (as observed) to taint removed; leader only",
                Histogram::new(REACTION_BUCKETS),
            ),
            daemonset_ready: reg_with(
                r,
                "daemonset_ready_seconds",
                "Node creation to the DaemonSet's pod Ready on that node, for new nodes; leader only",
                Family::new_with_constructor(|| Histogram::new(GATE_BUCKETS)),
            ),
            timeout_blockers: reg(
                r,
                "timeout_blockers",
                "Gate deadlines passed with this member not Ready, by member kind; leader only",
            ),
            gates_timed_out: reg(
                r,
                "gates_timed_out",
                "Gate deadlines passed, by --on-timeout action (open | keep | replace); leader only",
            ),
            patch_attempts: reg(
                r,
                "patch_attempts",
                "Writes sent to the API server, by kind (untaint | mark_timed_out) and result (ok | conflict | not_found | error)",
            ),
            router_counters,
            leader: reg(
                r,
                "leader",
                "1 while this replica holds the leader-election lease (always 1 without --leader-elect)",
            ),
            leader_known: reg(
                r,
                "leader_known",
                "1 while some replica leads as far as this one can tell: it leads, or a holder renewed the lease within 2 × --lease-duration (always 1 without --leader-elect); at 0 the webhook admits new nodes unchanged",
            ),
            server_time_refused: reg(
                r,
                "server_time_evidence_refused",
                "Evidence of the API server's clock refused because it was more than 5 minutes ahead of the server's latest Date header",
            ),
            watch_restarts: reg(
                r,
                "watch_restarts",
                "Watch streams that failed and were restarted",
            ),
            registry: {
                let build_info = Family::<Label, Gauge>::default();
                build_info
                    .get_or_create(&[("version", env!("CARGO_PKG_VERSION"))])
                    .set(1);
                registry.register("build_info", "Always 1; the version as a label", build_info);
                registry
            },
            leadership,
            watch_restarts_seen: AtomicU64::new(0),
            gates: DashMap::default(),
            daemonset_series: Mutex::new(BTreeMap::new()),
            age_series: Mutex::new(HashSet::new()),
            scrape: tokio::sync::Mutex::new(None),
        };
        m.zero_known_series();
        m.leader.set(i64::from(m.leadership.is_leader()));
        m.leader_known
            .set(i64::from(m.leadership.leader_known().is_ok()));
        m
    }

    /// Zeros for every label value known up front, so that each series
    /// exists before its first event.
    fn zero_known_series(&self) {
        for outcome in OpenedBy::ALL {
            self.gate_duration
                .get_or_create_owned(&[("outcome", outcome.as_str())]);
        }
        for action in OnTimeout::ALL {
            self.gates_timed_out
                .get_or_create_owned(&[("action", action.as_str())]);
        }
        for kind in [NodeWrite::Untaint, NodeWrite::MarkTimedOut] {
            for result in PATCH_RESULTS {
                self.patch_attempts.get_or_create_owned(&PatchLabels {
                    kind: kind.as_str(),
                    result,
                });
            }
        }
    }

    /// The registry in Prometheus / OpenMetrics text. Call [`Self::refresh`]
    /// first.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// One attempt of a gate's own write (`NodeWrite::Untaint` or
    /// `NodeWrite::MarkTimedOut`, the two kinds the series are made for).
    pub fn patch_attempt(&self, kind: NodeWrite, outcome: &PatchOutcome) {
        if let Some(result) = patch_result(outcome) {
            self.patch_attempts
                .get_or_create(&PatchLabels {
                    kind: kind.as_str(),
                    result,
                })
                .inc();
        }
    }

    /// The page for a scrape: the last one if it is younger than
    /// [`SCRAPE_REUSE`], else `make()` (one at a time; others wait for it).
    pub async fn page(
        &self,
        make: impl FnOnce() -> Result<String, std::fmt::Error>,
    ) -> Result<String, std::fmt::Error> {
        let mut last = self.scrape.lock().await;
        if let Some((at, text)) = last.as_ref()
            && at.elapsed() < SCRAPE_REUSE
        {
            return Ok(text.clone());
        }
        let text = make()?;
        *last = Some((std::time::Instant::now(), text.clone()));
        Ok(text)
    }

    /// `--drop-node-metrics`: from now on no per-node gauge
    /// (`gate_age_seconds{node}`, `regated_node_age_seconds{node}`).
    pub fn drop_node_series(&self) {
        self.regate.dropped.store(true, Ordering::Relaxed);
    }

    /// One node the late-taint net dealt with: `"tainted"`, `"skipped"` or
    /// `"failed"` (any other word counts as `"failed"`).
    pub fn late_taint(&self, result: &str) {
        let known = LateTaint::from_word(result).unwrap_or(LateTaint::Failed);
        let labels = [("result", known.as_str())];
        self.entrances.late_taints.get_or_create(&labels).inc();
    }

    pub fn router_event(&self, event: RouterEvent, routed: bool) {
        let i = RouterEvent::ALL.iter().position(|e| *e == event);
        if let Some(counters) = i.and_then(|i| self.router_counters.get(i)) {
            counters[usize::from(routed)].inc();
        }
    }

    pub fn gate_started(&self, node: &str, generation: u64) {
        self.gates.insert(
            node.to_string(),
            GateTrack {
                generation,
                ..GateTrack::default()
            },
        );
    }

    pub fn gate_step(&self, node: &str, at: Timestamp, events: &[Event], state: &GateState) {
        let leader = self.leadership.is_leader();
        // The node's name is copied only for its first step.
        let mut track = match self.gates.get_mut(node) {
            Some(track) => track,
            None => self.gates.entry(node.to_string()).or_default(),
        };
        track.start = state.gate_start();
        track.phase = state.phase;
        track.regated = state.node.as_ref().is_some_and(|n| n.gated_since.is_some());
        for event in events {
            match event {
                Event::MemberReady {
                    member: MemberId::DaemonSet(key),
                    pod,
                } if leader && !track.regated => {
                    if let Some(start) = track.start
                        && track.ready_recorded.insert(key.to_string())
                        && let Some(labels) = self.daemonset_labels(key, state)
                    {
                        // The pod's own Ready transition is the truth (and
                        // survives a restart of nodegate); when the snapshot
                        // lacks it, when the gate saw it will do.
                        let ready = state.pods.values().find(|p| *p.name == **pod && p.ready);
                        let ready_at = ready.and_then(|p| p.ready_since.get()).unwrap_or(at);
                        let seconds = seconds_between(start, ready_at);
                        self.daemonset_ready.get_or_create(&labels).observe(seconds);
                    }
                }
                Event::TimedOut {
                    action, not_ready, ..
                } if leader => {
                    let labels = [("action", action.as_str())];
                    self.gates_timed_out.get_or_create(&labels).inc();
                    for blocker in not_ready {
                        if let Some(labels) = self.blocker_labels(&blocker.member, state) {
                            self.timeout_blockers.get_or_create(&labels).inc();
                        }
                    }
                }
                Event::Opened { opened_by, at, .. } if leader => {
                    if let Some(start) = track.start {
                        let labels = [("outcome", opened_by.as_str())];
                        let seconds = seconds_between(start, *at);
                        self.gate_duration.get_or_create(&labels).observe(seconds);
                    }
                    if *opened_by == OpenedBy::Ready
                        && let Some(since) = track.all_ready_since
                    {
                        self.reaction.observe(seconds_between(since, *at));
                    }
                }
                _ => {}
            }
        }
        if state.may_open_by_ready() {
            track.all_ready_since.get_or_insert(at);
        } else {
            track.all_ready_since = None;
        }
    }

    pub fn gate_stopped(&self, node: &str, generation: u64) {
        // A newer incarnation may have started already (its pre_start can
        // run before the old one's post_stop).
        self.gates
            .remove_if(node, |_, t| t.generation == generation);
    }

    /// The labels of a member that blocked a gate until its timeout; `None`
    /// for a DaemonSet key that is not `namespace/name`.
    fn blocker_labels(&self, member: &MemberId, state: &GateState) -> Option<BlockerLabels> {
        let (kind, namespace, name) = match member {
            MemberId::DaemonSet(key) => {
                let l = self.daemonset_labels(key, state)?;
                ("daemonset", l.namespace, l.name)
            }
            MemberId::Critical(name) => ("critical", String::new(), name.clone()),
            MemberId::Condition(type_) => ("condition", String::new(), type_.clone()),
            MemberId::Resource(name) => ("resource", String::new(), name.clone()),
            MemberId::Dra(driver) => ("dra_driver", String::new(), driver.clone()),
            MemberId::Canary => ("canary", String::new(), String::new()),
        };
        Some(BlockerLabels {
            kind,
            namespace,
            name,
        })
    }

    /// The labels of DaemonSet `key`, remembering its uid so the series can
    /// be dropped when it is gone.
    fn daemonset_labels(&self, key: &str, state: &GateState) -> Option<DaemonSetLabels> {
        let (namespace, name) = key.split_once('/')?;
        if let Some(ds) = state.daemonsets.get(key) {
            lock(&self.daemonset_series).insert(key.to_string(), ds.uid.clone());
        }
        Some(DaemonSetLabels {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Brings the state gauges up to date and drops the series of nodes and
    /// DaemonSets that are gone. `watch_restarts` is the watchers' own count.
    pub fn refresh(&self, router: &Router, watch_restarts: u64, now: Timestamp) {
        self.refresh_with(
            |node| router.gate(node).is_some(),
            |uid| router.daemonset(uid).is_some(),
            router.gate_count(),
            watch_restarts,
            now,
        );
        let own = [
            ("metrics_gates", self.gates.len()),
            ("metrics_gate_age_series", lock(&self.age_series).len()),
            (
                "metrics_daemonset_series",
                lock(&self.daemonset_series).len(),
            ),
            ("metrics_regated_age_series", lock(&self.regate.aged).len()),
        ];
        for (map, entries) in router.map_sizes().into_iter().chain(own) {
            let labels = [("map", map)];
            self.map_entries.get_or_create(&labels).set(count(entries));
        }
    }
    /// [`Self::refresh`] with the router's answers passed in.
    fn refresh_with(
        &self,
        has_gate: impl Fn(&str) -> bool,
        daemonset_exists: impl Fn(&str) -> bool,
        live_actors: usize,
        watch_restarts: u64,
        now: Timestamp,
    ) {
        self.leader.set(i64::from(self.leadership.is_leader()));
        self.leader_known
            .set(i64::from(self.leadership.leader_known().is_ok()));
        self.live_actors.set(count(live_actors));
        let seen = self
            .watch_restarts_seen
            .swap(watch_restarts, Ordering::Relaxed);
        self.watch_restarts
            .inc_by(watch_restarts.saturating_sub(seen));

        // A gate that panicked never reported its stop; its node has no
        // registered gate until the supervisor restarts it.
        self.gates.retain(|node, _| has_gate(node));
        let closed: HashMap<String, Option<Timestamp>> = self
            .gates
            .iter()
            .filter(|track| !matches!(track.phase, Phase::Opened | Phase::Gone))
            .map(|track| (track.key().clone(), track.start))
            .collect();
        self.gated_nodes.set(count(closed.len()));
        let mut ages = lock(&self.age_series);
        for node in ages.iter() {
            if !closed.contains_key(node) {
                self.gate_age.remove(&[("node", node.clone())]);
            }
        }
        ages.retain(|node| closed.contains_key(node));
        let per_node = !self.regate.dropped.load(Ordering::Relaxed);
        for (node, start) in closed {
            // A gate that has not seen its node yet has no age to show.
            if let Some(start) = start
                && per_node
            {
                self.gate_age
                    .get_or_create(&[("node", node.clone())])
                    .set(seconds_between(start, now));
                ages.insert(node);
            }
        }
        drop(ages);

        let mut series = lock(&self.daemonset_series);
        series.retain(|key, uid| {
            if daemonset_exists(uid) {
                return true;
            }
            if let Some((namespace, name)) = key.split_once('/') {
                self.daemonset_ready.remove(&DaemonSetLabels {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                });
                self.timeout_blockers.remove(&BlockerLabels {
                    kind: "daemonset",
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                });
            }
            false
        });
    }
}

/// The config reload's series.
pub struct ConfigMetrics {
    reloads: Counter,
    failures: Counter,
    last_successful: Gauge,
    /// When the configuration in force was applied (Unix seconds).
    pub applied_at: Gauge,
}

impl ConfigMetrics {
    fn register(r: &mut Registry) -> ConfigMetrics {
        let m = ConfigMetrics {
            reloads: reg(
                r,
                "config_reloads",
                "Config file reloads applied without a restart (file change or SIGHUP)",
            ),
            failures: reg(
                r,
                "config_reload_failures",
                "Config file reloads refused (unreadable, invalid, or changing a key that needs a restart); the settings in force stayed",
            ),
            last_successful: reg(
                r,
                "config_last_reload_successful",
                "1 unless the last config reload was refused (1 before any reload)",
            ),
            applied_at: reg(
                r,
                "config_applied_timestamp_seconds",
                "When the gate configuration in force was applied (Unix seconds): start, or the last reload applied",
            ),
        };
        m.last_successful.set(1);
        m
    }

    /// A reload put a new configuration in force at `unix_seconds`.
    pub fn reload_applied(&self, unix_seconds: i64) {
        self.reloads.inc();
        self.last_successful.set(1);
        self.applied_at.set(unix_seconds);
    }

    /// A reload was refused; the configuration in force stays.
    pub fn reload_refused(&self) {
        self.failures.inc();
        self.last_successful.set(0);
    }
}

word_enum! {
    /// Why spans were dropped.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SpanDrop {
        QueueFull = "queue_full",
        ExportFailed = "export_failed",
    }
}

/// The trace exporter's series. Cheap to clone: the counters are shared.
#[derive(Clone)]
pub struct TraceMetrics {
    exported: Counter,
    dropped: Family<Label, Counter>,
}

impl TraceMetrics {
    fn register(r: &mut Registry) -> TraceMetrics {
        let m = TraceMetrics {
            exported: reg(
                r,
                "trace_spans_exported",
                "Gate trace spans the OTLP collector accepted (--otlp-endpoint)",
            ),
            dropped: reg(
                r,
                "trace_spans_dropped",
                "Gate trace spans not exported, by reason: queue_full (the exporter fell behind; gates never wait for it) or export_failed (the collector refused or did not answer)",
            ),
        };
        for reason in SpanDrop::ALL {
            m.dropped
                .get_or_create_owned(&[("reason", reason.as_str())]);
        }
        m
    }

    pub fn exported(&self, spans: usize) {
        self.exported.inc_by(spans as u64);
    }

    pub fn dropped(&self, reason: SpanDrop, spans: usize) {
        self.dropped
            .get_or_create(&[("reason", reason.as_str())])
            .inc_by(spans as u64);
    }

    /// Spans dropped for `reason` so far.
    pub fn dropped_count(&self, reason: SpanDrop) -> u64 {
        self.dropped
            .get_or_create(&[("reason", reason.as_str())])
            .get()
    }
}

#[cfg(test)]
mod tests;
