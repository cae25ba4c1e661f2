//! settings' unit tests: defaults, flags over the YAML file, and every
//! validation error naming the bad value.

use super::*;
use clap::Parser;

fn run_args(extra: &[&str]) -> RunArgs {
    let mut argv = vec!["nodegate", "run"];
    argv.extend_from_slice(extra);
    match crate::settings::cli::Cli::try_parse_from(argv)
        .expect("flags parse")
        .command
    {
        crate::settings::cli::Command::Run(r) => *r,
        other => panic!("not run: {other:?}"),
    }
}

fn err_of(extra: &[&str]) -> String {
    run_settings(&run_args(extra))
        .expect_err("must be rejected")
        .to_string()
}

#[test]
fn defaults_match_the_documentation() {
    let s = run_settings(&run_args(&[])).unwrap();
    assert_eq!(s.timeout, Some(Duration::from_secs(120)));
    assert_eq!(s.given.on_timeout, OnTimeout::Open);
    assert!(!s.given.dry_run);
    // The first --taint, then the keys --autoscaler auto can choose.
    let managed: Vec<String> = s
        .gate
        .placement
        .managed_taints
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        managed,
        [
            "nodegate.dev/initializing:NoSchedule",
            "readiness.k8s.io/nodegate:NoSchedule",
            "startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule",
        ]
    );
    assert_eq!(s.gate.startup.rules().len(), 4);
    assert_eq!(s.given.max_concurrent_patches, 16);
    assert_eq!(s.kube_request_timeout, Duration::from_secs(10));
}

#[test]
fn worker_threads_default_to_one_and_are_bounded() {
    let s = run_settings(&run_args(&[])).unwrap();
    assert_eq!(s.given.worker_threads, 1);
    for n in ["0", "2", "256"] {
        let s = run_settings(&run_args(&["--worker-threads", n])).unwrap();
        assert_eq!(s.given.worker_threads.to_string(), n);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "workerThreads: 4\n").unwrap();
    let s = run_settings(&run_args(&["--config", path.to_str().unwrap()])).unwrap();
    assert_eq!(s.given.worker_threads, 4);
    let e = run_settings(&run_args(&["--worker-threads", "257"])).unwrap_err();
    assert!(e.to_string().contains("--worker-threads 257"), "{e}");
    assert!(e.to_string().contains("0 (one per CPU"), "{e}");
}

#[test]
fn the_request_timeout_is_a_positive_duration() {
    let s = run_settings(&run_args(&["--kube-request-timeout", "2500ms"])).unwrap();
    assert_eq!(s.kube_request_timeout, Duration::from_millis(2500));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "kubeRequestTimeout: 30s\n").unwrap();
    let s = run_settings(&run_args(&["--config", path.to_str().unwrap()])).unwrap();
    assert_eq!(s.kube_request_timeout, Duration::from_secs(30));
}

#[test]
fn zero_timeout_means_no_deadline() {
    assert_eq!(
        run_settings(&run_args(&["--timeout", "0"]))
            .unwrap()
            .timeout,
        None
    );
    assert_eq!(
        run_settings(&run_args(&["--timeout", "0s"]))
            .unwrap()
            .timeout,
        None
    );
}

