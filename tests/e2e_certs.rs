//! The webhook's certificate lifecycle and start-up against the real
//! kube-apiserver of deploy/local:
//!
//! - a webhook Secret nodegate cannot get or create does not stop the gate;
//!   readiness and a metric say the webhook is not serving, and it starts
//!   serving once the Secret can be had;
//! - a stored serving certificate dated ahead of the API server's clock is
//!   replaced, so node registrations under `failurePolicy: Fail` go through;
//! - a lost CA key (Fresh: a new CA) fails no admission of two replicas;
//! - re-applying the Secret the kustomize base ships does not reset what
//!   nodegate wrote into it.

use nodegate_e2e as support;

use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, PostParams};
use nodegate::serve::webhook::certs::{Decision, Material, carry_out};
use serde_json::{Value, json};
use support::gate::{DsSpec, Env, has_gate_taint, taint_keys};
use support::{Nodegate, fake_node, wait_for};

const CONFIG: &str = "nodegate-e2e";

/// A port free now on 127.0.0.1 (the API server must be told it before
/// nodegate binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A MutatingWebhookConfiguration with one webhook on Node CREATE at
/// `port`, with `policy` and, when given, a caBundle.
async fn register(
    env: &Env,
    port: u16,
    policy: &str,
    ca: Option<&[u8]>,
) -> Api<MutatingWebhookConfiguration> {
    register_all(env, &[port], policy, ca).await
}

/// The same with one webhook per port (one per replica): every create
/// calls every replica.
async fn register_all(
    env: &Env,
    ports: &[u16],
    policy: &str,
    ca: Option<&[u8]>,
) -> Api<MutatingWebhookConfiguration> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(env.cluster.client.clone());
    let webhooks: Vec<Value> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let mut client_config =
                json!({"url": format!("https://127.0.0.1:{port}/mutate-node")});
            if let Some(ca) = ca {
                client_config["caBundle"] =
                    serde_json::to_value(ByteString(ca.to_vec())).expect("bytes");
            }
            json!({
                "name": format!("r{i}.nodes.nodegate.dev"),
                "clientConfig": client_config,
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nodes"]}],
                "failurePolicy": policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            })
        })
        .collect();
    let config: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": CONFIG}, "webhooks": webhooks}))
            .expect("webhook configuration");
    api.create(&PostParams::default(), &config)
        .await
        .expect("create the webhook configuration");
    api
}

