//! The entrances that put the startup taint on without the admission
//! webhook, on the real control plane (deploy/local): the late-taint net
//! (`--taint-new-nodes`) and `nodegate backfill`, each with the node selector
//! and the ignore annotation keeping nodegate's hands off other nodes.
//! (The webhook itself: tests/e2e_webhook.rs.)

use nodegate_e2e as support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::gate::{DsSpec, Env, NS, TAINT, annotation, has_gate_taint};
use support::{Nodegate, fake_node, http_get, metric, wait_for};

const IGNORE: &str = "nodegate.dev/ignore";

/// A node as an unconfigured pool registers it: no taint at all.
fn bare_node(name: &str, pool: &str, annotations: &[(&str, &str)]) -> Node {
    let mut n = fake_node(name, &[("pool", pool)], &[]);
    if let Some(spec) = n.spec.as_mut() {
        spec.taints = None;
    }
    let a = n.metadata.annotations.get_or_insert_default();
    for (k, v) in annotations {
        a.insert(k.to_string(), v.to_string());
    }
    n
}

/// A workload pod (no controller) bound straight to `node`.
async fn bind_workload(env: &Env, name: &str, node: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.invalid/web:1"}],
        },
    }))
    .expect("workload pod");
    env.pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create workload pod");
}

/// A webhook for Node CREATE that nobody answers, with failurePolicy Ignore:
/// what the API server sees while every nodegate replica is down.
async fn unanswered_webhook(env: &Env) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("its address").port()
    };
    let cfg: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "nodegate"},
        "webhooks": [{
            "name": "nodes.nodegate.dev",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-node")},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"]}],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 2,
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .expect("webhook configuration");
    Api::<MutatingWebhookConfiguration>::all(env.cluster.client.clone())
        .create(&PostParams::default(), &cfg)
        .await
        .expect("create webhook configuration");
}

/// The reasons of nodegate's Events about `node`.
async fn reasons(env: &Env, node: &str) -> Vec<String> {
    env.events_for(node)
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("nodegate.dev/nodegate"))
        .filter_map(|e| e.reason)
        .collect()
}

async fn metrics(ng: &Nodegate) -> String {
    let addr = ng.http_addr(Duration::from_secs(30));
    http_get(&addr, "/metrics").await.expect("GET /metrics").1
}

/// (c) and (b), the net's side: with the webhook unanswered, nodes register
/// untainted; a nodegate started afterwards with `--taint-new-nodes` taints
/// the new idle node in its scope (LateTaint), which is then gated and opened
/// as usual, and leaves alone the one with a workload bound (LateTaintSkipped),
/// the one outside `--node-selector` and the one annotated ignore. A node
/// outside the selector that carries the startup taint is not gated either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_net_taints_new_idle_nodes_in_scope_and_nothing_else() {
    let env = Env::new("entrances-net").await;
    env.create_ds(DsSpec::new("agent")).await;
    unanswered_webhook(&env).await;

    let nodes = [
        bare_node("idle", "gated", &[]),
        bare_node("busy", "gated", &[]),
        bare_node("elsewhere", "other", &[]),
        bare_node("hands-off", "gated", &[(IGNORE, "true")]),
        fake_node(
            "elsewhere-tainted",
            &[("pool", "other")],
            &[(TAINT, "", "NoSchedule")],
        ),
    ];
    for n in &nodes {
        let created = env.cluster.create_node(n).await;
        let name = created.metadata.name.clone().unwrap_or_default();
        // The webhook did not answer; failurePolicy Ignore let it in as sent.
        assert_eq!(
            has_gate_taint(&created),
            name == "elsewhere-tainted",
            "node {name} as created: {:?}",
            created.spec
        );
    }
    bind_workload(&env, "web", "busy").await;

    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--taint-new-nodes",
            "--node-selector",
            "pool=gated",
            "--timeout",
            "60s",
        ],
    );
    wait_for("LateTaint on idle", Duration::from_secs(30), || async {
        let r = reasons(&env, "idle").await;
        r.contains(&"LateTaint".to_string())
            .then_some(())
            .ok_or(format!("{r:?}"))
    })
    .await;
    env.wait_open("idle", Duration::from_secs(30), &[&ng]).await;
    assert_eq!(
        env.annotation("idle", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready"),
        "the late-tainted node is gated and opened as usual"
    );
    wait_for(
        "LateTaintSkipped on busy",
        Duration::from_secs(30),
        || async {
            let r = reasons(&env, "busy").await;
            r.contains(&"LateTaintSkipped".to_string())
                .then_some(())
                .ok_or(format!("{r:?}"))
        },
    )
    .await;
    let skipped = env
        .events_for("busy")
        .await
        .into_iter()
        .find_map(|e| e.note)
        .unwrap_or_default();
    assert!(
        skipped.contains(&format!("{NS}/web")),
        "the Event names the workload pod: {skipped:?}"
    );

    // Every candidate was decided in the pass that tainted idle; a second
    // after it, nothing else has been touched.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in ["busy", "elsewhere", "hands-off"] {
        let n = env.node(name).await;
        assert!(!has_gate_taint(&n), "{name} was tainted: {:?}", n.spec);
    }
    for name in ["elsewhere", "hands-off", "elsewhere-tainted"] {
        assert_eq!(reasons(&env, name).await, Vec::<String>::new(), "{name}");
    }
    let kept = env.node("elsewhere-tainted").await;
    assert!(
        has_gate_taint(&kept) && annotation(&kept, "nodegate.dev/opened-at").is_none(),
        "a node outside --node-selector is never gated: {:?}",
        kept.spec
    );

    let text = metrics(&ng).await;
    for (result, want) in [("tainted", 1.0), ("skipped", 1.0), ("failed", 0.0)] {
        let series = format!("nodegate_late_taints_total{{result=\"{result}\"}}");
        assert_eq!(metric(&text, &series), Some(want), "{series}");
    }
}