#[test]
fn the_schedule_timeout_is_off_by_default_and_shorter_than_the_timeout() {
    assert_eq!(run_settings(&run_args(&[])).unwrap().schedule_timeout, None);
    let s = run_settings(&run_args(&["--schedule-timeout", "30s"])).unwrap();
    assert_eq!(s.schedule_timeout, Some(Duration::from_secs(30)));
    assert_eq!(
        Config::from(&s).schedule_timeout,
        Some(Duration::from_secs(30))
    );
    // With no deadline at all, the schedule deadline alone.
    let s = run_settings(&run_args(&["--timeout", "0", "--schedule-timeout", "5m"])).unwrap();
    assert_eq!(s.schedule_timeout, Some(Duration::from_secs(300)));
    let err = run_settings(&run_args(&["--timeout", "2m", "--schedule-timeout", "2m"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--schedule-timeout \"2m\"") && err.contains("--timeout \"2m\""),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "timeout: 1m\nscheduleTimeout: 90s\n").unwrap();
    let err = run_settings(&run_args(&["--config", path.to_str().unwrap()]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"90s\"") && err.contains("\"1m\""), "{err}");
}

/// Each flag set must be refused with an error that contains its needle.
fn assert_each_error_names(cases: &[(&[&str], &str)]) {
    for (flags, needle) in cases {
        let e = err_of(flags);
        assert!(
            e.contains(needle),
            "error for {flags:?} should name {needle:?}: {e}"
        );
    }
}

#[test]
fn bad_values_are_named_in_the_error() {
    let cases: &[(&[&str], &str)] = &[
        (&["--timeout=-5s"], "-5s"),
        (&["--timeout", "soon"], "soon"),
        (&["--taint", "x:Sometimes"], "Sometimes"),
        (&["--taint", "bad key:NoSchedule"], "bad key"),
        (&["--taint", "k=v:NoSchedule"], "k=v:NoSchedule"),
        (&["--exclude", "just-a-name"], "just-a-name"),
        (&["--transient-taint", "a*b"], "a*b"),
        (&["--transient-taint", "nodegate.dev/*"], "nodegate.dev/*"),
        (
            &["--max-concurrent-patches", "0"],
            "--max-concurrent-patches",
        ),
        (&["--kube-qps=-1"], "--kube-qps"),
        // Hardening: 1/qps overflowed a Duration and panicked.
        (&["--kube-qps=1e-20"], "--kube-qps"),
        (&["--kube-request-timeout", "0"], "--kube-request-timeout"),
        (&["--kube-request-timeout", "never"], "never"),
    ];
    assert_each_error_names(cases);
}

#[test]
fn flags_override_the_file_and_unknown_keys_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        "timeout: 30s\nonTimeout: keep\nexclude: [kube-system/a]\ncriticalPods:\n- name: proxy\n  namespace: kube-system\n  selector:\n    matchLabels: {k8s-app: kube-proxy}\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let s = run_settings(&run_args(&["--config", p, "--timeout", "45s"])).unwrap();
    assert_eq!(s.timeout, Some(Duration::from_secs(45)));
    assert_eq!(s.given.on_timeout, OnTimeout::Keep);
    assert!(
        s.gate
            .placement
            .excluded
            .contains(&("kube-system".to_string(), "a".to_string()))
    );
    assert_eq!(s.gate.critical.len(), 1);

    std::fs::write(&path, "timeotu: 30s\n").unwrap();
    let e = err_of(&["--config", p]);
    assert!(e.contains("timeotu"), "{e}");
}

#[test]
fn critical_pod_entries_need_a_selector() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        "criticalPods:\n- name: x\n  namespace: kube-system\n  selector: {}\n",
    )
    .unwrap();
    let e = err_of(&["--config", path.to_str().unwrap()]);
    assert!(e.contains("criticalPods[0] (x)"), "{e}");
}

