//! metrics' unit tests: the exported text after a sequence of gate events,
//! router observations and refreshes, read back sample by sample.

use super::*;
use std::sync::Arc;
use std::time::Duration;

use nodegate_core::gate::{self, Input};

use nodegate_core::testutil::ts;
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::DaemonSetInfo;

use crate::test_gates::{DrivenGate, NODE, gated, pod, tolerant};

/// One gate driven by hand, its steps reported to the metrics exactly as
/// the node actor reports them.
struct Driven<'a> {
    m: &'a Metrics,
    gate: DrivenGate,
}

impl Driven<'_> {
    fn feed(&mut self, at: i64, input: Input) {
        let events = self.gate.step(ts(at), &input);
        if !events.is_empty() {
            self.m.gate_step(NODE, ts(at), &events, &self.gate.state);
        }
    }
}

impl std::ops::Deref for Driven<'_> {
    type Target = DrivenGate;
    fn deref(&self) -> &DrivenGate {
        &self.gate
    }
}

impl std::ops::DerefMut for Driven<'_> {
    fn deref_mut(&mut self) -> &mut DrivenGate {
        &mut self.gate
    }
}

fn drive(m: &Metrics, cfg: Config) -> Driven<'_> {
    m.gate_started(NODE, 1);
    Driven {
        m,
        gate: DrivenGate::new(cfg),
    }
}

fn router_with(dss: &[&DaemonSetInfo]) -> Router {
    let r = Router::new(Arc::new(Config::default()));
    for ds in dss {
        r.daemonset_upserted((*ds).clone());
    }
    r
}

fn text(m: &Metrics) -> String {
    m.encode().expect("encodes")
}

/// The value of the sample line that starts with `series ` exactly.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
}

#[test]
fn an_idle_controller_exports_zeros() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    m.refresh(&router_with(&[]), 0, ts(0));
    let t = text(&m);
    for (series, want) in [
        ("nodegate_gated_nodes", 0.0),
        ("nodegate_live_actors", 0.0),
        ("nodegate_leader", 1.0),
        ("nodegate_watch_restarts_total", 0.0),
        ("nodegate_reaction_seconds_count", 0.0),
        (
            "nodegate_gate_duration_seconds_count{outcome=\"ready\"}",
            0.0,
        ),
        (
            "nodegate_gate_duration_seconds_count{outcome=\"timeout\"}",
            0.0,
        ),
        ("nodegate_gates_timed_out_total{action=\"open\"}", 0.0),
        (
            "nodegate_patch_attempts_total{kind=\"untaint\",result=\"conflict\"}",
            0.0,
        ),
        (
            "nodegate_router_events_total{kind=\"pod_upserted\",routed=\"true\"}",
            0.0,
        ),
    ] {
        assert_eq!(sample(&t, series), Some(want), "{series} in\n{t}");
    }
    for line in t.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("nodegate_"), "unprefixed series: {line}");
    }
}

/// The router's counts land on the series of their own kind and routing:
/// each event on one of twelve, none on another.
#[test]
fn router_events_count_on_their_own_series() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    m.router_event(RouterEvent::PodUpserted, true);
    m.router_event(RouterEvent::PodUpserted, true);
    m.router_event(RouterEvent::NodeDeleted, false);
    let t = text(&m);
    for event in RouterEvent::ALL {
        for routed in [false, true] {
            let want = match (event, routed) {
                (RouterEvent::PodUpserted, true) => 2.0,
                (RouterEvent::NodeDeleted, false) => 1.0,
                _ => 0.0,
            };
            let series = format!(
                "nodegate_router_events_total{{kind=\"{}\",routed=\"{routed}\"}}",
                event.as_str()
            );
            assert_eq!(sample(&t, &series), Some(want), "{series} in\n{t}");
        }
    }
}

