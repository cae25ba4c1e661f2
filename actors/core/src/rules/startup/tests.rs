use super::*;
use crate::vocab::model::Taint;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string().into(), v.to_string().into()))
        .collect()
}

fn default_taint() -> ManagedTaint {
    ManagedTaint::new("nodegate.dev/initializing", "NoSchedule")
}

fn presets(names: &[Autoscaler]) -> StartupTaints {
    StartupTaints::new(Vec::new(), names, default_taint())
}

/// A node of each platform, as its provisioner labels it.
fn karpenter_node() -> Labels {
    labels(&[(KARPENTER_NODEPOOL_LABEL, "default")])
}
fn gke_node() -> Labels {
    labels(&[(GKE_NODEPOOL_LABEL, "pool-1")])
}
fn aks_node() -> Labels {
    labels(&[(AKS_AGENTPOOL_LABEL, "nodepool1")])
}
fn eks_node() -> Labels {
    labels(&[(EKS_NODEGROUP_LABEL, "ng-1")])
}
fn plain_node() -> Labels {
    labels(&[("kubernetes.io/os", "linux")])
}

#[test]
fn each_preset_chooses_its_key_for_its_nodes_and_leaves_the_others_to_the_first_taint() {
    let ca = CLUSTER_AUTOSCALER_TAINT_KEY;
    let cases: &[(Autoscaler, Labels, &str)] = &[
        (Autoscaler::Karpenter, karpenter_node(), KARPENTER_TAINT_KEY),
        (
            Autoscaler::Karpenter,
            gke_node(),
            "nodegate.dev/initializing",
        ),
        (Autoscaler::Gke, gke_node(), ca),
        (
            Autoscaler::Gke,
            karpenter_node(),
            "nodegate.dev/initializing",
        ),
        (Autoscaler::Aks, aks_node(), ca),
        (Autoscaler::Aks, eks_node(), "nodegate.dev/initializing"),
        (Autoscaler::Eks, eks_node(), ca),
        (Autoscaler::Eks, plain_node(), "nodegate.dev/initializing"),
        (Autoscaler::ClusterAutoscaler, plain_node(), ca),
        (Autoscaler::ClusterAutoscaler, karpenter_node(), ca),
        (
            Autoscaler::None,
            karpenter_node(),
            "nodegate.dev/initializing",
        ),
        (Autoscaler::None, gke_node(), "nodegate.dev/initializing"),
        (Autoscaler::Auto, karpenter_node(), KARPENTER_TAINT_KEY),
        (Autoscaler::Auto, gke_node(), ca),
        (Autoscaler::Auto, aks_node(), ca),
        (Autoscaler::Auto, eks_node(), ca),
        (Autoscaler::Auto, plain_node(), "nodegate.dev/initializing"),
    ];
    for (preset, node, key) in cases {
        let chosen = presets(&[*preset]).for_node(node).clone();
        assert_eq!(
            chosen,
            ManagedTaint::new(*key, "NoSchedule"),
            "--autoscaler {preset} on a node labelled {node:?}"
        );
    }
}

#[test]
fn explicit_rules_come_first_in_order_then_presets_then_the_first_taint() {
    let explicit = vec![
        StartupRule::parse("pool=gpu=example.com/gpu-init:NoExecute").unwrap(),
        StartupRule::parse("pool in (gpu,cpu)=example.com/second").unwrap(),
    ];
    let st = StartupTaints::new(explicit, &[Autoscaler::Auto], default_taint());
    let mut gpu_karpenter = karpenter_node();
    gpu_karpenter.insert("pool".into(), "gpu".into());
    assert_eq!(
        st.for_node(&gpu_karpenter),
        &ManagedTaint::new("example.com/gpu-init", "NoExecute"),
        "the first explicit rule wins over the second and over the preset"
    );
    let mut cpu_karpenter = karpenter_node();
    cpu_karpenter.insert("pool".into(), "cpu".into());
    assert_eq!(
        st.for_node(&cpu_karpenter),
        &ManagedTaint::new("example.com/second", "NoSchedule"),
        "an explicit rule's EFFECT defaults to NoSchedule"
    );
    assert_eq!(
        st.for_node(&karpenter_node()).key,
        KARPENTER_TAINT_KEY,
        "no explicit rule matches: the preset"
    );
    assert_eq!(st.for_node(&plain_node()), &default_taint());
}

