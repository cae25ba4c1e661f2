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
    assert_eq!(s.on_timeout, OnTimeout::Open);
    assert!(!s.dry_run);
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
    assert_eq!(s.max_concurrent_patches, 16);
    assert_eq!(s.kube_request_timeout, Duration::from_secs(10));
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
        // Security review L2: 1/qps overflowed a Duration and panicked.
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
    assert_eq!(s.on_timeout, OnTimeout::Keep);
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
    assert_eq!(s.debug_history, 100);
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
    let cfg = GateConfig::from(&run);
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
    let cfg = GateConfig::from(&status);
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
    assert_eq!(s.debug_history, 5);
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

/// Security review L3: `--webhook-cert-validity` is capped at ten years (the
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

/// Security review §13: a NoExecute re-gate taint evicted every re-gated
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
    use nodegate_core::budget::MaxUnavailable;
    let s = run_settings(&run_args(&[])).unwrap();
    assert_eq!(s.gate.max_unavailable, Some(MaxUnavailable::Percent(50)));
    let s = run_settings(&run_args(&["--max-unavailable", "3"])).unwrap();
    assert_eq!(s.gate.max_unavailable, Some(MaxUnavailable::Count(3)));
    let s = run_settings(&run_args(&["--max-unavailable", "100%"])).unwrap();
    assert_eq!(s.gate.max_unavailable, None);
    let e = err_of(&["--max-unavailable", "most"]);
    assert!(e.contains("--max-unavailable") && e.contains("most"), "{e}");
}

/// Issue 25: the settings a YAML file yields, or the error, as `run` reads it.
fn from_yaml(yaml: &str) -> Result<RunSettings, String> {
    let file = FileConfig::parse(yaml, "c.yaml").map_err(|e| e.to_string())?;
    run_settings_from(&run_args(&[]), file).map_err(|e| e.to_string())
}

const POD: &str =
    "criticalPods:\n- name: gpu\n  namespace: kube-system\n  selector: {matchLabels: {app: gpu}}\n";

/// Every class of typo the newcomer review found, in every nested entry:
/// refused, naming the typo and the key meant, with the line.
#[test]
fn every_typo_is_refused_with_the_nearest_key() {
    let rule = "conditionTaints:\n- name: r\n  conditions: [{type: A, status: \"True\"}]\n  taint: {key: example.com/a, effect: NoSchedule}\n";
    let cases: Vec<(String, &str, &str)> = vec![
        ("timout: 3m\n".into(), "timout", "timeout"),
        ("nodeSelektor: a=b\n".into(), "nodeSelektor", "nodeSelector"),
        // The review's silent one: an empty node selector, every node waits.
        (format!("{POD}  nodeSelector: {{matchLabel: {{gpu: \"true\"}}}}\n"), "matchLabel", "matchLabels"),
        (format!("{POD}  nodeSelectr: gpu=true\n"), "nodeSelectr", "nodeSelector"),
        (
            "criticalPods:\n- name: gpu\n  namespace: kube-system\n  selector: {matchLabel: {app: gpu}}\n".into(),
            "matchLabel",
            "matchLabels",
        ),
        (
            format!("{POD}  nodeSelector: {{matchExpressions: [{{key: gpu, operater: Exists}}]}}\n"),
            "operater",
            "operator",
        ),
        (
            "criticalConditions:\n- type: GPUDriverReady\n  status: \"True\"\n  nodeSelector: {matchLabel: {gpu: \"true\"}}\n".into(),
            "matchLabel",
            "matchLabels",
        ),
        ("criticalConditions:\n- {type: A, staus: \"True\"}\n".into(), "staus", "status"),
        (format!("{rule}  nodeSelector: {{matchLabel: {{pool: spot}}}}\n"), "matchLabel", "matchLabels"),
        (format!("{rule}  maxUnavalable: 2\n"), "maxUnavalable", "maxUnavailable"),
        (rule.replace("effect:", "efect:"), "efect", "effect"),
        (rule.replace("status:", "staus:"), "staus", "status"),
    ];
    for (yaml, typo, meant) in cases {
        let e = from_yaml(&yaml).expect_err(&yaml);
        assert!(e.contains(&format!("unknown key `{typo}`")), "{e}\n{yaml}");
        assert!(
            e.contains(&format!("did you mean `{meant}`?")),
            "{e}\n{yaml}"
        );
        assert!(e.contains("at line"), "{e}\n{yaml}");
    }
}

