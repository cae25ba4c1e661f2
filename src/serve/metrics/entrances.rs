//! The metrics of the webhook and the late-taint net (semantics §6.1–6.2).
//! Every replica reports its own admissions (followers answer the webhook
//! too).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{Label, reg, reg_with, word_enum};

/// Admission handling is sub-millisecond when healthy; the buckets are fine
/// below 10 ms (the target is p99 ≤ 2 ms) and coarse above.
const ADMISSION_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.1,
    1.0,
];

word_enum! {
    /// What the webhook answered for one AdmissionReview.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AdmissionResult {
        /// Allowed with the patch that adds the startup taint.
        Tainted = "tainted",
        /// Allowed as it was (out of scope, ignored, already gated).
        Unchanged = "unchanged",
        /// A node it would have tainted, admitted unchanged: `--dry-run`.
        WouldTaint = "would_taint",
        /// Unreadable, or not a Node CREATE: admitted unchanged.
        Error = "error",
        /// Not judged (too large, too slow, no place in time): admitted unchanged.
        Busy = "busy",
        /// A node it would have tainted, admitted unchanged: no leader known.
        NoLeader = "no_leader",
    }
}

word_enum! {
    /// What the late-taint net did with a node it saw without the taint.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum LateTaint {
        Tainted = "tainted",
        Skipped = "skipped",
        Failed = "failed",
    }
}

word_enum! {
    /// Certificate trouble the webhook counts (`problem` label).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum CertProblem {
        /// A certificate directory's new pair could not be used (old one
        /// kept).
        Reload = "reload",
        /// The Secret could not be read, filled or parsed.
        Secret = "secret",
        /// The MutatingWebhookConfiguration's caBundle could not be read or
        /// set.
        CaBundle = "ca_bundle",
    }
}

pub struct EntranceMetrics {
    admissions: Family<Label, Counter>,
    admission_duration: Histogram,
    pub(super) late_taints: Family<Label, Counter>,
    /// The expiry of the serving certificate now presented.
    pub cert_expiry: Gauge,
    /// 1 while the webhook listener serves (it starts once it has a
    /// certificate).
    pub serving: Gauge,
    cert_errors: Family<Label, Counter>,
    /// Writes of a webhook's caBundle by this replica.
    pub ca_bundle_repairs: Counter,
}

impl EntranceMetrics {
    pub(super) fn register(r: &mut Registry) -> EntranceMetrics {
        let m = EntranceMetrics {
            admissions: reg(
                r,
                "webhook_admissions",
                "Node CREATE reviews answered by the admission webhook, by result (tainted | unchanged | would_taint | error | busy | no_leader); every replica",
            ),
            admission_duration: reg_with(
                r,
                "webhook_admission_duration_seconds",
                "Time the webhook took to answer a review, from the request read to the answer built (server side)",
                Histogram::new(ADMISSION_BUCKETS),
            ),
            late_taints: reg(
                r,
                "late_taints",
                "New nodes seen without the startup taint by the late-taint net, by result (tainted | skipped | failed)",
            ),
            cert_expiry: reg(
                r,
                "webhook_certificate_expiry_timestamp_seconds",
                "When the serving certificate this replica presents expires (Unix seconds); 0 before one is loaded",
            ),
            serving: reg(
                r,
                "webhook_serving",
                "1 while this replica's webhook listener serves with a certificate, 0 while it waits for one (see /readyz?verbose for why)",
            ),
            cert_errors: reg(
                r,
                "webhook_certificate_errors",
                "Failures keeping the webhook's certificate current, by problem (reload | secret | ca_bundle)",
            ),
            ca_bundle_repairs: reg(
                r,
                "webhook_ca_bundle_repairs",
                "Times nodegate wrote the caBundle of a webhook in its MutatingWebhookConfiguration (first fill included)",
            ),
        };
        for r in AdmissionResult::ALL {
            m.admissions.get_or_create_owned(&[("result", r.as_str())]);
        }
        for r in LateTaint::ALL {
            m.late_taints.get_or_create_owned(&[("result", r.as_str())]);
        }
        for p in CertProblem::ALL {
            m.cert_errors
                .get_or_create_owned(&[("problem", p.as_str())]);
        }
        m
    }

    /// One review answered by the webhook, and how long it took (seconds).
    pub fn admission(&self, result: AdmissionResult, seconds: f64) {
        self.admissions
            .get_or_create(&[("result", result.as_str())])
            .inc();
        self.admission_duration.observe(seconds);
    }

    pub fn certificate_error(&self, problem: CertProblem) {
        self.cert_errors
            .get_or_create(&[("problem", problem.as_str())])
            .inc();
    }
}