#[test]
fn an_opening_records_duration_reaction_and_time_to_ready() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    let cni = tolerant("cni");
    let csi = tolerant("csi");
    let mut g = drive(&m, Config::default());
    g.feed(
        1,
        Input::snapshot(
            gated(0),
            vec![cni.clone(), csi.clone()],
            vec![pod("cni-1", &cni, Some(1)), pod("csi-1", &csi, None)],
        ),
    );
    m.refresh_with(|n| n == NODE, |_| true, 1, 0, ts(5));
    assert_eq!(sample(&text(&m), "nodegate_gated_nodes"), Some(1.0));

    // csi turns Ready at 9 (cluster time), seen at 10; opened at 10.2.
    g.feed(10, Input::pod_upserted(pod("csi-1", &csi, Some(9))));
    let opened = "1970-01-01T00:00:10.2Z".parse::<Timestamp>().unwrap();
    let events = g.step(opened, &Input::PatchResult(PatchOutcome::Applied));
    m.gate_step(NODE, opened, &events, &g.state);
    m.patch_attempt(NodeWrite::Untaint, &PatchOutcome::Applied);
    m.patch_attempt(NodeWrite::Untaint, &PatchOutcome::NotLeader);

    let t = text(&m);
    assert_eq!(
        sample(
            &t,
            "nodegate_gate_duration_seconds_count{outcome=\"ready\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, "nodegate_gate_duration_seconds_sum{outcome=\"ready\"}"),
        Some(10.2)
    );
    let reaction = sample(&t, "nodegate_reaction_seconds_sum").unwrap();
    assert!((reaction - 0.2).abs() < 1e-9, "reaction {reaction}");
    assert_eq!(
        sample(
            &t,
            "nodegate_daemonset_ready_seconds_sum{namespace=\"infra\",name=\"csi\"}"
        ),
        Some(9.0),
        "time-to-Ready uses the pod's Ready transition\n{t}"
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_daemonset_ready_seconds_sum{namespace=\"infra\",name=\"cni\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_patch_attempts_total{kind=\"untaint\",result=\"ok\"}"
        ),
        Some(1.0)
    );
    let attempts: f64 = PATCH_RESULTS
        .iter()
        .filter_map(|r| {
            sample(
                &t,
                &format!("nodegate_patch_attempts_total{{kind=\"untaint\",result=\"{r}\"}}"),
            )
        })
        .sum();
    assert_eq!(
        attempts, 1.0,
        "a write refused for want of leadership is no attempt"
    );
}

#[test]
fn a_deadline_counts_each_blocker_and_the_timeout_outcome() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    let cni = tolerant("cni");
    let broken = tolerant("broken");
    let mut g = drive(
        &m,
        Config {
            scope: Default::default(),
            timeout: Some(Duration::from_secs(5)),
            ..Config::default()
        },
    );
    g.feed(
        1,
        Input::snapshot(
            gated(0),
            vec![cni.clone(), broken.clone()],
            vec![pod("cni-1", &cni, Some(1)), pod("broken-1", &broken, None)],
        ),
    );
    let generation = g.state.timers.deadline_generation;
    g.feed(
        5,
        Input::TimerFired {
            kind: gate::TimerKind::Deadline,
            generation,
        },
    );
    g.feed(5, Input::PatchResult(PatchOutcome::Applied));
    let t = text(&m);
    assert_eq!(
        sample(&t, "nodegate_gates_timed_out_total{action=\"open\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_timeout_blockers_total{kind=\"daemonset\",namespace=\"infra\",name=\"broken\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_timeout_blockers_total{kind=\"daemonset\",namespace=\"infra\",name=\"cni\"}"
        ),
        None,
        "a Ready member is no blocker"
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_gate_duration_seconds_sum{outcome=\"timeout\"}"
        ),
        Some(5.0)
    );

    // The broken DaemonSet is deleted: its series go with it.
    m.refresh(&router_with(&[&cni]), 0, ts(6));
    let t = text(&m);
    assert!(
        !t.contains("name=\"broken\""),
        "series of a deleted DaemonSet:\n{t}"
    );
    assert!(t.contains("name=\"cni\""), "cni still exists:\n{t}");
}