/// Issue 25: a selector is a kubectl string or a LabelSelector map, in
/// every selector key of the file, and both mean the same.
#[test]
fn every_selector_takes_both_shapes() {
    let pod = |sel: &str, nodes: &str| {
        format!(
            "criticalPods:\n- name: p\n  namespace: kube-system\n  selector: {sel}\n  nodeSelector: {nodes}\n"
        )
    };
    let cond = |nodes: &str| {
        format!("criticalConditions:\n- {{type: A, status: \"True\", nodeSelector: {nodes}}}\n")
    };
    let rule = |nodes: &str| {
        format!(
            "conditionTaints:\n- name: r\n  conditions: [{{type: A, status: \"True\"}}]\n  taint: {{key: example.com/a, effect: NoSchedule}}\n  nodeSelector: {nodes}\n"
        )
    };
    let map = "{matchLabels: {gpu: \"true\"}, matchExpressions: [{key: zone, operator: In, values: [a, b]}]}";
    let text = "\"gpu=true,zone in (a,b)\"";
    let read = |yaml: String| from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let (a, b) = (read(pod(map, map)), read(pod(text, text)));
    assert_eq!(a.gate.critical, b.gate.critical);
    assert!(a.gate.critical[0].node_selector.is_some());
    let (a, b) = (read(cond(map)), read(cond(text)));
    assert_eq!(a.gate.conditions, b.gate.conditions);
    assert!(a.gate.conditions[0].node_selector.is_some());
    let (a, b) = (read(rule(map)), read(rule(text)));
    assert_eq!(a.gate.condition_taints, b.gate.condition_taints);
    assert!(a.gate.condition_taints[0].node_selector.is_some());
    for key in ["nodeSelector", "excludeSelector"] {
        let (a, b) = (
            read(format!("{key}: {map}\n")),
            read(format!("{key}: {text}\n")),
        );
        assert_eq!(a.gate.scope, b.gate.scope);
        assert_eq!(a.gate.placement, b.gate.placement);
        assert!(
            a.gate.scope.node_selector.is_some() || a.gate.placement.exclude_selector.is_some()
        );
    }
    // A broken one is named with its key, in either shape.
    let e = from_yaml(&pod("app=x", "\"gpu in (a\"")).expect_err("bad selector");
    assert!(e.contains("criticalPods[0] (p).nodeSelector"), "{e}");
    let e = from_yaml(&cond(
        "{matchExpressions: [{key: gpu, operator: Sometimes}]}",
    ))
    .expect_err("bad operator");
    assert!(
        e.contains("criticalConditions[0] (A).nodeSelector") && e.contains("Sometimes"),
        "{e}"
    );
}

/// Issue 25: `maxUnavailable: 0` silently meant 1; now each budget refuses 0.
#[test]
fn a_budget_of_zero_is_refused() {
    let rule = "conditionTaints:\n- name: r\n  conditions: [{type: A, status: \"True\"}]\n  taint: {key: example.com/a, effect: NoSchedule}\n";
    for (yaml, key) in [
        (
            format!("{rule}  maxUnavailable: 0\n"),
            "maxUnavailable \"0\"",
        ),
        (
            format!("{rule}  maxUnavailable: 0%\n"),
            "maxUnavailable \"0%\"",
        ),
        ("maxUnavailable: 0\n".to_string(), "--max-unavailable \"0\""),
        (
            "regateAfter: 2m\nregateMaxUnavailable: \"0\"\n".to_string(),
            "--regate-max-unavailable \"0\"",
        ),
    ] {
        let e = from_yaml(&yaml).expect_err(&yaml);
        assert!(e.contains(key) && e.contains("would mean 1"), "{e}\n{yaml}");
    }
    assert!(from_yaml(&format!("{rule}  maxUnavailable: 1\n")).is_ok());
}

/// `--autoscaler` and `--taint-for` (issue 27): presets by name, repeated or
/// comma-separated; rules before presets; every rule taint managed; each
/// mistake named with the value and what to write instead.
#[test]
fn startup_taints_are_chosen_by_rules_then_presets() {
    use nodegate_core::model::Labels;
    let s = run_settings(&run_args(&[
        "--autoscaler",
        "karpenter,gke",
        "--autoscaler",
        "cluster-autoscaler",
        "--taint-for",
        "pool=gpu=example.com/gpu-init",
    ]))
    .unwrap();
    let startup = &s.gate.startup;
    let node = |pairs: &[(&str, &str)]| -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let key = |l: Labels| startup.for_node(&l).key.clone();
    assert_eq!(
        key(node(&[("pool", "gpu"), ("karpenter.sh/nodepool", "a")])),
        "example.com/gpu-init"
    );
    assert_eq!(
        key(node(&[("karpenter.sh/nodepool", "a")])),
        "readiness.k8s.io/nodegate"
    );
    assert_eq!(
        key(node(&[("kubernetes.azure.com/agentpool", "a")])),
        "startup-taint.cluster-autoscaler.kubernetes.io/nodegate",
        "aks is not named, the catch-all takes it"
    );
    assert!(
        s.gate
            .placement
            .is_managed(&nodegate_core::model::Taint::new(
                "example.com/gpu-init",
                "",
                "NoSchedule"
            ))
    );

    let none = run_settings(&run_args(&["--autoscaler", "none"])).unwrap();
    assert_eq!(none.gate.placement.managed_taints.len(), 1);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        "autoscalers: [none]\ntaintFor:\n  - nodeSelector: pool=gpu\n    taint: example.com/gpu-init:NoExecute\n  - '!spot=example.com/x'\n",
    )
    .unwrap();
    let file = run_settings(&run_args(&["--config", path.to_str().unwrap()])).unwrap();
    let rules: Vec<String> = file
        .gate
        .startup
        .rules()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        rules,
        [
            "pool=gpu=example.com/gpu-init:NoExecute",
            "!spot=example.com/x:NoSchedule"
        ]
    );

    for (args, wanted) in [
        (
            vec!["--autoscaler", "karpentr"],
            "--autoscaler \"karpentr\": \"karpentr\" is not an autoscaler preset (did you mean \"karpenter\"?)",
        ),
        (vec!["--autoscaler", "none,gke"], "none means no preset"),
        (
            vec!["--taint-for", "pool in (a=example.com/x"],
            "--taint-for \"pool in (a=example.com/x\"",
        ),
        (vec!["--taint-for", "pool=gpu=Bad Key"], "invalid key"),
        (
            vec!["--taint-for", "nothing"],
            "write SELECTOR=KEY[:EFFECT]",
        ),
        (
            vec![
                "--taint-for",
                "pool=gpu=nodegate.dev/degraded",
                "--regate-after",
                "1m",
            ],
            "--regate-taint",
        ),
    ] {
        let e = err_of(&args);
        assert!(e.contains(wanted), "{args:?}: {e}");
    }
}