/// One `nodegate backfill` run's JSON lines, as node → (action, detail).
fn backfill(env: &Env, args: &[&str]) -> (i32, BTreeMap<String, (String, String)>) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg("backfill")
        .args(args)
        .args(["-o", "json"])
        .env("KUBECONFIG", &env.cluster.kubeconfig)
        .output()
        .expect("run nodegate backfill");
    let code = out.status.code().unwrap_or(-1);
    let lines: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let by_node = lines
        .iter()
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (s("node"), (s("action"), s("detail")))
        })
        .collect();
    (code, by_node)
}

/// (e): `backfill --dry-run` changes nothing and reports exactly the set a
/// real `backfill` then taints; each other node says why it was skipped; a
/// second run finds nothing left to do; a bad selector exits 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_dry_run_reports_what_backfill_then_taints() {
    let env = Env::new("entrances-backfill").await;
    let nodes = [
        bare_node("old-1", "gated", &[]),
        bare_node("old-2", "gated", &[]),
        bare_node("old-busy", "gated", &[]),
        bare_node("old-hands-off", "gated", &[(IGNORE, "true")]),
        bare_node(
            "old-opened",
            "gated",
            &[("nodegate.dev/opened-at", "2026-01-01T00:00:00Z")],
        ),
        fake_node(
            "old-gated",
            &[("pool", "gated")],
            &[(TAINT, "", "NoSchedule")],
        ),
        bare_node("other-pool", "other", &[]),
    ];
    for n in &nodes {
        env.cluster.create_node(n).await;
    }
    bind_workload(&env, "db", "old-busy").await;
    // What nodegate may change: its taint and its annotations (the node
    // lifecycle controller and kwok change the rest meanwhile).
    let versions = || async {
        let mut v = BTreeMap::new();
        for n in &nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let now = env.node(&name).await;
            let ours: BTreeMap<String, String> = now
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k.starts_with("nodegate.dev/"))
                .collect();
            v.insert(name, (has_gate_taint(&now), ours));
        }
        v
    };
    let before = versions().await;

    let (code, dry) = backfill(&env, &["--selector", "pool=gated", "--dry-run"]);
    assert_eq!(code, 0, "dry run: {dry:?}");
    assert_eq!(versions().await, before, "the dry run changed a node");
    let would: Vec<&String> = dry
        .iter()
        .filter(|(_, (a, _))| a == "would-taint")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(would, ["old-1", "old-2"], "dry run: {dry:?}");

    let (code, done) = backfill(&env, &["--selector", "pool=gated"]);
    assert_eq!(code, 0, "backfill: {done:?}");
    let tainted: Vec<&String> = done
        .iter()
        .filter(|(_, (a, _))| a == "tainted")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        tainted, would,
        "backfill did not taint what the dry run said"
    );
    let detail = |node: &str| done.get(node).map(|(_, d)| d.as_str()).unwrap_or("");
    for (node, why) in [
        ("old-busy", format!("has workload pods: {NS}/db")),
        ("old-hands-off", format!("annotated {IGNORE}=true")),
        ("old-opened", "opened before".to_string()),
        ("old-gated", format!("already carries {TAINT}:NoSchedule")),
        ("other-pool", "excluded by --selector".to_string()),
    ] {
        assert_eq!(
            done.get(node).map(|(a, _)| a.as_str()),
            Some("skipped"),
            "{node}"
        );
        assert!(detail(node).contains(&why), "{node}: {:?}", detail(node));
    }
    for node in ["old-1", "old-2"] {
        let n = env.node(node).await;
        assert!(has_gate_taint(&n), "{node}: {:?}", n.spec);
        let since = annotation(&n, "nodegate.dev/gated-since").unwrap_or_default();
        assert!(
            since.parse::<jiff::Timestamp>().is_ok(),
            "{node}: gated-since {since:?}"
        );
    }

    let (code, again) = backfill(&env, &["--selector", "pool=gated"]);
    assert_eq!(code, 0);
    assert!(
        again.values().all(|(a, _)| a == "skipped"),
        "a second backfill found work: {again:?}"
    );

    let (code, _) = backfill(&env, &["--selector", "pool in"]);
    assert_eq!(code, 2, "a bad --selector is a usage error");
}