#[test]
fn a_follower_records_no_outcomes() {
    let m = Metrics::new(Arc::new(Leadership::follower()));
    let cni = tolerant("cni");
    let mut g = drive(&m, Config::default());
    g.feed(
        1,
        Input::snapshot(
            gated(0),
            vec![cni.clone()],
            vec![pod("cni-1", &cni, Some(1))],
        ),
    );
    g.feed(2, Input::PatchResult(PatchOutcome::NotLeader));
    m.refresh(&router_with(&[&cni]), 0, ts(3));
    let t = text(&m);
    assert_eq!(sample(&t, "nodegate_leader"), Some(0.0));
    assert!(
        !t.contains("nodegate_daemonset_ready_seconds_count{"),
        "{t}"
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_gate_duration_seconds_count{outcome=\"ready\"}"
        ),
        Some(0.0)
    );
}

#[test]
fn watch_restarts_follow_the_watchers_count() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    let r = router_with(&[]);
    m.refresh(&r, 2, ts(0));
    m.refresh(&r, 5, ts(1));
    assert_eq!(
        sample(&text(&m), "nodegate_watch_restarts_total"),
        Some(5.0)
    );
}

#[test]
fn gate_ages_are_shown_while_closed_and_dropped_after() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    let cni = tolerant("cni");
    let mut g = drive(&m, Config::default());
    g.feed(
        100,
        Input::snapshot(gated(90), vec![cni.clone()], vec![pod("cni-1", &cni, None)]),
    );
    let live = |n: &str| n == NODE;
    m.refresh_with(live, |_| true, 1, 0, ts(130));
    let t = text(&m);
    assert_eq!(sample(&t, "nodegate_gated_nodes"), Some(1.0));
    assert_eq!(sample(&t, "nodegate_live_actors"), Some(1.0));
    assert_eq!(
        sample(&t, "nodegate_gate_age_seconds{node=\"node-a\"}"),
        Some(40.0)
    );

    // A stop for an older incarnation changes nothing.
    m.gate_stopped(NODE, 0);
    m.refresh_with(live, |_| true, 1, 0, ts(131));
    assert_eq!(sample(&text(&m), "nodegate_gated_nodes"), Some(1.0));

    m.gate_stopped(NODE, 1);
    m.refresh_with(|_| false, |_| true, 0, 0, ts(132));
    let t = text(&m);
    assert_eq!(sample(&t, "nodegate_gated_nodes"), Some(0.0));
    assert!(
        !t.contains("node-a"),
        "series of a node no longer gated:\n{t}"
    );
}

#[test]
fn drop_node_metrics_leaves_out_every_per_node_gauge() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    m.drop_node_series();
    let cni = tolerant("cni");
    let mut g = drive(&m, Config::default());
    g.feed(
        100,
        Input::snapshot(gated(90), vec![cni.clone()], vec![pod("cni-1", &cni, None)]),
    );
    m.refresh_with(|n| n == NODE, |_| true, 1, 0, ts(130));
    m.regate.regated_ages(&[("n1".into(), 90.0)]);
    let t = text(&m);
    assert_eq!(sample(&t, "nodegate_gated_nodes"), Some(1.0), "{t}");
    assert!(!t.contains("node=\""), "a per-node series:\n{t}");
}

#[test]
fn a_gate_that_vanished_without_a_stop_is_forgotten() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    m.gate_started(NODE, 7);
    m.refresh_with(|_| false, |_| true, 0, 0, ts(0));
    assert_eq!(sample(&text(&m), "nodegate_gated_nodes"), Some(0.0));
}

