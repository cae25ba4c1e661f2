//! The startup taint at Node CREATE without a webhook: the shipped
//! MutatingAdmissionPolicy (deploy/kustomize/base/startup-taint.yaml) on
//! deploy/local's real API server. The API server evaluates it itself, so
//! most of these run with nodegate not running at all: they write the
//! policy's parameters as a leading nodegate with the default flags writes
//! them (without them the policy taints nothing; tests/e2e_deploy/down.rs).

use nodegate_e2e as support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::gate::{DsSpec, Env, TAINT, annotation, has_gate_taint};
use support::{Nodegate, fake_node, repo_root, wait_for};

const POLICY_FILE: &str = "deploy/kustomize/base/startup-taint.yaml";
const NAMESPACE_FILE: &str = "deploy/kustomize/base/namespace.yaml";

/// Applies the shipped policy and its binding, writes its parameters as a
/// leading nodegate with the default taint flags does, then waits
/// until the API server applies it: a server-side dry-run create of a probe
/// node comes back tainted (nothing is stored by a dry run).
async fn install_policy(env: &Env) {
    for file in [NAMESPACE_FILE, POLICY_FILE] {
        kubectl_ok(
            env,
            &["apply", "-f", &repo_root().join(file).to_string_lossy()],
        );
    }
    support::write_default_admission_params(&env.cluster.client).await;
    let nodes: Api<Node> = Api::all(env.cluster.client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "the API server to apply the policy",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            let dry = dry.clone();
            async move {
                let probe = untainted("policy-probe");
                let made = nodes
                    .create(&dry, &probe)
                    .await
                    .map_err(|e| e.to_string())?;
                if has_gate_taint(&made) {
                    Ok(())
                } else {
                    Err(format!("probe came back with taints {:?}", taints(&made)))
                }
            }
        },
    )
    .await;
}

/// A client with the cluster admin's credentials that impersonates `user`
/// in `groups` (the API server then authorizes and admits the request as
/// that identity).
async fn client_as(kubeconfig: &std::path::Path, user: &str, groups: &[&str]) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", kubeconfig.display()));
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("bad kubeconfig {}: {e}", kubeconfig.display()));
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// Runs the cluster's kubectl; panics with its output unless it succeeds.
fn kubectl_ok(env: &Env, args: &[&str]) -> String {
    let kubectl = support::local_bin("kubectl");
    let out = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&env.cluster.kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubectl {args:?} failed:\n{text}");
    text
}

/// A fake node with no `spec.taints` at all.
fn untainted(name: &str) -> Node {
    let mut n = fake_node(name, &[], &[]);
    if let Some(spec) = n.spec.as_mut() {
        spec.taints = None;
    }
    n
}