#[test]
fn eks_auto_mode_nodes_match_karpenter_first_and_the_catch_all_stays_last() {
    let mut auto_mode = eks_node();
    auto_mode.insert(KARPENTER_NODEPOOL_LABEL.into(), "general-purpose".into());
    let both = presets(&[Autoscaler::Eks, Autoscaler::Karpenter]);
    // Named eks first: the order of the names decides between two presets.
    assert_eq!(both.for_node(&auto_mode).key, CLUSTER_AUTOSCALER_TAINT_KEY);
    assert_eq!(
        presets(&[Autoscaler::Auto]).for_node(&auto_mode).key,
        KARPENTER_TAINT_KEY
    );
    let catch_all_first = presets(&[Autoscaler::ClusterAutoscaler, Autoscaler::Karpenter]);
    assert_eq!(
        catch_all_first.for_node(&karpenter_node()).key,
        KARPENTER_TAINT_KEY,
        "the catch-all never hides a preset named after it"
    );
    assert_eq!(
        catch_all_first.for_node(&plain_node()).key,
        CLUSTER_AUTOSCALER_TAINT_KEY
    );
}

#[test]
fn the_managed_set_is_every_taint_then_every_rule_taint_once() {
    let explicit = vec![StartupRule::parse("pool=gpu=example.com/gpu-init").unwrap()];
    let st = StartupTaints::new(
        explicit,
        &[
            Autoscaler::Auto,
            Autoscaler::Karpenter,
            Autoscaler::ClusterAutoscaler,
        ],
        default_taint(),
    );
    let extra = ManagedTaint::new("example.com/other", "NoSchedule");
    assert_eq!(
        st.managed(&[default_taint(), extra.clone()]),
        vec![
            default_taint(),
            extra,
            ManagedTaint::new("example.com/gpu-init", "NoSchedule"),
            ManagedTaint::new(KARPENTER_TAINT_KEY, "NoSchedule"),
            ManagedTaint::new(CLUSTER_AUTOSCALER_TAINT_KEY, "NoSchedule"),
        ]
    );
    assert_eq!(
        presets(&[Autoscaler::None]).managed(&[default_taint()]),
        vec![default_taint()],
        "no preset: the --taints alone"
    );
    // auto named twice, and karpenter inside it again: each rule once.
    assert_eq!(
        presets(&[Autoscaler::Auto, Autoscaler::Auto, Autoscaler::Karpenter])
            .rules()
            .len(),
        4
    );
}

#[test]
fn names_are_read_with_a_suggestion_for_a_typo() {
    for a in Autoscaler::ALL {
        assert_eq!(Autoscaler::parse(a.as_str()), Ok(a));
    }
    assert_eq!(Autoscaler::parse(" Karpenter "), Ok(Autoscaler::Karpenter));
    let e = Autoscaler::parse("karpentr").unwrap_err();
    assert_eq!(e.nearest, Some("karpenter"));
    let text = e.to_string();
    assert!(
        text.contains("\"karpentr\"") && text.contains("did you mean \"karpenter\""),
        "{text}"
    );
    assert_eq!(
        Autoscaler::parse("cluster").unwrap_err().nearest,
        Some("cluster-autoscaler")
    );
    let far = Autoscaler::parse("openshift").unwrap_err();
    assert_eq!(far.nearest, None);
    assert!(
        far.to_string()
            .contains("auto, karpenter, cluster-autoscaler, gke, aks, eks, none")
    );
}

#[test]
fn a_bad_rule_names_the_bad_part() {
    let cases = [
        ("no-equals-sign", "expected SELECTOR=KEY[:EFFECT]"),
        ("pool in (a=example.com/x", "label selector"),
        ("pool=gpu=Bad Key", "invalid key"),
        (
            "pool=gpu=example.com/x:PreferNoSchedule",
            "cannot gate a node",
        ),
    ];
    for (input, wanted) in cases {
        let e = StartupRule::parse(input).unwrap_err();
        assert!(
            e.to_string().contains(wanted) && e.to_string().contains(input),
            "{input}: {e}"
        );
    }
    // An empty selector is every node: an explicit catch-all.
    let all = StartupRule::parse("=example.com/x").unwrap();
    assert!(all.selector.matches(&plain_node()));
}

#[test]
fn the_admission_rules_read_back_as_the_same_rules() {
    let explicit =
        vec![StartupRule::parse("pool in (gpu, cpu),!spot=example.com/x:NoExecute").unwrap()];
    let st = StartupTaints::new(
        explicit,
        &[Autoscaler::Auto, Autoscaler::ClusterAutoscaler],
        default_taint(),
    );
    let text = st.admission_rules();
    assert_eq!(
        text,
        "pool in (gpu,cpu),!spot=example.com/x:NoExecute\n\
         karpenter.sh/nodepool=readiness.k8s.io/nodegate:NoSchedule\n\
         cloud.google.com/gke-nodepool=startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule\n\
         kubernetes.azure.com/agentpool=startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule\n\
         eks.amazonaws.com/nodegroup=startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule\n\
         =startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule\n"
    );
    let back: Vec<StartupRule> = text
        .lines()
        .map(|l| StartupRule::parse(l).unwrap())
        .collect();
    for (read, rule) in back.iter().zip(st.rules()) {
        assert_eq!((&read.selector, &read.taint), (&rule.selector, &rule.taint));
    }
}