#[test]
fn the_entrances_export_zeros_then_count() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    let t = text(&m);
    for r in ["tainted", "unchanged", "error"] {
        assert_eq!(
            sample(
                &t,
                &format!("nodegate_webhook_admissions_total{{result=\"{r}\"}}")
            ),
            Some(0.0),
            "{t}"
        );
    }
    for r in ["tainted", "skipped", "failed"] {
        assert_eq!(
            sample(&t, &format!("nodegate_late_taints_total{{result=\"{r}\"}}")),
            Some(0.0),
            "{t}"
        );
    }
    m.entrances.admission(AdmissionResult::Tainted, 0.0004);
    m.entrances.admission(AdmissionResult::Error, 0.002);
    m.late_taint("skipped");
    m.late_taint("what");
    m.entrances.cert_expiry.set(1_800_000_000);
    m.entrances.certificate_error(CertProblem::CaBundle);
    let t = text(&m);
    assert_eq!(
        sample(&t, "nodegate_webhook_admissions_total{result=\"tainted\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, "nodegate_webhook_admissions_total{result=\"error\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_webhook_admission_duration_seconds_bucket{le=\"0.0005\"}"
        ),
        Some(1.0),
        "{t}"
    );
    assert_eq!(
        sample(&t, "nodegate_webhook_admission_duration_seconds_count"),
        Some(2.0)
    );
    assert_eq!(
        sample(&t, "nodegate_late_taints_total{result=\"skipped\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, "nodegate_late_taints_total{result=\"failed\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, "nodegate_webhook_certificate_expiry_timestamp_seconds"),
        Some(1.8e9)
    );
    assert_eq!(
        sample(
            &t,
            "nodegate_webhook_certificate_errors_total{problem=\"ca_bundle\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn the_regate_series_are_exported_and_a_reopened_node_loses_its_age() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    let text = m.encode().expect("encode");
    for name in [
        "nodegate_regates_total{trigger=\"members\"} 0",
        "nodegate_regate_budget_exhausted_total 0",
        "nodegate_regated_nodes 0",
        "nodegate_suspended_nodes 0",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    // One series per re-gated node, none while there is none (so
    // tests/e2e_monitoring.rs lists it as DECLARED_ONLY, and this test proves
    // the name the alert reads).
    assert!(
        !text.contains("nodegate_regated_node_age_seconds"),
        "{text}"
    );
    m.regate
        .regated_ages(&[("n1".into(), 90.0), ("n2".into(), 5.0)]);
    let text = m.encode().expect("encode");
    assert!(
        text.contains("nodegate_regated_node_age_seconds{node=\"n1\"} 90"),
        "{text}"
    );
    m.regate.regated_ages(&[("n2".into(), 6.0)]);
    let text = m.encode().expect("encode");
    assert!(!text.contains("node=\"n1\""), "{text}");
    assert!(
        text.contains("nodegate_regated_node_age_seconds{node=\"n2\"} 6"),
        "{text}"
    );
}

#[test]
fn a_node_write_splits_into_its_wait_and_its_request() {
    let m = Metrics::new(Arc::new(Leadership::always()));
    let series =
        |name: &str, kind: &str| format!("nodegate_write_{name}_seconds_count{{kind=\"{kind}\"}}");
    let t = text(&m);
    for kind in ["untaint", "mark_timed_out", "add_taint", "patch"] {
        assert_eq!(
            sample(&t, &series("wait", kind)),
            Some(0.0),
            "{kind} in\n{t}"
        );
        assert_eq!(
            sample(&t, &series("request", kind)),
            Some(0.0),
            "{kind} in\n{t}"
        );
    }
    m.writes.observe(
        NodeWrite::Untaint,
        Duration::from_millis(3),
        Some(Duration::from_millis(40)),
    );
    // Refused before it was sent: a wait, no request.
    m.writes
        .observe(NodeWrite::AddTaint, Duration::from_millis(1), None);
    let t = text(&m);
    assert_eq!(sample(&t, &series("wait", "untaint")), Some(1.0));
    assert_eq!(sample(&t, &series("request", "untaint")), Some(1.0));
    assert_eq!(
        sample(&t, "nodegate_write_request_seconds_sum{kind=\"untaint\"}"),
        Some(0.04)
    );
    assert_eq!(sample(&t, &series("wait", "add_taint")), Some(1.0));
    assert_eq!(sample(&t, &series("request", "add_taint")), Some(0.0));
}