#[test]
fn operations_defaults_match_the_documentation() {
    let s = run_settings(&run_args(&[])).unwrap();
    let le = &s.leader_election;
    assert!(!le.enabled);
    assert_eq!(le.lease_name, "nodegate");
    assert_eq!(le.lease_namespace, None);
    assert_eq!(
        (le.lease_duration, le.renew_deadline, le.retry_period),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    assert_eq!(s.http_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(
        s.debug_addr.map(|a| a.to_string()).as_deref(),
        Some("127.0.0.1:8081")
    );
    assert_eq!(s.given.debug_history, 100);
}

#[test]
fn debug_addr_may_be_turned_off_and_must_not_be_the_http_addr() {
    let s = run_settings(&run_args(&["--debug-addr", ""])).unwrap();
    assert_eq!(s.debug_addr, None);
    let s = run_settings(&run_args(&["--debug-addr", ":9091"])).unwrap();
    assert_eq!(
        s.debug_addr.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:9091")
    );
    // Port 0 twice is two free ports, not a clash.
    let s = run_settings(&run_args(&[
        "--http-addr",
        "127.0.0.1:0",
        "--debug-addr",
        "127.0.0.1:0",
    ]))
    .unwrap();
    assert_eq!(s.debug_addr.map(|a| a.port()), Some(0));
    let cases: &[(&[&str], &str)] = &[
        (
            &["--debug-addr", "localhost:1"],
            "--debug-addr \"localhost:1\"",
        ),
        (
            &["--http-addr", "0.0.0.0:8080", "--debug-addr", ":8080"],
            "must differ from --http-addr",
        ),
    ];
    assert_each_error_names(cases);
}

#[test]
fn lease_timings_must_be_in_order_and_the_error_names_all_three() {
    let ok = run_settings(&run_args(&[
        "--leader-elect",
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "500ms",
    ]))
    .unwrap();
    assert!(ok.leader_election.enabled);
    assert_eq!(ok.leader_election.retry_period, Duration::from_millis(500));

    let cases: &[(&[&str], &str)] = &[
        (
            &["--lease-duration", "10s", "--renew-deadline", "10s"],
            "--lease-duration 10s must be longer than --renew-deadline 10s",
        ),
        (
            &["--lease-duration", "5s", "--renew-deadline", "8s"],
            "--lease-duration 5s must be longer than --renew-deadline 8s",
        ),
        (
            &["--renew-deadline", "2s", "--retry-period", "3s"],
            "--renew-deadline 2s must be longer than --retry-period 3s",
        ),
        (
            &["--retry-period", "0"],
            "--retry-period must be longer than 0",
        ),
        (
            &["--lease-duration", "15500ms"],
            "must be a whole number of seconds",
        ),
        (&["--lease-duration", "soon"], "--lease-duration \"soon\""),
    ];
    for (flags, needle) in cases {
        let e = err_of(flags);
        assert!(
            e.contains(needle),
            "error for {flags:?} should say {needle:?}: {e}"
        );
    }
    // Every order error names the three values, so the fix is obvious.
    let e = err_of(&["--lease-duration", "5s", "--renew-deadline", "8s"]);
    assert!(
        e.starts_with("--lease-duration 5s --renew-deadline 8s --retry-period 2s: "),
        "{e}"
    );
}

#[test]
fn http_addr_and_lease_names_are_checked() {
    let s = run_settings(&run_args(&["--http-addr", ":9090"])).unwrap();
    assert_eq!(s.http_addr.to_string(), "0.0.0.0:9090");
    let s = run_settings(&run_args(&["--http-addr", "127.0.0.1:0"])).unwrap();
    assert_eq!(s.http_addr.port(), 0);
    let cases: &[(&[&str], &str)] = &[
        (
            &["--http-addr", "localhost:80"],
            "--http-addr \"localhost:80\"",
        ),
        (&["--http-addr", "8080"], "--http-addr \"8080\""),
        (&["--lease-name", "Nodegate"], "--lease-name \"Nodegate\""),
        (&["--lease-namespace", "kube.system"], "--lease-namespace"),
    ];
    assert_each_error_names(cases);
}

#[test]
fn run_and_status_turn_settings_into_the_gate_config_each_their_way() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "onTimeout: keep\ndryRun: false\ntimeout: 30s\n").unwrap();
    let p = path.to_str().unwrap();
    let run = run_settings(&run_args(&["--config", p, "--exclude", "ns/a"])).unwrap();
    let cfg = Config::from(&run);
    assert_eq!(cfg.on_timeout, OnTimeout::Keep);
    assert!(!cfg.dry_run);
    assert_eq!(cfg.timeout, Some(Duration::from_secs(30)));
    assert_eq!(cfg.placement.excluded, run.gate.placement.excluded);
    assert_eq!(
        cfg.placement.managed_taints,
        run.gate.placement.managed_taints
    );

    // Status reads the same file, but always runs the gate in dry-run,
    // opening on timeout.
    let status =
        match crate::settings::cli::Cli::try_parse_from(["nodegate", "status", "--config", p])
            .expect("flags parse")
            .command
        {
            crate::settings::cli::Command::Status(s) => status_settings(&s).unwrap(),
            other => panic!("not status: {other:?}"),
        };
    let cfg = Config::from(&status);
    assert_eq!(cfg.on_timeout, OnTimeout::Open);
    assert!(cfg.dry_run);
    assert_eq!(cfg.timeout, Some(Duration::from_secs(30)));
}

#[test]
fn leader_election_can_come_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        "leaderElect: true\nleaseName: ng\nleaseNamespace: ops\nleaseDuration: 20s\nhttpAddr: 127.0.0.1:9000\ndebugAddr: \"\"\ndebugHistory: 5\n",
    )
    .unwrap();
    let s = run_settings(&run_args(&["--config", path.to_str().unwrap()])).unwrap();
    assert!(s.leader_election.enabled);
    assert_eq!(s.leader_election.lease_name, "ng");
    assert_eq!(s.leader_election.lease_namespace.as_deref(), Some("ops"));
    assert_eq!(s.leader_election.lease_duration, Duration::from_secs(20));
    assert_eq!(s.http_addr.to_string(), "127.0.0.1:9000");
    assert_eq!(s.debug_addr, None);
    assert_eq!(s.given.debug_history, 5);
}