/// A namespace where a tenant may create and read pods, and nothing else.
const TENANT: &str = "tenant";
const TENANT_USER: &str = "tenant-user";

/// A client acting as [`TENANT_USER`], whose only rights are pods in
/// [`TENANT`] (impersonation: the API server authorizes it as that user).
async fn tenant_client(env: &Env) -> kube::Client {
    env.cluster.namespace(TENANT).await;
    for manifest in [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "pods", "namespace": TENANT},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "pods", "namespace": TENANT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}],
        }),
    ] {
        let obj: kube::api::DynamicObject =
            serde_json::from_value(manifest.clone()).expect("rbac manifest");
        let kind = manifest["kind"].as_str().unwrap_or_default();
        let ar = kube::api::ApiResource {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        };
        Api::<kube::api::DynamicObject>::namespaced_with(env.cluster.client.clone(), TENANT, &ar)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {kind}: {e}"));
    }
    let kc = kube::config::Kubeconfig::read_from(&env.cluster.kubeconfig).expect("kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
    config.auth_info.impersonate = Some(TENANT_USER.into());
    let client = kube::Client::try_from(config).expect("tenant client");
    // The API server's authorizer learns of a new RoleBinding through its
    // own watch: until then the tenant is refused. A GET of a pod that does
    // not exist answers 404 once the Role applies, 403 before.
    let pods: Api<Pod> = Api::namespaced(client.clone(), TENANT);
    wait_for(
        "the tenant's Role to apply",
        Duration::from_secs(30),
        || async {
            match pods.get("no-such-pod").await {
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    client
}

/// Hardening: as a tenant, a pod whose `managedFields` entry is
/// dated 2099, selected by nodegate's pod watch. The API server keeps the
/// client's entry (asserted: the premise). Before the fix it moved
/// nodegate's "server now" to 2099, so every node looked older than the
/// net's window and a new idle node was never tainted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_pod_dated_2099_does_not_move_the_server_clock() {
    let env = Env::new("entrances-forged-clock").await;
    env.create_ds(DsSpec::new("agent")).await;
    unanswered_webhook(&env).await;
    let tenant = tenant_client(&env).await;
    let pods: Api<Pod> = Api::namespaced(tenant, TENANT);
    let forged: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "from-2099",
            "labels": {"pod-template-generation": "1"},
            "managedFields": [{
                "manager": "time-traveller", "operation": "Update", "apiVersion": "v1",
                "time": "2099-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:forged": {}}}},
            }],
        },
        "spec": {
            "nodeName": "does-not-exist",
            "containers": [{"name": "c", "image": "registry.invalid/forged:1"}],
        },
    }))
    .expect("pod manifest");
    pods.create(&PostParams::default(), &forged)
        .await
        .expect("the tenant may create a pod in its namespace");
    let kept = pods.get("from-2099").await.expect("get it back");
    let times: Vec<String> = kept
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.time.as_ref().map(|t| t.0.to_string()))
        .collect();
    assert!(
        times.iter().any(|t| t.starts_with("2099-")),
        "premise: the API server keeps a client's managedFields time: {times:?}"
    );

    let ng = Nodegate::start(&env.cluster, &["--taint-new-nodes", "--timeout", "60s"]);
    let addr = ng.http_addr(Duration::from_secs(30));
    wait_for("nodegate ready", Duration::from_secs(30), || async {
        let (status, body) = http_get(&addr, "/readyz").await?;
        (status == 200).then_some(()).ok_or(body)
    })
    .await;
    env.cluster
        .create_node(&bare_node("idle", "gated", &[]))
        .await;
    wait_for("LateTaint on idle", Duration::from_secs(30), || async {
        let r = reasons(&env, "idle").await;
        r.contains(&"LateTaint".to_string())
            .then_some(())
            .ok_or(format!("{r:?}\n{}", ng.logs()))
    })
    .await;
    // The forged time was not evidence at all (not merely refused): the
    // refusal counter, exported from the start, stays at zero.
    let text = metrics(&ng).await;
    let series = "nodegate_server_time_evidence_refused_total";
    assert_eq!(metric(&text, series), Some(0.0), "{series}");
}