/// cluster-autoscaler's startup-taint rules (test (e) of issue 27), as a
/// small pure model of CA 1.36's `utils/taints/taints.go`
/// (https://github.com/kubernetes/autoscaler/blob/cluster-autoscaler-1.36.0/cluster-autoscaler/utils/taints/taints.go):
/// a taint is a startup taint when its key is listed with `--startup-taint`
/// (or the older `--ignore-taint`), starts with a `--startup-taint-prefix`
/// (new in 1.36), or starts with `startup-taint.cluster-autoscaler.kubernetes.io/`
/// or the legacy `ignore-taint.cluster-autoscaler.kubernetes.io/` — the last
/// two need no flag, and are the only kind GKE's and AKS's managed CA accept.
/// `SanitizeTaints` strips startup taints from a node copied as a node-group
/// template (`processors/nodeinfosprovider/mixed_nodeinfos_processor.go`).
mod cluster_autoscaler {
    use super::*;

    const STARTUP_PREFIX: &str = "startup-taint.cluster-autoscaler.kubernetes.io/";
    const IGNORE_PREFIX: &str = "ignore-taint.cluster-autoscaler.kubernetes.io/";

    /// The flags that matter, as a deployment gives them; default: none.
    #[derive(Default)]
    struct Flags {
        startup_taints: Vec<&'static str>,
        startup_taint_prefixes: Vec<&'static str>,
    }

    fn is_startup_taint(flags: &Flags, key: &str) -> bool {
        key.starts_with(STARTUP_PREFIX)
            || key.starts_with(IGNORE_PREFIX)
            || flags.startup_taints.contains(&key)
            || flags
                .startup_taint_prefixes
                .iter()
                .any(|p| key.starts_with(p))
    }

    /// A node-group template from a node: its taints, startup taints gone.
    fn template_taints(flags: &Flags, node: &[Taint]) -> Vec<Taint> {
        node.iter()
            .filter(|t| !is_startup_taint(flags, &t.key))
            .cloned()
            .collect()
    }

    #[test]
    fn every_ca_preset_key_is_a_startup_taint_with_no_flag() {
        let flags = Flags::default();
        for (preset, node) in [
            (Autoscaler::Gke, gke_node()),
            (Autoscaler::Aks, aks_node()),
            (Autoscaler::Eks, eks_node()),
            (Autoscaler::ClusterAutoscaler, plain_node()),
            (Autoscaler::Auto, gke_node()),
            (Autoscaler::Auto, aks_node()),
            (Autoscaler::Auto, eks_node()),
        ] {
            let chosen = presets(&[preset]).for_node(&node).to_taint();
            assert!(
                is_startup_taint(&flags, &chosen.key),
                "--autoscaler {preset}: CA with no flag must treat {chosen} as a startup taint"
            );
            let gated = vec![
                chosen.clone(),
                Taint::new("dedicated", "infra", "NoSchedule"),
            ];
            assert_eq!(
                template_taints(&flags, &gated),
                vec![Taint::new("dedicated", "infra", "NoSchedule")],
                "--autoscaler {preset}: a template copied from a gated node must not carry {chosen}"
            );
        }
    }

    #[test]
    fn the_old_default_key_needs_a_flag_which_managed_ca_cannot_take() {
        let key = default_taint().key;
        assert!(!is_startup_taint(&Flags::default(), &key));
        let gated = vec![default_taint().to_taint()];
        assert_eq!(template_taints(&Flags::default(), &gated), gated);
        let listed = Flags {
            startup_taints: vec!["nodegate.dev/initializing"],
            ..Flags::default()
        };
        assert!(is_startup_taint(&listed, &key));
        let prefixed = Flags {
            startup_taint_prefixes: vec!["nodegate.dev/"],
            ..Flags::default()
        };
        assert!(is_startup_taint(&prefixed, &key));
    }

    #[test]
    fn the_karpenter_key_is_under_readiness_k8s_io() {
        for preset in [Autoscaler::Karpenter, Autoscaler::Auto] {
            let chosen = presets(&[preset]).for_node(&karpenter_node()).key.clone();
            assert!(
                chosen.starts_with("readiness.k8s.io/"),
                "--autoscaler {preset}: Karpenter ignores only readiness.k8s.io/ keys while a node initializes, got {chosen}"
            );
        }
    }
}
