//! Every setting, defined once (adding one is one entry here); `define.rs`
//! turns each entry into its flag, config-file key, merged value and definition.
//!
//! An entry is `field: KIND { ... }`, KIND one of
//! - `value(T)`: `--flag VALUE` or the key, else `default:` (written as a
//!   person writes it, parsed like a value they gave; the defaults the core
//!   keeps for itself are taken from the core's constants);
//! - `option(T)`: `--flag VALUE` or the key, else nothing;
//! - `switch`: `--flag`, or the key set to `true`; off by default;
//! - `list`: `--flag VALUE`, repeatable, or the key's list; the flags
//!   replace the file's list; else `default:` (a list) or empty;
//!   `list(T)`: the same, the file's entries read as `T` and written in
//!   the flag's form (`String: From<T>`); no default.
//!
//! An entry's Helm value is `config.` and its key unless `helm:` names another.

use nodegate_core::closing::regating::DEFAULT_REGATE_TAINT_KEY;
use nodegate_core::rules::placement::{DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE};
use nodegate_core::vocab::budget::MaxUnavailable;
use nodegate_core::vocab::config::{
    DEFAULT_KURED_DAEMONSET, DEFAULT_REBOOT_TIMEOUT, DEFAULT_TIMEOUT, OnTimeout,
};

use super::cli::LogFormat;
use super::config::{
    FileSelector, RawCanary, RawCriticalCondition, RawCriticalPod, RawCriticalResource,
    RawDraDriver, RawRule, TaintFor,
};
use super::define::Setting;