/// Hardening: operators win. A node registered with the
/// startup taint (the webhook's), whose taint an operator removes by hand
/// while its gate waits, is recorded `opened-by: external` (with
/// `opened-at`) and the late-taint net does not put the taint back. Before
/// the fix nothing was recorded and the net re-tainted the young, untainted
/// node with a `LateTaint` Warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_removed_by_hand_is_recorded_and_not_put_back() {
    let env = Env::new("entrances-by-hand").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let ng = Nodegate::start(&env.cluster, &["--taint-new-nodes", "--timeout", "5m"]);
    let debug = ng.debug_addr(Duration::from_secs(30));
    env.cluster
        .create_node(&support::fake_node(
            "hand",
            &[],
            &[(TAINT, "", "NoSchedule")],
        ))
        .await;
    // The gate is live and waiting for the held agent.
    wait_for("hand's gate", Duration::from_secs(30), || async {
        let (status, body) = http_get(&debug, "/debug/nodes/hand").await?;
        (status == 200).then_some(()).ok_or(body)
    })
    .await;
    env.wait_pod("agent", "hand", false).await;

    // The operator takes the startup taint off by hand (kubectl taint ... -).
    let nodes: Api<Node> = Api::all(env.cluster.client.clone());
    let mut node = nodes.get("hand").await.expect("get hand");
    if let Some(spec) = node.spec.as_mut() {
        spec.taints = Some(Vec::new());
    }
    nodes
        .replace("hand", &PostParams::default(), &node)
        .await
        .expect("remove the taint by hand");

    let recorded = wait_for("opened-by: external", Duration::from_secs(30), || async {
        let n = env.node("hand").await;
        match annotation(&n, "nodegate.dev/opened-by").as_deref() {
            Some("external") => Ok(n),
            other => Err(format!("opened-by {other:?}\n{}", ng.logs())),
        }
    })
    .await;
    assert!(
        annotation(&recorded, "nodegate.dev/opened-at").is_some(),
        "{:?}",
        recorded.metadata.annotations
    );

    // A witness: a new idle node the net does taint, so the net has had
    // its look at the cluster after the removal.
    env.cluster
        .create_node(&bare_node("witness", "any", &[]))
        .await;
    wait_for("LateTaint on witness", Duration::from_secs(30), || async {
        let r = reasons(&env, "witness").await;
        r.contains(&"LateTaint".to_string())
            .then_some(())
            .ok_or(format!("{r:?}"))
    })
    .await;
    let hand = env.node("hand").await;
    assert!(
        !has_gate_taint(&hand),
        "the taint was put back: {:?}",
        hand.spec
    );
    assert_eq!(reasons(&env, "hand").await, Vec::<String>::new());
}

/// Issue 27: backfill puts on each node the startup taint chosen for its
/// labels — a `--taint-for` rule first, then the presets (`auto`), else the
/// first `--taint` — and says which in its line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_puts_on_the_taint_chosen_for_each_node() {
    let env = Env::new("entrances-backfill-keys").await;
    let with = |name: &str, label: (&str, &str)| {
        let mut n = bare_node(name, "gated", &[]);
        n.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(label.0.into(), label.1.into());
        n
    };
    for n in [
        with("k", ("karpenter.sh/nodepool", "default")),
        with("g", ("cloud.google.com/gke-nodepool", "pool-1")),
        with("gpu", ("accelerator", "gpu")),
        bare_node("plain", "gated", &[]),
    ] {
        env.cluster.create_node(&n).await;
    }
    let (code, done) = backfill(
        &env,
        &["--taint-for", "accelerator=gpu=example.com/gpu-init"],
    );
    assert_eq!(code, 0, "backfill: {done:?}");
    for (node, taint) in [
        ("k", "readiness.k8s.io/nodegate:NoSchedule"),
        (
            "g",
            "startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule",
        ),
        ("gpu", "example.com/gpu-init:NoSchedule"),
        ("plain", "nodegate.dev/initializing:NoSchedule"),
    ] {
        assert_eq!(
            done.get(node),
            Some(&("tainted".to_string(), taint.to_string())),
            "{node}: {done:?}"
        );
        let (key, effect) = taint.split_once(':').unwrap_or_default();
        let n = env.node(node).await;
        assert!(
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == effect)),
            "{node} lacks {taint}"
        );
    }
}