/// The node's taints as `KEY[=VALUE]:EFFECT`, without the
/// `node.kubernetes.io/not-ready` taint the API server's own admission
/// (TaintNodesByCondition) adds to every new node.
fn taints(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .filter(|t| t.key != "node.kubernetes.io/not-ready")
                .map(|t| match &t.value {
                    Some(v) => format!("{}={v}:{}", t.key, t.effect),
                    None => format!("{}:{}", t.key, t.effect),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How many times the node carries the startup taint's key.
fn startup_count(n: &Node) -> usize {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map_or(0, |ts| ts.iter().filter(|t| t.key == TAINT).count())
}

fn with_annotation(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_taints_a_new_node_at_create_from_its_parameters() {
    let env = Env::new("policy-create").await;
    install_policy(&env).await;
    let made = env.cluster.create_node(&untainted("plain")).await;
    assert_eq!(
        taints(&made),
        vec![format!("{TAINT}:NoSchedule")],
        "an untainted node must come back from CREATE with the startup taint (and nothing else)"
    );

    // A node that already has other taints gets the startup taint appended.
    let other = fake_node("foreign", &[], &[("example.com/gpu", "", "NoExecute")]);
    let made = env.cluster.create_node(&other).await;
    assert_eq!(
        taints(&made),
        vec![
            "example.com/gpu:NoExecute".to_string(),
            format!("{TAINT}:NoSchedule")
        ]
    );

    // Registered with a managed taint (any value): no second one.
    let pre = fake_node("pre", &[], &[(TAINT, "by-kubelet", "NoSchedule")]);
    let made = env.cluster.create_node(&pre).await;
    assert_eq!(startup_count(&made), 1, "taints: {:?}", taints(&made));
    assert_eq!(
        taints(&made),
        vec![format!("{TAINT}=by-kubelet:NoSchedule")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_leaves_ignored_nodes_and_nodes_outside_the_selector_alone() {
    let env = Env::new("policy-scope").await;
    install_policy(&env).await;
    let ignored = with_annotation(untainted("ignored"), "nodegate.dev/ignore", "true");
    let made = env.cluster.create_node(&ignored).await;
    assert_eq!(startup_count(&made), 0, "taints: {:?}", taints(&made));

    // A node identity cannot opt its own node out: the ignore annotation is
    // not honoured when the creator is in group system:nodes.
    let node_identity = client_as(
        &env.cluster.kubeconfig,
        "system:node:kubelet-made",
        &["system:nodes", "system:authenticated"],
    )
    .await;
    let as_node: Api<Node> = Api::all(node_identity);
    let made = as_node
        .create(
            &PostParams::default(),
            &with_annotation(untainted("kubelet-made"), "nodegate.dev/ignore", "true"),
        )
        .await
        .unwrap_or_else(|e| panic!("create as the node identity: {e}"));
    assert_eq!(
        startup_count(&made),
        1,
        "a node identity's ignore annotation must not skip the taint: {:?}",
        taints(&made)
    );

    // The binding's objectSelector is nodegate's --node-selector.
    kubectl_ok(
        &env,
        &[
            "patch",
            "mutatingadmissionpolicybinding",
            "nodegate-startup-taint",
            "--type=merge",
            "-p",
            &json!({"spec": {"matchResources": {"objectSelector": {
                "matchExpressions": [{"key": "nodegate.test/unmanaged", "operator": "DoesNotExist"}]
            }}}})
            .to_string(),
        ],
    );
    let nodes: Api<Node> = Api::all(env.cluster.client.clone());
    let outside = fake_node("outside", &[("nodegate.test/unmanaged", "yes")], &[]);
    // The binding change reaches the API server's policy cache shortly after
    // the patch: wait for a dry-run create of an outside node to come back
    // untainted, then create the real one.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("the selector to apply", Duration::from_secs(30), || {
        let (nodes, dry, outside) = (nodes.clone(), dry.clone(), outside.clone());
        async move {
            let made = nodes
                .create(&dry, &outside)
                .await
                .map_err(|e| e.to_string())?;
            match startup_count(&made) {
                0 => Ok(()),
                _ => Err(format!("still tainted: {:?}", taints(&made))),
            }
        }
    })
    .await;
    let made = env.cluster.create_node(&outside).await;
    assert_eq!(startup_count(&made), 0, "taints: {:?}", taints(&made));
    let inside = env.cluster.create_node(&untainted("inside")).await;
    assert_eq!(startup_count(&inside), 1, "taints: {:?}", taints(&inside));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_policy_tainted_opens_by_ready() {
    let env = Env::new("policy-opens").await;
    install_policy(&env).await;
    env.create_ds(DsSpec::new("agent")).await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    let made = env.cluster.create_node(&untainted("worker")).await;
    assert_eq!(startup_count(&made), 1, "taints: {:?}", taints(&made));
    env.wait_pod("agent", "worker", true).await;
    env.wait_open("worker", Duration::from_secs(60), &[&ng])
        .await;
    let node = env.node("worker").await;
    assert_eq!(
        annotation(&node, "nodegate.dev/opened-by").as_deref(),
        Some("ready"),
        "annotations: {:?}",
        node.metadata.annotations
    );
}

/// Issue 27: the shipped policy's CEL and nodegate's webhook choose the same
/// startup taint for the same labels — the autoscaler presets (`auto`) and
/// two `--taint-for` rules that use every selector form — and both agree
/// with the core's `StartupTaints::for_node`. Then every node opens: a
/// Karpenter node only once Karpenter (simulated here, as it writes the
/// node at registration) labels it `karpenter.sh/registered=true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_and_the_webhook_choose_the_same_taint_for_each_node_then_each_opens() {
    use nodegate_core::rules::placement::ManagedTaint;
    use nodegate_core::rules::startup::{Autoscaler, StartupRule, StartupTaints};

    let env = Env::new("policy-webhook-keys").await;
    install_policy(&env).await;
    let explicit = [
        "pool in (gpu, tpu),!spot=example.com/accel-init",
        "tier!=web,zone==a=example.com/zone-a:NoExecute",
    ];
    let first = ManagedTaint::new(TAINT, "NoSchedule");
    let startup = StartupTaints::new(
        explicit
            .iter()
            .map(|r| StartupRule::parse(r).expect("rule"))
            .collect(),
        &[Autoscaler::Auto],
        first.clone(),
    );
    let managed: Vec<String> = startup
        .managed(&[first])
        .iter()
        .map(ToString::to_string)
        .collect();
    // The policy's parameters as nodegate renders them for these flags.
    let params = json!({"data": {
        "startupRules": startup.admission_rules(),
        "managedTaints": managed.join(","),
    }});
    kubectl_ok(
        &env,
        &[
            "-n",
            "nodegate-system",
            "patch",
            "configmap",
            "nodegate-admission",
            "--type",
            "merge",
            "-p",
            &params.to_string(),
        ],
    );
    type Labels<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&str, Labels)] = &[
        ("karpenter", &[("karpenter.sh/nodepool", "default")]),
        ("gke", &[("cloud.google.com/gke-nodepool", "pool-1")]),
        ("aks", &[("kubernetes.azure.com/agentpool", "agentpool1")]),
        ("eks", &[("eks.amazonaws.com/nodegroup", "ng-1")]),
        (
            "eks-auto-mode",
            &[
                ("eks.amazonaws.com/nodegroup", "ng-1"),
                ("karpenter.sh/nodepool", "general-purpose"),
            ],
        ),
        ("plain", &[]),
        ("gpu", &[("pool", "gpu"), ("karpenter.sh/nodepool", "gpu")]),
        ("gpu-spot", &[("pool", "gpu"), ("spot", "true")]),
        ("tpu", &[("pool", "tpu")]),
        ("zone-a", &[("zone", "a")]),
        ("zone-a-web", &[("zone", "a"), ("tier", "web")]),
    ];
    let labelled = |name: &str, labels: Labels| {
        let mut n = untainted(name);
        let l = n.metadata.labels.get_or_insert_with(Default::default);
        for (k, v) in labels {
            l.insert((*k).into(), (*v).into());
        }
        n
    };
    let wanted = |labels: Labels| -> Vec<String> {
        let map = labels
            .iter()
            .map(|(k, v)| (k.to_string().into(), v.to_string().into()))
            .collect();
        vec![startup.for_node(&map).to_string()]
    };
    let nodes: Api<Node> = Api::all(env.cluster.client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // The API server takes the new parameters in a moment.
    let gpu_probe = labelled("probe-gpu", &[("pool", "gpu")]);
    wait_for(
        "the policy to read the new parameters",
        Duration::from_secs(30),
        || async {
            let made = nodes
                .create(&dry, &gpu_probe)
                .await
                .map_err(|e| e.to_string())?;
            let got = taints(&made);
            (got == wanted(&[("pool", "gpu")]))
                .then_some(())
                .ok_or(format!("{got:?}"))
        },
    )
    .await;
    let mut by_policy = Vec::new();
    for (name, labels) in cases {
        let made = nodes
            .create(&dry, &labelled(name, labels))
            .await
            .unwrap_or_else(|e| panic!("dry-run create {name}: {e}"));
        by_policy.push((name.to_string(), taints(&made)));
    }
    let by_core: Vec<(String, Vec<String>)> = cases
        .iter()
        .map(|(name, labels)| (name.to_string(), wanted(labels)))
        .collect();
    assert_eq!(by_policy, by_core, "the policy and the core disagree");

    // The policy off (its binding deleted, and seen gone), the webhook on.
    kubectl_ok(
        &env,
        &[
            "delete",
            "mutatingadmissionpolicybinding",
            "nodegate-startup-taint",
        ],
    );
    let plain_probe = untainted("probe-plain");
    wait_for("the policy to be gone", Duration::from_secs(30), || async {
        let made = nodes
            .create(&dry, &plain_probe)
            .await
            .map_err(|e| e.to_string())?;
        taints(&made)
            .is_empty()
            .then_some(())
            .ok_or(format!("{:?}", taints(&made)))
    })
    .await;
    env.cluster.namespace("nodegate").await;
    let port = webhook::free_port();
    webhook::register(&env, port).await;
    let mut args = webhook::args(port);
    for r in explicit {
        args.extend(["--taint-for".to_string(), r.to_string()]);
    }
    let ng = Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for("the webhook to answer", Duration::from_secs(60), || async {
        let made = nodes
            .create(&dry, &gpu_probe)
            .await
            .map_err(|e| e.to_string())?;
        let got = taints(&made);
        (got == wanted(&[("pool", "gpu")]))
            .then_some(())
            .ok_or(format!("{got:?}"))
    })
    .await;

    // One agent that tolerates every taint, as CNI agents do: a member of
    // every gate, whatever key its node got.
    let mut ds = support::gate::daemonset(&DsSpec::new("agent"));
    if let Some(pod) = ds.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        pod.tolerations = Some(vec![k8s_openapi::api::core::v1::Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
    }
    env.daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .expect("create the agent");
    let mut by_webhook = Vec::new();
    for (name, labels) in cases {
        let made = env.cluster.create_node(&labelled(name, labels)).await;
        by_webhook.push((name.to_string(), taints(&made)));
    }
    assert_eq!(
        by_webhook,
        by_policy,
        "the webhook and the policy disagree\n{}",
        ng.logs()
    );

    // Every node opens; Karpenter's wait for their registration.
    let debug = ng.debug_addr(Duration::from_secs(10));
    let karpenter: Vec<&str> = cases
        .iter()
        .filter(|(_, l)| l.iter().any(|(k, _)| *k == "karpenter.sh/nodepool"))
        .map(|(n, _)| *n)
        .collect();
    for (name, _) in cases.iter().filter(|(n, _)| !karpenter.contains(n)) {
        wait_unmanaged(&nodes, name, &managed, &ng).await;
    }
    for name in &karpenter {
        env.wait_pod("agent", name, true).await;
        wait_for(
            "the gate to wait for Karpenter alone",
            Duration::from_secs(30),
            || async {
                let (status, body) =
                    support::http_get(&debug, &format!("/debug/nodes/{name}")).await?;
                let v: serde_json::Value =
                    serde_json::from_str(&body).map_err(|e| e.to_string())?;
                let waits = v["node_not_ready"]
                    .as_str()
                    .is_some_and(|w| w.contains("karpenter registration"));
                (status == 200 && waits && v["blocked_by"] == json!([]))
                    .then_some(())
                    .ok_or(body)
            },
        )
        .await;
        let node = nodes.get(name).await.expect("get node");
        assert!(
            taints(&node).iter().any(|t| managed.contains(t)),
            "{name} opened before Karpenter registered it: {:?}",
            taints(&node)
        );
        // Karpenter's registration: the label, in one write.
        kubectl_ok(
            &env,
            &["label", "node", name, "karpenter.sh/registered=true"],
        );
        wait_unmanaged(&nodes, name, &managed, &ng).await;
    }
}

/// Waits until `name` carries none of `managed`.
async fn wait_unmanaged(nodes: &Api<Node>, name: &str, managed: &[String], ng: &Nodegate) {
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Ok(n) = nodes.get(name).await
                && !taints(&n).iter().any(|t| managed.contains(t))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if found.is_err() {
        panic!("{name} did not open within 60s\n{}", ng.logs());
    }
}

/// nodegate's admission webhook on deploy/local: a port, its registration
/// (no caBundle: nodegate fills it in) and the flags that serve it.
mod webhook {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use kube::api::{Api, PostParams};
    use serde_json::json;

    use super::Env;

    const CONFIG: &str = "nodegate-e2e";

    pub fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port")
    }

    pub async fn register(env: &Env, port: u16) {
        let api: Api<MutatingWebhookConfiguration> = Api::all(env.cluster.client.clone());
        let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": CONFIG},
            "webhooks": [{
                "name": "nodes.nodegate.dev",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-node")},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nodes"]}],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }],
        }))
        .expect("webhook configuration");
        api.create(&PostParams::default(), &config)
            .await
            .expect("create the webhook configuration");
    }

    pub fn args(port: u16) -> Vec<String> {
        [
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-cert-secret",
            "nodegate/nodegate-webhook",
            "--webhook-configuration",
            CONFIG,
            "--webhook-host",
            "127.0.0.1",
            "--timeout",
            "5m",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}
