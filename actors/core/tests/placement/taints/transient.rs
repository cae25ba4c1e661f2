//! Transient and managed taints: `should_run` keeps them, the steady-state
//! view drops the transient ones; how both are parsed, written and matched.

use super::*;

#[test]
fn should_run_does_not_strip_transient_or_managed_taints() {
    for t in [
        taint(
            "node.cloudprovider.kubernetes.io/uninitialized",
            "NoSchedule",
        ),
        taint("nodegate.dev/initializing", "NoSchedule"),
        taint("readiness.k8s.io/net", "NoSchedule"),
    ] {
        assert!(
            should_run(
                "n",
                &labels(&[]),
                std::slice::from_ref(&t),
                &PodPlacement::default()
            )
            .is_err(),
            "{t}"
        );
    }
}

#[test]
fn transient_taint_parse_and_match() {
    assert_eq!(
        TransientTaint::parse("a/b"),
        TransientTaint::Exact("a/b".into())
    );
    assert_eq!(
        TransientTaint::parse("a/*"),
        TransientTaint::Prefix("a/".into())
    );
    assert_eq!(
        TransientTaint::parse("  a/b  "),
        TransientTaint::Exact("a/b".into())
    );
    assert_eq!(
        TransientTaint::parse("*"),
        TransientTaint::Prefix(String::new())
    );
    let exact = TransientTaint::parse("example.com/booting");
    assert!(exact.matches("example.com/booting"));
    assert!(!exact.matches("example.com/booting-2"));
    assert!(!exact.matches("example.com/boot"));
    let prefix = TransientTaint::parse("readiness.k8s.io/*");
    assert!(prefix.matches("readiness.k8s.io/"));
    assert!(prefix.matches("readiness.k8s.io/net"));
    assert!(!prefix.matches("readiness.k8s.io"));
    assert!(!prefix.matches("xreadiness.k8s.io/net"));
    assert!(TransientTaint::parse("*").matches("anything"));
}

#[test]
fn transient_taints_display_and_serde_as_their_written_form() {
    for s in ["a/b", "a/*", "*"] {
        let t = TransientTaint::parse(s);
        assert_eq!(t.to_string(), s);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("{s:?}"));
        assert_eq!(serde_json::from_str::<TransientTaint>(&json).unwrap(), t);
    }
}

#[test]
fn default_transient_taints_are_the_documented_list() {
    let got: Vec<String> = default_transient_taints()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        got,
        vec![
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/network-unavailable",
            "node.cloudprovider.kubernetes.io/uninitialized",
            "karpenter.sh/unregistered",
            "node.cilium.io/agent-not-ready",
            "ebs.csi.aws.com/agent-not-ready",
            "efs.csi.aws.com/agent-not-ready",
            "cni.istio.io/not-ready",
            "startup-taint.cluster-autoscaler.kubernetes.io/*",
            "readiness.k8s.io/*",
        ]
    );
}

#[test]
fn default_config_manages_the_initializing_taint() {
    let cfg = PlacementConfig::default();
    assert_eq!(
        cfg.managed_taints,
        vec![ManagedTaint::new("nodegate.dev/initializing", "NoSchedule")]
    );
    assert_eq!(cfg.transient_taints, default_transient_taints());
    assert!(cfg.excluded.is_empty());
    assert!(cfg.exclude_selector.is_none());
}

#[test]
fn a_managed_taint_is_matched_by_key_and_effect_only() {
    let cfg = PlacementConfig::default();
    assert!(cfg.is_managed(&taint("nodegate.dev/initializing", "NoSchedule")));
    assert!(cfg.is_managed(&taint_v("nodegate.dev/initializing", "any", "NoSchedule")));
    assert!(!cfg.is_managed(&taint("nodegate.dev/initializing", "NoExecute")));
    assert!(!cfg.is_managed(&taint("nodegate.dev/other", "NoSchedule")));
}

#[test]
fn a_managed_taint_is_never_transient() {
    let mut cfg = PlacementConfig::default();
    cfg.transient_taints
        .push(TransientTaint::parse("nodegate.dev/*"));
    let ours = taint("nodegate.dev/initializing", "NoSchedule");
    assert!(!cfg.is_transient(&ours));
    assert!(cfg.is_transient(&taint("nodegate.dev/other", "NoSchedule")));
    assert_eq!(
        cfg.steady_state_taints(std::slice::from_ref(&ours)),
        vec![ours]
    );
}

#[test]
fn steady_state_removes_transient_taints_of_every_effect() {
    let cfg = PlacementConfig::default();
    let taints = vec![
        taint("node.kubernetes.io/not-ready", "NoSchedule"),
        taint("node.kubernetes.io/not-ready", "NoExecute"),
        taint(
            "startup-taint.cluster-autoscaler.kubernetes.io/gpu",
            "NoSchedule",
        ),
        taint("dedicated", "NoSchedule"),
        taint("nodegate.dev/initializing", "NoSchedule"),
    ];
    assert_eq!(
        cfg.steady_state_taints(&taints),
        vec![
            taint("dedicated", "NoSchedule"),
            taint("nodegate.dev/initializing", "NoSchedule")
        ]
    );
}

#[test]
fn managed_taint_parse() {
    let t = ManagedTaint::parse("nodegate.dev/initializing:NoSchedule").unwrap();
    assert_eq!(
        t,
        ManagedTaint::new("nodegate.dev/initializing", "NoSchedule")
    );
    assert_eq!(t.to_string(), "nodegate.dev/initializing:NoSchedule");
    assert_eq!(
        t.to_taint(),
        taint("nodegate.dev/initializing", "NoSchedule")
    );
    assert_eq!(
        ManagedTaint::parse("x:NoExecute").unwrap().effect,
        "NoExecute"
    );

    let err = |s: &str| ManagedTaint::parse(s).unwrap_err().to_string();
    assert_eq!(
        err("nodegate.dev/initializing"),
        r#"managed taint "nodegate.dev/initializing": expected key:Effect, e.g. nodegate.dev/initializing:NoSchedule"#
    );
    assert!(err("x:PreferNoSchedule").contains(r#"effect "PreferNoSchedule" cannot gate a node"#));
    assert!(err("x:noschedule").contains("use NoSchedule or NoExecute"));
    assert!(err(":NoSchedule").contains("key must not be empty"));
    assert!(err("a b:NoSchedule").contains(r#"invalid key "a b""#));
}