#[test]
fn otlp_endpoint_is_off_by_default_checked_and_taken_from_the_flag_or_the_file() {
    assert_eq!(run_settings(&run_args(&[])).unwrap().otlp_endpoint, None);
    let err = err_of(&["--otlp-endpoint", "otel-collector:4318"]);
    assert!(
        err.contains("--otlp-endpoint") && err.contains("otel-collector:4318"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "otlpEndpoint: http://file:4318\n").unwrap();
    let config = path.to_str().unwrap();
    let s = run_settings(&run_args(&["--config", config])).unwrap();
    assert_eq!(s.otlp_endpoint.as_deref(), Some("http://file:4318"));
    let s = run_settings(&run_args(&[
        "--config",
        config,
        "--otlp-endpoint",
        "https://flag:4318",
    ]))
    .unwrap();
    assert_eq!(s.otlp_endpoint.as_deref(), Some("https://flag:4318"));
}

/// The YAML parser's errors keep the position and quote the line, so the
/// key and the value are named whatever the parser's own words.
#[test]
fn yaml_errors_name_the_position_the_key_and_the_value() {
    for (text, wants) in [
        ("kubeQps: lots\n", &["line 1", "kubeQps", "lots"][..]),
        ("timeout: 1s\ntimeout: 2s\n", &["line 2", "timeout"]),
        ("dryRun: yes\n", &["line 1", "dryRun", "yes"]),
        ("exclude: notalist\n", &["line 1", "exclude", "notalist"]),
        ("timeotu: 30s\n", &["line 1", "timeotu"]),
    ] {
        let e = FileConfig::parse(text, "c.yaml")
            .expect_err(text)
            .to_string();
        assert!(e.starts_with("config file c.yaml: "), "{e}");
        for w in wants {
            assert!(e.contains(w), "{e:?} lacks {w:?}");
        }
        assert!(!e.contains('\n'), "one line: {e:?}");
    }
}

/// Hardening: `--webhook-cert-validity` is capped at ten years (the
/// CA lives ten times as long; beyond year 9999 nothing can be issued), and
/// the refusal names the flag, the value and the bounds.
#[test]
fn the_webhook_certificate_validity_is_capped() {
    let with = |v: &str| {
        run_settings(&run_args(&[
            "--webhook-addr",
            "127.0.0.1:9443",
            "--webhook-cert-secret",
            "nodegate/nodegate-webhook",
            "--webhook-configuration",
            "nodegate",
            "--webhook-host",
            "nodegate.example",
            "--webhook-cert-validity",
            v,
        ]))
    };
    assert!(with("3650d").is_ok());
    for bad in ["3651d", "900000000d", "30s"] {
        let e = with(bad).expect_err("must be refused").to_string();
        assert!(
            e.contains(&format!("--webhook-cert-validity \"{bad}\""))
                && e.contains("between 1m and 3650d"),
            "{e}"
        );
    }
}

/// Hardening: a NoExecute re-gate taint evicted every re-gated
/// node's workloads and was accepted silently; it now needs its opt-in.
#[test]
fn a_no_execute_regate_taint_needs_its_opt_in() {
    let no_execute = [
        "--regate-after",
        "2m",
        "--regate-taint",
        "nodegate.dev/degraded:NoExecute",
    ];
    let e = err_of(&no_execute);
    assert!(
        e.contains("--regate-taint") && e.contains("--regate-allow-no-execute"),
        "{e}"
    );
    let mut allowed = no_execute.to_vec();
    allowed.push("--regate-allow-no-execute");
    let s = run_settings(&run_args(&allowed)).unwrap();
    let rc = s.gate.regate.expect("re-gating on");
    assert_eq!(rc.taint.effect, "NoExecute");
    let e = err_of(&["--regate-allow-no-execute"]);
    assert!(e.contains("re-gating is off"), "{e}");
}

/// `--max-unavailable`: 50% unless given, 100% turns the cap off, and a bad
/// value names the flag.
#[test]
fn the_total_cap_reads_like_a_budget() {
    use nodegate_core::vocab::budget::MaxUnavailable;
    let s = run_settings(&run_args(&[])).unwrap();
    assert_eq!(s.gate.max_unavailable, Some(MaxUnavailable::Percent(50)));
    let s = run_settings(&run_args(&["--max-unavailable", "3"])).unwrap();
    assert_eq!(s.gate.max_unavailable, Some(MaxUnavailable::Count(3)));
    let s = run_settings(&run_args(&["--max-unavailable", "100%"])).unwrap();
    assert_eq!(s.gate.max_unavailable, None);
    let e = err_of(&["--max-unavailable", "most"]);
    assert!(e.contains("--max-unavailable") && e.contains("most"), "{e}");
}

// The config file as a newcomer writes it (typos, selector shapes, budgets)
// and the per-node startup taints.
mod file;

/// `--reboot-announcements` (semantics.md §6.10): off by default; sources
/// read comma-separated or repeated; it needs re-gating on, its two
/// companions need a source, and each bad value is named.
#[test]
fn reboot_announcements_are_off_by_default_and_need_re_gating() {
    use nodegate_core::vocab::config::{DEFAULT_REBOOT_TIMEOUT, Source};
    let s = run_settings(&run_args(&[])).unwrap();
    assert!(s.gate.reboots.sources.is_empty());
    let s = run_settings(&run_args(&[
        "--regate-after",
        "2m",
        "--reboot-announcements",
        "kured-lock,annotation",
        "--reboot-announcements",
        "kured-lock",
    ]))
    .unwrap();
    assert_eq!(
        s.gate.reboots.sources,
        [Source::KuredLock, Source::Annotation]
    );
    assert_eq!(s.gate.reboots.kured_daemonset, "kube-system/kured");
    assert_eq!(s.gate.reboots.kured_max_holders, 1);
    assert_eq!(s.gate.reboots.timeout, Some(DEFAULT_REBOOT_TIMEOUT));
    let e = err_of(&["--reboot-announcements", "annotation"]);
    assert!(
        e.contains("--reboot-announcements") && e.contains("--regate-after"),
        "{e}"
    );
    let e = err_of(&["--reboot-timeout", "5m"]);
    assert!(
        e.contains("--reboot-timeout") && e.contains("--reboot-announcements"),
        "{e}"
    );
    let on = ["--regate-after", "2m", "--reboot-announcements"];
    let e = err_of(&[&on[..], &["kured"]].concat());
    assert!(e.contains("\"kured\"") && e.contains("kured-lock"), "{e}");
    let e = err_of(&[&on[..], &["kured-lock", "--kured-daemonset", "kured"]].concat());
    assert!(e.contains("--kured-daemonset \"kured\""), "{e}");
    let e = err_of(&[&on[..], &["kured-lock", "--kured-max-holders", "0"]].concat());
    assert!(e.contains("--kured-max-holders 0"), "{e}");
    let e = err_of(&["--kured-max-holders", "3"]);
    assert!(
        e.contains("--kured-max-holders") && e.contains("--reboot-announcements"),
        "{e}"
    );
    let s = run_settings(&run_args(
        &[&on[..], &["kured-lock", "--kured-max-holders", "3"]].concat(),
    ))
    .unwrap();
    assert_eq!(s.gate.reboots.kured_max_holders, 3);
    let s = run_settings(&run_args(
        &[&on[..], &["annotation", "--reboot-timeout", "0"]].concat(),
    ))
    .unwrap();
    assert_eq!(s.gate.reboots.timeout, None);
}

/// Issue 38: `--log-level warning` is `warn` (it once silenced every line);
/// a bare word that is no level is refused, naming it.
#[test]
fn log_levels_are_levels_and_warning_is_warn() {
    assert_eq!(log_level("warning").ok().as_deref(), Some("warn"));
    assert_eq!(
        log_level("INFO, nodegate=Warning").ok().as_deref(),
        Some("info,nodegate=warn")
    );
    for bad in ["verbose", "info,loud", "nodegate=loud", ""] {
        let e = log_level(bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("--log-level"), "{bad:?}: {e}");
    }
    let s = run_settings(&run_args(&["--log-level", "warning"]));
    assert_eq!(s.map(|s| s.log_level).ok().as_deref(), Some("warn"));
}
