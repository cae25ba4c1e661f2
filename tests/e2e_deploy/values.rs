//! The chart refuses bad values at `helm template` and `helm install`
//! (values.schema.json, generated from the settings table, and
//! templates/validate.yaml), each naming the value; and every config-file
//! key without a flag is reachable from values as structured YAML.

use super::manifests::{container_args, helm_refuses};
use super::*;

/// Each `--set`/`--set-json` that must be refused, and what the error must
/// name (the value's path in the schema's words, or the template's).
const BAD: &[(&str, &str, &str)] = &[
    (
        "--set",
        "config.timout=5m",
        "additional properties 'timout'",
    ),
    ("--set", "config.timeout=5x", "/config/timeout"),
    ("--set", "config.kubeQps=-1", "/config/kubeQps"),
    ("--set", "config.kubeBurst=0", "/config/kubeBurst"),
    (
        "--set",
        "config.maxConcurrentPatches=0",
        "/config/maxConcurrentPatches",
    ),
    (
        "--set",
        "config.taints[0]=example.com/x:Sometimes",
        "/config/taints/0",
    ),
    ("--set", "config.taints[0]=bad key", "/config/taints/0"),
    (
        "--set",
        "config.regateTaint=a=b:NoSchedule",
        "/config/regateTaint",
    ),
    (
        "--set",
        "config.managedNodeSelector=pool in (a",
        "/config/managedNodeSelector",
    ),
    (
        "--set",
        "config.excludeSelector=a=b=c",
        "/config/excludeSelector",
    ),
    (
        "--set",
        "config.maxUnavailable=150%",
        "/config/maxUnavailable",
    ),
    (
        "--set",
        "config.regateMaxUnavailable=ten",
        "/config/regateMaxUnavailable",
    ),
    ("--set", "config.onTimeout=close", "/config/onTimeout"),
    ("--set", "config.logFormat=xml", "/config/logFormat"),
    ("--set", "config.exclude[0]=no-slash", "/config/exclude/0"),
    (
        "--set",
        "config.daemonsetNamespaces[0]=Kube_System",
        "/config/daemonsetNamespaces/0",
    ),
    (
        "--set",
        // A bare number is seconds (15 is 15s): a unit it does not know.
        "leaderElection.leaseDuration=15x",
        "/leaderElection/leaseDuration",
    ),
    (
        "--set",
        "zoneSpread.whenUnsatisfiable=Maybe",
        "/zoneSpread/whenUnsatisfiable",
    ),
    ("--set", "admission=sometimes", "/admission"),
    (
        "--set",
        "webhook.timeoutSeconds=60",
        "/webhook/timeoutSeconds",
    ),
    ("--set", "image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("--set", "replicaCount=0", "/replicaCount"),
    (
        "--set",
        "resourcez.limits.cpu=1",
        "additional properties 'resourcez'",
    ),
    (
        "--set-json",
        r#"config.criticalPods=[{"name":"gpu","namespace":"kube-system","selector":{"matchLabel":{"app":"gpu"}}}]"#,
        "/config/criticalPods/0/selector",
    ),
    (
        "--set-json",
        r#"config.criticalConditions=[{"type":"NetworkReady","status":"True","nodeSelector":{"matchLabel":{"pool":"gpu"}}}]"#,
        "/config/criticalConditions/0/nodeSelector",
    ),
    (
        "--set-json",
        r#"config.conditionTaints=[{"name":"r","conditions":[{"type":"Ready","status":"False","for":"1 minute later"}],"taint":{"key":"example.com/r","effect":"NoSchedule"}}]"#,
        "/config/conditionTaints/0/conditions/0/for",
    ),
    (
        "--set-json",
        r#"config.conditionTaints=[{"name":"r","conditions":[{"type":"Ready","status":"False"}],"taint":{"key":"example.com/r","effect":"Sometimes"}}]"#,
        "/config/conditionTaints/0/taint/effect",
    ),
    ("--set", "config.suspend=yes", "/config/suspend"),
    // Combinations the schema cannot express: templates/validate.yaml.
    (
        "--set",
        "config.regateOnReboot=true",
        "config.regateOnReboot needs re-gating on",
    ),
    // The chart's optional objects (issue 38): typed like the rest.
    (
        "--set",
        "prometheusRule.enabeld=true",
        "additional properties 'enabeld'",
    ),
    (
        "--set",
        "dashboard.namespace=Grafana_Dashboards",
        "/dashboard/namespace",
    ),
    ("--set", "namespace.create=yes", "/namespace/create"),
    ("--set", "config.workerThreads=257", "/config/workerThreads"),
];

#[test]
fn helm_template_refuses_each_bad_value_naming_it() {
    let mut wrong = Vec::new();
    for (how, value, named) in BAD {
        let err = helm_refuses(&[how, value]);
        if !err.contains(named) {
            wrong.push(format!(
                "{how} {value}: the error does not name {named:?}:\n{err}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A value refused by a pattern is explained in words, not by the raw
/// regex: Helm prints the schema's description of the value, and no
/// pattern.
#[test]
fn helm_shows_the_description_of_a_value_its_pattern_refuses() {
    for (value, says) in [
        ("config.timeout=5x", "a duration such as 90s, 2m or 1h30m"),
        ("config.timeout=soon", "a duration such as 90s, 2m or 1h30m"),
        ("config.taints[0]=bad key", "a taint KEY[:EFFECT]"),
        ("config.maxUnavailable=150%", "a count or a percentage"),
        (
            "config.managedNodeSelector=pool in (a",
            "a label selector in kubectl syntax",
        ),
    ] {
        let err = helm_refuses(&["--set", value]);
        assert!(
            err.contains(&format!("value must be '{says}")),
            "--set {value}: the error does not say {says:?}:\n{err}"
        );
        // The description, not the schema's raw regex.
        assert!(
            !err.contains("does not match pattern"),
            "--set {value}: the error shows the raw pattern:\n{err}"
        );
    }
}

/// The same refusals through `helm install --dry-run=server` against a real
/// API server: nothing reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_refuses_bad_values() {
    let cluster = TestCluster::start("deploy-values").await;
    let kubeconfig = cluster.kubeconfig.to_str().expect("utf-8 path");
    let install = |extra: &[&str]| {
        let mut args = vec![
            "install",
            "nodegate",
            "deploy/helm/nodegate",
            "--namespace",
            NS,
            "--create-namespace",
            "--dry-run=server",
            "--kubeconfig",
            kubeconfig,
        ];
        args.extend_from_slice(extra);
        run(&helm_bin(), &args, None)
    };
    // The defaults pass, so a refusal below is the value's.
    let good = install(&[]);
    assert!(good.ok, "the default values must install:\n{}", good.stderr);
    for (how, value, named) in [BAD[0], BAD[1], BAD[2], BAD[5], BAD[8], BAD[23]] {
        let out = install(&[how, value]);
        assert!(
            !out.ok,
            "helm install {how} {value} must fail:\n{}",
            out.stdout
        );
        assert!(
            out.stderr.contains(named),
            "helm install {how} {value}: the error does not name {named:?}:\n{}",
            out.stderr
        );
    }
}

/// criticalPods, criticalConditions, conditionTaints and suspend: structured
/// values, written as such into the ConfigMap that --config reads.
#[test]
fn every_file_only_key_reaches_the_config_file() {
    let objs = objects(&helm_template(&[
        "--set-json",
        r#"config.criticalPods=[{"name":"kube-proxy","namespace":"kube-system","selector":{"matchLabels":{"k8s-app":"kube-proxy"}}}]"#,
        "--set-json",
        r#"config.criticalConditions=[{"type":"NetworkReady","status":"True","nodeSelector":{"matchLabels":{"pool":"gpu"}}}]"#,
        "--set-json",
        r#"config.conditionTaints=[{"name":"kd","conditions":[{"type":"KernelDeadlock","status":"True","for":"1m"}],"taint":{"key":"nodegate.dev/kernel-deadlock","effect":"NoSchedule"},"maxUnavailable":"10%"}]"#,
        "--set",
        "config.suspend=true",
    ]));
    let cm = find(&objs, "ConfigMap");
    let file: Value = serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap_or(""))
        .expect("the config file is YAML");
    assert_eq!(file["criticalPods"][0]["namespace"], "kube-system");
    assert_eq!(file["criticalConditions"][0]["type"], "NetworkReady");
    assert_eq!(
        file["criticalConditions"][0]["nodeSelector"]["matchLabels"]["pool"],
        "gpu"
    );
    assert_eq!(file["conditionTaints"][0]["name"], "kd");
    assert_eq!(file["suspend"], true);
    assert!(
        container_args(&objs).contains(&"--config=/etc/nodegate/config.yaml".to_string()),
        "the file is passed with --config"
    );
    // suspend alone is enough to write the file.
    let suspended = objects(&helm_template(&["--set", "config.suspend=true"]));
    assert_eq!(
        serde_saphyr::from_str::<Value>(
            find(&suspended, "ConfigMap")["data"]["config.yaml"]
                .as_str()
                .unwrap_or("")
        )
        .ok()
        .map(|f| f["suspend"].clone()),
        Some(json!(true))
    );
}

/// What the binary makes of `nodegate run --FLAG=VALUE` (with a kubeconfig
/// that cannot exist, settings are checked first): `true` when it takes it
/// (exit 1, no credentials), `false` when it refuses it (exit 2).
fn binary_takes(flag: &str, value: &str) -> bool {
    // The re-gate settings are read only with re-gating on.
    let context: &[&str] = if flag.starts_with("regate-") {
        &["--regate-after=5m"]
    } else {
        &[]
    };
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg("run")
        .arg(format!("--{flag}={value}"))
        .args(context)
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run nodegate: {e}"));
    match out.status.code() {
        Some(1) => true,
        Some(2) => false,
        other => panic!(
            "nodegate run --{flag}={value}: exit {other:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The schema and the binary agree: a value `helm template` accepts is one
/// nodegate takes, and one it refuses is one nodegate refuses, for each
/// kind of value the schema checks by pattern or bound.
#[test]
fn the_schema_accepts_what_the_binary_accepts() {
    let samples: &[(&str, &str, &str, &[&str])] = &[
        (
            "--set-string",
            "config.timeout",
            "timeout",
            &[
                "90s",
                "1h30m",
                "0",
                "2 minutes",
                "100ms",
                "5x",
                "1.5h",
                "15",
                "-1s",
                "s",
            ],
        ),
        (
            "--set-string",
            "config.maxUnavailable",
            "max-unavailable",
            &["50%", "3", "100%", "150%", "ten", "-1", "5 %"],
        ),
        (
            "--set-string",
            "config.regateMaxUnavailable",
            "regate-max-unavailable",
            &["10%", "1", "101%", "1.5"],
        ),
        (
            "--set-string",
            "config.managedNodeSelector",
            "node-selector",
            &[
                "pool in (a,b),!spot",
                "a=b",
                "a==b",
                "a!=b",
                "env",
                "x notin (y)",
                "example.com/pool=web",
                "pool in (a",
                "a=b=c",
                "a,,b",
                "in (a)",
                "a=b c",
            ],
        ),
        (
            "--set-string",
            "config.excludeSelector",
            "exclude-selector",
            &[
                "team=observability,tier notin (debug)",
                "a in ()",
                "!",
                "=b",
            ],
        ),
        (
            "--set-string",
            "config.taints[0]",
            "taint",
            &[
                "example.com/x:NoSchedule",
                "example.com/x",
                "nodegate.dev/a",
                "a:PreferNoSchedule",
                "bad key",
                "a=b:NoSchedule",
                "a:",
                "-a",
            ],
        ),
        (
            "--set-string",
            "config.regateTaint",
            "regate-taint",
            &["nodegate.dev/degraded:NoSchedule", "x/y/z", "a:Sometimes"],
        ),
        (
            "--set",
            "config.kubeQps",
            "kube-qps",
            &["0.5", "50", "0.001", "0", "-1"],
        ),
        ("--set", "config.kubeBurst", "kube-burst", &["1", "0"]),
        (
            "--set",
            "config.workerThreads",
            "worker-threads",
            &["0", "1", "256", "257", "-1"],
        ),
    ];
    let mut disagree = Vec::new();
    for (how, path, flag, values) in samples {
        for v in *values {
            let mut args = vec![
                "template",
                "nodegate",
                "deploy/helm/nodegate",
                "--namespace",
                NS,
            ];
            // --set splits on commas; a comma in a value is written \,.
            let set = format!("{path}={}", v.replace(',', "\\,"));
            args.extend([*how, set.as_str()]);
            let chart = run(&helm_bin(), &args, None).ok;
            let binary = binary_takes(flag, v);
            if chart != binary {
                disagree.push(format!(
                    "{path}={v:?}: the chart {}, nodegate --{flag} {}",
                    if chart { "accepts it" } else { "refuses it" },
                    if binary { "takes it" } else { "refuses it" },
                ));
            }
        }
    }
    assert!(disagree.is_empty(), "{}", disagree.join("\n"));
}