fn webhook_args(port: u16, secret: &str, validity: &str) -> Vec<String> {
    [
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-cert-secret",
        secret,
        "--webhook-configuration",
        CONFIG,
        "--webhook-host",
        "127.0.0.1",
        "--webhook-cert-validity",
        validity,
        "--timeout",
        "5m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start(env: &Env, args: &[String]) -> Nodegate {
    Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

/// A fake node with no `spec.taints` at all.
fn untainted(name: &str) -> Node {
    let mut n = fake_node(name, &[], &[]);
    if let Some(spec) = n.spec.as_mut() {
        spec.taints = None;
    }
    n
}

/// Creates probe nodes (every 500 ms, up to `within`) until one is created
/// and comes back with the startup taint: the webhook answered. Returns
/// the creates refused meanwhile.
async fn wait_tainted_create(env: &Env, prefix: &str, within: Duration, ng: &Nodegate) -> usize {
    let start = Instant::now();
    let mut refused = 0;
    for i in 0.. {
        match env
            .nodes
            .create(&PostParams::default(), &untainted(&format!("{prefix}-{i}")))
            .await
        {
            Ok(n) if has_gate_taint(&n) => return refused,
            Ok(n) => eprintln!("{prefix}-{i} admitted untainted: {:?}", taint_keys(&n)),
            Err(e) => {
                refused += 1;
                eprintln!("{prefix}-{i} refused: {e}");
            }
        }
        if start.elapsed() > within {
            panic!(
                "no node came back from its create with the startup taint within {within:?}\n{}",
                ng.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    unreachable!()
}

/// `/readyz?verbose`: the status code and the text.
async fn readyz(ng: &Nodegate) -> (u16, String) {
    let addr = ng.http_addr(Duration::from_secs(10));
    support::http_get(&addr, "/readyz?verbose")
        .await
        .unwrap_or_else(|e| panic!("GET /readyz?verbose: {e}\n{}", ng.logs()))
}

async fn serving_metric(ng: &Nodegate) -> Option<f64> {
    let addr = ng.http_addr(Duration::from_secs(10));
    let (_, text) = support::http_get(&addr, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"));
    support::metric(&text, "nodegate_webhook_serving")
}

fn data(s: &Secret, key: &str) -> Vec<u8> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

/// §7: the webhook's Secret cannot be had (its namespace does not exist,
/// so nodegate can neither read nor create it). On the old code nodegate
/// exited after five attempts, before any gate started, and the gated node
/// stayed closed. Now the gate opens the node; `/readyz?verbose` and
/// `nodegate_webhook_serving` say the webhook is not serving; once the
/// namespace exists nodegate creates the Secret and the webhook serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_secret_that_cannot_be_had_does_not_stop_the_gate() {
    let env = Env::new("certs-no-secret").await;
    env.create_ds(DsSpec::new("cni")).await;
    let port = free_port();
    // Ignore, as shipped: nodes register while no replica answers.
    register(&env, port, "Ignore", None).await;
    let ns = "webhook-later";
    let mut ng = start(
        &env,
        &webhook_args(port, &format!("{ns}/nodegate-webhook"), "1h"),
    );

    env.create_node("node-a", &[]).await;
    env.wait_pod("cni", "node-a", true).await;
    env.wait_open("node-a", Duration::from_secs(60), &[&ng])
        .await;
    assert!(ng.is_running(), "nodegate exited:\n{}", ng.logs());

    // Until its first read of the Secret fails (slow under load) the line
    // says only "no certificate yet"; then it names the Secret.
    let secret = format!("{ns}/nodegate-webhook");
    let (code, text) = wait_for(
        "/readyz to name the Secret it cannot have",
        Duration::from_secs(60),
        || async {
            let (code, text) = readyz(&ng).await;
            if text.contains(&secret) {
                Ok((code, text))
            } else {
                Err(text)
            }
        },
    )
    .await;
    assert_eq!(
        code, 503,
        "not ready while the webhook does not serve: {text}"
    );
    assert!(
        text.contains("[+]synced ok") && text.contains("[-]webhook failed: not serving"),
        "{text}"
    );
    assert_eq!(serving_metric(&ng).await, Some(0.0));

    // The Secret can be had now: nodegate creates it and starts serving.
    env.cluster.namespace(ns).await;
    wait_for(
        "the webhook line to say serving",
        Duration::from_secs(60),
        || async {
            let (code, text) = readyz(&ng).await;
            if code == 200 && text.contains("[+]webhook ok: serving on") {
                Ok(())
            } else {
                Err(format!("{code}: {text}"))
            }
        },
    )
    .await;
    // (Metrics pages are shared for a second: wait for a fresh one.)
    wait_for(
        "nodegate_webhook_serving 1",
        Duration::from_secs(10),
        || async {
            match serving_metric(&ng).await {
                Some(1.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    wait_tainted_create(&env, "probe", Duration::from_secs(30), &ng).await;
}

/// The material of a CA valid now and a serving certificate for 127.0.0.1
/// that it signed, valid only from an hour from now.
fn dated_ahead() -> Material {
    let now = jiff::Timestamp::now().as_second();
    let day = Duration::from_secs(24 * 3600);
    let hosts = ["127.0.0.1".to_string()];
    let good = carry_out(&Decision::Fresh("e2e".into()), None, &hosts, now, day)
        .expect("issue")
        .expect("material");
    // Issued "two hours from now": notBefore one hour from now (nodegate
    // dates certificates an hour back), or later.
    let ahead = carry_out(
        &Decision::Reissue("e2e".into()),
        Some(&good),
        &hosts,
        now + 2 * 3600,
        day,
    )
    .expect("issue")
    .expect("material");
    assert_eq!(ahead.ca_crt, good.ca_crt);
    ahead
}

/// §14 (a): the Secret holds a CA (in the caBundle already) and a serving
/// certificate valid only from an hour from now, as a replica whose clock
/// ran ahead would have left it. Under `failurePolicy: Fail` a node created
/// within 60 s comes back tainted: nodegate replaced the certificate the
/// API server would refuse. (The old code served it: every create failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_certificate_dated_ahead_is_replaced() {
    let env = Env::new("certs-ahead").await;
    let ns = "webhook-certs";
    env.cluster.namespace(ns).await;
    let m = dated_ahead();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "nodegate-webhook", "namespace": ns},
        "type": "kubernetes.io/tls",
        "stringData": {
            "ca.crt": m.ca_crt, "ca.key": m.ca_key, "tls.crt": m.tls_crt, "tls.key": m.tls_key,
        },
    }))
    .expect("secret");
    let secrets: Api<Secret> = Api::namespaced(env.cluster.client.clone(), ns);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the Secret");
    let port = free_port();
    register(&env, port, "Fail", Some(m.ca_crt.as_bytes())).await;
    let ng = start(
        &env,
        &webhook_args(port, &format!("{ns}/nodegate-webhook"), "24h"),
    );
    wait_tainted_create(&env, "new", Duration::from_secs(60), &ng).await;
    let now = secrets.get("nodegate-webhook").await.expect("the Secret");
    assert_ne!(
        data(&now, "tls.crt"),
        m.tls_crt.as_bytes(),
        "the certificate dated ahead was replaced"
    );
    assert_eq!(data(&now, "ca.crt"), m.ca_crt.as_bytes(), "same CA");
}

/// The Secret of deploy/kustomize/components/webhook/webhook.yaml, in namespace `ns`.
fn shipped_secret(ns: &str) -> Value {
    let path = support::repo_root().join("deploy/kustomize/components/webhook/webhook.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut secret = text
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .find(|o| o["kind"] == "Secret")
        .expect("the base ships a Secret");
    secret["metadata"]["namespace"] = json!(ns);
    secret
}

/// `kubectl apply` of `object` as the cluster's admin; panics on failure.
fn apply(env: &Env, object: &Value, dir: &std::path::Path) {
    let file = dir.join("secret.json");
    std::fs::write(&file, object.to_string()).expect("write the manifest");
    let out = env
        .cluster
        .kubectl(&["apply", "-f", file.to_str().expect("utf-8 path")]);
    assert!(
        out.contains("created") || out.contains("configured") || out.contains("unchanged"),
        "kubectl apply: {out}"
    );
}

/// §15: the base's Secret applied, nodegate fills it, and the same manifest
/// is applied again (a GitOps sync). The old manifest carried empty
/// `tls.crt`/`tls.key`, so the re-apply wiped them and nodegate started
/// afresh with a new CA. Now the re-apply leaves ca.crt and tls.crt as they
/// were, and nodes created meanwhile under `failurePolicy: Fail` all come
/// back tainted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapplying_the_shipped_secret_keeps_the_certificates() {
    let env = Env::new("certs-reapply").await;
    let ns = "nodegate-system";
    env.cluster.namespace(ns).await;
    let manifest = shipped_secret(ns);
    let name = manifest["metadata"]["name"]
        .as_str()
        .expect("the Secret's name")
        .to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    apply(&env, &manifest, dir.path());
    let port = free_port();
    register(&env, port, "Fail", None).await;
    // 2m: one round every 6 s.
    let ng = start(&env, &webhook_args(port, &format!("{ns}/{name}"), "2m"));
    wait_tainted_create(&env, "probe", Duration::from_secs(60), &ng).await;

    let secrets: Api<Secret> = Api::namespaced(env.cluster.client.clone(), ns);
    let before = secrets.get(&name).await.expect("the Secret");
    assert!(!data(&before, "ca.crt").is_empty(), "nodegate filled it");
    apply(&env, &manifest, dir.path());
    let after = secrets.get(&name).await.expect("the Secret");
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert_eq!(
            data(&after, key),
            data(&before, key),
            "{key} changed by the re-apply"
        );
    }
    // Two of nodegate's rounds later, every create is still admitted.
    let until = Instant::now() + Duration::from_secs(13);
    let mut i = 0;
    while Instant::now() < until {
        i += 1;
        let created = env
            .nodes
            .create(&PostParams::default(), &untainted(&format!("after-{i}")))
            .await
            .unwrap_or_else(|e| panic!("create after-{i} refused: {e}\n{}", ng.logs()));
        assert!(
            has_gate_taint(&created),
            "after-{i}: {:?}",
            taint_keys(&created)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let last = secrets.get(&name).await.expect("the Secret");
    assert_eq!(data(&last, "ca.crt"), data(&before, "ca.crt"), "same CA");
}

/// §14 (b): two replicas serve; the Secret's `ca.key` is replaced by an
/// unrelated key, so nodegate must start afresh with a new CA. Nodes are
/// created every 200 ms under `failurePolicy: Fail`, each create calling
/// both replicas, until both serve a certificate of the new CA; no create
/// may fail. The old code dropped the old CA from the bundle and swapped
/// the serving certificate before the bundle: the replica still serving the
/// old certificate (or the one serving the new one) was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_ca_key_fails_no_admission() {
    let env = Env::new("certs-fresh").await;
    let ns = "webhook-certs";
    env.cluster.namespace(ns).await;
    let ports = [free_port(), free_port()];
    register_all(&env, &ports, "Fail", None).await;
    let secret_arg = format!("{ns}/nodegate-webhook");
    // 2m: one round every 6 s.
    let a = start(&env, &webhook_args(ports[0], &secret_arg, "2m"));
    let b = start(&env, &webhook_args(ports[1], &secret_arg, "2m"));
    wait_tainted_create(&env, "probe", Duration::from_secs(60), &a).await;

    let secrets: Api<Secret> = Api::namespaced(env.cluster.client.clone(), ns);
    let mut before = secrets.get("nodegate-webhook").await.expect("the Secret");
    let old_ca = data(&before, "ca.crt");
    let old_tls = data(&before, "tls.crt");
    let other = carry_out(
        &Decision::Fresh("e2e".into()),
        None,
        &["127.0.0.1".to_string()],
        jiff::Timestamp::now().as_second(),
        Duration::from_secs(3600),
    )
    .expect("issue")
    .expect("material");
    if let Some(d) = before.data.as_mut() {
        d.insert("ca.key".into(), ByteString(other.ca_key.into_bytes()));
    }
    secrets
        .replace("nodegate-webhook", &PostParams::default(), &before)
        .await
        .expect("replace ca.key");

    // Until both replicas serve the new certificate (their logs say so
    // after the new one was written), and a few creates beyond.
    let swapped = |ng: &Nodegate| {
        ng.logs()
            .lines()
            .filter(|l| l.contains("serving the certificate from the Secret"))
            .count()
    };
    let (a0, b0) = (swapped(&a), swapped(&b));
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut i = 0;
    let mut after_both = 0;
    while after_both < 10 {
        assert!(
            Instant::now() < deadline,
            "the replicas did not both serve a new certificate within 90s\n{}\n----\n{}",
            a.logs(),
            b.logs()
        );
        i += 1;
        let created = env
            .nodes
            .create(&PostParams::default(), &untainted(&format!("during-{i}")))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "create during-{i} refused: {e}\n{}\n----\n{}",
                    a.logs(),
                    b.logs()
                )
            });
        assert!(
            has_gate_taint(&created),
            "during-{i}: {:?}",
            taint_keys(&created)
        );
        if swapped(&a) > a0 && swapped(&b) > b0 {
            after_both += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now = secrets.get("nodegate-webhook").await.expect("the Secret");
    let ca = data(&now, "ca.crt");
    assert_ne!(ca, old_ca, "a new CA");
    assert!(ca.ends_with(&old_ca), "the old CA kept behind the new one");
    assert_ne!(data(&now, "tls.crt"), old_tls);
}
