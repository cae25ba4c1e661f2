//! settings' unit tests, continued: the config file as a newcomer writes
//! it (typos, both selector shapes, budgets), and the startup taints chosen
//! per node.

use super::*;

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
    use nodegate_core::vocab::model::Labels;
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
            .map(|(k, v)| (k.to_string().into(), v.to_string().into()))
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
            .is_managed(&nodegate_core::vocab::model::Taint::new(
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