settings! {
    gate GateFlags GateGiven GateSet {
        /// A managed startup taint, KEY[:EFFECT] (EFFECT defaults to NoSchedule).
        /// Repeatable.
        taints: list {
            flag: "taint", value: "KEY[:EFFECT]", key: "taints",
            default: [format!("{DEFAULT_MANAGED_TAINT_KEY}:{EFFECT_NO_SCHEDULE}")], reload: Live,
        }
        /// Which autoscalers' nodes get a startup taint key that autoscaler
        /// understands: auto, karpenter, cluster-autoscaler, gke, aks, eks or
        /// none (auto is karpenter, gke, aks and eks). Repeatable, or
        /// comma-separated.
        autoscalers: list {
            flag: "autoscaler", value: "NAME[,NAME]", key: "autoscalers",
            default: ["auto"], reload: Live,
        }
        /// Nodes matching SELECTOR (kubectl syntax) get the startup taint
        /// KEY[:EFFECT] (EFFECT defaults to NoSchedule), before any preset
        /// and the first --taint; the first matching rule wins. Repeatable.
        taint_for: list(TaintFor) {
            flag: "taint-for", value: "SELECTOR=KEY[:EFFECT]", key: "taintFor",
            docs: "none", parser: ::clap::builder::ValueParser::string(), reload: Live,
        }
        /// A taint some other agent lifts during start-up, ignored when deciding
        /// which DaemonSets belong on a node: an exact key, or a key prefix ending
        /// in '*'. Repeatable; adds to the built-in list.
        transient_taints: list {
            flag: "transient-taint", value: "KEY|PREFIX*", key: "transientTaints",
            docs: "see below", reload: Live,
        }
        /// Never wait for this DaemonSet. Repeatable.
        excludes: list {
            flag: "exclude", value: "NAMESPACE/NAME", key: "exclude", reload: Live,
        }
        /// Never wait for DaemonSets whose labels match this label selector
        /// (kubectl syntax, e.g. 'team=observability,tier notin (debug)').
        exclude_selector: option(FileSelector) {
            flag: "exclude-selector", value: "SELECTOR", key: "excludeSelector", reload: Live,
        }
        /// The only namespaces whose DaemonSets a gate waits for (an
        /// allow-list, e.g. kube-system,infra); a DaemonSet elsewhere is never
        /// a member, so a tenant's DaemonSet cannot hold nodes closed. Default:
        /// every namespace. Repeatable, or comma-separated.
        daemonset_namespaces: list {
            flag: "daemonset-namespaces", value: "NAMESPACE[,NAMESPACE]", key: "daemonsetNamespaces",
            docs: "every namespace", reload: Live,
        }
        /// The nodes nodegate manages at all, a label selector (kubectl syntax):
        /// nodes outside it are never gated or tainted. Default: every node.
        node_selector: option(FileSelector) {
            flag: "node-selector", value: "SELECTOR", key: "nodeSelector",
            docs: "every node", helm: "config.managedNodeSelector", reload: Live,
        }
        /// Re-gate an open node when a DaemonSet that belongs on it has had no
        /// Ready pod for this long (the grace a rolling update needs); 0 turns
        /// re-gating off.
        regate_after: value(String) {
            flag: "regate-after", value: "DURATION", key: "regateAfter",
            default: "0", docs: "`0` (off)", reload: Live,
        }
        /// The taint a re-gated node gets, KEY[:EFFECT]; never a startup taint.
        regate_taint: value(String) {
            flag: "regate-taint", value: "KEY[:EFFECT]", key: "regateTaint",
            default: format!("{DEFAULT_REGATE_TAINT_KEY}:{EFFECT_NO_SCHEDULE}"), reload: Live,
        }
        /// A re-gated node's deadline, counted from its re-gating; 0 keeps it
        /// closed until its DaemonSets are Ready.
        regate_timeout: value(String) {
            flag: "regate-timeout", value: "DURATION", key: "regateTimeout",
            default: "0", docs: "`0` (none)", reload: Live,
        }
        /// Most managed nodes that may carry the re-gate taint at once, a count
        /// or a percentage (rounded down, at least 1).
        regate_max_unavailable: value(String) {
            flag: "regate-max-unavailable", value: "N|P%", key: "regateMaxUnavailable",
            default: MaxUnavailable::default().to_string(), reload: Live,
        }
        /// Allow a NoExecute --regate-taint: each re-gate then evicts every pod
        /// on the node that does not tolerate the taint.
        regate_allow_no_execute: switch {
            flag: "regate-allow-no-execute", key: "regateAllowNoExecute", docs: "off", reload: Live,
        }
        /// Most managed nodes nodegate keeps closed on its own initiative at once,
        /// re-gated or carrying a conditionTaints rule's taint: a count or a
        /// percentage (rounded down, at least 1); 100% leaves only each one's own
        /// budget.
        max_unavailable: value(String) {
            flag: "max-unavailable", value: "N|P%", key: "maxUnavailable",
            default: "50%", reload: Live,
        }
        /// Also re-gate an open node at once when its boot id
        /// (status.nodeInfo.bootID) changes: it rebooted.
        regate_on_reboot: switch {
            flag: "regate-on-reboot", key: "regateOnReboot", docs: "off", reload: Live,
        }
        /// Re-gate an open node before an announced reboot, from these sources
        /// (comma-separated or repeated): annotation (nodegate.dev/reboot-pending),
        /// kured-lock (kured's lock names the node; outside the re-gating budget),
        /// kured-annotation (weave.works/kured-reboot-in-progress). Needs
        /// --regate-after.
        reboot_announcements: list {
            flag: "reboot-announcements", value: "SOURCE[,SOURCE]", key: "rebootAnnouncements",
            docs: "none (off)", reload: Live,
        }
        /// kured's DaemonSet, whose weave.works/kured-node-lock annotation is
        /// kured's reboot lock (--reboot-announcements kured-lock).
        kured_daemonset: value(String) {
            flag: "kured-daemonset", value: "NAMESPACE/NAME", key: "kuredDaemonset",
            default: DEFAULT_KURED_DAEMONSET.to_string(), reload: Live,
        }
        /// Most nodes kured's lock may name at once that nodegate believes
        /// (the first ones; the lock's own maxOwners caps them too): whoever may
        /// annotate kured's DaemonSet cannot re-gate more. At least 1.
        kured_max_holders: value(u32) {
            flag: "kured-max-holders", value: "N", key: "kuredMaxHolders",
            default: 1u32, reload: Live,
        }
        /// The deadline of a node re-gated before an announced reboot, counted
        /// from the taint: the drain, the reboot and its agents starting again;
        /// 0 uses --regate-timeout's.
        reboot_timeout: value(String) {
            flag: "reboot-timeout", value: "DURATION", key: "rebootTimeout",
            default: format!("{}m", DEFAULT_REBOOT_TIMEOUT.as_secs() / 60), reload: Live,
        }
    }
    run RunFlags RunGiven RunSet {
        /// How long a node may stay closed, counted from its creation (or from
        /// nodegate.dev/gated-since); 0 means no deadline.
        timeout: value(String) {
            flag: "timeout", value: "DURATION", key: "timeout",
            default: format!("{}s", DEFAULT_TIMEOUT.as_secs()), reload: Live,
        }
        /// An earlier deadline, also counted from the gate's start, for members
        /// that never got a pod on the node: past it with such a member,
        /// --on-timeout acts. Shorter than --timeout; 0 turns it off.
        schedule_timeout: value(String) {
            flag: "schedule-timeout", value: "DURATION", key: "scheduleTimeout",
            default: "0", docs: "`0` (off)", reload: Live,
        }
        /// What to do when the deadline passes.
        on_timeout: value(OnTimeout) {
            flag: "on-timeout", value: "ACTION", key: "onTimeout",
            default: OnTimeout::default(), parser: super::cli::on_timeout_parser(), reload: Live,
        }
        /// --on-timeout replace: most replace requests per --replace-interval,
        /// cluster-wide (0: none; the due nodes stay closed).
        replace_budget: value(u32) {
            flag: "replace-budget", value: "N", key: "replaceBudget",
            default: 2u32, reload: Live,
        }
        /// The window --replace-budget counts requests in.
        replace_interval: value(String) {
            flag: "replace-interval", value: "DURATION", key: "replaceInterval",
            default: "10m", reload: Live,
        }
        /// --on-timeout replace: most nodes asked to be replaced that still
        /// exist, cluster-wide.
        replace_in_flight: value(u32) {
            flag: "replace-in-flight", value: "N", key: "replaceInFlight",
            default: 2u32, reload: Live,
        }
        /// --on-timeout replace: what a due node gets instead when a member it
        /// waits for is broken cluster-wide (open or keep).
        replace_fallback: value(String) {
            flag: "replace-fallback", value: "open|keep", key: "replaceFallback",
            default: "keep", reload: Live,
        }
        /// --on-timeout replace: a member not Ready on at least two nodes and on
        /// more than this of the nodes it is judged on (a count or a
        /// percentage), or that two due nodes wait for, is broken
        /// cluster-wide; such nodes are not replaced. 100% judges nothing
        /// broken.
        replace_breakage: value(String) {
            flag: "replace-breakage", value: "N|P%", key: "replaceBreakage",
            default: "20%", reload: Live,
        }
        /// Decide and record everything, write nothing to nodes: the webhook admits them unchanged,
        /// and the leader writes no admission policy parameters (--admission-params), so the
        /// policy taints no new node; a start deletes those an earlier run of its Pod wrote.
        dry_run: switch {
            flag: "dry-run", key: "dryRun", docs: "off", reload: Restart,
        }
        /// The leader writes the nodegate.dev/Open condition on each node it gates
        /// (False while closed, True once opened), for other tools to read.
        node_condition: switch {
            flag: "node-condition", key: "nodeCondition", docs: "off", reload: Restart,
        }
        /// Most untaint patches in flight at once.
        max_concurrent_patches: value(usize) {
            flag: "max-concurrent-patches", value: "N", key: "maxConcurrentPatches",
            default: 16usize, reload: Restart,
        }
        /// Steady rate of nodegate's own API requests (patches, events, reads),
        /// per second.
        kube_qps: value(f64) {
            flag: "kube-qps", value: "QPS", key: "kubeQps",
            default: 50.0, reload: Restart,
        }
        /// Burst above --kube-qps.
        kube_burst: value(u32) {
            flag: "kube-burst", value: "N", key: "kubeBurst",
            default: 100u32, reload: Restart,
        }
        /// How long one of nodegate's own API requests (patch, re-read, Event)
        /// may go unanswered before it is given up; a write given up may have
        /// been applied.
        kube_request_timeout: value(String) {
            flag: "kube-request-timeout", value: "DURATION", key: "kubeRequestTimeout",
            default: "10s", reload: Restart,
        }
        /// Threads that run the watches, every gate, the webhook and the HTTP
        /// endpoints (0: one per CPU nodegate may use).
        worker_threads: value(usize) {
            flag: "worker-threads", value: "N", key: "workerThreads",
            default: 1usize, reload: Restart,
        }
        /// Log format.
        log_format: value(LogFormat) {
            flag: "log-format", value: "FORMAT", key: "logFormat",
            default: LogFormat::Text, reload: Restart,
        }
        /// Log level: off, error, warn (or warning), info, debug or trace; or
        /// comma-separated TARGET=LEVEL directives such as 'info,nodegate=debug'.
        log_level: value(String) {
            flag: "log-level", value: "LEVEL", key: "logLevel",
            default: "info", reload: Restart,
        }
        /// Run as one of several replicas: only the holder of a
        /// coordination.k8s.io Lease writes; the others keep their watches and
        /// gates warm to take over.
        leader_elect: switch {
            flag: "leader-elect", key: "leaderElect",
            docs: "off", helm: "leaderElection.enabled", reload: Restart,
        }
        /// Name of the leader-election Lease.
        lease_name: value(String) {
            flag: "lease-name", value: "NAME", key: "leaseName",
            default: "nodegate", helm: "leaderElection.leaseName", reload: Restart,
        }
        /// Namespace of the leader-election Lease. Default: $POD_NAMESPACE, else
        /// the kubeconfig's namespace, else 'default'.
        lease_namespace: option(String) {
            flag: "lease-namespace", value: "NAMESPACE", key: "leaseNamespace",
            docs: "`$POD_NAMESPACE`, else the kubeconfig's (or service account's) namespace, else `default`",
            helm: "leaderElection.leaseNamespace", reload: Restart,
        }
        /// How long a follower waits, after last seeing the lease renewed, before
        /// taking it over; whole seconds.
        lease_duration: value(String) {
            flag: "lease-duration", value: "DURATION", key: "leaseDuration",
            default: "15s", helm: "leaderElection.leaseDuration", reload: Restart,
        }
        /// How long the leader keeps writing without a successful renewal; must
        /// be shorter than --lease-duration.
        renew_deadline: value(String) {
            flag: "renew-deadline", value: "DURATION", key: "renewDeadline",
            default: "10s", helm: "leaderElection.renewDeadline", reload: Restart,
        }
        /// How often the leader renews and a follower tries to acquire; must be
        /// shorter than --renew-deadline.
        retry_period: value(String) {
            flag: "retry-period", value: "DURATION", key: "retryPeriod",
            default: "2s", helm: "leaderElection.retryPeriod", reload: Restart,
        }
        /// Address of the HTTP server (/healthz, /readyz, /metrics); port 0
        /// picks a free port.
        http_addr: value(String) {
            flag: "http-addr", value: "HOST:PORT", key: "httpAddr",
            default: "0.0.0.0:8080", helm: "http.bindAddress", reload: Restart,
        }
        /// Address of the debug listener (/debug/nodes, /debug/nodes/NAME: node
        /// labels, taints, pod names), kept apart from --http-addr; empty turns
        /// it off.
        debug_addr: value(String) {
            flag: "debug-addr", value: "HOST:PORT", key: "debugAddr",
            default: "127.0.0.1:8081", helm: "http.debugAddr", reload: Restart,
        }
        /// How many recently finished gates /debug/nodes/NAME still shows.
        debug_history: value(usize) {
            flag: "debug-history", value: "N", key: "debugHistory",
            default: 100usize, helm: "http.debugHistory", reload: Restart,
        }
        /// Leave out the per-node gauges nodegate_gate_age_seconds{node} and
        /// nodegate_regated_node_age_seconds{node}: no node names on /metrics
        /// and no series per node during a large burst (the counts and
        /// histograms stay).
        drop_node_metrics: switch {
            flag: "drop-node-metrics", key: "dropNodeMetrics",
            docs: "off", helm: "http.dropNodeMetrics", reload: Restart,
        }
        /// Send each gate as an OpenTelemetry trace to this OTLP/HTTP collector,
        /// a base URL (spans go to URL/v1/traces), e.g.
        /// http://otel-collector:4318. Default: off, unless
        /// OTEL_EXPORTER_OTLP_ENDPOINT is set.
        otlp_endpoint: option(String) {
            flag: "otlp-endpoint", value: "URL", key: "otlpEndpoint",
            docs: "off", helm: "tracing.otlpEndpoint", reload: Restart,
        }
        /// Keep the admission policy's parameters, this ConfigMap
        /// ([NAMESPACE/]NAME, the namespace defaulting to the Pod's), written
        /// from the taint flags while this replica leads and its watches are
        /// synced, owned by its Pod ($POD_NAME, $POD_UID) so that they go when
        /// it goes; a restarted container first deletes what its Pod wrote
        /// before. Without them the policy taints no node. Default: off.
        admission_params: option(String) {
            flag: "admission-params", value: "[NAMESPACE/]NAME", key: "admissionParams",
            docs: "off", helm: "admission", reload: Restart,
        }
        /// Serve the mutating admission webhook that adds the startup taint at
        /// Node CREATE, over HTTPS on this address (path /mutate-node). Every
        /// replica serves it, followers too. Default: off.
        webhook_addr: option(String) {
            flag: "webhook-addr", value: "HOST:PORT", key: "webhookAddr",
            docs: "off", helm: "admission", reload: Restart,
        }
        /// The webhook's serving certificate from a directory holding tls.crt
        /// and tls.key (e.g. a cert-manager Secret mounted there), re-read when
        /// the files change.
        webhook_cert_dir: option(String) {
            flag: "webhook-cert-dir", value: "DIR", key: "webhookCertDir",
            helm: "webhook.certManager.enabled", reload: Restart,
        }
        /// Let nodegate manage the webhook's certificate: a CA and a serving
        /// certificate kept in this Secret (created if absent, shared by every
        /// replica, rotated before it expires). Needs --webhook-configuration and
        /// --webhook-host.
        webhook_cert_secret: option(String) {
            flag: "webhook-cert-secret", value: "NAMESPACE/NAME", key: "webhookCertSecret",
            helm: "webhook.certManager.enabled", reload: Restart,
        }
        /// The MutatingWebhookConfiguration whose webhooks' caBundle nodegate
        /// keeps set to its CA (with --webhook-cert-secret).
        webhook_configuration: option(String) {
            flag: "webhook-configuration", value: "NAME", key: "webhookConfiguration",
            helm: "webhook.certManager.enabled", reload: Restart,
        }
        /// A DNS name or IP address the serving certificate is valid for (with
        /// --webhook-cert-secret), e.g. the Service's
        /// nodegate-webhook.nodegate.svc. Repeatable.
        webhook_hosts: list {
            flag: "webhook-host", value: "HOST", key: "webhookHosts",
            helm: "webhook.extraHosts", reload: Restart,
        }
        /// How long a certificate nodegate issues is valid (with
        /// --webhook-cert-secret); it is renewed when a third of that remains.
        webhook_cert_validity: value(String) {
            flag: "webhook-cert-validity", value: "DURATION", key: "webhookCertValidity",
            default: "365d", helm: "webhook.certValidity", reload: Restart,
        }
        /// The late-taint net: put the startup taint on a new node seen without
        /// one (created less than --new-node-window ago, no workload pod bound
        /// to it yet), for the nodes the webhook missed.
        taint_new_nodes: switch {
            flag: "taint-new-nodes", key: "taintNewNodes",
            docs: "off (on in the manifests)", reload: Restart,
        }
        /// How new a node must be for --taint-new-nodes to taint it, counted
        /// from its creation.
        new_node_window: value(String) {
            flag: "new-node-window", value: "DURATION", key: "newNodeWindow",
            default: "2m", reload: Restart,
        }
    }
    file_only {
        /// Decide and journal, write nothing (semantics.md §6.6).
        suspend: bool => "suspend" { docs: "off", reload: Live }
        /// Pods other than DaemonSet pods that must be Ready on a gated node.
        critical_pods: Vec<RawCriticalPod> => "criticalPods" { docs: "none", reload: Refuse }
        /// Node conditions waited for like members (semantics.md §6.5).
        critical_conditions: Vec<RawCriticalCondition> => "criticalConditions" {
            docs: "none", reload: Live,
        }
        /// Rules that put a taint on nodes matching conditions (semantics.md §6.5).
        condition_taints: Vec<RawRule> => "conditionTaints" { docs: "none", reload: Live }
        /// Extended resources a node must report allocatable, waited for
        /// like members (semantics.md §6.8).
        critical_resources: Vec<RawCriticalResource> => "criticalResources" {
            docs: "none", reload: Live,
        }
        /// DRA drivers whose ResourceSlice pools for a node must be
        /// complete, waited for like members (semantics.md §6.8). The
        /// ResourceSlice watch runs only when this is set at start.
        dra_drivers: Vec<RawDraDriver> => "draDrivers" { docs: "none", reload: Live }
        /// A canary pod on each gated node, waited for like a member
        /// (semantics.md §6.9): image, readinessProbe, resources,
        /// maxInFlight, namespace, imagePullPolicy, priorityClassName.
        canary: RawCanary => "canary" { docs: "off", reload: Restart }
    }
}

/// The `--help` headings of the table's flags, each from the flag named
/// here to the next one named, in the table's order.
pub const HEADINGS: [(&str, &str); 9] = [
    ("taint", "Gate settings: taints"),
    ("exclude", "Gate settings: which nodes and DaemonSets"),
    ("regate-after", "Gate settings: re-gating open nodes"),
    ("timeout", "Deadline"),
    ("dry-run", "Writes and API requests"),
    ("log-format", "Logging"),
    ("leader-elect", "Leader election"),
    ("http-addr", "HTTP, metrics and traces"),
    ("admission-params", "Admission: the taint at node creation"),
];

/// Every setting's definition, in the table's order.
pub fn definitions() -> Vec<Setting> {
    [
        GateGiven::definitions(),
        RunGiven::definitions(),
        file_only_definitions(),
    ]
    .concat()
}

/// The definition of the setting whose config-file key is `key`.
pub fn definition(key: &str) -> Option<Setting> {
    definitions().into_iter().find(|s| s.key == key)
}

#[cfg(test)]
mod tests;
